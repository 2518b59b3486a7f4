//! Loom models of `logbus::queue`: every interleaving (up to the preemption bound) of
//! small scenarios, with capacity 2 and `Arc` payloads so that a lost or doubled message
//! shows up as a leak or a double drop.
#![cfg(logbus_loom)]

use std::time::Duration;

use logbus::queue::{bounded, RecvTimeoutError, SendTimeoutError, TryRecvError, TrySendError};
use loom::sync::Arc;
use loom::thread;

/// Messages per producer in the MPMC models (kept small: loom's cost grows steeply).
const MSGS: u8 = 2;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    // A thread that finds a slot claimed but not yet written spins (a loom yield) until the
    // other thread finishes; each spin is a branch, so allow more than the default 1,000.
    builder.max_branches = 20_000;
    builder.check(f);
}

/// Two producers, one consumer: every message arrives once, each producer's in order.
#[test]
fn two_producers_one_consumer() {
    model(|| {
        let (tx, rx) = bounded::<Arc<(u8, u8)>>(2);
        let producers: Vec<_> = (0..2u8)
            .map(|p| {
                let tx = tx.clone();
                thread::spawn(move || {
                    for i in 0..MSGS {
                        tx.send(Arc::new((p, i))).unwrap();
                    }
                })
            })
            .collect();
        drop(tx);
        let mut next = [0u8; 2];
        for m in rx.iter() {
            let (p, i) = *m;
            assert_eq!(next[p as usize], i, "producer {p} out of order");
            next[p as usize] += 1;
        }
        assert_eq!(next, [MSGS, MSGS]);
        for p in producers {
            p.join().unwrap();
        }
    });
}

/// One producer, two consumers (one using batches): each message is taken exactly once.
#[test]
fn one_producer_two_consumers() {
    model(|| {
        let (tx, rx) = bounded::<Arc<u8>>(2);
        let rx2 = rx.clone();
        let consumer = thread::spawn(move || {
            let mut got = Vec::new();
            let mut out = Vec::new();
            while rx2.recv_batch(&mut out, 2).is_ok() {
                got.extend(out.drain(..).map(|m| *m));
            }
            got
        });
        let producer = thread::spawn(move || {
            for i in 0..MSGS {
                tx.send(Arc::new(i)).unwrap();
            }
        });
        let mut got: Vec<u8> = rx.iter().map(|m| *m).collect();
        producer.join().unwrap();
        let theirs = consumer.join().unwrap();
        assert!(theirs.windows(2).all(|w| w[0] < w[1]));
        assert!(got.windows(2).all(|w| w[0] < w[1]));
        got.extend(theirs);
        got.sort_unstable();
        assert_eq!(got, (0..MSGS).collect::<Vec<_>>());
    });
}

/// A batch send (a run of two slots, its stamps stored last slot first) races a batch
/// receive: every message arrives once, in order, and the receiver never reads a slot of
/// the run before its message is written (loom reports the data race if it could).
#[test]
fn a_batch_send_races_a_batch_receive() {
    model(|| {
        let (tx, rx) = bounded::<Arc<u8>>(2);
        let producer = thread::spawn(move || {
            let mut batch = vec![Arc::new(0u8), Arc::new(1)];
            tx.send_batch(&mut batch).unwrap();
            assert!(batch.is_empty());
            tx.send(Arc::new(2)).unwrap();
        });
        let mut got = Vec::new();
        let mut out = Vec::new();
        while rx.recv_batch(&mut out, 2).is_ok() {
            got.extend(out.drain(..).map(|m| *m));
        }
        producer.join().unwrap();
        assert_eq!(got, vec![0, 1, 2]);
    });
}

/// The last receiver going away wakes a sender blocked on a full queue, which gets its
/// message back; the queued message is dropped (loom checks every `Arc` is freed).
#[test]
fn disconnect_races_a_blocked_send() {
    model(|| {
        let (tx, rx) = bounded::<Arc<u8>>(2);
        tx.send(Arc::new(0)).unwrap();
        tx.send(Arc::new(1)).unwrap();
        let sender = thread::spawn(move || tx.send(Arc::new(2)));
        drop(rx);
        let back = sender.join().unwrap().unwrap_err().into_inner();
        assert_eq!(*back, 2);
        assert_eq!(Arc::strong_count(&back), 1);
    });
}

/// The last sender going away wakes a receiver blocked on an empty queue, after it
/// received what had been sent.
#[test]
fn disconnect_races_a_blocked_recv() {
    model(|| {
        let (tx, rx) = bounded::<Arc<u8>>(2);
        let receiver = thread::spawn(move || {
            let mut got = Vec::new();
            loop {
                match rx.recv() {
                    Ok(m) => got.push(*m),
                    Err(_) => return got,
                }
            }
        });
        tx.send(Arc::new(7)).unwrap();
        drop(tx);
        assert_eq!(receiver.join().unwrap(), [7]);
    });
}

/// A timed send on a full queue races a receive that makes room: either the message went
/// in (and is received) or it came back with `Timeout` — never both, never lost.
#[test]
fn a_timeout_races_a_send() {
    model(|| {
        let (tx, rx) = bounded::<Arc<u8>>(2);
        tx.send(Arc::new(0)).unwrap();
        tx.send(Arc::new(1)).unwrap();
        let sender = thread::spawn(move || {
            let r = tx.send_timeout(Arc::new(2), Duration::from_millis(1));
            (r, tx)
        });
        assert_eq!(*rx.recv().unwrap(), 0);
        let (result, tx) = sender.join().unwrap();
        assert_eq!(*rx.recv().unwrap(), 1);
        match result {
            Ok(()) => assert_eq!(*rx.try_recv().unwrap(), 2),
            Err(SendTimeoutError::Timeout(m)) => {
                assert_eq!(*m, 2);
                assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Empty);
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
        drop(tx);
        assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Disconnected);
    });
}

/// A timed receive races a send: it returns the message or times out, and in the latter
/// case the message is still in the queue.
#[test]
fn a_timeout_races_a_recv() {
    model(|| {
        let (tx, rx) = bounded::<Arc<u8>>(2);
        let receiver = thread::spawn(move || (rx.recv_timeout(Duration::from_millis(1)), rx));
        tx.send(Arc::new(5)).unwrap();
        let (result, rx) = receiver.join().unwrap();
        match result {
            Ok(m) => assert_eq!(*m, 5),
            Err(RecvTimeoutError::Timeout) => assert_eq!(*rx.try_recv().unwrap(), 5),
            Err(e) => panic!("unexpected {e:?}"),
        }
    });
}

/// A rendezvous hand-off racing the receiver's disconnection: the message is either taken
/// or handed back.
#[test]
fn rendezvous_send_races_disconnect() {
    model(|| {
        let (tx, rx) = bounded::<Arc<u8>>(0);
        let sender = thread::spawn(move || tx.send(Arc::new(1)));
        let got = rx.recv_timeout(Duration::from_millis(1));
        drop(rx);
        match (got, sender.join().unwrap()) {
            (Ok(m), Ok(())) => assert_eq!(*m, 1),
            (Err(RecvTimeoutError::Timeout), Err(e)) => assert_eq!(*e.into_inner(), 1),
            (g, s) => panic!("inconsistent: {g:?} / {s:?}"),
        }
    });
}

/// One `Sender` shared by reference between two threads (it is `Sync`): every message
/// arrives exactly once (an `Arc` payload lost or doubled fails the model), and the receiver
/// wakes for each.
#[test]
fn one_sender_handle_shared_by_two_threads() {
    model(|| {
        let (tx, rx) = bounded::<Arc<u8>>(2);
        let tx = Arc::new(tx);
        let senders: Vec<_> = (0..2u8)
            .map(|i| {
                let tx = Arc::clone(&tx);
                thread::spawn(move || tx.send(Arc::new(i)).unwrap())
            })
            .collect();
        let mut got = [
            rx.recv().map(|m| *m).unwrap(),
            rx.recv().map(|m| *m).unwrap(),
        ];
        for s in senders {
            s.join().unwrap();
        }
        got.sort_unstable();
        assert_eq!(got, [0, 1]);
        assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)));
    });
}

/// The last receiver goes away while the only sender sends: every send either lands (and
/// its message is dropped by the receiver's drain) or hands its message back, and a send
/// after the drop always sees the disconnection.
#[test]
fn the_last_receiver_leaves_while_the_sender_sends() {
    model(|| {
        let (tx, rx) = bounded::<Arc<u8>>(2);
        let sender = thread::spawn(move || {
            let first = tx.send(Arc::new(1)).is_ok();
            let second = tx.send(Arc::new(2)).is_ok();
            (first, second, tx)
        });
        drop(rx);
        let (first, second, tx) = sender.join().unwrap();
        assert!(
            first || !second,
            "a send succeeded after one saw the disconnection"
        );
        assert!(tx.send(Arc::new(3)).is_err(), "the disconnection was lost");
    });
}

/// Linearizability of `try_recv` (the public API runs the shared protocol under loom): two
/// threads each send, then `try_recv`. When a thread calls `try_recv` its own send has
/// completed, so a message is there even if the other thread claimed the head slot first
/// and has not written it yet: `Empty` would be a lie. Fails (`Empty`) with the wait for a
/// claimed-but-unwritten slot taken out of `claim_recv`.
#[test]
fn try_recv_after_a_completed_send_finds_a_message() {
    model(|| {
        let (tx, rx) = bounded::<Arc<u8>>(2);
        let (tx2, rx2) = (tx.clone(), rx.clone());
        let other = thread::spawn(move || {
            tx2.send(Arc::new(1)).unwrap();
            rx2.try_recv().map(|_| ())
        });
        tx.send(Arc::new(0)).unwrap();
        assert_eq!(rx.try_recv().map(|_| ()), Ok(()));
        assert_eq!(other.join().unwrap(), Ok(()));
    });
}

/// The mirror image for `try_send`: the queue starts full, two threads each receive, then
/// `try_send`; a slot is free when each calls it, even if the other thread claimed the tail
/// slot's message and has not freed the slot yet. Fails (`Full`) with the wait taken out
/// of `claim_send`.
#[test]
fn try_send_after_a_completed_recv_finds_room() {
    model(|| {
        let (tx, rx) = bounded::<Arc<u8>>(2);
        tx.send(Arc::new(0)).unwrap();
        tx.send(Arc::new(1)).unwrap();
        let (tx2, rx2) = (tx.clone(), rx.clone());
        let other = thread::spawn(move || {
            rx2.recv().unwrap();
            tx2.try_send(Arc::new(3)).map_err(|e| e.is_full())
        });
        rx.recv().unwrap();
        assert!(!matches!(
            tx.try_send(Arc::new(2)),
            Err(TrySendError::Full(_))
        ));
        assert_eq!(other.join().unwrap(), Ok(()));
    });
}
