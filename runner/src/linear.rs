//! A secure fixed-point linear layer `y = x·W + b` among three parties in memory.
//!
//! Roles: P0 is the **client** and owns the input `x` (rows × k); P1 is the **model
//! owner** and owns `W` (k × n) and `b` (n). Both secret-share their data, the parties
//! compute `x·W` with one fixed-point matrix product, add the shared bias broadcast over
//! the rows, and reveal `y` to the client only.
//!
//! Rounds: 4 (inputs, matmul, truncation, reveal).

use std::fmt;
use std::time::{Duration, Instant};

use puma_core::{Config, FixedPoint, PartyId, Stats, proto};
use puma_transports::{TransportError, mem};

/// The largest number of elements of each of the run's matrices (`x`: rows × k, `W`: k × n,
/// `y`: rows × n): 2^22, i.e. 32 MiB of f64, which keeps the three parties' copies and
/// shares of the largest allowed run within a few GiB.
pub const MAX_ELEMENTS: usize = 1 << 22;

/// The sizes and seed of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinearDemo {
    /// Rows of `x` (tokens).
    pub rows: usize,
    /// Input features `k`.
    pub k: usize,
    /// Output features `n`.
    pub n: usize,
    /// Seed of the pseudo-random data and of the parties' entropy.
    pub seed: u64,
}

impl Default for LinearDemo {
    fn default() -> Self {
        LinearDemo {
            rows: 4,
            k: 64,
            n: 32,
            seed: 2024,
        }
    }
}

/// What a run produced and cost.
#[derive(Clone, Debug)]
pub struct LinearReport {
    /// The layer output revealed to the client, row-major (rows × n).
    pub y: Vec<f64>,
    /// The f64 plaintext reference, row-major.
    pub reference: Vec<f64>,
    /// Largest |y − reference|.
    pub max_abs_err: f64,
    /// Wall time of the three-party run, threads included.
    pub elapsed: Duration,
    /// Each party's counters, by index.
    pub stats: [Stats; 3],
}

impl LinearReport {
    /// Critical-path rounds: the maximum over the parties.
    pub fn rounds(&self) -> u32 {
        self.stats.iter().map(|s| s.rounds).max().unwrap_or(0)
    }
}

/// Why a run failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum DemoError {
    /// Sizes that are zero or overflow.
    BadSize,
    /// A matrix would have more than [`MAX_ELEMENTS`] elements.
    TooLarge {
        /// The names of the two sizes whose product is too large (`"rows"`, `"k"`, `"n"`).
        dims: [&'static str; 2],
        /// Their product.
        elements: u128,
    },
    /// Encoding the data failed.
    Core(puma_core::Error),
    /// A party's run failed.
    Party {
        /// The party.
        party: PartyId,
        /// Its error.
        error: TransportError,
    },
    /// The client finished without an output of the right size.
    MissingOutput,
}

impl fmt::Display for DemoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DemoError::BadSize => write!(f, "sizes must be positive and small enough"),
            DemoError::TooLarge {
                dims: [a, b],
                elements,
            } => write!(
                f,
                "{a} × {b} = {elements} elements is more than the limit of {MAX_ELEMENTS} per matrix"
            ),
            DemoError::Core(e) => write!(f, "{e}"),
            DemoError::Party { party, error } => write!(f, "{party} failed: {error}"),
            DemoError::MissingOutput => write!(f, "the client got no output"),
        }
    }
}

impl std::error::Error for DemoError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DemoError::Core(e) => Some(e),
            DemoError::Party { error, .. } => Some(error),
            _ => None,
        }
    }
}

impl From<puma_core::Error> for DemoError {
    fn from(e: puma_core::Error) -> Self {
        DemoError::Core(e)
    }
}

/// `len` deterministic pseudo-random reals in (−scale, scale) (SplitMix64 of `seed`).
pub fn pseudo_random(len: usize, seed: u64, scale: f64) -> Vec<f64> {
    let mut state = seed;
    (0..len)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            let u = (z >> 11) as f64 / (1u64 << 53) as f64;
            (2.0 * u - 1.0) * scale
        })
        .collect()
}

/// The plaintext layer in f64: `x·W + b` for row-major `x` (rows × k), `W` (k × n), `b` (n).
pub fn plaintext_linear(
    x: &[f64],
    w: &[f64],
    b: &[f64],
    rows: usize,
    k: usize,
    n: usize,
) -> Vec<f64> {
    let mut y = Vec::with_capacity(rows * n);
    for x_row in x.chunks_exact(k.max(1)).take(rows) {
        for (j, bj) in b.iter().enumerate().take(n) {
            let dot: f64 = x_row
                .iter()
                .zip(w.iter().skip(j).step_by(n.max(1)))
                .map(|(a, c)| a * c)
                .sum();
            y.push(dot + bj);
        }
    }
    y
}

impl LinearDemo {
    /// The element counts of `x`, `W` and `y`.
    ///
    /// # Errors
    /// [`DemoError::BadSize`] if a size is zero, [`DemoError::TooLarge`] (naming the two
    /// sizes) if a matrix would have more than [`MAX_ELEMENTS`] elements.
    pub fn elements(&self) -> Result<(usize, usize, usize), DemoError> {
        let LinearDemo { rows, k, n, .. } = *self;
        if rows == 0 || k == 0 || n == 0 {
            return Err(DemoError::BadSize);
        }
        // In u128 so that no product of two usize overflows.
        let count = |dims: [&'static str; 2], a: usize, b: usize| {
            let elements = a as u128 * b as u128;
            if elements > MAX_ELEMENTS as u128 {
                Err(DemoError::TooLarge { dims, elements })
            } else {
                Ok(a * b)
            }
        };
        Ok((
            count(["rows", "k"], rows, k)?,
            count(["k", "n"], k, n)?,
            count(["rows", "n"], rows, n)?,
        ))
    }
}

/// Runs the secure layer on pseudo-random data of the given sizes and checks it against
/// [`plaintext_linear`].
///
/// # Errors
/// [`DemoError`] if the sizes are unusable (zero, or a matrix larger than
/// [`MAX_ELEMENTS`]: checked before anything is allocated), the data does not encode, a
/// party fails, or the client receives no output.
pub fn run_linear(demo: LinearDemo) -> Result<LinearReport, DemoError> {
    let LinearDemo { rows, k, n, seed } = demo;
    let (xn, wn, yn) = demo.elements()?;
    let x = pseudo_random(xn, seed, 1.0);
    let w = pseudo_random(wn, seed ^ 0x5745_4947_4854, 1.0 / (k as f64).sqrt());
    let b = pseudo_random(n, seed ^ 0x4249_4153, 0.1);
    let fx = FixedPoint::default();
    let (xe, we, be) = (
        fx.encode_slice(&x)?,
        fx.encode_slice(&w)?,
        fx.encode_slice(&b)?,
    );

    let cfg = Config::new(seed);
    let start = Instant::now();
    let outcome = mem::run3(cfg, seed, |me| {
        let x = (me == PartyId::P0).then(|| xe.clone());
        let wb = (me == PartyId::P1).then(|| (we.clone(), be.clone()));
        move |mut ctx| async move {
            const CLIENT: PartyId = PartyId::P0;
            const OWNER: PartyId = PartyId::P1;
            let xs = proto::share_input(&mut ctx, CLIENT, x.as_deref(), xn).await?;
            let ws =
                proto::share_input(&mut ctx, OWNER, wb.as_ref().map(|(w, _)| &w[..]), wn).await?;
            let bs =
                proto::share_input(&mut ctx, OWNER, wb.as_ref().map(|(_, b)| &b[..]), n).await?;
            let xw = proto::matmul_fixed(&mut ctx, &xs, &ws, rows, k, n).await?;
            // Broadcast the bias over the rows (a local gather) and add it.
            let bias_rows: Vec<usize> = (0..yn).map(|i| i % n).collect();
            let y = xw.add(&bs.gather(&bias_rows)?)?;
            proto::reveal_to(&mut ctx, &y, CLIENT).await
        }
    });
    let elapsed = start.elapsed();
    let stats = outcome.stats.clone();
    let mut client_output = None;
    for (party, r) in PartyId::ALL.into_iter().zip(outcome.results) {
        match r {
            Ok(v) if party == PartyId::P0 => client_output = v,
            Ok(_) => {}
            Err(error) => return Err(DemoError::Party { party, error }),
        }
    }
    let y = fx.decode_slice(
        &client_output
            .filter(|v| v.len() == yn)
            .ok_or(DemoError::MissingOutput)?,
    );
    let reference = plaintext_linear(&x, &w, &b, rows, k, n);
    let max_abs_err = y
        .iter()
        .zip(&reference)
        .map(|(a, r)| (a - r).abs())
        .fold(0.0, f64::max);
    Ok(LinearReport {
        y,
        reference,
        max_abs_err,
        elapsed,
        stats,
    })
}
