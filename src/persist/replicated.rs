//! Replicated persisted topics: a broker opened on several data directories (Kafka's
//! `log.dirs`, [`BrokerBuilder::data_dirs`](crate::broker::BrokerBuilder::data_dirs)) keeps each
//! partition's replicas on different directories, each a real log in
//! `<data dir>/<topic>-<partition>/` with its `leader-epoch-checkpoint`.
//!
//! # Metadata
//!
//! Each data directory holds `<topic>.replicas`: the topic's configuration and codecs, and
//! per partition its replicas, leader, leader epoch, ISR and high watermark, with a
//! generation number. Every election and ISR change rewrites it in every live directory
//! (atomically: temp file, fsync, rename, directory fsync) before the change takes effect
//! for producers, so what an `acks = all` send waited for is on disk. At open the copy with
//! the highest generation wins (a directory that failed keeps an older one).
//!
//! # Failures
//!
//! An I/O error from a directory (or the directory gone, checked by the controller thread)
//! takes every replica on it offline: leaders move to in-sync replicas elsewhere, ISRs
//! shrink. [`Faults::fail_data_dir`](crate::replica::Faults::fail_data_dir) makes a directory's I/O
//! fail; [`restore_data_dir`](crate::replica::Faults::restore_data_dir) brings it back, its replicas
//! reopening (recovering) what the disk kept and truncating by leader epoch.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::append::CodecChoice;
use super::dir_io::{DirIo, DirSwitch};
use super::io_err;
use super::replica_store::{partition_dir, DiskReplica, Loaded, StoreParams};
use super::{BrokerClock, MetaLine, TopicMeta};
use crate::clock::Clock;
use crate::codec::Codec;
use crate::partition::producer_state::ProducerExpiry;
use crate::partition::topic_config::TopicConfig;
use crate::storage::record_batch::Compression;
use crate::storage::{checkpoint, CleanConfig, CleanStats, DeletedFiles, DirLock, DirtyInfo, Io};
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::Arc as SyncArc;
use crate::sync::Mutex;
use crate::sync::StdArc as Arc;
use crate::{Error, Result};

/// A partition's leader, epoch, ISR and high watermark, as the topic's metadata files keep
/// them (replica ids, not indexes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartState {
    pub(crate) replicas: Vec<u32>,
    pub(crate) leader: Option<u32>,
    pub(crate) epoch: i32,
    pub(crate) isr: Vec<u32>,
    pub(crate) hw: u64,
}

/// A persisted partition's files, as its replica set reaches them.
pub(crate) trait Backing<K, V>: Send + Sync {
    /// Records the partition's new state (written atomically before this returns).
    fn save_state(&self, partition: u32, state: &PartState);
    /// Reopens replica `dir`'s log (its directory is back).
    fn reopen(&self, partition: u32, dir: u32) -> Result<Loaded<K, V>>;
    /// Directory `dir` returned an I/O error: every replica on it goes offline.
    fn dir_failed(&self, dir: u32);
    /// A producer with `codec` began sending to partition `partition`: its replicas compress
    /// with it unless the topic names a codec.
    fn note_producer_codec(&self, partition: u32, codec: Compression);
}

/// An open replicated partition as its directories see it: closed, synced or abandoned with
/// the broker, closed by its topic's deletion.
pub(crate) trait DiskPartition: Send + Sync {
    /// Its topic's name.
    fn topic_name(&self) -> &str;
    /// `for_broker`: by `Broker::close` (sends then say so), not by a delete.
    fn close_disk(&self, for_broker: bool) -> Result<()>;
    /// Fsyncs every replica, then saves the partition state (with its high watermark).
    fn sync_and_save_state(&self) -> Result<()>;
    fn abandon_disk(&self);
    /// Its partition number.
    fn partition_number(&self) -> u32;
    /// Its replicas' ids (data directories).
    fn replica_ids(&self) -> Vec<u32>;
    /// How dirty replica `id`'s log is below the replica's cleanable bound, which is set
    /// in `config.limit_offset`, and the replica's disk generation (it changes whenever the
    /// log is cut or reopened); `None` when it cannot be cleaned now (offline, closed, or
    /// not yet truncated by leader epoch).
    fn replica_dirty_info(&self, id: u32, config: &mut CleanConfig) -> Option<(DirtyInfo, u64)>;
    /// One cleaning pass over replica `id`'s log, never past its cleanable bound, and the
    /// replaced segments' files, to remove after it; `None` when it cannot be cleaned now.
    fn clean_replica(
        &self,
        id: u32,
        config: &CleanConfig,
    ) -> Option<Result<(CleanStats, DeletedFiles)>>;
}

/// The metadata file of a replicated persisted topic: `<data dir>/<topic>.replicas`.
pub(crate) const SUFFIX: &str = ".replicas";

/// A replicated persisted topic's metadata, as stored.
#[derive(Debug, Clone)]
pub(crate) struct ReplicatedMeta {
    pub(crate) topic: TopicMeta,
    pub(crate) replication_factor: u32,
    pub(crate) min_insync: u32,
    pub(crate) unclean: bool,
    pub(crate) lag_ms: u64,
    pub(crate) generation: u64,
    pub(crate) parts: Vec<PartState>,
}

fn ids(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

impl ReplicatedMeta {
    fn lines(&self) -> Vec<MetaLine> {
        let mut lines = self.topic.lines();
        let mut kv = |k: &str, v: String| lines.push(MetaLine(k.to_owned(), v));
        kv("generation", self.generation.to_string());
        kv("replication_factor", self.replication_factor.to_string());
        kv("min_insync_replicas", self.min_insync.to_string());
        kv("unclean_leader_election", self.unclean.to_string());
        kv("replica_lag_time_max_ms", self.lag_ms.to_string());
        for (p, s) in self.parts.iter().enumerate() {
            let leader = s.leader.map_or(-1, i64::from);
            kv(
                &format!("partition.{p}"),
                format!(
                    "replicas={} leader={leader} epoch={} isr={} hw={}",
                    ids(&s.replicas),
                    s.epoch,
                    ids(&s.isr),
                    s.hw
                ),
            );
        }
        lines
    }

    fn parse(name: &str, path: &Path, lines: Vec<MetaLine>) -> Result<Self> {
        let bad = |what: &str| Error::InvalidCheckpoint {
            file: path.to_path_buf(),
            line: 0,
            reason: format!("replicated topic metadata: {what} missing or invalid"),
        };
        let map: BTreeMap<String, String> =
            lines.iter().map(|l| (l.0.clone(), l.1.clone())).collect();
        let num = |k: &str| -> Result<u64> {
            map.get(k)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| bad(k))
        };
        let topic = TopicMeta::parse(name, path, lines.clone())?;
        let list = |v: &str| -> Option<Vec<u32>> {
            if v.is_empty() {
                return Some(Vec::new());
            }
            v.split(',').map(|x| x.parse().ok()).collect()
        };
        let mut parts = Vec::new();
        for p in 0..topic.partitions {
            let key = format!("partition.{p}");
            let line = map.get(&key).ok_or_else(|| bad(&key))?;
            let fields: BTreeMap<&str, &str> =
                line.split(' ').filter_map(|f| f.split_once('=')).collect();
            let get = |k: &str| fields.get(k).copied().ok_or_else(|| bad(&key));
            let leader: i64 = get("leader")?.parse().map_err(|_| bad(&key))?;
            parts.push(PartState {
                replicas: list(get("replicas")?).ok_or_else(|| bad(&key))?,
                leader: u32::try_from(leader).ok(),
                epoch: get("epoch")?.parse().map_err(|_| bad(&key))?,
                isr: list(get("isr")?).ok_or_else(|| bad(&key))?,
                hw: get("hw")?.parse().map_err(|_| bad(&key))?,
            });
        }
        let unclean = map.get("unclean_leader_election").map(String::as_str);
        let meta = Self {
            topic,
            replication_factor: u32::try_from(num("replication_factor")?)
                .map_err(|_| bad("replication_factor"))?,
            min_insync: u32::try_from(num("min_insync_replicas")?)
                .map_err(|_| bad("min_insync_replicas"))?,
            unclean: match unclean {
                Some("true") => true,
                Some("false") => false,
                _ => return Err(bad("unclean_leader_election")),
            },
            lag_ms: num("replica_lag_time_max_ms")?,
            generation: num("generation")?,
            parts,
        };
        meta.check().map_err(|what| bad(&what))?;
        Ok(meta)
    }

    pub(crate) fn topic_config(&self) -> TopicConfig {
        self.topic
            .topic_config()
            .replication_factor(self.replication_factor)
            .min_insync_replicas(self.min_insync)
            .unclean_leader_election(self.unclean)
            .replica_lag_time_max(Duration::from_millis(self.lag_ms))
    }

    /// What a parsed file must hold for the partitions built from it to work: the
    /// replication settings as `create_topic` with a persisted config accepts them, and per partition distinct
    /// replicas (as many as the replication factor), an ISR and leader among them, and an
    /// epoch and a generation that can still be bumped. `Err`: what is wrong.
    fn check(&self) -> std::result::Result<(), String> {
        self.topic_config().validate().map_err(|e| e.to_string())?;
        if self.generation == u64::MAX {
            return Err("generation (below 2^64 - 1)".into());
        }
        for (p, s) in self.parts.iter().enumerate() {
            let mut distinct = s.replicas.clone();
            distinct.sort_unstable();
            distinct.dedup();
            let ok = distinct.len() == s.replicas.len()
                && s.replicas.len() == self.replication_factor as usize
                && s.isr.iter().all(|i| s.replicas.contains(i))
                && s.leader.map_or(true, |l| s.replicas.contains(&l))
                && (0..i32::MAX).contains(&s.epoch);
            if !ok {
                return Err(format!(
                    "partition.{p} (replication_factor distinct replicas, an ISR and a \
                     leader among them, an epoch from 0 to {})",
                    i32::MAX - 1
                ));
            }
        }
        Ok(())
    }
}

/// The line of a metadata copy naming the directory it was written into (its index).
const DIR_INDEX: &str = "directory_index";

/// A copy of a topic's metadata found in another directory than the one it was written
/// into: `(the directory, its index now, its index then)`.
pub(crate) type Misplaced = (PathBuf, usize, String);

/// The refusal to open a topic whose metadata copy is misplaced (the directories
/// reordered, or one left out: replica ids are directory indexes).
pub(crate) fn misplaced_error(topic: &str, (dir, now, then): &Misplaced) -> Error {
    Error::InvalidConfig {
        name: "data_dirs",
        value: format!("{} as directory {now}", dir.display()),
        valid: format!(
            "the directories in their first order: this one was directory {then} for topic \
             `{topic}` (replica ids are directory indexes)"
        ),
    }
}

/// Reads every copy of every replicated topic's metadata in `dirs`; the highest generation
/// of each topic wins. A damaged copy is skipped when another is readable. Also returns
/// the topics with a copy in another directory than the one it was written into.
///
/// # Errors
///
/// [`Error::InvalidCheckpoint`] when every copy of a topic's metadata is damaged.
pub(crate) fn read_metas(
    io: &dyn Io,
    dirs: &[PathBuf],
) -> Result<(
    BTreeMap<String, ReplicatedMeta>,
    BTreeMap<String, Misplaced>,
)> {
    let mut out: BTreeMap<String, ReplicatedMeta> = BTreeMap::new();
    let mut misplaced: BTreeMap<String, Misplaced> = BTreeMap::new();
    let mut damaged: BTreeMap<String, Error> = BTreeMap::new();
    for (i, dir) in dirs.iter().enumerate() {
        let Ok(names) = io.list_dir(dir) else {
            continue;
        };
        for name in names {
            let Some(topic) = name.strip_suffix(SUFFIX) else {
                continue;
            };
            let path = dir.join(&name);
            let lines = checkpoint::read::<MetaLine>(io, &path);
            if let Ok(Some(lines)) = &lines {
                if let Some(was) = lines.iter().find(|l| l.0 == DIR_INDEX) {
                    if was.1 != i.to_string() {
                        misplaced
                            .entry(topic.to_owned())
                            .or_insert_with(|| (dir.clone(), i, was.1.clone()));
                    }
                }
            }
            let parsed = lines.and_then(|l| {
                l.map(|l| ReplicatedMeta::parse(topic, &path, l))
                    .transpose()
            });
            match parsed {
                Ok(Some(m)) => {
                    if out.get(topic).is_none_or_older(m.generation) {
                        out.insert(topic.to_owned(), m);
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    damaged.insert(topic.to_owned(), e);
                }
            }
        }
    }
    for (topic, e) in damaged {
        if !out.contains_key(&topic) {
            return Err(e);
        }
    }
    Ok((out, misplaced))
}

trait OlderThan {
    fn is_none_or_older(&self, generation: u64) -> bool;
}

impl OlderThan for Option<&ReplicatedMeta> {
    fn is_none_or_older(&self, generation: u64) -> bool {
        self.map_or(true, |m| m.generation < generation)
    }
}

/// A broker's data directories, as its replicated persisted topics use them.
pub(crate) struct DiskDirs {
    pub(crate) paths: Vec<PathBuf>,
    base: SyncArc<dyn Io>,
    ios: Vec<SyncArc<dyn Io>>,
    switches: Vec<DirSwitch>,
    clock: SyncArc<dyn Clock>,
    /// The broker's clock as the producer states' expiry takes it.
    broker_clock: Arc<dyn Clock>,
    /// The directories' locks (the first is the broker's data directory, locked there).
    locks: Mutex<Vec<Box<dyn DirLock>>>,
    /// Per directory: it failed (an I/O error, or gone).
    failed: Vec<AtomicBool>,
    /// Per directory: its failure was applied to every partition.
    handled: Mutex<Vec<bool>>,
    pub(crate) metas: Mutex<BTreeMap<String, ReplicatedMeta>>,
    /// Topics with a metadata copy in another directory than its own: not opened.
    pub(crate) misplaced: BTreeMap<String, Misplaced>,
    /// Every open persisted partition (closed with the broker).
    open: Mutex<Vec<Arc<dyn DiskPartition>>>,
    /// Set by `close` and `abandon` before they take `open`: a partition opened after that
    /// is not tracked (see `track_open`).
    closed: AtomicBool,
    /// Held by the creation of a topic (under the data directory's `opening` lock) and by
    /// its deletion, each to its end: a creation of a name never writes its metadata or
    /// makes its replicas' directories while a deletion of that name removes them.
    pub(crate) changing: Mutex<()>,
}

impl std::fmt::Debug for DiskDirs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskDirs")
            .field("paths", &self.paths)
            .finish_non_exhaustive()
    }
}

impl DiskDirs {
    /// Takes the directories (all but the first, the broker's data directory, locked by
    /// it) and reads the replicated topics' metadata.
    ///
    /// # Errors
    ///
    /// [`Error::DirectoryLocked`], I/O errors, [`Error::InvalidCheckpoint`] for metadata
    /// damaged in every copy.
    pub(crate) fn open(
        paths: Vec<PathBuf>,
        base: SyncArc<dyn Io>,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<Self>> {
        let mut locks = Vec::new();
        for dir in paths.iter().skip(1) {
            base.create_dir_all(dir)
                .map_err(|e| io_err("creating", dir, e))?;
            locks.push(base.lock_dir(dir).map_err(|e| {
                if e.kind() == std::io::ErrorKind::WouldBlock {
                    Error::DirectoryLocked {
                        dir: dir.clone(),
                        lock_file: dir.join(crate::storage::io::LOCK_FILE),
                    }
                } else {
                    io_err("locking", dir, e)
                }
            })?);
        }
        let (metas, misplaced) = read_metas(&*base, &paths)?;
        let n = paths.len();
        let dir_ios: Vec<DirIo> = (0..n).map(|_| DirIo::new(SyncArc::clone(&base))).collect();
        Ok(Arc::new(Self {
            switches: dir_ios.iter().map(DirIo::switch).collect(),
            ios: dir_ios
                .into_iter()
                .map(|d| crate::sync::arc_from_std(Arc::new(d) as Arc<dyn Io>))
                .collect(),
            base,
            clock: crate::sync::arc_from_std(
                Arc::new(BrokerClock(Arc::clone(&clock))) as Arc<dyn Clock>
            ),
            broker_clock: clock,
            locks: Mutex::new(locks),
            failed: (0..n).map(|_| AtomicBool::new(false)).collect(),
            handled: Mutex::new(vec![false; n]),
            metas: Mutex::new(metas),
            misplaced,
            open: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
            changing: Mutex::new(()),
            paths,
        }))
    }

    /// Tracks partitions just opened, so that `close`/`abandon` reach them. Both set
    /// `closed` before taking `open`, so either they take `sets` with the rest, or `closed`
    /// is seen here under the lock: the sets then write nothing more and the open fails.
    pub(crate) fn track_open(&self, sets: Vec<Arc<dyn DiskPartition>>) -> Result<()> {
        let mut open = self.open.lock();
        // Acquire: pairs with the Release stores in `close` / `abandon`.
        if self.closed.load(Ordering::Acquire) {
            drop(open);
            for s in sets {
                s.abandon_disk();
            }
            return Err(Error::Closed {
                what: "the broker's data directories".into(),
            });
        }
        open.extend(sets);
        Ok(())
    }

    pub(crate) fn count(&self) -> u32 {
        self.paths.len() as u32
    }

    pub(crate) fn io(&self, dir: u32) -> SyncArc<dyn Io> {
        SyncArc::clone(&self.ios[dir as usize])
    }

    pub(crate) fn is_failed(&self, dir: u32) -> bool {
        // Acquire: pairs with the Release store in `flag`.
        self.failed[dir as usize].load(Ordering::Acquire)
    }

    /// `Err(LogOffline)` naming the first failed directory, if any.
    pub(crate) fn check_online(&self) -> Result<()> {
        match (0..self.count()).find(|&d| self.is_failed(d)) {
            Some(d) => Err(Error::LogOffline {
                dir: self.paths[d as usize].clone(),
            }),
            None => Ok(()),
        }
    }

    /// Records that directory `dir` failed (the controller applies it to every partition).
    pub(crate) fn flag(&self, dir: u32) {
        if let Some(f) = self.failed.get(dir as usize) {
            // Release: pairs with the Acquire in `is_failed` / `take_failures`.
            f.store(true, Ordering::Release);
        }
    }

    /// Fails (`true`: its I/O returns errors) or restores directory `dir`.
    pub(crate) fn set_failed(&self, dir: u32, failed: bool) {
        let i = dir as usize;
        if i >= self.switches.len() {
            return;
        }
        self.switches[i].fail(failed);
        // Release: as in `flag`.
        self.failed[i].store(failed, Ordering::Release);
        self.handled.lock()[i] = failed;
    }

    /// Directories that failed since the last call (and any that vanished): the controller
    /// takes their replicas offline.
    pub(crate) fn take_failures(&self) -> Vec<u32> {
        let mut handled = self.handled.lock();
        let mut out = Vec::new();
        for (i, path) in self.paths.iter().enumerate() {
            if handled[i] {
                continue;
            }
            let gone = !matches!(self.base.exists(path), Ok(true));
            if gone || self.is_failed(i as u32) {
                handled[i] = true;
                self.flag(i as u32);
                self.switches[i].fail(true);
                out.push(i as u32);
            }
        }
        out
    }

    /// The open partitions of topics whose cleanup policy compacts, with their topics'
    /// metadata (the log cleaner's candidates).
    pub(crate) fn compacted_partitions(&self) -> Vec<(TopicMeta, Arc<dyn DiskPartition>)> {
        let open = self.open.lock().clone();
        let metas = self.metas.lock();
        open.into_iter()
            .filter_map(|p| {
                let meta = metas.get(p.topic_name())?;
                meta.topic
                    .cleanup
                    .compacts()
                    .then(|| (meta.topic.clone(), p))
            })
            .collect()
    }

    /// Replicated persisted topics on disk (open or not).
    pub(crate) fn names(&self) -> Vec<String> {
        self.metas.lock().keys().cloned().collect()
    }

    pub(crate) fn meta_types(&self, name: &str) -> Option<(String, String)> {
        self.metas
            .lock()
            .get(name)
            .map(|m| (m.topic.key_type.clone(), m.topic.value_type.clone()))
    }

    /// Closes every open partition (fsync) and releases the directories. The first error.
    pub(crate) fn close(&self) -> Result<()> {
        // Release: pairs with the Acquire in `track_open`, under the `open` lock taken next.
        self.closed.store(true, Ordering::Release);
        let open = std::mem::take(&mut *self.open.lock());
        let mut first = Ok(());
        for s in open {
            if let Err(e) = s.close_disk(true) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        self.locks.lock().clear();
        first
    }

    /// Fsyncs every open partition's replicas and saves their states with their high
    /// watermarks (`Broker::fsync_and_checkpoint`). The first error.
    pub(crate) fn sync(&self) -> Result<()> {
        let open = self.open.lock().clone();
        let mut first = Ok(());
        for s in open {
            if let Err(e) = s.sync_and_save_state() {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    /// A dead process: nothing more is written; locks stay until the process "dies".
    pub(crate) fn abandon(&self) {
        // Release: pairs with the Acquire in `track_open`, under the `open` lock taken next.
        self.closed.store(true, Ordering::Release);
        for s in std::mem::take(&mut *self.open.lock()) {
            s.abandon_disk();
        }
        for l in std::mem::take(&mut *self.locks.lock()) {
            std::mem::forget(l);
        }
    }

    pub(crate) fn params(
        &self,
        meta: &ReplicatedMeta,
        dir: u32,
        partition: u32,
        codec: Arc<CodecChoice>,
    ) -> StoreParams {
        StoreParams {
            dir: partition_dir(&self.paths[dir as usize], &meta.topic.name, partition),
            io: self.io(dir),
            clock: SyncArc::clone(&self.clock),
            config: meta.topic.log_config(),
            policy: meta.topic.persist.flush_policy(),
            capacity: meta.topic.records_in_memory,
            max_message_bytes: meta.topic.persist.message_limit(),
            codec,
            expiry: ProducerExpiry::new(
                Arc::clone(&self.broker_clock),
                Duration::from_millis(meta.topic.producer_id_expiration_ms),
            ),
        }
    }
}

/// One replicated persisted topic's files: the [`Backing`] of its partitions.
pub(crate) struct TopicFiles<K, V> {
    pub(crate) dirs: Arc<DiskDirs>,
    /// The data directory whose offsets checkpoint holds this topic's committed offsets.
    pub(crate) offsets: Option<Arc<super::data_dir::DataDir>>,
    pub(crate) meta: Mutex<ReplicatedMeta>,
    /// Per partition: the codec its replicas' batches take, one for all of them (a replica
    /// reopened keeps it), told which codec the producers use.
    codecs: Mutex<Vec<Arc<CodecChoice>>>,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> TopicFiles<K, V> {
    pub(crate) fn new(
        dirs: Arc<DiskDirs>,
        offsets: Option<Arc<super::data_dir::DataDir>>,
        meta: ReplicatedMeta,
    ) -> Self {
        Self {
            dirs,
            offsets,
            meta: Mutex::new(meta),
            codecs: Mutex::new(Vec::new()),
            _types: PhantomData,
        }
    }

    /// Partition `partition`'s codec choice, made from the topic's `compression.type` the
    /// first time.
    pub(crate) fn codec(&self, partition: u32) -> Arc<CodecChoice> {
        let mut codecs = self.codecs.lock();
        let topic = self.meta.lock().topic.persist.compression_type();
        while codecs.len() <= partition as usize {
            codecs.push(CodecChoice::new(topic));
        }
        Arc::clone(&codecs[partition as usize])
    }

    /// Writes the metadata to every live directory; a directory that fails is flagged.
    /// The number written.
    pub(crate) fn write_all(&self, meta: &ReplicatedMeta) -> usize {
        let path = format!("{}{SUFFIX}", meta.topic.name);
        let mut lines = meta.lines();
        let common = lines.len();
        let mut written = 0;
        for (i, dir) in self.dirs.paths.iter().enumerate() {
            let d = i as u32;
            if self.dirs.is_failed(d) {
                continue;
            }
            // Each copy names its directory: reopening with the directories reordered
            // would give replicas other ids (`read_metas` refuses it).
            lines.truncate(common);
            lines.push(MetaLine(DIR_INDEX.to_owned(), i.to_string()));
            match checkpoint::write(&*self.dirs.io(d), &dir.join(&path), &lines) {
                Ok(()) => written += 1,
                Err(_) => self.dirs.flag(d),
            }
        }
        written
    }
}

impl<K, V> Backing<K, V> for TopicFiles<K, V>
where
    K: Codec + Send + Sync + 'static,
    V: Codec + Send + Sync + 'static,
{
    fn save_state(&self, partition: u32, state: &PartState) {
        let mut meta = self.meta.lock();
        let Some(slot) = meta.parts.get_mut(partition as usize) else {
            return;
        };
        if slot == state {
            return;
        }
        *slot = state.clone();
        meta.generation += 1;
        self.write_all(&meta);
    }

    fn reopen(&self, partition: u32, dir: u32) -> Result<Loaded<K, V>> {
        let meta = self.meta.lock().clone();
        let codec = self.codec(partition);
        DiskReplica::<K, V>::open(&self.dirs.params(&meta, dir, partition, codec))
    }

    fn dir_failed(&self, dir: u32) {
        self.dirs.flag(dir);
    }

    fn note_producer_codec(&self, partition: u32, codec: Compression) {
        self.codec(partition).note_producer(codec);
    }
}

/// Removes topic `name`'s files from every directory (its partitions closed first).
pub(crate) fn delete_files(dirs: &DiskDirs, name: &str) -> Result<()> {
    let _changing = dirs.changing.lock();
    let mine: Vec<_> = {
        let mut open = dirs.open.lock();
        let (mine, rest) = std::mem::take(&mut *open)
            .into_iter()
            .partition(|s| s.topic_name() == name);
        *open = rest;
        mine
    };
    for s in mine {
        let _ = s.close_disk(false);
    }
    let meta = dirs.metas.lock().remove(name);
    let mut first = Ok(());
    for (i, dir) in dirs.paths.iter().enumerate() {
        if dirs.is_failed(i as u32) {
            // Failed since `delete_topic` checked: its files stay (the delete is not
            // complete, and says so).
            if first.is_ok() {
                first = Err(Error::LogOffline { dir: dir.clone() });
            }
            continue;
        }
        let io = dirs.io(i as u32);
        let file = dir.join(format!("{name}{SUFFIX}"));
        let r = io
            .remove_file(&file)
            .or_else(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Ok(()),
                _ => Err(e),
            })
            .map_err(|e| io_err("removing", &file, e))
            // Durable before the logs go: a power loss must not bring the topic back
            // with its logs gone.
            .and_then(|()| io.sync_dir(dir).map_err(|e| io_err("syncing", dir, e)));
        let parts = meta.as_ref().map_or(0, |m| m.topic.partitions);
        let r = r.and_then(|()| {
            (0..parts).try_for_each(|p| remove_tree(&*io, &partition_dir(dir, name, p)))
        });
        if let (Err(e), true) = (r, first.is_ok()) {
            first = Err(e);
        }
    }
    first
}

/// Removes a partition directory (flat: files only) if it exists, durably: its unlinks
/// are synced before the directory goes (else a power loss could bring files back into a
/// directory that is gone), and the removal is synced in the parent.
pub(crate) fn remove_tree(io: &dyn Io, dir: &Path) -> Result<()> {
    if !io.exists(dir).map_err(|e| io_err("checking", dir, e))? {
        return Ok(());
    }
    for f in io.list_dir(dir).map_err(|e| io_err("listing", dir, e))? {
        let p = dir.join(f);
        // Already gone is removed: a cleaning pass's replaced files are removed after the
        // pass, without the replica's lock.
        match io.remove_file(&p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io_err("removing", &p, e))
            }
            _ => {}
        }
    }
    io.sync_dir(dir).map_err(|e| io_err("syncing", dir, e))?;
    io.remove_dir(dir).map_err(|e| io_err("removing", dir, e))?;
    match dir.parent() {
        Some(parent) => io
            .sync_dir(parent)
            .map_err(|e| io_err("syncing", parent, e)),
        None => Ok(()),
    }
}

mod describe;
pub(crate) use describe::describe_dir;
pub use describe::{LocalReplica, StoredPartition, StoredTopic};

mod lost;
