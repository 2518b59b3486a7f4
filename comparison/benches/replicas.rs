//! Replicated topics against an unreplicated one, interleaved in one run (A B C A B C …):
//! RF 1 (the plain ring partition), RF 3 with `acks = all` (min ISR 2) and RF 3 with
//! `acks = 1`, one partition, u64 values, no key. For each pair the ratios RF3 / RF1 are
//! taken; the table gives each side's median and the median per-pair ratio.
//!
//! Rows:
//! - `single`: one producer, `send` one record at a time: records/s and the p50/p99 of one
//!   `send` (the time until the acks level holds).
//! - `batch`: `PRODUCERS` producers (default 2), `send_batch` of 64: records/s.
//!
//! Issue 15's goal: `acks = all` at RF 3 ≥ 0.5× RF 1 (Kafka's published figure for
//! synchronous 3× replication is 0.51× its unreplicated rate).
//!
//! ```sh
//! cargo bench -p logbus-comparison --bench replicas
//! REPLICAS_BENCH_RECORDS=200000 REPLICAS_BENCH_PAIRS=7 cargo bench -p logbus-comparison --bench replicas
//! ```

use std::thread;
use std::time::{Duration, Instant};

use logbus::broker::{Broker, Overflow, TopicConfig};
use logbus::producer::{Acks, ProducerConfig, Record};

const T: &str = "bench";

#[derive(Clone, Copy, Debug)]
enum Side {
    Rf1,
    Rf3All,
    Rf3Leader,
}

impl Side {
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
            .records_in_memory(1 << 16)
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

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `records` sends one at a time: (records/s, p50 µs, p99 µs).
fn single(side: Side, records: u64) -> (f64, f64, f64) {
    let (broker, config) = side.setup();
    let p = broker.producer_with_config::<(), u64>(config).unwrap();
    let mut lat = Vec::with_capacity(records as usize);
    let start = Instant::now();
    for v in 0..records {
        let t = Instant::now();
        p.send(Record::new(T, v)).unwrap();
        lat.push(t.elapsed());
    }
    let rate = records as f64 / start.elapsed().as_secs_f64();
    lat.sort_unstable();
    let at = |q: f64| lat[((lat.len() as f64 - 1.0) * q) as usize].as_secs_f64() * 1e6;
    (rate, at(0.5), at(0.99))
}

/// `producers` threads, `records` each, `send_batch` of 64: records/s.
fn batch(side: Side, producers: u64, records: u64) -> f64 {
    let (broker, config) = side.setup();
    let start = Instant::now();
    let threads: Vec<_> = (0..producers)
        .map(|_| {
            let broker = broker.clone();
            thread::spawn(move || {
                let p = broker.producer_with_config::<(), u64>(config).unwrap();
                let mut buf = Vec::with_capacity(64);
                let mut v = 0;
                while v < records {
                    buf.extend((v..(v + 64).min(records)).map(|x| Record::new(T, x)));
                    v += buf.len() as u64;
                    p.send_batch(&mut buf).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    (producers * records) as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let records = env("REPLICAS_BENCH_RECORDS", 20_000);
    let pairs = env("REPLICAS_BENCH_PAIRS", 5);
    let producers = env("REPLICAS_BENCH_PRODUCERS", 2);
    let sides = [Side::Rf1, Side::Rf3All, Side::Rf3Leader];
    println!("replicas: {records} records per run, {pairs} interleaved rounds");

    let mut rates = vec![Vec::new(); 3];
    let mut p50 = vec![Vec::new(); 3];
    let mut p99 = vec![Vec::new(); 3];
    let mut ratios = vec![Vec::new(); 2];
    for _ in 0..pairs {
        let got: Vec<_> = sides.iter().map(|&s| single(s, records)).collect();
        for (i, (r, a, b)) in got.iter().enumerate() {
            rates[i].push(*r);
            p50[i].push(*a);
            p99[i].push(*b);
        }
        ratios[0].push(got[1].0 / got[0].0);
        ratios[1].push(got[2].0 / got[0].0);
        thread::sleep(Duration::from_millis(20));
    }
    println!("\nsingle (send one at a time, 1 producer):");
    println!("| side | records/s | p50 µs | p99 µs | ratio to RF1 (median per round) |");
    println!("|---|---|---|---|---|");
    for (i, s) in sides.iter().enumerate() {
        let ratio = if i == 0 {
            "1".to_string()
        } else {
            format!("{:.3}", median(ratios[i - 1].clone()))
        };
        println!(
            "| {} | {:.0} | {:.2} | {:.2} | {ratio} |",
            s.name(),
            median(rates[i].clone()),
            median(p50[i].clone()),
            median(p99[i].clone())
        );
    }

    let mut rates = vec![Vec::new(); 3];
    let mut ratios = vec![Vec::new(); 2];
    for _ in 0..pairs {
        let got: Vec<_> = sides
            .iter()
            .map(|&s| batch(s, producers, records * 5))
            .collect();
        for (i, r) in got.iter().enumerate() {
            rates[i].push(*r);
        }
        ratios[0].push(got[1] / got[0]);
        ratios[1].push(got[2] / got[0]);
    }
    println!("\nbatch (send_batch of 64, {producers} producers):");
    println!("| side | records/s | ratio to RF1 (median per round) |");
    println!("|---|---|---|");
    for (i, s) in sides.iter().enumerate() {
        let ratio = if i == 0 {
            "1".to_string()
        } else {
            format!("{:.3}", median(ratios[i - 1].clone()))
        };
        println!(
            "| {} | {:.0} | {ratio} |",
            s.name(),
            median(rates[i].clone())
        );
    }
}
