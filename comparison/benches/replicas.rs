//! Replicated topics against an unreplicated one, interleaved in one run (A B C A B C …):
//! RF 1 (the plain ring partition), RF 3 with `acks = all` (min ISR 2) and RF 3 with
//! `acks = 1`, one partition, u64 values, no key. For each pair the ratios RF3 / RF1 are
//! taken; the table gives each side's median and the median per-pair ratio.
//!
//! Rows:
//! - `single`: one producer, `send` one record at a time: records/s and the p50/p99 of one
//!   `send` (the time until the acks level holds).
//! - `pipelined`: one producer, `send_async` with at most `WINDOW` (default 1024) records
//!   in flight: records/s.
//! - `batch`: `PRODUCERS` producers (default 2), `send_batch` of 64: records/s.
//!
//! Checks: each run's data is read back once after the timing through a consumer: the log
//! must end at the count sent, and the records the partition still holds (all of them when
//! they fit in `REPLICAS_BENCH_MEMORY`) must be, per producer, its last values in order —
//! with everything held, also the order-independent checksum of every value sent.
//! `LOGBUS_BENCH_LOSE=ours` makes the RF 3 sides' producers skip their middle value,
//! `=theirs` the RF 1 side's (the baseline): the run must then panic naming the row and
//! side. Each RF 3 side also prints a `ROW|…` line (ratio to RF 1) for `scripts/bench-table`.
//!
//! Issue 15's goal: `acks = all` at RF 3 ≥ 0.5× RF 1 (Kafka's published figure for
//! synchronous 3× replication is 0.51× its unreplicated rate).
//!
//! ```sh
//! cargo bench -p logbus-comparison --bench replicas
//! REPLICAS_BENCH_RECORDS=200000 REPLICAS_BENCH_PAIRS=7 cargo bench -p logbus-comparison --bench replicas
//! ```

use std::collections::VecDeque;
use std::thread;
use std::time::{Duration, Instant};

use logbus::broker::{Broker, Overflow, TopicConfig, TopicPartition};
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::producer::{Acks, PendingSend, ProducerConfig, Record};
use logbus_comparison::{
    env_u64 as env, median, print_row, Pairs, Side as Who, Source, Stall, Tally,
};

const T: &str = "bench";

#[derive(Clone, Copy, Debug)]
enum Side {
    Rf1,
    Rf3All,
    Rf3Leader,
}

impl Side {
    /// Which side `LOGBUS_BENCH_LOSE` names: `theirs` is the RF 1 baseline.
    fn who(self) -> Who {
        match self {
            Side::Rf1 => Who::Theirs,
            _ => Who::Ours,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Side::Rf1 => "RF1",
            Side::Rf3All => "RF3 acks=all",
            Side::Rf3Leader => "RF3 acks=1",
        }
    }

    fn setup(self) -> (Broker, ProducerConfig) {
        let broker = Broker::in_memory();
        let config = TopicConfig::new(1)
            .records_in_memory(env("REPLICAS_BENCH_MEMORY", 1 << 16) as usize)
            .overflow(Overflow::DropOldest);
        let (config, acks) = match self {
            Side::Rf1 => (config, Acks::All),
            Side::Rf3All => (
                config.replication_factor(3).min_insync_replicas(2),
                Acks::All,
            ),
            Side::Rf3Leader => (
                config.replication_factor(3).min_insync_replicas(2),
                Acks::Leader,
            ),
        };
        broker.create_topic::<(), u64>(T, config).unwrap();
        (broker, ProducerConfig::new().acks(acks))
    }
}

/// `records` sends one at a time: (records/s, p50 µs, p99 µs).
fn single(side: Side, records: u64) -> (f64, f64, f64) {
    let (broker, config) = side.setup();
    let p = broker.producer_with_config::<(), u64>(config).unwrap();
    let mut lat = Vec::with_capacity(records as usize);
    let start = Instant::now();
    for v in Source::all(side.who(), records) {
        let t = Instant::now();
        p.send(Record::new(T, v)).unwrap();
        lat.push(t.elapsed());
    }
    let rate = records as f64 / start.elapsed().as_secs_f64();
    verify(&broker, side, "single", 1, records);
    lat.sort_unstable();
    let at = |q: f64| lat[((lat.len() as f64 - 1.0) * q) as usize].as_secs_f64() * 1e6;
    (rate, at(0.5), at(0.99))
}

/// One producer, `send_async` with at most `window` records in flight (the oldest is
/// waited on before the next send, as a Kafka producer's bounded buffer waits): records/s.
/// No latency: a record's acknowledgement is seen only when the loop comes back to it.
fn pipelined(side: Side, records: u64, window: usize) -> f64 {
    let (broker, config) = side.setup();
    let p = broker.producer_with_config::<(), u64>(config).unwrap();
    let mut in_flight: VecDeque<PendingSend<(), u64>> = VecDeque::with_capacity(window);
    let start = Instant::now();
    for v in Source::all(side.who(), records) {
        if in_flight.len() == window {
            in_flight.pop_front().unwrap().wait().unwrap();
        }
        in_flight.push_back(p.send_async(Record::new(T, v)));
    }
    for d in in_flight {
        d.wait().unwrap();
    }
    let rate = records as f64 / start.elapsed().as_secs_f64();
    verify(&broker, side, "pipelined", 1, records);
    rate
}

/// `producers` threads, `records` each, `send_batch` of 64: records/s.
fn batch(side: Side, producers: u64, records: u64) -> f64 {
    let (broker, config) = side.setup();
    let lost = logbus_comparison::lost_value(side.who(), producers * records);
    let start = Instant::now();
    let threads: Vec<_> = (0..producers)
        .map(|i| {
            let broker = broker.clone();
            thread::spawn(move || {
                let p = broker.producer_with_config::<(), u64>(config).unwrap();
                let mut buf = Vec::with_capacity(64);
                let mut src = Source::new(i * records..(i + 1) * records, lost);
                loop {
                    buf.extend(src.by_ref().take(64).map(|x| Record::new(T, x)));
                    if buf.is_empty() {
                        break;
                    }
                    p.send_batch(&mut buf).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let rate = (producers * records) as f64 / start.elapsed().as_secs_f64();
    verify(&broker, side, "batch", producers, records);
    rate
}

/// Reads the partition back once, after the timing: the log must end at `producers * per`
/// (producer i sent `i * per .. (i + 1) * per`), and the records it still holds must be,
/// per producer, its last values in order; when it holds every record, also the
/// order-independent checksum of every value.
fn verify(broker: &Broker, side: Side, row: &str, producers: u64, per: u64) {
    let row = format!("replicas {row} ({})", side.name());
    let total = producers * per;
    let tp = TopicPartition::new(T, 0);
    let mut c = broker
        .consumer::<(), u64>(
            ConsumerConfig::new()
                .auto_offset_reset(OffsetReset::Earliest)
                .max_poll_records(4096),
        )
        .unwrap();
    c.assign(std::slice::from_ref(&tp)).unwrap();
    // The high watermark: with acks=1 the followers may still be copying the tail.
    let waited = Instant::now();
    let end = loop {
        let end = c.end_offsets(std::slice::from_ref(&tp)).unwrap()[&tp];
        if end >= total || waited.elapsed() > Duration::from_secs(10) {
            break end;
        }
        thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(
        end,
        total,
        "{row}: {}'s log (high watermark) ends at {end}, expected {total}",
        side.who()
    );
    let start = c.beginning_offsets(std::slice::from_ref(&tp)).unwrap()[&tp];
    c.seek(&tp, start).unwrap();
    let held = end - start;
    let mut last: Vec<Option<u64>> = vec![None; producers as usize];
    let mut tally = Tally::default();
    let mut stall = Stall::new();
    let mut out = Vec::with_capacity(4096);
    while tally.count < held {
        out.clear();
        let k = c
            .poll_with(4096, Duration::from_millis(100), |r| {
                out.push(r.to_record())
            })
            .unwrap();
        for r in &out {
            let v = r.value;
            let p = (v / per) as usize;
            assert!(
                p < last.len() && last[p].is_none_or(|prev| v == prev + 1),
                "{row}: {}'s record at offset {} holds {v}, out of its producer's order",
                side.who(),
                r.offset
            );
            last[p] = Some(v);
            tally.add(v);
        }
        stall.after(k, side.who(), &row, tally.count, held);
    }
    for (p, l) in last.iter().enumerate() {
        let want = (p as u64 + 1) * per - 1;
        assert!(
            l.is_none_or(|l| l == want),
            "{row}: {}'s producer {p} ends at {l:?}, expected {want}",
            side.who()
        );
    }
    if start == 0 {
        tally.assert_any_order(side.who(), &row, &Tally::of(0..total));
    }
}

/// `REPLICAS_BENCH_MEMORY=<n>`: records each partition (each replica) keeps in memory
/// (default 65,536, a power of two), to see what the working set costs.
///
/// `REPLICAS_BENCH_ONLY=<row>` (`single`, `pipelined`, `batch`): run only that row; the sides stay
/// interleaved. `REPLICAS_BENCH_SIDE=<0|1|2>` (RF 1, acks=all, acks=1): one side alone,
/// for profiling (no ratios).
fn wanted(row: &str) -> bool {
    std::env::var("REPLICAS_BENCH_ONLY").map_or(true, |only| only == row)
}

fn sides() -> Vec<Side> {
    let all = [Side::Rf1, Side::Rf3All, Side::Rf3Leader];
    match std::env::var("REPLICAS_BENCH_SIDE")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
    {
        Some(i) if i < 3 => vec![all[i]],
        _ => all.to_vec(),
    }
}

/// Runs `run` for every side, `pairs` times interleaved (A B C A B C …), and prints each
/// side's median rate (and latency quantiles, when `run` gives them) with the median of the
/// per-round ratios to the first side.
fn row(title: &str, sides: &[Side], pairs: u64, run: impl Fn(Side) -> (f64, Option<(f64, f64)>)) {
    let n = sides.len();
    let mut rates = vec![Vec::new(); n];
    let mut lat = vec![Vec::new(); n];
    let mut ratios = vec![Vec::new(); n];
    for _ in 0..pairs {
        let got: Vec<_> = sides.iter().map(|&s| run(s)).collect();
        for (i, (r, l)) in got.iter().enumerate() {
            rates[i].push(*r);
            lat[i].extend(*l);
            ratios[i].push(*r / got[0].0);
        }
        thread::sleep(Duration::from_millis(20));
    }
    println!("\n{title}:");
    println!(
        "| side | records/s | p50 µs | p99 µs | ratio to {} (median per round) |",
        sides[0].name()
    );
    println!("|---|---|---|---|---|");
    for (i, s) in sides.iter().enumerate() {
        let (p50, p99) = if lat[i].is_empty() {
            ("-".to_string(), "-".to_string())
        } else {
            (
                format!(
                    "{:.2}",
                    median(&lat[i].iter().map(|l| l.0).collect::<Vec<_>>())
                ),
                format!(
                    "{:.2}",
                    median(&lat[i].iter().map(|l| l.1).collect::<Vec<_>>())
                ),
            )
        };
        let mut r = ratios[i].clone();
        r.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "| {} | {:.0} | {p50} | {p99} | {:.3} (range {:.3}–{:.3}) |",
            s.name(),
            median(&rates[i]),
            median(&ratios[i]),
            r[0],
            r[r.len() - 1],
        );
    }
    for (i, s) in sides.iter().enumerate().skip(1) {
        if sides[0].name() == Side::Rf1.name() {
            let pairs = Pairs {
                ours: rates[i].clone(),
                theirs: rates[0].clone(),
            };
            print_row(
                &format!("replicated, {title}, {}", s.name()),
                "logbus RF1",
                &pairs,
            );
        }
    }
}

fn main() {
    let records = env("REPLICAS_BENCH_RECORDS", 20_000);
    let pairs = env("REPLICAS_BENCH_PAIRS", 5);
    let producers = env("REPLICAS_BENCH_PRODUCERS", 2);
    let sides = sides();
    println!("replicas: {records} records per run, {pairs} interleaved rounds");
    if wanted("single") {
        row(
            "single (send one at a time, 1 producer)",
            &sides,
            pairs,
            |s| {
                let (r, p50, p99) = single(s, records);
                (r, Some((p50, p99)))
            },
        );
    }
    if wanted("pipelined") {
        let window = env("REPLICAS_BENCH_WINDOW", 1024) as usize;
        let title = format!("pipelined (send_async, at most {window} in flight, 1 producer)");
        row(&title, &sides, pairs, |s| {
            (pipelined(s, records * 5, window), None)
        });
    }
    if wanted("batch") {
        let title = format!("batch (send_batch of 64, {producers} producers)");
        row(&title, &sides, pairs, |s| {
            (batch(s, producers, records * 5), None)
        });
    }
}
