//! A history checker for transactions under random fault schedules: a
//! consume-transform-produce worker (a transactional producer and a read-committed
//! consumer in group `g`) copies every record of topic `in` to topic `out` in
//! transactions, sending its input offsets to each transaction, while a fault thread runs
//! a schedule: leader crashes (and elections), follower stalls, time passing (ISR shrinks,
//! transaction timeouts: aborted by the coordinator's own thread, or found by a call),
//! delayed markers of past transactions; the worker itself crashes mid-transaction
//! (dropped, restarted with the same transactional id: the old producer stays as a zombie
//! that keeps trying), and delayed sends of past transactions arrive.
//! A read-committed reader polls `out` throughout. RF 3, `min_insync_replicas` 2.
//!
//! From the recorded history (every attempt's sends and how it ended, every read):
//! - **no aborted read**: no record of an aborted or crashed attempt is in the committed
//!   output, nor was ever read by the read-committed reader;
//! - **no lost write**: every record of an attempt whose commit returned `Ok` is in the
//!   committed output;
//! - **no torn transaction**: each attempt's records are in the output all or none, and
//!   at every worker restart the group's committed offsets are exactly the inputs whose
//!   output is committed (offsets and output commit together);
//! - **no read past the LSO**: the reader never returned a record of an attempt before its
//!   commit began, and every record it read is in the final log at that offset;
//! - **exactly once**: every input record appears exactly once in the committed output.
//!
//! `LOGBUS_TXN_SCHEDULES=n` runs n schedules (default 300); `LOGBUS_TXN_SEED=s` runs the
//! one of seed `s` (a failing seed is printed). A seed fixes the fault schedule and the
//! worker's choices; thread timing is not replayed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use logbus::consumer::{ConsumerConfig, IsolationLevel, OffsetReset};
use logbus::producer::{ProducerConfig, Record};
use logbus::{Broker, Consumer, Error, ManualClock, Producer, TopicConfig, TopicPartition};

use super::{assert_no_violations, seeds};

pub(crate) const INPUTS: u64 = 24;
pub(crate) const PARTITIONS: u32 = 2;
/// Output value: input * SCALE + attempt.
pub(crate) const SCALE: u64 = 1_000_000;
/// An input that does not exist: the value of delayed sends (never to be committed).
pub(crate) const GHOST: u64 = 999_999;
const TXN_TIMEOUT: Duration = Duration::from_secs(100);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Open,
    Committed,
    Aborted,
    /// Crashed before its commit began: `init_transactions` of the next worker aborts it.
    Crashed,
    /// Its commit began and did not return `Ok` (the next `init_transactions` finishes it).
    Unknown,
}

#[derive(Debug)]
pub(crate) struct Attempt {
    /// Values whose send returned `Ok`.
    pub(crate) acked: Vec<u64>,
    /// Values whose send failed (in the log or not).
    pub(crate) failed: Vec<u64>,
    pub(crate) partitions: HashSet<u32>,
    pub(crate) ids: (i64, i16),
    pub(crate) outcome: Outcome,
    pub(crate) commit_started: bool,
}

#[derive(Default)]
pub(crate) struct History {
    pub(crate) attempts: Vec<Attempt>,
    /// Reads of the read-committed reader: (partition, offset, value).
    pub(crate) reads: Vec<(u32, u64, u64)>,
    pub(crate) violations: Vec<String>,
}

impl History {
    /// Records a new attempt of the producer at `ids`, open: its index.
    pub(crate) fn begin_attempt(&mut self, ids: (i64, i16)) -> usize {
        self.attempts.push(Attempt {
            acked: Vec::new(),
            failed: Vec::new(),
            partitions: HashSet::new(),
            ids,
            outcome: Outcome::Open,
            commit_started: false,
        });
        self.attempts.len() - 1
    }
}

pub(crate) type Shared = Arc<Mutex<History>>;

fn attempt_of(v: u64) -> usize {
    (v % SCALE) as usize
}

struct Input {
    value: u64,
}

struct Worker {
    producer: Producer<(), u64>,
    consumer: Consumer<(), u64>,
}

pub(crate) fn tps(topic: &str) -> Vec<TopicPartition> {
    (0..PARTITIONS)
        .map(|p| TopicPartition::new(topic, p))
        .collect()
}

/// Retries `f` while the cluster is degraded (the fault thread heals it).
fn retry<T>(deadline: Instant, mut f: impl FnMut() -> logbus::Result<T>) -> logbus::Result<T> {
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() < deadline && retriable(&e) => {
                thread::sleep(Duration::from_millis(1))
            }
            Err(e) => return Err(e),
        }
    }
}

pub(crate) fn retriable(e: &Error) -> bool {
    matches!(
        e,
        Error::NotEnoughReplicas { .. }
            | Error::NotEnoughReplicasAfterAppend { .. }
            | Error::LeaderNotAvailable { .. }
            | Error::NotLeader { .. }
            | Error::Timeout { .. }
    )
}

fn start_worker(broker: &Broker, history: &Shared, deadline: Instant) -> Worker {
    let producer = broker
        .producer_with_config::<(), u64>(
            ProducerConfig::new()
                .transactional_id("worker")
                .transaction_timeout(TXN_TIMEOUT)
                .request_timeout(Duration::from_millis(300))
                .delivery_timeout(Duration::from_millis(600)),
        )
        .unwrap();
    retry(deadline, || producer.init_transactions()).expect("init_transactions");
    check_offsets_match_output(broker, history);
    let mut consumer = broker
        .consumer::<(), u64>(
            ConsumerConfig::new()
                .group_id("g")
                .auto_offset_reset(OffsetReset::Earliest)
                .isolation_level(IsolationLevel::ReadCommitted)
                .max_poll_records(4),
        )
        .unwrap();
    consumer.assign(&tps("in")).unwrap();
    Worker { producer, consumer }
}

/// Committed output of `out`, read-committed from the start: (partition, offset, value).
fn committed_output(broker: &Broker) -> Vec<(u32, u64, u64)> {
    let mut c = broker
        .consumer::<(), u64>(
            ConsumerConfig::new()
                .auto_offset_reset(OffsetReset::Earliest)
                .isolation_level(IsolationLevel::ReadCommitted),
        )
        .unwrap();
    c.assign(&tps("out")).unwrap();
    let mut out = Vec::new();
    let mut empty = 0;
    while empty < 3 {
        match c.poll(Duration::from_millis(5)) {
            Ok(got) if got.is_empty() => empty += 1,
            Ok(got) => {
                empty = 0;
                out.extend(got.iter().map(|r| (r.partition, r.offset, r.value)));
            }
            Err(_) => empty += 1,
        }
    }
    out
}

/// After `init_transactions`: the group's offsets are exactly the inputs whose output is
/// committed (atomic offsets and output).
pub(crate) fn check_offsets_match_output(broker: &Broker, history: &Shared) {
    let probe = broker
        .consumer::<(), u64>(ConsumerConfig::new().group_id("g"))
        .unwrap();
    let mut expected = HashSet::new();
    for tp in tps("in") {
        let c = probe.committed(&tp).unwrap().unwrap_or(0);
        // Input value v is at offset v / PARTITIONS of partition v % PARTITIONS.
        for off in 0..c {
            expected.insert(off * PARTITIONS as u64 + tp.partition as u64);
        }
    }
    let got: HashSet<u64> = committed_output(broker)
        .iter()
        .map(|&(_, _, v)| v / SCALE)
        .collect();
    if got != expected {
        history.lock().unwrap().violations.push(format!(
            "torn: committed offsets cover inputs {:?}, committed output has {:?}",
            sorted(&expected),
            sorted(&got)
        ));
    }
}

fn sorted(s: &HashSet<u64>) -> Vec<u64> {
    let mut v: Vec<_> = s.iter().copied().collect();
    v.sort_unstable();
    v
}

/// The worker: transactions until the group committed every input.
fn run_worker(broker: Broker, history: Shared, seed: u64, stop_faults: Arc<AtomicBool>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x5eed);
    let mut w = start_worker(&broker, &history, deadline);
    let mut zombies: Vec<Producer<(), u64>> = Vec::new();
    let probe = broker
        .consumer::<(), u64>(ConsumerConfig::new().group_id("g"))
        .unwrap();
    loop {
        assert!(
            Instant::now() < deadline,
            "seed {seed}: the worker did not finish"
        );
        let done = tps("in")
            .iter()
            .all(|tp| probe.committed(tp).unwrap().unwrap_or(0) == INPUTS / PARTITIONS as u64);
        if done {
            break;
        }
        // A zombie tries to go on: it must be fenced.
        if let Some(z) = zombies.last() {
            if rng.u8(..4) == 0 {
                let v = GHOST * SCALE;
                if z.send(Record::new("out", v).partition(0)).is_ok() {
                    history
                        .lock()
                        .unwrap()
                        .violations
                        .push("a zombie's send was accepted".into());
                }
                if z.commit_transaction().is_ok() {
                    history
                        .lock()
                        .unwrap()
                        .violations
                        .push("a zombie committed".into());
                }
            }
        }
        // A delayed send of a past transaction arrives.
        if rng.u8(..6) == 0 {
            let past = {
                let h = history.lock().unwrap();
                let done: Vec<_> = h
                    .attempts
                    .iter()
                    .filter(|a| a.outcome != Outcome::Open && !a.partitions.is_empty())
                    .map(|a| (a.ids, a.partitions.iter().copied().next().unwrap()))
                    .collect();
                (!done.is_empty()).then(|| done[rng.usize(..done.len())])
            };
            if let Some(((pid, epoch), part)) = past {
                if w.producer.transaction_ids().map(|i| i.0) == Some(pid) {
                    let r = Record::new("out", GHOST * SCALE).partition(part);
                    if w.producer.deliver_delayed_send(r, epoch).is_ok() {
                        history.lock().unwrap().violations.push(format!(
                            "a delayed send at epoch {epoch} was accepted on out-{part}"
                        ));
                    }
                }
            }
        }
        let id = history
            .lock()
            .unwrap()
            .begin_attempt(w.producer.transaction_ids().unwrap());
        let set = |o: Outcome| history.lock().unwrap().attempts[id].outcome = o;
        if let Err(e) = w.producer.begin_transaction() {
            panic!("seed {seed}: begin_transaction: {e}");
        }
        let records: Vec<u64> = match w.consumer.poll(Duration::from_millis(2)) {
            Ok(got) => got.iter().map(|r| r.value).collect(),
            Err(_) => Vec::new(),
        };
        let mut ok = true;
        for value in records {
            // Transactions span fault steps (the fault thread steps every 2 ms).
            thread::sleep(Duration::from_micros(rng.u64(200..1500)));
            let r = Input { value };
            let v = r.value * SCALE + id as u64;
            let part = (r.value % PARTITIONS as u64) as u32;
            history.lock().unwrap().attempts[id].partitions.insert(part);
            match w.producer.send(Record::new("out", v).partition(part)) {
                Ok(_) => history.lock().unwrap().attempts[id].acked.push(v),
                Err(_) => {
                    history.lock().unwrap().attempts[id].failed.push(v);
                    ok = false;
                    break;
                }
            }
        }
        // A crash mid-transaction: the producer lives on as a zombie.
        if rng.u8(..8) == 0 {
            set(Outcome::Crashed);
            let Worker { producer, consumer } = w;
            drop(consumer);
            zombies.push(producer);
            w = start_worker(&broker, &history, deadline);
            continue;
        }
        if ok {
            let offsets: Vec<_> = tps("in")
                .into_iter()
                .filter_map(|tp| w.consumer.position(&tp).ok().map(|p| (tp, p)))
                .collect();
            ok = w
                .producer
                .send_offsets_to_transaction(&offsets, "g")
                .is_ok();
        }
        let rewind = |w: &mut Worker| {
            for tp in tps("in") {
                let c = probe.committed(&tp).unwrap().unwrap_or(0);
                w.consumer.seek(&tp, c).unwrap();
            }
        };
        thread::sleep(Duration::from_micros(rng.u64(0..1500)));
        if ok {
            history.lock().unwrap().attempts[id].commit_started = true;
            match retry(
                deadline.min(Instant::now() + Duration::from_secs(2)),
                || w.producer.commit_transaction(),
            ) {
                Ok(()) => set(Outcome::Committed),
                Err(Error::TransactionTimedOut { .. }) => {
                    set(Outcome::Aborted);
                    rewind(&mut w);
                }
                Err(_) => {
                    set(Outcome::Unknown);
                    w = start_worker(&broker, &history, deadline);
                }
            }
        } else {
            match retry(
                deadline.min(Instant::now() + Duration::from_secs(2)),
                || w.producer.abort_transaction(),
            ) {
                Ok(()) => {
                    set(Outcome::Aborted);
                    rewind(&mut w);
                }
                Err(_) => {
                    // Aborted either way: the next init_transactions aborts it.
                    set(Outcome::Crashed);
                    w = start_worker(&broker, &history, deadline);
                }
            }
        }
    }
    stop_faults.store(true, Ordering::SeqCst);
}

/// The read-committed reader, polling `out` until `stop`.
fn run_reader(broker: Broker, history: Shared, stop: Arc<AtomicBool>) {
    let mut c = broker
        .consumer::<(), u64>(
            ConsumerConfig::new()
                .auto_offset_reset(OffsetReset::Earliest)
                .isolation_level(IsolationLevel::ReadCommitted),
        )
        .unwrap();
    c.assign(&tps("out")).unwrap();
    while !stop.load(Ordering::SeqCst) {
        let Ok(got) = c.poll(Duration::from_millis(1)) else {
            continue;
        };
        let mut h = history.lock().unwrap();
        for r in got.iter() {
            let a = attempt_of(r.value);
            let started = h.attempts.get(a).is_some_and(|a| a.commit_started);
            if !started || r.value / SCALE == GHOST {
                h.violations.push(format!(
                    "read past the LSO: out-{} offset {} value {} before its commit began",
                    r.partition, r.offset, r.value
                ));
            }
            h.reads.push((r.partition, r.offset, r.value));
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    CrashLeader(&'static str, u32),
    RestartAll,
    Stall(&'static str, u32, usize),
    ResumeAll,
    TimePasses,
    /// The clock moves past the transaction timeout; with `true`, the fault thread then
    /// calls the coordinator (`describe_transactions`), with `false` only the
    /// coordinator's own timeout thread aborts the open transaction.
    TxnTimeout(bool),
    DelayedMarker(u32, bool),
    Pause,
}

fn schedule(seed: u64) -> Vec<Fault> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let topic = |rng: &mut fastrand::Rng| if rng.bool() { "in" } else { "out" };
    (0..12)
        .map(|_| match rng.u8(..9) {
            0 | 1 => Fault::CrashLeader(topic(&mut rng), rng.u32(..PARTITIONS)),
            2 => Fault::RestartAll,
            3 => Fault::Stall(topic(&mut rng), rng.u32(..PARTITIONS), rng.usize(..3)),
            4 => Fault::ResumeAll,
            5 => Fault::TimePasses,
            6 => Fault::TxnTimeout(rng.bool()),
            7 => Fault::DelayedMarker(rng.u32(..PARTITIONS), rng.bool()),
            _ => Fault::Pause,
        })
        .collect()
}

pub(crate) fn heal(broker: &Broker) {
    let faults = broker.faults();
    for t in ["in", "out"] {
        let d = broker.describe_topic(t).unwrap();
        for part in &d.replicas {
            for r in &part.replicas {
                faults.resume_replica(t, part.partition, r.id).unwrap();
                faults.restart_replica(t, part.partition, r.id).unwrap();
            }
        }
    }
}

fn run_schedule(seed: u64) -> Vec<String> {
    let clock = Arc::new(ManualClock::new(1_000_000));
    // A short cleanup interval: the coordinator's own timeout aborts race the worker.
    let broker = Broker::builder()
        .clock(clock.clone())
        .transaction_abort_timed_out_transaction_cleanup_interval(Duration::from_millis(1))
        .build()
        .unwrap();
    for t in ["in", "out"] {
        broker
            .create_topic::<(), u64>(
                t,
                TopicConfig::new(PARTITIONS)
                    .replication_factor(3)
                    .min_insync_replicas(2),
            )
            .unwrap();
    }
    let input = broker.producer::<(), u64>();
    for v in 0..INPUTS {
        let meta = input
            .send(Record::new("in", v).partition((v % PARTITIONS as u64) as u32))
            .unwrap();
        assert_eq!(meta.offset, v / PARTITIONS as u64);
    }
    let history: Shared = Arc::default();
    let stop_faults = Arc::new(AtomicBool::new(false));
    let stop_reader = Arc::new(AtomicBool::new(false));
    let worker = {
        let (b, h, s) = (broker.clone(), history.clone(), stop_faults.clone());
        thread::spawn(move || run_worker(b, h, seed, s))
    };
    let reader = {
        let (b, h, s) = (broker.clone(), history.clone(), stop_reader.clone());
        thread::spawn(move || run_reader(b, h, s))
    };
    let faults = broker.faults();
    for step in schedule(seed) {
        if stop_faults.load(Ordering::SeqCst) {
            break;
        }
        thread::sleep(Duration::from_millis(2));
        match step {
            Fault::CrashLeader(t, p) => {
                let d = broker.describe_topic(t).unwrap();
                let part = &d.replicas[p as usize];
                // Only while another in-sync replica can take over (no unclean election).
                let others = part.isr.len() > 1;
                if let (Some(l), true) = (part.leader, others) {
                    faults.crash_replica(t, p, l).unwrap();
                }
            }
            Fault::RestartAll | Fault::ResumeAll => heal(&broker),
            Fault::Stall(t, p, r) => {
                let d = broker.describe_topic(t).unwrap();
                let part = &d.replicas[p as usize];
                let id = part.replicas[r].id;
                if part.leader != Some(id) {
                    faults.stall_replica(t, p, id).unwrap();
                }
            }
            Fault::TimePasses => {
                clock.advance(Duration::from_secs(31));
                faults.check_isr_now();
            }
            Fault::TxnTimeout(call) => {
                clock.advance(TXN_TIMEOUT + Duration::from_secs(1));
                faults.check_isr_now();
                if call {
                    broker.describe_transactions();
                }
            }
            Fault::DelayedMarker(p, commit) => {
                let past = {
                    let h = history.lock().unwrap();
                    h.attempts
                        .iter()
                        .rev()
                        .skip(1)
                        .find(|a| a.outcome != Outcome::Open)
                        .map(|a| a.ids)
                };
                if let Some((pid, epoch)) = past {
                    let tp = TopicPartition::new("out", p);
                    let _ = broker.deliver_delayed_marker(&tp, pid, epoch, commit);
                }
            }
            Fault::Pause => thread::sleep(Duration::from_millis(3)),
        }
    }
    // Heal, and let time pass so that the ISR regrows.
    let healer = {
        let (b, c, s) = (broker.clone(), clock.clone(), stop_faults.clone());
        thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                heal(&b);
                c.advance(Duration::from_secs(1));
                b.faults().check_isr_now();
                thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let worker_result = worker.join();
    stop_faults.store(true, Ordering::SeqCst);
    healer.join().unwrap();
    thread::sleep(Duration::from_millis(5));
    stop_reader.store(true, Ordering::SeqCst);
    reader.join().unwrap();
    if let Err(e) = worker_result {
        std::panic::resume_unwind(e);
    }
    let h = history.lock().unwrap();
    let found = check(&broker, &h);
    let mut stats = STATS.lock().unwrap();
    for a in &h.attempts {
        *stats.entry(format!("{:?}", a.outcome)).or_insert(0) += 1;
    }
    *stats.entry("reads".into()).or_insert(0) += h.reads.len();
    drop(h);
    found
}

/// Outcomes over the run, printed at the end (to see that the faults bite).
static STATS: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());

pub(crate) fn check(broker: &Broker, h: &History) -> Vec<String> {
    let mut v = h.violations.clone();
    let output = committed_output(broker);
    let at: HashMap<(u32, u64), u64> = output.iter().map(|&(p, o, x)| ((p, o), x)).collect();
    let present: HashSet<u64> = output.iter().map(|&(_, _, x)| x).collect();
    // Exactly once.
    let mut inputs: BTreeMap<u64, usize> = BTreeMap::new();
    for &(_, _, x) in &output {
        *inputs.entry(x / SCALE).or_default() += 1;
    }
    for i in 0..INPUTS {
        match inputs.get(&i) {
            Some(1) => {}
            n => v.push(format!("input {i} is in the committed output {n:?} times")),
        }
    }
    if let Some(extra) = inputs.keys().find(|&&i| i >= INPUTS) {
        v.push(format!(
            "committed output holds a record of no input ({extra})"
        ));
    }
    for (id, a) in h.attempts.iter().enumerate() {
        let n = a.acked.iter().filter(|x| present.contains(x)).count()
            + a.failed.iter().filter(|x| present.contains(x)).count();
        match a.outcome {
            Outcome::Committed if a.acked.iter().any(|x| !present.contains(x)) => v.push(format!(
                "lost write: attempt {id} committed, records missing"
            )),
            Outcome::Aborted | Outcome::Crashed if n > 0 => v.push(format!(
                "aborted read: {n} records of attempt {id} ({:?}) are committed",
                a.outcome
            )),
            Outcome::Unknown if n != 0 && n != a.acked.len() => v.push(format!(
                "torn transaction: attempt {id} has {n} of {}",
                a.acked.len()
            )),
            _ => {}
        }
    }
    for &(p, o, x) in &h.reads {
        if at.get(&(p, o)) != Some(&x) {
            v.push(format!(
                "the reader read out-{p} offset {o} = {x}, not in the final committed log"
            ));
        }
    }
    v
}

#[test]
fn transactions_keep_their_guarantees_under_random_fault_schedules() {
    for seed in seeds("LOGBUS_TXN_SEED", "LOGBUS_TXN_SCHEDULES", 300) {
        assert_no_violations(seed, "LOGBUS_TXN_SEED", "txn_checker", run_schedule(seed));
    }
    eprintln!(
        "transaction attempts and reads: {:?}",
        STATS.lock().unwrap()
    );
}
