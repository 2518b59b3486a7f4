//! Adversarial tests of replicated persisted topics (issues 14 and 15) under load and
//! across crashes: a directory failing mid-stream under `acks = all` producers and a
//! consumer, then a close or a process death; a power loss at a random moment; leader-epoch
//! truncation across a restart; deleting, syncing, growing and time lookups. (Damaged
//! files and directories: `replicas_disk_adversarial`.)
//!
//! After every reopen: each acknowledged record at its offset, offsets dense, replicas
//! agreeing below HW, nothing reported lost.

use crate::replicas_adversarial_common;

use logbus::consumer::ConsumerConfig;
use logbus::persist::{FlushPolicy, PersistConfig};
use logbus::producer::{Acks, ProducerConfig, Record};
use logbus::replica::EventKind;
use logbus::storage::fault::FaultyIo;
use logbus::{Broker, Error, TopicPartition};
use replicas_adversarial_common::*;

/// A directory fails mid-stream under producers (`acks = all`) and a consumer; the broker
/// closes while they still run (directory still failed), and reopens: every acknowledged
/// record is there at its offset, replicas agree, offsets are dense.
#[test]
fn a_directory_failing_mid_stream_then_close_while_producing_loses_nothing() {
    for failed in [0u32, 2] {
        let (_t, dirs) = tempdirs(3);
        let h = under_load(open(&dirs), 64, None, |broker, h| {
            wait_acked(h, 300);
            fail_dir_and_wait(broker, h, failed, 300);
            broker.close().unwrap();
        });
        let broker = open(&dirs);
        check_history(&broker, &h, &format!("dir {failed} failed"));
        broker.close().unwrap();
    }
}

/// The same with the process dying mid-stream (no close: nothing flushed beyond what the
/// operating system had), on a simulated file system that keeps the page cache.
#[test]
fn a_directory_failing_mid_stream_then_process_death_loses_nothing() {
    for seed in 0..3u64 {
        let fs = FaultyIo::new(seed);
        let dirs = virtual_dirs();
        let h = under_load(
            open_on(&fs, &dirs),
            1 << 12,
            Some(FlushPolicy::Os),
            |broker, h| {
                wait_acked(h, 200);
                fail_dir_and_wait(broker, h, seed as u32 % 3, 200);
                broker.simulate_process_death();
            },
        );
        fs.kill();
        let broker = open_on(&fs, &dirs);
        check_history(&broker, &h, &format!("seed {seed}"));
        broker.close().unwrap();
    }
}

/// Deleting a replicated persisted topic on a simulated disk works (its partition
/// directories were removed with their unlinks not yet synced: "directory not empty"), and
/// a power loss right after does not bring the topic back; the name can be reused.
#[test]
fn a_deleted_topic_stays_deleted_through_a_power_loss() {
    for seed in 0..5 {
        let fs = FaultyIo::new(seed);
        let dirs = virtual_dirs();
        let broker = open_on(&fs, &dirs);
        broker
            .create_topic::<(), u64>(T, config(2).persist(PersistConfig::new()))
            .unwrap();
        assert_eq!(send(&producer(&broker), 0..50).len(), 50);
        broker.delete_topic(T).unwrap();
        broker.simulate_process_death();
        drop(broker);
        fs.crash();
        let broker = open_on(&fs, &dirs);
        assert!(
            broker.topics().is_empty(),
            "seed {seed}: {:?}",
            broker.topics()
        );
        broker
            .create_topic::<(), u64>(T, config(2).persist(PersistConfig::new()))
            .unwrap();
        assert_eq!(describe(&broker).high_watermark, 0);
        broker.close().unwrap();
    }
}

/// A topic deleted while one of its directories is failed: that directory would keep its
/// copy of `<topic>.replicas` and its replica logs, and bring the deleted topic back at the
/// next open (it did). Refused with `LogOffline` naming the directory, the topic intact;
/// once the directory is restored the delete goes through, everywhere.
#[test]
fn a_topic_deleted_while_a_directory_is_failed_is_refused_until_restored() {
    let (_t, dirs) = tempdirs(3);
    let broker = open(&dirs);
    broker
        .create_topic::<(), u64>(T, config(1).persist(PersistConfig::new()))
        .unwrap();
    assert_eq!(send(&producer(&broker), 0..20).len(), 20);
    broker.faults().fail_data_dir(2).unwrap();
    let err = broker.delete_topic(T).unwrap_err();
    assert!(
        matches!(&err, Error::LogOffline { dir } if dir == &dirs[2]),
        "{err}"
    );
    assert_eq!(read_all(&broker), (0..20).collect::<Vec<_>>());
    broker.faults().restore_data_dir(2).unwrap();
    broker.delete_topic(T).unwrap();
    broker.close().unwrap();
    drop(broker);
    for d in &dirs {
        assert!(!meta_file(d).exists() && !part_dir(d, 0).exists(), "{d:?}");
    }
    let broker = open(&dirs);
    assert!(broker.topics().is_empty(), "{:?}", broker.topics());
    broker.close().unwrap();
}

/// KIP-101 across a restart: the old leader kept a tail (epoch 0) the new leader never got;
/// it is still down when the broker closes (or the process dies), and after the reopen it
/// must cut exactly that tail by leader epoch and copy the new leader's records.
#[test]
fn a_divergent_tail_is_truncated_by_epoch_after_a_restart() {
    for die in [false, true] {
        let fs = FaultyIo::new(u64::from(die));
        let dirs = virtual_dirs();
        let broker = open_on(&fs, &dirs);
        broker
            .create_topic::<(), u64>(
                T,
                config(1)
                    .records_in_memory(16)
                    .persist(PersistConfig::new().flush(FlushPolicy::EveryBatch)),
            )
            .unwrap();
        let faults = broker.faults();
        let mut acked = send(&producer(&broker), 0..50);
        faults.stall_replica(T, 0, 1).unwrap();
        faults.stall_replica(T, 0, 2).unwrap();
        // Offsets 50..80 on the leader only (acks = 1), never copied.
        let leader_only = send(&producer_with(&broker, Acks::Leader), 1000..1030);
        assert_eq!(leader_only.len(), 30);
        // The leader dies before the followers resume: resumed first, they could copy the
        // tail before the crash, and there would be nothing to diverge.
        faults.crash_replica(T, 0, 0).unwrap();
        faults.resume_replica(T, 0, 1).unwrap();
        faults.resume_replica(T, 0, 2).unwrap();
        let d = describe(&broker);
        assert_eq!((d.leader, d.leader_epoch), (Some(1), 1), "{d:?}");
        // The new leader's epoch 1 starts where its log ended (50).
        acked.extend(send(&producer(&broker), 50..70));
        assert_eq!(acked.len(), 70);
        if die {
            broker.simulate_process_death();
            drop(broker);
            fs.kill();
        } else {
            broker.close().unwrap();
            drop(broker);
        }
        let broker = open_on(&fs, &dirs);
        broker.topic::<(), u64>(T).unwrap();
        assert!(
            broker.faults().wait_in_sync(T, 0, WAIT).unwrap(),
            "{:?}",
            describe(&broker)
        );
        let log = read_all(&broker);
        assert_eq!(log, (0..70).collect::<Vec<_>>(), "die: {die}");
        assert_replicas_agree(&broker, 0, &format!("die: {die}"));
        let truncated = broker.faults().events().into_iter().any(|e| {
            matches!(
                e.kind,
                EventKind::Truncated {
                    replica: 0,
                    to: 50,
                    ..
                }
            )
        });
        assert!(truncated, "die: {die}: {:?}", broker.faults().events());
        broker.close().unwrap();
    }
}

/// Growing a replicated persisted topic is refused with a typed error that says so, and
/// changes nothing on disk.
#[test]
fn add_partitions_on_a_replicated_persisted_topic_is_a_typed_error() {
    let (_t, dirs) = tempdirs(3);
    let broker = open(&dirs);
    broker
        .create_topic::<(), u64>(T, config(1).persist(PersistConfig::new()))
        .unwrap();
    assert_eq!(send(&producer(&broker), 0..10).len(), 10);
    let err = broker.add_partitions(T, 3).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidConfig { name: "partitions", valid, .. }
            if valid.contains("cannot grow")),
        "{err}"
    );
    assert_eq!(broker.describe_topic(T).unwrap().replicas.len(), 1);
    broker.close().unwrap();
    drop(broker);
    let broker = open(&dirs);
    broker.topic::<(), u64>(T).unwrap();
    assert_eq!(broker.describe_topic(T).unwrap().replicas.len(), 1);
    assert_eq!(read_all(&broker), (0..10).collect::<Vec<_>>());
    broker.close().unwrap();
}

/// A power loss at a random moment while producers (`acks = all`, `EveryBatch`) and a
/// consumer run, one directory failed beforehand in some rounds: after the reopen every
/// acknowledged record is at its offset, nothing is reported lost, replicas agree.
#[test]
fn a_power_loss_under_load_keeps_every_acknowledged_record() {
    for seed in 0..8u64 {
        let fs = FaultyIo::new(seed);
        let dirs = virtual_dirs();
        let broker = open_on(&fs, &dirs);
        let h = under_load(
            broker,
            1 << 12,
            Some(FlushPolicy::EveryBatch),
            |broker, h| {
                wait_acked(h, 50 + 37 * seed as usize);
                if seed % 2 == 1 {
                    fail_dir_and_wait(broker, h, (seed / 2) as u32 % 3, 40);
                }
                // Acknowledgements after this point may have raced the crash: only those
                // before it must survive (those after are checked too: an ack means fsynced
                // first).
                fs.crash();
                broker.simulate_process_death();
            },
        );
        let broker = open_on(&fs, &dirs);
        check_history(&broker, &h, &format!("seed {seed}"));
        broker.close().unwrap();
    }
}

/// `offsets_for_times` on a replicated persisted topic whose older records are only on
/// disk (`records_in_memory` 16 of 300): the first record at or after the time, as on a
/// plain persisted topic (the leader's time index), before and after a reopen. It answered
/// with the first record in memory (offset 284), skipping everything on disk.
#[test]
fn offsets_for_times_finds_records_on_disk() {
    let (_t, dirs) = tempdirs(3);
    let broker = open(&dirs);
    create_mostly_on_disk(&broker);
    let p = producer(&broker);
    for v in 0..300u64 {
        let ts = 1_000_000 + 10 * v as i64;
        p.send(Record::new(T, v).partition(0).timestamp(ts))
            .unwrap();
    }
    drop(p);
    let tp = TopicPartition::new(T, 0);
    let check = |broker: &Broker, what: &str| {
        let c = broker.consumer::<(), u64>(ConsumerConfig::new()).unwrap();
        for (ts, want) in [
            (0, Some(0)),
            (1_000_100, Some(10)),
            (1_000_105, Some(11)),
            (1_002_990, Some(299)),
            (1_003_000, None),
        ] {
            let got = c.offsets_for_times(&[(tp.clone(), ts)]).unwrap()[&tp].map(|o| o.offset);
            assert_eq!(got, want, "{what}: time {ts}");
        }
    };
    check(&broker, "open");
    broker.close().unwrap();
    drop(broker);
    let broker = open(&dirs);
    broker.topic::<(), u64>(T).unwrap();
    check(&broker, "reopened");
    broker.close().unwrap();
}

/// `Topic::fsync` and `Broker::fsync_and_checkpoint` on a replicated persisted topic (flush policy `Os`):
/// what was sent before the call survives a power loss. Both returned `Ok` without an
/// fsync (the topic's partitions have no plain disk log), and the power loss lost records.
#[test]
fn sync_makes_a_replicated_topic_durable() {
    for seed in 0..8u64 {
        for broker_wide in [false, true] {
            let fs = FaultyIo::new(seed);
            let dirs = virtual_dirs();
            let broker = open_on(&fs, &dirs);
            let topic = broker
                .create_topic::<(), u64>(
                    T,
                    config(1).persist(PersistConfig::new().flush(FlushPolicy::Os)),
                )
                .unwrap();
            assert_eq!(send(&producer(&broker), 0..100).len(), 100);
            if broker_wide {
                broker.fsync_and_checkpoint().unwrap();
            } else {
                topic.fsync().unwrap();
            }
            broker.simulate_process_death();
            drop((topic, broker));
            fs.crash();
            let broker = open_on(&fs, &dirs);
            broker.topic::<(), u64>(T).unwrap();
            let _ = broker.faults().wait_in_sync(T, 0, WAIT);
            let what = format!("seed {seed}, broker-wide {broker_wide}");
            assert_has_all(&read_all(&broker), &(0..100).collect::<Vec<_>>(), &what);
            broker.close().unwrap();
        }
    }
}

/// A follower catching up 3,000 records behind, with `segment_bytes` 4096: it copies in
/// batches a segment can hold and stays online. Its batches were cut only at 256 KiB, the
/// segment set refused them, and the refusal took its whole directory offline.
#[test]
fn a_follower_catching_up_past_a_segment_size_stays_online() {
    let (_t, dirs) = tempdirs(3);
    let broker = open(&dirs);
    broker
        .create_topic::<(), u64>(
            T,
            config(1).persist(PersistConfig::new().segment_bytes(4096)),
        )
        .unwrap();
    let faults = broker.faults();
    faults.stall_replica(T, 0, 2).unwrap();
    let acked = send(&producer_with(&broker, Acks::Leader), 0..3000);
    assert_eq!(acked.len(), 3000);
    faults.resume_replica(T, 0, 2).unwrap();
    assert!(faults.wait_in_sync(T, 0, WAIT).unwrap());
    let d = describe(&broker);
    assert!(
        d.replicas
            .iter()
            .all(|r| r.online && r.in_sync && r.log_end == 3000),
        "{d:?}"
    );
    broker.close().unwrap();
}

/// A record larger than the topic takes (its `max_message_bytes`, or a segment) is
/// refused at send with `RecordTooLarge`, and nothing goes offline. It reached the
/// leader's disk, whose refusal took the directory offline; each retry then took the next
/// leader's, until no replica was left.
#[test]
fn a_record_too_large_is_refused_and_takes_nothing_offline() {
    let cases = [
        (PersistConfig::new().segment_bytes(4096), 5000),
        (PersistConfig::new().max_message_bytes(1024), 2000),
    ];
    for (persist, size) in cases {
        let (_t, dirs) = tempdirs(3);
        let broker = open(&dirs);
        broker
            .create_topic::<(), String>(T, config(1).persist(persist))
            .unwrap();
        let config = ProducerConfig::new()
            .acks(Acks::All)
            .retries(5)
            .request_timeout(WAIT);
        let p = broker.producer_with_config::<(), String>(config).unwrap();
        let err = p
            .send(Record::new(T, "x".repeat(size)).partition(0))
            .unwrap_err();
        assert!(
            matches!(err.error(), Error::RecordTooLarge { .. }),
            "{size}: {}",
            err.error()
        );
        p.send(Record::new(T, "small".to_string()).partition(0))
            .unwrap();
        let d = describe(&broker);
        assert!(d.replicas.iter().all(|r| r.online && r.in_sync), "{d:?}");
        assert_eq!(
            (d.leader, d.leader_epoch, d.high_watermark),
            (Some(0), 0, 1),
            "{size}: {d:?}"
        );
        broker.close().unwrap();
    }
}

/// `send_batch` on a replicated persisted topic with a record too large in the middle of
/// a run: as on one replica, the records before it are sent and it is handed back first.
#[test]
fn send_batch_with_a_record_too_large_mid_run_on_replicas_sends_those_before() {
    let (_t, dirs) = tempdirs(3);
    let broker = open(&dirs);
    broker
        .create_topic::<(), String>(
            T,
            config(1).persist(PersistConfig::new().max_message_bytes(1024)),
        )
        .unwrap();
    let p = broker.producer::<(), String>();
    let mut batch: Vec<_> = (0..3)
        .map(|i| Record::new(T, format!("v{i}")).partition(0))
        .collect();
    batch.push(Record::new(T, "x".repeat(2000)).partition(0));
    batch.push(Record::new(T, "v4".to_string()).partition(0));
    let e = p.send_batch(&mut batch).unwrap_err();
    assert!(
        matches!(e.error, Error::RecordTooLarge { .. }),
        "{}",
        e.error
    );
    let left: Vec<_> = batch.iter().map(|r| r.value.len()).collect();
    assert_eq!((e.sent, left), (3, vec![2000, 2]));
    assert_eq!(describe(&broker).high_watermark, 3);
    broker.close().unwrap();
}

/// Threads opening one replicated persisted topic at once from disk (`topic()` after a
/// reopen): every one gets the topic, and one set of replicas is started.
#[test]
fn threads_opening_a_replicated_topic_at_once_all_get_it() {
    for round in 0..20 {
        let (_t, dirs) = tempdirs(3);
        let broker = open(&dirs);
        broker
            .create_topic::<(), String>(T, config(2).persist(PersistConfig::new()))
            .unwrap();
        broker.close().unwrap();
        drop(broker);
        let broker = open(&dirs);
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
        let openers: Vec<_> = (0..4)
            .map(|_| {
                let (b, barrier) = (broker.clone(), std::sync::Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    b.topic::<(), String>(T).map(drop)
                })
            })
            .collect();
        for o in openers {
            let opened = o.join().unwrap();
            assert!(opened.is_ok(), "round {round}: {opened:?}");
        }
        broker
            .producer::<(), String>()
            .send(Record::new(T, "x".to_string()).partition(0))
            .unwrap();
        broker.close().unwrap();
    }
}

/// `topic()` racing `delete_topic` of a replicated persisted topic found on disk and not
/// opened yet: after both, the broker and the directories agree (no topic registered over
/// deleted files).
#[test]
fn topic_racing_delete_of_an_unopened_replicated_topic_leaves_no_topic_over_deleted_files() {
    let (_t, dirs) = tempdirs(3);
    for round in 0..20u64 {
        let broker = open(&dirs);
        broker
            .create_topic::<(), String>(T, config(1).persist(PersistConfig::new()))
            .unwrap();
        broker.close().unwrap();
        drop(broker);
        let broker = open(&dirs);
        let opener = broker.clone();
        let t = std::thread::spawn(move || {
            for _ in 0..20 {
                let _ = opener.topic::<(), String>(T);
            }
        });
        std::thread::sleep(std::time::Duration::from_micros(300 * (round % 4)));
        let deleted = broker.delete_topic(T);
        t.join().unwrap();
        let listed = broker.topics().contains(&T.to_string());
        let on_disk = dirs.iter().any(|d| d.join(format!("{T}-0")).exists());
        assert!(
            !listed || on_disk,
            "round {round}: listed {listed}, files on disk {on_disk}, delete {deleted:?}"
        );
        if listed {
            broker.delete_topic(T).unwrap();
        }
        broker.close().unwrap();
    }
}
