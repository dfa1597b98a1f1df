//! Model sharing as a plan of named tensors: every party knows the plan (names and sizes,
//! from the public config), the owner encodes the tensors one at a time in plan order, and
//! they travel as one masked vector streamed in bounded chunks, so that no party ever holds
//! the whole message and the owner need not hold the whole encoded model.

use std::collections::HashMap;
use std::sync::Arc;

use puma_core::{Ctx, Error, PartyId, Shares, proto};

/// Words of the owner's masked record per round while sharing a model (32 MiB): what
/// bounds the owner's and the receiver's message buffers, whatever the model's size.
pub const SHARE_CHUNK_WORDS: usize = 1 << 22;

/// How far the sharing of a model has come, at one party: parameters (ring elements)
/// shared so far out of the total. Reported after each streamed chunk, in order, ending at
/// `shared == total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShareProgress {
    /// Parameters shared so far.
    pub shared: usize,
    /// All the plan's parameters.
    pub total: usize,
}

/// A sharing progress observer (called by every party; a display usually listens to one).
pub type ShareObserver = Arc<dyn Fn(ShareProgress) + Send + Sync>;

/// The tensors of a model in sharing order: names and lengths (in ring elements).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TensorPlan {
    tensors: Vec<(String, usize)>,
}

impl TensorPlan {
    /// An empty plan.
    pub fn new() -> TensorPlan {
        TensorPlan::default()
    }

    /// Appends tensor `name` of `len` elements.
    pub fn push(&mut self, name: impl Into<String>, len: usize) {
        self.tensors.push((name.into(), len));
    }

    /// The lengths, in plan order.
    pub fn sizes(&self) -> Vec<usize> {
        self.tensors.iter().map(|(_, n)| *n).collect()
    }

    /// The names and lengths, in plan order.
    pub fn tensors(&self) -> &[(String, usize)] {
        &self.tensors
    }

    /// Total elements, or `None` if the sum overflows.
    pub fn total(&self) -> Option<usize> {
        self.tensors
            .iter()
            .try_fold(0usize, |acc, (_, n)| acc.checked_add(*n))
    }
}

/// One party's shares of a plan's tensors, taken out by name.
#[derive(Default)]
pub struct SharedTensors {
    by_name: HashMap<String, Shares>,
}

impl std::fmt::Debug for SharedTensors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Shares are secret: only the count is printed.
        write!(f, "SharedTensors {{ {} tensors }}", self.by_name.len())
    }
}

impl SharedTensors {
    /// Removes and returns tensor `name`.
    ///
    /// # Errors
    /// `Bug` if the plan had no such tensor (the wiring and its plan disagree).
    pub fn take(&mut self, name: &str) -> Result<Shares, Error> {
        self.by_name
            .remove(name)
            .ok_or(Error::bug("a model's wiring takes a tensor its plan lacks"))
    }

    /// [`SharedTensors::take`] when `present`, else `None`.
    ///
    /// # Errors
    /// As [`SharedTensors::take`].
    pub fn take_if(&mut self, present: bool, name: &str) -> Result<Option<Shares>, Error> {
        present.then(|| self.take(name)).transpose()
    }
}

/// Shares the tensors of `plan` from `owner`: the owner passes its encoded tensors in plan
/// order (`Some` there only; produced lazily, each dropped once masked), every party the
/// same plan. Streamed in chunks of [`SHARE_CHUNK_WORDS`] words
/// ([`proto::share_input_streamed`]).
///
/// Rounds: `max(1, ⌈P / SHARE_CHUNK_WORDS⌉)` for `P` elements. Bytes: 8 per element from
/// the owner.
///
/// Every party checks the plan against
/// [`MAX_PARAMETERS`](crate::limits::MAX_PARAMETERS) before it allocates, and reserves
/// its shares fallibly: a plan beyond the limit, or larger than this machine's memory, is
/// an error, not an abort.
///
/// # Errors
/// `Misuse` if the owner passes no tensors, a tensor of the wrong length or the wrong
/// number of tensors, the plan exceeds the parameter limit, or its shares do not fit in
/// memory; `Protocol` on a malformed message.
pub async fn share_plan<I>(
    ctx: &mut Ctx,
    owner: PartyId,
    plan: &TensorPlan,
    encoded: Option<I>,
) -> Result<SharedTensors, Error>
where
    I: IntoIterator<Item = Result<Vec<u64>, Error>>,
{
    share_plan_observed(ctx, owner, plan, encoded, None).await
}

/// [`share_plan`], telling `observer` (if any) how far it has come after each chunk, at
/// every party ([`ShareProgress`]). Same rounds and bytes.
///
/// # Errors
/// As [`share_plan`].
pub async fn share_plan_observed<I>(
    ctx: &mut Ctx,
    owner: PartyId,
    plan: &TensorPlan,
    encoded: Option<I>,
    observer: Option<&ShareObserver>,
) -> Result<SharedTensors, Error>
where
    I: IntoIterator<Item = Result<Vec<u64>, Error>>,
{
    if crate::limits::check_parameters(plan.total()).is_err() {
        return Err(Error::misuse(
            "the model exceeds the parameter limit (puma_layers::limits::MAX_PARAMETERS)",
        ));
    }
    let encoded = match (ctx.me() == owner, encoded) {
        (true, None) => return Err(Error::misuse("the model owner must pass the weights")),
        (true, some) => some,
        (false, _) => None,
    };
    let total = plan.total().unwrap_or(usize::MAX);
    let mut on_chunk = |k: usize| {
        if let Some(obs) = observer {
            obs(ShareProgress {
                shared: k.saturating_mul(SHARE_CHUNK_WORDS).min(total),
                total,
            });
        }
    };
    let shares = proto::share_input_streamed_observed(
        ctx,
        owner,
        encoded,
        &plan.sizes(),
        SHARE_CHUNK_WORDS,
        &mut on_chunk,
    )
    .await?;
    if shares.len() != plan.tensors.len() {
        return Err(Error::bug("fewer shared tensors than planned"));
    }
    Ok(SharedTensors {
        by_name: plan
            .tensors
            .iter()
            .map(|(name, _)| name.clone())
            .zip(shares)
            .collect(),
    })
}
