//! What transactions cost, against logbus without them, interleaved (A B A B ...) in one
//! process, median of the per-pair ratios (BENCHMARKS.md's method):
//!
//! - `transactions of 100 records vs plain batches`: one thread sends `TXN_BENCH_RECORDS`
//!   records to one partition in transactions of 100 (`begin_transaction`, a `send_batch`
//!   of 100, `commit_transaction`: one COMMIT marker each), against a plain producer
//!   sending the same records in `send_batch`es of 100; each side's producer is made (and
//!   initialised) before its clock starts; each side's records are then read back
//!   (read-committed on both sides) and checked by count and ordered checksum;
//! - `read-committed vs read-uncommitted poll`: one consumer polls a partition of committed
//!   transactions (100 records and a marker each) with `IsolationLevel::ReadCommitted`,
//!   against one polling the same partition read-uncommitted; count and checksum both sides.
//!
//! `cargo bench -p logbus-comparison --bench transactions`; `TXN_BENCH_RECORDS` (default
//! 200,000), `TXN_BENCH_PAIRS` (default 7). `LOGBUS_BENCH_LOSE=ours|theirs` makes one side
//! skip a record: its check must then panic. Goals: both ratios at least 0.9.

use std::time::{Duration, Instant};

use logbus::broker::{Broker, TopicConfig, TopicPartition};
use logbus::consumer::{ConsumerConfig, IsolationLevel, OffsetReset};
use logbus::producer::{ProducerConfig, Record};
use logbus_comparison::{env_u64, env_usize, print_row, Pairs, Side, Source, Tally};

const TXN: usize = 100;

fn topic(broker: &Broker, records: u64) {
    broker
        .create_topic::<(), u64>(
            "t",
            TopicConfig::new(1).records_in_memory((records as usize * 2).next_power_of_two()),
        )
        .unwrap();
}

fn read_all(broker: &Broker, isolation: IsolationLevel, records: u64) -> (Tally, Duration) {
    let mut c = broker
        .consumer::<(), u64>(
            ConsumerConfig::new()
                .auto_offset_reset(OffsetReset::Earliest)
                .isolation_level(isolation)
                .max_poll_records(1024),
        )
        .unwrap();
    c.assign(&[TopicPartition::new("t", 0)]).unwrap();
    let mut tally = Tally::default();
    let start = Instant::now();
    let mut empty = 0;
    while tally.count < records && empty < 20 {
        let n = c
            .poll_with(1024, Duration::from_millis(1), |r| tally.add(*r.value))
            .unwrap();
        empty = if n == 0 { empty + 1 } else { 0 };
    }
    (tally, start.elapsed())
}

fn send_side(side: Side, records: u64) -> f64 {
    let broker = Broker::in_memory();
    topic(&broker, records);
    let mut src = Source::all(side, records);
    let mut buf = vec![0u64; TXN];
    // Each side's producer is made (and the transactional one initialised: a producer id,
    // the coordinator's timeout thread) before the clock starts: the rows compare sends.
    let start;
    match side {
        Side::Ours => {
            let p = broker
                .producer_with_config::<(), u64>(ProducerConfig::new().transactional_id("bench"))
                .unwrap();
            p.init_transactions().unwrap();
            let mut batch = Vec::with_capacity(TXN);
            start = Instant::now();
            loop {
                let k = src.fill(&mut buf);
                if k == 0 {
                    break;
                }
                p.begin_transaction().unwrap();
                batch.extend(buf[..k].iter().map(|&v| Record::new("t", v).partition(0)));
                p.send_batch(&mut batch).unwrap();
                p.commit_transaction().unwrap();
            }
        }
        Side::Theirs => {
            let p = broker.producer::<(), u64>();
            let mut batch = Vec::with_capacity(TXN);
            start = Instant::now();
            loop {
                let k = src.fill(&mut buf);
                if k == 0 {
                    break;
                }
                batch.extend(buf[..k].iter().map(|&v| Record::new("t", v).partition(0)));
                p.send_batch(&mut batch).unwrap();
            }
        }
    }
    let took = start.elapsed();
    let (tally, _) = read_all(&broker, IsolationLevel::ReadCommitted, records);
    tally.assert_in_order(side, "transactions of 100 records", &Tally::of(0..records));
    records as f64 / took.as_secs_f64()
}

/// A broker whose partition holds `records` records in committed transactions of 100.
fn committed(records: u64) -> Broker {
    let broker = Broker::in_memory();
    topic(&broker, records);
    let p = broker
        .producer_with_config::<(), u64>(ProducerConfig::new().transactional_id("bench"))
        .unwrap();
    p.init_transactions().unwrap();
    for chunk in (0..records).collect::<Vec<_>>().chunks(TXN) {
        p.begin_transaction().unwrap();
        for &v in chunk {
            p.send(Record::new("t", v).partition(0)).unwrap();
        }
        p.commit_transaction().unwrap();
    }
    broker
}

fn poll_side(broker: &Broker, side: Side, records: u64) -> f64 {
    let isolation = match side {
        Side::Ours => IsolationLevel::ReadCommitted,
        Side::Theirs => IsolationLevel::ReadUncommitted,
    };
    let (mut tally, took) = read_all(broker, isolation, records);
    if logbus_comparison::lost_value(side, records).is_some() {
        // The check must catch a lost record: drop one from this side's count.
        tally.count -= 1;
    }
    tally.assert_in_order(side, "read-committed poll", &Tally::of(0..records));
    records as f64 / took.as_secs_f64()
}

fn main() {
    let records = env_u64("TXN_BENCH_RECORDS", 200_000);
    let pairs = env_usize("TXN_BENCH_PAIRS", 7);
    let sends = Pairs::interleave(
        pairs,
        || send_side(Side::Ours, records),
        || send_side(Side::Theirs, records),
    );
    println!(
        "transactions of {TXN}: {:.0} records/s, plain batches of {TXN}: {:.0} records/s",
        sends.ours_median(),
        sends.theirs_median()
    );
    print_row(
        "transactions of 100 records (send + commit)",
        "plain send_batch of 100",
        &sends,
    );
    let broker = committed(records);
    let polls = Pairs::interleave(
        pairs,
        || poll_side(&broker, Side::Ours, records),
        || poll_side(&broker, Side::Theirs, records),
    );
    println!(
        "read-committed: {:.0} records/s, read-uncommitted: {:.0} records/s",
        polls.ours_median(),
        polls.theirs_median()
    );
    print_row("read-committed poll", "read-uncommitted poll", &polls);
}
