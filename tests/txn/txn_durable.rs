//! Transactions on a durable broker: control batches and transactional batches on disk,
//! the partition's transaction state rebuilt at open, the coordinator's transaction log
//! replayed (a transaction open at close is aborted by the next `init_transactions`).

use std::time::Duration;

use logbus::consumer::{ConsumerConfig, IsolationLevel, OffsetReset};
use logbus::persist::PersistConfig;
use logbus::producer::{ProducerConfig, Record};
use logbus::{Broker, TopicConfig, TopicPartition};

pub(crate) fn read(broker: &Broker, topic: &str, isolation: IsolationLevel) -> Vec<u64> {
    let mut c = broker
        .consumer::<(), u64>(
            ConsumerConfig::new()
                .auto_offset_reset(OffsetReset::Earliest)
                .isolation_level(isolation),
        )
        .unwrap();
    let parts = broker.describe_topic(topic).unwrap().partitions.len() as u32;
    let tps: Vec<_> = (0..parts).map(|p| TopicPartition::new(topic, p)).collect();
    c.assign(&tps).unwrap();
    let mut out = Vec::new();
    let mut empty = 0;
    while empty < 3 {
        let got = c.poll(Duration::from_millis(10)).unwrap();
        if got.is_empty() {
            empty += 1;
        }
        out.extend(got.iter().map(|r| r.value));
    }
    out.sort_unstable();
    out
}

fn txn_producer(broker: &Broker) -> logbus::Producer<(), u64> {
    let p = broker
        .producer_with_config::<(), u64>(ProducerConfig::new().transactional_id("w"))
        .unwrap();
    p.init_transactions().unwrap();
    p
}

/// Writes a committed, an aborted and an open transaction and a plain record to `t`.
pub(crate) fn write_history(broker: &Broker) -> logbus::Producer<(), u64> {
    let p = txn_producer(broker);
    p.begin_transaction().unwrap();
    p.send(Record::new("t", 1).partition(0)).unwrap();
    p.send(Record::new("t", 2).partition(1)).unwrap();
    p.commit_transaction().unwrap();
    p.begin_transaction().unwrap();
    p.send(Record::new("t", 3).partition(0)).unwrap();
    p.send(Record::new("t", 4).partition(1)).unwrap();
    p.abort_transaction().unwrap();
    broker
        .producer::<(), u64>()
        .send(Record::new("t", 5).partition(0))
        .unwrap();
    p.begin_transaction().unwrap();
    p.send(Record::new("t", 6).partition(0)).unwrap();
    p
}

pub(crate) fn open(dirs: &[tempfile::TempDir], create: bool) -> Broker {
    Broker::builder()
        .data_dirs(dirs.iter().map(|d| d.path().to_path_buf()))
        .create(create)
        .open()
        .unwrap()
}

fn reopen_keeps_transactions(replicas: u32) {
    let dirs: Vec<_> = (0..replicas)
        .map(|_| tempfile::tempdir().unwrap())
        .collect();
    {
        let broker = open(&dirs, true);
        broker
            .create_topic::<(), u64>(
                "t",
                TopicConfig::new(2)
                    .replication_factor(replicas)
                    .min_insync_replicas(replicas.min(2))
                    .persist(PersistConfig::new()),
            )
            .unwrap();
        let p = write_history(&broker);
        assert_eq!(
            read(&broker, "t", IsolationLevel::ReadCommitted),
            vec![1, 2, 5]
        );
        // Its process died: no drop (which would abort the transaction).
        std::mem::forget(p);
        broker.close().unwrap();
    }
    let broker = open(&dirs, false);
    broker.topic::<(), u64>("t").unwrap();
    // The open transaction is still open: the LSO holds at it.
    assert_eq!(
        read(&broker, "t", IsolationLevel::ReadCommitted),
        vec![1, 2, 5]
    );
    assert_eq!(
        read(&broker, "t", IsolationLevel::ReadUncommitted),
        vec![1, 2, 3, 4, 5, 6]
    );
    // The coordinator's log knows it: a new producer with the id aborts it.
    let p = txn_producer(&broker);
    assert_eq!(
        read(&broker, "t", IsolationLevel::ReadCommitted),
        vec![1, 2, 5]
    );
    p.begin_transaction().unwrap();
    p.send(Record::new("t", 7).partition(1)).unwrap();
    p.commit_transaction().unwrap();
    assert_eq!(
        read(&broker, "t", IsolationLevel::ReadCommitted),
        vec![1, 2, 5, 7]
    );
    let info = broker.describe_topic("t").unwrap().partitions;
    assert!(info
        .iter()
        .all(|i| i.last_stable_offset == i.high_watermark));
    broker.close().unwrap();
}

#[test]
fn a_reopened_broker_keeps_its_transactions_on_one_replica() {
    reopen_keeps_transactions(1);
}

#[test]
fn a_reopened_broker_keeps_its_transactions_on_three_replicas() {
    reopen_keeps_transactions(3);
}
