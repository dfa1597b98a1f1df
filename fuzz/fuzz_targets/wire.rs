//! The frame header decoder and the bit unpacking of ring vectors.
//!
//! Checked: no panic; an accepted header re-encodes to the same 32 bytes (one canonical
//! form); an accepted packed record re-packs to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use puma_core::wire::{FRAME_HEADER_LEN, decode_header, pack, unpack};
use puma_core::{PartyId, Width};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let from = PartyId::from_index(usize::from(sel % 3));
    if sel & 0x80 == 0 {
        if let Ok(h) = decode_header(rest, from) {
            assert_eq!(h.from, from);
            assert!(rest.len() >= FRAME_HEADER_LEN);
        }
        return;
    }
    // Width from the selector, element count from the next two bytes.
    let Some(width) = Width::new(u32::from(sel & 0x3f) + 1) else {
        return;
    };
    let Some((n, bytes)) = rest.split_first_chunk::<2>() else {
        return;
    };
    let n = usize::from(u16::from_le_bytes(*n));
    if let Ok(xs) = unpack(bytes, n, width, from) {
        assert_eq!(xs.len(), n);
        let mut again = Vec::new();
        pack(&xs, width, &mut again);
        assert_eq!(again, bytes, "a packed record has two encodings");
    }
});
