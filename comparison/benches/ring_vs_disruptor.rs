//! The logbus ring against the `disruptor` crate (v4.4), interleaved A B A B ...
//!
//! Workloads (u64 entries, capacity 1024): one producer and one or three readers, publishing
//! one entry at a time or in batches. logbus runs its public blocking API (`publish`,
//! `publish_with`, `Reader::read_run` — yield, then park); the disruptor runs its
//! event poller with the same spin→yield loop around `try_publish`/`poll` (its busy-spin
//! handlers collapse when threads outnumber cores, see BENCHMARKS.md). Each pair runs logbus
//! then the disruptor; the table shows each side's median throughput and the median of the
//! per-pair ratios (logbus / disruptor). Bar: ratio ≥ 1.0.
//!
//! ```text
//! cargo bench -p logbus-comparison --bench ring_vs_disruptor
//! RING_BENCH_ENTRIES=4000000 RING_BENCH_PAIRS=9 RING_BENCH_BATCH=64 cargo bench -p logbus-comparison --bench ring_vs_disruptor
//! RING_BENCH_ONLY=batch cargo bench -p logbus-comparison --bench ring_vs_disruptor   # workloads whose name contains it
//! ```

use std::hint::black_box;
use std::thread;
use std::time::{Duration, Instant};

use disruptor::{
    build_single_producer, BusySpin, EventPoller, Polling, Producer, SingleProducerBarrier,
};
use logbus::ring::{ReadError, Ring, RingConfig, Start};
use logbus_comparison::{env_u64 as env, Pairs};

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
    let start = Instant::now();
    let handles: Vec<_> = readers
        .into_iter()
        .map(|mut r| {
            thread::spawn(move || {
                let mut sum = 0u64;
                let mut count = 0u64;
                let mut calls = 0u64;
                let spin = std::env::var_os("RING_BENCH_LOGBUS_SPIN").is_some();
                let max = env("RING_BENCH_READ_MAX", u64::MAX) as usize;
                let mut backoff = SpinYield(0);
                loop {
                    if spin {
                        match r.try_read_with(max, |_, v| sum = sum.wrapping_add(*v)) {
                            Ok((n, _)) => {
                                count += n as u64;
                                backoff.0 = 0;
                            }
                            Err(logbus::ring::TryReadError::Closed) => break,
                            Err(_) => backoff.wait(),
                        }
                        continue;
                    }
                    match r.read_run(max) {
                        Ok(mut run) => {
                            for v in &mut run {
                                sum = sum.wrapping_add(*v);
                                count += 1;
                            }
                            calls += 1;
                        }
                        Err(ReadError::Closed) => break,
                        Err(e) => panic!("{e}"),
                    }
                }
                assert_eq!(count, entries);
                if std::env::var_os("RING_BENCH_CALLS").is_some() {
                    eprintln!(
                        "logbus reader: {:.1} entries per call",
                        count as f64 / calls as f64
                    );
                }
                black_box(sum);
                start.elapsed()
            })
        })
        .collect();
    if w.batch > 1 && std::env::var("RING_BENCH_BATCH_API").as_deref() == Ok("vec") {
        // Batches moved in from a reused Vec (`publish_batch`).
        let mut batch = Vec::with_capacity(w.batch);
        let mut i = 0;
        while i < entries {
            let end = (i + w.batch as u64).min(entries);
            batch.extend(i..end);
            producer.publish_batch(&mut batch).unwrap();
            i = end;
        }
    } else if w.batch > 1 {
        // The Disruptor-style batch publish: claim a run, write in place, publish once.
        let mut i = 0;
        while i < entries {
            let n = (w.batch as u64).min(entries - i);
            producer.publish_with(n as usize, |seq| seq).unwrap();
            i += n;
        }
    } else {
        for i in 0..entries {
            producer.publish(i).unwrap();
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
    let start = Instant::now();
    let handles: Vec<_> = pollers
        .into_iter()
        .map(|mut poller| {
            thread::spawn(move || {
                let mut sum = 0u64;
                let mut count = 0u64;
                let mut calls = 0u64;
                let mut backoff = SpinYield(0);
                loop {
                    match poller.poll() {
                        Ok(mut events) => {
                            for e in &mut events {
                                sum = sum.wrapping_add(e.value);
                                count += 1;
                            }
                            calls += 1;
                            backoff.0 = 0;
                        }
                        Err(Polling::NoEvents) => backoff.wait(),
                        Err(Polling::Shutdown) => break,
                    }
                }
                assert_eq!(count, entries);
                if std::env::var_os("RING_BENCH_CALLS").is_some() {
                    eprintln!(
                        "disruptor poller: {:.1} entries per poll",
                        count as f64 / calls as f64
                    );
                }
                black_box(sum);
                start.elapsed()
            })
        })
        .collect();
    let mut backoff = SpinYield(0);
    if w.batch > 1 {
        let mut i = 0;
        while i < entries {
            let n = (w.batch as u64).min(entries - i);
            let mut k = i;
            match producer.try_batch_publish(n as usize, |iter| {
                for e in iter {
                    e.value = k;
                    k += 1;
                }
            }) {
                Ok(_) => {
                    i += n;
                    backoff.0 = 0;
                }
                Err(_) => backoff.wait(),
            }
        }
    } else {
        let mut i = 0;
        while i < entries {
            match producer.try_publish(|e| e.value = i) {
                Ok(_) => {
                    i += 1;
                    backoff.0 = 0;
                }
                Err(_) => backoff.wait(),
            }
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
