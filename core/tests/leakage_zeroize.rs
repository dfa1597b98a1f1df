//! Share buffers are wiped when dropped.
//!
//! A counting global allocator inspects every block as it is freed and records whether it
//! still holds a planted secret word. Only this test's thread is inspected, so the test
//! harness's own allocations do not interfere.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
// The inspecting allocator is a `GlobalAlloc`, an unsafe trait; it only reads the blocks
// it is handed before passing them on to the system allocator.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use puma_core::sim::bit_shares_from_components;
use puma_core::{PartyId, Shares, Width};

const SECRET: u64 = 0x5EC2_E7AB_CDEF_1234;

thread_local! {
    static WATCH: Cell<bool> = const { Cell::new(false) };
    static FOUND: Cell<usize> = const { Cell::new(0) };
}

struct Inspecting;

// SAFETY: allocation and deallocation are forwarded unchanged to `System`; `dealloc` only
// reads the `layout.size()` bytes of the block it is given, which are allocated and
// initialised by the time a `Vec<u64>` frees them.
unsafe impl GlobalAlloc for Inspecting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if WATCH.with(Cell::get) && layout.align() >= 8 {
            // SAFETY: `ptr` is a live block of `layout.size()` bytes until freed below; the
            // words watched here are `u64` buffers, fully written since they hold values or
            // were wiped.
            let words = unsafe { std::slice::from_raw_parts(ptr.cast::<u64>(), layout.size() / 8) };
            if words.contains(&SECRET) {
                FOUND.with(|f| f.set(f.get() + 1));
            }
        }
        // SAFETY: forwarded with the caller's block and layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Inspecting = Inspecting;

/// Blocks freed while running `f` that still held the secret.
fn leftovers(f: impl FnOnce()) -> usize {
    FOUND.with(|c| c.set(0));
    WATCH.with(|w| w.set(true));
    f();
    WATCH.with(|w| w.set(false));
    FOUND.with(Cell::get)
}

#[test]
fn share_buffers_are_wiped_on_drop() {
    // Control: a plain vector holding the secret is freed unwiped, and the allocator sees it.
    assert_eq!(
        leftovers(|| {
            let v = vec![SECRET; 16];
            drop(std::hint::black_box(v));
        }),
        1
    );
    // Arithmetic shares: built, cloned, combined, sliced and dropped.
    assert_eq!(
        leftovers(|| {
            let mut vals = vec![SECRET; 16];
            let s = Shares::from_public(PartyId::P0, &vals);
            zeroize::Zeroize::zeroize(&mut vals);
            let c = s.clone();
            let sum = s.add(&Shares::zeros(PartyId::P0, 16)).unwrap();
            let part = c.slice(0..8).unwrap();
            let (l, r) = sum.split_at(4).unwrap();
            drop(std::hint::black_box((s, c, sum, part, l, r)));
        }),
        0
    );
    // Boolean shares.
    assert_eq!(
        leftovers(|| {
            let b = bit_shares_from_components(
                PartyId::P1,
                Width::W64,
                vec![SECRET; 8],
                vec![SECRET; 8],
            );
            let c = b.clone();
            drop(std::hint::black_box((b, c)));
        }),
        0
    );
}
