//! A deterministic three-party simulator (feature `dev`): three [`Session`](crate::Session)s in one thread,
//! frames delivered in a seeded order, with optional fault injection. No IO, no clock.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::future::Future;

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use crate::engine::{Config, Ctx, Engine, Erased, Input, Output, Start, Stats, erase, unerase};
use crate::error::Error;
use crate::party::PartyId;

/// How queued frames are delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Every queued frame, link by link, before the parties run again.
    Fifo,
    /// One frame at a time from a link chosen by a seeded RNG; per-link order is kept.
    Random(u64),
}

/// What a fault hook does with a frame in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Deliver it (possibly after the hook edited its bytes).
    Deliver,
    /// Lose it.
    Drop,
    /// Deliver it twice.
    Duplicate,
}

/// A frame in flight, shown to the fault hook.
#[derive(Debug)]
pub struct InFlight<'a> {
    /// Sender.
    pub from: PartyId,
    /// Receiver.
    pub to: PartyId,
    /// Position of the frame on its link (the setup frame is 0 on its link).
    pub index: u64,
    /// The frame's bytes, editable.
    pub bytes: &'a mut Vec<u8>,
}

type Hook = Box<dyn FnMut(&mut InFlight<'_>) -> Fate>;

/// The outcome of a simulated run.
#[derive(Debug)]
pub struct Outcome<T> {
    /// Each party's result, by index.
    pub results: [Result<T, Error>; 3],
    /// Each party's counters, by index.
    pub stats: [Stats; 3],
}

impl<T> Outcome<T> {
    /// The three results, or the first error.
    ///
    /// # Errors
    /// The first party's error, in index order.
    pub fn into_results(self) -> Result<[T; 3], Error> {
        let [a, b, c] = self.results;
        Ok([a?, b?, c?])
    }

    /// Critical-path rounds of the run: the maximum over the parties.
    pub fn rounds(&self) -> u32 {
        self.stats.iter().map(|s| s.rounds).max().unwrap_or(0)
    }

    /// Payload bytes each party sent, by index.
    pub fn payload_bytes(&self) -> [u64; 3] {
        [0, 1, 2].map(|i| self.stats.get(i).map_or(0, Stats::payload_bytes_total))
    }
}

/// The simulator.
pub struct Sim {
    cfg: Config,
    seed: u64,
    delivery: Delivery,
    hook: Option<Hook>,
}

impl core::fmt::Debug for Sim {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "Sim {{ seed: {}, delivery: {:?} }}",
            self.seed, self.delivery
        )
    }
}

impl Sim {
    /// A simulator with default configuration; `seed` derives the parties' entropy.
    pub fn new(seed: u64) -> Sim {
        Sim {
            cfg: Config::new(seed),
            seed,
            delivery: Delivery::Fifo,
            hook: None,
        }
    }

    /// Uses `cfg` for all three sessions.
    pub fn with_config(mut self, cfg: Config) -> Sim {
        self.cfg = cfg;
        self
    }

    /// Sets the delivery order.
    pub fn with_delivery(mut self, delivery: Delivery) -> Sim {
        self.delivery = delivery;
        self
    }

    /// Installs a fault hook that sees (and may edit, drop or duplicate) every frame.
    pub fn with_fault(mut self, hook: impl FnMut(&mut InFlight<'_>) -> Fate + 'static) -> Sim {
        self.hook = Some(Box::new(hook));
        self
    }

    /// Runs one protocol at all three parties: `make(p)` builds party `p`'s protocol.
    ///
    /// A run in which every live party waits and no frame is in flight is ended by
    /// `Input::Timeout` at each waiting party, as a host timer would.
    pub fn run<T, F, G, Fut>(&mut self, mut make: F) -> Outcome<T>
    where
        T: Send + 'static,
        F: FnMut(PartyId) -> G,
        G: FnOnce(Ctx) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, Error>> + Send + 'static,
    {
        let Outcome { results, stats } = self.run_erased(&mut |p| erase(make(p)));
        Outcome {
            results: results.map(unerase),
            stats,
        }
    }

    /// [`Sim::run`] with the results' type erased: the simulator's loop is compiled once,
    /// not once per protocol that a test runs.
    fn run_erased(&mut self, make: &mut dyn FnMut(PartyId) -> Start) -> Outcome<Erased> {
        let mut entropy_rng = ChaCha8Rng::seed_from_u64(self.seed);
        let mut results: [Option<Result<Erased, Error>>; 3] = [None, None, None];
        let mut sessions: Vec<Option<Engine>> = PartyId::ALL
            .iter()
            .map(|&p| {
                let mut e = [0u8; 32];
                entropy_rng.fill_bytes(&mut e);
                match Engine::new(self.cfg.clone(), p, e, make(p)) {
                    Ok(s) => Some(s),
                    Err(err) => {
                        if let Some(r) = results.get_mut(p.index()) {
                            *r = Some(Err(err));
                        }
                        None
                    }
                }
            })
            .collect();
        let mut stats: [Stats; 3] = Default::default();
        // links[from][to]
        let mut links: [[VecDeque<Vec<u8>>; 3]; 3] = Default::default();
        let mut sent_index = [[0u64; 3]; 3];
        let mut order_rng = ChaCha8Rng::seed_from_u64(match self.delivery {
            Delivery::Random(s) => s,
            Delivery::Fifo => 0,
        });
        loop {
            // Let every live party run until it waits.
            for p in PartyId::ALL {
                let i = p.index();
                let Some(Some(sess)) = sessions.get_mut(i) else {
                    continue;
                };
                loop {
                    match sess.poll_output() {
                        Output::Transmit(t) => {
                            let to = t.to.index();
                            let mut bytes = t.frame.into_bytes();
                            let index = sent_index[i][to];
                            sent_index[i][to] += 1;
                            let fate = match self.hook.as_mut() {
                                Some(h) => h(&mut InFlight {
                                    from: p,
                                    to: t.to,
                                    index,
                                    bytes: &mut bytes,
                                }),
                                None => Fate::Deliver,
                            };
                            match fate {
                                Fate::Deliver => links[i][to].push_back(bytes),
                                Fate::Drop => {}
                                Fate::Duplicate => {
                                    links[i][to].push_back(bytes.clone());
                                    links[i][to].push_back(bytes);
                                }
                            }
                        }
                        Output::Yielded => {}
                        Output::Pending { .. } => break,
                        Output::Done(r) => {
                            stats[i] = sess.stats();
                            results[i] = Some(r);
                            break;
                        }
                    }
                }
                if results[i].is_some() {
                    sessions[i] = None;
                }
            }
            if sessions.iter().all(Option::is_none) {
                break;
            }
            // Deliver.
            let nonempty: Vec<(usize, usize)> = (0..3)
                .flat_map(|f| (0..3).map(move |t| (f, t)))
                .filter(|&(f, t)| !links[f][t].is_empty())
                .collect();
            if nonempty.is_empty() {
                for s in sessions.iter_mut().flatten() {
                    let _ = s.handle_input(Input::Timeout);
                }
                continue;
            }
            let picks: Vec<(usize, usize)> = match self.delivery {
                Delivery::Fifo => nonempty,
                Delivery::Random(_) => {
                    let k = (order_rng.next_u64() % nonempty.len() as u64) as usize;
                    nonempty.get(k).copied().into_iter().collect()
                }
            };
            for (f, t) in picks {
                let batch: Vec<Vec<u8>> = match self.delivery {
                    Delivery::Fifo => links[f][t].drain(..).collect(),
                    Delivery::Random(_) => links[f][t].pop_front().into_iter().collect(),
                };
                for bytes in batch {
                    if let Some(Some(s)) = sessions.get_mut(t) {
                        let _ = s.handle_input(Input::Frame {
                            from: PartyId::from_index(f),
                            bytes: &bytes,
                        });
                    }
                }
            }
        }
        let [a, b, c] = results;
        let missing = || Err(Error::bug("simulated party ended without a result"));
        Outcome {
            results: [
                a.unwrap_or_else(missing),
                b.unwrap_or_else(missing),
                c.unwrap_or_else(missing),
            ],
            stats,
        }
    }
}

/// Reconstructs a shared vector from the three parties' shares (tests only), checking
/// that every component's two copies agree ([`crate::dealing::reconstruct`]).
pub fn reconstruct(shares: &[crate::share::Shares; 3]) -> Result<Vec<u64>, Error> {
    let [s0, s1, s2] = shares;
    crate::dealing::reconstruct([s0.components(), s1.components(), s2.components()])
        .map_err(|_| Error::misuse("shares are not consistently replicated"))
}

/// Reconstructs a boolean shared vector (tests only).
pub fn reconstruct_bits(shares: &[crate::share::BitShares; 3]) -> Result<Vec<u64>, Error> {
    let [s0, s1, s2] = shares;
    for (x, y) in [(s0, s1), (s1, s2), (s2, s0)] {
        if x.b() != y.a() {
            return Err(Error::misuse("bit shares are not consistently replicated"));
        }
    }
    Ok(s0
        .a()
        .iter()
        .zip(s1.a())
        .zip(s2.a())
        .map(|((a, b), c)| a ^ b ^ c)
        .collect())
}

/// Boolean shares from raw components `(x_i, x_{i+1})` (tests only: e.g. to reuse random
/// arithmetic components as a random XOR sharing).
pub fn bit_shares_from_components(
    party: PartyId,
    width: crate::ring::Width,
    a: Vec<u64>,
    b: Vec<u64>,
) -> crate::share::BitShares {
    crate::share::BitShares::from_parts(party, width, a, b)
}
