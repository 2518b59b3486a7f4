//! The logbus ring against the `disruptor` crate (v4.4), interleaved A B A B ...
//!
//! Workloads (u64 entries, capacity 1024): one producer and one or three readers, publishing
//! one entry at a time or in batches. logbus runs its public blocking API (`publish`,
//! `publish_with`, `Reader::read_run` — yield, then park); the disruptor runs its
//! event poller with the same spin→yield loop around `try_publish`/`poll` (its busy-spin
//! handlers collapse when threads outnumber cores, see BENCHMARKS.md). Each pair runs logbus
//! then the disruptor; the table shows each side's median throughput and the median of the
//! per-pair ratios (logbus / disruptor). Bar: ratio ≥ 1.0. Both sides publish the same way
//! (one entry at a time, or batches of `RING_BENCH_BATCH`: logbus `publish_with`, or
//! `publish_batch` with `RING_BENCH_BATCH_API=vec`; the disruptor `try_batch_publish`), and
//! each reader (one poller per reader on the disruptor's side) asserts the exact count and
//! the ordered checksum of every entry (`logbus_comparison::Tally`). `LOGBUS_BENCH_LOSE=ours`
//! (or `theirs`) makes that side's producer skip its middle entry: the run must then panic.
//! Readers end when the producer is dropped, so a loss cannot hang a run. Each workload also
//! prints a `ROW|…` line for `scripts/bench-table`.
//!
//! ```text
//! cargo bench -p logbus-comparison --bench ring_vs_disruptor
//! RING_BENCH_ENTRIES=4000000 RING_BENCH_PAIRS=9 RING_BENCH_BATCH=64 cargo bench -p logbus-comparison --bench ring_vs_disruptor
//! RING_BENCH_ONLY=batch cargo bench -p logbus-comparison --bench ring_vs_disruptor   # workloads whose name contains it
//! ```

use std::thread;
use std::time::{Duration, Instant};

use disruptor::{
    build_single_producer, BusySpin, EventPoller, Polling, Producer, SingleProducerBarrier,
};
use logbus::ring::{ReadError, Ring, RingConfig, Start};
use logbus_comparison::{env_u64 as env, print_row, Pairs, Side, Source, Tally};

const CAPACITY: usize = 1024;

/// Spin, then yield: the waiting loop both sides' callers use where a call can come back
/// empty-handed (the disruptor's `try_*`/`poll`).
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

#[derive(Clone, Copy)]
struct Workload {
    readers: usize,
    batch: usize,
}

impl Workload {
    fn name(&self) -> String {
        let mode = if self.batch > 1 {
            format!("batch {}", self.batch)
        } else {
            "single".into()
        };
        format!("1 -> {} readers, {mode}", self.readers)
    }
}

/// Entries per second through the slowest reader.
fn logbus_run(w: Workload, entries: u64) -> f64 {
    let (mut producer, ring) = Ring::<u64>::single_producer(RingConfig::new(CAPACITY)).unwrap();
    let readers: Vec<_> = (0..w.readers)
        .map(|_| ring.gating_reader(Start::Tail).unwrap())
        .collect();
    let want = Tally::of(0..entries);
    let mut src = Source::all(Side::Ours, entries);
    let start = Instant::now();
    let handles: Vec<_> = readers
        .into_iter()
        .map(|mut r| {
            let row = format!("ring {} (logbus)", w.name());
            thread::spawn(move || {
                let mut tally = Tally::default();
                let mut calls = 0u64;
                let spin = std::env::var_os("RING_BENCH_LOGBUS_SPIN").is_some();
                let max = env("RING_BENCH_READ_MAX", u64::MAX) as usize;
                let mut backoff = SpinYield(0);
                loop {
                    if spin {
                        match r.try_read_with(max, |_, v| tally.add(*v)) {
                            Ok(_) => backoff.0 = 0,
                            Err(logbus::ring::TryReadError::Closed) => break,
                            Err(_) => backoff.wait(),
                        }
                        continue;
                    }
                    match r.read_run(max) {
                        Ok(mut run) => {
                            for v in &mut run {
                                tally.add(*v);
                            }
                            calls += 1;
                        }
                        Err(ReadError::Closed) => break,
                        Err(e) => panic!("{e}"),
                    }
                }
                let took = start.elapsed();
                tally.assert_in_order(Side::Ours, &row, &want);
                if std::env::var_os("RING_BENCH_CALLS").is_some() {
                    eprintln!(
                        "logbus reader: {:.1} entries per call",
                        tally.count as f64 / calls as f64
                    );
                }
                took
            })
        })
        .collect();
    if w.batch > 1 && std::env::var("RING_BENCH_BATCH_API").as_deref() == Ok("vec") {
        // Batches moved in from a reused Vec (`publish_batch`).
        let mut batch = Vec::with_capacity(w.batch);
        loop {
            batch.extend(src.by_ref().take(w.batch));
            if batch.is_empty() {
                break;
            }
            producer.publish_batch(&mut batch).unwrap();
        }
    } else if w.batch > 1 {
        // The Disruptor-style batch publish: claim a run, write in place, publish once.
        let mut values = vec![0u64; w.batch];
        let mut published = 0u64;
        loop {
            let n = src.fill(&mut values);
            if n == 0 {
                break;
            }
            producer
                .publish_with(n, |seq| values[(seq - published) as usize])
                .unwrap();
            published += n as u64;
        }
    } else {
        for v in src {
            producer.publish(v).unwrap();
        }
    }
    drop(producer);
    let slowest = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .max()
        .unwrap();
    entries as f64 / slowest.as_secs_f64()
}

struct Event {
    value: u64,
}

fn disruptor_run(w: Workload, entries: u64) -> f64 {
    let builder = build_single_producer(CAPACITY, || Event { value: 0 }, BusySpin);
    let (first, builder) = builder.new_event_poller();
    let mut pollers = vec![first];
    if w.readers == 1 {
        return disruptor_drive(w, entries, builder.build(), pollers);
    }
    let (second, mut more) = builder.new_event_poller();
    pollers.push(second);
    for _ in 2..w.readers {
        let (p, b) = more.new_event_poller();
        pollers.push(p);
        more = b;
    }
    disruptor_drive(w, entries, more.build(), pollers)
}

fn disruptor_drive<P: Producer<Event>>(
    w: Workload,
    entries: u64,
    mut producer: P,
    pollers: Vec<EventPoller<Event, SingleProducerBarrier>>,
) -> f64 {
    let want = Tally::of(0..entries);
    let mut src = Source::all(Side::Theirs, entries);
    let start = Instant::now();
    let handles: Vec<_> = pollers
        .into_iter()
        .map(|mut poller| {
            let row = format!("ring {} (disruptor)", w.name());
            thread::spawn(move || {
                let mut tally = Tally::default();
                let mut calls = 0u64;
                let mut backoff = SpinYield(0);
                loop {
                    match poller.poll() {
                        Ok(mut events) => {
                            for e in &mut events {
                                tally.add(e.value);
                            }
                            calls += 1;
                            backoff.0 = 0;
                        }
                        Err(Polling::NoEvents) => backoff.wait(),
                        Err(Polling::Shutdown) => break,
                    }
                }
                let took = start.elapsed();
                tally.assert_in_order(Side::Theirs, &row, &want);
                if std::env::var_os("RING_BENCH_CALLS").is_some() {
                    eprintln!(
                        "disruptor poller: {:.1} entries per poll",
                        tally.count as f64 / calls as f64
                    );
                }
                took
            })
        })
        .collect();
    let mut backoff = SpinYield(0);
    if w.batch > 1 {
        let mut values = vec![0u64; w.batch];
        loop {
            let n = src.fill(&mut values);
            if n == 0 {
                break;
            }
            while producer
                .try_batch_publish(n, |iter| {
                    for (e, &v) in iter.zip(&values[..n]) {
                        e.value = v;
                    }
                })
                .is_err()
            {
                backoff.wait();
            }
            backoff.0 = 0;
        }
    } else {
        for v in src {
            while producer.try_publish(|e| e.value = v).is_err() {
                backoff.wait();
            }
            backoff.0 = 0;
        }
    }
    drop(producer);
    let slowest = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .max()
        .unwrap_or(Duration::ZERO);
    entries as f64 / slowest.as_secs_f64()
}

fn main() {
    // `cargo bench` passes `--bench`; this harness has no options of its own.
    let entries = env("RING_BENCH_ENTRIES", 2_000_000);
    let pairs = env("RING_BENCH_PAIRS", 7) as usize;
    let batch = env("RING_BENCH_BATCH", 64) as usize;
    let only = std::env::var("RING_BENCH_ONLY").unwrap_or_default();
    let workloads = [
        Workload {
            readers: 1,
            batch: 1,
        },
        Workload {
            readers: 3,
            batch: 1,
        },
        Workload { readers: 1, batch },
        Workload { readers: 3, batch },
    ];
    // For profiling one side alone: RING_BENCH_SIDE=logbus or =disruptor (no ratios then).
    let side = std::env::var("RING_BENCH_SIDE").unwrap_or_default();
    if !side.is_empty() {
        for w in workloads.iter().filter(|w| w.name().contains(&only)) {
            for _ in 0..pairs {
                let t = if side == "logbus" {
                    logbus_run(*w, entries)
                } else {
                    disruptor_run(*w, entries)
                };
                println!("{side} {}: {:.1} M/s", w.name(), t / 1e6);
            }
        }
        return;
    }
    println!(
        "logbus ring vs disruptor 4.4 (event poller, spin->yield): {entries} u64 entries, \
         capacity {CAPACITY}, {pairs} interleaved pairs, {} cores",
        thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "{:<28} {:>16} {:>16} {:>14}  bar >= 1.0",
        "workload", "logbus M/s", "disruptor M/s", "ratio (median)"
    );
    let mut all_pass = true;
    for w in workloads {
        if !w.name().contains(&only) {
            continue;
        }
        // One warm-up pair, not counted.
        logbus_run(w, entries / 4);
        disruptor_run(w, entries / 4);
        let p = Pairs::interleave(
            pairs,
            || logbus_run(w, entries) / 1e6,
            || disruptor_run(w, entries) / 1e6,
        );
        let ratio = p.median_ratio();
        let pass = ratio >= 1.0;
        all_pass &= pass;
        println!(
            "{:<28} {:>16.1} {:>16.1} {:>14.2}  {}",
            w.name(),
            p.ours_median(),
            p.theirs_median(),
            ratio,
            if pass { "ok" } else { "MISSED" }
        );
        print_row(
            &format!("ring {}", w.name()),
            "disruptor, event poller per reader",
            &p,
        );
        if std::env::var_os("RING_BENCH_VERBOSE").is_some() {
            let mut sorted = p.ratios();
            sorted.sort_by(|x, y| x.total_cmp(y));
            println!("    per-pair ratios (sorted): {sorted:.2?}");
        }
    }
    println!(
        "{}",
        if all_pass {
            "all bars hold"
        } else {
            "some bars missed"
        }
    );
}
