//! `after`, `at`, `tick` and `never` as crossbeam-channel's. No timing assertions: the
//! checks are on the instants delivered and on what is delivered to whom; durations appear
//! only as lower bounds the values must respect.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use logbus::queue::{after, at, never, tick, RecvTimeoutError, TryRecvError};

#[test]
fn after_delivers_its_due_instant_once_and_never_disconnects() {
    let start = Instant::now();
    let rx = after(Duration::from_millis(10));
    assert_eq!(rx.capacity(), Some(1));
    let fired = rx.recv().unwrap();
    assert!(fired >= start + Duration::from_millis(10));
    // Received once; afterwards empty, never disconnected.
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    assert_eq!((rx.len(), rx.is_empty()), (0, true));
    assert_eq!(
        rx.recv_timeout(Duration::from_millis(1)),
        Err(RecvTimeoutError::Timeout)
    );
}

#[test]
fn at_a_past_instant_is_ready_at_once_with_that_instant() {
    let when = Instant::now();
    let rx = at(when);
    // Due: counted by len, handed out by try_recv with exactly the instant given.
    assert_eq!(rx.len(), 1);
    assert_eq!(rx.try_recv(), Ok(when));
    assert_eq!(rx.len(), 0);
    let mut out = Vec::new();
    assert_eq!(rx.try_recv_batch(&mut out, 4), Err(TryRecvError::Empty));
}

#[test]
fn a_far_timer_times_out_and_stays() {
    let rx = after(Duration::from_secs(3600));
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    assert_eq!(
        rx.recv_timeout(Duration::from_millis(2)),
        Err(RecvTimeoutError::Timeout)
    );
    assert_eq!(rx.len(), 0);
    // An overflowing duration is "never".
    let rx = after(Duration::MAX);
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
}

#[test]
fn cloned_timer_receivers_share_one_message() {
    let rx = at(Instant::now());
    let barrier = Arc::new(Barrier::new(4));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let rx = rx.clone();
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                barrier.wait();
                rx.try_recv().is_ok()
            })
        })
        .collect();
    let winners = threads
        .into_iter()
        .map(|t| t.join().unwrap())
        .filter(|&won| won)
        .count();
    assert_eq!(winners, 1);
}

#[test]
fn tick_delivers_increasing_instants_a_period_apart_without_piling_up() {
    let period = Duration::from_millis(5);
    let start = Instant::now();
    let rx = tick(period);
    let first = rx.recv().unwrap();
    assert!(first >= start + period);
    let mut last = first;
    for _ in 0..5 {
        let t = rx.recv().unwrap();
        assert!(t >= last + period, "ticks a period apart");
        last = t;
    }
    // Missed ticks do not pile up: after a long pause one tick is waiting, and the next
    // is due a period after that one was received.
    thread::sleep(period * 4);
    let before = Instant::now();
    let late = rx.try_recv().unwrap();
    assert!(late >= last + period && late <= before);
    let next = rx.recv().unwrap();
    assert!(
        next >= before + period,
        "the next tick counts from the late one's receipt"
    );
    // Each tick goes to one receiver.
    let other = rx.clone();
    let a = rx.recv().unwrap();
    let b = other.recv().unwrap();
    assert!(b >= a + period);
}

#[test]
fn never_delivers_nothing_and_never_disconnects() {
    let rx = never::<String>();
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    assert_eq!(
        rx.recv_timeout(Duration::from_millis(2)),
        Err(RecvTimeoutError::Timeout)
    );
    assert_eq!((rx.len(), rx.capacity(), rx.is_empty()), (0, Some(0), true));
    assert_eq!(rx.try_iter().count(), 0);
}

/// Every `never()` is the same queue, as crossbeam-channel's; timers are each their own.
#[test]
fn every_never_is_the_same_channel() {
    let (r1, r2) = (never::<u8>(), never::<u8>());
    assert!(r1.same_channel(&r2) && r2.same_channel(&r1));
    assert!(r1.same_channel(&r1.clone()));
    let a = after(Duration::from_secs(60));
    let b = after(Duration::from_secs(60));
    assert!(a.same_channel(&a.clone()));
    assert!(!a.same_channel(&b));
    let t = tick(Duration::from_secs(60));
    assert!(!a.same_channel(&t) && !t.same_channel(&a));
    let n = never::<Instant>();
    assert!(!n.same_channel(&a) && !a.same_channel(&n));
}
