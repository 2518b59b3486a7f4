//! Integration tests of `logbus::ring` through its public API: the stress runs (2 and 4
//! producers, 3 readers, ≥ 1M entries each), readers joining and leaving under load, close
//! with blocked producers and readers, and drop counting across threads.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use logbus::ring::{LapPolicy, ReadError, Ring, RingConfig, Start, TryReadError};

/// Entry value: producer id in the high bits, the producer's own counter in the low ones.
fn entry(producer: u64, i: u64) -> u64 {
    (producer << 40) | i
}

/// `producers` threads publish `total` entries between them (batches of varying size);
/// three gating readers each check that they see every entry exactly once, with dense
/// sequence numbers and every producer's entries in that producer's order.
fn stress(producers: u64, total: u64) {
    let per = total / producers;
    let (producer, ring) = Ring::<u64>::multi_producer(RingConfig::new(1024)).unwrap();
    let readers: Vec<_> = (0..3)
        .map(|_| ring.gating_reader(Start::Oldest).unwrap())
        .collect();
    let readers: Vec<_> = readers
        .into_iter()
        .enumerate()
        .map(|(k, mut r)| {
            thread::spawn(move || {
                let mut next_of = vec![0u64; producers as usize];
                let mut expected_seq = 0u64;
                let mut seen = 0u64;
                loop {
                    // Reader 0 reads one at a time, the others in runs of different sizes.
                    let max = [1, 7, 256][k];
                    let res = r.read_with(max, |seq, v| {
                        assert_eq!(seq, expected_seq, "sequences are dense and in order");
                        expected_seq += 1;
                        let (p, i) = ((v >> 40) as usize, v & ((1 << 40) - 1));
                        assert_eq!(i, next_of[p], "producer {p}'s order");
                        next_of[p] += 1;
                    });
                    match res {
                        Ok((n, _)) => seen += n as u64,
                        Err(ReadError::Closed) => break,
                        Err(e) => panic!("{e}"),
                    }
                }
                assert!(next_of.iter().all(|&n| n == per), "every entry once");
                seen
            })
        })
        .collect();
    let writers: Vec<_> = (0..producers)
        .map(|p| {
            let mut producer = producer.clone();
            thread::spawn(move || {
                let mut batch = Vec::with_capacity(64);
                let mut i = 0;
                while i < per {
                    let n = (1 + (i % 61)).min(per - i);
                    if n == 1 {
                        producer.publish(entry(p, i)).unwrap();
                    } else {
                        batch.extend((i..i + n).map(|i| entry(p, i)));
                        producer.publish_batch(&mut batch).unwrap();
                    }
                    i += n;
                }
            })
        })
        .collect();
    drop(producer);
    for w in writers {
        w.join().unwrap();
    }
    for r in readers {
        assert_eq!(r.join().unwrap(), per * producers);
    }
}

#[test]
fn stress_two_producers_three_readers() {
    stress(2, 1_000_000);
}

#[test]
fn stress_four_producers_three_readers() {
    stress(4, 1_000_000);
}

/// A single producer, one gating reader keeping it honest, and non-gating readers joining
/// and leaving while it runs: every reader's view is in order, and lag counts plus entries
/// read cover exactly the span it was attached for.
#[test]
fn readers_join_and_leave_under_load() {
    let total = 200_000u64;
    let (mut producer, ring) = Ring::<u64>::single_producer(RingConfig::new(64)).unwrap();
    let mut disk = ring.gating_reader(Start::Oldest).unwrap();
    let gate = thread::spawn(move || {
        let mut n = 0;
        while let Ok(v) = disk.read() {
            assert_eq!(v, n);
            n += 1;
        }
        n
    });
    let joiners: Vec<_> = (0..2)
        .map(|k| {
            let ring = ring.clone();
            thread::spawn(move || {
                let mut sessions = 0;
                loop {
                    let mut r = match ring.reader(if k == 0 { Start::Tail } else { Start::Oldest })
                    {
                        Ok(r) => r,
                        Err(e) => panic!("{e}"),
                    };
                    let start = r.position();
                    let (mut read, mut missed, mut last) = (0u64, 0u64, None);
                    for _ in 0..500 {
                        match r.try_read() {
                            Ok(v) => {
                                assert!(last.map_or(true, |l| v > l));
                                assert_eq!(v, start + read + missed);
                                last = Some(v);
                                read += 1;
                            }
                            Err(TryReadError::Lagged(n)) => missed += n,
                            Err(TryReadError::Empty) => thread::yield_now(),
                            Err(TryReadError::Closed) => return sessions,
                            Err(e) => panic!("{e}"),
                        }
                    }
                    assert_eq!(r.position(), start + read + missed);
                    sessions += 1;
                    drop(r);
                }
            })
        })
        .collect();
    for i in 0..total {
        producer.publish(i).unwrap();
    }
    drop(producer);
    assert_eq!(gate.join().unwrap(), total);
    for j in joiners {
        j.join().unwrap();
    }
    assert_eq!(ring.reader_count(), 0);
}

/// `close` wakes producers parked on a full ring and readers parked on an empty one.
#[test]
fn close_wakes_every_waiter() {
    let (producer, ring) = Ring::<u64>::multi_producer(RingConfig::new(2)).unwrap();
    let gating = ring.gating_reader(Start::Tail).unwrap();
    let start = Arc::new(Barrier::new(5));
    let mut blocked = Vec::new();
    for k in 0..2 {
        let mut p = producer.clone();
        let start = Arc::clone(&start);
        blocked.push(thread::spawn(move || {
            start.wait();
            // Two slots, nobody reading: at least the later publishes block until close.
            let mut refused = 0;
            for i in 0..4 {
                if p.publish(k * 10 + i).is_err() {
                    refused += 1;
                }
            }
            refused
        }));
    }
    let mut parked_readers = Vec::new();
    for _ in 0..2 {
        let mut r = ring.reader(Start::Tail).unwrap();
        let start = Arc::clone(&start);
        parked_readers.push(thread::spawn(move || {
            start.wait();
            let mut got = 0;
            loop {
                match r.read() {
                    Ok(_) => got += 1,
                    Err(ReadError::Lagged(_)) => {}
                    Err(ReadError::Closed) => return got,
                    Err(e) => panic!("{e}"),
                }
            }
        }));
    }
    start.wait();
    thread::sleep(Duration::from_millis(50));
    ring.close();
    let refused: u32 = blocked.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(refused >= 6, "at most two of eight publishes fit");
    for r in parked_readers {
        r.join().unwrap();
    }
    drop(gating);
    drop(producer);
}

#[derive(Debug)]
struct Tracked(Arc<AtomicUsize>);

impl Tracked {
    fn new(live: &Arc<AtomicUsize>) -> Self {
        live.fetch_add(1, Ordering::SeqCst);
        Tracked(Arc::clone(live))
    }
}

impl Clone for Tracked {
    fn clone(&self) -> Self {
        Tracked::new(&self.0)
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Every value (and every clone a reader made) is dropped exactly once, across threads, in
/// both overflow modes, including the values left in the ring when it goes.
#[test]
fn drop_counting_across_threads() {
    for overflow in [LapPolicy::Block, LapPolicy::DropOldest] {
        let live = Arc::new(AtomicUsize::new(0));
        {
            let config = RingConfig::new(16).overflow(overflow);
            let (producer, ring) = Ring::<Tracked>::multi_producer(config).unwrap();
            let mut r = ring.reader(Start::Oldest).unwrap();
            let reader = thread::spawn(move || {
                let mut kept = Vec::new();
                loop {
                    match r.read() {
                        Ok(v) => {
                            if kept.len() < 10 {
                                kept.push(v);
                            }
                        }
                        Err(ReadError::Lagged(_)) => {}
                        Err(ReadError::Closed) => return kept.len(),
                        Err(e) => panic!("{e}"),
                    }
                }
            });
            let writers: Vec<_> = (0..2)
                .map(|_| {
                    let mut p = producer.clone();
                    let live = Arc::clone(&live);
                    thread::spawn(move || {
                        for _ in 0..5_000 {
                            p.publish(Tracked::new(&live)).unwrap();
                        }
                    })
                })
                .collect();
            drop(producer);
            for w in writers {
                w.join().unwrap();
            }
            reader.join().unwrap();
            // The ring still holds its last 16 values.
            assert_eq!(live.load(Ordering::SeqCst), 16, "{overflow:?}");
        }
        assert_eq!(live.load(Ordering::SeqCst), 0, "{overflow:?}");
    }
}
