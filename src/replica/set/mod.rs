//! One replicated partition: its replicas' logs, the leader and leader epoch, the ISR and
//! the high watermark, behind one lock (each critical section is short: an append, the
//! copy of one fetch batch, a lag check).
//!
//! Kafka's rules, as `Partition.scala` / `ReplicaManager.scala` apply them:
//! - **Appends** go to the leader, stamped with the current leader epoch. Under
//!   `acks = all` an ISR below `min_insync_replicas` refuses the append before it happens
//!   (`NotEnoughReplicas`); otherwise the append waits until HW passes it, and answers
//!   `NotEnoughReplicasAfterAppend` if the ISR is below the minimum by then.
//! - **Followers fetch** in two steps: copy a batch from the leader's log, then append it
//!   to their own log and only then report their new log end (the leader learns a
//!   follower's LEO from what the follower already holds, never from what it was sent).
//! - **HW** = min LEO over the ISR; it never goes back, except when an unclean election
//!   picks a leader with less (reported as `RecordsLost`).
//! - **ISR** loses a follower whose LEO is not the leader's and that was last caught up more
//!   than `replica_lag_time_max` ago (on the broker's clock), or that crashed; it never
//!   loses its last member. A follower joins again once it holds everything below HW.
//! - **Elections** pick the first live ISR member in replica order (the preferred replica
//!   first); a live replica outside the ISR only with `unclean_leader_election`. Every
//!   election bumps the leader epoch; every other replica then truncates by epoch
//!   (`log::truncation_point`) before it fetches again.

mod clean;
mod combine;
mod disk;
mod help;
mod send;
mod view;

use std::time::Duration;

use crate::partition::topic_config::TopicConfig;
use crate::persist::replicated::Backing;
use send::Nudge;

use super::events::{EventKind, Events, ReplicaEvent};
use crate::clock::Clock;
use crate::partition::replica_log::{
    runs_of, truncation_point, Chunk, ReplicaLog, Run, SendRecords, CHUNK_MAX,
};
use crate::partition::{
    AppendError, ClosedByBroker, Entry, Pending, ReadOutcome, ReplicaLogs, ReplicatedLog,
    SendPolicy,
};
use crate::persist::replica_store::ReplicaStore;
use crate::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use crate::sync::time::Instant;
// Std's Arc (also under loom): entries and shared handles (see `sync::StdArc`).
use crate::sync::StdArc as Arc;
use crate::sync::{Condvar, Mutex, WaitSet};

/// Earlier epochs whose acknowledged offsets a partition remembers.
const PAST_EPOCHS: usize = 16;
/// Records one fetch copies at most.
const FETCH_MAX: usize = 1024;
/// Records one chunk of a batch holds at most (fewer when the logs keep fewer): a batch
/// up to this size is shared as the caller's own vector, with no copy.
const BATCH_PIECE_MAX: usize = 4096;
const _: () = assert!(BATCH_PIECE_MAX <= CHUNK_MAX);
/// Slots of an open chunk (`log::ReplicaLog::append_one`; fewer when the logs keep fewer):
/// single records share one allocation and one run per this many.
const OPEN_CHUNK: usize = 64;

/// A topic's replication settings, as one partition applies them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReplicationConfig {
    pub(crate) min_insync: usize,
    pub(crate) unclean: bool,
    pub(crate) lag_max_ms: i64,
    /// Idle producer ids expire after this (`TopicConfig::producer_id_expiration`).
    pub(crate) producer_expiration_ms: i64,
    /// Records each replica keeps (the oldest beyond are dropped).
    pub(crate) capacity: usize,
}

impl ReplicationConfig {
    /// A replicated partition's settings, from its topic's configuration.
    pub(crate) fn of(config: &TopicConfig) -> Self {
        Self {
            min_insync: config.min_insync() as usize,
            unclean: config.unclean_election(),
            lag_max_ms: i64::try_from(config.replica_lag_max().as_millis()).unwrap_or(i64::MAX),
            producer_expiration_ms: i64::try_from(config.producer_expiration().as_millis())
                .unwrap_or(i64::MAX),
            capacity: config.records_in_memory_per_partition(),
        }
    }
}

/// Whether a replica is up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Online,
    Crashed,
    /// Its data directory failed: offline, its log gone.
    DirFailed,
}

struct Replica<K, V> {
    /// The replica's id: the data directory it lives on.
    id: u32,
    log: ReplicaLog<K, V>,
    status: Status,
    /// Fault injection: does not fetch.
    stalled: bool,
    /// Fault injection: fetches at most once per this many milliseconds of broker time.
    slow_ms: i64,
    last_fetch_ms: i64,
    /// The leader's view of this follower's log end: what it held at its last report.
    known_leo: u64,
    /// When this follower last held everything the leader had.
    last_caught_up_ms: i64,
    /// Must truncate by leader epoch before fetching (after an election or a restart).
    needs_truncation: bool,
    /// A persisted replica's disk side (`None` in memory, and while its directory failed).
    store: Option<Box<dyn ReplicaStore<K, V>>>,
    /// Bumped whenever the log on disk is cut or its store replaced: a cleaning pass
    /// planned before swaps nothing in (`clean`).
    disk_generation: u64,
}

struct State<K, V> {
    replicas: Vec<Replica<K, V>>,
    /// Index into `replicas`.
    leader: Option<usize>,
    epoch: i32,
    /// Indexes into `replicas`, in replica order.
    isr: Vec<usize>,
    hw: u64,
    /// The highest HW seen in this epoch while the ISR held at least `min_insync`
    /// replicas: an `acks = all` record of this epoch below it is acknowledged, whenever
    /// its sender looks (a pipelined send may wait long after).
    acked: u64,
    /// `(epoch, acked)` as each of the latest earlier epochs ended.
    past_acked: Vec<(i32, u64)>,
    closed: bool,
    /// An empty vector with room, for the next fetch's batch: a fetch of one record for a
    /// waiting sender would otherwise allocate and free per follower.
    spare: Vec<Run<K, V>>,
    /// An empty vector with room, for the queued sends a lock holder appends (`combine`).
    served: Vec<Arc<combine::Queued<K, V>>>,
    /// Per idempotent producer id: its epoch and the next sequence to give its next send
    /// here. The producer's own counter, kept with the partition so that it outlives
    /// leader changes: a new leader's log may have lost the old one's last records, whose
    /// retries bring their sequences back (a fresh send meanwhile is out of order, and
    /// retried).
    sequences: crate::partition::producer_state::ProducerMap<(i16, i32)>,
    /// When idle producer ids were last expired (broker clock, ms).
    producers_expired_ms: i64,
}

/// Copies a record a failed send hands back while the log keeps it (`None`: cannot).
pub(crate) type Cloner<K, V> = fn(&Entry<K, V>) -> Option<Entry<K, V>>;

/// Step 1 of a fetch: done already (whether it copied or changed anything), or a batch
/// for step 2.
enum Fetched<K, V> {
    Done(bool),
    Batch(Batch<K, V>),
}

/// Records copied from the leader for one follower, and what step 2 checks them against.
struct Batch<K, V> {
    /// Slices of the leader's chunks (shared, not copied).
    records: Vec<Run<K, V>>,
    /// The follower's log end when they were copied: they are appended only there.
    from: u64,
    /// The leader's log has a gap from `from` up to this offset (on disk): the records
    /// start there.
    skip_to: Option<u64>,
    leader_end: u64,
    epoch: i32,
    now: i64,
}

/// Why one attempt at an append failed.
#[derive(Debug)]
enum Failure {
    /// Before anything was appended.
    Refused(AppendError),
    /// After the append: a retry may duplicate the record.
    Appended(AppendError),
    /// The partition is closed: `Closed` (deleted) or `BrokerClosed`.
    Closed(AppendError),
}

/// One replicated partition (module docs).
pub(crate) struct ReplicaSet<K, V> {
    topic: Arc<str>,
    partition: u32,
    config: ReplicationConfig,
    state: Mutex<State<K, V>>,
    /// Sends queued for the lock's holder to append (`combine`).
    combiner: combine::Combiner<K, V>,
    /// Notified on every HW advance, ISR change and election (acks waiters, retries).
    changed: Condvar,
    /// Mirrors `State::hw` for lock-free readiness checks (consumers' waits).
    hw: AtomicU64,
    /// Mirror `State::acked` and `State::epoch` for the lock-free acknowledged check
    /// (`send::acked_now`): written under the lock, `acked` before `epoch` at an election.
    acked_mirror: AtomicU64,
    epoch_mirror: AtomicI64,
    /// The topic's arrival notifications: HW advances wake consumers.
    arrivals: Arc<WaitSet>,
    /// Tasks awaiting a pipelined send's acknowledgement (`poll_pending`): notified with
    /// `changed`.
    acks: WaitSet,
    /// Per replica: the fetcher of its directory, woken when the leader appends.
    fetchers: Vec<Arc<Wake>>,
    clock: Arc<dyn Clock>,
    events: Arc<Events>,
    /// Hands back a copy of a record the log still holds (a send that failed after its
    /// append).
    cloner: Cloner<K, V>,
    /// A persisted partition's files (`None` in memory).
    backing: Option<Arc<dyn Backing<K, V>>>,
    /// Held by a cleaning pass over one of the replicas' logs from its plan to its swap,
    /// and by `close_disk` before it closes the stores (taken before `state`): a pass
    /// never writes into a directory being closed or deleted.
    cleaning: Mutex<()>,
    /// The partition's flag, read when a send finds the set closed: closed by
    /// `Broker::close`, or deleted.
    broker_closed: ClosedByBroker,
}

/// Wakes a parked fetcher thread: set `pending`, then notify (the fetcher's `ready`
/// checks `pending`).
#[derive(Debug, Default)]
pub(crate) struct Wake {
    pub(crate) pending: AtomicBool,
    pub(crate) set: WaitSet,
}

impl Wake {
    /// Wakes the fetcher for records appended under the partition's lock (which every
    /// fetch takes too), skipping the store and the fence while a wake is still pending.
    /// Sound because the fetcher clears `pending` *before* a round's fetches lock
    /// (`runtime::fetch_round`) unless its last round copied something (a busy fetcher
    /// leaves it set, so appends while it copies skip even the store), and parks only while
    /// `pending` is clear. Say this load reads `true`, and C is the fetcher's last clear
    /// before it: had the round after C locked before this caller's append, C would
    /// happen-before this load (through the lock) and the `true` read was stored after C,
    /// so the fetcher sees it before parking and goes round again, clearing first; that
    /// round, or the one after C, locks after the append and copies it.
    pub(crate) fn nudge(&self) {
        // Relaxed: ordered by the partition's lock, as argued above.
        if !self.pending.load(Ordering::Relaxed) {
            self.wake();
        }
    }

    pub(crate) fn wake(&self) {
        // Relaxed: the WaitSet's SeqCst fence in `notify_all` orders it before the waiter
        // check, and the waiter's fence orders its `swap` after its registration.
        self.pending.store(true, Ordering::Relaxed);
        self.set.notify_all();
    }
}

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> ReplicaSet<K, V> {
    /// A partition whose replicas live on directories `ids` (the first is the preferred
    /// leader and leads from epoch 0). `fetchers[i]` wakes the fetcher of `ids[i]`.
    /// `broker_closed` is the partition's flag (`Partition::replicated` takes it too).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        topic: Arc<str>,
        partition: u32,
        config: ReplicationConfig,
        ids: &[u32],
        fetchers: Vec<Arc<Wake>>,
        arrivals: Arc<WaitSet>,
        clock: Arc<dyn Clock>,
        events: Arc<Events>,
        cloner: Cloner<K, V>,
        broker_closed: ClosedByBroker,
    ) -> Self {
        let now = clock.now_ms();
        let replicas = ids
            .iter()
            .map(|&id| Replica {
                id,
                log: ReplicaLog::new(0),
                status: Status::Online,
                stalled: false,
                slow_ms: 0,
                last_fetch_ms: now,
                known_leo: 0,
                last_caught_up_ms: now,
                needs_truncation: false,
                store: None,
                disk_generation: 0,
            })
            .collect::<Vec<_>>();
        let mut state = State {
            isr: (0..replicas.len()).collect(),
            replicas,
            leader: Some(0),
            epoch: 0,
            hw: 0,
            acked: 0,
            past_acked: Vec::new(),
            closed: false,
            spare: Vec::new(),
            served: Vec::new(),
            sequences: Default::default(),
            producers_expired_ms: i64::MIN,
        };
        state.replicas[0].log.begin_epoch(0);
        let set = Self {
            topic,
            partition,
            config,
            state: Mutex::new(state),
            combiner: combine::Combiner::default(),
            changed: Condvar::new(),
            hw: AtomicU64::new(0),
            acked_mirror: AtomicU64::new(0),
            epoch_mirror: AtomicI64::new(0),
            arrivals,
            acks: WaitSet::new(),
            fetchers,
            clock,
            events,
            cloner,
            backing: None,
            cleaning: Mutex::new(()),
            broker_closed,
        };
        set.event(EventKind::LeaderElected {
            leader: Some(ids[0]),
            epoch: 0,
            unclean: false,
        });
        set
    }

    fn event(&self, kind: EventKind) {
        self.events.push(ReplicaEvent {
            at_ms: self.clock.now_ms(),
            topic: self.topic.to_string(),
            partition: self.partition,
            kind,
        });
    }

    fn isr_ids(st: &State<K, V>) -> Vec<u32> {
        st.isr.iter().map(|&i| st.replicas[i].id).collect()
    }

    /// The replica index of directory `id`.
    fn index(st: &State<K, V>, id: u32) -> Option<usize> {
        st.replicas.iter().position(|r| r.id == id)
    }

    /// HW = min LEO over the ISR (the leader's own log end for itself); only moves up.
    /// Returns whether it moved (the caller notifies).
    fn advance_hw(&self, st: &mut State<K, V>) -> bool {
        let Some(l) = st.leader else { return false };
        let mut hw = st.replicas[l].log.end();
        for &i in &st.isr {
            if i != l {
                hw = hw.min(st.replicas[i].known_leo);
            }
        }
        let moved = hw > st.hw;
        if moved {
            st.hw = hw;
            // Release: pairs with the Acquire load in `high_watermark`; the records
            // below are in the leader's log (appended under this lock, which readers take).
            self.hw.store(hw, Ordering::Release);
        }
        if st.isr.len() >= self.config.min_insync && st.hw > st.acked {
            st.acked = st.hw;
            // Release: pairs with the Acquire load in `acked_now`.
            self.acked_mirror.store(st.acked, Ordering::Release);
        }
        moved
    }

    /// Publishes a new epoch (and its `acked`, reset) to `acked_now`: `acked` first, so a
    /// reader that sees the new epoch sees no earlier epoch's `acked`.
    fn mirror_epoch(&self, st: &State<K, V>) {
        // Release (both): pair with the Acquire loads in `acked_now`.
        self.acked_mirror.store(st.acked, Ordering::Release);
        self.epoch_mirror
            .store(i64::from(st.epoch), Ordering::Release);
    }

    /// Wakes acks waiters and, when HW moved, consumers.
    fn notify(&self, hw_moved: bool) {
        self.changed.notify_all();
        self.acks.notify_all();
        if hw_moved {
            self.arrivals.notify_all();
        }
    }

    fn wake_followers(&self, st: &State<K, V>) {
        for (i, r) in st.replicas.iter().enumerate() {
            if Some(i) != st.leader && r.status == Status::Online {
                if let Some(w) = self.fetchers.get(i) {
                    // Under the lock, so a pending wake suffices (`Wake::nudge`).
                    w.nudge();
                }
            }
        }
    }

    /// A record to hand back: the entry itself if nothing else holds it, else a copy.
    fn take_back(&self, records: SendRecords<K, V>) -> Option<Entry<K, V>> {
        records.take_one(self.cloner)
    }

    // ---- follower side ----

    /// One fetch for the follower on directory `dir`, if this partition has one that may
    /// fetch now. Returns whether it copied anything.
    pub(crate) fn fetch(&self, dir: u32) -> bool {
        let mut st = self.state.lock();
        let Some(i) = Self::index(&st, dir) else {
            return false;
        };
        // Step 1 and step 2 with the lock released between them, as a fetch over a network
        // would be: the leader appends meanwhile, and step 2 must cope with any change.
        match self.fetch_batch(&mut st, i, &mut None) {
            Fetched::Done(copied) => copied,
            Fetched::Batch(batch) => {
                drop(st);
                let mut st = self.state.lock();
                self.fetch_append(&mut st, i, batch)
            }
        }
    }

    /// Step 1 of a fetch for follower `i`: a batch from the leader (truncating by epoch
    /// first if needed), or what the fetch did instead. `now`: the broker clock, read once
    /// a fetch may happen (a waiting sender tries every replica).
    fn fetch_batch(&self, st: &mut State<K, V>, i: usize, now: &mut Option<i64>) -> Fetched<K, V> {
        let Some(l) = st.leader else {
            return Fetched::Done(false);
        };
        if st.closed || l == i || st.replicas[i].status != Status::Online || st.replicas[i].stalled
        {
            return Fetched::Done(false);
        }
        let now = *now.get_or_insert_with(|| self.clock.now_ms());
        if st.replicas[i].slow_ms > 0 {
            if now - st.replicas[i].last_fetch_ms < st.replicas[i].slow_ms {
                return Fetched::Done(false);
            }
            st.replicas[i].last_fetch_ms = now;
        }
        if st.replicas[i].needs_truncation {
            self.truncate_by_epoch(st, i, l);
        }
        if st.replicas[i].status != Status::Online {
            // Its directory failed while it truncated.
            return Fetched::Done(true);
        }
        let from = st.replicas[i].log.end();
        let leader_log = &st.replicas[l].log;
        let leader_end = leader_log.end();
        if from < leader_log.log_start() || from > leader_end {
            // Too far behind (the leader no longer has what comes next), or a log that
            // starts past the leader's end (after an unclean election): start over at the
            // leader's log start.
            let start = leader_log.log_start();
            self.reset_replica(st, i, start);
            return Fetched::Done(true);
        }
        if from >= leader_end {
            st.replicas[i].known_leo = from;
            st.replicas[i].last_caught_up_ms = now;
            let expanded = self.maybe_expand(st, i);
            let moved = self.advance_hw(st);
            if expanded || moved {
                self.notify(moved);
            }
            return Fetched::Done(false);
        }
        let to = leader_end.min(from + FETCH_MAX as u64);
        let mut skip_to = None;
        let records = if from < leader_log.start() {
            // Below the leader's tail in memory: from its disk, which may have gaps (a
            // Kafka-written directory, a segment deleted by hand): the follower continues
            // past one, as Kafka's followers copy batches with their offsets.
            let to = to.min(leader_log.start());
            let (read, next) = match self.read_disk_sparse(st, l, from, to) {
                Some(read) => read,
                None => return Fetched::Done(true),
            };
            let first = read.first().map_or(next, |r| r.0);
            if first > from {
                skip_to = Some(first);
            }
            let mut at = first;
            let dense = read
                .into_iter()
                .take_while(|(o, _, _, _)| {
                    let dense = *o == at;
                    at += 1;
                    dense
                })
                .map(|(_, epoch, stamp, e)| (epoch, stamp, e))
                .collect();
            runs_of(dense)
        } else {
            let mut records = std::mem::take(&mut st.spare);
            st.replicas[l].log.runs_in(from, to, &mut records);
            records
        };
        Fetched::Batch(Batch {
            records,
            from,
            skip_to,
            leader_end,
            epoch: st.epoch,
            now,
        })
    }

    /// Step 2 of a fetch for follower `i`: appends the batch to its own log, then reports
    /// its new end. Returns whether it copied anything (or something changed).
    fn fetch_append(&self, st: &mut State<K, V>, i: usize, batch: Batch<K, V>) -> bool {
        let Batch {
            mut records,
            from,
            skip_to,
            leader_end,
            epoch,
            now,
        } = batch;
        let r = &st.replicas[i];
        if st.closed {
            // Closed between the steps: its stores are gone, nothing is appended.
            return false;
        }
        if st.epoch != epoch || r.status != Status::Online || r.log.end() != from {
            // An election, crash or truncation came between: fetch again.
            return true;
        }
        if let Some(at) = skip_to {
            let r = &mut st.replicas[i];
            if let Some(store) = r.store.as_mut() {
                store.skip_to(at);
            }
            r.log.skip_to(at);
        }
        if self
            .append_to_disk(st, i, records.iter().flat_map(Run::stamped_entries))
            .is_err()
        {
            return true;
        }
        let r = &mut st.replicas[i];
        for run in records.drain(..) {
            r.log.append_run(run);
        }
        r.log.trim(self.config.capacity, u64::MAX);
        st.spare = records;
        if !self.save_epochs(st, i) {
            return true;
        }
        let r = &mut st.replicas[i];
        // Reported only now that the records are in the follower's log.
        r.known_leo = r.log.end();
        if r.known_leo >= leader_end {
            r.last_caught_up_ms = now;
        }
        let expanded = self.maybe_expand(st, i);
        let moved = self.advance_hw(st);
        if expanded || moved {
            self.notify(moved);
        }
        true
    }

    /// KIP-101/279: cuts follower `i`'s log where it stops agreeing with leader `l`.
    fn truncate_by_epoch(&self, st: &mut State<K, V>, i: usize, l: usize) {
        let before = st.replicas[i].log.end();
        loop {
            let f = &st.replicas[i].log;
            if f.end() == f.log_start() {
                break;
            }
            let answer = st.replicas[l].log.end_offset_for_epoch(f.latest_epoch());
            match truncation_point(f, answer) {
                Some(at) => {
                    if !self.cut(st, i, at) {
                        return;
                    }
                }
                None => break,
            }
        }
        let r = &mut st.replicas[i];
        r.needs_truncation = false;
        r.known_leo = r.known_leo.min(r.log.end());
        if r.log.end() < before {
            self.event(EventKind::Truncated {
                replica: r.id,
                from: before,
                to: r.log.end(),
            });
        }
    }

    /// Adds follower `i` to the ISR if it holds everything below HW (and reached the
    /// current epoch's start). Returns whether it did.
    fn maybe_expand(&self, st: &mut State<K, V>, i: usize) -> bool {
        let Some(l) = st.leader else { return false };
        let r = &st.replicas[i];
        let epoch_start = st.replicas[l].log.epochs().last().map_or(0, |e| e.1);
        if st.isr.contains(&i)
            || r.status != Status::Online
            || r.needs_truncation
            || r.known_leo < st.hw
            || r.known_leo < epoch_start
        {
            return false;
        }
        st.isr.push(i);
        st.isr.sort_unstable();
        self.event(EventKind::IsrExpanded {
            replica: st.replicas[i].id,
            isr: Self::isr_ids(st),
        });
        self.save_state(st);
        true
    }

    /// Removes from the ISR every follower out of sync at `now_ms` (module docs).
    pub(crate) fn check_isr(&self, now_ms: i64) {
        let mut st = self.state.lock();
        // Closed (deleted, or the broker closed): its files are gone or final.
        if st.closed {
            return;
        }
        // Idle producer ids expire (Kafka's `producer.id.expiration.ms`), on every replica
        // alike, at most once a second of the broker's clock.
        if now_ms.saturating_sub(st.producers_expired_ms) >= 1000 {
            st.producers_expired_ms = now_ms;
            let max = self.config.producer_expiration_ms;
            let mut expired = 0;
            for r in &mut st.replicas {
                expired += r.log.producers_mut().expire(now_ms, max);
            }
            // A counter no replica's log has the producer of any more goes with it (its
            // next send starts over, as after Kafka's expiry): ids would pile up otherwise,
            // one per idempotent producer ever made.
            if expired > 0 {
                let State {
                    sequences,
                    replicas,
                    ..
                } = &mut *st;
                sequences.retain(|id| {
                    replicas
                        .iter_mut()
                        .any(|r| r.log.producers().get(id).is_some())
                });
            }
        }
        let Some(l) = st.leader else { return };
        let leader_end = st.replicas[l].log.end();
        let lagging: Vec<usize> = st
            .isr
            .iter()
            .copied()
            .filter(|&i| {
                let r = &st.replicas[i];
                i != l
                    && r.known_leo != leader_end
                    && now_ms - r.last_caught_up_ms > self.config.lag_max_ms
            })
            .collect();
        if lagging.is_empty() {
            return;
        }
        for i in lagging {
            self.remove_from_isr(&mut st, i, "lagging");
        }
        let moved = self.advance_hw(&mut st);
        self.notify(moved);
    }

    fn remove_from_isr(&self, st: &mut State<K, V>, i: usize, reason: &'static str) {
        if st.isr.len() <= 1 || !st.isr.contains(&i) {
            return;
        }
        st.isr.retain(|&x| x != i);
        self.event(EventKind::IsrShrunk {
            replica: st.replicas[i].id,
            isr: Self::isr_ids(st),
            reason,
        });
        self.save_state(st);
    }

    /// Elects a leader (module docs), bumping the epoch.
    fn elect(&self, st: &mut State<K, V>) {
        self.elect_from(st, false);
    }

    /// Elects a leader; `longest`: the in-sync replica with the latest epoch and longest
    /// log rather than the first (a reopened persisted partition, whose replicas may have
    /// kept different tails).
    fn elect_from(&self, st: &mut State<K, V>, longest: bool) {
        let now = self.clock.now_ms();
        let online = |st: &State<K, V>, i: usize| st.replicas[i].status == Status::Online;
        let clean = if longest {
            st.isr
                .iter()
                .copied()
                .filter(|&i| online(st, i))
                .max_by_key(|&i| {
                    let log = &st.replicas[i].log;
                    (log.latest_epoch(), log.end(), std::cmp::Reverse(i))
                })
        } else {
            st.isr.iter().copied().find(|&i| online(st, i))
        };
        let (chosen, unclean) = match clean {
            Some(c) => (Some(c), false),
            None if self.config.unclean => ((0..st.replicas.len()).find(|&i| online(st, i)), true),
            None => (None, false),
        };
        let Some(c) = chosen else {
            if st.leader.take().is_some() {
                self.event(EventKind::LeaderElected {
                    leader: None,
                    epoch: st.epoch,
                    unclean: false,
                });
            }
            self.save_state(st);
            return;
        };
        // What this epoch acknowledged stays so, for senders that look later.
        st.past_acked.push((st.epoch, st.acked));
        if st.past_acked.len() > PAST_EPOCHS {
            st.past_acked.remove(0);
        }
        st.acked = 0;
        st.epoch += 1;
        self.mirror_epoch(st);
        st.leader = Some(c);
        let epoch = st.epoch;
        st.replicas[c].log.begin_epoch(epoch);
        if !self.save_epochs(st, c) {
            // Its directory failed on the epoch file: elect another (it is offline now).
            st.leader = None;
            return self.elect_from(st, longest);
        }
        st.replicas[c].needs_truncation = false;
        let end = st.replicas[c].log.end();
        // Unclean, or an in-sync replica that lost an unsynced tail (a power loss of the
        // last ISR member, KIP-966's case): committed records are gone, and said so.
        if end < st.hw {
            self.event(EventKind::RecordsLost {
                from: end,
                to: st.hw,
            });
            st.hw = end;
            // Release: as in `advance_hw` (HW goes back only here).
            self.hw.store(end, Ordering::Release);
        }
        if unclean {
            st.isr = vec![c];
        }
        let hw = st.hw;
        for (i, r) in st.replicas.iter_mut().enumerate() {
            if i != c {
                r.needs_truncation = true;
                r.known_leo = r.log.end().min(hw);
                r.last_caught_up_ms = now;
            }
        }
        self.event(EventKind::LeaderElected {
            leader: Some(st.replicas[c].id),
            epoch,
            unclean,
        });
        self.save_state(st);
        let moved = self.advance_hw(st);
        self.wake_followers(st);
        self.notify(moved);
    }

    // ---- faults ----

    /// Crashes replica `id`. `cut`: the offset its log is cut to (a lost unsynced tail),
    /// `None` to keep it whole; `dir_failed`: its directory is gone (log lost entirely).
    pub(crate) fn crash(&self, id: u32, cut: Option<u64>, dir_failed: bool) -> bool {
        let mut st = self.state.lock();
        let Some(i) = Self::index(&st, id) else {
            return false;
        };
        // A replica whose directory failed is down already: crashing it changes nothing
        // (it returns only with its directory, reopened).
        if st.closed || st.replicas[i].status == Status::DirFailed {
            return true;
        }
        let lost_from = if dir_failed {
            let r = &mut st.replicas[i];
            let start = r.log.start();
            r.log.reset_to(start);
            r.status = Status::DirFailed;
            // Dropped, not closed: its directory is failing (errors are ignored).
            drop(r.store.take());
            r.disk_generation += 1;
            Some(start)
        } else {
            st.replicas[i].status = Status::Crashed;
            match cut {
                Some(c) if self.cut(&mut st, i, c) => Some(st.replicas[i].log.end()),
                Some(_) => Some(st.replicas[i].log.start()),
                None => None,
            }
        };
        let r = &mut st.replicas[i];
        r.known_leo = r.known_leo.min(r.log.end());
        self.event(EventKind::Crashed {
            replica: id,
            lost_from,
        });
        let reason = if dir_failed {
            "directory failed"
        } else {
            "crashed"
        };
        self.remove_from_isr(&mut st, i, reason);
        if st.leader == Some(i) {
            st.leader = None;
            self.elect(&mut st);
        }
        let moved = self.advance_hw(&mut st);
        self.notify(moved);
        true
    }

    /// Brings crashed replica `id` back (a follower that truncates by epoch first); elects
    /// a leader if the partition had none. A replica on a failed directory comes back only
    /// with `restore` (its directory is back).
    pub(crate) fn restart(&self, id: u32, restore: bool) -> bool {
        let mut st = self.state.lock();
        let Some(i) = Self::index(&st, id) else {
            return false;
        };
        if st.closed {
            // Nothing reopens or is elected in a closed partition (its files are final).
            return true;
        }
        let r = &mut st.replicas[i];
        if r.status == Status::Online || (r.status == Status::DirFailed && !restore) {
            return true;
        }
        if r.status == Status::DirFailed {
            if let Some(b) = &self.backing {
                // Its directory is back: the log as the disk kept it (recovered).
                match b.reopen(self.partition, id) {
                    Ok((store, log)) => {
                        r.store = Some(store);
                        r.disk_generation += 1;
                        r.log = log;
                    }
                    Err(_) => return true,
                }
            }
        }
        r.status = Status::Online;
        r.needs_truncation = true;
        r.stalled = false;
        r.last_caught_up_ms = self.clock.now_ms();
        self.event(EventKind::Restarted { replica: id });
        if st.leader.is_none() {
            self.elect(&mut st);
        }
        self.wake_followers(&st);
        self.notify(false);
        true
    }

    /// Stalls (`true`) or resumes follower `id`'s fetching.
    pub(crate) fn set_stalled(&self, id: u32, stalled: bool) -> bool {
        let mut st = self.state.lock();
        let Some(i) = Self::index(&st, id) else {
            return false;
        };
        st.replicas[i].stalled = stalled;
        self.wake_followers(&st);
        true
    }

    /// Slows follower `id` to one fetch per `every` of broker time (zero: full speed).
    pub(crate) fn set_slow(&self, id: u32, every: Duration) -> bool {
        let mut st = self.state.lock();
        let Some(i) = Self::index(&st, id) else {
            return false;
        };
        st.replicas[i].slow_ms = i64::try_from(every.as_millis()).unwrap_or(i64::MAX);
        true
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.state.lock().closed
    }

    pub(crate) fn topic(&self) -> &str {
        &self.topic
    }

    pub(crate) fn partition(&self) -> u32 {
        self.partition
    }
}

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> ReplicatedLog<K, V> for ReplicaSet<K, V> {
    fn note_producer_codec(&self, codec: crate::storage::record_batch::Compression) {
        if let Some(b) = &self.backing {
            b.note_producer_codec(self.partition, codec);
        }
    }

    fn log_start(&self) -> u64 {
        let st = self.state.lock();
        st.leader
            .map_or(st.hw, |l| st.replicas[l].log.log_start().min(st.hw))
    }

    fn log_end(&self) -> u64 {
        let st = self.state.lock();
        st.leader.map_or(st.hw, |l| st.replicas[l].log.end())
    }

    fn high_watermark(&self) -> u64 {
        // Acquire: pairs with the Release stores in `advance_hw` / `elect`.
        self.hw.load(Ordering::Acquire)
    }

    fn read(&self, offset: u64, max: usize, f: &mut dyn FnMut(u64, &Entry<K, V>)) -> ReadOutcome {
        let mut st = self.state.lock();
        let Some(l) = st.leader else {
            // No leader: nothing can be read now (Kafka's consumer retries).
            return ReadOutcome::Empty;
        };
        let log = &st.replicas[l].log;
        let hw = st.hw.min(log.end());
        if offset < log.log_start() || offset > hw {
            return ReadOutcome::OutOfRange {
                start: log.log_start().min(hw),
                end: hw,
            };
        }
        if offset < log.start() {
            // Below the tail in memory: from the leader's disk.
            // Gaps kept (a Kafka-written directory, a deleted segment): the reader moves to
            // the last offset read + 1.
            let to = log.start().min(hw).min(offset.saturating_add(max as u64));
            let Some((records, next)) = self.read_disk_sparse(&mut st, l, offset, to) else {
                return ReadOutcome::Empty;
            };
            for (o, _, _, e) in &records {
                f(*o, e);
            }
            return ReadOutcome::of(offset, records.len(), next);
        }
        let n = (hw - offset).min(max as u64);
        log.for_each(offset, offset + n, |o, _, e| f(o, e));
        if n == 0 {
            ReadOutcome::Empty
        } else {
            ReadOutcome::Read(n as usize)
        }
    }

    fn offset_for_time(&self, timestamp: i64) -> Option<(u64, i64)> {
        let mut st = self.state.lock();
        let l = st.leader?;
        if let Some(found) = self.disk_offset_for_time(&mut st, l, timestamp) {
            return found;
        }
        let hw = st.hw;
        st.replicas[l].log.offset_for_time(hw, timestamp)
    }

    fn append(
        &self,
        entry: Entry<K, V>,
        policy: &SendPolicy,
        deadline: Option<Instant>,
    ) -> Result<u64, (Option<Entry<K, V>>, AppendError)> {
        let mut records = SendRecords::One(entry);
        match self.send(&mut records, policy, deadline) {
            Ok(offset) => Ok(offset),
            Err(why) => Err((self.take_back(records), why)),
        }
    }

    fn append_sequenced(
        &self,
        entry: Entry<K, V>,
        policy: &SendPolicy,
        id: crate::partition::ProducerIdentity,
        seq: i32,
    ) -> Result<u64, (Option<Entry<K, V>>, AppendError)> {
        let mut records = SendRecords::One(entry);
        match self.send_sequenced(&mut records, policy, id, seq) {
            Ok(offset) => Ok(offset),
            Err(why) => Err((self.take_back(records), why)),
        }
    }

    fn append_batch(
        &self,
        entries: &mut Vec<Entry<K, V>>,
        policy: &SendPolicy,
    ) -> Result<(), AppendError> {
        if entries.is_empty() {
            return Ok(());
        }
        // One allocation for the batch, shared by every replica's log. A chunk lives while
        // any of its records is in any log, so a batch longer than the logs keep is cut in
        // pieces: what trimmed records hold on to stays bounded by a piece per log.
        let piece = self.config.capacity.clamp(1, BATCH_PIECE_MAX);
        let mut shared = Vec::with_capacity(entries.len().div_ceil(piece));
        if entries.len() <= piece {
            // The caller's buffer keeps room for a batch as large: taken bare, it grew again
            // by doubling on the next batch (five allocations for 64 records).
            let room = entries.len();
            shared.push(Chunk::many(std::mem::replace(
                entries,
                Vec::with_capacity(room),
            )));
        } else {
            let mut rest = entries.drain(..);
            while rest.len() > 0 {
                shared.push(Chunk::many(rest.by_ref().take(piece).collect()));
            }
        }
        let mut records = SendRecords::Chunks(shared);
        match self.send(&mut records, policy, None) {
            Ok(_) => Ok(()),
            Err(why) => {
                if let SendRecords::Chunks(shared) = records {
                    for chunk in shared {
                        entries.extend(chunk.take(self.cloner));
                    }
                }
                Err(why)
            }
        }
    }

    fn append_pending(
        &self,
        entry: Entry<K, V>,
        policy: &SendPolicy,
    ) -> Result<Pending<K, V>, (Option<Entry<K, V>>, AppendError)> {
        self.begin(entry, policy)
    }

    fn await_pending(
        &self,
        pending: Pending<K, V>,
        policy: &SendPolicy,
    ) -> Result<u64, (Option<Entry<K, V>>, AppendError)> {
        self.finish(pending, policy)
    }

    fn settle(&self, epoch: i32, offset: u64, deadline: Option<Instant>) {
        self.settle_at(epoch, offset, deadline);
    }

    fn poll_pending(
        &self,
        cx: &mut std::task::Context<'_>,
        slot: &mut crate::sync::WakerSlot,
        pending: &Pending<K, V>,
        policy: &SendPolicy,
    ) -> std::task::Poll<()> {
        self.poll_settled(cx, slot, pending, policy)
    }

    fn cancel_pending(&self, slot: &mut crate::sync::WakerSlot) {
        self.acks.cancel_waker(slot);
    }

    fn resume_pending(
        &self,
        pending: Pending<K, V>,
        policy: &SendPolicy,
    ) -> Result<crate::partition::Resumed<K, V>, (Option<Entry<K, V>>, AppendError)> {
        self.resume(pending, policy)
    }

    fn replica_logs(&self) -> ReplicaLogs<K, V> {
        self.snapshot()
    }

    fn sync(&self) -> crate::Result<()> {
        self.sync_disk()
    }

    fn close(&self) {
        self.state.lock().closed = true;
        self.changed.notify_all();
        self.arrivals.notify_all();
        self.acks.notify_all();
    }
}
