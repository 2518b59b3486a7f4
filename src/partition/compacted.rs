//! An in-memory compacted partition's *compacted section*: the latest record of each key
//! among those the ring has let go (Kafka's log compaction, for a log that lives in a ring).
//!
//! - **What it holds.** Before the ring's producer publishes over a slot (a `DropOldest`
//!   overwrite, or a `Block` topic's slot freed by every gate), the appender hands the
//!   records about to go to the section ([`Compaction::retain`]), in offset order, under the
//!   producer's lock. The section keeps, per key (compared by its encoding, as the durable
//!   log cleaner compares them), the record with the highest offset: a record replaces the
//!   one of its key already there. So every record below [`covered`](CompactedLog::covered)
//!   that is not in the section has a later record of its key, in the section or in the ring.
//! - **Reads.** A read at an offset below `covered` is served from the section, in offset
//!   order, with gaps ([`ReadOutcome::Sparse`](super::ReadOutcome::Sparse)); at or after
//!   `covered` from the ring. A reader that finds its offset overwritten in the ring reads
//!   the section again: the records were retained before the overwrite (the producer holds
//!   its lock across both), so `covered` has moved past the offset, and the section holds
//!   the latest record of every key that was there. A reader's position only grows, so no
//!   record is read twice across the boundary, and none is missed: replay from offset 0
//!   reads at least the latest record of every key still live.
//! - **Tombstones** (a null value: `None` of an `Option` value type,
//!   [`Codec::is_null`]; the durable cleaner's rule, length −1 on disk) delete
//!   their key: a tombstone stays in the section for the topic's `delete_retention`, on the
//!   broker's [`Clock`], counted from when the ring let it go, so that a reader behind sees
//!   the deletion; then the key is gone.
//! - **Memory** is bounded by key count: at most `max_compacted_keys` keys per partition.
//!   A record of a new key that finds the section full is not kept, and counted
//!   ([`CompactedStats::dropped`], shown in `PartitionInfo`): nothing is lost silently.
//!   Records without a key cannot be compacted (producers refuse them on a compacted topic:
//!   [`Error::KeyRequired`](crate::Error::KeyRequired)); one that reached the ring anyway is
//!   counted ([`CompactedStats::unkeyed`]) when it goes.
//! - **Retention by age** (`CleanupPolicy::CompactAndDelete` with a retention): records older
//!   than the retention leave the front of the section, as Kafka deletes old segments of a
//!   `compact,delete` log, and the log start moves past them.
//!
//! The section is one mutex: only compacted partitions have one, and only their producers
//! (once per publish that overwrites) and their readers behind the ring take it. A
//! partition without compaction never looks at it: its appenders keep the ring's inline
//! path (`Appender::direct`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;

use super::Entry;
use crate::clock::Clock;
use crate::codec::{encoding, Codec};
use crate::ring::Reader;
use crate::sync::Mutex;
// Std's Arc (also under loom), as the rest of the partition layer.
use crate::sync::StdArc as Arc;

/// How a compacted section is bounded.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CompactionConfig {
    /// The most keys the section keeps.
    pub(crate) max_keys: usize,
    /// How long a tombstone stays once the ring let it go, in milliseconds.
    pub(crate) delete_retention_ms: i64,
    /// Records older than this many milliseconds leave the section (`compact,delete`).
    pub(crate) retention_ms: Option<i64>,
}

/// What a compacted section holds and what it could not keep.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CompactedStats {
    /// Keys held (tombstones included).
    pub(crate) keys: u64,
    /// Tombstones held.
    pub(crate) tombstones: u64,
    /// Every offset below this the ring let go (the section serves reads there).
    pub(crate) covered: u64,
    /// Records of new keys not kept because the section held `max_keys` keys.
    pub(crate) dropped: u64,
    /// Records without a key the ring let go (they cannot be compacted).
    pub(crate) unkeyed: u64,
}

/// A compacted section, as the partition sees it: implemented by [`Section`] for key and
/// value types with a [`Codec`] (the partition itself needs none).
pub(crate) trait CompactedLog<K, V>: Send + Sync {
    /// Retains the records `covered..to` from `ring` (which must still hold them: the
    /// caller holds the ring's producer and has not published over them), then moves
    /// `covered` to `to`. Nothing when `to <= covered`.
    fn retain(&self, ring: &Reader<Entry<K, V>>, to: u64);
    /// Every offset below this was let go by the ring.
    fn covered(&self) -> u64;
    /// Passes the section's records from `offset` on (at most `max`), in offset order;
    /// `None` when `offset` is at or past `covered` (the ring serves it), else the count
    /// read and the next offset to read (at most `covered`).
    fn read(
        &self,
        offset: u64,
        max: usize,
        f: &mut dyn FnMut(u64, &Entry<K, V>),
    ) -> Option<(usize, u64)>;
    /// The log start: offsets below it were deleted by age (0 without retention).
    fn log_start(&self) -> u64;
    /// The first record in the section at or after offset `from` with a timestamp at or
    /// after `timestamp`.
    fn offset_for_time(&self, from: u64, timestamp: i64) -> Option<(u64, i64)>;
    /// What it holds.
    fn stats(&self) -> CompactedStats;
}

/// A partition's compaction: its section and the reader the appender takes the records
/// about to be overwritten with (an announcing reader: producers take slot locks only while
/// it reads, which is only while they retain).
pub(crate) struct Compaction<K, V> {
    pub(crate) log: Arc<dyn CompactedLog<K, V>>,
    pub(crate) reader: Reader<Entry<K, V>>,
}

impl<K, V> Compaction<K, V> {
    /// Retains what a publish of `n` records at `next` overwrites in a ring of `capacity`.
    pub(crate) fn retain_for(&self, next: u64, n: usize, capacity: u64) {
        let to = (next + n as u64).saturating_sub(capacity);
        if to > 0 {
            self.log.retain(&self.reader, to);
        }
    }
}

/// One retained record.
struct Kept<K, V> {
    entry: Entry<K, V>,
    /// Its key's encoding (the index's key).
    key: Box<[u8]>,
}

/// The section's state (module docs).
struct State<K, V> {
    /// The latest record of each key, by offset.
    by_offset: BTreeMap<u64, Kept<K, V>>,
    /// Each key's offset in `by_offset`.
    by_key: HashMap<Box<[u8]>, u64>,
    /// Tombstones, oldest first: when the ring let each go, and its offset (which may have
    /// been replaced since: then nothing is removed for it).
    tombstones: VecDeque<(i64, u64)>,
    covered: u64,
    /// Offsets below this were deleted by age.
    start: u64,
    dropped: u64,
    unkeyed: u64,
    /// A scratch buffer for keys and values that encode on demand.
    buf: Vec<u8>,
}

/// The compacted section of one partition (module docs).
pub(crate) struct Section<K, V> {
    state: Mutex<State<K, V>>,
    config: CompactionConfig,
    clock: Arc<dyn Clock>,
}

impl<K, V> fmt::Debug for Section<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Section")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<K, V> Section<K, V> {
    /// An empty section covering nothing below `start` (the ring's first offset).
    pub(crate) fn new(config: CompactionConfig, clock: Arc<dyn Clock>, start: u64) -> Self {
        Self {
            state: Mutex::new(State {
                by_offset: BTreeMap::new(),
                by_key: HashMap::new(),
                tombstones: VecDeque::new(),
                covered: start,
                start,
                dropped: 0,
                unkeyed: 0,
                buf: Vec::new(),
            }),
            config,
            clock,
        }
    }
}

/// Whether `value` is a tombstone: it is null (length −1 on disk). An empty value is not.
pub(crate) fn is_tombstone<V: Codec>(value: &V) -> bool {
    value.is_null()
}

impl<K, V> State<K, V> {
    /// Lets tombstones past their retention go, and (with retention by age) the oldest
    /// records past theirs.
    fn prune(&mut self, config: &CompactionConfig, now_ms: i64) {
        while let Some(&(at, offset)) = self.tombstones.front() {
            if now_ms.saturating_sub(at) < config.delete_retention_ms {
                break;
            }
            self.tombstones.pop_front();
            // Replaced since by a later record of its key: that record stays.
            if let Some(kept) = self.by_offset.remove(&offset) {
                self.by_key.remove(&kept.key);
            }
        }
        if let Some(retention) = config.retention_ms {
            let cutoff = now_ms.saturating_sub(retention);
            while let Some(entry) = self.by_offset.first_entry() {
                if entry.get().entry.timestamp() >= cutoff {
                    break;
                }
                let (offset, kept) = entry.remove_entry();
                self.by_key.remove(&kept.key);
                self.start = self.start.max(offset + 1);
            }
        }
    }
}

impl<K, V> CompactedLog<K, V> for Section<K, V>
where
    K: Codec + Clone + Send + Sync,
    V: Codec + Clone + Send + Sync,
{
    fn retain(&self, ring: &Reader<Entry<K, V>>, to: u64) {
        let mut s = self.state.lock();
        if to <= s.covered {
            return;
        }
        let now = self.clock.now_ms();
        for offset in s.covered..to {
            // Cloned under the slot's lock (as a reader's read is), looked at after.
            let Ok(entry) = ring.get_with(offset, Entry::clone) else {
                // The caller holds the ring's producer, which has not published over it.
                debug_assert!(
                    false,
                    "offset {offset} left the ring before it was retained"
                );
                continue;
            };
            let s = &mut *s;
            // A transaction marker has no value to keep: read-committed readers learn the
            // outcome from the partition's transaction table, not from the log.
            if entry.is_control() {
                continue;
            }
            let Some(key) = entry.key() else {
                s.unkeyed += 1;
                continue;
            };
            let key: Box<[u8]> = encoding(key, &mut s.buf).into();
            let tombstone = is_tombstone(entry.value());
            let full = s.by_key.len() >= self.config.max_keys;
            match s.by_key.get_mut(&key) {
                Some(old) => {
                    s.by_offset.remove(old);
                    *old = offset;
                }
                None if full => {
                    s.dropped += 1;
                    continue;
                }
                None => {
                    s.by_key.insert(key.clone(), offset);
                }
            }
            if tombstone {
                s.tombstones.push_back((now, offset));
            }
            s.by_offset.insert(offset, Kept { entry, key });
        }
        s.covered = to;
        s.prune(&self.config, now);
    }

    fn covered(&self) -> u64 {
        self.state.lock().covered
    }

    fn read(
        &self,
        offset: u64,
        max: usize,
        f: &mut dyn FnMut(u64, &Entry<K, V>),
    ) -> Option<(usize, u64)> {
        let mut s = self.state.lock();
        if offset >= s.covered {
            return None;
        }
        if !s.tombstones.is_empty() || self.config.retention_ms.is_some() {
            s.prune(&self.config, self.clock.now_ms());
        }
        let mut n = 0;
        let mut next = s.covered;
        for (&o, kept) in s.by_offset.range(offset..) {
            if n == max {
                next = o;
                break;
            }
            f(o, &kept.entry);
            n += 1;
        }
        Some((n, next.max(offset)))
    }

    fn log_start(&self) -> u64 {
        self.state.lock().start
    }

    fn offset_for_time(&self, from: u64, timestamp: i64) -> Option<(u64, i64)> {
        let s = self.state.lock();
        s.by_offset
            .range(from..)
            .map(|(&o, kept)| (o, kept.entry.timestamp()))
            .find(|&(_, ts)| ts >= timestamp)
    }

    fn stats(&self) -> CompactedStats {
        let s = self.state.lock();
        CompactedStats {
            keys: s.by_key.len() as u64,
            tombstones: s
                .tombstones
                .iter()
                .filter(|(_, o)| s.by_offset.contains_key(o))
                .count() as u64,
            covered: s.covered,
            dropped: s.dropped,
            unkeyed: s.unkeyed,
        }
    }
}
