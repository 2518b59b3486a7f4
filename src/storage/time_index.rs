//! The `.timeindex` file: a sparse map from timestamps to offsets (Kafka's `TimeIndex`).
//!
//! Each entry is 12 bytes, big-endian: a timestamp (int64) and an offset relative to the
//! segment's base offset (int32). An entry records the largest timestamp seen so far in the
//! segment with the last offset of the batch that held it; entries are added beside offset
//! index entries, plus a final one on roll, close and recovery, and only when the timestamp is
//! strictly greater than the previous entry's. One slot is kept free for that final entry.
//!
//! # Examples
//!
//! ```
//! use logbus::storage::time_index::{parse, TimeEntry};
//!
//! let mut bytes = 1_700_000_000_000i64.to_be_bytes().to_vec();
//! bytes.extend_from_slice(&5i32.to_be_bytes());
//! assert_eq!(parse(&bytes, 100), vec![TimeEntry { timestamp: 1_700_000_000_000, offset: 105 }]);
//! ```

use std::path::Path;

use super::index_file::{decode_entries, IndexEntry, IndexFile};
use super::record_batch::NO_TIMESTAMP;

/// Bytes per `.timeindex` entry.
pub const ENTRY_SIZE: usize = 12;

/// One `.timeindex` entry, with the offset made absolute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeEntry {
    /// The largest timestamp in the segment up to and including `offset`'s batch.
    pub timestamp: i64,
    /// The last offset of the batch holding that timestamp.
    pub offset: u64,
}

impl IndexEntry for TimeEntry {
    const SIZE: usize = ENTRY_SIZE;

    fn encode(&self, base: u64, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.timestamp.to_be_bytes());
        let relative = self.offset.wrapping_sub(base) as u32;
        out.extend_from_slice(&relative.to_be_bytes());
    }

    fn offset(&self) -> u64 {
        self.offset
    }

    fn decode(b: &[u8], base: u64) -> Self {
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&b[..8]);
        let relative = i32::from_be_bytes([b[8], b[9], b[10], b[11]]);
        TimeEntry {
            timestamp: i64::from_be_bytes(ts),
            offset: base.wrapping_add_signed(i64::from(relative)),
        }
    }
}

/// Decodes the bytes of a `.timeindex` file of the segment based at `base_offset`: whole
/// entries only, stopping at the first all-zero entry after the first.
pub fn parse(bytes: &[u8], base_offset: u64) -> Vec<TimeEntry> {
    decode_entries(bytes, base_offset)
}

/// A segment's time index: entries in memory, mirrored to the `.timeindex` file.
#[derive(Debug)]
pub struct TimeIndex {
    inner: IndexFile<TimeEntry>,
}

impl From<IndexFile<TimeEntry>> for TimeIndex {
    fn from(inner: IndexFile<TimeEntry>) -> Self {
        TimeIndex { inner }
    }
}

impl TimeIndex {
    /// The entries, in order.
    pub fn entries(&self) -> &[TimeEntry] {
        self.inner.entries()
    }

    /// The last entry.
    pub fn last(&self) -> Option<TimeEntry> {
        self.inner.last()
    }

    /// Whether no more entries fit (one slot stays free for the final entry).
    pub fn is_full(&self) -> bool {
        self.inner.len() + 1 >= self.inner.max_entries()
    }

    /// The last entry whose timestamp is strictly below `target`: every record at or below its
    /// offset is older than `target`.
    pub fn last_below(&self, target: i64) -> Option<TimeEntry> {
        let entries = self.inner.entries();
        let n = entries.partition_point(|e| e.timestamp < target);
        n.checked_sub(1).map(|i| entries[i])
    }

    /// Adds `(timestamp, offset)` if the timestamp is above the last entry's (`final_entry`
    /// may use the slot kept free).
    pub(crate) fn maybe_append(&mut self, timestamp: i64, offset: u64, final_entry: bool) {
        if !final_entry && self.is_full() {
            return;
        }
        if self.inner.len() >= self.inner.max_entries() {
            return;
        }
        // An empty index behaves as if it ended with (no timestamp, base offset), as Kafka's
        // does: entries without a timestamp are never added.
        let (last_ts, last_offset) = self
            .last()
            .map_or((NO_TIMESTAMP, 0), |e| (e.timestamp, e.offset));
        if timestamp > last_ts && offset >= last_offset {
            self.inner.push(TimeEntry { timestamp, offset });
        }
    }

    /// The file under the index: flushing, syncing, truncating and rebuilding it.
    pub(crate) fn file_mut(&mut self) -> &mut IndexFile<TimeEntry> {
        &mut self.inner
    }

    /// Whether entries were added or dropped since the last sync.
    pub(crate) fn is_unsynced(&self) -> bool {
        self.inner.is_unsynced()
    }

    /// The index file's path.
    pub fn path(&self) -> &Path {
        self.inner.path()
    }
}
