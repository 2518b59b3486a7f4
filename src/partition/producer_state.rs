//! The idempotent producer's state in one replica's log (Kafka's `ProducerStateManager`,
//! `ProducerAppendInfo`, `ProducerStateEntry`; KIP-98): which producer wrote which records
//! ([`Stamp`]), and, per producer id, its epoch and the sequence ranges it appended last
//! ([`ProducerStates`]).
//!
//! **Stamps.** A record of an idempotent producer carries the producer's id, epoch and a
//! sequence number; a batch on disk carries them in its header (`producerId`,
//! `producerEpoch`, `baseSequence`; record `i` of the batch has sequence `baseSequence +
//! i`, wrapping from `i32::MAX` to 0). Records without idempotence carry [`Stamp::NONE`]
//! (-1, -1, -1). In memory a stamp covers a run of records whose sequences follow their
//! positions: a stamp's `seq` is the sequence of position 0 of whatever the positions count
//! (a chunk's slots, a partition's offsets), possibly virtual, so that a producer sending
//! one record after another keeps the *same* stamp, and slicing a run never changes it
//! ([`Stamp::at`], [`Stamp::based`]).
//!
//! **The broker's rules** (`ProducerAppendInfo.checkSequence`, KAFKA_FORMAT.md "Idempotent
//! producer"), checked only when a client appends to the leader ([`ProducerStates::check`];
//! a replicated leader skips the look-up for records going on from their producer's last
//! record at its log's end, which the check appends: `ReplicaLog::continues`); followers and
//! recovery apply what the log holds without checks ([`ProducerStates::applied`]):
//! - an epoch older than the producer's current one: [`Check::Fenced`];
//! - a new epoch must start at sequence 0;
//! - otherwise a batch must start at the last sequence + 1 (wrapping), or it is
//!   [`Check::OutOfOrder`] — except when the broker no longer knows the producer's sequences
//!   (a producer it never saw, or whose ranges all were truncated): any sequence goes;
//! - a batch whose sequences the producer already appended, in the same epoch, is a
//!   retry: [`Check::Duplicate`] with the offsets it got the first time; nothing is
//!   appended again.
//!
//! Kafka keeps the metadata of each producer's last 5 batches (`NumBatchesToRetain`). Here
//! the unit is a *range*: sequences appended contiguously at contiguous offsets, `(first
//! sequence, first offset, length)`; consecutive batches of one producer that nobody else
//! interleaved join one range (a follower copying several batches at once cannot tell
//! their boundaries anyway). The last [`RANGES_KEPT`] ranges are kept, so every retry
//! Kafka recognises is recognised (a batch lies in one range), and more.
//!
//! **Following the log.** Each replica's log keeps its own states, updated with its
//! appends, leader or follower, run by run before anything reads them
//! ([`super::replica_log`]); a truncation rolls them back
//! ([`ProducerStates::truncate`]): ranges are cut at the truncation offset, and a producer
//! whose ranges are all gone keeps its epoch with its sequences unknown. A new leader
//! therefore has its producers' states as its log has them.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::clock::Clock;
use crate::sync::atomic::{AtomicI64, Ordering};
use crate::sync::StdArc;

/// A map by producer id with a multiplicative hash (ids are not attacker-chosen: the
/// broker hands them out), so a send's lookups cost a multiply, not SipHash.
pub(crate) type IdMap<V> = HashMap<i64, V, BuildHasherDefault<IdHasher>>;

/// Fibonacci hashing of one `i64` (`IdMap`).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    #[inline]
    fn write_i64(&mut self, v: i64) {
        self.0 = (v as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A map by producer id that finds the id it found last without hashing: a partition's
/// sends are most often one producer's, one after another (`ReplicaSet`'s sequence
/// counters).
///
/// The values live in a vector, found by id through `index`; nothing is ever removed, so
/// a position stays valid, and `recent` is the position found last.
#[derive(Debug, Clone)]
pub(crate) struct ProducerMap<V> {
    /// Each id with its value, in the order they came.
    entries: Vec<(i64, V)>,
    /// The position in `entries` of each id.
    index: IdMap<usize>,
    /// The position in `entries` of the id found last (0 while empty).
    recent: usize,
}

impl<V> Default for ProducerMap<V> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            index: IdMap::default(),
            recent: 0,
        }
    }
}

impl<V> ProducerMap<V> {
    /// The value of `id`, if present, remembered as the one found last.
    #[inline]
    pub(crate) fn get_mut(&mut self, id: i64) -> Option<&mut V> {
        let at = match self.entries.get(self.recent) {
            Some(&(known, _)) if known == id => self.recent,
            _ => *self.index.get(&id)?,
        };
        self.recent = at;
        Some(&mut self.entries[at].1)
    }

    /// Keeps the ids `keep` says to keep (positions change: rare, at expiry).
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(i64) -> bool) {
        self.entries.retain(|(id, _)| keep(*id));
        self.index.clear();
        for (at, (id, _)) in self.entries.iter().enumerate() {
            self.index.insert(*id, at);
        }
        self.recent = 0;
    }

    /// Puts `value` for `id`, replacing any.
    pub(crate) fn insert(&mut self, id: i64, value: V) {
        match self.get_mut(id) {
            Some(v) => *v = value,
            None => {
                self.recent = self.entries.len();
                self.index.insert(id, self.recent);
                self.entries.push((id, value));
            }
        }
    }
}

/// Ranges kept per producer id (Kafka's `ProducerStateEntry.NUM_BATCHES_TO_RETAIN`, 5,
/// which is also the most in-flight requests an idempotent Kafka producer allows).
pub(crate) const RANGES_KEPT: usize = 5;

/// The most sequences a producer's kept ranges cover together: half the sequence space
/// (sequences wrap at 2^31), so that a sequence past a wrap is never found in an old range
/// and taken for a duplicate. Ranges join while a producer's records follow each other,
/// so without the bound one could grow past the wrap.
const SEQ_WINDOW: u64 = 1 << 30;

/// Forgets the oldest sequences of `ranges` (oldest first) beyond [`SEQ_WINDOW`].
#[inline]
fn bound_window(ranges: &mut Vec<Range>) {
    let mut total: u64 = ranges.iter().map(|r| r.len).sum();
    while total > SEQ_WINDOW {
        let excess = total - SEQ_WINDOW;
        let oldest = &mut ranges[0];
        if oldest.len <= excess {
            total -= oldest.len;
            ranges.remove(0);
        } else {
            oldest.seq = seq_add(oldest.seq, excess);
            oldest.offset += excess;
            oldest.len -= excess;
            total -= excess;
        }
    }
}

/// No producer id, epoch or sequence (Kafka's `RecordBatch.NO_PRODUCER_ID` etc.).
pub const NO_PRODUCER_ID: i64 = -1;

/// A producer id with its epoch, as the broker assigns them
/// ([`Broker::init_producer_id`](crate::Broker::init_producer_id)); Kafka's
/// `ProducerIdAndEpoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProducerIdentity {
    /// The producer id (non-negative).
    pub id: i64,
    /// The producer epoch (bumped to fence an older instance of the same producer).
    pub epoch: i16,
}

/// An idempotent producer's identity as its sends read it, and how it bumps its epoch
/// (KIP-360): a send that gives up after its sequence was assigned may leave a gap in a
/// partition's sequences (its records may or may not be in the log), after which every
/// later send there would be out of order. The producer then bumps its epoch, once per
/// failed epoch: the new epoch starts every partition's sequences at 0, and the old
/// epoch's sends still retrying are fenced wherever the new one was seen.
pub(crate) struct ProducerHandle {
    id: i64,
    /// The current epoch (an `i16`).
    epoch: AtomicI64,
    /// The broker's bump (`Broker::bump_producer_epoch`).
    bump: Box<dyn Fn(ProducerIdentity) -> crate::Result<ProducerIdentity> + Send + Sync>,
}

impl std::fmt::Debug for ProducerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProducerHandle")
            .field("identity", &self.current())
            .finish_non_exhaustive()
    }
}

impl ProducerHandle {
    /// `identity`, bumped with `bump`.
    pub(crate) fn new(
        identity: ProducerIdentity,
        bump: impl Fn(ProducerIdentity) -> crate::Result<ProducerIdentity> + Send + Sync + 'static,
    ) -> Self {
        Self {
            id: identity.id,
            epoch: AtomicI64::new(i64::from(identity.epoch)),
            bump: Box::new(bump),
        }
    }

    /// The identity a send starting now uses.
    #[inline]
    pub(crate) fn current(&self) -> ProducerIdentity {
        ProducerIdentity {
            id: self.id,
            // Relaxed: a value on its own; a send reading the old epoch just after a bump
            // is fenced or out of order, as a send in flight would be.
            epoch: self.epoch.load(Ordering::Relaxed) as i16,
        }
    }

    /// A send of `failed` gave up after its sequence was assigned: bumps the epoch, unless
    /// another send's failure did already.
    pub(crate) fn gave_up(&self, failed: ProducerIdentity) {
        let Ok(next) = (self.bump)(failed) else {
            // Fenced: another failure bumped it, or another instance owns the id.
            return;
        };
        if next.id == self.id {
            // Relaxed: as in `current`; `fetch_max` keeps it from going back.
            self.epoch
                .fetch_max(i64::from(next.epoch), Ordering::Relaxed);
        }
    }
}

/// Which producer wrote a run of records, and their sequences (module docs): `seq` is the
/// sequence of position 0 of the positions the holder counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub(crate) id: i64,
    pub(crate) epoch: i16,
    /// The records belong to a transaction (the batch header's transactional bit).
    pub(crate) transactional: bool,
    pub(crate) seq: i32,
}

/// Sequences wrap from `i32::MAX` to 0 (Kafka's `DefaultRecordBatch.incrementSequence`).
#[inline(always)]
pub(crate) fn seq_add(seq: i32, n: u64) -> i32 {
    ((seq as u64).wrapping_add(n) & 0x7fff_ffff) as i32
}

/// `seq - n`, wrapping as [`seq_add`].
#[inline(always)]
pub(crate) fn seq_sub(seq: i32, n: u64) -> i32 {
    ((seq as u64).wrapping_sub(n) & 0x7fff_ffff) as i32
}

impl Stamp {
    /// No producer: a record sent without idempotence.
    pub(crate) const NONE: Stamp = Stamp {
        id: NO_PRODUCER_ID,
        epoch: -1,
        transactional: false,
        seq: -1,
    };

    /// The stamp of a record at position `at` whose sequence is `seq`: its `seq` field
    /// is the (virtual) sequence of position 0.
    #[inline]
    pub(crate) fn based(id: ProducerIdentity, seq: i32, at: u64, transactional: bool) -> Self {
        Self {
            id: id.id,
            epoch: id.epoch,
            transactional,
            seq: seq_sub(seq, at),
        }
    }

    /// Whether this is [`Stamp::NONE`] (no idempotence).
    #[inline(always)]
    pub(crate) fn is_none(&self) -> bool {
        self.id < 0
    }

    /// The sequence of position `at` (-1 for `NONE`).
    #[inline(always)]
    pub(crate) fn at(&self, at: u64) -> i32 {
        if self.is_none() {
            -1
        } else {
            seq_add(self.seq, at)
        }
    }

    /// The same producer's stamp with positions moved: position `at` here is position
    /// `to` in the result (a run's records moved from chunk slots to offsets).
    #[inline]
    pub(crate) fn moved(&self, at: u64, to: u64) -> Self {
        if self.is_none() {
            return *self;
        }
        Self {
            seq: seq_sub(self.at(at), to),
            ..*self
        }
    }
}

/// What the leader's check found for a batch ([`ProducerStates::check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Append it.
    Append,
    /// A retry of records already in the log, at these offsets (first, last).
    Duplicate(u64, u64),
    /// The producer's epoch is newer: this producer instance is fenced (Kafka's
    /// `InvalidProducerEpochException` / `ProducerFencedException`).
    Fenced {
        /// The epoch the log knows.
        current: i16,
    },
    /// Not the next sequence (Kafka's `OutOfOrderSequenceException`).
    OutOfOrder {
        /// The sequence the log expected.
        expected: i32,
    },
}

/// One range of a producer's records: sequences `seq..seq+len` at offsets
/// `offset..offset+len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Range {
    pub(crate) seq: i32,
    pub(crate) offset: u64,
    pub(crate) len: u64,
}

impl Range {
    fn last_seq(&self) -> i32 {
        seq_add(self.seq, self.len - 1)
    }
    fn end(&self) -> u64 {
        self.offset + self.len
    }
    /// Where sequence `seq` lies in the range, if it does.
    fn index_of(&self, seq: i32) -> Option<u64> {
        let d = (seq as u64).wrapping_sub(self.seq as u64) & 0x7fff_ffff;
        (d < self.len).then_some(d)
    }
}

/// One producer id's state in a log (Kafka's `ProducerStateEntry`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProducerEntry {
    pub(crate) epoch: i16,
    /// The latest ranges, oldest first (at most [`RANGES_KEPT`]); empty: the sequences are
    /// unknown (any is accepted).
    pub(crate) ranges: Vec<Range>,
    /// The largest timestamp of its records (its last activity, for expiry), as a log
    /// reads them: the last record's of each run of them it applies at once.
    pub(crate) last_timestamp: i64,
    /// The transaction coordinator's epoch of its last marker (-1: none).
    pub(crate) coordinator_epoch: i32,
    /// The first offset of its open transaction, if one is open.
    pub(crate) txn_first_offset: Option<u64>,
}

impl ProducerEntry {
    /// The last sequence appended and its offset, if known.
    pub(crate) fn last(&self) -> Option<(i32, u64)> {
        self.ranges.last().map(|r| (r.last_seq(), r.end() - 1))
    }
}

/// One producer id's state in a partition's log, as `describe` shows it (Kafka's
/// `DescribeProducers` answer, and the fields of its `.snapshot` entries).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProducerState {
    /// The producer id.
    pub producer_id: i64,
    /// Its epoch.
    pub epoch: i16,
    /// The sequence of its last record in the log (-1: not known, e.g. truncated away).
    pub last_sequence: i32,
    /// The offset of that record.
    pub last_offset: Option<u64>,
    /// The timestamp of its last activity, which expiry counts from: the largest of its
    /// last batch's as a log on disk reads it (Kafka's batch max timestamp); an in-memory
    /// replicated log takes the last record's of each run it applies at once (the same
    /// unless producers set their own timestamps out of order).
    pub last_timestamp: i64,
    /// The transaction coordinator's epoch of its last marker (-1: none).
    pub coordinator_epoch: i32,
    /// The first offset of its open transaction, if one is open.
    pub current_txn_first_offset: Option<u64>,
}

/// Every producer id's state in one log (module docs).
#[derive(Debug, Clone, Default)]
pub(crate) struct ProducerStates {
    producers: IdMap<ProducerEntry>,
}

impl ProducerStates {
    /// No producer known.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The state of producer `id`, if known.
    #[allow(
        dead_code,
        reason = "for the transactions (issue 30, second half) and tools"
    )]
    pub(crate) fn get(&self, id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&id)
    }

    /// Every producer's state, by id (unordered).
    #[allow(
        dead_code,
        reason = "for the transactions (issue 30, second half) and tools"
    )]
    pub(crate) fn iter(&self) -> impl Iterator<Item = (i64, &ProducerEntry)> {
        self.producers.iter().map(|(id, e)| (*id, e))
    }

    /// How many producers are known.
    #[allow(
        dead_code,
        reason = "for the transactions (issue 30, second half) and tools"
    )]
    pub(crate) fn len(&self) -> usize {
        self.producers.len()
    }

    /// Every producer's state, by id.
    pub(crate) fn describe(&self) -> Vec<ProducerState> {
        let mut out: Vec<ProducerState> = self
            .producers
            .iter()
            .map(|(&id, e)| ProducerState {
                producer_id: id,
                epoch: e.epoch,
                last_sequence: e.last().map_or(-1, |l| l.0),
                last_offset: e.last().map(|l| l.1),
                last_timestamp: e.last_timestamp,
                coordinator_epoch: e.coordinator_epoch,
                current_txn_first_offset: e.txn_first_offset,
            })
            .collect();
        out.sort_by_key(|p| p.producer_id);
        out
    }

    /// Its entries as a `.snapshot` file holds them (`storage::producer_snapshot`): per
    /// producer, its last range's last sequence and offset, and the range's length as the
    /// offset delta (a range may span several of the producer's batches: loaded back, the
    /// range is the one retries are checked against).
    pub(crate) fn to_snapshot(&self) -> Vec<crate::storage::producer_snapshot::SnapshotEntry> {
        let mut out: Vec<_> = self
            .producers
            .iter()
            .map(|(&id, e)| {
                let last = e.ranges.last();
                crate::storage::producer_snapshot::SnapshotEntry {
                    producer_id: id,
                    epoch: e.epoch,
                    last_sequence: last.map_or(-1, Range::last_seq),
                    last_offset: last.map_or(-1, |r| (r.end() - 1) as i64),
                    offset_delta: last.map_or(0, |r| (r.len - 1).min(i32::MAX as u64) as i32),
                    timestamp: e.last_timestamp,
                    coordinator_epoch: e.coordinator_epoch,
                    current_txn_first_offset: e.txn_first_offset.map_or(-1, |o| o as i64),
                }
            })
            .collect();
        out.sort_by_key(|e| e.producer_id);
        out
    }

    /// The states a snapshot's entries hold.
    pub(crate) fn from_snapshot(
        entries: &[crate::storage::producer_snapshot::SnapshotEntry],
    ) -> Self {
        let mut states = Self::new();
        for e in entries {
            let ranges = if e.last_sequence >= 0 && e.last_offset >= 0 && e.offset_delta >= 0 {
                let len = (e.offset_delta as u64 + 1).min(e.last_offset as u64 + 1);
                vec![Range {
                    seq: seq_sub(e.last_sequence, len - 1),
                    offset: e.last_offset as u64 + 1 - len,
                    len,
                }]
            } else {
                Vec::new()
            };
            states.insert(
                e.producer_id,
                ProducerEntry {
                    epoch: e.epoch,
                    ranges,
                    last_timestamp: e.timestamp,
                    coordinator_epoch: e.coordinator_epoch,
                    txn_first_offset: u64::try_from(e.current_txn_first_offset).ok(),
                },
            );
        }
        states
    }

    /// Puts `entry` for `id` (a snapshot being loaded).
    pub(crate) fn insert(&mut self, id: i64, entry: ProducerEntry) {
        self.producers.insert(id, entry);
    }

    /// The leader's check of `count` records stamped `stamp` whose first record is at
    /// position `at` of the stamp's positions (module docs, "The broker's rules").
    pub(crate) fn check(&self, stamp: &Stamp, at: u64, count: u64) -> Check {
        if stamp.is_none() || count == 0 {
            return Check::Append;
        }
        let first = stamp.at(at);
        let Some(e) = self.producers.get(&stamp.id) else {
            return Check::Append;
        };
        if stamp.epoch < e.epoch {
            return Check::Fenced { current: e.epoch };
        }
        if stamp.epoch > e.epoch {
            return if first == 0 || e.ranges.is_empty() {
                Check::Append
            } else {
                Check::OutOfOrder { expected: 0 }
            };
        }
        let last = seq_add(first, count - 1);
        for r in e.ranges.iter().rev() {
            if let (Some(i), Some(j)) = (r.index_of(first), r.index_of(last)) {
                if i <= j {
                    return Check::Duplicate(r.offset + i, r.offset + j);
                }
            }
        }
        match e.last() {
            None => Check::Append,
            Some((last_seq, _)) if seq_add(last_seq, 1) == first => Check::Append,
            Some((last_seq, _)) => Check::OutOfOrder {
                expected: seq_add(last_seq, 1),
            },
        }
    }

    /// The sequence an append of producer `id` in `epoch` continues from: the next one
    /// after its last, 0 in a new epoch; `None` for a producer id not known (its first
    /// append starts at 0).
    pub(crate) fn next_seq(&self, id: ProducerIdentity) -> Option<i32> {
        let e = self.producers.get(&id.id)?;
        Some(if e.epoch == id.epoch {
            e.last().map_or(0, |(s, _)| seq_add(s, 1))
        } else {
            0
        })
    }

    /// Applies `count` records stamped `stamp` (their first at position `at` of the
    /// stamp's positions) appended at offsets `offset..offset + count`, the largest of
    /// their timestamps `max_timestamp`: no checks (a follower, recovery, or a leader
    /// after [`check`](Self::check)).
    #[inline]
    pub(crate) fn applied(
        &mut self,
        stamp: &Stamp,
        at: u64,
        offset: u64,
        count: u64,
        max_timestamp: i64,
    ) {
        if stamp.is_none() || count == 0 {
            return;
        }
        let seq = stamp.at(at);
        let e = self
            .producers
            .entry(stamp.id)
            .or_insert_with(|| ProducerEntry {
                epoch: stamp.epoch,
                ranges: Vec::new(),
                last_timestamp: max_timestamp,
                coordinator_epoch: -1,
                txn_first_offset: None,
            });
        if stamp.epoch != e.epoch {
            e.epoch = stamp.epoch;
            e.ranges.clear();
        }
        e.last_timestamp = e.last_timestamp.max(max_timestamp);
        if stamp.transactional && e.txn_first_offset.is_none() {
            e.txn_first_offset = Some(offset);
        }
        match e.ranges.last_mut() {
            Some(r) if r.end() == offset && seq_add(r.last_seq(), 1) == seq => r.len += count,
            _ => {
                if e.ranges.len() == RANGES_KEPT {
                    e.ranges.remove(0);
                }
                e.ranges.push(Range {
                    seq,
                    offset,
                    len: count,
                });
            }
        }
        bound_window(&mut e.ranges);
    }

    /// A transaction marker of producer `id` written at `offset` by coordinator epoch
    /// `coordinator_epoch`: its transaction is over.
    pub(crate) fn marker(&mut self, id: i64, coordinator_epoch: i32) {
        if let Some(e) = self.producers.get_mut(&id) {
            e.txn_first_offset = None;
            e.coordinator_epoch = coordinator_epoch;
        }
    }

    /// Rolls back to a log cut at `offset` (everything at or above it is gone): ranges cut
    /// there; a producer whose ranges are all gone keeps its epoch, its sequences unknown.
    pub(crate) fn truncate(&mut self, offset: u64) {
        for e in self.producers.values_mut() {
            e.ranges.retain_mut(|r| {
                if r.offset >= offset {
                    return false;
                }
                r.len = r.len.min(offset - r.offset);
                true
            });
            if e.txn_first_offset.is_some_and(|f| f >= offset) {
                e.txn_first_offset = None;
            }
        }
    }

    /// Forgets the producers whose last activity (record timestamp) is older than
    /// `now_ms - max_idle_ms` and that have no open transaction (Kafka's
    /// `producer.id.expiration.ms`): how many went.
    pub(crate) fn expire(&mut self, now_ms: i64, max_idle_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers.retain(|_, e| {
            e.txn_first_offset.is_some() || now_ms.saturating_sub(e.last_timestamp) < max_idle_ms
        });
        before - self.producers.len()
    }
}

/// How idle producer ids expire in a log that expires them itself (a one-replica
/// partition, the snapshots of a log on disk): Kafka's `producer.id.expiration.ms`
/// ([`ProducerStates::expire`]) against the broker's clock.
#[derive(Debug, Clone)]
pub(crate) struct ProducerExpiry {
    clock: StdArc<dyn Clock>,
    max_idle_ms: i64,
    /// When ids were last expired (the clock's ms; `i64::MIN`: never).
    last_ms: i64,
}

/// The least time between two expiries by [`ProducerExpiry::expire_due`], on the clock:
/// a look at every producer's state is not worth making more often (the replica sets
/// expire at the same pace).
const EXPIRY_INTERVAL_MS: i64 = 1000;

impl ProducerExpiry {
    /// Producers idle longer than `max_idle` (by their records' timestamps against
    /// `clock`) go, unless a transaction of theirs is open.
    pub(crate) fn new(clock: StdArc<dyn Clock>, max_idle: std::time::Duration) -> Self {
        Self {
            clock,
            max_idle_ms: i64::try_from(max_idle.as_millis()).unwrap_or(i64::MAX),
            last_ms: i64::MIN,
        }
    }

    /// Expires the idle producers of `states` now: how many went.
    pub(crate) fn expire_now(&mut self, states: &mut ProducerStates) -> usize {
        let now = self.clock.now_ms();
        self.last_ms = now;
        states.expire(now, self.max_idle_ms)
    }

    /// [`expire_now`](Self::expire_now) unless it ran less than a second of the clock
    /// ago: one read of the clock then.
    pub(crate) fn expire_due(&mut self, states: &mut ProducerStates) -> usize {
        let now = self.clock.now_ms();
        if now.saturating_sub(self.last_ms) < EXPIRY_INTERVAL_MS {
            return 0;
        }
        self.last_ms = now;
        states.expire(now, self.max_idle_ms)
    }
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use super::*;

    const P: ProducerIdentity = ProducerIdentity { id: 7, epoch: 0 };

    #[test]
    fn stamps_keep_their_base_across_positions() {
        let s = Stamp::based(P, 10, 3, false);
        assert_eq!(s.at(3), 10);
        assert_eq!(s.at(4), 11);
        let moved = s.moved(3, 100);
        assert_eq!(moved.at(100), 10);
        let wrap = Stamp::based(P, i32::MAX, 0, false);
        assert_eq!(wrap.at(1), 0);
        assert_eq!(Stamp::NONE.at(5), -1);
    }

    #[test]
    fn retries_are_duplicates_and_gaps_are_out_of_order() {
        let mut st = ProducerStates::new();
        let s = Stamp::based(P, 0, 0, false);
        assert_eq!(st.check(&s, 0, 2), Check::Append);
        st.applied(&s, 0, 100, 2, 1);
        // The next batch: sequences 2..5 at offsets 105..108.
        let s2 = Stamp::based(P, 2, 0, false);
        assert_eq!(st.check(&s2, 0, 3), Check::Append);
        st.applied(&s2, 0, 105, 3, 1);
        assert_eq!(st.check(&s, 0, 2), Check::Duplicate(100, 101));
        assert_eq!(st.check(&s2, 0, 3), Check::Duplicate(105, 107));
        let gap = Stamp::based(P, 9, 0, false);
        assert_eq!(st.check(&gap, 0, 1), Check::OutOfOrder { expected: 5 });
        let old = Stamp::based(ProducerIdentity { id: 7, epoch: -2 }, 5, 0, false);
        assert_eq!(st.check(&old, 0, 1), Check::Fenced { current: 0 });
        let new_epoch = ProducerIdentity { id: 7, epoch: 1 };
        assert_eq!(
            st.check(&Stamp::based(new_epoch, 5, 0, false), 0, 1),
            Check::OutOfOrder { expected: 0 }
        );
        assert_eq!(
            st.check(&Stamp::based(new_epoch, 0, 0, false), 0, 1),
            Check::Append
        );
        // Truncation rolls back: the second batch is gone, so it appends again.
        st.truncate(106);
        assert_eq!(st.check(&s2, 0, 3), Check::OutOfOrder { expected: 3 });
        st.truncate(105);
        assert_eq!(st.check(&s2, 0, 3), Check::Append);
        st.truncate(0);
        assert!(st.get(7).unwrap().ranges.is_empty());
        assert_eq!(st.check(&gap, 0, 1), Check::Append);
    }

    #[test]
    fn a_sequence_past_the_wrap_is_never_a_duplicate_of_a_long_run() {
        let mut st = ProducerStates::new();
        let run = 1u64 << 30;
        // Three runs of 2^30 records, each following the last: one range, past the wrap.
        for i in 0..3u64 {
            let s = Stamp::based(P, seq_add(0, i * run), 0, false);
            assert_eq!(st.check(&s, 0, run), Check::Append);
            st.applied(&s, 0, i * run, run, 1);
        }
        let next = Stamp::based(P, seq_add(0, 3 * run), 0, false);
        assert_eq!(st.check(&next, 0, 1), Check::Append);
        // The last run's retry is still a duplicate, at its offsets.
        let retry = Stamp::based(P, seq_add(0, 2 * run), 0, false);
        assert_eq!(
            st.check(&retry, 0, run),
            Check::Duplicate(2 * run, 3 * run - 1)
        );
    }

    #[test]
    fn only_the_last_ranges_are_kept_and_idle_producers_expire() {
        let mut st = ProducerStates::new();
        for i in 0..10u64 {
            // Gaps in offsets: each a range of its own.
            st.applied(&Stamp::based(P, i as i32, 0, false), 0, i * 10, 1, i as i64);
        }
        assert_eq!(st.get(7).unwrap().ranges.len(), RANGES_KEPT);
        assert_eq!(st.next_seq(P), Some(10));
        assert_eq!(st.expire(100, 1000), 0);
        assert_eq!(st.expire(2000, 1000), 1);
        assert_eq!(st.len(), 0);
    }
}
