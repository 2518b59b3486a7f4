//! A state store's restore: `Broker::table(...)?.catch_up(...)` from an in-memory compacted
//! topic (`TopicConfig::compacted`: a ring of `TABLE_BENCH_RING` records per partition and,
//! below it, the latest record of each key) against the same history in an uncompacted
//! in-memory topic big enough to hold all of it (what a restore reads without compaction).
//!
//! Both topics get the same sends: `TABLE_BENCH_KEYS` keys (`u64`), each overwritten
//! `TABLE_BENCH_OVERWRITES` times, in rounds (every key once per round), over 4 partitions.
//! Each pair rebuilds a table from each topic, A B A B; the figure is keys restored per
//! second, the row's ratio compacted / uncompacted (the median per pair). Each side's table
//! is checked after every rebuild: its key count and an order-independent checksum over
//! every `(key, value)` against the model's (each key's last value).
//!
//! ```sh
//! cargo bench -p logbus-comparison --bench table_rebuild
//! TABLE_BENCH_KEYS=1000 TABLE_BENCH_OVERWRITES=10 TABLE_BENCH_PAIRS=1 cargo bench -p logbus-comparison --bench table_rebuild
//! ```

use std::time::{Duration, Instant};

use logbus::broker::{Broker, Overflow, TopicConfig};
use logbus::producer::{Record, RecordMetadata};
use logbus_comparison::{env_u64, env_usize, mix, print_row, Pairs, Side, Tally};

const PARTITIONS: u32 = 4;

/// The table's checksum: its size and the order-independent sum over its pairs.
fn tally<'a>(pairs: impl Iterator<Item = (&'a u64, &'a u64)>) -> Tally {
    let mut t = Tally::default();
    for (&k, &v) in pairs {
        t.add(mix(k) ^ v);
    }
    t
}

/// Rebuilds a table from `topic`: keys restored per second, and what it holds.
fn rebuild(broker: &Broker, topic: &str) -> (f64, Tally, u64) {
    let start = Instant::now();
    let mut table = broker.table::<u64, u64>(topic).unwrap();
    table.catch_up(Duration::from_secs(600)).unwrap();
    let took = start.elapsed().as_secs_f64();
    let t = tally(table.iter());
    (table.len() as f64 / took, t, table.metrics().records_read)
}

fn main() {
    let keys = env_u64("TABLE_BENCH_KEYS", 100_000);
    let overwrites = env_u64("TABLE_BENCH_OVERWRITES", 20);
    let pairs = env_usize("TABLE_BENCH_PAIRS", 7);
    let ring = env_usize("TABLE_BENCH_RING", 4096).next_power_of_two();
    let history = keys * overwrites;
    let broker = Broker::in_memory();
    broker
        .create_topic::<u64, u64>(
            "compacted",
            TopicConfig::new(PARTITIONS)
                .records_in_memory(ring)
                .overflow(Overflow::DropOldest)
                .max_compacted_keys(keys as usize)
                .compacted(),
        )
        .unwrap();
    // Room for the whole history in every partition (keys hash unevenly: twice the mean).
    let whole = ((2 * history / u64::from(PARTITIONS)) as usize)
        .next_power_of_two()
        .max(2);
    broker
        .create_topic::<u64, u64>(
            "whole",
            TopicConfig::new(PARTITIONS)
                .records_in_memory(whole)
                .overflow(Overflow::DropOldest),
        )
        .unwrap();
    let producer = broker.producer::<u64, u64>();
    let mut want = Tally::default();
    for round in 0..overwrites {
        for key in 0..keys {
            // A value that says which round wrote it: the last round's must win.
            let value = round * keys + key + 1;
            for topic in ["compacted", "whole"] {
                let sent: RecordMetadata =
                    producer.send(Record::new(topic, value).key(key)).unwrap();
                std::hint::black_box(sent);
            }
            if round == overwrites - 1 {
                want.add(mix(key) ^ value);
            }
        }
    }
    producer.flush().unwrap();
    let d = broker.describe_topic("whole").unwrap();
    let held: u64 = d.partitions.iter().map(|p| p.log_end - p.log_start).sum();
    assert_eq!(
        held, history,
        "the uncompacted topic must hold the whole history"
    );
    let row = "table rebuild (Broker::table + catch_up), compacted in memory";
    let mut read = (0, 0);
    let result = Pairs::interleave(
        pairs,
        || {
            let (rate, t, n) = rebuild(&broker, "compacted");
            t.assert_any_order(Side::Ours, row, &want);
            read.0 = n;
            rate
        },
        || {
            let (rate, t, n) = rebuild(&broker, "whole");
            t.assert_any_order(Side::Theirs, row, &want);
            read.1 = n;
            rate
        },
    );
    println!(
        "{row}, {keys} keys written {overwrites} times each (history {history}): compacted \
         {:.0} keys/s ({} records read), uncompacted {:.0} keys/s ({} records read)",
        result.ours_median(),
        read.0,
        result.theirs_median(),
        read.1,
    );
    print_row(row, "the same history uncompacted", &result);
}
