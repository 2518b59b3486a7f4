//! One partition's log: the ordered segments of a partition directory (Kafka's `LocalLog`).
//!
//! The last segment is the *active* one and takes every append; a new one is rolled when the
//! active segment would exceed `segment_bytes`, is older than `segment_ms` (counted from its
//! first batch's timestamp, or from the clock when batches carry none), has a full index, or
//! cannot express the next offset as a 32-bit delta. Retention deletes whole segments, oldest
//! first, by age and by total size, only below a limit offset (the high watermark), and never
//! the active segment without rolling a new one first.
//!
//! # Durability
//!
//! [`append`](SegmentSet::append) makes records visible to readers of this set; bytes reach
//! the operating system when the write buffer fills, on
//! [`write_to_files`](SegmentSet::write_to_files), on [`fsync`](SegmentSet::fsync), on a roll and when the set is dropped (a killed process loses at
//! most the write buffer); they are durable only after an fsync. [`fsync`](SegmentSet::fsync)
//! fsyncs every segment written since the last sync (the log; the indexes too, except the
//! active segment's, which recovery rebuilds after an unclean shutdown and `close` fsyncs)
//! and then advances the [`recovery_point`](SegmentSet::recovery_point) to the log end; a roll
//! fsyncs every segment, the rolled one's indexes included, before the new one takes writes
//! (see [`roll`](SegmentSet::roll)), so a crash keeps a prefix of what was appended. New files'
//! directory entries are fsynced when they are created, renamed or removed. After an I/O error
//! in a write path the set refuses further writes ([`Error::LogOffline`]): reopen it, and
//! recovery keeps everything that was durable, and fsyncs what it recovered (see the
//! [storage docs](super#durability-contract) for what an unclean reopen implies). The
//! directory is locked while the set is open: one writer per directory.
//!
//! # Examples
//!
//! ```
//! use logbus::storage::{LogSetup, BatchRecord, SegmentSet};
//!
//! let dir = tempfile::tempdir()?;
//! let (mut log, _report) = SegmentSet::open(dir.path(), LogSetup::default())?;
//! let info = log.append(&[BatchRecord::new(1_700_000_000_000, Some(b"k"), b"hello")])?;
//! assert_eq!(info.base_offset, 0);
//! log.fsync()?;
//! let records = log.read_records(0, 1 << 20)?;
//! assert_eq!(records[0].1.value.as_deref(), Some(&b"hello"[..]));
//! assert_eq!(log.offset_for_timestamp(1_600_000_000_000)?, Some((0, 1_700_000_000_000)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::{Path, PathBuf};

pub use super::config::{LogConfig, LogSetup, SEVEN_DAYS_MS};
use super::file_names::MAX_OFFSET;
use super::io::{DirLock, Io};
use super::record_batch::{
    next_batch_extent, Batch, BatchBuilder, BatchHeader, BatchIter, BatchRecord, Compression,
    Extent,
};
use super::recovery::{self, RecoveryReport};
use super::segment::Segment;
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::sync::Arc;

/// What a partition log is opened with: the two offsets Kafka keeps in the checkpoint files
/// `recovery-point-offset-checkpoint` and `log-start-offset-checkpoint`, and whether the last
/// shutdown was clean (Kafka's `.kafka_cleanshutdown` marker).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checkpoints {
    /// Everything below this offset was durable at the last checkpoint: recovery revalidates
    /// from the segment holding it onward (0, the default, revalidates everything).
    pub recovery_point: u64,
    /// The first offset still held (raised by retention; 0 by default).
    pub log_start_offset: u64,
    /// Set only when [`SegmentSet::close`] returned these checkpoints and nothing has written
    /// to the directory since: then no segment is revalidated on open (only segments whose
    /// indexes are missing or damaged, or whose tail does not parse, are recovered). Whoever
    /// persists this flag must clear it when the log is opened again, as Kafka deletes its
    /// clean-shutdown marker at startup.
    pub clean_shutdown: bool,
}

/// Where an append landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    /// The first offset of the batch.
    pub base_offset: u64,
    /// The last offset of the batch.
    pub last_offset: u64,
    /// The base offset of the segment holding it.
    pub segment_base_offset: u64,
    /// Its byte position in that segment's `.log`.
    pub position: u64,
    /// The batch's largest timestamp.
    pub max_timestamp: i64,
}

/// A summary of one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentInfo {
    /// The segment's base offset (its file name).
    pub base_offset: u64,
    /// The offset after its last batch.
    pub next_offset: u64,
    /// Bytes in its `.log`.
    pub size: u64,
    /// Its largest timestamp (-1 when none).
    pub max_timestamp: i64,
}

/// One partition's log on disk. See the [module docs](self).
#[derive(Debug)]
pub struct SegmentSet {
    pub(super) dir: PathBuf,
    pub(super) io: Arc<dyn Io>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) config: LogConfig,
    /// Ordered by base offset; never empty; the last is active. Each segment's offsets lie in
    /// `[base_offset, next segment's base_offset)`.
    pub(super) segments: Vec<Segment>,
    pub(super) log_start_offset: u64,
    pub(super) recovery_point: u64,
    pub(super) offline: bool,
    builder: Option<BatchBuilder>,
    /// The codec [`append`](SegmentSet::append) compresses its batches with.
    compression: Compression,
    /// Written into the batches [`append`](SegmentSet::append) builds (0 until replication
    /// sets it).
    partition_leader_epoch: i32,
    /// The open transactions, from the batch headers (`txn_index`).
    txns: super::txn_index::OpenTxns,
    /// Files a cleaning pass renamed `.deleted`, to be removed by whoever takes them
    /// ([`take_deleted_files`](SegmentSet::take_deleted_files)), without the set's lock.
    pub(super) deleted_files: Vec<PathBuf>,
    /// The directory's lock (one writer per directory), released when the set is dropped:
    /// declared last, so it outlives the flush `Drop` makes.
    _lock: Box<dyn DirLock>,
}

impl SegmentSet {
    /// Opens (creating if needed) the partition directory `dir` with `options` (its settings,
    /// file system, clock and checkpoints), running Kafka's log recovery from
    /// `options.checkpoints.recovery_point` onward (see the `recovery` module).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for bad settings ([`LogSetup::validate`]); [`Error::DirectoryLocked`] when another
    /// open log (in this process or another) holds the directory — the lock, std's file lock on
    /// `.lock` with [`FsIo`](super::FsIo), is held until the set is closed or dropped, and
    /// dies with the process; [`Error::NotASegment`] for a segment name above `i64::MAX`;
    /// [`Error::NotRegularFile`] for a segment file that is a symlink, FIFO or device;
    /// [`Error::SegmentTooLarge`] for a `.log` over 2^31 − 1 bytes; [`Error::BatchTooLarge`]
    /// for a valid batch over `max_batch_bytes`; [`Error::Io`] when the directory cannot be
    /// read or repaired. Corruption is repaired, not an error: the returned
    /// [`RecoveryReport`] says what was cut and why.
    pub fn open(dir: impl Into<PathBuf>, options: LogSetup) -> Result<(Self, RecoveryReport)> {
        options.validate()?;
        let LogSetup {
            config,
            io,
            clock,
            checkpoints,
        } = options;
        let dir = dir.into();
        let loaded = recovery::load(&*io, &dir, &config, clock.now_ms(), checkpoints)?;
        let mut set = SegmentSet {
            dir,
            io,
            clock,
            config,
            segments: loaded.segments,
            log_start_offset: loaded.report.log_start_offset,
            recovery_point: loaded.report.recovery_point,
            offline: false,
            builder: None,
            compression: Compression::None,
            partition_leader_epoch: 0,
            txns: Default::default(),
            deleted_files: Vec::new(),
            _lock: loaded.lock,
        };
        set.rebuild_txn_index()?;
        Ok((set, loaded.report))
    }

    /// Rebuilds the open transactions from the batch headers of the whole log and makes
    /// every segment's transaction index hold exactly the aborted transactions whose
    /// marker it holds (`txn_index` module docs).
    fn rebuild_txn_index(&mut self) -> Result<()> {
        use super::txn_index::{TxnEvent, TxnIndexEntry, ENTRY_SIZE, TXN_INDEX_SUFFIX};
        let mut txns = super::txn_index::OpenTxns::default();
        let mut entries: std::collections::BTreeMap<u64, Vec<TxnIndexEntry>> = Default::default();
        let bases: Vec<u64> = self.segments.iter().map(Segment::base_offset).collect();
        let end = self.log_end_offset();
        let mut at = self.log_start_offset;
        let mut bytes = Vec::new();
        // Per segment, whether a batch with a producer id was seen.
        let mut producers = vec![false; bases.len()];
        while at < end {
            // A batch that does not read back (a corrupt segment below the recovery point)
            // ends the scan: reads report it where they meet it.
            if self.read_into(at, 1 << 20, &mut bytes).is_err() {
                break;
            }
            let mut next = at;
            for batch in BatchIter::new(&bytes) {
                let Ok(batch) = batch else { break };
                let h = *batch.header();
                next = next.max(h.next_offset());
                let seg = bases
                    .partition_point(|&b| b <= h.base_offset)
                    .saturating_sub(1);
                producers[seg] |= h.producer_id >= 0;
                if let TxnEvent::Aborted(e) =
                    txns.apply(&h, || super::txn_index::batch_control_type(&batch))
                {
                    entries.entry(bases[seg]).or_default().push(e);
                }
            }
            if next <= at {
                break;
            }
            at = next;
        }
        self.txns = txns;
        // A segment the scan read whole is known; one it did not reach, or whose first
        // batches lie below the log start (not read), stays unknown.
        let start = self.log_start_offset;
        for (segment, holds) in self.segments.iter_mut().zip(producers) {
            let whole = segment.base_offset() >= start && segment.next_offset() <= at;
            if whole || segment.is_empty() {
                segment.set_holds_producer_batches(holds);
            }
        }
        for &base in &bases {
            let path = self
                .dir
                .join(super::file_names::file_name(base, TXN_INDEX_SUFFIX));
            let want: Vec<u8> = entries
                .get(&base)
                .map(|v| v.iter().flat_map(|e| e.encode()).collect())
                .unwrap_or_default();
            let err = |e: std::io::Error| Error::Io {
                context: format!("rebuilding {}", path.display()),
                source: e,
            };
            let exists = self.io.exists(&path).map_err(err)?;
            if !exists && want.is_empty() {
                continue;
            }
            let f = self
                .io
                .open(&path, super::io::OpenMode::Create)
                .map_err(err)?;
            let len = f.len().map_err(err)?;
            let mut have = vec![0; len as usize];
            f.read_exact_at(&mut have, 0).map_err(err)?;
            if have != want {
                f.set_len(0).map_err(err)?;
                f.write_all_at(&want, 0).map_err(err)?;
                f.sync_all().map_err(err)?;
            }
            debug_assert_eq!(want.len() % ENTRY_SIZE, 0);
        }
        Ok(())
    }

    /// The partition directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The configuration.
    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// The base offset of the active (last) segment: it changes at each roll.
    pub fn active_base_offset(&self) -> u64 {
        self.segments
            .last()
            .map_or(self.log_start_offset, Segment::base_offset)
    }

    /// The I/O the set's files go through.
    pub(crate) fn io(&self) -> &dyn Io {
        &*self.io
    }

    /// The first offset held.
    pub fn log_start_offset(&self) -> u64 {
        self.log_start_offset
    }

    /// The offset the next append gets (one past the last offset held).
    pub fn log_end_offset(&self) -> u64 {
        // The list is empty only after a failed truncation took the log offline.
        self.segments
            .last()
            .map_or(self.log_start_offset, Segment::next_offset)
    }

    /// Everything below this offset is durable (what `recovery-point-offset-checkpoint`
    /// should hold for this partition).
    pub fn recovery_point(&self) -> u64 {
        self.recovery_point
    }

    /// Total bytes of every segment's `.log`.
    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(Segment::size).sum()
    }

    /// Whether an earlier I/O error took the log offline.
    pub fn is_offline(&self) -> bool {
        self.offline
    }

    /// A summary of every segment, oldest first.
    pub fn segments(&self) -> Vec<SegmentInfo> {
        self.segments
            .iter()
            .map(|s| SegmentInfo {
                base_offset: s.base_offset(),
                next_offset: s.next_offset(),
                size: s.size(),
                max_timestamp: s.max_timestamp(),
            })
            .collect()
    }

    /// The active segment. Only called on an online log, whose list is never empty.
    fn active(&self) -> &Segment {
        let last = self.segments.len() - 1;
        &self.segments[last]
    }

    pub(super) fn check_online(&self) -> Result<()> {
        if self.offline {
            Err(Error::LogOffline {
                dir: self.dir.clone(),
            })
        } else {
            Ok(())
        }
    }

    /// Runs a write-path step; any error takes the log offline.
    pub(super) fn guarded<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.check_online()?;
        let r = f(self);
        if r.is_err() {
            self.offline = true;
        }
        r
    }

    /// Sets the partition leader epoch written into the batches [`append`](SegmentSet::append)
    /// builds from now on (0 by default; replication sets the leader's epoch).
    pub fn set_partition_leader_epoch(&mut self, epoch: i32) {
        self.partition_leader_epoch = epoch;
    }

    /// Compresses the batches [`append`](SegmentSet::append) builds from now on with
    /// `codec` (none by default); batches appended already encoded keep theirs.
    ///
    /// # Errors
    ///
    /// [`Error::UnsupportedCompression`] for a codec this build lacks.
    pub fn set_compression(&mut self, codec: Compression) -> Result<()> {
        BatchBuilder::new(0).set_compression(codec)?;
        self.compression = codec;
        Ok(())
    }

    /// Appends `records` as one batch at the log end offset.
    ///
    /// # Errors
    ///
    /// Errors in the input leave the log usable: [`Error::RecordTooLarge`] when the batch
    /// exceeds `max_batch_bytes` or `segment_bytes`, [`Error::EmptyBatch`] for no records.
    /// I/O errors ([`Error::Io`]) take the log offline ([`Error::LogOffline`] thereafter).
    pub fn append(&mut self, records: &[BatchRecord]) -> Result<AppendInfo> {
        self.check_online()?;
        if let Some(info) = self.append_in_place(records)? {
            return Ok(info);
        }
        let mut builder = self.builder.take().unwrap_or_else(|| BatchBuilder::new(0));
        builder.clear(self.log_end_offset());
        builder.set_partition_leader_epoch(self.partition_leader_epoch);
        // Checked by `set_compression`.
        let _ = builder.set_compression(self.compression);
        let result = records
            .iter()
            .try_for_each(|r| builder.append_record(r))
            .and_then(|()| self.append_encoded(builder.finish()));
        self.builder = Some(builder);
        result
    }

    /// The common case of [`append`](SegmentSet::append) without a copy: the batch is
    /// encoded straight into the active segment's write buffer. Returns `None`, having changed
    /// nothing, when the batch needs the general path: no records, records too large to
    /// stage in the write buffer, a batch over the size limits, or a roll due.
    fn append_in_place(&mut self, records: &[BatchRecord]) -> Result<Option<AppendInfo>> {
        // Staging a batch far larger than the write buffer would leave the buffer that large.
        let payload = records.iter().fold(0usize, |sum, r| {
            let headers = r.headers.iter().fold(0usize, |h, x| {
                h.saturating_add(x.key.len())
                    .saturating_add(x.value.as_ref().map_or(0, Vec::len))
            });
            sum.saturating_add(r.key.as_ref().map_or(0, Vec::len))
                .saturating_add(r.value.as_ref().map_or(0, Vec::len))
                .saturating_add(headers)
        });
        if records.is_empty() || payload > self.config.write_buffer_bytes {
            return Ok(None);
        }
        let base = self.log_end_offset();
        let max = self.config.max_batch_bytes.min(self.config.segment_bytes);
        let (segment_bytes, segment_ms) = (self.config.segment_bytes, self.config.segment_ms);
        let epoch = self.partition_leader_epoch;
        let mut builder = self.builder.take().unwrap_or_else(|| BatchBuilder::new(0));
        builder.set_partition_leader_epoch(epoch);
        let _ = builder.set_compression(self.compression);
        let clock = &self.clock;
        let Some(active) = self.segments.last_mut() else {
            self.builder = Some(builder);
            return Ok(None);
        };
        let position = active.size();
        let staged = active.stage(|out| builder.encode_onto(out, base, records));
        self.builder = Some(builder);
        let (header, size) = staged?;
        let last = header.last_offset();
        let keep = size <= max
            && last < MAX_OFFSET
            && !active.roll_due(
                position,
                segment_bytes,
                segment_ms,
                size,
                header.max_timestamp,
                last,
                || clock.now_ms(),
            );
        if !keep {
            active.unstage(size);
            return Ok(None);
        }
        let info = AppendInfo {
            base_offset: base,
            last_offset: last,
            segment_base_offset: active.base_offset(),
            position,
            max_timestamp: header.max_timestamp,
        };
        self.guarded(|set| {
            let segments = set.segments.len();
            set.segments[segments - 1].commit_staged(size, &header)
        })?;
        Ok(Some(info))
    }

    /// Appends an already encoded batch (e.g. copied from a leader). Its base offset must be
    /// at or above the log end offset; the offsets between are left as a gap (as Kafka's
    /// compaction, transactions and replicas leave them), which recovery and `verify_dir`
    /// keep. A read at an offset inside a gap returns the records after it.
    ///
    /// # Errors
    ///
    /// [`Error::Corrupt`] when `batch` is not one valid batch (CRC, structure, records),
    /// [`Error::OffsetBelowLogEnd`] for a base offset below the log end, the errors of
    /// [`append`](SegmentSet::append) otherwise.
    pub fn append_batch(&mut self, batch: &[u8]) -> Result<AppendInfo> {
        self.check_online()?;
        let decoded = Batch::decode(batch)?;
        if decoded.size() != batch.len() as u64 {
            return Err(Error::Corrupt {
                file: None,
                position: decoded.size(),
                reason: crate::error::Corruption::TrailingBytes {
                    count: batch.len() as u64 - decoded.size(),
                },
            });
        }
        decoded.validate_records()?;
        let h = decoded.header();
        if h.base_offset < self.log_end_offset() {
            return Err(Error::OffsetBelowLogEnd {
                base_offset: h.base_offset,
                log_end_offset: self.log_end_offset(),
            });
        }
        self.append_encoded(batch)
    }

    /// Appends the batch `builder` holds at the log end offset (its base offset is set to
    /// it), without decoding it again: for writers that built the batch themselves, records
    /// validated by construction.
    ///
    /// # Errors
    ///
    /// As [`append`](SegmentSet::append).
    pub fn append_built(&mut self, builder: &mut BatchBuilder) -> Result<AppendInfo> {
        self.check_online()?;
        builder.set_base_offset(self.log_end_offset());
        builder.set_partition_leader_epoch(self.partition_leader_epoch);
        self.append_encoded(builder.finish())
    }

    fn append_encoded(&mut self, bytes: &[u8]) -> Result<AppendInfo> {
        let header = BatchHeader::parse(bytes)?;
        if header.records_count <= 0 || header.last_offset_delta < 0 {
            return Err(Error::EmptyBatch {
                records_count: header.records_count,
                last_offset_delta: header.last_offset_delta,
            });
        }
        let size = bytes.len() as u64;
        let max = self.config.max_batch_bytes.min(self.config.segment_bytes);
        if size > max {
            return Err(Error::RecordTooLarge {
                what: "record batch",
                size,
                max,
            });
        }
        // `last_offset` saturates at MAX_OFFSET, and the offset after it must exist.
        let last = header.last_offset();
        if last >= MAX_OFFSET {
            return Err(Error::OffsetOutOfRange {
                topic: None,
                partition: None,
                requested: last,
                start: self.log_start_offset,
                end: MAX_OFFSET,
            });
        }
        self.guarded(|set| {
            let active = set.active();
            let roll = active.roll_due(
                active.size(),
                set.config.segment_bytes,
                set.config.segment_ms,
                size,
                header.max_timestamp,
                last,
                || set.clock.now_ms(),
            );
            if roll {
                set.roll_at(header.base_offset)?;
            }
            let segments = set.segments.len();
            let active = &mut set.segments[segments - 1];
            let position = active.size();
            active.append(bytes, &header)?;
            let base = active.base_offset();
            if let super::txn_index::TxnEvent::Aborted(e) = set
                .txns
                .apply(&header, || super::txn_index::control_type(bytes))
            {
                super::txn_index::append(&*set.io, &set.dir, base, &e)?;
            }
            let active = &set.segments[segments - 1];
            Ok(AppendInfo {
                base_offset: header.base_offset,
                last_offset: last,
                segment_base_offset: active.base_offset(),
                position,
                max_timestamp: header.max_timestamp,
            })
        })
    }

    /// Starts a new active segment at the log end offset (no-op when the active segment is
    /// empty). The segments written so far are fsynced first, which advances the recovery
    /// point to the log end offset.
    ///
    /// # Errors
    ///
    /// I/O errors, which take the log offline.
    pub fn roll(&mut self) -> Result<()> {
        let at = self.log_end_offset();
        self.guarded(|set| set.roll_at(at))
    }

    fn roll_at(&mut self, base: u64) -> Result<()> {
        let base = base.max(self.log_end_offset());
        if self.active().is_empty() {
            if self.active().base_offset() == base {
                return Ok(());
            }
            // An empty active segment is replaced rather than left behind empty.
            let empty: Vec<Segment> = self.segments.drain(self.segments.len() - 1..).collect();
            recovery::delete_segment_files(&*self.io, &self.dir, empty)?;
            let segment = self.create_segment(base)?;
            self.segments.push(segment);
            self.log_start_offset = self.log_start_offset.max(self.segments[0].base_offset());
            return self.sync_dir();
        }
        let last = self.segments.len() - 1;
        self.segments[last].on_roll()?;
        // Every segment is durable before a new one takes writes, as Kafka flushes a segment
        // it rolls (there asynchronously). Offsets may legally jump between segments, so
        // recovery could not tell a later segment that survived a crash while an earlier
        // one's tail was lost from a gap: this ordering makes that crash impossible, and the
        // log after any crash a prefix of what was appended. One fsync per `segment_bytes`.
        self.sync_segments(true)?;
        let segment = self.create_segment(base)?;
        self.segments.push(segment);
        self.sync_dir()
    }

    /// A new, empty segment at `base` with this log's settings (not yet in `segments`).
    fn create_segment(&self, base: u64) -> Result<Segment> {
        Segment::create(
            &*self.io,
            &self.dir,
            base,
            self.config.segment_params(),
            self.clock.now_ms(),
        )
    }

    pub(super) fn sync_dir(&self) -> Result<()> {
        self.io
            .sync_dir(&self.dir)
            .map_err(|e| Error::io(format!("syncing directory {}", self.dir.display()), e))
    }

    /// Writes buffered bytes to the segment files, handing them to the operating system:
    /// safe from a crash of the process, not from a power loss (see
    /// [`fsync`](SegmentSet::fsync)).
    ///
    /// # Errors
    ///
    /// I/O errors, which take the log offline.
    pub fn write_to_files(&mut self) -> Result<()> {
        self.guarded(|set| set.segments.iter_mut().try_for_each(Segment::flush))
    }

    /// Fsyncs: makes everything appended so far durable and advances the recovery point to
    /// the log end offset.
    ///
    /// # Errors
    ///
    /// I/O errors (a failed fsync included), which take the log offline: after a failed fsync
    /// nothing is known about what reached the disk, and only recovery can tell.
    pub fn fsync(&mut self) -> Result<()> {
        self.guarded(|set| set.sync_segments(false))
    }

    /// [`fsync`](SegmentSet::fsync)'s work, not guarded; with `rolling`, the active segment's
    /// indexes too (it is about to stop being active, and the recovery point to pass it, after
    /// which nothing rebuilds them).
    fn sync_segments(&mut self, rolling: bool) -> Result<()> {
        let active = self.segments.len() - 1;
        for (i, segment) in self.segments.iter_mut().enumerate() {
            let indexes = rolling || i != active;
            if segment.is_unsynced(indexes) {
                segment.sync(indexes)?;
            }
        }
        self.recovery_point = self.log_end_offset();
        Ok(())
    }

    /// Reads whole batches starting with the one holding `offset`, from one segment: at least
    /// one batch, more while the total stays within `max_bytes`. Returns no bytes at the log
    /// end offset.
    ///
    /// The batches may begin below `offset` (a batch is never split); decode them with
    /// [`BatchIter`].
    ///
    /// # Errors
    ///
    /// [`Error::OffsetOutOfRange`] outside `[log start, log end]`; [`Error::Corrupt`]
    /// when a header on the way is unreadable; I/O errors.
    pub fn read(&self, offset: u64, max_bytes: usize) -> Result<Vec<u8>> {
        let mut bytes = Vec::new();
        self.read_into(offset, max_bytes, &mut bytes)?;
        Ok(bytes)
    }

    /// [`read`](SegmentSet::read) into `bytes` (replacing its contents), reusing its
    /// allocation: for readers that read repeatedly.
    ///
    /// # Errors
    ///
    /// As [`read`](SegmentSet::read).
    pub fn read_into(&self, offset: u64, max_bytes: usize, bytes: &mut Vec<u8>) -> Result<()> {
        let Some((path, pos)) = self.read_raw_into(offset, max_bytes, bytes)? else {
            bytes.clear();
            return Ok(());
        };
        // Serve only batches whose CRC holds; a bad first batch is the caller's error.
        let mut keep = 0u64;
        for batch in BatchIter::with_base(bytes, pos) {
            match batch {
                Ok(b) => keep += b.size(),
                Err(e) if keep == 0 => return Err(e.in_file(path, 0)),
                Err(_) => break,
            }
        }
        bytes.truncate(keep as usize);
        Ok(())
    }

    /// Whole batches (cut by their length fields, not yet checked) from the one holding
    /// `offset`, with the segment file and the position they start at.
    fn read_raw(&self, offset: u64, max_bytes: usize) -> Result<Option<(Vec<u8>, &Path, u64)>> {
        let mut bytes = Vec::new();
        Ok(self
            .read_raw_into(offset, max_bytes, &mut bytes)?
            .map(|(path, pos)| (bytes, path, pos)))
    }

    /// [`read_raw`](Self::read_raw) into `bytes`.
    fn read_raw_into(
        &self,
        offset: u64,
        max_bytes: usize,
        bytes: &mut Vec<u8>,
    ) -> Result<Option<(&Path, u64)>> {
        let end = self.log_end_offset();
        if offset < self.log_start_offset || offset > end {
            return Err(Error::OffsetOutOfRange {
                topic: None,
                partition: None,
                requested: offset,
                start: self.log_start_offset,
                end,
            });
        }
        let first = self
            .segments
            .partition_point(|s| s.base_offset() <= offset)
            .saturating_sub(1);
        for segment in &self.segments[first..] {
            let Some((pos, header)) = segment.find_batch(offset)? else {
                continue; // `offset` lies in a gap after this segment's batches
            };
            let available = segment.size() - pos;
            if header.size() > self.config.max_batch_bytes {
                // Below the recovery point nothing was re-read on open: a hostile length
                // field must not size an allocation.
                return Err(Error::BatchTooLarge {
                    file: segment.log_path().to_path_buf(),
                    position: pos,
                    size: header.size(),
                    max: self.config.max_batch_bytes,
                });
            }
            let want = (max_bytes as u64).min(available).max(header.size());
            // Only bytes beyond the buffer's current length are zeroed (the read overwrites
            // all of them).
            bytes.resize(want as usize, 0);
            segment.read_exact_at(bytes, pos)?;
            let mut keep = 0usize;
            while let Extent::Batch(size) = next_batch_extent(&bytes[keep..]) {
                keep += size;
            }
            // The first batch is always whole (its header gave the size); if its length field
            // is bad, validation reports it.
            let len = keep.max(header.size() as usize).min(bytes.len());
            bytes.truncate(len);
            return Ok(Some((segment.log_path(), pos)));
        }
        Ok(None)
    }

    /// The records at and after `offset`: from the batches [`read`](SegmentSet::read)
    /// returns, or the next ones when those hold none (an offset inside a gap, a batch whose
    /// records were compacted away, a transaction marker), so a reader always makes progress;
    /// empty only when no record lies between `offset` and the log end.
    ///
    /// Transaction control records (commit and abort markers: batches with the control
    /// attribute) are not returned, as Kafka's consumers never hand them to the application;
    /// [`read`](SegmentSet::read) returns their batches as stored.
    ///
    /// # Errors
    ///
    /// As [`read`](SegmentSet::read), plus [`Error::Corrupt`] for a malformed record or
    /// compressed stream and [`Error::UnsupportedCompression`] for a batch of a codec this
    /// build cannot read (compressed batches are decompressed, once per batch).
    pub fn read_records(&self, offset: u64, max_bytes: usize) -> Result<Vec<(u64, BatchRecord)>> {
        let end = self.log_end_offset();
        let mut from = offset;
        loop {
            let Some((bytes, path, pos)) = self.read_raw(from, max_bytes)? else {
                return Ok(Vec::new());
            };
            let mut out = Vec::new();
            let mut next = from;
            let mut decompressed = Vec::new();
            for (i, batch) in BatchIter::with_base(&bytes, pos).enumerate() {
                let batch = match batch {
                    Ok(b) => b,
                    Err(e) if i == 0 => return Err(e.in_file(path, 0)),
                    Err(_) => break,
                };
                let h = batch.header();
                next = next.max(h.next_offset());
                if h.is_control() {
                    continue;
                }
                for record in batch
                    .records(&mut decompressed)
                    .map_err(|e| e.in_file(path, 0))?
                {
                    let record = record.map_err(|e| e.in_file(path, 0))?;
                    if record.offset >= offset {
                        out.push((record.offset, record.to_record()));
                    }
                }
            }
            // Each round starts past the batches the last one read (`next` > `from`: the
            // first batch read holds an offset at or above `from`).
            if !out.is_empty() || next <= from || next >= end {
                return Ok(out);
            }
            from = next;
        }
    }

    /// The first record whose timestamp is at or after `timestamp`: `(offset, timestamp)`, or
    /// `None` when every record is older (Kafka's `offsetsForTimes`).
    ///
    /// # Errors
    ///
    /// As [`read_records`](SegmentSet::read_records).
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<(u64, i64)>> {
        for segment in &self.segments {
            if segment.max_timestamp() >= timestamp {
                let found = segment.find_by_timestamp(
                    timestamp,
                    self.log_start_offset,
                    self.config.max_batch_bytes,
                )?;
                if let Some(found) = found {
                    return Ok(Some(found));
                }
            }
        }
        Ok(None)
    }

    /// Applies retention: deletes whole segments, oldest first, that lie entirely below
    /// `limit_offset` (the high watermark) and are older than `retention_ms` (newest record
    /// vs the clock), or whose removal keeps the log at or above `retention_bytes`, or that
    /// lie entirely below the log start offset. The active segment goes only if a new one is
    /// rolled first. Returns the base offsets deleted.
    ///
    /// # Errors
    ///
    /// I/O errors, which take the log offline.
    pub fn delete_old_segments(&mut self, limit_offset: u64) -> Result<Vec<u64>> {
        let now = self.clock.now_ms();
        let retention_ms = self.config.retention_ms;
        let mut deleted = Vec::new();
        if retention_ms >= 0 {
            deleted.extend(self.delete_while(limit_offset, |s| {
                s.max_timestamp() >= 0 && now.saturating_sub(s.max_timestamp()) > retention_ms
            })?);
        }
        if self.config.retention_bytes >= 0 {
            let mut excess = self.size_bytes() as i64 - self.config.retention_bytes;
            deleted.extend(self.delete_while(limit_offset, |s| {
                if excess - s.size() as i64 >= 0 {
                    excess -= s.size() as i64;
                    true
                } else {
                    false
                }
            })?);
        }
        let start = self.log_start_offset;
        let bases: Vec<u64> = self.segments.iter().map(Segment::base_offset).collect();
        let mut i = 0;
        deleted.extend(self.delete_while(limit_offset, |_| {
            i += 1;
            bases.get(i).is_some_and(|&next| next <= start)
        })?);
        Ok(deleted)
    }

    fn delete_while(
        &mut self,
        limit_offset: u64,
        mut predicate: impl FnMut(&Segment) -> bool,
    ) -> Result<Vec<u64>> {
        self.check_online()?;
        let end = self.log_end_offset();
        let n = self.segments.len();
        let mut count = 0;
        for (i, segment) in self.segments.iter().enumerate() {
            let upper = self.segments.get(i + 1).map_or(end, Segment::base_offset);
            let is_active = i == n - 1;
            if upper > limit_offset || (is_active && segment.is_empty()) || !predicate(segment) {
                break;
            }
            count += 1;
        }
        if count == 0 {
            return Ok(Vec::new());
        }
        self.guarded(|set| {
            if count == set.segments.len() {
                let at = set.log_end_offset();
                set.roll_at(at)?;
            }
            let doomed: Vec<Segment> = set.segments.drain(..count).collect();
            let bases = doomed.iter().map(Segment::base_offset).collect();
            set.log_start_offset = set.log_start_offset.max(set.segments[0].base_offset());
            set.recovery_point = set.recovery_point.max(set.log_start_offset);
            recovery::delete_segment_files(&*set.io, &set.dir, doomed)?;
            Ok(bases)
        })
    }

    /// Removes every record at or above `offset`, whole batches at a time: when `offset` lies
    /// inside a batch, that batch goes too and the new log end is its base offset. Below the
    /// log start offset, the log is emptied and restarts at `offset`. The cut is made durable.
    /// Returns the new log end offset.
    ///
    /// # Errors
    ///
    /// I/O errors, which take the log offline.
    pub fn truncate_to(&mut self, offset: u64) -> Result<u64> {
        self.check_online()?;
        if offset >= self.log_end_offset() {
            return Ok(self.log_end_offset());
        }
        self.guarded(|set| {
            if offset < set.log_start_offset {
                // Delete first: the new segment may reuse a name.
                let doomed: Vec<Segment> = set.segments.drain(..).collect();
                recovery::delete_segment_files(&*set.io, &set.dir, doomed)?;
                let fresh = set.create_segment(offset)?;
                set.segments.push(fresh);
                set.log_start_offset = offset;
            } else {
                let mut doomed = Vec::new();
                while set.segments.len() > 1
                    && set.segments[set.segments.len() - 1].base_offset() >= offset
                {
                    doomed.extend(set.segments.pop());
                }
                recovery::delete_segment_files(&*set.io, &set.dir, doomed)?;
                let last = set.segments.len() - 1;
                set.segments[last].truncate_to(offset)?;
            }
            let last = set.segments.len() - 1;
            set.segments[last].sync(true)?;
            set.sync_dir()?;
            set.recovery_point = set.recovery_point.min(set.log_end_offset());
            set.rebuild_txn_index()?;
            Ok(set.log_end_offset())
        })
    }

    /// Flushes, fsyncs and closes the log: a clean shutdown. The checkpoints returned (the
    /// recovery point is then the log end offset, and `clean_shutdown` is set) let the next
    /// open skip revalidation.
    ///
    /// # Errors
    ///
    /// I/O errors.
    pub fn close(mut self) -> Result<Checkpoints> {
        self.guarded(|set| {
            let last = set.segments.len() - 1;
            set.segments[last].on_roll()
        })?;
        self.fsync()?;
        // A clean close leaves the active segment's indexes durable too.
        self.guarded(|set| {
            let last = set.segments.len() - 1;
            set.segments[last].sync(true)
        })?;
        Ok(Checkpoints {
            recovery_point: self.recovery_point,
            log_start_offset: self.log_start_offset,
            clean_shutdown: true,
        })
    }
}

impl Drop for SegmentSet {
    /// Hands buffered bytes to the operating system, as `BufWriter` does on drop. Errors are
    /// ignored here: call [`write_to_files`](SegmentSet::write_to_files), [`fsync`](SegmentSet::fsync) or
    /// [`close`](SegmentSet::close) to see them. Nothing is made durable.
    fn drop(&mut self) {
        if !self.offline {
            for segment in &mut self.segments {
                let _ = segment.flush();
            }
        }
    }
}
