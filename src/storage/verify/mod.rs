//! Checking segment directories without changing them: one partition directory, or a log
//! directory holding many (what `logbus verify` runs).
//!
//! [`verify_partition`] adds the checks of the directory's names to
//! [`verify_dir`]'s checks of its contents: every `.log`,
//! `.index` and `.timeindex` file must be named by a 20-digit base offset, and every index
//! must have its `.log` (Kafka's `LogLoader` deletes stray indexes and ignores misnamed files,
//! so a directory holding either is not as Kafka would leave it), and by default requires
//! dense offsets (see [`VerifyConfig`]): no offset missing inside or between segments, as
//! after a segment was deleted by hand. [`verify_path`] finds the
//! partition directories under a path — the path itself when it holds segment files,
//! otherwise every directory below it, at any depth, that does — and verifies each one.
//!
//! # Examples
//!
//! ```
//! use std::fs;
//! use logbus::storage::record_batch::BatchBuilder;
//! use logbus::storage::verify::verify_path;
//!
//! // A log directory with two partitions of one segment each (sparse indexes: none yet).
//! let root = tempfile::tempdir()?;
//! for partition in ["orders-0", "orders-1"] {
//!     let dir = root.path().join(partition);
//!     fs::create_dir(&dir)?;
//!     let batch = BatchBuilder::new(0).with_record(1_700_000_000_000, None, Some(b"v"))?;
//!     fs::write(dir.join("00000000000000000000.log"), batch.clone().finish())?;
//!     fs::write(dir.join("00000000000000000000.index"), b"")?;
//!     fs::write(dir.join("00000000000000000000.timeindex"), b"")?;
//! }
//! let report = verify_path(root.path())?;
//! assert_eq!(report.partitions.len(), 2);
//! assert_eq!(report.batches(), 2);
//! assert!(report.first_problem().is_none());
//!
//! // A torn tail is named with its file and byte position.
//! let log = root.path().join("orders-1/00000000000000000000.log");
//! let mut bytes = fs::read(&log)?;
//! let size = bytes.len() as u64;
//! bytes.extend_from_slice(&bytes.clone()[..30]);
//! fs::write(&log, bytes)?;
//! let problem = verify_path(root.path())?.first_problem().cloned().unwrap();
//! assert_eq!((problem.file, problem.position), (log, size));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fs;
use std::path::{Path, PathBuf};

use super::file_names::is_segment_file;
use super::io::{FsIo, Io};
use crate::error::{Error, Result};
use check::Checks;

mod check;
#[cfg(all(test, not(logbus_loom)))]
mod tests;

/// What kind of inconsistency a [`Problem`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProblemKind {
    /// A file named like a segment file by a base offset above `i64::MAX` (Kafka's offsets are
    /// signed 64-bit): no segment can start there.
    OffsetOutOfRange,
    /// A compaction's `.swap` or `.cleaned` file: a pass cut short, which the next open
    /// finishes (`.swap`) or removes (`.cleaned`).
    CompactionLeftover,
    /// A `.log`, `.index` or `.timeindex` file not named by a 20-digit base offset.
    Misnamed,
    /// An `.index` or `.timeindex` file without its `.log`.
    StrayIndex,
    /// A `.log` file that is not a segment: it starts with no batch, valid or damaged, based at
    /// its name's offset (empty, a few bytes, garbage) where no log leaves such a file — before another segment, or
    /// inside the offsets of the segment before it. Recovery sets it aside
    /// ([`RecoveryReport::set_aside`](crate::storage::RecoveryReport::set_aside)).
    StraySegment,
    /// A `.log` larger than a segment may be (2^31 − 1 bytes).
    SegmentTooLarge,
    /// A batch that breaks the format: its size, CRC, records or offsets.
    CorruptBatch,
    /// A torn tail: the last bytes of a `.log` do not form a whole batch.
    IncompleteBatch,
    /// A valid batch larger than the check may hold in memory (its records were not checked).
    BatchOverLimit,
    /// A segment without its `.index`.
    MissingOffsetIndex,
    /// A segment without its `.timeindex`.
    MissingTimeIndex,
    /// An index file longer than its segment can fill, or not a whole number of entries.
    IndexLength,
    /// An `.index` entry out of order, or naming no batch of its segment.
    OffsetIndexEntry,
    /// A `.timeindex` entry out of order, or disagreeing with its segment's timestamps.
    TimeIndexEntry,
    /// A missing offset inside or between segments (checked only with
    /// [`VerifyConfig::dense_offsets`]).
    NotDense,
}

/// The first inconsistency [`verify_dir`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file holding it.
    pub file: PathBuf,
    /// Its byte position in that file.
    pub position: u64,
    /// What kind of problem it is: match on this.
    pub kind: ProblemKind,
    /// What is wrong, for people (the wording may change).
    pub reason: String,
}

/// What [`verify_dir`] checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Segments checked (up to the first problem).
    pub segments: usize,
    /// Segments not reached: verification stops at the first problem, and the segments after
    /// it (all of them, for a problem in the directory's names) are not checked.
    pub unchecked_segments: usize,
    /// Valid batches seen.
    pub batches: u64,
    /// The first problem, or `None` when every segment and index is consistent.
    pub problem: Option<Problem>,
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
/// use logbus::storage::{verify_dir, FsIo, LogSetup, BatchRecord, SegmentSet};
///
/// let dir = tempfile::tempdir()?;
/// let (mut log, _) = SegmentSet::open(dir.path(), LogSetup::default())?;
/// log.append(&[BatchRecord::new(1, None, b"a")])?;
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
    check::verify(
        io,
        dir,
        Checks {
            names: false,
            dense: false,
            max_batch_bytes,
        },
    )
}

/// Which of the optional checks [`verify_partition_with`] and [`verify_path_with`] make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifyConfig {
    /// Require dense offsets (the default): each segment's first batch starts at the
    /// segment's base offset, each batch at one past the previous batch's last offset (across
    /// segments too, so a segment deleted by hand is found), and the records of each batch
    /// take every offset from its base to its last, in order. Turn it off for logs that may
    /// hold gaps — compacted Kafka topics, or batches appended with a gap through
    /// [`SegmentSet::append_batch`](super::SegmentSet::append_batch) — to check offsets only
    /// as [`verify_dir`] does.
    pub dense_offsets: bool,
    /// The largest batch read into memory ([`VERIFY_MAX_BATCH_BYTES`] by default): a valid
    /// batch above it is reported as a problem, unchecked, so memory stays bounded whatever
    /// the files claim.
    pub max_batch_bytes: u64,
}

impl Default for VerifyConfig {
    fn default() -> Self {
        VerifyConfig {
            dense_offsets: true,
            max_batch_bytes: VERIFY_MAX_BATCH_BYTES,
        }
    }
}

impl VerifyConfig {
    /// The options with [`dense_offsets`](VerifyConfig::dense_offsets) set to `dense`.
    pub fn dense_offsets(mut self, dense: bool) -> Self {
        self.dense_offsets = dense;
        self
    }

    /// The options with [`max_batch_bytes`](VerifyConfig::max_batch_bytes) set to `max`.
    pub fn max_batch_bytes(mut self, max: u64) -> Self {
        self.max_batch_bytes = max;
        self
    }
}

/// The verification of one partition directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionReport {
    /// The partition directory.
    pub dir: PathBuf,
    /// What was checked there, and the first problem if any.
    pub report: VerifyReport,
    /// Why the partition could not be checked (a file that cannot be read, a dangling
    /// symlink, a special file), with its sources; `report` then holds what was checked
    /// before. Other partitions are checked all the same.
    pub error: Option<String>,
}

/// What [`verify_path`] checked: every partition directory found, in path order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeReport {
    /// One entry per partition directory.
    pub partitions: Vec<PartitionReport>,
}

impl TreeReport {
    /// The first problem found (in the first partition that has one), or `None` when every
    /// partition is consistent.
    pub fn first_problem(&self) -> Option<&Problem> {
        self.partitions
            .iter()
            .find_map(|p| p.report.problem.as_ref())
    }

    /// Every problem found: at most one per partition (verification of a partition stops at
    /// its first problem).
    pub fn problems(&self) -> impl Iterator<Item = &Problem> {
        self.partitions
            .iter()
            .filter_map(|p| p.report.problem.as_ref())
    }

    /// The partitions that could not be checked, with why.
    pub fn errors(&self) -> impl Iterator<Item = (&Path, &str)> {
        self.partitions
            .iter()
            .filter_map(|p| Some((p.dir.as_path(), p.error.as_deref()?)))
    }

    /// Segments checked across all partitions.
    pub fn segments(&self) -> usize {
        self.partitions.iter().map(|p| p.report.segments).sum()
    }

    /// Valid batches seen across all partitions.
    pub fn batches(&self) -> u64 {
        self.partitions.iter().map(|p| p.report.batches).sum()
    }

    /// Segments not reached across all partitions (see [`VerifyReport::unchecked_segments`]).
    pub fn unchecked_segments(&self) -> usize {
        self.partitions
            .iter()
            .map(|p| p.report.unchecked_segments)
            .sum()
    }
}

/// [`verify_partition_with`] with the default options (dense offsets required).
///
/// # Errors
///
/// As [`verify_partition_with`].
///
/// # Examples
///
/// ```
/// use std::path::Path;
/// use logbus::storage::fault::FaultyIo;
/// use logbus::storage::io::{Io, OpenMode};
/// use logbus::storage::verify::verify_partition;
///
/// let io = FaultyIo::new(1);
/// let dir = Path::new("/orders-0");
/// io.create_dir_all(dir)?;
/// io.open(&dir.join("00000000000000000000.log"), OpenMode::CreateNew)?;
/// io.open(&dir.join("00000000000000000000.index"), OpenMode::CreateNew)?;
/// io.open(&dir.join("00000000000000000000.timeindex"), OpenMode::CreateNew)?;
/// assert_eq!(verify_partition(&io, dir)?.problem, None);
///
/// io.open(&dir.join("00000000000000000042.index"), OpenMode::CreateNew)?; // no .log
/// let problem = verify_partition(&io, dir)?.problem.unwrap();
/// assert_eq!(problem.file, dir.join("00000000000000000042.index"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn verify_partition(io: &dyn Io, dir: &Path) -> Result<VerifyReport> {
    verify_partition_with(io, dir, VerifyConfig::default())
}

/// Checks the partition directory `dir` without changing it: first its names (every segment
/// file named by a 20-digit base offset, no index without its `.log`), then its contents as
/// [`verify_dir`] does (batches, CRCs, offsets increasing and inside their segment, both
/// indexes against the batches, no incomplete tail), then, with
/// [`dense_offsets`](VerifyConfig::dense_offsets), that no offset is missing. Stops at the
/// first problem, which names the file and byte position.
///
/// # Errors
///
/// [`Error::Io`] when the directory or a file in it cannot be read. Inconsistencies are not
/// errors: they are the report's [`problem`](VerifyReport::problem).
///
/// # Examples
///
/// ```
/// use std::path::Path;
/// use logbus::storage::fault::FaultyIo;
/// use logbus::storage::io::{Io, OpenMode};
/// use logbus::storage::record_batch::BatchBuilder;
/// use logbus::storage::verify::{verify_partition_with, VerifyConfig};
///
/// let io = FaultyIo::new(1);
/// let dir = Path::new("/orders-0");
/// io.create_dir_all(dir)?;
/// // Segments at offsets 0 and 5: offsets 1 to 4 are missing (a segment deleted by hand?).
/// for base in [0, 5] {
///     let batch = BatchBuilder::new(base).with_record(1, None, Some(b"a"))?;
///     let log = io.open(&dir.join(format!("{base:020}.log")), OpenMode::CreateNew)?;
///     log.write_all_at(batch.clone().finish(), 0)?;
///     io.open(&dir.join(format!("{base:020}.index")), OpenMode::CreateNew)?;
///     io.open(&dir.join(format!("{base:020}.timeindex")), OpenMode::CreateNew)?;
/// }
///
/// let strict = verify_partition_with(&io, dir, VerifyConfig::default())?;
/// assert!(strict.problem.unwrap().reason.contains("offsets are not dense"));
/// let gaps_allowed = VerifyConfig::default().dense_offsets(false);
/// assert_eq!(verify_partition_with(&io, dir, gaps_allowed)?.problem, None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn verify_partition_with(
    io: &dyn Io,
    dir: &Path,
    options: VerifyConfig,
) -> Result<VerifyReport> {
    check::verify(
        io,
        dir,
        Checks {
            names: true,
            dense: options.dense_offsets,
            max_batch_bytes: options.max_batch_bytes,
        },
    )
}

/// An error with its sources, on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn metadata(path: &Path) -> Result<fs::Metadata> {
    fs::metadata(path).map_err(|e| Error::io(format!("reading {}", path.display()), e))
}

fn list(dir: &Path) -> Result<Vec<String>> {
    FsIo.list_dir(dir)
        .map_err(|e| Error::io(format!("listing {}", dir.display()), e))
}

/// The partition directories at `path` on the file system: `path` itself when it holds
/// segment files, otherwise every directory below `path`, at any depth, that does, in path
/// order.
///
/// # Errors
///
/// [`Error::Io`] when `path` or a subdirectory cannot be read (e.g. it does not exist);
/// [`Error::NotASegment`] when `path` is not a directory, or neither it nor any
/// directory below it holds segment files.
///
/// # Examples
///
/// ```
/// use logbus::storage::verify::partition_dirs;
/// use logbus::Error;
///
/// let root = tempfile::tempdir()?;
/// assert!(matches!(partition_dirs(root.path()), Err(Error::NotASegment { .. })));
/// std::fs::create_dir(root.path().join("orders-0"))?;
/// std::fs::write(root.path().join("orders-0/00000000000000000000.log"), b"")?;
/// assert_eq!(partition_dirs(root.path())?, vec![root.path().join("orders-0")]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn partition_dirs(path: &Path) -> Result<Vec<PathBuf>> {
    if !metadata(path)?.is_dir() {
        return Err(Error::NotASegment {
            path: path.to_path_buf(),
            reason: "not a directory: expected a partition directory (holding \
                     NNNNNNNNNNNNNNNNNNNN.log files) or a directory of them"
                .into(),
        });
    }
    let names = list(path)?;
    if names.iter().any(|n| is_segment_file(n)) {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut dirs = Vec::new();
    find_partitions(path, names, &mut dirs);
    if dirs.is_empty() {
        return Err(Error::NotASegment {
            path: path.to_path_buf(),
            reason: "no segment files (NNNNNNNNNNNNNNNNNNNN.log, .index, .timeindex) in it or \
                     in its subdirectories"
                .into(),
        });
    }
    Ok(dirs)
}

/// Adds the partition directories below `dir` (whose entries are `names`) to `dirs`, in name
/// order, at any depth: a subdirectory holding segment files is one, any other is searched.
/// Only real directories are searched (a symlink loop cannot trap the walk); a symlink to a
/// directory of segment files is still a partition. A subdirectory that cannot be read, and a
/// dangling symlink, are listed, so that verifying them reports why, beside every other
/// partition.
fn find_partitions(dir: &Path, mut names: Vec<String>, dirs: &mut Vec<PathBuf>) {
    names.sort();
    for name in names {
        let child = dir.join(name);
        let Ok(meta) = fs::metadata(&child) else {
            if fs::symlink_metadata(&child).is_ok_and(|m| m.is_symlink()) {
                dirs.push(child);
            }
            continue;
        };
        if !meta.is_dir() {
            continue;
        }
        let Ok(names) = list(&child) else {
            dirs.push(child);
            continue;
        };
        if names.iter().any(|n| is_segment_file(n)) {
            dirs.push(child);
        } else if fs::symlink_metadata(&child).is_ok_and(|m| !m.is_symlink()) {
            find_partitions(&child, names, dirs);
        }
    }
}

/// [`verify_path_with`] with the default options (dense offsets required).
///
/// # Errors
///
/// As [`verify_path_with`].
///
/// # Examples
///
/// See the [module docs](self).
pub fn verify_path(path: &Path) -> Result<TreeReport> {
    verify_path_with(path, VerifyConfig::default())
}

/// Verifies every partition directory at `path` (see [`partition_dirs`]) with
/// [`verify_partition_with`]; a problem in one partition does not stop the others, nor does
/// one that cannot be read (its [`PartitionReport::error`] says why).
///
/// # Errors
///
/// As [`partition_dirs`].
///
/// # Examples
///
/// See the [module docs](self).
pub fn verify_path_with(path: &Path, options: VerifyConfig) -> Result<TreeReport> {
    let mut report = TreeReport::default();
    for dir in partition_dirs(path)? {
        let (partition, error) = match verify_partition_with(&FsIo, &dir, options) {
            Ok(partition) => (partition, None),
            Err(e) => (VerifyReport::default(), Some(error_chain(&e))),
        };
        report.partitions.push(PartitionReport {
            dir,
            report: partition,
            error,
        });
    }
    Ok(report)
}
