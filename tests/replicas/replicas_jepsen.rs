//! A Jepsen-style test of replicated topics: producers with `acks = all`, consumers in a
//! group, and random fault schedules (leader and follower crashes, a follower's power loss,
//! stalls, slow followers, directory failures, restarts, time passing, overlapping), RF 3,
//! `min_insync_replicas` 2, unclean election off. Every schedule's history is checked:
//! - every acknowledged record is in the final log, at the offset it was acknowledged with;
//! - with the idempotent producer (the default), no record is in a log twice; every
//!   schedule runs again with idempotence off, where duplicates left by retries are
//!   counted (never more than the producers' count of retries after an append), and both
//!   counts are printed: what idempotence prevented;
//! - all replicas hold the same records at every offset once healed;
//! - no consumer read a record that is not in the final log at that offset (nothing read
//!   was later truncated);
//! - offsets are dense (a reader from the log start sees every offset up to HW);
//! - each producer's records keep their order in each partition (for the blocking
//!   producers: the pipelining one, `send_async` with several records in flight, may
//!   reorder on a retry, as Kafka's producer does with several requests in flight and no
//!   idempotence; every other check covers it).
//!
//! The same schedules run on persisted replicas too (a broker on three data directories of
//! a simulated file system: directory failures make its I/O fail; restores reopen what the
//! disk kept), followed by a close and a reopen after which every replica must hold the
//! same log as before.
//!
//! The clients send at most [`RECORDS_PER_STEP`] records (together) per fault step, so a
//! schedule's work does not grow with the speed of a send: unpaced, a fast `acks = all`
//! path writes up to 60,000 records a partition per schedule (the checker's cost grows
//! with them) and five busy client threads starve the fault thread on a small machine.
//!
//! `LOGBUS_JEPSEN_SCHEDULES=n` runs n schedules (default 200; 50 on disk);
//! `LOGBUS_JEPSEN_SEED=s` runs the one schedule of seed `s` (a failing seed is printed with
//! this command); `LOGBUS_JEPSEN_RECORDS_IN_MEMORY=n` (a power of two; default 65,536,
//! 256 in the retention test) sets the records a partition keeps in memory, and lets log
//! starts move (the checker then checks what is kept). The fault
//! schedule of a seed is always the same; thread timing is not, so a replay repeats the
//! faults, not every interleaving.

use std::collections::{HashMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::persist::PersistConfig;
use logbus::producer::{Acks, ProducerConfig, Record};
use logbus::storage::fault::FaultyIo;
use logbus::{Broker, ManualClock, TopicConfig, TopicPartition};

const T: &str = "jepsen";
const PARTITIONS: u32 = 2;
/// Producers calling `send`; one more pipelines with `send_async` (its id is `PRODUCERS`).
const PRODUCERS: u64 = 2;
/// Records the pipelining producer keeps in flight.
const WINDOW: usize = 8;
const STEPS: usize = 8;
/// Records all producers together may send per fault step (and before the first and after
/// the heal): about what they send unpaced with a slow `acks = all` path.
const RECORDS_PER_STEP: u64 = 300;

/// The clients' send budget, raised by the fault thread at each step.
#[derive(Default)]
struct Pace {
    allowed: AtomicU64,
    sent: AtomicU64,
}

impl Pace {
    /// Takes one send from the budget; `false` (nothing taken) when it is spent.
    fn take(&self) -> bool {
        let allowed = self.allowed.load(Ordering::Relaxed);
        self.sent
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |sent| {
                (sent < allowed).then_some(sent + 1)
            })
            .is_ok()
    }

    fn next_step(&self) {
        self.allowed.fetch_add(RECORDS_PER_STEP, Ordering::Relaxed);
    }
}

/// A client whose budget is spent waits for the next step.
fn idle() {
    thread::sleep(Duration::from_micros(200));
}

/// Records a partition keeps in memory by default: far more than a paced schedule writes.
const MEMORY: usize = 1 << 16;
/// Records a partition keeps in memory in the retention test: fewer than a paced schedule
/// writes to each partition (about 1,500), so log starts move under the faults.
const SMALL_MEMORY: usize = 256;

/// Records each partition keeps in memory (`LOGBUS_JEPSEN_RECORDS_IN_MEMORY`, else
/// `default`), and whether log starts may move (retention) in the checker's eyes.
fn records_in_memory(default: usize) -> (usize, bool) {
    match std::env::var("LOGBUS_JEPSEN_RECORDS_IN_MEMORY") {
        Ok(s) => (
            s.parse()
                .expect("LOGBUS_JEPSEN_RECORDS_IN_MEMORY is a number"),
            true,
        ),
        Err(_) => (default, default < MEMORY),
    }
}

/// One fault step of a schedule.
#[derive(Debug, Clone, Copy)]
enum Step {
    CrashLeader(u32),
    CrashFollower(u32, usize),
    /// A follower crashes losing an unsynced tail (a power loss), keeping this fraction
    /// (in percent) of its log.
    CrashFollowerLosing(u32, usize, u64),
    Stall(u32, usize),
    /// A follower fetches once per this many milliseconds of broker time (0: full speed).
    Slow(u32, usize, u64),
    Resume(u32, usize),
    Restart(u32, usize),
    FailDir(u32),
    RestoreDir(u32),
    /// The broker clock passes the lag time; lagging followers leave the ISR.
    TimePasses,
    /// Traffic only.
    Pause,
}

fn schedule(seed: u64) -> Vec<Step> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..STEPS)
        .map(|_| {
            let p = rng.u32(..PARTITIONS);
            let r = rng.usize(..3);
            match rng.u8(..12) {
                0 | 1 => Step::CrashLeader(p),
                2 => Step::CrashFollower(p, r),
                10 => Step::CrashFollowerLosing(p, r, rng.u64(0..100)),
                11 => Step::Slow(p, r, [0, 1_000, 40_000][rng.usize(..3)]),
                3 => Step::Stall(p, r),
                4 => Step::Resume(p, r),
                5 | 6 => Step::Restart(p, r),
                7 => {
                    if rng.bool() {
                        Step::FailDir(rng.u32(..3))
                    } else {
                        Step::RestoreDir(rng.u32(..3))
                    }
                }
                8 => Step::TimePasses,
                _ => Step::Pause,
            }
        })
        .collect()
}

/// What the producers and consumers saw.
#[derive(Default)]
struct History {
    /// (partition, offset, value) of every acknowledged send.
    acked: Vec<(u32, u64, u64)>,
    /// (partition, offset, value) of every record a group member read.
    read: Vec<(u32, u64, u64)>,
    possible_duplicates: u64,
    /// Retries the leader answered with the first append's offsets.
    deduplicated: u64,
}

fn value(producer: u64, seq: u64) -> u64 {
    (producer << 32) | seq
}

/// What one schedule gave.
#[derive(Default, Clone, Copy)]
struct Outcome {
    acked: u64,
    duplicates: u64,
    pipelined: u64,
    possible_duplicates: u64,
    deduplicated: u64,
}

/// One schedule, with the producers idempotent or not.
fn run(seed: u64, on_disk: bool, memory: usize, idempotent: bool) -> Result<Outcome, String> {
    let (memory, trims) = records_in_memory(memory);
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let fs = FaultyIo::new(seed);
    let open = || {
        Broker::builder()
            .clock(clock.clone())
            .io(Arc::new(fs.clone()))
            .data_dirs(["/d0", "/d1", "/d2"])
            .create(true)
            .open()
            .unwrap()
    };
    let config = TopicConfig::new(PARTITIONS)
        .replication_factor(3)
        .min_insync_replicas(2)
        .records_in_memory(memory);
    let broker = if on_disk {
        let broker = open();
        let persist = PersistConfig::new().segment_bytes(64 << 10);
        broker
            .create_topic::<(), u64>(T, config.persist(persist))
            .unwrap();
        broker
    } else {
        let broker = Broker::builder().clock(clock.clone()).build().unwrap();
        broker.create_topic::<(), u64>(T, config).unwrap();
        broker
    };
    let faults = broker.faults();
    let history = Arc::new(Mutex::new(History::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let pace = Arc::new(Pace::default());
    pace.next_step();

    let producers: Vec<_> = (0..PRODUCERS)
        .map(|id| {
            let (broker, history, stop) = (broker.clone(), history.clone(), stop.clone());
            let pace = pace.clone();
            thread::spawn(move || {
                let config = ProducerConfig::new()
                    .acks(Acks::All)
                    .enable_idempotence(idempotent)
                    .request_timeout(Duration::from_millis(50))
                    .delivery_timeout(Duration::from_millis(150));
                let p = broker.producer_with_config::<(), u64>(config).unwrap();
                let mut seq = 0;
                while !stop.load(Ordering::Relaxed) {
                    if !pace.take() {
                        idle();
                        continue;
                    }
                    let partition = (seq % u64::from(PARTITIONS)) as u32;
                    let v = value(id, seq);
                    if let Ok(meta) = p.send(Record::new(T, v).partition(partition)) {
                        history
                            .lock()
                            .unwrap()
                            .acked
                            .push((partition, meta.offset, v));
                    }
                    seq += 1;
                }
                {
                    let (m, mut h) = (p.metrics(), history.lock().unwrap());
                    h.possible_duplicates += m.possible_duplicates;
                    h.deduplicated += m.deduplicated;
                }
            })
        })
        .collect();
    let pipelined = {
        let (broker, history, stop) = (broker.clone(), history.clone(), stop.clone());
        let pace = pace.clone();
        thread::spawn(move || {
            let config = ProducerConfig::new()
                .acks(Acks::All)
                .enable_idempotence(idempotent)
                .request_timeout(Duration::from_millis(50))
                .delivery_timeout(Duration::from_millis(150));
            let p = broker.producer_with_config::<(), u64>(config).unwrap();
            let mut in_flight = std::collections::VecDeque::new();
            let settle = |(v, d): (u64, logbus::producer::PendingSend<(), u64>)| {
                if let Ok(meta) = d.wait() {
                    let at = (meta.partition, meta.offset, v);
                    history.lock().unwrap().acked.push(at);
                }
            };
            let mut seq = 0;
            while !stop.load(Ordering::Relaxed) {
                if !pace.take() {
                    // Nothing to send: settle what is in flight, as a flush would.
                    in_flight.drain(..).for_each(settle);
                    idle();
                    continue;
                }
                if in_flight.len() == WINDOW {
                    settle(in_flight.pop_front().unwrap());
                }
                let partition = (seq % u64::from(PARTITIONS)) as u32;
                let v = value(PRODUCERS, seq);
                in_flight.push_back((v, p.send_async(Record::new(T, v).partition(partition))));
                seq += 1;
            }
            in_flight.into_iter().for_each(settle);
            {
                let (m, mut h) = (p.metrics(), history.lock().unwrap());
                h.possible_duplicates += m.possible_duplicates;
                h.deduplicated += m.deduplicated;
            }
        })
    };
    let consumers: Vec<_> = (0..2)
        .map(|_| {
            let (broker, history, stop) = (broker.clone(), history.clone(), stop.clone());
            thread::spawn(move || {
                let config = ConsumerConfig::new()
                    .group_id("checkers")
                    .auto_offset_reset(OffsetReset::Earliest);
                let mut c = broker.consumer::<(), u64>(config).unwrap();
                c.subscribe(&[T]).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(batch) = c.poll(Duration::from_millis(5)) {
                        let mut h = history.lock().unwrap();
                        h.read
                            .extend(batch.iter().map(|r| (r.partition, r.offset, r.value)));
                        drop(h);
                        let _ = c.commit_sync();
                    }
                }
            })
        })
        .collect();

    let mut failed_dir: Option<u32> = None;
    for step in schedule(seed) {
        thread::sleep(Duration::from_millis(2));
        let d = broker.describe_topic(T).unwrap();
        let id = |p: u32, r: usize| d.replicas[p as usize].replicas[r].id;
        // Fault calls on replicas in the wrong state are no-ops by design; errors are not.
        match step {
            Step::CrashLeader(p) => {
                if let Some(l) = d.replicas[p as usize].leader {
                    faults.crash_replica(T, p, l).unwrap();
                }
            }
            Step::CrashFollower(p, r) => {
                if d.replicas[p as usize].leader != Some(id(p, r)) {
                    faults.crash_replica(T, p, id(p, r)).unwrap();
                }
            }
            Step::CrashFollowerLosing(p, r, keep) => {
                // Safe only while another live in-sync replica holds every committed
                // record (a follower out of the ISR may lose anything).
                let part = &d.replicas[p as usize];
                let victim = id(p, r);
                let others_in_sync = part
                    .replicas
                    .iter()
                    .any(|x| x.id != victim && x.online && x.in_sync);
                if part.leader != Some(victim) && others_in_sync {
                    let end = part.replicas[r].log_end;
                    let start = part.replicas[r].log_start;
                    let keep_below = start + (end - start) * keep / 100;
                    faults
                        .crash_replica_losing(T, p, victim, keep_below)
                        .unwrap();
                }
            }
            Step::Slow(p, r, ms) => faults
                .slow_replica(T, p, id(p, r), Duration::from_millis(ms))
                .unwrap(),
            Step::Stall(p, r) => faults.stall_replica(T, p, id(p, r)).unwrap(),
            Step::Resume(p, r) => faults.resume_replica(T, p, id(p, r)).unwrap(),
            Step::Restart(p, r) => {
                let on_failed_dir = failed_dir == Some(id(p, r));
                if !on_failed_dir {
                    faults.restart_replica(T, p, id(p, r)).unwrap();
                }
            }
            Step::FailDir(dir) => {
                // A disk takes one replica of each partition; only while every partition
                // keeps a live in-sync replica elsewhere (Kafka's guarantee needs one).
                let safe = d.replicas.iter().all(|part| {
                    part.replicas
                        .iter()
                        .any(|r| r.id != dir && r.online && r.in_sync)
                });
                if failed_dir.is_none() && safe {
                    faults.fail_data_dir(dir).unwrap();
                    failed_dir = Some(dir);
                }
            }
            Step::RestoreDir(dir) => {
                if failed_dir == Some(dir) {
                    faults.restore_data_dir(dir).unwrap();
                    failed_dir = None;
                }
            }
            Step::TimePasses => {
                clock.advance(Duration::from_secs(31));
                faults.check_isr_now();
            }
            Step::Pause => thread::sleep(Duration::from_millis(3)),
        }
        pace.next_step();
    }

    // Heal: every directory back, every replica up and fetching.
    if let Some(dir) = failed_dir {
        faults.restore_data_dir(dir).unwrap();
    }
    let d = broker.describe_topic(T).unwrap();
    for part in &d.replicas {
        for r in &part.replicas {
            faults.resume_replica(T, part.partition, r.id).unwrap();
            faults
                .slow_replica(T, part.partition, r.id, Duration::ZERO)
                .unwrap();
            faults.restart_replica(T, part.partition, r.id).unwrap();
        }
    }
    pace.next_step();
    thread::sleep(Duration::from_millis(5));
    stop.store(true, Ordering::Relaxed);
    for t in producers
        .into_iter()
        .chain(std::iter::once(pipelined))
        .chain(consumers)
    {
        t.join()
            .map_err(|_| "a client thread panicked".to_string())?;
    }
    for p in 0..PARTITIONS {
        if !faults.wait_in_sync(T, p, Duration::from_secs(10)).unwrap() {
            return Err(format!(
                "partition {p} not in sync after healing: {:?}",
                broker.describe_topic(T).unwrap().replicas[p as usize]
            ));
        }
    }
    let h = history.lock().unwrap();
    let (acked, duplicates, finals) = check(&broker, &h, trims)?;
    if on_disk {
        broker.close().map_err(|e| format!("close: {e}"))?;
        drop(broker);
        let broker = open();
        let topic = broker.topic::<(), u64>(T).map_err(|e| e.to_string())?;
        for p in 0..PARTITIONS {
            if !faults_of(&broker)
                .wait_in_sync(T, p, Duration::from_secs(10))
                .unwrap()
            {
                return Err(format!(
                    "partition {p} not in sync after reopening: {:?}",
                    broker.describe_topic(T).unwrap().replicas[p as usize]
                ));
            }
            for v in topic.replica_logs(p).unwrap() {
                let log: Vec<u64> = v.records.iter().map(|r| r.3).collect();
                if v.log_start != 0 || finals.get(&p) != Some(&log) {
                    return Err(format!(
                        "partition {p}: replica {} reopened with {} records, {} before",
                        v.replica,
                        log.len(),
                        finals.get(&p).map_or(0, Vec::len)
                    ));
                }
            }
        }
        broker.close().map_err(|e| format!("close: {e}"))?;
    }
    let pipelined = h.acked.iter().filter(|a| a.2 >> 32 == PRODUCERS).count() as u64;
    if idempotent && duplicates > 0 {
        return Err(format!(
            "{duplicates} duplicates with the idempotent producer ({} retries after an append, {} answered as duplicates)",
            h.possible_duplicates, h.deduplicated
        ));
    }
    Ok(Outcome {
        acked,
        duplicates,
        pipelined,
        possible_duplicates: h.possible_duplicates,
        deduplicated: h.deduplicated,
    })
}

fn faults_of(broker: &Broker) -> logbus::replica::Faults {
    broker.faults()
}

/// Every partition's final log (values by offset).
type Finals = HashMap<u32, Vec<u64>>;

/// A partition's final log as far as memory keeps it: values from offset `start`.
struct Kept {
    start: u64,
    values: Vec<u64>,
}

impl Kept {
    /// The value at `offset`: `Ok(None)` below the start (gone by retention, unknowable).
    fn at(&self, offset: u64) -> Result<Option<u64>, ()> {
        if offset < self.start {
            return Ok(None);
        }
        let i = usize::try_from(offset - self.start).map_err(|_| ())?;
        self.values.get(i).copied().map(Some).ok_or(())
    }
}

/// The checker: returns (acknowledged records checked, duplicates) or what is wrong.
///
/// Memory keeps `records_in_memory` records a partition, so a long schedule moves log
/// starts past 0 (the leader drops records once below HW, a follower past its capacity).
/// Records below every replica's log start are gone by retention and are not checked;
/// every other one is, on every replica that keeps it. Unless `trims`, a moved log start
/// is an error: with the default memory the paced clients never fill a partition.
fn check(broker: &Broker, h: &History, trims: bool) -> Result<(u64, u64, Finals), String> {
    let topic = broker.topic::<(), u64>(T).unwrap();
    let mut duplicates = 0;
    let mut kept = HashMap::new();
    let mut finals = HashMap::new();
    for p in 0..PARTITIONS {
        let views = topic.replica_logs(p).unwrap();
        // The replica keeping the most records is the reference; every other one must hold
        // the same records (and epochs) at every offset it keeps, and the same end.
        let first = views.iter().min_by_key(|v| v.log_start).unwrap();
        let start = first.log_start;
        let end = start + first.records.len() as u64;
        for v in &views {
            let same = v.records.iter().all(|r| {
                r.0.checked_sub(start)
                    .and_then(|i| first.records.get(usize::try_from(i).ok()?))
                    .is_some_and(|f| (f.0, f.1, f.3) == (r.0, r.1, r.3))
            });
            if v.log_start + v.records.len() as u64 != end || !same {
                return Err(format!(
                    "partition {p}: replica {} differs from replica {}",
                    v.replica, first.replica
                ));
            }
        }
        let moved = views.iter().map(|v| v.log_start).max().unwrap_or(0);
        // With the default memory nothing may be trimmed: the paced clients write far
        // less than it holds.
        if !trims && moved != 0 {
            let spans: Vec<_> = views
                .iter()
                .map(|v| (v.replica, v.log_start, v.records.len()))
                .collect();
            return Err(format!(
                "partition {p}: log starts at {moved} (replica, start, records: {spans:?})"
            ));
        }
        let log: Vec<u64> = first.records.iter().map(|r| r.3).collect();
        // Order per producer: first occurrences increase by sequence number.
        let mut seen = HashSet::new();
        let mut last_seq: HashMap<u64, u64> = HashMap::new();
        for (&v, offset) in log.iter().zip(start..) {
            if !seen.insert(v) {
                duplicates += 1;
                continue;
            }
            let (producer, seq) = (v >> 32, v & 0xffff_ffff);
            if producer >= PRODUCERS {
                continue;
            }
            if let Some(prev) = last_seq.insert(producer, seq) {
                if prev >= seq {
                    return Err(format!(
                        "partition {p} offset {offset}: producer {producer} seq {seq} after {prev}"
                    ));
                }
            }
        }
        // Dense offsets: a plain reader from the start sees every offset up to HW.
        let hw = broker.describe_topic(T).unwrap().replicas[p as usize].high_watermark;
        if hw != end {
            return Err(format!("partition {p}: HW {hw} but log end {end}"));
        }
        let mut reader = broker
            .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
            .unwrap();
        reader.assign(&[TopicPartition::new(T, p)]).unwrap();
        let leader_start = reader_start(broker, p);
        let kept_p = Kept { start, values: log };
        let mut expect = leader_start;
        while expect < hw {
            let batch = reader.poll(Duration::from_secs(5)).unwrap();
            if batch.is_empty() {
                return Err(format!("partition {p}: reader stuck at {expect} < HW {hw}"));
            }
            for r in batch.iter() {
                let agrees = match kept_p.at(expect) {
                    Ok(want) => want.is_none_or(|v| v == r.value),
                    Err(()) => false,
                };
                if r.offset != expect || !agrees {
                    return Err(format!(
                        "partition {p}: reader got offset {} value {} expecting offset {expect}",
                        r.offset, r.value
                    ));
                }
                expect += 1;
            }
        }
        if start == 0 {
            finals.insert(p, kept_p.values.clone());
        }
        kept.insert(p, kept_p);
    }
    let mut checked = 0;
    for &(p, offset, v) in &h.acked {
        match kept[&p].at(offset) {
            Ok(None) => {}
            Ok(Some(got)) if got == v => checked += 1,
            got => {
                return Err(format!(
                    "acknowledged record {v:#x} at {p}/{offset} lost (final: {got:?})"
                ))
            }
        }
    }
    for &(p, offset, v) in &h.read {
        match kept[&p].at(offset) {
            Ok(None) => {}
            Ok(Some(got)) if got == v => {}
            _ => {
                return Err(format!(
                    "read record {v:#x} at {p}/{offset} was later truncated"
                ))
            }
        }
    }
    if duplicates > h.possible_duplicates {
        return Err(format!(
            "{duplicates} duplicates but only {} retries after an append",
            h.possible_duplicates
        ));
    }
    Ok((checked, duplicates, finals))
}

/// Where a reader from the earliest offset starts: the leader's log start.
fn reader_start(broker: &Broker, p: u32) -> u64 {
    let d = broker.describe_topic(T).unwrap();
    let part = &d.replicas[p as usize];
    part.replicas
        .iter()
        .find(|r| Some(r.id) == part.leader)
        .map_or(0, |r| r.log_start)
}

#[test]
fn random_fault_schedules_keep_kafkas_guarantees() {
    schedules(false, 200, MEMORY, "");
}

#[test]
fn random_fault_schedules_keep_kafkas_guarantees_on_disk() {
    schedules(true, 50, MEMORY, "_on_disk");
}

/// Retention under faults: memory holds fewer records than a schedule writes, so leaders
/// drop records below HW and followers too far behind start over at the leader's log start.
#[test]
fn random_fault_schedules_keep_kafkas_guarantees_with_little_memory() {
    schedules(false, 50, SMALL_MEMORY, "_with_little_memory");
}

fn schedules(on_disk: bool, default: u64, memory: usize, suffix: &str) {
    let seeds: Vec<u64> = match std::env::var("LOGBUS_JEPSEN_SEED") {
        Ok(s) => vec![s.parse().expect("LOGBUS_JEPSEN_SEED is a number")],
        Err(_) => {
            let n = std::env::var("LOGBUS_JEPSEN_SCHEDULES")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(default);
            (0..n).collect()
        }
    };
    let mut failures = Vec::new();
    // [idempotent, plain]: the same schedules with the producers idempotent, then not.
    let mut totals = [Outcome::default(); 2];
    for &seed in &seeds {
        for (k, idempotent) in [true, false].into_iter().enumerate() {
            let outcome = catch_unwind(AssertUnwindSafe(|| run(seed, on_disk, memory, idempotent)))
                .unwrap_or_else(|_| Err("panicked".to_string()));
            match outcome {
                Ok(o) => {
                    let t = &mut totals[k];
                    t.acked += o.acked;
                    t.duplicates += o.duplicates;
                    t.pipelined += o.pipelined;
                    t.possible_duplicates += o.possible_duplicates;
                    t.deduplicated += o.deduplicated;
                }
                Err(why) => {
                    eprintln!(
                        "seed {seed} ({}) failed: {why}\n  schedule: {:?}\n  replay: LOGBUS_JEPSEN_SEED={seed} cargo test --test replicas -- --exact replicas_jepsen::random_fault_schedules_keep_kafkas_guarantees{suffix}",
                        if idempotent { "idempotent" } else { "not idempotent" },
                        schedule(seed),
                    );
                    failures.push(seed);
                }
            }
        }
    }
    let [idem, plain] = totals;
    eprintln!(
        "{} schedules, idempotent producers: {} acknowledged records checked ({} acknowledged to send_async), {} duplicates; {} retries after an append, {} answered by the leader as duplicates",
        seeds.len(),
        idem.acked,
        idem.pipelined,
        idem.duplicates,
        idem.possible_duplicates,
        idem.deduplicated,
    );
    eprintln!(
        "{} schedules, the same without idempotence: {} acknowledged records checked, {} duplicates from retries ({} retries after an append)",
        seeds.len(),
        plain.acked,
        plain.duplicates,
        plain.possible_duplicates,
    );
    assert_eq!(
        idem.duplicates, 0,
        "the idempotent producer left duplicates"
    );
    let (acked, pipelined) = (
        idem.acked.min(plain.acked),
        idem.pipelined.min(plain.pipelined),
    );
    assert!(acked > 0, "no send was ever acknowledged");
    assert!(pipelined > 0, "no send_async was ever acknowledged");
    assert!(failures.is_empty(), "failing seeds: {failures:?}");
}
