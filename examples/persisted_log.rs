//! A persisted topic survives a crash: a child process (this program, run with `--child`)
//! produces keyed orders with headers to a topic on disk and aborts without closing; the
//! parent reopens the data directory, prints what recovery did, and replays the topic from
//! offset 0 and from a timestamp. The data directory stays in place (Kafka's format: Kafka's
//! tools and `logbus describe` read it).
//!
//! ```text
//! cargo run --example persisted_log -- /tmp/logbus-orders
//! ```

use std::path::Path;
use std::time::Duration;

use logbus::broker::{Broker, TopicConfig, TopicPartition};
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::persist::{FlushPolicy, PersistConfig};
use logbus::producer::Record;
use logbus::Bytes;

/// The timestamp of order `i` (deterministic, so that a checker can rebuild every record).
pub const BASE_TS: i64 = 1_700_000_000_000;
/// Orders the child sends before it aborts.
pub const ORDERS: u64 = 20_000;
const TOPIC: &str = "orders";
const PARTITIONS: u32 = 2;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .ok_or("usage: persisted_log <data-dir> (the directory is created and left in place)")?;
    if args.next().as_deref() == Some("--child") {
        child(Path::new(&dir))?;
        return Ok(());
    }
    let status = std::process::Command::new(std::env::current_exe()?)
        .args([dir.as_str(), "--child"])
        .status()?;
    println!("child exited with {status} (aborted: the broker was never closed)");
    parent(Path::new(&dir))
}

/// Order `i`: its key, value and headers (a checker rebuilds them from `i`).
fn order(i: u64) -> Record<String, String> {
    Record::new(TOPIC, format!("order {i}: {} units", i % 7 + 1))
        .key(format!("customer-{}", i % 50))
        .timestamp(BASE_TS + i as i64 * 10)
        .header("trace-id", Some(Bytes::from(format!("t-{i}"))))
        .header("replayed", None)
}

fn child(dir: &Path) -> logbus::Result<()> {
    let broker = Broker::builder().data_dir(dir).create(true).open()?;
    if broker.topic::<String, String>(TOPIC).is_err() {
        broker.create_topic::<String, String>(
            TOPIC,
            TopicConfig::new(PARTITIONS)
                .records_in_memory(1024)
                .persist(
                    PersistConfig::new()
                        .segment_bytes(256 << 10)
                        .flush(FlushPolicy::Bytes(64 << 10)),
                ),
        )?;
    }
    let producer = broker.producer::<String, String>();
    let mut consumer = broker.consumer::<String, String>(
        ConsumerConfig::new()
            .group_id("billing")
            .auto_offset_reset(OffsetReset::Earliest),
    )?;
    consumer.assign(&[TopicPartition::new(TOPIC, 0), TopicPartition::new(TOPIC, 1)])?;
    for i in 0..ORDERS {
        producer.send(order(i))?;
        if i == ORDERS / 2 {
            // Half way: everything so far is durable, and the group commits what it read.
            broker.fsync_and_checkpoint()?;
            let mut read = 0;
            while read < 1000 {
                read += consumer.poll(Duration::from_millis(100))?.len();
            }
            consumer.commit_sync()?;
            broker.fsync_and_checkpoint()?;
        }
    }
    // Die without closing: no flush, no checkpoint, no clean-shutdown marker.
    std::process::abort();
}

fn parent(dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let broker = Broker::open(dir)?;
    println!("recovery of {}:", dir.display());
    for r in broker.recovery_reports() {
        println!(
            "  {}-{}: log [{}, {}), {} segment(s) revalidated ({} batches), {} index(es) rebuilt, \
             truncation: {:?}{}",
            r.topic,
            r.partition,
            r.report.log_start_offset,
            r.report.log_end_offset,
            r.report.segments_recovered,
            r.report.batches_validated,
            r.report.rebuilt_indexes.len(),
            r.report.truncation,
            if r.report.is_clean() {
                ""
            } else {
                " (revalidated)"
            }
        );
    }
    let topic = broker.topic::<String, String>(TOPIC)?;
    let description = broker.describe_topic(TOPIC)?;
    for p in &description.partitions {
        println!(
            "  partition {}: offsets {}..{}",
            p.partition, p.log_start, p.log_end
        );
    }
    let mut billing =
        broker.consumer::<String, String>(ConsumerConfig::new().group_id("billing"))?;
    for p in 0..PARTITIONS {
        let tp = TopicPartition::new(TOPIC, p);
        billing.assign(std::slice::from_ref(&tp))?;
        println!(
            "  group billing resumes {TOPIC}-{p} at {:?}",
            billing.committed(&tp)?
        );
    }
    drop(billing);

    // Replay everything from offset 0 (read from the segments).
    let mut replay = broker.consumer::<String, String>(ConsumerConfig::new())?;
    let all: Vec<_> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(TOPIC, p))
        .collect();
    replay.assign(&all)?;
    replay.seek_to_beginning(&all)?;
    let total: u64 = description
        .partitions
        .iter()
        .map(|p| p.log_end - p.log_start)
        .sum();
    let mut seen = 0u64;
    let mut first = None;
    while seen < total {
        let records = replay.poll(Duration::from_secs(1))?;
        if records.is_empty() {
            break;
        }
        for r in records.iter() {
            first.get_or_insert_with(|| {
                format!(
                    "{}-{}@{} key={:?} value={:?} headers={}",
                    r.topic,
                    r.partition,
                    r.offset,
                    r.key,
                    r.value,
                    r.headers.len()
                )
            });
            seen += 1;
        }
    }
    println!(
        "replayed {seen} of {total} records from offset 0; first: {}",
        first.unwrap_or_default()
    );

    // Replay from a timestamp: order 5000 and on.
    let at = BASE_TS + 5_000 * 10;
    let query: Vec<_> = all.iter().map(|tp| (tp.clone(), at)).collect();
    let mut from_time = broker.consumer::<String, String>(ConsumerConfig::new())?;
    from_time.assign(&all)?;
    for (tp, found) in from_time.offsets_for_times(&query)? {
        if let Some(found) = found {
            from_time.seek(&tp, found.offset)?;
            println!(
                "  {tp:?}: first record at or after {at} is offset {}",
                found.offset
            );
        }
    }
    let records = from_time.poll(Duration::from_secs(1))?;
    if let Some(r) = records.iter().next() {
        println!(
            "from the timestamp: {}-{}@{} {:?} at {}",
            r.topic, r.partition, r.offset, r.value, r.timestamp
        );
    }
    drop(topic);
    broker.close()?;
    println!(
        "closed cleanly; the data directory stays in {}",
        dir.display()
    );
    Ok(())
}
