//! Log compaction of replicated persisted topics: every replica's log is cleaned on its own,
//! never at or past its high watermark; followers fetch across the gaps the leader's
//! cleaning leaves; elections, a stalled follower catching up, a restarted replica
//! truncating by epoch and a reopen from disk all keep every replica's key → latest value
//! view equal to the model's, with every record at its original offset.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use logbus::broker::CleanupPolicy;
use logbus::consumer::ConsumerConfig;
use logbus::consumer::IsolationLevel::{ReadCommitted, ReadUncommitted};
use logbus::persist::PersistConfig;
use logbus::producer::{Acks, ProducerConfig, Record};
use logbus::storage::BatchIter;
use logbus::{Broker, Clock, ManualClock, TopicConfig, TopicPartition};
use tempfile::TempDir;

use crate::replay_common::replay;

const T: &str = "kv";
const WAIT: Duration = Duration::from_secs(20);
const T0: i64 = 1_700_000_000_000;

type Value = Option<String>;
/// offset → (key, value): every record the test wrote, where it was written.
type History = BTreeMap<u64, (String, Value)>;

fn open(dirs: &[PathBuf], clock: &Arc<ManualClock>) -> Broker {
    Broker::builder()
        .data_dirs(dirs.iter())
        .create(true)
        .clock(clock.clone() as Arc<dyn Clock>)
        .open()
        .unwrap()
}

/// A broker whose two cleaner threads look for dirty logs every millisecond: they race the
/// fetches, elections, truncations and `compact_now`.
fn open_eager(dirs: &[PathBuf], clock: &Arc<ManualClock>) -> Broker {
    Broker::builder()
        .data_dirs(dirs.iter())
        .create(true)
        .clock(clock.clone() as Arc<dyn Clock>)
        .log_cleaner_threads(2)
        .log_cleaner_backoff(Duration::from_millis(1))
        .open()
        .unwrap()
}

/// The topic: followers leave the ISR after `lag` behind.
fn config(lag: Duration) -> logbus::persist::PersistedTopicConfig {
    TopicConfig::new(1)
        .replication_factor(3)
        .min_insync_replicas(2)
        .replica_lag_time_max(lag)
        .records_in_memory(4)
        .cleanup_policy(CleanupPolicy::Compact)
        .delete_retention(Duration::from_secs(10))
        .min_compaction_lag(Duration::from_secs(20))
        .persist(PersistConfig::new().segment_bytes(4096))
}

/// Three new data directories (removed when the first element drops) and their paths, a
/// manual clock at `T0`, and a broker opened on them by `open` (`open` or `open_eager`)
/// with topic `T` created by `config(lag)`.
fn cluster(
    open: fn(&[PathBuf], &Arc<ManualClock>) -> Broker,
    lag: Duration,
) -> (Vec<TempDir>, Vec<PathBuf>, Arc<ManualClock>, Broker) {
    let clock = Arc::new(ManualClock::new(T0));
    let tmp: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let dirs: Vec<PathBuf> = tmp.iter().map(|d| d.path().to_path_buf()).collect();
    let broker = open(&dirs, &clock);
    broker
        .create_topic::<String, Value>(T, config(lag))
        .unwrap();
    (tmp, dirs, clock, broker)
}

/// Writes and remembers what it wrote.
struct Writer {
    producer: logbus::Producer<String, Value>,
    model: BTreeMap<String, Value>,
    history: History,
}

impl Writer {
    fn new(broker: &Broker, acks: Acks) -> Self {
        let config = ProducerConfig::new().acks(acks).request_timeout(WAIT);
        Writer {
            producer: broker.producer_with_config(config).unwrap(),
            model: BTreeMap::new(),
            history: History::new(),
        }
    }

    fn reconnect(&mut self, broker: &Broker, acks: Acks) {
        let config = ProducerConfig::new().acks(acks).request_timeout(WAIT);
        self.producer = broker.producer_with_config(config).unwrap();
    }

    fn send(&mut self, key: String, value: Value) {
        let meta = self
            .producer
            .send(Record::new(T, value.clone()).key(key.clone()).partition(0))
            .unwrap();
        self.history
            .insert(meta.offset, (key.clone(), value.clone()));
        self.model.insert(key, value);
    }

    /// `rounds` overwrites of 12 keys, then tombstones for three of them, then filler
    /// records of other keys that roll the rest out of the active segment.
    fn overwrites(&mut self, tag: &str, rounds: usize) {
        for round in 0..rounds {
            for k in 0..12 {
                self.send(format!("k{k}"), Some(format!("{tag}-{round}-{k}")));
            }
        }
        for k in [2, 5, 7] {
            self.send(format!("k{k}"), None);
        }
        self.send("k5".into(), Some(format!("{tag}-back")));
        for i in 0..100 {
            self.send(format!("fill-{}", i % 4), Some(format!("{tag}{i:040}")));
        }
    }

    /// The keys with a value (a tombstone may be kept or, once old enough, dropped).
    fn live(&self) -> BTreeMap<String, String> {
        live(self.model.iter().map(|(k, v)| (k.clone(), v.clone())))
    }
}

fn live(records: impl Iterator<Item = (String, Value)>) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for (k, v) in records {
        match v {
            Some(v) => map.insert(k, v),
            None => map.remove(&k),
        };
    }
    map
}

/// Every record of `dir`'s partition `T`-0 on disk, `(offset, key, value)`, from its
/// `.log` files in offset order (a torn tail ends a file's records).
fn disk_records(data_dir: &Path) -> Vec<(u64, String, Value)> {
    let part = data_dir.join(format!("{T}-0"));
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&part)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    let mut out = Vec::new();
    let mut buf = Vec::new();
    for path in logs {
        let bytes = std::fs::read(&path).unwrap();
        for batch in BatchIter::new(&bytes) {
            let Ok(batch) = batch else { break };
            if batch.header().is_control() {
                continue;
            }
            for r in batch.records(&mut buf).unwrap() {
                let r = r.unwrap();
                let key = String::from_utf8(r.key.unwrap().to_vec()).unwrap();
                let value = r.value.map(|v| String::from_utf8(v.to_vec()).unwrap());
                out.push((r.offset, key, value));
            }
        }
    }
    out
}

/// Every replica's log on disk: offsets strictly increase, each record is the one written
/// at its offset, every record at or past `young_from` is still there, and the live keys
/// are the model's. Returns each replica's record count.
fn check_disk(dirs: &[PathBuf], w: &Writer, young_from: u64, what: &str) -> Vec<usize> {
    let mut counts = Vec::new();
    for (d, dir) in dirs.iter().enumerate() {
        let records = disk_records(dir);
        assert!(
            records.windows(2).all(|p| p[0].0 < p[1].0),
            "{what}: replica {d}: offsets increase"
        );
        for (o, k, v) in &records {
            assert_eq!(
                w.history.get(o),
                Some(&(k.clone(), v.clone())),
                "{what}: replica {d}: the record at {o} is the one written there"
            );
        }
        let offsets: std::collections::BTreeSet<u64> = records.iter().map(|r| r.0).collect();
        for o in w.history.range(young_from..).map(|(o, _)| o) {
            assert!(
                offsets.contains(o),
                "{what}: replica {d}: {o} is younger than min_compaction_lag, yet gone"
            );
        }
        let view = live(records.iter().map(|(_, k, v)| (k.clone(), v.clone())));
        assert_eq!(view, w.live(), "{what}: replica {d}'s replay");
        counts.push(records.len());
    }
    counts
}

fn check_replay(broker: &Broker, w: &Writer, what: &str) -> usize {
    let got = replay::<Value>(broker, T, 0, ReadUncommitted);
    for (o, k, v) in &got {
        assert_eq!(
            w.history.get(o),
            Some(&(k.clone(), v.clone())),
            "{what}: read at {o}"
        );
    }
    assert_eq!(
        live(got.iter().map(|(_, k, v)| (k.clone(), v.clone()))),
        w.live(),
        "{what}: the consumer's replay"
    );
    got.len()
}

fn partition(broker: &Broker) -> logbus::replica::PartitionReplicas {
    broker.describe_topic(T).unwrap().replicas[0].clone()
}

fn wait_in_sync(broker: &Broker) {
    assert!(broker.faults().wait_in_sync(T, 0, WAIT).unwrap());
}

/// Waits until every replica but `but` holds the leader's log end.
fn wait_followers_but(broker: &Broker, but: u32) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let p = partition(broker);
        let end = p
            .replicas
            .iter()
            .find(|r| Some(r.id) == p.leader)
            .unwrap()
            .log_end;
        if p.replicas.iter().all(|r| r.id == but || r.log_end == end) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "not caught up: {p:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until the high watermark reaches the leader's log end.
fn wait_hw(broker: &Broker) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let p = partition(broker);
        let leader = p.replicas.iter().find(|r| Some(r.id) == p.leader).unwrap();
        if p.high_watermark == leader.log_end {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "HW stuck: {p:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The RF 3 scenario: writes with overwrites and tombstones, cleaning on every replica, a
/// leader crash and election, writes and cleaning on the survivors, the old leader back
/// (truncating by epoch, then fetching across the new leader's gaps), a stalled follower
/// left behind while the others clean and then catching up, records younger than
/// `min_compaction_lag` left alone, and a reopen from disk.
#[test]
fn every_replica_compacts_through_an_election_a_stall_and_a_restart() {
    let (_tmp, dirs, clock, broker) = cluster(open, Duration::from_secs(1));
    let mut w = Writer::new(&broker, Acks::All);

    // 1. Every replica cleans its own log, below its high watermark.
    w.overwrites("a", 6);
    wait_in_sync(&broker);
    clock.advance(Duration::from_secs(30));
    let written = w.history.len();
    let stats = broker.compact_now().unwrap();
    assert!(stats.records_removed > 0, "{stats:?}");
    assert!(stats.segments_cleaned > 0, "{stats:?}");
    assert!(check_replay(&broker, &w, "cleaned") < written);
    // The replaced segments' files are gone from every replica's directory.
    for dir in &dirs {
        let left: Vec<_> = std::fs::read_dir(dir.join(format!("{T}-0")))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".deleted"))
            .collect();
        assert!(left.is_empty(), "{}: {left:?}", dir.display());
    }
    // A read at an offset cleaned away returns the next record kept.
    let kept: Vec<u64> = replay::<Value>(&broker, T, 0, ReadUncommitted)
        .iter()
        .map(|r| r.0)
        .collect();
    let gone = (0..kept[kept.len() - 1])
        .find(|o| !kept.contains(o))
        .unwrap();
    let next = kept.iter().copied().find(|&o| o > gone).unwrap();
    let tp = TopicPartition::new(T, 0);
    let mut c = broker
        .consumer::<String, Value>(ConsumerConfig::new())
        .unwrap();
    c.assign(std::slice::from_ref(&tp)).unwrap();
    c.seek(&tp, gone).unwrap();
    let first = c.poll(WAIT).unwrap().iter().next().map(|r| r.offset);
    assert_eq!(first, Some(next), "read at {gone}, cleaned away");
    drop(c);
    let cleaner = broker.describe_topic(T).unwrap().partitions[0].cleaner;
    assert!(
        cleaner.is_some_and(|c| c.passes > 0 && c.records_removed > 0),
        "{cleaner:?}"
    );

    // 2. The leader crashes; the survivors elect, take writes and clean; the old leader
    // comes back, truncates by epoch and fetches across the new leader's gaps.
    let old = partition(&broker).leader.unwrap();
    broker.faults().crash_replica(T, 0, old).unwrap();
    let p = partition(&broker);
    assert!(p.leader.is_some_and(|l| l != old), "{p:?}");
    w.overwrites("b", 5);
    clock.advance(Duration::from_secs(30));
    broker.compact_now().unwrap();
    check_replay(&broker, &w, "after the election");
    broker.faults().restart_replica(T, 0, old).unwrap();
    wait_in_sync(&broker);
    check_replay(&broker, &w, "the old leader back");

    // 3. A follower stalls and leaves the ISR; the others take writes (acks = 1) and clean;
    // it resumes and fetches across the gaps.
    let p = partition(&broker);
    let stalled = p
        .replicas
        .iter()
        .map(|r| r.id)
        .find(|&id| Some(id) != p.leader);
    let stalled = stalled.unwrap();
    broker.faults().stall_replica(T, 0, stalled).unwrap();
    w.reconnect(&broker, Acks::Leader);
    w.overwrites("c", 5);
    wait_followers_but(&broker, stalled);
    clock.advance(Duration::from_secs(2));
    broker.faults().check_isr_now();
    assert!(!partition(&broker).isr.contains(&stalled));
    wait_hw(&broker);
    clock.advance(Duration::from_secs(30));
    broker.compact_now().unwrap();
    broker.faults().resume_replica(T, 0, stalled).unwrap();
    wait_in_sync(&broker);
    w.reconnect(&broker, Acks::All);

    // 4. Young records: left alone by every replica's cleaner.
    let young_from = w.history.keys().next_back().unwrap() + 1;
    w.overwrites("d", 3);
    wait_in_sync(&broker);
    broker.compact_now().unwrap();
    check_replay(&broker, &w, "with young records");
    broker.close().unwrap();
    let counts = check_disk(&dirs, &w, young_from, "closed");
    assert!(
        counts.iter().all(|&n| n < w.history.len()),
        "every replica cleaned: {counts:?} of {}",
        w.history.len()
    );

    // 5. Reopened from disk: the same views, and cleaning goes on.
    let broker = open(&dirs, &clock);
    broker.topic::<String, Value>(T).unwrap();
    wait_in_sync(&broker);
    check_replay(&broker, &w, "reopened");
    clock.advance(Duration::from_secs(30));
    w.reconnect(&broker, Acks::All);
    w.overwrites("e", 2);
    wait_in_sync(&broker);
    clock.advance(Duration::from_secs(30));
    broker.compact_now().unwrap();
    check_replay(&broker, &w, "reopened and cleaned");
    broker.close().unwrap();
    let young_from = w.history.keys().next_back().unwrap() + 1;
    check_disk(&dirs, &w, young_from, "reopened, closed");
}

/// The cleaner never cleans at or past a replica's high watermark: a leader whose followers
/// stalled holds a newer value of a key above the HW (acks = 1); its cleaner keeps the
/// committed older value, so once it crashes, a follower is elected without the newer one
/// and the old leader truncates it away by epoch, the key still reads its committed value
/// on every replica (a cleaner that went up to the log end would have removed it).
#[test]
fn no_replica_cleans_past_its_high_watermark() {
    let (_tmp, dirs, clock, broker) = cluster(open, Duration::from_secs(3600));
    let mut w = Writer::new(&broker, Acks::All);
    w.send("k".into(), Some("committed".into()));
    w.overwrites("a", 2);
    wait_in_sync(&broker);
    let committed = w.history.clone();
    let hw = partition(&broker).high_watermark;
    let leader = partition(&broker).leader.unwrap();
    let followers: Vec<u32> = partition(&broker)
        .replicas
        .iter()
        .map(|r| r.id)
        .filter(|&id| id != leader)
        .collect();
    for &f in &followers {
        broker.faults().stall_replica(T, 0, f).unwrap();
    }
    // Above the HW, on the leader only: a newer value of "k", and enough records of other
    // keys to roll it out of the active segment.
    w.reconnect(&broker, Acks::Leader);
    w.send("k".into(), Some("uncommitted".into()));
    w.overwrites("b", 2);
    assert_eq!(partition(&broker).high_watermark, hw);
    clock.advance(Duration::from_secs(30));
    broker.compact_now().unwrap();
    broker.faults().crash_replica(T, 0, leader).unwrap();
    for &f in &followers {
        broker.faults().resume_replica(T, 0, f).unwrap();
    }
    let p = partition(&broker);
    assert!(p.leader.is_some_and(|l| l != leader), "{p:?}");
    broker.faults().restart_replica(T, 0, leader).unwrap();
    wait_in_sync(&broker);
    assert_eq!(partition(&broker).replicas[0].log_end, hw);
    // What the partition holds now: the committed records.
    w.history = committed;
    w.model.clear();
    for (k, v) in w.history.values() {
        w.model.insert(k.clone(), v.clone());
    }
    assert_eq!(w.live().get("k").map(String::as_str), Some("committed"));
    check_replay(&broker, &w, "after the election");
    broker.close().unwrap();
    check_disk(&dirs, &w, u64::MAX, "closed");
}

/// One step of a fault schedule.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Sends this many overwrite rounds (tombstones and fillers included).
    Write(usize),
    /// The clock passes `min_compaction_lag`; every replica is cleaned.
    Compact,
    CrashLeader,
    CrashFollower(usize),
    StallFollower(usize),
    /// Every crashed replica restarts, every stalled one resumes; all back in sync.
    Heal,
    /// The broker closes (healed first) and reopens from disk.
    Reopen,
}

fn fault_schedule(seed: u64) -> Vec<Step> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..10)
        .map(|_| match rng.u8(..10) {
            0..=2 => Step::Write(rng.usize(1..4)),
            3 | 4 => Step::Compact,
            5 => Step::CrashLeader,
            6 => Step::CrashFollower(rng.usize(..2)),
            7 => Step::StallFollower(rng.usize(..2)),
            8 => Step::Heal,
            _ => Step::Reopen,
        })
        .collect()
}

/// What is wrong with the replicas now, at most one replica at a time.
#[derive(Clone, Copy, PartialEq)]
enum Fault {
    None,
    Crashed(u32),
    Stalled(u32),
}

fn run_schedule(seed: u64) {
    let (_tmp, dirs, clock, mut broker) = cluster(open_eager, Duration::from_secs(1));
    let mut w = Writer::new(&broker, Acks::All);
    w.overwrites("init", 2);
    let mut fault = Fault::None;
    let heal = |broker: &Broker, fault: &mut Fault| {
        match *fault {
            Fault::Crashed(id) => broker.faults().restart_replica(T, 0, id).unwrap(),
            Fault::Stalled(id) => broker.faults().resume_replica(T, 0, id).unwrap(),
            Fault::None => {}
        }
        *fault = Fault::None;
        wait_in_sync(broker);
    };
    let follower = |broker: &Broker, n: usize| {
        let p = partition(broker);
        let ids = p.replicas.iter().map(|r| r.id);
        ids.filter(|&id| Some(id) != p.leader).collect::<Vec<_>>()[n]
    };
    for (i, step) in fault_schedule(seed).into_iter().enumerate() {
        let tag = format!("s{i}");
        match step {
            Step::Write(rounds) => match fault {
                Fault::Stalled(id) => {
                    // acks = 1 while the stalled follower is in the ISR; committed once it
                    // leaves it (it lags past `replica_lag_time_max`).
                    w.reconnect(&broker, Acks::Leader);
                    w.overwrites(&tag, rounds);
                    wait_followers_but(&broker, id);
                    clock.advance(Duration::from_secs(2));
                    broker.faults().check_isr_now();
                    wait_hw(&broker);
                    w.reconnect(&broker, Acks::All);
                }
                _ => w.overwrites(&tag, rounds),
            },
            Step::Compact => {
                clock.advance(Duration::from_secs(30));
                broker.compact_now().unwrap();
            }
            Step::CrashLeader | Step::CrashFollower(_) | Step::StallFollower(_) => {
                heal(&broker, &mut fault);
                let p = partition(&broker);
                match step {
                    Step::CrashLeader => {
                        let id = p.leader.unwrap();
                        broker.faults().crash_replica(T, 0, id).unwrap();
                        fault = Fault::Crashed(id);
                    }
                    Step::CrashFollower(n) => {
                        let id = follower(&broker, n);
                        broker.faults().crash_replica(T, 0, id).unwrap();
                        fault = Fault::Crashed(id);
                    }
                    Step::StallFollower(n) => {
                        let id = follower(&broker, n);
                        broker.faults().stall_replica(T, 0, id).unwrap();
                        fault = Fault::Stalled(id);
                    }
                    _ => unreachable!(),
                }
            }
            Step::Heal => heal(&broker, &mut fault),
            Step::Reopen => {
                heal(&broker, &mut fault);
                broker.close().unwrap();
                check_disk(
                    &dirs,
                    &w,
                    u64::MAX,
                    &format!("seed {seed}: step {i}, closed"),
                );
                broker = open_eager(&dirs, &clock);
                broker.topic::<String, Value>(T).unwrap();
                wait_in_sync(&broker);
                w.reconnect(&broker, Acks::All);
            }
        }
        check_replay(&broker, &w, &format!("seed {seed}: step {i} ({step:?})"));
    }
    // Healed and cleaned, then records younger than the lag, cleaned again: kept.
    heal(&broker, &mut fault);
    clock.advance(Duration::from_secs(30));
    broker.compact_now().unwrap();
    let young_from = w.history.keys().next_back().map_or(0, |o| o + 1);
    w.overwrites("young", 2);
    wait_in_sync(&broker);
    broker.compact_now().unwrap();
    check_replay(&broker, &w, &format!("seed {seed}: the end"));
    broker.close().unwrap();
    let counts = check_disk(&dirs, &w, young_from, &format!("seed {seed}: the end"));
    assert!(
        counts.iter().all(|&n| n < w.history.len()),
        "seed {seed}: every replica cleaned: {counts:?} of {}",
        w.history.len()
    );
}

/// Seeded fault schedules (crashes of the leader or a follower, a stalled follower, heals,
/// writes, cleaning, reopens; one fault at a time, so every acknowledged record stays
/// committed): after every step a consumer's replay is the model's view, and at each
/// close every replica's log on disk is, with each record at its offset.
/// `LOGBUS_REPLICA_COMPACTION_SEED=s` runs the schedule of seed `s` alone;
/// `LOGBUS_REPLICA_COMPACTION_SCHEDULES=n` runs seeds `0..n` (default 6).
#[test]
fn seeded_fault_schedules_keep_every_replica_compacted_and_equal() {
    let seeds: Vec<u64> = match std::env::var("LOGBUS_REPLICA_COMPACTION_SEED") {
        Ok(s) => vec![s
            .parse()
            .expect("LOGBUS_REPLICA_COMPACTION_SEED is a number")],
        Err(_) => {
            let n = std::env::var("LOGBUS_REPLICA_COMPACTION_SCHEDULES")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(6);
            (0..n).collect()
        }
    };
    for seed in seeds {
        let run = std::panic::catch_unwind(|| run_schedule(seed));
        if let Err(panic) = run {
            eprintln!(
                "seed {seed} failed; schedule: {:?}\n  replay: LOGBUS_REPLICA_COMPACTION_SEED={seed} cargo test --test replicas -- --exact replicas_compaction::seeded_fault_schedules_keep_every_replica_compacted_and_equal",
                fault_schedule(seed)
            );
            std::panic::resume_unwind(panic);
        }
    }
}

/// A directory fsync fails part-way through the cleaning of the replicas (the replica whose
/// swap it was goes offline), then the power fails: every replica reopens with its swap
/// finished or undone by recovery, and with `FlushPolicy::EveryBatch` and `acks = all` the
/// consumer's replay is still the model's, each record at its offset, before and after the
/// replicas are cleaned again.
#[test]
fn a_failed_swap_then_a_power_loss_keeps_every_key() {
    use logbus::persist::FlushPolicy;
    use logbus::storage::fault::{Fault, FaultyIo};
    for seed in 0..6u64 {
        let clock = Arc::new(ManualClock::new(T0));
        let fs = FaultyIo::new(seed);
        let dirs: Vec<PathBuf> = ["/d0", "/d1", "/d2"].iter().map(PathBuf::from).collect();
        let open = || {
            Broker::builder()
                .io(Arc::new(fs.clone()))
                .data_dirs(dirs.iter())
                .create(true)
                .clock(clock.clone() as Arc<dyn Clock>)
                .log_cleaner_threads(0)
                .open()
                .unwrap()
        };
        let broker = open();
        let config = TopicConfig::new(1)
            .replication_factor(3)
            .min_insync_replicas(2)
            .records_in_memory(4)
            .cleanup_policy(CleanupPolicy::Compact)
            .delete_retention(Duration::from_secs(10))
            .persist(
                PersistConfig::new()
                    .segment_bytes(4096)
                    .flush(FlushPolicy::EveryBatch),
            );
        broker.create_topic::<String, Value>(T, config).unwrap();
        let mut w = Writer::new(&broker, Acks::All);
        w.overwrites("a", 4);
        wait_in_sync(&broker);
        clock.advance(Duration::from_secs(30));
        // The cleaner's swaps sync the directory twice per replica: each seed fails another
        // of the six.
        fs.inject(Fault::DirSyncError, seed as usize);
        let failed = broker.compact_now();
        assert!(failed.is_err(), "seed {seed}: the fault hits a swap");
        broker.simulate_process_death();
        drop((w.producer, broker));
        fs.clear_faults();
        fs.crash();
        let broker = open();
        broker.topic::<String, Value>(T).unwrap();
        wait_in_sync(&broker);
        w.producer = broker
            .producer_with_config(ProducerConfig::new().request_timeout(WAIT))
            .unwrap();
        check_replay(&broker, &w, &format!("seed {seed}: reopened"));
        w.overwrites("b", 1);
        wait_in_sync(&broker);
        clock.advance(Duration::from_secs(30));
        let stats = broker.compact_now().unwrap();
        assert!(stats.records_removed > 0, "seed {seed}: {stats:?}");
        check_replay(&broker, &w, &format!("seed {seed}: cleaned again"));
        broker.close().unwrap();
    }
}

/// A follower left behind while the others clean holds a key's value but not its
/// tombstone, which has expired (past `delete_retention`): the leader's cleaner keeps the
/// tombstone until every replica has fetched it, so that after a restart the follower,
/// fetching from the leader's cleaned disk, still learns of the deletion; once it leads, the
/// deleted key stays deleted and the replicas' key → latest views agree. (Kafka lets the
/// tombstone expire by age and leaves such a replica diverged.)
#[test]
fn a_follower_behind_a_cleaned_tombstone_keeps_no_deleted_key() {
    let (_tmp, dirs, clock, broker) = cluster(open, Duration::from_secs(1));
    let mut w = Writer::new(&broker, Acks::All);
    w.send("gone".into(), Some("before the deletion".into()));
    w.overwrites("a", 1);
    wait_in_sync(&broker);
    let p = partition(&broker);
    let leader = p.leader.unwrap();
    let behind = p.replicas.iter().map(|r| r.id).find(|&id| id != leader);
    let behind = behind.unwrap();
    broker.faults().stall_replica(T, 0, behind).unwrap();
    w.reconnect(&broker, Acks::Leader);
    w.overwrites("b", 2);
    w.send("gone".into(), None);
    w.overwrites("c", 2);
    wait_followers_but(&broker, behind);
    clock.advance(Duration::from_secs(2));
    broker.faults().check_isr_now();
    assert!(!partition(&broker).isr.contains(&behind));
    wait_hw(&broker);
    // Past min_compaction_lag and delete_retention: the leader and the follower in sync
    // drop the old value and the tombstone.
    clock.advance(Duration::from_secs(30));
    let stats = broker.compact_now().unwrap();
    assert!(stats.tombstones_removed > 0, "{stats:?}");
    // The broker closes with the follower still behind and reopens: every replica's log
    // is what its disk holds.
    broker.close().unwrap();
    let broker = open(&dirs, &clock);
    broker.topic::<String, Value>(T).unwrap();
    wait_in_sync(&broker);
    // The follower that was behind leads.
    for r in partition(&broker).replicas {
        if r.id != behind {
            broker.faults().crash_replica(T, 0, r.id).unwrap();
        }
    }
    assert_eq!(partition(&broker).leader, Some(behind));
    assert!(!w.live().contains_key("gone"));
    check_replay(&broker, &w, "led by the follower that was behind");
    broker.close().unwrap();
    check_disk(&dirs, &w, u64::MAX, "closed");
}

/// A topic deleted and created again with the same name starts its replicas' cleaning from
/// the log start: the old topic's first dirty offset is forgotten with it. Were it kept, the
/// new topic's records below it would count as cleaned: an expired tombstone there is
/// dropped while the older value of its key, never in a pass's key map, stays, and the
/// deleted key reads again.
#[test]
fn a_topic_created_again_is_cleaned_from_its_start() {
    let (_tmp, dirs, clock, broker) = cluster(open, Duration::from_secs(3600));
    let mut w = Writer::new(&broker, Acks::All);
    w.overwrites("a", 8);
    wait_in_sync(&broker);
    clock.advance(Duration::from_secs(30));
    broker.compact_now().unwrap();
    let cleaner = broker.describe_topic(T).unwrap().partitions[0].cleaner;
    assert!(cleaner.is_some_and(|c| c.first_dirty > 100), "{cleaner:?}");
    broker.delete_topic(T).unwrap();
    broker
        .create_topic::<String, Value>(T, config(Duration::from_secs(3600)))
        .unwrap();
    let mut w = Writer::new(&broker, Acks::All);
    w.send("gone".into(), Some("before the deletion".into()));
    w.send("gone".into(), None);
    w.overwrites("b", 10);
    wait_in_sync(&broker);
    clock.advance(Duration::from_secs(30));
    broker.compact_now().unwrap();
    check_replay(&broker, &w, "created again, cleaned");
    broker.close().unwrap();
    check_disk(&dirs, &w, u64::MAX, "closed");
}

/// Directory failures around cleaning, with the eager cleaner threads racing: the leader's
/// directory fails (an election), the survivors take writes and clean, the directory comes
/// back (its replica reopens its log as the disk kept it, truncates by epoch and fetches);
/// then a follower's directory fails and comes back. Every replica's view stays the model's.
#[test]
fn a_failed_and_restored_data_directory_keeps_every_replica_compacted_and_equal() {
    let (_tmp, dirs, clock, broker) = cluster(open_eager, Duration::from_secs(3600));
    let mut w = Writer::new(&broker, Acks::All);
    w.overwrites("a", 4);
    wait_in_sync(&broker);
    clock.advance(Duration::from_secs(30));
    broker.compact_now().unwrap();
    let leader = partition(&broker).leader.unwrap();
    broker.faults().fail_data_dir(leader).unwrap();
    let p = partition(&broker);
    assert!(p.leader.is_some_and(|l| l != leader), "{p:?}");
    w.reconnect(&broker, Acks::All);
    w.overwrites("b", 4);
    clock.advance(Duration::from_secs(30));
    broker.compact_now().unwrap();
    check_replay(&broker, &w, "the leader's directory failed");
    broker.faults().restore_data_dir(leader).unwrap();
    wait_in_sync(&broker);
    clock.advance(Duration::from_secs(30));
    broker.compact_now().unwrap();
    check_replay(&broker, &w, "its directory back");
    let p = partition(&broker);
    let follower = p
        .replicas
        .iter()
        .map(|r| r.id)
        .find(|&id| Some(id) != p.leader);
    let follower = follower.unwrap();
    broker.faults().fail_data_dir(follower).unwrap();
    w.reconnect(&broker, Acks::All);
    w.overwrites("c", 3);
    clock.advance(Duration::from_secs(30));
    broker.compact_now().unwrap();
    broker.faults().restore_data_dir(follower).unwrap();
    wait_in_sync(&broker);
    clock.advance(Duration::from_secs(30));
    broker.compact_now().unwrap();
    check_replay(&broker, &w, "a follower's directory back");
    broker.close().unwrap();
    check_disk(&dirs, &w, u64::MAX, "closed");
}

/// The broker closes while cleaner threads and `compact_now` clean every replica: the close
/// waits for the passes (or they find the partition closed and swap nothing), and the
/// reopened replicas hold the model's view.
#[test]
fn a_close_during_cleaning_passes_keeps_every_replica_whole() {
    for round in 0..3 {
        let (_tmp, dirs, clock, broker) = cluster(open_eager, Duration::from_secs(3600));
        let broker = Arc::new(broker);
        let mut w = Writer::new(&broker, Acks::All);
        w.overwrites("a", 6);
        wait_in_sync(&broker);
        clock.advance(Duration::from_secs(30));
        let compacting = {
            let broker = Arc::clone(&broker);
            std::thread::spawn(move || {
                // Refused once the broker is closed; never a panic or a hang.
                let _ = broker.compact_now();
            })
        };
        std::thread::sleep(Duration::from_millis(round));
        drop(w.producer);
        broker.close().unwrap();
        compacting.join().unwrap();
        let broker = open(&dirs, &clock);
        broker.topic::<String, Value>(T).unwrap();
        wait_in_sync(&broker);
        w.producer = Writer::new(&broker, Acks::All).producer;
        check_replay(&broker, &w, "reopened after a close during cleaning");
        broker.close().unwrap();
        check_disk(&dirs, &w, u64::MAX, "closed");
    }
}

/// A topic deleted and created again under the same name while the eager cleaner threads
/// and `compact_now` clean its replicas: the old topic's passes end (or find it closed),
/// the new topic is cleaned from its own start, and no deleted key of it reads again.
#[test]
fn a_topic_deleted_and_created_again_during_passes_keeps_its_deletions() {
    let clock = Arc::new(ManualClock::new(T0));
    let tmp: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let dirs: Vec<PathBuf> = tmp.iter().map(|d| d.path().to_path_buf()).collect();
    let broker = Arc::new(open_eager(&dirs, &clock));
    for round in 0..4 {
        broker
            .create_topic::<String, Value>(T, config(Duration::from_secs(3600)))
            .unwrap();
        let mut w = Writer::new(&broker, Acks::All);
        w.send("gone".into(), Some(format!("round {round}")));
        w.send("gone".into(), None);
        w.overwrites(&format!("r{round}"), 6);
        wait_in_sync(&broker);
        clock.advance(Duration::from_secs(30));
        broker.compact_now().unwrap();
        check_replay(&broker, &w, "cleaned");
        let compacting = {
            let broker = Arc::clone(&broker);
            std::thread::spawn(move || {
                let _ = broker.compact_now();
            })
        };
        drop(w);
        broker.delete_topic(T).unwrap();
        compacting.join().unwrap();
    }
    broker.close().unwrap();
}

/// `w`'s transactions on `T`: six rounds of a committed transaction over 12 keys and an
/// aborted one over the same keys, then a committed one of filler records that rolls them
/// out of the active segment; every replica in sync after. Returns the producer and each
/// key's committed value.
fn committed_and_aborted_transactions(
    broker: &Broker,
) -> (logbus::Producer<String, Value>, BTreeMap<String, Value>) {
    let p = broker
        .producer_with_config::<String, Value>(
            ProducerConfig::new()
                .transactional_id("w")
                .request_timeout(WAIT),
        )
        .unwrap();
    p.init_transactions().unwrap();
    let mut model = BTreeMap::new();
    for round in 0..6 {
        p.begin_transaction().unwrap();
        for k in 0..12 {
            let v = Some(format!("committed-{round}-{k}"));
            p.send(Record::new(T, v.clone()).key(format!("k{k}")).partition(0))
                .unwrap();
            model.insert(format!("k{k}"), v);
        }
        p.commit_transaction().unwrap();
        p.begin_transaction().unwrap();
        for k in 0..12 {
            let v = Some(format!("aborted-{round}-{k}"));
            p.send(Record::new(T, v).key(format!("k{k}")).partition(0))
                .unwrap();
        }
        p.abort_transaction().unwrap();
    }
    p.begin_transaction().unwrap();
    for i in 0..100 {
        let v = Some(format!("{i:040}"));
        p.send(
            Record::new(T, v.clone())
                .key(format!("fill-{}", i % 4))
                .partition(0),
        )
        .unwrap();
        model.insert(format!("fill-{}", i % 4), v);
    }
    p.commit_transaction().unwrap();
    wait_in_sync(broker);
    (p, model)
}

/// Each replica leads in turn (the others crashed and back, in sync): a read-committed
/// replay's live keys are `model`'s every time.
fn read_committed_under_each_leader(broker: &Broker, model: &BTreeMap<String, Value>) {
    let want = live(model.clone().into_iter());
    for leader in 0..3u32 {
        for id in 0..3u32 {
            if id != leader {
                broker.faults().crash_replica(T, 0, id).unwrap();
            }
        }
        assert_eq!(partition(broker).leader, Some(leader));
        let got = replay::<Value>(broker, T, 0, ReadCommitted);
        assert_eq!(
            live(got.into_iter().map(|(_, k, v)| (k, v))),
            want,
            "read committed, replica {leader} leading"
        );
        for id in 0..3u32 {
            if id != leader {
                broker.faults().restart_replica(T, 0, id).unwrap();
            }
        }
        wait_in_sync(broker);
    }
}

/// Transactions on a replicated compacted topic: every replica's cleaner removes an aborted
/// transaction's records and keeps the committed value they would have superseded, so
/// that whichever replica leads, a read-committed table reads each key's committed value.
#[test]
fn every_replica_cleans_aborted_transactions_away_and_keeps_committed_values() {
    let (_tmp, _dirs, clock, broker) = cluster(open, Duration::from_secs(3600));
    let (_p, model) = committed_and_aborted_transactions(&broker);
    clock.advance(Duration::from_secs(30));
    let stats = broker.compact_now().unwrap();
    assert!(stats.aborted_removed > 0, "{stats:?}");
    read_committed_under_each_leader(&broker, &model);
    broker.close().unwrap();
}

/// As `every_replica_cleans_aborted_transactions_away_and_keeps_committed_values`, the
/// replicas first reopened from disk (each rebuilds which transactions aborted from its
/// own log) before they clean.
#[test]
fn every_replica_reopened_cleans_aborted_transactions_away() {
    let (_tmp, dirs, clock, broker) = cluster(open, Duration::from_secs(3600));
    let (p, model) = committed_and_aborted_transactions(&broker);
    drop(p);
    broker.close().unwrap();
    let broker = open(&dirs, &clock);
    broker.topic::<String, Value>(T).unwrap();
    wait_in_sync(&broker);
    clock.advance(Duration::from_secs(30));
    let stats = broker.compact_now().unwrap();
    assert!(stats.aborted_removed > 0, "{stats:?}");
    read_committed_under_each_leader(&broker, &model);
    broker.close().unwrap();
}
