//! One scenario, written once, run against the in-process broker and against a Kafka (mock)
//! cluster: the same partition for every key, the same assignments (range, then
//! round-robin), the same committed offsets, the same replayed records.
#![cfg(feature = "kafka")]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::group::{RangeAssignor, RoundRobinAssignor};
use logbus::kafka::{KafkaBroker, KafkaConfig, MockCluster};
use logbus::{Broker, Record, TopicConfig, TopicPartition};

const PARTITIONS: u32 = 6;
const RECORDS: u64 = 60;
const T0: i64 = 1_704_067_200_000;

/// What the scenario observed.
#[derive(Debug, PartialEq, Eq)]
struct Report {
    partition_of_key: BTreeMap<String, u32>,
    /// Each member's partitions, the members sorted (member ids differ between backends).
    range: Vec<Vec<u32>>,
    round_robin: Vec<Vec<u32>>,
    committed: Vec<Option<u64>>,
    /// (partition, offset, key, value, timestamp) of every record read after the seek.
    replayed: Vec<(u32, u64, String, u64, i64)>,
}

/// The scenario. A macro, not a function: the same source expands against either broker
/// type (the point of the test is that the user's code does not change).
macro_rules! scenario {
    ($broker:expr) => {{
        let run = || -> logbus::Result<Report> {
        let broker = $broker;
        broker.create_topic::<String, u64>("clicks", TopicConfig::new(PARTITIONS))?;

        // Produce keyed records.
        let producer = broker.producer::<String, u64>();
        let mut partition_of_key = BTreeMap::new();
        for i in 0..RECORDS {
            let key = format!("user-{}", i % 13);
            let meta = producer.send(
                Record::new("clicks", i)
                    .key(key.clone())
                    .timestamp(T0 + i as i64),
            )?;
            let earlier = partition_of_key.insert(key, meta.partition);
            assert!(earlier.map_or(true, |p| p == meta.partition), "a key stays on its partition");
        }
        producer.flush()?;

        // A group of two, with each assignor: poll both until the group settled and every
        // record was read, then commit.
        let mut assignments = Vec::new();
        let mut committed = Vec::new();
        for (group, round_robin) in [("by-range", false), ("by-round-robin", true)] {
            let config = ConsumerConfig::new()
                .group_id(group)
                .auto_offset_reset(OffsetReset::Earliest)
                .enable_auto_commit(false);
            let config = if round_robin {
                config.assignor(RoundRobinAssignor)
            } else {
                config.assignor(RangeAssignor)
            };
            let mut a = broker.consumer::<String, u64>(config.clone())?;
            let mut b = broker.consumer::<String, u64>(config)?;
            a.subscribe(&["clicks"])?;
            b.subscribe(&["clicks"])?;
            let mut read = BTreeSet::new();
            for _ in 0..300 {
                for r in a.poll(Duration::from_millis(100))? {
                    read.insert((r.partition, r.offset));
                }
                for r in b.poll(Duration::from_millis(100))? {
                    read.insert((r.partition, r.offset));
                }
                let (na, nb) = (a.assignment().len(), b.assignment().len());
                if na > 0 && nb > 0 && na + nb == PARTITIONS as usize && read.len() == RECORDS as usize {
                    let caught_up = (0..PARTITIONS).all(|p| {
                        let tp = TopicPartition::new("clicks", p);
                        let end = b.end_offsets(std::slice::from_ref(&tp)).map(|m| m[&tp]);
                        let pos = a.position(&tp).or_else(|_| b.position(&tp));
                        matches!((pos, end), (Ok(x), Ok(y)) if x == y)
                    });
                    if caught_up {
                        break;
                    }
                }
            }
            let mut members: Vec<Vec<u32>> = [a.assignment(), b.assignment()]
                .into_iter()
                .map(|tps| {
                    let mut ps: Vec<u32> = tps.into_iter().map(|tp| tp.partition).collect();
                    ps.sort();
                    ps
                })
                .collect();
            members.sort();
            assignments.push(members);
            a.commit_sync()?;
            b.commit_sync()?;
            if !round_robin {
                committed = (0..PARTITIONS)
                    .map(|p| a.committed(&TopicPartition::new("clicks", p)))
                    .collect::<logbus::Result<Vec<_>>>()?;
            }
            a.unsubscribe();
            b.unsubscribe();
        }

        // Replay: the range group's reader, assigned by hand, starts at the commits; seek
        // every partition back to offset 3 and read to the end again.
        let mut reader = broker.consumer::<String, u64>(
            ConsumerConfig::new()
                .group_id("by-range")
                .auto_offset_reset(OffsetReset::Earliest),
        )?;
        let all: Vec<_> = (0..PARTITIONS).map(|p| TopicPartition::new("clicks", p)).collect();
        reader.assign(&all)?;
        for tp in &all {
            assert_eq!(Some(reader.position(tp)?), committed[tp.partition as usize]);
            reader.seek(tp, 3)?;
        }
        let mut replayed = Vec::new();
        loop {
            let records = reader.poll(Duration::from_millis(100))?;
            if records.is_empty() {
                break;
            }
            for r in records {
                replayed.push((r.partition, r.offset, r.key.unwrap_or_default(), r.value, r.timestamp));
            }
        }
        replayed.sort();

        let mut range_and_rr = assignments.into_iter();
        Ok(Report {
            partition_of_key,
            range: range_and_rr.next().unwrap_or_default(),
            round_robin: range_and_rr.next().unwrap_or_default(),
            committed,
            replayed,
        })
        };
        run()
    }};
}

#[test]
fn in_process_and_kafka_agree() {
    let in_process = scenario!(Broker::in_memory()).expect("in-process scenario");
    let config = KafkaConfig::new("")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "500");
    let mock = MockCluster::start(3).expect("mock cluster");
    let on_kafka =
        scenario!(KafkaBroker::mock_with(mock, config).expect("broker")).expect("kafka scenario");

    // The facts the scenario must show, checked on their own first (so a failure says
    // which one).
    assert_eq!(in_process.partition_of_key, on_kafka.partition_of_key);
    assert_eq!(in_process.range, vec![vec![0, 1, 2], vec![3, 4, 5]]);
    assert_eq!(in_process.range, on_kafka.range);
    assert_eq!(in_process.round_robin, vec![vec![0, 2, 4], vec![1, 3, 5]]);
    assert_eq!(in_process.round_robin, on_kafka.round_robin);
    let total: u64 = in_process.committed.iter().map(|c| c.unwrap_or(0)).sum();
    assert_eq!(total, RECORDS, "every partition committed at its end");
    assert_eq!(in_process.committed, on_kafka.committed);
    assert_eq!(
        in_process.replayed.len() as u64,
        RECORDS - 3 * PARTITIONS as u64
    );
    assert_eq!(in_process.replayed, on_kafka.replayed);
    assert_eq!(in_process, on_kafka);
}
