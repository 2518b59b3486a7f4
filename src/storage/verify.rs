//! Checking segment directories without changing them: one partition directory, or a log
//! directory holding many (what `logbus verify` runs).
//!
//! [`verify_partition`] adds the checks of the directory's names to
//! [`verify_dir`](super::verify_dir)'s checks of its contents: every `.log`,
//! `.index` and `.timeindex` file must be named by a 20-digit base offset, and every index
//! must have its `.log` (Kafka's `LogLoader` deletes stray indexes and ignores misnamed files,
//! so a directory holding either is not as Kafka would leave it), and by default requires
//! dense offsets (see [`VerifyOptions`]): no offset missing inside or between segments, as
//! after a segment was deleted by hand. [`verify_path`] finds the
//! partition directories under a path — the path itself when it holds segment files,
//! otherwise its subdirectories that do — and verifies each one.
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

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use super::io::{FsIo, Io, OpenMode};
use super::recovery::{verify_dir_bounded, Problem, VerifyReport, VERIFY_MAX_BATCH_BYTES};
use super::segment::{
    bad_offset_in_name, file_name, parse_file_name, scan_log, INDEX_SUFFIX, LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
};
use crate::error::{Error, Result};

/// The suffixes of the files that make up a segment.
const SEGMENT_SUFFIXES: [&str; 3] = [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX];

/// Which of the optional checks [`verify_partition_with`] and [`verify_path_with`] make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifyOptions {
    /// Require dense offsets (the default): each segment's first batch starts at the
    /// segment's base offset, each batch at one past the previous batch's last offset (across
    /// segments too, so a segment deleted by hand is found), and the records of each batch
    /// take every offset from its base to its last, in order. Turn it off for logs that may
    /// hold gaps — compacted Kafka topics, or batches appended with a gap through
    /// [`SegmentSet::append_batch`](super::SegmentSet::append_batch) — to check offsets only
    /// as [`verify_dir`](super::verify_dir) does.
    pub dense_offsets: bool,
    /// The largest batch read into memory ([`VERIFY_MAX_BATCH_BYTES`] by default): a valid
    /// batch above it is reported as a problem, unchecked, so memory stays bounded whatever
    /// the files claim.
    pub max_batch_bytes: u64,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            dense_offsets: true,
            max_batch_bytes: VERIFY_MAX_BATCH_BYTES,
        }
    }
}

impl VerifyOptions {
    /// The options with [`dense_offsets`](VerifyOptions::dense_offsets) set to `dense`.
    pub fn dense_offsets(mut self, dense: bool) -> Self {
        self.dense_offsets = dense;
        self
    }

    /// The options with [`max_batch_bytes`](VerifyOptions::max_batch_bytes) set to `max`.
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
}

/// Whether `name` is a segment file's name, well formed or not: it ends in `.log`, `.index`
/// or `.timeindex`.
fn has_segment_suffix(name: &str) -> bool {
    SEGMENT_SUFFIXES.iter().any(|s| {
        name.len() > s.len() + 1 && name.ends_with(s) && name[..name.len() - s.len()].ends_with('.')
    })
}

/// Whether `name` is a well-formed segment file name (`NNNNNNNNNNNNNNNNNNNN.log`, `.index`
/// or `.timeindex`).
fn is_segment_file(name: &str) -> bool {
    parse_file_name(name).is_some_and(|(_, suffix)| SEGMENT_SUFFIXES.contains(&suffix))
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
    verify_partition_with(io, dir, VerifyOptions::default())
}

/// Checks the partition directory `dir` without changing it: first its names (every segment
/// file named by a 20-digit base offset, no index without its `.log`), then its contents as
/// [`verify_dir`](super::verify_dir) does (batches, CRCs, offsets increasing and inside their segment, both
/// indexes against the batches, no incomplete tail), then, with
/// [`dense_offsets`](VerifyOptions::dense_offsets), that no offset is missing. Stops at the
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
/// use logbus::storage::verify::{verify_partition_with, VerifyOptions};
///
/// let io = FaultyIo::new(1);
/// let dir = Path::new("/orders-0");
/// io.create_dir_all(dir)?;
/// // Segments at offsets 0 and 5: offsets 1 to 4 are missing (a segment deleted by hand?).
/// for base in [0, 5] {
///     let batch = BatchBuilder::new(base as i64).with_record(1, None, Some(b"a"))?;
///     let log = io.open(&dir.join(format!("{base:020}.log")), OpenMode::CreateNew)?;
///     log.write_all_at(batch.clone().finish(), 0)?;
///     io.open(&dir.join(format!("{base:020}.index")), OpenMode::CreateNew)?;
///     io.open(&dir.join(format!("{base:020}.timeindex")), OpenMode::CreateNew)?;
/// }
///
/// let strict = verify_partition_with(&io, dir, VerifyOptions::default())?;
/// assert!(strict.problem.unwrap().reason.contains("offsets are not dense"));
/// let gaps_allowed = VerifyOptions::default().dense_offsets(false);
/// assert_eq!(verify_partition_with(&io, dir, gaps_allowed)?.problem, None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn verify_partition_with(
    io: &dyn Io,
    dir: &Path,
    options: VerifyOptions,
) -> Result<VerifyReport> {
    let names = io
        .list_dir(dir)
        .map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
    let logs: BTreeSet<u64> = names
        .iter()
        .filter_map(|n| parse_file_name(n))
        .filter(|(_, suffix)| *suffix == LOG_SUFFIX)
        .map(|(base, _)| base)
        .collect();
    for name in &names {
        let reason = match parse_file_name(name) {
            _ if bad_offset_in_name(name).is_some() => bad_offset_in_name(name).unwrap_or_default(),
            Some((base, suffix)) if suffix != LOG_SUFFIX && SEGMENT_SUFFIXES.contains(&suffix) => {
                if logs.contains(&base) {
                    continue;
                }
                format!(
                    "stray index file: there is no {base:020}.{LOG_SUFFIX} (Kafka's recovery \
                     deletes it)"
                )
            }
            Some(_) => continue,
            None if has_segment_suffix(name) => {
                "segment file not named by its base offset: expected 20 decimal digits, e.g. \
                 00000000000000000000.log (Kafka's recovery ignores it)"
                    .to_string()
            }
            None => continue,
        };
        return Ok(VerifyReport {
            problem: Some(Problem {
                file: dir.join(name),
                position: 0,
                reason,
            }),
            ..VerifyReport::default()
        });
    }
    let mut report = verify_dir_bounded(io, dir, options.max_batch_bytes)?;
    if report.problem.is_none() && options.dense_offsets {
        report.problem = check_dense(io, dir, &logs, options.max_batch_bytes)?;
    }
    Ok(report)
}

/// The dense-offsets check of [`VerifyOptions::dense_offsets`], on a directory that passed
/// [`verify_dir`](super::verify_dir) (so every batch is whole and valid).
fn check_dense(
    io: &dyn Io,
    dir: &Path,
    bases: &BTreeSet<u64>,
    max_batch_bytes: u64,
) -> Result<Option<Problem>> {
    let mut expected: Option<u64> = None;
    for &base in bases {
        let path = dir.join(file_name(base, LOG_SUFFIX));
        if let Some(e) = expected.filter(|&e| e != base) {
            return Ok(Some(Problem {
                file: path,
                position: 0,
                reason: format!(
                    "offsets are not dense: the segment's base offset is {base} but the previous \
                     segment ends before {e} (a segment deleted by hand?)"
                ),
            }));
        }
        let file = io
            .open(&path, OpenMode::Read)
            .map_err(|e| Error::opening("opening", &path, e))?;
        let len = file
            .len()
            .map_err(|e| Error::io(format!("reading length of {}", path.display()), e))?;
        let mut next = base;
        let mut problem = None;
        scan_log(&*file, &path, 0, len, max_batch_bytes, |batch| {
            let h = batch.header();
            let mut gap = |reason: String| {
                problem = Some(Problem {
                    file: path.clone(),
                    position: batch.position(),
                    reason: format!("offsets are not dense: {reason}"),
                });
                Ok(false)
            };
            if h.base_offset != next as i64 {
                let what = if batch.position() == 0 {
                    "the segment's base offset, from its file name"
                } else {
                    "one past the previous batch's last offset"
                };
                return gap(format!(
                    "the batch starts at offset {}, expected {next} ({what})",
                    h.base_offset
                ));
            }
            if i64::from(h.records_count) != i64::from(h.last_offset_delta) + 1 {
                return gap(format!(
                    "the batch holds {} records for offsets {}..={}",
                    h.records_count,
                    h.base_offset,
                    h.last_offset()
                ));
            }
            // A compressed batch's records cannot be read here; its counts matched above.
            if let Ok(records) = batch.records() {
                for (i, record) in records.enumerate() {
                    let offset = record?.offset;
                    if offset != h.base_offset.wrapping_add(i as i64) {
                        return gap(format!(
                            "record {i} of the batch at offset {} has offset {offset}",
                            h.base_offset
                        ));
                    }
                }
            }
            next = h.last_offset() as u64 + 1;
            Ok(true)
        })?;
        if problem.is_some() {
            return Ok(problem);
        }
        expected = Some(next);
    }
    Ok(None)
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
/// segment files, otherwise each subdirectory of `path` that does, in name order.
///
/// # Errors
///
/// [`Error::Io`] when `path` or a subdirectory cannot be read (e.g. it does not exist);
/// [`Error::NotASegment`] when `path` is not a directory, or neither it nor any
/// subdirectory holds segment files.
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
    for name in names {
        let child = path.join(name);
        // A subdirectory that cannot be read is listed, so that verifying it reports why,
        // beside every other partition.
        let holds_segments = match fs::metadata(&child) {
            Ok(m) if m.is_dir() => {
                list(&child).map_or(true, |n| n.iter().any(|n| is_segment_file(n)))
            }
            Ok(_) => false,
            Err(_) => fs::symlink_metadata(&child).is_ok_and(|m| m.is_symlink()),
        };
        if holds_segments {
            dirs.push(child);
        }
    }
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
    verify_path_with(path, VerifyOptions::default())
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
pub fn verify_path_with(path: &Path, options: VerifyOptions) -> Result<TreeReport> {
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

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use super::*;
    use crate::clock::SystemClock;
    use crate::storage::fault::FaultyIo;
    use crate::storage::io::OpenMode;
    use crate::storage::record_batch::Record;
    use crate::storage::segment_set::{Checkpoints, LogConfig, SegmentSet};
    use crate::sync::Arc;

    fn write_partition(io: Arc<dyn Io>, dir: &Path, records: u32) {
        let config = LogConfig {
            segment_bytes: 2048,
            index_interval_bytes: 256,
            ..LogConfig::default()
        };
        let (mut log, _) = SegmentSet::open(
            dir,
            config,
            io,
            Arc::new(SystemClock),
            Checkpoints::default(),
        )
        .unwrap();
        for i in 0..records {
            let ts = 1_700_000_000_000 + i64::from(i % 7) * 10;
            log.append(&[Record::new(ts, Some(b"k"), &[i as u8; 40])])
                .unwrap();
        }
        log.close().unwrap();
    }

    #[test]
    fn suffixes() {
        assert!(has_segment_suffix("42.log"));
        assert!(has_segment_suffix("a.b.timeindex"));
        assert!(!has_segment_suffix(".log"));
        assert!(!has_segment_suffix("catalog"));
        assert!(!has_segment_suffix("00000000000000000000.log.deleted"));
        assert!(is_segment_file("00000000000000000000.timeindex"));
        assert!(!is_segment_file("00000000000000000000.txnindex"));
    }

    #[test]
    fn clean_partition_then_damage() {
        let io = FaultyIo::new(3);
        let dir = Path::new("/data/t-0");
        write_partition(Arc::new(io.clone()), dir, 200);
        let report = verify_partition(&io, dir).unwrap();
        assert_eq!(report.problem, None);
        assert!(report.segments > 3, "{report:?}");
        assert_eq!(report.batches, 200);

        // A bit flip in the second segment's third batch.
        let names = io.list_dir(dir).unwrap();
        let second_log = names.iter().filter(|n| n.ends_with(".log")).nth(1).unwrap();
        let path = dir.join(second_log);
        let mut bytes = io.read_file(&path).unwrap();
        // Every batch here has the same size: one record of the same shape.
        let batch = 12 + i32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize;
        let at = 2 * batch + 70;
        bytes[at] ^= 0x40;
        assert!(io.write_file(&path, &bytes));
        let problem = verify_partition(&io, dir).unwrap().problem.unwrap();
        assert_eq!(problem.file, path);
        assert_eq!(problem.position, (2 * batch + 17) as u64, "{problem:?}");
        assert!(problem.reason.contains("CRC"), "{problem:?}");
    }

    /// Regression (found by the `recovery` fuzz target): closing or recovering a segment
    /// without timestamps wrote a time index entry `(-1, base)` naming no batch.
    #[test]
    fn segments_without_timestamps_get_no_time_index_entry() {
        let io = FaultyIo::new(5);
        let dir = Path::new("/data/t-2");
        let open = || {
            SegmentSet::open(
                dir,
                LogConfig::default(),
                Arc::new(io.clone()),
                Arc::new(SystemClock),
                Checkpoints::default(),
            )
            .unwrap()
            .0
        };
        open().close().unwrap(); // an empty segment, closed
        assert_eq!(verify_partition(&io, dir).unwrap().problem, None);
        let index = dir.join("00000000000000000000.timeindex");
        assert_eq!(io.read_file(&index).unwrap(), b"");

        let mut log = open(); // recovered from offset 0: indexes rebuilt
        log.append(&[Record::new(-1, None, b"no timestamp")])
            .unwrap();
        log.close().unwrap();
        assert_eq!(verify_partition(&io, dir).unwrap().problem, None);
        assert_eq!(io.read_file(&index).unwrap(), b"");
        drop(open());
        assert_eq!(verify_partition(&io, dir).unwrap().problem, None);
    }

    #[test]
    fn gaps_fail_the_dense_check_only() {
        let io = FaultyIo::new(6);
        let dir = Path::new("/data/t-3");
        write_partition(Arc::new(io.clone()), dir, 200);
        let dense = VerifyOptions::default();
        let gaps = VerifyOptions::default().dense_offsets(false);
        assert_eq!(
            verify_partition_with(&io, dir, dense).unwrap().problem,
            None
        );

        // A segment deleted by hand: the next one names the gap.
        let logs: Vec<String> = io
            .list_dir(dir)
            .unwrap()
            .into_iter()
            .filter(|n| n.ends_with(".log"))
            .collect();
        let (doomed, after) = (parse_file_name(&logs[2]).unwrap().0, &logs[3]);
        for suffix in SEGMENT_SUFFIXES {
            io.remove_file(&dir.join(file_name(doomed, suffix)))
                .unwrap();
        }
        let problem = verify_partition(&io, dir).unwrap().problem.unwrap();
        assert_eq!((problem.file, problem.position), (dir.join(after), 0));
        assert!(problem.reason.contains("not dense"), "{}", problem.reason);
        assert_eq!(verify_partition_with(&io, dir, gaps).unwrap().problem, None);

        // A batch appended with a gap inside the active segment.
        let dir = Path::new("/data/t-4");
        let (mut log, _) = SegmentSet::open(
            dir,
            LogConfig::default(),
            Arc::new(io.clone()),
            Arc::new(SystemClock),
            Checkpoints::default(),
        )
        .unwrap();
        log.append(&[Record::new(1, None, b"a")]).unwrap();
        let batch =
            crate::storage::record_batch::encode_batch(9, &[Record::new(2, None, b"b")]).unwrap();
        let info = log.append_batch(&batch).unwrap();
        log.close().unwrap();
        // The gap is inside the segment, or at the start of a new one if the set rolled.
        let problem = verify_partition(&io, dir).unwrap().problem.unwrap();
        let segment = dir.join(file_name(info.segment_base_offset, LOG_SUFFIX));
        assert_eq!((problem.file, problem.position), (segment, info.position));
        assert!(problem.reason.contains("not dense"), "{}", problem.reason);
        assert_eq!(verify_partition_with(&io, dir, gaps).unwrap().problem, None);
    }

    #[test]
    fn records_must_fill_their_batch() {
        use crate::storage::record_batch::{crc32c, BatchBuilder};
        let io = FaultyIo::new(7);
        let dir = Path::new("/data/t-5");
        io.create_dir_all(dir).unwrap();
        let log = dir.join("00000000000000000000.log");
        for suffix in SEGMENT_SUFFIXES {
            io.open(&dir.join(file_name(0, suffix)), OpenMode::CreateNew)
                .unwrap();
        }
        let good = BatchBuilder::new(0)
            .with_record(7, None, Some(b"a"))
            .unwrap()
            .with_record(7, None, Some(b"b"))
            .unwrap()
            .finish()
            .to_vec();
        let with_crc = |mut b: Vec<u8>| {
            let crc = crc32c(&b[21..]);
            b[17..21].copy_from_slice(&crc.to_be_bytes());
            b
        };
        let check = |bytes: &[u8]| {
            assert!(io.write_file(&log, bytes));
            verify_partition(&io, dir).unwrap().problem
        };
        assert_eq!(check(&good), None);

        // lastOffsetDelta 2 for two records.
        let mut b = good.clone();
        b[26] = 2;
        let problem = check(&with_crc(b)).unwrap();
        assert!(
            problem.reason.contains("2 records for offsets 0..=2"),
            "{problem:?}"
        );

        // The second record's offset delta 0 instead of 1 (zig-zag 2 -> 0).
        let mut b = good.clone();
        let second = 61 + 1 + usize::from(b[61] / 2);
        assert_eq!(b[second + 3], 2, "offsetDelta of record 1");
        b[second + 3] = 0;
        // Deltas must increase inside a batch: a structural rule, found with or without the
        // dense check.
        let b = with_crc(b);
        let problem = check(&b).unwrap();
        assert!(
            problem
                .reason
                .contains("record offset delta 0 is out of place"),
            "{problem:?}"
        );
        let gaps = VerifyOptions::default().dense_offsets(false);
        assert!(verify_partition_with(&io, dir, gaps)
            .unwrap()
            .problem
            .is_some());
    }

    #[test]
    fn misnamed_and_stray_files() {
        let io = FaultyIo::new(4);
        let dir = Path::new("/data/t-1");
        write_partition(Arc::new(io.clone()), dir, 5);
        io.open(&dir.join("leader-epoch-checkpoint"), OpenMode::CreateNew)
            .unwrap();
        assert_eq!(verify_partition(&io, dir).unwrap().problem, None);

        io.open(&dir.join("7.log"), OpenMode::CreateNew).unwrap();
        let problem = verify_partition(&io, dir).unwrap().problem.unwrap();
        assert_eq!(problem.file, dir.join("7.log"));
        assert!(problem.reason.contains("base offset"), "{problem:?}");
        io.remove_file(&dir.join("7.log")).unwrap();

        let stray = dir.join("00000000000000000099.timeindex");
        io.open(&stray, OpenMode::CreateNew).unwrap();
        let problem = verify_partition(&io, dir).unwrap().problem.unwrap();
        assert_eq!(problem.file, stray);
        assert!(problem.reason.contains("stray"), "{problem:?}");
    }

    #[test]
    fn tree_of_partitions() {
        let root = tempfile::tempdir().unwrap();
        write_partition(Arc::new(FsIo), &root.path().join("a-0"), 30);
        write_partition(Arc::new(FsIo), &root.path().join("a-1"), 30);
        fs::write(
            root.path().join("recovery-point-offset-checkpoint"),
            "0\n0\n",
        )
        .unwrap();
        fs::create_dir(root.path().join("unrelated")).unwrap();
        let report = verify_path(root.path()).unwrap();
        let dirs: Vec<&Path> = report.partitions.iter().map(|p| p.dir.as_path()).collect();
        assert_eq!(dirs, [root.path().join("a-0"), root.path().join("a-1")]);
        assert_eq!(report.first_problem(), None);
        assert_eq!(report.batches(), 60);

        // Truncate a .log mid-batch in the second partition: only it reports a problem.
        let log = root.path().join("a-1/00000000000000000000.log");
        let len = fs::metadata(&log).unwrap().len();
        fs::OpenOptions::new()
            .write(true)
            .open(&log)
            .unwrap()
            .set_len(len - 5)
            .unwrap();
        let report = verify_path(root.path()).unwrap();
        assert_eq!(report.partitions[0].report.problem, None);
        let problem = report.first_problem().unwrap();
        assert_eq!(problem.file, log);
        assert!(problem.reason.contains("incomplete"), "{problem:?}");
        assert_eq!(report.problems().count(), 1);

        // A partition directory given directly.
        let one = verify_path(&root.path().join("a-0")).unwrap();
        assert_eq!(one.partitions.len(), 1);
        assert_eq!(one.first_problem(), None);
    }

    #[test]
    fn bad_paths() {
        let root = tempfile::tempdir().unwrap();
        assert!(matches!(
            verify_path(root.path()),
            Err(Error::NotASegment { .. })
        ));
        let file = root.path().join("file");
        fs::write(&file, b"x").unwrap();
        assert!(matches!(verify_path(&file), Err(Error::NotASegment { .. })));
        match verify_path(&root.path().join("missing")) {
            Err(Error::Io { source, .. }) => {
                assert_eq!(source.kind(), std::io::ErrorKind::NotFound)
            }
            other => panic!("expected NotFound, got {other:?}"),
        }
    }
}
