//! A `#![no_std]` staticlib that links puma-core.
//!
//! If puma-core or any of its dependencies pulled in `std`, this crate would fail to build
//! with a duplicate `panic_impl` lang item (ours below and std's). See README.md.
#![no_std]

extern crate alloc;

use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;
use core::panic::PanicInfo;
use core::ptr;
use core::sync::atomic::{AtomicUsize, Ordering};

use embedded_io::{ErrorType, Read, ReadReady, Write, WriteReady};
use puma_core::{Config, Error, FixedPoint, Output, PartyId, Session};
use puma_embedded::{Clock, Event, StreamLink};

/// Bytes available to the bump allocator.
const HEAP_SIZE: usize = 256 * 1024;

/// The heap: a static buffer, handed out front to back and never reused.
#[repr(C, align(16))]
struct Heap(UnsafeCell<[u8; HEAP_SIZE]>);

// SAFETY: the buffer is only reached through `BumpAlloc::alloc`, which hands out disjoint
// ranges by advancing `next` atomically, so no two callers ever get overlapping bytes.
unsafe impl Sync for Heap {}

static HEAP: Heap = Heap(UnsafeCell::new([0; HEAP_SIZE]));

/// A bump allocator over [`HEAP`]: `dealloc` is a no-op, which is enough for a canary.
struct BumpAlloc {
    /// Offset of the first free byte in `HEAP`.
    next: AtomicUsize,
}

// SAFETY: `alloc` returns either null or a pointer to `layout.size()` bytes inside `HEAP`,
// aligned to `layout.align()`, that no other allocation overlaps (ranges are claimed with a
// compare-exchange on `next` and never handed out twice). `dealloc` never touches memory.
unsafe impl GlobalAlloc for BumpAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let base = HEAP.0.get().cast::<u8>();
        let mut current = self.next.load(Ordering::Relaxed);
        loop {
            // Align the absolute address, not just the offset.
            let addr = (base as usize).wrapping_add(current);
            let Some(aligned) = addr.checked_next_multiple_of(layout.align()) else {
                return ptr::null_mut();
            };
            let start = current + (aligned - addr);
            let Some(end) = start.checked_add(layout.size()) else {
                return ptr::null_mut();
            };
            if end > HEAP_SIZE {
                return ptr::null_mut();
            }
            match self.next.compare_exchange_weak(
                current,
                end,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                // SAFETY: `start + size <= HEAP_SIZE`, so the offset stays inside `HEAP`.
                Ok(_) => return unsafe { base.add(start) },
                Err(seen) => current = seen,
            }
        }
    }

    unsafe fn dealloc(&self, _ptr: *mut u8, _layout: Layout) {}
}

#[global_allocator]
static ALLOCATOR: BumpAlloc = BumpAlloc {
    next: AtomicUsize::new(0),
};

#[panic_handler]
fn panic(_info: &PanicInfo<'_>) -> ! {
    loop {
        core::hint::spin_loop();
    }
}

/// Never called: with `panic = "abort"` nothing unwinds. The precompiled `alloc` still
/// refers to this symbol from its unwind tables, so a C program linking this staticlib
/// needs a definition.
// SAFETY: no other object in a no_std link defines `rust_eh_personality` (only std's
// `panic_unwind` would, and std cannot be linked here), and this body does nothing.
#[unsafe(no_mangle)]
pub extern "C" fn rust_eh_personality() {}

/// Exercises puma-core: a fixed-point round trip, then a session for P0 polled once.
///
/// Returns the length of the setup frame the session emits first, or 0 if anything
/// unexpected happened.
#[unsafe(no_mangle)]
pub extern "C" fn puma_canary() -> u64 {
    let fx = FixedPoint::default();
    let Ok(encoded) = fx.encode(-1.5) else {
        return 0;
    };
    if fx.decode(encoded) != -1.5 {
        return 0;
    }

    let session = Session::new(Config::new(1), PartyId::P0, [7; 32], |_ctx| async {
        Ok::<u64, Error>(42)
    });
    let Ok(mut session) = session else {
        return 0;
    };
    match session.poll_output() {
        // The setup round: P0 sends its seed to its predecessor, P2.
        Output::Transmit(t) if t.to == PartyId::P2 => t.frame.len() as u64,
        _ => 0,
    }
}

/// A stream that hands back what was written to it, through a 64-byte buffer.
struct Loopback {
    buf: [u8; 64],
    /// Bytes written and not yet read, at the front of `buf`.
    len: usize,
}

impl ErrorType for Loopback {
    type Error = core::convert::Infallible;
}

impl Read for Loopback {
    fn read(&mut self, out: &mut [u8]) -> Result<usize, Self::Error> {
        let n = out.len().min(self.len);
        out[..n].copy_from_slice(&self.buf[..n]);
        self.buf.copy_within(n..self.len, 0);
        self.len -= n;
        Ok(n)
    }
}

impl ReadReady for Loopback {
    fn read_ready(&mut self) -> Result<bool, Self::Error> {
        Ok(self.len > 0)
    }
}

impl Write for Loopback {
    fn write(&mut self, data: &[u8]) -> Result<usize, Self::Error> {
        let n = data.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&data[..n]);
        self.len += n;
        Ok(n)
    }

    fn flush(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

impl WriteReady for Loopback {
    fn write_ready(&mut self) -> Result<bool, Self::Error> {
        Ok(self.len < self.buf.len())
    }
}

/// A clock that counts its calls: time passes only as the link asks for it.
struct Ticks(u64);

impl Clock for Ticks {
    fn now_ms(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }
}

/// Exercises puma-embedded: a frame sent on a looped-back stream through a
/// `StreamLink` comes back whole, framed and unframed without `std`.
///
/// Returns the length of the frame received back (3 bytes), or 0 if anything unexpected
/// happened.
#[unsafe(no_mangle)]
pub extern "C" fn puma_canary_embedded() -> u64 {
    let stream = || Loopback {
        buf: [0; 64],
        len: 0,
    };
    let mut link = StreamLink::new(PartyId::P0, stream(), stream(), Ticks(0));
    if link.send(PartyId::P1, &[1, 2, 3]).is_err() {
        return 0;
    }
    match link.recv(1_000) {
        Ok(Event::Frame { from, bytes }) if from == PartyId::P1 && bytes == [1, 2, 3] => {
            bytes.len() as u64
        }
        _ => 0,
    }
}
