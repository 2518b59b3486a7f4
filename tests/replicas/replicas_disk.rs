//! Replicated persisted topics on several data directories (Kafka's `log.dirs`): placement,
//! a failing directory (injected I/O errors, the fault API, a directory removed), leader
//! epochs on disk (`partitionLeaderEpoch`, `leader-epoch-checkpoint`), and reopening after
//! a clean close, a process crash and a power loss.

use crate::replicas_adversarial_common;

use std::path::Path;
use std::time::Duration;

use logbus::persist::{FlushPolicy, PersistConfig};
use logbus::replica::EventKind;
use logbus::storage::fault::{Fault, FaultyIo};
use logbus::storage::{BatchIter, LogSetup, SegmentSet};
use logbus::{Broker, Error, Record};
use replicas_adversarial_common::*;

/// `(offset, partitionLeaderEpoch, value)` of every record in a closed replica directory.
fn replica_records(dir: &Path) -> Vec<(u64, i32, u64)> {
    let (set, _) = SegmentSet::open(dir, LogSetup::default()).unwrap();
    let bytes = set.read(0, 64 << 20).unwrap();
    let mut out = Vec::new();
    let mut decompressed = Vec::new();
    for batch in BatchIter::new(&bytes) {
        let batch = batch.unwrap();
        let epoch = batch.header().partition_leader_epoch;
        for r in batch.records(&mut decompressed).unwrap() {
            let r = r.unwrap();
            let v = u64::from_be_bytes(r.value.unwrap().try_into().unwrap());
            out.push((r.offset, epoch, v));
        }
    }
    out
}

fn epoch_file(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("leader-epoch-checkpoint")).unwrap()
}

#[test]
fn replicas_are_real_logs_on_different_directories() {
    let (_t, dirs) = tempdirs(3);
    let broker = open(&dirs);
    broker
        .create_topic::<(), u64>(T, config(2).persist(PersistConfig::new()))
        .unwrap();
    let acked = send(&producer(&broker), 0..100);
    assert_eq!(acked.len(), 100);
    let d = broker.describe_topic(T).unwrap();
    assert_eq!(d.replicas[0].isr, vec![0, 1, 2]);
    // Replica i of partition p on directory (p + i) % 3: partition 1 is led from dir 1.
    let ids: Vec<u32> = d.replicas[1].replicas.iter().map(|r| r.id).collect();
    assert_eq!(ids, vec![1, 2, 0]);
    broker.close().unwrap();
    for dir in &dirs {
        for p in 0..2 {
            let part = dir.join(format!("{T}-{p}"));
            assert!(part.join("00000000000000000000.log").exists());
        }
        let records = replica_records(&dir.join(format!("{T}-0")));
        let values: Vec<u64> = records.iter().map(|r| r.2).collect();
        assert_eq!(values, (0..100).collect::<Vec<_>>(), "in {}", dir.display());
        assert!(records.iter().all(|r| r.1 == 0), "epoch 0 throughout");
        assert_eq!(epoch_file(&dir.join(format!("{T}-0"))), "0\n1\n0 0\n");
        assert!(dir.join(format!("{T}.replicas")).exists());
    }
}

#[test]
fn a_replication_factor_above_the_directory_count_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::builder()
        .data_dir(dir.path())
        .create(true)
        .open()
        .unwrap();
    let err = broker
        .create_topic::<(), u64>(T, config(1).persist(PersistConfig::new()))
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidConfig { name: "replication_factor", valid, .. }
            if valid.contains("data directory count (1)")),
        "{err}"
    );
    broker.close().unwrap();
}

#[test]
fn a_failed_directory_moves_leadership_and_loses_nothing_acknowledged() {
    let (_t, dirs) = tempdirs(3);
    let broker = open(&dirs);
    broker
        .create_topic::<(), u64>(T, config(1).persist(PersistConfig::new()))
        .unwrap();
    let p = producer(&broker);
    let mut acked = send(&p, 0..200);
    broker.faults().fail_data_dir(0).unwrap(); // the leader's directory
    let d = describe(&broker);
    assert_eq!((d.leader, d.leader_epoch), (Some(1), 1));
    assert_eq!(d.isr, vec![1, 2]);
    assert!(!d.replicas[0].online);
    acked.extend(send(&p, 200..400));
    assert_eq!(acked.len(), 400);
    assert_eq!(read_all(&broker), (0..400).collect::<Vec<_>>());
    let events = broker.faults().events();
    assert!(events.iter().any(|e| matches!(
        e.kind,
        EventKind::IsrShrunk {
            replica: 0,
            reason: "directory failed",
            ..
        }
    )));
    broker.close().unwrap();
    // The new leader's log: epoch 0 then epoch 1 from offset 200, in the batches and the
    // epoch file.
    let part = dirs[1].join(format!("{T}-0"));
    assert_eq!(epoch_file(&part), "0\n2\n0 0\n1 200\n");
    let records = replica_records(&part);
    assert!(records.iter().all(|r| r.1 == i32::from(r.0 >= 200)));
}

#[test]
fn io_errors_take_the_directory_offline() {
    let fs = FaultyIo::new(7);
    let dirs = virtual_dirs();
    let broker = open_on(&fs, &dirs);
    broker
        .create_topic::<(), u64>(T, config(3).persist(PersistConfig::new()))
        .unwrap();
    let p = producer(&broker);
    let mut acked = send(&p, 0..50);
    // The next write anywhere fails: its directory goes offline, for every partition.
    fs.inject(Fault::WriteError, 0);
    acked.extend(send(&p, 50..150));
    assert_eq!(acked.len(), 150);
    let failed = broker
        .faults()
        .wait_for_event(WAIT, |e| {
            matches!(
                e.kind,
                EventKind::IsrShrunk {
                    reason: "directory failed",
                    ..
                }
            )
        })
        .expect("a directory failed");
    let EventKind::IsrShrunk { replica: dir, .. } = failed.kind else {
        unreachable!()
    };
    // Every partition loses its replica on that directory (the controller applies it).
    for _ in 0..2000 {
        let all = broker.describe_topic(T).unwrap().replicas;
        if all.iter().all(|p| !p.isr.contains(&dir)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    for part in broker.describe_topic(T).unwrap().replicas {
        let r = part.replicas.iter().find(|r| r.id == dir).unwrap();
        assert!(!r.online && !part.isr.contains(&dir), "{part:?}");
        assert!(part.leader.is_some_and(|l| l != dir));
    }
    assert_has_all(&read_all(&broker), &acked, "io errors");
}

#[test]
fn a_removed_directory_is_detected() {
    let (_t, dirs) = tempdirs(3);
    let broker = open(&dirs);
    broker
        .create_topic::<(), u64>(T, config(1).persist(PersistConfig::new()))
        .unwrap();
    let p = producer(&broker);
    let mut acked = send(&p, 0..100);
    std::fs::remove_dir_all(&dirs[2]).unwrap();
    let gone = broker.faults().wait_for_event(WAIT, |e| {
        matches!(e.kind, EventKind::IsrShrunk { replica: 2, .. })
    });
    assert!(gone.is_some(), "{:?}", broker.faults().events());
    acked.extend(send(&p, 100..200));
    assert_eq!(acked.len(), 200);
    assert_eq!(read_all(&broker), (0..200).collect::<Vec<_>>());
    assert!(!describe(&broker).replicas[2].online);
}

#[test]
fn reopen_after_close_recovers_every_replica() {
    let (_t, dirs) = tempdirs(3);
    let broker = open(&dirs);
    create_mostly_on_disk(&broker);
    let p = producer(&broker);
    send(&p, 0..100);
    broker.faults().crash_replica(T, 0, 0).unwrap(); // epoch 1, led by 1
    send(&p, 100..300);
    broker.faults().restart_replica(T, 0, 0).unwrap();
    assert!(broker.faults().wait_in_sync(T, 0, WAIT).unwrap());
    let before = describe(&broker);
    drop(p);
    broker.close().unwrap();

    let broker = open(&dirs);
    assert_eq!(broker.topics(), vec![T.to_string()]);
    // Not opened yet: a send is told to open it; `topic` opens it.
    let err = broker
        .producer::<(), u64>()
        .send(Record::new(T, 0))
        .unwrap_err();
    assert!(matches!(err.error(), Error::TopicNotOpen { .. }), "{err}");
    broker.topic::<(), u64>(T).unwrap();
    assert!(broker.faults().wait_in_sync(T, 0, WAIT).unwrap());
    let after = describe(&broker);
    // A new epoch; every replica holds the 300 records, with the epochs read from disk.
    assert_eq!(after.leader_epoch, before.leader_epoch + 1);
    assert_eq!(after.isr, vec![0, 1, 2]);
    for r in &after.replicas {
        assert_eq!((r.log_start, r.log_end), (0, 300), "{r:?}");
        assert_eq!(&r.epochs[..2], &[(0, 0), (1, 100)], "{r:?}");
    }
    // Only 16 records per replica in memory: the rest is read from disk.
    assert_eq!(read_all(&broker), (0..300).collect::<Vec<_>>());
    let p = producer(&broker);
    assert_eq!(send(&p, 300..310).len(), 10);
    broker.close().unwrap();
}

#[test]
fn reopen_after_a_process_crash_keeps_everything_acknowledged() {
    let fs = FaultyIo::new(11);
    let dirs = virtual_dirs();
    let broker = open_on(&fs, &dirs);
    broker
        .create_topic::<(), u64>(
            T,
            config(1).persist(PersistConfig::new().flush(FlushPolicy::Os)),
        )
        .unwrap();
    let acked = send(&producer(&broker), 0..300);
    broker.simulate_process_death();
    drop(broker);
    fs.kill(); // the page cache survives
    let broker = open_on(&fs, &dirs);
    broker.topic::<(), u64>(T).unwrap();
    assert!(broker.faults().wait_in_sync(T, 0, WAIT).unwrap());
    assert_has_all(&read_all(&broker), &acked, "process crash");
    broker.close().unwrap();
}

#[test]
fn power_loss_with_every_batch_keeps_everything_acknowledged() {
    for seed in 0..5 {
        let fs = FaultyIo::new(seed);
        let dirs = virtual_dirs();
        let broker = open_on(&fs, &dirs);
        broker
            .create_topic::<(), u64>(
                T,
                config(1).persist(PersistConfig::new().flush(FlushPolicy::EveryBatch)),
            )
            .unwrap();
        let p = producer(&broker);
        let mut acked = send(&p, 0..60);
        broker.faults().crash_replica(T, 0, 0).unwrap();
        acked.extend(send(&p, 60..120));
        broker.simulate_process_death();
        drop((p, broker));
        fs.crash(); // only what was fsynced survives
        let broker = open_on(&fs, &dirs);
        broker.topic::<(), u64>(T).unwrap();
        assert!(broker.faults().wait_in_sync(T, 0, WAIT).unwrap());
        let d = describe(&broker);
        assert!(d.leader_epoch >= 2, "seed {seed}: {d:?}");
        assert_has_all(&read_all(&broker), &acked, &format!("seed {seed}"));
        // Every replica agrees after truncation by epoch.
        let topic = broker.topic::<(), u64>(T).unwrap();
        let logs = topic.replica_logs(0).unwrap();
        assert!(logs.windows(2).all(|w| w[0].records == w[1].records));
        broker.close().unwrap();
    }
}

#[test]
fn a_restored_directory_rejoins_from_what_its_disk_kept() {
    let (_t, dirs) = tempdirs(3);
    let broker = open(&dirs);
    broker
        .create_topic::<(), u64>(T, config(1).persist(PersistConfig::new()))
        .unwrap();
    let p = producer(&broker);
    send(&p, 0..100);
    broker.faults().fail_data_dir(2).unwrap();
    send(&p, 100..150);
    broker.faults().restore_data_dir(2).unwrap();
    assert!(broker.faults().wait_in_sync(T, 0, WAIT).unwrap());
    let d = describe(&broker);
    assert_eq!(d.isr, vec![0, 1, 2]);
    assert_eq!(d.replicas[2].log_end, 150);
    let restarted = broker
        .faults()
        .events()
        .into_iter()
        .any(|e| matches!(e.kind, EventKind::Restarted { replica: 2 }));
    assert!(restarted);
    broker.close().unwrap();
    let records = replica_records(&dirs[2].join(format!("{T}-0")));
    assert_eq!(records.len(), 150);
}

/// A replica whose directory failed stays down through a crash and a restart; it returns
/// only with its directory, reopened from disk (it used to come back with no disk, its
/// records then kept in memory only: found by the Jepsen test on disk, seed 45).
#[test]
fn a_replica_on_a_failed_directory_returns_only_with_it() {
    let (_t, dirs) = tempdirs(3);
    let broker = open(&dirs);
    broker
        .create_topic::<(), u64>(T, config(1).persist(PersistConfig::new()))
        .unwrap();
    let p = producer(&broker);
    send(&p, 0..50);
    let faults = broker.faults();
    faults.fail_data_dir(2).unwrap();
    faults.crash_replica(T, 0, 2).unwrap();
    faults.restart_replica(T, 0, 2).unwrap();
    assert!(!describe(&broker).replicas[2].online);
    send(&p, 50..100);
    faults.restore_data_dir(2).unwrap();
    assert!(faults.wait_in_sync(T, 0, WAIT).unwrap());
    drop(p);
    broker.close().unwrap();
    let values: Vec<u64> = replica_records(&dirs[2].join(format!("{T}-0")))
        .iter()
        .map(|r| r.2)
        .collect();
    assert_eq!(values, (0..100).collect::<Vec<_>>());
}

/// Whether `e` says the broker was closed (not that the topic was deleted: it was not).
fn says_closed_broker(e: &Error) -> bool {
    matches!(e, Error::Closed { what } if what.contains("broker") && what.contains("closed"))
}

/// With both followers of partition 0 stalled, one send waiting for its acks and one sent
/// asynchronously: closes the broker and checks that both fail saying the broker was closed.
/// `p` has sent records 0..10 to partition 0.
fn close_with_sends_waiting(broker: &Broker, p: &logbus::Producer<(), u64>) {
    use logbus::producer::Record;
    let faults = broker.faults();
    faults.stall_replica(T, 0, 1).unwrap();
    faults.stall_replica(T, 0, 2).unwrap();
    let unacked = p.send_async(Record::new(T, 100).partition(0));
    let blocked = {
        let p = producer(broker);
        std::thread::spawn(move || p.send(Record::new(T, 101).partition(0)))
    };
    // Until the send waits for its acks (the log end passes the HW); the close must wake
    // it either way.
    let deadline = std::time::Instant::now() + WAIT;
    while describe(broker).replicas[0].log_end < 12 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    broker.close().unwrap();
    let e = blocked.join().unwrap().unwrap_err();
    assert!(says_closed_broker(e.error()), "{e:?}");
    let e = unacked.wait().unwrap_err();
    assert!(says_closed_broker(e.error()), "{e:?}");
}

/// After `Broker::close`, every send form to a replicated persisted topic says the broker
/// was closed, as for the other topics; a send waiting for acks (its followers stalled)
/// wakes with the same error, and so does one sent asynchronously before the close.
#[test]
fn sends_after_close_say_the_broker_is_closed() {
    use logbus::producer::{Payload, Record};
    let (_t, dirs) = tempdirs(3);
    let broker = open(&dirs);
    broker
        .create_topic::<(), u64>(T, config(1).persist(PersistConfig::new()))
        .unwrap();
    let p = producer(&broker);
    assert_eq!(send(&p, 0..10).len(), 10);
    close_with_sends_waiting(&broker, &p);
    let e = p.send(Record::new(T, 1).partition(0)).unwrap_err();
    assert!(says_closed_broker(e.error()), "{e:?}");
    assert_eq!(e.into_record().unwrap().value, 1);
    let e = p.try_send(Record::new(T, 2).partition(0)).unwrap_err();
    assert!(says_closed_broker(e.error()), "{e:?}");
    let mut batch = vec![
        Record::new(T, 3).partition(0),
        Record::new(T, 4).partition(0),
    ];
    let e = p.send_batch(&mut batch).unwrap_err();
    assert!(says_closed_broker(&e.error), "{e:?}");
    let e = p
        .partition(T, 0)
        .unwrap()
        .send_iter([Payload::new(5)])
        .unwrap_err();
    assert!(says_closed_broker(&e.error), "{e:?}");
    assert_eq!(e.sent, 0);
    let e = p
        .partition(T, 0)
        .unwrap()
        .send_slice(&[(1, 6)])
        .unwrap_err();
    assert!(says_closed_broker(&e.error), "{e:?}");
    let e = p
        .send_async(Record::new(T, 7).partition(0))
        .wait()
        .unwrap_err();
    assert!(says_closed_broker(e.error()), "{e:?}");
    let e = producer(&broker)
        .send(Record::new(T, 8).partition(0))
        .unwrap_err();
    assert!(says_closed_broker(e.error()), "{e:?}");
}

/// An in-memory replicated topic on a broker with data directories: `Broker::close` closes
/// it too (the broker's contract covers its in-memory topics), and its sends then say the
/// broker was closed, not that the topic was deleted: one waiting for acks (its followers
/// stalled) wakes with it, as do one sent asynchronously before the close and new sends.
#[test]
fn sends_to_an_in_memory_replicated_topic_after_close_say_the_broker_is_closed() {
    use logbus::producer::Record;
    let (_t, dirs) = tempdirs(3);
    let broker = open(&dirs);
    broker.create_topic::<(), u64>(T, config(1)).unwrap();
    let p = producer(&broker);
    assert_eq!(send(&p, 0..10).len(), 10);
    close_with_sends_waiting(&broker, &p);
    let e = p.send(Record::new(T, 1).partition(0)).unwrap_err();
    assert!(says_closed_broker(e.error()), "{e:?}");
    assert_eq!(e.into_record().unwrap().value, 1);
    let e = p
        .send_async(Record::new(T, 2).partition(0))
        .wait()
        .unwrap_err();
    assert!(says_closed_broker(e.error()), "{e:?}");
    let e = producer(&broker)
        .send(Record::new(T, 3).partition(0))
        .unwrap_err();
    assert!(says_closed_broker(e.error()), "{e:?}");
}

/// A replicated topic with a codec: every replica's batches carry it (the leader's and the
/// followers', which write what they fetch through the same path), hold every record, and
/// a reopened broker serves them from disk.
#[test]
fn a_replicated_topic_compresses_every_replica_and_reads_back() {
    use logbus::persist::CompressionType;
    use logbus::storage::record_batch::Compression;
    let text = |i: u64| format!("value {i}: {}", "replicated and compressed ".repeat(6));
    let (_t, dirs) = tempdirs(3);
    let broker = open(&dirs);
    broker
        .create_topic::<(), String>(
            T,
            config(1)
                .records_in_memory(16)
                .persist(PersistConfig::new().compression(CompressionType::Zstd)),
        )
        .unwrap();
    let p = broker.producer::<(), String>();
    for i in 0..300 {
        p.send(Record::new(T, text(i)).partition(0)).unwrap();
    }
    broker.close().unwrap();
    for dir in &dirs {
        let part = dir.join(format!("{T}-0"));
        let (set, _) = SegmentSet::open(&part, LogSetup::default()).unwrap();
        let bytes = set.read(0, 64 << 20).unwrap();
        let mut values = Vec::new();
        let mut decompressed = Vec::new();
        for batch in BatchIter::new(&bytes) {
            let batch = batch.unwrap();
            assert_eq!(
                batch.header().compression(),
                Compression::Zstd,
                "in {}",
                dir.display()
            );
            for r in batch.records(&mut decompressed).unwrap() {
                values.push(String::from_utf8(r.unwrap().value.unwrap().to_vec()).unwrap());
            }
        }
        assert_eq!(
            values,
            (0..300).map(text).collect::<Vec<_>>(),
            "in {}",
            dir.display()
        );
    }
    let broker = open(&dirs);
    broker.topic::<(), String>(T).unwrap();
    let config = logbus::consumer::ConsumerConfig::new()
        .auto_offset_reset(logbus::consumer::OffsetReset::Earliest);
    let mut c = broker.consumer::<(), String>(config).unwrap();
    c.assign(&[logbus::TopicPartition::new(T, 0)]).unwrap();
    let mut got = Vec::new();
    while got.len() < 300 {
        let batch = c.poll(WAIT).unwrap();
        assert!(!batch.is_empty(), "nothing read at {}", got.len());
        got.extend(batch.iter().map(|r| r.value.clone()));
    }
    assert_eq!(got, (0..300).map(text).collect::<Vec<_>>());
    broker.close().unwrap();
}

/// A replicated persisted topic of `Option<String>` values: every replica writes a `None`
/// as a null value (length −1) and an empty string as an empty one, and a reopened broker
/// reads them back as sent.
#[test]
fn every_replica_keeps_a_null_value_null() {
    use logbus::broker::TopicPartition;
    use logbus::consumer::{ConsumerConfig, OffsetReset};
    let sent = [Some("x".to_string()), None, Some(String::new())];
    let (_t, dirs) = tempdirs(3);
    let broker = open(&dirs);
    broker
        .create_topic::<(), Option<String>>(T, config(1).persist(PersistConfig::new()))
        .unwrap();
    let p = broker.producer::<(), Option<String>>();
    for v in &sent {
        p.send(Record::new(T, v.clone())).unwrap();
    }
    drop(p);
    broker.close().unwrap();
    for dir in &dirs {
        let (set, _) = SegmentSet::open(dir.join(format!("{T}-0")), LogSetup::default()).unwrap();
        let bytes = set.read(0, 1 << 20).unwrap();
        let mut values = Vec::new();
        let mut decompressed = Vec::new();
        for batch in BatchIter::new(&bytes) {
            for r in batch.unwrap().records(&mut decompressed).unwrap() {
                values.push(r.unwrap().value.map(<[u8]>::to_vec));
            }
        }
        let want: Vec<Option<Vec<u8>>> = sent
            .iter()
            .map(|v| v.as_ref().map(|v| v.as_bytes().to_vec()))
            .collect();
        assert_eq!(values, want, "in {}", dir.display());
    }
    let broker = open(&dirs);
    broker.topic::<(), Option<String>>(T).unwrap();
    let mut c = broker
        .consumer::<(), Option<String>>(
            ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest),
        )
        .unwrap();
    c.assign(&[TopicPartition::new(T, 0)]).unwrap();
    let mut got = Vec::new();
    while got.len() < sent.len() {
        let records = c.poll(WAIT).unwrap();
        assert!(!records.is_empty(), "only {got:?}");
        got.extend(records.iter().map(|r| r.value.clone()));
    }
    assert_eq!(got, sent);
    drop(c);
    broker.close().unwrap();
}
