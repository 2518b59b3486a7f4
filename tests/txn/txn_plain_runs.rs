//! Transactional `send_batch` runs appended as plain entries on partitions held in their
//! ring alone (`partition::txn`): what a read-committed reader sees from every position,
//! with plain producers, other transactional producers and single sends interleaved, and
//! what the partition keeps of aborted transactions once the ring has let them go.

use std::collections::BTreeMap;
use std::time::Duration;

use logbus::consumer::{ConsumerConfig, IsolationLevel, OffsetReset};
use logbus::producer::{ProducerConfig, Record};
use logbus::{Broker, Overflow, TopicConfig, TopicPartition};

fn txn_producer(broker: &Broker, id: &str) -> logbus::Producer<(), u64> {
    broker
        .producer_with_config::<(), u64>(ProducerConfig::new().transactional_id(id))
        .unwrap()
}

/// Every record from `from` on, as (offset, value), read at `isolation`.
fn read_from(broker: &Broker, from: u64, isolation: IsolationLevel) -> Vec<(u64, u64)> {
    let mut c = broker
        .consumer::<(), u64>(
            ConsumerConfig::new()
                .auto_offset_reset(OffsetReset::None)
                .isolation_level(isolation),
        )
        .unwrap();
    let tp = TopicPartition::new("t", 0);
    c.assign(std::slice::from_ref(&tp)).unwrap();
    c.seek(&tp, from).unwrap();
    let mut out = Vec::new();
    loop {
        let got = c.poll(Duration::from_millis(10)).unwrap();
        if got.is_empty() {
            break;
        }
        out.extend(got.iter().map(|r| (r.offset, r.value)));
    }
    out
}

/// Two transactional producers (one sending single records and batches in the same
/// transaction), a plain producer between their runs, commits and aborts: a read-committed
/// consumer placed at every offset (inside spans too) reads exactly the committed and
/// plain records at or after it, never an aborted one.
#[test]
fn a_read_committed_reader_from_every_offset_reads_exactly_the_committed_records() {
    let broker = Broker::in_memory();
    broker
        .create_topic::<(), u64>("t", TopicConfig::new(1).records_in_memory(1024))
        .unwrap();
    let a = txn_producer(&broker, "a");
    let b = txn_producer(&broker, "b");
    let plain = broker.producer::<(), u64>();
    a.init_transactions().unwrap();
    b.init_transactions().unwrap();
    // value -> committed (or plain)?
    let mut outcome: BTreeMap<u64, bool> = BTreeMap::new();
    let mut next = 0u64;
    let mut take = |n: u64| {
        let r = next..next + n;
        next += n;
        r
    };
    let batch = |r: std::ops::Range<u64>| -> Vec<Record<(), u64>> {
        r.map(|v| Record::new("t", v).partition(0)).collect()
    };
    for round in 0..12u64 {
        a.begin_transaction().unwrap();
        b.begin_transaction().unwrap();
        let mut a_values = Vec::new();
        let mut b_values = Vec::new();
        let r = take(3);
        a_values.extend(r.clone());
        assert_eq!(a.send_batch(&mut batch(r)).unwrap(), 3);
        let r = take(2);
        b_values.extend(r.clone());
        assert_eq!(b.send_batch(&mut batch(r)).unwrap(), 2);
        let v = take(1).start;
        plain.send(Record::new("t", v).partition(0)).unwrap();
        outcome.insert(v, true);
        let v = take(1).start;
        a_values.push(v);
        a.send(Record::new("t", v).partition(0)).unwrap();
        let r = take(2);
        a_values.extend(r.clone());
        assert_eq!(a.send_batch(&mut batch(r)).unwrap(), 2);
        let commit_a = round % 2 == 0;
        let commit_b = round % 3 != 0;
        if round % 4 == 1 {
            // b ends first: its marker lands between a's records.
            if commit_b {
                b.commit_transaction()
            } else {
                b.abort_transaction()
            }
            .unwrap();
            let r = take(2);
            a_values.extend(r.clone());
            assert_eq!(a.send_batch(&mut batch(r)).unwrap(), 2);
            if commit_a {
                a.commit_transaction()
            } else {
                a.abort_transaction()
            }
            .unwrap();
        } else {
            if commit_a {
                a.commit_transaction()
            } else {
                a.abort_transaction()
            }
            .unwrap();
            if commit_b {
                b.commit_transaction()
            } else {
                b.abort_transaction()
            }
            .unwrap();
        }
        outcome.extend(a_values.into_iter().map(|v| (v, commit_a)));
        outcome.extend(b_values.into_iter().map(|v| (v, commit_b)));
    }
    let all = read_from(&broker, 0, IsolationLevel::ReadUncommitted);
    assert_eq!(all.len(), outcome.len(), "every record is in the log");
    let end = broker.describe_topic("t").unwrap().partitions[0].high_watermark;
    for from in 0..=end {
        let want: Vec<(u64, u64)> = all
            .iter()
            .copied()
            .filter(|&(o, v)| o >= from && outcome[&v])
            .collect();
        assert_eq!(
            read_from(&broker, from, IsolationLevel::ReadCommitted),
            want,
            "read-committed from offset {from}"
        );
    }
}

/// A ring that overwrites its oldest records lets aborted transactions go: the partition
/// forgets them (their aborted entries and the spans of their plain runs) once they are
/// entirely below the log start, as Kafka's aborted-transaction index goes with its
/// segments, instead of keeping one entry per aborted transaction for ever.
#[test]
fn aborted_transactions_the_ring_let_go_are_forgotten() {
    let broker = Broker::in_memory();
    broker
        .create_topic::<(), u64>(
            "t",
            TopicConfig::new(1)
                .records_in_memory(16)
                .overflow(Overflow::DropOldest),
        )
        .unwrap();
    let a = txn_producer(&broker, "a");
    let plain = broker.producer::<(), u64>();
    a.init_transactions().unwrap();
    let mut plain_values = Vec::new();
    for round in 0..300u64 {
        a.begin_transaction().unwrap();
        let mut run: Vec<_> = (0..3)
            .map(|i| Record::new("t", 1_000_000 + round * 10 + i).partition(0))
            .collect();
        assert_eq!(a.send_batch(&mut run).unwrap(), 3);
        plain.send(Record::new("t", round).partition(0)).unwrap();
        plain_values.push(round);
        a.abort_transaction().unwrap();
    }
    let tp = TopicPartition::new("t", 0);
    let (open, aborted) = broker.partition_transactions(&tp).unwrap();
    assert!(open.is_empty());
    let start = broker.describe_topic("t").unwrap().partitions[0].log_start;
    assert!(start > 1000, "the ring overwrote: log start {start}");
    assert!(
        aborted.iter().all(|t| t.last_offset >= start),
        "{} aborted transactions kept, {} of them entirely below the log start {start}",
        aborted.len(),
        aborted.iter().filter(|t| t.last_offset < start).count()
    );
    // What the ring still holds reads as before: the plain records only.
    let got: Vec<u64> = read_from(&broker, start, IsolationLevel::ReadCommitted)
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert!(
        !got.is_empty() && got.iter().all(|v| *v < 1_000_000),
        "{got:?}"
    );
    assert!(plain_values.ends_with(&got));
}
