//! `unbounded()` as crossbeam-channel's: sends never block, disconnection, iterators, `len`,
//! the batch forms, drops; and a stress test (order per sender, no loss, no duplicates).

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use logbus::queue::{
    unbounded, RecvTimeoutError, SendBatchError, SendBatchTimeoutError, SendError,
    SendTimeoutError, TryRecvError, TrySendError,
};

#[test]
fn sends_never_block_and_len_counts_everything() {
    let (tx, rx) = unbounded();
    for i in 0..10_000u32 {
        tx.send(i).unwrap();
    }
    assert_eq!(tx.try_send(10_000), Ok(()));
    assert_eq!(tx.send_timeout(10_001, Duration::ZERO), Ok(()));
    assert_eq!((tx.len(), rx.len()), (10_002, 10_002));
    assert!(!tx.is_full() && !rx.is_full() && !rx.is_empty());
    assert_eq!((tx.capacity(), rx.capacity()), (None, None));
    for i in 0..10_002 {
        assert_eq!(rx.try_recv(), Ok(i));
        assert_eq!(rx.len(), 10_001 - i as usize);
    }
    assert!(rx.is_empty());
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    assert_eq!(
        rx.recv_timeout(Duration::from_millis(1)),
        Err(RecvTimeoutError::Timeout)
    );
}

#[test]
fn disconnection_as_crossbeam() {
    // Senders gone: receivers drain, then `Disconnected`.
    let (tx, rx) = unbounded();
    let tx2 = tx.clone();
    tx.send(1).unwrap();
    tx2.send(2).unwrap();
    drop(tx);
    assert_eq!(rx.try_recv(), Ok(1));
    drop(tx2);
    assert_eq!(rx.recv(), Ok(2));
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    assert!(rx.recv().is_err());
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(1)),
        Err(RecvTimeoutError::Disconnected)
    );

    // Receivers gone: every send form hands the message back.
    let (tx, rx) = unbounded();
    drop(rx);
    assert_eq!(tx.send(1), Err(SendError(1)));
    assert_eq!(tx.try_send(2), Err(TrySendError::Disconnected(2)));
    assert_eq!(
        tx.send_timeout(3, Duration::from_secs(1)),
        Err(SendTimeoutError::Disconnected(3))
    );
    // A batch keeps what it could not send, in the caller's `Vec`.
    let mut batch = vec![4, 5];
    assert_eq!(tx.send_batch(&mut batch), Err(SendBatchError { sent: 0 }));
    assert_eq!(batch, [4, 5]);
    assert_eq!(
        tx.try_send_batch(&mut batch),
        Err(SendBatchError { sent: 0 })
    );
    assert_eq!(
        tx.send_batch_timeout(&mut batch, Duration::from_secs(1)),
        Err(SendBatchTimeoutError::Disconnected { sent: 0 })
    );
    assert_eq!(batch, [4, 5]);
}

#[test]
fn a_parked_receiver_wakes_on_a_send_and_on_disconnection() {
    let (tx, rx) = unbounded::<u8>();
    let waiter = thread::spawn(move || (rx.recv(), rx.recv()));
    // Generous and not asserted on: only makes parking before the send likely.
    thread::sleep(Duration::from_millis(20));
    tx.send(9).unwrap();
    thread::sleep(Duration::from_millis(20));
    drop(tx);
    let (first, second) = waiter.join().unwrap();
    assert_eq!(first, Ok(9));
    assert!(second.is_err());
}

#[test]
fn iterators_as_crossbeam() {
    let (tx, rx) = unbounded();
    for i in 0..100 {
        tx.send(i).unwrap();
    }
    assert_eq!(
        rx.try_iter().take(10).collect::<Vec<_>>(),
        (0..10).collect::<Vec<_>>()
    );
    assert_eq!(rx.try_iter().count(), 90);
    tx.send(100).unwrap();
    let feeder = thread::spawn(move || {
        for i in 101..200 {
            tx.send(i).unwrap();
        }
    });
    let rest: Vec<_> = rx.iter().collect();
    feeder.join().unwrap();
    assert_eq!(rest, (100..200).collect::<Vec<_>>());
    let (tx, rx) = unbounded();
    tx.send("a").unwrap();
    drop(tx);
    assert_eq!(rx.into_iter().collect::<Vec<_>>(), ["a"]);
}

#[test]
fn batch_forms() {
    let (tx, rx) = unbounded();
    let mut batch: Vec<u32> = (0..70).collect();
    assert_eq!(tx.try_send_batch(&mut batch), Ok(70));
    assert!(batch.is_empty());
    batch.extend(70..100);
    tx.send_batch(&mut batch).unwrap();
    let mut out = Vec::new();
    assert_eq!(rx.recv_batch(&mut out, 40), Ok(40));
    assert_eq!(rx.try_recv_batch(&mut out, 100), Ok(60));
    assert_eq!(out, (0..100).collect::<Vec<_>>());
    assert_eq!(rx.try_recv_batch(&mut out, 1), Err(TryRecvError::Empty));
    drop(tx);
    assert_eq!(
        rx.try_recv_batch(&mut out, 1),
        Err(TryRecvError::Disconnected)
    );
    assert!(rx.recv_batch(&mut out, 1).is_err());
}

struct Counted(Arc<AtomicUsize>);
impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn every_message_is_dropped_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    // Left in the queue when every handle goes, across several blocks.
    let (tx, rx) = unbounded();
    for _ in 0..200 {
        tx.send(Counted(Arc::clone(&drops))).unwrap();
    }
    for _ in 0..50 {
        drop(rx.recv().unwrap());
    }
    assert_eq!(drops.load(Ordering::Relaxed), 50);
    drop(rx);
    // Receivers gone: the queued messages stay until the senders go (as the bounded
    // flavour), and a refused send hands its message back.
    assert_eq!(tx.len(), 150);
    let refused = tx.send(Counted(Arc::clone(&drops))).unwrap_err();
    drop(refused);
    assert_eq!(drops.load(Ordering::Relaxed), 51);
    drop(tx);
    assert_eq!(drops.load(Ordering::Relaxed), 201);
}

#[test]
fn stress_order_per_sender_no_loss_no_duplicates() {
    const SENDERS: usize = 3;
    const RECEIVERS: usize = 3;
    const PER: u64 = 100_000;
    let (tx, rx) = unbounded::<(usize, u64)>();
    let senders: Vec<_> = (0..SENDERS)
        .map(|s| {
            let tx = tx.clone();
            thread::spawn(move || {
                let mut batch = Vec::new();
                for i in 0..PER {
                    if i % 7 == 0 {
                        batch.push((s, i));
                        if batch.len() == 5 {
                            tx.send_batch(&mut batch).unwrap();
                        }
                    } else {
                        tx.send_batch(&mut batch).unwrap();
                        tx.send((s, i)).unwrap();
                    }
                }
                tx.send_batch(&mut batch).unwrap();
            })
        })
        .collect();
    drop(tx);
    let receivers: Vec<_> = (0..RECEIVERS)
        .map(|r| {
            let rx = rx.clone();
            thread::spawn(move || {
                let mut last = [None::<u64>; SENDERS];
                let mut got = Vec::new();
                let mut out = Vec::new();
                loop {
                    let msgs: Vec<(usize, u64)> = if r == 0 {
                        out.clear();
                        match rx.recv_batch(&mut out, 16) {
                            Ok(_) => out.clone(),
                            Err(_) => break,
                        }
                    } else if r == 1 {
                        match rx.try_recv() {
                            Ok(m) => vec![m],
                            Err(TryRecvError::Empty) => {
                                thread::yield_now();
                                continue;
                            }
                            Err(TryRecvError::Disconnected) => break,
                        }
                    } else {
                        match rx.recv() {
                            Ok(m) => vec![m],
                            Err(_) => break,
                        }
                    };
                    for (s, i) in msgs {
                        assert!(last[s].map_or(true, |l| l < i), "sender {s} out of order");
                        last[s] = Some(i);
                        got.push((s, i));
                    }
                }
                got
            })
        })
        .collect();
    drop(rx);
    for s in senders {
        s.join().unwrap();
    }
    let mut seen = HashSet::new();
    for r in receivers {
        for m in r.join().unwrap() {
            assert!(seen.insert(m), "{m:?} received twice");
        }
    }
    assert_eq!(seen.len(), SENDERS * PER as usize, "messages lost");
}
