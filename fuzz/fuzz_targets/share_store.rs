//! Share store reading: the input is written to a private file and read as a store, its
//! header alone and whole.
//!
//! Checked: no panic and no allocation the file does not back (libFuzzer's -rss_limit_mb
//! catches one; a seeded component is backed by its seed and a table under the header's
//! SHA-256, which a mutation does not keep); a store that reads holds exactly the tensors
//! of its table, of its party.
#![no_main]

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

use libfuzzer_sys::fuzz_target;
use puma_core::{FixedPoint, PartyId};
use puma_layers::store::{self, Expect};

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("puma-fuzz-store-{}", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .unwrap();
    file.write_all(data).unwrap();
    drop(file);
    let header = store::read_header(&path);
    if let Ok((h, tensors)) = store::read(&path, &Expect::party(PartyId::P0, FixedPoint::default())) {
        let (_, table) = header.unwrap();
        assert_eq!(h.party, PartyId::P0);
        tensors.check(&table).unwrap();
    }
});
