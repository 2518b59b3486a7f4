//! What the offset index and the time index share: an in-memory list of fixed-size entries
//! mirrored to a file through the I/O trait.
//!
//! logbus does not preallocate index files (Kafka preallocates and memory-maps them): the
//! file always holds exactly the entries written, appended with positioned writes, so there is
//! nothing to trim on roll or close. Files written by Kafka and left untrimmed by a crash are
//! still read correctly: loading stops at the first all-zero entry after the first, as Kafka's
//! readers do. New entries are buffered in memory and reach the file on
//! [`flush`](IndexFile::flush). Recovery rebuilds the indexes of every segment it revalidates
//! (always the one holding the recovery point), so only the indexes of segments wholly below
//! the recovery point must be durable: the segment set fsyncs those before the recovery point
//! passes them. A rebuild keeps the unchanged prefix of the file, so an intact index is not
//! rewritten.

use std::path::{Path, PathBuf};

use super::io::{Io, IoFile, OpenMode};
use crate::error::{Error, Result};

/// A fixed-size index entry with a big-endian encoding relative to a segment's base offset.
pub(crate) trait IndexEntry: Copy + PartialEq + std::fmt::Debug {
    /// Bytes per entry in the file.
    const SIZE: usize;
    /// Encodes the entry relative to `base` into `out` (exactly `SIZE` bytes).
    fn encode(&self, base: u64, out: &mut Vec<u8>);
    /// Decodes `SIZE` bytes relative to `base`.
    fn decode(bytes: &[u8], base: u64) -> Self;
    /// The (absolute) offset the entry names.
    fn offset(&self) -> u64;
}

/// Decodes the entries of an index file's bytes: whole entries only, stopping at the first
/// all-zero entry after the first (the untrimmed tail of a preallocated file).
pub(crate) fn decode_entries<E: IndexEntry>(bytes: &[u8], base: u64) -> Vec<E> {
    let mut out = Vec::with_capacity(bytes.len() / E::SIZE);
    for (i, chunk) in bytes.chunks_exact(E::SIZE).enumerate() {
        if i > 0 && chunk.iter().all(|&b| b == 0) {
            break;
        }
        out.push(E::decode(chunk, base));
    }
    out
}

#[derive(Debug)]
pub(crate) struct IndexFile<E: IndexEntry> {
    path: PathBuf,
    file: Box<dyn IoFile>,
    base_offset: u64,
    entries: Vec<E>,
    /// Entries `[0, persisted)` are in the file; the rest only in memory.
    persisted: usize,
    /// Whether the file may hold bytes beyond the persisted entries (cut at the next flush).
    stale_len: bool,
    /// Whether the file changed since the last sync.
    unsynced: bool,
    max_entries: usize,
    scratch: Vec<u8>,
    /// The entries before a rebuild began, to keep the file's unchanged prefix.
    previous: Vec<E>,
}

impl<E: IndexEntry> IndexFile<E> {
    /// Opens (creating if missing) the index at `path`. Returns the index and whether the
    /// file held a whole number of entries (`false`: it was cut mid-entry and needs a rebuild).
    pub(crate) fn open(
        io: &dyn Io,
        path: &Path,
        base_offset: u64,
        max_bytes: u64,
        fresh: bool,
    ) -> Result<(Self, bool)> {
        let mode = if fresh {
            OpenMode::Truncate
        } else {
            OpenMode::Create
        };
        let file = io
            .open(path, mode)
            .map_err(|e| Error::opening("opening index", path, e))?;
        let len = if fresh {
            0
        } else {
            file.len()
                .map_err(|e| Error::io(format!("reading length of {}", path.display()), e))?
        };
        // A file longer than an index may grow (a sparse file, say) is not read: it counts as
        // damaged, the segment is recovered and the file cut to the rebuilt entries.
        let oversized = len > max_bytes;
        let bytes = if fresh || oversized {
            Vec::new()
        } else {
            file.read_all()
                .map_err(|e| Error::io(format!("reading index {}", path.display()), e))?
        };
        let whole = !oversized && bytes.len() % E::SIZE == 0;
        let entries = decode_entries::<E>(&bytes, base_offset);
        let persisted = entries.len();
        let exact = whole && persisted as u64 * E::SIZE as u64 == len;
        let index = IndexFile {
            path: path.to_path_buf(),
            file,
            base_offset,
            entries,
            persisted,
            stale_len: !exact,
            unsynced: false,
            max_entries: (max_bytes / E::SIZE as u64).max(2) as usize,
            scratch: Vec::new(),
            previous: Vec::new(),
        };
        Ok((index, whole))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn entries(&self) -> &[E] {
        &self.entries
    }

    pub(crate) fn last(&self) -> Option<E> {
        self.entries.last().copied()
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn max_entries(&self) -> usize {
        self.max_entries
    }

    pub(crate) fn push(&mut self, entry: E) {
        self.entries.push(entry);
    }

    /// Drops entries whose offset is at or above `offset` (in memory now, in the file at the
    /// next flush).
    pub(crate) fn truncate_to(&mut self, offset: u64) {
        let n = self.entries.partition_point(|e| e.offset() < offset);
        self.entries.truncate(n);
        if n < self.persisted {
            self.persisted = n;
            self.stale_len = true;
        }
    }

    /// Writes the entries not yet in the file, and cuts the file to exactly the entries held.
    pub(crate) fn flush(&mut self) -> Result<()> {
        let persisted_len = (self.persisted * E::SIZE) as u64;
        if self.stale_len {
            self.file
                .set_len(persisted_len)
                .map_err(|e| Error::io(format!("truncating index {}", self.path.display()), e))?;
            self.stale_len = false;
            self.unsynced = true;
        }
        if self.persisted < self.entries.len() {
            self.scratch.clear();
            for entry in &self.entries[self.persisted..] {
                entry.encode(self.base_offset, &mut self.scratch);
            }
            self.file
                .write_all_at(&self.scratch, persisted_len)
                .map_err(|e| Error::io(format!("writing index {}", self.path.display()), e))?;
            self.persisted = self.entries.len();
            self.unsynced = true;
        }
        Ok(())
    }

    /// Flushes, then starts the device on the file's bytes without waiting for it (a hint:
    /// [`IoFile::start_writeback`]), so that a [`sync`](IndexFile::sync) made later, after
    /// other files' write-backs have been started too, waits for less.
    pub(crate) fn start_writeback(&mut self) -> Result<()> {
        self.flush()?;
        if self.unsynced {
            // Only a hint: a failed write-back is reported by `sync`'s fdatasync.
            self.file
                .start_writeback(0, (self.persisted * E::SIZE) as u64)
                .ok();
        }
        Ok(())
    }

    /// Flushes, then makes the file durable.
    pub(crate) fn sync(&mut self) -> Result<()> {
        self.flush()?;
        if self.unsynced {
            self.file
                .sync_data()
                .map_err(|e| Error::io(format!("syncing index {}", self.path.display()), e))?;
            self.unsynced = false;
        }
        Ok(())
    }

    /// Whether [`sync`](IndexFile::sync) has anything to do.
    pub(crate) fn is_unsynced(&self) -> bool {
        self.unsynced || self.stale_len || self.persisted < self.entries.len()
    }

    /// Starts rebuilding the entries from scratch (recovery).
    pub(crate) fn begin_rebuild(&mut self) {
        self.previous = std::mem::take(&mut self.entries);
    }

    /// Ends a rebuild: the file keeps the prefix of entries that did not change, so an index
    /// rebuilt identical to what was on disk is not rewritten. The file is marked possibly
    /// not durable: its contents were read, not written, by this process, and after a crash
    /// of the process alone they may still be only in the page cache.
    pub(crate) fn end_rebuild(&mut self) {
        self.unsynced = true;
        let common = self
            .previous
            .iter()
            .zip(&self.entries)
            .take_while(|(a, b)| a == b)
            .count();
        self.previous = Vec::new();
        if common < self.persisted {
            self.persisted = common;
            self.stale_len = true;
        }
    }
}
