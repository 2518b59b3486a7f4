//! The history checker on a durable broker with three data directories (replication factor
//! 3, `min_insync_replicas` 2), where the fault schedule restarts the whole broker — the
//! coordinator replays its transaction log and every replica rebuilds its transaction state
//! from disk, possibly with a transaction open (the next `init_transactions` aborts it) —
//! and crashes leaders, stalls followers (time passes: they leave the ISR) and restarts
//! replicas between the worker's steps. One thread runs worker steps and faults in the order
//! of the seed, so a seed replays exactly. Same checks as `txn_checker` (its `check`), plus
//! the group's offsets against the committed output after every restart.
//!
//! `LOGBUS_TXN_DURABLE_SCHEDULES=n` (default 30), `LOGBUS_TXN_DURABLE_SEED=s`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use logbus::consumer::{ConsumerConfig, IsolationLevel, OffsetReset};
use logbus::persist::PersistConfig;
use logbus::producer::{ProducerConfig, Record};
use logbus::{Broker, Consumer, ManualClock, Producer, TopicConfig, TopicPartition};

use super::txn_checker::{
    check, check_offsets_match_output, heal, retriable, tps, History, Outcome, Shared, GHOST,
    INPUTS, PARTITIONS, SCALE,
};
use super::{assert_no_violations, seeds};

const REPLICAS: u32 = 3;

fn open(dirs: &[tempfile::TempDir], clock: &Arc<ManualClock>, create: bool) -> Broker {
    let b = Broker::builder()
        .data_dirs(dirs.iter().map(|d| d.path().to_path_buf()))
        .create(create)
        .clock(clock.clone())
        .open()
        .unwrap();
    if create {
        for t in ["in", "out"] {
            b.create_topic::<(), u64>(
                t,
                TopicConfig::new(PARTITIONS)
                    .replication_factor(REPLICAS)
                    .min_insync_replicas(2)
                    .persist(PersistConfig::new()),
            )
            .unwrap();
        }
    } else {
        for t in ["in", "out"] {
            b.topic::<(), u64>(t).unwrap();
        }
    }
    b
}

struct Worker {
    producer: Producer<(), u64>,
    consumer: Consumer<(), u64>,
}

/// Heals every replica and waits until each partition's ISR is whole again: what an operator
/// does when a partition has too few in-sync replicas to take writes.
fn recover(broker: &Broker) {
    heal(broker);
    for t in ["in", "out"] {
        for p in 0..PARTITIONS {
            let synced = broker
                .faults()
                .wait_in_sync(t, p, Duration::from_secs(10))
                .unwrap();
            assert!(
                synced,
                "{t}-{p}: the replicas did not catch up after healing"
            );
        }
    }
}

fn worker(broker: &Broker, history: &Shared) -> Worker {
    let producer = broker
        .producer_with_config::<(), u64>(
            ProducerConfig::new()
                .transactional_id("worker")
                .request_timeout(Duration::from_millis(500))
                .delivery_timeout(Duration::from_secs(1)),
        )
        .unwrap();
    // Its markers (aborting what the last worker left open) need the in-sync replicas.
    while let Err(e) = producer.init_transactions() {
        assert!(retriable(&e), "init_transactions: {e}");
        recover(broker);
    }
    check_offsets_match_output(broker, history);
    let mut consumer = broker
        .consumer::<(), u64>(
            ConsumerConfig::new()
                .group_id("g")
                .auto_offset_reset(OffsetReset::Earliest)
                .isolation_level(IsolationLevel::ReadCommitted)
                .max_poll_records(3),
        )
        .unwrap();
    consumer.assign(&tps("in")).unwrap();
    Worker { producer, consumer }
}

fn committed_all(broker: &Broker) -> bool {
    let probe = broker
        .consumer::<(), u64>(ConsumerConfig::new().group_id("g"))
        .unwrap();
    tps("in")
        .iter()
        .all(|tp| probe.committed(tp).unwrap().unwrap_or(0) == INPUTS / PARTITIONS as u64)
}

/// One transaction of the worker; `crash`: it stops mid-way (the producer becomes a zombie).
fn step(w: &mut Worker, h: &Shared, crash: bool, abort: bool) -> bool {
    let id = h
        .lock()
        .unwrap()
        .begin_attempt(w.producer.transaction_ids().unwrap());
    let set = |o: Outcome| h.lock().unwrap().attempts[id].outcome = o;
    w.producer.begin_transaction().unwrap();
    let values: Vec<u64> = w
        .consumer
        .poll(Duration::from_millis(20))
        .map(|got| got.iter().map(|r| r.value).collect())
        .unwrap_or_default();
    let mut ok = true;
    for value in values {
        let v = value * SCALE + id as u64;
        let part = (value % PARTITIONS as u64) as u32;
        h.lock().unwrap().attempts[id].partitions.insert(part);
        match w.producer.send(Record::new("out", v).partition(part)) {
            Ok(_) => h.lock().unwrap().attempts[id].acked.push(v),
            Err(_) => {
                h.lock().unwrap().attempts[id].failed.push(v);
                ok = false;
                break;
            }
        }
    }
    if crash {
        set(Outcome::Crashed);
        return false;
    }
    let offsets: Vec<_> = tps("in")
        .into_iter()
        .filter_map(|tp| w.consumer.position(&tp).ok().map(|p| (tp, p)))
        .collect();
    ok = ok
        && w.producer
            .send_offsets_to_transaction(&offsets, "g")
            .is_ok();
    if ok && !abort {
        h.lock().unwrap().attempts[id].commit_started = true;
        match w.producer.commit_transaction() {
            Ok(()) => set(Outcome::Committed),
            Err(_) => {
                set(Outcome::Unknown);
                return false;
            }
        }
    } else {
        match w.producer.abort_transaction() {
            Ok(()) => set(Outcome::Aborted),
            Err(_) => {
                set(Outcome::Crashed);
                return false;
            }
        }
    }
    // Rewind to the committed offsets (after an abort; a no-op after a commit).
    for tp in tps("in") {
        let c = w.consumer.committed(&tp).unwrap().unwrap_or(0);
        w.consumer.seek(&tp, c).unwrap();
    }
    true
}

fn run(seed: u64) -> Vec<String> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let dirs: Vec<_> = (0..REPLICAS)
        .map(|_| tempfile::tempdir().unwrap())
        .collect();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let mut broker = open(&dirs, &clock, true);
    let input = broker.producer::<(), u64>();
    for v in 0..INPUTS {
        input
            .send(Record::new("in", v).partition((v % PARTITIONS as u64) as u32))
            .unwrap();
    }
    drop(input);
    let history: Shared = Arc::new(Mutex::new(History::default()));
    let mut w = worker(&broker, &history);
    let mut zombies: Vec<Producer<(), u64>> = Vec::new();
    let mut steps = 0;
    while !committed_all(&broker) {
        steps += 1;
        if steps >= 200 {
            let h = history.lock().unwrap();
            let summary: Vec<_> = h
                .attempts
                .iter()
                .map(|a| (a.outcome, a.acked.len(), a.failed.len()))
                .collect();
            panic!("seed {seed}: the worker did not finish: {summary:?}");
        }
        match rng.u8(..13) {
            // A leader crash, while another in-sync replica can take over (no unclean
            // election); a follower stall, long enough to leave the ISR; replicas back.
            10 | 11 => {
                let t = if rng.bool() { "in" } else { "out" };
                let p = rng.u32(..PARTITIONS);
                let d = broker.describe_topic(t).unwrap();
                let part = &d.replicas[p as usize];
                let faults = broker.faults();
                if rng.bool() {
                    if let (Some(l), true) = (part.leader, part.isr.len() > 1) {
                        faults.crash_replica(t, p, l).unwrap();
                        count("leader crashes");
                    }
                } else {
                    let id = part.replicas[rng.usize(..part.replicas.len())].id;
                    if part.leader != Some(id) {
                        faults.stall_replica(t, p, id).unwrap();
                        clock.advance(Duration::from_secs(31));
                        faults.check_isr_now();
                        count("follower stalls");
                    }
                }
            }
            12 => heal(&broker),
            // A broker restart (the coordinator's too), maybe with a transaction open.
            0 | 1 => {
                if rng.bool() {
                    step(&mut w, &history, true, false);
                }
                count("broker restarts");
                zombies.clear();
                drop(w);
                broker.close().unwrap();
                broker = open(&dirs, &clock, false);
                w = worker(&broker, &history);
            }
            2 | 3 => {
                let past = history
                    .lock()
                    .unwrap()
                    .attempts
                    .iter()
                    .rev()
                    .find(|a| a.outcome != Outcome::Open)
                    .map(|a| a.ids);
                if let Some((pid, epoch)) = past {
                    let tp = TopicPartition::new("out", rng.u32(..PARTITIONS));
                    let _ = broker.deliver_delayed_marker(&tp, pid, epoch, rng.bool());
                }
            }
            4 => {
                if let Some(z) = zombies.last() {
                    if z.send(Record::new("out", GHOST * SCALE).partition(0))
                        .is_ok()
                        || z.commit_transaction().is_ok()
                    {
                        history
                            .lock()
                            .unwrap()
                            .violations
                            .push("a zombie was not fenced".into());
                    }
                }
            }
            k => {
                let crash = k == 5;
                if !step(&mut w, &history, crash, k == 6) {
                    let old = std::mem::replace(&mut w, worker(&broker, &history));
                    zombies.push(old.producer);
                }
            }
        }
    }
    drop((w, zombies));
    let h = history.lock().unwrap();
    for a in &h.attempts {
        count(&format!("{:?}", a.outcome));
    }
    let found = check(&broker, &h);
    drop(h);
    broker.close().unwrap();
    found
}

/// Faults and outcomes over the run, printed at the end (to see that the faults bite).
static STATS: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());

fn count(what: &str) {
    *STATS.lock().unwrap().entry(what.to_owned()).or_insert(0) += 1;
}

#[test]
fn transactions_keep_their_guarantees_across_broker_restarts() {
    for seed in seeds(
        "LOGBUS_TXN_DURABLE_SEED",
        "LOGBUS_TXN_DURABLE_SCHEDULES",
        30,
    ) {
        assert_no_violations(
            seed,
            "LOGBUS_TXN_DURABLE_SEED",
            "txn_checker_durable",
            run(seed),
        );
    }
    eprintln!(
        "faults and transaction outcomes: {:?}",
        STATS.lock().unwrap()
    );
}
