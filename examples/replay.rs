//! Replay: produce a day of "orders", consume them, then go back — by offset and by
//! timestamp — and read again, as a service would after fixing a bug in its handler.
//!
//! Run with `cargo run --example replay`.

use std::time::Duration;

use logbus::broker::{TopicConfig, TopicPartition};
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::producer::Record;

/// 2024-01-01T00:00:00Z, in milliseconds.
const MIDNIGHT: i64 = 1_704_067_200_000;
const HOUR: i64 = 3_600_000;

fn main() -> logbus::Result<()> {
    let broker = logbus::Broker::in_memory();
    broker.create_topic::<String, u64>("orders", TopicConfig::new(2))?;
    let producer = broker.producer::<String, u64>();

    // One order per hour for 24 hours; the customer is the key, so each customer's orders
    // stay in one partition, in order.
    for hour in 0..24u64 {
        let customer = format!("customer-{}", hour % 3);
        let meta = producer.send(
            Record::new("orders", 100 + hour)
                .key(customer.clone())
                .timestamp(MIDNIGHT + hour as i64 * HOUR),
        )?;
        if hour < 3 {
            println!(
                "sent order {} for {customer} -> partition {}, offset {}",
                100 + hour,
                meta.partition,
                meta.offset
            );
        }
    }
    let description = broker.describe_topic("orders")?;
    for p in &description.partitions {
        println!(
            "partition {}: offsets [{}, {}), {} records in memory",
            p.partition, p.log_start, p.log_end, p.records_in_memory
        );
    }

    let partitions: Vec<_> = (0..2).map(|p| TopicPartition::new("orders", p)).collect();
    let mut consumer = broker.consumer::<String, u64>(
        ConsumerConfig::new()
            .group_id("billing")
            .auto_offset_reset(OffsetReset::Earliest),
    )?;
    consumer.assign(&partitions)?;

    // First pass: read everything and commit.
    let mut total = 0;
    loop {
        let records = consumer.poll(Duration::from_millis(10))?;
        if records.is_empty() {
            break;
        }
        total += records.len();
    }
    consumer.commit_sync()?;
    println!("first pass: {total} orders read and committed");
    for tp in &partitions {
        println!("  {tp}: committed offset {:?}", consumer.committed(tp)?);
    }

    // Replay by offset: partition 0 from offset 2.
    let p0 = &partitions[0];
    consumer.seek(p0, 2)?;
    consumer.pause(&partitions[1..])?;
    let again: Vec<_> = consumer
        .poll(Duration::from_millis(10))?
        .into_iter()
        .map(|r| (r.offset, r.value))
        .collect();
    println!(
        "replay {p0} from offset 2: {} records, first {:?}",
        again.len(),
        again.first()
    );
    consumer.resume(&partitions[1..])?;

    // Replay by time: everything from 18:00 on, in both partitions.
    let six_pm = MIDNIGHT + 18 * HOUR;
    let query: Vec<_> = partitions.iter().map(|tp| (tp.clone(), six_pm)).collect();
    for (tp, found) in consumer.offsets_for_times(&query)? {
        match found {
            Some(at) => {
                println!(
                    "{tp}: first order at or after 18:00 is offset {}",
                    at.offset
                );
                consumer.seek(&tp, at.offset)?;
            }
            None => {
                println!("{tp}: no order at or after 18:00");
                consumer.seek_to_end(&[tp])?;
            }
        }
    }
    let mut evening: Vec<_> = consumer
        .poll(Duration::from_millis(10))?
        .into_iter()
        .map(|r| ((r.timestamp - MIDNIGHT) / HOUR, r.value))
        .collect();
    evening.sort();
    println!("orders from 18:00 on (hour, order): {evening:?}");
    assert_eq!(evening.len(), 6);

    // Back to the beginning: the whole day once more.
    consumer.seek_to_beginning(&[])?;
    let mut count = 0;
    loop {
        let n = consumer.poll(Duration::from_millis(10))?.len();
        if n == 0 {
            break;
        }
        count += n;
    }
    println!("from the beginning: {count} orders re-read");
    println!(
        "consumer metrics: {} records consumed, {} skipped",
        consumer.metrics().records_consumed(),
        consumer.metrics().total_skipped()
    );
    Ok(())
}
