//! A bounded in-memory byte pipe with [`embedded_io`] ends, for tests and single-process
//! demos of [`StreamLink`](crate::StreamLink) (feature `dev`).
//!
//! Each direction holds at most the capacity given to [`pipe`], so a large frame needs
//! back-pressure exactly as over a UART or a socket. Dropping an end closes it: the other
//! end reads the bytes still queued and then end-of-stream, and its writes fail.

use alloc::collections::VecDeque;
use alloc::sync::Arc;

use embedded_io::{ErrorKind, ErrorType, Read, ReadReady, Write, WriteReady};
use spin::Mutex;

/// One direction: the queued bytes and which side has gone.
#[derive(Default)]
struct Queue {
    bytes: VecDeque<u8>,
    /// The writer is gone: after the queued bytes, reads return end-of-stream.
    writer_gone: bool,
    /// The reader is gone: writes fail, as on a socket whose peer has closed.
    reader_gone: bool,
}

/// One end of a bidirectional pipe made by [`pipe`].
pub struct End {
    rx: Arc<Mutex<Queue>>,
    tx: Arc<Mutex<Queue>>,
    cap: usize,
}

impl core::fmt::Debug for End {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("End")
            .field("cap", &self.cap)
            .finish_non_exhaustive()
    }
}

/// Two connected ends, each direction holding at most `cap` bytes (at least 1).
pub fn pipe(cap: usize) -> (End, End) {
    let cap = cap.max(1);
    let (a, b) = (
        Arc::<Mutex<Queue>>::default(),
        Arc::<Mutex<Queue>>::default(),
    );
    (
        End {
            rx: Arc::clone(&a),
            tx: Arc::clone(&b),
            cap,
        },
        End { rx: b, tx: a, cap },
    )
}

/// Three parties joined in a ring by pipes of capacity `cap` (P0–P1, P1–P2, P2–P0): by
/// party index, each party's end to its successor and its end to its predecessor, as
/// [`StreamLink::new`](crate::StreamLink::new) takes them.
pub fn ring(cap: usize) -> [(End, End); 3] {
    let (a01, a10) = pipe(cap);
    let (a12, a21) = pipe(cap);
    let (a20, a02) = pipe(cap);
    [(a01, a02), (a12, a10), (a20, a21)]
}

impl Drop for End {
    fn drop(&mut self) {
        self.tx.lock().writer_gone = true;
        self.rx.lock().reader_gone = true;
    }
}

/// A write to an end whose peer has been dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BrokenPipe;

impl embedded_io::Error for BrokenPipe {
    fn kind(&self) -> ErrorKind {
        ErrorKind::BrokenPipe
    }
}

impl ErrorType for End {
    type Error = BrokenPipe;
}

impl Read for End {
    /// Blocks (spinning) until a byte is queued or the writer is gone.
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, BrokenPipe> {
        loop {
            let mut q = self.rx.lock();
            if !q.bytes.is_empty() || q.writer_gone || buf.is_empty() {
                let n = buf.len().min(q.bytes.len());
                for (b, x) in buf.iter_mut().zip(q.bytes.drain(..n)) {
                    *b = x;
                }
                return Ok(n);
            }
            drop(q);
            core::hint::spin_loop();
        }
    }
}

impl ReadReady for End {
    fn read_ready(&mut self) -> Result<bool, BrokenPipe> {
        let q = self.rx.lock();
        Ok(!q.bytes.is_empty() || q.writer_gone)
    }
}

impl Write for End {
    /// Queues what fits (possibly nothing); fails once the reader is gone.
    fn write(&mut self, buf: &[u8]) -> Result<usize, BrokenPipe> {
        let mut q = self.tx.lock();
        if q.reader_gone {
            return Err(BrokenPipe);
        }
        let n = buf.len().min(self.cap.saturating_sub(q.bytes.len()));
        q.bytes.extend(buf.iter().take(n));
        Ok(n)
    }

    fn flush(&mut self) -> Result<(), BrokenPipe> {
        Ok(())
    }
}

impl WriteReady for End {
    fn write_ready(&mut self) -> Result<bool, BrokenPipe> {
        let q = self.tx.lock();
        Ok(q.bytes.len() < self.cap || q.reader_gone)
    }
}
