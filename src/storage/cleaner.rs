//! Log compaction of one partition's log: Kafka's `LogCleaner`'s `Cleaner` over a
//! [`SegmentSet`], knowing nothing of threads (the scheduling lives in `persist`).
//!
//! A pass, as Kafka's:
//!
//! 1. **Plan** ([`SegmentSet::plan_clean`], under the caller's lock on the set): the cleanable
//!    range runs from the log's first segment to the *first uncleanable offset*: the active
//!    segment's base, the `limit_offset` (the high watermark), or the first segment holding a
//!    record younger than `min_compaction_lag`, whichever is lowest (segment granularity, as
//!    Kafka's). Below `first_dirty` (the cleaner's checkpoint) the log was cleaned before.
//! 2. **Build** ([`CleanPlan::build`], without the lock: the planned segments are closed and
//!    never written again, and each is read through a handle of its own): a map of key →
//!    latest offset over the dirty section (bounded by `dedupe_buffer_bytes`, 24 bytes a key
//!    at a load of 0.9, as Kafka's `SkimpyOffsetMap`: a 128-bit identity of the key, the key
//!    itself when shorter than 16 bytes, else its keyed hash, then the offset; when it fills, the pass cleans up to where it got and the next pass goes on from
//!    there), then the segments are rewritten in order into groups, each a
//!    `<base>.log.cleaned` file with its `.index.cleaned` and `.timeindex.cleaned` (written
//!    by the segment's index rule as the log is written, so nothing reads the cleaned log
//!    again to index it), the three fsynced: a group takes consecutive segments while its
//!    survivors stay within `segment_bytes`, its offsets within a 32-bit delta of its base
//!    and its offset index within `segment_index_bytes` (Kafka groups by the old segments'
//!    sizes; grouping by what is written merges the small outputs of a pass into one segment
//!    at once, with one set of files and fsyncs). A record
//!    stays when it is the latest of its key (or lies past the map's end), except a
//!    tombstone (null value) older than `delete_retention` by its timestamp. In the dirty
//!    section every keyed record was mapped, so a record there is its key's latest exactly
//!    when its offset is one of the map's: the rewrite finds that in the map's offsets,
//!    sorted, without hashing the key again. The map's scan checks every batch's CRC and
//!    notes where each lies, so that the rewrite of a segment the map read whole reads
//!    again only the batches it may keep: one of the dirty section none of whose offsets is
//!    in the map, with no keyless record (the map counts a batch's keys against its records)
//!    and not its producer's last batch, has every record superseded, and is dropped whole
//!    unread (Kafka's cleaner reads each batch twice). A batch keeps its base offset, last offset delta,
//!    leader epoch and producer fields; only its records (copied byte for byte, their deltas
//!    unchanged), count, max timestamp, length and CRC change. A compressed batch is
//!    decompressed, filtered the same way, and its survivors compressed again with its codec
//!    (as Kafka's cleaner recompresses). A group that would be left empty keeps its last
//!    batch's header with no records (as Kafka keeps empty batches), so that its cleaned
//!    segment exists and covers the group's offsets (see the recovery rule below).
//!
//! Transactions, as Kafka's cleaner (`CleanedTransactionMetadata`): a first scan of the
//! cleanable segments pairs each transactional data batch with its producer's next marker.
//! It reads only the segments that may hold a batch with a producer id (the segment set
//! knows which from its appends and from its read of every batch at open).
//! - A transaction with no marker in the range (an open one, or one whose marker lies past
//!   the range) stops the pass at its first offset: nothing at or past the first unstable
//!   offset is cleaned, and the pass's first dirty offset stays there.
//! - An aborted transaction's records never enter the key map and are removed (counted in
//!   [`CleanStats::aborted_removed`]); committed ones are compacted as any record.
//! - Control batches (the markers) are always kept whole: a marker whose data is all gone
//!   is kept too (Kafka removes those after `delete_retention` in a second pass; this one
//!   does not yet, which costs a batch header a transaction and is always safe).
//! - Each producer id's last data batch in the range is kept, emptied of its records if need
//!   be (its header alone), so that recovery, which rebuilds producer state from batch
//!   headers, finds the same sequence and epoch after compaction.
//! 3. **Swap** ([`SegmentSet::commit_clean`], under the lock again), Kafka's crash-safe
//!    protocol per group, in order: `.cleaned` → `.swap` (directory fsynced: from here on
//!    recovery finishes the swap), each old segment's files → `.deleted` (directory fsynced:
//!    no old segment survives beside its replacement), the indexes' `.cleaned` names → their
//!    own, `.swap` → `<base>.log`, the new segment opened on its indexes (only the batch
//!    headers past the last offset entry read); the `.deleted` files are removed after the
//!    commit, without the lock ([`SegmentSet::take_deleted_files`]). These last
//!    renames are not synced: until they are durable the `.swap` file is, and recovery
//!    finishes the swap from it (an index still named `.cleaned` is removed, and rebuilt);
//!    the next group's first fsync makes them durable. A group whose segments
//!    changed meanwhile (retention deleted one, a truncation cut one) is not swapped: its
//!    `.cleaned` file is removed.
//!
//! Recovery (`recovery::load`) completes or discards a half-done swap: `.cleaned` files are
//! removed; a `<base>.log.swap` whose batches are all valid replaces every segment based in
//! `[base, its next offset)` and becomes `<base>.log` (its indexes rebuilt); a damaged one
//! is set aside while its old segment is still there. Offsets never change: a cleaned log has
//! gaps, which readers step over (a read inside a gap returns the records after it).
//!
//! Why the swap is safe at every cut: a cleaned group drops a record only when a later
//! record of its key (at a higher offset) exists, or when it is an expired tombstone whose
//! older values were dropped with it. Whatever subset of the old segments a crash leaves,
//! recovery keeps the swap file (offsets `[base, next)`) and only the old segments based at or
//! past its next offset, which the swap holds nothing of: no record twice, and every key's
//! latest record present (the latest record of a key in the group is in the swap, so its old
//! segment is replaced; a surviving old segment holds only records whose later versions lie
//! past it).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::file_names::{file_name, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
use super::index_file::IndexFile;
use super::io::{Io, IoFile, OpenMode};
use super::offset_index::OffsetIndex;
use super::record_batch::compression::compress;
use super::record_batch::{
    crc32c, field, Batch, BatchHeader, Compression, TimestampType, HEADER_SIZE, NO_TIMESTAMP,
};
use super::scan::{scan_log, scan_log_reusing, ScanEnd};
use super::segment::{IndexRule, Segment, SegmentParams};
use super::segment_set::SegmentSet;
use super::time_index::TimeIndex;
use super::txn_index;
use super::varint::read_varint;
use crate::error::{Error, Result};
use crate::sync::Arc;
use offset_map::{OffsetMap, PendingKey};

mod key_hash;
mod offset_map;

/// Suffix of a cleaned segment being written (Kafka's `CleanedFileSuffix`).
pub const CLEANED_SUFFIX: &str = ".cleaned";
/// Suffix of a cleaned segment about to replace the old ones (Kafka's `SwapFileSuffix`).
pub const SWAP_SUFFIX: &str = ".swap";
/// Suffix of a file being deleted (Kafka's `DeletedFileSuffix`).
pub const DELETED_SUFFIX: &str = ".deleted";

/// Bytes of dedupe buffer per key (Kafka's `SkimpyOffsetMap`: a 16-byte hash and an 8-byte
/// offset).
pub const BYTES_PER_KEY: usize = 24;

/// What one cleaning pass may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanConfig {
    /// The first offset not yet cleaned (the cleaner's checkpoint; 0 for a log never
    /// cleaned).
    pub first_dirty: u64,
    /// Nothing at or above this offset is cleaned (the high watermark).
    pub limit_offset: u64,
    /// A tombstone older than this (by its timestamp, against the log's clock) is removed.
    pub delete_retention_ms: i64,
    /// A tombstone at or above this offset is kept whatever its age: a replicated log's
    /// replicas that have not fetched it yet (the lowest of their log ends) would otherwise
    /// keep the value it deletes. `u64::MAX`: no such bound.
    pub keep_tombstones_from: u64,
    /// A segment holding a record younger than this, and everything after it, is not
    /// cleaned.
    pub min_compaction_lag_ms: i64,
    /// Memory for the key → offset map.
    pub dedupe_buffer_bytes: usize,
}

impl Default for CleanConfig {
    fn default() -> Self {
        CleanConfig {
            first_dirty: 0,
            limit_offset: u64::MAX,
            delete_retention_ms: 24 * 3600 * 1000,
            keep_tombstones_from: u64::MAX,
            min_compaction_lag_ms: 0,
            dedupe_buffer_bytes: 32 << 20,
        }
    }
}

/// How dirty a log is: Kafka's `LogToClean`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirtyInfo {
    /// Bytes of the cleanable segments below `first_dirty` (cleaned before).
    pub clean_bytes: u64,
    /// Bytes of the cleanable segments at or above `first_dirty`.
    pub dirty_bytes: u64,
    /// Where the dirty section starts.
    pub first_dirty: u64,
    /// Where the cleanable range ends.
    pub first_uncleanable: u64,
}

impl DirtyInfo {
    /// `dirty / (clean + dirty)`: 0 when nothing is cleanable.
    pub fn ratio(&self) -> f64 {
        let total = self.clean_bytes + self.dirty_bytes;
        if total == 0 {
            0.0
        } else {
            self.dirty_bytes as f64 / total as f64
        }
    }
}

/// What a pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanStats {
    /// Segments rewritten (the old ones replaced).
    pub segments_cleaned: u64,
    /// Bytes of the old segments read while rewriting them.
    pub bytes_read: u64,
    /// Bytes of the cleaned segments written.
    pub bytes_written: u64,
    /// Records looked at while rewriting.
    pub records_read: u64,
    /// Records removed (superseded, or expired tombstones).
    pub records_removed: u64,
    /// Of those, expired tombstones.
    pub tombstones_removed: u64,
    /// Of those, records of aborted transactions.
    pub aborted_removed: u64,
    /// The first offset not yet cleaned after the pass (the new cleaner checkpoint).
    pub first_dirty: u64,
    /// Whether the key map filled before the dirty section's end.
    pub map_full: bool,
    /// Groups not swapped because their segments changed during the pass.
    pub groups_abandoned: u64,
}

/// One segment as the plan saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PlannedSegment {
    pub(crate) base: u64,
    pub(crate) next_offset: u64,
    pub(crate) size: u64,
    pub(crate) path: PathBuf,
    /// Whether it may hold a batch with a producer id (else the scan for the producers'
    /// and transactions' facts skips it).
    pub(crate) may_hold_producer_batches: bool,
}

/// A pass planned over a [`SegmentSet`]: owned, so that it runs without the set's lock.
#[derive(Debug)]
pub struct CleanPlan {
    pub(crate) io: Arc<dyn Io>,
    pub(crate) dir: PathBuf,
    pub(crate) config: CleanConfig,
    pub(crate) now_ms: i64,
    pub(crate) max_batch_bytes: u64,
    pub(crate) segment_bytes: u64,
    /// The log's segment settings (index interval and size), for the cleaned segments.
    pub(crate) params: SegmentParams,
    /// The cleanable segments, oldest first.
    pub(crate) segments: Vec<PlannedSegment>,
    pub(crate) first_uncleanable: u64,
}

/// One group of old segments and the `.cleaned` log written for it (its indexes beside it,
/// named by [`cleaned_paths`]).
#[derive(Debug)]
pub(crate) struct CleanedGroup {
    pub(crate) old: Vec<PlannedSegment>,
    pub(crate) cleaned: PathBuf,
}

/// The `.cleaned` files of a pass, to swap in ([`SegmentSet::commit_clean`]) or discard.
#[derive(Debug)]
pub struct Cleaned {
    pub(crate) io: Arc<dyn Io>,
    pub(crate) groups: Vec<CleanedGroup>,
    pub(crate) stats: CleanStats,
}

/// Files renamed `.deleted` by a swap ([`SegmentSet::take_deleted_files`]), to remove. Their
/// removal may wait (as Kafka's `file.delete.delay.ms`): no reader or writer of the log uses
/// them, and no live file is ever named `.deleted`. Dropped without
/// [`remove`](DeletedFiles::remove), they stay until the next open of the log removes them
/// (as it removes every `.deleted` file).
#[derive(Debug, Default)]
pub struct DeletedFiles {
    /// `None` only with no paths (the default: no files).
    io: Option<Arc<dyn Io>>,
    paths: Vec<PathBuf>,
}

impl DeletedFiles {
    /// Whether every file was removed (or there were none).
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// Removes the files. No fsync: a removal lost to a crash is redone by the next open. A
    /// file already gone is fine: without the set's lock, a retention pass may have reused
    /// the name (its segment at that base deleted, renamed `.deleted` over this one) and
    /// removed it, or the log's directory may have been deleted with its topic.
    ///
    /// # Errors
    ///
    /// The first removal that fails otherwise (the files after it are left too, for the
    /// next open).
    pub fn remove(self) -> Result<()> {
        let Some(io) = &self.io else {
            return Ok(());
        };
        for p in &self.paths {
            match io.remove_file(p) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(io_err("removing", p)(e))
                }
                _ => {}
            }
        }
        Ok(())
    }
}

impl CleanedGroup {
    /// Removes the group's `.cleaned` files (a failed removal leaves a leftover the next
    /// open removes).
    fn remove(&self, io: &dyn Io) {
        let dir = self.cleaned.parent().unwrap_or(Path::new(""));
        for p in cleaned_paths(dir, self.old[0].base) {
            let _ = io.remove_file(&p);
        }
    }
}

impl Cleaned {
    /// Removes the `.cleaned` files (the pass is given up).
    pub fn discard(self) {
        for g in &self.groups {
            g.remove(&*self.io);
        }
    }
}

/// What the cleaner looks at in a record, read without decoding the rest (headers are
/// skipped): its place in the batch's bytes, offset, timestamp, key, and, read only when
/// asked ([`null_value`](RecordSpan::null_value)), whether its value is null.
struct RecordSpan<'a> {
    start: usize,
    end: usize,
    offset: u64,
    timestamp: i64,
    key: Option<&'a [u8]>,
    /// The batch's bytes up to the record's end, and where its value's length starts.
    body: &'a [u8],
    value_at: usize,
}

impl RecordSpan<'_> {
    /// Whether the record's value is null (a tombstone). Read apart from the other fields:
    /// the key map's scan, which needs only offsets and keys, leaves it, as every field
    /// after the key lies on the chain of dependent loads a record's fields make.
    #[inline(always)]
    fn null_value(&self) -> Result<bool> {
        let (value_len, _) = read_varint(self.body, self.value_at)?;
        Ok(value_len < 0)
    }
}

/// Calls `f` with each record of the uncompressed batch `bytes` (CRC checked by the scan).
/// Inlined into each caller, so that what its `f` ignores of a record is never computed.
#[inline(always)]
fn each_record<'a>(
    bytes: &'a [u8],
    first: usize,
    h: &BatchHeader,
    mut f: impl FnMut(RecordSpan<'a>) -> Result<()>,
) -> Result<()> {
    let bad = |position: usize, what: &str| Error::Corrupt {
        file: None,
        position: position as u64,
        reason: crate::error::Corruption::Truncated {
            what: if what.is_empty() {
                "record"
            } else {
                "record field"
            },
            needed: 1,
            available: 0,
        },
    };
    let log_append = h.timestamp_type() == TimestampType::LogAppendTime;
    let mut pos = first;
    for _ in 0..h.records_count.max(0) {
        let start = pos;
        let (len, n) = read_varint(bytes, pos)?;
        let end = pos
            .checked_add(n)
            .and_then(|p| p.checked_add(usize::try_from(len).ok()?))
            .filter(|&e| e <= bytes.len())
            .ok_or_else(|| bad(pos, ""))?;
        let body = &bytes[..end];
        // Past the attributes: the timestamp delta, offset delta and key length, which
        // take a byte each in most records (deltas below 64, keys below 64 bytes): read
        // as one.
        let fields = pos + n + 1;
        let unzigzag = |b: u8| i32::from(b >> 1) ^ -i32::from(b & 1);
        let (ts_delta, offset_delta, key_len, mut at) = match body.get(fields..fields + 3) {
            Some(&[t, o, k]) if (t | o | k) & 0x80 == 0 => {
                (i64::from(unzigzag(t)), unzigzag(o), unzigzag(k), fields + 3)
            }
            _ => {
                let mut at = fields;
                let (ts_delta, n) = super::varint::read_varlong(body, at)?;
                at += n;
                let (offset_delta, n) = read_varint(body, at)?;
                at += n;
                let (key_len, n) = read_varint(body, at)?;
                (ts_delta, offset_delta, key_len, at + n)
            }
        };
        let key = if key_len < 0 {
            None
        } else {
            let k = at + key_len as usize;
            let key = body.get(at..k).ok_or_else(|| bad(at, "key"))?;
            at = k;
            Some(key)
        };
        f(RecordSpan {
            start,
            end,
            offset: h.base_offset + offset_delta.max(0) as u64,
            timestamp: if log_append {
                h.max_timestamp
            } else {
                h.base_timestamp.wrapping_add(ts_delta)
            },
            key,
            body,
            value_at: at,
        })?;
        pos = end;
    }
    Ok(())
}

fn io_err(what: &str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let context = format!("{what} {}", path.display());
    move |e| Error::io(context, e)
}

/// `path` with `suffix` appended (`x.log` → `x.log.cleaned`).
pub(crate) fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Whether a batch's records can be looked into: not a control batch, of a codec this build has.
fn inspectable(batch: &Batch<'_>) -> bool {
    let h = batch.header();
    // A batch of a codec this build lacks is kept whole, its keys not mapped (so nothing
    // it supersedes is removed), rather than failing every pass over the log.
    !h.is_control() && super::record_batch::codec_available(h.compression())
}

/// The records section of `b` and where its first record starts: the batch's own bytes
/// past the header, or, for a compressed batch, its records decompressed into `buf`.
fn records_section<'a>(b: &'a Batch<'_>, buf: &'a mut Vec<u8>) -> Result<(&'a [u8], usize)> {
    if b.decompress(buf)? {
        Ok((&buf[..], 0))
    } else {
        Ok((b.as_bytes(), HEADER_SIZE))
    }
}

/// What the transactions of the cleanable range are (Kafka's `CleanedTransactionMetadata`
/// and `lastRecordsOfActiveProducers`), from one scan of it in offset order.
#[derive(Debug, Default)]
struct TxnFacts {
    /// Base offsets of the data batches of aborted transactions.
    aborted: std::collections::HashSet<u64>,
    /// The first offset of a transaction with no marker in the range (an open transaction,
    /// or one whose marker lies past the range): nothing from here on is cleaned, as
    /// Kafka cleans only below the first unstable offset.
    first_unstable: u64,
    /// Each producer id's last data batch in the range (its base offset): kept, emptied of
    /// its records if need be, so that recovery rebuilds the producer's sequence state.
    last_of_producer: HashMap<i64, u64>,
}

/// The batch whose header is `batch`'s with no records: its base offset, last offset delta,
/// leader epoch, producer fields and transactional flag kept.
fn empty_batch(batch: &[u8]) -> Vec<u8> {
    let mut out = batch[..HEADER_SIZE].to_vec();
    let batch_length = (HEADER_SIZE - field::PARTITION_LEADER_EPOCH) as i32;
    out[field::BATCH_LENGTH..field::BATCH_LENGTH + 4].copy_from_slice(&batch_length.to_be_bytes());
    out[field::RECORDS_COUNT..field::RECORDS_COUNT + 4].copy_from_slice(&0i32.to_be_bytes());
    // No records, so no compressed stream: the codec bits are cleared (an empty stream is
    // no valid frame of most codecs).
    let attributes =
        i16::from_be_bytes([out[field::ATTRIBUTES], out[field::ATTRIBUTES + 1]]) & !0x07;
    out[field::ATTRIBUTES..field::ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c(&out[field::ATTRIBUTES..]);
    out[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    out
}

/// Where a batch [`CleanPlan::filter_batch`] appended at `at` of `out` lands in the index
/// rule's terms: `(at, its last offset, its max timestamp)`.
fn appended(out: &[u8], at: usize, h: &BatchHeader) -> (usize, u64, i64) {
    // The written batch's own max timestamp: filtering may have lowered the old one's.
    let mut ts = [0u8; 8];
    ts.copy_from_slice(&out[at + field::MAX_TIMESTAMP..at + field::MAX_TIMESTAMP + 8]);
    (at, h.last_offset(), i64::from_be_bytes(ts))
}

/// The map's offsets that lie in one batch (sorted), walked along with the batch's records:
/// records come in offset order, so each lookup moves a cursor a step or two instead of
/// searching again. An offset below the cursor's (a batch whose offsets do not increase,
/// which no writer makes) is searched for.
struct LatestCursor<'a> {
    offsets: &'a [u64],
    at: usize,
}

impl<'a> LatestCursor<'a> {
    fn new(offsets: &'a [u64]) -> Self {
        LatestCursor { offsets, at: 0 }
    }

    /// Whether `offset` is one of the offsets.
    #[inline(always)]
    fn holds(&mut self, offset: u64) -> bool {
        if self.at > 0 && self.offsets[self.at - 1] >= offset {
            return self.offsets.binary_search(&offset).is_ok();
        }
        while self.offsets.get(self.at).is_some_and(|&o| o < offset) {
            self.at += 1;
        }
        self.offsets.get(self.at) == Some(&offset)
    }
}

/// One group's `.cleaned` files being written: the log and, by the segment's index rule
/// ([`IndexRule`]) as the log is written, its offset and time indexes (as Kafka's cleaner
/// writes a cleaned `LogSegment` with its indexes), so that the swap needs no second read
/// of the cleaned log to index it.
struct GroupWriter {
    old: Vec<PlannedSegment>,
    log_path: PathBuf,
    log: Box<dyn IoFile>,
    /// Bytes written to `log`.
    size: u64,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    rule: IndexRule,
    /// The offset index's capacity (`segment_index_bytes`); the time index never outgrows
    /// its own (it drops entries when full).
    max_offset_entries: usize,
    /// The header of the group's last old batch (all zero before any).
    last_header: [u8; HEADER_SIZE],
}

impl GroupWriter {
    /// Creates the group's `.cleaned` files for base offset `base`, listing them in
    /// `written` (removed if the pass fails).
    fn create(plan: &CleanPlan, base: u64, written: &mut Vec<PathBuf>) -> Result<Self> {
        let [log_path, index_path, time_path] = cleaned_paths(&plan.dir, base);
        let log = plan
            .io
            .open(&log_path, OpenMode::Truncate)
            .map_err(|e| Error::opening("creating", &log_path, e))?;
        written.push(log_path.clone());
        let max_bytes = plan.params.segment_index_bytes;
        written.push(index_path.clone());
        let (offset_index, _) = IndexFile::open(&*plan.io, &index_path, base, max_bytes, true)?;
        let max_offset_entries = offset_index.max_entries();
        written.push(time_path.clone());
        let (time_index, _) = IndexFile::open(&*plan.io, &time_path, base, max_bytes, true)?;
        Ok(GroupWriter {
            old: Vec::new(),
            log_path,
            log,
            size: 0,
            offset_index: OffsetIndex::from(offset_index),
            time_index: TimeIndex::from(time_index),
            rule: IndexRule::new(base, plan.params.index_interval_bytes),
            max_offset_entries,
            last_header: [0; HEADER_SIZE],
        })
    }

    /// Whether `bytes` (whole batches, at `batches`) fit the group: its log within
    /// `segment_bytes`, its offsets within a 32-bit delta of its base (up to `next_offset`),
    /// its offset index within `segment_index_bytes` (Kafka's grouping bounds these too).
    fn fits(
        &self,
        bytes: &[u8],
        batches: &[(usize, u64, i64)],
        next_offset: u64,
        segment_bytes: u64,
    ) -> bool {
        let positions = batches.iter().map(|&(at, _, _)| self.size + at as u64);
        self.size + bytes.len() as u64 <= segment_bytes
            && next_offset - self.old[0].base <= i32::MAX as u64
            && self.offset_index.entries().len() + self.rule.offset_entries_due(positions)
                <= self.max_offset_entries
    }

    /// Appends `bytes` (whole batches, each at `(at, last offset, max timestamp)` of
    /// `batches`) to the log, indexing them.
    fn append(&mut self, bytes: &[u8], batches: &[(usize, u64, i64)]) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.log
            .write_all_at(bytes, self.size)
            .map_err(io_err("writing", &self.log_path))?;
        // The device starts on them while the pass goes on; `finish`'s sync waits for less.
        // Only a hint: a failed write-back is reported by that sync.
        self.log.start_writeback(self.size, bytes.len() as u64).ok();
        for &(at, last, max_timestamp) in batches {
            let position = self.size + at as u64;
            let (o, t) = (&mut self.offset_index, &mut self.time_index);
            self.rule.add(o, t, position, last, max_timestamp);
        }
        self.size += bytes.len() as u64;
        Ok(())
    }

    /// Ends the group: never an empty cleaned segment (the group's last batch stays,
    /// emptied of its records, as Kafka keeps an empty batch, so that the cleaned segment
    /// covers the group's offsets: see the recovery rule in the module docs); then the
    /// three files are made durable, before any of them is renamed.
    fn finish(mut self, stats: &mut CleanStats) -> Result<CleanedGroup> {
        if self.size == 0 && self.last_header != [0u8; HEADER_SIZE] {
            let empty = empty_batch(&self.last_header);
            let h = BatchHeader::parse(&empty)?;
            let batch = appended(&empty, 0, &h);
            self.append(&empty, &[batch])?;
        }
        self.rule.finish(&mut self.time_index);
        // The indexes' write-backs start beside the log's (started as it was written), so
        // that the device works on the three at once and each sync waits only for its own.
        self.offset_index.file_mut().start_writeback()?;
        self.time_index.file_mut().start_writeback()?;
        self.log
            .sync_data()
            .map_err(io_err("syncing", &self.log_path))?;
        self.offset_index.file_mut().sync()?;
        self.time_index.file_mut().sync()?;
        stats.bytes_written += self.size;
        Ok(CleanedGroup {
            old: self.old,
            cleaned: self.log_path,
        })
    }
}

/// The most the rewrite reserves at once for one segment's survivors (a larger output
/// grows the buffer as it comes).
const MAX_OUT_RESERVE: u64 = 64 << 20;

/// Bytes the key map's scan reads at once. Larger than the reads of recovery's scans
/// (which keep their buffer within the L2 cache for the CRC after the copy): the map's
/// work between two reads (parsing, hashing and mapping every key) evicts the buffer
/// anyway, and fewer, longer copies from the page cache cost less, as does the move of
/// each read's last partial batch to the buffer's front.
const MAP_SCAN_CHUNK: usize = 2 << 20;

/// Bytes the rewrite reads again at once, at most (one batch over it is read alone).
const REWRITE_READ: usize = 1 << 20;

/// One batch as the key map's scan found it (CRC checked).
struct MappedBatch {
    position: u64,
    size: usize,
    base: u64,
    last: u64,
    records: i32,
    producer_id: i64,
    /// In the dirty section, mapped, with no keyless record: dropped whole when none of
    /// its offsets is a key's latest (and it is not its producer's last batch).
    droppable: bool,
}

/// A segment the key map read whole: its batches, and its last batch's header.
struct MappedSegment {
    batches: Vec<MappedBatch>,
    last_header: [u8; HEADER_SIZE],
}

/// The `.cleaned` files of the group based at `base`: its log, offset index and time index.
fn cleaned_paths(dir: &Path, base: u64) -> [PathBuf; 3] {
    [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX]
        .map(|suffix| dir.join(format!("{}{CLEANED_SUFFIX}", file_name(base, suffix))))
}

impl CleanPlan {
    /// Where the cleanable range ends (the active segment's base at most).
    pub fn first_uncleanable(&self) -> u64 {
        self.first_uncleanable
    }

    /// Whether there is nothing to clean.
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// Builds the key map over the dirty section and writes the `.cleaned` files (see the
    /// module docs). Runs without the set's lock.
    ///
    /// # Errors
    ///
    /// I/O errors, and [`Error::Corrupt`] for a planned segment that no longer reads as
    /// valid batches (the `.cleaned` files written so far are removed).
    pub fn build(self) -> Result<Cleaned> {
        let mut written = Vec::new();
        match self.build_into(&mut written) {
            Ok(c) => Ok(c),
            Err(e) => {
                for p in &written {
                    let _ = self.io.remove_file(p);
                }
                Err(e)
            }
        }
    }

    fn open(&self, s: &PlannedSegment) -> Result<Box<dyn IoFile>> {
        self.io
            .open(&s.path, OpenMode::Read)
            .map_err(|e| Error::opening("opening", &s.path, e))
    }

    /// Calls `visit` with every batch of `s`, checking they are whole.
    fn scan(
        &self,
        s: &PlannedSegment,
        mut visit: impl FnMut(&Batch<'_>) -> Result<()>,
    ) -> Result<()> {
        let file = self.open(s)?;
        let end = scan_log(&*file, &s.path, 0, s.size, self.max_batch_bytes, |b| {
            visit(&b)?;
            Ok(true)
        })?;
        match end {
            ScanEnd::Complete | ScanEnd::Stopped { .. } => Ok(()),
            ScanEnd::Corrupt { error, .. } => Err(error),
            ScanEnd::Partial { position, bytes } => Err(Error::Corrupt {
                file: Some(s.path.clone()),
                position,
                reason: crate::error::Corruption::Truncated {
                    what: "record batch",
                    needed: bytes,
                    available: 0,
                },
            }),
        }
    }

    fn build_into(&self, written: &mut Vec<PathBuf>) -> Result<Cleaned> {
        let cfg = self.config;
        let mut stats = CleanStats::default();
        // 1. The map over the dirty section, stopping at a batch boundary when it fills.
        let txns = self.txn_facts()?;
        let dirty_bytes = self
            .segments
            .iter()
            .filter(|s| s.next_offset > cfg.first_dirty)
            .map(|s| s.size)
            .sum();
        let mut map = OffsetMap::new(cfg.dedupe_buffer_bytes, dirty_bytes);
        let mut map_end = cfg.first_dirty;
        let mut keys: Vec<PendingKey> = Vec::new();
        let mut buf = Vec::new();
        // The scan's read buffer, allocated and zeroed once for every segment.
        let mut scan_buf = Vec::new();
        // The segments the map read whole, by index in `self.segments`: their batches'
        // places, for the rewrite to skip those it drops whole.
        let mut mapped: Vec<Option<MappedSegment>> = Vec::new();
        mapped.resize_with(self.segments.len(), || None);
        'segments: for (i, s) in self.segments.iter().enumerate() {
            if s.next_offset <= cfg.first_dirty {
                continue;
            }
            let file = self.open(s)?;
            let mut full = false;
            let mut unstable = false;
            let mut seen = MappedSegment {
                batches: Vec::new(),
                last_header: [0; HEADER_SIZE],
            };
            // CRCs checked here: a batch the rewrite drops whole is not read again.
            let range = (0, s.size);
            let end = scan_log_reusing(
                &*file,
                &s.path,
                range,
                self.max_batch_bytes,
                (&mut scan_buf, MAP_SCAN_CHUNK),
                |b| {
                    let h = b.header();
                    let mut batch = MappedBatch {
                        position: b.position(),
                        size: b.as_bytes().len(),
                        base: h.base_offset,
                        last: h.last_offset(),
                        records: h.records_count,
                        producer_id: h.producer_id,
                        droppable: false,
                    };
                    seen.last_header
                        .copy_from_slice(&b.as_bytes()[..HEADER_SIZE]);
                    if h.next_offset() <= cfg.first_dirty {
                        seen.batches.push(batch);
                        return Ok(true);
                    }
                    if h.base_offset >= txns.first_unstable {
                        unstable = true;
                        return Ok(false);
                    }
                    // An aborted transaction's records never become a key's latest.
                    if inspectable(&b) && !txns.aborted.contains(&h.base_offset) {
                        // All of a batch's keys, or none: the map's end is a batch boundary.
                        keys.clear();
                        let (bytes, first) = records_section(&b, &mut buf)
                            .map_err(|e| e.in_file(&s.path, b.position()))?;
                        let mut records = 0i64;
                        each_record(bytes, first, h, |r| {
                            records += 1;
                            if let Some(k) = r.key {
                                keys.push(map.pending(map.hasher.identity(k), r.offset));
                            }
                            Ok(())
                        })
                        .map_err(|e| e.in_file(&s.path, b.position()))?;
                        if !map.put_all(&keys) {
                            full = true;
                            return Ok(false);
                        }
                        // A keyless record is always kept: its batch is read again. So is a batch
                        // with no records, which the rewrite keeps whole (nothing in it removed).
                        batch.droppable = records > 0 && keys.len() as i64 == records;
                    }
                    seen.batches.push(batch);
                    map_end = map_end.max(h.next_offset());
                    Ok(true)
                },
            )?;
            match end {
                ScanEnd::Corrupt { error, .. } => return Err(error),
                ScanEnd::Complete if !full && !unstable => mapped[i] = Some(seen),
                _ => {}
            }
            if full {
                stats.map_full = true;
                break 'segments;
            }
            if unstable {
                break 'segments;
            }
            map_end = map_end.max(s.next_offset);
        }
        if map_end <= cfg.first_dirty {
            // Not one batch fitted (the buffer is smaller than a batch's keys), or the dirty
            // section starts with an unfinished transaction. Clean nothing.
            return Ok(Cleaned {
                io: self.io.clone(),
                groups: Vec::new(),
                stats: CleanStats {
                    first_dirty: cfg.first_dirty,
                    ..stats
                },
            });
        }
        stats.first_dirty = map_end;
        let mut latest: Vec<u64> = map.offsets().collect();
        latest.sort_unstable();
        // 2. Each segment below the map's end is filtered, in order, into the current group's
        // `.cleaned` files; a group ends where the next segment's survivors would not fit it
        // (`GroupWriter::fits`).
        let mut out_groups = Vec::new();
        let mut group: Option<GroupWriter> = None;
        // Room for the largest segment's survivors at once (a segment's output is at most its
        // size, short of a recompressed batch growing): a buffer grown by doubling copies
        // what it holds and touches fresh pages at every step, while only the pages written
        // of one reserved at once cost anything.
        let largest = self
            .segments
            .iter()
            .filter(|s| s.base < map_end)
            .map(|s| s.size);
        let mut out = Vec::with_capacity(largest.max().unwrap_or(0).min(MAX_OUT_RESERVE) as usize);
        let mut batches: Vec<(usize, u64, i64)> = Vec::new();
        let mut kept = Vec::new();
        let mut read = Vec::new();
        for (i, s) in self.segments.iter().enumerate() {
            if s.base >= map_end {
                break;
            }
            stats.bytes_read += s.size;
            out.clear();
            batches.clear();
            // The header of the segment's last batch (for an emptied group).
            let mut last_header = None;
            let mut result = Ok(());
            let found = (&map, &latest[..], &txns, map_end);
            let mut filter = |b: &Batch<'_>, stats: &mut CleanStats| {
                let at = out.len();
                if self.filter_batch(b, found, stats, &mut out, &mut kept, &mut buf)? {
                    batches.push(appended(&out, at, b.header()));
                }
                Ok::<(), Error>(())
            };
            if let Some(m) = &mapped[i] {
                last_header = m.batches.last().map(|_| m.last_header);
                self.rewrite_mapped(s, m, (&latest[..], &txns), &mut stats, &mut read, filter)?;
            } else {
                self.scan(s, |b| {
                    if result.is_err() {
                        return Ok(());
                    }
                    let mut header = [0u8; HEADER_SIZE];
                    header.copy_from_slice(&b.as_bytes()[..HEADER_SIZE]);
                    last_header = Some(header);
                    result = filter(b, &mut stats);
                    Ok(())
                })?;
                result?;
            }
            let fits = group
                .as_ref()
                .is_some_and(|g| g.fits(&out, &batches, s.next_offset, self.segment_bytes));
            if !fits {
                if let Some(g) = group.take() {
                    out_groups.push(g.finish(&mut stats)?);
                }
                group = Some(GroupWriter::create(self, s.base, written)?);
            }
            let Some(g) = group.as_mut() else {
                unreachable!("a group was just created")
            };
            g.old.push(s.clone());
            if let Some(h) = last_header {
                g.last_header = h;
            }
            g.append(&out, &batches)?;
        }
        if let Some(g) = group.take() {
            out_groups.push(g.finish(&mut stats)?);
        }
        Ok(Cleaned {
            io: self.io.clone(),
            groups: out_groups,
            stats,
        })
    }

    /// Rewrites segment `s`, which the key map read whole (`m`): a batch of the dirty
    /// section that holds no key's latest offset, no keyless record and is not its
    /// producer's last is dropped whole without being read again (its records all
    /// superseded, as `filter_batch` would find them one by one); the others are read again
    /// (runs of neighbours at once, into `read`) and go through `filter`. Their CRCs were
    /// checked by the map's scan of the same closed file.
    fn rewrite_mapped(
        &self,
        s: &PlannedSegment,
        m: &MappedSegment,
        (latest, txns): (&[u64], &TxnFacts),
        stats: &mut CleanStats,
        read: &mut Vec<u8>,
        mut filter: impl FnMut(&Batch<'_>, &mut CleanStats) -> Result<()>,
    ) -> Result<()> {
        let dropped_whole = |b: &MappedBatch| {
            b.droppable
                && latest.partition_point(|&o| o < b.base)
                    == latest.partition_point(|&o| o <= b.last)
                && txns.last_of_producer.get(&b.producer_id) != Some(&b.base)
        };
        let file = self.open(s)?;
        let mut i = 0;
        while i < m.batches.len() {
            let first = &m.batches[i];
            if dropped_whole(first) {
                let records = u64::from(first.records.max(0).unsigned_abs());
                stats.records_read += records;
                stats.records_removed += records;
                i += 1;
                continue;
            }
            let mut j = i + 1;
            while j < m.batches.len()
                && m.batches[j].position + m.batches[j].size as u64 - first.position
                    <= REWRITE_READ as u64
                && !dropped_whole(&m.batches[j])
            {
                j += 1;
            }
            let last = &m.batches[j - 1];
            let len = (last.position + last.size as u64 - first.position) as usize;
            // Grown, never shrunk: its bytes are overwritten by each read, not zeroed again.
            if read.len() < len {
                read.resize(len, 0);
            }
            let read = &mut read[..len];
            file.read_exact_at(read, first.position)
                .map_err(io_err("reading", &s.path))?;
            for b in &m.batches[i..j] {
                let at = (b.position - first.position) as usize;
                let batch = Batch::decode_unverified_at(&read[at..at + b.size], b.position)
                    .map_err(|e| e.in_file(&s.path, b.position))?;
                filter(&batch, stats)?;
            }
            i = j;
        }
        Ok(())
    }

    /// The pass's [`TxnFacts`]: one scan of the planned segments.
    fn txn_facts(&self) -> Result<TxnFacts> {
        let mut facts = TxnFacts::default();
        // Per producer id, the data batches of its transaction with no marker seen yet.
        let mut open: HashMap<i64, Vec<u64>> = HashMap::new();
        for s in self.segments.iter().filter(|s| s.may_hold_producer_batches) {
            self.scan(s, |b| {
                let h = b.header();
                if h.producer_id < 0 {
                    return Ok(());
                }
                if h.is_control() {
                    let pending = open.remove(&h.producer_id).unwrap_or_default();
                    // Type 0 is ABORT; any other (COMMIT) keeps the records.
                    if txn_index::batch_control_type(b) == Some(0) {
                        facts.aborted.extend(pending);
                    }
                } else {
                    facts.last_of_producer.insert(h.producer_id, h.base_offset);
                    if h.is_transactional() {
                        open.entry(h.producer_id).or_default().push(h.base_offset);
                    }
                }
                Ok(())
            })?;
        }
        facts.first_unstable = open
            .values()
            .filter_map(|v| v.first().copied())
            .min()
            .unwrap_or(u64::MAX);
        Ok(facts)
    }

    /// Appends to `out` the batch `b` with the records the pass keeps (`kept`, `buf`:
    /// scratch); `false` when it keeps none (nothing appended). A compressed batch's
    /// survivors are compressed again with its codec (as Kafka's cleaner recompresses).
    fn filter_batch(
        &self,
        b: &Batch<'_>,
        (map, latest, txns, map_end): (&OffsetMap, &[u64], &TxnFacts, u64),
        stats: &mut CleanStats,
        out: &mut Vec<u8>,
        kept: &mut Vec<(usize, usize)>,
        buf: &mut Vec<u8>,
    ) -> Result<bool> {
        let h = b.header();
        if !inspectable(b) || h.base_offset >= map_end {
            out.extend_from_slice(b.as_bytes());
            return Ok(true);
        }
        let aborted = txns.aborted.contains(&h.base_offset);
        // A batch of the dirty section had every keyed record mapped: a record there is its
        // key's latest exactly when its offset is one of the map's (`latest`, sorted), found
        // without hashing its key again. The clean section's keys are looked up in the map.
        let dirty = h.next_offset() > self.config.first_dirty;
        let batch_range = h.base_offset..=h.last_offset();
        let in_batch = if dirty {
            let lo = latest.partition_point(|&o| o < h.base_offset);
            let hi = latest.partition_point(|&o| o <= h.last_offset());
            &latest[lo..hi]
        } else {
            &[]
        };
        let (bytes, first) = records_section(b, buf)?;
        kept.clear();
        let mut kept_count = 0i32;
        let mut max_ts = NO_TIMESTAMP;
        let horizon = self.now_ms.saturating_sub(self.config.delete_retention_ms);
        let mut all = true;
        let mut in_batch = LatestCursor::new(in_batch);
        each_record(bytes, first, h, |r| {
            stats.records_read += 1;
            // (kept, removed as an expired tombstone)
            let (keep, expired) = match r.key {
                _ if aborted => (false, false),
                _ if r.offset >= map_end => (true, false),
                None => (true, false),
                Some(k) => {
                    let superseded = if !dirty {
                        map.get(map.hasher.identity(k))
                            .is_some_and(|latest| latest > r.offset)
                    } else if batch_range.contains(&r.offset) {
                        !in_batch.holds(r.offset)
                    } else {
                        latest.binary_search(&r.offset).is_err()
                    };
                    match () {
                        _ if superseded => (false, false),
                        // A superseded record's value is never read.
                        _ if r.null_value()?
                            && r.timestamp <= horizon
                            && r.offset < self.config.keep_tombstones_from =>
                        {
                            (false, true)
                        }
                        _ => (true, false),
                    }
                }
            };
            if keep {
                match kept.last_mut() {
                    Some((_, e)) if *e == r.start => *e = r.end,
                    _ => kept.push((r.start, r.end)),
                }
                kept_count += 1;
                max_ts = max_ts.max(r.timestamp);
            } else {
                all = false;
                stats.records_removed += 1;
                stats.tombstones_removed += u64::from(expired);
                stats.aborted_removed += u64::from(aborted);
            }
            Ok(())
        })?;
        if all {
            out.extend_from_slice(b.as_bytes());
            return Ok(true);
        }
        if kept_count == 0 {
            if txns.last_of_producer.get(&h.producer_id) == Some(&h.base_offset) {
                // The producer's last batch: its header stays, so that recovery rebuilds
                // the producer's sequence and epoch (as Kafka retains it).
                out.extend_from_slice(&empty_batch(b.as_bytes()));
                return Ok(true);
            }
            return Ok(false);
        }
        let at = out.len();
        out.extend_from_slice(&b.as_bytes()[..HEADER_SIZE]);
        let codec = h.compression();
        if codec == Compression::None {
            for &(s, e) in kept.iter() {
                out.extend_from_slice(&bytes[s..e]);
            }
        } else {
            let mut records = Vec::with_capacity(kept.iter().map(|(s, e)| e - s).sum());
            for &(s, e) in kept.iter() {
                records.extend_from_slice(&bytes[s..e]);
            }
            compress(codec, &records, out)?;
        }
        let batch = &mut out[at..];
        let batch_length = (batch.len() - field::PARTITION_LEADER_EPOCH) as i32;
        batch[field::BATCH_LENGTH..field::BATCH_LENGTH + 4]
            .copy_from_slice(&batch_length.to_be_bytes());
        if h.timestamp_type() == TimestampType::CreateTime {
            batch[field::MAX_TIMESTAMP..field::MAX_TIMESTAMP + 8]
                .copy_from_slice(&max_ts.to_be_bytes());
        }
        batch[field::RECORDS_COUNT..field::RECORDS_COUNT + 4]
            .copy_from_slice(&kept_count.to_be_bytes());
        let crc = crc32c(&batch[field::ATTRIBUTES..]);
        batch[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
        Ok(true)
    }
}

impl SegmentSet {
    /// The first dirty offset a pass starts from: `first_dirty`, unless it lies outside the
    /// log (a log truncated or restarted since), then the log start.
    fn dirty_start(&self, config: &CleanConfig) -> u64 {
        let (start, end) = (self.log_start_offset, self.log_end_offset());
        if config.first_dirty < start || config.first_dirty > end {
            start
        } else {
            config.first_dirty
        }
    }

    /// How many segments, from the first, are cleanable, and the first uncleanable offset
    /// (see the [module docs](super::cleaner)).
    fn cleanable(&self, config: &CleanConfig) -> (usize, u64) {
        let now = self.clock.now_ms();
        let n = self.segments.len();
        let mut first_uncleanable = self.segments.last().map_or(0, Segment::base_offset);
        let mut count = 0;
        for s in self.segments.iter().take(n.saturating_sub(1)) {
            let too_young = config.min_compaction_lag_ms > 0
                && s.max_timestamp() > now.saturating_sub(config.min_compaction_lag_ms);
            if s.next_offset() > config.limit_offset || too_young {
                first_uncleanable = s.base_offset();
                break;
            }
            count += 1;
        }
        (count, first_uncleanable)
    }

    /// How dirty the log is under `config` (Kafka's dirty ratio: the bytes of the cleanable
    /// segments not yet cleaned over all cleanable bytes).
    pub fn dirty_info(&self, config: &CleanConfig) -> DirtyInfo {
        let first_dirty = self.dirty_start(config);
        let (count, first_uncleanable) = self.cleanable(config);
        let mut info = DirtyInfo {
            first_dirty,
            first_uncleanable,
            ..DirtyInfo::default()
        };
        for s in &self.segments[..count] {
            if s.next_offset() <= first_dirty {
                info.clean_bytes += s.size();
            } else {
                info.dirty_bytes += s.size();
            }
        }
        info
    }

    /// Plans a cleaning pass (see the [module docs](super::cleaner)): what
    /// [`CleanPlan::build`] then rewrites without the set. Empty when nothing is dirty.
    ///
    /// # Errors
    ///
    /// [`Error::LogOffline`].
    pub fn plan_clean(&self, config: &CleanConfig) -> Result<CleanPlan> {
        self.check_online()?;
        let first_dirty = self.dirty_start(config);
        let (count, first_uncleanable) = self.cleanable(config);
        let dirty = self.segments[..count]
            .iter()
            .any(|s| s.next_offset() > first_dirty && s.size() > 0);
        let segments = if dirty {
            self.segments[..count]
                .iter()
                .filter(|s| s.size() > 0)
                .map(|s| PlannedSegment {
                    base: s.base_offset(),
                    next_offset: s.next_offset(),
                    size: s.size(),
                    path: s.log_path().to_path_buf(),
                    may_hold_producer_batches: s.may_hold_producer_batches(),
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(CleanPlan {
            io: self.io.clone(),
            dir: self.dir.clone(),
            config: CleanConfig {
                first_dirty,
                ..*config
            },
            now_ms: self.clock.now_ms(),
            max_batch_bytes: self.config.max_batch_bytes,
            segment_bytes: self.config.segment_bytes,
            params: self.config.segment_params(),
            segments,
            first_uncleanable,
        })
    }

    /// Swaps the cleaned segments in, group by group, with Kafka's crash-safe protocol (see
    /// the [module docs](super::cleaner)). A group whose old segments changed since the plan
    /// is not swapped, nor is any later group (a later group may have dropped a tombstone
    /// whose older values that group still holds); the pass's first dirty offset is then that
    /// group's base.
    ///
    /// # Errors
    ///
    /// I/O errors, which take the log offline (reopen it: recovery completes the swap).
    pub fn commit_clean(&mut self, cleaned: Cleaned) -> Result<CleanStats> {
        self.check_online()?;
        let Cleaned { io, groups, stats } = cleaned;
        let mut stats = stats;
        let mut groups = groups.into_iter();
        while let Some(g) = groups.next() {
            let first = g.old[0].base;
            let i = self.segments.iter().position(|s| s.base_offset() == first);
            let same = i.is_some_and(|i| {
                i + g.old.len() < self.segments.len()
                    && g.old.iter().zip(&self.segments[i..]).all(|(p, s)| {
                        s.base_offset() == p.base
                            && s.size() == p.size
                            && s.next_offset() == p.next_offset
                    })
            });
            let (Some(i), true) = (i, same) else {
                stats.groups_abandoned += 1;
                stats.first_dirty = stats.first_dirty.min(first);
                g.remove(&*io);
                for g in groups.by_ref() {
                    stats.groups_abandoned += 1;
                    g.remove(&*io);
                }
                break;
            };
            self.guarded(|set| set.swap_group(i, &g))?;
            stats.segments_cleaned += g.old.len() as u64;
        }
        // The last group's final renames are not synced: until they are durable, the `.swap`
        // file is, and recovery finishes the swap from it (its indexes then rebuilt).
        Ok(stats)
    }

    /// Kafka's `replaceSegments` for one group at index `i` of the list.
    fn swap_group(&mut self, i: usize, g: &CleanedGroup) -> Result<()> {
        let io = self.io.clone();
        let base = g.old[0].base;
        let log_path = self.dir.join(file_name(base, LOG_SUFFIX));
        let swap = with_suffix(&log_path, SWAP_SUFFIX);
        io.rename(&g.cleaned, &swap)
            .map_err(io_err("renaming", &g.cleaned))?;
        self.sync_dir()?;
        let old: Vec<Segment> = self.segments.drain(i..i + g.old.len()).collect();
        let paths: Vec<PathBuf> = old.iter().flat_map(Segment::paths).collect();
        drop(old);
        let mut deleted = Vec::new();
        for p in &paths {
            if io.exists(p).map_err(io_err("checking", p))? {
                let d = with_suffix(p, DELETED_SUFFIX);
                io.rename(p, &d).map_err(io_err("renaming", p))?;
                deleted.push(d);
            }
        }
        // The old segments' names are gone before the swap takes the first one's: a crash
        // never leaves the cleaned segment beside an old one it replaces.
        self.sync_dir()?;
        // Not synced here: until the log's name is durable the `.swap` file is, and recovery
        // finishes the swap from it; an index still named `.cleaned` is removed and rebuilt.
        // The indexes' contents were made durable before the swap began.
        let [_, index_cleaned, time_cleaned] = cleaned_paths(&self.dir, base);
        for (from, suffix) in [
            (&index_cleaned, INDEX_SUFFIX),
            (&time_cleaned, TIME_INDEX_SUFFIX),
        ] {
            let to = self.dir.join(file_name(base, suffix));
            io.rename(from, &to).map_err(io_err("renaming", from))?;
        }
        io.rename(&swap, &log_path)
            .map_err(io_err("renaming", &swap))?;
        let params = self.config.segment_params();
        let (mut segment, health) =
            Segment::open(&*io, &self.dir, base, params, self.clock.now_ms())?;
        let min_offset = if i > 0 {
            self.segments[i - 1].next_offset().max(base)
        } else {
            base
        };
        let upper = self.segments.get(i).map(Segment::base_offset);
        // The indexes were written with the log: only the batch headers past the last offset
        // entry are read, for the segment's tail state.
        let indexed = health.offset_index_ok
            && health.time_index_ok
            && segment.load().is_ok()
            && upper.map_or(true, |u| segment.next_offset() <= u)
            && segment.next_offset() >= min_offset;
        if !indexed {
            // The indexes as written are not usable as they are (one longer than
            // `segment_index_bytes` is not read back, say): rebuilt from the log, as opening
            // the log would, and made durable.
            let outcome = segment.recover(min_offset, upper)?;
            if let Some((position, _, reason)) = outcome.truncated {
                // The log was fsynced whole before the renames: only a failing disk gets here.
                return Err(Error::io(
                    format!(
                        "swapping in the cleaned segment {}: invalid at byte {position}: {reason}",
                        log_path.display()
                    ),
                    std::io::Error::other("cleaned segment invalid"),
                ));
            }
            segment.sync(true)?;
        }
        segment.set_holds_producer_batches(g.old.iter().any(|s| s.may_hold_producer_batches));
        self.segments.insert(i, segment);
        self.deleted_files.extend(deleted);
        Ok(())
    }

    /// The old segments' files the passes committed so far renamed `.deleted`: removing
    /// them ([`DeletedFiles::remove`]) needs no lock on the set and may wait (as Kafka
    /// deletes a replaced segment's files later, from another thread). Unlinking a file
    /// costs a journal update on most file systems, milliseconds on some, which neither the
    /// set's lock nor the pass need be held for.
    pub fn take_deleted_files(&mut self) -> DeletedFiles {
        DeletedFiles {
            io: Some(self.io.clone()),
            paths: std::mem::take(&mut self.deleted_files),
        }
    }

    /// One whole pass: [`plan_clean`](Self::plan_clean), [`CleanPlan::build`],
    /// [`commit_clean`](Self::commit_clean) (for a log nobody else uses meanwhile: `logbus
    /// compact`, tests).
    ///
    /// # Errors
    ///
    /// As the three steps.
    pub fn clean(&mut self, config: &CleanConfig) -> Result<CleanStats> {
        let plan = self.plan_clean(config)?;
        if plan.is_empty() {
            return Ok(CleanStats {
                first_dirty: plan.config.first_dirty,
                ..CleanStats::default()
            });
        }
        let cleaned = plan.build()?;
        let stats = self.commit_clean(cleaned)?;
        let deleted = self.take_deleted_files();
        self.guarded(|_| deleted.remove())?;
        Ok(stats)
    }
}

#[cfg(test)]
mod tests {
    use super::{each_record, LatestCursor, RecordSpan};
    use crate::error::Result;
    use crate::storage::record_batch::{BatchHeader, TimestampType};
    use crate::storage::varint::{put_varint, put_varlong, read_varint, read_varlong};
    use proptest::prelude::*;

    /// A record as the walk reports it, its value's nullness included.
    fn seen(r: &RecordSpan<'_>) -> String {
        format!(
            "{}..{} @{} t{} key {:?} body {} value at {} null {:?}",
            r.start,
            r.end,
            r.offset,
            r.timestamp,
            r.key,
            r.body.len(),
            r.value_at,
            r.null_value().map_err(|e| format!("{e:?}"))
        )
    }

    /// The record walk with every field read as a varint: the model of `each_record`.
    fn each_record_by_varints(
        bytes: &[u8],
        first: usize,
        h: &BatchHeader,
        out: &mut Vec<String>,
    ) -> Result<()> {
        let mut pos = first;
        for _ in 0..h.records_count.max(0) {
            let start = pos;
            let (len, n) = read_varint(bytes, pos)?;
            let end = pos
                .checked_add(n)
                .and_then(|p| p.checked_add(usize::try_from(len).ok()?))
                .filter(|&e| e <= bytes.len())
                .ok_or_else(|| truncated(pos, "record"))?;
            let body = &bytes[..end];
            let mut at = pos + n + 1;
            let (ts_delta, n) = read_varlong(body, at)?;
            at += n;
            let (offset_delta, n) = read_varint(body, at)?;
            at += n;
            let (key_len, n) = read_varint(body, at)?;
            at += n;
            let key = if key_len < 0 {
                None
            } else {
                let k = at + key_len as usize;
                let key = body
                    .get(at..k)
                    .ok_or_else(|| truncated(at, "record field"))?;
                at = k;
                Some(key)
            };
            out.push(seen(&RecordSpan {
                start,
                end,
                offset: h.base_offset + offset_delta.max(0) as u64,
                timestamp: if h.timestamp_type() == TimestampType::LogAppendTime {
                    h.max_timestamp
                } else {
                    h.base_timestamp.wrapping_add(ts_delta)
                },
                key,
                body,
                value_at: at,
            }));
            pos = end;
        }
        Ok(())
    }

    fn truncated(position: usize, what: &'static str) -> crate::error::Error {
        crate::error::Error::Corrupt {
            file: None,
            position: position as u64,
            reason: crate::error::Corruption::Truncated {
                what,
                needed: 1,
                available: 0,
            },
        }
    }

    /// The records `each_record` reports up to its error, if any, and the error.
    fn walk(bytes: &[u8], first: usize, h: &BatchHeader) -> (Vec<String>, String) {
        let mut out = Vec::new();
        let end = each_record(bytes, first, h, |r| {
            out.push(seen(&r));
            Ok(())
        });
        (out, format!("{end:?}"))
    }

    fn header(records_count: i32, log_append: bool, base_timestamp: i64) -> BatchHeader {
        BatchHeader {
            base_offset: 1_000,
            batch_length: 0,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: if log_append { 0x08 } else { 0 },
            last_offset_delta: 0,
            base_timestamp,
            max_timestamp: 77,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            records_count,
        }
    }

    /// One record, its fields encoded from the given values (a length of `None` is the
    /// record's own), then `rest` (key, value, headers or garbage).
    fn record(
        (len, attrs, ts_delta, offset_delta, key_len, rest): (
            Option<i32>,
            u8,
            i64,
            i32,
            i32,
            Vec<u8>,
        ),
    ) -> Vec<u8> {
        let mut r = vec![attrs];
        put_varlong(&mut r, ts_delta);
        put_varint(&mut r, offset_delta);
        put_varint(&mut r, key_len);
        r.extend_from_slice(&rest);
        let mut out = Vec::new();
        put_varint(&mut out, len.unwrap_or(r.len() as i32));
        out.extend_from_slice(&r);
        out
    }

    fn records() -> impl Strategy<Value = Vec<u8>> {
        let one = (
            prop_oneof![3 => Just(None), 1 => (-2i32..12).prop_map(Some), 1 => any::<i32>().prop_map(Some)],
            any::<u8>(),
            prop_oneof![-70i64..70, any::<i64>()],
            prop_oneof![-70i32..70, any::<i32>()],
            prop_oneof![-70i32..70, any::<i32>()],
            prop::collection::vec(any::<u8>(), 0..80),
        )
            .prop_map(record);
        prop_oneof![
            prop::collection::vec(one, 0..6).prop_map(|rs| rs.concat()),
            prop::collection::vec(any::<u8>(), 0..64),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        /// The one-byte fields read at once give what reading each as a varint gives, for
        /// any bytes: the same records, and the same error where the varints give one.
        #[test]
        fn the_record_walk_reads_as_the_varints_do(
            section in records(),
            cut in any::<prop::sample::Index>(),
            flip in proptest::option::of((any::<prop::sample::Index>(), any::<u8>())),
            first in 0usize..3,
            records_count in -1i32..8,
            log_append in any::<bool>(),
            base_timestamp in prop_oneof![Just(0i64), any::<i64>()],
        ) {
            let mut bytes = vec![0u8; first];
            bytes.extend_from_slice(&section);
            if let Some((at, b)) = flip {
                if !bytes.is_empty() {
                    let at = at.index(bytes.len());
                    bytes[at] = b;
                }
            }
            let whole = bytes.len();
            for len in [whole, cut.index(whole + 1)] {
                let bytes = &bytes[..len];
                let h = header(records_count, log_append, base_timestamp);
                let (got, end) = walk(bytes, first, &h);
                let mut want = Vec::new();
                let want_end = format!("{:?}", each_record_by_varints(bytes, first, &h, &mut want));
                prop_assert_eq!(&got, &want, "records of {:?}", bytes);
                prop_assert_eq!(&end, &want_end, "end of {:?}", bytes);
            }
        }

        /// The cursor answers as a search of the offsets, for any sorted offsets (repeats
        /// too) and any order of lookups.
        #[test]
        fn the_latest_cursor_answers_as_a_binary_search(
            mut offsets in prop::collection::vec(0u64..40, 0..20),
            lookups in prop::collection::vec(0u64..45, 0..60),
        ) {
            offsets.sort_unstable();
            let mut cursor = LatestCursor::new(&offsets);
            for o in lookups {
                prop_assert_eq!(cursor.holds(o), offsets.binary_search(&o).is_ok(), "offset {}", o);
            }
        }
    }

    #[test]
    fn the_latest_cursor_answers_as_a_search_in_any_order() {
        let offsets = [3u64, 4, 9, 10, 20];
        // In order, as a batch's records come: every offset from below the first to past
        // the last.
        let mut cursor = LatestCursor::new(&offsets);
        for o in 0..25 {
            assert_eq!(cursor.holds(o), offsets.contains(&o), "offset {o} in order");
        }
        // Out of order and repeated: still the same answers.
        let mut cursor = LatestCursor::new(&offsets);
        for o in [9, 9, 3, 10, 4, 2, 20, 0, 21, 10] {
            assert_eq!(
                cursor.holds(o),
                offsets.contains(&o),
                "offset {o} out of order"
            );
        }
        assert!(!LatestCursor::new(&[]).holds(0));
    }
}
