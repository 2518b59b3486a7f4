//! Exactly-once consume → transform → produce: a worker copies `input` to `output` (each
//! value squared) in transactions, sending its input offsets to each transaction, so that
//! a transaction's output and its group's progress commit together. The worker stops
//! (is dropped: its producer's drop aborts the open transaction, as a crash would leave it
//! to the next `init_transactions` or the coordinator's timeout) twice in the middle of a
//! transaction; each restart with the same `transactional_id` resumes from the committed
//! offsets. At the end the output holds every input exactly once.
//!
//! `cargo run --example exactly_once [DATA_DIR]`: given a directory, the topics are
//! persisted there (Kafka's segment format; at least one committed and one aborted
//! transaction, and the input's idempotent batches), for `logbus dump` or kafka-python.

use std::time::Duration;

use logbus::consumer::{ConsumerConfig, IsolationLevel, OffsetReset};
use logbus::persist::PersistConfig;
use logbus::producer::{ProducerConfig, Record};
use logbus::{Broker, Consumer, Producer, TopicConfig, TopicPartition};

const INPUTS: u64 = 100;
const PER_TRANSACTION: usize = 10;

struct Worker {
    producer: Producer<(), u64>,
    consumer: Consumer<(), u64>,
}

fn start_worker(broker: &Broker) -> logbus::Result<Worker> {
    let producer = broker
        .producer_with_config::<(), u64>(ProducerConfig::new().transactional_id("squarer"))?;
    // Fences any earlier worker with this id and aborts its open transaction.
    producer.init_transactions()?;
    let mut consumer = broker.consumer::<(), u64>(
        ConsumerConfig::new()
            .group_id("squarer")
            .auto_offset_reset(OffsetReset::Earliest)
            .isolation_level(IsolationLevel::ReadCommitted)
            .max_poll_records(PER_TRANSACTION),
    )?;
    consumer.assign(&[
        TopicPartition::new("input", 0),
        TopicPartition::new("input", 1),
    ])?;
    Ok(Worker { producer, consumer })
}

/// One transaction; `crash`: the worker dies after sending, before committing.
fn transaction(w: &mut Worker, crash: bool) -> logbus::Result<usize> {
    let records = w.consumer.poll(Duration::from_millis(50))?;
    if records.is_empty() {
        return Ok(0);
    }
    w.producer.begin_transaction()?;
    for r in records.iter() {
        w.producer
            .send(Record::new("output", r.value * r.value).partition(r.partition))
            .map_err(|e| e.into_error())?;
    }
    if crash {
        return Ok(0);
    }
    let mut offsets = Vec::new();
    for tp in w.consumer.assignment() {
        offsets.push((tp.clone(), w.consumer.position(&tp)?));
    }
    w.producer
        .send_offsets_to_transaction(&offsets, "squarer")?;
    w.producer.commit_transaction()?;
    Ok(records.len())
}

fn main() -> logbus::Result<()> {
    let dir = std::env::args().nth(1);
    let broker = match &dir {
        Some(d) => Broker::builder().data_dir(d).create(true).open()?,
        None => Broker::in_memory(),
    };
    for name in ["input", "output"] {
        let config = TopicConfig::new(2);
        match dir {
            Some(_) => {
                broker.create_topic::<(), u64>(name, config.persist(PersistConfig::new()))?
            }
            None => broker.create_topic::<(), u64>(name, config)?,
        };
    }
    // The input, from an idempotent producer (the default with acks = all).
    let input = broker.producer::<(), u64>();
    for v in 0..INPUTS {
        input.send(Record::new("input", v).partition((v % 2) as u32))?;
    }

    let mut worker = start_worker(&broker)?;
    let (mut copied, mut transactions, mut crashes) = (0, 0, 0);
    while copied < INPUTS as usize {
        // Crash in the second and the fifth transaction.
        let crash = transactions == 1 || transactions == 4;
        transactions += 1;
        let n = transaction(&mut worker, crash)?;
        if crash {
            crashes += 1;
            drop(worker); // mid-transaction: no commit; the drop aborts it
            worker = start_worker(&broker)?;
        }
        copied += n;
    }

    // The committed output: every input squared, exactly once.
    let mut reader = broker.consumer::<(), u64>(
        ConsumerConfig::new()
            .auto_offset_reset(OffsetReset::Earliest)
            .isolation_level(IsolationLevel::ReadCommitted),
    )?;
    reader.assign(&[
        TopicPartition::new("output", 0),
        TopicPartition::new("output", 1),
    ])?;
    let mut out = Vec::new();
    loop {
        let got = reader.poll(Duration::from_millis(50))?;
        if got.is_empty() {
            break;
        }
        out.extend(got.iter().map(|r| r.value));
    }
    out.sort_unstable();
    let expected: Vec<u64> = (0..INPUTS).map(|v| v * v).collect();
    assert_eq!(out, expected, "the output is not the input exactly once");
    let hw: u64 = broker
        .describe_topic("output")?
        .partitions
        .iter()
        .map(|p| p.high_watermark)
        .sum();
    println!(
        "copied {INPUTS} records exactly once in {transactions} transactions ({crashes} stopped \
         mid-transaction, aborted); the output log holds {hw} offsets (records of aborted \
         transactions and the markers are skipped by read-committed readers)"
    );
    drop((worker, reader, input));
    if dir.is_some() {
        broker.close()?;
    }
    Ok(())
}
