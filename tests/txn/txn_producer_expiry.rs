//! Idle idempotent producer ids expire on a one-replica in-memory topic (Kafka's
//! `producer.id.expiration.ms`, `TopicConfig::producer_id_expiration`), on the broker's
//! clock: an idle producer is forgotten (its old sequence accepted anew), a producer not
//! idle is kept (its retry still answered), and a transaction open across the expiration
//! is untouched. The persisted topic's case is in `tests/persisted/persisted_idempotence.rs`.

use std::sync::Arc;
use std::time::Duration;

use logbus::consumer::{ConsumerConfig, IsolationLevel, OffsetReset};
use logbus::producer::{ProducerConfig, Record};
use logbus::{Broker, ManualClock, TopicConfig, TopicPartition};

fn committed_values(broker: &Broker, topic: &str) -> Vec<u64> {
    let mut c = broker
        .consumer::<(), u64>(
            ConsumerConfig::new()
                .auto_offset_reset(OffsetReset::Earliest)
                .isolation_level(IsolationLevel::ReadCommitted),
        )
        .unwrap();
    c.assign(&[TopicPartition::new(topic, 0)]).unwrap();
    let mut out = Vec::new();
    loop {
        let got = c.poll(Duration::from_millis(20)).unwrap();
        if got.is_empty() {
            break;
        }
        out.extend(got.iter().map(|r| r.value));
    }
    out
}

#[test]
fn idle_producers_expire_on_a_one_replica_topic_in_memory() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let broker = Broker::builder().clock(clock.clone()).build().unwrap();
    let config = TopicConfig::new(1).producer_id_expiration(Duration::from_secs(10));
    broker.create_topic::<(), u64>("t", config).unwrap();
    let p = broker.producer::<(), u64>();
    let (idle, busy) = (broker.init_producer_id(), broker.init_producer_id());
    let first_idle = p.send_sequenced(Record::new("t", 1), idle, 0).unwrap();
    p.send_sequenced(Record::new("t", 2), idle, 1).unwrap();
    let txn = broker
        .producer_with_config::<(), u64>(ProducerConfig::new().transactional_id("w"))
        .unwrap();
    txn.init_transactions().unwrap();
    txn.begin_transaction().unwrap();
    txn.send(Record::new("t", 100)).unwrap();

    clock.advance(Duration::from_secs(6));
    let first_busy = p.send_sequenced(Record::new("t", 3), busy, 0).unwrap();
    // `idle` has been idle 11 s, `busy` 5 s.
    clock.advance(Duration::from_secs(5));
    let again = p.send_sequenced(Record::new("t", 3), busy, 0).unwrap();
    assert_eq!(
        again.offset, first_busy.offset,
        "a producer not idle is kept: its retry is answered"
    );
    let fresh = p.send_sequenced(Record::new("t", 1), idle, 0).unwrap();
    assert_ne!(
        fresh.offset, first_idle.offset,
        "an expired producer's old sequence is accepted anew, not taken for a retry"
    );
    assert_eq!(
        fresh.offset,
        broker.describe_topic("t").unwrap().partitions[0].log_end - 1
    );

    // The transaction open across the expiration commits, its record read committed.
    txn.commit_transaction().unwrap();
    let read = committed_values(&broker, "t");
    assert!(
        read.contains(&100),
        "the open transaction committed: {read:?}"
    );
}

/// A service that makes an idempotent producer per request: each new producer id's first
/// append expires the idle ones, so the partition keeps only the recent ones. Seen from
/// outside: an early producer's retry after the expiration is no longer answered as a
/// retry once later producers appended.
#[test]
fn new_producers_expire_the_idle_ones_on_a_one_replica_topic() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let broker = Broker::builder().clock(clock.clone()).build().unwrap();
    let config = TopicConfig::new(1).producer_id_expiration(Duration::from_secs(10));
    broker.create_topic::<(), u64>("t", config).unwrap();
    let first = broker.producer::<(), u64>();
    let id = first.producer_identity().expect("idempotent by default");
    let sent = first.send(Record::new("t", 0)).unwrap();
    drop(first);
    clock.advance(Duration::from_secs(11));
    // Producers made one per request, each sending once.
    for v in 1..=3 {
        let p = broker.producer::<(), u64>();
        p.send(Record::new("t", v)).unwrap();
    }
    let p = broker.producer::<(), u64>();
    let retry = p.send_sequenced(Record::new("t", 0), id, 0).unwrap();
    assert_ne!(
        retry.offset, sent.offset,
        "the first producer expired: its sequence 0 is appended anew"
    );
}
