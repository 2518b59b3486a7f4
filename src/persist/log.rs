//! One persisted partition: its segment set shared by the writer, disk readers, retention
//! and checkpoints ([`LogCell`]); the partition layer's view of it ([`PartitionLog`]); the
//! writer thread.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;

use super::append::{Appender, CodecChoice, Pushed, BATCH_TARGET};
use super::FlushPolicy;
use crate::codec::Codec;
use crate::partition::tail::{StampCursor, StampRuns};
use crate::partition::{valid_timestamp, DiskLog, Entry, Partition};
use crate::persist::replica_store::SnapshotKeeper;
use crate::ring::Reader;
use crate::storage::record_batch::{HEADER_SIZE, MAX_RECORD_OVERHEAD};
use crate::storage::{BatchIter, SegmentSet};
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::thread::{self, JoinHandle};
use crate::sync::StdArc as Arc;
use crate::sync::{Mutex, WaitSet};
use crate::{Error, Result};

/// Records the writer looks at per batch, at most.
const RUN_MAX: usize = 64 << 10;

/// One partition's log and the offsets its writer has reached.
#[derive(Debug)]
pub(crate) struct LogCell {
    pub(crate) topic: String,
    pub(crate) partition: u32,
    pub(crate) dir: PathBuf,
    /// `None` once closed.
    pub(crate) log: Mutex<Option<SegmentSet>>,
    /// Held by a cleaning pass from its plan to its swap, and by whoever closes the log for
    /// good (taken before `log`).
    pub(crate) cleaning: Mutex<()>,
    /// Mirrors of the set's offsets, read without the lock.
    log_start: AtomicU64,
    /// Records below this are in the segment set.
    written: AtomicU64,
    /// Records below this are acknowledged by the flush policy (fsynced under EveryBatch).
    acked: AtomicU64,
    offline: AtomicBool,
    /// Set by `abandon`: the writer stops at once, writing nothing more.
    abandoned: AtomicBool,
    error: Mutex<Option<String>>,
    /// The last failed disk read's error, for its reader.
    read_error: Mutex<Option<Error>>,
    /// Notified when `written`, `acked` or `offline` change.
    progress: WaitSet,
}

impl LogCell {
    pub(crate) fn new(topic: &str, partition: u32, set: SegmentSet) -> Self {
        let end = set.log_end_offset();
        Self {
            topic: topic.to_owned(),
            partition,
            dir: set.dir().to_path_buf(),
            log_start: AtomicU64::new(set.log_start_offset()),
            written: AtomicU64::new(end),
            acked: AtomicU64::new(end),
            log: Mutex::new(Some(set)),
            cleaning: Mutex::new(()),
            offline: AtomicBool::new(false),
            abandoned: AtomicBool::new(false),
            error: Mutex::new(None),
            read_error: Mutex::new(None),
            progress: WaitSet::new(),
        }
    }

    pub(crate) fn log_start(&self) -> u64 {
        // Acquire: pairs with the Release stores after retention.
        self.log_start.load(Ordering::Acquire)
    }

    pub(crate) fn set_log_start(&self, start: u64) {
        // Release: pairs with the Acquire in `log_start`.
        self.log_start.store(start, Ordering::Release);
    }

    pub(crate) fn written(&self) -> u64 {
        // Acquire: pairs with the writer's Release store after its append.
        self.written.load(Ordering::Acquire)
    }

    fn is_offline(&self) -> bool {
        // Acquire: pairs with the Release store in `fail`.
        self.offline.load(Ordering::Acquire)
    }

    /// Takes the log offline after an I/O error and wakes every waiter.
    pub(crate) fn fail(&self, e: &Error) {
        let mut err = self.error.lock();
        if err.is_none() {
            // With its sources: an `Io` error's own text names only what was being done.
            let mut reason = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                reason = format!("{reason}: {s}");
                source = s.source();
            }
            *err = Some(reason);
        }
        drop(err);
        // Release: pairs with the Acquire in `is_offline`.
        self.offline.store(true, Ordering::Release);
        self.progress.notify_all();
    }

    /// Stops the writer without another write, and wakes waiting sends.
    pub(crate) fn abandon(&self) {
        // Release: pairs with the writer's Acquire load.
        self.abandoned.store(true, Ordering::Release);
        self.fail(&Error::Closed {
            what: "the broker's process died (simulated)".into(),
        });
    }

    fn is_abandoned(&self) -> bool {
        // Acquire: pairs with the Release store in `abandon`.
        self.abandoned.load(Ordering::Acquire)
    }

    /// Why the log cannot be used: offline (with the error that took it offline), or
    /// closed.
    pub(crate) fn error(&self) -> Error {
        match self.error.lock().clone() {
            Some(reason) => Error::PartitionOffline {
                topic: self.topic.clone(),
                partition: self.partition,
                dir: self.dir.clone(),
                reason,
            },
            None => Error::Closed {
                what: format!("the log of `{}`-{}", self.topic, self.partition),
            },
        }
    }

    /// [`error`](Self::error) once the log went offline.
    pub(crate) fn offline_error(&self) -> Option<Error> {
        self.is_offline().then(|| self.error())
    }

    fn publish(&self, written: u64, acked: Option<u64>) {
        // Release: pairs with the Acquire loads in `written` and the waiters.
        self.written.store(written, Ordering::Release);
        if let Some(a) = acked {
            // Release: pairs with the Acquire in `wait_acked`.
            self.acked.fetch_max(a, Ordering::Release);
        }
        self.progress.notify_all();
    }

    /// Waits until the writer has put every record below `end` into the set, then hands the
    /// set's buffer to the OS and, with `fsync`, makes it durable.
    pub(crate) fn sync_to(&self, end: u64, fsync: bool) -> Result<()> {
        self.progress.wait_until(None, || {
            (self.written() >= end || self.is_offline()).then_some(())
        });
        if self.is_offline() {
            return Err(self.error());
        }
        let mut log = self.log.lock();
        let Some(set) = log.as_mut() else {
            // Closed (close fsynced everything), unless abandoned.
            return if self.is_offline() {
                Err(self.error())
            } else {
                Ok(())
            };
        };
        if self.is_offline() {
            return Err(self.error());
        }
        if !fsync {
            let flushed = set.write_to_files();
            drop(log);
            // A failed write takes the log offline, as the writer's own would.
            return flushed.map_err(|e| {
                self.fail(&e);
                self.error()
            });
        }
        if let Err(e) = set.fsync() {
            drop(log);
            self.fail(&e);
            return Err(self.error());
        }
        let synced = set.log_end_offset();
        drop(log);
        self.publish(self.written().max(synced), Some(synced));
        Ok(())
    }
}

/// A persisted partition as [`Partition`] sees it (the codecs live here).
pub(crate) struct PartitionLog<K, V> {
    pub(crate) cell: Arc<LogCell>,
    /// The last disk read's buffer: records read from it may share it (zero-copy values,
    /// [`Codec::decode_from`]); the next read reuses it once none does.
    pub(crate) buf: Mutex<Bytes>,
    pub(crate) policy: FlushPolicy,
    pub(crate) max_message_bytes: u64,
    /// The largest record (encoded, bounded with `WIDEST_RECORD_OVERHEAD`) a batch the
    /// segment set takes can hold: a larger one would fail at the writer, after its send was
    /// acknowledged, and take the partition offline.
    pub(crate) segment_room: u64,
    /// The codec of the writer's batches (shared with it).
    pub(crate) codec: Arc<CodecChoice>,
    pub(crate) _types: PhantomData<fn() -> (K, V)>,
}

thread_local! {
    /// Encoding scratch for the size check at send.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The length of `c`'s encoding, encoding it into `scratch` only when it holds none.
fn encoded_len<C: Codec>(c: &C, scratch: &mut Vec<u8>) -> usize {
    match c.encoded() {
        Some(bytes) => bytes.len(),
        None => {
            scratch.clear();
            c.encode(scratch);
            scratch.len()
        }
    }
}

/// Kafka's per-record overhead bound (varints, attributes) beyond keys, values and headers.
const RECORD_OVERHEAD: u64 = 21;
/// A record's encoding beyond its key, value and header bytes, at most (each header's two
/// lengths are counted with it).
const WIDEST_RECORD_OVERHEAD: u64 = MAX_RECORD_OVERHEAD as u64;

/// [`PartitionLog::segment_room`] for a segment set that takes batches of up to `max_batch`
/// bytes: what is left after a batch header.
pub(crate) fn segment_room(max_batch: u64) -> u64 {
    max_batch.saturating_sub(HEADER_SIZE as u64)
}

impl<K: Codec + Send + Sync, V: Codec + Send + Sync> DiskLog<K, V> for PartitionLog<K, V> {
    fn note_producer_codec(&self, codec: crate::storage::record_batch::Compression) {
        self.codec.note_producer(codec);
    }

    fn log_start(&self) -> u64 {
        self.cell.log_start()
    }

    fn read(
        &self,
        offset: u64,
        max: usize,
        f: &mut dyn FnMut(u64, Entry<K, V>),
    ) -> Result<(usize, u64)> {
        // At most 256 KiB a read: the bytes stay in cache while they are decoded (1 MiB and
        // 512 KiB measured slower, 128 KiB no faster; BENCHMARKS.md).
        let max_bytes = (max.saturating_mul(1024)).clamp(64 << 10, 256 << 10);
        // One reused buffer (a fresh one per read costs page faults) once no record shares
        // it any more; a concurrent reader finds it taken and uses its own.
        let last = std::mem::take(&mut *self.buf.lock());
        let mut bytes = if last.is_unique() {
            Vec::from(last)
        } else {
            Vec::new()
        };
        let (read, end) = {
            let log = self.cell.log.lock();
            let Some(set) = log.as_ref() else {
                return Err(self.cell.error());
            };
            (
                set.read_into(offset, max_bytes, &mut bytes),
                set.log_end_offset(),
            )
        };
        let bytes = Bytes::from(bytes);
        let n = self.decode(&bytes, read, offset, end, max, f);
        *self.buf.lock() = bytes;
        n
    }

    fn offset_for_time(&self, timestamp: i64) -> Result<Option<(u64, i64)>> {
        let log = self.cell.log.lock();
        match log.as_ref() {
            Some(set) => set.offset_for_timestamp(timestamp),
            None => Ok(None),
        }
    }

    fn disk_end(&self) -> u64 {
        self.cell.written()
    }
    fn check_size(&self, entry: &Entry<K, V>) -> std::result::Result<(), (u64, u64)> {
        if entry.is_control() {
            return Ok(());
        }
        let size = SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            let key = entry.key().map_or(0, |k| encoded_len(k, &mut s));
            (key + encoded_len(entry.value(), &mut s)) as u64
        });
        let headers: u64 = entry
            .headers()
            .iter()
            .map(|(k, v)| k.len() as u64 + v.as_ref().map_or(0, |v| v.len() as u64) + 10)
            .sum();
        let size = size + headers;
        if size + RECORD_OVERHEAD > self.max_message_bytes {
            Err((size + RECORD_OVERHEAD, self.max_message_bytes))
        } else if size + WIDEST_RECORD_OVERHEAD > self.segment_room {
            Err((size + WIDEST_RECORD_OVERHEAD, self.segment_room))
        } else {
            Ok(())
        }
    }

    fn wait_acked(&self, offset: u64) -> Result<()> {
        if self.policy != FlushPolicy::EveryBatch {
            return Ok(());
        }
        // Acquire: pairs with the writer's Release in `publish`.
        let acked = || self.cell.acked.load(Ordering::Acquire) > offset;
        self.cell
            .progress
            .wait_until(None, || (acked() || self.cell.is_offline()).then_some(()));
        if acked() {
            return Ok(());
        }
        Err(Error::NotAcknowledged {
            topic: self.cell.topic.clone(),
            partition: self.cell.partition,
            offset,
            reason: self
                .cell
                .error
                .lock()
                .clone()
                .unwrap_or_else(|| "its log closed".into()),
        })
    }

    fn poll_acked(
        &self,
        cx: &mut std::task::Context<'_>,
        slot: &mut crate::sync::WakerSlot,
        offset: u64,
    ) -> std::task::Poll<Result<()>> {
        if self.policy != FlushPolicy::EveryBatch {
            return std::task::Poll::Ready(Ok(()));
        }
        // Acquire: pairs with the writer's Release in `publish`.
        let acked = || self.cell.acked.load(Ordering::Acquire) > offset;
        // The writer notifies with the SeqCst fence (`notify_all`): no heavy fence here.
        let settled = self.cell.progress.poll_until(
            cx,
            slot,
            || false,
            || (acked() || self.cell.is_offline()).then_some(()),
        );
        settled.map(|()| {
            if acked() {
                Ok(())
            } else {
                self.wait_acked(offset)
            }
        })
    }

    fn cancel_acked(&self, slot: &mut crate::sync::WakerSlot) {
        self.cell.progress.cancel_waker(slot);
    }

    fn take_error(&self) -> Error {
        self.cell
            .read_error
            .lock()
            .take()
            .unwrap_or_else(|| self.cell.error())
    }

    fn sync_to(&self, end: u64, fsync: bool) -> Result<()> {
        self.cell.sync_to(end, fsync)
    }

    fn offline_error(&self) -> Option<Error> {
        self.cell.offline_error()
    }
}

impl<K: Codec + Send + Sync, V: Codec + Send + Sync> PartitionLog<K, V> {
    /// The records of `bytes` (whole batches) from `offset` on, below `end`, at most `max`.
    fn decode(
        &self,
        bytes: &Bytes,
        read: Result<()>,
        offset: u64,
        end: u64,
        max: usize,
        f: &mut dyn FnMut(u64, Entry<K, V>),
    ) -> Result<(usize, u64)> {
        let stored = |e: Error| {
            let copy = Error::Io {
                context: format!("reading `{}`-{}", self.cell.topic, self.cell.partition),
                source: std::io::Error::other(e.to_string()),
            };
            *self.cell.read_error.lock() = Some(e);
            copy
        };
        read.map_err(stored)?;
        let mut n = 0usize;
        // The next offset to read: past the last record passed on, or past the last batch
        // read whole (a log may have gaps: compaction, markers, a deleted segment), so the
        // reader never steps back nor re-reads. Records at or below one already passed on
        // are never passed again, whatever the file holds.
        let mut next = offset;
        // `read_into` checked every batch's CRC.
        for batch in BatchIter::new(bytes).crc_checked() {
            let batch = batch.map_err(stored)?;
            let batch_end = batch.header().next_offset().min(end);
            let h = *batch.header();
            if h.is_control() {
                // Control batches are uncompressed: this buffer stays empty.
                let mut unused = Vec::new();
                for record in batch.records(&mut unused).map_err(stored)? {
                    let r = record.map_err(stored)?;
                    let at = r.offset;
                    if at < next || at >= end || n >= max {
                        continue;
                    }
                    let marker = super::encoded::EncodedEntry::marker(r.key, r.value);
                    if let (Some(m), true) = (marker, valid_timestamp(r.timestamp)) {
                        f(
                            at,
                            Entry::control(r.timestamp, h.producer_id, h.producer_epoch, m),
                        );
                        n += 1;
                        next = at + 1;
                    }
                }
                next = next.max(batch_end);
                continue;
            }
            // A compressed batch is decompressed once into a buffer of its own, which its
            // records' values and headers then share, as an uncompressed batch's share
            // `bytes`: no allocation per record either way.
            let mut decompressed = Vec::new();
            let owned;
            let (bytes, records) = if batch.decompress(&mut decompressed).map_err(stored)? {
                owned = Bytes::from(decompressed);
                (&owned, batch.records_of(&owned).map_err(stored)?)
            } else {
                (bytes, batch.records_of(&[]).map_err(stored)?)
            };
            for record in records {
                let r = record.map_err(stored)?;
                let at = r.offset;
                if at < next || at >= end {
                    continue;
                }
                if n >= max {
                    return Ok((n, next));
                }
                if !valid_timestamp(r.timestamp) {
                    return Err(stored(Error::InvalidTimestamp {
                        offset: Some(at),
                        timestamp: r.timestamp,
                    }));
                }
                let key = match r.key {
                    Some(k) => Some(K::decode_from(bytes, k).map_err(stored)?),
                    None => None,
                };
                let value = crate::codec::decode_nullable_from(bytes, r.value).map_err(stored)?;
                let headers: Vec<(String, Option<Bytes>)> = r
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.key.to_owned(),
                            h.value.map(|v| crate::codec::share(bytes, v)),
                        )
                    })
                    .collect();
                let entry = if h.is_transactional() && h.producer_id >= 0 {
                    Entry::transactional(
                        r.timestamp,
                        key,
                        value,
                        headers,
                        h.producer_id,
                        h.producer_epoch,
                    )
                } else {
                    Entry::new(r.timestamp, key, value, headers)
                };
                f(at, entry);
                n += 1;
                next = at + 1;
            }
            next = next.max(batch_end);
        }
        Ok((n, next))
    }
}

/// Spawns the writer of one partition: a gating reader of its ring (see the module docs).
pub(crate) fn spawn_writer<K, V>(
    cell: Arc<LogCell>,
    partition: Arc<Partition<K, V>>,
    gate: Reader<Entry<K, V>>,
    policy: FlushPolicy,
    batch_limit: usize,
    codec: Arc<CodecChoice>,
) -> Result<JoinHandle<()>>
where
    K: Codec + Send + Sync + 'static,
    V: Codec + Send + Sync + 'static,
{
    let name = format!("logbus-writer-{}-{}", cell.topic, cell.partition);
    // The producers' states the log holds (the latest snapshot and the batch headers
    // after it), and the stamps of what producers append from now on.
    let mut keeper = SnapshotKeeper::default();
    {
        let log = cell.log.lock();
        if let Some(set) = log.as_ref() {
            let (states, _corrupt) =
                crate::persist::replica_store::recover_producers(set, set.log_end_offset())?;
            keeper = SnapshotKeeper::new(states.clone(), set, partition.producer_expiry());
            partition.restore_producers(states);
        }
        drop(log);
    }
    let stamps = partition.keep_stamps();
    thread::spawn_named(name, move || {
        let mut w = Writer {
            cell,
            partition,
            stamps,
            cursor: StampCursor::default(),
            keeper,
            gate,
            appender: Appender::new(
                policy,
                batch_limit,
                BATCH_TARGET.min(batch_limit / 2),
                codec,
            ),
        };
        // A user codec may panic on this thread: the log then goes offline as for an I/O
        // error (otherwise the thread dies, nobody frees the ring and sends wait for ever).
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.run()))
            .unwrap_or_else(|panic| Err(writer_panicked(&w.cell, panic.as_ref())));
        if let Err(e) = run {
            w.cell.fail(&e);
            // Sends fail from now on; what was acknowledged stays acknowledged.
            w.partition.close();
        }
    })
    .map_err(|e| Error::io("spawning a partition writer thread", e))
}

/// The error a panic on the writer thread (a key's or value's `Codec`) leaves.
fn writer_panicked(cell: &LogCell, panic: &(dyn std::any::Any + Send)) -> Error {
    let what = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic");
    Error::Io {
        context: format!("writing `{}`-{}", cell.topic, cell.partition),
        source: std::io::Error::other(format!("encoding a record panicked: {what}")),
    }
}

struct Writer<K, V> {
    cell: Arc<LogCell>,
    partition: Arc<Partition<K, V>>,
    /// The producer stamps of the records (`partition::tail`), and a copy of those from
    /// the batch being written on.
    stamps: StampRuns,
    cursor: StampCursor,
    /// The producer-state snapshots written at each roll.
    keeper: SnapshotKeeper,
    gate: Reader<Entry<K, V>>,
    /// The write path to disk's batch and flush policy (no batch grows past the segment
    /// size, unless one record alone does).
    appender: Appender,
}

impl<K: Codec, V: Codec> Writer<K, V> {
    fn run(&mut self) -> Result<()> {
        loop {
            if self.cell.is_abandoned() {
                return Ok(());
            }
            let pos = self.gate.position();
            let available = self.gate.get_run_with(pos, 1, |_, _| ()).0 > 0;
            if !available {
                if self.partition.is_closed() {
                    // Closed and drained (a closing ring still serves what was published).
                    if self.gate.get_run_with(pos, 1, |_, _| ()).0 == 0 {
                        return Ok(());
                    }
                    continue;
                }
                // A producer usually sends again within a moment: wait a little before
                // handing a partly filled buffer to the OS (fewer, larger writes).
                if self
                    .gate
                    .wait_for_entry(crate::sync::time::deadline_after(Duration::from_millis(1)))
                {
                    continue;
                }
                self.idle()?;
                let wait = match self.appender.flush.interval_left() {
                    Some(left) => left.max(Duration::from_micros(100)),
                    None => Duration::from_millis(50),
                };
                let deadline = crate::sync::time::deadline_after(wait);
                let _ = self.gate.wait_for_entry(deadline);
                self.maybe_sync_on_time()?;
                continue;
            }
            self.write_batch(pos)?;
        }
    }

    /// Nothing to write: hand the buffer to the OS (a process crash then loses nothing
    /// written) and apply an interval policy.
    fn idle(&mut self) -> Result<()> {
        let mut log = self.cell.log.lock();
        if self.cell.is_abandoned() {
            return Ok(());
        }
        if let Some(set) = log.as_mut() {
            set.write_to_files()?;
        }
        drop(log);
        self.maybe_sync_on_time()
    }

    fn maybe_sync_on_time(&mut self) -> Result<()> {
        if self.appender.flush.interval_left() == Some(Duration::ZERO) {
            let mut log = self.cell.log.lock();
            if self.cell.is_abandoned() {
                return Ok(());
            }
            let Some(set) = log.as_mut() else {
                return Ok(());
            };
            set.fsync()?;
            drop(log);
            self.appender.flush.synced();
        }
        Ok(())
    }

    fn write_batch(&mut self, pos: u64) -> Result<()> {
        let mut log = self.cell.log.lock();
        if self.cell.is_abandoned() {
            return Ok(());
        }
        let Some(set) = log.as_mut() else {
            return Err(Error::Closed {
                what: "partition log".into(),
            });
        };
        if set.log_end_offset() != pos {
            return Err(Error::Io {
                context: format!("writing `{}`-{}", self.cell.topic, self.cell.partition),
                source: std::io::Error::other(format!(
                    "the log ends at {} but the writer is at {pos}",
                    set.log_end_offset()
                )),
            });
        }
        let appender = &mut self.appender;
        appender.begin(pos);
        // After the records were seen published (`run`'s look): their runs are pushed.
        self.cursor.load(&self.stamps, pos);
        let cursor = &mut self.cursor;
        let mut n = 0usize;
        let mut stop = false;
        let mut failed = None;
        // The records stay in the ring (the gate has not moved) until they are in the set.
        // Noting: the gate then knows them published, so freeing them below frees all `n`
        // (a single-producer ring's tags can show a run before its cursor store does).
        self.gate.get_run_with_noting(pos, RUN_MAX, |_, e| {
            if stop {
                return;
            }
            let Some(stamp) = cursor.at(pos + n as u64) else {
                stop = true;
                return;
            };
            match appender.push(e, stamp) {
                Ok(Pushed::Added) => {
                    n += 1;
                    stop = appender.is_ripe();
                }
                Ok(Pushed::Full) => stop = true,
                Err(err) => {
                    stop = true;
                    if n == 0 {
                        failed = Some(err);
                    }
                }
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
        if n == 0 {
            return Ok(());
        }
        let bytes = self.appender.append(set, None)?;
        if let Some(h) = self.appender.appended_header() {
            self.keeper.appended(set, &h);
        }
        let written = pos + n as u64;
        self.appender.apply_policy(set, n as u64, bytes)?;
        drop(log);
        // Published before the slots are freed: a reader that finds a record overwritten
        // in the ring must find it on disk.
        self.cell.publish(written, Some(written));
        // Only now may producers reuse the slots.
        let _ = self.gate.try_read_with(n, |_, _| ());
        Ok(())
    }
}
