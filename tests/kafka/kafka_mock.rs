//! logbus's producer and consumer API against librdkafka's mock cluster (3 brokers, the
//! real Kafka protocol): produce and consume, a group of two rebalancing, commits that
//! survive a restart, seek and offsets_for_times.
#![cfg(feature = "kafka")]

use std::collections::BTreeMap;
use std::time::Duration;

use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::group::{RangeAssignor, RoundRobinAssignor};
use logbus::kafka::{KafkaBroker, KafkaConfig, KafkaConsumer, KafkaRebalanceListener, MockCluster};
use logbus::producer::{partition_for_key, Record};
use logbus::{Codec, ConsumerRecord, TopicConfig, TopicPartition};

const POLL: Duration = Duration::from_millis(200);

/// A broker on a new 3-broker mock cluster. The mock makes a group wait for late members
/// for the session timeout less one second at each rebalance: a short session keeps the
/// tests fast.
fn cluster() -> KafkaBroker {
    let config = KafkaConfig::new("")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "500");
    KafkaBroker::mock_with(MockCluster::start(3).expect("mock cluster"), config).expect("broker")
}

/// Polls until `n` records arrived (or nothing more comes).
fn read_n<K: Codec + Clone + Send + Sync + 'static, V: Codec + Clone + Send + Sync + 'static>(
    consumer: &mut KafkaConsumer<K, V>,
    n: usize,
) -> Vec<ConsumerRecord<K, V>> {
    let mut out = Vec::new();
    for _ in 0..200 {
        if out.len() >= n {
            break;
        }
        let got = consumer.poll(POLL).expect("poll");
        out.extend(got);
    }
    out
}

#[test]
fn produce_and_consume_through_logbus_api() {
    let broker = cluster();
    broker
        .create_topic::<String, u64>("orders", TopicConfig::new(3))
        .unwrap();
    assert_eq!(broker.partition_count("orders").unwrap(), 3);
    let producer = broker.producer::<String, u64>();
    let mut sent = Vec::new();
    for i in 0..30u64 {
        let key = format!("customer-{}", i % 7);
        let meta = producer
            .send(
                Record::new("orders", i)
                    .key(key.clone())
                    .timestamp(1_700_000_000_000 + i as i64)
                    .header("trace", Some(bytes::Bytes::from(format!("t{i}")))),
            )
            .unwrap();
        // The partition logbus's in-process partitioner gives.
        assert_eq!(
            meta.partition,
            partition_for_key(&key.to_bytes(), 3),
            "{key}"
        );
        assert_eq!(meta.timestamp, 1_700_000_000_000 + i as i64);
        sent.push((meta.partition, meta.offset, key, i));
    }
    // A batch: acknowledged together, offsets in order per partition.
    let mut batch: Vec<_> = (30..40u64)
        .map(|i| Record::new("orders", i).partition(1))
        .collect();
    assert_eq!(producer.send_batch(&mut batch).unwrap(), 10);
    assert!(batch.is_empty());
    producer.flush().unwrap();

    let description = broker.describe_topic("orders").unwrap();
    let total: u64 = description.partitions.iter().map(|p| p.log_end).sum();
    assert_eq!(total, 40);

    let mut consumer = broker
        .consumer::<String, u64>(
            ConsumerConfig::new()
                .group_id("readers")
                .auto_offset_reset(OffsetReset::Earliest),
        )
        .unwrap();
    let partitions: Vec<_> = (0..3).map(|p| TopicPartition::new("orders", p)).collect();
    consumer.assign(&partitions).unwrap();
    let records = read_n(&mut consumer, 40);
    assert_eq!(records.len(), 40);
    for (partition, offset, key, value) in &sent {
        let r = records
            .iter()
            .find(|r| r.partition == *partition && r.offset == *offset)
            .expect("every sent record is read");
        assert_eq!(r.key.as_ref(), Some(key));
        assert_eq!(r.value, *value);
        assert_eq!(r.timestamp, 1_700_000_000_000 + *value as i64);
        assert_eq!(r.headers[0].0, "trace");
        assert_eq!(
            r.headers[0].1.as_deref(),
            Some(format!("t{value}").as_bytes())
        );
    }
    // Per partition, in offset order.
    for p in 0..3 {
        let offsets: Vec<u64> = records
            .iter()
            .filter(|r| r.partition == p)
            .map(|r| r.offset)
            .collect();
        assert!(offsets.windows(2).all(|w| w[0] < w[1]), "{offsets:?}");
    }
    // Caught up: an empty poll.
    assert!(consumer.poll(Duration::from_millis(50)).unwrap().is_empty());
    assert_eq!(consumer.metrics().records_consumed(), 40);
}

/// What `poll_with` lent, owned: partition, offset, key, value, timestamp, headers.
type Lent = (
    u32,
    u64,
    Option<String>,
    u64,
    i64,
    Vec<(String, Option<bytes::Bytes>)>,
);

#[test]
fn poll_with_lends_what_poll_returns() {
    let broker = cluster();
    broker
        .create_topic::<String, u64>("lent", TopicConfig::new(3))
        .unwrap();
    let producer = broker.producer::<String, u64>();
    let mut batch: Vec<_> = (0..40u64)
        .map(|i| {
            Record::new("lent", i)
                .key(format!("k{}", i % 5))
                .timestamp(1_700_000_000_000 + i as i64)
                .header("n", Some(bytes::Bytes::from(i.to_string())))
        })
        .collect();
    producer.send_batch(&mut batch).unwrap();
    // A value a u64 cannot decode, then more good records, all in partition 0.
    broker
        .producer::<String, String>()
        .send(Record::new("lent", "bad".to_string()).partition(0))
        .unwrap();
    let mut batch: Vec<_> = (40..45u64)
        .map(|i| Record::new("lent", i).partition(0))
        .collect();
    producer.send_batch(&mut batch).unwrap();

    let partitions: Vec<_> = (0..3).map(|p| TopicPartition::new("lent", p)).collect();
    let config = ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest);
    let mut into = broker
        .consumer::<String, u64>(config.clone().max_poll_records(7))
        .unwrap();
    let mut with = broker.consumer::<String, u64>(config).unwrap();
    into.assign(&partitions).unwrap();
    with.assign(&partitions).unwrap();

    let mut polled: Vec<Lent> = Vec::new();
    let mut lent: Vec<Lent> = Vec::new();
    let (mut into_errors, mut with_errors) = (0, 0);
    for _ in 0..100 {
        let mut out = Vec::new();
        match into.poll(POLL) {
            Ok(records) => out.extend(records),
            Err(logbus::Error::Decode { .. }) => into_errors += 1,
            Err(e) => panic!("poll: {e}"),
        }
        polled.extend(out.into_iter().map(|r| {
            let ts = r.timestamp;
            (r.partition, r.offset, r.key, r.value, ts, r.headers)
        }));
        let before = lent.len();
        match with.poll_with(7, POLL, |r| {
            lent.push((
                r.partition,
                r.offset,
                r.key.cloned(),
                *r.value,
                r.timestamp,
                r.headers.to_vec(),
            ));
        }) {
            Ok(n) => {
                assert_eq!(n, lent.len() - before);
                assert!(n <= 7, "{n} records lent with max 7");
            }
            Err(logbus::Error::Decode { .. }) => with_errors += 1,
            Err(e) => panic!("poll_with: {e}"),
        }
        if polled.len() == 45 && lent.len() == 45 && into_errors + with_errors == 2 {
            break;
        }
    }
    assert_eq!(
        (into_errors, with_errors),
        (1, 1),
        "the bad record, once each"
    );
    polled.sort_by_key(|r| (r.0, r.1));
    lent.sort_by_key(|r| (r.0, r.1));
    assert_eq!(lent.len(), 45);
    assert_eq!(lent, polled);
    assert!(lent.iter().take(40).all(|r| r.4 > 0));
    // Both read past the bad record: the position is the partition's end.
    let p0 = TopicPartition::new("lent", 0);
    let end = into.end_offsets(std::slice::from_ref(&p0)).unwrap()[&p0];
    assert_eq!(with.position(&p0).unwrap(), end);
    assert_eq!(into.position(&p0).unwrap(), end);
    assert_eq!(with.metrics().records_consumed(), 45);
}

#[test]
fn handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<KafkaBroker>();
    send_sync::<logbus::kafka::KafkaProducer<String, u64>>();
    send::<KafkaConsumer<String, u64>>();
    send_sync::<MockCluster>();
}

#[test]
fn errors_are_typed() {
    let broker = cluster();
    broker
        .create_topic::<(), u64>("typed", TopicConfig::new(2))
        .unwrap();
    assert!(matches!(
        broker.create_topic::<(), u64>("typed", TopicConfig::new(2)),
        Err(logbus::Error::TopicExists { .. })
    ));
    // The in-process broker's persisted config creates a cluster topic as well (the
    // cluster keeps every topic on disk): the same code runs against both.
    let persisted = TopicConfig::new(3).persist(logbus::persist::PersistConfig::new());
    let topic = broker
        .create_topic::<(), u64>("typed-persisted", persisted)
        .unwrap();
    assert_eq!(topic.partition_count(), 3);
    assert!(matches!(
        broker.create_topic::<(), u64>("../bad", TopicConfig::new(2)),
        Err(logbus::Error::InvalidTopicName { .. })
    ));
    let producer = broker.producer::<(), u64>();
    let err = producer
        .send(Record::new("typed", 1).partition(5))
        .unwrap_err();
    assert!(
        matches!(
            err.error(),
            logbus::Error::PartitionOutOfRange {
                partition: 5,
                count: 2,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        err.into_record().map(|r| r.value),
        Some(1),
        "the record is handed back"
    );
    for bad in [-5, logbus::MAX_TIMESTAMP + 1] {
        let err = producer
            .send(Record::new("typed", 1).timestamp(bad))
            .unwrap_err();
        assert!(matches!(
            err.error(),
            logbus::Error::InvalidTimestamp { timestamp, offset: None } if *timestamp == bad
        ));
    }
    let big = broker.producer::<(), Vec<u8>>();
    let err = big
        .send(Record::new("typed", vec![7u8; 2_000_000]))
        .unwrap_err();
    assert!(
        matches!(
            err.error(),
            logbus::Error::RecordTooLarge {
                size: 2_000_000,
                max: 1_000_000,
                ..
            }
        ),
        "{err}"
    );

    let mut consumer = broker.consumer::<(), u64>(ConsumerConfig::new()).unwrap();
    assert!(matches!(
        consumer.assign(&[TopicPartition::new("typed", 9)]),
        Err(logbus::Error::PartitionOutOfRange { .. })
    ));
    // One metadata request per topic: a later partition of a topic already checked is
    // still checked against that topic's count.
    assert!(matches!(
        consumer.assign(&[
            TopicPartition::new("typed", 0),
            TopicPartition::new("typed", 1),
            TopicPartition::new("typed", 2),
        ]),
        Err(logbus::Error::PartitionOutOfRange {
            partition: 2,
            count: 2,
            ..
        })
    ));
    assert!(consumer.assignment().is_empty(), "nothing assigned");
    assert!(matches!(
        consumer.commit_sync(),
        Err(logbus::Error::NoGroupId { .. })
    ));
    assert!(matches!(
        consumer.seek(&TopicPartition::new("typed", 0), 3),
        Err(logbus::Error::NotAssigned { .. })
    ));
    assert!(matches!(
        broker.consumer::<(), u64>(ConsumerConfig::new().max_poll_records(0)),
        Err(logbus::Error::InvalidConfig { .. })
    ));
    assert!(matches!(
        broker.consumer::<(), u64>(
            ConsumerConfig::new()
                .group_id("g")
                .assignor(logbus::group::StickyAssignor)
        ),
        Err(logbus::Error::InvalidConfig {
            name: "assignor",
            ..
        })
    ));
}

#[derive(Default)]
struct Log {
    events: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl KafkaRebalanceListener<(), u64> for Log {
    fn on_partitions_revoked(
        &mut self,
        consumer: &mut KafkaConsumer<(), u64>,
        partitions: &[TopicPartition],
    ) {
        // Real Kafka accepts a commit of the current generation while the group prepares
        // to rebalance; the mock cluster answers REBALANCE_IN_PROGRESS: either way the
        // result is typed.
        let commit = match consumer.commit_sync() {
            Ok(()) => "ok".to_string(),
            Err(e @ logbus::Error::Kafka { code: 27, .. }) => {
                assert!(!e.is_retriable());
                "rebalancing".to_string()
            }
            Err(e) => panic!("unexpected commit error in the listener: {e}"),
        };
        self.events
            .lock()
            .unwrap()
            .push(format!("revoked {} (commit {commit})", partitions.len()));
    }

    fn on_partitions_assigned(
        &mut self,
        _: &mut KafkaConsumer<(), u64>,
        partitions: &[TopicPartition],
    ) {
        self.events
            .lock()
            .unwrap()
            .push(format!("assigned {}", partitions.len()));
    }
}

fn group_member(broker: &KafkaBroker, listener: Log, round_robin: bool) -> KafkaConsumer<(), u64> {
    let config = ConsumerConfig::new()
        .group_id("workers")
        .auto_offset_reset(OffsetReset::Earliest)
        .enable_auto_commit(false)
        .client_id(if round_robin { "rr" } else { "range" });
    let config = if round_robin {
        config.assignor(RoundRobinAssignor)
    } else {
        config.assignor(RangeAssignor)
    };
    let mut c = broker.consumer::<(), u64>(config).unwrap();
    c.subscribe_with_listener(&["jobs"], listener).unwrap();
    c
}

#[test]
fn a_group_of_two_rebalances_and_commits_survive_a_restart() {
    let broker = cluster();
    broker
        .create_topic::<(), u64>("jobs", TopicConfig::new(4))
        .unwrap();
    let producer = broker.producer::<(), u64>();
    let mut batch: Vec<_> = (0..40u64)
        .map(|i| Record::new("jobs", i).partition((i % 4) as u32))
        .collect();
    producer.send_batch(&mut batch).unwrap();

    let log_a = Log::default();
    let events_a = std::sync::Arc::clone(&log_a.events);
    let mut a = group_member(&broker, log_a, false);
    // Alone: all four partitions.
    let mut seen: BTreeMap<(u32, u64), u64> = BTreeMap::new();
    for _ in 0..100 {
        for r in a.poll(POLL).unwrap() {
            seen.insert((r.partition, r.offset), r.value);
        }
        if a.assignment().len() == 4 && seen.len() >= 10 {
            break;
        }
    }
    assert_eq!(a.assignment().len(), 4);
    a.commit_sync().unwrap();

    // A second member joins: both poll until the group settles at two partitions each.
    let log_b = Log::default();
    let events_b = std::sync::Arc::clone(&log_b.events);
    let mut b = group_member(&broker, log_b, false);
    for _ in 0..200 {
        for r in a
            .poll(POLL)
            .unwrap()
            .into_iter()
            .chain(b.poll(POLL).unwrap())
        {
            seen.insert((r.partition, r.offset), r.value);
        }
        // Settled, and each member read its partitions to the end (a partition that moved
        // starts over at its last commit, which may be behind what the other member read).
        let at_end = |c: &KafkaConsumer<(), u64>| {
            c.assignment()
                .iter()
                .all(|tp| c.position(tp).ok() == Some(10))
        };
        if a.assignment().len() == 2
            && b.assignment().len() == 2
            && seen.len() == 40
            && at_end(&a)
            && at_end(&b)
        {
            break;
        }
    }
    let (mut pa, mut pb) = (a.assignment(), b.assignment());
    pa.sort();
    pb.sort();
    assert_eq!(pa.len(), 2, "{pa:?} {pb:?}");
    assert_eq!(pb.len(), 2, "{pa:?} {pb:?}");
    assert!(pa.iter().all(|tp| !pb.contains(tp)));
    // Range over 4 partitions: each member holds two adjacent ones.
    assert_eq!(pa[1].partition, pa[0].partition + 1);
    assert_eq!(
        seen.len(),
        40,
        "every record read by one member or the other"
    );
    let events = events_a.lock().unwrap().clone();
    assert!(
        events.iter().any(|e| e.starts_with("revoked 4")),
        "{events:?}"
    );
    assert!(events_b.lock().unwrap().iter().any(|e| e == "assigned 2"));

    // Both commit, then close; a restarted member resumes at the commits.
    a.commit_sync().unwrap();
    b.commit_sync().unwrap();
    let committed: Vec<Option<u64>> = (0..4)
        .map(|p| a.committed(&TopicPartition::new("jobs", p)).unwrap())
        .collect();
    assert_eq!(committed, vec![Some(10); 4]);
    drop(a);
    drop(b);
    let mut restarted = group_member(&broker, Log::default(), true);
    batch = (40..44u64)
        .map(|i| Record::new("jobs", i).partition((i % 4) as u32))
        .collect();
    producer.send_batch(&mut batch).unwrap();
    let again = read_n(&mut restarted, 4);
    let mut values: Vec<u64> = again.iter().map(|r| r.value).collect();
    values.sort();
    assert_eq!(
        values,
        vec![40, 41, 42, 43],
        "only the records after the commits"
    );
}

#[test]
fn seek_and_offsets_for_times_replay() {
    let broker = cluster();
    broker
        .create_topic::<String, u64>("events", TopicConfig::new(2))
        .unwrap();
    let producer = broker.producer::<String, u64>();
    const T0: i64 = 1_704_067_200_000;
    for i in 0..20u64 {
        producer
            .send(
                Record::new("events", i)
                    .partition((i % 2) as u32)
                    .timestamp(T0 + i as i64 * 1000),
            )
            .unwrap();
    }
    let p0 = TopicPartition::new("events", 0);
    let p1 = TopicPartition::new("events", 1);
    let mut c = broker
        .consumer::<String, u64>(
            ConsumerConfig::new()
                .group_id("replayer")
                .auto_offset_reset(OffsetReset::Earliest),
        )
        .unwrap();
    c.assign(&[p0.clone(), p1.clone()]).unwrap();
    assert_eq!(c.position(&p0).unwrap(), 0);
    assert_eq!(read_n(&mut c, 20).len(), 20);
    assert_eq!(c.position(&p0).unwrap(), 10);

    // An offset Kafka cannot name (its offsets are signed 64-bit; u64::MAX would be
    // librdkafka's "end" marker): a typed error, the position unchanged.
    let e = c.seek(&p0, u64::MAX).unwrap_err();
    assert!(
        matches!(
            e,
            logbus::Error::OffsetOutOfRange {
                requested: u64::MAX,
                start: 0,
                end: 10,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(c.position(&p0).unwrap(), 10);

    // Seek back by offset, with the other partition paused.
    c.seek(&p0, 7).unwrap();
    c.pause(std::slice::from_ref(&p1)).unwrap();
    let replay: Vec<(u64, u64)> = read_n(&mut c, 3)
        .into_iter()
        .map(|r| (r.offset, r.value))
        .collect();
    assert_eq!(replay, vec![(7, 14), (8, 16), (9, 18)]);
    c.resume(std::slice::from_ref(&p1)).unwrap();
    assert!(c.poll(Duration::from_millis(50)).unwrap().is_empty());

    // By time: the first record at or after T0 + 12 s in each partition.
    let found = c
        .offsets_for_times(&[
            (p0.clone(), T0 + 12_000),
            (p1.clone(), T0 + 12_000),
            (p1.clone(), T0 + 60_000),
        ])
        .unwrap();
    let at0 = found[&p0].unwrap();
    assert_eq!((at0.offset, at0.timestamp), (6, T0 + 12_000));
    // The last query for p1 wins in the map: nothing that late.
    assert_eq!(found[&p1], None);
    let found = c.offsets_for_times(&[(p1.clone(), T0 + 12_000)]).unwrap();
    let at1 = found[&p1].unwrap();
    assert_eq!((at1.offset, at1.timestamp), (6, T0 + 13_000));
    c.seek(&p1, at1.offset).unwrap();
    let late: Vec<u64> = read_n(&mut c, 4).into_iter().map(|r| r.value).collect();
    assert_eq!(late, vec![13, 15, 17, 19]);
    assert!(matches!(
        c.offsets_for_times(&[(p0.clone(), -1)]),
        Err(logbus::Error::InvalidTimestamp { .. })
    ));
    assert!(matches!(
        c.offsets_for_times(&[(p0.clone(), logbus::MAX_TIMESTAMP + 1)]),
        Err(logbus::Error::InvalidTimestamp { .. })
    ));

    // To the beginning and the end.
    c.seek_to_beginning(&[]).unwrap();
    assert_eq!(c.position(&p1).unwrap(), 0);
    assert_eq!(read_n(&mut c, 20).len(), 20);
    c.seek_to_end(std::slice::from_ref(&p0)).unwrap();
    assert_eq!(c.position(&p0).unwrap(), 10);
    assert_eq!(c.end_offsets(std::slice::from_ref(&p0)).unwrap()[&p0], 10);
    assert_eq!(
        c.beginning_offsets(std::slice::from_ref(&p0)).unwrap()[&p0],
        0
    );
    assert!(c.poll(Duration::from_millis(50)).unwrap().is_empty());

    // Commit explicit offsets; read back.
    c.commit_offsets(&[(p0.clone(), 4)]).unwrap();
    assert_eq!(c.committed(&p0).unwrap(), Some(4));
    assert!(matches!(
        c.commit_offsets(&[(p0.clone(), 99)]),
        Err(logbus::Error::OffsetOutOfRange {
            requested: 99,
            end: 10,
            ..
        })
    ));
}

/// Cooperative-sticky: when a second member joins, the first keeps two of its four
/// partitions (only the two that move are revoked), and nothing is revoked from the
/// newcomer.
#[test]
fn cooperative_sticky_revokes_only_what_moves() {
    let broker = cluster();
    broker
        .create_topic::<(), u64>("coop", TopicConfig::new(4))
        .unwrap();
    let producer = broker.producer::<(), u64>();
    let mut batch: Vec<_> = (0..20u64)
        .map(|i| Record::new("coop", i).partition((i % 4) as u32))
        .collect();
    producer.send_batch(&mut batch).unwrap();
    let member = |log: Log| {
        let mut c = broker
            .consumer::<(), u64>(
                ConsumerConfig::new()
                    .group_id("coop-group")
                    .auto_offset_reset(OffsetReset::Earliest)
                    .enable_auto_commit(false)
                    .assignor(logbus::group::CooperativeStickyAssignor),
            )
            .unwrap();
        c.subscribe_with_listener(&["coop"], log).unwrap();
        c
    };
    let log_a = Log::default();
    let events_a = std::sync::Arc::clone(&log_a.events);
    let mut a = member(log_a);
    for _ in 0..100 {
        a.poll(POLL).unwrap();
        if a.assignment().len() == 4 {
            break;
        }
    }
    assert_eq!(a.assignment().len(), 4);
    let before = a.assignment();
    let log_b = Log::default();
    let events_b = std::sync::Arc::clone(&log_b.events);
    let mut b = member(log_b);
    for _ in 0..200 {
        a.poll(POLL).unwrap();
        b.poll(POLL).unwrap();
        if a.assignment().len() == 2 && b.assignment().len() == 2 {
            break;
        }
    }
    assert_eq!((a.assignment().len(), b.assignment().len()), (2, 2));
    assert!(
        a.assignment().iter().all(|tp| before.contains(tp)),
        "a keeps two of its own"
    );
    let events = events_a.lock().unwrap().clone();
    assert!(
        events.iter().any(|e| e.starts_with("revoked 2")),
        "only the two that move are revoked: {events:?}"
    );
    assert!(
        !events.iter().any(|e| e.starts_with("revoked 4")),
        "{events:?}"
    );
    let events = events_b.lock().unwrap().clone();
    assert!(
        !events.iter().any(|e| e.starts_with("revoked")),
        "{events:?}"
    );
    assert!(events.iter().any(|e| e == "assigned 2"), "{events:?}");
}

/// A record that cannot be decoded in the middle of what one fetch brought: the records
/// before it come first, then the error, then every record after it (the consumer takes
/// fetched messages in batches; the rest of a batch an error cut short is fetched again).
#[test]
fn a_decode_error_mid_batch_loses_no_record_after_it() {
    let broker = cluster();
    broker
        .create_topic::<(), u64>("cut", TopicConfig::new(1))
        .unwrap();
    let producer = broker.producer::<(), u64>();
    let mut batch: Vec<_> = (0..3u64).map(|v| Record::new("cut", v)).collect();
    producer.send_batch(&mut batch).unwrap();
    broker
        .producer::<(), String>()
        .send(Record::new("cut", "bad".to_string()))
        .unwrap();
    let mut batch: Vec<_> = (4..10u64).map(|v| Record::new("cut", v)).collect();
    producer.send_batch(&mut batch).unwrap();

    let mut consumer = broker
        .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    let tp = TopicPartition::new("cut", 0);
    consumer.assign(std::slice::from_ref(&tp)).unwrap();
    // Time for the fetch to land, so that one batch holds the bad record and those after
    // it (a slower fetch splits the batch: the test then covers less, and still passes).
    std::thread::sleep(Duration::from_millis(500));
    let mut values = Vec::new();
    let mut errors = 0;
    for _ in 0..50 {
        match consumer.poll(POLL) {
            Ok(records) => values.extend(records.into_iter().map(|r| (r.offset, r.value))),
            Err(logbus::Error::Decode { .. }) => {
                errors += 1;
                assert_eq!(values.len(), 3, "the records before it came first");
            }
            Err(e) => panic!("poll: {e}"),
        }
        if values.len() == 9 {
            break;
        }
    }
    assert_eq!(errors, 1);
    let expected: Vec<(u64, u64)> = (0..10u64).filter(|&v| v != 3).map(|v| (v, v)).collect();
    assert_eq!(values, expected);
    assert_eq!(consumer.position(&tp).unwrap(), 10);
}

/// An error fetching a partition names the partition: here the position is past the log's
/// end under `OffsetReset::None` (`auto.offset.reset=error`).
#[test]
fn a_fetch_error_names_its_partition() {
    let broker = cluster();
    broker
        .create_topic::<(), u64>("far", TopicConfig::new(2))
        .unwrap();
    broker
        .producer::<(), u64>()
        .send(Record::new("far", 1).partition(1))
        .unwrap();
    let mut consumer = broker
        .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::None))
        .unwrap();
    let tp = TopicPartition::new("far", 1);
    consumer.assign(std::slice::from_ref(&tp)).unwrap();
    assert!(matches!(
        consumer.poll(POLL),
        Err(logbus::Error::NoOffsetForPartition { partition: 1, .. })
    ));
    consumer.seek(&tp, 50).unwrap();
    let mut got = None;
    for _ in 0..50 {
        match consumer.poll(POLL) {
            Ok(records) => assert!(records.is_empty(), "nothing at offset 50"),
            Err(e) => {
                got = Some(e);
                break;
            }
        }
    }
    match got {
        Some(logbus::Error::Kafka {
            operation: "poll",
            topic: Some(t),
            partition: Some(1),
            ..
        }) => assert_eq!(t, "far"),
        other => panic!("expected a fetch error naming far-1, got {other:?}"),
    }
}

/// Defect: a batch whose last record the client refused to queue (over
/// `message.max.bytes`) waited for good once the records before it were acknowledged: the
/// delivery callbacks woke the waiter only when every record of the batch had an outcome,
/// and the refused one never gets one.
#[test]
fn send_batch_returns_when_the_client_refuses_its_last_record() {
    let config = KafkaConfig::new("").set("message.max.bytes", "10000");
    let broker = KafkaBroker::mock_with(MockCluster::start(1).unwrap(), config).unwrap();
    broker
        .create_topic::<(), Vec<u8>>("big", TopicConfig::new(1))
        .unwrap();
    let producer = broker.producer::<(), Vec<u8>>();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut batch = vec![
            Record::new("big", vec![1u8; 10]),
            Record::new("big", vec![2u8; 10]),
            Record::new("big", vec![3u8; 20_000]),
        ];
        let result = producer.send_batch(&mut batch);
        let left: Vec<usize> = batch.iter().map(|r| r.value.len()).collect();
        done.send((result.map_err(|e| (e.sent, e.to_string())), left))
            .unwrap();
    });
    // A watchdog, not a timing assertion: the call needs one round trip to the in-process
    // cluster, and a hang is what is being tested for.
    let (result, left) = finished
        .recv_timeout(Duration::from_secs(60))
        .expect("send_batch returned");
    let (sent, error) = result.expect_err("the third record is too large");
    assert!(error.contains("exceeds the limit"), "{error}");
    assert_eq!(sent, 2);
    assert_eq!(
        left,
        [20_000],
        "the refused record is handed back; none came after it"
    );
}
