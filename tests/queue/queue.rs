//! The bounded queue through its public API: every method, every error variant,
//! disconnection on both sides, drop counting, wrap-around, batches, rendezvous, and a
//! many-producer many-consumer stress test.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use logbus::queue::{
    bounded, unbounded, RecvError, RecvTimeoutError, SendBatchError, SendError, SendTimeoutError,
    TryRecvError, TrySendError,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Waits until `f` holds (a thread has reached its blocking call), without timing asserts.
fn eventually(f: impl Fn() -> bool) {
    while !f() {
        thread::sleep(ms(1));
    }
}

#[derive(Debug)]
struct Tracked(Arc<AtomicUsize>);
impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn accessors_follow_the_contents() {
    let (tx, rx) = bounded(3);
    assert_eq!(tx.capacity(), Some(3));
    assert_eq!(rx.capacity(), Some(3));
    assert!(tx.is_empty() && rx.is_empty());
    assert!(!tx.is_full() && !rx.is_full());
    tx.send(1).unwrap();
    assert_eq!((tx.len(), rx.len()), (1, 1));
    tx.send(2).unwrap();
    tx.send(3).unwrap();
    assert!(tx.is_full() && rx.is_full());
    assert_eq!(rx.len(), 3);
    assert_eq!(rx.recv(), Ok(1));
    assert_eq!(tx.len(), 2);
    assert!(tx.same_channel(&tx.clone()));
    assert!(rx.same_channel(&rx.clone()));
    let (other, _r) = bounded::<i32>(3);
    assert!(!tx.same_channel(&other));
    // As crossbeam-channel prints them.
    assert_eq!(format!("{tx:?}"), "Sender { .. }");
    assert_eq!(format!("{rx:?}"), "Receiver { .. }");
}

#[test]
fn capacity_is_exactly_what_was_asked() {
    for cap in [1usize, 2, 3, 5, 1000, 1023, 1024, 1025] {
        let (tx, rx) = bounded(cap);
        assert_eq!(tx.capacity(), Some(cap));
        for i in 0..cap {
            tx.try_send(i).unwrap();
        }
        assert_eq!(tx.try_send(cap), Err(TrySendError::Full(cap)));
        assert_eq!(rx.len(), cap);
        assert_eq!(rx.try_iter().count(), cap);
    }
}

#[test]
fn wrap_around_keeps_fifo_order_over_many_laps() {
    let (tx, rx) = bounded(3);
    let mut next_out = 0u64;
    for i in 0..1000u64 {
        tx.send(i).unwrap();
        if i % 2 == 1 {
            assert_eq!(rx.recv(), Ok(next_out));
            next_out += 1;
            assert_eq!(rx.recv(), Ok(next_out));
            next_out += 1;
        }
    }
    assert!(rx.is_empty());
}

#[test]
fn try_send_and_try_recv_errors() {
    let (tx, rx) = bounded(1);
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    tx.try_send(1).unwrap();
    let full = tx.try_send(2).unwrap_err();
    assert!(full.is_full() && !full.is_disconnected());
    assert_eq!(full.into_inner(), 2);
    assert_eq!(rx.try_recv(), Ok(1));
    drop(rx);
    let disc = tx.try_send(3).unwrap_err();
    assert!(disc.is_disconnected());
    assert_eq!(disc, TrySendError::Disconnected(3));

    let (tx, rx) = bounded::<u8>(1);
    drop(tx);
    let e = rx.try_recv().unwrap_err();
    assert!(e.is_disconnected() && !e.is_empty());
    assert!(TryRecvError::Empty.is_empty());
}

#[test]
fn timeouts_and_deadlines() {
    let (tx, rx) = bounded(1);
    assert_eq!(rx.recv_timeout(ms(5)), Err(RecvTimeoutError::Timeout));
    assert_eq!(
        rx.recv_deadline(Instant::now() + ms(5)),
        Err(RecvTimeoutError::Timeout)
    );
    tx.send_timeout(1, ms(5)).unwrap();
    let e = tx.send_timeout(2, ms(5)).unwrap_err();
    assert!(e.is_timeout() && !e.is_disconnected());
    assert_eq!(e.into_inner(), 2);
    assert_eq!(
        tx.send_deadline(3, Instant::now() + ms(5)),
        Err(SendTimeoutError::Timeout(3))
    );
    // A deadline already passed still succeeds when no waiting is needed.
    assert_eq!(rx.recv_deadline(Instant::now() - ms(1)), Ok(1));
    tx.send_deadline(4, Instant::now() - ms(1)).unwrap();
    assert_eq!(rx.recv_timeout(Duration::MAX), Ok(4));
    drop(rx);
    assert_eq!(
        tx.send_timeout(5, ms(5)),
        Err(SendTimeoutError::Disconnected(5))
    );
    let (tx, rx) = bounded::<u8>(1);
    drop(tx);
    let e = rx.recv_timeout(ms(5)).unwrap_err();
    assert!(e.is_disconnected() && !e.is_timeout());
    assert_eq!(
        rx.recv_deadline(Instant::now()),
        Err(RecvTimeoutError::Disconnected)
    );
}

#[test]
fn timed_waits_succeed_when_the_other_side_acts() {
    let (tx, rx) = bounded(1);
    tx.send(0).unwrap();
    let t = thread::spawn(move || {
        thread::sleep(ms(20));
        assert_eq!(rx.recv(), Ok(0));
        rx.recv_timeout(Duration::from_secs(30))
    });
    tx.send_timeout(1, Duration::from_secs(30)).unwrap();
    assert_eq!(t.join().unwrap(), Ok(1));
}

#[test]
fn receivers_drain_then_see_disconnected() {
    let (tx, rx) = bounded(4);
    tx.send(1).unwrap();
    tx.send(2).unwrap();
    let tx2 = tx.clone();
    drop(tx);
    tx2.send(3).unwrap();
    drop(tx2);
    assert_eq!(rx.recv(), Ok(1));
    assert_eq!(rx.try_recv(), Ok(2));
    assert_eq!(rx.recv_timeout(ms(1)), Ok(3));
    assert_eq!(rx.recv(), Err(RecvError));
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
}

#[test]
fn send_hands_the_value_back_when_receivers_are_gone() {
    let (tx, rx) = bounded(4);
    let rx2 = rx.clone();
    drop(rx);
    tx.send(1).unwrap();
    drop(rx2);
    assert_eq!(tx.send(7), Err(SendError(7)));
    assert_eq!(tx.send(8).unwrap_err().into_inner(), 8);
}

#[test]
fn blocked_receivers_wake_on_disconnection() {
    let (tx, rx) = bounded::<u32>(2);
    let waiters: Vec<_> = (0..2)
        .map(|i| {
            let rx = rx.clone();
            thread::spawn(move || {
                if i == 0 {
                    rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
                } else {
                    rx.recv_timeout(Duration::from_secs(60))
                }
            })
        })
        .collect();
    thread::sleep(ms(30)); // let them park (no timing is asserted)
    drop(tx);
    for w in waiters {
        assert_eq!(w.join().unwrap(), Err(RecvTimeoutError::Disconnected));
    }
}

#[test]
fn blocked_senders_wake_on_disconnection() {
    let (tx, rx) = bounded(1);
    tx.send(0u32).unwrap();
    let waiters: Vec<_> = (0..2)
        .map(|i| {
            let tx = tx.clone();
            thread::spawn(move || {
                if i == 0 {
                    tx.send(1).map_err(|e| SendTimeoutError::Disconnected(e.0))
                } else {
                    tx.send_timeout(2, Duration::from_secs(60))
                }
            })
        })
        .collect();
    eventually(|| tx.is_full());
    thread::sleep(ms(30));
    drop(rx);
    let mut back: Vec<u32> = waiters
        .into_iter()
        .map(|w| match w.join().unwrap() {
            Err(SendTimeoutError::Disconnected(v)) => v,
            other => panic!("expected Disconnected, got {other:?}"),
        })
        .collect();
    back.sort();
    assert_eq!(back, [1, 2]);
}

#[test]
fn queued_messages_are_dropped_exactly_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    // Receivers go first: the queued messages stay (as in crossbeam-channel's bounded
    // flavour) until the last sender goes too.
    let (tx, rx) = bounded(8);
    for _ in 0..5 {
        tx.send(Tracked(Arc::clone(&drops))).unwrap();
    }
    drop(rx.recv().unwrap());
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    drop(rx);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    assert_eq!(tx.len(), 4);
    let back = tx.send(Tracked(Arc::clone(&drops))).unwrap_err();
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    drop(back);
    assert_eq!(drops.load(Ordering::SeqCst), 2);
    let tx2 = tx.clone();
    drop(tx);
    assert_eq!(drops.load(Ordering::SeqCst), 2);
    drop(tx2);
    assert_eq!(drops.load(Ordering::SeqCst), 6);

    // Senders go first: the last receiver's drop frees the rest.
    drops.store(0, Ordering::SeqCst);
    let (tx, rx) = bounded(4);
    for _ in 0..4 {
        tx.send(Tracked(Arc::clone(&drops))).unwrap();
    }
    drop(tx);
    drop(rx.recv().unwrap());
    let rx2 = rx.clone();
    drop(rx);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    drop(rx2);
    assert_eq!(drops.load(Ordering::SeqCst), 4);
}

#[test]
fn a_message_whose_drop_panics_leaves_the_queue_usable() {
    struct Bomb(u32);
    impl Drop for Bomb {
        fn drop(&mut self) {
            if self.0 == 1 {
                panic!("bomb {} went off", self.0);
            }
        }
    }
    let (tx, rx) = bounded(4);
    for i in 0..3 {
        tx.send(Bomb(i)).unwrap();
    }
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut out = Vec::new();
        rx.recv_batch(&mut out, 10).unwrap();
        drop(out); // drops 0, then 1 panics, 2 still dropped by Vec
    }));
    assert!(r.is_err());
    tx.send(Bomb(5)).unwrap();
    assert_eq!(rx.recv().unwrap().0, 5);

    // The same while the last handle discards what is queued.
    let drops = Arc::new(AtomicUsize::new(0));
    struct CountedBomb(bool, Arc<AtomicUsize>);
    impl Drop for CountedBomb {
        fn drop(&mut self) {
            self.1.fetch_add(1, Ordering::SeqCst);
            if self.0 {
                panic!("bomb");
            }
        }
    }
    let (tx, rx) = bounded(4);
    tx.send(CountedBomb(true, Arc::clone(&drops))).unwrap();
    tx.send(CountedBomb(false, Arc::clone(&drops))).unwrap();
    drop(rx);
    let back = tx.send(CountedBomb(false, Arc::clone(&drops))).unwrap_err();
    drop(back);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(tx)));
    assert!(r.is_err());
    assert_eq!(drops.load(Ordering::SeqCst), 3);
}

#[test]
fn iterators() {
    let (tx, rx) = bounded(8);
    for i in 0..3 {
        tx.send(i).unwrap();
    }
    assert_eq!(rx.try_iter().collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(rx.try_iter().next(), None);
    let t = thread::spawn(move || {
        for i in 10..15 {
            tx.send(i).unwrap();
        }
    });
    let mut got = Vec::new();
    for m in &rx {
        got.push(m);
    }
    t.join().unwrap();
    assert_eq!(got, [10, 11, 12, 13, 14]);

    let (tx, rx) = bounded(4);
    tx.send("a").unwrap();
    tx.send("b").unwrap();
    drop(tx);
    assert_eq!(rx.into_iter().collect::<Vec<_>>(), ["a", "b"]);
}

/// `Iter` and `IntoIter` are `FusedIterator`s, as crossbeam-channel's: once they end (the
/// queue empty and every sender gone) they stay ended, in every flavour.
#[test]
fn blocking_iterators_are_fused() {
    fn fused<I: std::iter::FusedIterator>(it: I) -> I {
        it
    }
    for (tx, rx) in [bounded(2), bounded(0), unbounded()] {
        let producer = thread::spawn(move || tx.send(1u8).unwrap());
        let mut it = fused(rx.iter());
        assert_eq!(it.next(), Some(1));
        producer.join().unwrap();
        assert_eq!((it.next(), it.next()), (None, None));
        let mut owned = fused(rx.clone().into_iter());
        assert_eq!((owned.next(), owned.next()), (None, None));
    }
}

#[test]
fn batches() {
    let (tx, rx) = bounded(5);
    let mut batch: Vec<u32> = (0..12).collect();
    let consumer = thread::spawn(move || {
        let mut all = Vec::new();
        let mut out = Vec::new();
        while let Ok(n) = rx.recv_batch(&mut out, 4) {
            assert!((1..=4).contains(&n));
            all.append(&mut out);
        }
        all
    });
    tx.send_batch(&mut batch).unwrap();
    assert!(batch.is_empty());
    let mut empty = Vec::new();
    tx.send_batch(&mut empty).unwrap();
    drop(tx);
    assert_eq!(consumer.join().unwrap(), (0..12).collect::<Vec<_>>());

    let (tx, rx) = bounded(3);
    let mut batch = vec![1, 2, 3, 4, 5];
    assert_eq!(tx.try_send_batch(&mut batch), Ok(3));
    assert_eq!(batch, [4, 5]);
    assert_eq!(tx.try_send_batch(&mut batch), Ok(0));
    assert_eq!(tx.try_send_batch(&mut Vec::new()), Ok(0));
    let mut out = Vec::new();
    assert_eq!(rx.recv_batch(&mut out, 0), Ok(0));
    assert_eq!(rx.try_recv_batch(&mut out, 0), Ok(0));
    assert_eq!(rx.try_recv_batch(&mut out, 2), Ok(2));
    assert_eq!(out, [1, 2]);
    drop(rx);
    // The messages not sent stay in the caller's `Vec`; the error counts those sent.
    assert_eq!(
        tx.try_send_batch(&mut batch),
        Err(SendBatchError { sent: 0 })
    );
    assert_eq!(batch, [4, 5]);
    let mut more = vec![6, 7];
    assert_eq!(tx.send_batch(&mut more), Err(SendBatchError { sent: 0 }));
    assert_eq!(more, [6, 7]);

    let (tx, rx) = bounded::<u8>(2);
    drop(tx);
    assert_eq!(rx.recv_batch(&mut Vec::new(), 3), Err(RecvError));
    assert_eq!(
        rx.try_recv_batch(&mut Vec::new(), 3),
        Err(TryRecvError::Disconnected)
    );
}

#[test]
fn rendezvous_hands_each_message_to_a_waiting_receiver() {
    let (tx, rx) = bounded::<u32>(0);
    assert_eq!(tx.capacity(), Some(0));
    assert!(tx.is_empty() && tx.is_full() && rx.is_full());
    assert_eq!(rx.len(), 0);
    assert_eq!(tx.try_send(1), Err(TrySendError::Full(1)));
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    assert_eq!(tx.send_timeout(1, ms(5)), Err(SendTimeoutError::Timeout(1)));
    assert_eq!(rx.recv_timeout(ms(5)), Err(RecvTimeoutError::Timeout));

    let t = thread::spawn(move || {
        let mut got = vec![rx.recv().unwrap()];
        let mut out = Vec::new();
        rx.recv_batch(&mut out, 8).unwrap();
        got.extend(out);
        got.extend(rx.iter());
        got
    });
    tx.send(1).unwrap();
    let mut batch = vec![2, 3, 4];
    tx.send_batch(&mut batch).unwrap();
    drop(tx);
    assert_eq!(t.join().unwrap(), [1, 2, 3, 4]);

    let (tx, rx) = bounded::<u32>(0);
    let t = thread::spawn(move || rx.recv_timeout(Duration::from_secs(60)));
    // try_send succeeds once the receiver is parked.
    let mut v = 9;
    loop {
        match tx.try_send(v) {
            Ok(()) => break,
            Err(TrySendError::Full(back)) => {
                v = back;
                thread::sleep(ms(1));
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(t.join().unwrap(), Ok(9));
    assert_eq!(tx.send(1), Err(SendError(1)));
    let mut b = vec![1, 2];
    assert_eq!(tx.try_send_batch(&mut b), Err(SendBatchError { sent: 0 }));
    assert_eq!(b, [1, 2]);

    // A sender blocked in a rendezvous wakes when the receivers go.
    let (tx, rx) = bounded::<u32>(0);
    let t = thread::spawn(move || tx.send(5));
    thread::sleep(ms(20));
    drop(rx);
    assert_eq!(t.join().unwrap(), Err(SendError(5)));
}

#[test]
fn errors_display_debug_and_convert() {
    let e: TrySendError<Vec<u8>> = TrySendError::Full(vec![1]);
    assert_eq!(format!("{e:?}"), "\"Full(..)\"");
    assert!(e.to_string().contains("full"));
    let _: &dyn std::error::Error = &e;
    assert!(TrySendError::Disconnected(())
        .to_string()
        .contains("receiver"));
    assert_eq!(format!("{:?}", SendError(vec![0u8])), "\"SendError(..)\"");
    assert!(SendError(()).to_string().contains("disconnected"));
    assert_eq!(
        format!("{:?}", SendTimeoutError::Timeout(())),
        "\"SendTimeoutError(..)\""
    );
    assert_eq!(
        format!("{:?}", SendTimeoutError::Disconnected(())),
        "\"SendTimeoutError(..)\""
    );
    assert!(SendTimeoutError::Timeout(())
        .to_string()
        .contains("timed out"));
    assert!(SendTimeoutError::Disconnected(())
        .to_string()
        .contains("disconnected"));
    assert!(RecvError.to_string().contains("sender"));
    assert!(TryRecvError::Empty.to_string().contains("empty"));
    assert!(TryRecvError::Disconnected
        .to_string()
        .contains("disconnected"));
    assert!(RecvTimeoutError::Timeout.to_string().contains("timed out"));
    assert!(RecvTimeoutError::Disconnected
        .to_string()
        .contains("disconnected"));
    let copy = RecvTimeoutError::Timeout;
    let again = copy;
    assert_eq!(copy, again);
    assert_eq!(
        TrySendError::from(SendError(1)),
        TrySendError::Disconnected(1)
    );
    assert_eq!(
        SendTimeoutError::from(SendError(1)),
        SendTimeoutError::Disconnected(1)
    );
    assert_eq!(TryRecvError::from(RecvError), TryRecvError::Disconnected);
    assert_eq!(
        RecvTimeoutError::from(RecvError),
        RecvTimeoutError::Disconnected
    );
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(SendError(5u64));
    assert!(!boxed.to_string().is_empty());
}

/// 8 producers × 8 consumers, ≥ 1M messages: each received exactly once, and in each
/// consumer the messages of one producer arrive in the order sent.
#[test]
fn stress_8x8_every_message_once_in_producer_order() {
    const PRODUCERS: u64 = 8;
    const CONSUMERS: usize = 8;
    let per_producer: u64 = if cfg!(debug_assertions) {
        131_072
    } else {
        262_144
    };
    let (tx, rx) = bounded::<u64>(64);
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let tx = tx.clone();
            thread::spawn(move || {
                let mut batch = Vec::with_capacity(16);
                for i in 0..per_producer {
                    let msg = (p << 32) | i;
                    if i % 1024 < 64 {
                        batch.push(msg);
                        if batch.len() == 16 {
                            tx.send_batch(&mut batch).unwrap();
                        }
                    } else {
                        assert!(batch.is_empty());
                        tx.send(msg).unwrap();
                    }
                }
            })
        })
        .collect();
    drop(tx);
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|c| {
            let rx = rx.clone();
            thread::spawn(move || {
                let mut last = vec![None::<u64>; PRODUCERS as usize];
                let mut seen = Vec::new();
                let mut out = Vec::with_capacity(32);
                loop {
                    let got = if c % 2 == 0 {
                        rx.recv().map(|m| {
                            out.push(m);
                            1
                        })
                    } else {
                        rx.recv_batch(&mut out, 32)
                    };
                    if got.is_err() {
                        break;
                    }
                    for m in out.drain(..) {
                        let (p, i) = ((m >> 32) as usize, m & 0xffff_ffff);
                        assert!(
                            last[p].map_or(true, |l| l < i),
                            "order broken for producer {p}"
                        );
                        last[p] = Some(i);
                        seen.push(m);
                    }
                }
                seen
            })
        })
        .collect();
    drop(rx);
    for p in producers {
        p.join().unwrap();
    }
    let mut all: Vec<u64> = consumers
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    assert_eq!(all.len() as u64, PRODUCERS * per_producer);
    all.sort_unstable();
    let mut expected = Vec::with_capacity(all.len());
    for p in 0..PRODUCERS {
        for i in 0..per_producer {
            expected.push((p << 32) | i);
        }
    }
    assert!(all == expected, "some message was lost or duplicated");
}

/// Capacity 1 and more threads than cores: nearly every operation waits, so this exercises
/// parking and every wake-up path; a lost wake-up hangs the test.
#[test]
fn parking_stress_capacity_one() {
    let per: u64 = 5_000;
    let (tx, rx) = bounded::<u64>(1);
    let producers: Vec<_> = (0..3u64)
        .map(|p| {
            let tx = tx.clone();
            thread::spawn(move || {
                for i in 0..per {
                    if i % 2 == 0 {
                        tx.send(p * per + i).unwrap();
                    } else {
                        tx.send_batch(&mut vec![p * per + i]).unwrap();
                    }
                }
            })
        })
        .collect();
    drop(tx);
    let consumers: Vec<_> = (0..3)
        .map(|c| {
            let rx = rx.clone();
            thread::spawn(move || {
                let mut got = Vec::new();
                let mut out = Vec::new();
                loop {
                    if c == 0 {
                        match rx.recv_batch(&mut out, 4) {
                            Ok(_) => got.append(&mut out),
                            Err(_) => return got,
                        }
                    } else {
                        match rx.recv() {
                            Ok(m) => got.push(m),
                            Err(_) => return got,
                        }
                    }
                }
            })
        })
        .collect();
    drop(rx);
    for p in producers {
        p.join().unwrap();
    }
    let mut all: Vec<u64> = consumers
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    all.sort_unstable();
    assert_eq!(all, (0..3 * per).collect::<Vec<_>>());
}

/// One thread per side at first, then the handles are shared by reference between several
/// threads (`Sender` and `Receiver` are `Sync`) mid-stream. Every message arrives exactly
/// once, and each sending thread's messages in order.
#[test]
fn handles_shared_by_reference_after_a_single_threaded_start() {
    const PER: u64 = 50_000;
    let (tx, rx) = bounded::<u64>(64);
    // Phase 1: one sender thread, one receiver thread.
    let got_first = thread::scope(|s| {
        let r = s.spawn(|| (0..PER).map(|_| rx.recv().unwrap()).collect::<Vec<_>>());
        for i in 0..PER {
            tx.send(i).unwrap();
        }
        r.join().unwrap()
    });
    assert_eq!(got_first, (0..PER).collect::<Vec<_>>());
    // Phase 2: three threads send through `&tx`, two receive through `&rx`.
    let seen: Vec<Vec<u64>> = thread::scope(|s| {
        let receivers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    while let Ok(v) = rx.recv_timeout(Duration::from_secs(5)) {
                        mine.push(v);
                        if v == u64::MAX {
                            break;
                        }
                    }
                    mine
                })
            })
            .collect();
        let senders: Vec<_> = (1..=3u64)
            .map(|k| {
                let tx = &tx;
                s.spawn(move || {
                    for i in 0..PER {
                        tx.send(k << 32 | i).unwrap();
                    }
                })
            })
            .collect();
        for h in senders {
            h.join().unwrap();
        }
        tx.send(u64::MAX).unwrap();
        tx.send(u64::MAX).unwrap();
        receivers.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all: Vec<u64> = Vec::new();
    for mine in &seen {
        for k in 1..=3u64 {
            let from_k: Vec<u64> = mine.iter().copied().filter(|v| v >> 32 == k).collect();
            assert!(
                from_k.windows(2).all(|w| w[0] < w[1]),
                "sender {k} out of order"
            );
        }
        all.extend(mine.iter().copied().filter(|&v| v != u64::MAX));
    }
    all.sort_unstable();
    let expected: Vec<u64> = (1..=3u64)
        .flat_map(|k| (0..PER).map(move |i| k << 32 | i))
        .collect();
    assert_eq!(all, expected);
}

/// A sender used from one thread, then moved to another: nothing is lost or doubled, and
/// the order holds.
#[test]
fn a_sender_moved_to_another_thread_keeps_every_message() {
    let (tx, rx) = bounded::<u64>(8);
    let reader = thread::spawn(move || rx.iter().collect::<Vec<_>>());
    for i in 0..1000 {
        tx.send(i).unwrap();
    }
    thread::spawn(move || {
        for i in 1000..2000 {
            tx.send(i).unwrap();
        }
    })
    .join()
    .unwrap();
    assert_eq!(reader.join().unwrap(), (0..2000).collect::<Vec<_>>());
}

/// One sender and one receiver run the owned (cursor-only) protocol for a while, then a
/// second sender and a second receiver join mid-stream (revoking it): every message
/// arrives exactly once and each sender's messages in order.
#[test]
fn threads_joining_an_owned_stream_lose_and_double_nothing() {
    const N: u64 = if cfg!(miri) { 200 } else { 200_000 };
    let (tx, rx) = logbus::queue::bounded::<(u8, u64)>(64);
    let (tx2, rx2) = (tx.clone(), rx.clone());
    let first = std::thread::spawn(move || {
        for i in 0..N {
            tx.send((0, i)).unwrap();
        }
    });
    let collect = |rx: logbus::queue::Receiver<(u8, u64)>| {
        std::thread::spawn(move || {
            let mut last = [None::<u64>; 2];
            let mut n = 0u64;
            for (p, i) in rx.iter() {
                let p = p as usize;
                assert!(last[p].map_or(true, |l| l < i), "sender {p} out of order");
                last[p] = Some(i);
                n += 1;
            }
            n
        })
    };
    let receiver = collect(rx);
    // Let the owners run alone first.
    while !first.is_finished() && tx2.len() < 32 {
        std::thread::yield_now();
    }
    let second = std::thread::spawn(move || {
        for i in 0..N {
            tx2.send((1, i)).unwrap();
        }
    });
    let receiver2 = collect(rx2);
    first.join().unwrap();
    second.join().unwrap();
    let total = receiver.join().unwrap() + receiver2.join().unwrap();
    assert_eq!(total, 2 * N);
}

/// Four senders and two receivers take turns, a burst at a time, so that each side changes
/// hands hundreds of times while staying on the owned protocol (a side changes owner rather
/// than going shared while turns are this long): every message arrives exactly once, each
/// sender's in order, and the receivers' turns see each sender's messages in order too.
#[test]
fn sides_changing_hands_in_turns_lose_reorder_and_double_nothing() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    const SENDERS: usize = 4;
    const BURST: u64 = if cfg!(miri) { 20 } else { 2_000 };
    const ROUNDS: u64 = if cfg!(miri) { 3 } else { 50 };
    let total = SENDERS as u64 * BURST * ROUNDS;
    let (tx, rx) = logbus::queue::bounded::<(usize, u64)>(256);
    let turn = Arc::new(AtomicUsize::new(0));
    let senders: Vec<_> = (0..SENDERS)
        .map(|p| {
            let (tx, turn) = (tx.clone(), Arc::clone(&turn));
            std::thread::spawn(move || {
                for round in 0..ROUNDS {
                    // Wait for our turn: the senders send one after the other.
                    while turn.load(Ordering::Acquire) != round as usize * SENDERS + p {
                        std::thread::yield_now();
                    }
                    for i in 0..BURST {
                        tx.send((p, round * BURST + i)).unwrap();
                    }
                    turn.fetch_add(1, Ordering::AcqRel);
                }
            })
        })
        .collect();
    drop(tx);
    // Two receivers take turns too, each taking a stretch of messages before passing on;
    // what each saw is merged afterwards.
    let rturn = Arc::new(AtomicUsize::new(0));
    let receivers: Vec<_> = (0..2)
        .map(|r| {
            let (rx, rturn) = (rx.clone(), Arc::clone(&rturn));
            std::thread::spawn(move || {
                let mut got = Vec::new();
                loop {
                    let t = rturn.load(Ordering::Acquire);
                    if t == usize::MAX {
                        return got;
                    }
                    if t % 2 != r {
                        std::thread::yield_now();
                        continue;
                    }
                    for _ in 0..BURST / 2 {
                        match rx.recv() {
                            Ok(m) => got.push(m),
                            Err(_) => {
                                rturn.store(usize::MAX, Ordering::Release);
                                return got;
                            }
                        }
                    }
                    rturn.fetch_add(1, Ordering::AcqRel);
                }
            })
        })
        .collect();
    drop(rx);
    for s in senders {
        s.join().unwrap();
    }
    let mut all: Vec<(usize, u64)> = Vec::new();
    for r in receivers {
        let got = r.join().unwrap();
        let mut last = [None::<u64>; SENDERS];
        for &(p, i) in &got {
            assert!(last[p].map_or(true, |l| l < i), "sender {p} out of order");
            last[p] = Some(i);
        }
        all.extend(got);
    }
    assert_eq!(all.len() as u64, total, "lost or doubled messages");
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len() as u64, total, "a message delivered twice");
}
