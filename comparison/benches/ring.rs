//! Criterion benches of the ring, for profiling (`perf record` on
//! `cargo bench -p logbus-comparison --bench ring -- --profile-time 5 <filter>`). Single-threaded round trips isolate the cost of each
//! operation; the threaded SPSC run shows the hand-off. For comparisons with peers use the
//! interleaved harness `ring_vs_disruptor` instead. Each bench asserts what it read: the
//! round trips the value just published (or the batch's sum), the threaded run the count
//! and ordered checksum of every entry.

use std::hint::black_box;
use std::thread;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use logbus::ring::{LapPolicy, ReadError, Ring, RingConfig, Start};
use logbus_comparison::{Side, Tally};

/// The harness itself: a loop that does nothing but move a value (the baseline).
fn baseline(c: &mut Criterion) {
    let mut g = c.benchmark_group("baseline");
    g.throughput(Throughput::Elements(1));
    g.bench_function("black_box", |b| {
        let mut i = 0u64;
        b.iter(|| {
            i += 1;
            black_box(i)
        })
    });
    g.finish();
}

/// Publish then read on one thread: the cost of the two operations without contention.
fn round_trip(c: &mut Criterion) {
    let mut g = c.benchmark_group("round_trip");
    g.throughput(Throughput::Elements(1));
    for (name, overflow, gating) in [
        ("gating", LapPolicy::Block, true),
        ("non_gating", LapPolicy::Block, false),
        ("overwrite", LapPolicy::DropOldest, false),
    ] {
        let config = RingConfig::new(1024).overflow(overflow);
        let (mut p, ring) = Ring::<u64>::single_producer(config).unwrap();
        let mut r = if gating {
            ring.gating_reader(Start::Tail).unwrap()
        } else {
            ring.reader(Start::Tail).unwrap()
        };
        g.bench_function(format!("sp_{name}"), |b| {
            let mut i = 0u64;
            b.iter(|| {
                p.publish(i).unwrap();
                let v = r.try_read().unwrap();
                assert_eq!(v, i);
                i += 1;
                black_box(v)
            })
        });
        let (mut p, ring) = Ring::<u64>::multi_producer(config).unwrap();
        let mut r = if gating {
            ring.gating_reader(Start::Tail).unwrap()
        } else {
            ring.reader(Start::Tail).unwrap()
        };
        g.bench_function(format!("mp_{name}"), |b| {
            let mut i = 0u64;
            b.iter(|| {
                p.publish(i).unwrap();
                let v = r.try_read().unwrap();
                assert_eq!(v, i);
                i += 1;
                black_box(v)
            })
        });
    }
    g.finish();
}

/// Batches of 64 on one thread.
fn batch_round_trip(c: &mut Criterion) {
    let mut g = c.benchmark_group("batch64_round_trip");
    g.throughput(Throughput::Elements(64));
    let (mut p, ring) = Ring::<u64>::single_producer(RingConfig::new(1024)).unwrap();
    let mut r = ring.gating_reader(Start::Tail).unwrap();
    let mut batch = Vec::with_capacity(64);
    g.bench_function("sp_gating", |b| {
        b.iter(|| {
            batch.extend(0..64u64);
            p.publish_batch(&mut batch).unwrap();
            let mut sum = 0;
            let (n, _) = r.try_read_with(64, |_, v| sum += v).unwrap();
            assert_eq!((n, sum), (64, (0..64).sum::<u64>()));
            black_box(sum)
        })
    });
    // The same round trip on the disruptor crate (its event poller), for scale.
    struct Ev(u64);
    let builder = disruptor::build_single_producer(1024, || Ev(0), disruptor::BusySpin);
    let (mut poller, builder) = builder.new_event_poller();
    let mut producer = builder.build();
    g.bench_function("disruptor_sp", |b| {
        use disruptor::Producer as _;
        b.iter(|| {
            let mut k = 0u64;
            producer.batch_publish(64, |it| {
                for e in it {
                    e.0 = k;
                    k += 1;
                }
            });
            let mut sum = 0;
            let mut n = 0;
            if let Ok(mut events) = poller.poll() {
                for e in &mut events {
                    sum += e.0;
                    n += 1;
                }
            }
            assert_eq!((n, sum), (64, (0..64).sum::<u64>()));
            black_box(sum)
        })
    });
    g.finish();
}

/// One producer thread, one reader thread, 1M entries per iteration.
fn spsc_threads(c: &mut Criterion) {
    const N: u64 = 1 << 20;
    let mut g = c.benchmark_group("spsc_threads");
    g.throughput(Throughput::Elements(N));
    g.sample_size(10);
    let want = Tally::of(0..N);
    g.bench_function("sp_gating_1M", |b| {
        b.iter_batched(
            || Ring::<u64>::single_producer(RingConfig::new(1024)).unwrap(),
            |(mut p, ring)| {
                let mut r = ring.gating_reader(Start::Tail).unwrap();
                let t = thread::spawn(move || {
                    let mut tally = Tally::default();
                    loop {
                        match r.read_with(usize::MAX, |_, v| tally.add(*v)) {
                            Ok(_) => {}
                            Err(ReadError::Closed) => return tally,
                            Err(e) => panic!("{e}"),
                        }
                    }
                });
                for i in 0..N {
                    p.publish(i).unwrap();
                }
                drop(p);
                let tally = t.join().unwrap();
                tally.assert_in_order(Side::Ours, "spsc_threads", &want);
                black_box(tally)
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(
    benches,
    baseline,
    round_trip,
    batch_round_trip,
    spsc_threads
);
criterion_main!(benches);
