//! The idempotent producer's state on disk: Kafka's `.snapshot` files written at each
//! segment roll, loaded at recovery with the batches after them, a corrupt or stray one
//! ignored (rebuilt from the log), and a retried send deduplicated after each restart.

use logbus::persist::PersistConfig;
use logbus::producer::{ProducerConfig, Record};
use logbus::storage::producer_snapshot;
use logbus::{Broker, ManualClock, TopicConfig};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn snapshots(dir: &std::path::Path) -> Vec<u64> {
    producer_snapshot::list(&logbus::storage::FsIo, dir)
        .unwrap()
        .into_iter()
        .map(|(o, _)| o)
        .collect()
}

const T0: i64 = 1_700_000_000_000;

/// A broker over `dirs` on `clock`, creating what is missing.
fn open_on(dirs: &[&Path], clock: &Arc<ManualClock>) -> Broker {
    Broker::builder()
        .clock(clock.clone())
        .data_dirs(dirs.iter().copied())
        .create(true)
        .open()
        .unwrap()
}

/// One partition whose producer ids expire after 10 s idle.
fn expiring(replicas: u32, persist: PersistConfig) -> logbus::persist::PersistedTopicConfig {
    TopicConfig::new(1)
        .replication_factor(replicas)
        .min_insync_replicas(replicas.min(2))
        .producer_id_expiration(Duration::from_secs(10))
        .persist(persist)
}

/// The entries of partition directory `part`'s latest `.snapshot`.
fn latest_snapshot(part: &Path) -> Vec<producer_snapshot::SnapshotEntry> {
    let latest = part.join(producer_snapshot::file_name(
        *snapshots(part).last().unwrap(),
    ));
    producer_snapshot::decode(&latest, &std::fs::read(&latest).unwrap()).unwrap()
}

#[test]
fn snapshots_at_rolls_and_retries_after_restarts_one_replica() {
    run(1);
}

#[test]
fn snapshots_at_rolls_and_retries_after_restarts_three_replicas() {
    run(3);
}

fn run(rf: u32) {
    let tmp: Vec<_> = (0..rf).map(|_| tempfile::tempdir().unwrap()).collect();
    let dirs: Vec<_> = tmp.iter().map(|t| t.path().to_path_buf()).collect();
    let open = || {
        Broker::builder()
            .data_dirs(&dirs)
            .create(true)
            .open()
            .unwrap()
    };
    let broker = open();
    let config = TopicConfig::new(1)
        .replication_factor(rf)
        .min_insync_replicas(rf.min(2))
        .persist(PersistConfig::new().segment_bytes(4096));
    broker.create_topic::<(), u64>("s", config).unwrap();
    let p = broker
        .producer_with_config::<(), u64>(ProducerConfig::new())
        .unwrap();
    let id = p.producer_identity().unwrap();
    let mut last = None;
    let n = 2_000u64;
    for v in 0..n {
        last = Some(p.send(Record::new("s", v)).unwrap());
    }
    let last = last.unwrap();
    drop(p);
    broker.close().unwrap();
    drop(broker);
    let part = dirs[0].join("s-0");
    let snaps = snapshots(&part);
    assert!(snaps.len() >= 2, "a snapshot at each roll: {snaps:?}");

    // Restart: the retry of the last send is answered with its offset.
    let retry = |expect_end: u64| {
        let broker = open();
        broker.topic::<(), u64>("s").unwrap();
        let p = broker.producer::<(), u64>();
        let again = p
            .send_sequenced(Record::new("s", n - 1), id, (n - 1) as i32)
            .unwrap();
        assert_eq!(again.offset, last.offset);
        let d = broker.describe_topic("s").unwrap();
        assert_eq!(
            d.partitions[0].log_end.max(d.partitions[0].high_watermark),
            expect_end
        );
        drop(p);
        broker.close().unwrap();
    };
    retry(n);

    // The latest snapshot damaged, and a stray one past the log end: ignored, rebuilt from
    // the log; the retry is still recognised.
    let latest = *snapshots(&part).last().unwrap();
    let path = part.join(producer_snapshot::file_name(latest));
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() - 3;
    bytes[at] ^= 0x55;
    std::fs::write(&path, &bytes).unwrap();
    std::fs::write(part.join(producer_snapshot::file_name(n + 500)), b"stray").unwrap();
    retry(n);
    let left = snapshots(&part);
    assert!(
        !left.contains(&(n + 500)),
        "the stray snapshot is gone: {left:?}"
    );
    assert!(
        !left.contains(&latest),
        "the corrupt snapshot is gone: {left:?}"
    );
}

/// A persisted one-replica topic on a manual clock: a producer idle past
/// `producer_id_expiration` is left out of the `.snapshot` written at the next roll, a
/// producer not idle and one whose transaction is open are kept; after a reopen the
/// expired producer is still gone (its old sequence accepted anew) and the other's retry
/// is still answered.
#[test]
fn idle_producers_expire_one_replica_and_stay_gone_after_a_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let open = || open_on(&[tmp.path()], &clock);
    let broker = open();
    let config = expiring(1, PersistConfig::new().segment_bytes(4096));
    broker.create_topic::<(), u64>("s", config).unwrap();
    let p = broker.producer::<(), u64>();
    let (idle, busy) = (broker.init_producer_id(), broker.init_producer_id());
    let first_idle = p.send_sequenced(Record::new("s", 1), idle, 0).unwrap();
    let txn = broker
        .producer_with_config::<(), u64>(ProducerConfig::new().transactional_id("w"))
        .unwrap();
    txn.init_transactions().unwrap();
    txn.begin_transaction().unwrap();
    let in_txn = txn.send(Record::new("s", 2)).unwrap();
    clock.advance(Duration::from_secs(6));
    let first_busy = p.send_sequenced(Record::new("s", 3), busy, 0).unwrap();
    // `idle` and the transaction's producer have been idle 11 s, `busy` 5 s.
    clock.advance(Duration::from_secs(5));
    let filler = broker.producer::<(), u64>();
    let before = snapshots(&tmp.path().join("s-0")).len();
    for v in 0..1_000u64 {
        filler.send(Record::new("s", v)).unwrap();
    }
    drop(filler);
    txn.commit_transaction().unwrap();
    drop(txn);
    let again = p.send_sequenced(Record::new("s", 3), busy, 0).unwrap();
    assert_eq!(
        again.offset, first_busy.offset,
        "busy is kept: its retry answered"
    );
    drop(p);
    broker.close().unwrap();
    drop(broker);

    // The snapshot of the last roll (after the expiration): without `idle`, with `busy`
    // and the open transaction.
    let part = tmp.path().join("s-0");
    let snaps = snapshots(&part);
    assert!(snaps.len() > before, "rolled: {snaps:?}");
    let entries = latest_snapshot(&part);
    let ids: Vec<i64> = entries.iter().map(|e| e.producer_id).collect();
    assert!(
        !ids.contains(&idle.id),
        "idle expired from the snapshot: {ids:?}"
    );
    assert!(ids.contains(&busy.id), "busy kept in the snapshot: {ids:?}");
    assert!(
        entries
            .iter()
            .any(|e| e.current_txn_first_offset == in_txn.offset as i64),
        "the producer of the open transaction kept: {entries:?}"
    );

    // Reopened: `idle` is still gone, `busy`'s retry still answered.
    let broker = open();
    broker.topic::<(), u64>("s").unwrap();
    let p = broker.producer::<(), u64>();
    let again = p.send_sequenced(Record::new("s", 3), busy, 0).unwrap();
    assert_eq!(
        again.offset, first_busy.offset,
        "busy's retry after the reopen"
    );
    let fresh = p.send_sequenced(Record::new("s", 1), idle, 0).unwrap();
    assert_ne!(
        fresh.offset, first_idle.offset,
        "idle's old sequence is accepted anew after the reopen"
    );
    drop(p);
    broker.close().unwrap();
}

/// A persisted one-replica topic that never rolled (no snapshot): the states recovered
/// from the log when it reopens are expired (at once, before any send is checked), so a
/// producer idle past the expiration, counted across the close, is gone after it.
#[test]
fn producers_recovered_idle_are_expired_when_a_one_replica_topic_reopens() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let open = || open_on(&[tmp.path()], &clock);
    let broker = open();
    broker
        .create_topic::<(), u64>("s", expiring(1, PersistConfig::new()))
        .unwrap();
    let p = broker.producer::<(), u64>();
    let idle = broker.init_producer_id();
    let first = p.send_sequenced(Record::new("s", 1), idle, 0).unwrap();
    drop(p);
    broker.close().unwrap();
    drop(broker);
    assert!(snapshots(&tmp.path().join("s-0")).is_empty());

    clock.advance(Duration::from_secs(11));
    let broker = open();
    broker.topic::<(), u64>("s").unwrap();
    let p = broker.producer::<(), u64>();
    let fresh = p.send_sequenced(Record::new("s", 1), idle, 0).unwrap();
    assert_ne!(
        fresh.offset, first.offset,
        "recovered idle, expired at the reopen"
    );
    drop(p);
    broker.close().unwrap();
}

/// On a replicated persisted topic too, every replica's `.snapshot` written at a roll after
/// a producer's expiration leaves it out.
#[test]
fn idle_producers_expire_from_every_replicas_snapshots() {
    let tmp: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let clock = Arc::new(ManualClock::new(T0));
    let dirs: Vec<&Path> = tmp.iter().map(|t| t.path()).collect();
    let broker = open_on(&dirs, &clock);
    let config = expiring(3, PersistConfig::new().segment_bytes(4096));
    broker.create_topic::<(), u64>("s", config).unwrap();
    let p = broker.producer::<(), u64>();
    let idle = broker.init_producer_id();
    p.send_sequenced(Record::new("s", 1), idle, 0).unwrap();
    clock.advance(Duration::from_secs(11));
    let before: Vec<usize> = tmp
        .iter()
        .map(|t| snapshots(&t.path().join("s-0")).len())
        .collect();
    for v in 0..1_000u64 {
        p.send(Record::new("s", v)).unwrap();
    }
    drop(p);
    broker.close().unwrap();
    for (t, before) in tmp.iter().zip(before) {
        let part = t.path().join("s-0");
        let snaps = snapshots(&part);
        assert!(snaps.len() > before, "rolled: {snaps:?}");
        let ids: Vec<i64> = latest_snapshot(&part)
            .iter()
            .map(|e| e.producer_id)
            .collect();
        assert!(
            !ids.contains(&idle.id),
            "idle expired from {}'s latest snapshot: {ids:?}",
            part.display()
        );
    }
}
