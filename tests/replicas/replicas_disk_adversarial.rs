//! Adversarial tests of replicated persisted topics (issues 14 and 15), on their files:
//! hand-crafted, truncated and corrupt `<topic>.replicas` and `leader-epoch-checkpoint`
//! files, partition directories missing or replaced by junk, data directories that are
//! files, reopening with the directories reordered or their count changed, two brokers on
//! overlapping directories. (Load, crashes and races: `replicas_disk_races`.)
//!
//! Each reopen must give a typed error or recover: never a panic, never an acknowledged
//! record silently lost.

use crate::replicas_adversarial_common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::Duration;

use logbus::persist::PersistConfig;
use logbus::producer::Record;
use logbus::replica::EventKind;
use logbus::{Broker, Error, TopicConfig};
use replicas_adversarial_common::*;

/// Rewrites the metadata copy in `dir`: `f` maps each `key value` line (the checkpoint's
/// version and count lines excluded) to its replacement (`None`: removed).
fn edit_meta(dir: &Path, f: &dyn Fn(&str) -> Option<String>) {
    let path = meta_file(dir);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines = text.lines();
    let version = lines.next().unwrap().to_owned();
    let _count = lines.next();
    let body: Vec<String> = lines.filter_map(f).collect();
    let mut out = format!("{version}\n{}\n", body.len());
    for l in body {
        out.push_str(&l);
        out.push('\n');
    }
    std::fs::write(&path, out).unwrap();
}

/// A closed broker on three fresh directories with topic `T` (one partition, RF 3) holding
/// values `0..n`, all acknowledged under `acks = all`.
fn closed_topic(n: u64, persist: PersistConfig) -> (Vec<tempfile::TempDir>, Vec<PathBuf>) {
    let (t, dirs) = tempdirs(3);
    let broker = open(&dirs);
    broker
        .create_topic::<(), u64>(T, config(1).records_in_memory(8).persist(persist))
        .unwrap();
    assert_eq!(send(&producer(&broker), 0..n).len() as u64, n);
    broker.close().unwrap();
    (t, dirs)
}

/// Opens the broker and the topic, returning what went wrong as a string (a panic
/// included); `Ok(None)` when a typed error refused the open.
fn reopen_outcome(dirs: &[PathBuf]) -> Result<Option<Broker>, String> {
    let r = catch_unwind(AssertUnwindSafe(|| {
        let broker = match try_open(dirs) {
            Ok(b) => b,
            Err(e) => return Ok::<_, String>(Err(e)),
        };
        match broker.topic::<(), u64>(T) {
            Ok(_) => Ok(Ok(broker)),
            Err(e) => {
                let _ = broker.close();
                Ok(Err(e))
            }
        }
    }));
    match r {
        Ok(Ok(Ok(b))) => Ok(Some(b)),
        Ok(Ok(Err(_typed))) => Ok(None),
        Ok(Err(s)) => Err(s),
        Err(p) => Err(format!(
            "panicked: {}",
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    }
}

/// A crafted `partition.0` line or topic setting in every copy of the metadata: the reopen
/// is refused with a typed error, or works and keeps every acknowledged record.
#[test]
fn crafted_replicas_files_give_typed_errors_or_recover() {
    let line = |l: &str, key: &str, field: &str, value: &str| -> Option<String> {
        if !l.starts_with(&format!("{key} ")) {
            return Some(l.to_owned());
        }
        if field.is_empty() {
            return Some(format!("{key} {value}"));
        }
        let (k, rest) = l.split_once(' ').unwrap();
        let fields: Vec<String> = rest
            .split(' ')
            .map(|f| match f.split_once('=') {
                Some((name, _)) if name == field => format!("{name}={value}"),
                _ => f.to_owned(),
            })
            .collect();
        Some(format!("{k} {}", fields.join(" ")))
    };
    let cases: Vec<(&str, &str, &str)> = vec![
        ("partition.0", "replicas", ""),
        ("partition.0", "replicas", "0,0,1"),
        ("partition.0", "replicas", "1,1,1"),
        ("partition.0", "replicas", "0,1,2,0"),
        ("partition.0", "isr", ""),
        ("partition.0", "isr", "7"),
        ("partition.0", "leader", "9"),
        ("partition.0", "leader", "-9"),
        ("partition.0", "epoch", "2147483647"),
        ("partition.0", "epoch", "-2147483648"),
        ("partition.0", "hw", "18446744073709551615"),
        ("generation", "", "18446744073709551615"),
        ("replication_factor", "", "0"),
        ("min_insync_replicas", "", "0"),
        ("min_insync_replicas", "", "99"),
        ("max_message_bytes", "", "-1"),
        ("max_message_bytes", "", "0"),
        ("segment_bytes", "", "0"),
        ("segment_bytes", "", "-1"),
        ("records_in_memory", "", "0"),
        ("partitions", "", "0"),
        ("replica_lag_time_max_ms", "", "0"),
    ];
    let mut failures = Vec::new();
    for (key, field, value) in cases {
        let (_t, dirs) = closed_topic(40, PersistConfig::new());
        for d in &dirs {
            edit_meta(d, &|l| line(l, key, field, value));
        }
        let what = format!("{key} {field}={value}");
        match reopen_outcome(&dirs) {
            Err(e) => failures.push(format!("{what}: {e}")),
            Ok(None) => {}
            Ok(Some(broker)) => {
                let r = catch_unwind(AssertUnwindSafe(|| {
                    let lost = broker
                        .faults()
                        .events()
                        .iter()
                        .any(|e| matches!(e.kind, EventKind::RecordsLost { .. }));
                    let _ = broker.faults().wait_in_sync(T, 0, Duration::from_secs(5));
                    let p = producer(&broker);
                    let _ = p.send(Record::new(T, 1000).partition(0));
                    let _ = broker.faults().wait_in_sync(T, 0, Duration::from_secs(5));
                    let led = broker
                        .describe_topic(T)
                        .ok()
                        .and_then(|d| d.replicas.first().map(|r| r.leader.is_some()));
                    if !lost && led == Some(true) {
                        assert_has_all(&read_all(&broker), &(0..40).collect::<Vec<_>>(), &what);
                    }
                    let _ = broker.close();
                }));
                if let Err(p) = r {
                    failures.push(format!(
                        "{what}: after open: {}",
                        p.downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default()
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Opens the topic, checks that every acknowledged value is readable (densely), that the
/// replicas agree below HW, sends 10 more, and closes; twice, so the second open reads the
/// files the first one wrote.
fn reopen_and_check(dirs: &[PathBuf], acked: &[u64], what: &str) {
    for round in 0..2 {
        let what = format!("{what} (open {round})");
        let broker = open(dirs);
        broker.topic::<(), u64>(T).unwrap();
        assert!(
            broker.faults().wait_in_sync(T, 0, WAIT).unwrap(),
            "{what}: {:?}",
            describe(&broker)
        );
        assert_nothing_lost(&broker, &what);
        let got = read_all(&broker);
        assert_has_all(&got, acked, &what);
        assert_replicas_agree(&broker, 0, &what);
        let p = producer(&broker);
        let base = 10_000 * (round + 1);
        assert_eq!(send(&p, base..base + 10).len(), 10, "{what}");
        assert!(broker.faults().wait_in_sync(T, 0, WAIT).unwrap(), "{what}");
        assert_replicas_agree(&broker, 0, &what);
        drop(p);
        broker.close().unwrap();
    }
}

/// Damaged `leader-epoch-checkpoint` files (garbage, cut short, a count that lies, epochs
/// out of order, entries past the log end, an epoch that no batch carries) on the leader's
/// and on a follower's directory: rebuilt or corrected, nothing acknowledged lost.
#[test]
fn damaged_epoch_files_are_rebuilt_and_lose_nothing() {
    let cases: &[(&str, &str)] = &[
        ("garbage", "not a checkpoint\x00\x01"),
        ("empty", ""),
        ("cut short", "0\n2\n0 0\n"),
        ("count lies", "0\n99999999999\n0 0\n"),
        ("out of order", "0\n2\n3 0\n1 10\n"),
        ("past the end", "0\n1\n0 100000\n"),
        ("an unknown epoch", "0\n2\n0 0\n9 20\n"),
        ("a negative epoch", "0\n1\n-5 0\n"),
        ("a negative offset", "0\n1\n0 -3\n"),
        ("bad version", "7\n1\n0 0\n"),
    ];
    for dir in [0usize, 2] {
        for (name, text) in cases {
            let (_t, dirs) = closed_topic(40, PersistConfig::new());
            std::fs::write(
                part_dir(&dirs[dir], 0).join("leader-epoch-checkpoint"),
                text,
            )
            .unwrap();
            reopen_and_check(
                &dirs,
                &(0..40).collect::<Vec<_>>(),
                &format!("dir {dir}: {name}"),
            );
        }
    }
}

/// A partition directory removed from one data directory (the leader's, then a
/// follower's): that replica starts empty and catches up.
#[test]
fn a_partition_directory_missing_on_one_data_dir_is_refilled() {
    for dir in [0usize, 1] {
        let (_t, dirs) = closed_topic(200, PersistConfig::new().segment_bytes(4096));
        std::fs::remove_dir_all(part_dir(&dirs[dir], 0)).unwrap();
        reopen_and_check(&dirs, &(0..200).collect::<Vec<_>>(), &format!("dir {dir}"));
    }
}

/// Junk in a partition directory (a stray file, a segment of random bytes, a truncated
/// index) and a partition directory that is a file: typed errors or recovery.
#[test]
fn junk_in_partition_directories_loses_nothing_acknowledged() {
    let (_t, dirs) = closed_topic(200, PersistConfig::new().segment_bytes(4096));
    let p1 = part_dir(&dirs[1], 0);
    std::fs::write(p1.join("README.txt"), "junk").unwrap();
    std::fs::write(p1.join("00000000000000099999.log"), [0xAB; 300]).unwrap();
    let idx = p1.join("00000000000000000000.index");
    if idx.exists() {
        std::fs::write(&idx, [1, 2, 3]).unwrap();
    }
    let p2 = part_dir(&dirs[2], 0);
    std::fs::remove_dir_all(&p2).unwrap();
    std::fs::write(&p2, "a file where a directory was").unwrap();
    match reopen_outcome(&dirs) {
        Err(e) => panic!("{e}"),
        Ok(None) => {}
        Ok(Some(broker)) => {
            let _ = broker.faults().wait_in_sync(T, 0, Duration::from_secs(5));
            assert_has_all(&read_all(&broker), &(0..200).collect::<Vec<_>>(), "junk");
            broker.close().unwrap();
        }
    }
}

/// A data directory that is a file, first or not: a typed error at open.
#[test]
fn a_data_dir_that_is_a_file_is_a_typed_error() {
    for at in 0..3 {
        let (t, mut dirs) = tempdirs(3);
        let file = t[at].path().join("not-a-dir");
        std::fs::write(&file, "x").unwrap();
        dirs[at] = file;
        let r = catch_unwind(AssertUnwindSafe(|| try_open(&dirs).map(|b| b.close())));
        match r {
            Err(_) => panic!("directory {at} a file: panicked"),
            Ok(Ok(_)) => panic!("directory {at} a file: opened"),
            Ok(Err(e)) => assert!(matches!(e, Error::Io { .. }), "{e}"),
        }
    }
}

/// Partition 0 on directories {0, 1} (RF 2 on three directories), `min_insync_replicas`
/// 1; directory 1 fails, so records 40..80 are acknowledged by directory 0 alone. Then the
/// broker closes with directory 1's copy of the metadata stale.
fn asymmetric_topic() -> (Vec<tempfile::TempDir>, Vec<PathBuf>, Vec<u64>) {
    let (t, dirs) = tempdirs(3);
    let broker = open(&dirs);
    let config = TopicConfig::new(1)
        .replication_factor(2)
        .min_insync_replicas(1);
    broker
        .create_topic::<(), u64>(T, config.persist(PersistConfig::new()))
        .unwrap();
    let p = producer(&broker);
    let mut acked = send(&p, 0..40);
    broker.faults().fail_data_dir(1).unwrap();
    acked.extend(send(&p, 40..80));
    assert_eq!(acked.len(), 80);
    drop(p);
    broker.close().unwrap();
    (t, dirs, acked)
}

/// Replica ids are directory indexes: given in another order, the directories would swap
/// replicas, and a stale replica could lead (truncating the others). Refused with a typed
/// error instead; the original order still finds everything.
#[test]
fn directories_given_in_another_order_are_refused() {
    let (_t, dirs, acked) = asymmetric_topic();
    for order in [[1, 0, 2], [2, 1, 0], [0, 2, 1]] {
        let moved: Vec<PathBuf> = order.iter().map(|&i| dirs[i].clone()).collect();
        match reopen_outcome(&moved) {
            Err(e) => panic!("order {order:?}: {e}"),
            Ok(None) => {}
            Ok(Some(broker)) => {
                let lost = broker
                    .faults()
                    .events()
                    .into_iter()
                    .find(|e| matches!(e.kind, EventKind::RecordsLost { .. }));
                let _ = broker.faults().wait_in_sync(T, 0, Duration::from_secs(5));
                let got = read_all(&broker);
                broker.close().unwrap();
                panic!(
                    "order {order:?} opened: {lost:?}, {} of {} acknowledged records readable",
                    acked.iter().filter(|v| got.contains(v)).count(),
                    acked.len()
                );
            }
        }
    }
    // The broker itself opens (its other topics stay usable); the topic is refused.
    let swapped = vec![dirs[1].clone(), dirs[0].clone(), dirs[2].clone()];
    let broker = open(&swapped);
    let err = broker.topic::<(), u64>(T).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidConfig { name: "data_dirs", valid, .. }
            if valid.contains("was directory 1")),
        "{err}"
    );
    broker.close().unwrap();
    drop(broker);
    let broker = open(&dirs);
    broker.topic::<(), u64>(T).unwrap();
    assert_has_all(&read_all(&broker), &acked, "the original order");
    broker.close().unwrap();
}

/// Fewer directories: a typed error naming the missing one. More: everything is there.
#[test]
fn a_changed_directory_count_is_refused_or_harmless() {
    let (t, dirs, acked) = asymmetric_topic();
    match reopen_outcome(&dirs[..2]) {
        Err(e) => panic!("two directories: {e}"),
        Ok(None) => {}
        Ok(Some(b)) => {
            // Partition 0 lives on directories 0 and 1 only: it may open; nothing lost.
            assert_has_all(&read_all(&b), &acked, "two directories");
            b.close().unwrap();
        }
    }
    let extra = t[0].path().join("extra");
    let mut more = dirs.clone();
    more.push(extra);
    let broker = open(&more);
    broker.topic::<(), u64>(T).unwrap();
    assert_has_all(&read_all(&broker), &acked, "four directories");
    broker.close().unwrap();
}

/// Two brokers on overlapping directories: the second is refused (`DirectoryLocked`)
/// without keeping any lock (and, once the first closed, as `ForeignDataDir`: the
/// directories' markers name two brokers). A directory listed twice is refused too.
#[test]
fn overlapping_directories_are_locked() {
    let (_t, dirs) = tempdirs(5);
    let a = open(&dirs[..3]);
    let b_dirs = vec![dirs[3].clone(), dirs[1].clone(), dirs[4].clone()];
    let err = try_open(&b_dirs).unwrap_err();
    assert!(matches!(err, Error::DirectoryLocked { .. }), "{err}");
    // A plain broker on one of the first broker's directories is refused too.
    let err = Broker::builder()
        .data_dir(&dirs[2])
        .create(true)
        .open()
        .unwrap_err();
    assert!(matches!(err, Error::DirectoryLocked { .. }), "{err}");
    // Directory 3 (the refused broker's first) is free again.
    let c = open(&dirs[3..4]);
    c.close().unwrap();
    drop(c);
    a.close().unwrap();
    drop(a);
    // Unlocked now, but directory 3 is `c`'s and directory 1 the first broker's: the
    // markers refuse the mix. The first broker's directories reopen.
    let err = try_open(&b_dirs).unwrap_err();
    assert!(matches!(err, Error::ForeignDataDir { .. }), "{err}");
    let a = open(&dirs[..3]);
    a.close().unwrap();
    drop(a);
    for twice in [
        vec![dirs[0].clone(), dirs[0].clone()],
        vec![dirs[0].clone(), dirs[1].clone(), dirs[1].clone()],
        vec![dirs[0].clone(), dirs[1].clone(), dirs[0].join(".")],
    ] {
        let r = try_open(&twice);
        assert!(
            matches!(&r, Err(Error::DirectoryLocked { .. })),
            "{twice:?}: {:?}",
            r.map(|b| b.close())
        );
    }
}

/// The same settings check for a plain persisted topic's `<topic>.topic` file: an edited
/// `max_message_bytes` of -1 overflowed the batch size (a panic) at open.
#[test]
fn a_crafted_topic_file_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::builder()
        .data_dir(dir.path())
        .create(true)
        .open()
        .unwrap();
    broker
        .create_topic::<(), u64>(T, TopicConfig::new(1).persist(PersistConfig::new()))
        .unwrap();
    broker.close().unwrap();
    drop(broker);
    let path = dir.path().join(format!("{T}.topic"));
    let text = std::fs::read_to_string(&path).unwrap();
    let edited: Vec<String> = text
        .lines()
        .map(|l| match l.split_once(' ') {
            Some(("max_message_bytes", _)) => "max_message_bytes -1".to_owned(),
            _ => l.to_owned(),
        })
        .collect();
    std::fs::write(&path, edited.join("\n") + "\n").unwrap();
    let r = catch_unwind(AssertUnwindSafe(|| {
        Broker::builder()
            .data_dir(dir.path())
            .create(true)
            .open()
            .and_then(|b| b.topic::<(), u64>(T).map(|_| b.close()))
    }));
    match r {
        Err(_) => panic!("panicked"),
        Ok(r) => assert!(
            matches!(&r, Err(Error::InvalidCheckpoint { reason, .. }) if reason.contains("max_message_bytes")),
            "{r:?}"
        ),
    }
}
