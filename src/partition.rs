//! One partition's log (layer 5): the ring as its in-memory tail, the offsets it owns (log
//! start, high watermark, log end), where a read is served from, and the consumer groups'
//! committed offsets that gate its producers.
//!
//! - **Offsets are ring sequences.** The ring starts at 0, so a record's offset is the
//!   sequence its publish got; offsets in the ring are dense and never reused. A log on
//!   disk may have gaps (a segment deleted by hand, a Kafka-written directory: compaction,
//!   transaction markers): a read says where the next one starts
//!   ([`ReadOutcome::Sparse`]), and a reader always moves to the last offset it read + 1.
//! - **Appends** go through the ring's one producer, which every [`Appender`] shares
//!   behind a lock taken for one publish (a run, or one record) and never across a wait for
//!   room: a single-producer ring publishes a run with one cursor store and, for records
//!   without headers, writes no slot tags (ring `slot`, "Stale tags").
//! - **Log end (LEO)** is the ring's published cursor: every offset below it is published.
//!   **HW equals LEO** on a partition with one replica.
//! - **Replicated partitions** (`crate::replica`, through [`ReplicatedLog`]) keep their
//!   records in the replicas' logs instead of the ring: the leader's log serves appends and
//!   reads, HW is the replicas', and what consumers see as the log end is HW.
//! - **Log start** is the oldest offset not yet overwritten or expired: `LEO - capacity`
//!   (a claim of `s + capacity` overwrites `s`), or later once records pass the retention
//!   age. Records below it are gone; a read there is told so ([`ReadOutcome::OutOfRange`]).
//! - **Reads** go through [`Partition::read`], the one function that decides where an
//!   offset is served from (today always the ring; disk reads join there). They use one
//!   non-gating ring reader created with the partition (the *anchor*, an announcing reader:
//!   producers take slot locks only while it reads), so any offset still in the ring can be read by any consumer, at any
//!   position, without registering a reader per consumer; each record is read under its
//!   slot's lock for the length of one clone, and a slot already holding a later lap tells
//!   the reader exactly where the log now starts. A consumer whose group gates the
//!   partition reads the records at or after the gate through the gate instead, without
//!   slot locks: it holds the group's lock for the run, so the gate cannot move past them
//!   and no producer can overwrite them.
//! - **Commit gating** (`Overflow::Block` topics): each registered group holds a *gating*
//!   ring reader parked at its committed offset (at its starting position until its first
//!   commit). Producers never overwrite a record at or above the lowest gate, so no record a
//!   group has not committed is lost; read positions never gate. A commit moves the gate
//!   forward by skipping entries (no clone, no lock); a commit backwards replaces the gate
//!   with a new one at the lower offset, or — when producers may already hold room over it
//!   (a producer's claim limit, once computed, cannot be taken back) — at the lowest offset
//!   the ring can still protect (its overwrite floor). The committed offset itself is stored
//!   as given. A group empty for too long has its gate let go (`release_group`, called by
//!   the broker through [`GateExpiry`], which producers waiting for room call): its
//!   committed offset stays, and its next registration gates from there again. What is
//!   overwritten while no gate exists is counted (`overwritten_unread`).
//! - **Compacted in-memory partitions** (`TopicConfig::compacted`) keep, below the
//!   ring, the latest record of each key the ring let go (module `compacted`): an appender
//!   hands the records a publish will overwrite to the section first, under the ring's
//!   producer lock; a read below the section's `covered` offset is served from it (with
//!   gaps), at or after it from the ring, and a read that finds its offset overwritten reads
//!   the section again. Their log start is 0 (or where retention by age left it), not the
//!   ring's. Their appenders never take the ring's inline path (`Appender::direct` is
//!   false); other partitions' send path does not look at compaction at all.

use std::collections::HashMap;
use std::fmt;

use bytes::Bytes;

use crate::ring::{GetError, LapPolicy, Reader, Ring, RingConfig, Start};
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::time::Instant;
// Std's Arc (also under loom): group names are `Arc<str>` (see `sync::StdArc`).
use crate::sync::StdArc as Arc;
use crate::sync::{Backoff, Mutex, WaitSet};
use crate::{Error, Result};

/// Record headers: `(key, value)` pairs, in order, keys not unique (Kafka's `Headers`).
/// An empty vector costs no allocation.
pub type Headers = Vec<(String, Option<Bytes>)>;

/// The shape of one partition.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PartitionConfig {
    /// Ring slots (a power of two).
    pub(crate) capacity: usize,
    /// Whether registered groups gate producers (`Overflow::Block`).
    pub(crate) gated: bool,
    /// Records older than this many milliseconds are expired.
    pub(crate) retention_ms: Option<i64>,
}

/// What [`Partition::read`] found at the requested offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadOutcome {
    /// This many records were passed to the callback, at the requested offset and the ones
    /// right after it (dense: the next offset to read is the requested one plus this count).
    /// The ring's reads are always dense, so the hot path computes the next offset without
    /// looking at any record.
    Read(usize),
    /// `n` records (possibly none) were passed to the callback with gaps among them or
    /// before them (a log on disk: a deleted segment, compaction, transaction markers); the
    /// next offset to read is `next`, past the last record or batch read, never the
    /// requested offset plus `n`.
    Sparse {
        /// Records passed to the callback.
        n: usize,
        /// The next offset to read.
        next: u64,
    },
    /// Nothing published at the offset yet (it is the log end, or being written).
    Empty,
    /// A read from disk failed ([`DiskLog::take_error`] says why).
    Failed,
    /// The offset is below the log start or above the log end: the valid range now.
    OutOfRange {
        /// The log start offset.
        start: u64,
        /// The log end offset.
        end: u64,
    },
}

impl ReadOutcome {
    /// The outcome of a read at `offset` that passed `n` records and ended before `next`
    /// (which a read that found nothing leaves at `offset`).
    pub(crate) fn of(offset: u64, n: usize, next: u64) -> Self {
        if next <= offset {
            Self::Empty
        } else if next == offset + n as u64 {
            Self::Read(n)
        } else {
            Self::Sparse { n, next }
        }
    }
}

/// How long an append may wait for room.
#[derive(Debug, Clone, Copy)]
pub(crate) enum AppendWait {
    /// Not at all.
    No,
    /// Until the deadline (`None`: for ever).
    Until(Option<Instant>),
}

/// Why an append did not happen (the entry is handed back with it, unless it was appended).
#[derive(Debug)]
pub(crate) enum AppendError {
    /// A gate holds the slot (only with [`AppendWait::No`]).
    Full,
    /// The deadline passed first.
    Timeout,
    /// The partition is closed (its topic was deleted).
    Closed,
    /// The partition is closed because its broker was closed (`Broker::close`).
    BrokerClosed,
    /// Not appended: the partition's log is offline ([`Error::PartitionOffline`]).
    Offline(Box<Error>),
    /// The record exceeds the topic's `max_message_bytes` (size, limit).
    TooLarge(u64, u64),
    /// Appended, but its log went offline before the flush policy acknowledged it
    /// ([`Error::NotAcknowledged`]).
    Unacknowledged(Box<Error>),
    /// Replicated: `acks = all` and the ISR (size, minimum) is below the minimum; nothing
    /// was appended.
    NotEnoughReplicas(usize, usize),
    /// Replicated: appended, but the ISR (size, minimum) shrank below the minimum before
    /// the acknowledgement.
    NotEnoughReplicasAfterAppend(usize, usize),
    /// Replicated: no replica can lead the partition now.
    LeaderNotAvailable,
    /// Replicated: the leader changed while the append waited for its acknowledgement.
    NotLeader,
    /// Idempotence: not the sequence the leader expects (nothing appended).
    OutOfOrderSequence {
        producer: ProducerIdentity,
        expected: i32,
        got: i32,
    },
    /// Idempotence: the producer's epoch is older than the log's (nothing appended).
    ProducerFenced {
        producer: ProducerIdentity,
        current: i16,
    },
}

/// The error for an append that did not happen.
pub(crate) fn append_error(why: AppendError, topic: &str, partition: u32) -> Error {
    match why {
        AppendError::Full => Error::Full {
            topic: topic.to_owned(),
            partition,
        },
        AppendError::Timeout => Error::Timeout {
            operation: "send",
            topic: Some(topic.to_owned()),
            partition: Some(partition),
            timeout_ms: None,
            code: None,
        },
        AppendError::TooLarge(size, max) => Error::RecordTooLarge {
            what: "record (max_message_bytes, or what a batch in one segment holds)",
            size,
            max,
        },
        AppendError::Closed => Error::Closed {
            what: format!("topic `{topic}` was deleted"),
        },
        AppendError::BrokerClosed => Error::Closed {
            what: format!("the broker was closed (sending to topic `{topic}`)"),
        },
        AppendError::Unacknowledged(e) | AppendError::Offline(e) => *e,
        AppendError::NotEnoughReplicas(isr, min) => Error::NotEnoughReplicas {
            topic: topic.to_owned(),
            partition,
            isr,
            min,
        },
        AppendError::NotEnoughReplicasAfterAppend(isr, min) => {
            Error::NotEnoughReplicasAfterAppend {
                topic: topic.to_owned(),
                partition,
                isr,
                min,
            }
        }
        AppendError::LeaderNotAvailable => Error::LeaderNotAvailable {
            topic: topic.to_owned(),
            partition,
        },
        AppendError::NotLeader => Error::NotLeader {
            topic: topic.to_owned(),
            partition,
        },
        AppendError::OutOfOrderSequence {
            producer,
            expected,
            got,
        } => Error::OutOfOrderSequence {
            topic: topic.to_owned(),
            partition,
            producer_id: producer.id,
            epoch: producer.epoch,
            expected,
            got,
        },
        AppendError::ProducerFenced { producer, current } => Error::ProducerFenced {
            producer_id: producer.id,
            epoch: producer.epoch,
            current_epoch: current,
        },
    }
}

/// How many replicas must have a record before its send returns (Kafka's `acks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Acks {
    /// `acks = 0`: the send returns once the leader has the record appended, without
    /// retries; a leader crash may lose it.
    None,
    /// `acks = 1`: the leader has it; a leader crash before a follower copied it loses it.
    Leader,
    /// `acks = all` (Kafka's default since 3.0): every in-sync replica has it, and the ISR
    /// holds at least the topic's `min_insync_replicas`. Survives the loss of all but one
    /// in-sync replica.
    #[default]
    All,
}

/// How a producer's appends to a replicated partition wait and retry.
#[derive(Debug, Clone)]
pub(crate) struct SendPolicy {
    pub(crate) acks: Acks,
    /// Retries of a failed attempt (leader unavailable, not enough replicas, timeout).
    pub(crate) retries: u32,
    /// The whole send, retries included, gives up after this.
    pub(crate) delivery_timeout: std::time::Duration,
    /// One attempt waits this long for its acknowledgement.
    pub(crate) request_timeout: std::time::Duration,
    /// Counts retries (shared by the producer's appenders).
    pub(crate) counters: Arc<SendCounters>,
    /// The producer's codec (persisted topics whose `compression.type` is `producer`).
    pub(crate) compression: crate::storage::record_batch::Compression,
    /// An idempotent producer's id and epoch: its appends carry sequences
    /// (`producer_state`).
    pub(crate) producer: Option<Arc<producer_state::ProducerHandle>>,
}

/// What a producer's retries did (its metrics).
#[derive(Debug, Default)]
pub(crate) struct SendCounters {
    /// Attempts retried.
    pub(crate) retries: AtomicU64,
    /// Retries of a record already appended once (each may leave a duplicate in the log).
    pub(crate) resent_after_append: AtomicU64,
    /// Retries the leader answered as duplicates (idempotence).
    pub(crate) deduplicated: AtomicU64,
}

impl Default for SendPolicy {
    fn default() -> Self {
        Self {
            acks: Acks::All,
            retries: u32::MAX,
            delivery_timeout: std::time::Duration::from_secs(120),
            request_timeout: std::time::Duration::from_secs(30),
            counters: Arc::default(),
            compression: crate::storage::record_batch::Compression::None,
            producer: None,
        }
    }
}

/// A replicated partition's logs, as the partition sees them: implemented by
/// `crate::replica` (layer 6). The leader's log serves every read and append; consumers
/// read only below the high watermark.
pub(crate) trait ReplicatedLog<K, V>: Send + Sync {
    /// The leader's log start offset.
    fn log_start(&self) -> u64;
    /// A producer with this codec began sending to the partition: persisted replicas
    /// compress with it unless their topic names a codec (see `DiskLog`'s).
    fn note_producer_codec(&self, codec: crate::storage::record_batch::Compression) {
        let _ = codec;
    }
    /// The leader's log end offset.
    fn log_end(&self) -> u64;
    /// The high watermark (lock-free).
    fn high_watermark(&self) -> u64;
    /// Passes the records from `offset` on (at most `max`, below the high watermark).
    fn read(&self, offset: u64, max: usize, f: &mut dyn FnMut(u64, &Entry<K, V>)) -> ReadOutcome;
    /// The first record below the high watermark with a timestamp at or after `timestamp`.
    fn offset_for_time(&self, timestamp: i64) -> Option<(u64, i64)>;
    /// Appends `entry` under `policy` (the whole send, retries included, ends by
    /// `deadline` if given), returning its offset.
    fn append(
        &self,
        entry: Entry<K, V>,
        policy: &SendPolicy,
        deadline: Option<Instant>,
    ) -> std::result::Result<u64, (Option<Entry<K, V>>, AppendError)>;
    /// Appends `entry` as record `seq` of producer `id` (the sequence given: a retry from
    /// outside), under `policy`'s acks and retries; a retry of a record the leader holds
    /// returns its offset without appending.
    fn append_sequenced(
        &self,
        entry: Entry<K, V>,
        policy: &SendPolicy,
        id: ProducerIdentity,
        seq: i32,
    ) -> std::result::Result<u64, (Option<Entry<K, V>>, AppendError)>;
    /// Appends every entry in order under `policy`; on failure the entries not
    /// acknowledged are left in `entries`.
    fn append_batch(
        &self,
        entries: &mut Vec<Entry<K, V>>,
        policy: &SendPolicy,
    ) -> std::result::Result<(), AppendError>;
    /// Appends `entry` under `policy` (retrying refusals) without waiting for its
    /// acknowledgement; [`await_pending`](Self::await_pending) waits for it.
    fn append_pending(
        &self,
        entry: Entry<K, V>,
        policy: &SendPolicy,
    ) -> std::result::Result<Pending<K, V>, Refused<K, V>>;
    /// Waits for a pending append's acks level, retrying per `policy` (a retry appends the
    /// record again, after records sent since); its offset.
    fn await_pending(
        &self,
        pending: Pending<K, V>,
        policy: &SendPolicy,
    ) -> std::result::Result<u64, (Option<Entry<K, V>>, AppendError)>;
    /// Waits until the record appended at `offset` in leader epoch `epoch` is acknowledged
    /// or can no longer be (the leader changed, the partition closed), or `deadline`.
    fn settle(&self, epoch: i32, offset: u64, deadline: Option<Instant>);
    /// The asynchronous side of [`await_pending`](Self::await_pending): `Ready` once its
    /// acknowledgement is settled (acknowledged, or failed: the leader changed, HW passed
    /// it with too few in-sync replicas, the partition closed), so that `await_pending`
    /// then returns without waiting for replicas (a failure's retry appends again there);
    /// otherwise copies for the followers as a blocking wait would, registers the task in
    /// `slot` and returns `Pending`. The caller calls
    /// [`cancel_pending`](Self::cancel_pending) if it stops waiting.
    fn poll_pending(
        &self,
        cx: &mut std::task::Context<'_>,
        slot: &mut crate::sync::WakerSlot,
        pending: &Pending<K, V>,
        policy: &SendPolicy,
    ) -> std::task::Poll<()>;
    /// Takes a registration of [`poll_pending`](Self::poll_pending) off.
    fn cancel_pending(&self, slot: &mut crate::sync::WakerSlot);
    /// Resumes a pending append whose acknowledgement [`poll_pending`](Self::poll_pending)
    /// found settled: its offset if acknowledged; after a failure, the policy's retry
    /// (backing off as `await_pending` does, then appending again) without waiting for
    /// the new append's acknowledgement: the pending append to poll next.
    fn resume_pending(
        &self,
        pending: Pending<K, V>,
        policy: &SendPolicy,
    ) -> std::result::Result<Resumed<K, V>, Refused<K, V>>;
    /// Closes the partition (its topic was deleted, or the broker closed: the partition's
    /// [`ClosedByBroker`] flag, marked first, says which).
    fn close(&self);
    /// Fsyncs every replica's log on disk (a persisted partition; else nothing to do).
    fn sync(&self) -> Result<()>;
    /// Every replica's records: `(id, log start, [(epoch, entry)])`.
    fn replica_logs(&self) -> ReplicaLogs<K, V>;
}

/// An append that failed: the entry handed back (`None`: it is in the log) and why.
pub(crate) type Refused<K, V> = (Option<Entry<K, V>>, AppendError);

/// What [`ReplicatedLog::resume_pending`] did with a settled pending append.
pub(crate) enum Resumed<K, V> {
    /// Acknowledged at this offset.
    Acked(u64),
    /// Failed, and appended again: its acknowledgement pending.
    Again(Pending<K, V>),
}

/// A pipelined send's log and policy (`Appender::pipeline`).
pub(crate) type Pipeline<'a, K, V> = (&'a Arc<dyn ReplicatedLog<K, V>>, &'a Arc<SendPolicy>);

/// A replicated append in the leader's log whose acknowledgement is awaited later
/// (`Producer::send_async`): the record, shared with the log, and the send's progress.
pub(crate) struct Pending<K, V> {
    pub(crate) entry: replica_log::SendRecords<K, V>,
    pub(crate) progress: progress::SendProgress,
}

impl<K, V> Pending<K, V> {
    /// Where it was appended: `(leader epoch, offset)`.
    pub(crate) fn at(&self) -> Option<(i32, u64)> {
        self.progress.appended_at()
    }
}

/// Every replica's records: `(id, log start, [(leader epoch, entry)])`.
pub(crate) type ReplicaLogs<K, V> = Vec<(u32, u64, Vec<(i32, Arc<Entry<K, V>>)>)>;

/// The offsets of one partition at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Offsets {
    pub(crate) log_start: u64,
    pub(crate) high_watermark: u64,
    pub(crate) log_end: u64,
    /// Records a gated partition overwrote while no group's gate held them.
    pub(crate) overwritten_unread: u64,
    /// An in-memory compacted partition's section.
    pub(crate) compacted: Option<CompactedStats>,
    /// The last stable offset (the high watermark without open transactions).
    pub(crate) last_stable_offset: u64,
}

/// A registered group on one partition.
pub(crate) struct GroupGate<K, V> {
    committed: Option<u64>,
    /// Gated partitions only: a gating reader at the committed offset (or the start).
    gate: Option<Reader<Entry<K, V>>>,
    /// Reads lending records in place from the ring (`lend`): while any is in progress the
    /// gate does not move forward (commits are applied when the last one ends) and is not
    /// dropped.
    lenders: u32,
    /// The group was removed while a read was lending: the last lender drops the gate.
    removed: bool,
}

impl<K, V> GroupGate<K, V> {
    fn new(committed: Option<u64>, gate: Option<Reader<Entry<K, V>>>) -> Self {
        Self {
            committed,
            gate,
            lenders: 0,
            removed: false,
        }
    }
}

/// A group's state on one partition, behind its own lock: commits take it to move the
/// gate, and a reader of the group takes it to read, without slot locks, the records at
/// or after the gate (which cannot move while it is held).
pub(crate) type GroupSlot<K, V> = Mutex<GroupGate<K, V>>;

/// Lets go of the gates of groups that have been empty (no consumer open) for longer than
/// the broker allows (the broker's group expiry, layer 7, as Kafka expires the offsets of
/// empty groups): a producer waiting for room on a gated partition calls it now and then,
/// so that time passing on the broker's clock is noticed even while every thread waits.
pub(crate) type GateExpiry = Arc<dyn Fn() + Send + Sync>;

/// The registered groups of a partition, by name.
type GroupMap<K, V> = HashMap<Arc<str>, Arc<GroupSlot<K, V>>>;

/// What a gated partition overwrote while no group's gate held it: the offset ranges no
/// gate held when they were let go (the last one open-ended while no gate exists), and
/// what ranges now wholly overwritten counted. A range's records are counted as the
/// ring's overwrite floor passes them.
#[derive(Debug)]
struct Unheld {
    /// Live gates (registered groups holding producers back).
    gates: usize,
    /// Records of ranges wholly overwritten, folded out of `ranges`.
    counted: u64,
    /// `[from, to)` ranges, increasing and disjoint; `to == u64::MAX` while open.
    ranges: Vec<(u64, u64)>,
}

impl Unheld {
    fn new(gated: bool) -> Self {
        Self {
            gates: 0,
            counted: 0,
            ranges: if gated {
                vec![(0, u64::MAX)]
            } else {
                Vec::new()
            },
        }
    }

    /// The records overwritten unheld, given the ring's overwrite floor now.
    fn total(&mut self, floor: u64) -> u64 {
        let done = self.ranges.iter().take_while(|r| r.1 <= floor).count();
        for (from, to) in self.ranges.drain(..done) {
            self.counted += to - from;
        }
        self.counted
            + self
                .ranges
                .iter()
                .map(|&(from, to)| floor.min(to).saturating_sub(from))
                .sum::<u64>()
    }

    /// A gate now holds the records from `at` on.
    fn gate_added(&mut self, at: u64) {
        self.gates += 1;
        if self.gates == 1 {
            if let Some(last) = self.ranges.last_mut().filter(|r| r.1 == u64::MAX) {
                last.1 = at.max(last.0);
            }
        }
    }

    /// A gate at `at` no longer holds records back; the last one lets go of everything
    /// from `at` on.
    fn gate_dropped(&mut self, at: u64) {
        self.gates = self.gates.saturating_sub(1);
        if self.gates == 0 {
            let from = self.ranges.last().map_or(at, |r| at.max(r.1));
            self.ranges.push((from, u64::MAX));
        }
    }
}

/// One partition's log.
pub(crate) struct Partition<K, V> {
    ring: Ring<Entry<K, V>>,
    /// The ring's one producer, shared by every producer's [`Appender`] (one publish at a
    /// time); also keeps the ring open until `close`.
    producer: appender::SharedProducer<K, V>,
    /// The non-gating reader every read goes through (module docs).
    anchor: Reader<Entry<K, V>>,
    capacity: u64,
    config: PartitionConfig,
    /// Records below this offset have expired by retention (only grows).
    expired_below: AtomicU64,
    groups: Mutex<GroupMap<K, V>>,
    /// Gated partitions: what was overwritten while no gate held it (taken after `groups`
    /// and a group's slot, never before).
    unheld: Mutex<Unheld>,
    /// Gated partitions of a broker: what a producer waiting for room calls to let
    /// expired groups go ([`GateExpiry`]).
    expiry: Option<GateExpiry>,
    /// The topic's arrival notifications: producers notify after each append.
    arrivals: Arc<WaitSet>,
    /// Persisted partitions: the log on disk below the ring (`crate::persist`).
    disk: Option<Arc<dyn DiskLog<K, V>>>,
    /// Set when the broker closed the partition, so appends say that, not that the topic
    /// was deleted (shared with the appenders and the replica set).
    broker_closed: ClosedByBroker,
    /// Replicated partitions: the replicas' logs serve every read and append instead of
    /// the ring (`crate::replica`).
    replicated: Option<Arc<dyn ReplicatedLog<K, V>>>,
    /// In-memory compacted partitions: the latest record of each key the ring let go
    /// (`compacted`).
    compaction: Option<Arc<Compaction<K, V>>>,
    /// Transactions on this partition: open ones (the LSO), aborted ones, epoch fences
    /// (`txn` module docs); shared with the appenders.
    txn: Arc<txn::TxnShared>,
}

/// A persisted partition's log on disk, as the partition sees it: implemented by
/// `crate::persist`, which knows the codecs (this layer does not).
pub(crate) trait DiskLog<K, V>: Send + Sync {
    /// The log start offset (retention moves it).
    fn log_start(&self) -> u64;
    /// A producer with this codec began sending to the partition (see
    /// `crate::persist::append::CodecChoice`).
    fn note_producer_codec(&self, codec: crate::storage::record_batch::Compression) {
        let _ = codec;
    }
    /// Passes the records from `offset` on (at most `max`, all below the ring's oldest
    /// record) to `f`, each decoded for it, in increasing offset order (with gaps where the
    /// log has them); returns the count read and the next offset to read (past the last
    /// record or batch read: `offset` when nothing was there), or the error that stopped
    /// the read.
    fn read(
        &self,
        offset: u64,
        max: usize,
        f: &mut dyn FnMut(u64, Entry<K, V>),
    ) -> Result<(usize, u64)>;
    /// The first record on disk with a timestamp at or after `timestamp` (time index).
    fn offset_for_time(&self, timestamp: i64) -> Result<Option<(u64, i64)>>;
    /// The log end on disk (records at and above it are only in the ring).
    fn disk_end(&self) -> u64;
    /// Refuses an entry larger than the topic's `max_message_bytes`, or than a batch on disk
    /// can hold: `Err((size, max))`.
    fn check_size(&self, entry: &Entry<K, V>) -> std::result::Result<(), (u64, u64)>;
    /// Waits until the record at `offset` is acknowledged by the flush policy.
    ///
    /// # Errors
    ///
    /// [`Error::NotAcknowledged`] when the log went offline first.
    fn wait_acked(&self, offset: u64) -> Result<()>;
    /// The error a failed disk read left, for the reader.
    fn take_error(&self) -> Error;
    /// Hands every record below `end` to the OS (waiting for the writer to reach it) and,
    /// with `fsync`, makes it durable.
    fn sync_to(&self, end: u64, fsync: bool) -> Result<()>;
    /// [`Error::PartitionOffline`] once an I/O error took the log offline.
    fn offline_error(&self) -> Option<Error>;
    /// The asynchronous [`wait_acked`](Self::wait_acked): registers the task in `slot`
    /// while the record is not acknowledged (the caller calls
    /// [`cancel_acked`](Self::cancel_acked) if it stops waiting). By default, the blocking
    /// wait (for logs whose acknowledgement never waits).
    fn poll_acked(
        &self,
        _cx: &mut std::task::Context<'_>,
        _slot: &mut crate::sync::WakerSlot,
        offset: u64,
    ) -> std::task::Poll<Result<()>> {
        std::task::Poll::Ready(self.wait_acked(offset))
    }
    /// Takes a registration of [`poll_acked`](Self::poll_acked) off.
    fn cancel_acked(&self, _slot: &mut crate::sync::WakerSlot) {}
}

impl<K, V> fmt::Debug for Partition<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Partition")
            .field("capacity", &self.capacity)
            .field("log_end", &self.log_end())
            .finish_non_exhaustive()
    }
}

impl<K, V> Partition<K, V> {
    /// A new, empty partition.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when the capacity is not a power of two in `2..=2^32`.
    pub(crate) fn new(config: PartitionConfig, arrivals: Arc<WaitSet>) -> Result<Self> {
        let overflow = if config.gated {
            LapPolicy::Block
        } else {
            LapPolicy::DropOldest
        };
        let ring_config = RingConfig::new(config.capacity).overflow(overflow);
        Self::with_ring(config, ring_config, arrivals, None)
    }

    /// With `expiry` called by producers waiting for room (a gated partition).
    pub(crate) fn with_gate_expiry(mut self, expiry: Option<GateExpiry>) -> Self {
        if self.config.gated {
            self.expiry = expiry;
        }
        self
    }

    /// A persisted partition whose ring starts at `start` (the log end on disk), with a
    /// gating reader for the disk writer created before any producer. Groups never gate.
    pub(crate) fn persisted(
        config: PartitionConfig,
        arrivals: Arc<WaitSet>,
        start: u64,
        disk: Arc<dyn DiskLog<K, V>>,
    ) -> Result<(Self, Reader<Entry<K, V>>)> {
        let config = PartitionConfig {
            gated: false,
            retention_ms: None,
            ..config
        };
        let ring_config = RingConfig::new(config.capacity)
            .overflow(LapPolicy::Block)
            .start_sequence(start);
        let partition = Self::with_ring(config, ring_config, arrivals, Some(disk))?;
        let writer = partition.ring.gating_reader(Start::Oldest)?;
        Ok((partition, writer))
    }

    /// Keeps producer stamps for the disk writer from the log end on (`tail`).
    pub(crate) fn keep_stamps(&self) -> tail::StampRuns {
        let mut tail = self.producer.lock();
        let at = tail.next_sequence();
        tail.keep_stamps(at)
    }

    /// With idle producer ids expiring by `expiry` (module `tail`, "Expiry"): a
    /// one-replica partition of a broker.
    pub(crate) fn with_producer_expiry(self, expiry: ProducerExpiry) -> Self {
        self.producer.lock().expire_producers(expiry);
        self
    }

    /// How the partition's idle producer ids expire, if they do (the disk writer's
    /// snapshots follow the same rule).
    pub(crate) fn producer_expiry(&self) -> Option<ProducerExpiry> {
        self.producer.lock().producer_expiry().cloned()
    }

    /// Puts the producers' states recovered from disk (expired at once: module `tail`).
    pub(crate) fn restore_producers(&self, states: producer_state::ProducerStates) {
        self.producer.lock().restore(states);
    }

    /// Calls `f` with the producers' states (one replica's partition; a replicated one's
    /// are its replicas').
    #[allow(
        dead_code,
        reason = "for the transactions (issue 30, second half) and tools"
    )]
    pub(crate) fn with_producers<R>(
        &self,
        f: impl FnOnce(&mut producer_state::ProducerStates) -> R,
    ) -> R {
        f(self.producer.lock().producers())
    }

    /// The partition over a new single-producer ring made from `ring_config`, its producer
    /// shared by the appenders.
    fn with_ring(
        config: PartitionConfig,
        ring_config: RingConfig,
        arrivals: Arc<WaitSet>,
        disk: Option<Arc<dyn DiskLog<K, V>>>,
    ) -> Result<Self> {
        // Entries without headers (not boxed) drop as a no-op when the key and value types
        // have no drop glue: the ring then overwrites them without reading them back (ring
        // `sequencer`, "Plain values"; the box of a record with headers is what gives
        // `Entry` its drop glue).
        let plain = (!std::mem::needs_drop::<K>() && !std::mem::needs_drop::<V>())
            .then_some(Entry::<K, V>::is_plain as fn(&Entry<K, V>) -> bool);
        let (producer, ring) =
            Ring::single_producer_plain(ring_config, plain).map_err(|e| match e {
                Error::InvalidConfig { value, valid, .. } => Error::InvalidConfig {
                    name: "records_in_memory",
                    value,
                    valid,
                },
                other => other,
            })?;
        // Announcing: producers take slot locks only while it reads (ring `reader` docs).
        let anchor = ring.announcing_reader()?;
        Ok(Self {
            ring,
            producer: Arc::new(Mutex::new(tail::Tail::new(producer))),
            anchor,
            capacity: config.capacity as u64,
            config,
            expired_below: AtomicU64::new(0),
            groups: Mutex::new(HashMap::new()),
            unheld: Mutex::new(Unheld::new(config.gated)),
            expiry: None,
            arrivals,
            disk,
            broker_closed: ClosedByBroker::default(),
            replicated: None,
            compaction: None,
            txn: Arc::default(),
        })
    }

    /// An in-memory partition that keeps the latest record of each key the ring lets go
    /// in `log` (made from the ring's first offset): module `compacted`.
    pub(crate) fn with_compaction(
        mut self,
        log: impl FnOnce(u64) -> Arc<dyn CompactedLog<K, V>>,
    ) -> Result<Self> {
        debug_assert!(self.disk.is_none() && self.replicated.is_none());
        let reader = self.ring.announcing_reader()?;
        let log = log(self.ring.start_sequence());
        self.compaction = Some(Arc::new(Compaction { log, reader }));
        Ok(self)
    }

    /// Whether the partition keeps each key's latest record in memory as its ring lets it
    /// go (an in-memory compacted topic's partition; `offsets` reports its stats then).
    pub(crate) fn compacts_in_memory(&self) -> bool {
        self.replicated.is_none() && self.compaction.is_some()
    }

    /// What an in-memory compacted partition's section holds (`None` for others).
    pub(crate) fn compacted_stats(&self) -> Option<CompactedStats> {
        self.compaction.as_ref().map(|c| c.log.stats())
    }

    /// A replicated partition: `log` serves reads and appends; the ring is unused (kept
    /// minimal) and groups never gate (the replicas keep `capacity` records each).
    /// `broker_closed` is the flag `log` reads when an append finds it closed.
    pub(crate) fn replicated(
        config: PartitionConfig,
        arrivals: Arc<WaitSet>,
        log: Arc<dyn ReplicatedLog<K, V>>,
        broker_closed: ClosedByBroker,
    ) -> Result<Self> {
        let config = PartitionConfig {
            gated: false,
            ..config
        };
        let mut p = Self::with_ring(config, RingConfig::new(2), arrivals, None)?;
        p.replicated = Some(log);
        p.broker_closed = broker_closed;
        Ok(p)
    }

    /// Hands every record appended so far to the OS and, with `fsync`, makes it durable
    /// (persisted partitions; a replicated one makes it durable either way).
    pub(crate) fn sync_disk(&self, fsync: bool) -> Result<()> {
        if let Some(r) = &self.replicated {
            return r.sync();
        }
        match &self.disk {
            Some(disk) => disk.sync_to(self.log_end(), fsync),
            None => Ok(()),
        }
    }

    /// [`Error::PartitionOffline`] once an I/O error took the partition's log offline
    /// (a plain persisted partition).
    pub(crate) fn offline_error(&self) -> Option<Error> {
        self.disk.as_ref()?.offline_error()
    }

    /// Why the last disk read failed (after [`ReadOutcome::Failed`]).
    pub(crate) fn disk_error(&self) -> Error {
        match &self.disk {
            Some(disk) => disk.take_error(),
            None => Error::Closed {
                what: "partition has no log on disk".into(),
            },
        }
    }

    /// Every replica's records, for a replicated partition.
    pub(crate) fn replica_logs(&self) -> Option<ReplicaLogs<K, V>> {
        self.replicated.as_ref().map(|r| r.replica_logs())
    }

    /// Whether the ring is closed (the writer's exit condition).
    pub(crate) fn is_closed(&self) -> bool {
        self.ring.is_closed()
    }

    /// The committed offset of every group on this partition (for the offsets checkpoint).
    pub(crate) fn committed_all(&self) -> Vec<(Arc<str>, u64)> {
        let slots: Vec<_> = self
            .groups
            .lock()
            .iter()
            .map(|(g, s)| (Arc::clone(g), Arc::clone(s)))
            .collect();
        slots
            .into_iter()
            .filter_map(|(g, s)| s.lock().committed.map(|c| (g, c)))
            .collect()
    }

    /// A producer with `codec` began sending here: persisted partitions compress with it
    /// unless their topic names a codec.
    pub(crate) fn note_producer_codec(&self, codec: crate::storage::record_batch::Compression) {
        if let Some(disk) = &self.disk {
            disk.note_producer_codec(codec);
        }
        if let Some(r) = &self.replicated {
            r.note_producer_codec(codec);
        }
    }

    /// A handle for one producer thread.
    pub(crate) fn appender(&self) -> Appender<K, V> {
        self.appender_with(Arc::new(SendPolicy::default()))
    }

    /// [`appender`](Self::appender) with `policy`, shared (no policy made per appender).
    pub(crate) fn appender_with(&self, policy: Arc<SendPolicy>) -> Appender<K, V> {
        Appender {
            direct: self.disk.is_none() && self.replicated.is_none() && self.compaction.is_none(),
            compaction: self.compaction.clone(),
            handle: Arc::clone(&self.producer),
            ring: self.ring.clone(),
            arrivals: Arc::clone(&self.arrivals),
            disk: self.disk.clone(),
            broker_closed: self.broker_closed.clone(),
            replicated: self.replicated.clone(),
            policy,
            unsettled: None,
            expiry: self.expiry.clone(),
            txn: Arc::clone(&self.txn),
        }
    }

    /// The log end offset: one past the last offset published (module docs).
    /// Replicated partitions: the high watermark, the end of what consumers may read.
    pub(crate) fn log_end(&self) -> u64 {
        match &self.replicated {
            Some(r) => r.high_watermark(),
            None => self.ring.cursor(),
        }
    }

    /// The high watermark: consumers read only below it. Equal to the log end unless
    /// the partition is replicated.
    pub(crate) fn high_watermark(&self) -> u64 {
        match &self.replicated {
            Some(r) => r.high_watermark(),
            None => self.ring.cursor(),
        }
    }

    /// The log start offset at `now_ms` (applying retention).
    pub(crate) fn log_start(&self, now_ms: i64) -> u64 {
        if let Some(r) = &self.replicated {
            return r.log_start();
        }
        if let Some(disk) = &self.disk {
            return disk.log_start();
        }
        if let Some(c) = &self.compaction {
            return c.log.log_start();
        }
        self.ring_start(self.log_end(), now_ms)
    }

    /// [`log_start`](Self::log_start) of a partition in memory only (neither replicated nor
    /// persisted), given its log end `end` as the caller just loaded it.
    fn ring_start(&self, end: u64, now_ms: i64) -> u64 {
        let in_ring = end.saturating_sub(self.capacity);
        // Relaxed: a lower bound that only grows; the records themselves are read through
        // their slots' tags, which say whether they are still there.
        let mut start = in_ring.max(self.expired_below.load(Ordering::Relaxed));
        if let Some(retention) = self.config.retention_ms {
            let cutoff = now_ms.saturating_sub(retention);
            while start < end {
                match self.anchor.get_with(start, |e| e.timestamp()) {
                    Ok(ts) if ts < cutoff => start += 1,
                    Ok(_) | Err(GetError::NotPublished { .. }) => break,
                    // Overwritten meanwhile: the ring's own start has moved past it.
                    Err(_) => start = start.max(self.log_end().saturating_sub(self.capacity)),
                }
            }
            // Relaxed: as above.
            self.expired_below.fetch_max(start, Ordering::Relaxed);
        }
        start
    }

    /// The ring's overwrite floor: every offset below it was overwritten (a partition in
    /// memory only; 0 for others, whose log start is the disk's or the replicas').
    pub(crate) fn overwritten_below(&self) -> u64 {
        if self.disk.is_some() || self.replicated.is_some() || self.compaction.is_some() {
            return 0;
        }
        self.log_end().saturating_sub(self.capacity)
    }

    /// Whether registered groups gate producers (`Overflow::Block`, in memory).
    pub(crate) fn is_gated(&self) -> bool {
        self.config.gated
    }

    /// Records a gated partition overwrote while no group's gate held them: no group had
    /// read them (consumers without a group id hold nothing back, so one may have).
    pub(crate) fn overwritten_unread(&self) -> u64 {
        if !self.config.gated {
            return 0;
        }
        let floor = self.overwritten_below();
        self.unheld.lock().total(floor)
    }

    /// Whether reads look at the time (`now_ms`): only to expire records by age. Without
    /// retention by age any `now_ms` gives the same result, so a reader need not ask the
    /// clock.
    pub(crate) fn expires_by_age(&self) -> bool {
        self.config.retention_ms.is_some()
    }

    /// Log start, high watermark and log end.
    pub(crate) fn offsets(&self, now_ms: i64) -> Offsets {
        if let Some(r) = &self.replicated {
            let log_end = r.log_end();
            let high_watermark = r.high_watermark();
            return Offsets {
                log_start: r.log_start().min(log_end),
                high_watermark,
                log_end,
                overwritten_unread: 0,
                compacted: None,
                last_stable_offset: self.stable_below(high_watermark),
            };
        }
        let log_end = self.log_end();
        let high_watermark = self.high_watermark();
        Offsets {
            log_start: self.log_start(now_ms).min(log_end),
            high_watermark,
            log_end,
            overwritten_unread: self.overwritten_unread(),
            compacted: self.compacted_stats(),
            last_stable_offset: self.stable_below(high_watermark),
        }
    }

    /// Whether reads may find gaps between offsets ([`ReadOutcome::Sparse`]): only a log on
    /// disk, a replicated one or a compacted section; the ring's offsets are dense.
    pub(crate) fn may_have_gaps(&self) -> bool {
        self.disk.is_some() || self.replicated.is_some() || self.compaction.is_some()
    }

    /// Whether a read at `offset` would find something (a record, or the partition closed).
    pub(crate) fn readable(&self, offset: u64) -> bool {
        self.high_watermark() > offset || self.ring.is_closed()
    }

    /// Passes the records from `offset` on (at most `max`, below the high watermark) to `f`,
    /// in offset order. The one place that decides where a read is served from: today the
    /// ring; records below the in-memory tail will be read from disk here.
    ///
    /// With `group` (the reader's group on this partition), records at or after the
    /// group's gate are read without slot locks: the group's lock, held for the run, keeps
    /// the gate (and so the producers) from moving past them.
    pub(crate) fn read(
        &self,
        offset: u64,
        max: usize,
        now_ms: i64,
        group: Option<&GroupSlot<K, V>>,
        mut given: impl FnMut(u64, Handed<'_, K, V>),
    ) -> ReadOutcome {
        let mut f = |o: u64, e: &Entry<K, V>| given(o, Handed::Lent(e));
        if let Some(r) = &self.replicated {
            return r.read(offset, max, &mut f);
        }
        let start = self.log_start(now_ms);
        let hw = self.high_watermark();
        if offset < start || offset > hw {
            return ReadOutcome::OutOfRange {
                start: start.min(hw),
                end: hw,
            };
        }
        let max = max.min((hw - offset).min(usize::MAX as u64) as usize);
        if let Some(group) = group {
            let mut g = group.lock();
            if let Some(gate) = &mut g.gate {
                if let (n @ 1.., _) = gate.get_run_with_noting(offset, max, &mut f) {
                    return ReadOutcome::Read(n);
                }
            }
        }
        // A loop, not a call to itself: a reader may wait here for as long as the writer is
        // descheduled (it never recurses, however long that is).
        let mut backoff = Backoff::new();
        loop {
            if let Some(c) = &self.compaction {
                // Below the ring's tail: the section (module `compacted`). At or after it,
                // the ring; a record overwritten meanwhile was retained first, so the next
                // round finds it in the section.
                if let Some((n, next)) = c.log.read(offset, max, &mut f) {
                    return ReadOutcome::of(offset, n, next);
                }
                if self.config.retention_ms.is_some() {
                    // Records of the ring past the retention age are gone (the ring's own
                    // start is at or below `covered`, so only age moves it past `offset`).
                    let start = self.ring_start(hw, now_ms);
                    if offset < start {
                        return ReadOutcome::Sparse { n: 0, next: start };
                    }
                }
            }
            if let Some(disk) = &self.disk {
                if offset < disk.disk_end() && offset < self.ring.oldest() {
                    return match disk.read(offset, max, &mut |o, e| given(o, Handed::Owned(e))) {
                        Ok((n, next)) => ReadOutcome::of(offset, n, next),
                        // Retention moved the log start past `offset` meanwhile.
                        Err(_) if offset < disk.log_start() => {
                            let _ = disk.take_error();
                            ReadOutcome::OutOfRange {
                                start: disk.log_start().min(hw),
                                end: hw,
                            }
                        }
                        Err(_) => ReadOutcome::Failed,
                    };
                }
            }
            return match self.anchor.get_run_with(offset, max, &mut f) {
                (0, Some(GetError::Evicted { .. })) if self.compaction.is_some() => continue,
                (0, Some(GetError::Evicted { .. })) if self.disk.is_some() => {
                    // Overwritten since we looked, so on disk: the writer publishes its end
                    // before it frees the slots. Only a writer that stopped (its ring then
                    // closes) lets a record go unwritten.
                    if self.ring.is_closed()
                        && self.disk.as_ref().is_some_and(|d| offset >= d.disk_end())
                    {
                        ReadOutcome::Failed
                    } else {
                        backoff.snooze();
                        continue;
                    }
                }
                (0, Some(GetError::Evicted { .. })) => {
                    // Overwritten since we looked: the log start moved past `offset`, even if
                    // the published cursor we load next is older than the write that overwrote it.
                    let start = self.log_start(now_ms).max(offset + 1);
                    ReadOutcome::OutOfRange {
                        start,
                        end: self.high_watermark().max(start),
                    }
                }
                (0, _) => ReadOutcome::Empty,
                (n, _) => ReadOutcome::Read(n),
            };
        }
    }

    /// The first offset at or after the log start whose record's timestamp is at or after
    /// `timestamp` (Kafka's `offsetsForTimes`), with that timestamp; `None` if there is none.
    pub(crate) fn offset_for_time(&self, timestamp: i64, now_ms: i64) -> Option<(u64, i64)> {
        if let Some(r) = &self.replicated {
            return r.offset_for_time(timestamp);
        }
        let mut at = self.log_start(now_ms);
        if let Some(c) = &self.compaction {
            let covered = c.log.covered();
            if let Some(found) = c.log.offset_for_time(at, timestamp) {
                return Some(found);
            }
            at = at.max(covered);
        }
        if let Some(disk) = &self.disk {
            if let Ok(Some(found)) = disk.offset_for_time(timestamp) {
                return Some(found);
            }
            // Not on disk: the ring's records not yet written (or still held).
            at = at.max(disk.disk_end().min(self.ring.oldest()));
        }
        loop {
            let end = self.high_watermark();
            if at >= end {
                return None;
            }
            match self.anchor.get_with(at, |e| e.timestamp()) {
                Ok(ts) if ts >= timestamp => return Some((at, ts)),
                Ok(_) => at += 1,
                Err(GetError::NotPublished { .. }) => return None,
                // Overwritten while we scanned, so kept in the section if it is its key's
                // latest: look there from `at` on, then go on past what it covers.
                Err(_) if self.compaction.is_some() => {
                    let c = self.compaction.as_ref()?;
                    let covered = c.log.covered();
                    if let Some(found) = c.log.offset_for_time(at, timestamp) {
                        return Some(found);
                    }
                    at = at.max(covered);
                }
                // Overwritten while we scanned: continue from the new start (itself still
                // to be looked at), or the next offset if the start has not moved past us.
                Err(_) => at = (at + 1).max(self.log_start(now_ms)),
            }
        }
    }

    /// Registers `group` on this partition if it is not yet, gating (on a gated partition)
    /// at `start` until its first commit. Returns its committed offset.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`] when the partition is closed.
    pub(crate) fn register_group(&self, group: &Arc<str>, start: u64) -> Result<Option<u64>> {
        let mut groups = self.groups.lock();
        if let Some(g) = groups.get(group) {
            let mut g = g.lock();
            if self.config.gated && g.gate.is_none() && !g.removed {
                // Its gate was let go (the group expired while empty): it holds producers
                // back again from its committed offset, or the oldest record if that is gone.
                let from = g.committed.unwrap_or(start);
                let gate = self.gate_at(from)?;
                self.gate_added(from);
                g.gate = Some(gate);
            }
            return Ok(g.committed);
        }
        let gate = if self.config.gated {
            let gate = self.gate_at(start)?;
            self.gate_added(start);
            Some(gate)
        } else {
            None
        };
        groups.insert(
            Arc::clone(group),
            Arc::new(Mutex::new(GroupGate::new(None, gate))),
        );
        Ok(None)
    }

    /// The state of `group` on this partition, if registered (for [`read`](Self::read)).
    pub(crate) fn group_slot(&self, group: &str) -> Option<Arc<GroupSlot<K, V>>> {
        self.groups.lock().get(group).cloned()
    }

    /// The committed offset of `group`, if it committed on this partition.
    pub(crate) fn committed(&self, group: &str) -> Option<u64> {
        self.group_slot(group).and_then(|g| g.lock().committed)
    }

    /// Stores `offset` as `group`'s committed offset (the next record it will read),
    /// registering the group first if needed, and moves its gate there.
    ///
    /// # Errors
    ///
    /// `Err((start, end))` with the valid range when `offset` lies past the log end.
    pub(crate) fn commit(
        &self,
        group: &Arc<str>,
        offset: u64,
        now_ms: i64,
    ) -> std::result::Result<(), (u64, u64)> {
        let end = self.log_end();
        if offset > end {
            return Err((self.log_start(now_ms).min(end), end));
        }
        let slot = Arc::clone(
            self.groups
                .lock()
                .entry(Arc::clone(group))
                .or_insert_with(|| Arc::new(Mutex::new(GroupGate::new(None, None)))),
        );
        self.commit_slot(&slot, offset, || now_ms)
    }

    /// [`commit`](Self::commit) for a group whose state the caller holds (from
    /// [`group_slot`](Self::group_slot)): no lookup by name. `now_ms` is asked only for
    /// the error.
    ///
    /// # Errors
    ///
    /// As [`commit`](Self::commit).
    pub(crate) fn commit_slot(
        &self,
        slot: &GroupSlot<K, V>,
        offset: u64,
        now_ms: impl FnOnce() -> i64,
    ) -> std::result::Result<(), (u64, u64)> {
        let mut entry = slot.lock();
        // A commit of what the group's reads counted needs no look at the log end: the
        // gate knows it published (the cursor's line is the producer's, and every load of
        // it can stall the producer's next store).
        let known = match (&entry.gate, &self.replicated) {
            (Some(gate), None) => offset <= gate.known_published(),
            _ => false,
        };
        if !known {
            let end = self.log_end();
            if offset > end {
                drop(entry);
                return Err((self.log_start(now_ms()).min(end), end));
            }
        }
        entry.committed = Some(offset);
        if !self.config.gated {
            return Ok(());
        }
        let lending = entry.lenders > 0;
        match &mut entry.gate {
            // Forward: at once, or when the last lending read ends (`lend`).
            Some(gate) if gate.position() <= offset => {
                if !lending {
                    advance(gate, offset);
                }
            }
            slot => {
                // Backwards (or no gate yet): a new gate at the lower offset first, then
                // drop the old one, so there is never a moment without a gate.
                if let Ok(new) = self.gate_at(offset) {
                    if slot.is_none() {
                        self.gate_added(offset);
                    }
                    *slot = Some(new);
                }
            }
        }
        Ok(())
    }

    /// Forgets `group` on this partition: its gate stops holding producers back at once
    /// (also if a reader still holds the group's slot), or, while a read lends records in
    /// place (`lend`), when that read ends.
    pub(crate) fn remove_group(&self, group: &str) {
        let removed = self.groups.lock().remove(group);
        if let Some(slot) = removed {
            let mut g = slot.lock();
            // A read lending records the gate holds keeps it until it ends (`lend`).
            g.removed = true;
            if let Some(at) = g.gate.as_ref().map(|gate| gate.position()) {
                self.unheld.lock().gate_dropped(at);
            }
            let gate = if g.lenders == 0 { g.gate.take() } else { None };
            drop(g);
            drop(gate);
        }
    }

    /// Lets go of `group`'s gate on this partition, keeping its committed offset: it stops
    /// holding producers back until a consumer of the group registers again. Not while a
    /// read lends records the gate holds (the next call will). Returns whether a gate went.
    pub(crate) fn release_group(&self, group: &str) -> bool {
        let Some(slot) = self.groups.lock().get(group).cloned() else {
            return false;
        };
        let mut g = slot.lock();
        if g.lenders > 0 {
            return false;
        }
        let Some(gate) = g.gate.take() else {
            return false;
        };
        self.unheld.lock().gate_dropped(gate.position());
        drop(g);
        // Dropping a gating reader wakes the producers waiting for room.
        drop(gate);
        true
    }

    /// Notes a new gate of a group reading from `from`: what is still in memory from there
    /// on is the group's to read (if the ring overwrites some of it first, the group's
    /// consumer counts it as skipped); what was overwritten before is counted unheld.
    fn gate_added(&self, from: u64) {
        let at = from.max(self.overwritten_below());
        self.unheld.lock().gate_added(at);
    }

    /// A gating reader at `offset`, or at the log start if `offset` is gone.
    fn gate_at(&self, offset: u64) -> Result<Reader<Entry<K, V>>> {
        match self.ring.gating_reader(Start::At(offset)) {
            Ok(r) => Ok(r),
            Err(Error::SequenceOutOfRange { oldest, .. }) if offset < oldest => {
                self.ring.gating_reader(Start::Oldest)
            }
            Err(Error::SequenceOutOfRange { .. }) => self.ring.gating_reader(Start::Tail),
            Err(e) => Err(e),
        }
    }

    /// Records the partition keeps in memory.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Closes the partition: appends fail from now on, waiting producers and consumers wake.
    pub(crate) fn close(&self) {
        if let Some(r) = &self.replicated {
            r.close();
        }
        self.ring.close();
        self.arrivals.notify_all();
    }

    /// Closes the partition because its broker is closing (`Broker::close`): as
    /// [`close`](Self::close), and appends then say that the broker was closed. A
    /// persisted replicated partition's files are closed later, by the replicas' own
    /// close (`close_disk`).
    pub(crate) fn close_for_broker(&self) {
        self.broker_closed.mark();
        self.close();
    }
}

/// Moves a gating reader forward to `offset`, as far as records are published: an offset
/// committed while its record is still being written leaves the gate just behind it (safe:
/// it holds producers back a little longer), and the next commit moves it on.
///
/// The entries are skipped, not read: the group's readers read them while the gate held
/// them, and that happened before this move (the group's lock, or the same thread).
fn advance<T>(gate: &mut Reader<T>, offset: u64) {
    gate.skip_to(offset);
}

mod appender;
mod appender_async;
mod broker_close;
pub(crate) mod compacted;
pub(crate) use compacted::{CompactedLog, CompactedStats, Compaction};
mod entry;
mod lend;
pub(crate) mod producer_state;
pub(crate) mod progress;
pub(crate) mod tail;
pub(crate) use appender_async::Unsynced;
pub(crate) use producer_state::ProducerExpiry;
pub use producer_state::{ProducerIdentity, ProducerState};
pub(crate) mod replica_log;
pub(crate) mod topic_config;
pub(crate) mod txn;
pub(crate) use appender::{Appender, EXPIRY_LOOK};
pub(crate) use broker_close::ClosedByBroker;
pub use entry::MAX_TIMESTAMP;
pub(crate) use entry::{valid_timestamp, Entry, Handed, Parts};
pub(crate) use entry::{ControlMarker, TxnMark};
pub use txn::{AbortedTxn, IsolationLevel, OpenTxn};

/// A partition, its one group's name and that group's slot.
#[cfg(test)]
pub(crate) type WithGroup<K, V> = (Arc<Partition<K, V>>, Arc<str>, Arc<GroupSlot<K, V>>);

/// For tests and loom models: a partition of `capacity` records (gated by its groups or
/// not) with one group, `"g"`, registered from offset 0; the group's name and its slot (for
/// lending reads) with it.
#[cfg(test)]
pub(crate) fn with_group_g<K, V>(capacity: usize, gated: bool) -> WithGroup<K, V> {
    let config = PartitionConfig {
        capacity,
        gated,
        retention_ms: None,
    };
    let p = Arc::new(Partition::new(config, Arc::new(WaitSet::new())).unwrap());
    let group: Arc<str> = Arc::from("g");
    p.register_group(&group, 0).unwrap();
    let slot = p.group_slot("g").unwrap();
    (p, group, slot)
}

/// Loom models of the partition's concurrent paths (crate-private, so they live here; the
/// test script runs them with the other models). Capacity 2, at most 3 threads, `Arc`
/// payloads so a lost or doubled value fails the model.
#[cfg(all(test, logbus_loom))]
mod loom_models;

#[cfg(all(test, not(logbus_loom)))]
mod disk_tests;
