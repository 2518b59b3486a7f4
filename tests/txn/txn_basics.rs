//! The transactional API on an in-memory broker: commit, abort, isolation levels, LSO,
//! fencing, typed errors for misuse, timeouts, offsets sent to a transaction.

use std::time::Duration;

use logbus::consumer::{ConsumerConfig, IsolationLevel, OffsetReset};
use logbus::producer::{ProducerConfig, Record};
use logbus::{Broker, Error, ManualClock, TopicConfig, TopicPartition};

fn values(broker: &Broker, topic: &str, isolation: IsolationLevel) -> Vec<u64> {
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

fn txn_producer(broker: &Broker, id: &str) -> logbus::Producer<(), u64> {
    broker
        .producer_with_config::<(), u64>(ProducerConfig::new().transactional_id(id))
        .unwrap()
}

/// An in-memory broker with topic `t` of `partitions` partitions, and `w`'s transactional
/// producer on it, initialized.
fn t_and_producer(partitions: u32) -> (Broker, logbus::Producer<(), u64>) {
    let broker = Broker::in_memory();
    broker
        .create_topic::<(), u64>("t", TopicConfig::new(partitions))
        .unwrap();
    let p = txn_producer(&broker, "w");
    p.init_transactions().unwrap();
    (broker, p)
}

#[test]
fn committed_records_are_read_and_aborted_ones_are_not() {
    let (broker, p) = t_and_producer(2);
    p.begin_transaction().unwrap();
    for i in 0..4 {
        p.send(Record::new("t", i).partition((i % 2) as u32))
            .unwrap();
    }
    p.commit_transaction().unwrap();
    p.begin_transaction().unwrap();
    for i in 10..14 {
        p.send(Record::new("t", i).partition((i % 2) as u32))
            .unwrap();
    }
    p.abort_transaction().unwrap();
    p.begin_transaction().unwrap();
    p.send(Record::new("t", 20).partition(0)).unwrap();
    // Open: read-committed stops at the LSO, read-uncommitted reads it.
    assert_eq!(
        values(&broker, "t", IsolationLevel::ReadCommitted),
        vec![0, 1, 2, 3]
    );
    assert_eq!(
        values(&broker, "t", IsolationLevel::ReadUncommitted),
        vec![0, 1, 2, 3, 10, 11, 12, 13, 20]
    );
    let info = broker.describe_topic("t").unwrap().partitions[0];
    // 2 records, COMMIT, 2 records, ABORT, then the open one: LSO at it.
    assert_eq!(info.last_stable_offset, 6);
    assert_eq!(info.high_watermark, 7);
    p.commit_transaction().unwrap();
    assert_eq!(
        values(&broker, "t", IsolationLevel::ReadCommitted),
        vec![0, 1, 2, 3, 20]
    );
    let info = broker.describe_topic("t").unwrap().partitions[0];
    assert_eq!(info.last_stable_offset, info.high_watermark);
}

#[test]
fn misuse_gets_typed_errors_naming_the_state() {
    let broker = Broker::in_memory();
    broker
        .create_topic::<(), u64>("t", TopicConfig::new(1))
        .unwrap();
    let p = txn_producer(&broker, "w");
    let e = p.begin_transaction().unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidTxnState {
                state: "Uninitialized",
                ..
            }
        ),
        "{e}"
    );
    p.init_transactions().unwrap();
    let e = p.send(Record::new("t", 1)).unwrap_err().into_error();
    assert!(
        matches!(
            e,
            Error::InvalidTxnState {
                state: "Ready",
                operation: "send",
                ..
            }
        ),
        "{e}"
    );
    let e = p.commit_transaction().unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidTxnState {
                operation: "commit_transaction",
                ..
            }
        ),
        "{e}"
    );
    p.begin_transaction().unwrap();
    let e = p.begin_transaction().unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidTxnState {
                state: "InTransaction",
                ..
            }
        ),
        "{e}"
    );
    let plain = broker.producer::<(), u64>();
    let e = plain.begin_transaction().unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidTxnState {
                state: "NotTransactional",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn a_second_producer_with_the_same_id_fences_the_first_and_aborts_its_transaction() {
    let (broker, old) = t_and_producer(1);
    old.begin_transaction().unwrap();
    old.send(Record::new("t", 1)).unwrap();
    let new = txn_producer(&broker, "w");
    new.init_transactions().unwrap();
    // The zombie's sends and commit are fenced.
    let e = old.send(Record::new("t", 2)).unwrap_err().into_error();
    assert!(matches!(e, Error::ProducerFenced { .. }), "{e}");
    let e = old.commit_transaction().unwrap_err();
    assert!(matches!(e, Error::ProducerFenced { .. }), "{e}");
    new.begin_transaction().unwrap();
    new.send(Record::new("t", 3)).unwrap();
    new.commit_transaction().unwrap();
    assert_eq!(values(&broker, "t", IsolationLevel::ReadCommitted), vec![3]);
}

/// A broker on a manual clock with topic `t` of one partition, and `w`'s transactional
/// producer on it with a 5 s transaction timeout, initialized.
fn on_a_manual_clock_with_a_5_s_timeout() -> (
    std::sync::Arc<ManualClock>,
    Broker,
    logbus::Producer<(), u64>,
) {
    let clock = std::sync::Arc::new(ManualClock::new(1_000));
    let broker = Broker::builder().clock(clock.clone()).build().unwrap();
    broker
        .create_topic::<(), u64>("t", TopicConfig::new(1))
        .unwrap();
    let p = broker
        .producer_with_config::<(), u64>(
            ProducerConfig::new()
                .transactional_id("w")
                .transaction_timeout(Duration::from_secs(5)),
        )
        .unwrap();
    p.init_transactions().unwrap();
    (clock, broker, p)
}

#[test]
fn a_transaction_left_open_past_its_timeout_is_aborted() {
    let (clock, broker, p) = on_a_manual_clock_with_a_5_s_timeout();
    p.begin_transaction().unwrap();
    p.send(Record::new("t", 1)).unwrap();
    assert_eq!(
        broker.describe_topic("t").unwrap().partitions[0].last_stable_offset,
        0
    );
    clock.advance(Duration::from_secs(6));
    broker.describe_transactions();
    assert_eq!(
        broker.describe_topic("t").unwrap().partitions[0].last_stable_offset,
        2
    );
    let e = p.commit_transaction().unwrap_err();
    assert!(matches!(e, Error::TransactionTimedOut { .. }), "{e}");
    p.begin_transaction().unwrap();
    p.send(Record::new("t", 2)).unwrap();
    p.commit_transaction().unwrap();
    assert_eq!(values(&broker, "t", IsolationLevel::ReadCommitted), vec![2]);
}

#[test]
fn offsets_sent_to_a_transaction_are_committed_with_it_only() {
    let broker = Broker::in_memory();
    broker
        .create_topic::<(), u64>("in", TopicConfig::new(1))
        .unwrap();
    broker
        .create_topic::<(), u64>("t", TopicConfig::new(1))
        .unwrap();
    let input = broker.producer::<(), u64>();
    for i in 0..10 {
        input.send(Record::new("in", i)).unwrap();
    }
    let p = txn_producer(&broker, "w");
    p.init_transactions().unwrap();
    let tp = TopicPartition::new("in", 0);
    p.begin_transaction().unwrap();
    p.send(Record::new("t", 1)).unwrap();
    p.send_offsets_to_transaction(&[(tp.clone(), 5)], "g")
        .unwrap();
    p.abort_transaction().unwrap();
    let c = broker
        .consumer::<(), u64>(ConsumerConfig::new().group_id("g"))
        .unwrap();
    assert_eq!(c.committed(&tp).unwrap(), None);
    p.begin_transaction().unwrap();
    p.send(Record::new("t", 2)).unwrap();
    p.send_offsets_to_transaction(&[(tp.clone(), 7)], "g")
        .unwrap();
    p.commit_transaction().unwrap();
    assert_eq!(c.committed(&tp).unwrap(), Some(7));
}

#[test]
fn a_read_committed_groups_lag_counts_to_the_lso() {
    let (broker, p) = t_and_producer(1);
    p.begin_transaction().unwrap();
    p.send(Record::new("t", 1)).unwrap();
    p.commit_transaction().unwrap();
    p.begin_transaction().unwrap();
    p.send(Record::new("t", 2)).unwrap();
    let mut c = broker
        .consumer::<(), u64>(
            ConsumerConfig::new()
                .group_id("g")
                .isolation_level(IsolationLevel::ReadCommitted),
        )
        .unwrap();
    let tp = TopicPartition::new("t", 0);
    c.assign(std::slice::from_ref(&tp)).unwrap();
    c.commit_offsets(&[(tp, 0)]).unwrap();
    let d = broker.describe_group("g").unwrap();
    let lag = &d.partitions[0];
    // Record, COMMIT, then the open transaction's record at the LSO (2).
    assert_eq!((lag.log_end, lag.lag), (2, Some(2)));
}

#[test]
fn a_read_committed_consumers_end_offset_is_the_lso() {
    let (broker, p) = t_and_producer(1);
    let tp = TopicPartition::new("t", 0);
    let end = |isolation| {
        broker
            .consumer::<(), u64>(ConsumerConfig::new().isolation_level(isolation))
            .unwrap()
            .end_offsets(std::slice::from_ref(&tp))
            .unwrap()[&tp]
    };
    p.begin_transaction().unwrap();
    p.send(Record::new("t", 1)).unwrap();
    p.commit_transaction().unwrap();
    p.begin_transaction().unwrap();
    p.send(Record::new("t", 2)).unwrap();
    // Record, COMMIT, and the open transaction's record: the LSO is its offset.
    assert_eq!(end(IsolationLevel::ReadUncommitted), 3);
    assert_eq!(end(IsolationLevel::ReadCommitted), 2);
    p.abort_transaction().unwrap();
    assert_eq!(end(IsolationLevel::ReadCommitted), 4);
    assert_eq!(end(IsolationLevel::ReadUncommitted), 4);
}

/// A read-committed consumer that starts at the end (`OffsetReset::Latest`, or
/// `seek_to_end`) while a transaction is open starts at the LSO, as Kafka's does: the
/// transaction's records are read once it commits, not skipped.
#[test]
fn a_read_committed_consumer_starting_at_the_end_reads_the_open_transaction_once_committed() {
    let (broker, p) = t_and_producer(1);
    let tp = TopicPartition::new("t", 0);
    p.begin_transaction().unwrap();
    p.send(Record::new("t", 1)).unwrap();
    p.send(Record::new("t", 2)).unwrap();
    let consumer = |seek: bool| {
        let mut c = broker
            .consumer::<(), u64>(
                ConsumerConfig::new()
                    .auto_offset_reset(if seek {
                        OffsetReset::Earliest
                    } else {
                        OffsetReset::Latest
                    })
                    .isolation_level(IsolationLevel::ReadCommitted),
            )
            .unwrap();
        c.assign(std::slice::from_ref(&tp)).unwrap();
        if seek {
            c.seek_to_end(&[]).unwrap();
        }
        assert!(c.poll(Duration::from_millis(10)).unwrap().is_empty());
        c
    };
    let mut by_reset = consumer(false);
    let mut by_seek = consumer(true);
    assert_eq!(by_reset.position(&tp).unwrap(), 0);
    assert_eq!(by_seek.position(&tp).unwrap(), 0);
    p.commit_transaction().unwrap();
    for c in [&mut by_reset, &mut by_seek] {
        let got: Vec<u64> = c
            .poll(Duration::from_millis(100))
            .unwrap()
            .iter()
            .map(|r| r.value)
            .collect();
        assert_eq!(got, [1, 2]);
    }
}

/// A table over a topic written in transactions shows only committed values: an aborted
/// transaction's never, an open one's once it commits.
#[test]
fn a_table_applies_committed_transactions_only() {
    let broker = Broker::in_memory();
    broker
        .create_topic::<String, u64>("state", TopicConfig::new(1))
        .unwrap();
    let p = broker
        .producer_with_config::<String, u64>(ProducerConfig::new().transactional_id("w"))
        .unwrap();
    p.init_transactions().unwrap();
    let put = |v: u64| {
        p.send(Record::new("state", v).key("k".to_string()))
            .unwrap()
            .offset
    };
    p.begin_transaction().unwrap();
    put(1);
    p.commit_transaction().unwrap();
    p.begin_transaction().unwrap();
    put(2);
    p.abort_transaction().unwrap();
    p.begin_transaction().unwrap();
    let open = put(3);
    let mut table = broker.table::<String, u64>("state").unwrap();
    table.catch_up(Duration::from_secs(5)).unwrap();
    assert_eq!(table.get(&"k".to_string()), Some(&1));
    assert!(table
        .wait_for(&[(0, open + 1)], Duration::from_millis(50))
        .is_err());
    p.commit_transaction().unwrap();
    table
        .wait_for(&[(0, open + 1)], Duration::from_secs(5))
        .unwrap();
    assert_eq!(table.get(&"k".to_string()), Some(&3));
}

/// `send_batch` in transactions, between a plain producer's records on the same partition:
/// the runs are appended as plain entries whose offsets the partition's table keeps, so
/// the aborted run must still be skipped by read-committed readers (and only it).
#[test]
fn an_aborted_send_batch_is_skipped_and_the_plain_records_around_it_are_read() {
    let (broker, p) = t_and_producer(1);
    let plain = broker.producer::<(), u64>();
    let batch = |range: std::ops::Range<u64>| -> Vec<Record<(), u64>> {
        range.map(|v| Record::new("t", v).partition(0)).collect()
    };
    p.begin_transaction().unwrap();
    assert_eq!(p.send_batch(&mut batch(0..3)).unwrap(), 3);
    plain.send(Record::new("t", 100).partition(0)).unwrap();
    assert_eq!(p.send_batch(&mut batch(3..5)).unwrap(), 2);
    p.abort_transaction().unwrap();
    plain.send(Record::new("t", 101).partition(0)).unwrap();
    p.begin_transaction().unwrap();
    assert_eq!(p.send_batch(&mut batch(10..13)).unwrap(), 3);
    // Open: read-committed stops before it.
    assert_eq!(
        values(&broker, "t", IsolationLevel::ReadCommitted),
        vec![100, 101]
    );
    p.commit_transaction().unwrap();
    assert_eq!(
        values(&broker, "t", IsolationLevel::ReadCommitted),
        vec![10, 11, 12, 100, 101]
    );
    assert_eq!(
        values(&broker, "t", IsolationLevel::ReadUncommitted),
        vec![0, 1, 2, 3, 4, 10, 11, 12, 100, 101]
    );
    // 3 records, the plain one, 2 records, ABORT, the plain one, 3 records, COMMIT.
    let info = broker.describe_topic("t").unwrap().partitions[0];
    assert_eq!(info.high_watermark, 12);
    assert_eq!(info.last_stable_offset, 12);
    let (open, aborted) = broker
        .partition_transactions(&TopicPartition::new("t", 0))
        .unwrap();
    assert!(open.is_empty());
    assert_eq!(aborted.len(), 1);
    assert_eq!((aborted[0].first_offset, aborted[0].last_offset), (0, 6));
}

/// A zombie's `send_batch` is fenced whole, on a partition its transaction already wrote
/// to (the partition refuses the run) and on one it did not (the coordinator refuses it).
#[test]
fn a_fenced_producers_send_batch_appends_nothing() {
    let (broker, old) = t_and_producer(2);
    old.begin_transaction().unwrap();
    let mut first = vec![Record::new("t", 1).partition(0)];
    old.send_batch(&mut first).unwrap();
    let new = txn_producer(&broker, "w");
    new.init_transactions().unwrap();
    for partition in [0, 1] {
        let mut late: Vec<_> = (2..5)
            .map(|v| Record::new("t", v).partition(partition))
            .collect();
        let e = old.send_batch(&mut late).unwrap_err();
        assert_eq!(e.sent, 0);
        assert!(
            matches!(e.error, Error::ProducerFenced { .. }),
            "{}",
            e.error
        );
        assert_eq!(late.len(), 3, "the records are handed back");
    }
    new.begin_transaction().unwrap();
    new.send_batch(&mut vec![Record::new("t", 9).partition(1)])
        .unwrap();
    new.commit_transaction().unwrap();
    assert_eq!(values(&broker, "t", IsolationLevel::ReadCommitted), vec![9]);
    assert_eq!(
        values(&broker, "t", IsolationLevel::ReadUncommitted),
        vec![1, 9]
    );
}

/// A read-committed consumer that seeks past the LSO (to the log end, while a transaction
/// is open below it) waits there, and reads on from its position once the transaction
/// commits. (A reset to `Latest` starts at the LSO instead, as Kafka's does.)
#[test]
fn a_read_committed_consumer_sought_past_the_lso_waits() {
    let (broker, p) = t_and_producer(1);
    let plain = broker.producer::<(), u64>();
    p.begin_transaction().unwrap();
    p.send_batch(&mut vec![Record::new("t", 1).partition(0)])
        .unwrap();
    p.abort_transaction().unwrap();
    p.begin_transaction().unwrap();
    p.send_batch(&mut vec![Record::new("t", 2).partition(0)])
        .unwrap();
    plain.send(Record::new("t", 3).partition(0)).unwrap();
    let mut c = broker
        .consumer::<(), u64>(ConsumerConfig::new().isolation_level(IsolationLevel::ReadCommitted))
        .unwrap();
    let tp = TopicPartition::new("t", 0);
    c.assign(std::slice::from_ref(&tp)).unwrap();
    // 1, ABORT, 2 (open), 3: the log end is 4, the LSO 2.
    c.seek(&tp, 4).unwrap();
    assert!(c.poll(Duration::from_millis(20)).unwrap().is_empty());
    assert_eq!(c.position(&tp).unwrap(), 4);
    p.commit_transaction().unwrap();
    plain.send(Record::new("t", 4).partition(0)).unwrap();
    let got: Vec<u64> = c
        .poll(Duration::from_millis(200))
        .unwrap()
        .iter()
        .map(|r| r.value)
        .collect();
    assert_eq!(got, vec![4]);
}

/// A table waits for the offset after an aborted transaction's marker, and for an aborted
/// record's offset + 1, without hanging: the position moves past both.
#[test]
fn a_table_waits_past_an_aborted_transaction_and_its_marker() {
    let broker = Broker::in_memory();
    broker
        .create_topic::<String, u64>("state", TopicConfig::new(1))
        .unwrap();
    let p = broker
        .producer_with_config::<String, u64>(ProducerConfig::new().transactional_id("w"))
        .unwrap();
    p.init_transactions().unwrap();
    p.begin_transaction().unwrap();
    let aborted = p
        .send(Record::new("state", 2).key("k".to_string()))
        .unwrap()
        .offset;
    p.abort_transaction().unwrap();
    let tp = TopicPartition::new("state", 0);
    let end = broker
        .consumer::<String, u64>(ConsumerConfig::new())
        .unwrap()
        .end_offsets(std::slice::from_ref(&tp))
        .unwrap()[&tp];
    assert_eq!(end, aborted + 2, "record, ABORT");
    let mut table = broker.table::<String, u64>("state").unwrap();
    table
        .wait_for(&[(0, aborted + 1)], Duration::from_secs(5))
        .unwrap();
    table.wait_for(&[(0, end)], Duration::from_secs(5)).unwrap();
    table.catch_up(Duration::from_secs(5)).unwrap();
    assert!(table.is_empty());
}

/// A transaction's record sent to an in-memory compacted topic is refused, naming the topic
/// (its section keeps each key's latest record whatever its transaction's outcome, so an
/// aborted value could replace a committed one); nothing is appended there and the
/// transaction goes on with its other partitions.
#[test]
fn a_transaction_refuses_an_in_memory_compacted_topic() {
    let broker = Broker::in_memory();
    broker
        .create_topic::<String, u64>(
            "state",
            TopicConfig::new(1).records_in_memory(2).compacted(),
        )
        .unwrap();
    broker
        .create_topic::<String, u64>("out", TopicConfig::new(1))
        .unwrap();
    let p = broker
        .producer_with_config::<String, u64>(ProducerConfig::new().transactional_id("w"))
        .unwrap();
    p.init_transactions().unwrap();
    p.begin_transaction().unwrap();
    let err = p
        .send(Record::new("state", 1).key("k".to_string()))
        .unwrap_err();
    assert!(
        matches!(err.error(), Error::InvalidConfig { name: "cleanup_policy", value, .. } if value.contains("`state`")),
        "{err}"
    );
    let mut batch = vec![Record::new("state", 2).key("k".to_string())];
    assert!(p.send_batch(&mut batch).is_err());
    p.send(Record::new("out", 3).key("k".to_string())).unwrap();
    p.commit_transaction().unwrap();
    let end = |t: &str| broker.describe_topic(t).unwrap().partitions[0].log_end;
    assert_eq!(
        (end("state"), end("out")),
        (0, 2),
        "record and COMMIT in out only"
    );
    // Plain sends keep working.
    broker
        .producer::<String, u64>()
        .send(Record::new("state", 4).key("k".to_string()))
        .unwrap();
    assert_eq!(end("state"), 1);
}

/// Runs empty transactions (each moves the epoch on) until `p`'s epoch is `epoch`.
fn run_empty_transactions_to(p: &logbus::Producer<(), u64>, epoch: i16) {
    while p.transaction_ids().unwrap().1 < epoch {
        p.begin_transaction().unwrap();
        p.commit_transaction().unwrap();
    }
}

#[test]
fn a_transactional_id_past_its_last_epoch_goes_on_under_a_fresh_producer_id() {
    let (broker, p) = t_and_producer(1);
    let (first_id, _) = p.transaction_ids().unwrap();
    run_empty_transactions_to(&p, i16::MAX - 1);
    // Two transactions at the last epochs, then one under the fresh id.
    for v in 0..3 {
        p.begin_transaction().unwrap();
        p.send(Record::new("t", v)).unwrap();
        p.commit_transaction().unwrap();
    }
    let (id, epoch) = p.transaction_ids().unwrap();
    assert_ne!(id, first_id, "the epochs ran out: a fresh producer id");
    assert_eq!(epoch, 1, "the fresh id's first transaction ran at epoch 0");
    // An aborted one under the fresh id stays unread; the committed ones are all read.
    p.begin_transaction().unwrap();
    p.send(Record::new("t", 9)).unwrap();
    p.abort_transaction().unwrap();
    assert_eq!(
        values(&broker, "t", IsolationLevel::ReadCommitted),
        vec![0, 1, 2]
    );
    // A second producer with the id fences the one that moved to the fresh id.
    let new = txn_producer(&broker, "w");
    new.init_transactions().unwrap();
    p.begin_transaction().unwrap();
    let e = p.send(Record::new("t", 7)).unwrap_err();
    assert!(matches!(e.error(), Error::ProducerFenced { .. }), "{e}");
}

#[test]
fn a_timeout_abort_at_the_last_epoch_hands_its_producer_the_fresh_id() {
    let (clock, broker, p) = on_a_manual_clock_with_a_5_s_timeout();
    run_empty_transactions_to(&p, i16::MAX);
    let (last_id, _) = p.transaction_ids().unwrap();
    p.begin_transaction().unwrap();
    p.send(Record::new("t", 1)).unwrap();
    clock.advance(Duration::from_secs(6));
    broker.describe_transactions();
    let e = p.commit_transaction().unwrap_err();
    assert!(matches!(e, Error::TransactionTimedOut { .. }), "{e}");
    let (id, epoch) = p.transaction_ids().unwrap();
    assert_ne!(id, last_id);
    assert_eq!(epoch, 0);
    p.begin_transaction().unwrap();
    p.send(Record::new("t", 2)).unwrap();
    p.commit_transaction().unwrap();
    assert_eq!(values(&broker, "t", IsolationLevel::ReadCommitted), vec![2]);
}

#[test]
fn a_commit_after_its_topic_was_created_again_writes_to_the_new_topic_and_it_goes_on() {
    let (broker, p) = t_and_producer(1);
    p.begin_transaction().unwrap();
    p.send(Record::new("t", 1)).unwrap();
    broker.delete_topic("t").unwrap();
    broker
        .create_topic::<(), u64>("t", TopicConfig::new(1))
        .unwrap();
    // The partition the record went to is gone: its marker goes where the name leads now.
    p.commit_transaction().unwrap();
    assert!(values(&broker, "t", IsolationLevel::ReadCommitted).is_empty());
    p.begin_transaction().unwrap();
    p.send(Record::new("t", 2)).unwrap();
    p.commit_transaction().unwrap();
    assert_eq!(values(&broker, "t", IsolationLevel::ReadCommitted), vec![2]);
    assert_eq!(
        broker.describe_topic("t").unwrap().partitions[0].last_stable_offset,
        broker.describe_topic("t").unwrap().partitions[0].high_watermark
    );
}

#[test]
fn a_transaction_whose_topic_was_deleted_commits_and_aborts_on_its_other_partitions() {
    let (broker, p) = t_and_producer(1);
    for (round, commit) in [(0u64, true), (1, false), (2, true)] {
        for (name, partitions) in [("u", 1), ("v", 2)] {
            broker
                .create_topic::<(), u64>(name, TopicConfig::new(partitions))
                .unwrap();
        }
        p.begin_transaction().unwrap();
        p.send(Record::new("t", round)).unwrap();
        p.send(Record::new("u", round)).unwrap();
        p.send(Record::new("v", round).partition(1)).unwrap();
        // u is gone for good; v comes back with fewer partitions than the one written.
        broker.delete_topic("u").unwrap();
        broker.delete_topic("v").unwrap();
        broker
            .create_topic::<(), u64>("v", TopicConfig::new(1))
            .unwrap();
        if commit {
            p.commit_transaction().unwrap();
        } else {
            p.abort_transaction().unwrap();
        }
        assert!(broker.describe_transactions()[0].partitions.is_empty());
        broker.delete_topic("v").unwrap();
    }
    assert_eq!(values(&broker, "t", IsolationLevel::ReadCommitted), [0, 2]);
    let t = &broker.describe_topic("t").unwrap().partitions[0];
    assert_eq!(t.last_stable_offset, t.high_watermark);
}

#[test]
fn a_transaction_over_many_partitions_registers_and_commits_each() {
    let (broker, p) = t_and_producer(40);
    for round in 0..2 {
        p.begin_transaction().unwrap();
        for v in 0..80u64 {
            p.send(Record::new("t", round * 100 + v).partition((v % 40) as u32))
                .unwrap();
        }
        let open = broker.describe_transactions();
        assert_eq!(open[0].partitions.len(), 40, "round {round}");
        p.commit_transaction().unwrap();
    }
    let want: Vec<u64> = (0..80).chain(100..180).collect();
    assert_eq!(values(&broker, "t", IsolationLevel::ReadCommitted), want);
    for part in broker.describe_topic("t").unwrap().partitions {
        assert_eq!(part.last_stable_offset, part.high_watermark);
    }
}
