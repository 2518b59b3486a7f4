//! The one verifier: a partition directory's names, then each segment's batches and indexes,
//! then (optionally) dense offsets, in one pass over each `.log`.

use std::collections::BTreeSet;
use std::path::Path;

use super::{Problem, ProblemKind, VerifyReport};
use crate::error::{Error, Result};
use crate::storage::file_names::{
    bad_offset_in_name, file_name, is_misnamed, log_bases, parse_file_name, INDEX_SUFFIX,
    LOG_SUFFIX, SEGMENT_SUFFIXES, TIME_INDEX_SUFFIX,
};
use crate::storage::io::{Io, OpenMode};
use crate::storage::record_batch::Batch;
use crate::storage::scan::{
    scan_segment, stray_copy_reason, stray_reason, ScanEnd, SegmentBounds, SegmentPlan,
};
use crate::storage::segment::MAX_SEGMENT_BYTES;
use crate::storage::{offset_index, time_index};

/// What one run of the verifier checks.
#[derive(Debug, Clone, Copy)]
pub(super) struct Checks {
    /// The directory's names: every segment file named by a 20-digit base offset, no index
    /// without its `.log`.
    pub(super) names: bool,
    /// No offset missing inside or between segments.
    pub(super) dense: bool,
    /// The largest batch held in memory.
    pub(super) max_batch_bytes: u64,
}

fn io_err(what: &str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let context = format!("{what} {}", path.display());
    move |e| Error::io(context, e)
}

fn problem(file: &Path, position: u64, kind: ProblemKind, reason: String) -> Problem {
    Problem {
        file: file.to_path_buf(),
        position,
        kind,
        reason,
    }
}

/// Checks `dir` (see [`verify_partition_with`](super::verify_partition_with)); stops at the
/// first problem. A gap in offsets is reported only if no other problem is found, as it would
/// be by a dense check run after the others.
pub(super) fn verify(io: &dyn Io, dir: &Path, checks: Checks) -> Result<VerifyReport> {
    let names = io.list_dir(dir).map_err(io_err("listing", dir))?;
    let bases = log_bases(&names);
    let mut report = VerifyReport::default();
    if let Some(p) = check_names(dir, &names, &bases, checks.names) {
        report.problem = Some(p);
        report.unchecked_segments = bases.len();
        return Ok(report);
    }
    let plan = SegmentPlan::new(io, dir, bases.iter().copied(), checks.max_batch_bytes)?;
    let stray = |base: u64| {
        let path = dir.join(file_name(base, LOG_SUFFIX));
        let reason = stray_reason(&path);
        problem(&path, 0, ProblemKind::StraySegment, reason)
    };
    if let Some(&base) = plan.strays.first() {
        report.problem = Some(stray(base));
        report.unchecked_segments = plan.bases.len();
        return Ok(report);
    }
    let bases = plan.bases.clone();
    let mut prev_next: Option<u64> = None;
    let mut gap: Option<Problem> = None;
    for (i, &base) in bases.iter().enumerate() {
        if plan.last_is_stray(i, prev_next) {
            report.problem = Some(stray(base));
            return Ok(report);
        }
        report.segments += 1;
        let bounds = SegmentBounds {
            base,
            min_offset: prev_next.unwrap_or(base),
            upper: plan.upper(i),
        };
        if checks.dense && gap.is_none() {
            if let Some(e) = prev_next.filter(|&e| e != base) {
                gap = Some(problem(
                    &dir.join(file_name(base, LOG_SUFFIX)),
                    0,
                    ProblemKind::NotDense,
                    format!(
                        "offsets are not dense: the segment's base offset is {base} but the \
                         previous segment ends before {e} (a segment deleted by hand?)"
                    ),
                ));
            }
        }
        let dense_gap = if checks.dense && gap.is_none() {
            Some(&mut gap)
        } else {
            None
        };
        match verify_segment(
            io,
            dir,
            bounds,
            checks.max_batch_bytes,
            dense_gap,
            &mut report,
        ) {
            // A valid batch over the limit: the directory cannot be checked within it.
            Err(Error::BatchTooLarge {
                file,
                position,
                size,
                max,
            }) => {
                report.unchecked_segments = bases.len() - report.segments;
                report.problem = Some(Problem {
                    file,
                    position,
                    kind: ProblemKind::BatchOverLimit,
                    reason: format!(
                        "a batch of {size} bytes (its CRC holds) is over the {max}-byte limit of \
                         this check; its records were not checked"
                    ),
                });
                return Ok(report);
            }
            Err(e) => return Err(e),
            Ok(Ok(next)) => prev_next = Some(next),
            Ok(Err(p)) => {
                // A batch based exactly at the next `.log`'s base offset: that file is a
                // stray copy (a log rolls at its end, never inside it), as recovery sees it.
                let next = plan.upper(i).filter(|&next| {
                    p.file == dir.join(file_name(base, LOG_SUFFIX))
                        && batch_base_at(io, &p.file, p.position) == Some(next)
                });
                let p = match next {
                    Some(next) => {
                        let path = dir.join(file_name(next, LOG_SUFFIX));
                        let reason = stray_copy_reason(&path, &p.file);
                        problem(&path, 0, ProblemKind::StraySegment, reason)
                    }
                    None => p,
                };
                report.problem = Some(p);
                report.unchecked_segments = bases.len() - report.segments;
                return Ok(report);
            }
        }
    }
    report.problem = gap;
    Ok(report)
}

/// The base offset of the batch at `position` of the `.log` at `path`, if it can be read.
fn batch_base_at(io: &dyn Io, path: &Path, position: u64) -> Option<u64> {
    let file = io.open(path, OpenMode::Read).ok()?;
    let mut head = [0u8; 8];
    file.read_exact_at(&mut head, position).ok()?;
    Some(u64::from_be_bytes(head))
}

/// The checks of the directory's names alone: with `strict`, misnamed segment files and
/// indexes without a `.log`; always, offsets no segment can have and compaction leftovers.
fn check_names(
    dir: &Path,
    names: &[String],
    logs: &BTreeSet<u64>,
    strict: bool,
) -> Option<Problem> {
    let at = |name: &str, kind, reason| Some(problem(&dir.join(name), 0, kind, reason));
    for name in names.iter().filter(|_| strict) {
        if let Some(reason) = bad_offset_in_name(name) {
            return at(name, ProblemKind::OffsetOutOfRange, reason);
        }
        match parse_file_name(name) {
            Some((base, suffix))
                if suffix != LOG_SUFFIX
                    && SEGMENT_SUFFIXES.contains(&suffix)
                    && !logs.contains(&base) =>
            {
                let reason = format!(
                    "stray index file: there is no {base:020}.{LOG_SUFFIX} (Kafka's recovery \
                     deletes it)"
                );
                return at(name, ProblemKind::StrayIndex, reason);
            }
            None if is_misnamed(name, &SEGMENT_SUFFIXES) => {
                let reason = "segment file not named by its base offset: expected 20 decimal \
                              digits, e.g. 00000000000000000000.log (Kafka's recovery ignores it)";
                return at(name, ProblemKind::Misnamed, reason.into());
            }
            _ => {}
        }
    }
    for name in names {
        if let Some(reason) = bad_offset_in_name(name) {
            return at(name, ProblemKind::OffsetOutOfRange, reason);
        }
        if name.ends_with(".swap") || name.ends_with(".cleaned") {
            let reason = "a compaction's temporary file: the next open finishes the swap of a \
                          `.swap` file, or removes a `.cleaned` one";
            return at(name, ProblemKind::CompactionLeftover, reason.into());
        }
    }
    None
}

struct BatchFacts {
    position: u64,
    last_offset: u64,
    running_max_timestamp: i64,
    max_timestamp: i64,
}

/// The first offset gap inside a batch or between batches of a segment, if any.
fn dense_gap(batch: &Batch<'_>, next: u64) -> Option<String> {
    let h = batch.header();
    if h.base_offset != next {
        let what = if batch.position() == 0 {
            "the segment's base offset, from its file name"
        } else {
            "one past the previous batch's last offset"
        };
        return Some(format!(
            "the batch starts at offset {}, expected {next} ({what})",
            h.base_offset
        ));
    }
    if i64::from(h.records_count) != i64::from(h.last_offset_delta) + 1 {
        return Some(format!(
            "the batch holds {} records for offsets {}..={}",
            h.records_count,
            h.base_offset,
            h.last_offset()
        ));
    }
    // A compressed batch's records are decompressed to check them (a stream that does not
    // decode was reported by the scan, which validates every batch's records).
    let mut decompressed = Vec::new();
    if let Ok(records) = batch.records(&mut decompressed) {
        for (i, record) in records.enumerate() {
            let offset = record.map(|r| r.offset).ok()?;
            if u64::try_from(i).map_or(true, |i| offset != h.base_offset.saturating_add(i)) {
                return Some(format!(
                    "record {i} of the batch at offset {} has offset {offset}",
                    h.base_offset
                ));
            }
        }
    }
    None
}

/// Checks one segment: its batches (through [`scan_segment`], as recovery does), then both
/// indexes against them. Returns the offset after its last batch, or its first problem; the
/// first gap in offsets goes to `gap` when given (it is reported only if nothing else is).
fn verify_segment(
    io: &dyn Io,
    dir: &Path,
    bounds: SegmentBounds,
    max_batch_bytes: u64,
    mut gap: Option<&mut Option<Problem>>,
    report: &mut VerifyReport,
) -> Result<std::result::Result<u64, Problem>> {
    let base = bounds.base;
    let log_path = dir.join(file_name(base, LOG_SUFFIX));
    let file = io
        .open(&log_path, OpenMode::Read)
        .map_err(|e| Error::opening("opening", &log_path, e))?;
    let len = file.len().map_err(io_err("reading length of", &log_path))?;
    if len > MAX_SEGMENT_BYTES {
        let reason = Error::SegmentTooLarge {
            path: log_path.clone(),
            size: len,
            max: MAX_SEGMENT_BYTES,
        }
        .to_string();
        return Ok(Err(problem(
            &log_path,
            MAX_SEGMENT_BYTES,
            ProblemKind::SegmentTooLarge,
            reason,
        )));
    }
    let mut facts: Vec<BatchFacts> = Vec::new();
    let mut running = i64::MIN;
    let end = scan_segment(
        &*file,
        &log_path,
        len,
        max_batch_bytes,
        bounds,
        |batch, last| {
            let h = batch.header();
            if let Some(gap) = gap.as_deref_mut().filter(|g| g.is_none()) {
                let next = facts.last().map_or(base, |f| f.last_offset + 1);
                if let Some(reason) = dense_gap(batch, next) {
                    *gap = Some(problem(
                        &log_path,
                        batch.position(),
                        ProblemKind::NotDense,
                        format!("offsets are not dense: {reason}"),
                    ));
                }
            }
            running = running.max(h.max_timestamp);
            facts.push(BatchFacts {
                position: batch.position(),
                last_offset: last,
                running_max_timestamp: running,
                max_timestamp: h.max_timestamp,
            });
            Ok(true)
        },
    )?;
    report.batches += facts.len() as u64;
    match end {
        ScanEnd::Complete | ScanEnd::Stopped { .. } => {}
        ScanEnd::Partial { position, bytes } => {
            return Ok(Err(problem(
                &log_path,
                position,
                ProblemKind::IncompleteBatch,
                format!("incomplete batch: the last {bytes} bytes do not form a batch"),
            )))
        }
        ScanEnd::Corrupt { error, position } => {
            let position = match &error {
                Error::Corrupt {
                    file: Some(_),
                    position,
                    ..
                } => *position,
                _ => position,
            };
            return Ok(Err(problem(
                &log_path,
                position,
                ProblemKind::CorruptBatch,
                error.to_string(),
            )));
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
        ProblemKind::MissingOffsetIndex,
    )? {
        Ok(bytes) => bytes,
        Err(problem) => return Ok(Err(problem)),
    };
    let mut prev: Option<u64> = None;
    for (i, e) in offset_index::parse(&bytes, base).iter().enumerate() {
        let position = (i * offset_index::ENTRY_SIZE) as u64;
        let bad = |reason: String| {
            Ok(Err(problem(
                &index_path,
                position,
                ProblemKind::OffsetIndexEntry,
                format!(
                    "entry {i} (offset {}, position {}): {reason}",
                    e.offset, e.position
                ),
            )))
        };
        if prev.is_some_and(|p| e.offset <= p) {
            return bad("offsets must strictly increase".into());
        }
        prev = Some(e.offset);
        match facts.binary_search_by_key(&u64::from(e.position), |f| f.position) {
            Ok(j) if facts[j].last_offset == e.offset => {}
            Ok(j) => {
                return bad(format!(
                    "the batch there has last offset {}",
                    facts[j].last_offset
                ))
            }
            Err(_) => return bad("no batch starts at that position".into()),
        }
    }

    // The time index.
    let time_path = dir.join(file_name(base, TIME_INDEX_SUFFIX));
    let bytes = match read_index(
        io,
        &time_path,
        index_limit(time_index::ENTRY_SIZE),
        time_index::ENTRY_SIZE,
        ProblemKind::MissingTimeIndex,
    )? {
        Ok(bytes) => bytes,
        Err(problem) => return Ok(Err(problem)),
    };
    let mut prev: Option<i64> = None;
    for (i, e) in time_index::parse(&bytes, base).iter().enumerate() {
        let position = (i * time_index::ENTRY_SIZE) as u64;
        let bad = |reason: String| {
            Ok(Err(problem(
                &time_path,
                position,
                ProblemKind::TimeIndexEntry,
                format!(
                    "entry {i} (timestamp {}, offset {}): {reason}",
                    e.timestamp, e.offset
                ),
            )))
        };
        if prev.is_some_and(|p| e.timestamp <= p) {
            return bad("timestamps must strictly increase".into());
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
                return bad(format!(
                    "the batch ending there has max timestamp {} and the segment's largest so far \
                     is {}",
                    f.max_timestamp, f.running_max_timestamp
                ))
            }
            None => return bad("no batch ends at that offset".into()),
        }
    }
    Ok(Ok(next))
}

/// Kafka's default `segment.index.bytes`: the size its active segment's indexes are
/// preallocated to.
const KAFKA_INDEX_BYTES: usize = 10 << 20;

/// The index file's bytes, if it exists, holds at most `limit` of them and whole entries;
/// otherwise the [`Problem`] (`missing` when there is no file). A longer file (a sparse one,
/// say) is not read.
fn read_index(
    io: &dyn Io,
    path: &Path,
    limit: usize,
    entry: usize,
    missing: ProblemKind,
) -> Result<std::result::Result<Vec<u8>, Problem>> {
    // Opened without a look first: a dangling symlink is not "missing" but not a file.
    let file = match io.open(path, OpenMode::Read) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let reason = match missing {
                ProblemKind::MissingTimeIndex => "missing time index",
                _ => "missing offset index",
            };
            return Ok(Err(problem(path, 0, missing, reason.into())));
        }
        Err(e) => return Err(Error::opening("opening", path, e)),
    };
    let len = file.len().map_err(io_err("reading length of", path))?;
    if len > limit as u64 {
        return Ok(Err(problem(
            path,
            limit as u64,
            ProblemKind::IndexLength,
            format!(
                "the index is {len} bytes, more than its segment's batches can fill ({limit} \
                 bytes of {entry}-byte entries, or Kafka's preallocated 10 MiB)"
            ),
        )));
    }
    let mut bytes = vec![0u8; len as usize];
    file.read_exact_at(&mut bytes, 0)
        .map_err(io_err("reading", path))?;
    if bytes.len() % entry != 0 {
        return Ok(Err(problem(
            path,
            (bytes.len() - bytes.len() % entry) as u64,
            ProblemKind::IndexLength,
            format!(
                "file length {} is not a multiple of the {entry}-byte entry size",
                bytes.len(),
            ),
        )));
    }
    Ok(Ok(bytes))
}
