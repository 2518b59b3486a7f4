//! Auto-commit against librdkafka's mock cluster: what is committed is what `poll` handed
//! to the application, never a record the consumer fetched and did not hand out.
#![cfg(feature = "kafka")]

use std::time::Duration;

use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::kafka::{KafkaBroker, KafkaConfig, KafkaConsumer, MockCluster};
use logbus::producer::Record;
use logbus::{TopicConfig, TopicPartition};

const POLL: Duration = Duration::from_millis(200);
const INTERVAL: Duration = Duration::from_millis(50);

fn cluster() -> KafkaBroker {
    let config = KafkaConfig::new("")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "500");
    KafkaBroker::mock_with(MockCluster::start(1).expect("mock cluster"), config).expect("broker")
}

/// Records 0..3 and 4..n of `u64`, offset 3 a value that does not decode as one.
fn topic_with_a_bad_record(broker: &KafkaBroker, name: &'static str, n: u64) {
    broker
        .create_topic::<(), u64>(name, TopicConfig::new(1))
        .unwrap();
    let producer = broker.producer::<(), u64>();
    let mut batch: Vec<_> = (0..3u64).map(|v| Record::new(name, v)).collect();
    producer.send_batch(&mut batch).unwrap();
    broker
        .producer::<(), String>()
        .send(Record::new(name, "bad".to_string()))
        .unwrap();
    let mut batch: Vec<_> = (4..n).map(|v| Record::new(name, v)).collect();
    producer.send_batch(&mut batch).unwrap();
}

fn auto_committing(broker: &KafkaBroker, group: &str) -> KafkaConsumer<(), u64> {
    broker
        .consumer::<(), u64>(
            ConsumerConfig::new()
                .group_id(group)
                .auto_offset_reset(OffsetReset::Earliest)
                .enable_auto_commit(true)
                .auto_commit_interval(INTERVAL),
        )
        .unwrap()
}

/// The committed offset once a few auto-commit intervals passed.
fn committed_after_intervals(c: &KafkaConsumer<(), u64>, tp: &TopicPartition) -> Option<u64> {
    std::thread::sleep(INTERVAL * 6);
    c.committed(tp).unwrap()
}

/// A decode error cuts short a batch the consumer took from librdkafka: the records after
/// it were fetched but not handed out (they are fetched again). librdkafka's automatic
/// offset store had stored them as the batch was taken, so auto-commit committed past
/// them: a consumer that stopped then lost them.
#[test]
fn auto_commit_never_passes_records_a_cut_batch_did_not_hand_out() {
    let broker = cluster();
    topic_with_a_bad_record(&broker, "cut", 200);
    let tp = TopicPartition::new("cut", 0);
    let mut c = auto_committing(&broker, "g-cut");
    c.assign(std::slice::from_ref(&tp)).unwrap();
    // Time for the fetch to land: one batch holds the bad record and those after it.
    std::thread::sleep(Duration::from_millis(500));
    let first = c.poll(POLL).unwrap();
    assert_eq!(
        first.iter().map(|r| r.offset).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    // Handed out: 0..3; the bad record at 3 is skipped (the position is past it).
    let committed = committed_after_intervals(&c, &tp);
    assert!(
        matches!(committed, None | Some(3) | Some(4)),
        "committed {committed:?} after handing out offsets 0..3"
    );
    // The rest: the error, then every record; then everything is committed.
    assert!(matches!(c.poll(POLL), Err(logbus::Error::Decode { .. })));
    let mut n = 3;
    for _ in 0..50 {
        n += c.poll(POLL).unwrap().len();
        if n == 199 {
            break;
        }
    }
    assert_eq!(n, 199);
    assert_eq!(committed_after_intervals(&c, &tp), Some(200));
}

/// Records fetched for a partition the application then paused are skipped by `poll` (read
/// again on resume): they must not be committed either.
#[test]
fn auto_commit_never_passes_records_of_a_paused_partition() {
    let broker = cluster();
    broker
        .create_topic::<(), u64>("paused", TopicConfig::new(1))
        .unwrap();
    let mut batch: Vec<_> = (0..200u64).map(|v| Record::new("paused", v)).collect();
    broker.producer::<(), u64>().send_batch(&mut batch).unwrap();
    let tp = TopicPartition::new("paused", 0);
    let mut c = auto_committing(&broker, "g-paused");
    c.assign(std::slice::from_ref(&tp)).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let mut got = Vec::new();
    assert_eq!(
        c.poll_with(5, POLL, |r| got.push(r.to_record())).unwrap(),
        5
    );
    c.pause(std::slice::from_ref(&tp)).unwrap();
    for _ in 0..3 {
        assert!(c.poll(POLL).unwrap().is_empty());
    }
    let committed = committed_after_intervals(&c, &tp);
    assert!(
        matches!(committed, None | Some(5)),
        "committed {committed:?} after handing out offsets 0..5"
    );
    c.resume(std::slice::from_ref(&tp)).unwrap();
    let mut n = 5;
    for _ in 0..50 {
        n += c.poll(POLL).unwrap().len();
        if n == 200 {
            break;
        }
    }
    assert_eq!(n, 200);
    assert_eq!(committed_after_intervals(&c, &tp), Some(200));
}
