//! The idempotent producer against a plain one, interleaved in one run (A B A B …): the same
//! topic shape, the same records, `acks = all`, one producer sending one record at a time
//! (`send`) and in batches of 64 (`send_batch`), at RF 1 (the ring partition: the sequence is
//! given under the ring producer's lock) and at RF 3, min ISR 2 (under the replica set's
//! lock). The table gives each side's median and the median per-pair ratio idempotent /
//! plain; issue 30's goal is ≥ 0.95×. The defaults (400,000 records a run, RF 3 single
//! sends a quarter of that; 9 pairs) keep each timed run well above a scheduler tick: a
//! single send costs tens of nanoseconds, and runs of a few milliseconds swung a row's
//! median by several percent between identical runs.
//!
//! Checks: each run reads its partition back through a consumer; the count and the ordered
//! checksum of the values must be what was sent, on both sides. Each row prints a
//! `ROW|…` line for `scripts/bench-table`.
//!
//! ```sh
//! cargo bench -p logbus-comparison --bench idempotence
//! IDEM_BENCH_RECORDS=1000000 IDEM_BENCH_PAIRS=15 cargo bench -p logbus-comparison --bench idempotence
//! ```

use std::time::{Duration, Instant};

use logbus::broker::{Broker, Overflow, TopicConfig, TopicPartition};
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::producer::{Acks, ProducerConfig, Record};
use logbus_comparison::{env_u64 as env, print_row, Pairs, Tally};

const T: &str = "bench";

/// One run: a fresh broker, `records` values sent, read back and checked: records/s.
fn run(rf: u32, idempotent: bool, batch: usize, records: u64) -> f64 {
    let broker = Broker::in_memory();
    let mut config = TopicConfig::new(1)
        .records_in_memory(records.next_power_of_two() as usize)
        .overflow(Overflow::DropOldest);
    if rf > 1 {
        config = config.replication_factor(rf).min_insync_replicas(2);
    }
    broker.create_topic::<(), u64>(T, config).unwrap();
    let p = broker
        .producer_with_config::<(), u64>(
            ProducerConfig::new()
                .acks(Acks::All)
                .enable_idempotence(idempotent),
        )
        .unwrap();
    assert_eq!(p.producer_identity().is_some(), idempotent);
    let start = Instant::now();
    if batch == 1 {
        for v in 0..records {
            p.send(Record::new(T, v)).unwrap();
        }
    } else {
        let mut buf = Vec::with_capacity(batch);
        let mut v = 0;
        while v < records {
            let n = (records - v).min(batch as u64);
            buf.extend((v..v + n).map(|x| Record::new(T, x)));
            p.send_batch(&mut buf).unwrap();
            v += n;
        }
    }
    let rate = records as f64 / start.elapsed().as_secs_f64();
    // Count and checksum, both sides.
    let mut c = broker
        .consumer::<(), u64>(
            ConsumerConfig::new()
                .auto_offset_reset(OffsetReset::Earliest)
                .max_poll_records(4096),
        )
        .unwrap();
    c.assign(&[TopicPartition::new(T, 0)]).unwrap();
    let mut tally = Tally::default();
    while tally.count < records {
        let got = c
            .poll_with(4096, Duration::from_millis(100), |r| {
                tally.add(r.to_record().value)
            })
            .unwrap();
        assert!(got > 0 || tally.count >= records, "the log ends early");
    }
    let side = if idempotent {
        logbus_comparison::Side::Ours
    } else {
        logbus_comparison::Side::Theirs
    };
    tally.assert_in_order(side, "idempotence", &Tally::of(0..records));
    rate
}

fn main() {
    let records = env("IDEM_BENCH_RECORDS", 400_000);
    let pairs = env("IDEM_BENCH_PAIRS", 9) as usize;
    println!("idempotent vs plain producer, acks = all, {records} records a run, {pairs} pairs");
    for (row, rf, batch, n) in [
        ("idempotence: send, RF 1", 1, 1, records),
        ("idempotence: send_batch 64, RF 1", 1, 64, records * 4),
        ("idempotence: send, RF 3", 3, 1, records / 4),
        ("idempotence: send_batch 64, RF 3", 3, 64, records),
    ] {
        let p = Pairs::interleave(
            pairs,
            || run(rf, true, batch, n),
            || run(rf, false, batch, n),
        );
        println!(
            "{row}: idempotent {:.0} rec/s, plain {:.0} rec/s, median ratio {:.3} (per pair {:?})",
            p.ours_median(),
            p.theirs_median(),
            p.median_ratio(),
            p.ratios()
                .iter()
                .map(|r| format!("{r:.3}"))
                .collect::<Vec<_>>()
        );
        print_row(row, "plain producer", &p);
    }
}
