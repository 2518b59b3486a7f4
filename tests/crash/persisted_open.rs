//! Opening a data directory: stray segment files, topic names at the length limit, a
//! builder given a directory, and the directory lock.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use logbus::broker::{Broker, TopicConfig, MAX_TOPIC_NAME_LEN};
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::persist::{FlushPolicy, PersistConfig};
use logbus::producer::Record;
use logbus::storage::verify::{verify_path, ProblemKind};
use logbus::storage::{FsIo, Io};
use logbus::Error;

const RECORDS: u64 = 3_000;

use crate::persisted_common;
use persisted_common::{one_at_a_time, tp};

/// A cleanly closed directory: topic `t` (one partition, `RECORDS` records in 16 KiB
/// segments), group `g` committed at the end.
fn setup(dir: &Path) {
    setup_in_batches(dir, RECORDS);
}

/// As [`setup`], the producer flushed every `batch` records: segments of several batches.
fn setup_in_batches(dir: &Path, batch: u64) {
    let broker = Broker::builder().data_dir(dir).create(true).open().unwrap();
    let topic = broker
        .create_topic::<(), String>(
            "t",
            TopicConfig::new(1).persist(
                PersistConfig::new()
                    .segment_bytes(16 << 10)
                    .flush(FlushPolicy::Os),
            ),
        )
        .unwrap();
    let p = broker.producer::<(), String>();
    for i in 0..RECORDS {
        p.send(Record::new("t", format!("v{i}-{}", "x".repeat(60))))
            .unwrap();
        if (i + 1) % batch == 0 {
            topic.write_to_files().unwrap();
        }
    }
    let mut c = broker
        .consumer::<(), String>(ConsumerConfig::new().group_id("g"))
        .unwrap();
    c.assign(&[tp()]).unwrap();
    c.commit_offsets(&[(tp(), RECORDS)]).unwrap();
    drop(c);
    broker.close().unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The `.log` files of `dir`, by name.
fn logs(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".log"))
        .map(|n| (n.clone(), std::fs::read(dir.join(&n)).unwrap()))
        .collect()
}

fn base_of(name: &str) -> u64 {
    name.split_once('.').unwrap().0.parse().unwrap()
}

/// Every record of `t`-0, read from offset 0, as `(offset, value)`.
fn read_all(broker: &Broker) -> Vec<(u64, String)> {
    let mut c = broker
        .consumer::<(), String>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    c.assign(&[tp()]).unwrap();
    let mut got = Vec::new();
    while c
        .poll_with(10_000, Duration::ZERO, |r| got.push(r.to_record()))
        .unwrap()
        > 0
    {}
    got.into_iter().map(|r| (r.offset, r.value)).collect()
}

fn committed(broker: &Broker) -> Option<u64> {
    broker
        .consumer::<(), String>(ConsumerConfig::new().group_id("g"))
        .unwrap()
        .committed(&tp())
        .unwrap()
}

/// A stray `.log` — empty, a few bytes, garbage of a batch header's length — put in the
/// middle of a partition's segments (inside the first segment's offsets) or at their end
/// (inside the last one's), after a clean or an unclean shutdown: the directory opens with
/// every segment byte for byte as it was, every record and the group's offset; the file is
/// set aside as `<name>.stray` (reported), and `logbus verify` names it beforehand.
#[test]
fn a_stray_segment_file_never_deletes_or_changes_a_valid_segment() {
    let _serial = one_at_a_time();
    let pristine = tempfile::tempdir().unwrap();
    setup(pristine.path());
    let segments = logs(&pristine.path().join("t-0"));
    assert!(segments.len() >= 10, "{} segments", segments.len());
    let last_base = base_of(segments.keys().last().unwrap());
    let mut header = vec![0xA5u8; 61];
    header[8..12].copy_from_slice(&49i32.to_be_bytes()); // a plausible length, a bad CRC
    let contents: [(&str, Vec<u8>); 4] = [
        ("empty", Vec::new()),
        ("short", b"hello".to_vec()),
        ("a header's length of garbage", vec![0xA5u8; 61]),
        ("a header with a bad CRC", header),
    ];
    for (what, bytes) in &contents {
        for (place, base) in [("middle", 7), ("end", last_base + 5)] {
            for clean in [true, false] {
                let case = format!("{what} at the {place}, clean shutdown {clean}");
                let tmp = tempfile::tempdir().unwrap();
                let dir = tmp.path().join("data");
                copy_dir(pristine.path(), &dir);
                if !clean {
                    std::fs::remove_file(dir.join(".logbus_cleanshutdown")).unwrap();
                }
                let name = format!("{base:020}.log");
                let stray = dir.join("t-0").join(&name);
                std::fs::write(&stray, bytes).unwrap();

                let problem = verify_path(&dir).unwrap().first_problem().cloned();
                let problem = problem.unwrap_or_else(|| panic!("{case}: verify saw nothing"));
                assert_eq!(
                    (problem.kind, &problem.file),
                    (ProblemKind::StraySegment, &stray),
                    "{case}: {problem:?}"
                );

                let broker = Broker::open(&dir).unwrap_or_else(|e| panic!("{case}: {e}"));
                broker.topic::<(), String>("t").unwrap();
                let report = broker.recovery_reports()[0].report.clone();
                assert_eq!(report.truncation, None, "{case}");
                assert!(report.deleted_segments.is_empty(), "{case}: {report:?}");
                let set_aside = dir.join("t-0").join(format!("{name}.stray"));
                assert_eq!(report.set_aside, vec![set_aside.clone()], "{case}");
                assert_eq!(logs(&dir.join("t-0")), segments, "{case}: segments changed");
                assert_eq!(&std::fs::read(&set_aside).unwrap(), bytes, "{case}");
                assert_eq!(
                    broker.describe_topic("t").unwrap().partitions[0].log_end,
                    RECORDS,
                    "{case}"
                );
                assert_eq!(committed(&broker), Some(RECORDS), "{case}");
                assert!(broker.clamped_offsets().is_empty(), "{case}");
                let all = read_all(&broker);
                assert_eq!(all.len() as u64, RECORDS, "{case}");
                for (i, (o, v)) in all.iter().enumerate() {
                    assert_eq!(*o, i as u64, "{case}");
                    assert!(v.starts_with(&format!("v{i}-")), "{case}: {v}");
                }
                broker.close().unwrap();
                let again = Broker::open(&dir).unwrap();
                assert!(again.recovery_reports()[0].report.is_clean(), "{case}");
                again.close().unwrap();
                assert_eq!(verify_path(&dir).unwrap().first_problem(), None, "{case}");
            }
        }
    }
}

/// What the stray rule must leave alone: a torn tail of the last segment (a crash
/// mid-append) is still cut, and an empty last segment based at the log end (a roll just
/// before a crash) is still the active segment.
#[test]
fn a_torn_last_segment_is_still_cut_and_an_empty_rolled_one_kept() {
    let _serial = one_at_a_time();
    let pristine = tempfile::tempdir().unwrap();
    setup(pristine.path());
    let segments = logs(&pristine.path().join("t-0"));
    let (last, last_bytes) = segments.iter().last().unwrap();
    for torn in [&b"x"[..], &[0u8; 30][..], &last_bytes[..80]] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        copy_dir(pristine.path(), &dir);
        std::fs::remove_file(dir.join(".logbus_cleanshutdown")).unwrap();
        let path = dir.join("t-0").join(last);
        let mut bytes = last_bytes.clone();
        bytes.extend_from_slice(torn);
        std::fs::write(&path, bytes).unwrap();
        let broker = Broker::open(&dir).unwrap();
        let report = broker.recovery_reports()[0].report.clone();
        let cut = report.truncation.clone().expect("the torn tail is cut");
        assert_eq!((cut.file, cut.position), (path, last_bytes.len() as u64));
        assert!(report.set_aside.is_empty(), "{report:?}");
        broker.topic::<(), String>("t").unwrap();
        assert_eq!(read_all(&broker).len() as u64, RECORDS);
        broker.close().unwrap();
        assert_eq!(logs(&dir.join("t-0")), segments);
    }

    // An empty segment at the log end, and a torn one (its first batch cut short).
    for first in [&[][..], &last_bytes[..40]] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        copy_dir(pristine.path(), &dir);
        std::fs::remove_file(dir.join(".logbus_cleanshutdown")).unwrap();
        let rolled = dir.join("t-0").join(format!("{RECORDS:020}.log"));
        std::fs::write(&rolled, first).unwrap();
        let broker = Broker::open(&dir).unwrap();
        let report = broker.recovery_reports()[0].report.clone();
        assert!(report.set_aside.is_empty(), "{report:?}");
        assert!(report.deleted_segments.is_empty(), "{report:?}");
        assert_eq!(report.log_end_offset, RECORDS);
        broker.topic::<(), String>("t").unwrap();
        let m = broker
            .producer::<(), String>()
            .send(Record::new("t", "next".to_string()))
            .unwrap();
        assert_eq!(m.offset, RECORDS);
        broker.close().unwrap();
        assert!(!std::fs::read(&rolled).unwrap().is_empty());
        let mut now = logs(&dir.join("t-0"));
        now.remove(&format!("{RECORDS:020}.log"));
        assert_eq!(now, segments);
    }
}

/// A segment whose first batch is damaged (a flipped bit under its CRC) is not a stray file:
/// its head still names its base offset, so the verifier reports the corrupt batch and
/// recovery leaves the file where it is.
#[test]
fn a_damaged_first_batch_is_a_corrupt_segment_not_a_stray_file() {
    let _serial = one_at_a_time();
    let pristine = tempfile::tempdir().unwrap();
    setup(pristine.path());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    copy_dir(pristine.path(), &dir);
    let segments = logs(&dir.join("t-0"));
    let second = segments.keys().nth(1).unwrap();
    let path = dir.join("t-0").join(second);
    let mut bytes = segments[second].clone();
    bytes[70] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    let problem = verify_path(&dir).unwrap().first_problem().cloned().unwrap();
    assert_eq!(
        (problem.kind, &problem.file),
        (ProblemKind::CorruptBatch, &path)
    );
    let broker = Broker::open(&dir).unwrap();
    assert!(broker.recovery_reports()[0].report.set_aside.is_empty());
    broker.close().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

/// One length limit for every kind of topic, refused with `InvalidTopicName` saying it:
/// names of `MAX_TOPIC_NAME_LEN` characters work in memory, persisted and replicated (and
/// reopen); one more character is refused for each, never an I/O error.
#[test]
fn topic_names_are_refused_at_the_one_limit_every_kind_holds() {
    let _serial = one_at_a_time();
    assert_eq!(MAX_TOPIC_NAME_LEN, 242);
    let longest = "n".repeat(MAX_TOPIC_NAME_LEN);
    let refused = |what: &str, r: logbus::Result<()>| match r {
        Err(Error::InvalidTopicName { reason, .. }) => {
            assert!(reason.contains("1 to 242 characters"), "{what}: {reason}")
        }
        other => panic!("{what}: expected InvalidTopicName, got {other:?}"),
    };

    let memory = Broker::in_memory();
    memory
        .create_topic::<(), String>(&longest, TopicConfig::new(1))
        .unwrap();
    for len in MAX_TOPIC_NAME_LEN + 1..=249 {
        let name = "m".repeat(len);
        refused(
            &format!("in memory, {len}"),
            memory
                .create_topic::<(), String>(&name, TopicConfig::new(1))
                .map(drop),
        );
    }

    let tmp = tempfile::tempdir().unwrap();
    let dirs: Vec<PathBuf> = (0..2).map(|i| tmp.path().join(format!("d{i}"))).collect();
    let broker = Broker::builder()
        .data_dirs(&dirs)
        .create(true)
        .open()
        .unwrap();
    let persisted = "p".repeat(MAX_TOPIC_NAME_LEN);
    let replicated = "r".repeat(MAX_TOPIC_NAME_LEN);
    broker
        .create_topic::<(), String>(
            &persisted,
            TopicConfig::new(1).persist(PersistConfig::new()),
        )
        .unwrap();
    broker
        .create_topic::<(), String>(
            &replicated,
            TopicConfig::new(1)
                .replication_factor(2)
                .persist(PersistConfig::new()),
        )
        .unwrap();
    for len in MAX_TOPIC_NAME_LEN + 1..=249 {
        refused(
            &format!("persisted, {len}"),
            broker
                .create_topic::<(), String>(
                    &"q".repeat(len),
                    TopicConfig::new(1).persist(PersistConfig::new()),
                )
                .map(drop),
        );
        refused(
            &format!("replicated, {len}"),
            broker
                .create_topic::<(), String>(
                    &"s".repeat(len),
                    TopicConfig::new(1)
                        .replication_factor(2)
                        .persist(PersistConfig::new()),
                )
                .map(drop),
        );
    }
    let p = broker.producer::<(), String>();
    p.send(Record::new(persisted.clone(), "a".to_string()))
        .unwrap();
    p.send(Record::new(replicated.clone(), "b".to_string()))
        .unwrap();
    broker.close().unwrap();
    drop(broker);
    let broker = Broker::builder().data_dirs(&dirs).open().unwrap();
    broker.topic::<(), String>(&persisted).unwrap();
    broker.topic::<(), String>(&replicated).unwrap();
    for name in [&persisted, &replicated] {
        assert_eq!(
            broker.describe_topic(name).unwrap().partitions[0].log_end,
            1
        );
    }
    broker.delete_topic(&persisted).unwrap();
    broker.delete_topic(&replicated).unwrap();
    broker.close().unwrap();
}

/// `Broker::builder().data_dir(dir).create(true).build()` opens (here: creates) the
/// directory; given a directory it cannot open, `build` fails saying why.
#[test]
fn a_builder_given_a_data_dir_builds_a_persisted_broker_or_fails() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    assert!(matches!(
        Broker::builder().data_dir(&dir).build(),
        Err(Error::DataDirUnformatted { missing: true, .. })
    ));
    let broker = Broker::builder()
        .data_dir(&dir)
        .create(true)
        .build()
        .unwrap();
    broker
        .create_topic::<(), String>("t", TopicConfig::new(1).persist(PersistConfig::new()))
        .unwrap();
    broker
        .producer::<(), String>()
        .send(Record::new("t", "kept".to_string()))
        .unwrap();
    assert!(matches!(
        Broker::builder().data_dir(&dir).build(),
        Err(Error::DirectoryLocked { .. })
    ));
    broker.close().unwrap();
    drop(broker);
    let broker = Broker::builder().data_dir(&dir).build().unwrap();
    broker.topic::<(), String>("t").unwrap();
    assert_eq!(broker.describe_topic("t").unwrap().partitions[0].log_end, 1);
    broker.close().unwrap();
    assert!(Broker::builder().build().unwrap().topics().is_empty());
}

const LOCK_CHILD_ENV: &str = "LOGBUS_LOCK_CHILD_DIR";

/// The child of `a_locked_data_dir_is_refused_to_a_second_open`: opens the directory and
/// prints what happened.
#[test]
#[ignore = "run by a_locked_data_dir_is_refused_to_a_second_open as its child"]
fn lock_child() {
    let Some(dir) = std::env::var_os(LOCK_CHILD_ENV) else {
        return;
    };
    match Broker::open(PathBuf::from(dir)) {
        Err(Error::DirectoryLocked { .. }) => println!("child: locked"),
        Err(e) => println!("child: error {e}"),
        Ok(b) => {
            println!("child: opened");
            b.close().unwrap();
        }
    }
}

/// The data directory's lock (std's file lock, on every platform): a second open in the
/// same process or in another one is refused with `DirectoryLocked`, and so is a second
/// lock through the storage layer; after `close` the directory opens again.
#[test]
fn a_locked_data_dir_is_refused_to_a_second_open() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let broker = Broker::builder()
        .data_dir(&dir)
        .create(true)
        .open()
        .unwrap();
    assert!(matches!(
        Broker::open(&dir),
        Err(Error::DirectoryLocked { .. })
    ));
    let second = FsIo.lock_dir(&dir);
    assert_eq!(
        second.map(drop).map_err(|e| e.kind()),
        Err(std::io::ErrorKind::WouldBlock)
    );
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            &crate::child_test(module_path!(), "lock_child"),
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(LOCK_CHILD_ENV, &dir)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&child.stdout);
    assert!(out.contains("child: locked"), "the child: {out}");
    broker.close().unwrap();
    drop(broker);
    Broker::open(&dir).unwrap().close().unwrap();
}

/// The byte positions and base offsets of the batches of a `.log` file.
fn batch_starts(bytes: &[u8]) -> Vec<(usize, u64)> {
    let mut at = 0;
    let mut starts = Vec::new();
    while at + 12 <= bytes.len() {
        let base = u64::from_be_bytes(bytes[at..at + 8].try_into().unwrap());
        let len = i32::from_be_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        starts.push((at, base));
        at += 12 + len;
    }
    starts
}

/// A stray `.log` that holds valid batches — a copy of the tail of a segment (from one of
/// its batches to its end), named by its first batch's offset, as a botched restore or a
/// copy by hand leaves one — lies inside the offsets of the segment it was copied from:
/// the directory still opens with every segment as it was and every record, after a clean
/// or an unclean shutdown.
#[test]
fn a_stray_copy_of_a_segment_tail_never_deletes_or_changes_a_valid_segment() {
    let _serial = one_at_a_time();
    let pristine = tempfile::tempdir().unwrap();
    setup_in_batches(pristine.path(), 20);
    let segments = logs(&pristine.path().join("t-0"));
    let names: Vec<&String> = segments.keys().collect();
    // Copies of the first and of the last segments that hold two batches or more: how the
    // writer groups records into batches follows its timing, so the last segment may hold
    // a single batch (nothing to copy a tail of).
    let multi: Vec<usize> = (0..names.len())
        .filter(|&i| batch_starts(&segments[names[i]]).len() >= 2)
        .collect();
    assert!(
        multi.len() >= 2,
        "segments of two batches or more: {multi:?}"
    );
    for (from, clean) in [
        (multi[0], true),
        (multi[0], false),
        (multi[multi.len() - 2], true),
        (multi[multi.len() - 1], false),
    ] {
        let source = &segments[names[from]];
        let starts = batch_starts(source);
        assert!(
            starts.len() >= 2,
            "{}: {} batches",
            names[from],
            starts.len()
        );
        let (at, base) = starts[starts.len() / 2];
        let case = format!(
            "a copy of {} from offset {base}, clean shutdown {clean}",
            names[from]
        );
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        copy_dir(pristine.path(), &dir);
        if !clean {
            std::fs::remove_file(dir.join(".logbus_cleanshutdown")).unwrap();
        }
        let name = format!("{base:020}.log");
        let stray = dir.join("t-0").join(&name);
        std::fs::write(&stray, &source[at..]).unwrap();
        let problem = verify_path(&dir).unwrap().first_problem().cloned();
        let problem = problem.unwrap_or_else(|| panic!("{case}: verify saw nothing"));
        assert_eq!(
            (problem.kind, &problem.file),
            (ProblemKind::StraySegment, &stray),
            "{case}: {problem:?}"
        );

        let broker = match Broker::open(&dir) {
            Ok(b) => b,
            Err(e) => {
                // Refusing, naming the file, changes nothing either.
                assert!(e.to_string().contains(&name), "{case}: {e}");
                let mut now = logs(&dir.join("t-0"));
                now.remove(&name);
                assert_eq!(now, segments, "{case}: segments changed");
                continue;
            }
        };
        broker.topic::<(), String>("t").unwrap();
        let report = broker.recovery_reports()[0].report.clone();
        assert_eq!(report.truncation, None, "{case}: {report:?}");
        assert!(report.deleted_segments.is_empty(), "{case}: {report:?}");
        let set_aside = dir.join("t-0").join(format!("{name}.stray"));
        assert_eq!(report.set_aside, vec![set_aside], "{case}");
        assert_eq!(committed(&broker), Some(RECORDS), "{case}");
        let all = read_all(&broker);
        assert_eq!(all.len() as u64, RECORDS, "{case}");
        for (i, (o, v)) in all.iter().enumerate() {
            assert_eq!(*o, i as u64, "{case}");
            assert!(v.starts_with(&format!("v{i}-")), "{case}: {v}");
        }
        broker.close().unwrap();
        let mut now = logs(&dir.join("t-0"));
        now.remove(&name);
        assert_eq!(now, segments, "{case}: segments changed");
    }
}

/// A builder given directories — an empty list of them, the same directory twice (or
/// under two spellings), a missing one beside an existing one, a non-empty directory that
/// is not logbus's — refuses to build with a typed error, never a panic or an in-memory
/// broker.
#[test]
fn a_builder_given_data_dirs_refuses_every_set_it_cannot_open() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    Broker::builder()
        .data_dirs([&a, &b])
        .create(true)
        .open()
        .unwrap()
        .close()
        .unwrap();
    let foreign = tmp.path().join("foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("notes.txt"), "mine").unwrap();
    let none: [PathBuf; 0] = [];
    let cases: Vec<(&str, Vec<PathBuf>, bool)> = vec![
        ("an empty list", none.to_vec(), true),
        ("an empty list, no create", none.to_vec(), false),
        (
            "the same directory twice",
            vec![a.clone(), a.clone()],
            false,
        ),
        (
            "the same directory twice, spelled twice",
            vec![a.clone(), a.join(".")],
            false,
        ),
        (
            "a missing one",
            vec![a.clone(), tmp.path().join("missing")],
            false,
        ),
        ("a foreign one, create", vec![foreign.clone()], true),
        (
            "a foreign one beside a set",
            vec![a.clone(), b.clone(), foreign.clone()],
            true,
        ),
    ];
    for (what, dirs, create) in cases {
        let built =
            std::panic::catch_unwind(|| Broker::builder().data_dirs(&dirs).create(create).build());
        match built {
            Err(_) => panic!("{what}: panicked"),
            Ok(Ok(broker)) => {
                let topics = broker.topics();
                let _ = broker.close();
                panic!("{what}: built a broker (persisted topics {topics:?})");
            }
            Ok(Err(e)) => {
                // A data directory is not called a partition directory.
                let text = e.to_string();
                assert!(!text.contains("partition directory"), "{what}: {text}");
            }
        }
    }
    // The set is still whole.
    let broker = Broker::builder().data_dirs([&a, &b]).open().unwrap();
    broker.close().unwrap();
}

/// A log-start checkpoint past a partition's log end (a checkpoint file edited, restored
/// from elsewhere or left stale) empties the partition on open, as Kafka restarts such a
/// log at its log start: the segments deleted for it are reported, never dropped silently.
#[test]
fn segments_deleted_below_a_log_start_past_the_log_end_are_reported() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    setup(&dir);
    let segments = logs(&dir.join("t-0"));
    std::fs::write(
        dir.join("log-start-offset-checkpoint"),
        format!("0\n1\nt 0 {}\n", RECORDS + 100),
    )
    .unwrap();
    let broker = Broker::open(&dir).unwrap();
    let report = broker.recovery_reports()[0].report.clone();
    assert_eq!(report.log_start_offset, RECORDS + 100);
    let deleted: Vec<String> = report
        .deleted_segments
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let all: Vec<String> = segments.keys().cloned().collect();
    assert_eq!(deleted, all, "{report:?}");
    assert!(!report.is_clean());
    broker.close().unwrap();
}

/// A broker dropped without `close` (its last handle) releases its data directories: they
/// open again in the same process, with what was sent, persisted and replicated topics
/// alike.
#[test]
fn a_broker_dropped_without_close_releases_its_data_directories() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let dirs: Vec<PathBuf> = (0..2).map(|i| tmp.path().join(format!("d{i}"))).collect();
    {
        let broker = Broker::builder()
            .data_dirs(&dirs)
            .create(true)
            .open()
            .unwrap();
        for (name, replicas) in [("t", 1), ("r", 2)] {
            broker
                .create_topic::<(), String>(
                    name,
                    TopicConfig::new(1)
                        .replication_factor(replicas)
                        .persist(PersistConfig::new()),
                )
                .unwrap();
            broker
                .producer::<(), String>()
                .send(Record::new(name, "kept".to_string()))
                .unwrap();
        }
    }
    let broker = Broker::builder()
        .data_dirs(&dirs)
        .open()
        .unwrap_or_else(|e| panic!("reopening after a drop without close: {e}"));
    for name in ["t", "r"] {
        broker.topic::<(), String>(name).unwrap();
        assert_eq!(
            broker.describe_topic(name).unwrap().partitions[0].log_end,
            1,
            "{name}"
        );
    }
    broker.close().unwrap();
}

/// `create_topic` with a persisted config on a broker without a data directory is a typed
/// error naming the setting and how to open one; nothing is created in memory instead.
#[test]
fn a_persisted_config_on_an_in_memory_broker_is_refused() {
    let _guard = one_at_a_time();
    let broker = Broker::in_memory();
    let config = TopicConfig::new(1).persist(PersistConfig::new());
    match broker.create_topic::<(), String>("t", config) {
        Err(Error::InvalidConfig { name, valid, .. }) => {
            assert_eq!(name, "data_dir");
            assert!(valid.contains("Broker::open"), "{valid}");
        }
        other => panic!("expected InvalidConfig(data_dir), got {other:?}"),
    }
    assert!(broker.topics().is_empty());
}

/// One `topic` for both kinds: it opens a persisted topic found on disk (its codecs checked
/// against the metadata), returns the open one afterwards, and `topics` lists it before
/// and after it is opened.
#[test]
fn topic_opens_a_persisted_topic_and_topics_lists_every_kind() {
    let _guard = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let broker = Broker::builder()
        .data_dir(tmp.path())
        .create(true)
        .open()
        .unwrap();
    broker
        .create_topic::<(), String>("disk", TopicConfig::new(1).persist(PersistConfig::new()))
        .unwrap();
    broker
        .create_topic::<(), String>("memory", TopicConfig::new(1))
        .unwrap();
    broker
        .producer::<(), String>()
        .send(Record::new("disk", "kept".to_string()))
        .unwrap();
    broker.close().unwrap();
    drop(broker);

    let broker = Broker::open(tmp.path()).unwrap();
    assert_eq!(broker.topics(), ["disk"]);
    assert!(matches!(
        broker.topic::<(), u64>("disk"),
        Err(Error::TypeMismatch { .. })
    ));
    let topic = broker.topic::<(), String>("disk").unwrap();
    assert_eq!(topic.partition_count(), 1);
    assert_eq!(
        broker.describe_topic("disk").unwrap().partitions[0].log_end,
        1
    );
    broker.topic::<(), String>("disk").unwrap();
    assert_eq!(broker.topics(), ["disk"]);
    broker.close().unwrap();
}
