//! Loom models of the ring, through its public API. Each stays within 5 threads (main
//! included) and capacity 2; payloads are loom `Arc`s so a leaked or doubly dropped value
//! fails the model.
#![cfg(logbus_loom)]

use logbus::ring::{
    LapPolicy, MultiProducer, ReadError, Ring, RingConfig, Start, TryPublishError, TryReadError,
};
use loom::sync::Arc;
use loom::thread;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(f);
}

/// One producer publishes two entries; a blocking reader sees both, in order, then
/// `Closed` once the producer is dropped. Key ordering: the producer's Release store of the
/// published cursor (`try_fast_one`) against the reader's Acquire load of it; Relaxed there
/// makes the reader's clone race the slot's write.
#[test]
fn single_producer_publish_and_read() {
    model(|| {
        let (mut producer, ring) = Ring::single_producer(RingConfig::new(2)).unwrap();
        let mut reader = ring.gating_reader(Start::Tail).unwrap();
        let t = thread::spawn(move || {
            producer.publish(Arc::new(10u64)).unwrap();
            producer.publish(Arc::new(11u64)).unwrap();
        });
        assert_eq!(*reader.read().unwrap(), 10);
        assert_eq!(*reader.read().unwrap(), 11);
        assert_eq!(reader.read().unwrap_err(), ReadError::Closed);
        t.join().unwrap();
    });
}

/// Two producers claim concurrently: the reader sees each entry exactly once, and the
/// per-slot tags make an out-of-order publish invisible until the gap is filled.
#[test]
fn two_producers_claiming() {
    model(|| {
        let (producer, ring) = Ring::multi_producer(RingConfig::new(2)).unwrap();
        let mut reader = ring.gating_reader(Start::Tail).unwrap();
        let ts: Vec<_> = (0..2u64)
            .map(|k| {
                let mut p = producer.clone();
                thread::spawn(move || p.publish(Arc::new(k)).unwrap())
            })
            .collect();
        drop(producer);
        let mut seen = [false; 2];
        for _ in 0..2 {
            let v = reader.read().unwrap();
            assert!(!seen[*v as usize], "entry seen twice");
            seen[*v as usize] = true;
        }
        assert_eq!(reader.read().unwrap_err(), ReadError::Closed);
        for t in ts {
            t.join().unwrap();
        }
    });
}

/// Capacity 2, three entries: the third wraps onto slot 0 and must wait for the gating
/// reader to pass it; the reader sees 0, 1, 2 in order and never a recycled slot's old value.
#[test]
fn wrap_around_at_capacity_two() {
    model(|| {
        let (mut producer, ring) = Ring::single_producer(RingConfig::new(2)).unwrap();
        let mut reader = ring.gating_reader(Start::Tail).unwrap();
        let t = thread::spawn(move || {
            let mut batch = vec![Arc::new(0u64), Arc::new(1), Arc::new(2)];
            producer.publish_batch(&mut batch).unwrap();
        });
        for want in 0..3 {
            assert_eq!(*reader.read().unwrap(), want);
        }
        t.join().unwrap();
    });
}

/// Gating: a producer may fail with `Full` but never overwrites an entry the gating reader
/// has not read; the reader sees every entry the producer reports as published. Key
/// ordering: the reader's Release store of its cursor (`Reader::commit`) against the
/// producer's Acquire load of it (`GateView::min_gate`); Relaxed there makes the overwrite
/// race the reader's clone. It needs the light fences modelled as on the membarrier build
/// (the shim's loom `asym_fence`): a `SeqCst` fence in each would order the two by itself.
#[test]
fn gating_holds_producer_back() {
    model(|| {
        let (mut producer, ring) = Ring::single_producer(RingConfig::new(2)).unwrap();
        let mut reader = ring.gating_reader(Start::Tail).unwrap();
        let t = thread::spawn(move || {
            let mut published = 0u64;
            for i in 0..3u64 {
                match producer.try_publish(Arc::new(i)) {
                    Ok(()) => published += 1,
                    Err(TryPublishError::Full(v)) => {
                        assert_eq!(*v, i);
                        break;
                    }
                    Err(_) => unreachable!("nobody closes"),
                }
            }
            published
        });
        let mut got = 0u64;
        loop {
            match reader.read() {
                Ok(v) => {
                    assert_eq!(*v, got);
                    got += 1;
                }
                Err(ReadError::Closed) => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(t.join().unwrap(), got);
        assert!(got >= 2);
    });
}

/// Drop-oldest mode: the producer laps a reader that is cloning; the reader never sees a torn
/// or wrong value (the payload names its sequence), and what it reads plus the lag it is told
/// adds up to exactly what was published.
#[test]
fn overwrite_racing_a_lagging_reader() {
    model(|| {
        let config = RingConfig::new(2).overflow(LapPolicy::DropOldest);
        let (mut producer, ring) = Ring::single_producer(config).unwrap();
        let mut reader = ring.reader(Start::Tail).unwrap();
        let t = thread::spawn(move || {
            for i in 0..4u64 {
                producer.publish(Arc::new(i)).unwrap();
            }
        });
        let (mut next, mut missed, mut got) = (0u64, 0u64, 0u64);
        loop {
            match reader.try_read() {
                Ok(v) => {
                    assert_eq!(*v, next, "value from another lap");
                    next += 1;
                    got += 1;
                }
                Err(TryReadError::Lagged(n)) => {
                    missed += n;
                    next += n;
                }
                Err(TryReadError::Empty) => thread::yield_now(),
                Err(TryReadError::Closed) => break,
                Err(e) => panic!("{e}"),
            }
        }
        t.join().unwrap();
        assert_eq!(got + missed, 4);
        assert!(got >= 2, "the last lap stays readable");
    });
}

/// `close` racing a reader that is parked (or about to park) on an empty ring: the reader
/// always wakes (loom reports a deadlock otherwise) and gets `Closed`. Key step: the close's
/// wake-up of parked readers (`finish_close`'s `notify_all`); without it this model
/// deadlocks. Taking out only that wake-up's fence is not caught here.
#[test]
fn close_racing_a_parked_reader() {
    model(|| {
        let (producer, ring) = Ring::<Arc<u64>>::multi_producer(RingConfig::new(2)).unwrap();
        let mut reader = ring.reader(Start::Tail).unwrap();
        let t = thread::spawn(move || reader.read());
        // Loom runs a thread that yields again only once another has moved: without this
        // the reader's spin round (a yield) lets `close` finish before it could park.
        thread::yield_now();
        ring.close();
        assert_eq!(t.join().unwrap().unwrap_err(), ReadError::Closed);
        drop(producer);
    });
}

/// `close` racing a single producer's publish: either the publish fails (value handed back)
/// or the reader sees the entry before `Closed` — never a published entry lost.
#[test]
fn close_racing_a_single_producer_publish() {
    model(|| {
        let (mut producer, ring) = Ring::single_producer(RingConfig::new(2)).unwrap();
        let mut reader = ring.gating_reader(Start::Tail).unwrap();
        let t = thread::spawn(move || {
            let ok = producer.publish(Arc::new(5u64)).is_ok();
            (ok, producer)
        });
        ring.close();
        let mut got = 0;
        loop {
            match reader.read() {
                Ok(v) => {
                    assert_eq!(*v, 5);
                    got += 1;
                }
                Err(ReadError::Closed) => break,
                Err(e) => panic!("{e}"),
            }
        }
        let (ok, producer) = t.join().unwrap();
        assert_eq!(got, ok as i32);
        drop(producer);
    });
}

/// A non-gating reader joins while the producer writes without slot locks (it knew of no
/// such reader): the overwrite floor keeps the new reader off every slot such a write can
/// touch, so loom sees no concurrent access to a value cell.
#[test]
fn reader_joins_while_producer_writes_unlocked() {
    model(|| {
        let (mut producer, ring) = Ring::<Arc<u64>>::single_producer(RingConfig::new(2)).unwrap();
        let joiner = ring.clone();
        let t = thread::spawn(move || {
            let mut reader = joiner.reader(Start::Oldest).unwrap();
            let mut last = None;
            loop {
                match reader.try_read() {
                    Ok(v) => {
                        assert!(last.map_or(true, |l| *v > l));
                        last = Some(*v);
                    }
                    Err(TryReadError::Lagged(_)) | Err(TryReadError::Empty) => thread::yield_now(),
                    Err(TryReadError::Closed) => break,
                    Err(e) => panic!("{e}"),
                }
            }
        });
        for i in 0..4u64 {
            producer.publish(Arc::new(i)).unwrap();
        }
        drop(producer);
        t.join().unwrap();
    });
}

/// Drop-oldest mode with two producers lapping a capacity-2 ring (three entries): a producer
/// that claims a slot whose previous lap is still being written waits for it; the reader sees
/// each value at most once, in sequence order, never a torn or foreign one, and what it reads
/// plus the lag it is told covers all three.
#[test]
fn two_producers_overwrite_with_a_reader() {
    model(|| {
        let config = RingConfig::new(2).overflow(LapPolicy::DropOldest);
        let (producer, ring) = Ring::multi_producer(config).unwrap();
        let mut reader = ring.reader(Start::Tail).unwrap();
        let ts: Vec<_> = (0..2u64)
            .map(|k| {
                let mut p = producer.clone();
                thread::spawn(move || {
                    p.publish(Arc::new(k * 10)).unwrap();
                    if k == 0 {
                        p.publish(Arc::new(1)).unwrap();
                    }
                })
            })
            .collect();
        drop(producer);
        let (mut got, mut missed, mut seen) = (0u64, 0u64, Vec::new());
        loop {
            match reader.read() {
                Ok(v) => {
                    assert!([0, 1, 10].contains(&*v), "foreign value");
                    assert!(!seen.contains(&*v), "value seen twice");
                    // Producer 0's entries keep their order.
                    assert!(!(*v == 0 && seen.contains(&1)), "0 after 1");
                    seen.push(*v);
                    got += 1;
                }
                Err(ReadError::Lagged(n)) => missed += n,
                Err(ReadError::Closed) => break,
                Err(e) => panic!("{e}"),
            }
        }
        for t in ts {
            t.join().unwrap();
        }
        assert_eq!(got + missed, 3);
    });
}

/// A gating reader joins while the single producer is publishing: from the position it was
/// given it sees every entry, in order, and the producer never overwrites one it has not read.
#[test]
fn gating_reader_joins_while_publishing() {
    model(|| {
        let (mut producer, ring) = Ring::<Arc<u64>>::single_producer(RingConfig::new(2)).unwrap();
        let joiner = ring.clone();
        let t = thread::spawn(move || {
            let mut reader = joiner.gating_reader(Start::Oldest).unwrap();
            let mut expect = reader.position();
            loop {
                match reader.read() {
                    Ok(v) => {
                        assert_eq!(*v, expect);
                        expect += 1;
                    }
                    Err(ReadError::Closed) => return expect,
                    Err(e) => panic!("{e}"),
                }
            }
        });
        for i in 0..3u64 {
            producer.publish(Arc::new(i)).unwrap();
        }
        drop(producer);
        assert_eq!(t.join().unwrap(), 3);
    });
}

/// The plain-data fast path (no drop glue: the producer writes runs without reading the old
/// values) racing a non-gating reader that joins mid-stream and a batch written in place:
/// every value the reader sees is the one published at its sequence.
#[test]
fn plain_data_fast_path_with_a_joining_reader() {
    model(|| {
        let (mut producer, ring) = Ring::<u64>::single_producer(RingConfig::new(2)).unwrap();
        let joiner = ring.clone();
        let t = thread::spawn(move || {
            let mut reader = joiner.reader(Start::Oldest).unwrap();
            loop {
                match reader.try_read_with(2, |seq, v| assert_eq!(*v, seq * 7)) {
                    Ok(_) | Err(TryReadError::Lagged(_)) => {}
                    Err(TryReadError::Empty) => thread::yield_now(),
                    Err(TryReadError::Closed) => break,
                    Err(e) => panic!("{e}"),
                }
            }
        });
        producer.publish(0).unwrap();
        producer.publish_with(2, |seq| seq * 7).unwrap();
        drop(producer);
        t.join().unwrap();
    });
}

/// Plain data in overwrite mode: the single producer writes slots without their tags while no
/// non-gating reader exists; one joins and reads while the producer laps it (under the slot
/// locks once it has seen the reader). Every value read is the one published at its sequence
/// (loom also checks no read overlaps a write), and what the reader reads plus the lag it is
/// told covers everything from where it joined.
#[test]
fn plain_data_overwrite_with_a_reader_joining_over_untagged_slots() {
    model(|| {
        let config = RingConfig::new(2).overflow(LapPolicy::DropOldest);
        let (mut producer, ring) = Ring::<u64>::single_producer(config).unwrap();
        producer.publish_with(2, |seq| seq * 7).unwrap();
        let joiner = ring.clone();
        let t = thread::spawn(move || {
            let mut reader = joiner.reader(Start::Oldest).unwrap();
            let start = reader.position();
            let (mut got, mut missed) = (0u64, 0u64);
            loop {
                match reader.try_read_with(2, |seq, v| assert_eq!(*v, seq * 7)) {
                    Ok((n, _)) => got += n as u64,
                    Err(TryReadError::Lagged(n)) => missed += n,
                    Err(TryReadError::Empty) => thread::yield_now(),
                    Err(TryReadError::Closed) => break,
                    Err(e) => panic!("{e}"),
                }
            }
            assert_eq!(start + got + missed, 5);
        });
        producer.publish(2 * 7).unwrap();
        producer.publish_with(2, |seq| seq * 7).unwrap();
        drop(producer);
        t.join().unwrap();
    });
}

/// Two producers lap a capacity-2 ring with no reader (nothing gates them): producer 0
/// publishes two entries, producer 1 one, so whoever claims sequence 2 writes slot 0 again,
/// possibly while the claimer of sequence 0 is still writing it. Key ordering: the lapping
/// producer's Acquire load of the slot's tag while it waits for the previous lap
/// (`Slot::write`, `wait_prev`), against that writer's Release store of the tag; Relaxed
/// there makes the two writes of the slot's cell race. A reader joining afterwards reads
/// distinct entries of the three, at least the last.
#[test]
fn two_producers_lap_with_no_reader() {
    model(|| {
        let (producer, ring) = Ring::multi_producer(RingConfig::new(2)).unwrap();
        let ts = lapping_producers(&producer);
        for t in ts {
            t.join().unwrap();
        }
        let mut reader = ring.reader(Start::Oldest).unwrap();
        drop(producer);
        let mut seen = Vec::new();
        loop {
            match reader.try_read() {
                Ok(v) => {
                    assert!([0, 1, 10].contains(&*v) && !seen.contains(&*v));
                    seen.push(*v);
                }
                Err(TryReadError::Closed) => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert!(!seen.is_empty(), "the last entry stays readable");
    });
}

/// As `two_producers_lap_with_no_reader`, with a gating reader that holds the producers back,
/// reads what it finds and leaves: from then on nothing gates them and they lap. While the
/// reader gates, its reads order the previous lap's writes before a lap (its cursor); once
/// it has left, only the slot's tag does. Key ordering: as in the model above (the lapping
/// producer's Acquire wait for the previous lap's tag); Relaxed there makes the writes race.
#[test]
fn two_producers_lap_after_their_gating_reader_leaves() {
    model(|| {
        let (producer, ring) = Ring::multi_producer(RingConfig::new(2)).unwrap();
        let mut reader = ring.gating_reader(Start::Tail).unwrap();
        let ts = lapping_producers(&producer);
        drop(producer);
        if let Ok(v) = reader.try_read() {
            assert!([0, 10].contains(&*v), "the first entry of either producer");
        }
        drop(reader);
        for t in ts {
            t.join().unwrap();
        }
    });
}

/// Producer 0 publishes 0 then 1, producer 1 publishes 10: three entries in two slots.
fn lapping_producers(producer: &MultiProducer<Arc<u64>>) -> Vec<thread::JoinHandle<()>> {
    (0..2u64)
        .map(|k| {
            let mut p = producer.clone();
            thread::spawn(move || {
                p.publish(Arc::new(k * 10)).unwrap();
                if k == 0 {
                    p.publish(Arc::new(1)).unwrap();
                }
            })
        })
        .collect()
}
