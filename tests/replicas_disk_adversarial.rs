//! Adversarial tests of replicated persisted topics (issues 14 and 15): hand-crafted,
//! truncated and corrupt `<topic>.replicas` and `leader-epoch-checkpoint` files, partition
//! directories missing or replaced by junk, data directories that are files, reopening with
//! the directories changed, two brokers on overlapping directories, directories failing
//! under load, and races between closing, deleting and producing.
//!
//! Each reopen must give a typed error or recover: never a panic, never an acknowledged
//! record silently lost.

use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::persist::{FlushPolicy, PersistConfig};
use logbus::producer::{Acks, ProducerConfig, Record};
use logbus::replica::{EventKind, PartitionReplicas};
use logbus::storage::fault::FaultyIo;
use logbus::{Broker, Error, TopicConfig, TopicPartition};

const T: &str = "orders";
const WAIT: Duration = Duration::from_secs(20);

fn config(partitions: u32) -> TopicConfig {
    TopicConfig::new(partitions)
        .replication_factor(3)
        .min_insync_replicas(2)
}

fn tempdirs(n: usize) -> (Vec<tempfile::TempDir>, Vec<PathBuf>) {
    let t: Vec<_> = (0..n).map(|_| tempfile::tempdir().unwrap()).collect();
    let paths = t.iter().map(|d| d.path().to_path_buf()).collect();
    (t, paths)
}

fn try_open(dirs: &[PathBuf]) -> logbus::Result<Broker> {
    Broker::builder().data_dirs(dirs.iter()).open()
}

fn open(dirs: &[PathBuf]) -> Broker {
    try_open(dirs).unwrap()
}

fn open_on(fs: &FaultyIo, dirs: &[PathBuf]) -> Broker {
    Broker::builder()
        .io(Arc::new(fs.clone()))
        .data_dirs(dirs.iter())
        .open()
        .unwrap()
}

fn producer_with(broker: &Broker, acks: Acks) -> logbus::Producer<(), u64> {
    let config = ProducerConfig::new()
        .acks(acks)
        .retries(10)
        .request_timeout(WAIT);
    broker.producer_with_config(config).unwrap()
}

fn producer(broker: &Broker) -> logbus::Producer<(), u64> {
    producer_with(broker, Acks::All)
}

/// Sends `values` to partition 0; the values acknowledged.
fn send(p: &logbus::Producer<(), u64>, values: std::ops::Range<u64>) -> Vec<u64> {
    values
        .filter(|&v| p.send(Record::new(T, v).partition(0)).is_ok())
        .collect()
}

fn describe(broker: &Broker) -> PartitionReplicas {
    broker.describe_topic(T).unwrap().replicas[0].clone()
}

/// Every value of partition `p` below its high watermark, read by a consumer from offset 0
/// (dense: a gap fails the read).
fn read_partition(broker: &Broker, p: u32) -> Vec<u64> {
    let end = broker.describe_topic(T).unwrap().replicas[p as usize].high_watermark;
    let config = ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest);
    let mut c = broker.consumer::<(), u64>(config).unwrap();
    let tp = TopicPartition::new(T, p);
    c.assign(std::slice::from_ref(&tp)).unwrap();
    c.seek_to_beginning(std::slice::from_ref(&tp)).unwrap();
    let mut out = Vec::new();
    while c.position(&tp).unwrap() < end {
        let batch = c.poll(WAIT).unwrap();
        assert!(!batch.is_empty(), "nothing read at {}", out.len());
        for r in batch.iter() {
            assert_eq!(r.offset, out.len() as u64, "offsets are dense");
            out.push(r.value);
        }
    }
    out
}

fn read_all(broker: &Broker) -> Vec<u64> {
    read_partition(broker, 0)
}

fn assert_has_all(got: &[u64], acked: &[u64], what: &str) {
    let set: HashSet<u64> = got.iter().copied().collect();
    let missing: Vec<_> = acked.iter().filter(|v| !set.contains(v)).collect();
    assert!(
        missing.is_empty(),
        "{what}: acknowledged but lost: {missing:?}"
    );
}

/// Every replica of partition `p` holds the same records (epochs, values) at every offset
/// below the high watermark that both hold in memory (`replica_logs` shows each replica's
/// tail in memory, which may start at different offsets).
fn assert_replicas_agree(broker: &Broker, p: u32, what: &str) {
    let topic = broker.topic::<(), u64>(T).unwrap();
    let hw = broker.describe_topic(T).unwrap().replicas[p as usize].high_watermark;
    let logs = topic.replica_logs(p).unwrap();
    let maps: Vec<std::collections::HashMap<u64, (i32, u64)>> = logs
        .iter()
        .map(|l| {
            l.records
                .iter()
                .filter(|r| r.0 < hw)
                .map(|r| (r.0, (r.1, r.3)))
                .collect()
        })
        .collect();
    for (l, m) in logs.iter().zip(&maps).skip(1) {
        for (o, rec) in m {
            if let Some(first) = maps[0].get(o) {
                assert_eq!(
                    rec, first,
                    "{what}: replica {} disagrees with replica {} at offset {o}",
                    l.replica, logs[0].replica
                );
            }
        }
    }
}

fn meta_file(dir: &Path) -> PathBuf {
    dir.join(format!("{T}.replicas"))
}

fn part_dir(dir: &Path, p: u32) -> PathBuf {
    dir.join(format!("{T}-{p}"))
}

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
        .create_persisted_topic::<(), u64>(T, config(1).records_in_memory(8), persist)
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
        match broker.open_topic::<(), u64>(T) {
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
        broker.open_topic::<(), u64>(T).unwrap();
        assert!(
            broker.faults().wait_in_sync(T, 0, WAIT).unwrap(),
            "{what}: {:?}",
            describe(&broker)
        );
        let lost: Vec<_> = broker
            .faults()
            .events()
            .into_iter()
            .filter(|e| matches!(e.kind, EventKind::RecordsLost { .. }))
            .collect();
        assert!(lost.is_empty(), "{what}: {lost:?}");
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
        .create_persisted_topic::<(), u64>(T, config, PersistConfig::new())
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
    let err = broker.open_topic::<(), u64>(T).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidConfig { name: "data_dirs", valid, .. }
            if valid.contains("was directory 1")),
        "{err}"
    );
    broker.close().unwrap();
    drop(broker);
    let broker = open(&dirs);
    broker.open_topic::<(), u64>(T).unwrap();
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
    broker.open_topic::<(), u64>(T).unwrap();
    assert_has_all(&read_all(&broker), &acked, "four directories");
    broker.close().unwrap();
}

/// Two brokers on overlapping directories: the second is refused (`DirectoryLocked`)
/// without keeping any lock, and opens once the first closed. A directory listed twice is
/// refused too.
#[test]
fn overlapping_directories_are_locked() {
    let (_t, dirs) = tempdirs(5);
    let a = open(&dirs[..3]);
    let b_dirs = vec![dirs[3].clone(), dirs[1].clone(), dirs[4].clone()];
    let err = try_open(&b_dirs).unwrap_err();
    assert!(matches!(err, Error::DirectoryLocked { .. }), "{err}");
    // A plain broker on one of the first broker's directories is refused too.
    let err = Broker::open(&dirs[2]).unwrap_err();
    assert!(matches!(err, Error::DirectoryLocked { .. }), "{err}");
    // Directory 3 (the refused broker's first) is free again.
    let c = open(&dirs[3..4]);
    c.close().unwrap();
    drop(c);
    a.close().unwrap();
    drop(a);
    let b = open(&b_dirs);
    b.close().unwrap();
    drop(b);
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
    let broker = Broker::open(dir.path()).unwrap();
    broker
        .create_persisted_topic::<(), u64>(T, TopicConfig::new(1), PersistConfig::new())
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
        Broker::open(dir.path()).and_then(|b| b.open_topic::<(), u64>(T).map(|_| b.close()))
    }));
    match r {
        Err(_) => panic!("panicked"),
        Ok(r) => assert!(
            matches!(&r, Err(Error::InvalidCheckpoint { reason, .. }) if reason.contains("max_message_bytes")),
            "{r:?}"
        ),
    }
}

/// What producers and consumers saw: `(partition, offset, value)`.
#[derive(Default)]
struct History {
    acked: Vec<(u32, u64, u64)>,
    read: Vec<(u32, u64, u64)>,
}

const PARTITIONS: u32 = 2;

/// Two producers (`acks = all`) and a consumer run against a topic on `broker` until
/// `stop`; each producer stops at its first error (the broker closing under it).
fn load(
    broker: &Broker,
    stop: &Arc<AtomicBool>,
    h: &Arc<Mutex<History>>,
) -> Vec<thread::JoinHandle<()>> {
    let mut threads: Vec<_> = (0..2u64)
        .map(|id| {
            let (broker, stop, h) = (broker.clone(), stop.clone(), h.clone());
            thread::spawn(move || {
                let config = ProducerConfig::new()
                    .acks(Acks::All)
                    .retries(3)
                    .request_timeout(Duration::from_secs(2))
                    .delivery_timeout(Duration::from_secs(5));
                let Ok(p) = broker.producer_with_config::<(), u64>(config) else {
                    return;
                };
                let mut seq = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let partition = (seq % u64::from(PARTITIONS)) as u32;
                    let v = (id << 32) | seq;
                    match p.send(Record::new(T, v).partition(partition)) {
                        Ok(m) => h.lock().unwrap().acked.push((partition, m.offset, v)),
                        Err(e) if matches!(e.error(), Error::Closed { .. }) => return,
                        Err(_) => {}
                    }
                    seq += 1;
                }
            })
        })
        .collect();
    let (broker, stop, h) = (broker.clone(), stop.clone(), h.clone());
    threads.push(thread::spawn(move || {
        let config = ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest);
        let Ok(mut c) = broker.consumer::<(), u64>(config) else {
            return;
        };
        let tps: Vec<_> = (0..PARTITIONS).map(|p| TopicPartition::new(T, p)).collect();
        if c.assign(&tps).is_err() {
            return;
        }
        while !stop.load(Ordering::Relaxed) {
            match c.poll(Duration::from_millis(5)) {
                Ok(batch) => h
                    .lock()
                    .unwrap()
                    .read
                    .extend(batch.iter().map(|r| (r.partition, r.offset, r.value))),
                Err(_) => return,
            }
        }
    }));
    threads
}

fn wait_acked(h: &Arc<Mutex<History>>, n: usize) {
    for _ in 0..20_000 {
        if h.lock().unwrap().acked.len() >= n {
            return;
        }
        thread::sleep(Duration::from_millis(1));
    }
    panic!("fewer than {n} records acknowledged");
}

/// After a reopen: every acknowledged record at the offset it was acknowledged with, every
/// record a consumer read at its offset, offsets dense, replicas agreeing below HW.
fn check_history(broker: &Broker, h: &History, what: &str) {
    broker.open_topic::<(), u64>(T).unwrap();
    for p in 0..PARTITIONS {
        assert!(
            broker.faults().wait_in_sync(T, p, WAIT).unwrap(),
            "{what}: partition {p} not in sync: {:?}",
            broker.describe_topic(T).unwrap().replicas[p as usize]
        );
        let log = read_partition(broker, p);
        for &(part, offset, v) in h.acked.iter().chain(&h.read) {
            if part == p {
                assert_eq!(
                    log.get(offset as usize),
                    Some(&v),
                    "{what}: partition {p} offset {offset}"
                );
            }
        }
        assert_replicas_agree(broker, p, what);
    }
    let lost: Vec<_> = broker
        .faults()
        .events()
        .into_iter()
        .filter(|e| matches!(e.kind, EventKind::RecordsLost { .. }))
        .collect();
    assert!(lost.is_empty(), "{what}: {lost:?}");
}

/// A directory fails mid-stream under producers (`acks = all`) and a consumer; the broker
/// closes while they still run (directory still failed), and reopens: every acknowledged
/// record is there at its offset, replicas agree, offsets are dense.
#[test]
fn a_directory_failing_mid_stream_then_close_while_producing_loses_nothing() {
    for failed in [0u32, 2] {
        let (_t, dirs) = tempdirs(3);
        let broker = open(&dirs);
        broker
            .create_persisted_topic::<(), u64>(
                T,
                config(PARTITIONS).records_in_memory(64),
                PersistConfig::new().segment_bytes(4096),
            )
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let h = Arc::new(Mutex::new(History::default()));
        let threads = load(&broker, &stop, &h);
        wait_acked(&h, 300);
        broker.faults().fail_data_dir(failed).unwrap();
        let n = h.lock().unwrap().acked.len();
        wait_acked(&h, n + 300);
        broker.close().unwrap();
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
        drop(broker);
        let broker = open(&dirs);
        check_history(&broker, &h.lock().unwrap(), &format!("dir {failed} failed"));
        broker.close().unwrap();
    }
}

/// The same with the process dying mid-stream (no close: nothing flushed beyond what the
/// operating system had), on a simulated file system that keeps the page cache.
#[test]
fn a_directory_failing_mid_stream_then_process_death_loses_nothing() {
    for seed in 0..3u64 {
        let fs = FaultyIo::new(seed);
        let dirs: Vec<PathBuf> = ["/d0", "/d1", "/d2"].iter().map(PathBuf::from).collect();
        let broker = open_on(&fs, &dirs);
        broker
            .create_persisted_topic::<(), u64>(
                T,
                config(PARTITIONS).records_in_memory(1 << 12),
                PersistConfig::new()
                    .segment_bytes(4096)
                    .flush(FlushPolicy::Os),
            )
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let h = Arc::new(Mutex::new(History::default()));
        let threads = load(&broker, &stop, &h);
        wait_acked(&h, 200);
        broker.faults().fail_data_dir(seed as u32 % 3).unwrap();
        let n = h.lock().unwrap().acked.len();
        wait_acked(&h, n + 200);
        broker.simulate_process_death();
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
        drop(broker);
        fs.kill();
        let broker = open_on(&fs, &dirs);
        check_history(&broker, &h.lock().unwrap(), &format!("seed {seed}"));
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
        let dirs: Vec<PathBuf> = ["/d0", "/d1", "/d2"].iter().map(PathBuf::from).collect();
        let broker = open_on(&fs, &dirs);
        broker
            .create_persisted_topic::<(), u64>(T, config(2), PersistConfig::new())
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
            .create_persisted_topic::<(), u64>(T, config(2), PersistConfig::new())
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
        .create_persisted_topic::<(), u64>(T, config(1), PersistConfig::new())
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
        let dirs: Vec<PathBuf> = ["/d0", "/d1", "/d2"].iter().map(PathBuf::from).collect();
        let broker = open_on(&fs, &dirs);
        broker
            .create_persisted_topic::<(), u64>(
                T,
                config(1).records_in_memory(16),
                PersistConfig::new().flush(FlushPolicy::EveryBatch),
            )
            .unwrap();
        let faults = broker.faults();
        let mut acked = send(&producer(&broker), 0..50);
        faults.stall_replica(T, 0, 1).unwrap();
        faults.stall_replica(T, 0, 2).unwrap();
        // Offsets 50..80 on the leader only (acks = 1), never copied.
        let leader_only = send(&producer_with(&broker, Acks::Leader), 1000..1030);
        assert_eq!(leader_only.len(), 30);
        faults.resume_replica(T, 0, 1).unwrap();
        faults.resume_replica(T, 0, 2).unwrap();
        faults.crash_replica(T, 0, 0).unwrap();
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
        broker.open_topic::<(), u64>(T).unwrap();
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
        .create_persisted_topic::<(), u64>(T, config(1), PersistConfig::new())
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
    broker.open_topic::<(), u64>(T).unwrap();
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
        let dirs: Vec<PathBuf> = ["/d0", "/d1", "/d2"].iter().map(PathBuf::from).collect();
        let broker = open_on(&fs, &dirs);
        broker
            .create_persisted_topic::<(), u64>(
                T,
                config(PARTITIONS).records_in_memory(1 << 12),
                PersistConfig::new()
                    .segment_bytes(4096)
                    .flush(FlushPolicy::EveryBatch),
            )
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let h = Arc::new(Mutex::new(History::default()));
        let threads = load(&broker, &stop, &h);
        wait_acked(&h, 50 + 37 * seed as usize);
        if seed % 2 == 1 {
            broker
                .faults()
                .fail_data_dir((seed / 2) as u32 % 3)
                .unwrap();
            let n = h.lock().unwrap().acked.len();
            wait_acked(&h, n + 40);
        }
        // Acknowledgements after this point may have raced the crash: only those before
        // it must survive (those after are checked too: an ack means fsynced first).
        fs.crash();
        broker.simulate_process_death();
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
        drop(broker);
        let broker = open_on(&fs, &dirs);
        check_history(&broker, &h.lock().unwrap(), &format!("seed {seed}"));
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
    broker
        .create_persisted_topic::<(), u64>(
            T,
            config(1).records_in_memory(16),
            PersistConfig::new().segment_bytes(4096),
        )
        .unwrap();
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
    broker.open_topic::<(), u64>(T).unwrap();
    check(&broker, "reopened");
    broker.close().unwrap();
}

/// `Topic::sync` and `Broker::sync` on a replicated persisted topic (flush policy `Os`):
/// what was sent before the call survives a power loss. Both returned `Ok` without an
/// fsync (the topic's partitions have no plain disk log), and the power loss lost records.
#[test]
fn sync_makes_a_replicated_topic_durable() {
    for seed in 0..8u64 {
        for broker_wide in [false, true] {
            let fs = FaultyIo::new(seed);
            let dirs: Vec<PathBuf> = ["/d0", "/d1", "/d2"].iter().map(PathBuf::from).collect();
            let broker = open_on(&fs, &dirs);
            let topic = broker
                .create_persisted_topic::<(), u64>(
                    T,
                    config(1),
                    PersistConfig::new().flush(FlushPolicy::Os),
                )
                .unwrap();
            assert_eq!(send(&producer(&broker), 0..100).len(), 100);
            if broker_wide {
                broker.sync().unwrap();
            } else {
                topic.sync().unwrap();
            }
            broker.simulate_process_death();
            drop((topic, broker));
            fs.crash();
            let broker = open_on(&fs, &dirs);
            broker.open_topic::<(), u64>(T).unwrap();
            let _ = broker.faults().wait_in_sync(T, 0, WAIT);
            let what = format!("seed {seed}, broker-wide {broker_wide}");
            assert_has_all(&read_all(&broker), &(0..100).collect::<Vec<_>>(), &what);
            broker.close().unwrap();
        }
    }
}
