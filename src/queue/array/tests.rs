use super::waiting::FREED_BEFORE_REFILL;
use super::*;
use crate::sync::atomic::AtomicUsize as Counter;
use crate::sync::time;
use crate::sync::{thread, Arc};

struct Tracked(Arc<Counter>);
impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn an_owner_holds_back_only_behind_another_thread() {
    // One thread owning both sides: nothing can arrive while it spins.
    let ch = Channel::with_capacity(64);
    for i in 0..10 {
        ch.send(i, None).unwrap();
        assert_eq!(ch.recv(None), Ok(i));
    }
    assert!(!ch.recv_cache.trailing.load(Ordering::Relaxed));

    // A short run of another thread's messages, found by a blocking receive's first look.
    let ch = Arc::new(Channel::with_capacity(64));
    let tx = Arc::clone(&ch);
    crate::sync::thread::spawn(move || {
        tx.send(1, None).unwrap();
        tx.send(2, None).unwrap();
    })
    .join()
    .unwrap();
    assert_eq!(ch.recv(None), Ok(1));
    assert!(
        ch.recv_cache.trailing.load(Ordering::Relaxed),
        "2 of 64: trailing"
    );
    // The count of available messages covers the second message: no look, no pacing.
    assert_eq!(ch.recv(None), Ok(2));
    // A `try_` look never holds back, and clears the mark.
    assert_eq!(ch.try_recv(), Err(TryRecvError::Empty));
    assert!(!ch.recv_cache.trailing.load(Ordering::Relaxed));
}

#[test]
fn positions_ahead_cross_into_the_next_lap() {
    let ch = Channel::<u8>::with_capacity(5);
    let lap = ch.one_lap;
    assert_eq!(ch.advance(1, 3), 4);
    assert_eq!(ch.advance(3, 2), lap);
    assert_eq!(ch.advance(3, 3), lap + 1);
    assert_eq!(ch.advance(lap + 4, 4), 2 * lap + 3);
    assert_eq!(ch.advance(0, 5), lap, "a whole lap's run");
    assert_eq!(ch.freed_before_refill(), 2, "at most half the queue");
    assert_eq!(Channel::<u8>::with_capacity(1).freed_before_refill(), 0);
    assert_eq!(
        Channel::<u8>::with_capacity(1024).freed_before_refill(),
        FREED_BEFORE_REFILL
    );
}

#[test]
fn exact_capacity_and_positions_wrap_many_laps() {
    for cap in [1, 2, 3, 7, 8] {
        let ch = Channel::with_capacity(cap);
        for round in 0..(if cfg!(miri) { 5 } else { 50 }) {
            for i in 0..cap {
                ch.try_send(round * 100 + i).unwrap();
            }
            assert_eq!(ch.len(), cap);
            assert!(matches!(ch.try_send(0), Err(TrySendError::Full(0))));
            for i in 0..cap {
                assert_eq!(ch.try_recv(), Ok(round * 100 + i));
            }
            assert_eq!(ch.try_recv(), Err(TryRecvError::Empty));
            assert_eq!(ch.len(), 0);
        }
    }
}

#[test]
fn batches_stop_at_the_lap_end_and_continue() {
    let ch = Channel::with_capacity(5);
    ch.try_send(0u32).unwrap();
    ch.try_send(1).unwrap();
    assert_eq!(ch.try_recv(), Ok(0));
    assert_eq!(ch.try_recv(), Ok(1));
    let mut batch: Vec<u32> = (10..20).collect();
    assert_eq!(ch.try_send_batch(&mut batch).unwrap(), 5);
    assert_eq!(batch, (15..20).collect::<Vec<_>>());
    let mut out = Vec::new();
    assert_eq!(ch.try_recv_batch(&mut out, 4).unwrap(), 4);
    assert_eq!(out, vec![10, 11, 12, 13]);
    assert_eq!(ch.try_send_batch(&mut batch).unwrap(), 4);
    out.clear();
    assert_eq!(ch.try_recv_batch(&mut out, 100).unwrap(), 5);
    assert_eq!(out, vec![14, 15, 16, 17, 18]);
    assert_eq!(ch.try_recv_batch(&mut out, 1), Err(TryRecvError::Empty));
}

#[test]
fn disconnect_then_drain_then_disconnected() {
    let ch = Channel::with_capacity(2);
    ch.try_send(1).unwrap();
    assert!(ch.disconnect());
    assert!(!ch.disconnect());
    assert!(matches!(ch.try_send(2), Err(TrySendError::Disconnected(2))));
    assert_eq!(ch.try_recv(), Ok(1));
    assert_eq!(ch.try_recv(), Err(TryRecvError::Disconnected));
    assert_eq!(ch.recv(None), Err(RecvTimeoutError::Disconnected));
}

#[test]
fn queued_messages_are_dropped_once() {
    let drops = Arc::new(Counter::new(0));
    {
        let ch = Channel::with_capacity(3);
        for _ in 0..3 {
            ch.try_send(Tracked(Arc::clone(&drops))).unwrap();
        }
        drop(ch.try_recv().unwrap());
        assert_eq!(drops.load(Ordering::Relaxed), 1);
        ch.try_send(Tracked(Arc::clone(&drops))).unwrap();
        ch.disconnect();
        ch.discard_all();
        assert_eq!(drops.load(Ordering::Relaxed), 4);
    }
    assert_eq!(drops.load(Ordering::Relaxed), 4);
}

#[test]
fn batches_of_owned_messages_move_each_message_once() {
    let drops = Arc::new(Counter::new(0));
    let ch = Channel::with_capacity(4);
    ch.try_send(Tracked(Arc::clone(&drops))).unwrap();
    let mut batch: Vec<_> = (0..6).map(|_| Tracked(Arc::clone(&drops))).collect();
    // Three fit now; the other three stay in the batch, moved to its front.
    assert_eq!(ch.try_send_batch(&mut batch).unwrap(), 3);
    assert_eq!(batch.len(), 3);
    let mut out = Vec::new();
    assert_eq!(ch.try_recv_batch(&mut out, 10).unwrap(), 4);
    assert_eq!(drops.load(Ordering::Relaxed), 0);
    drop(out);
    assert_eq!(drops.load(Ordering::Relaxed), 4);
    // The next lap, from the first slot on.
    assert_eq!(ch.try_send_batch(&mut batch).unwrap(), 3);
    assert!(batch.is_empty());
    assert_eq!(ch.len(), 3);
    drop(ch);
    assert_eq!(drops.load(Ordering::Relaxed), 7);
}

#[test]
fn a_panicking_drop_leaves_the_rest_dropped_once() {
    struct Bomb(bool, Arc<Counter>);
    impl Drop for Bomb {
        fn drop(&mut self) {
            self.1.fetch_add(1, Ordering::Relaxed);
            if self.0 {
                panic!("boom");
            }
        }
    }
    let drops = Arc::new(Counter::new(0));
    let ch = Channel::with_capacity(4);
    ch.try_send(Bomb(false, Arc::clone(&drops))).unwrap();
    ch.try_send(Bomb(true, Arc::clone(&drops))).unwrap();
    ch.try_send(Bomb(false, Arc::clone(&drops))).unwrap();
    ch.disconnect();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ch.discard_all()));
    assert!(r.is_err());
    assert_eq!(drops.load(Ordering::Relaxed), 3);
    assert_eq!(ch.len(), 0);
    assert_eq!(ch.try_recv().err(), Some(TryRecvError::Disconnected));
}

#[test]
fn threads_pass_every_message_once() {
    let n = if cfg!(miri) { 200 } else { 20_000 };
    let ch = Arc::new(Channel::with_capacity(4));
    let producers: Vec<_> = (0..2)
        .map(|p| {
            let ch = Arc::clone(&ch);
            thread::spawn(move || {
                let mut batch = Vec::new();
                for i in 0..n {
                    if i % 3 == 0 {
                        batch.push(p * n + i);
                        ch.send_batch(&mut batch, None).unwrap();
                    } else {
                        ch.send(p * n + i, None).unwrap();
                    }
                }
            })
        })
        .collect();
    let consumer = {
        let ch = Arc::clone(&ch);
        thread::spawn(move || {
            let mut seen = vec![false; 2 * n];
            let mut last = [None::<usize>; 2];
            let mut out = Vec::new();
            let mut count = 0;
            while count < 2 * n {
                out.clear();
                ch.recv_batch(&mut out, 3, None).unwrap();
                for &m in &out {
                    assert!(!seen[m]);
                    seen[m] = true;
                    let p = m / n;
                    assert!(last[p].map_or(true, |l| l < m), "per-producer order");
                    last[p] = Some(m);
                    count += 1;
                }
            }
        })
    };
    for p in producers {
        p.join().unwrap();
    }
    consumer.join().unwrap();
    assert_eq!(ch.len(), 0);
}

#[test]
fn timed_operations_expire() {
    let ch = Channel::with_capacity(1);
    let soon = time::deadline_after(std::time::Duration::from_millis(5));
    assert_eq!(ch.recv(soon), Err(RecvTimeoutError::Timeout));
    ch.try_send(1).unwrap();
    let soon = time::deadline_after(std::time::Duration::from_millis(5));
    assert!(matches!(
        ch.send(2, soon),
        Err(SendTimeoutError::Timeout(2))
    ));
}

/// A receiver parked on an owned queue issues one `membarrier` per park, however often it
/// is woken to re-check (each call interrupts every CPU running a thread of the process).
#[test]
fn a_parked_owner_issues_one_heavy_fence_per_park() {
    let ch = Arc::new(Channel::<u32>::with_capacity(4));
    let rx = Arc::clone(&ch);
    let receiver = thread::spawn(move || {
        // The receiving side becomes this thread's.
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        let before = crate::sync::asym_fence::HEAVY_CALLS.with(|n| n.get());
        let got = rx.recv(None);
        let heavy = crate::sync::asym_fence::HEAVY_CALLS.with(|n| n.get()) - before;
        (got, heavy)
    });
    while !ch.receivers.has_waiters() {
        thread::yield_now();
    }
    assert!(!ch.owners.is_shared());
    // Wake-ups that find nothing: the parked receiver checks again each time.
    for _ in 0..20 {
        ch.receivers.notify_all();
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    ch.send(7, None).unwrap();
    let (got, heavy) = receiver.join().unwrap();
    assert_eq!(got, Ok(7));
    assert_eq!(heavy, 1, "one heavy fence for one park");
}
