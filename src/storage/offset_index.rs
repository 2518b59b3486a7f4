//! The `.index` file: a sparse map from offsets to byte positions in a segment's `.log`
//! (Kafka's `OffsetIndex`).
//!
//! Each entry is 8 bytes, big-endian: the offset relative to the segment's base offset
//! (int32) and the position in the `.log` (int32) where the batch holding that offset starts.
//! Entries map a batch's **last** offset to its **start** position and strictly increase.
//! A segment adds one when more than `index_interval_bytes` have been appended since the last
//! (so the first batch of a segment never gets one). A lookup binary-searches for the largest
//! entry at or below the target and the log is scanned forward from there.
//!
//! # Examples
//!
//! ```
//! use logbus::storage::offset_index::{parse, OffsetEntry};
//!
//! // Relative offset 9 at position 4200, in a segment based at 1000.
//! let bytes = [0, 0, 0, 9, 0, 0, 0x10, 0x68];
//! assert_eq!(parse(&bytes, 1000), vec![OffsetEntry { offset: 1009, position: 4200 }]);
//! ```

use std::path::Path;

use super::index_file::{decode_entries, IndexEntry, IndexFile};

/// Bytes per `.index` entry.
pub const ENTRY_SIZE: usize = 8;

/// One `.index` entry, with the offset made absolute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetEntry {
    /// The last offset of the batch starting at `position`.
    pub offset: u64,
    /// Byte position of the batch in the `.log`.
    pub position: u32,
}

impl IndexEntry for OffsetEntry {
    const SIZE: usize = ENTRY_SIZE;

    fn encode(&self, base: u64, out: &mut Vec<u8>) {
        let relative = self.offset.wrapping_sub(base) as u32;
        out.extend_from_slice(&relative.to_be_bytes());
        out.extend_from_slice(&self.position.to_be_bytes());
    }

    fn offset(&self) -> u64 {
        self.offset
    }

    fn decode(b: &[u8], base: u64) -> Self {
        let relative = i32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        OffsetEntry {
            // A negative relative offset (corrupt) maps below the base, where checks catch it.
            offset: base.wrapping_add_signed(i64::from(relative)),
            position: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        }
    }
}

/// Decodes the bytes of a `.index` file of the segment based at `base_offset`: whole entries
/// only, stopping at the first all-zero entry after the first (as Kafka's readers do).
pub fn parse(bytes: &[u8], base_offset: u64) -> Vec<OffsetEntry> {
    decode_entries(bytes, base_offset)
}

/// A segment's offset index: entries in memory, mirrored to the `.index` file.
#[derive(Debug)]
pub struct OffsetIndex {
    inner: IndexFile<OffsetEntry>,
}

impl From<IndexFile<OffsetEntry>> for OffsetIndex {
    fn from(inner: IndexFile<OffsetEntry>) -> Self {
        OffsetIndex { inner }
    }
}

impl OffsetIndex {
    /// The entries, in order.
    pub fn entries(&self) -> &[OffsetEntry] {
        self.inner.entries()
    }

    /// The last entry.
    pub fn last(&self) -> Option<OffsetEntry> {
        self.inner.last()
    }

    /// Whether no more entries fit in `segment_index_bytes`.
    pub fn is_full(&self) -> bool {
        self.inner.len() >= self.inner.max_entries()
    }

    /// The largest entry whose offset is at or below `target`, if any.
    pub fn lookup(&self, target: u64) -> Option<OffsetEntry> {
        let entries = self.inner.entries();
        let n = entries.partition_point(|e| e.offset <= target);
        n.checked_sub(1).map(|i| entries[i])
    }

    /// Adds an entry; ignored unless its offset is above the last entry's (entries strictly
    /// increase).
    pub(crate) fn append(&mut self, offset: u64, position: u32) {
        if self.last().map_or(true, |last| offset > last.offset) {
            self.inner.push(OffsetEntry { offset, position });
        }
    }

    /// The file under the index: flushing, syncing, truncating and rebuilding it.
    pub(crate) fn file_mut(&mut self) -> &mut IndexFile<OffsetEntry> {
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
