//! Unit tests of the ring's unsafe core; Miri runs them (`ring::` filter), with counts
//! shrunk under `cfg(miri)`.

use super::slot::tag;
use super::*;
use crate::sync::atomic::AtomicUsize;
use std::thread;
use std::time::Duration;

const N: u64 = if cfg!(miri) { 200 } else { 20_000 };

fn sp<T>(cap: usize) -> (SingleProducer<T>, Ring<T>) {
    Ring::single_producer(RingConfig::new(cap)).unwrap()
}

#[test]
fn publish_then_read_in_order_with_wrap_around() {
    let (mut p, ring) = sp::<u64>(4);
    let mut r = ring.gating_reader(Start::Tail).unwrap();
    for lap in 0..5u64 {
        for i in 0..4 {
            p.try_publish(lap * 4 + i).unwrap();
        }
        assert!(matches!(p.try_publish(99), Err(TryPublishError::Full(99))));
        for i in 0..4 {
            assert_eq!(r.try_read(), Ok(lap * 4 + i));
        }
        assert_eq!(r.try_read(), Err(TryReadError::Empty));
    }
    assert_eq!(ring.cursor(), 20);
    assert_eq!(ring.len(), 4);
}

#[test]
fn multi_producer_publish_and_read() {
    let (mut p, ring) = Ring::<u64>::multi_producer(RingConfig::new(8)).unwrap();
    let mut q = p.clone();
    let mut r = ring.gating_reader(Start::Oldest).unwrap();
    p.publish(1).unwrap();
    q.publish(2).unwrap();
    assert_eq!(r.try_read(), Ok(1));
    assert_eq!(r.try_read(), Ok(2));
    assert_eq!(r.try_read(), Err(TryReadError::Empty));
    drop(p);
    assert!(!ring.is_closed());
    drop(q);
    assert!(ring.is_closed());
    assert_eq!(r.try_read(), Err(TryReadError::Closed));
}

#[test]
fn batches_publish_in_runs_and_read_in_runs() {
    let (mut p, ring) = sp::<String>(8);
    let mut r = ring.gating_reader(Start::Tail).unwrap();
    let mut batch: Vec<String> = (0..6).map(|i| i.to_string()).collect();
    p.publish_batch(&mut batch).unwrap();
    assert!(batch.is_empty());
    batch.extend((6..12).map(|i| i.to_string()));
    // Only 2 slots are free while the reader has not moved.
    assert_eq!(p.try_publish_batch(&mut batch), Ok(2));
    assert_eq!(batch, ["8", "9", "10", "11"]);
    let mut out = Vec::new();
    assert_eq!(r.try_read_batch(&mut out, 5), Ok(5));
    assert_eq!(out, ["0", "1", "2", "3", "4"]);
    assert_eq!(p.try_publish_batch(&mut batch), Ok(4));
    let mut seqs = Vec::new();
    let (n, last) = r
        .try_read_with(100, |seq, v: &String| {
            seqs.push(seq);
            v.len()
        })
        .unwrap();
    assert_eq!(n, 7);
    assert_eq!(last, Some(2));
    assert_eq!(seqs, (5..12).collect::<Vec<_>>());
}

#[test]
fn overwrite_reports_exact_lag_and_keeps_place() {
    let config = RingConfig::new(4).overflow(LapPolicy::DropOldest);
    let (mut p, ring) = Ring::<u64>::single_producer(config).unwrap();
    let mut r = ring.reader(Start::Tail).unwrap();
    assert!(ring.gating_reader(Start::Tail).is_err());
    for i in 0..3 {
        p.publish(i).unwrap();
    }
    assert_eq!(r.try_read(), Ok(0));
    for i in 3..13 {
        p.try_publish(i).unwrap();
    }
    // 13 published, 4 kept (9..13): the reader at 1 missed 1..9.
    assert_eq!(r.try_read(), Err(TryReadError::Lagged(8)));
    assert_eq!(r.position(), 9);
    let mut out = Vec::new();
    assert_eq!(r.try_read_batch(&mut out, 10), Ok(4));
    assert_eq!(out, [9, 10, 11, 12]);
    assert_eq!(r.try_read(), Err(TryReadError::Empty));
}

#[test]
fn non_gating_reader_on_blocking_ring_lags_behind_gating_one() {
    let (mut p, ring) = sp::<u64>(4);
    let mut g = ring.gating_reader(Start::Tail).unwrap();
    let mut slow = ring.reader(Start::Tail).unwrap();
    for i in 0..12 {
        p.publish(i).unwrap();
        assert_eq!(g.try_read(), Ok(i));
    }
    assert_eq!(slow.try_read(), Err(TryReadError::Lagged(8)));
    assert_eq!(slow.try_read(), Ok(8));
    assert!(slow.contains(11));
    assert!(!slow.contains(12));
    assert_eq!(slow.get(10), Ok(10));
    assert!(matches!(slow.get(3), Err(GetError::Evicted { .. })));
    assert_eq!(slow.get(12), Err(GetError::NotPublished { requested: 12 }));
    assert_eq!(g.get(12), Err(GetError::NotPublished { requested: 12 }));
    assert!(matches!(
        g.get(5),
        Err(GetError::Evicted { oldest: 12, .. })
    ));
}

#[test]
fn readers_join_at_a_sequence_and_leave() {
    let config = RingConfig::new(8).start_sequence(1000);
    let (mut p, ring) = Ring::<u64>::single_producer(config).unwrap();
    assert_eq!(p.next_sequence(), 1000);
    let g = ring.gating_reader(Start::Oldest).unwrap();
    for i in 1000..1006 {
        p.publish(i).unwrap();
    }
    let mut late = ring.reader(Start::At(1003)).unwrap();
    assert_eq!(late.try_read(), Ok(1003));
    assert_eq!(ring.reader_count(), 2);
    match ring.reader(Start::At(999)) {
        Err(Error::SequenceOutOfRange {
            requested: 999,
            oldest: 1000,
            newest: 1006,
        }) => {}
        other => panic!("unexpected {other:?}"),
    }
    assert!(ring.reader(Start::At(1007)).is_err());
    // The gating reader holds the producer at a full ring; leaving frees it.
    p.publish(1006).unwrap();
    p.publish(1007).unwrap();
    assert!(matches!(p.try_publish(1008), Err(TryPublishError::Full(_))));
    drop(g);
    assert_eq!(ring.reader_count(), 1);
    p.try_publish(1008).unwrap();
    let mut tail = ring.reader(Start::Tail).unwrap();
    assert_eq!(tail.position(), 1009);
    assert_eq!(tail.try_read(), Err(TryReadError::Empty));
}

#[test]
fn bad_configs_are_typed_errors() {
    for cap in [0, 1, 3, 6] {
        assert!(matches!(
            Ring::<u8>::single_producer(RingConfig::new(cap)),
            Err(Error::InvalidConfig {
                name: "capacity",
                ..
            })
        ));
    }
    assert!(matches!(
        Ring::<u8>::multi_producer(RingConfig::new(2).start_sequence(u64::MAX)),
        Err(Error::InvalidConfig {
            name: "start_sequence",
            ..
        })
    ));
}

#[test]
fn close_wakes_parked_reader_and_producer() {
    let (mut p, ring) = sp::<u64>(2);
    let mut r = ring.gating_reader(Start::Tail).unwrap();
    let reader = thread::spawn(move || {
        let first = r.read();
        (first, r)
    });
    p.publish(1).unwrap();
    let (first, mut r) = reader.join().unwrap();
    assert_eq!(first, Ok(1));
    p.publish(2).unwrap();
    p.publish(3).unwrap();
    let closer = ring.clone();
    let producer = thread::spawn(move || {
        let res = p.publish(4); // full: parks until close
        (res.map_err(PublishError::into_inner), p)
    });
    thread::sleep(Duration::from_millis(if cfg!(miri) { 1 } else { 20 }));
    closer.close();
    let (res, _p) = producer.join().unwrap();
    assert_eq!(res, Err(4));
    assert_eq!(r.read(), Ok(2));
    assert_eq!(r.read(), Ok(3));
    assert_eq!(r.read(), Err(ReadError::Closed));
    assert_eq!(
        r.read_timeout(Duration::from_millis(1)),
        Err(ReadTimeoutError::Closed)
    );
}

#[test]
fn timeouts_expire() {
    let (mut p, ring) = sp::<u64>(2);
    let mut r = ring.gating_reader(Start::Tail).unwrap();
    assert_eq!(
        r.read_timeout(Duration::from_millis(1)),
        Err(ReadTimeoutError::Timeout)
    );
    p.publish(1).unwrap();
    p.publish(2).unwrap();
    assert!(matches!(
        p.publish_timeout(3, Duration::from_millis(1)),
        Err(PublishTimeoutError::Timeout(3))
    ));
    let mut out = Vec::new();
    assert_eq!(
        r.read_batch_timeout(&mut out, 8, Duration::from_millis(1)),
        Ok(2)
    );
}

/// Counts drops; the payload also carries a value to check.
#[derive(Debug)]
struct Counted(u64, crate::sync::Arc<AtomicUsize>);

impl Clone for Counted {
    fn clone(&self) -> Self {
        self.1.fetch_add(1, Ordering::Relaxed);
        Counted(self.0, crate::sync::Arc::clone(&self.1))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.1.fetch_sub(1, Ordering::Relaxed);
    }
}

#[test]
fn every_value_dropped_exactly_once() {
    for overflow in [LapPolicy::Block, LapPolicy::DropOldest] {
        let live = crate::sync::Arc::new(AtomicUsize::new(0));
        let make = |i| {
            live.fetch_add(1, Ordering::Relaxed);
            Counted(i, crate::sync::Arc::clone(&live))
        };
        {
            let config = RingConfig::new(4).overflow(overflow);
            let (mut p, ring) = Ring::multi_producer(config).unwrap();
            let mut r = ring.reader(Start::Tail).unwrap();
            for i in 0..3 {
                p.publish(make(i)).unwrap();
            }
            assert_eq!(r.try_read().unwrap().0, 0);
            let mut batch: Vec<_> = (3..10).map(make).collect();
            if overflow == LapPolicy::Block {
                p.publish_batch(&mut batch).unwrap();
            } else {
                assert_eq!(p.try_publish_batch(&mut batch), Ok(7));
            }
            drop(r);
            ring.close();
            let refused = p.try_publish(make(99)).unwrap_err().into_inner();
            assert_eq!(refused.0, 99);
            drop(refused);
            // Four values remain in the ring; the rest were overwritten and dropped.
            assert_eq!(live.load(Ordering::Relaxed), 4);
        }
        assert_eq!(live.load(Ordering::Relaxed), 0, "{overflow:?}");
    }
}

#[test]
fn a_panicking_clone_releases_the_slot() {
    #[derive(Debug)]
    struct Bomb(bool);
    impl Clone for Bomb {
        fn clone(&self) -> Self {
            assert!(!self.0, "boom");
            Bomb(false)
        }
    }
    let config = RingConfig::new(2).overflow(LapPolicy::DropOldest);
    let (mut p, ring) = Ring::single_producer(config).unwrap();
    let mut r = ring.reader(Start::Tail).unwrap();
    p.publish(Bomb(true)).unwrap();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| r.try_read()));
    assert!(caught.is_err());
    // The writer must be able to lock the slot again.
    for _ in 0..4 {
        p.publish(Bomb(false)).unwrap();
    }
}

/// Drops as a no-op, except `Grenade(1)`, whose drop panics.
#[derive(Debug, Clone)]
struct Grenade(u64);

impl Drop for Grenade {
    fn drop(&mut self) {
        if self.0 == 1 && !thread::panicking() {
            panic!("drop of 1");
        }
    }
}

/// A two-slot single-producer ring holding `Grenade(0), Grenade(1)`, then a batch of 2 and 3
/// whose publish unwound from overwriting `Grenade(1)`; a reader that started at the tail.
fn ring_after_a_panicking_overwrite() -> (SingleProducer<Grenade>, Ring<Grenade>, Reader<Grenade>) {
    let config = RingConfig::new(2).overflow(LapPolicy::DropOldest);
    let (mut p, ring) = Ring::single_producer(config).unwrap();
    let mut batch = vec![Grenade(0), Grenade(1)];
    p.publish_batch(&mut batch).unwrap();
    let r = ring.reader(Start::Tail).unwrap();
    let mut batch = vec![Grenade(2), Grenade(3)];
    let caught =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.publish_batch(&mut batch)));
    assert!(caught.is_err());
    (p, ring, r)
}

#[test]
fn panicking_drop_of_an_overwritten_value_still_publishes_the_run() {
    let (_p, ring, mut r) = ring_after_a_panicking_overwrite();
    assert_eq!(ring.cursor(), 4);
    assert_eq!(r.try_read().map(|g| g.0), Ok(2));
    assert_eq!(r.try_read().map(|g| g.0), Ok(3));
    std::mem::forget(r.try_read());
}

/// A panicking drop of an overwritten value unwinds out of a single producer's publish;
/// the publish is still left (the close handshake), so a close afterwards lets readers
/// finish instead of waiting for a publish that never ends.
#[test]
fn a_close_after_a_panicking_drop_lets_readers_finish() {
    let (mut p, ring, mut r) = ring_after_a_panicking_overwrite();
    ring.close();
    assert_eq!(r.try_read().map(|g| g.0), Ok(2));
    assert_eq!(r.try_read().map(|g| g.0), Ok(3));
    assert_eq!(r.try_read().map(|g| g.0), Err(TryReadError::Closed));
    assert!(matches!(
        p.try_publish(Grenade(4)),
        Err(TryPublishError::Closed(_))
    ));
}

fn run_threads(multi: bool, producers: u64, readers: usize, overflow: LapPolicy, per: u64) {
    let config = RingConfig::new(8).overflow(overflow);
    let (mut handles, ring) = if multi {
        let (p, ring) = Ring::<u64>::multi_producer(config).unwrap();
        let ps: Vec<_> = (0..producers).map(|_| Ok(p.clone())).collect();
        (ps, ring)
    } else {
        let (p, ring) = Ring::<u64>::single_producer(config).unwrap();
        (vec![Err(p)], ring)
    };
    let gating = overflow == LapPolicy::Block;
    let rs: Vec<_> = (0..readers)
        .map(|i| {
            let mut r = if gating && i % 2 == 0 {
                ring.gating_reader(Start::Oldest).unwrap()
            } else {
                ring.reader(Start::Oldest).unwrap()
            };
            thread::spawn(move || {
                let mut last = [None::<u64>; 4];
                let (mut got, mut missed) = (0u64, 0u64);
                let mut out = Vec::new();
                loop {
                    out.clear();
                    match r.read_batch(&mut out, 3) {
                        Ok(_) => {
                            for v in &out {
                                let (p, i) = ((v >> 32) as usize, v & 0xffff_ffff);
                                assert!(last[p].map_or(true, |l| l < i), "order");
                                last[p] = Some(i);
                                got += 1;
                            }
                        }
                        Err(ReadError::Lagged(n)) => missed += n,
                        Err(ReadError::Closed) => return (got, missed, r.is_gating()),
                    }
                }
            })
        })
        .collect();
    let ps: Vec<_> = handles
        .drain(..)
        .enumerate()
        .map(|(k, h)| {
            thread::spawn(move || {
                let v = |i: u64| ((k as u64) << 32) | i;
                match h {
                    Ok(mut p) => (0..per).for_each(|i| p.publish(v(i)).unwrap()),
                    Err(mut p) => (0..per).for_each(|i| p.publish(v(i)).unwrap()),
                }
            })
        })
        .collect();
    for p in ps {
        p.join().unwrap();
    }
    if !multi {
        assert!(ring.is_closed());
    }
    let total = per * if multi { producers } else { 1 };
    for r in rs {
        let (got, missed, gating) = r.join().unwrap();
        assert_eq!(got + missed, total);
        if gating {
            assert_eq!(missed, 0);
        }
    }
}

#[test]
fn threads_single_producer_gating_and_not() {
    run_threads(false, 1, 2, LapPolicy::Block, N);
}

#[test]
fn threads_multi_producer_gating_and_not() {
    run_threads(true, 2, 2, LapPolicy::Block, N / 2);
}

#[test]
fn threads_overwrite() {
    run_threads(true, 2, 1, LapPolicy::DropOldest, N / 2);
    run_threads(false, 1, 2, LapPolicy::DropOldest, N);
}

#[test]
fn publish_with_writes_in_place_and_survives_a_panicking_maker() {
    let (mut p, ring) = sp::<String>(4);
    let mut r = ring.gating_reader(Start::Tail).unwrap();
    p.publish_with(3, |seq| format!("e{seq}")).unwrap();
    assert_eq!(p.try_publish_with(5, |seq| format!("e{seq}")), Ok(1));
    let mut out = Vec::new();
    assert_eq!(r.try_read_batch(&mut out, 10), Ok(4));
    assert_eq!(out, ["e0", "e1", "e2", "e3"]);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        p.publish_with(3, |seq| {
            assert!(seq < 5, "maker fails at 5");
            format!("e{seq}")
        })
    }));
    assert!(caught.is_err());
    // 4 was published, 5 and 6 were given back.
    assert_eq!(p.next_sequence(), 5);
    assert_eq!(r.try_read(), Ok("e4".to_string()));
    assert_eq!(r.try_read(), Err(TryReadError::Empty));
    p.publish_with(2, |seq| format!("e{seq}")).unwrap();
    assert_eq!(r.try_read(), Ok("e5".to_string()));
    ring.close();
    assert_eq!(
        p.publish_with(1, |_| String::new()),
        Err(BatchClosed { published: 0 })
    );
    assert_eq!(r.try_read(), Ok("e6".to_string()));
    assert_eq!(r.try_read(), Err(TryReadError::Closed));
}

#[test]
fn read_runs_borrow_in_place_and_commit_what_was_iterated() {
    let (mut p, ring) = sp::<String>(4);
    let mut r = ring.gating_reader(Start::Tail).unwrap();
    assert!(matches!(r.try_read_run(8), Err(TryReadError::Empty)));
    p.publish_with(4, |seq| format!("e{seq}")).unwrap();
    {
        let mut run = r.try_read_run(8).unwrap();
        assert_eq!(run.len(), 4);
        let firsts: Vec<&String> = (&mut run).take(3).collect();
        assert_eq!(firsts, ["e0", "e1", "e2"]);
        assert_eq!(run.next_sequence(), 3);
    }
    // Three were iterated: the ring has room for exactly three more.
    assert_eq!(r.position(), 3);
    assert_eq!(p.try_publish_with(8, |seq| format!("e{seq}")), Ok(3));
    let mut run = r.read_run(2).unwrap();
    let got: Vec<String> = (&mut run).cloned().collect();
    drop(run);
    assert_eq!(got, ["e3", "e4"]);
    drop(p);
    let mut rest = Vec::new();
    while let Ok(mut run) = r.read_run(usize::MAX) {
        rest.extend((&mut run).cloned());
    }
    assert_eq!(rest, ["e5", "e6"]);
}

#[test]
#[should_panic(expected = "gating reader")]
fn read_runs_need_a_gating_reader() {
    let (_p, ring) = sp::<u8>(2);
    let mut r = ring.reader(Start::Tail).unwrap();
    let _ = r.try_read_run(1);
}

#[test]
fn publish_with_plain_data_panicking_maker_publishes_the_written_prefix() {
    let (mut p, ring) = sp::<u64>(8);
    let mut r = ring.gating_reader(Start::Tail).unwrap();
    // Wrap once so the slots hold older tags, then fail in the middle of a run.
    p.publish_with(6, |seq| seq).unwrap();
    let mut out = Vec::new();
    r.try_read_batch(&mut out, 8).unwrap();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        p.publish_with(6, |seq| {
            assert!(seq < 9, "maker fails at 9");
            seq
        })
    }));
    assert!(caught.is_err());
    assert_eq!(p.next_sequence(), 9);
    out.clear();
    assert_eq!(r.try_read_batch(&mut out, 8), Ok(3));
    assert_eq!(out, [6, 7, 8]);
    p.publish_with(2, |seq| seq * 100).unwrap();
    assert_eq!(r.try_read(), Ok(900));
    assert_eq!(r.try_read(), Ok(1000));
}

/// A single producer of plain data leaves slot tags behind while no non-gating reader exists
/// (module docs of `slot`, "Stale tags"): readers that join later still read exactly what was
/// published, overwrites after they joined are seen with the exact lag, and a reader that
/// joins after another one left starts over cleanly.
#[test]
fn non_gating_readers_join_over_untagged_slots() {
    let config = RingConfig::new(4).overflow(LapPolicy::DropOldest);
    let (mut p, ring) = Ring::<u64>::single_producer(config).unwrap();
    p.publish_with(10, |seq| seq * 3).unwrap();
    // The producer may still claim up to its published limit (12) without seeing a new
    // reader, so the reader starts at the overwrite floor, 12 - 4.
    let mut r = ring.reader(Start::Oldest).unwrap();
    assert_eq!(r.position(), 8);
    assert_eq!(r.get(9), Ok(27));
    for seq in 8..10 {
        assert_eq!(r.try_read(), Ok(seq * 3));
    }
    assert_eq!(r.try_read(), Err(TryReadError::Empty));
    // Lapped by 10 entries (10 and 11 written untagged under the old limit, the rest under
    // the slot locks): 10..16 are gone, 16..20 are still there.
    p.publish_with(10, |seq| seq * 3).unwrap();
    assert_eq!(r.try_read(), Err(TryReadError::Lagged(6)));
    let mut out = Vec::new();
    assert_eq!(r.try_read_batch(&mut out, 10), Ok(4));
    assert_eq!(out, [48, 51, 54, 57]);
    drop(r);
    // Untagged again once the producer notices the reader left, then a new reader.
    for _ in 0..3 {
        p.publish_with(4, |seq| seq * 3).unwrap();
    }
    let mut r = ring.reader(Start::Oldest).unwrap();
    let first = r.position();
    assert_eq!(first, 28);
    assert_eq!(r.get(first), Ok(first * 3));
    assert_eq!(r.try_read(), Ok(first * 3));
    p.publish_with(5, |seq| seq * 3).unwrap();
    assert_eq!(r.try_read(), Err(TryReadError::Lagged(4)));
    assert_eq!(r.try_read(), Ok(33 * 3));
}

/// A gating reader's random access on a single-producer ring goes by the producer's cursor,
/// since plain-data slots may carry lagging tags.
#[test]
fn gating_get_on_untagged_slots() {
    let (mut p, ring) = sp::<u64>(4);
    let mut g = ring.gating_reader(Start::Tail).unwrap();
    for round in 0..3u64 {
        p.publish_with(4, |seq| seq + 100).unwrap();
        let base = round * 4;
        assert_eq!(g.get(base + 2), Ok(base + 102));
        assert!(g.contains(base + 3));
        assert_eq!(
            g.get(base + 4),
            Err(GetError::NotPublished {
                requested: base + 4
            })
        );
        let mut out = Vec::new();
        assert_eq!(g.try_read_batch(&mut out, 8), Ok(4));
        assert_eq!(out, [base + 100, base + 101, base + 102, base + 103]);
    }
}

/// Prefetching a run is only a hint: zero-sized and large entries read back the same.
#[test]
fn read_runs_of_zero_sized_and_large_entries() {
    let (mut p, ring) = sp::<()>(8);
    let mut g = ring.gating_reader(Start::Tail).unwrap();
    p.publish_with(6, |_| ()).unwrap();
    assert_eq!((&mut g.try_read_run(10).unwrap()).count(), 6);
    let (mut p, ring) = sp::<[u64; 20]>(8);
    let mut g = ring.gating_reader(Start::Tail).unwrap();
    p.publish_with(7, |seq| [seq; 20]).unwrap();
    assert_eq!(p.try_publish_with(7, |seq| [seq; 20]), Ok(1));
    let run: Vec<u64> = (&mut g.try_read_run(10).unwrap()).map(|v| v[19]).collect();
    assert_eq!(run, [0, 1, 2, 3, 4, 5, 6, 7]);
}

#[test]
fn a_reader_paces_itself_only_after_catching_up_with_a_short_run() {
    let (mut p, ring) = sp::<u64>(64);
    let mut gating = ring.gating_reader(Start::Tail).unwrap();
    let mut lagging = ring.reader(Start::Tail).unwrap();
    p.publish_with(20, |seq| seq).unwrap();
    // A run cut short by `max` did not reach the published end.
    assert_eq!(gating.try_read_with(5, |_, _| ()).unwrap().0, 5);
    assert!(!gating.paces_next());
    assert_eq!(lagging.try_read_with(5, |_, _| ()).unwrap().0, 5);
    assert!(!lagging.paces_next());
    // The rest (15 < 64 / 4) reaches it.
    assert_eq!(gating.try_read_with(100, |_, _| ()).unwrap().0, 15);
    assert!(gating.paces_next());
    assert_eq!(lagging.try_read_with(100, |_, _| ()).unwrap().0, 15);
    assert!(lagging.paces_next());
    // A blocking read paces once, then reads as usual.
    p.publish(20).unwrap();
    assert_eq!(gating.read(), Ok(20));
    assert_eq!(lagging.read(), Ok(20));
    // A long run (16 = 64 / 4) that reaches the published end is not short.
    p.publish_with(16, |seq| seq).unwrap();
    let run = gating.read_run(usize::MAX).unwrap();
    assert_eq!(run.len(), 16);
    drop(run);
    assert!(!gating.paces_next());
    assert_eq!(lagging.read_with(100, |_, _| ()).unwrap().0, 16);
    assert!(!lagging.paces_next());
}

/// `last_sequence` names the sequence each handle's last publish got, whichever path
/// published it (the one-entry fast path, a claimed run, `publish_with`).
#[test]
fn last_sequence_is_each_handles_own_last_publish() {
    let (mut sp, _ring) = Ring::single_producer(RingConfig::new(8)).unwrap();
    assert_eq!(sp.last_sequence(), None);
    sp.publish(1u64).unwrap();
    assert_eq!(sp.last_sequence(), Some(0));
    sp.publish_with(3, |s| s).unwrap();
    assert_eq!(sp.last_sequence(), Some(3));
    let mut batch = vec![7u64, 8];
    sp.publish_batch(&mut batch).unwrap();
    assert_eq!(sp.last_sequence(), Some(5));

    let (mut a, ring) =
        Ring::multi_producer(RingConfig::new(8).overflow(LapPolicy::DropOldest)).unwrap();
    let mut b = a.clone();
    a.publish(String::from("a0")).unwrap();
    b.publish(String::from("b0")).unwrap();
    a.try_publish(String::from("a1")).unwrap();
    assert_eq!((a.last_sequence(), b.last_sequence()), (Some(2), Some(1)));
    b.publish_timeout(String::from("b1"), std::time::Duration::from_secs(1))
        .unwrap();
    assert_eq!(b.last_sequence(), Some(3));
    assert_eq!(ring.cursor(), 4);
}

/// `get_run_with` reads a run by sequence without moving the cursor, and says why a run
/// stopped short: not yet published, or overwritten.
#[test]
fn get_run_with_reads_runs_and_says_why_it_stopped() {
    let (mut p, ring) =
        Ring::multi_producer(RingConfig::new(4).overflow(LapPolicy::DropOldest)).unwrap();
    let r = ring.reader(Start::Oldest).unwrap();
    for i in 0..3u64 {
        p.publish(i * 10).unwrap();
    }
    let mut seen = Vec::new();
    let (n, why) = r.get_run_with(1, 10, |s, v| seen.push((s, *v)));
    assert_eq!((n, why), (2, Some(GetError::NotPublished { requested: 3 })));
    assert_eq!(seen, [(1, 10), (2, 20)]);
    assert_eq!(r.get_run_with(0, 2, |_, _| ()), (2, None));
    for i in 3..7u64 {
        p.publish(i * 10).unwrap();
    }
    let (n, why) = r.get_run_with(2, 10, |_, _| ());
    assert_eq!(n, 0);
    assert!(matches!(why, Some(GetError::Evicted { requested: 2, .. })));
    assert_eq!(r.position(), 0, "the cursor does not move");
}

/// A gating reader's `get_run_with` reads published entries at or after its position
/// without moving it, and refuses what lies behind it.
#[test]
fn gating_get_run_with_reads_ahead_of_its_position() {
    let (p, ring) = Ring::multi_producer(RingConfig::new(4)).unwrap();
    let mut gate = ring.gating_reader(Start::Oldest).unwrap();
    let mut p = p;
    for i in 0..3u64 {
        p.publish(i + 100).unwrap();
    }
    let mut seen = Vec::new();
    let (n, why) = gate.get_run_with(1, 5, |s, v| seen.push((s, *v)));
    assert_eq!((n, why), (2, Some(GetError::NotPublished { requested: 3 })));
    assert_eq!(seen, [(1, 101), (2, 102)]);
    gate.try_read_with(2, |_, _| ()).unwrap();
    assert_eq!(gate.position(), 2);
    let (n, why) = gate.get_run_with(1, 5, |_, _| ());
    assert_eq!(n, 0);
    assert!(matches!(
        why,
        Some(GetError::Evicted {
            requested: 1,
            oldest: 2
        })
    ));
    assert_eq!(gate.get_run_with(2, 1, |_, _| ()), (1, None));
}

/// An announcing reader reads by sequence and by cursor like a non-gating reader that
/// joined at the start, is invisible to producers' views (no slot locks while idle), and
/// leaves its count at zero after every read, also a refused one.
#[test]
fn announcing_reader_reads_like_a_reader_from_the_start() {
    let (mut p, ring) =
        Ring::multi_producer(RingConfig::new(4).overflow(LapPolicy::DropOldest)).unwrap();
    let mut r = ring.announcing_reader().unwrap();
    assert_eq!(ring.reader_count(), 0, "not registered");
    for i in 0..3u64 {
        p.publish(format!("v{i}")).unwrap();
    }
    assert_eq!(r.get(1).as_deref(), Ok("v1"));
    let mut seen = Vec::new();
    assert_eq!(
        r.get_run_with(0, 5, |s, v| seen.push((s, v.clone()))),
        (3, Some(GetError::NotPublished { requested: 3 }))
    );
    assert_eq!(seen.len(), 3);
    assert_eq!(r.try_read().as_deref(), Ok("v0"));
    for i in 3..9u64 {
        p.publish(format!("v{i}")).unwrap();
    }
    // 0..5 are overwritten: refused by the announcement's floor (claim cursor 9 - 4).
    assert!(matches!(
        r.get(4),
        Err(GetError::Evicted { requested: 4, .. })
    ));
    let (n, why) = r.get_run_with(2, 5, |_, _| ());
    assert_eq!(n, 0);
    assert!(matches!(why, Some(GetError::Evicted { requested: 2, .. })));
    assert_eq!(r.try_read(), Err(TryReadError::Lagged(4)));
    assert_eq!(r.try_read().as_deref(), Ok("v5"));
    assert_eq!(r.get(8).as_deref(), Ok("v8"));
    assert_eq!(ring.shared.announced.load(Ordering::Relaxed), 0);
    drop(r);
    assert_eq!(ring.reader_count(), 0);
}

/// The ring's overflow words match topics' and the observer's; the old name still compiles,
/// in expressions and in patterns.
#[test]
#[allow(deprecated)]
fn overwrite_is_the_old_name_of_drop_oldest() {
    assert_eq!(LapPolicy::Overwrite, LapPolicy::DropOldest);
    assert!(matches!(LapPolicy::DropOldest, LapPolicy::Overwrite));
    let config = RingConfig::new(4).overflow(LapPolicy::Overwrite);
    let (_producer, ring) = Ring::<u64>::single_producer(config).unwrap();
    match ring.gating_reader(Start::Tail) {
        Err(crate::Error::InvalidConfig { value, .. }) => assert_eq!(value, "DropOldest"),
        other => panic!("{other:?}"),
    }
}

/// Plain values for the tests of `single_producer_plain`: `None` drops as a no-op.
type Boxed = Option<Box<u64>>;

fn boxed_ring(cap: usize, overflow: LapPolicy) -> (SingleProducer<Boxed>, Ring<Boxed>) {
    let plain = Some(Option::is_none as fn(&Boxed) -> bool);
    Ring::single_producer_plain(RingConfig::new(cap).overflow(overflow), plain).unwrap()
}

/// A single producer of plain values with drop glue writes runs untagged while only plain
/// values were ever published, and drops what it overwrites once an impure value was
/// published (through a run or a single publish); an announcing reader reads over the
/// lagging tags and is told exactly what was overwritten. Miri reports a leaked or doubly
/// dropped box.
#[test]
fn single_producer_plain_values_drop_once_and_read_over_stale_tags() {
    let (mut p, ring) = boxed_ring(4, LapPolicy::DropOldest);
    let r = ring.announcing_reader().unwrap();
    assert_eq!(ring.reader_count(), 0, "not registered");
    for _ in 0..3 {
        let mut plain = vec![None; 3];
        assert_eq!(p.try_publish_batch_known(&mut plain, true), Ok(3));
    }
    assert!(!ring.shared.may_be_impure());
    assert_eq!(r.get(8), Ok(None));
    assert!(matches!(
        r.get(4),
        Err(GetError::Evicted { requested: 4, .. })
    ));
    // A run with a box, then plain runs over it: the box is dropped when overwritten.
    let mut mixed = vec![None, Some(Box::new(10)), None];
    assert_eq!(p.try_publish_batch_known(&mut mixed, false), Ok(3));
    assert!(ring.shared.may_be_impure());
    assert_eq!(r.get(10), Ok(Some(Box::new(10))));
    let mut plain = vec![None; 4];
    assert_eq!(p.try_publish_batch_known(&mut plain, true), Ok(4));
    assert!(matches!(
        r.get(10),
        Err(GetError::Evicted { requested: 10, .. })
    ));
    // A single publish of a box, read back, then overwritten by a run.
    p.try_publish(Some(Box::new(16))).unwrap();
    assert_eq!(r.get(16), Ok(Some(Box::new(16))));
    let mut plain = vec![None; 4];
    assert_eq!(p.try_publish_batch_known(&mut plain, true), Ok(4));
    // Two boxes left in the ring for its drop.
    p.try_publish(Some(Box::new(21))).unwrap();
    let mut boxes = vec![Some(Box::new(22))];
    assert_eq!(p.try_publish_batch_known(&mut boxes, false), Ok(1));
    assert_eq!(r.get(22), Ok(Some(Box::new(22))));
    assert_eq!(ring.shared.announced.load(Ordering::Relaxed), 0);
}

/// A first publish that is not plain marks the ring impure even through the single-entry
/// fast path, so the plain runs after it drop the box they overwrite (Miri: no leak).
#[test]
fn single_producer_plain_fast_path_marks_impure() {
    let (mut p, ring) = boxed_ring(2, LapPolicy::DropOldest);
    let mut plain = vec![None; 2];
    assert_eq!(p.try_publish_batch_known(&mut plain, true), Ok(2));
    p.try_publish(Some(Box::new(2))).unwrap();
    assert!(ring.shared.may_be_impure());
    for _ in 0..2 {
        let mut plain = vec![None; 2];
        assert_eq!(p.try_publish_batch_known(&mut plain, true), Ok(2));
    }
}

/// `None` is the plain value.
fn counted_ring(cap: usize) -> (SingleProducer<Option<Counted>>, Ring<Option<Counted>>) {
    let plain = Some(Option::is_none as fn(&Option<Counted>) -> bool);
    Ring::single_producer_plain(RingConfig::new(cap).overflow(LapPolicy::DropOldest), plain)
        .unwrap()
}

/// Plain runs on a ring that holds values needing their drop (a partition's transaction
/// markers): the slots the single producer knows hold plain values are written untagged
/// (their tags lag), and each value needing its drop is dropped once, when a plain run, a
/// single publish or a run with such values overwrites it, or when the ring goes. Laps of
/// runs of every length up to the capacity, with such values at varying places.
#[test]
fn plain_runs_beside_values_needing_a_drop_stay_untagged_and_drop_each_once() {
    let live = Arc::new(AtomicUsize::new(0));
    let counted = || {
        live.fetch_add(1, Ordering::Relaxed);
        Some(Counted(0, Arc::clone(&live)))
    };
    let (mut p, ring) = counted_ring(8);
    // A value needing its drop at 0, then a plain run: written untagged (tags stay 0).
    p.try_publish(counted()).unwrap();
    let mut plain: Vec<_> = (0..4).map(|_| None).collect();
    assert_eq!(p.try_publish_batch_known(&mut plain, true), Ok(4));
    assert!(ring.shared.may_be_impure());
    assert_eq!(ring.shared.slot(0).tag(), tag(0));
    for seq in 1..5 {
        assert_eq!(
            ring.shared.slot(seq).tag(),
            0,
            "slot {seq} written untagged"
        );
    }
    let mut next = 5u64;
    for round in 0..if cfg!(miri) { 12 } else { 400 } {
        let len = 1 + round % 8;
        match round % 5 {
            0 => {
                p.try_publish(counted()).unwrap();
                next += 1;
            }
            1 => {
                // A run with values needing their drop at its ends.
                let mut mixed: Vec<_> = (0..len)
                    .map(|i| (i == 0 || i + 1 == len).then(counted).flatten())
                    .collect();
                assert_eq!(p.try_publish_batch_known(&mut mixed, false), Ok(len));
                next += len as u64;
            }
            _ => {
                let mut plain: Vec<_> = (0..len).map(|_| None).collect();
                assert_eq!(p.try_publish_batch_known(&mut plain, true), Ok(len));
                next += len as u64;
            }
        }
    }
    assert_eq!(ring.cursor(), next);
    // A lap of plain values: every value needing its drop is overwritten, dropped once.
    let mut plain: Vec<_> = (0..8).map(|_| None).collect();
    assert_eq!(p.try_publish_batch_known(&mut plain, true), Ok(8));
    assert_eq!(live.load(Ordering::Relaxed), 0);
    // Two more left for the ring's drop.
    p.try_publish(counted()).unwrap();
    let mut mixed = vec![None, counted(), None];
    assert_eq!(p.try_publish_batch_known(&mut mixed, false), Ok(3));
    assert_eq!(live.load(Ordering::Relaxed), 2);
    drop(p);
    drop(ring);
    assert_eq!(live.load(Ordering::Relaxed), 0);
}

/// An announcing reader reads while the single producer overwrites plain runs untagged
/// (`slot`, "Stale tags"): every value read is the one published at that sequence, and a
/// sequence the producer moved past is reported evicted, never read torn. Miri checks the
/// slot accesses for races.
#[test]
fn single_producer_announcing_reader_races_untagged_overwrites() {
    let (mut p, ring) = Ring::<u64>::single_producer_plain(
        RingConfig::new(4).overflow(LapPolicy::DropOldest),
        None,
    )
    .unwrap();
    let r = ring.announcing_reader().unwrap();
    let tail = ring.clone();
    let reader = thread::spawn(move || {
        for i in 0..N {
            // The oldest slots: the ones the producer overwrites next.
            let seq = tail.cursor().saturating_sub(4 - i % 2);
            match r.get(seq) {
                Ok(v) => assert_eq!(v, seq * 7),
                Err(GetError::Evicted { .. } | GetError::NotPublished { .. }) => {}
            }
        }
    });
    let mut sent = 0;
    while sent < N {
        let mut run: Vec<u64> = (sent..sent + 3).map(|s| s * 7).collect();
        sent += p.try_publish_batch_known(&mut run, true).unwrap() as u64;
    }
    reader.join().unwrap();
}

/// Runs of 3 through an 8-slot ring with a gating reader: after the first claim refreshes
/// the limit, runs that fit under it take the straight-line publish
/// (`Sequencer::publish_made_fast`), and each asks for the next run's lines for writing,
/// across the wrap and up to the limit; every value reads back once, in order.
#[test]
fn single_producer_runs_through_the_straight_line_path_wrap_in_order() {
    let (mut p, ring) = sp::<u64>(8);
    let mut r = ring.gating_reader(Start::Tail).unwrap();
    let mut next = 0u64;
    let mut out = Vec::new();
    for _ in 0..if cfg!(miri) { 10 } else { 200 } {
        let mut batch: Vec<u64> = (next..next + 3).collect();
        let sent = p.try_publish_batch(&mut batch).unwrap();
        next += sent as u64;
        match r.try_read_batch(&mut out, 8) {
            Ok(_) | Err(TryReadError::Empty) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    while r.try_read_batch(&mut out, 8) != Err(TryReadError::Empty) {}
    assert_eq!(out, (0..next).collect::<Vec<_>>());
    // The prefetch itself, over empty, reversed, wrapping and oversized ranges: a hint
    // that changes nothing.
    let slots = &ring.shared.slots;
    for (from, to) in [
        (5, 5),
        (7, 3),
        (6, 11),
        (0, 1 << 40),
        (u64::MAX - 2, u64::MAX),
    ] {
        slots.prefetch_write_run(from, to);
    }
    assert_eq!(ring.cursor(), next);
}
