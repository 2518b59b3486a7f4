//! crossbeam-channel's contract for the bounded queue, checked the way crossbeam checks its
//! own bounded flavour: `try_` operations never report a state the queue was never in
//! (linearizability), whatever the protocol (owned, shared) and however often the sides
//! change hands.

use std::sync::{Arc, Barrier};
use std::thread;

use logbus::queue::{bounded, Receiver, Sender};

const THREADS: usize = 4;
const ITERATIONS: usize = 25_000;

/// Runs `body` on `THREADS` threads sharing one queue, each for `ITERATIONS` rounds.
fn on_threads(
    tx: Sender<u32>,
    rx: Receiver<u32>,
    body: impl Fn(&Sender<u32>, &Receiver<u32>) + Send + Sync + 'static,
) {
    let body = Arc::new(body);
    // All start together, so that the loops overlap even when each is short.
    let start = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (tx, rx, body) = (tx.clone(), rx.clone(), Arc::clone(&body));
            let start = Arc::clone(&start);
            thread::spawn(move || {
                start.wait();
                for _ in 0..ITERATIONS {
                    body(&tx, &rx);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

/// When a thread calls `try_recv`, its own send has completed and its own receive has not,
/// so at least one message is in the queue at that instant: `Empty` would be a lie.
#[test]
fn try_recv_after_own_send_always_finds_a_message() {
    let (tx, rx) = bounded(4);
    on_threads(tx, rx, |tx, rx| {
        tx.send(0).unwrap();
        rx.try_recv().unwrap();
    });
}

/// The mirror image: the queue starts full; when a thread calls `try_send`, its own receive
/// has completed and its own send has not, so a slot is free at that instant.
#[test]
fn try_send_after_own_recv_always_finds_room() {
    let (tx, rx) = bounded(4);
    for _ in 0..4 {
        tx.send(0).unwrap();
    }
    on_threads(tx, rx, |tx, rx| {
        rx.recv().unwrap();
        tx.try_send(0).unwrap();
    });
}

/// `is_empty` / `len` in the same position as `try_recv` above: never 0.
#[test]
fn len_after_own_send_is_never_zero() {
    let (tx, rx) = bounded(4);
    on_threads(tx, rx, |tx, rx| {
        tx.send(0).unwrap();
        assert!(!rx.is_empty());
        assert_ne!(tx.len(), 0);
        rx.recv().unwrap();
    });
}

/// `is_full` with a full queue minus this thread's own receive: never full.
#[test]
fn is_full_after_own_recv_is_never_true() {
    let (tx, rx) = bounded(4);
    for _ in 0..4 {
        tx.send(0).unwrap();
    }
    on_threads(tx, rx, |tx, rx| {
        rx.recv().unwrap();
        assert!(!tx.is_full());
        assert!(rx.len() < 4);
        tx.send(0).unwrap();
    });
}

/// The batch forms in the same position: a batch receive after our own send takes at
/// least one message, a batch send after our own receive places at least one.
#[test]
fn batch_forms_after_own_operation_make_progress() {
    let (tx, rx) = bounded(4);
    on_threads(tx, rx, |tx, rx| {
        tx.send(0).unwrap();
        let mut out = Vec::with_capacity(1);
        assert_eq!(rx.try_recv_batch(&mut out, 1), Ok(1));
    });
    let (tx, rx) = bounded(4);
    for _ in 0..4 {
        tx.send(0).unwrap();
    }
    on_threads(tx, rx, |tx, rx| {
        rx.recv().unwrap();
        let mut batch = vec![0];
        assert_eq!(tx.try_send_batch(&mut batch), Ok(1));
    });
}

/// Error types print as crossbeam-channel's: the same `Debug`, and a `Display` that starts
/// with crossbeam's words (logbus says more after them), so code matching either keeps
/// working after switching imports.
#[test]
fn errors_print_as_crossbeam_channels_do() {
    use crossbeam_channel as cb;
    use logbus::queue as lb;

    fn same<A: std::fmt::Debug + std::fmt::Display, B: std::fmt::Debug + std::fmt::Display>(
        ours: A,
        theirs: B,
    ) {
        assert_eq!(format!("{ours:?}"), format!("{theirs:?}"));
        let (ours, theirs) = (ours.to_string(), theirs.to_string());
        assert!(
            ours.starts_with(&theirs),
            "{ours:?} does not start with {theirs:?}"
        );
    }
    same(lb::SendError(1), cb::SendError(1));
    same(lb::TrySendError::Full(1), cb::TrySendError::Full(1));
    same(
        lb::TrySendError::Disconnected(1),
        cb::TrySendError::Disconnected(1),
    );
    same(
        lb::SendTimeoutError::Timeout(1),
        cb::SendTimeoutError::Timeout(1),
    );
    same(
        lb::SendTimeoutError::Disconnected(1),
        cb::SendTimeoutError::Disconnected(1),
    );
    same(lb::RecvError, cb::RecvError);
    same(lb::TryRecvError::Empty, cb::TryRecvError::Empty);
    same(
        lb::TryRecvError::Disconnected,
        cb::TryRecvError::Disconnected,
    );
    same(lb::RecvTimeoutError::Timeout, cb::RecvTimeoutError::Timeout);
    same(
        lb::RecvTimeoutError::Disconnected,
        cb::RecvTimeoutError::Disconnected,
    );
}
