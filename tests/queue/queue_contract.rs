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

/// The handles and iterators print as crossbeam-channel's.
#[test]
fn handles_print_as_crossbeam_channels_do() {
    let (tx, rx) = bounded::<u8>(2);
    let (ctx, crx) = crossbeam_channel::bounded::<u8>(2);
    assert_eq!(format!("{tx:?}"), format!("{ctx:?}"));
    assert_eq!(format!("{rx:?}"), format!("{crx:?}"));
    assert_eq!(format!("{:?}", rx.iter()), format!("{:?}", crx.iter()));
    assert_eq!(
        format!("{:?}", rx.try_iter()),
        format!("{:?}", crx.try_iter())
    );
    assert_eq!(
        format!("{:?}", rx.into_iter()),
        format!("{:?}", crx.into_iter())
    );
}

/// Differential test against crossbeam-channel itself, single-threaded (so every answer is
/// determined): random sequences of non-blocking operations, handle clones and drops on
/// `bounded(0..=3)` give the same answers from both, including after either side is gone
/// (messages kept until the senders go, `len` still counting them) and for the rendezvous
/// queue (no receiver waiting: `Full`).
#[test]
fn answers_match_crossbeam_channel_operation_by_operation() {
    use std::time::Duration;
    for seed in 0..400u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let cap = rng.usize(0..=3);
        let (tx, rx) = bounded::<u32>(cap);
        let (ctx, crx) = crossbeam_channel::bounded::<u32>(cap);
        let (mut txs, mut rxs, mut ctxs, mut crxs) = (vec![tx], vec![rx], vec![ctx], vec![crx]);
        let mut trace = Vec::new();
        for step in 0..40u32 {
            let op = rng.usize(..12);
            let (ours, theirs) = match op {
                0 | 1 if !txs.is_empty() => (
                    format!("{:?}", txs[0].try_send(step)),
                    format!("{:?}", ctxs[0].try_send(step)),
                ),
                2 | 3 if !rxs.is_empty() => (
                    format!("{:?}", rxs[0].try_recv()),
                    format!("{:?}", crxs[0].try_recv()),
                ),
                4 if !txs.is_empty() => (
                    format!("{:?}", txs[0].send_timeout(step, Duration::ZERO)),
                    format!("{:?}", ctxs[0].send_timeout(step, Duration::ZERO)),
                ),
                5 if !rxs.is_empty() => (
                    format!("{:?}", rxs[0].recv_timeout(Duration::ZERO)),
                    format!("{:?}", crxs[0].recv_timeout(Duration::ZERO)),
                ),
                6 if !txs.is_empty() => {
                    let (t, c) = (&txs[0], &ctxs[0]);
                    (
                        format!(
                            "{} {} {} {:?}",
                            t.len(),
                            t.is_empty(),
                            t.is_full(),
                            t.capacity()
                        ),
                        format!(
                            "{} {} {} {:?}",
                            c.len(),
                            c.is_empty(),
                            c.is_full(),
                            c.capacity()
                        ),
                    )
                }
                7 if !rxs.is_empty() => {
                    let (r, c) = (&rxs[0], &crxs[0]);
                    (
                        format!(
                            "{} {} {} {:?}",
                            r.len(),
                            r.is_empty(),
                            r.is_full(),
                            r.capacity()
                        ),
                        format!(
                            "{} {} {} {:?}",
                            c.len(),
                            c.is_empty(),
                            c.is_full(),
                            c.capacity()
                        ),
                    )
                }
                8 if !rxs.is_empty() && rng.bool() => (
                    format!("{:?}", rxs[0].try_iter().collect::<Vec<_>>()),
                    format!("{:?}", crxs[0].try_iter().collect::<Vec<_>>()),
                ),
                9 if !txs.is_empty() => {
                    if rng.bool() {
                        txs.push(txs[0].clone());
                        ctxs.push(ctxs[0].clone());
                    } else {
                        txs.pop();
                        ctxs.pop();
                    }
                    (String::new(), String::new())
                }
                10 if !rxs.is_empty() => {
                    if rng.bool() {
                        rxs.push(rxs[0].clone());
                        crxs.push(crxs[0].clone());
                    } else {
                        rxs.pop();
                        crxs.pop();
                    }
                    (String::new(), String::new())
                }
                // Both sides gone: nothing left to compare.
                _ if txs.is_empty() && rxs.is_empty() => break,
                _ => continue,
            };
            trace.push(format!("op {op}: {theirs}"));
            assert_eq!(ours, theirs, "seed {seed}, capacity {cap}, after {trace:?}");
        }
    }
}
