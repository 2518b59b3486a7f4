//! One partition's log on disk, in Apache Kafka's own segment format.
//!
//! A partition directory holds segments, each three files named by the segment's base offset
//! (20 zero-padded digits): `NNNNNNNNNNNNNNNNNNNN.log` (RecordBatch v2 batches back to back,
//! CRC-32C), `.index` (sparse offset → position) and `.timeindex` (sparse timestamp →
//! offset). Kafka's tools can read what logbus writes, and logbus reads what Kafka writes,
//! uncompressed or compressed with any of Kafka's codecs (gzip, snappy, lz4, zstd: see
//! [`record_batch`]'s "Compression"). Opening a directory runs Kafka's log segment recovery
//! (`LogLoader` / `LogSegment.recover`): from the recovery point on, every batch is checked and
//! a torn or corrupt tail is cut, never served.
//!
//! The layer knows nothing of threads or topics. Its modules, bottom up:
//!
//! | module | what |
//! |---|---|
//! | [`io`] | the I/O trait under every file access, and the real file system |
//! | `fault` | test support (feature `test-util`): an in-memory file system with injected faults and power loss |
//! | [`varint`] | zig-zag varints |
//! | [`record_batch`] | the RecordBatch v2 codec |
//! | [`offset_index`], [`time_index`] | the sparse `.index` and `.timeindex` files |
//! | [`file_names`] | segment file names (`NNNNNNNNNNNNNNNNNNNN.log`) and sorting a directory's names |
//! | [`scan`] | walking a `.log`'s batches ([`scan_log`]) and Kafka's offset rules for a segment |
//! | [`segment`] | one segment: append, lookup, recovery of one `.log` |
//! | [`segment_set`] | a partition directory: roll, retention, truncation, durability |
//! | [`recovery`] | opening a directory: Kafka's `LogLoader` (completing a compaction's swap) |
//! | [`cleaner`] | log compaction: Kafka's `Cleaner` over a segment set, and its swap protocol |
//! | [`checkpoint`] | Kafka's checkpoint text files, replaced atomically |
//! | [`config`] | a log's settings ([`LogConfig`]) and what opening one takes ([`LogSetup`]) |
//! | [`verify`] | read-only checks of a partition directory ([`verify_dir`]) or a directory of them |
//!
//! # Durability contract
//!
//! - **Visible, then durable.** [`SegmentSet::append`] makes records visible to readers of the
//!   set. Bytes reach the operating system when the write buffer fills, on
//!   [`write_to_files`](SegmentSet::write_to_files), [`fsync`](SegmentSet::fsync), a roll,
//!   [`close`](SegmentSet::close) and drop, so a killed process loses at most its write
//!   buffer; only an fsync makes them survive a power loss.
//! - **The recovery point is the promise.** Every record below
//!   [`SegmentSet::recovery_point`] is durable. `fsync` fsyncs every segment written since the
//!   last one and moves the recovery point to the log end; a roll does the same before the new
//!   segment takes writes; `close` also fsyncs the active segment's indexes and returns
//!   [`Checkpoints`] with `clean_shutdown` set. When `fsync` or `close` returns `Ok`, everything
//!   appended before the call is durable.
//! - **A failed write or fsync** takes the set offline ([`Error::LogOffline`](crate::Error));
//!   nothing is promised about what was not yet durable. Reopen it. On Linux a failed fsync
//!   may already have discarded the pages it could not write: logbus cannot see that, and
//!   only what an fsync that returned `Ok` covered is promised.
//! - **An unclean reopen** — any open without `clean_shutdown` (after a kill, a power loss, a
//!   failed fsync, a drop without `close`) — revalidates every segment from the one holding
//!   the checkpointed recovery point on, cuts the log at the first torn or corrupt batch
//!   (deleting every later segment), and fsyncs every segment it revalidated before it
//!   returns: the recovery point it reports, the log end, is then true. Records that an earlier
//!   life appended but never synced, and that survived in the page cache, are kept and become
//!   durable at that open. The recovery point handed to `open` must be one the log reported:
//!   segments wholly below it are trusted, not re-read (as in Kafka).
//! - **Prefix.** A roll fsyncs the segments before it, so a crash never keeps a later segment
//!   while losing an earlier one's tail: after any crash the log is a prefix of what was
//!   appended, and at least everything below the last recovery point reported.
//! - **One writer per directory.** An open set holds an exclusive lock on `<dir>/.lock`
//!   ([`Io::lock_dir`]); a second open, in this process or another, fails with
//!   [`Error::DirectoryLocked`](crate::Error::DirectoryLocked). The lock goes with `close`, drop
//!   or the process, on every platform std's file locks support.
//!
//! # Limits
//!
//! - **Segments** hold at most 2^31 − 1 bytes (index positions are 32-bit; Kafka's
//!   `segment.bytes` limit): `segment_bytes` cannot exceed it, appends roll before it, and a
//!   larger `.log` found on open is refused
//!   ([`Error::SegmentTooLarge`](crate::Error::SegmentTooLarge)), untouched.
//! - **Offsets** lie in 0 ..= 2^63 − 2 (Kafka's are signed 64-bit, and the offset after the
//!   last must exist); a file named with a larger base offset is refused
//!   ([`Error::NotASegment`](crate::Error::NotASegment)).
//! - **Gaps.** Offsets increase strictly across batches and segments but may jump, as Kafka's
//!   compaction, transactions and replicas leave them (and as
//!   [`SegmentSet::append_batch`] may append). Recovery and [`verify_dir`] keep gaps; only
//!   corrupt or torn bytes are cut. A read at an offset inside a gap returns the records after
//!   it. A batch's base offset lies outside its CRC (Kafka's format): a flipped bit that
//!   raises the last batch's base offset reads as a gap.
//! - **Memory** is bounded by configuration, not by what files claim: a read holds at most
//!   `max_batch_bytes` of batch (a larger valid batch is
//!   [`Error::BatchTooLarge`](crate::Error::BatchTooLarge), never cut; a larger invalid one is
//!   corruption, found by a streaming CRC), an index at most `segment_index_bytes`;
//!   [`verify`] and `logbus dump` hold batches up to 16 MiB ([`VERIFY_MAX_BATCH_BYTES`]).
//! - **BatchRecords** are validated on append and on recovery (structure, and offset deltas
//!   increasing inside `[0, lastOffsetDelta]`); a compressed batch's records are
//!   decompressed for that, once per batch, never to more than
//!   [`MAX_DECOMPRESSED_BATCH`](record_batch::MAX_DECOMPRESSED_BATCH) (a stream that does not
//!   decode, or decompresses past it, is [`Error::Corrupt`](crate::Error::Corrupt) at the
//!   stream's first byte: recovery cuts the log there). Uncompressed batches are read in
//!   place (zero-copy). Only a codec id Kafka does not define (5–7), or one whose cargo
//!   feature is off, is [`Error::UnsupportedCompression`](crate::Error); such a batch is kept
//!   on its CRC.
//!   [`SegmentSet::read_records`] skips transaction control records, as Kafka's consumers do.
//! - **Files** are opened only if regular (no symlinks, FIFOs, devices:
//!   [`Error::NotRegularFile`](crate::Error::NotRegularFile)). A compaction's leftovers
//!   are finished as Kafka's `LogLoader` does: a `.cleaned` file is removed, a whole `.swap`
//!   file replaces the segments it covers (see [`cleaner`] and [`recovery`]).
//! - No input bytes make logbus panic, loop or read out of bounds; they are typed errors
//!   ([`Error::Corrupt`](crate::Error::Corrupt) with file and byte position) or
//!   reported repairs ([`RecoveryReport`]). Files are written only through [`Io`], with
//!   positioned writes; nothing is memory-mapped, and index files hold exactly their entries.
//!
//! # Examples
//!
//! ```
//! use logbus::storage::{LogConfig, LogSetup, BatchRecord, SegmentSet};
//!
//! let dir = tempfile::tempdir()?;
//! let config = LogConfig { segment_bytes: 4096, ..LogConfig::default() };
//! let options = LogSetup { config, ..LogSetup::default() };
//! let (mut log, _) = SegmentSet::open(dir.path(), options.clone())?;
//! for i in 0..100u32 {
//!     log.append(&[BatchRecord::new(1_700_000_000_000 + i64::from(i), None, &i.to_be_bytes())])?;
//! }
//! let checkpoints = log.close()?;
//! assert_eq!(checkpoints.recovery_point, 100);
//!
//! let (log, report) = SegmentSet::open(dir.path(), LogSetup { checkpoints, ..options })?;
//! assert!(report.is_clean());
//! assert!(log.segments().len() > 1);
//! assert_eq!(log.read_records(42, 1)?[0].0, 42);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod checkpoint;
pub mod cleaner;
pub mod config;
#[cfg(any(test, feature = "test-util"))]
pub mod fault;
pub mod file_names;
mod index_file;
pub mod io;
pub mod offset_index;
pub mod producer_snapshot;
pub mod record_batch;
pub mod recovery;
pub mod scan;
pub mod segment;
pub mod segment_set;
pub mod time_index;
pub mod txn_index;
pub mod varint;
pub mod verify;

pub use cleaner::{CleanConfig, CleanStats, DeletedFiles, DirtyInfo};
pub use config::{LogConfig, LogSetup};
pub use io::{DirLock, FsIo, Io, IoFile, OpenMode};
pub use record_batch::{Batch, BatchBuilder, BatchHeader, BatchIter, BatchRecord, Header};
pub use recovery::{RecoveryReport, Truncation};
pub use scan::{scan_log, ScanEnd};
pub use segment_set::{AppendInfo, Checkpoints, SegmentInfo, SegmentSet};
pub use verify::{
    verify_dir, verify_dir_bounded, Problem, ProblemKind, VerifyReport, VERIFY_MAX_BATCH_BYTES,
};
