//! The broker, producers and consumers through the public API: each behaviour and every
//! error path of issue 12.
#![allow(clippy::cloned_ref_to_slice_refs)] // `&[tp.clone()]` reads as the Kafka call it mirrors

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use logbus::broker::{Broker, Overflow, TopicConfig, TopicPartition};
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::producer::{partition_for_key, Partitioner, ProducerConfig, Record};
use logbus::{Error, ManualClock};

const T0: i64 = 1_700_000_000_000;

fn broker() -> (Broker, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(T0));
    (
        Broker::builder().clock(clock.clone()).build().unwrap(),
        clock,
    )
}

fn tp(topic: &str, p: u32) -> TopicPartition {
    TopicPartition::new(topic, p)
}

fn earliest(group: &str) -> ConsumerConfig {
    ConsumerConfig::new()
        .group_id(group)
        .auto_offset_reset(OffsetReset::Earliest)
}

fn values(b: &Broker, topic: &str, p: u32, reset: OffsetReset) -> Vec<u64> {
    let mut c = b
        .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(reset))
        .unwrap();
    c.assign(&[tp(topic, p)]).unwrap();
    let mut out = Vec::new();
    let mut v = Vec::new();
    while c
        .poll_with(1000, Duration::ZERO, |r| v.push(r.to_record()))
        .unwrap()
        > 0
    {
        out.extend(v.drain(..).map(|r| r.value));
    }
    out
}

#[test]
fn produce_then_consume_with_offsets_timestamps_headers() {
    let (b, _) = broker();
    b.create_topic::<String, String>("t", TopicConfig::new(1))
        .unwrap();
    let p = b.producer::<String, String>();
    let m0 = p
        .send(Record::new("t", "a".to_string()).key("k".into()))
        .unwrap();
    let m1 = p
        .send(
            Record::new("t", "b".to_string())
                .timestamp(5)
                .header("h", Some(bytes::Bytes::from_static(b"x")))
                .header("n", None),
        )
        .unwrap();
    assert_eq!((m0.partition, m0.offset, m0.timestamp), (0, 0, T0));
    assert_eq!((m1.offset, m1.timestamp), (1, 5));
    let mut c = b.consumer::<String, String>(earliest("g")).unwrap();
    c.assign(&[tp("t", 0)]).unwrap();
    let recs = c.poll(Duration::from_secs(1)).unwrap();
    assert_eq!(recs.len(), 2);
    let r: Vec<_> = recs.iter().collect();
    assert_eq!((r[0].topic, r[0].partition, r[0].offset), ("t", 0, 0));
    assert_eq!(r[0].key.as_deref(), Some("k"));
    assert_eq!(r[1].timestamp, 5);
    assert_eq!(r[1].headers.len(), 2);
    assert_eq!(r[1].headers[1], ("n".to_string(), None));
    assert_eq!(recs.partitions(), vec![tp("t", 0)]);
    assert_eq!(recs.records(&tp("t", 0)).count(), 2);
    assert_eq!(c.position(&tp("t", 0)).unwrap(), 2);
    assert_eq!(c.metrics().records_consumed(), 2);
}

#[test]
fn topic_names_follow_kafkas_rule() {
    let (b, _) = broker();
    // Kafka's characters; its 249-character limit less what a persisted topic's file
    // names add (MAX_TOPIC_NAME_LEN, one limit for every kind of topic).
    for ok in ["a", "A-b_c.9", &"x".repeat(242)] {
        b.create_topic::<(), u64>(ok, TopicConfig::new(1)).unwrap();
    }
    for bad in [
        "",
        ".",
        "..",
        "a/b",
        "../x",
        "a b",
        "é",
        "a\0",
        &"x".repeat(243),
        &"x".repeat(250),
    ] {
        match b.create_topic::<(), u64>(bad, TopicConfig::new(1)) {
            Err(Error::InvalidTopicName { name, reason }) => {
                assert_eq!(name, bad);
                assert!(!reason.is_empty());
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    assert_eq!(b.topics().len(), 3);
}

#[test]
fn topic_admin_errors() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(2)).unwrap();
    assert!(matches!(
        b.create_topic::<(), u64>("t", TopicConfig::new(2)),
        Err(Error::TopicExists { .. })
    ));
    match b.topic::<String, u64>("t") {
        Err(Error::TypeMismatch {
            existing,
            requested,
            ..
        }) => {
            assert!(
                existing.contains("()") && existing.contains("u64"),
                "{existing}"
            );
            assert!(requested.contains("String"), "{requested}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        b.topic::<(), u64>("nope"),
        Err(Error::UnknownTopic { .. })
    ));
    for n in [0, 1 << 17] {
        assert!(matches!(
            b.create_topic::<(), u64>("z", TopicConfig::new(n)),
            Err(Error::InvalidConfig {
                name: "partitions",
                ..
            })
        ));
    }
    for r in [0, 1, 3, 1000, 1 << 29] {
        assert!(matches!(
            b.create_topic::<(), u64>("z", TopicConfig::new(1).records_in_memory(r)),
            Err(Error::InvalidConfig {
                name: "records_in_memory",
                ..
            })
        ));
    }
    assert!(matches!(
        b.create_topic::<(), u64>("z", TopicConfig::new(1).retention(Duration::ZERO)),
        Err(Error::InvalidConfig {
            name: "retention",
            ..
        })
    ));
    for n in [1, 2] {
        assert!(matches!(
            b.add_partitions("t", n),
            Err(Error::PartitionsCannotShrink { current: 2, .. })
        ));
    }
    assert!(matches!(
        b.add_partitions("nope", 3),
        Err(Error::UnknownTopic { .. })
    ));
    assert!(matches!(
        b.add_partitions("t", (1 << 16) + 1),
        Err(Error::InvalidConfig { .. })
    ));
    b.add_partitions("t", 5).unwrap();
    assert_eq!(b.topic::<(), u64>("t").unwrap().partition_count(), 5);
    assert!(matches!(
        b.delete_topic("nope"),
        Err(Error::UnknownTopic { .. })
    ));
    assert!(matches!(
        b.describe_topic("nope"),
        Err(Error::UnknownTopic { .. })
    ));
    b.delete_topic("t").unwrap();
    assert!(b.topics().is_empty());
}

#[test]
fn describe_topic_reports_offsets_per_partition() {
    let (b, _) = broker();
    b.create_topic::<(), u64>(
        "t",
        TopicConfig::new(2)
            .records_in_memory(4)
            .overflow(Overflow::DropOldest),
    )
    .unwrap();
    let p = b.producer::<(), u64>();
    for i in 0..6 {
        p.send(Record::new("t", i).partition(1)).unwrap();
    }
    let d = b.describe_topic("t").unwrap();
    assert_eq!(d.partitions[0].log_end, 0);
    let p1 = d.partitions[1];
    assert_eq!(
        (
            p1.log_start,
            p1.high_watermark,
            p1.log_end,
            p1.records_in_memory
        ),
        (2, 6, 6, 4)
    );
    assert_eq!(d.config.partitions(), 2);
    assert_eq!(values(&b, "t", 1, OffsetReset::Earliest), [2, 3, 4, 5]);
}

#[test]
fn producer_errors_hand_the_record_back() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(2)).unwrap();
    let p = b.producer::<(), u64>();
    let e = p.send(Record::new("nope", 1)).unwrap_err();
    assert!(matches!(e.error(), Error::UnknownTopic { .. }));
    assert_eq!(e.into_record().unwrap().value, 1);
    let e = p.send(Record::new("t", 2).partition(2)).unwrap_err();
    assert!(matches!(
        e.error(),
        Error::PartitionOutOfRange {
            partition: 2,
            count: 2,
            ..
        }
    ));
    let e = p.send(Record::new("t", 3).timestamp(-1)).unwrap_err();
    assert!(matches!(
        e.error(),
        Error::InvalidTimestamp {
            timestamp: -1,
            offset: None
        }
    ));
    let wrong = b.producer::<String, u64>();
    let e = wrong.send(Record::new("t", 4)).unwrap_err();
    assert!(matches!(e.error(), Error::TypeMismatch { .. }));
    // Converts into the crate error with `?`.
    let f = || -> logbus::Result<()> {
        p.send(Record::new("nope", 5))?;
        Ok(())
    };
    assert!(matches!(f(), Err(Error::UnknownTopic { .. })));
    assert!(format!("{e:?}").contains("TypeMismatch"));
    assert!(matches!(
        b.producer_with_config::<(), u64>(ProducerConfig::new().sticky_batch(0)),
        Err(Error::InvalidConfig {
            name: "sticky_batch",
            ..
        })
    ));
    p.flush().unwrap();
}

#[test]
fn keys_land_where_kafka_puts_them_and_unkeyed_records_stick_in_batches() {
    let (b, _) = broker();
    b.create_topic::<String, u64>("t", TopicConfig::new(7))
        .unwrap();
    let p = b.producer::<String, u64>();
    for i in 0..100u64 {
        let key = format!("key-{i}");
        let m = p.send(Record::new("t", i).key(key.clone())).unwrap();
        assert_eq!(m.partition, partition_for_key(key.as_bytes(), 7));
    }
    let p = b
        .producer_with_config::<String, u64>(ProducerConfig::new().sticky_batch(3))
        .unwrap();
    let parts: Vec<u32> = (0..9)
        .map(|i| p.send(Record::new("t", i)).unwrap().partition)
        .collect();
    for chunk in parts.chunks(3) {
        assert!(chunk.iter().all(|&x| x == chunk[0]), "{parts:?}");
    }
    assert_eq!(parts[3], (parts[0] + 1) % 7);
    assert_eq!(parts[6], (parts[3] + 1) % 7);
}

struct Mod3;
impl Partitioner<u64> for Mod3 {
    fn partition(&self, _: &str, key: Option<&u64>, n: u32) -> Option<u32> {
        key.map(|k| (*k % 3) as u32 % n.max(1) + u32::from(*k == 99) * 100)
    }
}

#[test]
fn user_partitioner_decides_and_is_checked() {
    let (b, _) = broker();
    b.create_topic::<u64, u64>("t", TopicConfig::new(3))
        .unwrap();
    let p = b
        .producer_with_partitioner::<u64, u64>(ProducerConfig::new(), Mod3)
        .unwrap();
    assert_eq!(p.send(Record::new("t", 0).key(5)).unwrap().partition, 2);
    assert!(p.send(Record::new("t", 0)).unwrap().partition < 3);
    assert!(matches!(
        p.send(Record::new("t", 0).key(99)).unwrap_err().error(),
        Error::PartitionOutOfRange { partition: 100, .. }
    ));
}

#[test]
fn added_partitions_are_used_by_existing_producers() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(1)).unwrap();
    let p = b.producer::<(), u64>();
    p.send(Record::new("t", 0)).unwrap();
    b.add_partitions("t", 3).unwrap();
    let m = p.send(Record::new("t", 1).partition(2)).unwrap();
    assert_eq!((m.partition, m.offset), (2, 0));
}

#[test]
fn deleted_topic_fails_producers_and_consumers_and_the_name_can_be_reused() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(1)).unwrap();
    let p = b.producer::<(), u64>();
    p.send(Record::new("t", 0)).unwrap();
    let mut c = b.consumer::<(), u64>(earliest("g")).unwrap();
    c.assign(&[tp("t", 0)]).unwrap();
    b.delete_topic("t").unwrap();
    assert!(matches!(
        p.send(Record::new("t", 1)).unwrap_err().error(),
        Error::UnknownTopic { .. }
    ));
    assert!(matches!(
        c.poll(Duration::ZERO),
        Err(Error::UnknownTopic { .. })
    ));
    assert!(matches!(c.commit_sync(), Err(Error::UnknownTopic { .. })));
    b.create_topic::<(), u64>("t", TopicConfig::new(1)).unwrap();
    assert_eq!(p.send(Record::new("t", 2)).unwrap().offset, 0);
    c.assign(&[tp("t", 0)]).unwrap();
    assert_eq!(c.poll(Duration::ZERO).unwrap().len(), 1);
}

#[test]
fn consumer_errors() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(2)).unwrap();
    assert!(matches!(
        b.consumer::<(), u64>(ConsumerConfig::new().max_poll_records(0)),
        Err(Error::InvalidConfig {
            name: "max_poll_records",
            ..
        })
    ));
    assert!(matches!(
        b.consumer::<(), u64>(ConsumerConfig::new().group_id("")),
        Err(Error::InvalidConfig {
            name: "group_id",
            ..
        })
    ));
    let mut c = b.consumer::<(), u64>(ConsumerConfig::new()).unwrap();
    assert!(matches!(
        c.assign(&[tp("nope", 0)]),
        Err(Error::UnknownTopic { .. })
    ));
    assert!(matches!(
        c.assign(&[tp("t", 0), tp("t", 2)]),
        Err(Error::PartitionOutOfRange {
            partition: 2,
            count: 2,
            ..
        })
    ));
    assert!(
        c.assignment().is_empty(),
        "a refused assign changes nothing"
    );
    let mut wrong = b.consumer::<String, u64>(ConsumerConfig::new()).unwrap();
    assert!(matches!(
        wrong.assign(&[tp("t", 0)]),
        Err(Error::TypeMismatch { .. })
    ));
    c.assign(&[tp("t", 0), tp("t", 0)]).unwrap();
    assert_eq!(c.assignment(), [tp("t", 0)]);
    let other = tp("t", 1);
    assert!(matches!(c.position(&other), Err(Error::NotAssigned { .. })));
    assert!(matches!(c.seek(&other, 0), Err(Error::NotAssigned { .. })));
    assert!(matches!(
        c.seek_to_beginning(&[other.clone()]),
        Err(Error::NotAssigned { .. })
    ));
    assert!(matches!(
        c.seek_to_end(&[other.clone()]),
        Err(Error::NotAssigned { .. })
    ));
    assert!(matches!(
        c.pause(&[other.clone()]),
        Err(Error::NotAssigned { .. })
    ));
    assert!(matches!(
        c.resume(&[other.clone()]),
        Err(Error::NotAssigned { .. })
    ));
    assert!(matches!(
        c.commit_sync(),
        Err(Error::NoGroupId {
            operation: "commit_sync"
        })
    ));
    assert!(matches!(
        c.commit_offsets(&[(tp("t", 0), 0)]),
        Err(Error::NoGroupId { .. })
    ));
    assert!(matches!(
        c.committed(&tp("t", 0)),
        Err(Error::NoGroupId { .. })
    ));
    assert!(matches!(
        c.offsets_for_times(&[(tp("t", 0), -1)]),
        Err(Error::InvalidTimestamp { .. })
    ));
    assert!(matches!(
        c.offsets_for_times(&[(tp("t", 9), 0)]),
        Err(Error::PartitionOutOfRange { .. })
    ));
    assert!(matches!(
        c.beginning_offsets(&[tp("x", 0)]),
        Err(Error::UnknownTopic { .. })
    ));
    assert!(matches!(
        c.end_offsets(&[tp("t", 5)]),
        Err(Error::PartitionOutOfRange { .. })
    ));

    let mut g = b.consumer::<(), u64>(earliest("g")).unwrap();
    g.assign(&[tp("t", 0)]).unwrap();
    assert!(matches!(
        g.commit_offsets(&[(tp("t", 0), 1)]),
        Err(Error::OffsetOutOfRange {
            requested: 1,
            start: 0,
            end: 0,
            ..
        })
    ));
    assert!(matches!(
        g.commit_offsets(&[(tp("t", 7), 0)]),
        Err(Error::PartitionOutOfRange { .. })
    ));
    assert!(matches!(
        g.committed(&tp("nope", 0)),
        Err(Error::UnknownTopic { .. })
    ));
    assert_eq!(g.committed(&tp("t", 0)).unwrap(), None);
}

#[test]
fn latest_is_the_default_and_none_needs_a_seek() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(1)).unwrap();
    let p = b.producer::<(), u64>();
    p.send(Record::new("t", 0)).unwrap();
    let mut latest = b.consumer::<(), u64>(ConsumerConfig::new()).unwrap();
    latest.assign(&[tp("t", 0)]).unwrap();
    assert_eq!(latest.position(&tp("t", 0)).unwrap(), 1);
    let mut none = b
        .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::None))
        .unwrap();
    none.assign(&[tp("t", 0)]).unwrap();
    assert!(matches!(
        none.position(&tp("t", 0)),
        Err(Error::NoOffsetForPartition { .. })
    ));
    assert!(matches!(
        none.poll(Duration::ZERO),
        Err(Error::NoOffsetForPartition { .. })
    ));
    none.seek(&tp("t", 0), 0).unwrap();
    assert_eq!(none.poll(Duration::ZERO).unwrap().len(), 1);
    p.send(Record::new("t", 1)).unwrap();
    assert_eq!(
        latest
            .poll(Duration::ZERO)
            .unwrap()
            .iter()
            .next()
            .unwrap()
            .value,
        1
    );
}

#[test]
fn commits_resume_a_group_where_it_left_off() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(1)).unwrap();
    let p = b.producer::<(), u64>();
    for i in 0..10 {
        p.send(Record::new("t", i)).unwrap();
    }
    let mut c = b
        .consumer::<(), u64>(earliest("g").max_poll_records(4))
        .unwrap();
    c.assign(&[tp("t", 0)]).unwrap();
    assert_eq!(c.poll(Duration::ZERO).unwrap().len(), 4);
    c.commit_sync().unwrap();
    assert_eq!(c.committed(&tp("t", 0)).unwrap(), Some(4));
    c.close();
    let mut c = b.consumer::<(), u64>(earliest("g")).unwrap();
    c.assign(&[tp("t", 0)]).unwrap();
    assert_eq!(c.position(&tp("t", 0)).unwrap(), 4);
    c.commit_offsets(&[(tp("t", 0), 2)]).unwrap();
    assert_eq!(c.committed(&tp("t", 0)).unwrap(), Some(2));
    let other = b.consumer::<(), u64>(earliest("h")).unwrap();
    assert_eq!(other.committed(&tp("t", 0)).unwrap(), None);
}

#[test]
fn seek_offsets_for_times_beginning_and_end() {
    let (b, clock) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(1)).unwrap();
    let p = b.producer::<(), u64>();
    for i in 0..10 {
        p.send(Record::new("t", i)).unwrap();
        clock.advance(Duration::from_millis(10));
    }
    let t = tp("t", 0);
    let mut c = b.consumer::<(), u64>(ConsumerConfig::new()).unwrap();
    c.assign(&[t.clone()]).unwrap();
    assert_eq!(c.beginning_offsets(&[t.clone()]).unwrap()[&t], 0);
    assert_eq!(c.end_offsets(&[t.clone()]).unwrap()[&t], 10);
    let found = c.offsets_for_times(&[(t.clone(), T0 + 35)]).unwrap()[&t].unwrap();
    assert_eq!((found.offset, found.timestamp), (4, T0 + 40));
    assert_eq!(
        c.offsets_for_times(&[(t.clone(), T0 + 1000)]).unwrap()[&t],
        None
    );
    c.seek(&t, found.offset).unwrap();
    let got: Vec<u64> = c
        .poll(Duration::ZERO)
        .unwrap()
        .iter()
        .map(|r| r.value)
        .collect();
    assert_eq!(got, [4, 5, 6, 7, 8, 9]);
    c.seek_to_beginning(&[]).unwrap();
    assert_eq!(c.position(&t).unwrap(), 0);
    c.seek_to_end(&[t.clone()]).unwrap();
    assert_eq!(c.position(&t).unwrap(), 10);
}

#[test]
fn pause_and_resume() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(2)).unwrap();
    let p = b.producer::<(), u64>();
    p.send(Record::new("t", 0).partition(0)).unwrap();
    p.send(Record::new("t", 1).partition(1)).unwrap();
    let mut c = b.consumer::<(), u64>(earliest("g")).unwrap();
    c.assign(&[tp("t", 0), tp("t", 1)]).unwrap();
    c.pause(&[tp("t", 0)]).unwrap();
    assert_eq!(c.paused(), [tp("t", 0)]);
    let got: Vec<_> = c
        .poll(Duration::ZERO)
        .unwrap()
        .iter()
        .map(|r| r.value)
        .collect();
    assert_eq!(got, [1]);
    assert!(c.poll(Duration::from_millis(5)).unwrap().is_empty());
    c.resume(&[tp("t", 0)]).unwrap();
    let got: Vec<_> = c
        .poll(Duration::ZERO)
        .unwrap()
        .iter()
        .map(|r| r.value)
        .collect();
    assert_eq!(got, [0]);
}

#[test]
fn behind_the_tail_none_errors_and_keeps_the_position() {
    let (b, _) = broker();
    let config = TopicConfig::new(1)
        .records_in_memory(4)
        .overflow(Overflow::DropOldest);
    b.create_topic::<(), u64>("t", config).unwrap();
    let p = b.producer::<(), u64>();
    let t = tp("t", 0);
    let mut c = b
        .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::None))
        .unwrap();
    c.assign(&[t.clone()]).unwrap();
    c.seek(&t, 0).unwrap();
    for i in 0..10 {
        p.send(Record::new("t", i)).unwrap();
    }
    match c.poll(Duration::ZERO) {
        Err(Error::OffsetOutOfRange {
            requested,
            start,
            end,
            ..
        }) => assert_eq!((requested, start, end), (0, 6, 10)),
        other => panic!("{other:?}"),
    }
    assert_eq!(c.position(&t).unwrap(), 0);
    c.seek(&t, 11).unwrap();
    assert!(matches!(
        c.poll(Duration::ZERO),
        Err(Error::OffsetOutOfRange { requested: 11, .. })
    ));
    c.seek(&t, 7).unwrap();
    assert_eq!(c.poll(Duration::ZERO).unwrap().len(), 3);
}

#[test]
fn behind_the_tail_earliest_and_latest_count_what_they_skip() {
    for (reset, skipped, first) in [
        (OffsetReset::Earliest, 6, Some(6)),
        (OffsetReset::Latest, 10, None),
    ] {
        let (b, _) = broker();
        let config = TopicConfig::new(1)
            .records_in_memory(4)
            .overflow(Overflow::DropOldest);
        b.create_topic::<(), u64>("t", config).unwrap();
        let p = b.producer::<(), u64>();
        let t = tp("t", 0);
        let mut c = b
            .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(reset))
            .unwrap();
        c.assign(&[t.clone()]).unwrap();
        c.seek(&t, 0).unwrap();
        for i in 0..10 {
            p.send(Record::new("t", i)).unwrap();
        }
        let got = c.poll(Duration::ZERO).unwrap();
        assert_eq!(got.iter().next().map(|r| r.value), first);
        assert_eq!(c.metrics().skipped(&t), skipped);
        assert_eq!(c.metrics().total_skipped(), skipped);
        assert_eq!(c.metrics().records_consumed() + skipped, 10);
    }
}

/// The retention tests' log (topic `t`, retention 60 s): records 0..5, then 5..8 30 s
/// later, then 31 s more, so that the first five are past the retention and the last
/// three are not.
fn send_across_retention(b: &Broker, clock: &ManualClock) {
    let p = b.producer::<(), u64>();
    for i in 0..5 {
        p.send(Record::new("t", i)).unwrap();
    }
    clock.advance(Duration::from_secs(30));
    for i in 5..8 {
        p.send(Record::new("t", i)).unwrap();
    }
    clock.advance(Duration::from_secs(31));
}

#[test]
fn retention_expires_old_records() {
    let (b, clock) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(1).retention(Duration::from_secs(60)))
        .unwrap();
    send_across_retention(&b, &clock);
    let d = b.describe_topic("t").unwrap().partitions[0];
    assert_eq!((d.log_start, d.log_end, d.records_in_memory), (5, 8, 3));
    assert_eq!(values(&b, "t", 0, OffsetReset::Earliest), [5, 6, 7]);
}

/// A consumer positioned before the time passes still sees records expire at its next
/// poll: the poll asks the clock for partitions with retention by age (it skips the clock
/// only for those without), in `poll` (copied) and in `poll_with` (lent in place, to a
/// group member on a `Block` topic).
#[test]
fn retention_applies_to_a_consumer_positioned_before_the_time_passed() {
    for lend in [false, true] {
        let (b, clock) = broker();
        b.create_topic::<(), u64>("t", TopicConfig::new(1).retention(Duration::from_secs(60)))
            .unwrap();
        let t = tp("t", 0);
        let mut c = b.consumer::<(), u64>(earliest("g")).unwrap();
        c.assign(&[t.clone()]).unwrap();
        send_across_retention(&b, &clock);
        let got: Vec<u64> = if lend {
            let mut got = Vec::new();
            c.poll_with(10, Duration::ZERO, |r| got.push(*r.value))
                .unwrap();
            got
        } else {
            let records = c.poll(Duration::ZERO).unwrap();
            records.iter().map(|r| r.value).collect()
        };
        assert_eq!(got, [5, 6, 7], "poll_with: {lend}");
        assert_eq!(c.metrics().skipped(&t), 5, "poll_with: {lend}");
    }
}

#[test]
fn block_gates_producers_on_the_committed_offset_until_delete_group() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(1).records_in_memory(4))
        .unwrap();
    let p = b.producer::<(), u64>();
    let t = tp("t", 0);
    let mut c = b.consumer::<(), u64>(earliest("g")).unwrap();
    c.assign(&[t.clone()]).unwrap();
    for i in 0..4 {
        p.try_send(Record::new("t", i)).unwrap();
    }
    let e = p.try_send(Record::new("t", 4)).unwrap_err();
    assert!(matches!(e.error(), Error::Full { partition: 0, .. }), "{e}");
    let e = p
        .try_send(Record::new("t", 4).timestamp(9).header("h", None))
        .unwrap_err();
    let back = e.into_record().unwrap();
    assert_eq!(
        (back.value, back.timestamp, back.headers.len()),
        (4, Some(9), 1)
    );
    // Reading does not release the gate: committing does.
    assert_eq!(c.poll(Duration::ZERO).unwrap().len(), 4);
    assert!(p.try_send(Record::new("t", 4)).is_err());
    assert!(matches!(
        p.send_timeout(Record::new("t", 4), Duration::from_millis(5))
            .unwrap_err()
            .error(),
        Error::Timeout { .. }
    ));
    c.commit_offsets(&[(t.clone(), 2)]).unwrap();
    p.try_send(Record::new("t", 4)).unwrap();
    p.try_send(Record::new("t", 5)).unwrap();
    assert!(p.try_send(Record::new("t", 6)).is_err());
    // A consumer without group never gates.
    let mut free = b.consumer::<(), u64>(ConsumerConfig::new()).unwrap();
    free.assign(&[t.clone()]).unwrap();
    // delete_group is refused while the group has an open consumer...
    assert!(matches!(
        b.delete_group("g"),
        Err(Error::GroupNotEmpty { members: 1, .. })
    ));
    assert!(matches!(
        b.delete_group("zz"),
        Err(Error::UnknownGroup { .. })
    ));
    let names: Vec<_> = b.list_groups().into_iter().map(|g| g.group).collect();
    assert_eq!(names, ["g"]);
    c.close();
    assert!(
        p.try_send(Record::new("t", 6)).is_err(),
        "the gate outlives the consumer"
    );
    // ...and releases the gate once it is closed.
    b.delete_group("g").unwrap();
    for i in 6..20 {
        p.try_send(Record::new("t", i)).unwrap();
    }
    assert!(b.list_groups().is_empty());
}

#[test]
fn a_blocked_send_wakes_on_commit_and_on_delete() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(1).records_in_memory(2))
        .unwrap();
    let p = b.producer::<(), u64>();
    let t = tp("t", 0);
    let mut c = b.consumer::<(), u64>(earliest("g")).unwrap();
    c.assign(&[t.clone()]).unwrap();
    p.send(Record::new("t", 0)).unwrap();
    p.send(Record::new("t", 1)).unwrap();
    let p2 = p.clone();
    let h = thread::spawn(move || p2.send(Record::new("t", 2)).map(|m| m.offset));
    thread::sleep(Duration::from_millis(20));
    assert_eq!(c.poll(Duration::ZERO).unwrap().len(), 2);
    c.commit_sync().unwrap();
    assert_eq!(h.join().unwrap().unwrap(), 2);
    drop(c);
    // A send blocked on a full partition when its topic is deleted ends with `Closed`. The
    // sender thread may not have reached its wait before the delete on a loaded machine (its
    // send then finds no topic): repeat, waiting longer each time, until a blocked send was
    // seen woken.
    let mut woken = false;
    for attempt in 1..=20u64 {
        b.create_topic::<(), u64>("u", TopicConfig::new(1).records_in_memory(2))
            .unwrap();
        let mut c = b.consumer::<(), u64>(earliest("gu")).unwrap();
        c.assign(&[tp("u", 0)]).unwrap();
        p.send(Record::new("u", 0)).unwrap();
        p.send(Record::new("u", 1)).unwrap();
        let p3 = p.clone();
        let h = thread::spawn(move || p3.send(Record::new("u", 2)).map_err(|e| e.into_error()));
        thread::sleep(Duration::from_millis(20 * attempt));
        b.delete_topic("u").unwrap();
        match h.join().unwrap() {
            Err(Error::Closed { .. }) => woken = true,
            Err(Error::UnknownTopic { .. }) => {}
            other => panic!("a send racing delete_topic returned {other:?}"),
        }
        drop(c);
        b.delete_group("gu").unwrap();
        if woken {
            break;
        }
    }
    assert!(woken, "no send was seen blocked and woken by delete_topic");
}

/// A backward commit is stored as asked, but can gate producers only from the lowest
/// offset no producer may already have claimed room over (the ring's overwrite floor):
/// a producer's claim limit, once computed, cannot be taken back.
#[test]
fn a_backward_commit_gates_from_the_rings_floor() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(1).records_in_memory(4))
        .unwrap();
    let p = b.producer::<(), u64>();
    let t = tp("t", 0);
    let mut c = b.consumer::<(), u64>(earliest("g")).unwrap();
    c.assign(&[t.clone()]).unwrap();
    for i in 0..4 {
        p.try_send(Record::new("t", i)).unwrap();
    }
    c.commit_offsets(&[(t.clone(), 4)]).unwrap();
    p.try_send(Record::new("t", 4)).unwrap();
    c.commit_offsets(&[(t.clone(), 2)]).unwrap();
    assert_eq!(c.committed(&t).unwrap(), Some(2));
    // The producer already holds room up to offset 7 (gate 4 + 4 slots); no further.
    for i in 5..8 {
        p.try_send(Record::new("t", i)).unwrap();
    }
    assert!(p.try_send(Record::new("t", 8)).is_err());
    c.seek(&t, 4).unwrap();
    let got: Vec<_> = c
        .poll(Duration::ZERO)
        .unwrap()
        .iter()
        .map(|r| r.value)
        .collect();
    assert_eq!(got, [4, 5, 6, 7]);
}

#[test]
fn poll_waits_for_a_record_from_another_thread() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(1)).unwrap();
    b.create_topic::<(), u64>("u", TopicConfig::new(1)).unwrap();
    let mut c = b.consumer::<(), u64>(ConsumerConfig::new()).unwrap();
    c.assign(&[tp("t", 0), tp("u", 0)]).unwrap();
    let p = b.producer::<(), u64>();
    let h = thread::spawn(move || {
        thread::sleep(Duration::from_millis(20));
        p.send(Record::new("u", 7)).unwrap();
    });
    let got = c.poll(Duration::from_secs(10)).unwrap();
    assert_eq!(got.iter().next().unwrap().value, 7);
    h.join().unwrap();
}

#[test]
fn send_batch_sends_in_order_and_keeps_the_rest_on_failure() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(2)).unwrap();
    let p = b.producer::<(), u64>();
    let mut batch: Vec<_> = (0..5).map(|i| Record::new("t", i).partition(1)).collect();
    assert_eq!(p.send_batch(&mut batch).unwrap(), 5);
    assert!(batch.is_empty());
    let mut batch = vec![
        Record::new("t", 5).partition(1),
        Record::new("t", 6).partition(9),
        Record::new("t", 7).partition(1),
    ];
    let e = p.send_batch(&mut batch).unwrap_err();
    assert!(matches!(e.error, Error::PartitionOutOfRange { .. }));
    assert_eq!(e.sent, 1);
    assert_eq!(batch.iter().map(|r| r.value).collect::<Vec<_>>(), [6, 7]);
    assert_eq!(
        values(&b, "t", 1, OffsetReset::Earliest),
        [0, 1, 2, 3, 4, 5]
    );
}

/// Batches that all go to one sticky partition with nothing to box are moved into the
/// ring from the caller's vector: records land as sending them one by one would (sticky
/// windows of `sticky_batch` records, partitions in turn), owned names and emptied header
/// vectors are freed, every value is dropped exactly once, and a batch larger than the
/// room a group's gate leaves is finished by the general path, which waits.
#[test]
fn send_batch_of_plain_records_lands_as_single_sends_would() {
    let (b, _) = broker();
    b.create_topic::<(), Arc<u64>>("t", TopicConfig::new(3).records_in_memory(64))
        .unwrap();
    let p = b
        .producer_with_config::<(), Arc<u64>>(ProducerConfig::new().sticky_batch(5))
        .unwrap();
    let values: Vec<Arc<u64>> = (0..40).map(Arc::new).collect();
    let record = |v: usize| {
        let mut r = Record::new(
            if v % 2 == 0 {
                std::borrow::Cow::Borrowed("t")
            } else {
                std::borrow::Cow::Owned("t".to_string())
            },
            Arc::clone(&values[v]),
        );
        if v % 3 == 0 {
            r.headers = Vec::with_capacity(2);
        }
        r
    };
    // Batches of 3, 2, 5, 1, 4, ...: some inside one sticky window, some across two.
    let mut v = 0;
    for n in [3, 2, 5, 1, 4, 5, 5, 3, 2, 10] {
        let mut batch: Vec<_> = (v..v + n).map(record).collect();
        assert_eq!(p.send_batch(&mut batch).unwrap(), n);
        assert!(batch.is_empty());
        v += n;
    }
    assert_eq!(v, 40);
    let mut c = b
        .consumer::<(), Arc<u64>>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    c.assign(
        &(0..3)
            .map(|p| TopicPartition::new("t", p))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let mut at = vec![None; 40];
    for r in c.poll(Duration::ZERO).unwrap() {
        assert!(at[*r.value as usize].replace(r.partition).is_none());
    }
    let at: Vec<u32> = at.into_iter().map(Option::unwrap).collect();
    // Windows of 5 records, each on the partition after the last one's.
    for (w, window) in at.chunks(5).enumerate() {
        assert!(window.iter().all(|p| *p == window[0]), "window {w}: {at:?}");
        if w > 0 {
            assert_eq!(window[0], (at[(w - 1) * 5] + 1) % 3, "{at:?}");
        }
    }
    drop((c, p));
    b.delete_topic("t").unwrap();
    drop(b);
    for (i, value) in values.iter().enumerate() {
        assert_eq!(Arc::strong_count(value), 1, "value {i}");
    }

    // A gated partition with room for 8: the moved part stops there, the rest waits for
    // the consumer's commits.
    let (b, _) = broker();
    b.create_topic::<(), u64>(
        "g",
        TopicConfig::new(1)
            .records_in_memory(8)
            .overflow(Overflow::Block),
    )
    .unwrap();
    let mut c = b
        .consumer::<(), u64>(
            ConsumerConfig::new()
                .group_id("g")
                .auto_offset_reset(OffsetReset::Earliest),
        )
        .unwrap();
    c.assign(&[TopicPartition::new("g", 0)]).unwrap();
    let p = b.producer::<(), u64>();
    let mut batch: Vec<_> = (0..3).map(|v| Record::new("g", v)).collect();
    p.send_batch(&mut batch).unwrap();
    let reader = thread::spawn(move || {
        let mut got = Vec::new();
        while got.len() < 3 + 20 {
            for r in c.poll(Duration::from_millis(10)).unwrap() {
                got.push(r.value);
            }
            c.commit_sync().unwrap();
        }
        got
    });
    let mut batch: Vec<_> = (3..23).map(|v| Record::new("g", v)).collect();
    assert_eq!(p.send_batch(&mut batch).unwrap(), 20);
    assert_eq!(reader.join().unwrap(), (0..23).collect::<Vec<_>>());
}

/// A clock a millisecond later at every reading.
#[derive(Debug)]
struct Ticking(std::sync::atomic::AtomicI64);

impl logbus::clock::Clock for Ticking {
    fn now_ms(&self) -> i64 {
        T0 + self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
    fn monotonic_ns(&self) -> u64 {
        0
    }
}

#[test]
fn send_batch_stamps_each_run_with_one_clock_reading() {
    let clock = Arc::new(Ticking(std::sync::atomic::AtomicI64::new(0)));
    let b = Broker::builder().clock(clock).build().unwrap();
    b.create_topic::<(), u64>("t", TopicConfig::new(2)).unwrap();
    let p = b.producer::<(), u64>();
    let mut batch: Vec<_> = (0..3).map(|i| Record::new("t", i).partition(0)).collect();
    batch.extend((3..5).map(|i| Record::new("t", i).partition(1)));
    batch.push(Record::new("t", 5).partition(1).timestamp(5));
    assert_eq!(p.send_batch(&mut batch).unwrap(), 6);
    let stamps = |partition| {
        let mut c = b
            .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
            .unwrap();
        c.assign(&[tp("t", partition)]).unwrap();
        let mut v = Vec::new();
        c.poll_with(10, Duration::ZERO, |r| v.push(r.to_record()))
            .unwrap();
        v.iter().map(|r| r.timestamp).collect::<Vec<_>>()
    };
    let (first, second) = (stamps(0), stamps(1));
    assert_eq!(first.len(), 3);
    assert!(first.iter().all(|&t| t == first[0]), "{first:?}");
    assert_eq!(second.len(), 3);
    assert_eq!(second[0], second[1], "{second:?}");
    assert!(second[0] > first[0], "a new run reads the clock again");
    assert_eq!(second[2], 5, "a given timestamp is kept");
}

#[test]
fn several_groups_each_see_every_record_one_group_splits_partitions() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(2)).unwrap();
    let p = b.producer::<(), u64>();
    for i in 0..10 {
        p.send(Record::new("t", i).partition((i % 2) as u32))
            .unwrap();
    }
    let read = |c: &mut logbus::Consumer<(), u64>| -> Vec<u64> {
        let mut v: Vec<u64> = c
            .poll(Duration::ZERO)
            .unwrap()
            .iter()
            .map(|r| r.value)
            .collect();
        v.sort();
        v
    };
    // Pub/sub: two groups, each sees all.
    for g in ["a", "b"] {
        let mut c = b.consumer::<(), u64>(earliest(g)).unwrap();
        c.assign(&[tp("t", 0), tp("t", 1)]).unwrap();
        assert_eq!(read(&mut c), (0..10).collect::<Vec<_>>());
    }
    // Queue: one group, its members split the partitions.
    let mut m0 = b.consumer::<(), u64>(earliest("q")).unwrap();
    let mut m1 = b.consumer::<(), u64>(earliest("q")).unwrap();
    m0.assign(&[tp("t", 0)]).unwrap();
    m1.assign(&[tp("t", 1)]).unwrap();
    assert_eq!(read(&mut m0), [0, 2, 4, 6, 8]);
    assert_eq!(read(&mut m1), [1, 3, 5, 7, 9]);
}

#[test]
fn send_and_sync_shapes() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Broker>();
    send_sync::<logbus::Producer<String, u64>>();
    send_sync::<logbus::Topic<String, u64>>();
    send::<logbus::Consumer<String, u64>>();
    fn clone<T: Clone>() {}
    clone::<logbus::Producer<String, u64>>();
}

#[test]
fn send_batch_blocked_on_a_deleted_topic_hands_back_what_it_did_not_append() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(1).records_in_memory(2))
        .unwrap();
    let mut c = b.consumer::<(), u64>(earliest("g")).unwrap();
    c.assign(&[tp("t", 0)]).unwrap();
    let p = b.producer::<(), u64>();
    let h = thread::spawn(move || {
        let mut batch: Vec<_> = (0..5).map(|i| Record::new("t", i)).collect();
        let e = p.send_batch(&mut batch).unwrap_err();
        (e, batch)
    });
    thread::sleep(Duration::from_millis(20));
    b.delete_topic("t").unwrap();
    let (e, rest) = h.join().unwrap();
    assert!(matches!(e.error, Error::Closed { .. }), "{e}");
    assert_eq!(e.sent, 2, "offsets 0 and 1 fit before the gate");
    assert_eq!(rest.iter().map(|r| r.value).collect::<Vec<_>>(), [2, 3, 4]);
}

#[test]
fn owned_and_static_topic_names_find_their_topics() {
    let (b, _) = broker();
    for name in ["ab", "ba", "abc"] {
        b.create_topic::<(), u64>(name, TopicConfig::new(1))
            .unwrap();
    }
    let p = b.producer::<(), u64>();
    for i in 0..6u64 {
        for name in ["ab", "ba", "abc"] {
            let owned = Record::new(name.to_string(), i);
            assert_eq!(p.send(owned).unwrap().offset, 2 * i);
            assert_eq!(p.send(Record::new(name, i)).unwrap().offset, 2 * i + 1);
        }
    }
    for name in ["ab", "ba", "abc"] {
        assert_eq!(b.describe_topic(name).unwrap().partitions[0].log_end, 12);
    }
}

/// A default (`Block`) topic with no group registered yet overwrites what no group holds:
/// 10,000 records into 4,096 in memory. Never silent: the topic's description counts the
/// 5,904 records overwritten unread, and a group that comes late with `Earliest` reads the
/// 4,096 left from offset 5,904 with a skipped count of 5,904. Records a group committed
/// are not counted when they are overwritten later; once the group is deleted, what is
/// overwritten from its committed offset on is counted again.
#[test]
fn a_block_topic_without_a_group_counts_what_it_overwrote_unread() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(1)).unwrap();
    let p = b.producer::<(), u64>();
    let send = |from: u64, to: u64| {
        for i in from..to {
            p.send(Record::new("t", i)).unwrap();
        }
    };
    send(0, 10_000);
    let d = b.describe_topic("t").unwrap().partitions[0];
    assert_eq!((d.log_start, d.log_end), (5_904, 10_000));
    assert_eq!(d.overwritten_unread, 5_904);

    let mut c = b.consumer::<(), u64>(earliest("late")).unwrap();
    c.subscribe(&["t"]).unwrap();
    let mut got = Vec::new();
    for _ in 0..1_000 {
        if got.len() == 4_096 {
            break;
        }
        c.poll_with(10_000, Duration::from_millis(10), |r| {
            got.push(r.to_record())
        })
        .unwrap();
    }
    assert_eq!(got.len(), 4_096);
    assert_eq!(got[0].offset, 5_904);
    assert_eq!(c.metrics().skipped(&tp("t", 0)), 5_904);
    c.commit_sync().unwrap();
    drop(c);
    // Held by the group (committed up to 10,000): nothing more is overwritten unread.
    send(10_000, 14_000);
    assert_eq!(
        b.describe_topic("t").unwrap().partitions[0].overwritten_unread,
        5_904
    );
    b.delete_group("late").unwrap();
    // From the group's committed offset on, nothing holds the records any more.
    send(14_000, 14_196);
    let d = b.describe_topic("t").unwrap().partitions[0];
    assert_eq!((d.log_start, d.overwritten_unread), (10_100, 5_904 + 100));
    // A DropOldest topic drops by design: not counted there.
    b.create_topic::<(), u64>("d", TopicConfig::new(1).overflow(Overflow::DropOldest))
        .unwrap();
    for i in 0..5_000 {
        p.send(Record::new("d", i)).unwrap();
    }
    assert_eq!(
        b.describe_topic("d").unwrap().partitions[0].overwritten_unread,
        0
    );
}
