//! The anomalies Jepsen's Bufstream 0.1.0 analysis (2024) found Kafka's transaction
//! protocol open to, each as a named test that must pass here, on one replica and on three
//! (`min_insync_replicas` 2):
//!
//! - **aborted read**: a send of a transaction, delayed in the network, lands after its
//!   ABORT marker; Kafka reads it as committed (it is after the aborted range);
//! - **lost write**: a delayed ABORT marker of an earlier transaction lands on the next
//!   transaction of the same producer (same producer id and epoch in Kafka 3.x) and
//!   aborts records that then commit;
//! - **torn transaction**: a delayed COMMIT marker of an earlier transaction lands on one
//!   partition of the next, which then aborts: part of it is committed, part not.
//!
//! logbus gives each transaction its own epoch (KIP-890) and every partition refuses a
//! record or marker of an epoch whose transaction is over there (`partition::txn`).

use std::time::Duration;

use logbus::consumer::{ConsumerConfig, IsolationLevel, OffsetReset};
use logbus::producer::{ProducerConfig, Record};
use logbus::{Broker, Error, TopicConfig, TopicPartition};

fn brokers() -> Vec<(&'static str, Broker)> {
    let one = Broker::in_memory();
    one.create_topic::<(), u64>("t", TopicConfig::new(2))
        .unwrap();
    let three = Broker::in_memory();
    three
        .create_topic::<(), u64>(
            "t",
            TopicConfig::new(2)
                .replication_factor(3)
                .min_insync_replicas(2),
        )
        .unwrap();
    vec![("one replica", one), ("three replicas", three)]
}

fn committed(broker: &Broker) -> Vec<u64> {
    let mut c = broker
        .consumer::<(), u64>(
            ConsumerConfig::new()
                .auto_offset_reset(OffsetReset::Earliest)
                .isolation_level(IsolationLevel::ReadCommitted),
        )
        .unwrap();
    c.assign(&[TopicPartition::new("t", 0), TopicPartition::new("t", 1)])
        .unwrap();
    let mut out = Vec::new();
    loop {
        let got = c.poll(Duration::from_millis(20)).unwrap();
        if got.is_empty() {
            break;
        }
        out.extend(got.iter().map(|r| r.value));
    }
    out.sort_unstable();
    out
}

fn producer(broker: &Broker) -> logbus::Producer<(), u64> {
    let p = broker
        .producer_with_config::<(), u64>(ProducerConfig::new().transactional_id("w"))
        .unwrap();
    p.init_transactions().unwrap();
    p
}

#[test]
fn aborted_read_a_send_delayed_past_its_abort_marker_is_refused() {
    for (name, broker) in brokers() {
        let p = producer(&broker);
        p.begin_transaction().unwrap();
        let (_, epoch) = p.transaction_ids().unwrap();
        p.send(Record::new("t", 1).partition(0)).unwrap();
        p.abort_transaction().unwrap();
        // A retry of the aborted transaction's send arrives now.
        let e = p
            .deliver_delayed_send(Record::new("t", 2).partition(0), epoch)
            .unwrap_err()
            .into_error();
        assert!(matches!(e, Error::ProducerFenced { .. }), "{name}: {e}");
        p.begin_transaction().unwrap();
        p.send(Record::new("t", 3).partition(0)).unwrap();
        p.commit_transaction().unwrap();
        assert_eq!(committed(&broker), vec![3], "{name}");
    }
}

#[test]
fn lost_write_a_delayed_abort_marker_cannot_abort_the_next_transaction() {
    for (name, broker) in brokers() {
        let p = producer(&broker);
        p.begin_transaction().unwrap();
        let (pid, first) = p.transaction_ids().unwrap();
        p.send(Record::new("t", 1).partition(0)).unwrap();
        p.abort_transaction().unwrap();
        p.begin_transaction().unwrap();
        p.send(Record::new("t", 2).partition(0)).unwrap();
        p.send(Record::new("t", 3).partition(1)).unwrap();
        // The first transaction's ABORT, delayed, lands during the second.
        for part in 0..2 {
            let tp = TopicPartition::new("t", part);
            assert!(
                !broker
                    .deliver_delayed_marker(&tp, pid, first, false)
                    .unwrap(),
                "{name}"
            );
        }
        p.commit_transaction().unwrap();
        assert_eq!(
            committed(&broker),
            vec![2, 3],
            "{name}: a committed write was lost"
        );
    }
}

#[test]
fn torn_transaction_a_delayed_commit_marker_cannot_commit_part_of_the_next() {
    for (name, broker) in brokers() {
        let p = producer(&broker);
        p.begin_transaction().unwrap();
        let (pid, first) = p.transaction_ids().unwrap();
        p.send(Record::new("t", 1).partition(0)).unwrap();
        p.commit_transaction().unwrap();
        p.begin_transaction().unwrap();
        p.send(Record::new("t", 2).partition(0)).unwrap();
        p.send(Record::new("t", 3).partition(1)).unwrap();
        // The first transaction's COMMIT, delayed, lands on partition 0 only.
        let tp = TopicPartition::new("t", 0);
        assert!(
            !broker
                .deliver_delayed_marker(&tp, pid, first, true)
                .unwrap(),
            "{name}"
        );
        // Not committed by it: still past the LSO.
        assert_eq!(committed(&broker), vec![1], "{name}: read past the LSO");
        p.abort_transaction().unwrap();
        assert_eq!(committed(&broker), vec![1], "{name}: a torn transaction");
    }
}

#[test]
fn a_zombie_producer_cannot_send_or_end_after_it_is_fenced() {
    for (name, broker) in brokers() {
        let zombie = producer(&broker);
        zombie.begin_transaction().unwrap();
        zombie.send(Record::new("t", 1).partition(0)).unwrap();
        let fresh = producer(&broker);
        for e in [
            zombie
                .send(Record::new("t", 2).partition(1))
                .unwrap_err()
                .into_error(),
            zombie.commit_transaction().unwrap_err(),
        ] {
            assert!(matches!(e, Error::ProducerFenced { .. }), "{name}: {e}");
        }
        fresh.begin_transaction().unwrap();
        fresh.send(Record::new("t", 4).partition(0)).unwrap();
        fresh.commit_transaction().unwrap();
        assert_eq!(committed(&broker), vec![4], "{name}");
    }
}
