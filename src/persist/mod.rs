//! Durable topics: a broker opened on a data directory, whose persisted topics keep their
//! records in Kafka's segment format (layer 5's disk half; see [`crate::storage`]).
//!
//! # Layout
//!
//! ```text
//! <data dir>/meta.properties                    the directory's marker: its id, its broker's
//!                                               (see [`BrokerBuilder::create`])
//! <data dir>/.lock                              one broker per directory (a file lock)
//! <data dir>/<topic>.topic                      topic metadata: partitions, codec type ids, config
//! <data dir>/<topic>-<partition>/               a segment set (.log, .index, .timeindex)
//! <data dir>/recovery-point-offset-checkpoint   Kafka's files, `topic partition offset`
//! <data dir>/log-start-offset-checkpoint
//! <data dir>/consumer-offsets-checkpoint        `group topic partition offset`
//! <data dir>/.logbus_cleanshutdown              written by `close`, removed at open
//! ```
//!
//! A broker opened on several directories ([`BrokerBuilder::data_dirs`]) keeps its
//! replicated topics' replicas across them: `<dir>/<topic>-<partition>/` (a segment set
//! with its `leader-epoch-checkpoint`) and `<dir>/<topic>.replicas` (see
//! [`crate::replica`]).
//!
//! # How a record reaches the disk
//!
//! The partition's ring is the cache of the tail. One writer thread per partition is a
//! *gating* reader of the ring: it encodes the published records it finds (up to 256 KiB)
//! into one RecordBatch, appends it, applies the [`FlushPolicy`], and only then moves its
//! gate, so a record leaves the ring only once it is in the segment set, and producers wait
//! only when the ring is full of records not yet written. A thread per partition (rather
//! than one per broker) keeps a slow fsync of one partition from delaying the others.
//!
//! A consumer whose position is below the ring's oldest record reads from the segments and,
//! once it reaches the ring, from the ring: the offsets are the same, so there is no gap
//! and no duplicate.
//!
//! # Durability
//!
//! - [`FlushPolicy::EveryBatch`]: a send returns only once the batch holding its record is
//!   fsynced; producers sending at the same time share one fsync (group commit).
//! - The other policies acknowledge a send once its record is in the ring; they fsync every
//!   N records, every N bytes, every interval, or never (the OS writes back). The default,
//!   [`FlushPolicy::Interval`] of 1 s, loses at most the last second on a power loss.
//!   A process crash loses only what was still in the ring, not yet written: the writer
//!   hands its buffer to the OS whenever it catches up.
//! - [`Topic::sync`](crate::broker::Topic::sync) and [`Broker::sync`] force an fsync of
//!   everything sent before the call; [`Topic::flush`](crate::broker::Topic::flush) only
//!   waits until it is in the files (safe from a process crash, not from a power loss).
//! - Committed group offsets are written to `consumer-offsets-checkpoint` (atomically) every
//!   [`BrokerBuilder::offsets_checkpoint_interval`] (5 s by default), by [`Broker::sync`]
//!   and on close — one writer at a time, each a new file renamed over the old one, so a
//!   crash leaves the old checkpoint or the new one, never a mix. After a
//!   crash a group resumes from the last checkpoint: it re-reads at most what it committed
//!   since (at-least-once). An offset beyond a recovered log end is clamped to it and
//!   reported ([`Broker::clamped_offsets`]).
//! - [`Broker::close`] stops the writers (draining the rings), closes every segment set,
//!   writes the checkpoints and the clean-shutdown marker, and joins every thread; the next
//!   open then skips revalidation, as Kafka does.

mod data_dir;
pub(crate) mod encoded;
mod log;

use std::path::PathBuf;
use std::time::Duration;

pub use data_dir::{
    describe_data_dir, read_dir_marker, ClampedOffset, DataDirDescription, DataDirMarker,
    PartitionRecovery,
};
pub(crate) use data_dir::{BrokerClock, DataDir, MetaLine, TopicMeta};

use crate::storage::Io;
use crate::sync::StdArc as Arc;
use crate::{Error, Result};

/// When a persisted topic's writer fsyncs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FlushPolicy {
    /// After every batch the writer appends; a send is acknowledged only after its batch is
    /// fsynced, and concurrent producers share an fsync (group commit).
    EveryBatch,
    /// After this many records (Kafka's `flush.messages`).
    Messages(u64),
    /// After this many bytes of batches.
    Bytes(u64),
    /// When this long has passed since the last fsync (Kafka's `flush.ms`).
    Interval(Duration),
    /// Never explicitly: the operating system writes back (Kafka's default), when it
    /// chooses (the writer does not start write-back itself).
    Os,
}

impl Default for FlushPolicy {
    /// An fsync every second: a power loss loses at most the last second's records.
    fn default() -> Self {
        FlushPolicy::Interval(Duration::from_secs(1))
    }
}

/// How a persisted topic is kept on disk.
///
/// # Examples
///
/// ```
/// use logbus::persist::{FlushPolicy, PersistConfig};
///
/// let config = PersistConfig::new()
///     .flush(FlushPolicy::Bytes(1 << 20))
///     .segment_bytes(64 << 20)
///     .retention_bytes(1 << 30)
///     .max_message_bytes(1 << 20);
/// assert_eq!(config.flush_policy(), FlushPolicy::Bytes(1 << 20));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PersistConfig {
    flush: FlushPolicy,
    segment_bytes: u64,
    retention_bytes: Option<u64>,
    max_message_bytes: u64,
}

impl Default for PersistConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl PersistConfig {
    /// The default flush policy, 1 GiB segments, no size limit, 1 MiB records at most
    /// (Kafka's defaults).
    pub const fn new() -> Self {
        Self {
            flush: FlushPolicy::Interval(Duration::from_secs(1)),
            segment_bytes: 1 << 30,
            retention_bytes: None,
            max_message_bytes: 1_048_588,
        }
    }

    /// When to fsync.
    pub const fn flush(mut self, policy: FlushPolicy) -> Self {
        self.flush = policy;
        self
    }

    /// Roll segments at this size (`segment.bytes`; 4 KiB to 2^31 - 1).
    pub const fn segment_bytes(mut self, bytes: u64) -> Self {
        self.segment_bytes = bytes;
        self
    }

    /// Delete the oldest segments while a partition stays at or above this size
    /// (`retention.bytes`).
    pub const fn retention_bytes(mut self, bytes: u64) -> Self {
        self.retention_bytes = Some(bytes);
        self
    }

    /// The largest record accepted at send, encoded (`max.message.bytes`; 64 B to 64 MiB).
    pub const fn max_message_bytes(mut self, bytes: u64) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// The largest record accepted (the `max_message_bytes` set).
    pub(crate) const fn message_limit(&self) -> u64 {
        self.max_message_bytes
    }

    /// The flush policy.
    pub const fn flush_policy(&self) -> FlushPolicy {
        self.flush
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |name, value: String, valid: &str| {
            Err(Error::InvalidConfig {
                name,
                value,
                valid: valid.into(),
            })
        };
        if !(4096..=i32::MAX as u64).contains(&self.segment_bytes) {
            return bad(
                "segment_bytes",
                self.segment_bytes.to_string(),
                "4096 ..= 2147483647",
            );
        }
        if !(64..=64 << 20).contains(&self.max_message_bytes) {
            return bad(
                "max_message_bytes",
                self.max_message_bytes.to_string(),
                "64 ..= 67108864",
            );
        }
        match self.flush {
            FlushPolicy::Messages(0) | FlushPolicy::Bytes(0) => bad(
                "flush",
                format!("{:?}", self.flush),
                "a count of at least 1",
            ),
            FlushPolicy::Interval(d) if d.is_zero() => {
                bad("flush", "Interval(0s)".into(), "a positive interval")
            }
            _ => Ok(()),
        }
    }
}

/// Where and how a broker's data directory is opened (the builder's part).
#[derive(Debug, Clone)]
pub(crate) struct DataDirConfig {
    pub(crate) dir: Option<PathBuf>,
    /// Every data directory (the first is `dir`), for replicated persisted topics.
    pub(crate) dirs: Vec<PathBuf>,
    /// `None`: the real file system (made at open, so that building an in-memory broker
    /// allocates nothing here).
    pub(crate) io: Option<crate::sync::Arc<dyn Io>>,
    pub(crate) offsets_interval: Duration,
    pub(crate) retention_interval: Duration,
    /// Start a partition whose directory is missing empty instead of refusing to open.
    pub(crate) recreate_missing: bool,
    /// Format missing or empty data directories (`BrokerBuilder::create`).
    pub(crate) create: bool,
    /// Format again a data directory that lost its marker while its siblings kept theirs.
    pub(crate) replace_lost: bool,
    /// Open one directory of a set alone, to read it (`describe_data_dir`): its siblings
    /// are not required, and no marker is written.
    pub(crate) one_of_set: bool,
    /// `data_dirs` was given an empty list: a directory was meant, none named.
    pub(crate) no_dirs: bool,
}

/// [`BrokerBuilder::data_dirs`] given an empty list: refused rather than built in memory.
fn no_data_dirs() -> Error {
    Error::InvalidConfig {
        name: "data_dirs",
        value: "an empty list".into(),
        valid: "at least one directory".into(),
    }
}

impl Default for DataDirConfig {
    fn default() -> Self {
        Self {
            dir: None,
            dirs: Vec::new(),
            io: None,
            offsets_interval: Duration::from_secs(5),
            retention_interval: Duration::from_secs(1),
            recreate_missing: false,
            create: false,
            replace_lost: false,
            one_of_set: false,
            no_dirs: false,
        }
    }
}

use crate::broker::{Broker, BrokerBuilder};

impl BrokerBuilder {
    /// The data directory [`open`](Self::open) opens. It must have been formatted (created
    /// by a broker opened with [`create`](Self::create)); a missing or empty path is refused
    /// otherwise, so that a directory that vanished never reopens as an empty log.
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.persist.dir = Some(dir.into());
        self
    }

    /// The data directories (Kafka's `log.dirs`): the broker's data directory is the first
    /// (as [`data_dir`](Self::data_dir)); a replicated persisted topic
    /// ([`Broker::create_persisted_topic`] with a replication factor above 1) keeps each
    /// partition's replicas on different directories — replica `i` of partition `p` on
    /// directory `(p + i) % count`, a replica's id being its directory's index — so the
    /// replication factor can be at most the directory count. A directory failing (I/O
    /// errors, or gone) takes its replicas offline; leadership moves to an in-sync replica
    /// on another directory (see [`crate::replica`]). An empty list names no directory:
    /// [`open`](Self::open) and [`build`](Self::build) refuse it ([`Error::InvalidConfig`]),
    /// never building an in-memory broker instead.
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::broker::{Broker, TopicConfig};
    /// use logbus::persist::PersistConfig;
    /// use logbus::producer::Record;
    ///
    /// let (a, b, c) = (tempfile::tempdir()?, tempfile::tempdir()?, tempfile::tempdir()?);
    /// let dirs = [a.path(), b.path(), c.path()];
    /// let broker = Broker::builder().data_dirs(dirs).create(true).open()?;
    /// let config = TopicConfig::new(1).replication_factor(3).min_insync_replicas(2);
    /// broker.create_persisted_topic::<String, String>("orders", config, PersistConfig::new())?;
    /// broker.producer::<String, String>().send(Record::new("orders", "o-1".to_string()))?;
    /// broker.close()?;
    ///
    /// let broker = Broker::builder().data_dirs(dirs).open()?;
    /// broker.open_topic::<String, String>("orders")?;
    /// assert_eq!(broker.describe_topic("orders")?.replicas[0].isr.len(), 3);
    /// # broker.close()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn data_dirs<P: Into<PathBuf>>(mut self, dirs: impl IntoIterator<Item = P>) -> Self {
        self.persist.dirs = dirs.into_iter().map(Into::into).collect();
        self.persist.no_dirs = self.persist.dirs.is_empty();
        if let Some(first) = self.persist.dirs.first() {
            self.persist.dir = Some(first.clone());
        }
        self
    }

    /// Whether [`open`](Self::open) may create the data directories: a path that does not
    /// exist, or an empty directory, is formatted (its marker, `meta.properties`, written),
    /// then opened; a directory formatted before is opened as it is. As with
    /// [`std::fs::OpenOptions::create`], `false` (the default) opens only what exists: a
    /// missing or unformatted path is [`Error::DataDirUnformatted`]. A directory holding anything but a marker is refused
    /// even with `true` (it is not logbus's), and so is a directory of the broker's set that
    /// lost its marker while the others kept theirs ([`Error::DataDirLost`]; see
    /// [`replace_lost_data_dirs`](Self::replace_lost_data_dirs)): only when no directory of
    /// the set is formatted is the whole set new.
    ///
    /// A marker cannot tell that its own directory vanished: a broker that always opens with
    /// `create(true)` starts empty when its only directory (or every one) is gone. Open with
    /// `create(true)` once, to make the directories, and without it afterwards.
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::broker::Broker;
    /// use logbus::Error;
    ///
    /// let tmp = tempfile::tempdir()?;
    /// let dir = tmp.path().join("data");
    /// assert!(matches!(Broker::open(&dir), Err(Error::DataDirUnformatted { missing: true, .. })));
    /// let broker = Broker::builder().data_dir(&dir).create(true).open()?;
    /// broker.close()?;
    /// drop(broker);
    /// let broker = Broker::open(&dir)?; // formatted: no `create` needed
    /// # broker.close()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn create(mut self, create: bool) -> Self {
        self.persist.create = create;
        self
    }

    /// Whether [`open`](Self::open) continues when one of the data directories lost its
    /// marker (deleted, emptied, a disk that came back blank) while the others kept theirs
    /// (`false` by default: [`Error::DataDirLost`] names it). With `true` the directory is
    /// formatted again under a new directory id, and reported by
    /// [`Broker::replaced_data_dirs`]. Its replicas are never taken for valid ones: each
    /// starts out of the ISR with an empty log, cannot be elected, and rejoins the ISR only
    /// once it has copied its leader's log; a partition whose only in-sync replica was there
    /// has no leader (unless unclean election is on). What only that directory held is gone:
    /// non-replicated topics and, on the first directory, committed group offsets. The
    /// partitions' state (leader, ISR) comes from the other directories' copies of the
    /// topics' metadata: if the wiped directory held the only current copy (every other
    /// directory had failed before), an older ISR is read, as if every replica in sync
    /// since had been lost.
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::broker::{Broker, TopicConfig};
    /// use logbus::persist::PersistConfig;
    /// use logbus::Error;
    ///
    /// let (a, b) = (tempfile::tempdir()?, tempfile::tempdir()?);
    /// let dirs = [a.path(), b.path()];
    /// let broker = Broker::builder().data_dirs(dirs).create(true).open()?;
    /// let config = TopicConfig::new(1).replication_factor(2);
    /// broker.create_persisted_topic::<(), String>("t", config, PersistConfig::new())?;
    /// broker.close()?;
    /// drop(broker);
    /// std::fs::remove_dir_all(b.path())?; // the disk under `b` is replaced
    ///
    /// let refused = Broker::builder().data_dirs(dirs).create(true).open();
    /// assert!(matches!(refused, Err(Error::DataDirLost { index: 1, .. })));
    /// let broker = Broker::builder().data_dirs(dirs).replace_lost_data_dirs(true).open()?;
    /// assert_eq!(broker.replaced_data_dirs(), vec![b.path().to_path_buf()]);
    /// broker.open_topic::<(), String>("t")?;
    /// # broker.close()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn replace_lost_data_dirs(mut self, replace: bool) -> Self {
        self.persist.replace_lost = replace;
        self
    }

    /// Opens one directory of a broker's set alone, to read it (`describe_data_dir`).
    pub(crate) fn one_of_set(mut self) -> Self {
        self.persist.one_of_set = true;
        self
    }

    /// The file system under the data directory ([`FsIo`](crate::storage::FsIo) by default;
    /// `storage::fault::FaultyIo`, with the `test-util` feature, to simulate crashes).
    pub fn io(mut self, io: crate::sync::Arc<dyn Io>) -> Self {
        self.persist.io = Some(io);
        self
    }

    /// How often committed group offsets are checkpointed (5 s by default; also on close).
    /// After a crash a group re-reads at most what it committed during one interval.
    pub fn offsets_checkpoint_interval(mut self, every: Duration) -> Self {
        self.persist.offsets_interval = every;
        self
    }

    /// How often retention runs, and the recovery-point and log-start checkpoints are
    /// written (1 s by default).
    pub fn retention_check_interval(mut self, every: Duration) -> Self {
        self.persist.retention_interval = every;
        self
    }

    /// Whether [`open`](Self::open) starts a persisted partition whose directory is missing
    /// empty (`false` by default: the open fails with [`Error::PartitionDirMissing`], since
    /// the partition's records are lost). With `true` the loss is accepted and reported:
    /// [`PartitionRecovery::recreated`] is set in [`Broker::recovery_reports`]. The
    /// partition's offsets start again from 0, as after Kafka's unclean leader election;
    /// committed offsets beyond them are clamped ([`Broker::clamped_offsets`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::broker::{Broker, TopicConfig};
    /// use logbus::persist::PersistConfig;
    /// use logbus::Error;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let broker = Broker::builder().data_dir(dir.path()).create(true).open()?;
    /// broker.create_persisted_topic::<(), String>("t", TopicConfig::new(1), PersistConfig::new())?;
    /// broker.close()?;
    /// std::fs::remove_dir_all(dir.path().join("t-0"))?;
    ///
    /// assert!(matches!(Broker::open(dir.path()), Err(Error::PartitionDirMissing { .. })));
    /// let broker = Broker::builder()
    ///     .data_dir(dir.path())
    ///     .recreate_missing_partitions(true)
    ///     .open()?;
    /// assert!(broker.recovery_reports()[0].recreated);
    /// # broker.close()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn recreate_missing_partitions(mut self, recreate: bool) -> Self {
        self.persist.recreate_missing = recreate;
        self
    }

    /// Opens the broker on its data directory: takes the directory's lock, recovers every
    /// partition (in parallel, see [`Broker::recovery_reports`]) and loads the committed
    /// offsets. The persisted topics are listed by [`Broker::topics`] at once; each is
    /// opened with [`Broker::open_topic`], which names its types (until then typed access
    /// to it is [`Error::TopicNotOpen`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] without a data directory; [`Error::DataDirUnformatted`], [`Error::DataDirLost`], [`Error::InvalidDirMarker`] and
    /// [`Error::ForeignDataDir`] for a directory that is not (or no longer) a formatted
    /// member of the broker's set (see [`create`](Self::create)); [`Error::InvalidConfig`]
    /// (`data_dirs`) when a directory of the set is not listed; [`Error::DirectoryLocked`]
    /// when another broker holds one; [`Error::PartitionDirMissing`] when a persisted partition's
    /// directory is gone (see [`recreate_missing_partitions`](Self::recreate_missing_partitions)); [`Error::InvalidCheckpoint`] for a damaged metadata or
    /// checkpoint file; the storage layer's errors from recovery.
    pub fn open(self) -> Result<Broker> {
        if self.persist.no_dirs {
            return Err(no_data_dirs());
        }
        let Some(dir) = self.persist.dir.clone() else {
            return Err(Error::InvalidConfig {
                name: "data_dir",
                value: "none".into(),
                valid: "a directory (BrokerBuilder::data_dir)".into(),
            });
        };
        let mut dirs = self.persist.dirs.clone();
        if dirs.first() != Some(&dir) {
            dirs.insert(0, dir.clone());
        }
        let io = match &self.persist.io {
            Some(io) => crate::sync::Arc::clone(io),
            None => crate::sync::arc_from_std(Arc::new(crate::storage::FsIo) as Arc<dyn Io>),
        };
        let markers = data_dir::MarkerConfig {
            create: self.persist.create,
            replace_lost: self.persist.replace_lost,
        };
        // Before anything is created or locked: a missing, unformatted, foreign or lost
        // directory is refused untouched.
        data_dir::plan_markers(&*io, &dirs, markers, false)?;
        let data = DataDir::open(dir, self.persist.clone(), Arc::clone(&self.clock))?;
        let disk = crate::replica::persisted::DiskDirs::open(
            dirs.clone(),
            crate::sync::Arc::clone(&io),
            Arc::clone(&self.clock),
        )?;
        // Again under the locks (another process may have formatted in between), now
        // requiring the whole set; then the markers are written.
        if !self.persist.one_of_set {
            let plan = data_dir::plan_markers(&*io, &dirs, markers, true)?;
            plan.apply(&*io, &dirs)?;
            data.set_replaced(plan.lost);
        }
        let broker = Broker::from_parts(Arc::clone(&self.clock), Some(Arc::clone(&data)));
        broker.set_empty_group_timeout(self.empty_group_timeout);
        broker.replication().attach_disk(disk);
        data.start_background(&broker)?;
        Ok(broker)
    }
}

impl Broker {
    /// Opens a broker on the data directory `dir`, formatted before (see
    /// [`BrokerBuilder::open`]; [`BrokerBuilder::create`] makes a new one).
    ///
    /// # Errors
    ///
    /// As [`BrokerBuilder::open`].
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::broker::{Broker, TopicConfig};
    /// use logbus::persist::PersistConfig;
    /// use logbus::producer::Record;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let broker = Broker::builder().data_dir(dir.path()).create(true).open()?;
    /// broker.create_persisted_topic::<String, String>("events", TopicConfig::new(1),
    ///     PersistConfig::new())?;
    /// broker.producer::<String, String>().send(Record::new("events", "hi".to_string()))?;
    /// broker.close()?;
    ///
    /// let broker = Broker::open(dir.path())?;
    /// let topic = broker.open_topic::<String, String>("events")?;
    /// assert_eq!(broker.describe_topic("events")?.partitions[0].log_end, 1);
    /// # drop(topic);
    /// broker.close()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open(dir: impl Into<PathBuf>) -> Result<Broker> {
        Broker::builder().data_dir(dir).open()
    }

    fn data_or_err(&self) -> Result<&Arc<DataDir>> {
        self.data().ok_or_else(|| Error::InvalidConfig {
            name: "data_dir",
            value: "none (an in-memory broker)".into(),
            valid: "a broker opened with Broker::open or BrokerBuilder::open".into(),
        })
    }

    /// Creates a persisted topic: its partitions live in `<data dir>/<name>-<n>/`, its
    /// metadata (with the codecs' type ids) in `<data dir>/<name>.topic`. The topic's
    /// `records_in_memory` sizes the ring that caches the tail; its retention age applies
    /// to segments; `Overflow` does not apply (producers wait only for the disk writer).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] (also on an in-memory broker), [`Error::InvalidTopicName`],
    /// [`Error::TopicExists`] (in memory or on disk), I/O errors.
    pub fn create_persisted_topic<K, V>(
        &self,
        name: &str,
        config: crate::broker::TopicConfig,
        persist: PersistConfig,
    ) -> Result<crate::broker::Topic<K, V>>
    where
        K: crate::codec::Codec + Send + Sync + 'static,
        V: crate::codec::Codec + Send + Sync + 'static,
    {
        crate::broker::validate_topic_name(name)?;
        persist.validate()?;
        if config.replicas_per_partition() > 1 {
            self.data_or_err()?;
            return crate::replica::persisted::create_topic(self, name, config, persist);
        }
        self.data_or_err()?
            .create_topic::<K, V>(self, name, config, persist)
    }

    /// Opens a persisted topic recovered from the data directory (or returns it if already
    /// open), checking its codecs' type ids against its metadata. The Rust types are fixed
    /// from then on: two types of one encoding (`Vec<u8>` and `Bytes`) cannot both open it.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`]; [`Error::TypeMismatch`] when the topic was created with other
    /// key or value codecs (type ids), or is open with other Rust types, naming both; for a
    /// replicated topic, [`Error::InvalidConfig`] (`data_dirs`) when the data directories
    /// are not in the order it was created with (replica ids are directory indexes).
    pub fn open_topic<K, V>(&self, name: &str) -> Result<crate::broker::Topic<K, V>>
    where
        K: crate::codec::Codec + Send + Sync + 'static,
        V: crate::codec::Codec + Send + Sync + 'static,
    {
        let data = self.data_or_err()?;
        if let Some(topic) = crate::replica::persisted::open_topic(self, name)? {
            return Ok(topic);
        }
        data.open_topic::<K, V>(self, name)
    }

    /// The persisted topics in the data directory (open or not), sorted.
    pub fn persisted_topics(&self) -> Vec<String> {
        let mut names = self.data().map(|d| d.topic_names()).unwrap_or_default();
        if let Some(r) = crate::replica::persisted::dirs_of(self) {
            names.extend(r.names());
            names.sort();
        }
        names
    }

    /// The data directories that had lost their marker and were formatted again at open
    /// ([`BrokerBuilder::replace_lost_data_dirs`]).
    pub fn replaced_data_dirs(&self) -> Vec<PathBuf> {
        self.data().map(|d| d.replaced()).unwrap_or_default()
    }

    /// What recovery did to each partition when the broker opened, by topic and partition.
    pub fn recovery_reports(&self) -> Vec<PartitionRecovery> {
        self.data().map(|d| d.reports()).unwrap_or_default()
    }

    /// Committed offsets found beyond a recovered log end at open, and clamped to it.
    pub fn clamped_offsets(&self) -> Vec<ClampedOffset> {
        self.data().map(|d| d.clamped()).unwrap_or_default()
    }

    /// Makes every record sent to a persisted topic before the call durable, and checkpoints
    /// the committed offsets. Safe to call from many threads, and while the background
    /// thread checkpoints: every writer of a checkpoint file is serialised (each replace is
    /// atomic and durable: temp file, fsync, rename, directory fsync), so once a call
    /// returns, a crash keeps at least the offsets committed before it.
    ///
    /// # Errors
    ///
    /// The I/O error that took a log offline; [`Error::Closed`] once [`close`](Self::close)
    /// began (the close writes the last checkpoint).
    pub fn sync(&self) -> Result<()> {
        match self.data() {
            Some(d) => {
                let replicas =
                    crate::replica::persisted::dirs_of(self).map_or(Ok(()), |r| r.sync());
                d.sync_all(self).and(replicas)
            }
            None => Ok(()),
        }
    }

    /// Closes the broker: stops and joins the writers (after they wrote every record sent),
    /// closes every partition log (fsync), writes Kafka's checkpoint files, the committed
    /// offsets and the clean-shutdown marker, joins the background thread and releases the
    /// directory. Sends fail afterwards, to the broker's in-memory topics too, with
    /// [`Error::Closed`] saying the broker was closed; sends waiting for room wake with
    /// it. A no-op for an in-memory broker. A broker whose last handle is dropped without
    /// `close` is closed the same way, its errors unseen: call `close` to see them.
    ///
    /// # Errors
    ///
    /// The first I/O error (the marker is then not written: the next open recovers).
    pub fn close(&self) -> Result<()> {
        let Some(d) = self.data() else {
            return Ok(());
        };
        // First, so that sends racing the close say why they fail (the writers then
        // drain their closed rings below).
        self.close_topics();
        let replicas = crate::replica::persisted::dirs_of(self).map_or(Ok(()), |r| r.close());
        d.close(self).and(replicas)
    }
}

impl Broker {
    /// For crash tests: stops every thread of the broker as the death of its process would,
    /// writing nothing more — no flush, no checkpoint, no marker; buffered bytes and open
    /// files are abandoned (leaked), locks stay until the simulated file system's
    /// [`crash`](crate::storage::fault::FaultyIo::crash) or
    /// [`kill`](crate::storage::fault::FaultyIo::kill). Waiting sends return (unacknowledged).
    #[doc(hidden)]
    pub fn simulate_process_death(&self) {
        if let Some(d) = self.data() {
            if let Some(r) = crate::replica::persisted::dirs_of(self) {
                r.abandon();
            }
            d.abandon();
        }
    }
}

impl<K, V> crate::broker::Topic<K, V> {
    /// Makes every record sent to this (persisted) topic before the call durable. A no-op
    /// for an in-memory topic.
    ///
    /// # Errors
    ///
    /// [`Error::PartitionOffline`], with the I/O error that took a partition's log offline.
    pub fn sync(&self) -> Result<()> {
        for p in self.inner().partitions().iter() {
            p.sync_disk(true)?;
        }
        Ok(())
    }

    /// Waits until every record sent to this (persisted) topic before the call is written
    /// to its segment files, without an fsync: from then on a crash of the process no longer
    /// loses it, a power loss still may (see [`sync`](Self::sync)). A no-op for an
    /// in-memory topic.
    ///
    /// # Errors
    ///
    /// [`Error::PartitionOffline`], with the I/O error that took a partition's log offline.
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::broker::{Broker, TopicConfig};
    /// use logbus::persist::{FlushPolicy, PersistConfig};
    /// use logbus::producer::Record;
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let broker = Broker::builder().data_dir(dir.path()).create(true).open()?;
    /// let topic = broker.create_persisted_topic::<(), String>(
    ///     "events",
    ///     TopicConfig::new(1),
    ///     PersistConfig::new().flush(FlushPolicy::Os),
    /// )?;
    /// let producer = broker.producer::<(), String>();
    /// producer.send(Record::new("events", "hello".to_string())).unwrap();
    /// topic.flush()?; // in the file now, not necessarily on the device
    /// broker.close()?;
    /// # Ok::<(), logbus::Error>(())
    /// ```
    pub fn flush(&self) -> Result<()> {
        for p in self.inner().partitions().iter() {
            p.sync_disk(false)?;
        }
        Ok(())
    }
}
