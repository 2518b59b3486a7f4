//! Persisted (unreplicated) topics at their limits: batches and records against a small
//! segment size.

use std::path::Path;
use std::time::Duration;

use logbus::broker::{Broker, TopicConfig, TopicPartition};
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::persist::{FlushPolicy, PersistConfig};
use logbus::producer::Record;
use logbus::storage::verify::{verify_path_with, VerifyConfig};
use logbus::Error;

/// Every record of `t`-`p` from offset 0, read through a consumer (from disk when the ring
/// has moved on).
fn read_partition(broker: &Broker, p: u32) -> Vec<(u64, String)> {
    let mut c = broker
        .consumer::<(), String>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    c.assign(&[TopicPartition::new("t", p)]).unwrap();
    let mut got = Vec::new();
    while c
        .poll_with(10_000, Duration::ZERO, |r| got.push(r.to_record()))
        .unwrap()
        > 0
    {}
    got.into_iter().map(|r| (r.offset, r.value)).collect()
}

/// Every partition directory under `dir` verifies clean, offsets dense; returns the number
/// of segments.
fn verify_clean(dir: &Path) -> usize {
    let tree = verify_path_with(dir, VerifyConfig::default()).unwrap();
    assert_eq!(tree.first_problem(), None);
    tree.partitions.iter().map(|p| p.report.segments).sum()
}

/// `segment_bytes` 4096 (the smallest taken), with batches sent many times larger and records
/// that alone nearly fill a segment: the writer cuts batches a segment holds, a record no
/// segment could hold is refused at send with a typed error (the partition stays online),
/// and everything acknowledged survives a reopen, dense and verifiable.
#[test]
fn batches_larger_than_a_segment_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let value = |round: usize, i: usize| {
        let len = if i % 50 == 7 { 3900 } else { 40 + i % 90 };
        format!("{round}-{i}-{}", "x".repeat(len))
    };
    let mut want: Vec<String> = Vec::new();
    {
        let broker = Broker::builder()
            .data_dir(dir.path())
            .create(true)
            .open()
            .unwrap();
        let topic = broker
            .create_topic::<(), String>(
                "t",
                TopicConfig::new(1).records_in_memory(16).persist(
                    PersistConfig::new()
                        .segment_bytes(4096)
                        .flush(FlushPolicy::Os),
                ),
            )
            .unwrap();
        let p = broker.producer::<(), String>();
        for round in 0..4 {
            let mut batch: Vec<_> = (0..400)
                .map(|i| Record::new("t", value(round, i)).partition(0))
                .collect();
            want.extend((0..400).map(|i| value(round, i)));
            assert_eq!(p.send_batch(&mut batch).unwrap(), 400);
            // The largest record a segment's batch holds, whatever its encoding's varints
            // (a batch header of 61 bytes, at most 36 bytes of record overhead).
            let largest = "z".repeat(4096 - 61 - 36);
            p.send(Record::new("t", largest.clone()).partition(0))
                .unwrap();
            want.push(largest);
            // Within max_message_bytes (1 MiB by default) but larger than a segment holds.
            for len in [4096 - 61 - 35, 4096, 5000, 100_000] {
                let refused = p
                    .send(Record::new("t", "y".repeat(len)).partition(0))
                    .map_err(|e| e.into_error());
                assert!(
                    matches!(refused, Err(Error::RecordTooLarge { .. })),
                    "{len} bytes: {refused:?}"
                );
            }
        }
        topic.write_to_files().unwrap();
        let got = read_partition(&broker, 0);
        assert_eq!(got.len(), want.len());
        for (i, (o, v)) in got.iter().enumerate() {
            assert_eq!((*o, v), (i as u64, &want[i]), "offset {i}");
        }
        broker.close().unwrap();
    }
    // About 190 KB of records: dozens of segments.
    assert!(verify_clean(dir.path()) > 20);
    let broker = Broker::builder()
        .data_dir(dir.path())
        .create(true)
        .open()
        .unwrap();
    assert!(broker
        .recovery_reports()
        .iter()
        .all(|r| r.report.is_clean()));
    broker.topic::<(), String>("t").unwrap();
    let got = read_partition(&broker, 0);
    assert_eq!(got.len(), want.len());
    for (i, (o, v)) in got.iter().enumerate() {
        assert_eq!((*o, v), (i as u64, &want[i]), "offset {i} after reopen");
    }
    broker.close().unwrap();
    verify_clean(dir.path());
}

/// A topic `t` of two partitions with 100 records each, closed; returns the data directory.
fn closed_topic() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::builder()
        .data_dir(dir.path())
        .create(true)
        .open()
        .unwrap();
    broker
        .create_topic::<(), String>(
            "t",
            TopicConfig::new(2).persist(PersistConfig::new().segment_bytes(4096)),
        )
        .unwrap();
    let p = broker.producer::<(), String>();
    for i in 0..200 {
        p.send(Record::new("t", format!("v{i}")).partition(i % 2))
            .unwrap();
    }
    // Group `g` has read and committed all of partition 1.
    let mut c = broker
        .consumer::<(), String>(
            ConsumerConfig::new()
                .group_id("g")
                .auto_offset_reset(OffsetReset::Earliest),
        )
        .unwrap();
    c.assign(&[TopicPartition::new("t", 1)]).unwrap();
    let mut got = Vec::new();
    while c
        .poll_with(10_000, Duration::ZERO, |r| got.push(r.to_record()))
        .unwrap()
        > 0
    {}
    assert_eq!(got.len(), 100);
    c.commit_sync().unwrap();
    drop(c);
    broker.close().unwrap();
    dir
}

/// A partition directory removed between close and reopen, the topic's metadata still
/// naming it: the open fails with a typed error naming it (it started empty, its records
/// silently gone), and opening with `recreate_missing_partitions` starts it empty and
/// reports it, the other partition intact and committed offsets past the new end clamped.
#[test]
fn a_missing_partition_directory_is_refused_at_open_or_reported() {
    let dir = closed_topic();
    let lost = dir.path().join("t-1");
    std::fs::remove_dir_all(&lost).unwrap();
    match Broker::builder().data_dir(dir.path()).create(true).open() {
        Err(Error::PartitionDirMissing {
            topic,
            partition,
            dir: missing,
        }) => assert_eq!((topic.as_str(), partition, missing), ("t", 1, lost.clone())),
        other => panic!("{:?}", other.map(|b| b.recovery_reports())),
    }
    // Refusing changed nothing: still missing, still refused.
    assert!(!lost.exists());
    assert!(matches!(
        Broker::builder().data_dir(dir.path()).create(true).open(),
        Err(Error::PartitionDirMissing { .. })
    ));
    let broker = Broker::builder()
        .data_dir(dir.path())
        .create(true)
        .recreate_missing_partitions(true)
        .open()
        .unwrap();
    let reports = broker.recovery_reports();
    let recreated: Vec<_> = reports
        .iter()
        .map(|r| (r.partition, r.recreated, r.report.log_end_offset))
        .collect();
    assert_eq!(recreated, [(0, false, 100), (1, true, 0)]);
    broker.topic::<(), String>("t").unwrap();
    assert_eq!(
        broker
            .clamped_offsets()
            .iter()
            .map(|c| (c.partition, c.committed, c.log_end))
            .collect::<Vec<_>>(),
        [(1, 100, 0)]
    );
    assert_eq!(read_partition(&broker, 0).len(), 100);
    assert!(read_partition(&broker, 1).is_empty());
    broker.close().unwrap();
    // Accepted once: the next open is an ordinary one.
    let broker = Broker::builder()
        .data_dir(dir.path())
        .create(true)
        .open()
        .unwrap();
    assert!(broker.recovery_reports().iter().all(|r| !r.recreated));
    broker.close().unwrap();
}

/// The data directory removed while the broker runs: its partitions go offline (flush, sync
/// and close report it), nothing recreates the directory behind the application's back, and
/// a partition directory removed so is refused at the next open.
#[test]
fn a_data_directory_removed_while_running_takes_its_partitions_offline() {
    for whole in [true, false] {
        let root = tempfile::tempdir().unwrap();
        let data = root.path().join("data");
        let broker = Broker::builder()
            .data_dir(&data)
            .create(true)
            .open()
            .unwrap();
        let topic = broker
            .create_topic::<(), String>(
                "t",
                TopicConfig::new(1).persist(PersistConfig::new().segment_bytes(4096)),
            )
            .unwrap();
        let p = broker.producer::<(), String>();
        for i in 0..100 {
            p.send(Record::new("t", format!("v{i}"))).unwrap();
        }
        topic.write_to_files().unwrap();
        let removed = if whole {
            data.clone()
        } else {
            data.join("t-0")
        };
        std::fs::remove_dir_all(&removed).unwrap();
        // Enough to roll segments: the next segment cannot be created.
        for i in 0..200 {
            // Acknowledged in memory (FlushPolicy::Os), or refused once the log is offline.
            let _ = p.send(Record::new("t", format!("w{i}-{}", "x".repeat(100))));
        }
        assert!(topic.write_to_files().is_err(), "whole {whole}");
        assert!(broker.fsync_and_checkpoint().is_err(), "whole {whole}");
        assert!(
            matches!(broker.close(), Err(Error::LogOffline { .. })),
            "whole {whole}"
        );
        assert!(!removed.exists(), "whole {whole}: recreated");
        if !whole {
            assert!(matches!(
                Broker::builder().data_dir(&data).create(true).open(),
                Err(Error::PartitionDirMissing { .. })
            ));
        }
    }
}

/// Records whose values need dropping (`String`) are published slot by slot with exact tags
/// and then by the producer's cursor: the disk writer may see a run through its tags before
/// the cursor moves. It must still free exactly what it wrote, or its next batch finds the
/// log ahead of it and the partition goes offline. Many small sends from two threads while
/// the writer runs; every record must be on disk, in order per thread, offsets dense.
#[test]
fn a_writer_racing_tagged_publishes_frees_exactly_what_it_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::builder()
        .data_dir(dir.path())
        .create(true)
        .open()
        .unwrap();
    let topic = broker
        .create_topic::<(), String>(
            "t",
            TopicConfig::new(1)
                .records_in_memory(64)
                .persist(PersistConfig::new().flush(FlushPolicy::Os)),
        )
        .unwrap();
    const PER_THREAD: usize = 5_000;
    std::thread::scope(|s| {
        for t in 0..2 {
            let p = broker.producer::<(), String>();
            s.spawn(move || {
                for i in 0..PER_THREAD {
                    p.send(Record::new("t", format!("{t}:{i}"))).unwrap();
                }
            });
        }
    });
    topic.write_to_files().unwrap();
    let got = read_partition(&broker, 0);
    assert_eq!(got.len(), 2 * PER_THREAD);
    assert!(got.iter().enumerate().all(|(i, (o, _))| *o == i as u64));
    for t in 0..2 {
        let mine: Vec<usize> = got
            .iter()
            .filter_map(|(_, v)| v.strip_prefix(&format!("{t}:")).map(|i| i.parse().unwrap()))
            .collect();
        assert_eq!(mine, (0..PER_THREAD).collect::<Vec<_>>(), "thread {t}");
    }
    drop(topic);
    broker.close().unwrap();
    verify_clean(dir.path());
}

/// `send_batch` with a record too large for the topic in the middle of a run for one
/// partition: the records before it are sent (`e.sent` of them, in the log), the too-large
/// one is handed back first, then the rest, in order. The run was refused whole: `e.sent`
/// 0, the first record of the run handed back as if it were the one too large, so a
/// caller dropping `batch[0]` and retrying dropped a good record.
#[test]
fn send_batch_with_a_record_too_large_mid_run_sends_those_before_and_hands_it_back_first() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::builder()
        .data_dir(dir.path())
        .create(true)
        .open()
        .unwrap();
    broker
        .create_topic::<(), String>(
            "t",
            TopicConfig::new(1).persist(PersistConfig::new().max_message_bytes(1000)),
        )
        .unwrap();
    let p = broker.producer::<(), String>();
    let mut batch: Vec<_> = (0..3)
        .map(|i| Record::new("t", format!("v{i}")).partition(0))
        .collect();
    batch.push(Record::new("t", "x".repeat(5000)).partition(0));
    batch.push(Record::new("t", "v4".to_string()).partition(0));
    let e = p.send_batch(&mut batch).unwrap_err();
    assert!(
        matches!(e.error, Error::RecordTooLarge { .. }),
        "{}",
        e.error
    );
    let left: Vec<_> = batch.iter().map(|r| r.value.len()).collect();
    assert_eq!((e.sent, left), (3, vec![5000, 2]));
    assert_eq!(
        read_partition(&broker, 0),
        [(0, "v0".into()), (1, "v1".into()), (2, "v2".into())]
    );
    // The same through the partition handle: the records before it are sent.
    let h = p.partition("t", 0).unwrap();
    let e = h
        .send_iter(
            ["a".to_string(), "x".repeat(5000), "b".to_string()]
                .into_iter()
                .map(logbus::producer::Payload::new),
        )
        .unwrap_err();
    assert!(
        matches!(e.error, Error::RecordTooLarge { .. }),
        "{}",
        e.error
    );
    assert_eq!(e.sent, 1);
    assert_eq!(read_partition(&broker, 0).last(), Some(&(3, "a".into())));
    broker.close().unwrap();
}

/// `create_topic` with a persisted config: twice (`TopicExists`, whatever the types),
/// over an in-memory topic of the name, on an in-memory broker (a typed error), and after
/// `close` (`Closed`, in memory too: a closed broker takes no topic, and an in-memory one
/// created after `close` took sends); `topics()` lists
/// every kind once; the producer hands the record back for a closed broker and other types.
#[test]
fn create_topic_with_a_persisted_config_refuses_with_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::builder()
        .data_dir(dir.path())
        .create(true)
        .open()
        .unwrap();
    let persisted = || TopicConfig::new(1).persist(PersistConfig::new());
    broker.create_topic::<(), String>("p", persisted()).unwrap();
    assert!(matches!(
        broker.create_topic::<(), String>("p", persisted()),
        Err(Error::TopicExists { .. })
    ));
    assert!(matches!(
        broker.create_topic::<String, u64>("p", persisted()),
        Err(Error::TopicExists { .. })
    ));
    assert!(matches!(
        broker.create_topic::<(), String>("p", TopicConfig::new(1)),
        Err(Error::TopicExists { .. })
    ));
    broker
        .create_topic::<(), String>("m", TopicConfig::new(1))
        .unwrap();
    assert!(matches!(
        broker.create_topic::<(), String>("m", persisted()),
        Err(Error::TopicExists { .. })
    ));
    assert!(matches!(
        broker.topic::<String, u64>("p"),
        Err(Error::TypeMismatch { .. })
    ));
    assert_eq!(broker.topics(), ["m", "p"]);
    let p = broker.producer::<u64, String>();
    let e = p.send(Record::new("p", "x".to_string())).unwrap_err();
    assert!(matches!(e.error(), Error::TypeMismatch { .. }), "{e}");
    assert_eq!(e.into_record().map(|r| r.value), Some("x".to_string()));
    let p = broker.producer::<(), String>();
    p.send(Record::new("p", "before".to_string())).unwrap();
    broker.close().unwrap();
    let e = p.send(Record::new("p", "after".to_string())).unwrap_err();
    assert!(matches!(e.error(), Error::Closed { .. }), "{e}");
    assert_eq!(e.into_record().map(|r| r.value), Some("after".to_string()));
    let e = p
        .try_send(Record::new("m", "after".to_string()))
        .unwrap_err();
    assert!(matches!(e.error(), Error::Closed { .. }), "{e}");
    assert_eq!(e.into_record().map(|r| r.value), Some("after".to_string()));
    assert!(matches!(
        broker.create_topic::<(), String>("q", persisted()),
        Err(Error::Closed { .. })
    ));
    // An in-memory topic after `close` was created, and took sends ("sends fail
    // afterwards, to the broker's in-memory topics too").
    let after = broker.create_topic::<(), String>("q", TopicConfig::new(1));
    assert!(matches!(after, Err(Error::Closed { .. })), "{after:?}");
    assert!(p.send(Record::new("q", "after".to_string())).is_err());
    let memory = Broker::in_memory();
    assert!(matches!(
        memory.create_topic::<(), String>("p", persisted()),
        Err(Error::InvalidConfig {
            name: "data_dir",
            ..
        })
    ));
    assert!(memory.topics().is_empty());
}

/// `topic()` racing `delete_topic` of the same persisted topic, many rounds: after both,
/// the broker and its directory agree (no topic registered over deleted files), and a new
/// topic of the name starts clean.
#[test]
fn topic_racing_delete_never_leaves_a_topic_over_deleted_files() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::builder()
        .data_dir(dir.path())
        .create(true)
        .open()
        .unwrap();
    for round in 0..60 {
        broker
            .create_topic::<(), String>("t", TopicConfig::new(2).persist(PersistConfig::new()))
            .unwrap();
        let opener = broker.clone();
        let t = std::thread::spawn(move || {
            for _ in 0..50 {
                let _ = opener.topic::<(), String>("t");
            }
        });
        std::thread::sleep(Duration::from_micros(200 * (round % 5)));
        broker
            .delete_topic("t")
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        t.join().unwrap();
        let listed = broker.topics().contains(&"t".to_string());
        let meta = dir.path().join("t.topic").exists();
        assert_eq!(
            listed, meta,
            "round {round}: listed {listed}, metadata on disk {meta}"
        );
        if listed {
            broker.delete_topic("t").unwrap();
        }
        assert!(
            !dir.path().join("t-0").exists(),
            "round {round}: t-0 left behind"
        );
    }
    broker.close().unwrap();
}
