//! Async fan-out: a logbus ring read by three tasks against `tokio::sync::broadcast`,
//! interleaved A B A B ... on one tokio multi-thread runtime (2 workers).
//!
//! One producer thread publishes `FANOUT_BENCH_ENTRIES` u64 values; three tasks each read
//! every one, in order, and assert the exact count and the ordered checksum
//! (`logbus_comparison::Tally`). logbus: a `Ring` with three gating readers (the form a user
//! picks for lossless async fan-out: the producer waits for the slowest reader, nothing is
//! copied but the reads), read with `Reader::read_batch_async(&mut out, 64)` (rows `batch`)
//! or `Reader::read_async` (rows `single`); the producer calls `publish_batch` with 64
//! values, or `publish`. tokio: a `broadcast` channel whose values are chunks of up to 64
//! (rows `batch`: an array with its length, cloned to each receiver as logbus clones into
//! each reader's `Vec`) or single values; the producer sends, waiting (spin, then yield) while
//! `Sender::len()` says the channel is full, so no receiver lags (a lag fails the run). Both
//! rings hold 1024 values (16 chunks in the tokio batch row). The producers end by dropping
//! their handle, which ends the readers, so a loss cannot hang a run; `LOGBUS_BENCH_LOSE=ours`
//! (or `theirs`) makes that side skip its middle value and the run must panic.
//!
//! Two knobs isolate the read side: `FANOUT_BENCH_PRODUCER=spin` makes the logbus producer
//! wait as the tokio one does (`try_publish_batch`, spin, then yield; never parking), and
//! `FANOUT_BENCH_READ=run` makes the batch readers borrow runs in place
//! (`Reader::read_run_async`) instead of cloning into a `Vec`.
//!
//! ```text
//! scripts/bench -p logbus-comparison --bench fanout_async_vs_tokio
//! FANOUT_BENCH_ENTRIES=4000000 FANOUT_BENCH_PAIRS=9 FANOUT_BENCH_ONLY=batch scripts/bench -p logbus-comparison --bench fanout_async_vs_tokio
//! ```

use std::thread;
use std::time::Instant;

use logbus::ring::{ReadError, Ring, RingConfig, Start};
use logbus_comparison::{env_u64 as env, print_row, Pairs, Side, Source, Tally};
use tokio::sync::broadcast;

const CAPACITY: usize = 1024;
const READERS: usize = 3;
const BATCH: usize = 64;

/// A batch on the tokio side: up to 64 values and how many.
#[derive(Clone, Copy)]
struct Chunk {
    len: usize,
    values: [u64; BATCH],
}

/// Spin, then yield: the tokio producer's wait while the channel is full.
struct SpinYield(u32);

impl SpinYield {
    fn wait(&mut self) {
        if self.0 < 6 {
            for _ in 0..1 << self.0 {
                std::hint::spin_loop();
            }
        } else {
            thread::yield_now();
        }
        self.0 = (self.0 + 1).min(7);
    }
}

/// logbus: entries per second over the whole run (spawn to the last reader's end).
fn logbus_run(rt: &tokio::runtime::Runtime, entries: u64, batch: bool, row: &str) -> f64 {
    let want = Tally::of(0..entries);
    let (mut producer, ring) = Ring::<u64>::single_producer(RingConfig::new(CAPACITY)).unwrap();
    let readers: Vec<_> = (0..READERS)
        .map(|_| ring.gating_reader(Start::Tail).unwrap())
        .collect();
    drop(ring);
    let start = Instant::now();
    let tasks: Vec<_> = readers
        .into_iter()
        .map(|mut reader| {
            rt.spawn(async move {
                let mut tally = Tally::default();
                if batch && std::env::var("FANOUT_BENCH_READ").as_deref() == Ok("run") {
                    loop {
                        match reader.read_run_async(BATCH).await {
                            Ok(mut run) => (&mut run).for_each(|&v| tally.add(v)),
                            Err(ReadError::Closed) => break,
                            Err(e) => panic!("{e}"),
                        }
                    }
                } else if batch {
                    let mut out = Vec::with_capacity(BATCH);
                    loop {
                        out.clear();
                        match reader.read_batch_async(&mut out, BATCH).await {
                            Ok(_) => out.iter().for_each(|&v| tally.add(v)),
                            Err(ReadError::Closed) => break,
                            Err(e) => panic!("{e}"),
                        }
                    }
                } else {
                    loop {
                        match reader.read_async().await {
                            Ok(v) => tally.add(v),
                            Err(ReadError::Closed) => break,
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
                tally
            })
        })
        .collect();
    let spin = std::env::var("FANOUT_BENCH_PRODUCER").as_deref() == Ok("spin");
    let p = thread::spawn(move || {
        let mut source = Source::all(Side::Ours, entries);
        if batch {
            let mut buf = [0u64; BATCH];
            let mut vec = Vec::with_capacity(BATCH);
            loop {
                let n = source.fill(&mut buf);
                if n == 0 {
                    break;
                }
                vec.extend_from_slice(&buf[..n]);
                if spin {
                    let mut w = SpinYield(0);
                    while !vec.is_empty() {
                        if producer.try_publish_batch(&mut vec).unwrap() == 0 {
                            w.wait();
                        }
                    }
                } else {
                    producer.publish_batch(&mut vec).unwrap();
                }
            }
        } else {
            for v in source {
                producer.publish(v).unwrap();
            }
        }
    }); // dropping the producer closes the ring
    for t in tasks {
        let tally = rt.block_on(t).unwrap();
        tally.assert_in_order(Side::Ours, row, &want);
    }
    let secs = start.elapsed().as_secs_f64();
    p.join().unwrap();
    entries as f64 / secs
}

/// tokio broadcast: as `logbus_run`.
fn tokio_run(rt: &tokio::runtime::Runtime, entries: u64, batch: bool, row: &str) -> f64 {
    let want = Tally::of(0..entries);
    let start = Instant::now();
    let p;
    let tasks: Vec<_>;
    if batch {
        let cap = CAPACITY / BATCH;
        let (tx, _) = broadcast::channel::<Chunk>(cap);
        tasks = (0..READERS)
            .map(|_| {
                let mut rx = tx.subscribe();
                rt.spawn(async move {
                    let mut tally = Tally::default();
                    loop {
                        match rx.recv().await {
                            Ok(c) => c.values[..c.len].iter().for_each(|&v| tally.add(v)),
                            Err(broadcast::error::RecvError::Closed) => break,
                            Err(e) => panic!("{e}"),
                        }
                    }
                    tally
                })
            })
            .collect();
        p = thread::spawn(move || {
            let mut source = Source::all(Side::Theirs, entries);
            loop {
                let mut chunk = Chunk {
                    len: 0,
                    values: [0; BATCH],
                };
                chunk.len = source.fill(&mut chunk.values);
                if chunk.len == 0 {
                    break;
                }
                let mut w = SpinYield(0);
                while tx.len() >= cap {
                    w.wait();
                }
                tx.send(chunk).map_err(|_| ()).unwrap();
            }
        });
    } else {
        let (tx, _) = broadcast::channel::<u64>(CAPACITY);
        tasks = (0..READERS)
            .map(|_| {
                let mut rx = tx.subscribe();
                rt.spawn(async move {
                    let mut tally = Tally::default();
                    loop {
                        match rx.recv().await {
                            Ok(v) => tally.add(v),
                            Err(broadcast::error::RecvError::Closed) => break,
                            Err(e) => panic!("{e}"),
                        }
                    }
                    tally
                })
            })
            .collect();
        p = thread::spawn(move || {
            for v in Source::all(Side::Theirs, entries) {
                let mut w = SpinYield(0);
                while tx.len() >= CAPACITY {
                    w.wait();
                }
                tx.send(v).map_err(|_| ()).unwrap();
            }
        });
    }
    for t in tasks {
        let tally = rt.block_on(t).unwrap();
        tally.assert_in_order(Side::Theirs, row, &want);
    }
    let secs = start.elapsed().as_secs_f64();
    p.join().unwrap();
    entries as f64 / secs
}

fn main() {
    // `cargo bench` passes `--bench`; this harness has no options of its own.
    let entries = env("FANOUT_BENCH_ENTRIES", 2_000_000);
    let pairs = env("FANOUT_BENCH_PAIRS", 7) as usize;
    let only = std::env::var("FANOUT_BENCH_ONLY").unwrap_or_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    // For profiling one side alone: FANOUT_BENCH_SIDE=logbus or =tokio (no ratios then).
    let side = std::env::var("FANOUT_BENCH_SIDE").unwrap_or_default();
    println!(
        "async fan-out to {READERS} tasks, logbus ring (gating readers) vs tokio broadcast: \
         {entries} u64 values, capacity {CAPACITY}, {pairs} interleaved pairs, 2 tokio workers, \
         {} cores",
        thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "{:<24} {:>12} {:>12} {:>16}  bar >= 2.0",
        "row", "logbus M/s", "tokio M/s", "ratio (min-max)"
    );
    for batch in [true, false] {
        let row = if batch {
            format!("async fanout 3 batch {BATCH}")
        } else {
            "async fanout 3 single".to_string()
        };
        if !row.contains(&only) {
            continue;
        }
        if !side.is_empty() {
            for _ in 0..pairs {
                let t = if side == "logbus" {
                    logbus_run(&rt, entries, batch, &row)
                } else {
                    tokio_run(&rt, entries, batch, &row)
                };
                println!("{side} {row}: {:.1} M/s", t / 1e6);
            }
            continue;
        }
        let p = Pairs::interleave(
            pairs,
            || logbus_run(&rt, entries, batch, &row),
            || tokio_run(&rt, entries, batch, &row),
        );
        let (lo, hi) = p.ratio_range();
        println!(
            "{row:<24} {:>12.1} {:>12.1} {:>7.2} ({lo:.2}-{hi:.2})",
            p.ours_median() / 1e6,
            p.theirs_median() / 1e6,
            p.median_ratio()
        );
        print_row(&row, "tokio broadcast", &p);
    }
}
