//! One partition's log on disk, in Apache Kafka's own segment format.
//!
//! A partition directory holds segments, each three files named by the segment's base offset
//! (20 zero-padded digits): `NNNNNNNNNNNNNNNNNNNN.log` (RecordBatch v2 batches back to back,
//! CRC-32C), `.index` (sparse offset → position) and `.timeindex` (sparse timestamp →
//! offset). Kafka's tools can read what logbus writes, and logbus reads what Kafka writes
//! (uncompressed batches). Opening a directory runs Kafka's log segment recovery
//! (`LogLoader` / `LogSegment.recover`): from the recovery point on, every batch is checked and
//! a torn or corrupt tail is cut, never served.
//!
//! The layer knows nothing of threads or topics. Its modules, bottom up:
//!
//! | module | what |
//! |---|---|
//! | [`io`] | the I/O trait under every file access, and the real file system |
//! | [`fault`] | test support: an in-memory file system with injected faults and power loss |
//! | [`varint`] | zig-zag varints |
//! | [`record_batch`] | the RecordBatch v2 codec |
//! | [`offset_index`], [`time_index`] | the sparse `.index` and `.timeindex` files |
//! | [`segment`] | one segment: append, lookup, recovery of one `.log`, [`scan_log`] |
//! | [`segment_set`] | a partition directory: roll, retention, truncation, durability |
//! | [`recovery`] | opening a directory (Kafka's recovery) and [`verify_dir`] |
//! | [`checkpoint`] | Kafka's checkpoint text files, replaced atomically |
//! | [`verify`] | read-only checks of a partition directory or a directory of them |
//!
//! # Guarantees
//!
//! - What [`SegmentSet::sync`] returned from survives a crash; after a crash the log reopens
//!   as a prefix of what was appended (the [`RecoveryReport`] says where it was cut).
//! - No input bytes — a damaged file, a crafted batch — make logbus panic, loop, read out of
//!   bounds or allocate more than the input holds; they are typed errors
//!   ([`Error::CorruptSegment`](crate::Error::CorruptSegment) with file and byte position) or
//!   documented repairs.
//! - Files are written only through [`Io`], with positioned writes; nothing is memory-mapped.
//!   Index files are not preallocated: they always hold exactly their entries.
//!
//! # Examples
//!
//! ```
//! # use std::{sync::Arc};
//! use logbus::storage::{Checkpoints, FsIo, LogConfig, Record, SegmentSet};
//! use logbus::SystemClock;
//!
//! let dir = tempfile::tempdir()?;
//! let config = LogConfig { segment_bytes: 4096, ..LogConfig::default() };
//! let (mut log, _) = SegmentSet::open(dir.path(), config.clone(), Arc::new(FsIo),
//!     Arc::new(SystemClock), Checkpoints::default())?;
//! for i in 0..100u32 {
//!     log.append(&[Record::new(1_700_000_000_000 + i64::from(i), None, &i.to_be_bytes())])?;
//! }
//! let checkpoints = log.close()?;
//! assert_eq!(checkpoints.recovery_point, 100);
//!
//! let (log, report) = SegmentSet::open(dir.path(), config, Arc::new(FsIo),
//!     Arc::new(SystemClock), checkpoints)?;
//! assert!(report.is_clean());
//! assert!(log.segments().len() > 1);
//! assert_eq!(log.read_records(42, 1)?[0].0, 42);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod checkpoint;
pub mod fault;
mod index_file;
pub mod io;
pub mod offset_index;
pub mod record_batch;
pub mod recovery;
pub mod segment;
pub mod segment_set;
pub mod time_index;
pub mod varint;
pub mod verify;

pub use io::{DirLock, FsIo, Io, IoFile, OpenMode};
pub use record_batch::{Batch, BatchBuilder, BatchHeader, BatchIter, Header, Record};
pub use recovery::{
    verify_dir, verify_dir_bounded, Problem, RecoveryReport, Truncation, VerifyReport,
    VERIFY_MAX_BATCH_BYTES,
};
pub use segment::{scan_log, ScanEnd};
pub use segment_set::{AppendInfo, Checkpoints, LogConfig, SegmentInfo, SegmentSet};
