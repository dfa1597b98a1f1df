//! Deterministic joins: independent sub-protocols run concurrently and share rounds.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::future::{Future, poll_fn};
use core::pin::{Pin, pin};
use core::task::Poll;

/// Runs `a` and `b` concurrently, polling `a` first every time; returns both outputs.
pub async fn join<A: Future, B: Future>(a: A, b: B) -> (A::Output, B::Output) {
    let mut a = pin!(a);
    let mut b = pin!(b);
    let mut ra = None;
    let mut rb = None;
    poll_fn(move |cx| {
        if ra.is_none() {
            if let Poll::Ready(v) = a.as_mut().poll(cx) {
                ra = Some(v);
            }
        }
        if rb.is_none() {
            if let Poll::Ready(v) = b.as_mut().poll(cx) {
                rb = Some(v);
            }
        }
        match (ra.take(), rb.take()) {
            (Some(x), Some(y)) => Poll::Ready((x, y)),
            (x, y) => {
                ra = x;
                rb = y;
                Poll::Pending
            }
        }
    })
    .await
}

/// Like [`join`] for fallible futures: the first error (in polling order) wins.
///
/// # Errors
/// The first error either future returns.
pub async fn try_join<A, B, T, U, E>(a: A, b: B) -> Result<(T, U), E>
where
    A: Future<Output = Result<T, E>>,
    B: Future<Output = Result<U, E>>,
{
    let mut a = pin!(a);
    let mut b = pin!(b);
    let mut ra = None;
    let mut rb = None;
    poll_fn(move |cx| {
        if ra.is_none() {
            if let Poll::Ready(v) = a.as_mut().poll(cx) {
                match v {
                    Ok(v) => ra = Some(v),
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
        }
        if rb.is_none() {
            if let Poll::Ready(v) = b.as_mut().poll(cx) {
                match v {
                    Ok(v) => rb = Some(v),
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
        }
        match (ra.take(), rb.take()) {
            (Some(x), Some(y)) => Poll::Ready(Ok((x, y))),
            (x, y) => {
                ra = x;
                rb = y;
                Poll::Pending
            }
        }
    })
    .await
}

/// A boxed future with its output once it is ready.
type Slot<F, T> = (Pin<Box<F>>, Option<T>);

/// Runs all futures concurrently, polling them in order; outputs keep the input order.
pub async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut slots: Vec<Slot<F, F::Output>> =
        futures.into_iter().map(|f| (Box::pin(f), None)).collect();
    poll_fn(move |cx| {
        let mut all = true;
        for (f, out) in slots.iter_mut() {
            if out.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *out = Some(v),
                    Poll::Pending => all = false,
                }
            }
        }
        if all {
            Poll::Ready(slots.iter_mut().filter_map(|(_, o)| o.take()).collect())
        } else {
            Poll::Pending
        }
    })
    .await
}

/// Like [`join_all`] for fallible futures: the first error (in polling order) wins.
///
/// # Errors
/// The first error any future returns.
pub async fn try_join_all<F, T, E>(futures: Vec<F>) -> Result<Vec<T>, E>
where
    F: Future<Output = Result<T, E>>,
{
    let mut slots: Vec<Slot<F, T>> = futures.into_iter().map(|f| (Box::pin(f), None)).collect();
    poll_fn(move |cx| {
        let mut all = true;
        for (f, out) in slots.iter_mut() {
            if out.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(Ok(v)) => *out = Some(v),
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => all = false,
                }
            }
        }
        if all {
            Poll::Ready(Ok(slots.iter_mut().filter_map(|(_, o)| o.take()).collect()))
        } else {
            Poll::Pending
        }
    })
    .await
}
