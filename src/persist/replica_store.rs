//! A persisted replica's disk side: its segment set in `<data dir>/<topic>-<partition>/`
//! (Kafka's format; each batch carries the leader epoch its records were written in, in
//! `partitionLeaderEpoch`) and its `leader-epoch-checkpoint` beside the segments.
//!
//! The replica set keeps the disk and the in-memory tail equal: every append goes to the
//! disk first (handed to the operating system at once, fsynced per the topic's
//! [`FlushPolicy`]), then to memory; every truncation cuts the disk first, whole batches at
//! a time, and memory to where the disk ended. A process crash therefore loses nothing a
//! replica reported; a power loss loses what was not fsynced ([`FlushPolicy::EveryBatch`]
//! fsyncs before a replica reports its log end, so `acks = all` then survives it too).

use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::append::{Appender, Pushed, BATCH_TARGET};
use crate::clock::Clock;
use crate::codec::{encoding, Codec};
use crate::partition::producer_state::{ProducerExpiry, ProducerStates, Stamp};
use crate::partition::replica_log::{runs_of, ReplicaLog};
use crate::partition::Entry;
use crate::persist::FlushPolicy;
use crate::storage::checkpoint::{self, EpochEntry};
use crate::storage::cleaner::{CleanPlan, Cleaned, DeletedFiles};
use crate::storage::record_batch::{HEADER_SIZE, MAX_RECORD_OVERHEAD};
use crate::storage::{
    BatchIter, Checkpoints, CleanConfig, CleanStats, DirtyInfo, Io, LogConfig, LogSetup, SegmentSet,
};
use crate::sync::Arc as SyncArc;
use crate::{Error, Result};

/// Kafka's name for a partition directory's epoch cache file.
pub(crate) const EPOCH_FILE: &str = "leader-epoch-checkpoint";
/// A record batch's header (Kafka's `RECORD_BATCH_OVERHEAD`).
const BATCH_OVERHEAD: usize = HEADER_SIZE;
/// A record's encoding beyond its key, value and header bytes, at most.
const RECORD_OVERHEAD: usize = MAX_RECORD_OVERHEAD;
/// Bytes one disk read returns at most.
const READ_BYTES: usize = 1 << 20;

/// A record read from disk: `(offset, leader epoch, producer stamp, entry)`, the stamp's
/// `seq` the record's own sequence.
pub(crate) type Stored<K, V> = (u64, i32, Stamp, Entry<K, V>);

/// A record to append: `(leader epoch, producer stamp, entry)`, the stamp's `seq` the
/// record's own sequence.
pub(crate) type ToStore<'a, K, V> = (i32, Stamp, &'a Entry<K, V>);

/// The stamp of the record at `offset` of a batch with header `h`.
pub(crate) fn stamp_in(h: &crate::storage::BatchHeader, offset: u64) -> Stamp {
    if h.producer_id < 0 {
        return Stamp::NONE;
    }
    Stamp {
        id: h.producer_id,
        epoch: h.producer_epoch,
        transactional: h.is_transactional(),
        seq: crate::partition::producer_state::seq_add(
            h.base_sequence,
            offset.saturating_sub(h.base_offset),
        ),
    }
}

/// Applies one batch header to `states` (recovery: no checks, as Kafka's
/// `ProducerStateManager` loads from the log).
pub(crate) fn apply_header(states: &mut ProducerStates, h: &crate::storage::BatchHeader) {
    // A batch with no records counts: the cleaner keeps a producer's last batch emptied of
    // its records (its header alone), as Kafka's does, for this state.
    if h.producer_id < 0 || h.records_count < 0 {
        return;
    }
    if h.is_control() {
        // A transaction marker: the producer's transaction is over. The coordinator epoch
        // is in the record's value (not read here: -1 kept).
        states.marker(h.producer_id, -1);
        return;
    }
    let stamp = stamp_in(h, h.base_offset);
    states.applied(
        &stamp,
        0,
        h.base_offset,
        (h.last_offset_delta as u64) + 1,
        h.max_timestamp,
    );
}

/// The producers' states a partition directory's `.log` files hold, read from their batch
/// headers (offline: `logbus describe`). Reading stops at the first batch that does not
/// parse in a file (a torn tail), as recovery would cut it.
///
/// # Errors
///
/// The directory or a file cannot be read.
pub fn producer_states(partition_dir: &Path) -> Result<Vec<crate::partition::ProducerState>> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(partition_dir)
        .map_err(|e| Error::io(format!("reading {}", partition_dir.display()), e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    names.sort();
    let mut states = ProducerStates::new();
    for path in names {
        let bytes = std::fs::read(&path)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        for batch in BatchIter::new(&bytes) {
            let Ok(batch) = batch else { break };
            apply_header(&mut states, batch.header());
        }
    }
    Ok(states.describe())
}

/// The producers' states of the log in `set` below `to` (Kafka's recovery): the latest
/// snapshot at or below `to` (and at or above the log start), then the batch headers after
/// it. Corrupt snapshots are skipped (deleted; returned, typed), and snapshots above the log
/// end (strays from a log that was cut) are deleted.
///
/// # Errors
///
/// Reading the log fails.
pub(crate) fn recover_producers(set: &SegmentSet, to: u64) -> Result<(ProducerStates, Vec<Error>)> {
    use crate::storage::producer_snapshot as snap;
    let (io, dir) = (set.io(), set.dir());
    snap::remove_outside(io, dir, set.log_start_offset(), set.log_end_offset());
    let (found, skipped) = snap::load_latest(io, dir, set.log_start_offset(), to)?;
    let (mut states, from) = match found {
        Some((offset, entries)) => (ProducerStates::from_snapshot(&entries), offset),
        None => (ProducerStates::new(), set.log_start_offset()),
    };
    scan_producers(set, from, to, &mut states)?;
    Ok((states, skipped))
}

/// Follows the batches appended to a log on disk for its producer-state snapshots: applies
/// each batch's header, and at each roll writes the snapshot at the new segment's base
/// offset (Kafka's `takeSnapshot` at roll).
///
/// With an expiry (a one-replica partition's: its own, on the broker's clock), idle
/// producer ids go from the states here too, at each roll before the snapshot: the states
/// would otherwise grow by every idempotent producer ever made, and a reopen would load
/// them all back. The keeper sees the log only as written, which may lag the partition's
/// appends: a producer it expires may have records in the ring past the roll, but those go
/// in segments after the snapshot, where recovery reads them back; only its records older
/// than the expiration are forgotten, as expiry means.
#[derive(Debug, Default)]
pub(crate) struct SnapshotKeeper {
    states: ProducerStates,
    active: u64,
    expiry: Option<ProducerExpiry>,
}

impl SnapshotKeeper {
    /// From the states recovered for the whole log of `set`, idle producer ids expiring
    /// by `expiry`, if given.
    pub(crate) fn new(
        mut states: ProducerStates,
        set: &SegmentSet,
        mut expiry: Option<ProducerExpiry>,
    ) -> Self {
        if let Some(expiry) = &mut expiry {
            expiry.expire_now(&mut states);
        }
        Self {
            states,
            active: set.active_base_offset(),
            expiry,
        }
    }

    /// After a batch with header `h` was appended to `set`. A snapshot that cannot be
    /// written is left out (recovery then reads more of the log).
    pub(crate) fn appended(&mut self, set: &SegmentSet, h: &crate::storage::BatchHeader) {
        let active = set.active_base_offset();
        if active != self.active && active == h.base_offset {
            // Rolled: the new segment starts with this batch; the snapshot holds the state
            // below it.
            if let Some(expiry) = &mut self.expiry {
                expiry.expire_now(&mut self.states);
            }
            let _ = crate::storage::producer_snapshot::write(
                set.io(),
                set.dir(),
                active,
                &self.states.to_snapshot(),
            );
        }
        self.active = active;
        apply_header(&mut self.states, h);
    }

    /// The log was cut at `offset`: the states are recovered again below it.
    pub(crate) fn truncated(&mut self, set: &SegmentSet) {
        crate::storage::producer_snapshot::remove_outside(
            set.io(),
            set.dir(),
            set.log_start_offset(),
            set.log_end_offset(),
        );
        if let Ok((states, _)) = recover_producers(set, set.log_end_offset()) {
            self.states = states;
        }
        self.active = set.active_base_offset();
    }
}

/// Applies every batch header from `from` up to `to` to `states`.
pub(crate) fn scan_producers(
    set: &SegmentSet,
    from: u64,
    to: u64,
    states: &mut ProducerStates,
) -> Result<()> {
    let mut bytes = Vec::new();
    let mut at = from;
    while at < to {
        set.read_into(at, READ_BYTES, &mut bytes)?;
        let mut next = at;
        for batch in BatchIter::new(&bytes) {
            let h = *batch?.header();
            if h.base_offset >= to {
                return Ok(());
            }
            apply_header(states, &h);
            next = next.max(h.next_offset());
        }
        if next <= at {
            break;
        }
        at = next;
    }
    Ok(())
}

/// A persisted replica's disk side, with its codecs erased (see the module docs).
pub(crate) trait ReplicaStore<K, V>: Send {
    /// The first of `records` the topic does not take (its `max_message_bytes`, or a
    /// batch on disk cannot hold it): `(size, limit)`. Appending it would fail part-way.
    fn too_large(&mut self, records: &[ToStore<'_, K, V>]) -> Option<(u64, u64)>;
    /// Appends `records` (with their epochs and stamps) at the log end, which must be
    /// `first`: batches cut where the epoch or the producer changes or a producer's
    /// sequences stop being contiguous.
    fn append(&mut self, first: u64, records: &[ToStore<'_, K, V>]) -> Result<()>;
    /// The leader's log has a gap up to `offset` (a Kafka-written directory, a segment
    /// deleted by hand): the next append may start there instead of at the log end.
    fn skip_to(&mut self, offset: u64);
    /// Cuts the log at `offset` (whole batches); the new log end.
    fn truncate_to(&mut self, offset: u64) -> Result<u64>;
    /// Writes the leader-epoch cache if it changed since the last write (atomically).
    fn save_epochs(&mut self, epochs: &[(i32, u64)]) -> Result<()>;
    /// The records from `from` on (at most `max`, below `end`), with their epochs, and the
    /// next offset to read: past the last record returned, or past the last batch read
    /// whole (a log on disk may have gaps), `from` when nothing was there.
    fn read(&self, from: u64, end: u64, max: usize) -> Result<(Vec<Stored<K, V>>, u64)>;
    /// The first record at or after `timestamp`, `(offset, timestamp)` (the time index).
    fn offset_for_time(&self, timestamp: i64) -> Result<Option<(u64, i64)>>;
    /// Fsyncs everything appended.
    fn sync(&mut self) -> Result<()>;
    /// How dirty the log is under `config` (the log cleaner's measure).
    fn dirty_info(&self, config: &CleanConfig) -> DirtyInfo;
    /// Plans a cleaning pass under `config` (the caller builds it without the replica
    /// set's lock, then hands the result to [`commit_clean`](Self::commit_clean)).
    fn plan_clean(&self, config: &CleanConfig) -> Result<CleanPlan>;
    /// Swaps a built pass's cleaned segments in (groups whose segments changed meanwhile
    /// are left as they are); the replaced segments' files are returned, to be removed
    /// after the pass, without the replica set's lock.
    fn commit_clean(&mut self, cleaned: Cleaned) -> Result<(CleanStats, DeletedFiles)>;
    /// Closes the log cleanly (fsync).
    fn close(self: Box<Self>) -> Result<()>;
    /// A dead process: nothing more is written, not even the write buffer.
    fn abandon(self: Box<Self>);
}

/// The segment set and epoch file of one replica.
pub(crate) struct DiskReplica<K, V> {
    set: SegmentSet,
    io: SyncArc<dyn Io>,
    epoch_file: PathBuf,
    saved_epochs: Vec<(i32, u64)>,
    /// The write path to disk's batch and flush policy (inline: under the replica set's
    /// lock).
    appender: Appender,
    /// The largest record (encoded, bounded as `record_bound` does) the topic takes.
    max_record: usize,
    /// Where the next append starts when the leader's log has a gap there (`skip_to`).
    gap_to: Option<u64>,
    /// The producer-state snapshots written at each roll.
    keeper: SnapshotKeeper,
    _types: PhantomData<fn() -> (K, V)>,
}

/// What opening a replica's directory gives: its store and its log (tail in memory).
pub(crate) type Loaded<K, V> = (Box<dyn ReplicaStore<K, V>>, ReplicaLog<K, V>);

/// Where a replica's files are and how they are written.
#[derive(Clone)]
pub(crate) struct StoreParams {
    pub(crate) dir: PathBuf,
    pub(crate) io: SyncArc<dyn Io>,
    pub(crate) clock: SyncArc<dyn Clock>,
    pub(crate) config: LogConfig,
    pub(crate) policy: FlushPolicy,
    /// Records kept in memory (the tail).
    pub(crate) capacity: usize,
    /// The topic's `max_message_bytes`.
    pub(crate) max_message_bytes: u64,
    /// The codec of the partition's batches, shared by its replicas (see
    /// [`CodecChoice`](super::append::CodecChoice)).
    pub(crate) codec: crate::sync::StdArc<super::append::CodecChoice>,
    /// The topic's producer-id expiration, for the `.snapshot` files' states (the replica
    /// set expires the log's own).
    pub(crate) expiry: ProducerExpiry,
}

/// Decodes one stored record.
fn decode_entry<K: Codec, V: Codec>(
    r: &crate::storage::record_batch::RecordView<'_>,
    h: &crate::storage::BatchHeader,
) -> Result<Entry<K, V>> {
    if !crate::partition::valid_timestamp(r.timestamp) {
        return Err(Error::InvalidTimestamp {
            offset: Some(r.offset),
            timestamp: r.timestamp,
        });
    }
    let key = match r.key {
        Some(k) => Some(K::decode(k)?),
        None => None,
    };
    let value = crate::codec::decode_nullable(r.value)?;
    let headers: Vec<(String, Option<Bytes>)> = r
        .headers
        .iter()
        .map(|h| (h.key.to_owned(), h.value.map(Bytes::copy_from_slice)))
        .collect();
    if h.is_transactional() && h.producer_id >= 0 {
        return Ok(Entry::transactional(
            r.timestamp,
            key,
            value,
            headers,
            h.producer_id,
            h.producer_epoch,
        ));
    }
    Ok(Entry::new(r.timestamp, key, value, headers))
}

/// A copy of `e` through its codecs: a failed send hands back the record the log keeps
/// without asking the types for `Clone`. `None` if the value does not decode as it encoded.
pub(crate) fn codec_copy<K: Codec, V: Codec>(e: &Entry<K, V>) -> Option<Entry<K, V>> {
    if e.is_control() {
        return None;
    }
    let mut buf = Vec::new();
    let (timestamp, key, value, headers) = e.parts();
    let key = match key {
        Some(k) => Some(K::decode(encoding(k, &mut buf)).ok()?),
        None => None,
    };
    let value =
        crate::codec::decode_nullable(crate::codec::nullable_encoding(value, &mut buf)).ok()?;
    Some(Entry::new(timestamp, key, value, headers.to_vec()))
}

/// Every batch's `(base offset, partition leader epoch)` from `from` to the log end.
fn scan_epochs(set: &SegmentSet, from: u64) -> Result<Vec<(i32, u64)>> {
    let end = set.log_end_offset();
    let mut epochs: Vec<(i32, u64)> = Vec::new();
    let mut bytes = Vec::new();
    let mut at = from;
    while at < end {
        set.read_into(at, READ_BYTES, &mut bytes)?;
        let mut next = at;
        for batch in BatchIter::new(&bytes) {
            let h = *batch?.header();
            let base = h.base_offset;
            if epochs
                .last()
                .map_or(true, |e| h.partition_leader_epoch > e.0)
            {
                epochs.push((h.partition_leader_epoch, base.max(from)));
            }
            next = next.max(h.next_offset());
        }
        if next <= at {
            break;
        }
        at = next;
    }
    Ok(epochs)
}

impl<K, V> DiskReplica<K, V>
where
    K: Codec + Send + Sync + 'static,
    V: Codec + Send + Sync + 'static,
{
    /// Opens (creating if needed) the replica's directory, running the storage layer's
    /// recovery, reads its `leader-epoch-checkpoint` (rebuilt from the batches when missing
    /// or inconsistent, and cut at the recovered log end as Kafka does on load) and loads
    /// its last `capacity` records into memory.
    ///
    /// # Errors
    ///
    /// The storage layer's errors (the directory is then unusable).
    pub(crate) fn open(p: &StoreParams) -> Result<Loaded<K, V>> {
        let (set, _report) = SegmentSet::open(
            p.dir.clone(),
            LogSetup {
                config: p.config.clone(),
                io: SyncArc::clone(&p.io),
                clock: SyncArc::clone(&p.clock),
                checkpoints: Checkpoints::default(),
            },
        )?;
        let (start, end) = (set.log_start_offset(), set.log_end_offset());
        let max_batch = usize::try_from(p.config.max_batch_bytes.min(p.config.segment_bytes))
            .unwrap_or(usize::MAX)
            .max(BATCH_OVERHEAD + RECORD_OVERHEAD);
        let epoch_file = p.dir.join(EPOCH_FILE);
        let stored = match checkpoint::read::<EpochEntry>(&*p.io, &epoch_file) {
            Ok(e) => e,
            // Damaged: rebuilt from the batches below (they carry the epochs).
            Err(Error::InvalidCheckpoint { .. }) => None,
            Err(e) => return Err(e),
        };
        let mut epochs: Vec<(i32, u64)> = stored
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.epoch, e.start_offset))
            .filter(|e| e.1 < end)
            .collect();
        let increasing = epochs
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1);
        if (epochs.is_empty() && end > start) || !increasing {
            epochs = scan_epochs(&set, start)?;
        }
        let saved = epochs.clone();
        let mut store = DiskReplica {
            set,
            io: SyncArc::clone(&p.io),
            epoch_file,
            saved_epochs: Vec::new(),
            appender: Appender::new(
                p.policy,
                max_batch,
                BATCH_TARGET,
                crate::sync::StdArc::clone(&p.codec),
            ),
            max_record: usize::try_from(p.max_message_bytes)
                .unwrap_or(usize::MAX)
                .min(max_batch - BATCH_OVERHEAD),
            gap_to: None,
            keeper: SnapshotKeeper::default(),
            _types: PhantomData,
        };
        // The file now says what the log holds (cut at its end, or rebuilt).
        store.save_epochs(&saved)?;
        let from = start.max(end.saturating_sub(p.capacity as u64));
        let mut tail = Vec::new();
        let mut mem_start = from;
        let mut at = from;
        while at < end {
            let (got, next) = store.read(at, end, 4096)?;
            if next <= at {
                break;
            }
            for (o, epoch, stamp, e) in got {
                if o != mem_start + tail.len() as u64 {
                    // A gap (not written by logbus): memory holds only what follows it.
                    tail.clear();
                    mem_start = o;
                }
                tail.push((epoch, stamp, e));
            }
            at = next;
        }
        if mem_start + tail.len() as u64 != end {
            tail.clear();
            mem_start = end;
        }
        // The producers' states below the tail from the batch headers; the tail's records
        // apply theirs as the log takes them.
        let (producers, _corrupt) = recover_producers(&store.set, mem_start)?;
        let (whole, _) = if mem_start == end {
            (producers.clone(), Vec::new())
        } else {
            recover_producers(&store.set, end)?
        };
        store.keeper = SnapshotKeeper::new(whole, &store.set, Some(p.expiry.clone()));
        let log = ReplicaLog::restored(start, mem_start, runs_of(tail), epochs, producers);
        Ok((Box::new(store), log))
    }

    fn maybe_sync(&mut self, records: u64, bytes: u64) -> Result<()> {
        if !self.appender.apply_policy(&mut self.set, records, bytes)? {
            // Handed to the operating system: a killed process loses nothing reported.
            self.set.write_to_files()?;
        }
        Ok(())
    }

    fn append_run(&mut self, epoch: i32, run: &[ToStore<'_, K, V>]) -> Result<u64> {
        let mut i = 0;
        let mut bytes = 0u64;
        while i < run.len() {
            self.appender.begin(self.set.log_end_offset());
            while i < run.len() && !self.appender.is_ripe() {
                if self.appender.push(run[i].2, run[i].1)? == Pushed::Full {
                    break;
                }
                i += 1;
            }
            bytes += match self.gap_to.filter(|&g| g > self.set.log_end_offset()) {
                // After a gap: at its own base offset (checked again, being rare).
                Some(base) => {
                    let n = self.appender.append_at(&mut self.set, base, epoch)?;
                    self.gap_to = None;
                    n
                }
                None => self.appender.append(&mut self.set, Some(epoch))?,
            };
            if let Some(h) = self.appender.appended_header() {
                self.keeper.appended(&self.set, &h);
            }
        }
        Ok(bytes)
    }
}

impl<K, V> ReplicaStore<K, V> for DiskReplica<K, V>
where
    K: Codec + Send + Sync + 'static,
    V: Codec + Send + Sync + 'static,
{
    fn append(&mut self, first: u64, records: &[ToStore<'_, K, V>]) -> Result<()> {
        let end = self.set.log_end_offset();
        let expected = self.gap_to.filter(|&g| g > end).unwrap_or(end);
        if first != expected {
            return Err(Error::Io {
                context: format!("appending to the replica in {}", self.set.dir().display()),
                source: std::io::Error::other(format!(
                    "the log on disk ends at {end}, the replica's at {first}"
                )),
            });
        }

        let mut bytes = 0;
        for run in records.chunk_by(|a, b| a.0 == b.0) {
            bytes += self.append_run(run[0].0, run)?;
        }
        if !records.is_empty() {
            self.gap_to = None;
        }
        self.maybe_sync(records.len() as u64, bytes)
    }

    fn skip_to(&mut self, offset: u64) {
        self.gap_to = Some(offset);
    }

    fn too_large(&mut self, records: &[ToStore<'_, K, V>]) -> Option<(u64, u64)> {
        records.iter().find_map(|(_, _, e)| {
            let size = self.appender.bound(e);
            (size > self.max_record).then_some((size as u64, self.max_record as u64))
        })
    }

    fn truncate_to(&mut self, offset: u64) -> Result<u64> {
        self.gap_to = None;
        let end = self.set.truncate_to(offset)?;
        self.keeper.truncated(&self.set);
        Ok(end)
    }

    fn save_epochs(&mut self, epochs: &[(i32, u64)]) -> Result<()> {
        if self.saved_epochs == epochs && self.io.exists(&self.epoch_file).unwrap_or(false) {
            return Ok(());
        }
        let entries: Vec<EpochEntry> = epochs
            .iter()
            .map(|&(epoch, start_offset)| EpochEntry {
                epoch,
                start_offset,
            })
            .collect();
        checkpoint::write(&*self.io, &self.epoch_file, &entries)?;
        self.saved_epochs = epochs.to_vec();
        Ok(())
    }

    fn read(&self, from: u64, end: u64, max: usize) -> Result<(Vec<Stored<K, V>>, u64)> {
        let mut bytes = Vec::new();
        self.set.read_into(from, READ_BYTES, &mut bytes)?;
        let mut out = Vec::new();
        // Past the last record returned or batch read whole; never back.
        let mut next = from;
        let mut decompressed = Vec::new();
        for batch in BatchIter::new(&bytes) {
            let batch = batch?;
            let h = *batch.header();
            let batch_end = h.next_offset().min(end);
            for record in batch.records(&mut decompressed)? {
                let r = record?;
                let at = r.offset;
                if at < next || at >= end {
                    continue;
                }
                if out.len() >= max {
                    return Ok((out, next));
                }
                let entry = if h.is_control() {
                    // A transaction marker: kept in the log (its offset is a gap only for
                    // readers); a control record of another kind is skipped.
                    let marker = super::encoded::EncodedEntry::marker(r.key, r.value);
                    match (marker, crate::partition::valid_timestamp(r.timestamp)) {
                        (Some(m), true) => {
                            Entry::control(r.timestamp, h.producer_id, h.producer_epoch, m)
                        }
                        _ => continue,
                    }
                } else {
                    decode_entry::<K, V>(&r, &h)?
                };
                // Transactions are fenced by the partition's table, not by sequences.
                let stamp = if h.is_transactional() {
                    Stamp::NONE
                } else {
                    stamp_in(&h, at)
                };
                out.push((at, h.partition_leader_epoch, stamp, entry));
                next = at + 1;
            }
            next = next.max(batch_end);
        }
        Ok((out, next))
    }

    fn offset_for_time(&self, timestamp: i64) -> Result<Option<(u64, i64)>> {
        self.set.offset_for_timestamp(timestamp)
    }

    fn sync(&mut self) -> Result<()> {
        self.set.fsync()?;
        self.appender.flush.synced();
        Ok(())
    }

    fn dirty_info(&self, config: &CleanConfig) -> DirtyInfo {
        self.set.dirty_info(config)
    }

    fn plan_clean(&self, config: &CleanConfig) -> Result<CleanPlan> {
        self.set.plan_clean(config)
    }

    fn commit_clean(&mut self, cleaned: Cleaned) -> Result<(CleanStats, DeletedFiles)> {
        // Only closed segments change: the appender's open batch and the producer-state
        // snapshots (taken at rolls, of batch headers the cleaner keeps) stay valid.
        let stats = self.set.commit_clean(cleaned)?;
        Ok((stats, self.set.take_deleted_files()))
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.set.close().map(|_| ())
    }

    fn abandon(self: Box<Self>) {
        // A dead process flushes nothing: no `Drop` of the set.
        std::mem::forget(self.set);
    }
}

/// The partition directory of `topic`'s partition `partition` in `data_dir`.
pub(crate) fn partition_dir(data_dir: &Path, topic: &str, partition: u32) -> PathBuf {
    data_dir.join(format!("{topic}-{partition}"))
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use super::*;
    use crate::storage::record_batch::{encode_batch, BatchRecord};

    /// A replica's record on disk with a timestamp outside `0..=MAX_TIMESTAMP` decodes to a
    /// typed error (its directory is then taken offline as for any record it cannot
    /// read), not to an entry with its timestamp cut short; the ends of the range decode.
    #[test]
    fn a_stored_timestamp_outside_the_range_is_a_typed_error() {
        let value = 7u64.to_be_bytes();
        for (ts, ok) in [
            (0, true),
            (crate::MAX_TIMESTAMP, true),
            (crate::MAX_TIMESTAMP + 1, false),
            (i64::MAX, false),
            (-1, false),
        ] {
            let bytes = encode_batch(3, &[BatchRecord::new(ts, None, &value)]).unwrap();
            let batch = BatchIter::new(&bytes).next().unwrap().unwrap();
            let mut buf = Vec::new();
            let r = batch.records(&mut buf).unwrap().next().unwrap().unwrap();
            match decode_entry::<(), u64>(&r, batch.header()) {
                Ok(e) if ok => assert_eq!((e.timestamp(), *e.value()), (ts, 7)),
                Err(Error::InvalidTimestamp {
                    offset: Some(3),
                    timestamp,
                }) if !ok => assert_eq!(timestamp, ts),
                other => panic!("{ts}: {:?}", other.map(|e| e.timestamp())),
            }
        }
    }
}
