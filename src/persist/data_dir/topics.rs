//! A persisted topic's life in the data directory: creation, opening (codecs checked
//! against the metadata), growth and deletion. The metadata file is the commit point of
//! each: partition directories it does not count are leftovers of a crash, removed before
//! their names are used again.

use std::marker::PhantomData;

use super::{DataDir, OpenPartition, TopicMeta, TOPIC_SUFFIX};
use crate::broker::{Broker, Topic, TopicConfig, TopicInner, TopicStore};
use crate::codec::Codec;
use crate::partition::Partition;
use crate::persist::log::{segment_room, spawn_writer, LogCell, PartitionLog};
use crate::persist::{ClampedOffset, PersistConfig};
use crate::storage::{checkpoint, Checkpoints, LogSetup, SegmentSet};
use crate::sync::Arc as SyncArc;
use crate::sync::StdArc as Arc;
use crate::sync::{Mutex, WaitSet};
use crate::{Error, Result};

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

impl DataDir {
    pub(crate) fn create_topic<K, V>(
        &self,
        broker: &Broker,
        name: &str,
        config: TopicConfig,
        persist: PersistConfig,
    ) -> Result<Topic<K, V>>
    where
        K: Codec + Send + Sync + 'static,
        V: Codec + Send + Sync + 'static,
    {
        self.check_open()?;
        // Validates the name, partitions, memory and replication as for any topic.
        broker.check_new_topic(name, &config)?;
        // Held until the topic is registered: an `open_topic` racing this one waits and
        // finds it open, rather than starting a second set of writers.
        let _opening = self.opening.lock();
        if broker.topics().iter().any(|t| t == name) {
            return Err(Error::TopicExists {
                topic: name.to_owned(),
            });
        }
        if self.metas.lock().contains_key(name) {
            return Err(Error::TopicExists {
                topic: name.to_owned(),
            });
        }
        // The recovery-point and log-start checkpoints may still name a deleted topic of
        // this name: rewritten from the open partitions, durably, before its metadata
        // exists, so that a reopen never applies the old topic's offsets to the new one.
        self.write_log_checkpoints(None)?;
        let mut metas = self.metas.lock();
        if metas.contains_key(name) {
            return Err(Error::TopicExists {
                topic: name.to_owned(),
            });
        }
        let meta = TopicMeta::new::<K, V>(name, &config, persist);
        // The directories first, then the metadata: a partition directory missing under
        // metadata that names it was removed (`DataDir::open` refuses it).
        let made = (0..meta.partitions).try_for_each(|p| {
            self.remove_partition_dir(name, p)?;
            self.open_partition_log(&meta, p)
        });
        let made =
            made.and_then(|()| checkpoint::write(&*self.io, &self.meta_path(name), &meta.lines()));
        if let Err(e) = made {
            // No metadata names them: the directories are leftovers.
            for p in 0..meta.partitions {
                self.close_partition_log(name, p);
                let _ = self.remove_partition_dir(name, p);
            }
            return Err(e);
        }
        // Hidden until registered: a send meanwhile finds no topic (`UnknownTopic`), not
        // one to open (`TopicNotOpen`).
        *self.creating.lock() = Some(name.to_owned());
        metas.insert(name.to_owned(), meta.clone());
        drop(metas);
        let started = self.start_topic::<K, V>(broker, &meta);
        // After the registration: a lookup that finds the topic visible again finds it
        // registered (`Broker::slot` looks again). If it did not start, it is on disk, to
        // open.
        *self.creating.lock() = None;
        started
    }

    pub(crate) fn open_topic<K, V>(&self, broker: &Broker, name: &str) -> Result<Topic<K, V>>
    where
        K: Codec + Send + Sync + 'static,
        V: Codec + Send + Sync + 'static,
    {
        self.check_open()?;
        // Held while the topic starts: two threads opening it start one set of writers.
        let _opening = self.opening.lock();
        match broker.topic::<K, V>(name) {
            Err(Error::TopicNotOpen { .. }) => {}
            // Open already (or in memory, or other Rust types: `TypeMismatch`).
            done => return done,
        }
        let meta = self.metas.lock().get(name).cloned();
        let meta = meta.ok_or_else(|| Error::UnknownTopic {
            topic: name.to_owned(),
        })?;
        if meta.key_type != K::TYPE_ID || meta.value_type != V::TYPE_ID {
            return Err(Error::TypeMismatch {
                topic: name.to_owned(),
                existing: format!(
                    "Topic<{}, {}> (codec type ids)",
                    meta.key_type, meta.value_type
                ),
                requested: format!("Topic<{}, {}>", K::TYPE_ID, V::TYPE_ID),
            });
        }
        self.start_topic::<K, V>(broker, &meta)
    }

    /// Builds the typed topic over the partitions' logs, starts its writers, restores its
    /// groups' offsets and registers it with the broker.
    fn start_topic<K, V>(&self, broker: &Broker, meta: &TopicMeta) -> Result<Topic<K, V>>
    where
        K: Codec + Send + Sync + 'static,
        V: Codec + Send + Sync + 'static,
    {
        let data = broker.data().cloned().ok_or_else(|| Error::Closed {
            what: "the broker has no data directory".into(),
        })?;
        let arrivals = Arc::new(WaitSet::new());
        let mut partitions = Vec::new();
        let mut started = Vec::new();
        for p in 0..meta.partitions {
            let (partition, open) = self.start_partition::<K, V>(meta, p, &arrivals)?;
            partitions.push(partition);
            started.push(open);
        }
        #[cfg(all(test, not(logbus_loom)))]
        tests::before_tracking();
        self.track_open(started)?;
        let store: Arc<dyn TopicStore<K, V>> = Arc::new(PersistedTopic::<K, V> {
            data,
            name: meta.name.clone(),
            _types: PhantomData,
        });
        let inner = Arc::new(
            TopicInner::new(&meta.name, meta.topic_config(), partitions, arrivals)
                .with_store(store),
        );
        broker.register_topic(&inner)?;
        Ok(Topic::from_inner(inner))
    }

    /// Opens (creating) the segment set of partition `p` and registers its cell.
    fn open_partition_log(&self, meta: &TopicMeta, p: u32) -> Result<()> {
        let (set, _) = SegmentSet::open(
            self.dir.join(format!("{}-{p}", meta.name)),
            LogSetup {
                config: meta.log_config(),
                io: SyncArc::clone(&self.io),
                clock: SyncArc::clone(&self.clock),
                checkpoints: Checkpoints::default(),
            },
        )?;
        self.cells.lock().insert(
            (meta.name.clone(), p),
            Arc::new(LogCell::new(&meta.name, p, set)),
        );
        Ok(())
    }

    /// The typed partition `p` over its log, with its groups' offsets restored and its
    /// writer started.
    fn start_partition<K, V>(
        &self,
        meta: &TopicMeta,
        p: u32,
        arrivals: &Arc<WaitSet>,
    ) -> Result<(Arc<Partition<K, V>>, OpenPartition)>
    where
        K: Codec + Send + Sync + 'static,
        V: Codec + Send + Sync + 'static,
    {
        let cell = self
            .cells
            .lock()
            .get(&(meta.name.clone(), p))
            .cloned()
            .ok_or_else(|| Error::UnknownTopic {
                topic: format!("{}-{p}", meta.name),
            })?;
        // The writer's batches, and the largest record one can hold.
        let batch_limit = meta
            .persist
            .segment_bytes
            .min(meta.log_config().max_batch_bytes);
        let disk = Arc::new(PartitionLog::<K, V> {
            cell: Arc::clone(&cell),
            buf: Mutex::new(bytes::Bytes::new()),
            policy: meta.persist.flush,
            max_message_bytes: meta.persist.max_message_bytes,
            segment_room: segment_room(batch_limit),
            _types: PhantomData,
        });
        let (partition, gate) = Partition::persisted(
            meta.topic_config().partition_config(),
            Arc::clone(arrivals),
            cell.written(),
            disk,
        )?;
        let partition = Arc::new(partition);
        // Restore the groups' offsets, clamped to the recovered log end. They stay in
        // `loaded` until `track_open` has the partition in `open`: a checkpoint taken in
        // between must still find them (a crash then would lose every group's offset here).
        let end = cell.written();
        let loaded = self.loaded.lock();
        let mine: Vec<_> = loaded
            .iter()
            .filter(|((_, t, q), _)| *t == meta.name && *q == p)
            .map(|(k, o)| (k.clone(), *o))
            .collect();
        drop(loaded);
        for (key, committed) in mine {
            let offset = committed.min(end);
            if committed > end {
                self.clamped.lock().push(ClampedOffset {
                    group: key.0.clone(),
                    topic: meta.name.clone(),
                    partition: p,
                    committed,
                    log_end: end,
                });
            }
            let group: Arc<str> = Arc::from(key.0.as_str());
            let _ = partition.commit(&group, offset, 0);
        }
        let writer = spawn_writer(
            cell,
            Arc::clone(&partition),
            gate,
            meta.persist.flush,
            batch_limit as usize,
        )?;
        let open = OpenPartition {
            topic: meta.name.clone(),
            partition: p,
            committed: {
                let part = Arc::clone(&partition);
                Box::new(move || part.committed_all())
            },
            close: {
                let part = Arc::clone(&partition);
                Box::new(move || part.close())
            },
            sync: {
                let part = Arc::clone(&partition);
                Box::new(move || part.sync_disk(true))
            },
            writer: Some(writer),
        };
        Ok((partition, open))
    }

    /// Grows topic `name` from `from` to `to` persisted partitions: their directories
    /// first, then the metadata (atomically), then their writers.
    fn add_partitions<K, V>(
        &self,
        name: &str,
        from: u32,
        to: u32,
        arrivals: &Arc<WaitSet>,
    ) -> Result<Vec<Arc<Partition<K, V>>>>
    where
        K: Codec + Send + Sync + 'static,
        V: Codec + Send + Sync + 'static,
    {
        self.check_open()?;
        let mut metas = self.metas.lock();
        let meta = metas
            .get(name)
            .cloned()
            .ok_or_else(|| Error::UnknownTopic {
                topic: name.to_owned(),
            })?;
        if meta.partitions != from {
            return Err(Error::InvalidCheckpoint {
                file: self.meta_path(name),
                line: 0,
                reason: format!(
                    "the metadata counts {} partitions, the open topic {from}",
                    meta.partitions
                ),
            });
        }
        let grown = TopicMeta {
            partitions: to,
            ..meta
        };
        let made = (from..to).try_for_each(|p| {
            self.remove_partition_dir(name, p)?;
            self.open_partition_log(&grown, p)
        });
        let made =
            made.and_then(|()| checkpoint::write(&*self.io, &self.meta_path(name), &grown.lines()));
        if let Err(e) = made {
            // The metadata still counts `from`: the new directories are leftovers.
            for p in from..to {
                self.close_partition_log(name, p);
                let _ = self.remove_partition_dir(name, p);
            }
            return Err(e);
        }
        metas.insert(name.to_owned(), grown.clone());
        drop(metas);
        let mut partitions = Vec::new();
        for p in from..to {
            let (partition, open) = self.start_partition::<K, V>(&grown, p, arrivals)?;
            self.track_open(vec![open])?;
            partitions.push(partition);
        }
        Ok(partitions)
    }

    /// Deletes topic `name` (its partitions already closed): the metadata file goes first
    /// (the topic is gone once that is durable), then the writers stop, then every file of
    /// its partition directories and the directories.
    pub(crate) fn delete_topic(&self, name: &str) -> Result<()> {
        self.check_open()?;
        // Held to the end: a creation of the same name waits until the old partition
        // directories are gone, rather than making its own for this delete to remove.
        let _opening = self.opening.lock();
        let Some(meta) = self.metas.lock().remove(name) else {
            return Ok(());
        };
        let path = self.meta_path(name);
        let removed = self
            .io
            .remove_file(&path)
            .and_then(|()| self.io.sync_dir(&self.dir));
        if let Err(e) = removed {
            self.metas.lock().insert(name.to_owned(), meta);
            return Err(Error::io(format!("removing {}", path.display()), e));
        }
        let mine: Vec<OpenPartition> = {
            let mut open = self.open.lock();
            let (mine, rest) = std::mem::take(&mut *open)
                .into_iter()
                .partition(|p| p.topic == name);
            *open = rest;
            mine
        };
        for p in &mine {
            (p.close)();
        }
        for mut p in mine {
            if let Some(w) = p.writer.take() {
                let _ = w.join();
            }
        }
        self.loaded.lock().retain(|(_, t, _), _| t != name);
        let mut first_error = None;
        for p in 0..meta.partitions {
            self.close_partition_log(name, p);
            if let Err(e) = self.remove_partition_dir(name, p) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Forgets partition `p`'s cell and closes its segment set (readers holding the cell
    /// find it closed).
    fn close_partition_log(&self, name: &str, p: u32) {
        if let Some(cell) = self.cells.lock().remove(&(name.to_owned(), p)) {
            drop(cell.log.lock().take());
        }
    }

    /// Removes `<data dir>/<name>-<p>/` and every file in it, if it exists. Topic names are
    /// checked (Kafka's characters, never `.` or `..`), so the path is a child of the
    /// data directory; by Kafka's length, so that a topic found on disk under a longer name
    /// than new topics may take can still be deleted.
    fn remove_partition_dir(&self, name: &str, p: u32) -> Result<()> {
        crate::broker::validate_kafka_topic_name(name)?;
        let dir = self.dir.join(format!("{name}-{p}"));
        let err = |what: &str, path: &std::path::Path, e| {
            Error::io(
                format!("{what} {} (deleting a partition)", path.display()),
                e,
            )
        };
        if !self.io.exists(&dir).map_err(|e| err("checking", &dir, e))? {
            return Ok(());
        }
        for file in self
            .io
            .list_dir(&dir)
            .map_err(|e| err("listing", &dir, e))?
        {
            let path = dir.join(file);
            self.io
                .remove_file(&path)
                .map_err(|e| err("removing", &path, e))?;
        }
        self.io
            .sync_dir(&dir)
            .map_err(|e| err("syncing", &dir, e))?;
        self.io
            .remove_dir(&dir)
            .map_err(|e| err("removing", &dir, e))?;
        self.io
            .sync_dir(&self.dir)
            .map_err(|e| err("syncing", &self.dir, e))
    }

    /// The codec type ids of persisted topic `name`, if the directory holds it.
    /// `None` while it is being created (not registered yet).
    pub(crate) fn meta_types(&self, name: &str) -> Option<(String, String)> {
        let metas = self.metas.lock();
        if self.creating.lock().as_deref() == Some(name) {
            return None;
        }
        metas
            .get(name)
            .map(|m| (m.key_type.clone(), m.value_type.clone()))
    }

    fn meta_path(&self, name: &str) -> std::path::PathBuf {
        self.dir.join(format!("{name}{TOPIC_SUFFIX}"))
    }
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use std::cell::RefCell;
    use std::time::Duration;

    use crate::broker::{Broker, TopicConfig};
    use crate::persist::{FlushPolicy, PersistConfig};
    use crate::storage::fault::FaultyIo;
    use crate::sync::StdArc as Arc;
    use crate::{Error, Record};

    thread_local! {
        /// Run by `start_topic` between starting a topic's writers and tracking them.
        static BEFORE_TRACKING: RefCell<Option<Box<dyn FnOnce()>>> = const { RefCell::new(None) };
    }

    pub(super) fn before_tracking() {
        if let Some(f) = BEFORE_TRACKING.with(|h| h.borrow_mut().take()) {
            f();
        }
    }

    fn broker(fs: &FaultyIo) -> Broker {
        Broker::builder()
            .io(Arc::new(fs.clone()))
            .data_dir("/data")
            .create(true)
            .retention_check_interval(Duration::from_millis(2))
            .open()
            .unwrap()
    }

    /// Only a topic left to the OS's write-back skips starting it on every write-out.
    #[test]
    fn write_back_starts_unless_the_os_flushes() {
        use crate::persist::TopicMeta;
        for (policy, starts) in [
            (FlushPolicy::Os, false),
            (FlushPolicy::EveryBatch, true),
            (FlushPolicy::Bytes(1 << 20), true),
            (FlushPolicy::Messages(10), true),
            (FlushPolicy::Interval(Duration::from_secs(1)), true),
        ] {
            let meta = TopicMeta::new::<(), String>(
                "t",
                &TopicConfig::new(1),
                PersistConfig::new().flush(policy),
            );
            assert_eq!(meta.log_config().start_writeback, starts, "{policy:?}");
        }
    }

    /// A checkpoint taken while a topic opens, after its partitions took their groups'
    /// offsets from the checkpoint and before they are tracked, then a crash: the reopened
    /// directory still has every group's committed offset (the window once wrote a
    /// checkpoint without them, and a SIGKILL there lost them all).
    #[test]
    fn a_checkpoint_while_a_topic_opens_keeps_its_groups_offsets() {
        use crate::broker::TopicPartition;
        use crate::consumer::ConsumerConfig;
        let fs = FaultyIo::new(5);
        let first = broker(&fs);
        first
            .create_persisted_topic::<(), String>(
                "t",
                TopicConfig::new(1),
                PersistConfig::new().flush(FlushPolicy::EveryBatch),
            )
            .unwrap();
        let p = first.producer::<(), String>();
        for i in 0..10 {
            p.send(Record::new("t", format!("v{i}"))).unwrap();
        }
        let tp = TopicPartition::new("t", 0);
        let mut c = first
            .consumer::<(), String>(ConsumerConfig::new().group_id("g"))
            .unwrap();
        c.assign(std::slice::from_ref(&tp)).unwrap();
        c.commit_offsets(&[(tp.clone(), 7)]).unwrap();
        drop(c);
        first.close().unwrap();
        let b = broker(&fs);
        let syncing = b.clone();
        BEFORE_TRACKING.with(|h| {
            *h.borrow_mut() = Some(Box::new(move || {
                syncing.sync().unwrap();
                syncing.simulate_process_death();
            }));
        });
        let _ = b.open_topic::<(), String>("t");
        fs.crash();
        let again = broker(&fs);
        again.open_topic::<(), String>("t").unwrap();
        let c = again
            .consumer::<(), String>(ConsumerConfig::new().group_id("g"))
            .unwrap();
        assert_eq!(c.committed(&tp).unwrap(), Some(7));
        again.close().unwrap();
    }

    /// The process dies while a thread opens a topic, after its writers started: the open
    /// fails, and no partition that the death never closed is left taking sends (the hang
    /// of `power_loss_rounds`: a producer sending `Ok` for ever to a dead broker).
    #[test]
    fn a_topic_opening_as_the_process_dies_takes_no_sends() {
        let fs = FaultyIo::new(3);
        let first = broker(&fs);
        first
            .create_persisted_topic::<(), String>(
                "t",
                TopicConfig::new(1),
                PersistConfig::new().flush(FlushPolicy::Os),
            )
            .unwrap();
        first.close().unwrap();
        for create in [false, true] {
            let b = broker(&fs);
            let dying = b.clone();
            BEFORE_TRACKING.with(|h| {
                *h.borrow_mut() = Some(Box::new(move || dying.simulate_process_death()));
            });
            let opened = if create {
                b.create_persisted_topic::<(), String>(
                    "u",
                    TopicConfig::new(1),
                    PersistConfig::new().flush(FlushPolicy::Os),
                )
            } else {
                b.open_topic::<(), String>("t")
            };
            assert!(
                matches!(opened, Err(Error::Closed { .. })),
                "create {create}: {opened:?}"
            );
            let p = b.producer::<(), String>();
            let name = if create { "u" } else { "t" };
            let sent = p.send(Record::new(name, "after death".to_string()));
            assert!(
                sent.is_err(),
                "create {create}: a dead broker took {sent:?}"
            );
            fs.crash();
        }
    }
}
