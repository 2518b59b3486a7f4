//! The data directory: its lock, topic metadata, Kafka's checkpoint files, committed
//! offsets, the clean-shutdown marker, recovery at open, and the background thread.
//!
//! # Notes for contributors: the persisted-topic module
//!
//! - `persist/` is the one persist module (layer 5), for every topic whatever its replication
//!   factor; `broker/persisted.rs` holds the broker's persisted-topic methods
//!   (`BrokerBuilder::open`, the persisted halves of `create_topic` and `topic`,
//!   `fsync_and_checkpoint`, `close`, `Topic::fsync`/`write_to_files`) and calls down into it
//!   and into `replica`; `broker/faults.rs` holds `faults()` and the replication runtime.
//!   "Persisted" is the one word for a topic kept on disk (module `persist`, `PersistConfig`,
//!   `TopicConfig::persist`); "durable" means only what an fsync gives (survives a power loss).
//! - `persist/mod.rs`: `FlushPolicy`, `PersistConfig`, the data-directory options;
//!   `persist/append.rs`: the write path itself (encode into a RecordBatch, cut at the segment
//!   set's limit, append, flush policy), driven by RF 1's writer thread and by replicas
//!   inline; `persist/log.rs`: one RF 1 partition's log cell, the partition layer's view of it
//!   (`DiskLog`), and the writer thread; `persist/replica_store.rs`: one replica's segment set
//!   and `leader-epoch-checkpoint` (`ReplicaStore`); `persist/replicated.rs`: a replicated
//!   topic's directories, `<topic>.replicas` metadata, delete, `logbus describe`'s reader
//!   (`replicated/describe.rs`), replicas lost with their directory (`replicated/lost.rs`);
//!   `persist/dir_io.rs`: the per-directory `Io` that fails on demand;
//!   `persist/data_dir.rs`: the data directory (lock, checkpoint files, committed offsets,
//!   recovery at open, the retention thread); `persist/data_dir/topics.rs`: an RF 1 topic's
//!   life on disk (create, open, add partitions, delete); `persist/data_dir/cleaner.rs`: the
//!   log cleaner threads over RF 1 logs, `persist/data_dir/replica_cleaner.rs`: which replica
//!   of a replicated topic they clean (the pass itself runs in `replica::set::clean`),
//!   `persist/data_dir/removals.rs`: the passes' replaced files, removed after the passes.
//! - `persist/data_dir/marker.rs`: each data directory's marker, `meta.properties` (Kafka's
//!   layout: `version`, `cluster.id`, `node.id`, `directory.id`, plus `logbus.directories`, the
//!   broker's whole set). `BrokerBuilder::open` plans the markers twice: before anything is
//!   created or locked (a missing, unformatted, foreign or lost directory is refused untouched),
//!   then under the locks, where it writes new markers (new and replaced directories first,
//!   then the siblings' lists). A member of the set without its marker is lost
//!   (`Error::DataDirLost`); with `replace_lost_data_dirs` it is formatted again, and the
//!   replicated topic's open (`persist/replicated/lost.rs`, `replica::rejoin`) starts each
//!   replica whose log directory is gone offline, so the saved ISR loses it before the election, then restarts it as a follower.
//!   Tests: `tests/replicas/data_dirs.rs`, `cli` `verify_and_describe_report_the_marker`.
//! - The topic's metadata file (`<topic>.topic`) is the commit point of every change to the
//!   set of partitions: directories first, metadata (atomically) second, so a crash in between
//!   leaves only directories the metadata does not count, which are removed before their name is
//!   used again. Deleting removes the metadata first.
//! - Lock order: `DataDir::opening` → `DataDir::metas` → the broker's topics map → `cells` → a
//!   cell's `log`. Never call into the broker's topic lookups while holding `metas` (the lookup
//!   of an unopened persisted topic reads `metas`). The creation of a replicated topic holds
//!   `opening` too (`DataDir::creating`), so creations of either kind run one at a time, and
//!   so does `DataDir::delete_topic`, to its end (a creation of the name waits for the old
//!   partition directories to go); a replicated topic's creation and deletion hold
//!   `DiskDirs::changing` to their end, taken after `opening`.
//! - Every file replaced through a temp file (`checkpoint::write`: `<name>.tmp`, fsync,
//!   rename, directory fsync) has one writer at a time: the directory's checkpoint files
//!   (offsets, recovery points, log starts) under `DataDir::checkpointing` (taken before
//!   `loaded` and `open`; none after `close` began, which writes the last), `<topic>.topic`
//!   under `metas`, `<topic>.replicas` under the topic's metadata lock (and creation under
//!   `opening`), `leader-epoch-checkpoint` by its replica's store (the partition directory's
//!   lock, the replica set's lock), `meta.properties` only at open, under the directory locks.
//! - Tests: `tests/crash/persisted.rs` (restart and replay, SIGKILL rounds with a child process, 60
//!   simulated power losses on `FaultyIo`, typed errors), `tests/crash/persisted_checkpoints.rs`
//!   (concurrent and racing checkpoint writers, SIGKILL during syncs;
//!   `LOGBUS_CLOSE_RACE_ROUNDS`, `LOGBUS_CHECKPOINT_KILL_ROUNDS` for longer runs),
//!   `tests/crash/persisted_open.rs` (stray segment files, name limits, the builder, the lock); a
//!   new `Io` method needs its `FaultyIo` model to say what survives a `crash` (see
//!   `remove_dir`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rayon::prelude::*;

mod cleaner;
mod marker;
mod removals;
mod replica_cleaner;
mod topics;

pub use cleaner::CleanerProgress;

pub(crate) use marker::{plan as plan_markers, MarkerConfig};
pub use marker::{read_dir_marker, DataDirMarker};

use super::log::LogCell;
use super::{io_err, DataDirConfig, FlushPolicy, PersistConfig};
use crate::clock::Clock;
use crate::codec::Codec;
use crate::partition::topic_config::{validate_kafka_topic_name, CleanupPolicy, TopicConfig};
use crate::storage::checkpoint::{self, CheckpointEntry, TopicPartitionOffset};
use crate::storage::{
    Checkpoints, DirLock, FsIo, Io, LogConfig, LogSetup, RecoveryReport, SegmentSet,
};
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::thread::{self, JoinHandle};
use crate::sync::Arc as SyncArc;
use crate::sync::StdArc as Arc;
use crate::sync::{Mutex, WaitSet};
use crate::{Error, Result};

const RECOVERY_POINTS: &str = "recovery-point-offset-checkpoint";
const LOG_STARTS: &str = "log-start-offset-checkpoint";
const OFFSETS: &str = "consumer-offsets-checkpoint";
const CLEAN: &str = ".logbus_cleanshutdown";
const TOPIC_SUFFIX: &str = ".topic";
/// Kafka's file of each compacted partition's first dirty offset.
const CLEANER_OFFSETS: &str = "cleaner-offset-checkpoint";

/// One replica of a replicated topic's partition: (topic, partition, replica id).
type ReplicaKey = (String, u32, u32);

/// The log cleaner's bookkeeping (see `data_dir/cleaner.rs`).
#[derive(Default)]
struct CleanerState {
    progress: Mutex<BTreeMap<(String, u32), CleanerProgress>>,
    /// Partitions a cleaner thread is cleaning.
    in_progress: Mutex<std::collections::BTreeSet<(String, u32)>>,
    /// Notified when a pass ends (`compact_now` waits for the threads' passes).
    pass_ended: WaitSet,
    /// Per replica of a replicated topic: where its cleaning got (see
    /// `data_dir/replica_cleaner.rs`).
    replica_progress: Mutex<BTreeMap<ReplicaKey, replica_cleaner::ReplicaProgress>>,
    /// Replicas a cleaner thread is cleaning.
    replicas_in_progress: Mutex<std::collections::BTreeSet<ReplicaKey>>,
    /// The passes' replaced files, removed after the passes (`data_dir/removals.rs`).
    removals: removals::PendingRemovals,
}

/// The broker's clock (a std `Arc`) as the storage layer takes clocks (`sync::Arc`, which
/// is loom's under `logbus_loom`).
#[derive(Debug)]
pub(crate) struct BrokerClock(pub(crate) Arc<dyn Clock>);

impl Clock for BrokerClock {
    fn now_ms(&self) -> i64 {
        self.0.now_ms()
    }

    fn monotonic_ns(&self) -> u64 {
        self.0.monotonic_ns()
    }
}

/// What recovery did to one partition when the broker opened.
#[derive(Debug, Clone)]
pub struct PartitionRecovery {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// The storage layer's report (truncations, the recovered log end).
    pub report: RecoveryReport,
    /// The partition's directory was missing and was created empty: every record it held
    /// is lost (only with
    /// [`BrokerBuilder::recreate_missing_partitions`](crate::broker::BrokerBuilder::recreate_missing_partitions);
    /// otherwise the open fails with [`Error::PartitionDirMissing`]).
    pub recreated: bool,
}

/// A committed offset found beyond its partition's recovered log end, clamped to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClampedOffset {
    /// The group.
    pub group: String,
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// The offset in the checkpoint.
    pub committed: u64,
    /// The recovered log end it was clamped to.
    pub log_end: u64,
}

/// One `key value` line of a topic's metadata file.
#[derive(Debug, Clone)]
pub(crate) struct MetaLine(pub(crate) String, pub(crate) String);

impl CheckpointEntry for MetaLine {
    fn to_line(&self) -> std::result::Result<String, String> {
        Ok(format!("{} {}", self.0, self.1))
    }

    fn parse_line(line: &str) -> std::result::Result<Self, String> {
        match line.split_once(' ') {
            Some((k, v)) if !k.is_empty() => Ok(MetaLine(k.into(), v.into())),
            _ => Err(format!("expected `key value`, found {line:?}")),
        }
    }
}

/// `group topic partition offset` (the group percent-encoded: it may hold spaces).
#[derive(Debug, Clone)]
struct GroupOffset(String, TopicPartitionOffset);

fn escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c == '%' || c.is_whitespace() {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn unescape(s: &str) -> std::result::Result<String, String> {
    let mut bytes = Vec::new();
    let mut it = s.bytes();
    while let Some(b) = it.next() {
        if b == b'%' {
            let hex: Vec<u8> = it.by_ref().take(2).collect();
            let h = std::str::from_utf8(&hex)
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            bytes.push(h.ok_or_else(|| format!("bad escape in {s:?}"))?);
        } else {
            bytes.push(b);
        }
    }
    String::from_utf8(bytes).map_err(|_| format!("group {s:?} is not UTF-8"))
}

impl CheckpointEntry for GroupOffset {
    fn to_line(&self) -> std::result::Result<String, String> {
        Ok(format!("{} {}", escape(&self.0), self.1.to_line()?))
    }

    fn parse_line(line: &str) -> std::result::Result<Self, String> {
        let (g, rest) = line
            .split_once(' ')
            .ok_or_else(|| format!("expected `group topic partition offset`, found {line:?}"))?;
        Ok(GroupOffset(
            unescape(g)?,
            TopicPartitionOffset::parse_line(rest)?,
        ))
    }
}

/// A persisted topic's metadata, as stored.
#[derive(Debug, Clone)]
pub(crate) struct TopicMeta {
    pub(crate) name: String,
    pub(crate) partitions: u32,
    pub(crate) key_type: String,
    pub(crate) value_type: String,
    pub(crate) records_in_memory: usize,
    pub(crate) retention_ms: i64,
    pub(crate) persist: PersistConfig,
    /// Kafka's `cleanup.policy` and the compaction settings; a file written before they
    /// existed reads as `delete` with Kafka's defaults.
    pub(crate) cleanup: CleanupPolicy,
    pub(crate) min_cleanable_dirty_ratio: f64,
    pub(crate) delete_retention_ms: u64,
    pub(crate) min_compaction_lag_ms: u64,
    /// Kafka's `producer.id.expiration.ms`; a file written before it was stored reads as
    /// the default.
    pub(crate) producer_id_expiration_ms: u64,
}

impl TopicMeta {
    /// A cleaning pass's settings for this topic (its first dirty offset and bound are set
    /// per log).
    pub(crate) fn clean_config(&self, dedupe_buffer_bytes: usize) -> crate::storage::CleanConfig {
        crate::storage::CleanConfig {
            delete_retention_ms: i64::try_from(self.delete_retention_ms).unwrap_or(i64::MAX),
            min_compaction_lag_ms: i64::try_from(self.min_compaction_lag_ms).unwrap_or(i64::MAX),
            dedupe_buffer_bytes,
            ..crate::storage::CleanConfig::default()
        }
    }

    /// The metadata of a new topic of `K` keys and `V` values.
    pub(crate) fn new<K: Codec, V: Codec>(
        name: &str,
        config: &TopicConfig,
        persist: PersistConfig,
    ) -> Self {
        TopicMeta {
            name: name.to_owned(),
            partitions: config.partitions(),
            key_type: crate::codec::type_name::<K>().into_owned(),
            value_type: crate::codec::type_name::<V>().into_owned(),
            records_in_memory: config.records_in_memory_per_partition(),
            retention_ms: config
                .retention_age()
                .map_or(-1, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            persist,
            cleanup: config.cleanup(),
            min_cleanable_dirty_ratio: config.min_dirty_ratio(),
            delete_retention_ms: u64::try_from(config.tombstone_retention().as_millis())
                .unwrap_or(u64::MAX),
            min_compaction_lag_ms: u64::try_from(config.compaction_lag().as_millis())
                .unwrap_or(u64::MAX),
            producer_id_expiration_ms: u64::try_from(config.producer_expiration().as_millis())
                .unwrap_or(u64::MAX),
        }
    }

    pub(crate) fn lines(&self) -> Vec<MetaLine> {
        let p = &self.persist;
        let flush = match p.flush {
            FlushPolicy::EveryBatch => "every_batch".to_string(),
            FlushPolicy::Messages(n) => format!("messages:{n}"),
            FlushPolicy::Bytes(n) => format!("bytes:{n}"),
            FlushPolicy::Interval(d) => format!("interval_ms:{}", d.as_millis()),
            FlushPolicy::Os => "os".to_string(),
        };
        [
            ("partitions", self.partitions.to_string()),
            ("key_type", self.key_type.clone()),
            ("value_type", self.value_type.clone()),
            ("records_in_memory", self.records_in_memory.to_string()),
            ("retention_ms", self.retention_ms.to_string()),
            (
                "retention_bytes",
                p.retention_bytes.map_or(-1, |b| b as i64).to_string(),
            ),
            ("segment_bytes", p.segment_bytes.to_string()),
            ("max_message_bytes", p.max_message_bytes.to_string()),
            ("flush", flush),
            ("compression_type", p.compression.name().to_string()),
            ("cleanup_policy", self.cleanup.kafka_name().to_owned()),
            (
                "min_cleanable_dirty_ratio",
                self.min_cleanable_dirty_ratio.to_string(),
            ),
            ("delete_retention_ms", self.delete_retention_ms.to_string()),
            (
                "min_compaction_lag_ms",
                self.min_compaction_lag_ms.to_string(),
            ),
            (
                "producer_id_expiration_ms",
                self.producer_id_expiration_ms.to_string(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| MetaLine(k.into(), v))
        .collect()
    }

    pub(crate) fn parse(name: &str, path: &Path, lines: Vec<MetaLine>) -> Result<Self> {
        let map: HashMap<String, String> = lines.into_iter().map(|l| (l.0, l.1)).collect();
        let bad = |what: &str| Error::InvalidCheckpoint {
            file: path.to_path_buf(),
            line: 0,
            reason: format!("topic metadata: {what} missing or invalid"),
        };
        let get = |k: &str| map.get(k).cloned().ok_or_else(|| bad(k));
        let num = |k: &str| get(k)?.parse::<i64>().map_err(|_| bad(k));
        let flush = get("flush")?;
        let flush = match flush.split_once(':') {
            None if flush == "every_batch" => FlushPolicy::EveryBatch,
            None if flush == "os" => FlushPolicy::Os,
            Some(("messages", n)) => FlushPolicy::Messages(n.parse().map_err(|_| bad("flush"))?),
            Some(("bytes", n)) => FlushPolicy::Bytes(n.parse().map_err(|_| bad("flush"))?),
            Some(("interval_ms", n)) => {
                FlushPolicy::Interval(Duration::from_millis(n.parse().map_err(|_| bad("flush"))?))
            }
            _ => return Err(bad("flush")),
        };
        let retention_bytes = num("retention_bytes")?;
        let mut persist = PersistConfig::new()
            .flush(flush)
            .segment_bytes(num("segment_bytes")? as u64)
            .max_message_bytes(num("max_message_bytes")? as u64);
        if retention_bytes >= 0 {
            persist = persist.retention_bytes(retention_bytes as u64);
        }
        // Missing in metadata written before compression: `producer`, Kafka's default.
        if let Some(c) = map.get("compression_type") {
            let c = super::CompressionType::from_name(c).ok_or_else(|| bad("compression_type"))?;
            persist = persist.compression(c);
        }
        let cleanup = match map.get("cleanup_policy") {
            None => CleanupPolicy::Delete,
            Some(p) => CleanupPolicy::from_kafka_name(p).ok_or_else(|| bad("cleanup_policy"))?,
        };
        let defaults = TopicConfig::new(1);
        let min_cleanable_dirty_ratio = match map.get("min_cleanable_dirty_ratio") {
            None => defaults.min_dirty_ratio(),
            Some(r) => r
                .parse::<f64>()
                .map_err(|_| bad("min_cleanable_dirty_ratio"))?,
        };
        let ms_or = |k: &str, default: Duration| -> Result<u64> {
            match map.get(k) {
                None => Ok(u64::try_from(default.as_millis()).unwrap_or(u64::MAX)),
                Some(v) => v.parse::<u64>().map_err(|_| bad(k)),
            }
        };
        let meta = TopicMeta {
            cleanup,
            min_cleanable_dirty_ratio,
            delete_retention_ms: ms_or("delete_retention_ms", defaults.tombstone_retention())?,
            min_compaction_lag_ms: ms_or("min_compaction_lag_ms", defaults.compaction_lag())?,
            producer_id_expiration_ms: ms_or(
                "producer_id_expiration_ms",
                defaults.producer_expiration(),
            )?,
            name: name.to_owned(),
            partitions: u32::try_from(num("partitions")?).map_err(|_| bad("partitions"))?,
            key_type: get("key_type")?,
            value_type: get("value_type")?,
            records_in_memory: usize::try_from(num("records_in_memory")?)
                .map_err(|_| bad("records_in_memory"))?,
            retention_ms: num("retention_ms")?,
            persist,
        };
        // Settings `create_topic` with a persisted config would refuse (the file was edited or damaged).
        meta.topic_config()
            .validate()
            .and_then(|()| meta.persist.validate())
            .and_then(|()| meta.persist.validate_with(&meta.topic_config()))
            .map_err(|e| Error::InvalidCheckpoint {
                file: path.to_path_buf(),
                line: 0,
                reason: format!("topic metadata: {e}"),
            })?;
        Ok(meta)
    }

    pub(crate) fn topic_config(&self) -> TopicConfig {
        let mut c = TopicConfig::new(self.partitions)
            .records_in_memory(self.records_in_memory)
            .cleanup_policy(self.cleanup)
            .min_cleanable_dirty_ratio(self.min_cleanable_dirty_ratio)
            .delete_retention(Duration::from_millis(self.delete_retention_ms))
            .min_compaction_lag(Duration::from_millis(self.min_compaction_lag_ms))
            .producer_id_expiration(Duration::from_millis(self.producer_id_expiration_ms));
        if self.retention_ms > 0 {
            c = c.retention(Duration::from_millis(self.retention_ms as u64));
        }
        c
    }

    pub(crate) fn log_config(&self) -> LogConfig {
        let p = &self.persist;
        LogConfig {
            segment_bytes: p.segment_bytes,
            retention_ms: self.retention_ms,
            retention_bytes: p.retention_bytes.map_or(-1, |b| b as i64),
            // The writer's batches: up to its target plus one record.
            max_batch_bytes: (256 << 10) + p.max_message_bytes + 4096,
            // Under the OS's flush policy nothing fsyncs on its own: write-back is the
            // kernel's business, not the writer thread's (each start costs it a system call
            // and the I/O submission).
            start_writeback: p.flush != FlushPolicy::Os,
            ..LogConfig::default()
        }
    }
}

/// A partition of an open topic, type-erased.
pub(crate) struct OpenPartition {
    topic: String,
    partition: u32,
    committed: Box<dyn Fn() -> Vec<(Arc<str>, u64)> + Send + Sync>,
    close: Box<dyn Fn() + Send + Sync>,
    sync: Box<dyn Fn() -> Result<()> + Send + Sync>,
    writer: Option<JoinHandle<()>>,
}

/// The state of a broker's data directory.
pub(crate) struct DataDir {
    dir: PathBuf,
    pub(crate) io: SyncArc<dyn Io>,
    options: DataDirConfig,
    /// The broker's clock, shared the way the storage layer takes it.
    clock: SyncArc<dyn Clock>,
    /// The broker's clock itself, for what partitions time (their producer ids' expiry).
    broker_clock: Arc<dyn Clock>,
    lock: Mutex<Option<Box<dyn DirLock>>>,
    pub(crate) metas: Mutex<BTreeMap<String, TopicMeta>>,
    cells: Mutex<BTreeMap<(String, u32), Arc<LogCell>>>,
    reports: Vec<PartitionRecovery>,
    /// Offsets from the checkpoint, for topics not opened yet.
    loaded: Mutex<OffsetMap>,
    clamped: Mutex<Vec<ClampedOffset>>,
    open: Mutex<Vec<OpenPartition>>,
    /// Serialises `topic` and `create_topic` (one set of writers per topic), and the
    /// creation of replicated topics ([`creating`](Self::creating)).
    pub(crate) opening: Mutex<()>,
    /// The topic `create_topic` is starting (at most one: `opening` is held): its metadata
    /// is in `metas`, but it is not registered yet, so it is hidden (taken after `metas`).
    pub(crate) creating: Mutex<Option<String>>,
    background: Mutex<Option<JoinHandle<()>>>,
    /// The log cleaner threads (`BrokerBuilder::log_cleaner_threads`), joined with
    /// `background`.
    cleaners: Mutex<Vec<JoinHandle<()>>>,
    cleaner: CleanerState,
    /// Held by every writer of the directory's checkpoint files (consumer offsets, recovery
    /// points, log starts) from its snapshot to its rename, as Kafka serialises its
    /// checkpoint writers: each file's writers share its temp file, and a snapshot must
    /// reach the file in the order it was taken. Taken before `loaded` and `open`.
    checkpointing: Mutex<()>,
    /// Every topic name the checkpoint files (recovery points, log starts, consumer offsets,
    /// cleaner offsets) may hold: the names read at open, and each name a writer puts in a
    /// file, added under `checkpointing` before the write (a failed write may still have
    /// replaced the file). Never shrinks: a name outside it is in none of the files, as
    /// they are now and as a crash would leave them.
    checkpointed: Mutex<BTreeSet<String>>,
    stop: AtomicBool,
    stop_wait: WaitSet,
    closed: AtomicBool,
    /// Directories formatted again at open, having lost their marker.
    replaced: Mutex<Vec<PathBuf>>,
    /// The broker's data directories as its replicated topics use them, whose replicas
    /// the cleaner threads compact too (set once, at open).
    replicated: Mutex<Option<Arc<super::replicated::DiskDirs>>>,
}

impl std::fmt::Debug for DataDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataDir")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl DataDir {
    pub(crate) fn open(
        dir: PathBuf,
        options: DataDirConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<Self>> {
        let broker_clock = Arc::clone(&clock);
        let clock: SyncArc<dyn Clock> =
            crate::sync::arc_from_std(Arc::new(BrokerClock(clock)) as Arc<dyn Clock>);
        let io = match &options.io {
            Some(io) => SyncArc::clone(io),
            None => crate::sync::arc_from_std(Arc::new(FsIo) as Arc<dyn Io>),
        };
        io.create_dir_all(&dir)
            .map_err(|e| io_err("creating", &dir, e))?;
        let lock = io.lock_dir(&dir).map_err(|e| {
            if e.kind() == std::io::ErrorKind::WouldBlock {
                Error::DirectoryLocked {
                    dir: dir.clone(),
                    lock_file: dir.join(crate::storage::io::LOCK_FILE),
                }
            } else {
                io_err("locking", &dir, e)
            }
        })?;
        let marker = dir.join(CLEAN);
        let clean = io
            .exists(&marker)
            .map_err(|e| io_err("checking", &marker, e))?;
        if clean {
            // As Kafka deletes its marker at startup: from now on the directory is being
            // written, and a crash must not look clean.
            io.remove_file(&marker)
                .map_err(|e| io_err("removing", &marker, e))?;
            io.sync_dir(&dir).map_err(|e| io_err("syncing", &dir, e))?;
        }
        let points = read_tpo(&*io, &dir.join(RECOVERY_POINTS))?;
        let starts = read_tpo(&*io, &dir.join(LOG_STARTS))?;
        let mut checkpointed: BTreeSet<String> = points
            .keys()
            .chain(starts.keys())
            .map(|(t, _)| t.clone())
            .collect();
        let mut metas = BTreeMap::new();
        for name in io.list_dir(&dir).map_err(|e| io_err("listing", &dir, e))? {
            let Some(topic) = name.strip_suffix(TOPIC_SUFFIX) else {
                continue;
            };
            // Kafka's rule, not the stricter one for new topics: a topic written by an
            // earlier version under a longer name is still found.
            if validate_kafka_topic_name(topic).is_err() {
                continue;
            }
            let path = dir.join(&name);
            if let Some(lines) = checkpoint::read::<MetaLine>(&*io, &path)? {
                metas.insert(topic.to_owned(), TopicMeta::parse(topic, &path, lines)?);
            }
        }
        // Every partition recovers in parallel: recovery is CPU (CRC) and I/O bound per
        // partition and independent across them, so a broker with many partitions opens in
        // the time of its largest one, not the sum (rayon's pool sizes itself to the cores).
        let jobs: Vec<(TopicMeta, u32)> = metas
            .values()
            .flat_map(|m| (0..m.partitions).map(move |p| (m.clone(), p)))
            .collect();
        let recreate = options.recreate_missing;
        let opened: Vec<Result<(SegmentSet, PartitionRecovery)>> = jobs
            .par_iter()
            .map(|(meta, p)| {
                let key = (meta.name.clone(), *p);
                // A topic's directories are made before its metadata (`create_topic`,
                // `add_partitions`): one missing now was removed, and its records with it.
                let pdir = dir.join(format!("{}-{p}", meta.name));
                let missing = !io.exists(&pdir).map_err(|e| io_err("checking", &pdir, e))?;
                if missing && !recreate {
                    return Err(Error::PartitionDirMissing {
                        topic: meta.name.clone(),
                        partition: *p,
                        dir: pdir,
                    });
                }
                let checkpoints = Checkpoints {
                    recovery_point: points.get(&key).copied().unwrap_or(0),
                    log_start_offset: starts.get(&key).copied().unwrap_or(0),
                    clean_shutdown: clean,
                };
                let (set, report) = SegmentSet::open(
                    pdir,
                    LogSetup {
                        config: meta.log_config(),
                        io: SyncArc::clone(&io),
                        clock: SyncArc::clone(&clock),
                        checkpoints,
                    },
                )?;
                let recovery = PartitionRecovery {
                    topic: meta.name.clone(),
                    partition: *p,
                    report,
                    recreated: missing,
                };
                Ok((set, recovery))
            })
            .collect();
        let mut cells = BTreeMap::new();
        let mut reports = Vec::new();
        for r in opened {
            let (set, recovery) = r?;
            let (topic, partition) = (&recovery.topic, recovery.partition);
            cells.insert(
                (topic.clone(), partition),
                Arc::new(LogCell::new(topic, partition, set)),
            );
            reports.push(recovery);
        }
        let mut loaded = BTreeMap::new();
        let offsets_path = dir.join(OFFSETS);
        for g in checkpoint::read::<GroupOffset>(&*io, &offsets_path)?.unwrap_or_default() {
            checkpointed.insert(g.1.topic.clone());
            loaded.insert((g.0, g.1.topic, g.1.partition), g.1.offset);
        }
        let data = Arc::new(DataDir {
            dir,
            io,
            options,
            clock,
            broker_clock,
            lock: Mutex::new(Some(lock)),
            metas: Mutex::new(metas),
            cells: Mutex::new(cells),
            reports,
            loaded: Mutex::new(loaded),
            clamped: Mutex::new(Vec::new()),
            open: Mutex::new(Vec::new()),
            opening: Mutex::new(()),
            creating: Mutex::new(None),
            background: Mutex::new(None),
            cleaners: Mutex::new(Vec::new()),
            cleaner: CleanerState::default(),
            checkpointing: Mutex::new(()),
            checkpointed: Mutex::new(checkpointed),
            stop: AtomicBool::new(false),
            stop_wait: WaitSet::new(),
            closed: AtomicBool::new(false),
            replaced: Mutex::new(Vec::new()),
            replicated: Mutex::new(None),
        });
        data.read_cleaner_checkpoint()?;
        Ok(data)
    }

    pub(crate) fn start_background(self: &Arc<Self>) -> Result<()> {
        let me = Arc::clone(self);
        let handle = thread::spawn_named("logbus-retention".into(), move || me.background())
            .map_err(|e| Error::io("spawning the retention thread", e))?;
        *self.background.lock() = Some(handle);
        for i in 0..self.options.cleaner_threads {
            let me = Arc::clone(self);
            let handle =
                thread::spawn_named(format!("logbus-cleaner-{i}"), move || me.cleaner_thread())
                    .map_err(|e| Error::io("spawning a log cleaner thread", e))?;
            self.cleaners.lock().push(handle);
        }
        Ok(())
    }

    fn stopping(&self) -> bool {
        // Acquire: pairs with the Release store in `close`.
        self.stop.load(Ordering::Acquire)
    }

    fn background(&self) {
        let tick = self
            .options
            .retention_interval
            .min(self.options.offsets_interval);
        let mut since_offsets = Duration::ZERO;
        let mut since_retention = Duration::ZERO;
        while !self.stopping() {
            let deadline = crate::sync::time::deadline_after(tick);
            self.stop_wait
                .wait_until(deadline, || self.stopping().then_some(()));
            if self.stopping() {
                return;
            }
            since_offsets += tick;
            since_retention += tick;
            if since_retention >= self.options.retention_interval {
                since_retention = Duration::ZERO;
                self.retention();
                // A failure leaves the previous file in place; the next tick retries.
                let _ = self.write_log_checkpoints(None);
            }
            if since_offsets >= self.options.offsets_interval {
                since_offsets = Duration::ZERO;
                let _ = self.write_offsets();
            }
        }
    }

    /// Deletes expired segments of every partition; the log start moves up.
    pub(crate) fn retention(&self) {
        let cells: Vec<_> = self.cells.lock().values().cloned().collect();
        for cell in cells {
            let mut log = cell.log.lock();
            let Some(set) = log.as_mut() else { continue };
            if set.is_offline() {
                continue;
            }
            // Only what the writer put on disk is eligible (the high watermark).
            let limit = set.log_end_offset();
            match set.delete_old_segments(limit) {
                Ok(_) => cell.set_log_start(set.log_start_offset()),
                Err(e) => {
                    drop(log);
                    cell.fail(&e);
                }
            }
        }
    }

    /// Writes the recovery-point and log-start checkpoints: from `closed` (`close`'s own
    /// snapshot), or from the open partitions while the directory is open.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`] without `closed` once `close` began; I/O errors.
    pub(crate) fn write_log_checkpoints(
        &self,
        closed: Option<&[(String, u32, Checkpoints)]>,
    ) -> Result<()> {
        let _writing = self.checkpointing.lock();
        if closed.is_none() {
            // After `close` began, only its own snapshot (`closed`) is written: the open
            // partitions' logs are being taken, and a snapshot of what remains would miss
            // them.
            self.check_open()?;
        }
        let mut points = Vec::new();
        let mut starts = Vec::new();
        match closed {
            Some(list) => {
                for (t, p, c) in list {
                    points.push(tpo(t, *p, c.recovery_point));
                    starts.push(tpo(t, *p, c.log_start_offset));
                }
            }
            None => {
                for ((t, p), cell) in self.cells.lock().iter() {
                    let log = cell.log.lock();
                    if let Some(set) = log.as_ref() {
                        points.push(tpo(t, *p, set.recovery_point()));
                        starts.push(tpo(t, *p, set.log_start_offset()));
                    }
                }
            }
        }
        self.note_checkpointed(points.iter().chain(&starts));
        checkpoint::write(&*self.io, &self.dir.join(RECOVERY_POINTS), &points)?;
        checkpoint::write(&*self.io, &self.dir.join(LOG_STARTS), &starts)
    }

    /// Checkpoints every committed offset (atomically: temp file, fsync, rename, directory
    /// fsync), serialised with every other checkpoint writer.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`] once `close` began: `close` writes the last checkpoint, from the
    /// partitions it took, and a snapshot taken after that would miss them.
    pub(crate) fn write_offsets(&self) -> Result<()> {
        let _writing = self.checkpointing.lock();
        self.check_open()?;
        let loaded = self.loaded.lock().clone();
        // Its own statement: `open` is unlocked before the checkpoint's fsync.
        let all = with_live_commits(loaded, &self.open.lock());
        self.write_offset_map(all)
    }

    /// Held by the creation of a replicated persisted topic, from its checks to its
    /// registration: creations of either kind happen one at a time, so two of one name
    /// never both write its metadata (they would share its temp file, and the loser's copy
    /// would replace the winner's).
    pub(crate) fn creating(&self) -> crate::sync::MutexGuard<'_, ()> {
        self.opening.lock()
    }

    /// The persisted topics, but one being created (not registered yet).
    /// The data directory's (first) path.
    pub(crate) fn path(&self) -> &std::path::Path {
        &self.dir
    }

    pub(crate) fn topic_names(&self) -> Vec<String> {
        let metas = self.metas.lock();
        let creating = self.creating.lock();
        metas
            .keys()
            .filter(|&n| creating.as_ref() != Some(n))
            .cloned()
            .collect()
    }

    pub(crate) fn set_replaced(&self, dirs: Vec<PathBuf>) {
        *self.replaced.lock() = dirs;
    }

    pub(crate) fn replaced(&self) -> Vec<PathBuf> {
        self.replaced.lock().clone()
    }

    pub(crate) fn reports(&self) -> Vec<PartitionRecovery> {
        self.reports.clone()
    }

    pub(crate) fn clamped(&self) -> Vec<ClampedOffset> {
        self.clamped.lock().clone()
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        // Acquire: pairs with the Release store in `close`.
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed {
                what: format!("broker on {}", self.dir.display()),
            });
        }
        Ok(())
    }

    /// Hands freshly started partitions to `close`/`abandon`, or, when the directory
    /// closed while they started, stops them (closes their rings, joins their writers) and
    /// fails: a partition `close` never saw would keep taking sends with no writer.
    pub(crate) fn track_open(&self, mut started: Vec<OpenPartition>) -> Result<()> {
        let mut open = self.open.lock();
        // `close` and `abandon` set `closed` before they take `open` under this lock, so
        // either they take `started` with the rest, or we see `closed` here.
        if let Err(e) = self.check_open() {
            drop(open);
            close_partitions(&mut started);
            return Err(e);
        }
        let keys: Vec<(String, u32)> = started
            .iter()
            .map(|p| (p.topic.clone(), p.partition))
            .collect();
        open.extend(started);
        drop(open);
        // Now that the partitions' live commits are in `open`, the offsets `start_partition`
        // restored leave `loaded` (a checkpoint overlays the live ones on them meanwhile).
        self.loaded
            .lock()
            .retain(|(_, t, q), _| !keys.iter().any(|(kt, kq)| kt == t && kq == q));
        Ok(())
    }

    /// Stops the retention and checkpoint thread and waits for it.
    fn stop_background(&self) {
        // Release: pairs with the Acquire in `stopping`.
        self.stop.store(true, Ordering::Release);
        self.stop_wait.notify_all();
        if let Some(h) = self.background.lock().take() {
            let _ = h.join();
        }
        let cleaners = std::mem::take(&mut *self.cleaners.lock());
        for h in cleaners {
            let _ = h.join();
        }
    }

    pub(crate) fn sync_all(&self) -> Result<()> {
        self.check_open()?;
        for p in self.open.lock().iter() {
            (p.sync)()?;
        }
        self.write_offsets()
    }

    pub(crate) fn close(&self) -> Result<()> {
        self.close_dropped()
    }

    /// `close`, for a broker whose last handle was dropped (see `BrokerInner`'s `Drop`).
    pub(crate) fn close_dropped(&self) -> Result<()> {
        // AcqRel: one closer; pairs with the Acquire in `check_open`.
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.stop_background();
        // The cleaner threads are joined: their passes' replaced files go now. A failure
        // leaves files the next open removes, so the close goes on (and reports it).
        let removed = self.cleaner.removals.finish();
        let mut open = std::mem::take(&mut *self.open.lock());
        close_partitions(&mut open);
        let mut first_error = None;
        let offsets = self.write_offsets_from(&open);
        drop(open);
        let cells: Vec<_> = self.cells.lock().values().cloned().collect();
        let mut closed = Vec::new();
        for cell in cells {
            let set = cell.log.lock().take();
            if let Some(set) = set {
                match set.close() {
                    Ok(c) => closed.push((cell.topic.clone(), cell.partition, c)),
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        if let Err(e) = offsets {
            first_error.get_or_insert(e);
        }
        if first_error.is_none() {
            if let Err(e) = self.write_log_checkpoints(Some(&closed)) {
                first_error = Some(e);
            }
        }
        if first_error.is_none() {
            let marker = self.dir.join(CLEAN);
            let r = self
                .io
                .open(&marker, crate::storage::OpenMode::Truncate)
                .and_then(|f| f.sync_all())
                .and_then(|()| self.io.sync_dir(&self.dir));
            if let Err(e) = r {
                first_error = Some(io_err("writing", &marker, e));
            }
        }
        self.lock.lock().take();
        match first_error {
            None => removed,
            Some(e) => Err(e),
        }
    }

    /// See [`Broker::simulate_process_death`].
    pub(crate) fn abandon(&self) {
        // AcqRel: as in `close`.
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        self.stop_background();
        let cells: Vec<_> = self.cells.lock().values().cloned().collect();
        for cell in &cells {
            cell.abandon();
        }
        let mut open = std::mem::take(&mut *self.open.lock());
        close_partitions(&mut open);
        for cell in &cells {
            // A dead process flushes nothing: no `Drop` of the set.
            std::mem::forget(cell.log.lock().take());
        }
        std::mem::forget(self.lock.lock().take());
    }

    /// `close`'s checkpoint of the committed offsets, from the partitions it took: after
    /// any other writer's (they check `closed` under the same lock).
    fn write_offsets_from(&self, open: &[OpenPartition]) -> Result<()> {
        let _writing = self.checkpointing.lock();
        let loaded = self.loaded.lock().clone();
        self.write_offset_map(with_live_commits(loaded, open))
    }

    /// Under `checkpointing`.
    fn write_offset_map(&self, all: OffsetMap) -> Result<()> {
        let entries: Vec<GroupOffset> = all
            .into_iter()
            .map(|((g, t, p), o)| GroupOffset(g, tpo(&t, p, o)))
            .collect();
        self.note_checkpointed(entries.iter().map(|g| &g.1));
        checkpoint::write(&*self.io, &self.dir.join(OFFSETS), &entries)
    }

    /// Adds the topics of `entries`, about to be written to a checkpoint file, to
    /// `checkpointed`. Under `checkpointing`.
    fn note_checkpointed<'a>(&self, entries: impl Iterator<Item = &'a TopicPartitionOffset>) {
        let mut names = self.checkpointed.lock();
        for e in entries {
            if !names.contains(&e.topic) {
                names.insert(e.topic.clone());
            }
        }
    }

    /// Whether a checkpoint file may hold an entry of topic `topic` (see `checkpointed`).
    /// Under `checkpointing`, so that a writer's snapshot taken before the caller forgot the
    /// topic has noted it by then.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`] once `close` began, as a checkpoint write would.
    pub(crate) fn checkpoints_may_name(&self, topic: &str) -> Result<bool> {
        let _writing = self.checkpointing.lock();
        self.check_open()?;
        Ok(self.checkpointed.lock().contains(topic))
    }

    /// Per partition: log start and log end; per group: committed offsets.
    pub(crate) fn summary(&self) -> (Vec<PartitionRow>, Vec<GroupRow>) {
        let parts = self
            .cells
            .lock()
            .iter()
            .map(|((t, p), c)| (t.clone(), *p, c.log_start(), c.written()))
            .collect();
        let loaded = self.loaded.lock().clone();
        let groups = with_live_commits(loaded, &self.open.lock());
        let groups = groups
            .into_iter()
            .map(|((g, t, p), o)| (g, t, p, o))
            .collect();
        (parts, groups)
    }
}

/// Committed offsets by (group, topic, partition).
type OffsetMap = BTreeMap<(String, String, u32), u64>;

/// The offsets loaded from the checkpoint, overlaid with the open partitions' live commits.
/// Callers clone `loaded` before they lock `open`, so the two locks are never held together.
fn with_live_commits(mut all: OffsetMap, open: &[OpenPartition]) -> OffsetMap {
    for p in open {
        for (g, o) in (p.committed)() {
            all.insert((g.to_string(), p.topic.clone(), p.partition), o);
        }
    }
    all
}

fn tpo(topic: &str, partition: u32, offset: u64) -> TopicPartitionOffset {
    TopicPartitionOffset {
        topic: topic.to_owned(),
        partition,
        offset,
    }
}

fn read_tpo(io: &dyn Io, path: &Path) -> Result<HashMap<(String, u32), u64>> {
    Ok(checkpoint::read::<TopicPartitionOffset>(io, path)?
        .unwrap_or_default()
        .into_iter()
        .map(|e| ((e.topic, e.partition), e.offset))
        .collect())
}

/// `(topic, partition, log start, log end)`.
pub type PartitionRow = (String, u32, u64, u64);
/// `(group, topic, partition, committed offset)`.
pub type GroupRow = (String, String, u32, u64);

/// `(topic, partition, the log cleaner's progress)`.
pub type PartitionProgress = (String, u32, CleanerProgress);

/// A closed data directory as `logbus describe` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataDirDescription {
    /// Per topic: `(name, partitions, key codec type id, value codec type id)`.
    pub topics: Vec<(String, u32, String, String)>,
    /// Per topic partition: `(topic, partition, log start, log end)`.
    pub partitions: Vec<(String, u32, u64, u64)>,
    /// Per group and partition: `(group, topic, partition, committed offset)`.
    pub groups: Vec<(String, String, u32, u64)>,
    /// Replicated topics whose metadata this directory keeps: `(name, partitions,
    /// replication factor, key codec type id, value codec type id)`.
    pub replicated_topics: Vec<super::replicated::StoredTopic>,
    /// Their partitions: replicas, leader, epoch, ISR, HW, and the replica stored here.
    pub replicated: Vec<super::replicated::StoredPartition>,
    /// The directory's marker (`meta.properties`): its id and its broker's directories.
    pub marker: Option<DataDirMarker>,
    /// Per partition of a topic whose cleanup policy compacts: `(topic, partition, the log
    /// cleaner's progress)` (first dirty offset, dirty ratio; the counters are 0 here).
    pub cleaner: Vec<(String, u32, CleanerProgress)>,
}

/// Opens the data directory `dir` (running recovery: it must not be in use; it may be one
/// directory of a broker's several, read alone), reads its marker, its
/// topics, its partitions' offsets and the committed group offsets, and closes it again
/// (cleanly: the checkpoints and the clean-shutdown marker are rewritten).
///
/// # Errors
///
/// As [`BrokerBuilder::open`](crate::broker::BrokerBuilder::open).
pub fn describe_data_dir(dir: impl Into<PathBuf>) -> Result<DataDirDescription> {
    let dir = dir.into();
    let io = crate::sync::arc_from_std(Arc::new(FsIo) as Arc<dyn Io>);
    // As a broker opened on this one directory of a set: the marker is checked, not written.
    let markers = MarkerConfig {
        create: false,
        replace_lost: false,
    };
    plan_markers(&*io, std::slice::from_ref(&dir), markers, false)?;
    let options = DataDirConfig {
        dir: Some(dir.clone()),
        dirs: vec![dir.clone()],
        io: Some(SyncArc::clone(&io)),
        one_of_set: true,
        ..DataDirConfig::default()
    };
    let data = Some(DataDir::open(
        dir,
        options,
        Arc::new(crate::clock::SystemClock) as Arc<dyn Clock>,
    )?);
    let (partitions, groups) = data.as_ref().map(|d| d.summary()).unwrap_or_default();
    let topics = data
        .as_ref()
        .map(|d| {
            d.metas
                .lock()
                .values()
                .map(|m| {
                    (
                        m.name.clone(),
                        m.partitions,
                        m.key_type.clone(),
                        m.value_type.clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let marker = match &data {
        Some(d) => marker::read(&*d.io, &d.dir)?,
        None => None,
    };
    let (replicated_topics, replicated) = match &data {
        Some(d) => super::replicated::describe_dir(
            SyncArc::clone(&d.io),
            SyncArc::clone(&d.clock),
            &d.dir,
        )?,
        None => Default::default(),
    };
    let cleaner = data
        .as_ref()
        .map(|d| d.cleaner_snapshot())
        .unwrap_or_default();
    if let Some(d) = &data {
        d.close()?;
    }
    Ok(DataDirDescription {
        topics,
        partitions,
        groups,
        replicated_topics,
        replicated,
        marker,
        cleaner,
    })
}

/// Opens the data directory `dir` (not in use, as [`describe_data_dir`] does), runs the log
/// cleaner over every dirty partition of its compacted topics (whatever their
/// `min_cleanable_dirty_ratio`), and closes it cleanly: `logbus compact`. Returns the passes'
/// totals and each compacted partition's progress afterwards. Replicated topics are left
/// alone: a running broker cleans their replicas, each below its high watermark, which only
/// the partition's leader and ISR define.
///
/// # Errors
///
/// As [`BrokerBuilder::open`](crate::broker::BrokerBuilder::open)
/// ([`Error::DirectoryLocked`] when a broker has it open); the first pass's error.
pub fn compact_data_dir(
    dir: impl Into<PathBuf>,
) -> Result<(crate::storage::CleanStats, Vec<PartitionProgress>)> {
    let dir = dir.into();
    let io = crate::sync::arc_from_std(Arc::new(FsIo) as Arc<dyn Io>);
    let markers = MarkerConfig {
        create: false,
        replace_lost: false,
    };
    plan_markers(&*io, std::slice::from_ref(&dir), markers, false)?;
    let options = DataDirConfig {
        dir: Some(dir.clone()),
        dirs: vec![dir.clone()],
        io: Some(SyncArc::clone(&io)),
        one_of_set: true,
        ..DataDirConfig::default()
    };
    let data = DataDir::open(
        dir,
        options,
        Arc::new(crate::clock::SystemClock) as Arc<dyn Clock>,
    )?;
    let stats = data.compact_all();
    let progress = data.cleaner_snapshot();
    let closed = data.close();
    let stats = stats?;
    closed?;
    Ok((stats, progress))
}

/// Closes each partition's ring, then waits for its writer to finish: every writer sees its
/// ring closed before any is joined, so they wind down together.
fn close_partitions(open: &mut [OpenPartition]) {
    for p in open.iter() {
        (p.close)();
    }
    for p in open.iter_mut() {
        if let Some(w) = p.writer.take() {
            let _ = w.join();
        }
    }
}
