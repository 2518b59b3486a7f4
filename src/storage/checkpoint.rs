//! Kafka's checkpoint files: small text files replaced atomically.
//!
//! The layout (`CheckpointFile` in Kafka): a version line (`0`), a line with the number of
//! entries, then one entry per line. Kafka's log directories hold
//! `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint` and
//! `replication-offset-checkpoint` with [`TopicPartitionOffset`] entries
//! (`topic partition offset`), and each partition directory a `leader-epoch-checkpoint` with
//! [`EpochEntry`] entries (`epoch startOffset`).
//!
//! [`write`](fn@write) replaces a file atomically and durably: it writes `<name>.tmp`, fsyncs it,
//! renames it over `<name>` and fsyncs the directory, so a crash leaves the old file or the new
//! one, never a mix. [`read`](fn@read) rejects anything that does not follow the layout with an
//! [`Error::InvalidCheckpoint`] naming the file and line.
//!
//! # Examples
//!
//! ```
//! use logbus::storage::checkpoint::{read, write, TopicPartitionOffset};
//! use logbus::storage::FsIo;
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("recovery-point-offset-checkpoint");
//! let entries = vec![TopicPartitionOffset { topic: "orders".into(), partition: 3, offset: 42 }];
//! write(&FsIo, &path, &entries)?;
//! assert_eq!(std::fs::read_to_string(&path).unwrap(), "0\n1\norders 3 42\n");
//! assert_eq!(read::<TopicPartitionOffset>(&FsIo, &path)?, Some(entries));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::{Path, PathBuf};

use super::io::{Io, OpenMode};
use crate::error::{Error, Result};

/// The only checkpoint format version.
pub const VERSION: u32 = 0;

/// One line of a checkpoint file.
pub trait CheckpointEntry: Sized {
    /// The entry as one line (without the newline).
    ///
    /// # Errors
    ///
    /// A description of why the entry cannot be written (e.g. a topic with a space).
    fn to_line(&self) -> std::result::Result<String, String>;

    /// Parses one line.
    ///
    /// # Errors
    ///
    /// A description of what was wrong and what was expected.
    fn parse_line(line: &str) -> std::result::Result<Self, String>;
}

/// `topic partition offset`: the entries of Kafka's log-directory checkpoint files.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TopicPartitionOffset {
    /// The topic name (no whitespace).
    pub topic: String,
    /// The partition number.
    pub partition: u32,
    /// The offset.
    pub offset: u64,
}

impl CheckpointEntry for TopicPartitionOffset {
    fn to_line(&self) -> std::result::Result<String, String> {
        if self.topic.is_empty() || self.topic.chars().any(char::is_whitespace) {
            return Err(format!(
                "topic {:?} cannot be written: it must be non-empty without whitespace",
                self.topic
            ));
        }
        Ok(format!("{} {} {}", self.topic, self.partition, self.offset))
    }

    fn parse_line(line: &str) -> std::result::Result<Self, String> {
        let fields: Vec<&str> = line.split(' ').collect();
        let [topic, partition, offset] = fields[..] else {
            return Err(format!(
                "expected `topic partition offset` (3 fields separated by single spaces), \
                 found {} field(s) in {line:?}",
                fields.len()
            ));
        };
        if topic.is_empty() {
            return Err("empty topic name".into());
        }
        Ok(TopicPartitionOffset {
            topic: topic.to_string(),
            partition: partition.parse().map_err(|_| {
                format!("partition {partition:?} is not a number in 0..=4294967295")
            })?,
            offset: offset
                .parse()
                .map_err(|_| format!("offset {offset:?} is not a non-negative integer"))?,
        })
    }
}

/// `epoch startOffset`: the entries of a `leader-epoch-checkpoint`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EpochEntry {
    /// The leader epoch.
    pub epoch: i32,
    /// The first offset appended in that epoch.
    pub start_offset: u64,
}

impl CheckpointEntry for EpochEntry {
    fn to_line(&self) -> std::result::Result<String, String> {
        Ok(format!("{} {}", self.epoch, self.start_offset))
    }

    fn parse_line(line: &str) -> std::result::Result<Self, String> {
        let fields: Vec<&str> = line.split(' ').collect();
        let [epoch, start] = fields[..] else {
            return Err(format!(
                "expected `epoch startOffset` (2 fields), found {} field(s) in {line:?}",
                fields.len()
            ));
        };
        Ok(EpochEntry {
            epoch: epoch
                .parse()
                .map_err(|_| format!("epoch {epoch:?} is not a 32-bit integer"))?,
            start_offset: start
                .parse()
                .map_err(|_| format!("start offset {start:?} is not a non-negative integer"))?,
        })
    }
}

fn invalid(path: &Path, line: usize, reason: impl Into<String>) -> Error {
    Error::InvalidCheckpoint {
        file: path.to_path_buf(),
        line,
        reason: reason.into(),
    }
}

/// Parses the text of a checkpoint file (`path` only names it in errors).
///
/// # Errors
///
/// [`Error::InvalidCheckpoint`] with the 1-based line of the first problem.
pub fn parse<E: CheckpointEntry>(path: &Path, text: &str) -> Result<Vec<E>> {
    let mut lines = text.lines();
    let version = lines
        .next()
        .ok_or_else(|| invalid(path, 1, "empty file; expected the version line `0`"))?;
    if version.trim() != VERSION.to_string() {
        return Err(invalid(
            path,
            1,
            format!("version {version:?}; the only known version is {VERSION}"),
        ));
    }
    let count_line = lines
        .next()
        .ok_or_else(|| invalid(path, 2, "missing the entry-count line"))?;
    let count: usize = count_line.trim().parse().map_err(|_| {
        invalid(
            path,
            2,
            format!("entry count {count_line:?} is not a non-negative integer"),
        )
    })?;
    // No capacity from `count`: it may be hostile; entries are bounded by the lines present.
    let mut entries = Vec::new();
    for i in 0..count {
        let line_no = i + 3;
        let line = lines.next().ok_or_else(|| {
            invalid(
                path,
                line_no,
                format!("the file declares {count} entries but holds only {i}"),
            )
        })?;
        entries.push(E::parse_line(line).map_err(|reason| invalid(path, line_no, reason))?);
    }
    for (i, line) in lines.enumerate() {
        if !line.trim().is_empty() {
            return Err(invalid(
                path,
                count + 3 + i,
                format!("unexpected line {line:?} after the {count} declared entries"),
            ));
        }
    }
    Ok(entries)
}

/// Reads a checkpoint file; `None` when it does not exist.
///
/// # Errors
///
/// [`Error::InvalidCheckpoint`] for bad contents (including text that is not UTF-8),
/// [`Error::Io`] when reading fails.
pub fn read<E: CheckpointEntry>(io: &dyn Io, path: &Path) -> Result<Option<Vec<E>>> {
    let exists = io
        .exists(path)
        .map_err(|e| Error::io(format!("checking {}", path.display()), e))?;
    if !exists {
        return Ok(None);
    }
    let bytes = io
        .open(path, OpenMode::Read)
        .map_err(|e| Error::opening("opening", path, e))?
        .read_all()
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    let text = std::str::from_utf8(&bytes).map_err(|e| {
        let line = 1 + bytes[..e.valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        invalid(path, line, "the file is not UTF-8 text")
    })?;
    parse(path, text).map(Some)
}

/// Replaces the checkpoint file at `path` atomically and durably (temp file, fsync, rename,
/// directory fsync).
///
/// Writers of one `path` must be serialised by the caller, as Kafka's `CheckpointFile`
/// serialises its own: they share the temp file `<path>.tmp`, so two at once could rename
/// each other's half-written file into place, or fail to find it.
///
/// # Errors
///
/// [`Error::InvalidCheckpoint`] when an entry cannot be written; [`Error::Io`] when a step
/// fails (the old file is then still in place).
pub fn write<E: CheckpointEntry>(io: &dyn Io, path: &Path, entries: &[E]) -> Result<()> {
    let mut text = format!("{VERSION}\n{}\n", entries.len());
    for (i, entry) in entries.iter().enumerate() {
        let line = entry
            .to_line()
            .map_err(|reason| invalid(path, i + 3, reason))?;
        text.push_str(&line);
        text.push('\n');
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let ctx = |what: &str, p: &Path| format!("{what} {}", p.display());
    let file = io
        .open(&tmp, OpenMode::Truncate)
        .map_err(|e| Error::io(ctx("creating", &tmp), e))?;
    file.write_all_at(text.as_bytes(), 0)
        .map_err(|e| Error::io(ctx("writing", &tmp), e))?;
    file.sync_all()
        .map_err(|e| Error::io(ctx("syncing", &tmp), e))?;
    drop(file);
    io.rename(&tmp, path)
        .map_err(|e| Error::io(ctx("renaming", &tmp), e))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    io.sync_dir(dir)
        .map_err(|e| Error::io(ctx("syncing directory", dir), e))
}
