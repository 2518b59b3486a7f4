//! One segment: a `.log` file of batches with its `.index` and `.timeindex` (Kafka's
//! `LogSegment`).
//!
//! Appends are encoded straight into an in-memory write buffer that reaches the file when it
//! holds `write_buffer_bytes` (then up to a 64 KiB boundary of the file, with write-back
//! started as a hint), on `flush` and on `sync` (which also makes the bytes durable);
//! readers of the segment see buffered bytes too. Index entries are
//! added by Kafka's rule: when more than `index_interval_bytes` were appended since the last
//! entry, an entry for the incoming batch is added *before* its bytes are counted.
//!
//! Recovery is Kafka's `LogSegment.recover`: every batch is checked (size, CRC, records,
//! offsets increasing from the base offset, possibly with gaps, and below the next segment's),
//! the indexes are rebuilt as it goes, and the log is cut at the first bad or incomplete batch.
//! The batch walk and the per-batch rules live in [`scan`](super::scan), shared with the verifier.

use std::fmt;
use std::path::{Path, PathBuf};

use super::file_names::{file_name, INDEX_SUFFIX, LOG_SUFFIX, MAX_OFFSET, TIME_INDEX_SUFFIX};
use super::index_file::IndexFile;
use super::io::{Io, IoFile, OpenMode};
use super::offset_index::OffsetIndex;
use super::record_batch::{Batch, BatchHeader, HEADER_SIZE, NO_TIMESTAMP};
use super::scan::{scan_segment, ScanEnd, SegmentBounds};
use super::time_index::TimeIndex;
use crate::error::{Corruption, Error, Result};

/// Settings a segment needs (a subset of the segment set's config).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SegmentParams {
    pub(crate) index_interval_bytes: u64,
    pub(crate) segment_index_bytes: u64,
    pub(crate) write_buffer_bytes: usize,
    /// The largest batch a read holds in memory.
    pub(crate) max_batch_bytes: u64,
    /// [`LogConfig::start_writeback`](super::LogConfig::start_writeback).
    pub(crate) start_writeback: bool,
}

/// The largest `.log` a segment may be: index positions are 32-bit signed, as Kafka's
/// (`segment.bytes` ≤ 2^31 - 1).
pub const MAX_SEGMENT_BYTES: u64 = i32::MAX as u64;

/// Write-outs of a full write buffer end on a multiple of this file position (the rest stays
/// buffered): the page cache then fills whole, aligned (large) folios, which measured
/// cheaper in the kernel than unaligned writes of the same size on ext4 (BENCHMARKS.md, "Tuning
/// constants").
const WRITE_ALIGN: u64 = 64 << 10;

/// What recovering one segment found.
#[derive(Debug)]
pub(crate) struct SegmentRecovery {
    /// Bytes of valid batches kept.
    pub valid_bytes: u64,
    /// Batches kept.
    pub batches: u64,
    /// Set when the log was cut: where, how many bytes went, and why.
    pub truncated: Option<(u64, u64, String)>,
}

/// Kafka's rule for a segment's index entries, fed the segment's batches in file order:
/// when more than `index_interval_bytes` lie between the last entry's batch and this one, an
/// offset entry (the batch's last offset → its position) and a time entry (the largest
/// timestamp so far → the last offset of its batch) are added; on the last batch, a final
/// time entry. [`Segment::recover`] rebuilds indexes by it, and the cleaner writes a cleaned
/// segment's indexes by it as it writes the segment, so both give the same entries.
#[derive(Debug)]
pub(crate) struct IndexRule {
    interval: u64,
    /// Position of the batch the last offset entry names (0 before any).
    pub(crate) last_entry_position: u64,
    /// Largest batch max-timestamp so far ([`NO_TIMESTAMP`] when none).
    pub(crate) max_timestamp: i64,
    /// The last offset of the batch holding `max_timestamp`.
    pub(crate) offset_of_max_timestamp: u64,
}

impl IndexRule {
    pub(crate) fn new(base_offset: u64, index_interval_bytes: u64) -> Self {
        IndexRule {
            interval: index_interval_bytes,
            last_entry_position: 0,
            max_timestamp: NO_TIMESTAMP,
            offset_of_max_timestamp: base_offset,
        }
    }

    /// Counts the batch at `position` (last offset `last`, max timestamp `max_timestamp`),
    /// adding its entries when they are due.
    pub(crate) fn add(
        &mut self,
        offset_index: &mut OffsetIndex,
        time_index: &mut TimeIndex,
        position: u64,
        last: u64,
        max_timestamp: i64,
    ) {
        if max_timestamp > self.max_timestamp {
            self.max_timestamp = max_timestamp;
            self.offset_of_max_timestamp = last;
        }
        if position - self.last_entry_position > self.interval {
            offset_index.append(last, position as u32);
            time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, false);
            self.last_entry_position = position;
        }
    }

    /// How many offset entries batches at `positions` (in order, after those counted so
    /// far) would add.
    pub(crate) fn offset_entries_due(&self, positions: impl IntoIterator<Item = u64>) -> usize {
        let mut last = self.last_entry_position;
        let mut due = 0;
        for position in positions {
            if position - last > self.interval {
                last = position;
                due += 1;
            }
        }
        due
    }

    /// Adds the final time entry, after the last batch.
    pub(crate) fn finish(&self, time_index: &mut TimeIndex) {
        time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, true);
    }
}

/// One segment of a partition's log.
pub struct Segment {
    base_offset: u64,
    log_path: PathBuf,
    log: Box<dyn IoFile>,
    /// Bytes in the file; `pending` continues at this position.
    flushed: u64,
    /// Appended bytes not yet written to the file.
    pending: Vec<u8>,
    /// Whether the file changed since the last `sync_data`.
    log_unsynced: bool,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    params: SegmentParams,
    bytes_since_last_entry: u64,
    /// Largest batch max-timestamp in the segment ([`NO_TIMESTAMP`] when none).
    max_timestamp: i64,
    /// The last offset of the batch holding `max_timestamp`.
    offset_of_max_timestamp: u64,
    /// The first batch's max timestamp: what `segment_ms` counts from.
    rolling_timestamp: Option<i64>,
    /// Wall-clock time when this segment was created or opened, for `segment_ms` when the
    /// batches carry no timestamps.
    created_ms: i64,
    next_offset: u64,
    /// Whether the segment may hold a batch with a producer id (idempotent, transactional
    /// or a transaction marker): true until a read of every batch, or its creation empty,
    /// proves otherwise. The cleaner reads only such segments for their producers' state.
    may_hold_producer_batches: bool,
}

impl fmt::Debug for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Segment")
            .field("base_offset", &self.base_offset)
            .field("log_path", &self.log_path)
            .field("size", &self.size())
            .field("next_offset", &self.next_offset)
            .field("max_timestamp", &self.max_timestamp)
            .finish_non_exhaustive()
    }
}

/// Whether an existing segment's index files were usable as found.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IndexHealth {
    pub(crate) offset_index_ok: bool,
    pub(crate) time_index_ok: bool,
}

impl Segment {
    /// Creates an empty segment's three files in `dir` (replacing any files of that name).
    /// The caller syncs the directory.
    pub(crate) fn create(
        io: &dyn Io,
        dir: &Path,
        base_offset: u64,
        params: SegmentParams,
        now_ms: i64,
    ) -> Result<Self> {
        let log_path = dir.join(file_name(base_offset, LOG_SUFFIX));
        let log = io
            .open(&log_path, OpenMode::Truncate)
            .map_err(|e| Error::opening("creating", &log_path, e))?;
        let (segment, _) = Self::with_indexes(io, dir, base_offset, params, now_ms, log, true)?;
        Ok(Segment {
            log_unsynced: true,
            may_hold_producer_batches: false,
            ..segment
        })
    }

    /// A segment over `log` (not yet read: empty as far as its fields say) with its two
    /// indexes opened (`fresh`: emptied). Returns whether each index held whole entries.
    fn with_indexes(
        io: &dyn Io,
        dir: &Path,
        base_offset: u64,
        params: SegmentParams,
        now_ms: i64,
        log: Box<dyn IoFile>,
        fresh: bool,
    ) -> Result<(Self, [bool; 2])> {
        let (max, path) = (params.segment_index_bytes, |s| {
            dir.join(file_name(base_offset, s))
        });
        let (offset_index, index_whole) =
            IndexFile::open(io, &path(INDEX_SUFFIX), base_offset, max, fresh)?;
        let (time_index, time_whole) =
            IndexFile::open(io, &path(TIME_INDEX_SUFFIX), base_offset, max, fresh)?;
        let segment = Segment {
            base_offset,
            log_path: dir.join(file_name(base_offset, LOG_SUFFIX)),
            log,
            flushed: 0,
            pending: Vec::new(),
            log_unsynced: false,
            offset_index: OffsetIndex::from(offset_index),
            time_index: TimeIndex::from(time_index),
            params,
            bytes_since_last_entry: 0,
            max_timestamp: NO_TIMESTAMP,
            offset_of_max_timestamp: base_offset,
            rolling_timestamp: None,
            created_ms: now_ms,
            next_offset: base_offset,
            may_hold_producer_batches: true,
        };
        Ok((segment, [index_whole, time_whole]))
    }

    /// Opens an existing segment (its `.log` must exist; missing indexes are created empty).
    /// The caller then either [`recover`](Segment::recover)s it or, if the indexes are healthy,
    /// [`load`](Segment::load)s its tail state.
    pub(crate) fn open(
        io: &dyn Io,
        dir: &Path,
        base_offset: u64,
        params: SegmentParams,
        now_ms: i64,
    ) -> Result<(Self, IndexHealth)> {
        let log_path = dir.join(file_name(base_offset, LOG_SUFFIX));
        let log = io
            .open(&log_path, OpenMode::ReadWrite)
            .map_err(|e| Error::opening("opening", &log_path, e))?;
        let flushed = log
            .len()
            .map_err(|e| Error::io(format!("reading length of {}", log_path.display()), e))?;
        if flushed > MAX_SEGMENT_BYTES {
            return Err(Error::SegmentTooLarge {
                path: log_path,
                size: flushed,
                max: MAX_SEGMENT_BYTES,
            });
        }
        let index_path = dir.join(file_name(base_offset, INDEX_SUFFIX));
        let time_path = dir.join(file_name(base_offset, TIME_INDEX_SUFFIX));
        let exists = |p: &Path| {
            io.exists(p)
                .map_err(|e| Error::io(format!("checking {}", p.display()), e))
        };
        let index_existed = exists(&index_path)?;
        let time_existed = exists(&time_path)?;
        let (segment, [index_whole, time_whole]) =
            Self::with_indexes(io, dir, base_offset, params, now_ms, log, false)?;
        let segment = Segment { flushed, ..segment };
        let health = IndexHealth {
            offset_index_ok: index_existed && index_whole && segment.offset_index_sane(),
            time_index_ok: time_existed && time_whole && segment.time_index_sane(),
        };
        Ok((segment, health))
    }

    fn offset_index_sane(&self) -> bool {
        let entries = self.offset_index.entries();
        let mut prev: Option<(u64, u32)> = None;
        for e in entries {
            if e.offset < self.base_offset
                || e.offset - self.base_offset > i32::MAX as u64
                || u64::from(e.position) >= self.flushed
            {
                return false;
            }
            if let Some((o, p)) = prev {
                if e.offset <= o || e.position <= p {
                    return false;
                }
            }
            prev = Some((e.offset, e.position));
        }
        true
    }

    fn time_index_sane(&self) -> bool {
        let mut prev: Option<(i64, u64)> = None;
        for e in self.time_index.entries() {
            if e.offset < self.base_offset || e.offset - self.base_offset > i32::MAX as u64 {
                return false;
            }
            if let Some((t, o)) = prev {
                if e.timestamp <= t || e.offset < o {
                    return false;
                }
            }
            prev = Some((e.timestamp, e.offset));
        }
        true
    }

    /// Computes the tail state (next offset, max timestamp, first timestamp) of a segment whose
    /// indexes are trusted, reading only the batch headers after the last index entry.
    ///
    /// # Errors
    ///
    /// [`Error::Corrupt`] when a header there is unreadable (the caller recovers the
    /// segment instead), or an I/O error.
    pub(crate) fn load(&mut self) -> Result<()> {
        let size = self.size();
        self.rolling_timestamp = None;
        if size > 0 {
            let first = self.read_header(0)?;
            self.rolling_timestamp = Some(first.max_timestamp);
        }
        let (mut pos, mut next) = match self.offset_index.last() {
            Some(e) => (u64::from(e.position), e.offset),
            None => (0, self.base_offset),
        };
        let last_entry_pos = pos;
        let (mut max_ts, mut max_off) = match self.time_index.last() {
            Some(e) => (e.timestamp, e.offset),
            None => (NO_TIMESTAMP, self.base_offset),
        };
        while pos < size {
            let h = self.read_header(pos)?;
            // A negative base offset is refused by the header parser.
            if h.last_offset_delta < 0 || h.last_offset() == MAX_OFFSET {
                return Err(Error::Corrupt {
                    file: Some(self.log_path.clone()),
                    position: pos,
                    reason: Corruption::BadOffset {
                        base_offset: h.base_offset,
                        last_offset: h.last_offset(),
                        rule: format!("offsets must lie in [0, {MAX_OFFSET})"),
                    },
                });
            }
            let last = h.last_offset();
            if h.max_timestamp > max_ts {
                max_ts = h.max_timestamp;
                max_off = last;
            }
            next = last + 1;
            pos += h.size();
        }
        if pos != size {
            return Err(Error::Corrupt {
                file: Some(self.log_path.clone()),
                position: size,
                reason: Corruption::Truncated {
                    what: "record batch",
                    needed: pos - size,
                    available: 0,
                },
            });
        }
        self.next_offset = next.max(self.base_offset);
        self.max_timestamp = max_ts;
        self.offset_of_max_timestamp = max_off;
        self.bytes_since_last_entry = size - last_entry_pos;
        Ok(())
    }

    /// Kafka's `LogSegment.recover`: rebuilds both indexes from the log, checking every batch
    /// (size, CRC, offsets increasing from the base offset, at or above `min_offset`, below
    /// `upper_bound`, and within a 32-bit delta of the base offset), and cuts the log at the
    /// first bad or incomplete batch.
    ///
    /// # Errors
    ///
    /// I/O errors only; corruption is repaired and reported in the result.
    pub(crate) fn recover(
        &mut self,
        min_offset: u64,
        upper_bound: Option<u64>,
    ) -> Result<SegmentRecovery> {
        self.flush_log()?;
        self.offset_index.file_mut().begin_rebuild();
        self.time_index.file_mut().begin_rebuild();
        let base = self.base_offset;
        let mut entries = IndexRule::new(base, self.params.index_interval_bytes);
        let mut next = base;
        let mut valid = 0u64;
        let mut batches = 0u64;
        let mut rolling = None;
        let file_len = self.flushed;
        let Segment {
            log,
            log_path,
            offset_index,
            time_index,
            ..
        } = self;
        let max_batch = self.params.max_batch_bytes;
        let bounds = SegmentBounds {
            base,
            min_offset,
            upper: upper_bound,
        };
        let end = scan_segment(
            &**log,
            log_path,
            file_len,
            max_batch,
            bounds,
            |batch, last| {
                let h = batch.header();
                let pos = batch.position();
                entries.add(offset_index, time_index, pos, last, h.max_timestamp);
                rolling.get_or_insert(h.max_timestamp);
                next = last + 1;
                valid = pos + batch.size();
                batches += 1;
                Ok(true)
            },
        )?;
        let truncated = match end {
            ScanEnd::Complete | ScanEnd::Stopped { .. } => None,
            ScanEnd::Partial { position, bytes } => Some((
                position,
                bytes,
                format!("incomplete batch of {bytes} bytes at the end of the file"),
            )),
            ScanEnd::Corrupt { position, error } => {
                Some((position, file_len - position, error.to_string()))
            }
        };
        if let Some((position, _, _)) = &truncated {
            debug_assert_eq!(*position, valid);
            self.log
                .set_len(valid)
                .map_err(|e| Error::io(format!("truncating {}", self.log_path.display()), e))?;
            self.flushed = valid;
            self.log_unsynced = true;
        }
        entries.finish(&mut self.time_index);
        self.offset_index.file_mut().end_rebuild();
        self.time_index.file_mut().end_rebuild();
        self.offset_index.file_mut().flush()?;
        self.time_index.file_mut().flush()?;
        self.max_timestamp = entries.max_timestamp;
        self.offset_of_max_timestamp = entries.offset_of_max_timestamp;
        self.rolling_timestamp = rolling;
        self.next_offset = next;
        self.bytes_since_last_entry = valid - entries.last_entry_position;
        Ok(SegmentRecovery {
            valid_bytes: valid,
            batches,
            truncated,
        })
    }

    /// The base offset (the first offset the segment may hold).
    pub fn base_offset(&self) -> u64 {
        self.base_offset
    }

    /// The offset after the last batch (the base offset when empty).
    pub fn next_offset(&self) -> u64 {
        self.next_offset
    }

    /// Bytes in the segment's log, buffered bytes included.
    pub fn size(&self) -> u64 {
        self.flushed + self.pending.len() as u64
    }

    /// Whether the segment holds no batch.
    pub fn is_empty(&self) -> bool {
        self.size() == 0
    }

    /// The largest timestamp in the segment ([`NO_TIMESTAMP`] when there is none).
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }

    /// Whether the segment may hold a batch with a producer id (see the field).
    pub(crate) fn may_hold_producer_batches(&self) -> bool {
        self.may_hold_producer_batches
    }

    /// Records whether a read of every batch of the segment found one with a producer id.
    pub(crate) fn set_holds_producer_batches(&mut self, holds: bool) {
        self.may_hold_producer_batches = holds;
    }

    /// The path of the `.log` file.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The offset index.
    pub fn offset_index(&self) -> &OffsetIndex {
        &self.offset_index
    }

    /// The time index.
    pub fn time_index(&self) -> &TimeIndex {
        &self.time_index
    }

    /// Whether the next batch (of `batch_size` bytes, max timestamp `max_timestamp`, last
    /// offset `last_offset`) must go to a new segment of `size` bytes (its size now, or before
    /// a batch was staged with [`stage`](Segment::stage)): Kafka's `LogSegment.shouldRoll`.
    /// `now_ms` is called only when the batches carry no timestamps.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn roll_due(
        &self,
        size: u64,
        segment_bytes: u64,
        segment_ms: i64,
        batch_size: u64,
        max_timestamp: i64,
        last_offset: u64,
        now_ms: impl FnOnce() -> i64,
    ) -> bool {
        if size == 0 {
            return false;
        }
        let full = size > segment_bytes.saturating_sub(batch_size);
        let waited = match self.rolling_timestamp {
            Some(first) if first >= 0 && max_timestamp >= 0 => max_timestamp.saturating_sub(first),
            _ => now_ms().saturating_sub(self.created_ms),
        };
        let old = waited > segment_ms;
        let index_full = self.offset_index.is_full() || self.time_index.is_full();
        let overflow = last_offset.saturating_sub(self.base_offset) > i32::MAX as u64;
        full || old || index_full || overflow
    }

    /// Appends one encoded batch (already checked) with its parsed header.
    pub(crate) fn append(&mut self, bytes: &[u8], header: &BatchHeader) -> Result<()> {
        if bytes.len() >= self.params.write_buffer_bytes {
            // As large as the write buffer: written from the caller's bytes, after what is
            // buffered (copying it into the buffer first would be one more pass over it).
            self.flush_log()?;
            let from = self.flushed;
            self.log
                .write_all_at(bytes, from)
                .map_err(|e| Error::io(format!("writing {}", self.log_path.display()), e))?;
            self.flushed += bytes.len() as u64;
            self.log_unsynced = true;
            self.start_writeback(from, bytes.len() as u64);
            return self.commit_staged(bytes.len() as u64, header);
        }
        self.pending.extend_from_slice(bytes);
        self.commit_staged(bytes.len() as u64, header)
    }

    /// Lets `encode` write one batch straight onto the end of the write buffer and returns
    /// its header and size. The batch is *staged*: the segment does not count it until
    /// [`commit_staged`](Segment::commit_staged), and [`unstage`](Segment::unstage) removes
    /// it. Nothing else may touch the segment in between. On an error from `encode` the
    /// buffer must be as it was (as [`BatchBuilder::encode_onto`] guarantees).
    ///
    /// [`BatchBuilder::encode_onto`]: super::record_batch::BatchBuilder::encode_onto
    pub(crate) fn stage(
        &mut self,
        encode: impl FnOnce(&mut Vec<u8>) -> Result<BatchHeader>,
    ) -> Result<(BatchHeader, u64)> {
        let before = self.pending.len();
        let header = encode(&mut self.pending)?;
        Ok((header, (self.pending.len() - before) as u64))
    }

    /// Removes the batch of `size` bytes [`stage`](Segment::stage) wrote.
    pub(crate) fn unstage(&mut self, size: u64) {
        let len = self.pending.len() - size as usize;
        self.pending.truncate(len);
    }

    /// Counts the last `size` bytes of the write buffer (a checked batch with `header`) as
    /// appended: indexes, offsets, timestamps; writes the buffer out when it is full.
    pub(crate) fn commit_staged(&mut self, size: u64, header: &BatchHeader) -> Result<()> {
        let position = self.size() - size;
        let last = header.last_offset();
        self.may_hold_producer_batches |= header.producer_id >= 0;
        if position == 0 {
            self.rolling_timestamp = Some(header.max_timestamp);
        }
        if header.max_timestamp > self.max_timestamp {
            self.max_timestamp = header.max_timestamp;
            self.offset_of_max_timestamp = last;
        }
        if self.bytes_since_last_entry > self.params.index_interval_bytes {
            self.offset_index.append(last, position as u32);
            self.time_index
                .maybe_append(self.max_timestamp, self.offset_of_max_timestamp, false);
            self.bytes_since_last_entry = 0;
        }
        self.bytes_since_last_entry += size;
        self.next_offset = last + 1;
        if self.pending.len() >= self.params.write_buffer_bytes {
            self.write_out_aligned()?;
        }
        Ok(())
    }

    /// Writes the full write buffer out up to a [`WRITE_ALIGN`] boundary of the file, keeping
    /// the rest buffered, then starts the write-back of what it wrote.
    fn write_out_aligned(&mut self) -> Result<()> {
        let from = self.flushed;
        let end = from + self.pending.len() as u64;
        let aligned = (end - end % WRITE_ALIGN).saturating_sub(from) as usize;
        let n = if aligned == 0 {
            self.pending.len()
        } else {
            aligned
        };
        self.log
            .write_all_at(&self.pending[..n], from)
            .map_err(|e| Error::io(format!("writing {}", self.log_path.display()), e))?;
        self.flushed += n as u64;
        self.pending.drain(..n);
        self.log_unsynced = true;
        self.start_writeback(from, n as u64);
        Ok(())
    }

    /// Starts the device on bytes just written (when configured), so the next `sync` waits
    /// only for the tail. Only a hint: a failed write-back is reported by the fdatasync that
    /// `sync` makes, so an error here changes nothing and is dropped.
    fn start_writeback(&self, from: u64, len: u64) {
        if self.params.start_writeback {
            self.log.start_writeback(from, len).ok();
        }
    }

    fn flush_log(&mut self) -> Result<()> {
        if !self.pending.is_empty() {
            self.log
                .write_all_at(&self.pending, self.flushed)
                .map_err(|e| Error::io(format!("writing {}", self.log_path.display()), e))?;
            self.flushed += self.pending.len() as u64;
            self.pending.clear();
            self.log_unsynced = true;
        }
        Ok(())
    }

    /// Hands buffered log bytes and index entries to the operating system.
    pub(crate) fn flush(&mut self) -> Result<()> {
        self.flush_log()?;
        self.offset_index.file_mut().flush()?;
        self.time_index.file_mut().flush()
    }

    /// Flushes, then makes the log durable, and the indexes too when `indexes` is set.
    ///
    /// The active segment's indexes need no fsync: the segment holding the recovery point is
    /// always recovered on open, which rebuilds them (as Kafka does). Indexes of a segment
    /// that stopped being active must be durable before the recovery point passes it.
    pub(crate) fn sync(&mut self, indexes: bool) -> Result<()> {
        self.flush()?;
        if self.log_unsynced {
            self.log
                .sync_data()
                .map_err(|e| Error::io(format!("syncing {}", self.log_path.display()), e))?;
            self.log_unsynced = false;
        }
        if indexes {
            self.offset_index.file_mut().sync()?;
            self.time_index.file_mut().sync()?;
        }
        Ok(())
    }

    /// Marks the log as holding bytes that may not be durable: a segment found on open past
    /// the recovery point was written by an earlier life of the process, whose page cache
    /// writes may never have been fsynced (a kill, or a failed fsync, leaves them there).
    pub(crate) fn mark_unsynced(&mut self) {
        self.log_unsynced = true;
    }

    /// Whether [`sync`](Segment::sync) with `indexes` has anything to do.
    pub(crate) fn is_unsynced(&self, indexes: bool) -> bool {
        self.log_unsynced
            || !self.pending.is_empty()
            || (indexes && (self.offset_index.is_unsynced() || self.time_index.is_unsynced()))
    }

    /// Called when the segment stops being the active one: writes the final time index entry
    /// and flushes.
    pub(crate) fn on_roll(&mut self) -> Result<()> {
        self.time_index
            .maybe_append(self.max_timestamp, self.offset_of_max_timestamp, true);
        self.flush()
    }

    /// Reads exactly `buf.len()` bytes at `pos`, from the file and the write buffer.
    pub(crate) fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> Result<()> {
        let end = pos + buf.len() as u64;
        if end > self.size() {
            return Err(Error::Corrupt {
                file: Some(self.log_path.clone()),
                position: pos,
                reason: Corruption::Truncated {
                    what: "read",
                    needed: buf.len() as u64,
                    available: self.size().saturating_sub(pos),
                },
            });
        }
        let from_file = end.min(self.flushed).saturating_sub(pos) as usize;
        if from_file > 0 {
            self.log
                .read_exact_at(&mut buf[..from_file], pos)
                .map_err(|e| Error::io(format!("reading {}", self.log_path.display()), e))?;
        }
        if from_file < buf.len() {
            let start = (pos + from_file as u64 - self.flushed) as usize;
            let n = buf.len() - from_file;
            buf[from_file..].copy_from_slice(&self.pending[start..start + n]);
        }
        Ok(())
    }

    /// The header of the batch starting at `pos`.
    pub(crate) fn read_header(&self, pos: u64) -> Result<BatchHeader> {
        let mut buf = [0u8; HEADER_SIZE];
        let n = (self.size().saturating_sub(pos)).min(HEADER_SIZE as u64) as usize;
        self.read_exact_at(&mut buf[..n], pos)?;
        BatchHeader::parse(&buf[..n]).map_err(|e| e.in_file(&self.log_path, pos))
    }

    /// The first batch whose last offset is at or above `offset`: its position and header.
    /// Uses the offset index, then scans headers forward.
    pub(crate) fn find_batch(&self, offset: u64) -> Result<Option<(u64, BatchHeader)>> {
        let mut pos = self
            .offset_index
            .lookup(offset)
            .map_or(0, |e| u64::from(e.position));
        let size = self.size();
        // One small read per header: from an index entry the scan covers about
        // `index_interval_bytes`, a few batches (measured faster than reading a window).
        while pos < size {
            let h = self.read_header(pos)?;
            if h.last_offset() >= offset {
                return Ok(Some((pos, h)));
            }
            pos += h.size();
        }
        Ok(None)
    }

    /// The first record at or above `min_offset` whose timestamp is at or above `target`:
    /// `(offset, timestamp)`.
    pub(crate) fn find_by_timestamp(
        &self,
        target: i64,
        min_offset: u64,
        max_batch_bytes: u64,
    ) -> Result<Option<(u64, i64)>> {
        if self.max_timestamp < target {
            return Ok(None);
        }
        // Every record up to the entry's offset is older than `target`.
        let mut pos = match self.time_index.last_below(target) {
            Some(e) => self
                .offset_index
                .lookup(e.offset + 1)
                .map_or(0, |o| u64::from(o.position)),
            None => 0,
        };
        let size = self.size();
        while pos < size {
            let h = self.read_header(pos)?;
            if h.max_timestamp >= target && !h.is_control() {
                if h.size() > max_batch_bytes {
                    return Err(Error::BatchTooLarge {
                        file: self.log_path.clone(),
                        position: pos,
                        size: h.size(),
                        max: max_batch_bytes,
                    });
                }
                let mut bytes = vec![0u8; h.size() as usize];
                self.read_exact_at(&mut bytes, pos)?;
                let batch =
                    Batch::decode_at(&bytes, pos).map_err(|e| e.in_file(&self.log_path, 0))?;
                let mut decompressed = Vec::new();
                let records = batch
                    .records(&mut decompressed)
                    .map_err(|e| e.in_file(&self.log_path, 0))?;
                for record in records {
                    let record = record.map_err(|e| e.in_file(&self.log_path, 0))?;
                    if record.timestamp >= target && record.offset >= min_offset {
                        return Ok(Some((record.offset, record.timestamp)));
                    }
                }
            }
            pos += h.size();
        }
        Ok(None)
    }

    /// Removes every batch holding an offset at or above `offset` (whole batches: a batch
    /// straddling `offset` goes entirely), then re-reads the tail state.
    pub(crate) fn truncate_to(&mut self, offset: u64) -> Result<()> {
        let Some((pos, _)) = self.find_batch(offset)? else {
            return Ok(());
        };
        self.flush_log()?;
        self.log
            .set_len(pos)
            .map_err(|e| Error::io(format!("truncating {}", self.log_path.display()), e))?;
        self.flushed = pos;
        self.log_unsynced = true;
        self.offset_index.file_mut().truncate_to(offset);
        self.time_index.file_mut().truncate_to(offset);
        self.offset_index.file_mut().flush()?;
        self.time_index.file_mut().flush()?;
        self.load()
    }

    /// The paths of the segment's three files.
    pub(crate) fn paths(&self) -> [PathBuf; 4] {
        [
            self.log_path.clone(),
            self.offset_index.path().to_path_buf(),
            self.time_index.path().to_path_buf(),
            // The transaction index, where the segment has one (`txn_index`).
            self.log_path
                .with_extension(super::txn_index::TXN_INDEX_SUFFIX),
        ]
    }
}
