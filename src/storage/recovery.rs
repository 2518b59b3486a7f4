//! Opening a partition directory: Kafka's log segment recovery (`LogLoader`,
//! `LogSegment.recover`), and a read-only consistency check of a directory.
//!
//! On open, in this order (holding the directory's lock, [`Io::lock_dir`], throughout and for
//! as long as the log stays open):
//! 0. a name shaped like a segment file whose offset is above `i64::MAX` is an error
//!    ([`Error::NotASegment`]): Kafka's offsets are signed 64-bit;
//! 1. files ending `.deleted` are removed (interrupted deletions);
//! 2. `.swap` and `.cleaned` files — Kafka's compaction writes them, logbus never does — are
//!    listed in [`RecoveryReport::foreign_files`] and left alone: unlike Kafka, logbus never
//!    lets a swap file replace a segment, since nothing of its own could have written one;
//!    files named like segment files but not by a 20-digit base offset are listed there too;
//! 3. index files (`.index`, `.timeindex`, `.txnindex`) without a `.log` are removed;
//! 4. unless the shutdown was clean ([`Checkpoints::clean_shutdown`]), every segment from the
//!    one holding the recovery point onward — and any segment
//!    whose index is missing, cut mid-entry or out of order — is recovered: each batch is
//!    checked (size, CRC, offsets strictly increasing from the segment's base offset and
//!    below the next segment's; they may jump, as compaction, transactions and replication
//!    leave them), the indexes are rebuilt, and the log is cut at the first bad or incomplete
//!    batch — only there: a gap in offsets, inside or between segments, is legal and kept
//!    (and listed in [`RecoveryReport::gaps`] when it lies between segments);
//! 5. if anything was cut, every later segment is deleted (its data followed a hole);
//! 6. every recovered segment is fsynced — its bytes may be writes that an earlier life of the
//!    process left in the page cache without an fsync (it was killed, or an fsync failed) —
//!    so the recovery point becomes the log end offset.
//!
//! The [`RecoveryReport`] says what was removed, rebuilt and cut (file, byte position, bytes
//! dropped, and the first offset no longer present).
//!
//! Offsets and timestamps below the recovery point are not re-read (as in Kafka): a bit
//! flipped there is caught when the batch is read (its CRC is checked then) and by
//! [`verify_dir`].

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::io::{DirLock, Io, OpenMode, LOCK_FILE};
use super::offset_index;
use super::segment::{
    bad_offset_in_name, check_batch_offsets, file_name, parse_file_name, scan_log, ScanEnd,
    Segment, INDEX_SUFFIX, LOG_SUFFIX, MAX_SEGMENT_BYTES, TIME_INDEX_SUFFIX,
};
use super::segment_set::{Checkpoints, LogConfig};
use super::time_index;
use crate::error::{Error, Result};

/// Where recovery cut the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncation {
    /// The `.log` file that was cut.
    pub file: PathBuf,
    /// The byte position of the cut (the start of the first bad or incomplete batch).
    pub position: u64,
    /// Bytes removed: the tail of `file` plus every later segment's `.log`.
    pub bytes_dropped: u64,
    /// The first offset no longer present (the new log end offset).
    pub first_lost_offset: u64,
    /// Why: the corruption found (with its own byte position) or the torn tail.
    pub reason: String,
}

/// What opening a partition directory found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segments whose batches were revalidated.
    pub segments_recovered: usize,
    /// Bytes of valid batches revalidated.
    pub bytes_validated: u64,
    /// Valid batches revalidated.
    pub batches_validated: u64,
    /// Where the log was cut, if it was.
    pub truncation: Option<Truncation>,
    /// Segment `.log` files deleted because they followed a cut.
    pub deleted_segments: Vec<PathBuf>,
    /// Index files rebuilt because they were missing or damaged (segments recovered only
    /// because they lie past the recovery point are not listed).
    pub rebuilt_indexes: Vec<PathBuf>,
    /// Leftover files removed (`.deleted` files, indexes without a `.log`).
    pub removed_files: Vec<PathBuf>,
    /// Files logbus never writes, left in place and unused: Kafka's compaction leftovers
    /// (`.swap`, `.cleaned` — a swap file never replaces a segment) and files named like
    /// segment files but not by a 20-digit base offset.
    pub foreign_files: Vec<PathBuf>,
    /// Offset ranges `[from, to)` missing between segments: legal (compaction, appends with a
    /// gap) and kept, or a segment deleted by hand.
    pub gaps: Vec<(u64, u64)>,
    /// The log start offset after opening.
    pub log_start_offset: u64,
    /// The recovery point after opening (everything below it is durable).
    pub recovery_point: u64,
    /// The log end offset after opening.
    pub log_end_offset: u64,
}

impl RecoveryReport {
    /// Whether the log was opened exactly as found (nothing cut, removed or rebuilt; files
    /// left alone in [`foreign_files`](RecoveryReport::foreign_files) do not count).
    pub fn is_clean(&self) -> bool {
        self.truncation.is_none()
            && self.deleted_segments.is_empty()
            && self.rebuilt_indexes.is_empty()
            && self.removed_files.is_empty()
    }
}

pub(crate) struct Loaded {
    pub(crate) segments: Vec<Segment>,
    pub(crate) report: RecoveryReport,
    /// The directory's lock, held for as long as the log is open.
    pub(crate) lock: Box<dyn DirLock>,
}

fn io_err(what: &str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let context = format!("{what} {}", path.display());
    move |e| Error::io(context, e)
}

/// Recovers the directory and opens its segments (see the module docs).
pub(crate) fn load(
    io: &dyn Io,
    dir: &Path,
    config: &LogConfig,
    now_ms: i64,
    checkpoints: Checkpoints,
) -> Result<Loaded> {
    let existed = io.exists(dir).map_err(io_err("checking", dir))?;
    io.create_dir_all(dir)
        .map_err(io_err("creating directory", dir))?;
    if !existed {
        // A new directory's own name must be durable too.
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            io.sync_dir(parent)
                .map_err(io_err("syncing directory", parent))?;
        }
    }
    // One writer per directory: nothing is read or repaired before the lock is held.
    let lock = io.lock_dir(dir).map_err(|e| {
        if e.kind() == std::io::ErrorKind::WouldBlock {
            Error::DirectoryLocked {
                dir: dir.to_path_buf(),
                lock_file: dir.join(LOCK_FILE),
            }
        } else {
            Error::opening("locking", &dir.join(LOCK_FILE), e)
        }
    })?;
    let mut report = RecoveryReport::default();
    let mut names: BTreeSet<String> = io
        .list_dir(dir)
        .map_err(io_err("listing", dir))?
        .into_iter()
        .collect();
    let mut changed = false;
    let remove = |names: &mut BTreeSet<String>, report: &mut RecoveryReport, name: &str| {
        let path = dir.join(name);
        io.remove_file(&path).map_err(io_err("removing", &path))?;
        names.remove(name);
        report.removed_files.push(path);
        Ok::<(), Error>(())
    };

    // Names that look like segment files but carry an offset no segment can have.
    for name in &names {
        if let Some(reason) = bad_offset_in_name(name) {
            return Err(Error::NotASegment {
                path: dir.join(name),
                reason,
            });
        }
    }

    // 1. Interrupted deletions (logbus's own `.deleted` files).
    for name in names.clone() {
        if name.ends_with(".deleted") {
            remove(&mut names, &mut report, &name)?;
            changed = true;
        }
    }

    // 2. Files logbus never writes — a compaction's `.cleaned` and `.swap` files — are reported
    //    and left alone: never used to replace a segment, never deleted.
    //    So are files named like segment files but not by a 20-digit base offset (Kafka's
    //    recovery ignores them too).
    for name in &names {
        let misnamed = [".log", ".index", ".timeindex", ".txnindex"]
            .iter()
            .any(|s| name.ends_with(s))
            && parse_file_name(name).is_none();
        if name.ends_with(".swap") || name.ends_with(".cleaned") || misnamed {
            report.foreign_files.push(dir.join(name));
        }
    }

    // 3. Index files without a log.
    let bases: BTreeSet<u64> = names
        .iter()
        .filter_map(|n| parse_file_name(n))
        .filter(|(_, suffix)| *suffix == LOG_SUFFIX)
        .map(|(base, _)| base)
        .collect();
    for name in names.clone() {
        if let Some((base, suffix)) = parse_file_name(&name) {
            let is_index = matches!(suffix, "index" | "timeindex" | "txnindex");
            if is_index && !bases.contains(&base) {
                remove(&mut names, &mut report, &name)?;
                changed = true;
            }
        }
    }
    if changed {
        io.sync_dir(dir).map_err(io_err("syncing directory", dir))?;
    }

    // 4-5. Open, and recover from the recovery point's segment onward.
    let params = config.segment_params();
    let bases: Vec<u64> = bases.into_iter().collect();
    // The first segment to revalidate: the one holding the recovery point (none after a
    // clean shutdown).
    let start = if checkpoints.clean_shutdown {
        bases.len()
    } else {
        bases
            .partition_point(|&b| b <= checkpoints.recovery_point)
            .saturating_sub(1)
    };
    let mut segments: Vec<Segment> = Vec::with_capacity(bases.len());
    let mut doomed: Vec<u64> = Vec::new();
    for (i, &base) in bases.iter().enumerate() {
        if report.truncation.is_some() {
            doomed.push(base);
            continue;
        }
        let (mut segment, health) = Segment::open(io, dir, base, params, now_ms)?;
        let upper = bases.get(i + 1).copied();
        let min_offset = segments.last().map_or(base, |s| s.next_offset().max(base));
        if let Some(prev) = segments.last() {
            if prev.next_offset() < base && !prev.is_empty() {
                report.gaps.push((prev.next_offset(), base));
            }
        }
        let mut needs_recovery = i >= start || !health.offset_index_ok || !health.time_index_ok;
        if !needs_recovery {
            let tail_ok = segment.load().is_ok()
                && upper.map_or(true, |u| segment.next_offset() <= u)
                && segment.next_offset() >= min_offset;
            needs_recovery = !tail_ok;
        }
        if needs_recovery {
            if !health.offset_index_ok {
                report
                    .rebuilt_indexes
                    .push(dir.join(file_name(base, INDEX_SUFFIX)));
            }
            if !health.time_index_ok {
                report
                    .rebuilt_indexes
                    .push(dir.join(file_name(base, TIME_INDEX_SUFFIX)));
            }
            let outcome = segment.recover(min_offset, upper)?;
            report.segments_recovered += 1;
            report.bytes_validated += outcome.valid_bytes;
            report.batches_validated += outcome.batches;
            if let Some((position, bytes, reason)) = outcome.truncated {
                report.truncation = Some(Truncation {
                    file: segment.log_path().to_path_buf(),
                    position,
                    bytes_dropped: bytes,
                    first_lost_offset: segment.next_offset(),
                    reason,
                });
            }
            // Its bytes were read back from the page cache, which may hold writes an earlier
            // life never fsynced (a killed process, a failed fsync): only an fsync now makes
            // them durable, and the reported recovery point relies on it. The last segment's
            // indexes are rebuilt on every open (it holds the recovery point), so only its log
            // must be durable; earlier ones' indexes too.
            segment.mark_unsynced();
            let is_last = i + 1 == bases.len() || report.truncation.is_some();
            segment.sync(!is_last)?;
        }
        segments.push(segment);
    }
    if !doomed.is_empty() {
        let mut paths = Vec::new();
        for &base in &doomed {
            let log = dir.join(file_name(base, LOG_SUFFIX));
            let len = io
                .open(&log, OpenMode::Read)
                .and_then(|f| f.len())
                .map_err(io_err("reading length of", &log))?;
            if let Some(t) = report.truncation.as_mut() {
                t.bytes_dropped += len;
            }
            report.deleted_segments.push(log);
            paths.extend(segment_paths(dir, base));
        }
        delete_files(io, dir, &paths)?;
    }

    // The log start offset never lies below the first segment; a log emptied below it
    // restarts there.
    let mut log_start = checkpoints.log_start_offset;
    if let Some(first) = segments.first() {
        log_start = log_start.max(first.base_offset());
    }
    let log_end = segments.last().map_or(log_start, Segment::next_offset);
    if segments.is_empty() || log_start > log_end {
        let old: Vec<Segment> = std::mem::take(&mut segments);
        delete_segment_files(io, dir, old)?;
        let mut fresh = Segment::create(io, dir, log_start, params, now_ms)?;
        fresh.sync(true)?;
        io.sync_dir(dir).map_err(io_err("syncing directory", dir))?;
        segments.push(fresh);
    }
    let log_end = segments.last().map_or(log_start, Segment::next_offset);
    report.log_start_offset = log_start;
    report.log_end_offset = log_end;
    report.recovery_point = log_end;
    Ok(Loaded {
        segments,
        report,
        lock,
    })
}

fn segment_paths(dir: &Path, base: u64) -> [PathBuf; 3] {
    [
        dir.join(file_name(base, LOG_SUFFIX)),
        dir.join(file_name(base, INDEX_SUFFIX)),
        dir.join(file_name(base, TIME_INDEX_SUFFIX)),
    ]
}

/// Deletes segments as Kafka does, minus the delay: rename each file to `*.deleted`, fsync the
/// directory, then remove them (a crash in between leaves `.deleted` files, which the next
/// open removes).
pub(crate) fn delete_segment_files(io: &dyn Io, dir: &Path, segments: Vec<Segment>) -> Result<()> {
    let paths: Vec<PathBuf> = segments.iter().flat_map(Segment::paths).collect();
    drop(segments);
    delete_files(io, dir, &paths)
}

fn delete_files(io: &dyn Io, dir: &Path, paths: &[PathBuf]) -> Result<()> {
    if paths.is_empty() {
        return Ok(());
    }
    let mut renamed = Vec::new();
    for path in paths {
        if !io.exists(path).map_err(io_err("checking", path))? {
            continue;
        }
        let mut deleted = path.clone().into_os_string();
        deleted.push(".deleted");
        let deleted = PathBuf::from(deleted);
        io.rename(path, &deleted)
            .map_err(io_err("renaming", path))?;
        renamed.push(deleted);
    }
    io.sync_dir(dir).map_err(io_err("syncing directory", dir))?;
    for path in &renamed {
        io.remove_file(path).map_err(io_err("removing", path))?;
    }
    Ok(())
}

/// The first inconsistency [`verify_dir`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file holding it.
    pub file: PathBuf,
    /// Its byte position in that file.
    pub position: u64,
    /// What is wrong.
    pub reason: String,
}

/// What [`verify_dir`] checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Segments checked (up to the first problem).
    pub segments: usize,
    /// Valid batches seen.
    pub batches: u64,
    /// The first problem, or `None` when every segment and index is consistent.
    pub problem: Option<Problem>,
}

struct BatchFacts {
    position: u64,
    last_offset: u64,
    running_max_timestamp: i64,
    max_timestamp: i64,
}

/// Checks a partition directory without changing it: every `.log` must consist of valid
/// batches (size, CRC, record structure, offsets strictly increasing from the segment's base
/// offset — gaps allowed, as recovery allows them — and below the next segment's, no
/// incomplete tail), every
/// `.index` entry must point at the start of a batch whose last offset it names, with offsets
/// strictly increasing, and every `.timeindex` entry must name the last offset of a batch
/// whose maximum timestamp — the largest so far in the segment — is the entry's timestamp,
/// with timestamps strictly increasing. Stops at the first problem (file and byte position).
///
/// # Errors
///
/// [`Error::Io`] when a file cannot be read (a missing index is a [`Problem`], not an error).
///
/// # Examples
///
/// ```
/// # use std::{sync::Arc};
/// use logbus::storage::{verify_dir, Checkpoints, FsIo, LogConfig, Record, SegmentSet};
/// use logbus::SystemClock;
///
/// let dir = tempfile::tempdir()?;
/// let (mut log, _) = SegmentSet::open(dir.path(), LogConfig::default(), Arc::new(FsIo),
///     Arc::new(SystemClock), Checkpoints::default())?;
/// log.append(&[Record::new(1, None, b"a")])?;
/// log.close()?;
/// let report = verify_dir(&FsIo, dir.path())?;
/// assert_eq!((report.segments, report.batches, report.problem), (1, 1, None));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn verify_dir(io: &dyn Io, dir: &Path) -> Result<VerifyReport> {
    verify_dir_bounded(io, dir, VERIFY_MAX_BATCH_BYTES)
}

/// The largest batch [`verify_dir`] reads into memory (16 MiB); a valid batch above it is a
/// [`Problem`] (see [`verify_dir_bounded`] to raise it).
pub const VERIFY_MAX_BATCH_BYTES: u64 = 16 << 20;

/// [`verify_dir`], holding no batch over `max_batch_bytes` in memory: a larger batch whose
/// CRC fails is corruption, one whose CRC holds is a [`Problem`] saying the limit is too low.
/// Index files are read only when no larger than the segment's batches can fill (one entry
/// per batch) or 10 MiB (Kafka's preallocated size), so memory is bounded by the limit and the
/// log's batches, never by file lengths.
///
/// # Errors
///
/// As [`verify_dir`].
pub fn verify_dir_bounded(io: &dyn Io, dir: &Path, max_batch_bytes: u64) -> Result<VerifyReport> {
    let names = io.list_dir(dir).map_err(io_err("listing", dir))?;
    let mut report = VerifyReport::default();
    for name in &names {
        let problem = |reason: String| Problem {
            file: dir.join(name),
            position: 0,
            reason,
        };
        if let Some(reason) = bad_offset_in_name(name) {
            report.problem = Some(problem(reason));
            return Ok(report);
        }
        if name.ends_with(".swap") || name.ends_with(".cleaned") {
            report.problem = Some(problem(
                "a compaction's temporary file, which logbus never writes (its recovery leaves \
                 it unused)"
                    .into(),
            ));
            return Ok(report);
        }
    }
    let bases: Vec<u64> = names
        .iter()
        .filter_map(|n| parse_file_name(n))
        .filter(|(_, s)| *s == LOG_SUFFIX)
        .map(|(b, _)| b)
        .collect();
    let mut prev_next: Option<u64> = None;
    for (i, &base) in bases.iter().enumerate() {
        report.segments += 1;
        let upper = bases.get(i + 1).copied();
        let checked = verify_segment(
            io,
            dir,
            base,
            upper,
            prev_next,
            max_batch_bytes,
            &mut report,
        );
        let checked = match checked {
            // A valid batch over the limit: the directory cannot be checked within it.
            Err(Error::BatchTooLarge {
                file,
                position,
                size,
                max,
            }) => Err(Problem {
                file,
                position,
                reason: format!(
                    "a batch of {size} bytes (its CRC holds) is over the {max}-byte limit of \
                     this check; its records were not checked"
                ),
            }),
            other => other?,
        };
        match checked {
            Ok(next) => prev_next = Some(next),
            Err(problem) => {
                report.problem = Some(problem);
                return Ok(report);
            }
        }
    }
    Ok(report)
}

fn verify_segment(
    io: &dyn Io,
    dir: &Path,
    base: u64,
    upper: Option<u64>,
    prev_next: Option<u64>,
    max_batch_bytes: u64,
    report: &mut VerifyReport,
) -> Result<std::result::Result<u64, Problem>> {
    let log_path = dir.join(file_name(base, LOG_SUFFIX));
    let file = io
        .open(&log_path, OpenMode::Read)
        .map_err(|e| Error::opening("opening", &log_path, e))?;
    let len = file.len().map_err(io_err("reading length of", &log_path))?;
    if len > MAX_SEGMENT_BYTES {
        return Ok(Err(Problem {
            reason: Error::SegmentTooLarge {
                path: log_path.clone(),
                size: len,
                max: MAX_SEGMENT_BYTES,
            }
            .to_string(),
            file: log_path,
            position: MAX_SEGMENT_BYTES,
        }));
    }
    let mut facts: Vec<BatchFacts> = Vec::new();
    let mut expected = base;
    let min_offset = prev_next.unwrap_or(base);
    let mut running = i64::MIN;
    let end = scan_log(&*file, &log_path, 0, len, max_batch_bytes, |batch| {
        let h = batch.header();
        let last = check_batch_offsets(&batch, base, expected, min_offset, upper)?;
        batch.validate_records().or_else(|e| match e {
            Error::UnsupportedCompression { .. } => Ok(()),
            other => Err(other),
        })?;
        running = running.max(h.max_timestamp);
        facts.push(BatchFacts {
            position: batch.position(),
            last_offset: last,
            running_max_timestamp: running,
            max_timestamp: h.max_timestamp,
        });
        expected = last + 1;
        Ok(true)
    })?;
    report.batches += facts.len() as u64;
    match end {
        ScanEnd::Complete | ScanEnd::Stopped { .. } => {}
        ScanEnd::Partial { position, bytes } => {
            return Ok(Err(Problem {
                file: log_path,
                position,
                reason: format!("incomplete batch: the last {bytes} bytes do not form a batch"),
            }))
        }
        ScanEnd::Corrupt { error, position } => {
            let position = match &error {
                Error::CorruptSegment { position, .. } => *position,
                _ => position,
            };
            return Ok(Err(Problem {
                file: log_path,
                position,
                reason: error.to_string(),
            }));
        }
    }
    let next = facts.last().map_or(base, |f| f.last_offset + 1);

    // The offset index.
    // An index holds at most one entry per batch, unless preallocated as Kafka does.
    let index_limit = |entry: usize| (facts.len() * entry).max(KAFKA_INDEX_BYTES);
    let index_path = dir.join(file_name(base, INDEX_SUFFIX));
    let bytes = match read_index(
        io,
        &index_path,
        index_limit(offset_index::ENTRY_SIZE),
        offset_index::ENTRY_SIZE,
    )? {
        Ok(bytes) => bytes,
        Err(mut problem) => {
            if problem.reason == "missing index" {
                problem.reason = "missing offset index".into();
            }
            return Ok(Err(problem));
        }
    };
    if bytes.len() % offset_index::ENTRY_SIZE != 0 {
        return Ok(Err(Problem {
            position: (bytes.len() - bytes.len() % offset_index::ENTRY_SIZE) as u64,
            file: index_path,
            reason: format!(
                "file length {} is not a multiple of the {}-byte entry size",
                bytes.len(),
                offset_index::ENTRY_SIZE
            ),
        }));
    }
    let mut prev: Option<u64> = None;
    for (i, e) in offset_index::parse(&bytes, base).iter().enumerate() {
        let position = (i * offset_index::ENTRY_SIZE) as u64;
        let problem = |reason: String| {
            Ok(Err(Problem {
                file: index_path.clone(),
                position,
                reason: format!(
                    "entry {i} (offset {}, position {}): {reason}",
                    e.offset, e.position
                ),
            }))
        };
        if prev.is_some_and(|p| e.offset <= p) {
            return problem("offsets must strictly increase".into());
        }
        prev = Some(e.offset);
        match facts.binary_search_by_key(&u64::from(e.position), |f| f.position) {
            Ok(j) if facts[j].last_offset == e.offset => {}
            Ok(j) => {
                return problem(format!(
                    "the batch there has last offset {}",
                    facts[j].last_offset
                ))
            }
            Err(_) => return problem("no batch starts at that position".into()),
        }
    }

    // The time index.
    let time_path = dir.join(file_name(base, TIME_INDEX_SUFFIX));
    let bytes = match read_index(
        io,
        &time_path,
        index_limit(time_index::ENTRY_SIZE),
        time_index::ENTRY_SIZE,
    )? {
        Ok(bytes) => bytes,
        Err(mut problem) => {
            if problem.reason == "missing index" {
                problem.reason = "missing time index".into();
            }
            return Ok(Err(problem));
        }
    };
    if bytes.len() % time_index::ENTRY_SIZE != 0 {
        return Ok(Err(Problem {
            position: (bytes.len() - bytes.len() % time_index::ENTRY_SIZE) as u64,
            file: time_path,
            reason: format!(
                "file length {} is not a multiple of the {}-byte entry size",
                bytes.len(),
                time_index::ENTRY_SIZE
            ),
        }));
    }
    let mut prev: Option<i64> = None;
    for (i, e) in time_index::parse(&bytes, base).iter().enumerate() {
        let position = (i * time_index::ENTRY_SIZE) as u64;
        let problem = |reason: String| {
            Ok(Err(Problem {
                file: time_path.clone(),
                position,
                reason: format!(
                    "entry {i} (timestamp {}, offset {}): {reason}",
                    e.timestamp, e.offset
                ),
            }))
        };
        if prev.is_some_and(|p| e.timestamp <= p) {
            return problem("timestamps must strictly increase".into());
        }
        prev = Some(e.timestamp);
        let found = facts
            .binary_search_by_key(&e.offset, |f| f.last_offset)
            .ok()
            .map(|j| &facts[j]);
        match found {
            Some(f) if f.max_timestamp == e.timestamp && f.running_max_timestamp == e.timestamp => {
            }
            Some(f) => {
                return problem(format!(
                    "the batch ending there has max timestamp {} and the segment's largest so far \
                     is {}",
                    f.max_timestamp, f.running_max_timestamp
                ))
            }
            None => return problem("no batch ends at that offset".into()),
        }
    }
    Ok(Ok(next))
}

/// Kafka's default `segment.index.bytes`: the size its active segment's indexes are
/// preallocated to.
const KAFKA_INDEX_BYTES: usize = 10 << 20;

/// The index file's bytes, if it exists and holds at most `limit` of them; a longer file (a
/// sparse one, say) is a [`Problem`] and is not read.
fn read_index(
    io: &dyn Io,
    path: &Path,
    limit: usize,
    entry: usize,
) -> Result<std::result::Result<Vec<u8>, Problem>> {
    // Opened without a look first: a dangling symlink is not "missing" but not a file.
    let file = match io.open(path, OpenMode::Read) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Err(Problem {
                file: path.to_path_buf(),
                position: 0,
                reason: "missing index".into(),
            }))
        }
        Err(e) => return Err(Error::opening("opening", path, e)),
    };
    let len = file.len().map_err(io_err("reading length of", path))?;
    if len > limit as u64 {
        return Ok(Err(Problem {
            file: path.to_path_buf(),
            position: limit as u64,
            reason: format!(
                "the index is {len} bytes, more than its segment's batches can fill ({limit} \
                 bytes of {entry}-byte entries, or Kafka's preallocated 10 MiB)"
            ),
        }));
    }
    let mut bytes = vec![0u8; len as usize];
    file.read_exact_at(&mut bytes, 0)
        .map_err(io_err("reading", path))?;
    Ok(Ok(bytes))
}
