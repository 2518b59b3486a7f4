//! logbus topics against their peers, interleaved in one run (A B A B …): each pair runs
//! logbus then the peer, and the table gives each side's median and the median of the
//! per-pair ratios (logbus / peer). Records carry a u64 value and an i64 timestamp, no
//! key, no headers; the peers move a struct with the same two fields. Capacity 1024
//! (records in memory per partition, channel bound, ring size) everywhere.
//!
//! Rows (issue 12's bars in brackets):
//! - `1to1`: one partition, 1 producer → 1 consumer, each side with its batch API where it
//!   has one: logbus `send_slice_to` (64) and `poll_with` (up to 1024) + `commit_sync` per
//!   poll on a `Block` topic (`TOPICS_BENCH_SEND_TO=1`: `send_to` of `Payload`s instead;
//!   `TOPICS_BENCH_RECORD_API=1`: `send_batch` of `Record`s and `poll_into` instead, in
//!   this row and the next; `TOPICS_BENCH_KEYED=1`: records with a u64 key (the key equal
//!   to the value) on a `Topic<u64, u64>`, sent with `send_to` or `send_batch`, in this row
//!   and the next, to compare logbus builds on keyed records; the peers move no key);
//!   crossbeam-channel `send`/`recv` [≥ 2×]; the `disruptor` crate's
//!   batch publish (64) and event poller, spin→yield [≥ 0.8×].
//! - `fanout`: 1 producer → 3 groups on a `Block` topic, per reader; tokio broadcast with
//!   `try_recv` + spin→yield, the producer holding back (on the readers' published counts)
//!   so no reader lags [≥ 2×]; the `bus`
//!   crate, blocking `broadcast`/`recv` [≥ 2×].
//! - `scaling`: 1, 2, 4 producers → 8 partitions → one group of 2 consumers, records/s.
//! - `latency`: produce → poll one record at a time (the next is sent once the last was
//!   seen), p50/p99 one-way, against crossbeam-channel's send → recv.
//! - `replay`: seek to 0 and read 10M in-memory records (`poll_into`), records/s.
//! - `memory`: bytes allocated per in-memory record beyond its 16 bytes of fields.
//!
//! ```sh
//! cargo bench -p logbus-comparison --bench topics_vs_peers
//! TOPICS_BENCH_RECORDS=4000000 TOPICS_BENCH_PAIRS=9 cargo bench -p logbus-comparison --bench topics_vs_peers
//! TOPICS_BENCH_ONLY=1to1,fanout cargo bench -p logbus-comparison --bench topics_vs_peers
//! # logbus alone, no peers (A/B between logbus builds):
//! TOPICS_BENCH_SOLO=1 TOPICS_BENCH_ONLY=1to1 cargo bench -p logbus-comparison --bench topics_vs_peers
//! # every pair's figures (logbus/peer, M/s), in the order they ran:
//! TOPICS_BENCH_VERBOSE=1 TOPICS_BENCH_ONLY=1to1 cargo bench -p logbus-comparison --bench topics_vs_peers
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use disruptor::{build_single_producer, BusySpin, Polling, Producer as _};
use logbus::broker::{Broker, Overflow, TopicConfig, TopicPartition};
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::producer::{Payload, ProducerConfig, Record};
use logbus_comparison::{env_u64 as env, median, min_max};

/// Counts bytes allocated, for the memory row.
struct Counting;
static BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; it only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const CAP: usize = 1024;
const BATCH: usize = 64;

/// What the peers move: the same fields as a logbus record without key or headers.
#[derive(Debug, Clone, Copy, Default)]
struct Event {
    value: u64,
    timestamp: i64,
}

/// Spin, then yield (the loop around peers' `try_` calls).
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

/// A record key for the benchmark: `()` (no key; the default) or `u64` (`TOPICS_BENCH_KEYED=1`).
trait BenchKey: logbus::Codec + Clone + Send + Sync + 'static {
    /// The key of the record whose value is `v`.
    fn of(v: u64) -> Option<Self>;
    /// What the reader folds into its sum.
    fn fold(key: Option<&Self>) -> u64;
}

impl BenchKey for () {
    #[inline(always)]
    fn of(_: u64) -> Option<Self> {
        None
    }
    #[inline(always)]
    fn fold(_: Option<&Self>) -> u64 {
        0
    }
}

impl BenchKey for u64 {
    #[inline(always)]
    fn of(v: u64) -> Option<Self> {
        Some(v)
    }
    #[inline(always)]
    fn fold(key: Option<&Self>) -> u64 {
        key.copied().unwrap_or(0)
    }
}

/// Whether the logbus rows send records with a u64 key (`TOPICS_BENCH_KEYED=1`).
fn keyed() -> bool {
    std::env::var_os("TOPICS_BENCH_KEYED").is_some()
}

fn topic<K: BenchKey>(broker: &Broker, partitions: u32, records: usize) {
    broker
        .create_topic::<K, u64>(
            "t",
            TopicConfig::new(partitions)
                .records_in_memory(records)
                .overflow(Overflow::Block),
        )
        .unwrap();
}

fn group_consumer<K: BenchKey>(
    broker: &Broker,
    group: &str,
    tps: &[TopicPartition],
) -> logbus::Consumer<K, u64> {
    let mut c = broker
        .consumer::<K, u64>(
            ConsumerConfig::new()
                .group_id(group)
                .auto_offset_reset(OffsetReset::Earliest)
                .max_poll_records(CAP),
        )
        .unwrap();
    c.assign(tps).unwrap();
    c
}

/// Whether to use the record-moving APIs (`send_batch` of `Record`s, `poll_into`) instead
/// of `send_slice_to` and `poll_with` (`TOPICS_BENCH_RECORD_API=1`, for A/B).
fn record_api() -> bool {
    std::env::var_os("TOPICS_BENCH_RECORD_API").is_some()
}

/// Reads `n` records with `poll_with` (or `poll_into`) + `commit_sync`; returns when it
/// finished.
fn drain<K: BenchKey>(mut c: logbus::Consumer<K, u64>, n: u64) -> Instant {
    let mut out = Vec::with_capacity(CAP);
    let mut got = 0;
    let mut sum = 0u64;
    // Polls made (`TOPICS_BENCH_POLLS=1` prints the records per poll).
    let mut polls = 0u64;
    let record_api = record_api();
    while got < n {
        let k = if record_api {
            out.clear();
            let k = c.poll_into(&mut out, CAP, Duration::from_secs(10)).unwrap();
            for r in &out {
                sum = sum.wrapping_add(r.value ^ r.timestamp as u64 ^ K::fold(r.key.as_ref()));
            }
            k
        } else {
            c.poll_with(CAP, Duration::from_secs(10), |r| {
                sum = sum.wrapping_add(*r.value ^ r.timestamp as u64 ^ K::fold(r.key));
            })
            .unwrap()
        };
        got += k as u64;
        polls += 1;
        c.commit_sync().unwrap();
    }
    black_box(sum);
    if std::env::var_os("TOPICS_BENCH_POLLS").is_some() {
        eprintln!(
            "  {polls} polls, {:.1} records a poll",
            n as f64 / polls as f64
        );
    }
    Instant::now()
}

/// Whether the 1 → 1 producer uses `send_to` (an iterator of `Payload`s) instead of
/// `send_slice_to` (`TOPICS_BENCH_SEND_TO=1`, for A/B).
fn send_to_api() -> bool {
    std::env::var_os("TOPICS_BENCH_SEND_TO").is_some()
}

/// Sends `n` records to partition 0 with `send_slice_to` (or `send_to`, or `send_batch`),
/// in batches.
fn produce_to_0<K: BenchKey>(p: &logbus::Producer<K, u64>, n: u64) {
    if record_api() {
        return produce_batches(p, 0, n, Some(0));
    }
    let mut i = 0;
    // `send_slice_to` carries no key: keyed records go through `send_to`.
    if send_to_api() || keyed() {
        while i < n {
            let end = (i + BATCH as u64).min(n);
            p.send_to(
                "t",
                0,
                (i..end).map(|v| {
                    let mut r = Payload::new(v).timestamp(v as i64);
                    r.key = K::of(v);
                    r
                }),
            )
            .unwrap();
            i = end;
        }
        return;
    }
    // The batch built on the stack, as the disruptor's side fills its claimed slots.
    let mut batch = [(0i64, 0u64); BATCH];
    while i < n {
        let k = (BATCH as u64).min(n - i) as usize;
        for (j, r) in batch[..k].iter_mut().enumerate() {
            let v = i + j as u64;
            *r = (v as i64, v);
        }
        p.send_slice_to("t", 0, &batch[..k]).unwrap();
        i += k as u64;
    }
}

fn produce_batches<K: BenchKey>(
    p: &logbus::Producer<K, u64>,
    from: u64,
    n: u64,
    partition: Option<u32>,
) {
    let mut batch = Vec::with_capacity(BATCH);
    let mut i = from;
    while i < from + n {
        let end = (i + BATCH as u64).min(from + n);
        batch.extend((i..end).map(|v| {
            let mut r = Record::new("t", v).timestamp(v as i64);
            r.key = K::of(v);
            match partition {
                Some(p) => r.partition(p),
                None => r,
            }
        }));
        p.send_batch(&mut batch).unwrap();
        i = end;
    }
}

// ---- 1 -> 1 ----

fn logbus_1to1<K: BenchKey>(n: u64) -> f64 {
    let broker = Broker::in_memory();
    topic::<K>(&broker, 1, CAP);
    let c = group_consumer::<K>(&broker, "g", &[TopicPartition::new("t", 0)]);
    let p = broker.producer::<K, u64>();
    let start = Instant::now();
    let reader = thread::spawn(move || drain(c, n));
    produce_to_0(&p, n);
    let end = reader.join().unwrap();
    n as f64 / (end - start).as_secs_f64()
}

fn crossbeam_1to1(n: u64) -> f64 {
    let (tx, rx) = crossbeam_channel::bounded::<Event>(CAP);
    let start = Instant::now();
    let reader = thread::spawn(move || {
        let mut sum = 0u64;
        while let Ok(e) = rx.recv() {
            sum = sum.wrapping_add(e.value ^ e.timestamp as u64);
        }
        black_box(sum);
        Instant::now()
    });
    for v in 0..n {
        tx.send(Event {
            value: v,
            timestamp: v as i64,
        })
        .unwrap();
    }
    drop(tx);
    let end = reader.join().unwrap();
    n as f64 / (end - start).as_secs_f64()
}

fn disruptor_1to1(n: u64) -> f64 {
    let (mut poller, builder) =
        build_single_producer(CAP, Event::default, BusySpin).new_event_poller();
    let mut producer = builder.build();
    let start = Instant::now();
    let reader = thread::spawn(move || {
        let mut sum = 0u64;
        let mut count = 0u64;
        let mut backoff = SpinYield(0);
        loop {
            match poller.poll() {
                Ok(mut events) => {
                    for e in &mut events {
                        sum = sum.wrapping_add(e.value ^ e.timestamp as u64);
                        count += 1;
                    }
                    backoff.0 = 0;
                }
                Err(Polling::NoEvents) => backoff.wait(),
                Err(Polling::Shutdown) => break,
            }
        }
        assert_eq!(count, n);
        black_box(sum);
        Instant::now()
    });
    let mut backoff = SpinYield(0);
    let mut i = 0;
    while i < n {
        let k = (BATCH as u64).min(n - i);
        let mut v = i;
        match producer.try_batch_publish(k as usize, |iter| {
            for e in iter {
                e.value = v;
                e.timestamp = v as i64;
                v += 1;
            }
        }) {
            Ok(_) => {
                i += k;
                backoff.0 = 0;
            }
            Err(_) => backoff.wait(),
        }
    }
    drop(producer);
    let end = reader.join().unwrap();
    n as f64 / (end - start).as_secs_f64()
}

// ---- fan-out 1 -> 3 ----

fn logbus_fanout<K: BenchKey>(n: u64) -> f64 {
    let broker = Broker::in_memory();
    topic::<K>(&broker, 1, CAP);
    let tp = [TopicPartition::new("t", 0)];
    let consumers: Vec<_> = (0..3)
        .map(|g| group_consumer::<K>(&broker, &format!("g{g}"), &tp))
        .collect();
    let p = broker.producer::<K, u64>();
    let start = Instant::now();
    let readers: Vec<_> = consumers
        .into_iter()
        .map(|c| thread::spawn(move || drain(c, n)))
        .collect();
    produce_to_0(&p, n);
    let end = readers
        .into_iter()
        .map(|r| r.join().unwrap())
        .max()
        .unwrap();
    n as f64 / (end - start).as_secs_f64()
}

fn tokio_fanout(n: u64) -> f64 {
    let (tx, rx) = tokio::sync::broadcast::channel::<Event>(CAP);
    let rxs: Vec<_> = (0..3).map(|_| tx.subscribe()).collect();
    drop(rx);
    // Each reader's count, so the producer can hold back without `Sender::len` (which
    // takes the channel's lock and dominated the profile).
    let counts: Arc<Vec<AtomicU64>> = Arc::new((0..3).map(|_| AtomicU64::new(0)).collect());
    let start = Instant::now();
    let readers: Vec<_> = rxs
        .into_iter()
        .enumerate()
        .map(|(i, mut rx)| {
            let counts = Arc::clone(&counts);
            thread::spawn(move || {
                use tokio::sync::broadcast::error::TryRecvError;
                let mut sum = 0u64;
                let mut count = 0;
                let mut backoff = SpinYield(0);
                loop {
                    match rx.try_recv() {
                        Ok(e) => {
                            sum = sum.wrapping_add(e.value ^ e.timestamp as u64);
                            count += 1;
                            if count % 64 == 0 {
                                counts[i].store(count, Ordering::Release);
                            }
                            backoff.0 = 0;
                        }
                        Err(TryRecvError::Empty) => {
                            counts[i].store(count, Ordering::Release);
                            backoff.wait();
                        }
                        Err(TryRecvError::Closed) => break,
                        Err(TryRecvError::Lagged(k)) => panic!("lagged {k}"),
                    }
                }
                assert_eq!(count, n);
                black_box(sum);
                Instant::now()
            })
        })
        .collect();
    let mut backoff = SpinYield(0);
    let mut slowest = 0;
    for v in 0..n {
        // Hold back so that no reader lags (tokio broadcast never blocks a sender).
        while v - slowest >= CAP as u64 - 64 {
            slowest = counts
                .iter()
                .map(|c| c.load(Ordering::Acquire))
                .min()
                .unwrap_or(0);
            if v - slowest >= CAP as u64 - 64 {
                backoff.wait();
            }
        }
        backoff.0 = 0;
        tx.send(Event {
            value: v,
            timestamp: v as i64,
        })
        .unwrap();
    }
    drop(tx);
    let end = readers
        .into_iter()
        .map(|r| r.join().unwrap())
        .max()
        .unwrap();
    n as f64 / (end - start).as_secs_f64()
}

fn bus_fanout(n: u64) -> f64 {
    let mut bus = bus::Bus::<Event>::new(CAP);
    let rxs: Vec<_> = (0..3).map(|_| bus.add_rx()).collect();
    let start = Instant::now();
    let readers: Vec<_> = rxs
        .into_iter()
        .map(|mut rx| {
            thread::spawn(move || {
                let mut sum = 0u64;
                let mut count = 0;
                while let Ok(e) = rx.recv() {
                    sum = sum.wrapping_add(e.value ^ e.timestamp as u64);
                    count += 1;
                }
                assert_eq!(count, n);
                black_box(sum);
                Instant::now()
            })
        })
        .collect();
    for v in 0..n {
        bus.broadcast(Event {
            value: v,
            timestamp: v as i64,
        });
    }
    drop(bus);
    let end = readers
        .into_iter()
        .map(|r| r.join().unwrap())
        .max()
        .unwrap();
    n as f64 / (end - start).as_secs_f64()
}

// ---- scaling ----

fn logbus_scaling(producers: u64, n: u64) -> f64 {
    let broker = Broker::in_memory();
    topic::<()>(&broker, 8, CAP);
    let halves: Vec<Vec<_>> = (0..2u32)
        .map(|h| {
            (0..8u32)
                .filter(|p| p % 2 == h)
                .map(|p| TopicPartition::new("t", p))
                .collect()
        })
        .collect();
    let per = n / producers;
    let total = per * producers;
    let seen = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let readers: Vec<_> = halves
        .iter()
        .map(|tps| {
            let mut c = group_consumer::<()>(&broker, "g", tps);
            let seen = Arc::clone(&seen);
            thread::spawn(move || {
                let mut out = Vec::with_capacity(CAP);
                while seen.load(Ordering::Relaxed) < total {
                    out.clear();
                    let k = c
                        .poll_into(&mut out, CAP, Duration::from_millis(1))
                        .unwrap();
                    if k > 0 {
                        seen.fetch_add(k as u64, Ordering::Relaxed);
                        c.commit_sync().unwrap();
                    }
                }
                Instant::now()
            })
        })
        .collect();
    let writers: Vec<_> = (0..producers)
        .map(|i| {
            let p = broker
                .producer_with_config::<(), u64>(ProducerConfig::new().sticky_batch(BATCH as u32))
                .unwrap();
            thread::spawn(move || produce_batches(&p, i * per, per, None))
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let end = readers
        .into_iter()
        .map(|r| r.join().unwrap())
        .max()
        .unwrap();
    total as f64 / (end - start).as_secs_f64()
}

// ---- latency ----

fn pct(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// One-way produce → poll latencies, ns, sorted.
fn logbus_latency(samples: u64) -> Vec<u64> {
    let broker = Broker::in_memory();
    topic::<()>(&broker, 1, CAP);
    let mut c = group_consumer::<()>(&broker, "g", &[TopicPartition::new("t", 0)]);
    let p = broker.producer::<(), u64>();
    let origin = Instant::now();
    let seen = Arc::new(AtomicU64::new(0));
    let seen2 = Arc::clone(&seen);
    let reader = thread::spawn(move || {
        let mut lat = Vec::with_capacity(samples as usize);
        let mut out = Vec::with_capacity(16);
        while (lat.len() as u64) < samples {
            out.clear();
            c.poll_into(&mut out, 16, Duration::from_secs(10)).unwrap();
            let now = origin.elapsed().as_nanos() as u64;
            for r in &out {
                lat.push(now - r.value);
            }
            seen2.store(lat.len() as u64, Ordering::Release);
            c.commit_sync().unwrap();
        }
        lat
    });
    let mut backoff = SpinYield(0);
    for i in 0..samples {
        while seen.load(Ordering::Acquire) < i {
            backoff.wait();
        }
        backoff.0 = 0;
        let stamp = origin.elapsed().as_nanos() as u64;
        p.send(Record::new("t", stamp).timestamp(i as i64)).unwrap();
    }
    let mut lat = reader.join().unwrap();
    lat.sort_unstable();
    lat
}

fn crossbeam_latency(samples: u64) -> Vec<u64> {
    let (tx, rx) = crossbeam_channel::bounded::<Event>(CAP);
    let origin = Instant::now();
    let seen = Arc::new(AtomicU64::new(0));
    let seen2 = Arc::clone(&seen);
    let reader = thread::spawn(move || {
        let mut lat = Vec::with_capacity(samples as usize);
        while let Ok(e) = rx.recv() {
            lat.push(origin.elapsed().as_nanos() as u64 - e.value);
            seen2.store(lat.len() as u64, Ordering::Release);
        }
        lat
    });
    let mut backoff = SpinYield(0);
    for i in 0..samples {
        while seen.load(Ordering::Acquire) < i {
            backoff.wait();
        }
        backoff.0 = 0;
        let stamp = origin.elapsed().as_nanos() as u64;
        tx.send(Event {
            value: stamp,
            timestamp: i as i64,
        })
        .unwrap();
    }
    drop(tx);
    let mut lat = reader.join().unwrap();
    lat.sort_unstable();
    lat
}

// ---- replay ----

fn logbus_replay(n: u64) -> f64 {
    let broker = Broker::in_memory();
    topic::<()>(&broker, 1, (n as usize).next_power_of_two());
    let p = broker.producer::<(), u64>();
    produce_batches(&p, 0, n, Some(0));
    let tp = TopicPartition::new("t", 0);
    let mut c = broker
        .consumer::<(), u64>(ConsumerConfig::new().max_poll_records(CAP))
        .unwrap();
    c.assign(std::slice::from_ref(&tp)).unwrap();
    let mut out = Vec::with_capacity(CAP);
    let start = Instant::now();
    c.seek(&tp, 0).unwrap();
    let mut got = 0u64;
    let mut sum = 0u64;
    while got < n {
        out.clear();
        got += c.poll_into(&mut out, CAP, Duration::ZERO).unwrap() as u64;
        for r in &out {
            sum = sum.wrapping_add(r.value);
        }
    }
    black_box(sum);
    n as f64 / start.elapsed().as_secs_f64()
}

// ---- reporting ----

/// Runs `ours` and each peer interleaved `pairs` times; prints one row per peer.
fn compare(row: &str, pairs: u64, ours: &dyn Fn() -> f64, peers: &[(&str, &dyn Fn() -> f64, f64)]) {
    if std::env::var_os("TOPICS_BENCH_SOLO").is_some() {
        // logbus alone (A/B of logbus builds): every run's figure and the median.
        let v: Vec<f64> = (0..pairs).map(|_| ours()).collect();
        let each: Vec<String> = v.iter().map(|x| format!("{:.1}", x / 1e6)).collect();
        println!(
            "| {row} | {:.1} | (solo: {}) |",
            median(&v) / 1e6,
            each.join(" ")
        );
        return;
    }
    let mut mine = Vec::new();
    let mut theirs: Vec<Vec<f64>> = vec![Vec::new(); peers.len()];
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); peers.len()];
    for _ in 0..pairs {
        for (i, (_, peer, _)) in peers.iter().enumerate() {
            let a = ours();
            let b = peer();
            mine.push(a);
            theirs[i].push(b);
            ratios[i].push(a / b);
        }
    }
    for (i, (name, _, bar)) in peers.iter().enumerate() {
        let r = median(&ratios[i]);
        let (lo, hi) = min_max(&ratios[i]);
        println!(
            "| {row} | {:.1} | {name} | {:.1} | {r:.2}× ({lo:.2}–{hi:.2}) | {bar}× | {} |",
            median(&mine) / 1e6,
            median(&theirs[i]) / 1e6,
            if r >= *bar { "met" } else { "NOT met" }
        );
    }
    if std::env::var_os("TOPICS_BENCH_VERBOSE").is_some() {
        // Every run, in the order it ran: logbus, then the peer, per pair.
        for (i, (name, _, _)) in peers.iter().enumerate() {
            let each: Vec<String> = (0..ratios[i].len())
                .map(|k| {
                    let a = mine[k * peers.len() + i];
                    format!("{:.1}/{:.1}", a / 1e6, a / ratios[i][k] / 1e6)
                })
                .collect();
            println!("  {row} vs {name}, M/s per pair: {}", each.join(" "));
        }
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: keep that quick.
    let benching = std::env::args().any(|a| a == "--bench");
    let n = env(
        "TOPICS_BENCH_RECORDS",
        if benching { 2_000_000 } else { 20_000 },
    );
    let pairs = env("TOPICS_BENCH_PAIRS", if benching { 5 } else { 1 });
    let replay = env(
        "TOPICS_BENCH_REPLAY",
        if benching { 10_000_000 } else { 50_000 },
    );
    let samples = env("TOPICS_BENCH_SAMPLES", if benching { 20_000 } else { 200 });
    let only = std::env::var("TOPICS_BENCH_ONLY").unwrap_or_default();
    let run = |w: &str| only.is_empty() || only.split(',').any(|o| o == w);
    let keyed = keyed();
    println!(
        "topics_vs_peers: {n} records per run, capacity {CAP}, batches of {BATCH}, {pairs} interleaved pairs"
    );
    println!();
    println!("| row | logbus M rec/s (median) | peer | peer M/s (median) | median ratio (min–max) | bar | |");
    println!("|---|---|---|---|---|---|---|");
    if run("1to1") {
        compare(
            "1 partition, 1 → 1, batch APIs",
            pairs,
            &|| {
                if keyed {
                    logbus_1to1::<u64>(n)
                } else {
                    logbus_1to1::<()>(n)
                }
            },
            &[
                ("crossbeam-channel send/recv", &|| crossbeam_1to1(n), 2.0),
                (
                    "disruptor batch publish + poller",
                    &|| disruptor_1to1(n),
                    0.8,
                ),
            ],
        );
    }
    if run("fanout") {
        compare(
            "fan-out 1 → 3 groups, per reader",
            pairs,
            &|| {
                if keyed {
                    logbus_fanout::<u64>(n)
                } else {
                    logbus_fanout::<()>(n)
                }
            },
            &[
                ("tokio broadcast try_recv", &|| tokio_fanout(n), 2.0),
                ("bus", &|| bus_fanout(n), 2.0),
            ],
        );
    }
    if run("scaling") {
        println!();
        println!("| producers → 8 partitions → 2 consumers (one group) | M rec/s (median) |");
        println!("|---|---|");
        for producers in [1, 2, 4] {
            let v: Vec<f64> = (0..pairs).map(|_| logbus_scaling(producers, n)).collect();
            println!("| {producers} | {:.1} |", median(&v) / 1e6);
        }
    }
    if run("latency") {
        let (mut l50, mut l99, mut c50, mut c99) = (vec![], vec![], vec![], vec![]);
        for _ in 0..pairs {
            let l = logbus_latency(samples);
            let c = crossbeam_latency(samples);
            l50.push(pct(&l, 0.5) as f64);
            l99.push(pct(&l, 0.99) as f64);
            c50.push(pct(&c, 0.5) as f64);
            c99.push(pct(&c, 0.99) as f64);
        }
        println!();
        println!("| one-way latency, one record in flight | p50 ns | p99 ns |");
        println!("|---|---|---|");
        println!(
            "| logbus send → poll | {:.0} | {:.0} |",
            median(&l50),
            median(&l99)
        );
        println!(
            "| crossbeam-channel send → recv | {:.0} | {:.0} |",
            median(&c50),
            median(&c99)
        );
    }
    if run("replay") {
        let v: Vec<f64> = (0..pairs.min(3)).map(|_| logbus_replay(replay)).collect();
        println!();
        println!(
            "replay: seek to 0 and read {replay} in-memory records: {:.1} M rec/s (median)",
            median(&v) / 1e6
        );
    }
    if run("memory") {
        let records = 1usize << 20;
        let broker = Broker::in_memory();
        let before = BYTES.load(Ordering::Relaxed);
        broker
            .create_topic::<(), u64>("m", TopicConfig::new(1).records_in_memory(records))
            .unwrap();
        let bytes = BYTES.load(Ordering::Relaxed) - before;
        let per = bytes as f64 / records as f64;
        println!();
        println!(
            "memory: {per:.1} bytes allocated per in-memory record of Topic<(), u64> ({:.1} beyond its 16 bytes of value and timestamp)",
            per - 16.0
        );
    }
}
