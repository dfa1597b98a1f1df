//! A party's share store: one file holding this party's two components of every tensor of
//! a model, so that a computing server restarts without the model owner.
//!
//! A component the owner dealt as a seed ([`puma_core::dealing`]: `x_0` and `x_1` are
//! streams of the owner's two seeds, tensor `t` on stream `t`) is kept as that seed, not
//! as its words: the store of P0 then holds no tensor words at all and those of P1 and P2
//! one component each, a third of the disk that three full stores take.
//!
//! Two parties' stores together reveal the model: a store is written with mode 0600, read
//! only when no other user may read or write it, and the stores of different parties must
//! not be kept on one host.
//!
//! # Format (version 2)
//!
//! Integers are little-endian; strings are UTF-8 after their length. A component is
//! *seeded* if its flag bit is set: bit 0 for the first (`x_i`), bit 1 for the second
//! (`x_{i+1}`); its words are then those of stream `t` under its seed for the tensor at
//! table index `t`, and the file holds the seed instead of them.
//!
//! | field | bytes |
//! |---|---|
//! | magic `PUMASTOR` | 8 |
//! | format version | `u32` |
//! | party id (0, 1, 2) | `u8` |
//! | fixed-point fractional bits | `u32` |
//! | architecture (`gpt2`, `llama`, `bert`, …) | `u16` length, ≤ [`MAX_ARCH_BYTES`] |
//! | the model's public config, JSON text | `u32` length, ≤ [`MAX_CONFIG_BYTES`] |
//! | the owner's content hash of the model ([`ModelHash`]) | 32 |
//! | seeded-component flags (bits 0 and 1; the others 0) | `u8` |
//! | the seed of each seeded component, first before second | 32 each |
//! | tensor count | `u32`, ≤ [`MAX_TENSORS`](crate::limits::MAX_TENSORS) |
//! | per tensor: name, length in elements | `u16` length + name (≤ [`MAX_NAME_BYTES`]), `u64` |
//! | header digest `d_0` = SHA-256 of everything above | 32 |
//! | per tensor `t`, in table order: its components that are not seeded, first before second (each `length` × `u64`), then `d_t` = SHA-256(`d_{t-1}` ‖ those components) | 8·length per unseeded component + 32 |
//!
//! The digests form a chain, so the last one covers the whole file while every byte is
//! hashed once, and a mismatch names its section (the header or one tensor). The file ends
//! after the last digest. Version 1, which this build still reads, is version 2 without
//! the flags and seeds: both components of every tensor are in the file.
//!
//! # Checks on reading
//!
//! Magic and version first; then every size against [`crate::limits`] and this module's
//! bounds before anything is allocated for it, and the file's length against the one the
//! table implies (a truncated file is refused before its shares are read); the header
//! digest before any header field is believed; then the caller's [`Expect`]ations (party,
//! fixed-point format, and optionally architecture and model hash); then each tensor's
//! digest as it streams into its share vectors (reserved fallibly: a model larger than
//! memory is an error). A seeded component is expanded from its seed to the length the
//! table gives: that length is under the header digest and within the limits, as a
//! model config's sizes are, but not backed by bytes of the file. Every refusal is a
//! [`StoreError`] naming the file and the culprit, never a share value.

use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use puma_core::dealing::{self, Seed, Span};
use puma_core::{Error, FixedPoint, PartyId, Shares};
use sha2::{Digest, Sha256};
use zeroize::{Zeroize, Zeroizing};

use crate::limits::{self, LimitError};
use crate::nn::{PlanError, SharedTensors, TensorPlan};

/// The first eight bytes of every share store.
pub const MAGIC: [u8; 8] = *b"PUMASTOR";

/// The format version this build writes; it reads this one and version 1.
pub const VERSION: u32 = 2;

/// The oldest format version this build reads.
pub const OLDEST_VERSION: u32 = 1;

/// Longest architecture name in a store, in bytes.
pub const MAX_ARCH_BYTES: usize = 64;

/// Longest config text in a store, in bytes (1 MiB; a `config.json` is a few KiB).
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

/// Longest tensor name in a store, in bytes.
pub const MAX_NAME_BYTES: usize = 256;

/// Words converted per block while streaming share components.
const BLOCK_WORDS: usize = 1 << 13;

/// A 32-byte content hash of a model as its owner deals it ([`ModelHasher`]): public, it
/// names the model a store holds shares of.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ModelHash(pub [u8; 32]);

impl ModelHash {
    /// The first 8 bytes in hex, for messages.
    pub fn short(&self) -> String {
        hex(&self.0[..8])
    }

    /// The hash from its 64 hex digits (as [`fmt::Display`] prints it).
    pub fn from_hex(text: &str) -> Option<ModelHash> {
        let text = text.as_bytes();
        if text.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (o, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
            let digit = |c: u8| char::from(c).to_digit(16);
            *o = u8::try_from(digit(pair[0])? * 16 + digit(pair[1])?).ok()?;
        }
        Some(ModelHash(out))
    }
}

impl fmt::Display for ModelHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex(&self.0))
    }
}

impl fmt::Debug for ModelHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ModelHash({})", self.short())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The owner's streaming [`ModelHash`] over the plaintext encoded tensors it deals, in
/// plan order: SHA-256 of a version tag, the config text, then each tensor's name, length
/// and little-endian words (strings and counts as `u64` lengths first, so that no two
/// models hash the same input).
pub struct ModelHasher {
    sha: Sha256,
    /// Words the current tensor still expects.
    pending: u64,
    /// Whether some tensor got another number of words than announced.
    mismatch: bool,
    block: Zeroizing<Vec<u8>>,
}

impl fmt::Debug for ModelHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ModelHasher")
    }
}

impl ModelHasher {
    /// A hash of the model with public config `config_json` (the text the stores keep).
    pub fn new(config_json: &str) -> ModelHasher {
        let mut sha = Sha256::new();
        sha.update(b"puma-rs model hash v1\0");
        sha.update((config_json.len() as u64).to_le_bytes());
        sha.update(config_json.as_bytes());
        ModelHasher {
            sha,
            pending: 0,
            mismatch: false,
            block: Zeroizing::new(Vec::new()),
        }
    }

    /// Starts tensor `name` of `len` words; its words follow in one or more
    /// [`ModelHasher::words`].
    pub fn begin_tensor(&mut self, name: &str, len: usize) {
        self.mismatch |= self.pending != 0;
        self.sha.update((name.len() as u64).to_le_bytes());
        self.sha.update(name.as_bytes());
        self.sha.update((len as u64).to_le_bytes());
        self.pending = len as u64;
    }

    /// The next words of the current tensor.
    pub fn words(&mut self, words: &[u64]) {
        match self.pending.checked_sub(words.len() as u64) {
            Some(p) => self.pending = p,
            None => self.mismatch = true,
        }
        for chunk in words.chunks(BLOCK_WORDS) {
            le_bytes(chunk, &mut self.block);
            self.sha.update(&self.block[..]);
        }
    }

    /// A whole tensor: [`ModelHasher::begin_tensor`] and its [`ModelHasher::words`].
    pub fn tensor(&mut self, name: &str, words: &[u64]) {
        self.begin_tensor(name, words.len());
        self.words(words);
    }

    /// The hash.
    ///
    /// # Errors
    /// `Misuse` if a tensor got another number of words than [`ModelHasher::begin_tensor`]
    /// announced.
    pub fn finish(self) -> Result<ModelHash, Error> {
        if self.mismatch || self.pending != 0 {
            return Err(Error::misuse(
                "a hashed tensor got another number of words than announced",
            ));
        }
        Ok(ModelHash(self.sha.finalize().into()))
    }
}

/// `words` as little-endian bytes in `out` (replacing its contents).
fn le_bytes(words: &[u64], out: &mut Vec<u8>) {
    out.clear();
    out.extend(words.iter().flat_map(|w| w.to_le_bytes()));
}

/// What a store says about itself: whose shares, of which model, at which format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreHeader {
    /// The party whose components the store holds.
    pub party: PartyId,
    /// The fixed-point format's fractional bits.
    pub frac_bits: u32,
    /// The architecture (`"gpt2"`, `"llama"`, `"bert"`), from which the caller knows how
    /// to read the config.
    pub arch: String,
    /// The model's public config as JSON text, from which the caller rebuilds its shape.
    pub config_json: String,
    /// The owner's content hash of the model.
    pub model_hash: ModelHash,
}

/// What the reader of a store requires of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expect {
    /// The reading party.
    pub party: PartyId,
    /// The reader's fixed-point fractional bits.
    pub frac_bits: u32,
    /// The architecture, if the reader requires one.
    pub arch: Option<String>,
    /// The model, if the reader requires one.
    pub model_hash: Option<ModelHash>,
}

impl Expect {
    /// A store of `party` at format `fixed`, of any model.
    pub fn party(party: PartyId, fixed: FixedPoint) -> Expect {
        Expect {
            party,
            frac_bits: fixed.frac_bits(),
            arch: None,
            model_hash: None,
        }
    }

    /// Requires the model `hash` too.
    pub fn model(self, hash: ModelHash) -> Expect {
        Expect {
            model_hash: Some(hash),
            ..self
        }
    }

    /// Requires the architecture `arch` too.
    pub fn arch(self, arch: impl Into<String>) -> Expect {
        Expect {
            arch: Some(arch.into()),
            ..self
        }
    }
}

/// The seeds of the components a store keeps as seeds instead of words: if `first`
/// (`second`) is set, the first (second) component of the tensor at table index `t` is
/// stream `t` under that seed, as an owner's upload deals it ([`puma_core::dealing`]).
/// A component the parties computed themselves has no seed and is kept as words.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ComponentSeeds {
    /// The seed of every tensor's first component (`x_i`), if it is kept as one.
    pub first: Option<Seed>,
    /// The seed of every tensor's second component (`x_{i+1}`), if it is kept as one.
    pub second: Option<Seed>,
}

impl ComponentSeeds {
    /// No seeded component: both are kept as words.
    pub fn none() -> ComponentSeeds {
        ComponentSeeds::default()
    }

    /// The two slots, first then second.
    fn slots(&self) -> [Option<&Seed>; 2] {
        [self.first.as_ref(), self.second.as_ref()]
    }

    /// The two slots for filling in, in the same order.
    fn slots_mut(&mut self) -> [&mut Option<Seed>; 2] {
        [&mut self.first, &mut self.second]
    }

    /// The flag byte of the format: bit i set for a seeded slot i.
    fn flags(&self) -> u8 {
        (0..)
            .zip(self.slots())
            .fold(0, |f, (i, s)| f | (u8::from(s.is_some()) << i))
    }

    /// How many components of each tensor the file holds as words.
    fn stored_components(&self) -> u64 {
        self.slots().iter().filter(|s| s.is_none()).count() as u64
    }
}

impl fmt::Debug for ComponentSeeds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A seed is as secret as the component it stands for: only which slots are seeded.
        f.debug_struct("ComponentSeeds")
            .field("first", &self.first.is_some())
            .field("second", &self.second.is_some())
            .finish()
    }
}

impl Drop for ComponentSeeds {
    fn drop(&mut self) {
        for s in self.slots_mut().into_iter().flatten() {
            s.zeroize();
        }
    }
}

/// A part of a store file, for [`StoreError::Corrupt`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Section {
    /// The header and tensor table.
    Header,
    /// A tensor's components.
    Tensor(String),
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Section::Header => f.write_str("the header"),
            Section::Tensor(name) => write!(f, "tensor {name}"),
        }
    }
}

/// A share store that cannot be written or is refused: each names the file and what is
/// wrong, never a share value.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file system failed.
    #[error("cannot {action} the share store {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done (`"read"`, `"write"`, …).
        action: &'static str,
        /// The failure.
        source: io::Error,
    },
    /// The file does not start with [`MAGIC`].
    #[error("{} is not a share store", path.display())]
    NotAStore {
        /// The file.
        path: PathBuf,
    },
    /// The file is of a format version this build does not read.
    #[error("the share store {} has format version {found}; this build reads versions {OLDEST_VERSION} to {supported}", path.display())]
    Version {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: u32,
        /// [`VERSION`].
        supported: u32,
    },
    /// The file holds another party's shares.
    #[error("the share store {} holds the shares of {found}, not of {expected}", path.display())]
    Party {
        /// The file.
        path: PathBuf,
        /// Its party.
        found: PartyId,
        /// The reader's.
        expected: PartyId,
    },
    /// The file holds shares of another model.
    #[error("the share store {} holds model {}…, not the expected {}…", path.display(), found.short(), expected.short())]
    Model {
        /// The file.
        path: PathBuf,
        /// Its model's hash.
        found: ModelHash,
        /// The expected one.
        expected: ModelHash,
    },
    /// The file holds a model of another architecture.
    #[error("the share store {} holds a {found} model, not a {expected} one", path.display())]
    Arch {
        /// The file.
        path: PathBuf,
        /// Its architecture.
        found: String,
        /// The expected one.
        expected: String,
    },
    /// The file's shares are of another fixed-point format.
    #[error("the share store {} has {found} fractional bits; this party computes with {expected}", path.display())]
    FixedPoint {
        /// The file.
        path: PathBuf,
        /// Its fractional bits.
        found: u32,
        /// The reader's.
        expected: u32,
    },
    /// The file is shorter than its header and table say.
    #[error(
        "the share store {} is truncated: {found} bytes{}",
        path.display(),
        expected.map(|e| format!(" of {e}")).unwrap_or_default()
    )]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Its length.
        found: u64,
        /// Its length as its table implies (`None`: it ends within the header).
        expected: Option<u64>,
    },
    /// A section's digest does not match its bytes.
    #[error("the share store {} is corrupt: checksum mismatch in {section}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The section.
        section: Section,
    },
    /// The file is not a well-formed store (after a matching magic and version), or the
    /// tensors given to [`write()`] do not form one.
    #[error("the share store {} is malformed: {reason}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: &'static str,
    },
    /// The tensor table does not form a model (a name twice).
    #[error("the share store {} has a bad tensor table: {source}", path.display())]
    Table {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: PlanError,
    },
    /// A size exceeds [`crate::limits`] or this module's bounds.
    #[error("the share store {} is too large: {source}", path.display())]
    Limit {
        /// The file.
        path: PathBuf,
        /// The size.
        source: LimitError,
    },
    /// The shares do not fit in this machine's memory.
    #[error("the shares of {} do not fit in memory", path.display())]
    Memory {
        /// The file.
        path: PathBuf,
    },
    /// Other users may read or write the file.
    #[error("the share store {} is accessible to other users (mode {mode:04o}); make it private with `chmod 600 {}`", path.display(), path.display())]
    Permissions {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
}

/// Writes this party's `tensors` (name and shares, in the model's plan order) with
/// `header` to `path`, atomically: into a temporary file of mode 0600 in the same
/// directory, synced, then renamed over `path` (an existing store is replaced whole or
/// not at all). The components `seeds` names are kept as their seeds.
///
/// # Errors
/// [`StoreError::Malformed`] if a tensor is another party's than `header.party` or a
/// seeded component's first words are not its seed's stream, or the header or a name
/// exceeds its bound; [`StoreError::Table`] for a name given twice; [`StoreError::Limit`]
/// for too many tensors or parameters; [`StoreError::Io`].
pub fn write(
    path: &Path,
    header: &StoreHeader,
    tensors: &[(String, &Shares)],
    seeds: &ComponentSeeds,
) -> Result<(), StoreError> {
    let malformed = |reason| StoreError::Malformed {
        path: path.to_path_buf(),
        reason,
    };
    if tensors.iter().any(|(_, s)| s.party() != header.party) {
        return Err(malformed("a tensor holds another party's shares"));
    }
    if !seeds_match(tensors, seeds) {
        return Err(malformed(
            "a component kept as a seed is not that seed's stream",
        ));
    }
    let mut table = TensorPlan::new();
    for (name, shares) in tensors {
        table.push(name.clone(), shares.len());
    }
    check_table(path, header, &table, VERSION, seeds)?;
    let file_name = path
        .file_name()
        .ok_or_else(|| malformed("the path names no file"))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(file_name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = dir.join(tmp_name);
    let io = |action, source| StoreError::Io {
        path: path.to_path_buf(),
        action,
        source,
    };
    let file = create_private(&tmp).map_err(|e| io("create a temporary file for", e))?;
    let written = write_to(file, header, &table, tensors, seeds).map_err(|e| io("write", e));
    let result = written
        .and_then(|()| std::fs::rename(&tmp, path).map_err(|e| io("replace", e)))
        // The rename is durable once the directory is synced.
        .and_then(|()| {
            File::open(&dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| io("sync the directory of", e))
        });
    if result.is_err() {
        // Best effort: the temporary file may already be gone (renamed or never written).
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Words of each seeded component compared with its seed's stream: enough to catch a
/// wrong seed or tensor order, at a negligible share of the write's time.
const SEED_CHECK_WORDS: usize = 64;

/// Whether the first words of every seeded component are its seed's stream.
fn seeds_match(tensors: &[(String, &Shares)], seeds: &ComponentSeeds) -> bool {
    let mut expected = Zeroizing::new([0u64; SEED_CHECK_WORDS]);
    (0u64..).zip(tensors).all(|(stream, (_, shares))| {
        let (a, b) = shares.components();
        seeds.slots().into_iter().zip([a, b]).all(|(seed, words)| {
            let Some(seed) = seed else {
                return true;
            };
            let head = &words[..words.len().min(SEED_CHECK_WORDS)];
            let want = &mut expected[..head.len()];
            dealing::expand_into(seed, Span::whole(stream), want);
            want == head
        })
    })
}

/// A new file of mode 0600 (Unix), replacing a stale temporary file of the same name.
fn create_private(path: &Path) -> io::Result<File> {
    let open = || {
        let mut o = std::fs::OpenOptions::new();
        o.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            o.mode(0o600);
        }
        o.open(path)
    };
    match open() {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            // Left by a process of the same id that stopped mid-write.
            std::fs::remove_file(path)?;
            open()
        }
        other => other,
    }
}

/// The whole store into `file`, flushed and synced.
fn write_to(
    file: File,
    header: &StoreHeader,
    table: &TensorPlan,
    tensors: &[(String, &Shares)],
    seeds: &ComponentSeeds,
) -> io::Result<()> {
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let mut sha = Sha256::new();
    let mut put = |out: &mut BufWriter<File>, bytes: &[u8]| {
        sha.update(bytes);
        out.write_all(bytes)
    };
    // Lengths were bounded by `check_table`, so the narrowing casts below are exact.
    put(&mut out, &MAGIC)?;
    put(&mut out, &VERSION.to_le_bytes())?;
    put(&mut out, &[header.party as u8])?;
    put(&mut out, &header.frac_bits.to_le_bytes())?;
    put(&mut out, &(header.arch.len() as u16).to_le_bytes())?;
    put(&mut out, header.arch.as_bytes())?;
    put(&mut out, &(header.config_json.len() as u32).to_le_bytes())?;
    put(&mut out, header.config_json.as_bytes())?;
    put(&mut out, &header.model_hash.0)?;
    put(&mut out, &[seeds.flags()])?;
    for seed in seeds.slots().into_iter().flatten() {
        put(&mut out, seed)?;
    }
    put(&mut out, &(table.tensors().len() as u32).to_le_bytes())?;
    for (name, len) in table.tensors() {
        put(&mut out, &(name.len() as u16).to_le_bytes())?;
        put(&mut out, name.as_bytes())?;
        put(&mut out, &(*len as u64).to_le_bytes())?;
    }
    let mut digest: [u8; 32] = sha.finalize().into();
    out.write_all(&digest)?;
    let mut block = Zeroizing::new(Vec::with_capacity(BLOCK_WORDS * 8));
    for (_, shares) in tensors {
        let mut sha = Sha256::new();
        sha.update(digest);
        let (a, b) = shares.components();
        let stored = seeds.slots().into_iter().zip([a, b]);
        for (_, words) in stored.filter(|(seed, _)| seed.is_none()) {
            for chunk in words.chunks(BLOCK_WORDS) {
                le_bytes(chunk, &mut block);
                sha.update(&block[..]);
                out.write_all(&block)?;
            }
        }
        digest = sha.finalize().into();
        out.write_all(&digest)?;
    }
    let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
    file.sync_all()
}

/// Checks a header and table against the bounds; returns the file length they imply at
/// format `version` with `seeds`.
fn check_table(
    path: &Path,
    header: &StoreHeader,
    table: &TensorPlan,
    version: u32,
    seeds: &ComponentSeeds,
) -> Result<u64, StoreError> {
    let limit = |source| StoreError::Limit {
        path: path.to_path_buf(),
        source,
    };
    limits::check(&[
        ("architecture name bytes", header.arch.len(), MAX_ARCH_BYTES),
        ("config bytes", header.config_json.len(), MAX_CONFIG_BYTES),
        ("tensors", table.tensors().len(), limits::MAX_TENSORS),
    ])
    .map_err(limit)?;
    for (name, _) in table.tensors() {
        limits::check(&[("tensor name bytes", name.len(), MAX_NAME_BYTES)]).map_err(limit)?;
    }
    limits::check_parameters(table.total()).map_err(limit)?;
    let mut names = std::collections::HashSet::new();
    if let Some((name, _)) = table.tensors().iter().find(|(n, _)| !names.insert(n)) {
        return Err(StoreError::Table {
            path: path.to_path_buf(),
            source: PlanError::Duplicate { name: name.clone() },
        });
    }
    // Within the limits (at most 2^34 parameters, 2^14 tensors), this cannot overflow.
    let seeding = if version >= 2 {
        1 + 32 * (2 - seeds.stored_components() as usize)
    } else {
        0
    };
    let header_len =
        8 + 4 + 1 + 4 + 2 + header.arch.len() + 4 + header.config_json.len() + 32 + seeding + 4;
    let table_len: usize = table.tensors().iter().map(|(n, _)| 2 + n.len() + 8).sum();
    let words_per_element = 8 * seeds.stored_components();
    let data: u64 = table
        .tensors()
        .iter()
        .map(|(_, n)| words_per_element * (*n as u64) + 32)
        .sum();
    Ok((header_len + table_len + 32) as u64 + data)
}

/// Reads the header and tensor table of the store at `path` (its header digest checked,
/// its shares not read): for a status display.
///
/// # Errors
/// As [`read`], except that nothing is expected of the store and its shares are not
/// checked.
pub fn read_header(path: &Path) -> Result<(StoreHeader, TensorPlan), StoreError> {
    let opened = open(path)?;
    Ok((opened.header, opened.table))
}

/// Reads this party's shares from the store at `path`, streamed from the file into their
/// share vectors (no second copy of the file in memory), checked as the module says
/// (Checks on reading).
///
/// # Errors
/// [`StoreError::NotAStore`], [`StoreError::Version`], [`StoreError::Permissions`],
/// [`StoreError::Limit`], [`StoreError::Truncated`], [`StoreError::Corrupt`],
/// [`StoreError::Malformed`] or [`StoreError::Table`] for a file that is not a sound
/// store; [`StoreError::Party`], [`StoreError::FixedPoint`], [`StoreError::Arch`] or
/// [`StoreError::Model`] for one that `expect` refuses; [`StoreError::Memory`];
/// [`StoreError::Io`].
pub fn read(path: &Path, expect: &Expect) -> Result<(StoreHeader, SharedTensors), StoreError> {
    let Opened {
        header,
        table,
        seeds,
        mut input,
        mut digest,
    } = open(path)?;
    let at = || path.to_path_buf();
    if header.party != expect.party {
        return Err(StoreError::Party {
            path: at(),
            found: header.party,
            expected: expect.party,
        });
    }
    if header.frac_bits != expect.frac_bits {
        return Err(StoreError::FixedPoint {
            path: at(),
            found: header.frac_bits,
            expected: expect.frac_bits,
        });
    }
    if let Some(arch) = expect.arch.as_ref().filter(|a| **a != header.arch) {
        return Err(StoreError::Arch {
            path: at(),
            found: header.arch,
            expected: arch.clone(),
        });
    }
    if let Some(hash) = expect.model_hash.filter(|h| *h != header.model_hash) {
        return Err(StoreError::Model {
            path: at(),
            found: header.model_hash,
            expected: hash,
        });
    }
    let memory = || StoreError::Memory { path: at() };
    let mut tensors = Vec::new();
    tensors
        .try_reserve_exact(table.tensors().len())
        .map_err(|_| memory())?;
    let mut block = Zeroizing::new(vec![0u8; BLOCK_WORDS * 8]);
    for (stream, (name, len)) in (0u64..).zip(table.tensors()) {
        input.sha = Sha256::new();
        input.sha.update(digest);
        let mut component = |seed: Option<&Seed>| -> Result<Zeroizing<Vec<u64>>, StoreError> {
            // Wiped if a later read fails.
            let mut words = Zeroizing::new(Vec::new());
            words.try_reserve_exact(*len).map_err(|_| memory())?;
            if let Some(seed) = seed {
                words.resize(*len, 0);
                dealing::expand_into(seed, Span::whole(stream), &mut words);
            }
            while words.len() < *len {
                let n = (*len - words.len()).min(BLOCK_WORDS);
                let bytes = &mut block[..n * 8];
                input.fill(bytes)?;
                words.extend(bytes.chunks_exact(8).map(|c| {
                    let mut w = [0u8; 8];
                    w.copy_from_slice(c);
                    u64::from_le_bytes(w)
                }));
            }
            Ok(words)
        };
        let [first, second] = seeds.slots();
        let (mut a, mut b) = (component(first)?, component(second)?);
        digest = input.check_digest(Section::Tensor(name.clone()))?;
        // Both components have `len` words: this cannot fail.
        let shares = Shares::from_components(
            header.party,
            std::mem::take(&mut *a),
            std::mem::take(&mut *b),
        )
        .map_err(|_| StoreError::Malformed {
            path: at(),
            reason: "components of different lengths",
        })?;
        tensors.push((name.clone(), shares));
    }
    let bag = SharedTensors::from_named(&table, tensors)
        .map_err(|source| StoreError::Table { path: at(), source })?;
    Ok((header, bag))
}

/// A store opened and checked up to its tensors.
struct Opened<'p> {
    header: StoreHeader,
    table: TensorPlan,
    /// The components kept as seeds.
    seeds: ComponentSeeds,
    /// Positioned at the first tensor.
    input: HashingReader<'p>,
    /// The header digest `d_0`.
    digest: [u8; 32],
}

/// Opens a store and reads its header and table, checked up to its header digest and
/// its length.
fn open(path: &Path) -> Result<Opened<'_>, StoreError> {
    let at = || path.to_path_buf();
    let io = |action, source| StoreError::Io {
        path: at(),
        action,
        source,
    };
    let file = File::open(path).map_err(|e| io("open", e))?;
    let meta = file.metadata().map_err(|e| io("read", e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(StoreError::Permissions { path: at(), mode });
        }
    }
    let file_len = meta.len();
    let mut input = HashingReader {
        inner: BufReader::with_capacity(1 << 16, file),
        sha: Sha256::new(),
        path,
        file_len,
    };
    let mut magic = [0u8; 8];
    match input.fill(&mut magic) {
        Err(StoreError::Truncated { .. }) => return Err(StoreError::NotAStore { path: at() }),
        other => other?,
    }
    if magic != MAGIC {
        return Err(StoreError::NotAStore { path: at() });
    }
    let version = input.u32()?;
    if !(OLDEST_VERSION..=VERSION).contains(&version) {
        return Err(StoreError::Version {
            path: at(),
            found: version,
            supported: VERSION,
        });
    }
    let limit = |field, value: usize, max: usize| {
        limits::check(&[(field, value, max)])
            .map_err(|source| StoreError::Limit { path: at(), source })
    };
    let party = input.u8()?;
    let frac_bits = input.u32()?;
    let arch_len = usize::from(input.u16()?);
    limit("architecture name bytes", arch_len, MAX_ARCH_BYTES)?;
    let arch = input.bytes(arch_len)?;
    let config_len = input.u32()? as usize;
    limit("config bytes", config_len, MAX_CONFIG_BYTES)?;
    let config_json = input.bytes(config_len)?;
    let mut model_hash = [0u8; 32];
    input.fill(&mut model_hash)?;
    let mut seeds = ComponentSeeds::none();
    // Version 1 has no flags: both components are in the file.
    let flags = if version >= 2 { input.u8()? } else { 0 };
    for (i, slot) in (0..).zip(seeds.slots_mut()) {
        if (flags >> i) & 1 == 1 {
            let mut seed = [0u8; 32];
            input.fill(&mut seed)?;
            *slot = Some(seed);
        }
    }
    let count = input.u32()? as usize;
    limit("tensors", count, limits::MAX_TENSORS)?;
    let mut raw_table = Vec::with_capacity(count);
    for _ in 0..count {
        let name_len = usize::from(input.u16()?);
        limit("tensor name bytes", name_len, MAX_NAME_BYTES)?;
        let name = input.bytes(name_len)?;
        let len = usize::try_from(input.u64()?).ok();
        limits::check_parameters(len).map_err(|source| StoreError::Limit { path: at(), source })?;
        raw_table.push((name, len.unwrap_or(usize::MAX)));
    }
    let stored = input.check_digest(Section::Header)?;
    let malformed = |reason| StoreError::Malformed { path: at(), reason };
    if flags & !3 != 0 {
        return Err(malformed("unknown seeded-component flags"));
    }
    let utf8 = |bytes: Vec<u8>, reason| String::from_utf8(bytes).map_err(|_| malformed(reason));
    let header = StoreHeader {
        party: PartyId::try_from_u8(party).ok_or_else(|| malformed("no such party"))?,
        frac_bits,
        arch: utf8(arch, "the architecture is not UTF-8")?,
        config_json: utf8(config_json, "the config is not UTF-8")?,
        model_hash: ModelHash(model_hash),
    };
    let mut table = TensorPlan::new();
    for (name, len) in raw_table {
        table.push(utf8(name, "a tensor name is not UTF-8")?, len);
    }
    let expected = check_table(path, &header, &table, version, &seeds)?;
    if file_len < expected {
        return Err(StoreError::Truncated {
            path: at(),
            found: file_len,
            expected: Some(expected),
        });
    }
    if file_len > expected {
        return Err(malformed("bytes follow the last tensor"));
    }
    Ok(Opened {
        header,
        table,
        seeds,
        input,
        digest: stored,
    })
}

/// The store's reader: every byte read is hashed into the current section's digest.
struct HashingReader<'p> {
    inner: BufReader<File>,
    sha: Sha256,
    path: &'p Path,
    file_len: u64,
}

impl HashingReader<'_> {
    /// Reads the digest stored after a section and checks it against the digest of the
    /// bytes read since the last one (which the caller seeded with it); returns it.
    fn check_digest(&mut self, section: Section) -> Result<[u8; 32], StoreError> {
        let found: [u8; 32] = std::mem::take(&mut self.sha).finalize().into();
        let mut stored = [0u8; 32];
        self.fill(&mut stored)?;
        if found != stored {
            return Err(StoreError::Corrupt {
                path: self.path.to_path_buf(),
                section,
            });
        }
        Ok(stored)
    }

    /// Reads `buf` whole (the end of the file is [`StoreError::Truncated`]) and hashes it.
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), StoreError> {
        self.inner.read_exact(buf).map_err(|source| {
            if source.kind() == io::ErrorKind::UnexpectedEof {
                StoreError::Truncated {
                    path: self.path.to_path_buf(),
                    found: self.file_len,
                    expected: None,
                }
            } else {
                StoreError::Io {
                    path: self.path.to_path_buf(),
                    action: "read",
                    source,
                }
            }
        })?;
        self.sha.update(&*buf);
        Ok(())
    }

    fn u8(&mut self) -> Result<u8, StoreError> {
        let mut b = [0u8; 1];
        self.fill(&mut b)?;
        Ok(b[0])
    }

    fn u16(&mut self) -> Result<u16, StoreError> {
        let mut b = [0u8; 2];
        self.fill(&mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    fn u32(&mut self) -> Result<u32, StoreError> {
        let mut b = [0u8; 4];
        self.fill(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self) -> Result<u64, StoreError> {
        let mut b = [0u8; 8];
        self.fill(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// `n` bytes, `n` bounded by the caller.
    fn bytes(&mut self, n: usize) -> Result<Vec<u8>, StoreError> {
        let mut b = vec![0u8; n];
        self.fill(&mut b)?;
        Ok(b)
    }
}
