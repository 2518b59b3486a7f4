//! The broker's persisted side: opening a broker on its data directories, creating and opening
//! persisted topics (replicated or not) over the one write path to disk in
//! [`crate::persist`], fsyncing and closing them. The disk work itself (segment sets, flush
//! policy, recovery, checkpoints, metadata files) lives in `persist`; replication in
//! `replica`; the fault-injection handle in `faults.rs`.

use std::marker::PhantomData;
use std::path::PathBuf;
use std::time::Duration;

use super::{Broker, BrokerBuilder, Topic, TopicInner, TopicStore};
use crate::codec::{type_name, Codec};
use crate::partition::topic_config::TopicConfig;
use crate::partition::{ClosedByBroker, Partition};
use crate::persist::replica_store::{codec_copy, partition_dir, DiskReplica};
use crate::persist::replicated::{
    delete_files, misplaced_error, remove_tree, Backing, DiskDirs, DiskPartition, PartState,
    ReplicatedMeta, TopicFiles,
};
use crate::persist::{ClampedOffset, DataDir, PartitionRecovery, PersistConfig, TopicMeta};
use crate::replica::{ReplicaControl, ReplicaLogView, ReplicaSet, ReplicationConfig};
use crate::storage::{checkpoint, Io};
use crate::sync::StdArc as Arc;
use crate::sync::WaitSet;
use crate::{Error, Result};

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
    /// ([`Broker::create_topic`] with a replication factor above 1) keeps each
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
    /// broker.create_topic::<String, String>("orders", config.persist(PersistConfig::new()))?;
    /// broker.producer::<String, String>().send(Record::new("orders", "o-1".to_string()))?;
    /// broker.close()?;
    ///
    /// let broker = Broker::builder().data_dirs(dirs).open()?;
    /// broker.topic::<String, String>("orders")?;
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
    /// broker.create_topic::<(), String>("t", config.persist(PersistConfig::new()))?;
    /// broker.close()?;
    /// drop(broker);
    /// std::fs::remove_dir_all(b.path())?; // the disk under `b` is replaced
    ///
    /// let refused = Broker::builder().data_dirs(dirs).create(true).open();
    /// assert!(matches!(refused, Err(Error::DataDirLost { index: 1, .. })));
    /// let broker = Broker::builder().data_dirs(dirs).replace_lost_data_dirs(true).open()?;
    /// assert_eq!(broker.replaced_data_dirs(), vec![b.path().to_path_buf()]);
    /// broker.topic::<(), String>("t")?;
    /// # broker.close()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn replace_lost_data_dirs(mut self, replace: bool) -> Self {
        self.persist.replace_lost = replace;
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

    /// The log cleaner's threads, which compact the persisted topics whose
    /// [`CleanupPolicy`](crate::broker::CleanupPolicy) compacts (Kafka's
    /// `log.cleaner.threads`; 1 by default, at most
    /// [`MAX_LOG_CLEANER_THREADS`](crate::persist::MAX_LOG_CLEANER_THREADS); 0: no cleaner,
    /// the logs grow until `logbus compact` cleans them offline). The threads belong
    /// to the broker: [`Broker::close`] and the broker's drop stop and join them.
    pub fn log_cleaner_threads(mut self, threads: usize) -> Self {
        self.persist.cleaner_threads = threads;
        self
    }

    /// The memory of each cleaner thread's map of keys to their latest offsets (Kafka's
    /// `log.cleaner.dedupe.buffer.size`; 32 MiB by default, at least
    /// [`MIN_DEDUPE_BUFFER_SIZE`](crate::persist::MIN_DEDUPE_BUFFER_SIZE)). Each key takes
    /// 24 bytes of it at a load of 0.9; a pass whose dirty section holds more keys cleans
    /// up to where the map filled, and the next pass goes on from there.
    pub fn log_cleaner_dedupe_buffer_size(mut self, bytes: usize) -> Self {
        self.persist.dedupe_buffer_size = bytes;
        self
    }

    /// How long a cleaner thread waits when no log is dirty enough (Kafka's
    /// `log.cleaner.backoff.ms`; 15 s by default, on the wall clock).
    pub fn log_cleaner_backoff(mut self, backoff: Duration) -> Self {
        self.persist.cleaner_backoff = backoff;
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
    /// broker.create_topic::<(), String>("t", TopicConfig::new(1).persist(PersistConfig::new()))?;
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
    /// opened with [`Broker::topic`], which names its types (until then typed access
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
            return Err(crate::persist::no_data_dirs());
        }
        self.persist.validate_cleaner()?;
        self.validate_txn_cleanup_interval()?;
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
        let markers = crate::persist::MarkerConfig {
            create: self.persist.create,
            replace_lost: self.persist.replace_lost,
        };
        // Before anything is created or locked: a missing, unformatted, foreign or lost
        // directory is refused untouched.
        crate::persist::plan_markers(&*io, &dirs, markers, false)?;
        let data = DataDir::open(dir, self.persist.clone(), Arc::clone(&self.clock))?;
        let disk = DiskDirs::open(
            dirs.clone(),
            crate::sync::Arc::clone(&io),
            Arc::clone(&self.clock),
        )?;
        // Again under the locks (another process may have formatted in between), now
        // requiring the whole set; then the markers are written.
        if !self.persist.one_of_set {
            let plan = crate::persist::plan_markers(&*io, &dirs, markers, true)?;
            plan.apply(&*io, &dirs)?;
            data.set_replaced(plan.lost);
        }
        let txn = super::txn::TxnCoordinator::open(crate::sync::Arc::clone(&data.io), data.path())?;
        let broker = Broker::from_parts(Arc::clone(&self.clock), Some(Arc::clone(&data)), txn);
        broker.txn_reserve_ids();
        broker.set_empty_group_timeout(self.empty_group_timeout);
        broker.set_txn_cleanup_interval(self.txn_cleanup_interval);
        data.clean_replicas_of(&disk);
        broker.replication().attach_disk(disk);
        data.start_background()?;
        broker.txn_start_timeouts_if_open()?;
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
    /// let config = TopicConfig::new(1).persist(PersistConfig::new());
    /// broker.create_topic::<String, String>("events", config)?;
    /// broker.producer::<String, String>().send(Record::new("events", "hi".to_string()))?;
    /// broker.close()?;
    ///
    /// let broker = Broker::open(dir.path())?;
    /// let topic = broker.topic::<String, String>("events")?;
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
            value: "none (an in-memory broker; a persisted topic needs a data directory)".into(),
            valid: "a broker opened on a data directory: Broker::open(dir), or \
                    Broker::builder().data_dir(dir).create(true).open() to make one; \
                    or a TopicConfig without persist, for an in-memory topic"
                .into(),
        })
    }

    /// Creates a persisted topic (`create_topic` with a [`TopicConfig::persist`] config).
    pub(super) fn create_persisted<K, V>(
        &self,
        name: &str,
        config: TopicConfig,
        persist: PersistConfig,
    ) -> Result<Topic<K, V>>
    where
        K: Codec + Send + Sync + 'static,
        V: Codec + Send + Sync + 'static,
    {
        super::validate_topic_name(name)?;
        persist.validate()?;
        persist.validate_with(&config)?;
        if config.replicas_per_partition() > 1 {
            self.data_or_err()?;
            return create_replicated(self, name, config, persist);
        }
        create_single::<K, V>(self.data_or_err()?, self, name, config, persist)
    }

    /// Opens a persisted topic recovered from the data directory (or returns it if already
    /// open): the part of [`topic`](Self::topic) that opens one.
    pub(super) fn open_persisted<K, V>(&self, name: &str) -> Result<Topic<K, V>>
    where
        K: Codec + Send + Sync + 'static,
        V: Codec + Send + Sync + 'static,
    {
        let data = self.data_or_err()?;
        if let Some(topic) = open_replicated(self, name)? {
            return Ok(topic);
        }
        open_single::<K, V>(data, self, name)
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

    /// Runs the log cleaner now, on this thread: passes over every dirty partition of the
    /// persisted topics whose [`CleanupPolicy`](crate::broker::CleanupPolicy) compacts (every
    /// replica's log of a replicated one, each on its own),
    /// whatever its `min_cleanable_dirty_ratio` (the cleaner threads wait for the ratio),
    /// until none is dirty. Returns the passes' totals. The active segment, segments
    /// holding records younger than `min_compaction_lag` and, on a replica, anything at or
    /// past its high watermark are never cleaned; nor is a replica that is offline or has
    /// yet to truncate by leader epoch after an election.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] on a broker without a data directory, [`Error::Closed`]
    /// once closed; the first pass's error (an I/O error in a swap takes that partition
    /// offline, as a failed write does).
    pub fn compact_now(&self) -> Result<crate::storage::CleanStats> {
        let data = self.data_or_err()?;
        data.check_open()?;
        data.compact_all()
    }

    /// Fsyncs every persisted topic (every record sent before the call becomes durable) and
    /// writes the committed offsets' checkpoint. Safe to call from many threads, and while the background
    /// thread checkpoints: every writer of a checkpoint file is serialised (each replace is
    /// atomic and durable: temp file, fsync, rename, directory fsync), so once a call
    /// returns, a crash keeps at least the offsets committed before it.
    ///
    /// # Errors
    ///
    /// The I/O error that took a log offline; [`Error::Closed`] once [`close`](Self::close)
    /// began (the close writes the last checkpoint).
    pub fn fsync_and_checkpoint(&self) -> Result<()> {
        match self.data() {
            Some(d) => {
                // The replicas first: their saved high watermarks then cover every
                // replicated offset the checkpoint below holds (a group commits only below
                // the HW), and a reopen after a crash finds those offsets in range.
                let replicas = dirs_of(self).map_or(Ok(()), |r| r.sync());
                d.sync_all().and(replicas)
            }
            None => Ok(()),
        }
    }

    /// Closes the broker: stops and joins the writers (after they wrote every record sent),
    /// closes every partition log (fsync), writes Kafka's checkpoint files, the committed
    /// offsets and the clean-shutdown marker, joins the background thread and releases the
    /// directory. Sends fail afterwards, to the broker's in-memory topics too, with
    /// [`Error::Closed`] saying the broker was closed; sends waiting for room wake with
    /// it. For an in-memory broker, only stops (and joins) the thread aborting timed-out
    /// transactions. A broker whose last handle is dropped without
    /// `close` is closed the same way, its errors unseen: call `close` to see them.
    ///
    /// # Errors
    ///
    /// The first I/O error (the marker is then not written: the next open recovers).
    pub fn close(&self) -> Result<()> {
        // First: no transaction is aborted by timeout while the topics close.
        self.txn_coordinator().stop_timeouts();
        let Some(d) = self.data() else {
            return Ok(());
        };
        // First, so that sends racing the close say why they fail (the writers then
        // drain their closed rings below).
        self.close_topics();
        let replicas = dirs_of(self).map_or(Ok(()), |r| r.close());
        let closed = d.close().and(replicas);
        // Again, now that the directory is closed (no topic is created from now on): an
        // in-memory topic created during the first pass is closed too.
        self.close_topics();
        closed
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
        // A dead process aborts nothing: its transactions are aborted after the reopen.
        self.txn_coordinator().stop_timeouts();
        if let Some(d) = self.data() {
            if let Some(r) = dirs_of(self) {
                r.abandon();
            }
            d.abandon();
        }
    }
}

impl<K, V> Topic<K, V> {
    /// Fsyncs: makes every record sent to this (persisted) topic before the call durable
    /// (written to its segment files and fsynced, so a power loss keeps it). A no-op for an
    /// in-memory topic.
    ///
    /// # Errors
    ///
    /// [`Error::PartitionOffline`], with the I/O error that took a partition's log offline.
    pub fn fsync(&self) -> Result<()> {
        for p in self.inner().partitions().iter() {
            p.sync_disk(true)?;
        }
        Ok(())
    }

    /// Waits until every record sent to this (persisted) topic before the call is written
    /// to its segment files, without an fsync: from then on a crash of the process no longer
    /// loses it, a power loss still may (see [`fsync`](Self::fsync)). A no-op for an
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
    /// let topic = broker.create_topic::<(), String>(
    ///     "events",
    ///     TopicConfig::new(1).persist(PersistConfig::new().flush(FlushPolicy::Os)),
    /// )?;
    /// let producer = broker.producer::<(), String>();
    /// producer.send(Record::new("events", "hello".to_string())).unwrap();
    /// topic.write_to_files()?; // in the file now, not necessarily on the device
    /// broker.close()?;
    /// # Ok::<(), logbus::Error>(())
    /// ```
    pub fn write_to_files(&self) -> Result<()> {
        for p in self.inner().partitions().iter() {
            p.sync_disk(false)?;
        }
        Ok(())
    }
}

/// A persisted topic's disk side, as the broker's admin operations reach it.
struct PersistedTopic<K, V> {
    data: Arc<DataDir>,
    name: String,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> TopicStore<K, V> for PersistedTopic<K, V>
where
    K: Codec + Send + Sync + 'static,
    V: Codec + Send + Sync + 'static,
{
    fn add_partitions(
        &self,
        from: u32,
        to: u32,
        arrivals: &Arc<WaitSet>,
    ) -> Result<Vec<Arc<Partition<K, V>>>> {
        self.data
            .add_partitions::<K, V>(&self.name, from, to, arrivals)
    }

    fn delete(&self) -> Result<()> {
        self.data.delete_topic(&self.name)
    }
}

pub(crate) fn create_single<K, V>(
    data: &DataDir,
    broker: &Broker,
    name: &str,
    config: TopicConfig,
    persist: PersistConfig,
) -> Result<Topic<K, V>>
where
    K: Codec + Send + Sync + 'static,
    V: Codec + Send + Sync + 'static,
{
    data.check_open()?;
    // Validates the name, partitions, memory and replication as for any topic.
    broker.check_new_topic(name, &config)?;
    // Held until the topic is registered: an `topic` racing this one waits and
    // finds it open, rather than starting a second set of writers.
    let _opening = data.opening.lock();
    if broker.topics().iter().any(|t| t == name) {
        return Err(Error::TopicExists {
            topic: name.to_owned(),
        });
    }
    if data.metas.lock().contains_key(name) {
        return Err(Error::TopicExists {
            topic: name.to_owned(),
        });
    }
    // The recovery-point and log-start checkpoints may still name a deleted topic of
    // this name: rewritten from the open partitions, durably, before its metadata
    // exists, so that a reopen never applies the old topic's offsets to the new one. A
    // name no checkpoint file may hold needs no rewrite (the deleted topic's partitions
    // left the open ones at its deletion).
    if data.checkpoints_may_name(name)? {
        data.write_log_checkpoints(None)?;
    }
    data.clear_namesake_for_creation(name)?;
    let mut metas = data.metas.lock();
    if metas.contains_key(name) {
        return Err(Error::TopicExists {
            topic: name.to_owned(),
        });
    }
    let meta = TopicMeta::new::<K, V>(name, &config, persist);
    // The directories first, then the metadata: a partition directory missing under
    // metadata that names it was removed (`DataDir::open` refuses it).
    let made = (0..meta.partitions).try_for_each(|p| {
        data.remove_partition_dir(name, p)?;
        data.open_partition_log(&meta, p)
    });
    let made =
        made.and_then(|()| checkpoint::write(&*data.io, &data.meta_path(name), &meta.lines()));
    if let Err(e) = made {
        // No metadata names them: the directories are leftovers.
        for p in 0..meta.partitions {
            data.close_partition_log(name, p);
            let _ = data.remove_partition_dir(name, p);
        }
        return Err(e);
    }
    // Hidden until registered: a send meanwhile finds no topic (`UnknownTopic`), not
    // one to open (`TopicNotOpen`).
    *data.creating.lock() = Some(name.to_owned());
    metas.insert(name.to_owned(), meta.clone());
    drop(metas);
    let started = start_single::<K, V>(data, broker, &meta);
    // After the registration: a lookup that finds the topic visible again finds it
    // registered (`Broker::slot` looks again). If it did not start, it is on disk, to
    // open.
    *data.creating.lock() = None;
    started
}

pub(crate) fn open_single<K, V>(data: &DataDir, broker: &Broker, name: &str) -> Result<Topic<K, V>>
where
    K: Codec + Send + Sync + 'static,
    V: Codec + Send + Sync + 'static,
{
    data.check_open()?;
    // Held while the topic starts: two threads opening it start one set of writers.
    let _opening = data.opening.lock();
    match broker.topic_inner::<K, V>(name).map(Topic::from_inner) {
        Err(Error::TopicNotOpen { .. }) => {}
        // Open already (or in memory, or other Rust types: `TypeMismatch`).
        done => return done,
    }
    let meta = data.metas.lock().get(name).cloned();
    let meta = meta.ok_or_else(|| Error::UnknownTopic {
        topic: name.to_owned(),
    })?;
    if meta.key_type != type_name::<K>() || meta.value_type != type_name::<V>() {
        return Err(Error::TypeMismatch {
            topic: name.to_owned(),
            existing: format!(
                "Topic<{}, {}> (codec type ids)",
                meta.key_type, meta.value_type
            ),
            requested: format!("Topic<{}, {}>", type_name::<K>(), type_name::<V>()),
        });
    }
    start_single::<K, V>(data, broker, &meta)
}

/// Builds the typed topic over the partitions' logs, starts its writers, restores its
/// groups' offsets and registers it with the broker.
fn start_single<K, V>(dir: &DataDir, broker: &Broker, meta: &TopicMeta) -> Result<Topic<K, V>>
where
    K: Codec + Send + Sync + 'static,
    V: Codec + Send + Sync + 'static,
{
    let owner = broker.data().cloned().ok_or_else(|| Error::Closed {
        what: "the broker has no data directory".into(),
    })?;
    let arrivals = Arc::new(WaitSet::new());
    let mut partitions = Vec::new();
    let mut started = Vec::new();
    for p in 0..meta.partitions {
        let (partition, open) = dir.start_partition::<K, V>(meta, p, &arrivals)?;
        partitions.push(partition);
        started.push(open);
    }
    #[cfg(all(test, not(logbus_loom)))]
    single_tests::before_tracking();
    dir.track_open(started)?;
    let store: Arc<dyn TopicStore<K, V>> = Arc::new(PersistedTopic::<K, V> {
        data: owner,
        name: meta.name.clone(),
        _types: PhantomData,
    });
    let inner = Arc::new(
        TopicInner::new(&meta.name, meta.topic_config(), partitions, arrivals).with_store(store),
    );
    broker.register_topic(&inner)?;
    Ok(Topic::from_inner(inner))
}

impl<K, V> TopicStore<K, V> for TopicFiles<K, V>
where
    K: Send + Sync + 'static,
    V: Send + Sync + 'static,
{
    fn add_partitions(
        &self,
        _from: u32,
        _to: u32,
        _arrivals: &Arc<WaitSet>,
    ) -> Result<Vec<Arc<Partition<K, V>>>> {
        Err(Error::InvalidConfig {
            name: "partitions",
            value: "more".into(),
            valid: "the count given at creation (a replicated persisted topic cannot grow yet)"
                .into(),
        })
    }

    fn delete(&self) -> Result<()> {
        let name = self.meta.lock().topic.name.clone();
        delete_replicated(self.offsets.as_deref(), &self.dirs, &name)
    }
}

/// Deletes replicated persisted topic `name`'s files and, once they are gone, its groups'
/// committed offsets from the offsets checkpoint's sources.
pub(super) fn delete_replicated(
    offsets: Option<&DataDir>,
    dirs: &DiskDirs,
    name: &str,
) -> Result<()> {
    delete_files(dirs, name)?;
    if let Some(d) = offsets {
        d.forget_commits(name);
    }
    Ok(())
}

/// The broker's data directories, when it was opened on some.
pub(super) fn dirs_of(broker: &Broker) -> Option<Arc<DiskDirs>> {
    broker.replication().disk()
}

/// Creates a replicated persisted topic (see [`Broker::create_topic`]).
fn create_replicated<K, V>(
    broker: &Broker,
    name: &str,
    config: TopicConfig,
    persist: PersistConfig,
) -> Result<Topic<K, V>>
where
    K: Codec + Send + Sync + 'static,
    V: Codec + Send + Sync + 'static,
{
    broker.check_new_topic(name, &config)?;
    let dirs = dirs_of(broker).ok_or_else(|| Error::InvalidConfig {
        name: "data_dir",
        value: "none (an in-memory broker)".into(),
        valid: "a broker opened on data directories (BrokerBuilder::data_dirs)".into(),
    })?;
    let rf = config.replicas_per_partition();
    if rf > dirs.count() {
        return Err(Error::InvalidConfig {
            name: "replication_factor",
            value: rf.to_string(),
            valid: format!(
                "at most the broker's data directory count ({}): each replica of a \
                 partition on its own directory (BrokerBuilder::data_dirs)",
                dirs.count()
            ),
        });
    }
    let _creating = broker.data().map(|d| d.creating());
    let _changing = dirs.changing.lock();
    // Under the lock: a topic registered, or on disk and not opened yet, is never created
    // over (its metadata would be replaced, its partition directories removed).
    if broker.topics().iter().any(|t| t == name) || dirs.metas.lock().contains_key(name) {
        return Err(Error::TopicExists {
            topic: name.to_owned(),
        });
    }
    let n = dirs.count();
    let parts: Vec<PartState> = (0..config.partitions())
        .map(|p| {
            let replicas: Vec<u32> = (0..rf).map(|i| (p + i) % n).collect();
            PartState {
                leader: replicas.first().copied(),
                isr: replicas.clone(),
                replicas,
                epoch: 0,
                hw: 0,
            }
        })
        .collect();
    let meta = ReplicatedMeta {
        topic: TopicMeta::new::<K, V>(name, &config, persist),
        replication_factor: rf,
        min_insync: config.min_insync(),
        unclean: config.unclean_election(),
        lag_ms: u64::try_from(config.replica_lag_max().as_millis()).unwrap_or(u64::MAX),
        generation: 0,
        parts,
    };
    if let Some(d) = broker.data() {
        d.clear_namesake_for_creation(name)?;
    }
    // Leftovers of a creation that crashed before its metadata was written.
    for (p, s) in meta.parts.iter().enumerate() {
        for &d in &s.replicas {
            if !dirs.is_failed(d) {
                let dir = partition_dir(&dirs.paths[d as usize], name, p as u32);
                remove_tree(&*dirs.io(d), &dir)?;
            }
        }
    }
    let files = TopicFiles::<K, V>::new(Arc::clone(&dirs), broker.data().cloned(), meta.clone());
    // The commit point: once one copy is written, the topic exists.
    if files.write_all(&meta) == 0 {
        return Err(Error::Io {
            context: format!("writing the metadata of `{name}`"),
            source: std::io::Error::other("every data directory failed"),
        });
    }
    dirs.metas.lock().insert(name.to_owned(), meta.clone());
    start_replicated(broker, &dirs, files, &meta, false)
}

/// Opens a replicated persisted topic from disk, or `None` if `name` is not one.
fn open_replicated<K, V>(broker: &Broker, name: &str) -> Result<Option<Topic<K, V>>>
where
    K: Codec + Send + Sync + 'static,
    V: Codec + Send + Sync + 'static,
{
    let Some(dirs) = dirs_of(broker) else {
        return Ok(None);
    };
    // Held while the topic starts (as `open_single` and `create_replicated` hold it): two
    // threads opening it start one set of replicas, and the second finds it open.
    let _opening = broker.data().map(|d| d.creating());
    let Some(meta) = dirs.metas.lock().get(name).cloned() else {
        return Ok(None);
    };
    match broker.topic_inner::<K, V>(name).map(Topic::from_inner) {
        Err(Error::TopicNotOpen { .. }) => {}
        done => return done.map(Some),
    }
    if let Some(m) = dirs.misplaced.get(name) {
        return Err(misplaced_error(name, m));
    }
    if meta.topic.key_type != type_name::<K>() || meta.topic.value_type != type_name::<V>() {
        return Err(Error::TypeMismatch {
            topic: name.to_owned(),
            existing: format!(
                "Topic<{}, {}> (codec type ids)",
                meta.topic.key_type, meta.topic.value_type
            ),
            requested: format!("Topic<{}, {}>", type_name::<K>(), type_name::<V>()),
        });
    }
    if let Some(d) = meta
        .parts
        .iter()
        .flat_map(|s| s.replicas.iter())
        .find(|&&d| d >= dirs.count())
    {
        return Err(Error::DataDirOutOfRange {
            index: *d,
            count: dirs.count(),
        });
    }
    let files = TopicFiles::<K, V>::new(Arc::clone(&dirs), broker.data().cloned(), meta.clone());
    start_replicated(broker, &dirs, files, &meta, true).map(Some)
}

/// Opens every replica's log, builds the partitions and registers the topic.
fn start_replicated<K, V>(
    broker: &Broker,
    dirs: &Arc<DiskDirs>,
    files: TopicFiles<K, V>,
    meta: &ReplicatedMeta,
    reopen: bool,
) -> Result<Topic<K, V>>
where
    K: Codec + Send + Sync + 'static,
    V: Codec + Send + Sync + 'static,
{
    let files = Arc::new(files);
    let runtime = broker.replication();
    let config = meta.topic_config();
    let name: Arc<str> = Arc::from(meta.topic.name.as_str());
    let arrivals = Arc::new(WaitSet::new());
    let mut partitions = Vec::new();
    let mut sets: Vec<Arc<dyn ReplicaControl>> = Vec::new();
    let mut disks: Vec<Arc<dyn DiskPartition>> = Vec::new();
    for (p, state) in meta.parts.iter().enumerate() {
        let p = p as u32;
        let mut opened = Vec::new();
        let lost = dirs.lost_replicas(meta, p, &state.replicas, reopen);
        for &d in &state.replicas {
            if dirs.is_failed(d) || lost.contains(&d) {
                opened.push(None);
                continue;
            }
            match DiskReplica::<K, V>::open(&dirs.params(meta, d, p, files.codec(p))) {
                Ok(o) => opened.push(Some(o)),
                Err(e @ (Error::DirectoryLocked { .. } | Error::InvalidConfig { .. })) => {
                    return Err(e)
                }
                // An unusable directory: its replicas are offline.
                Err(_) => {
                    dirs.flag(d);
                    opened.push(None);
                }
            }
        }
        let broker_closed = ClosedByBroker::default();
        let set = ReplicaSet::new(
            Arc::clone(&name),
            p,
            ReplicationConfig::of(&config),
            &state.replicas,
            runtime.fetchers(&state.replicas)?,
            Arc::clone(&arrivals),
            Arc::clone(&runtime.shared.clock),
            Arc::clone(&runtime.shared.events),
            codec_copy::<K, V>,
            broker_closed.clone(),
        )
        .attach_disk(
            Arc::clone(&files) as Arc<dyn Backing<K, V>>,
            opened,
            reopen.then_some(state),
        );
        let set = crate::replica::rejoin(Arc::new(set), &lost);
        let partition = Arc::new(Partition::replicated(
            config.partition_config(),
            Arc::clone(&arrivals),
            Arc::clone(&set) as Arc<dyn crate::partition::ReplicatedLog<K, V>>,
            broker_closed,
        )?);
        partition.rebuild_transactions();
        partitions.push(partition);
        disks.push(Arc::clone(&set) as Arc<dyn DiskPartition>);
        sets.push(set);
    }
    for s in &sets {
        runtime.register(Arc::clone(s));
    }
    #[cfg(all(test, not(logbus_loom)))]
    replicated_tests::before_tracking();
    dirs.track_open(disks)?;
    // The groups' offsets, restored before the topic is visible, and checkpointed with the
    // single-copy topics' from now on.
    if let Some(d) = broker.data() {
        d.track_replicated_commits(&meta.topic.name, &partitions)?;
    }
    let inner = Arc::new(
        TopicInner::new(&meta.topic.name, config, partitions, arrivals)
            .with_store(files as Arc<dyn TopicStore<K, V>>),
    );
    broker.register_topic(&inner)?;
    Ok(Topic::from_inner(inner))
}

impl<K, V> Topic<K, V>
where
    K: Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// Every replica's records of `partition` (a replicated topic), for tests that check
    /// that replicas agree. A copy: it can be large.
    ///
    /// # Errors
    ///
    /// [`Error::PartitionOutOfRange`]; [`Error::InvalidConfig`] if the topic is not
    /// replicated.
    pub fn replica_logs(&self, partition: u32) -> Result<Vec<ReplicaLogView<K, V>>> {
        let p = self.inner().partition(partition)?;
        let Some(logs) = p.replica_logs() else {
            return Err(Error::InvalidConfig {
                name: "replication_factor",
                value: "1".into(),
                valid: "replica_logs needs a topic with replication_factor > 1".into(),
            });
        };
        Ok(logs
            .into_iter()
            .map(|(replica, log_start, records)| ReplicaLogView {
                replica,
                log_start,
                records: records
                    .into_iter()
                    .enumerate()
                    // Control records (transaction markers) hold no record: their offsets
                    // are gaps here, as for consumers.
                    .filter(|(_, (_, e))| !e.is_control())
                    .map(|(i, (epoch, e))| {
                        (
                            log_start + i as u64,
                            epoch,
                            e.key().cloned(),
                            e.value().clone(),
                        )
                    })
                    .collect(),
            })
            .collect())
    }
}

#[cfg(all(test, not(logbus_loom)))]
mod replicated_tests;
#[cfg(all(test, not(logbus_loom)))]
mod single_tests;
