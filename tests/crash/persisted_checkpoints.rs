//! The data directory's checkpoint files (and the other files replaced through a temp file)
//! under concurrent writers, a racing `close` and SIGKILL: every writer is serialised, every
//! replace is atomic and durable, so a reader never sees a torn file, a crash never leaves a
//! directory `Broker::open` refuses, and the last completed sync's offsets survive.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use logbus::broker::{Broker, TopicConfig};
use logbus::consumer::ConsumerConfig;
use logbus::persist::{FlushPolicy, PersistConfig};
use logbus::producer::Record;
use logbus::storage::checkpoint::{self, CheckpointEntry};
use logbus::Error;

const OFFSETS: &str = "consumer-offsets-checkpoint";
const RECORDS: u64 = 20_000;

use crate::persisted_common;
use persisted_common::{one_at_a_time, tp};

fn env_count(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A `group topic partition offset` line of the offsets checkpoint.
#[derive(Debug)]
struct Line(String, u64);

impl CheckpointEntry for Line {
    fn to_line(&self) -> Result<String, String> {
        Err("read only".into())
    }

    fn parse_line(line: &str) -> Result<Self, String> {
        let f: Vec<&str> = line.split(' ').collect();
        match f[..] {
            [g, _, _, o] => Ok(Line(g.into(), o.parse().map_err(|_| line.to_string())?)),
            _ => Err(format!("not `group topic partition offset`: {line:?}")),
        }
    }
}

/// Group `g`'s offset in the checkpoint text, or why the text is not a whole checkpoint.
fn parse_offsets(path: &Path, text: &str) -> Result<Option<u64>, String> {
    let lines = checkpoint::parse::<Line>(path, text).map_err(|e| e.to_string())?;
    Ok(lines.iter().find(|l| l.0 == "g").map(|l| l.1))
}

/// A formatted directory holding topic `t` (one partition, `RECORDS` records).
fn setup(dir: &Path) {
    let broker = Broker::builder().data_dir(dir).create(true).open().unwrap();
    broker
        .create_topic::<(), String>(
            "t",
            TopicConfig::new(1).persist(PersistConfig::new().flush(FlushPolicy::Os)),
        )
        .unwrap();
    let p = broker.producer::<(), String>();
    for i in 0..RECORDS {
        p.send(Record::new("t", format!("v{i}"))).unwrap();
    }
    broker.close().unwrap();
}

fn open(dir: &Path, checkpoint_every: Duration) -> Broker {
    let broker = Broker::builder()
        .data_dir(dir)
        .offsets_checkpoint_interval(checkpoint_every)
        .open()
        .unwrap();
    broker.topic::<(), String>("t").unwrap();
    broker
}

fn committed(broker: &Broker) -> Option<u64> {
    let c = broker
        .consumer::<(), String>(ConsumerConfig::new().group_id("g"))
        .unwrap();
    c.committed(&tp()).unwrap()
}

/// Two threads calling `Broker::fsync_and_checkpoint` and the background checkpoint thread (every
/// millisecond) rewrite the offsets checkpoint for 2 s while the group commits: no sync
/// fails, and a reader of the file never sees it empty, partial, or going backwards.
#[test]
fn concurrent_syncs_never_tear_the_offsets_checkpoint() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let broker = open(dir.path(), Duration::from_millis(1));
    let mut c = broker
        .consumer::<(), String>(ConsumerConfig::new().group_id("g"))
        .unwrap();
    c.assign(&[tp()]).unwrap();
    c.commit_offsets(&[(tp(), 1)]).unwrap();
    broker.fsync_and_checkpoint().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let syncs = Arc::new(AtomicU64::new(0));
    let syncers: Vec<_> = (0..2)
        .map(|_| {
            let (broker, stop, syncs) = (broker.clone(), Arc::clone(&stop), Arc::clone(&syncs));
            std::thread::spawn(move || {
                let mut errors = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    match broker.fsync_and_checkpoint() {
                        Ok(()) => syncs.fetch_add(1, Ordering::Relaxed),
                        Err(e) => {
                            errors.push(e.to_string());
                            0
                        }
                    };
                }
                errors
            })
        })
        .collect();
    let reader = {
        let (path, stop) = (dir.path().join(OFFSETS), Arc::clone(&stop));
        std::thread::spawn(move || {
            let (mut reads, mut last) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let text = std::fs::read_to_string(&path).unwrap();
                let offset = parse_offsets(&path, &text)
                    .unwrap_or_else(|e| panic!("read {reads}: a torn checkpoint {text:?}: {e}"));
                let offset = offset.unwrap_or_else(|| panic!("read {reads}: group g lost"));
                assert!(offset >= last, "read {reads}: offset {offset} after {last}");
                last = offset;
                reads += 1;
            }
            reads
        })
    };
    let started = Instant::now();
    let mut next = 2;
    while started.elapsed() < Duration::from_secs(2) {
        if next <= RECORDS {
            c.commit_offsets(&[(tp(), next)]).unwrap();
            next += 1;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    stop.store(true, Ordering::Relaxed);
    let errors: Vec<String> = syncers
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let reads = reader.join().unwrap();
    assert!(
        errors.is_empty(),
        "{} syncs failed: {:?}",
        errors.len(),
        &errors[..1]
    );
    eprintln!(
        "{} syncs, {reads} reads, committed up to {}",
        syncs.load(Ordering::Relaxed),
        next - 1
    );
    drop(c);
    broker.close().unwrap();
    let broker = open(dir.path(), Duration::from_secs(60));
    assert_eq!(committed(&broker), Some(next - 1));
    broker.close().unwrap();
}

/// `close` racing three threads that call `sync` (100 rounds by default, about 4 s in a
/// debug build; `LOGBUS_CLOSE_RACE_ROUNDS=500` for a longer run): `close` always succeeds, the directory always reopens, and
/// the offset the group committed before the close is there.
#[test]
fn close_racing_syncs_loses_no_committed_offset() {
    let _serial = one_at_a_time();
    let rounds = env_count("LOGBUS_CLOSE_RACE_ROUNDS", 100);
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let mut broker = open(dir.path(), Duration::from_secs(60));
    for round in 1..=rounds {
        let want = round % RECORDS + 1;
        {
            let mut c = broker
                .consumer::<(), String>(ConsumerConfig::new().group_id("g"))
                .unwrap();
            c.assign(&[tp()]).unwrap();
            c.commit_offsets(&[(tp(), want)]).unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let syncers: Vec<_> = (0..3)
            .map(|_| {
                let (broker, stop) = (broker.clone(), Arc::clone(&stop));
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        match broker.fsync_and_checkpoint() {
                            Ok(()) => {}
                            // What a sync racing the close may say; anything else fails.
                            Err(Error::Closed { .. } | Error::PartitionOffline { .. }) => break,
                            Err(e) => return Err(e.to_string()),
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        std::thread::yield_now();
        let closed = broker.close();
        stop.store(true, Ordering::Relaxed);
        for t in syncers {
            t.join()
                .unwrap()
                .unwrap_or_else(|e| panic!("round {round}: a sync failed: {e}"));
        }
        closed.unwrap_or_else(|e| panic!("round {round}: close failed: {e}"));
        drop(broker);
        broker = Broker::builder()
            .data_dir(dir.path())
            .offsets_checkpoint_interval(Duration::from_secs(60))
            .open()
            .unwrap_or_else(|e| panic!("round {round}: reopening failed: {e}"));
        broker.topic::<(), String>("t").unwrap();
        assert_eq!(committed(&broker), Some(want), "round {round}");
    }
    broker.close().unwrap();
}

const CHILD_ENV: &str = "LOGBUS_CHECKPOINT_CRASH_DIR";

/// The child of `sigkill_during_syncs_never_leaves_an_unopenable_directory`: commits
/// increasing offsets and syncs after each (printing `synced N` once the sync returned),
/// while another thread syncs and the background thread checkpoints every millisecond.
#[test]
#[ignore = "run by sigkill_during_syncs_never_leaves_an_unopenable_directory as its child"]
fn checkpoint_crash_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    use std::io::Write;
    let broker = open(Path::new(&dir), Duration::from_millis(1));
    let start = committed(&broker).unwrap_or(0);
    let other = {
        let broker = broker.clone();
        std::thread::spawn(move || loop {
            let _ = broker.fsync_and_checkpoint();
        })
    };
    let mut c = broker
        .consumer::<(), String>(ConsumerConfig::new().group_id("g"))
        .unwrap();
    c.assign(&[tp()]).unwrap();
    let mut out = std::io::stdout().lock();
    for o in start + 1..=RECORDS {
        c.commit_offsets(&[(tp(), o)]).unwrap();
        broker.fsync_and_checkpoint().unwrap();
        writeln!(out, "synced {o}").unwrap();
        out.flush().unwrap();
    }
    drop(other);
}

/// SIGKILL of a process while three writers rewrite the offsets checkpoint (40 rounds by
/// default, about 5 s in a debug build; `LOGBUS_CHECKPOINT_KILL_ROUNDS=300` for a longer
/// run): every reopen succeeds, with at least the offset of the last sync that returned.
#[test]
fn sigkill_during_syncs_never_leaves_an_unopenable_directory() {
    let _serial = one_at_a_time();
    let rounds = env_count("LOGBUS_CHECKPOINT_KILL_ROUNDS", 40);
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let mut rng = fastrand::Rng::with_seed(34);
    let mut synced: Option<u64> = None;
    for round in 0..rounds {
        let stdout = crate::kill_child_after(
            module_path!(),
            "checkpoint_crash_child",
            CHILD_ENV,
            dir.path(),
            Duration::from_millis(rng.u64(5..60)),
        );
        if let Some(o) = crate::numbers_after(&stdout, "synced ").max() {
            synced = Some(synced.map_or(o, |s| s.max(o)));
        }
        let broker = Broker::builder()
            .data_dir(dir.path())
            .open()
            .unwrap_or_else(|e| panic!("round {round}: the directory does not reopen: {e}"));
        broker.topic::<(), String>("t").unwrap();
        let got = committed(&broker);
        if let Some(s) = synced {
            assert!(
                got.is_some_and(|g| g >= s),
                "round {round}: committed {got:?}, but {s} was synced"
            );
        }
        broker.close().unwrap();
    }
    eprintln!("{rounds} rounds, last synced offset {synced:?}");
}

/// Two threads create the same replicated persisted topic at once, with different
/// partition counts (10 rounds): one succeeds, the other is refused with `TopicExists`, and
/// the metadata on disk is the winner's (the creations shared the metadata's temp file, so
/// the loser's copy could replace the winner's, or its rename fail).
#[test]
fn concurrent_creations_of_a_replicated_topic_leave_the_winners_metadata() {
    let _serial = one_at_a_time();
    for round in 0..10 {
        let tmp = tempfile::tempdir().unwrap();
        let dirs: Vec<_> = (0..2).map(|i| tmp.path().join(format!("d{i}"))).collect();
        let broker = Broker::builder()
            .data_dirs(&dirs)
            .create(true)
            .open()
            .unwrap();
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let creators: Vec<_> = (1..=2u32)
            .map(|n| {
                let (broker, barrier) = (broker.clone(), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    broker
                        .create_topic::<(), String>(
                            "x",
                            TopicConfig::new(n)
                                .replication_factor(2)
                                .persist(PersistConfig::new()),
                        )
                        .map(|_| n)
                })
            })
            .collect();
        let results: Vec<_> = creators.into_iter().map(|t| t.join().unwrap()).collect();
        let won: Vec<u32> = results
            .iter()
            .filter_map(|r| r.as_ref().ok().copied())
            .collect();
        assert_eq!(won.len(), 1, "round {round}: {results:?}");
        for r in &results {
            if let Err(e) = r {
                assert!(matches!(e, Error::TopicExists { .. }), "round {round}: {e}");
            }
        }
        broker.close().unwrap();
        drop(broker);
        let broker = Broker::builder().data_dirs(&dirs).open().unwrap();
        broker.topic::<(), String>("x").unwrap();
        let partitions = broker.describe_topic("x").unwrap().partitions.len();
        assert_eq!(partitions as u32, won[0], "round {round}");
        broker.close().unwrap();
    }
}

/// `delete_topic` racing `create_topic` with a persisted config of the same name (10 rounds): the new
/// topic, when its creation succeeds, keeps its metadata and its partition directories (the
/// delete, past its first step, used to remove them from under it), and the directory
/// always reopens.
#[test]
fn a_delete_racing_a_creation_of_the_same_name_leaves_the_new_topic_whole() {
    let _serial = one_at_a_time();
    for round in 0..10 {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let broker = Broker::builder()
            .data_dir(&dir)
            .create(true)
            .open()
            .unwrap();
        broker
            .create_topic::<(), String>("t", TopicConfig::new(4).persist(PersistConfig::new()))
            .unwrap();
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let deleter = {
            let (broker, barrier) = (broker.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                broker.delete_topic("t")
            })
        };
        barrier.wait();
        // Until the delete is over, then once more (which must succeed).
        let mut last = false;
        loop {
            last = last || deleter.is_finished();
            match broker
                .create_topic::<(), String>("t", TopicConfig::new(2).persist(PersistConfig::new()))
            {
                Ok(_) => break,
                Err(Error::TopicExists { .. }) if !last => std::thread::yield_now(),
                Err(e) => panic!("round {round}: {e}"),
            }
        }
        deleter.join().unwrap().unwrap();
        broker.close().unwrap();
        drop(broker);
        let broker = Broker::open(&dir)
            .unwrap_or_else(|e| panic!("round {round}: the directory does not reopen: {e}"));
        broker.topic::<(), String>("t").unwrap();
        assert_eq!(broker.describe_topic("t").unwrap().partitions.len(), 2);
        broker.close().unwrap();
    }
}

/// The same race for a replicated topic (10 rounds): its `.replicas` metadata and its
/// replicas' directories in every data directory.
#[test]
fn a_delete_racing_a_creation_of_a_replicated_topic_leaves_the_new_topic_whole() {
    let _serial = one_at_a_time();
    let replicated = |n: u32| TopicConfig::new(n).replication_factor(2);
    for round in 0..10 {
        let tmp = tempfile::tempdir().unwrap();
        let dirs: Vec<_> = (0..2).map(|i| tmp.path().join(format!("d{i}"))).collect();
        let broker = Broker::builder()
            .data_dirs(&dirs)
            .create(true)
            .open()
            .unwrap();
        broker
            .create_topic::<(), String>("t", replicated(4).persist(PersistConfig::new()))
            .unwrap();
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let deleter = {
            let (broker, barrier) = (broker.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                broker.delete_topic("t")
            })
        };
        barrier.wait();
        // Until the delete is over, then once more (which must succeed).
        let mut last = false;
        loop {
            last = last || deleter.is_finished();
            match broker
                .create_topic::<(), String>("t", replicated(2).persist(PersistConfig::new()))
            {
                Ok(_) => break,
                Err(Error::TopicExists { .. }) if !last => std::thread::yield_now(),
                Err(e) => panic!("round {round}: {e}"),
            }
        }
        deleter.join().unwrap().unwrap();
        broker.close().unwrap();
        drop(broker);
        let broker = Broker::builder()
            .data_dirs(&dirs)
            .open()
            .unwrap_or_else(|e| panic!("round {round}: the directories do not reopen: {e}"));
        broker.topic::<(), String>("t").unwrap();
        let d = broker.describe_topic("t").unwrap();
        assert_eq!(d.partitions.len(), 2, "round {round}");
        for r in &d.replicas {
            assert_eq!(r.isr.len(), 2, "round {round}: {d:?}");
        }
        broker.close().unwrap();
    }
}

/// A topic deleted and created again under its name starts from offset 0: the log start and
/// recovery point its predecessor left in the checkpoint files are not applied to it. After
/// a crash right after the new topic's records were synced (before the periodic checkpoint
/// rewrote those files), every one of them is still there on reopen.
#[test]
fn a_topic_created_again_after_a_delete_keeps_its_records_across_a_crash() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let config = || {
        PersistConfig::new()
            .segment_bytes(4 << 10)
            .retention_bytes(8 << 10)
            .flush(FlushPolicy::Os)
    };
    // First life: retention moves the log start up, and the checkpoint files record it.
    let broker = Broker::builder()
        .data_dir(&dir)
        .create(true)
        .retention_check_interval(Duration::from_millis(5))
        .open()
        .unwrap();
    broker
        .create_topic::<(), String>("t", TopicConfig::new(1).persist(config()))
        .unwrap();
    let p = broker.producer::<(), String>();
    for i in 0..2_000 {
        p.send(Record::new("t", format!("old{i}-{}", "x".repeat(60))))
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while broker.describe_topic("t").unwrap().partitions[0].log_start < 100 {
        assert!(Instant::now() < deadline, "retention never ran");
        std::thread::sleep(Duration::from_millis(5));
    }
    broker.close().unwrap();
    drop(broker);

    // Second life: the topic deleted and made again; 10 records synced; then a crash
    // before any periodic checkpoint.
    let broker = Broker::builder()
        .data_dir(&dir)
        .retention_check_interval(Duration::from_secs(3600))
        .open()
        .unwrap();
    broker.delete_topic("t").unwrap();
    broker
        .create_topic::<(), String>("t", TopicConfig::new(1).persist(config()))
        .unwrap();
    let p = broker.producer::<(), String>();
    for i in 0..10 {
        let m = p.send(Record::new("t", format!("new{i}"))).unwrap();
        assert_eq!(m.offset, i);
    }
    broker.fsync_and_checkpoint().unwrap();
    broker.simulate_process_death();
    drop(broker);
    // The dead process's lock is still held by this one: reopen a copy.
    let copy = tmp.path().join("copy");
    copy_dir(&dir, &copy);

    let broker = Broker::open(&copy).unwrap();
    broker.topic::<(), String>("t").unwrap();
    let part = broker.describe_topic("t").unwrap().partitions[0];
    assert_eq!(
        (part.log_start, part.log_end),
        (0, 10),
        "{:?}",
        broker.recovery_reports()
    );
    let mut c = broker
        .consumer::<(), String>(
            ConsumerConfig::new().auto_offset_reset(logbus::consumer::OffsetReset::Earliest),
        )
        .unwrap();
    c.assign(&[tp()]).unwrap();
    let mut got = Vec::new();
    while c
        .poll_with(100, Duration::ZERO, |r| got.push(r.to_record()))
        .unwrap()
        > 0
    {}
    let values: Vec<String> = got.into_iter().map(|r| r.value).collect();
    let want: Vec<String> = (0..10).map(|i| format!("new{i}")).collect();
    assert_eq!(values, want);
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
