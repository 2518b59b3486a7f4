//! Faults injected with the mock cluster's own tools (a broker down, request errors): the
//! errors are typed (code, topic, partition; timeouts apart from retriable errors), nothing
//! panics, and no record acknowledged under `acks=all` is lost.
#![cfg(feature = "kafka")]

use std::collections::BTreeSet;
use std::time::Duration;

use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::kafka::rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use logbus::kafka::{KafkaBroker, KafkaConfig, MockCluster};
use logbus::{Error, Record, TopicConfig, TopicPartition};

fn broker(settings: &[(&str, &str)]) -> KafkaBroker {
    let mut config = KafkaConfig::new("").request_timeout(Duration::from_secs(5));
    for (k, v) in settings {
        config = config.set(*k, *v);
    }
    KafkaBroker::mock_with(MockCluster::start(3).unwrap(), config).unwrap()
}

fn mock(broker: &KafkaBroker) -> &MockCluster {
    broker.mock_cluster().expect("a mock cluster")
}

#[test]
fn a_leader_down_times_out_then_recovers() {
    let kafka = broker(&[("message.timeout.ms", "1500")]);
    kafka
        .create_topic::<(), u64>("t", TopicConfig::new(2))
        .unwrap();
    let producer = kafka.producer::<(), u64>();
    producer.send(Record::new("t", 0).partition(0)).unwrap();
    mock(&kafka).partition_leader("t", 0, 1).unwrap();
    mock(&kafka).broker_down(1).unwrap();

    let err = producer.send(Record::new("t", 1).partition(0)).unwrap_err();
    match err.error() {
        Error::Timeout {
            operation: "send",
            topic: Some(t),
            partition: Some(0),
            code: Some(code),
            timeout_ms: Some(1500),
        } => {
            assert_eq!(t, "t");
            assert_eq!(*code, -192, "librdkafka's _MSG_TIMED_OUT");
        }
        other => panic!("expected a send timeout, got {other:?}"),
    }
    assert!(!err.error().is_retriable(), "a timeout is told apart");
    assert_eq!(
        err.into_record().map(|r| r.value),
        Some(1),
        "the record is handed back"
    );
    // The other partition's leader is up: it is not held back.
    mock(&kafka).partition_leader("t", 1, 2).unwrap();
    producer.send(Record::new("t", 2).partition(1)).unwrap();

    mock(&kafka).broker_up(1).unwrap();
    let meta = producer.send(Record::new("t", 3).partition(0)).unwrap();
    assert_eq!(meta.partition, 0);
}

#[test]
fn request_errors_are_retried_or_typed() {
    let kafka = broker(&[("retries", "3"), ("retry.backoff.ms", "10")]);
    kafka
        .create_topic::<(), u64>("t", TopicConfig::new(1))
        .unwrap();
    let producer = kafka.producer::<(), u64>();
    let m = mock(&kafka);

    // Retriable errors, fewer than the retries: the send succeeds, once.
    m.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS; 2],
    );
    let meta = producer.send(Record::new("t", 10)).unwrap();
    assert_eq!(meta.offset, 0);

    // More than the retries: a typed, retriable error naming the partition (the
    // partitioner's choice: the record named none).
    m.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS; 8],
    );
    let err = producer.send(Record::new("t", 11)).unwrap_err();
    match err.error() {
        Error::Kafka {
            code: 19,
            name,
            retriable: true,
            topic: Some(t),
            partition: Some(0),
            ..
        } => {
            assert_eq!(t, "t");
            assert!(name.contains("NotEnoughReplicas"), "{name}");
        }
        other => panic!("expected NOT_ENOUGH_REPLICAS, got {other:?}"),
    }
    assert!(err.error().is_retriable());
    m.clear_request_errors(RDKafkaApiKey::Produce);

    // Not retriable: refused at once.
    m.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED],
    );
    let err = producer.send(Record::new("t", 12)).unwrap_err();
    assert!(
        matches!(
            err.error(),
            Error::Kafka {
                code: 29,
                retriable: false,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("of `t`"), "{err}");
    m.clear_request_errors(RDKafkaApiKey::Produce);

    // A commit the coordinator refuses: typed too.
    let mut consumer = kafka
        .consumer::<(), u64>(ConsumerConfig::new().group_id("g"))
        .unwrap();
    let tp = TopicPartition::new("t", 0);
    consumer.assign(std::slice::from_ref(&tp)).unwrap();
    m.request_errors(
        RDKafkaApiKey::OffsetCommit,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED],
    );
    let err = consumer.commit_offsets(&[(tp.clone(), 1)]).unwrap_err();
    assert!(matches!(err, Error::Kafka { code: 30, .. }), "{err}");
    consumer.commit_offsets(&[(tp.clone(), 1)]).unwrap();
    assert_eq!(consumer.committed(&tp).unwrap(), Some(1));
}

/// Sends through a storm of faults (leaders moving and going down, retriable request
/// errors), then reads everything back: every record whose send returned Ok is there,
/// exactly once (the producer is idempotent).
#[test]
fn no_acknowledged_record_is_lost_under_acks_all() {
    let kafka = broker(&[
        ("acks", "all"),
        ("enable.idempotence", "true"),
        ("message.timeout.ms", "1500"),
        ("retry.backoff.ms", "10"),
    ]);
    kafka
        .create_topic::<(), u64>("ledger", TopicConfig::new(3))
        .unwrap();
    let m = mock(&kafka);
    let producer = kafka.producer::<(), u64>();
    let mut acknowledged = BTreeSet::new();
    let mut failed = 0;
    for round in 0..6u64 {
        // Faults for this round.
        let down = (round % 3) as i32 + 1;
        for p in 0..3 {
            // Partition p's leader: a live broker other than `down`, moving each round.
            let leader = ((p as i32 + round as i32) % 3) + 1;
            let leader = if leader == down { down % 3 + 1 } else { leader };
            // In the rounds with a broker down, partition 0 is led by it: its records
            // time out (not acknowledged), the others' go through.
            let leader = if round % 2 == 1 && p == 0 {
                down
            } else {
                leader
            };
            m.partition_leader("ledger", p, leader).unwrap();
        }
        if round % 2 == 1 {
            m.broker_down(down).unwrap();
        }
        m.request_errors(
            RDKafkaApiKey::Produce,
            &[
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
            ],
        );
        let mut batch: Vec<_> = (0..50u64)
            .map(|i| Record::new("ledger", round * 1000 + i).partition((i % 3) as u32))
            .collect();
        let total = batch.len();
        match producer.send_batch(&mut batch) {
            Ok(n) => {
                assert_eq!(n, total);
                acknowledged.extend((0..50u64).map(|i| round * 1000 + i));
            }
            Err(e) => {
                // Typed, never a panic; the failed record and the others not acknowledged
                // came back (partition 0's: its leader is down), the rest went through.
                assert!(
                    matches!(e.error, Error::Kafka { .. } | Error::Timeout { .. }),
                    "{e}"
                );
                failed += batch.len();
                assert!(
                    batch.iter().all(|r| r.partition == Some(0)),
                    "only partition 0's records are handed back"
                );
                assert!(!batch.is_empty(), "a failed send hands its record back");
                assert_eq!(e.sent, total - batch.len());
                let not_acked: BTreeSet<u64> = batch.iter().map(|r| r.value).collect();
                acknowledged.extend(
                    (0..50u64)
                        .map(|i| round * 1000 + i)
                        .filter(|v| !not_acked.contains(v)),
                );
            }
        }
        for v in 0..10u64 {
            let single =
                Record::new("ledger", round * 1000 + 500 + v).partition(1 + (v % 2) as u32);
            if let Ok(_meta) = producer.send(single) {
                acknowledged.insert(round * 1000 + 500 + v);
            } else {
                failed += 1;
            }
        }
        if round % 2 == 1 {
            m.broker_up(down).unwrap();
        }
        m.clear_request_errors(RDKafkaApiKey::Produce);
    }
    assert!(
        acknowledged.len() >= 60,
        "most sends succeed: {failed} failed"
    );
    assert!(
        failed > 0,
        "the rounds with partition 0's leader down fail some sends"
    );

    let mut consumer = kafka
        .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    let all: Vec<_> = (0..3).map(|p| TopicPartition::new("ledger", p)).collect();
    consumer.assign(&all).unwrap();
    let mut read = Vec::new();
    loop {
        let records = consumer.poll(Duration::from_millis(200)).unwrap();
        if records.is_empty() {
            break;
        }
        read.extend(records.into_iter().map(|r| r.value));
    }
    let read_set: BTreeSet<u64> = read.iter().copied().collect();
    let lost: Vec<_> = acknowledged.difference(&read_set).collect();
    assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");
    assert_eq!(
        read.len(),
        read_set.len(),
        "no duplicates (idempotent producer)"
    );
}

/// An error met after a poll read records (here, checking with the cluster whether a
/// partition not fetched yet holds more) comes with the next poll: the records come first.
/// Returned at once, the error dropped them, their positions already moved past them.
#[test]
fn a_poll_returns_the_records_it_read_before_an_error() {
    let kafka = broker(&[]);
    kafka
        .create_topic::<(), u64>("read", TopicConfig::new(1))
        .unwrap();
    kafka
        .create_topic::<(), u64>("slow", TopicConfig::new(1))
        .unwrap();
    let m = mock(&kafka);
    m.partition_leader("read", 0, 1).unwrap();
    m.partition_leader("slow", 0, 2).unwrap();
    let producer = kafka.producer::<(), u64>();
    let mut batch: Vec<_> = (0..10u64).map(|v| Record::new("read", v)).collect();
    producer.send_batch(&mut batch).unwrap();

    // Every answer of `slow`'s leader comes late: the consumer has no high watermark for
    // it when it has read `read`'s records, so the poll asks the cluster, and that fails.
    m.broker_round_trip_time(2, Duration::from_millis(1500))
        .unwrap();
    let mut consumer = kafka
        .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    let read = TopicPartition::new("read", 0);
    consumer
        .assign(&[read.clone(), TopicPartition::new("slow", 0)])
        .unwrap();
    m.request_errors(
        RDKafkaApiKey::ListOffsets,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED; 4],
    );

    let first = consumer.poll(Duration::from_secs(5));
    let values: Vec<u64> = match first {
        Ok(records) => records.into_iter().map(|r| r.value).collect(),
        Err(e) => panic!("the records read came without the error, got {e}"),
    };
    assert_eq!(values, (0..10).collect::<Vec<_>>());
    assert_eq!(consumer.position(&read).unwrap(), 10);
    let second = consumer.poll(Duration::from_secs(5)).map(|r| r.len());
    assert!(
        matches!(
            second,
            Err(Error::Kafka {
                operation: "watermarks",
                code: 29,
                ..
            })
        ),
        "the error comes with the next poll: {second:?}"
    );
    m.clear_request_errors(RDKafkaApiKey::ListOffsets);
    m.broker_round_trip_time(2, Duration::ZERO).unwrap();
    // Nothing is read twice.
    let third = consumer.poll(Duration::from_millis(500)).unwrap();
    assert!(third.is_empty(), "{third:?}");
}
