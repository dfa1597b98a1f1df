//! Bounded concurrency: slots, a bounded queue, refusal when it is full, and waiting
//! that ends at its deadline.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use puma_serve::admission::{Admission, Refused};

#[test]
fn a_full_queue_refuses_at_once_and_a_freed_slot_admits_the_next() {
    let a = Arc::new(Admission::new(1, 1));
    let first = a.admit(Duration::ZERO).unwrap();
    assert_eq!(a.load(), (1, 0));
    // The second waits in the queue; the third finds it full.
    let a2 = a.clone();
    let waiter = thread::spawn(move || {
        let t0 = Instant::now();
        let p = a2.admit(Duration::from_secs(10)).map(|_| ());
        (p, t0.elapsed())
    });
    while a.load().1 == 0 {
        thread::sleep(Duration::from_millis(5));
    }
    let t0 = Instant::now();
    assert_eq!(a.admit(Duration::from_secs(10)).unwrap_err(), Refused::Busy);
    assert!(t0.elapsed() < Duration::from_secs(1), "refused at once");
    thread::sleep(Duration::from_millis(100));
    drop(first);
    let (got, waited) = waiter.join().unwrap();
    assert_eq!(got, Ok(()));
    assert!(waited >= Duration::from_millis(100), "{waited:?}");
    assert_eq!(a.load(), (0, 0));
}

#[test]
fn waiting_ends_at_the_deadline() {
    let a = Admission::new(1, 4);
    let _held = a.admit(Duration::ZERO).unwrap();
    let t0 = Instant::now();
    assert_eq!(
        a.admit(Duration::from_millis(200)).unwrap_err(),
        Refused::Timeout
    );
    assert!(t0.elapsed() >= Duration::from_millis(200));
    assert_eq!(a.load(), (1, 0), "the timed-out request left the queue");
}
