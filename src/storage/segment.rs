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
//!
//! [`scan_log`] iterates the batches of any `.log` file with their positions, which is what a
//! dump tool needs.

use std::fmt;
use std::path::{Path, PathBuf};

use super::io::{Io, IoFile, OpenMode};
use super::offset_index::OffsetIndex;
use super::record_batch::{
    Batch, BatchHeader, Extent, CORRUPT_BELOW_BATCH_LENGTH, HEADER_SIZE, HEADER_SIZE_UP_TO_MAGIC,
    LOG_OVERHEAD, NO_TIMESTAMP,
};
use super::time_index::TimeIndex;
use crate::error::{Corruption, Error, Result};

/// Suffix of a segment's log file.
pub const LOG_SUFFIX: &str = "log";
/// Suffix of a segment's offset index.
pub const INDEX_SUFFIX: &str = "index";
/// Suffix of a segment's time index.
pub const TIME_INDEX_SUFFIX: &str = "timeindex";

/// The file name of a segment file: the base offset as 20 zero-padded digits, then the suffix.
///
/// # Examples
///
/// ```
/// use logbus::storage::segment::file_name;
/// assert_eq!(file_name(42, "log"), "00000000000000000042.log");
/// ```
pub fn file_name(base_offset: u64, suffix: &str) -> String {
    format!("{base_offset:020}.{suffix}")
}

/// Splits a name like `00000000000000000042.log` into `(42, "log")`; `None` for other names.
///
/// # Examples
///
/// ```
/// use logbus::storage::segment::parse_file_name;
/// assert_eq!(parse_file_name("00000000000000000042.timeindex"), Some((42, "timeindex")));
/// assert_eq!(parse_file_name("42.log"), None);
/// ```
pub fn parse_file_name(name: &str) -> Option<(u64, &str)> {
    let (stem, suffix) = name.split_once('.')?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let base: u64 = stem.parse().ok()?;
    (base <= MAX_OFFSET).then_some((base, suffix))
}

/// The largest offset a segment name may carry: Kafka's offsets are signed 64-bit.
pub const MAX_OFFSET: u64 = i64::MAX as u64;

/// Why `name`, shaped like a segment file name (20 digits, a dot, a suffix), names no valid
/// base offset: `Some` for offsets above [`MAX_OFFSET`] (which [`parse_file_name`] rejects),
/// `None` otherwise.
///
/// # Examples
///
/// ```
/// use logbus::storage::segment::bad_offset_in_name;
/// assert!(bad_offset_in_name("18446744073709551615.log").is_some());
/// assert!(bad_offset_in_name("00000000000000000042.log").is_none());
/// ```
pub fn bad_offset_in_name(name: &str) -> Option<String> {
    let (stem, _) = name.split_once('.')?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    match stem.parse::<u64>() {
        Ok(base) if base <= MAX_OFFSET => None,
        _ => Some(format!(
            "the base offset {stem} in the name is above {MAX_OFFSET}: offsets are signed 64-bit \
             (as Kafka's), so no segment can start there"
        )),
    }
}

/// Settings a segment needs (a subset of the segment set's config).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SegmentParams {
    pub(crate) index_interval_bytes: u64,
    pub(crate) segment_index_bytes: u64,
    pub(crate) write_buffer_bytes: usize,
    /// The largest batch a read holds in memory.
    pub(crate) max_batch_bytes: u64,
}

/// The largest `.log` a segment may be: index positions are 32-bit signed, as Kafka's
/// (`segment.bytes` ≤ 2^31 - 1).
pub const MAX_SEGMENT_BYTES: u64 = i32::MAX as u64;

/// Size of the reads recovery and [`scan_log`] make: small enough that the buffer stays in
/// the L2 cache between the kernel's copy into it and the CRC pass over it (4 MiB reads
/// measured 0.1x slower in recovery than 512 KiB ones), large enough that syscalls are few.
const SCAN_CHUNK: usize = 512 << 10;

/// Write-outs of a full write buffer end on a multiple of this file position (the rest stays
/// buffered): the page cache then fills whole, aligned (large) folios, which measured about
/// 1.3x cheaper in the kernel than unaligned writes of the same size on ext4.
const WRITE_ALIGN: u64 = 64 << 10;

/// How a scan of a `.log` ended.
#[derive(Debug)]
pub enum ScanEnd {
    /// Every byte up to the end formed valid batches.
    Complete,
    /// The last `bytes` bytes, from `position`, are an incomplete batch (a torn tail).
    Partial {
        /// Where the incomplete batch starts.
        position: u64,
        /// Its bytes.
        bytes: u64,
    },
    /// The batch at `position` is corrupt (or its offsets were rejected by the visitor).
    Corrupt {
        /// Where the bad batch starts.
        position: u64,
        /// What was wrong, as [`Error::CorruptSegment`] with the byte position of the field.
        error: Error,
    },
    /// The visitor asked to stop before the batch at `position`.
    Stopped {
        /// Where the next batch starts.
        position: u64,
    },
}

/// Iterates the batches of `file` (a `.log`) from byte `start` to byte `end`, checking each
/// one's size and CRC, and calls `visit` with each valid batch (its
/// [`position`](Batch::position) is its place in the file).
///
/// `visit` returns `Ok(true)` to go on, `Ok(false)` to stop, or an error to declare the batch
/// bad (the scan then ends with [`ScanEnd::Corrupt`] at that batch). Reads are large and
/// sequential; memory use is bounded by the larger of 512 KiB and `max_batch_bytes`, and never
/// exceeds what the file holds. A batch over `max_batch_bytes` is never held: its CRC is
/// checked as it streams by, and it ends the scan as corruption when the CRC fails, or with
/// [`Error::BatchTooLarge`] when it is a valid batch (the limit is too low for this log).
///
/// # Errors
///
/// [`Error::Io`] when reading fails; [`Error::BatchTooLarge`] for a valid batch over
/// `max_batch_bytes`. Corruption is not an error here: it is how the scan ends.
///
/// # Examples
///
/// ```
/// use logbus::storage::io::{FsIo, Io, OpenMode};
/// use logbus::storage::record_batch::BatchBuilder;
/// use logbus::storage::segment::{scan_log, ScanEnd};
/// use std::path::Path;
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("00000000000000000000.log");
/// let file = FsIo.open(&path, OpenMode::CreateNew)?;
/// let batch = BatchBuilder::new(0).with_record(5, None, Some(b"v"))?.finish().to_vec();
/// file.write_all_at(&batch, 0)?;
/// file.write_all_at(&batch[..10], batch.len() as u64)?; // a torn second batch
///
/// let mut offsets = Vec::new();
/// let end = scan_log(&*file, Path::new(&path), 0, file.len()?, 1 << 20, |b| {
///     offsets.push((b.position(), b.header().base_offset));
///     Ok(true)
/// })?;
/// assert_eq!(offsets, vec![(0, 0)]);
/// assert!(matches!(end, ScanEnd::Partial { bytes: 10, .. }));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn scan_log(
    file: &dyn IoFile,
    path: &Path,
    start: u64,
    end: u64,
    max_batch_bytes: u64,
    mut visit: impl FnMut(Batch<'_>) -> Result<bool>,
) -> Result<ScanEnd> {
    let mut buf = ScanBuf {
        data: Vec::new(),
        len: 0,
        start,
    };
    let mut off = 0usize; // next batch in buf
    loop {
        let pos = buf.start + off as u64;
        if pos >= end {
            return Ok(ScanEnd::Complete);
        }
        let left_in_file = end - pos;
        let avail = (buf.len - off) as u64;
        if left_in_file < HEADER_SIZE_UP_TO_MAGIC as u64 {
            return Ok(ScanEnd::Partial {
                position: pos,
                bytes: left_in_file,
            });
        }
        if avail < HEADER_SIZE_UP_TO_MAGIC as u64 {
            buf.refill(file, path, &mut off, end, 0)?;
            continue;
        }
        let extent = super::record_batch::next_batch_extent(&buf.data[off..buf.len]);
        let length = i32::from_be_bytes([
            buf.data[off + 8],
            buf.data[off + 9],
            buf.data[off + 10],
            buf.data[off + 11],
        ]);
        if length < CORRUPT_BELOW_BATCH_LENGTH {
            debug_assert!(matches!(extent, Extent::Corrupt(_)));
            return Ok(ScanEnd::Corrupt {
                position: pos,
                error: Error::CorruptSegment {
                    file: path.to_path_buf(),
                    position: pos + 8,
                    reason: Corruption::BatchLengthTooSmall { length },
                },
            });
        }
        let size = LOG_OVERHEAD as u64 + length as u64;
        if size > left_in_file {
            return Ok(ScanEnd::Partial {
                position: pos,
                bytes: left_in_file,
            });
        }
        if size > max_batch_bytes {
            // Never held in memory: its CRC is computed as it streams by. Garbage (a sparse
            // file, a torn length) is corruption; a real batch over the limit is an error the
            // caller must see, never a cut.
            return match oversized_batch(file, path, pos, size, max_batch_bytes)? {
                Some(error) => Ok(ScanEnd::Corrupt {
                    position: pos,
                    error,
                }),
                None => Err(Error::BatchTooLarge {
                    file: path.to_path_buf(),
                    position: pos,
                    size,
                    max: max_batch_bytes,
                }),
            };
        }
        if size > avail {
            // `size <= left_in_file`: the buffer never grows beyond what the file holds.
            buf.refill(file, path, &mut off, end, size as usize)?;
            continue;
        }
        let bytes = &buf.data[off..off + size as usize];
        let batch = match Batch::decode_at(bytes, pos) {
            Ok(batch) => batch,
            Err(e) => {
                return Ok(ScanEnd::Corrupt {
                    position: pos,
                    error: e.in_file(path, 0),
                })
            }
        };
        match visit(batch) {
            Ok(true) => off += size as usize,
            Ok(false) => return Ok(ScanEnd::Stopped { position: pos }),
            Err(e) => {
                return Ok(ScanEnd::Corrupt {
                    position: pos,
                    error: e.in_file(path, 0),
                })
            }
        }
    }
}

/// Checks the batch of `size` bytes at `pos` (known to lie inside the file) without holding it:
/// `Some` corruption when its magic or its CRC is wrong, `None` when it is a valid batch.
fn oversized_batch(
    file: &dyn IoFile,
    path: &Path,
    pos: u64,
    size: u64,
    max: u64,
) -> Result<Option<Error>> {
    const CHUNK: usize = 256 << 10;
    let read = |buf: &mut [u8], at: u64| {
        file.read_exact_at(buf, at)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))
    };
    let mut head = [0u8; HEADER_SIZE];
    read(&mut head, pos)?;
    let corrupt = |at: u64, reason: Corruption| {
        Some(Error::CorruptSegment {
            file: path.to_path_buf(),
            position: pos + at,
            reason,
        })
    };
    if head[16] != 2 {
        return Ok(corrupt(
            16,
            Corruption::BadMagic {
                magic: head[16] as i8,
            },
        ));
    }
    let stored = u32::from_be_bytes([head[17], head[18], head[19], head[20]]);
    let mut crc = 0u32;
    let mut buf = vec![0u8; CHUNK];
    let mut at = pos + 21;
    let end = pos + size;
    while at < end {
        let n = (end - at).min(CHUNK as u64) as usize;
        read(&mut buf[..n], at)?;
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        at += n as u64;
    }
    if crc != stored {
        return Ok(corrupt(8, Corruption::BatchTooLarge { size, max }));
    }
    Ok(None)
}

/// A read buffer reused across refills: `data[..len]` holds file bytes from `start`.
struct ScanBuf {
    data: Vec<u8>,
    len: usize,
    start: u64,
}

impl ScanBuf {
    /// Moves the bytes from `off` to the front and reads more, up to the larger of `need`
    /// and a chunk in all, never past `end`. Memory is only zeroed when the buffer grows.
    fn refill(
        &mut self,
        file: &dyn IoFile,
        path: &Path,
        off: &mut usize,
        end: u64,
        need: usize,
    ) -> Result<()> {
        self.data.copy_within(*off..self.len, 0);
        self.len -= *off;
        self.start += *off as u64;
        *off = 0;
        let file_left = end - (self.start + self.len as u64);
        let want = need.max(SCAN_CHUNK).saturating_sub(self.len) as u64;
        let add = want.min(file_left) as usize;
        if self.data.len() < self.len + add {
            self.data.resize(self.len + add, 0);
        }
        file.read_exact_at(
            &mut self.data[self.len..self.len + add],
            self.start + self.len as u64,
        )
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        self.len += add;
        Ok(())
    }
}

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
        let (offset_index, _) = OffsetIndex::open(
            io,
            &dir.join(file_name(base_offset, INDEX_SUFFIX)),
            base_offset,
            params.segment_index_bytes,
            true,
        )?;
        let (time_index, _) = TimeIndex::open(
            io,
            &dir.join(file_name(base_offset, TIME_INDEX_SUFFIX)),
            base_offset,
            params.segment_index_bytes,
            true,
        )?;
        Ok(Segment {
            base_offset,
            log_path,
            log,
            flushed: 0,
            pending: Vec::new(),
            log_unsynced: true,
            offset_index,
            time_index,
            params,
            bytes_since_last_entry: 0,
            max_timestamp: NO_TIMESTAMP,
            offset_of_max_timestamp: base_offset,
            rolling_timestamp: None,
            created_ms: now_ms,
            next_offset: base_offset,
        })
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
        let (offset_index, index_whole) = OffsetIndex::open(
            io,
            &index_path,
            base_offset,
            params.segment_index_bytes,
            false,
        )?;
        let (time_index, time_whole) = TimeIndex::open(
            io,
            &time_path,
            base_offset,
            params.segment_index_bytes,
            false,
        )?;
        let segment = Segment {
            base_offset,
            log_path,
            log,
            flushed,
            pending: Vec::new(),
            log_unsynced: false,
            offset_index,
            time_index,
            params,
            bytes_since_last_entry: 0,
            max_timestamp: NO_TIMESTAMP,
            offset_of_max_timestamp: base_offset,
            rolling_timestamp: None,
            created_ms: now_ms,
            next_offset: base_offset,
        };
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
    /// [`Error::CorruptSegment`] when a header there is unreadable (the caller recovers the
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
            if h.base_offset < 0 || h.last_offset_delta < 0 || h.last_offset() == i64::MAX {
                return Err(Error::CorruptSegment {
                    file: self.log_path.clone(),
                    position: pos,
                    reason: Corruption::BadOffset {
                        base_offset: h.base_offset,
                        last_offset: h.last_offset(),
                        rule: format!("offsets must lie in [0, {})", i64::MAX),
                    },
                });
            }
            let last = h.last_offset() as u64;
            if h.max_timestamp > max_ts {
                max_ts = h.max_timestamp;
                max_off = last;
            }
            next = last + 1;
            pos += h.size();
        }
        if pos != size {
            return Err(Error::CorruptSegment {
                file: self.log_path.clone(),
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
        self.offset_index.begin_rebuild();
        self.time_index.begin_rebuild();
        let base = self.base_offset;
        let interval = self.params.index_interval_bytes;
        let mut expected = base;
        let mut max_ts = NO_TIMESTAMP;
        let mut max_off = base;
        let mut last_entry_pos = 0u64;
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
        let end = scan_log(&**log, log_path, 0, file_len, max_batch, |batch| {
            let h = batch.header();
            let pos = batch.position();
            let last = check_batch_offsets(&batch, base, expected, min_offset, upper_bound)?;
            // A CRC can seal malformed records too: such a batch is corrupt, or a reader from
            // below it would be stuck there. Compressed batches cannot be looked into.
            match batch.validate_records() {
                Ok(()) | Err(Error::UnsupportedCompression { .. }) => {}
                Err(e) => return Err(e),
            }
            if h.max_timestamp > max_ts {
                max_ts = h.max_timestamp;
                max_off = last;
            }
            if pos - last_entry_pos > interval {
                offset_index.append(last, pos as u32);
                time_index.maybe_append(max_ts, max_off, false);
                last_entry_pos = pos;
            }
            rolling.get_or_insert(h.max_timestamp);
            expected = last + 1;
            valid = pos + batch.size();
            batches += 1;
            Ok(true)
        })?;
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
        self.time_index.maybe_append(max_ts, max_off, true);
        self.offset_index.end_rebuild();
        self.time_index.end_rebuild();
        self.offset_index.flush()?;
        self.time_index.flush()?;
        self.max_timestamp = max_ts;
        self.offset_of_max_timestamp = max_off;
        self.rolling_timestamp = rolling;
        self.next_offset = if batches > 0 { expected } else { base };
        self.bytes_since_last_entry = valid - last_entry_pos;
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
    /// offset `last_offset`) must go to a new segment (Kafka's `LogSegment.shouldRoll`).
    /// `now_ms` is called only when the batches carry no timestamps.
    pub(crate) fn should_roll(
        &self,
        segment_bytes: u64,
        segment_ms: i64,
        batch_size: u64,
        max_timestamp: i64,
        last_offset: u64,
        now_ms: impl FnOnce() -> i64,
    ) -> bool {
        self.roll_due(
            self.size(),
            segment_bytes,
            segment_ms,
            batch_size,
            max_timestamp,
            last_offset,
            now_ms,
        )
    }

    /// [`should_roll`](Segment::should_roll) for a segment of `size` bytes (its size before
    /// a batch was staged with [`stage`](Segment::stage)).
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
        let last = header.last_offset() as u64;
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
        // The device starts on these bytes while more are appended, so the next `sync` waits
        // only for the tail. Only a hint: a failed write-back is reported by the fdatasync
        // that `sync` makes, so an error here changes nothing and is dropped.
        self.log.start_writeback(from, n as u64).ok();
        Ok(())
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
        self.offset_index.flush()?;
        self.time_index.flush()
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
            self.offset_index.sync()?;
            self.time_index.sync()?;
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
            return Err(Error::CorruptSegment {
                file: self.log_path.clone(),
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
            if h.last_offset() >= 0 && h.last_offset() as u64 >= offset {
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
                for record in batch.records().map_err(|e| e.in_file(&self.log_path, 0))? {
                    let record = record.map_err(|e| e.in_file(&self.log_path, 0))?;
                    if record.timestamp >= target
                        && record.offset >= 0
                        && record.offset as u64 >= min_offset
                    {
                        return Ok(Some((record.offset as u64, record.timestamp)));
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
        self.offset_index.truncate_to(offset);
        self.time_index.truncate_to(offset);
        self.offset_index.flush()?;
        self.time_index.flush()?;
        self.load()
    }

    /// The paths of the segment's three files.
    pub(crate) fn paths(&self) -> [PathBuf; 3] {
        [
            self.log_path.clone(),
            self.offset_index.path().to_path_buf(),
            self.time_index.path().to_path_buf(),
        ]
    }
}

/// Kafka's offset checks for `batch`, the next batch of the segment based at `base` after
/// offset `expected` (one past the previous batch's last offset, or the segment's base offset):
/// offsets strictly increase but may jump (compaction, transactions and replicas leave gaps),
/// so the batch starts at or above `expected` and at or above `min_offset` (the previous
/// segment's end); its last offset delta is non-negative; its offsets stay within the
/// segment's 32-bit relative range, below `upper` (the next segment's base) and below
/// `i64::MAX` (the offset after the last must exist). Returns the batch's last offset.
/// Recovery and `verify_dir` both apply it.
pub(crate) fn check_batch_offsets(
    batch: &Batch<'_>,
    base: u64,
    expected: u64,
    min_offset: u64,
    upper: Option<u64>,
) -> Result<u64> {
    let h = batch.header();
    let bad = |rule: String| {
        Err(Error::CorruptBatch {
            position: batch.position(),
            reason: Corruption::BadOffset {
                base_offset: h.base_offset,
                last_offset: h.last_offset(),
                rule,
            },
        })
    };
    let floor = expected.max(min_offset);
    if h.base_offset < 0 || (h.base_offset as u64) < floor {
        return bad(if batch.position() > 0 {
            format!("base offset must be at least {floor} (offsets increase strictly)")
        } else {
            format!(
                "base offset must be at least {floor} (the segment's base offset, and past the \
                 previous segment's last offset)"
            )
        });
    }
    if h.last_offset_delta < 0 {
        return bad("lastOffsetDelta must be >= 0".into());
    }
    let last = h.last_offset() as u64;
    if last >= i64::MAX as u64 {
        return bad(format!(
            "offsets must be below {} (the offset after the last must exist)",
            i64::MAX
        ));
    }
    if last - base > i32::MAX as u64 {
        return bad(format!(
            "offsets must lie within [{base}, {}] in this segment",
            base + i32::MAX as u64
        ));
    }
    if let Some(upper) = upper {
        if last >= upper {
            return bad(format!(
                "offsets must be below {upper}, the next segment's base offset"
            ));
        }
    }
    Ok(last)
}
