//! Opening a partition directory: Kafka's log segment recovery (`LogLoader`,
//! `LogSegment.recover`). The read-only check of a directory is [`verify`](super::verify).
//!
//! On open, in this order (holding the directory's lock, [`Io::lock_dir`], throughout and for
//! as long as the log stays open):
//! 0. a name shaped like a segment file whose offset is above `i64::MAX` is an error
//!    ([`Error::NotASegment`]): Kafka's offsets are signed 64-bit;
//! 1. files ending `.deleted` are removed (interrupted deletions);
//! 2. a compaction's leftovers (Kafka's `LogLoader`; see [`cleaner`](super::cleaner)):
//!    `.cleaned` files (a pass cut before its swap) are removed; a `<base>.log.swap` whose
//!    batches are all valid finishes its swap — every segment based in `[base, the swap's
//!    next offset)` is removed (the directory fsynced), then the swap becomes `<base>.log`,
//!    its indexes rebuilt below (listed in [`RecoveryReport::swaps_completed`]); a damaged or
//!    empty swap is set aside (`.stray`) while the old segment at its base is still there,
//!    and used as far as it is valid when it is not; index `.swap` files are removed (indexes
//!    are rebuilt). Other `.swap` files and files named like segment files but not by a
//!    20-digit base offset are listed in [`RecoveryReport::foreign_files`] and left alone;
//! 3. stray `.log` files — ones that start with no batch, valid or damaged, based at their
//!    name's offset (empty, a few bytes, garbage) where a log never leaves such a file: before another segment, or inside the
//!    offsets of the segment before them (see `SegmentPlan`) — are set aside, renamed
//!    `<name>.stray` with their indexes, and listed in [`RecoveryReport::set_aside`]: never
//!    read as segments, they change no segment (read as one, an empty file would cut the
//!    segment before it at its base offset and, through that cut, drop every later segment).
//!    The last `.log` may still be an empty or torn segment a crash left right after a roll
//!    (based at the log end or past it): it is recovered as before;
//!    then index files (`.index`, `.timeindex`, `.txnindex`) without a `.log` are removed;
//!    once a segment (at or past the log start, its offset index sane) is opened, a `.log`
//!    based at an offset where that segment holds a batch is a stray copy (a log rolls at its
//!    end, never inside it) and is set aside the same way, rather than cutting the segment;
//! 4. unless the shutdown was clean ([`Checkpoints::clean_shutdown`]), every segment from the
//!    one holding the recovery point onward — and any segment
//!    whose index is missing, cut mid-entry or out of order — is recovered: each batch is
//!    checked (size, CRC, offsets strictly increasing from the segment's base offset and
//!    below the next segment's; they may jump, as compaction, transactions and replication
//!    leave them), the indexes are rebuilt, and the log is cut at the first bad or incomplete
//!    batch — only there: a gap in offsets, inside or between segments, is legal and kept
//!    (and listed in [`RecoveryReport::gaps`] when it lies between segments);
//! 5. if anything was cut, every later segment is deleted (its data followed a hole); if the
//!    log start offset lies past the log end, every segment is deleted and the log restarts
//!    there (listed in [`RecoveryReport::deleted_segments`] too);
//! 6. every recovered segment is fsynced — its bytes may be writes that an earlier life of the
//!    process left in the page cache without an fsync (it was killed, or an fsync failed) —
//!    so the recovery point becomes the log end offset; when an index file had to be
//!    created, the directory is fsynced too (the file's name is durable from then on).
//!
//! The [`RecoveryReport`] says what was removed, rebuilt and cut (file, byte position, bytes
//! dropped, and the first offset no longer present).
//!
//! Offsets and timestamps below the recovery point are not re-read (as in Kafka): a bit
//! flipped there is caught when the batch is read (its CRC is checked then) and by
//! [`verify_dir`](super::verify_dir).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::cleaner::{CLEANED_SUFFIX, SWAP_SUFFIX};
use super::file_names::{
    bad_offset_in_name, file_name, is_misnamed, log_bases, parse_file_name, INDEX_SUFFIX,
    LOG_SUFFIX, TIME_INDEX_SUFFIX,
};
use super::io::{DirLock, Io, OpenMode, LOCK_FILE};
use super::scan::{scan_segment, ScanEnd, SegmentBounds, SegmentPlan};
use super::segment::Segment;
use super::segment_set::{Checkpoints, LogConfig};
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
    /// Segment `.log` files deleted because they followed a cut, or because the log start
    /// offset (from its checkpoint) lies past the log end: the log then restarts, empty, at
    /// the log start, as Kafka's does.
    pub deleted_segments: Vec<PathBuf>,
    /// Index files rebuilt because they were missing or damaged (segments recovered only
    /// because they lie past the recovery point are not listed).
    pub rebuilt_indexes: Vec<PathBuf>,
    /// Leftover files removed (`.deleted` files, indexes without a `.log`).
    pub removed_files: Vec<PathBuf>,
    /// Files logbus does not know, left in place and unused: files named like segment files
    /// but not by a 20-digit base offset, `.swap` files of no segment file.
    pub foreign_files: Vec<PathBuf>,
    /// Compaction swaps completed at open: the `.log` each `.swap` file became (the old
    /// segments it replaced are in [`removed_files`](Self::removed_files)).
    pub swaps_completed: Vec<PathBuf>,
    /// Stray `.log` files (and their indexes), renamed `<name>.stray` (or `<name>.stray.<n>`
    /// when taken): files that start with no batch (valid or damaged) based at their name's offset, where no
    /// log leaves one (see
    /// the module docs). Their bytes are kept for a look; no segment was changed for them.
    pub set_aside: Vec<PathBuf>,
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
            && self.set_aside.is_empty()
            && self.swaps_completed.is_empty()
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
        // A leftover already gone is removed: a cleaning pass of the log's last instance
        // may still be removing its `.deleted` files (`DeletedFiles`, without a lock).
        match io.remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io_err("removing", &path)(e))
            }
            _ => {}
        }
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

    // 2. A compaction's leftovers: `.cleaned` files go, `.swap` files finish their swap.
    //    Files named like segment files but not by a 20-digit base offset are reported and
    //    left alone (Kafka's recovery ignores them too).
    for name in names.clone() {
        if name.ends_with(CLEANED_SUFFIX) {
            remove(&mut names, &mut report, &name)?;
            changed = true;
        }
    }
    for name in names.clone() {
        let Some(stem) = name.strip_suffix(SWAP_SUFFIX) else {
            continue;
        };
        match parse_file_name(stem) {
            Some((base, LOG_SUFFIX)) => {
                if changed {
                    io.sync_dir(dir).map_err(io_err("syncing directory", dir))?;
                }
                finish_swap(
                    io,
                    dir,
                    base,
                    config.max_batch_bytes,
                    &mut names,
                    &mut report,
                )?;
                changed = true;
            }
            Some((_, INDEX_SUFFIX | TIME_INDEX_SUFFIX | "txnindex")) => {
                remove(&mut names, &mut report, &name)?;
                changed = true;
            }
            _ => report.foreign_files.push(dir.join(&name)),
        }
    }
    for name in &names {
        let misnamed = is_misnamed(
            name,
            &[LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, "txnindex"],
        );
        if misnamed {
            report.foreign_files.push(dir.join(name));
        }
    }

    // 3. Stray `.log` files, then index files without a log.
    let plan = SegmentPlan::new(io, dir, log_bases(&names), config.max_batch_bytes)?;
    for &base in &plan.strays {
        set_aside(io, dir, base, &mut names, &mut report)?;
        changed = true;
    }
    let bases = log_bases(&names);
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
    debug_assert_eq!(bases.iter().copied().collect::<Vec<_>>(), plan.bases);
    let mut plan = plan;
    let mut segments: Vec<Segment> = Vec::with_capacity(plan.bases.len());
    let mut doomed: Vec<u64> = Vec::new();
    let mut i = 0;
    while i < plan.bases.len() {
        let base = plan.bases[i];
        if plan.last_is_stray(i, segments.last().map(Segment::next_offset)) {
            set_aside(io, dir, base, &mut names, &mut report)?;
            io.sync_dir(dir).map_err(io_err("syncing directory", dir))?;
            i += 1;
            continue;
        }
        if report.truncation.is_some() {
            doomed.push(base);
            i += 1;
            continue;
        }
        let (mut segment, health) = Segment::open(io, dir, base, params, now_ms)?;
        // A `.log` based at an offset this segment (at or past the log start) holds a batch
        // at is a stray copy (a log rolls at its end, never inside it): set aside, it bounds
        // nothing.
        while let Some(next) = plan.upper(i) {
            let trusted = health.offset_index_ok && base >= checkpoints.log_start_offset;
            if !(trusted && holds_batch_at(&mut segment, next)) {
                break;
            }
            set_aside(io, dir, next, &mut names, &mut report)?;
            io.sync_dir(dir).map_err(io_err("syncing directory", dir))?;
            plan.bases.remove(i + 1);
        }
        // Revalidated: the segment holding the recovery point and every later one (none
        // after a clean shutdown).
        let from_recovery_point = !checkpoints.clean_shutdown
            && plan
                .bases
                .get(i + 1)
                .map_or(true, |&next| next > checkpoints.recovery_point);
        let upper = plan.upper(i);
        let min_offset = segments.last().map_or(base, |s| s.next_offset().max(base));
        if let Some(prev) = segments.last() {
            if prev.next_offset() < base && !prev.is_empty() {
                report.gaps.push((prev.next_offset(), base));
            }
        }
        let mut needs_recovery =
            from_recovery_point || !health.offset_index_ok || !health.time_index_ok;
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
            let is_last = i + 1 == plan.bases.len() || report.truncation.is_some();
            segment.sync(!is_last)?;
        }
        segments.push(segment);
        i += 1;
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
        // Records the log start has passed: gone, and said so.
        report.deleted_segments.extend(
            old.iter()
                .filter(|s| !s.is_empty())
                .map(|s| s.log_path().to_path_buf()),
        );
        delete_segment_files(io, dir, old)?;
        let mut fresh = Segment::create(io, dir, log_start, params, now_ms)?;
        fresh.sync(true)?;
        io.sync_dir(dir).map_err(io_err("syncing directory", dir))?;
        segments.push(fresh);
    }
    // An index open created (it was missing) is named in the directory only once the
    // directory is synced; without that, a power loss after this open would take it away
    // again from a segment the reported recovery point covers.
    if !report.rebuilt_indexes.is_empty() {
        io.sync_dir(dir).map_err(io_err("syncing directory", dir))?;
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

/// Finishes the swap of `<base>.log.swap` (see the module docs, step 2).
fn finish_swap(
    io: &dyn Io,
    dir: &Path,
    base: u64,
    max_batch_bytes: u64,
    names: &mut BTreeSet<String>,
    report: &mut RecoveryReport,
) -> Result<()> {
    let log_name = file_name(base, LOG_SUFFIX);
    let swap_name = format!("{log_name}{SWAP_SUFFIX}");
    let swap = dir.join(&swap_name);
    let file = io
        .open(&swap, OpenMode::Read)
        .map_err(|e| Error::opening("opening", &swap, e))?;
    let len = file.len().map_err(io_err("reading length of", &swap))?;
    let bounds = SegmentBounds {
        base,
        min_offset: base,
        upper: None,
    };
    let mut next = base;
    let end = scan_segment(&*file, &swap, len, max_batch_bytes, bounds, |_, last| {
        next = last + 1;
        Ok(true)
    })?;
    drop(file);
    let whole = matches!(end, ScanEnd::Complete) && next > base;
    if !whole && names.contains(&log_name) {
        // The old segment is still there, and this file cannot stand for it.
        let stray = (0..)
            .map(|n| match n {
                0 => format!("{swap_name}.stray"),
                n => format!("{swap_name}.stray.{n}"),
            })
            .find(|n| !names.contains(n))
            .unwrap_or_default();
        let to = dir.join(&stray);
        io.rename(&swap, &to)
            .map_err(io_err("setting aside", &swap))?;
        names.remove(&swap_name);
        names.insert(stray);
        report.set_aside.push(to);
        return Ok(());
    }
    if next == base {
        // Nothing valid in it, and nothing to replace.
        io.remove_file(&swap).map_err(io_err("removing", &swap))?;
        names.remove(&swap_name);
        report.removed_files.push(swap);
        return Ok(());
    }
    // The segments it replaces, and the old indexes at its base (rebuilt for the new log).
    let doomed: Vec<u64> = log_bases(names.iter())
        .into_iter()
        .filter(|b| (base..next).contains(b))
        .collect();
    let mut gone = false;
    for b in doomed.into_iter().chain(std::iter::once(base)) {
        for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, "txnindex"] {
            let name = file_name(b, suffix);
            if names.remove(&name) {
                let path = dir.join(&name);
                io.remove_file(&path).map_err(io_err("removing", &path))?;
                report.removed_files.push(path);
                gone = true;
            }
        }
    }
    if gone {
        // Before the swap takes the name: never the cleaned segment beside an old one.
        io.sync_dir(dir).map_err(io_err("syncing directory", dir))?;
    }
    let to = dir.join(&log_name);
    io.rename(&swap, &to).map_err(io_err("renaming", &swap))?;
    io.sync_dir(dir).map_err(io_err("syncing directory", dir))?;
    names.remove(&swap_name);
    names.insert(log_name);
    report.swaps_completed.push(to);
    Ok(())
}

/// Renames the stray `.log` based at `base`, and its indexes, to `<name>.stray` (or
/// `<name>.stray.<n>`, the first name free): kept for a look, never read as a segment.
fn set_aside(
    io: &dyn Io,
    dir: &Path,
    base: u64,
    names: &mut BTreeSet<String>,
    report: &mut RecoveryReport,
) -> Result<()> {
    for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
        let name = file_name(base, suffix);
        if !names.remove(&name) {
            continue;
        }
        let stray = (0..)
            .map(|n| match n {
                0 => format!("{name}.stray"),
                n => format!("{name}.stray.{n}"),
            })
            .find(|n| !names.contains(n))
            .unwrap_or_default();
        let (from, to) = (dir.join(&name), dir.join(&stray));
        io.rename(&from, &to)
            .map_err(io_err("setting aside", &from))?;
        names.insert(stray);
        report.set_aside.push(to);
    }
    Ok(())
}

/// Whether `segment`, read by its headers from its last index entry to its end, holds a
/// batch based at exactly `offset`.
fn holds_batch_at(segment: &mut Segment, offset: u64) -> bool {
    if segment.load().is_err() || segment.next_offset() <= offset {
        return false;
    }
    matches!(segment.find_batch(offset), Ok(Some((_, h))) if h.base_offset == offset)
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
        // Already gone is done: a cleaning pass's old files wait for their removal without
        // the set's lock under these same names (`DeletedFiles`), and that removal may take
        // this file between the rename and here.
        match io.remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io_err("removing", path)(e))
            }
            _ => {}
        }
    }
    Ok(())
}
