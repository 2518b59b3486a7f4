//! The coordinator aborts a transaction past its timeout on its own (Kafka's
//! `abortTimedOutTransactions`): no producer, consumer or admin call on the coordinator is
//! needed for read-committed consumers to move past a transaction whose producer died.
//!
//! Time is a `ManualClock`; the cleanup interval is short real time, and each test waits
//! for an observable state with a generous deadline (no timing assertion).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use logbus::broker::{BrokerBuilder, TxnState};
use logbus::consumer::{ConsumerConfig, IsolationLevel, OffsetReset};
use logbus::persist::PersistConfig;
use logbus::producer::{ProducerConfig, Record};
use logbus::{Broker, Consumer, Error, ManualClock, Producer, TopicConfig, TopicPartition};

const TIMEOUT: Duration = Duration::from_secs(5);
/// How long a test waits for the abort before it fails (real time).
const PATIENCE: Duration = Duration::from_secs(30);
const INTERVAL: Duration = Duration::from_millis(2);

fn builder(clock: &Arc<ManualClock>) -> BrokerBuilder {
    Broker::builder()
        .clock(clock.clone())
        .transaction_abort_timed_out_transaction_cleanup_interval(INTERVAL)
}

fn txn_producer(broker: &Broker) -> Producer<(), u64> {
    let p = broker
        .producer_with_config::<(), u64>(
            ProducerConfig::new()
                .transactional_id("w")
                .transaction_timeout(TIMEOUT),
        )
        .unwrap();
    p.init_transactions().unwrap();
    p
}

/// Begins a transaction writing 1 to `t`-0 and 2 to `t`-1, left open.
fn open_transaction(broker: &Broker) -> Producer<(), u64> {
    let p = txn_producer(broker);
    p.begin_transaction().unwrap();
    p.send(Record::new("t", 1).partition(0)).unwrap();
    p.send(Record::new("t", 2).partition(1)).unwrap();
    p
}

/// Writes the plain records 10 (to `t`-0) and 11 (to `t`-1), after the transaction.
fn write_after(broker: &Broker) {
    let plain = broker.producer::<(), u64>();
    plain.send(Record::new("t", 10).partition(0)).unwrap();
    plain.send(Record::new("t", 11).partition(1)).unwrap();
}

fn read_committed(broker: &Broker) -> Consumer<(), u64> {
    let mut c = broker
        .consumer::<(), u64>(
            ConsumerConfig::new()
                .auto_offset_reset(OffsetReset::Earliest)
                .isolation_level(IsolationLevel::ReadCommitted),
        )
        .unwrap();
    c.assign(&[TopicPartition::new("t", 0), TopicPartition::new("t", 1)])
        .unwrap();
    c
}

/// Polls `c` until it has read every value of `want` (panics after `PATIENCE`); every
/// value read.
fn poll_until(c: &mut Consumer<(), u64>, want: &[u64]) -> BTreeSet<u64> {
    let deadline = Instant::now() + PATIENCE;
    let mut got = BTreeSet::new();
    while !want.iter().all(|w| got.contains(w)) {
        assert!(
            Instant::now() < deadline,
            "read {got:?}, still waiting for {want:?}"
        );
        got.extend(
            c.poll(Duration::from_millis(5))
                .unwrap()
                .iter()
                .map(|r| r.value),
        );
    }
    got
}

/// Waits until both partitions' LSO reached their log end (describe_topic does not call
/// the coordinator).
fn wait_stable(broker: &Broker) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let parts = broker.describe_topic("t").unwrap().partitions;
        if parts.iter().all(|p| p.last_stable_offset == p.log_end) {
            return;
        }
        assert!(Instant::now() < deadline, "LSO held: {parts:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn state_of_w(broker: &Broker) -> TxnState {
    let d = broker.describe_transactions();
    d.iter()
        .find(|t| t.transactional_id == "w")
        .expect("w is known")
        .state
}

#[test]
fn a_forgotten_producers_transaction_is_aborted_with_no_call_on_the_coordinator() {
    let (clock, broker) = in_memory_with_t(TopicConfig::new(2));
    let p = open_transaction(&broker);
    // Its process died: no call on the producer ever again (nor its drop).
    std::mem::forget(p);
    write_after(&broker);
    let mut c = read_committed(&broker);
    // Within the timeout: the LSO holds at the transaction's first offsets.
    clock.advance(TIMEOUT / 2);
    assert!(c.poll(Duration::from_millis(20)).unwrap().is_empty());
    clock.advance(TIMEOUT);
    let got = poll_until(&mut c, &[10, 11]);
    assert_eq!(got, BTreeSet::from([10, 11]), "aborted records were read");
    assert_eq!(state_of_w(&broker), TxnState::CompleteAbort);
}

#[test]
fn the_timed_out_producers_next_commit_gets_transaction_timed_out() {
    let (clock, broker) = in_memory_with_t(TopicConfig::new(2));
    // Kept, never called until the abort happened.
    let p = open_transaction(&broker);
    write_after(&broker);
    clock.advance(TIMEOUT + Duration::from_secs(1));
    wait_stable(&broker);
    let e = p.commit_transaction().unwrap_err();
    assert!(
        matches!(e, Error::TransactionTimedOut { ref transactional_id, .. } if transactional_id == "w"),
        "{e}"
    );
    // It may begin again, at the next epoch.
    p.begin_transaction().unwrap();
    p.send(Record::new("t", 3).partition(0)).unwrap();
    p.commit_transaction().unwrap();
    let got = poll_until(&mut read_committed(&broker), &[3, 10, 11]);
    assert_eq!(got, BTreeSet::from([3, 10, 11]));
}

#[test]
fn a_zero_cleanup_interval_is_refused() {
    for build in [
        Broker::builder()
            .transaction_abort_timed_out_transaction_cleanup_interval(Duration::ZERO)
            .build(),
        Broker::builder()
            .data_dir(tempfile::tempdir().unwrap().path())
            .create(true)
            .transaction_abort_timed_out_transaction_cleanup_interval(Duration::ZERO)
            .open(),
    ] {
        let e = build.unwrap_err();
        assert!(
            matches!(e, Error::InvalidConfig { name, .. } if name == "transaction_abort_timed_out_transaction_cleanup_interval"),
            "{e}"
        );
    }
}

/// An in-memory broker on a new manual clock with topic `t` made by `config` (of two
/// partitions: `open_transaction` and `write_after` write to both).
fn in_memory_with_t(config: TopicConfig) -> (Arc<ManualClock>, Broker) {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let broker = builder(&clock).build().unwrap();
    broker.create_topic::<(), u64>("t", config).unwrap();
    (clock, broker)
}

/// A durable broker in a new directory with topic `t`, `w`'s transaction open on it and the
/// plain records after it; `first_life` ends that broker's life (the broker and the producer
/// are its to close, drop or forget), then the broker reopens on the same clock.
fn reopened_after(
    first_life: impl FnOnce(Broker, &ManualClock, Producer<(), u64>),
) -> (tempfile::TempDir, Arc<ManualClock>, Broker) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let broker = builder(&clock)
        .data_dir(dir.path())
        .create(true)
        .open()
        .unwrap();
    broker
        .create_topic::<(), u64>("t", TopicConfig::new(2).persist(PersistConfig::new()))
        .unwrap();
    let p = open_transaction(&broker);
    write_after(&broker);
    first_life(broker, &clock, p);
    let broker = builder(&clock).data_dir(dir.path()).open().unwrap();
    broker.topic::<(), u64>("t").unwrap();
    (dir, clock, broker)
}

#[test]
fn a_timed_out_abort_on_a_durable_broker_survives_a_reopen() {
    let (_dir, _clock, broker) = reopened_after(|broker, clock, p| {
        let mut c = read_committed(&broker);
        clock.advance(TIMEOUT + Duration::from_secs(1));
        let got = poll_until(&mut c, &[10, 11]);
        assert_eq!(got, BTreeSet::from([10, 11]), "aborted records were read");
        drop(c);
        drop(p);
        // Dropped, not closed: the drop stops and joins the timeout thread too.
        drop(broker);
    });
    // The ABORT markers are on disk: stable at once, before any coordinator call.
    let parts = broker.describe_topic("t").unwrap().partitions;
    assert!(
        parts.iter().all(|p| p.last_stable_offset == p.log_end),
        "{parts:?}"
    );
    let got = poll_until(&mut read_committed(&broker), &[10, 11]);
    assert_eq!(got, BTreeSet::from([10, 11]));
    assert_eq!(state_of_w(&broker), TxnState::CompleteAbort);
    broker.close().unwrap();
}

#[test]
fn a_transaction_open_at_close_is_aborted_after_the_reopen_with_no_call() {
    // Its process died: no drop, no abort.
    let (_dir, clock, broker) = reopened_after(|broker, _, p| {
        std::mem::forget(p);
        broker.close().unwrap();
    });
    let mut c = read_committed(&broker);
    assert!(c.poll(Duration::from_millis(20)).unwrap().is_empty());
    clock.advance(TIMEOUT + Duration::from_secs(1));
    let got = poll_until(&mut c, &[10, 11]);
    assert_eq!(got, BTreeSet::from([10, 11]), "aborted records were read");
    broker.close().unwrap();
}

#[test]
fn an_abort_decided_before_close_is_completed_after_the_reopen_with_no_call() {
    // The drop's abort is logged (PrepareAbort); its markers fail on the closed broker.
    let (_dir, _clock, broker) = reopened_after(|broker, _, p| {
        broker.close().unwrap();
        drop(p);
    });
    // No time passes: the decided abort is completed by the coordinator's thread.
    let got = poll_until(&mut read_committed(&broker), &[10, 11]);
    assert_eq!(got, BTreeSet::from([10, 11]), "aborted records were read");
    wait_stable(&broker);
    assert_eq!(state_of_w(&broker), TxnState::CompleteAbort);
    broker.close().unwrap();
}

/// A commit racing the coordinator's own timeout: the transaction is committed whole or
/// aborted whole, and the commit's result says which.
#[test]
fn a_commit_racing_the_timeout_is_never_torn() {
    let seeds: u64 = if cfg!(debug_assertions) { 40 } else { 400 };
    let (mut committed, mut aborted) = (0, 0);
    for seed in 0..seeds {
        let mut rng = fastrand::Rng::with_seed(seed);
        let clock = Arc::new(ManualClock::new(1_000_000));
        let broker = Broker::builder()
            .clock(clock.clone())
            .transaction_abort_timed_out_transaction_cleanup_interval(Duration::from_millis(1))
            .build()
            .unwrap();
        broker
            .create_topic::<(), u64>("t", TopicConfig::new(2))
            .unwrap();
        let p = open_transaction(&broker);
        let advance = {
            let (clock, pause) = (clock.clone(), rng.u64(0..1500));
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_micros(pause));
                clock.advance(TIMEOUT + Duration::from_secs(1));
            })
        };
        std::thread::sleep(Duration::from_micros(rng.u64(0..1500)));
        let result = p.commit_transaction();
        advance.join().unwrap();
        write_after(&broker);
        let got = poll_until(&mut read_committed(&broker), &[10, 11]);
        match result {
            Ok(()) => {
                committed += 1;
                assert_eq!(got, BTreeSet::from([1, 2, 10, 11]), "seed {seed}");
                assert_eq!(state_of_w(&broker), TxnState::CompleteCommit, "seed {seed}");
            }
            Err(Error::TransactionTimedOut { .. }) => {
                aborted += 1;
                assert_eq!(got, BTreeSet::from([10, 11]), "seed {seed}");
                assert_eq!(state_of_w(&broker), TxnState::CompleteAbort, "seed {seed}");
                // The producer goes on at the next epoch.
                p.begin_transaction().unwrap();
                p.send(Record::new("t", 3).partition(1)).unwrap();
                p.commit_transaction().unwrap();
            }
            Err(e) => panic!("seed {seed}: commit_transaction: {e}"),
        }
    }
    eprintln!("commits racing the timeout: {committed} committed, {aborted} aborted");
}

#[test]
fn dropping_the_last_clone_aborts_its_open_transaction_at_once() {
    let (_clock, broker) = in_memory_with_t(TopicConfig::new(2));
    let p = open_transaction(&broker);
    let clone = p.clone();
    drop(p);
    // A clone lives: the transaction is still its to end.
    clone.commit_transaction().unwrap();
    clone.begin_transaction().unwrap();
    clone.send(Record::new("t", 3).partition(1)).unwrap();
    drop(clone);
    // No time passed: the drop aborted it.
    write_after(&broker);
    wait_stable(&broker);
    let got = poll_until(&mut read_committed(&broker), &[1, 2, 10, 11]);
    assert_eq!(
        got,
        BTreeSet::from([1, 2, 10, 11]),
        "aborted records were read"
    );
    assert_eq!(state_of_w(&broker), TxnState::CompleteAbort);
}

/// The coordinator's timeout abort racing transactional `send_batch` runs (plain entries
/// whose offsets the partition's table keeps) and single sends, with a plain producer
/// between them: a read-committed consumer reads every record of each transaction whose
/// commit returned `Ok` and the plain records, and nothing of a transaction that failed
/// before its commit was asked.
#[test]
fn timeout_aborts_racing_send_batch_runs_leave_only_committed_records() {
    let (clock, broker) = in_memory_with_t(TopicConfig::new(2).records_in_memory(1 << 14));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ticker = {
        let (clock, stop) = (clock.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_micros(100));
                clock.advance(TIMEOUT + Duration::from_millis(1));
            }
        })
    };
    let plain = broker.producer::<(), u64>();
    let mut p = txn_producer(&broker);
    let mut committed: Vec<u64> = Vec::new();
    let mut undecided: BTreeSet<u64> = BTreeSet::new();
    let mut plain_values = Vec::new();
    let (mut commits, mut failures) = (0, 0);
    for round in 0..1_000u64 {
        let base = 1_000 + round * 10;
        let v = 1_000_000 + round;
        plain
            .send(Record::new("t", v).partition((round % 2) as u32))
            .unwrap();
        plain_values.push(v);
        let mut committing = false;
        let attempt = (|| -> logbus::Result<()> {
            p.begin_transaction()?;
            let mut batch: Vec<_> = (0..3)
                .map(|i| Record::new("t", base + i).partition(0))
                .collect();
            p.send_batch(&mut batch).map_err(|e| e.error)?;
            p.send(Record::new("t", base + 3).partition(0))?;
            let mut batch: Vec<_> = (4..6)
                .map(|i| Record::new("t", base + i).partition((i % 2) as u32))
                .collect();
            p.send_batch(&mut batch).map_err(|e| e.error)?;
            committing = true;
            p.commit_transaction()
        })();
        match attempt {
            Ok(()) => {
                commits += 1;
                committed.extend(base..base + 6);
            }
            Err(_) => {
                failures += 1;
                if committing {
                    // Its outcome may be decided already (the next init finishes it).
                    undecided.extend(base..base + 6);
                }
                if p.abort_transaction().is_err() {
                    p = txn_producer(&broker);
                }
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    ticker.join().unwrap();
    let mut want: BTreeSet<u64> = committed.into_iter().collect();
    want.extend(plain_values);
    let mut c = read_committed(&broker);
    let want_list: Vec<u64> = want.iter().copied().collect();
    let got = poll_until(&mut c, &want_list);
    let extra: Vec<&u64> = got
        .difference(&want)
        .filter(|v| !undecided.contains(v))
        .collect();
    assert!(
        extra.is_empty(),
        "read records of transactions not committed: {extra:?} ({commits} commits, \
         {failures} failures)"
    );
}
