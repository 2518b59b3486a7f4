//! How a partition log is configured ([`LogConfig`], Kafka's topic-level settings: plain
//! values, the same for every log of a topic) and what
//! [`SegmentSet::open`](super::SegmentSet::open) is given ([`LogSetup`]: those settings plus
//! what is not a setting, the file system and clock the log runs on and the checkpoints it
//! was last left with). Each has defaults and a `validate`.

use std::fmt;

use super::io::{FsIo, Io};
use super::segment::SegmentParams;
use super::segment_set::Checkpoints;
use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};
use crate::sync::{arc_from_std, Arc, StdArc};

/// Milliseconds in seven days (Kafka's default `segment.ms` and `retention.ms`).
pub const SEVEN_DAYS_MS: i64 = 7 * 24 * 60 * 60 * 1000;

/// A partition log's settings, with Kafka's names and defaults.
///
/// # Examples
///
/// ```
/// use logbus::storage::LogConfig;
///
/// let config = LogConfig { segment_bytes: 16 << 20, ..LogConfig::default() };
/// assert!(config.validate().is_ok());
/// let bad = LogConfig { index_interval_bytes: -1, ..LogConfig::default() };
/// assert!(bad.validate().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Roll when the active segment would exceed this many bytes (`segment.bytes`, 1 GiB).
    /// Valid: 61 ..= 2^31 - 1 (index positions are 32-bit).
    pub segment_bytes: u64,
    /// Roll when the active segment's data spans more than this (`segment.ms`, 7 days). ≥ 1.
    pub segment_ms: i64,
    /// Maximum size of each index file (`segment.index.bytes`, 10 MiB); a full index rolls
    /// the segment. ≥ 24 (two time index entries).
    pub segment_index_bytes: u64,
    /// Bytes between sparse index entries (`index.interval.bytes`, 4096). ≥ 0.
    pub index_interval_bytes: i64,
    /// Delete segments whose newest record is older than this (`retention.ms`, 7 days); -1
    /// keeps them forever. Segments whose batches carry no timestamp are never deleted by age
    /// (Kafka falls back to the file's modification time; logbus does not).
    pub retention_ms: i64,
    /// Delete the oldest segments while the log stays at or above this size
    /// (`retention.bytes`); -1 (the default) means no size limit.
    pub retention_bytes: i64,
    /// The largest batch accepted, in bytes (`max.message.bytes`, 1048588). ≥ 61.
    pub max_batch_bytes: u64,
    /// Appended bytes are buffered in memory up to this size before they are written to the
    /// file (64 KiB); 0 writes every batch through at once.
    pub write_buffer_bytes: usize,
    /// Start the device's write-back of every write-out at once (Linux `sync_file_range`;
    /// `true`), so that the next fsync waits only for the tail. Off for a log that leaves
    /// write-back to the OS and seldom or never fsyncs: each start is a system call plus
    /// I/O submission on the appending thread.
    pub start_writeback: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: SEVEN_DAYS_MS,
            segment_index_bytes: 10 << 20,
            index_interval_bytes: 4096,
            retention_ms: SEVEN_DAYS_MS,
            retention_bytes: -1,
            max_batch_bytes: 1_048_588,
            write_buffer_bytes: 64 << 10,
            start_writeback: true,
        }
    }
}

impl LogConfig {
    /// Checks every value against its valid range.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the first bad setting, its value and the valid range.
    pub fn validate(&self) -> Result<()> {
        fn bad(name: &'static str, value: impl fmt::Display, valid: &str) -> Result<()> {
            Err(Error::InvalidConfig {
                name,
                value: value.to_string(),
                valid: valid.to_string(),
            })
        }
        if !(61..=i32::MAX as u64).contains(&self.segment_bytes) {
            return bad(
                "segment_bytes",
                self.segment_bytes,
                "must lie in 61 ..= 2147483647 (one batch header up to 32-bit positions)",
            );
        }
        if self.segment_ms < 1 {
            return bad("segment_ms", self.segment_ms, "must be at least 1");
        }
        if self.segment_index_bytes < 24 || self.segment_index_bytes > i32::MAX as u64 {
            return bad(
                "segment_index_bytes",
                self.segment_index_bytes,
                "must lie in 24 ..= 2147483647",
            );
        }
        if self.index_interval_bytes < 0 {
            return bad(
                "index_interval_bytes",
                self.index_interval_bytes,
                "must be at least 0",
            );
        }
        if self.retention_ms < -1 {
            return bad(
                "retention_ms",
                self.retention_ms,
                "must be -1 (keep forever) or at least 0",
            );
        }
        if self.retention_bytes < -1 {
            return bad(
                "retention_bytes",
                self.retention_bytes,
                "must be -1 (no limit) or at least 0",
            );
        }
        if !(61..=i32::MAX as u64).contains(&self.max_batch_bytes) {
            return bad(
                "max_batch_bytes",
                self.max_batch_bytes,
                "must lie in 61 ..= 2147483647",
            );
        }
        Ok(())
    }

    pub(crate) fn segment_params(&self) -> SegmentParams {
        SegmentParams {
            index_interval_bytes: self.index_interval_bytes.max(0) as u64,
            segment_index_bytes: self.segment_index_bytes,
            write_buffer_bytes: self.write_buffer_bytes,
            max_batch_bytes: self.max_batch_bytes,
            start_writeback: self.start_writeback,
        }
    }
}

/// Everything [`SegmentSet::open`](super::SegmentSet::open) needs besides the directory: the
/// log's settings ([`LogConfig`]), the file system and clock it runs on, and the checkpoints
/// it was last left with. Not a config: two logs of one topic share a `LogConfig`, each has
/// its own checkpoints.
///
/// The default is [`LogConfig::default`] on the real file system ([`FsIo`]) and the system
/// clock, with [`Checkpoints::default`] (revalidate every segment); set only what differs.
///
/// # Examples
///
/// ```
/// use logbus::storage::{Checkpoints, LogConfig, LogSetup, SegmentSet};
///
/// let dir = tempfile::tempdir()?;
/// let options = LogSetup {
///     config: LogConfig { segment_bytes: 4096, ..LogConfig::default() },
///     ..LogSetup::default()
/// };
/// let (log, _) = SegmentSet::open(dir.path(), options.clone())?;
/// let checkpoints = log.close()?;
/// let (_log, report) = SegmentSet::open(dir.path(), LogSetup { checkpoints, ..options })?;
/// assert!(report.is_clean());
///
/// let bad = LogSetup { config: LogConfig { segment_ms: 0, ..LogConfig::default() }, ..LogSetup::default() };
/// assert!(bad.validate().is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct LogSetup {
    /// The log's settings.
    pub config: LogConfig,
    /// The file system every file access goes through.
    pub io: Arc<dyn Io>,
    /// The clock for time-based rolls and retention.
    pub clock: Arc<dyn Clock>,
    /// The recovery point, log start offset and clean-shutdown flag the log was last left
    /// with (what Kafka's checkpoint files and `.kafka_cleanshutdown` hold).
    pub checkpoints: Checkpoints,
}

impl Default for LogSetup {
    fn default() -> Self {
        LogSetup {
            config: LogConfig::default(),
            io: arc_from_std(StdArc::new(FsIo) as StdArc<dyn Io>),
            clock: arc_from_std(StdArc::new(SystemClock) as StdArc<dyn Clock>),
            checkpoints: Checkpoints::default(),
        }
    }
}

impl LogSetup {
    /// Checks the settings (see [`LogConfig::validate`]); the checkpoints are checked against
    /// the directory when it is opened.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the first bad setting, its value and the valid range.
    pub fn validate(&self) -> Result<()> {
        self.config.validate()
    }
}
