//! Model sharing as a plan of named tensors: every party knows the plan (names and sizes,
//! from the public config), the owner encodes the tensors one at a time in plan order, and
//! they travel as one masked vector streamed in bounded chunks, so that no party ever holds
//! the whole message and the owner need not hold the whole encoded model.

use std::collections::HashMap;
use std::sync::Arc;

use puma_core::{Ctx, Error, PartyId, Shares, proto};

/// Words of the owner's masked record per round while sharing a model (8 MiB): what
/// bounds the owner's and the receiver's message buffers, whatever the model's size.
/// Small chunks let the owner, the receiver and the owner's next party (each busy with a
/// chunk: drawing, masking, unpacking) overlap finely, and keep each chunk's transient
/// buffers below the size at which the allocator maps every block afresh (glibc: 32 MiB),
/// so that they are reused instead of faulted in page by page. Measured on GPT-2 base
/// (BENCHMARKS.md): 2.6 M → 1.75 M page faults per run and the sharing 15 % faster than
/// with 32 MiB chunks; on LLaMA-7B's streamed blocks a third less time per block.
pub const SHARE_CHUNK_WORDS: usize = 1 << 20;

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

/// A bag of named shares that does not fit a model's [`TensorPlan`]: the first tensor at
/// fault, by name (never a value).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The plan's tensor `name` is not in the bag.
    #[error("tensor {name} is missing")]
    Missing {
        /// The tensor.
        name: String,
    },
    /// The bag holds tensor `name`, which the plan lacks.
    #[error("tensor {name} is not part of the model")]
    Unexpected {
        /// The tensor.
        name: String,
    },
    /// Tensor `name` was given twice.
    #[error("tensor {name} is given twice")]
    Duplicate {
        /// The tensor.
        name: String,
    },
    /// Tensor `name` has another length than planned.
    #[error("tensor {name} has {found} elements where the model has {expected}")]
    Length {
        /// The tensor.
        name: String,
        /// Its length in the plan.
        expected: usize,
        /// Its length in the bag.
        found: usize,
    },
    /// Tensor `name` holds another party's shares than the bag's first tensor.
    #[error("tensor {name} holds the shares of {found}, the others those of {expected}")]
    Party {
        /// The tensor.
        name: String,
        /// The party of the other tensors.
        expected: PartyId,
        /// Its party.
        found: PartyId,
    },
}

impl SharedTensors {
    /// The bag of `tensors` (name and shares), checked against `plan`
    /// ([`SharedTensors::check`]); for shares that did not come from [`share_plan`], such
    /// as a share store's or an outside dealer's.
    ///
    /// # Errors
    /// [`PlanError::Duplicate`] for a name given twice, else as [`SharedTensors::check`].
    pub fn from_named<I>(plan: &TensorPlan, tensors: I) -> Result<SharedTensors, PlanError>
    where
        I: IntoIterator<Item = (String, Shares)>,
    {
        let mut by_name = HashMap::new();
        for (name, shares) in tensors {
            if by_name.contains_key(&name) {
                return Err(PlanError::Duplicate { name });
            }
            by_name.insert(name, shares);
        }
        let bag = SharedTensors { by_name };
        bag.check(plan)?;
        Ok(bag)
    }

    /// Whether the bag holds exactly the tensors of `plan`: every planned name once, with
    /// its planned length, nothing else, and all of one party's shares.
    ///
    /// # Errors
    /// The first [`PlanError`]: missing, mislengthed or of another party in plan order,
    /// then the alphabetically first name the plan lacks.
    pub fn check(&self, plan: &TensorPlan) -> Result<(), PlanError> {
        let mut party = None;
        for (name, expected) in &plan.tensors {
            let shares = self
                .by_name
                .get(name)
                .ok_or_else(|| PlanError::Missing { name: name.clone() })?;
            if shares.len() != *expected {
                return Err(PlanError::Length {
                    name: name.clone(),
                    expected: *expected,
                    found: shares.len(),
                });
            }
            let first = *party.get_or_insert(shares.party());
            if shares.party() != first {
                return Err(PlanError::Party {
                    name: name.clone(),
                    expected: first,
                    found: shares.party(),
                });
            }
        }
        if self.by_name.len() != plan.tensors.len() {
            let planned: std::collections::HashSet<&str> =
                plan.tensors.iter().map(|(n, _)| n.as_str()).collect();
            let extra = self
                .by_name
                .keys()
                .filter(|n| !planned.contains(n.as_str()))
                .min();
            return Err(match extra {
                Some(name) => PlanError::Unexpected { name: name.clone() },
                // Fewer names than planned would have been missing above; equal sets have
                // equal sizes: only a plan that names a tensor twice gets here.
                None => PlanError::Duplicate {
                    name: duplicate(plan).unwrap_or_default(),
                },
            });
        }
        Ok(())
    }

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
    share_plan_in_chunks(ctx, owner, plan, encoded, SHARE_CHUNK_WORDS, observer).await
}

/// [`share_plan_observed`] in chunks of `chunk_words` words instead of
/// [`SHARE_CHUNK_WORDS`]: one round per chunk.
///
/// # Errors
/// As [`share_plan`], and `Misuse` if `chunk_words` is 0.
pub async fn share_plan_in_chunks<I>(
    ctx: &mut Ctx,
    owner: PartyId,
    plan: &TensorPlan,
    encoded: Option<I>,
    chunk_words: usize,
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
                shared: k.saturating_mul(chunk_words).min(total),
                total,
            });
        }
    };
    let shares = proto::share_input_streamed_observed(
        ctx,
        owner,
        encoded,
        &plan.sizes(),
        chunk_words,
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

/// The first name `plan` lists twice.
fn duplicate(plan: &TensorPlan) -> Option<String> {
    let mut seen = std::collections::HashSet::new();
    plan.tensors
        .iter()
        .find(|(n, _)| !seen.insert(n.as_str()))
        .map(|(n, _)| n.clone())
}
