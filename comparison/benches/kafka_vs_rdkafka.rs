//! logbus's API over a Kafka cluster against rdkafka used directly, on librdkafka's mock
//! cluster (3 brokers, in this process), interleaved in one run (A B A B …): each pair runs
//! logbus then rdkafka on fresh topics, and the table gives each side's median records/s and
//! the median of the per-pair ratios (logbus / rdkafka). The bar (issue 16): overhead ≤ 10%,
//! a ratio ≥ 0.90.
//!
//! The same records on both sides: a `String` key (`customer-N`, 64 distinct) and a `u64`
//! value (8 bytes, big-endian), 3 partitions, `acks=all`, `partitioner=murmur2_random`.
//! - `produce`: batches of 1,000, each acknowledged before the next. logbus:
//!   `KafkaProducer::send_batch`; rdkafka: `BaseProducer::send` ×1,000, then `poll(1 ms)`
//!   until none is in flight (rdkafka's `flush` waits in 100 ms steps).
//! - `consume`: read every record from offset 0 of the 3 partitions; both sides read the
//!   same topic (the logbus-produced one in even pairs, the rdkafka-produced one in odd
//!   pairs), and both times include creating the consumer and its first fetch; the four
//!   reads of a pair run in the reverse order in odd pairs. logbus:
//!   `KafkaConsumer::assign` and `poll_with` (each record decoded into a `RecordRef`: key,
//!   value, topic, partition, offset, timestamp, headers); rdkafka: `BaseConsumer::assign`
//!   at offset 0 and `poll`, reading the same fields of each message (the key decoded to a
//!   `String`, the value to a `u64`, the topic, partition, offset, timestamp, and the
//!   headers looked up).
//! - `consume-kv`: the same logbus run against rdkafka reading only the key and the value
//!   (what a user who wants no timestamp, topic or headers pays): reading a message's
//!   timestamp and headers touches librdkafka's per-message state that key and value do
//!   not.
//! - `poll`: logbus's `poll` (a `ConsumerRecords` of up to `max_poll_records` per call)
//!   against the full-record rdkafka run.
//!
//!
//! Checks: every read (both sides, every row) asserts the exact count and the
//! order-independent checksum of the values (3 partitions: no order across them) against
//! every value produced; a reader that gets nothing for 10 s panics with its count, naming
//! which side read and which side produced the topic. The topic a pair's reads do not use
//! is read back once by logbus outside the timing, so both producers are checked in every
//! pair. `LOGBUS_BENCH_LOSE=ours` (or `theirs`)
//! makes that side's producer skip its middle value: every read of that topic must then
//! fail. Each row also prints a `ROW|…` line for `scripts/bench-table`.
//!
//! ```sh
//! cargo bench -p logbus-comparison --features kafka --bench kafka_vs_rdkafka
//! KAFKA_BENCH_RECORDS=200000 KAFKA_BENCH_PAIRS=9 cargo bench -p logbus-comparison --features kafka --bench kafka_vs_rdkafka
//! ```

use std::time::{Duration, Instant};

use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::kafka::rdkafka::config::ClientConfig;
use logbus::kafka::rdkafka::consumer::{BaseConsumer, Consumer as _};
use logbus::kafka::rdkafka::error::{KafkaError, RDKafkaErrorCode};
use logbus::kafka::rdkafka::message::{Headers as _, Message as _};
use logbus::kafka::rdkafka::producer::{BaseProducer, BaseRecord, Producer as _};
use logbus::kafka::rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use logbus::kafka::{KafkaBroker, KafkaConfig, MockCluster};
use logbus::{Record, TopicConfig, TopicPartition};
use logbus_comparison::{env_usize as env, median, print_row, Pairs, Side, Source, Stall, Tally};

const PARTITIONS: u32 = 3;
const BATCH: usize = 1000;
const KEYS: u64 = 64;
/// Records per logbus poll.
const POLL_MAX: usize = 1024;
/// Both consumers: when a partition's local queue is over `queued.min.messages`, librdkafka
/// postpones its next fetch by this much (1 s by default: a one-second stall, hit at random
/// by either side, dominated the consume figures).
const FETCH_QUEUE_BACKOFF_MS: &str = "10";

fn key(i: u64) -> String {
    format!("customer-{}", i % KEYS)
}

/// logbus: `send_batch` of 1,000 records at a time. Records per second.
fn produce_logbus(broker: &KafkaBroker, topic: &str, records: u64) -> f64 {
    let producer = broker.producer::<String, u64>();
    let topic: &'static str = Box::leak(topic.to_owned().into_boxed_str());
    let mut batch = Vec::with_capacity(BATCH);
    let mut src = Source::all(Side::Ours, records);
    let start = Instant::now();
    loop {
        batch.extend(
            src.by_ref()
                .take(BATCH)
                .map(|n| Record::new(topic, n).key(key(n))),
        );
        if batch.is_empty() {
            break;
        }
        producer.send_batch(&mut batch).expect("send_batch");
    }
    records as f64 / start.elapsed().as_secs_f64()
}

/// rdkafka: `send` ×1,000 then `flush`. Records per second.
fn produce_rdkafka(producer: &BaseProducer, topic: &str, records: u64) -> f64 {
    let mut src = Source::all(Side::Theirs, records).peekable();
    let start = Instant::now();
    while src.peek().is_some() {
        for n in src.by_ref().take(BATCH) {
            let k = key(n);
            let v = n.to_be_bytes();
            let mut record = BaseRecord::to(topic).key(k.as_bytes()).payload(&v[..]);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                        record = r;
                        producer.poll(Duration::from_millis(1));
                    }
                    Err((e, _)) => panic!("send: {e}"),
                }
            }
        }
        // Wait for every acknowledgement (rdkafka's `flush` polls in 100 ms steps).
        while producer.in_flight_count() > 0 {
            producer.poll(Duration::from_millis(1));
        }
    }
    records as f64 / start.elapsed().as_secs_f64()
}

/// logbus: assign every partition at 0, then `poll_with` (or `poll`) until every
/// record was read.
fn consume_logbus(broker: &KafkaBroker, topic: &str, records: u64, into: bool, row: &str) -> f64 {
    let start = Instant::now();
    let mut consumer = broker
        .consumer::<String, u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
        .expect("consumer");
    let all: Vec<_> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(topic.to_owned(), p))
        .collect();
    consumer.assign(&all).expect("assign");

    let mut tally = Tally::default();
    let mut keys = 0u64;
    let mut stall = Stall::new();
    while tally.count < records {
        let k = if into {
            let polled = consumer.poll(Duration::from_secs(1)).expect("poll");
            for r in &polled {
                tally.add(r.value);
                keys = keys.wrapping_add(r.key.as_ref().map_or(0, |k| k.len() as u64));
            }
            polled.len()
        } else {
            consumer
                .poll_with(POLL_MAX, Duration::from_secs(1), |r| {
                    tally.add(*r.value);
                    keys = keys.wrapping_add(r.key.map_or(0, |k| k.len() as u64));
                })
                .expect("poll")
        };
        stall.after(k, Side::Ours, row, tally.count, records);
    }
    let rate = records as f64 / start.elapsed().as_secs_f64();
    std::hint::black_box(keys);
    tally.assert_any_order(Side::Ours, row, &Tally::of(0..records));
    rate
}

/// rdkafka: assign every partition at 0, `poll` until every record was read, decoding the
/// same key and value bytes; with `full`, also reading what a logbus record carries.
fn consume_rdkafka(servers: &str, topic: &str, records: u64, full: bool, row: &str) -> f64 {
    let start = Instant::now();
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("group.id", format!("direct-{topic}"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS)
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        // An explicit offset, as logbus's consumer resolves it (`Offset::Beginning` makes
        // librdkafka look the start up first, which delays the first record).
        tpl.add_partition_offset(topic, p as i32, Offset::Offset(0))
            .expect("offset");
    }
    consumer.assign(&tpl).expect("assign");
    let mut tally = Tally::default();
    let mut sum = 0u64;
    let mut stall = Stall::new();
    while tally.count < records {
        match consumer.poll(Duration::from_secs(1)) {
            Some(Ok(m)) => {
                let key = std::str::from_utf8(m.key().unwrap_or(&[]))
                    .expect("utf-8 key")
                    .to_owned();
                let value = u64::from_be_bytes(
                    m.payload()
                        .and_then(|p| p.try_into().ok())
                        .expect("8-byte value"),
                );
                tally.add(value);
                sum = sum.wrapping_add(key.len() as u64);
                if full {
                    let headers: Vec<(String, Option<Vec<u8>>)> =
                        m.headers().map_or_else(Vec::new, |h| {
                            h.iter()
                                .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
                                .collect()
                        });
                    let at = (m.topic(), m.partition(), m.offset());
                    let ts = m.timestamp().to_millis().unwrap_or(0);
                    sum = sum
                        .wrapping_add(ts as u64)
                        .wrapping_add(at.0.len() as u64)
                        .wrapping_add(at.1 as u64)
                        .wrapping_add(at.2 as u64)
                        .wrapping_add(headers.len() as u64);
                }
                stall.after(1, Side::Theirs, row, tally.count, records);
            }
            Some(Err(e)) => panic!("poll: {e}"),
            None => stall.after(0, Side::Theirs, row, tally.count, records),
        }
    }
    let rate = records as f64 / start.elapsed().as_secs_f64();
    std::hint::black_box(sum);
    tally.assert_any_order(Side::Theirs, row, &Tally::of(0..records));
    rate
}

fn main() {
    let records = env("KAFKA_BENCH_RECORDS", 100_000) as u64;
    let pairs = env("KAFKA_BENCH_PAIRS", 5);
    let mock = MockCluster::start(3).expect("mock cluster");
    let servers = mock.bootstrap_servers();
    let config = KafkaConfig::new("").set("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS);
    let broker = KafkaBroker::mock_with(mock, config).expect("broker");
    let direct: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &servers)
        .set("acks", "all")
        .set("partitioner", "murmur2_random")
        .create()
        .expect("producer");

    println!("kafka_vs_rdkafka: {records} records, {pairs} pairs, mock cluster of 3 brokers");
    let mut rows: Vec<(&str, Vec<f64>, Vec<f64>)> = ["produce", "consume", "consume-kv", "poll"]
        .into_iter()
        .map(|name| (name, vec![], vec![]))
        .collect();
    for pair in 0..pairs {
        let a = format!("bench-logbus-{pair}");
        let b = format!("bench-rdkafka-{pair}");
        broker
            .create_topic::<String, u64>(&a, TopicConfig::new(PARTITIONS))
            .expect("topic");
        broker
            .create_topic::<String, u64>(&b, TopicConfig::new(PARTITIONS))
            .expect("topic");
        rows[0].1.push(produce_logbus(&broker, &a, records));
        rows[0].2.push(produce_rdkafka(&direct, &b, records));
        // Reading changes nothing: both read the same records, of one topic, then the
        // other's (so neither side always reads the data its own producer batched).
        let shared = if pair % 2 == 0 { &a } else { &b };
        // The four reads of a pair run in one order in even pairs and in the reverse order
        // in odd ones, so that neither side always reads a topic first after it was
        // produced (or always runs right after the other's read).
        let runs: [(bool, bool); 4] = [(true, false), (false, true), (false, false), (true, true)];
        let mut times = [0.0f64; 4];
        let order: Vec<usize> = if pair % 2 == 0 {
            vec![0, 1, 2, 3]
        } else {
            vec![3, 2, 1, 0]
        };
        let producer = if pair % 2 == 0 { "logbus" } else { "rdkafka" };
        for i in order {
            let (logbus, flag) = runs[i];
            let row = format!(
                "kafka consume ({} reading the topic {producer} produced)",
                if logbus { "logbus" } else { "rdkafka" }
            );
            times[i] = if logbus {
                consume_logbus(&broker, shared, records, flag, &row)
            } else {
                consume_rdkafka(&servers, shared, records, flag, &row)
            };
        }
        // The other side's topic, read back once outside the timing, so that every pair
        // checks what both producers wrote.
        let (other, other_producer) = if pair % 2 == 0 {
            (&b, "rdkafka")
        } else {
            (&a, "logbus")
        };
        consume_logbus(
            &broker,
            other,
            records,
            true,
            &format!("kafka produce (logbus reading back the topic {other_producer} produced)"),
        );
        let [with, full, kv, into] = times;
        rows[1].1.push(with);
        rows[1].2.push(full);
        rows[2].1.push(with);
        rows[2].2.push(kv);
        rows[3].1.push(into);
        rows[3].2.push(full);
    }
    println!(
        "{:<10} {:>16} {:>16} {:>14}   per-pair ratios",
        "workload", "logbus rec/s", "rdkafka rec/s", "median ratio"
    );
    for (name, logbus, rdkafka) in rows {
        let peer = match name {
            "consume-kv" => "rdkafka, key and value only",
            _ => "rdkafka",
        };
        print_row(
            &format!("Kafka mock cluster, {name}"),
            peer,
            &Pairs {
                ours: logbus.clone(),
                theirs: rdkafka.clone(),
            },
        );
        let ratios: Vec<f64> = logbus.iter().zip(&rdkafka).map(|(a, b)| a / b).collect();
        let shown: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
        println!(
            "{:<10} {:>16.0} {:>16.0} {:>14.3}   {}",
            name,
            median(&logbus),
            median(&rdkafka),
            median(&ratios),
            shown.join(" ")
        );
    }
}
