//! Topic admin: create, look up, grow, delete, list and describe topics, and the offsets
//! of their partitions.

use std::any::{type_name, Any, TypeId};

use super::topic::{PartitionFactory, TopicAdmin, TopicSlot};
use super::{validate_topic_name, Broker, Topic, TopicConfig, TopicInner, TopicPartition};
use crate::codec::Codec;
use crate::partition::compacted::Section;
use crate::partition::{Offsets, Partition, ProducerExpiry};
use crate::persist::PersistedTopicConfig;
// Std's Arc (also under loom): the broker shares unsized values (see `sync::StdArc`).
use crate::sync::atomic::Ordering;
use crate::sync::StdArc as Arc;
use crate::sync::WaitSet;
use crate::{Error, Result};

/// One partition as [`Broker::describe_topic`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionInfo {
    /// The partition number.
    pub partition: u32,
    /// The first offset still held.
    pub log_start: u64,
    /// Consumers read below this offset (equal to `log_end` with one replica; on a
    /// replicated topic, the lowest log end over the ISR).
    pub high_watermark: u64,
    /// One past the last offset appended (the leader's, on a replicated topic).
    pub log_end: u64,
    /// Records held in memory (`log_end - log_start`; a compacted topic's partition: its
    /// ring's records and the keys it keeps beyond them).
    pub records_in_memory: u64,
    /// The last stable offset: the first offset of the earliest open transaction, else
    /// the high watermark. Read-committed consumers read below it.
    pub last_stable_offset: u64,
    /// Records an [`Overflow::Block`](super::Overflow::Block) topic overwrote while no consumer group held them
    /// (none registered on the partition, or the last one deleted or expired): no group
    /// had read them (consumers without a group id hold nothing back, so one may have).
    /// Records a group committed are not counted when they are overwritten later. Always
    /// 0 for other topics: `DropOldest` drops by design, persisted and replicated topics
    /// keep records on disk, in-memory compacted topics keep the latest record of each key
    /// ([`compacted`](Self::compacted)).
    pub overwritten_unread: u64,
    /// A persisted topic whose [`CleanupPolicy`](super::CleanupPolicy) compacts: the log
    /// cleaner's progress on this partition (first dirty offset, dirty ratio, passes, records
    /// and bytes removed; of a replicated topic, its leader's log's, once the cleaner looked
    /// at it since the broker opened); `None` for other topics.
    pub cleaner: Option<crate::persist::CleanerProgress>,
    /// An in-memory compacted topic's partition
    /// ([`TopicConfig::compacted`]): what it keeps beyond its ring. `None` for
    /// other topics.
    pub compacted: Option<CompactedInfo>,
}

/// What an in-memory compacted partition keeps beyond its ring
/// ([`TopicConfig::compacted`]): the latest record of each key the ring let go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompactedInfo {
    /// Keys kept (tombstones included): at most
    /// [`TopicConfig::max_compacted_keys`](super::TopicConfig::max_compacted_keys).
    pub keys: u64,
    /// Tombstones kept (each until its `delete_retention` passes).
    pub tombstones: u64,
    /// Every offset below this has left the ring: reads there are served from what is kept.
    pub retained_below: u64,
    /// Records of new keys the ring let go while `max_compacted_keys` keys were kept: not
    /// kept, so a replay from the start does not read them (nor, if the key had no later
    /// record, the key).
    pub dropped: u64,
    /// Records without a key the ring let go (they cannot be compacted; sends refuse them,
    /// so this stays 0 unless records reached the ring another way).
    pub unkeyed: u64,
}

/// A topic as [`Broker::describe_topic`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDescription {
    /// The topic's name.
    pub name: String,
    /// Its key type's name (for messages; not a stable identifier).
    pub key_type: &'static str,
    /// Its value type's name.
    pub value_type: &'static str,
    /// Its configuration (with the current partition count).
    pub config: TopicConfig,
    /// Every partition, in order.
    pub partitions: Vec<PartitionInfo>,
    /// Replicated topics: each partition's leader, ISR, leader epoch, HW and replicas, in
    /// partition order (empty for a replication factor of 1).
    pub replicas: Vec<crate::replica::PartitionReplicas>,
}

impl Broker {
    /// Creates topic `name` with key type `K` and value type `V`: in memory from a
    /// [`TopicConfig`], or persisted in the broker's data directory from a
    /// [`TopicConfig::persist`] config ([`PersistedTopicConfig`], whose types need a
    /// [`Codec`]). Either may be replicated
    /// ([`TopicConfig::replication_factor`]).
    ///
    /// A persisted topic's partitions live in `<data dir>/<name>-<n>/`, its metadata (with
    /// the codecs' type ids) in `<data dir>/<name>.topic`; its `records_in_memory` sizes the
    /// ring that caches the tail, its retention age applies to segments, and `Overflow` does
    /// not apply (producers wait only for the disk writer).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTopicName`], [`Error::InvalidConfig`] (partition count, memory,
    /// retention, persistence settings; a persisted config on a broker without a data
    /// directory, naming how to open one), [`Error::TopicExists`] (in memory or on disk),
    /// I/O errors of a persisted topic's files.
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::broker::{Broker, TopicConfig};
    /// use logbus::persist::PersistConfig;
    ///
    /// let memory = Broker::in_memory();
    /// memory.create_topic::<String, u64>("clicks", TopicConfig::new(3))?;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let disk = Broker::builder().data_dir(dir.path()).create(true).open()?;
    /// disk.create_topic::<String, u64>("orders", TopicConfig::new(3).persist(PersistConfig::new()))?;
    /// # disk.close()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn create_topic<K, V>(
        &self,
        name: &str,
        config: impl NewTopic<K, V>,
    ) -> Result<Topic<K, V>> {
        config.create_in(self, name)
    }

    /// Creates an in-memory compacted topic (`create_topic` with a
    /// [`CompactedTopicConfig`]).
    fn create_compacted<K, V>(&self, name: &str, config: TopicConfig) -> Result<Topic<K, V>>
    where
        K: Codec + Clone + Send + Sync + 'static,
        V: Codec + Clone + Send + Sync + 'static,
    {
        if config.replication_factor > 1 {
            return Err(Error::InvalidConfig {
                name: "replication_factor",
                value: config.replication_factor.to_string(),
                valid: "1 for an in-memory compacted topic (a replicated topic compacts on \
                        disk: create it persisted)"
                    .into(),
            });
        }
        let (clock, expiry) = (Arc::clone(self.clock()), self.gate_expiry());
        let producer_expiry = self.producer_expiry(&config);
        self.register_in_memory(name, config, move |arrivals| {
            let arrivals = Arc::clone(arrivals);
            let compaction = config.compaction_config();
            Some(Arc::new(move |_| {
                let clock = Arc::clone(&clock);
                Partition::new(config.partition_config(), Arc::clone(&arrivals))?
                    .with_gate_expiry(Some(Arc::clone(&expiry)))
                    .with_producer_expiry(producer_expiry.clone())
                    .with_compaction(move |start| {
                        Arc::new(Section::<K, V>::new(compaction, clock, start))
                    })
                    .map(Arc::new)
            }) as PartitionFactory<K, V>)
        })
    }

    /// Creates an in-memory topic (`create_topic` with a plain [`TopicConfig`]).
    fn create_in_memory<K, V>(&self, name: &str, config: TopicConfig) -> Result<Topic<K, V>>
    where
        K: Clone + Send + Sync + 'static,
        V: Clone + Send + Sync + 'static,
    {
        if config.cleanup().compacts() {
            return Err(Error::InvalidConfig {
                name: "cleanup_policy",
                value: config.cleanup().kafka_name().into(),
                valid: "Delete for a plain in-memory topic: an in-memory compacted topic is \
                        created from TopicConfig::compacted (its key and value types need a \
                        Codec: compaction compares keys by their encoding), a persisted one \
                        from TopicConfig::persist"
                    .into(),
            });
        }
        let factory = |arrivals: &Arc<WaitSet>| {
            (config.replication_factor > 1).then(|| {
                let (runtime, name, arrivals) =
                    (self.replication(), Arc::from(name), Arc::clone(arrivals));
                Arc::new(move |n| {
                    crate::replica::build_partition(&runtime, &name, n, &config, &arrivals)
                }) as PartitionFactory<K, V>
            })
        };
        self.register_in_memory(name, config, factory)
    }

    /// Creates and registers an in-memory topic whose partitions `factory` makes (given the
    /// topic's arrivals), or plain ones where it makes none.
    fn register_in_memory<K, V>(
        &self,
        name: &str,
        config: TopicConfig,
        factory: impl FnOnce(&Arc<WaitSet>) -> Option<PartitionFactory<K, V>>,
    ) -> Result<Topic<K, V>>
    where
        K: Send + Sync + 'static,
        V: Send + Sync + 'static,
    {
        validate_topic_name(name)?;
        config.validate()?;
        // Held to the insert, before the topics' lock (persisted creations take it, then
        // that one): a persisted creation of this name hides its topic until registered,
        // so without it both creations could pass their checks and the persisted one fail
        // at registration, its files left on disk.
        let _creating = self.data().map(|d| d.creating());
        let on_disk = self.stored_types(name).is_some();
        let mut topics = self.inner.topics.lock();
        // Under the topics' lock: `close` marks the directory closed, then closes every
        // topic it finds here, so a topic is either refused or found and closed.
        if let Some(d) = self.data() {
            d.check_open()?;
        }
        if topics.contains_key(name) || on_disk {
            return Err(Error::TopicExists {
                topic: name.to_owned(),
            });
        }
        let arrivals = Arc::new(WaitSet::new());
        let factory = factory(&arrivals);
        let producer_expiry = self.producer_expiry(&config);
        let partitions = (0..config.partitions)
            .map(|n| match &factory {
                Some(make) => make(n),
                None => Partition::new(config.partition_config(), Arc::clone(&arrivals)).map(|p| {
                    Arc::new(
                        p.with_gate_expiry(Some(self.gate_expiry()))
                            .with_producer_expiry(producer_expiry.clone()),
                    )
                }),
            })
            .collect::<Result<Vec<_>>>()?;
        let inner = Arc::new(TopicInner {
            factory,
            gate_expiry: Some(self.gate_expiry()),
            producer_expiry: Some(producer_expiry),
            ..TopicInner::new(name, config, partitions, arrivals)
        });
        topics.insert(
            name.to_owned(),
            TopicSlot {
                key: (TypeId::of::<K>(), type_name::<K>()),
                value: (TypeId::of::<V>(), type_name::<V>()),
                typed: Arc::clone(&inner) as Arc<dyn Any + Send + Sync>,
                admin: Arc::clone(&inner) as Arc<dyn TopicAdmin>,
            },
        );
        drop(topics);
        self.bump_metadata();
        Ok(Topic::from_inner(inner))
    }

    /// How the idle producer ids of a one-replica partition of a topic with `config`
    /// expire: the topic's `producer_id_expiration` on the broker's clock.
    pub(crate) fn producer_expiry(&self, config: &TopicConfig) -> ProducerExpiry {
        ProducerExpiry::new(Arc::clone(self.clock()), config.producer_expiration())
    }

    /// Whether a topic `name` with `config` could be created now (valid, not taken).
    pub(crate) fn check_new_topic(&self, name: &str, config: &TopicConfig) -> Result<()> {
        validate_topic_name(name)?;
        config.validate()?;
        if self.inner.topics.lock().contains_key(name) {
            return Err(Error::TopicExists {
                topic: name.to_owned(),
            });
        }
        Ok(())
    }

    /// Closes every partition of every open topic, in memory or persisted, replicated or
    /// not (a replicated persisted topic's files are closed after, by the replicas' own
    /// close): `Broker::close`. Sends fail from now on, saying the broker was closed;
    /// waiting sends and polls wake.
    pub(crate) fn close_topics(&self) {
        let topics: Vec<_> = self
            .inner
            .topics
            .lock()
            .values()
            .map(|slot| Arc::clone(&slot.admin))
            .collect();
        for topic in topics {
            topic.close_for_broker();
        }
    }

    /// The data directories of replicated persisted topics (a broker opened on disk).
    pub(super) fn replicated_dirs(&self) -> Option<Arc<crate::persist::replicated::DiskDirs>> {
        self.data()?;
        self.inner.replication.lock().as_ref()?.disk()
    }

    /// The codec type ids of a persisted topic on disk (open or not).
    pub(super) fn stored_types(&self, name: &str) -> Option<(String, String)> {
        let data = self.data()?;
        data.meta_types(name)
            .or_else(|| self.replicated_dirs()?.meta_types(name))
    }

    /// Registers a topic built elsewhere (a persisted one).
    pub(crate) fn register_topic<K, V>(&self, inner: &Arc<TopicInner<K, V>>) -> Result<()>
    where
        K: Send + Sync + 'static,
        V: Send + Sync + 'static,
    {
        let mut topics = self.inner.topics.lock();
        if topics.contains_key(&*inner.name) {
            return Err(Error::TopicExists {
                topic: inner.name.to_string(),
            });
        }
        topics.insert(
            inner.name.to_string(),
            TopicSlot {
                key: (TypeId::of::<K>(), type_name::<K>()),
                value: (TypeId::of::<V>(), type_name::<V>()),
                typed: Arc::clone(inner) as Arc<dyn Any + Send + Sync>,
                admin: Arc::clone(inner) as Arc<dyn TopicAdmin>,
            },
        );
        Ok(())
    }

    /// The topic `name`, which must have key type `K` and value type `V`: a handle to an
    /// open topic (in memory or persisted), or a persisted topic recovered from the data
    /// directory and not opened yet, opened now after checking its codecs' type ids against
    /// its metadata. The Rust types are fixed from then on: two types of one encoding
    /// (`Vec<u8>` and `Bytes`) cannot both open it.
    ///
    /// The types need a [`Codec`] because the topic may have to be
    /// opened from disk; an in-memory topic of types without one is reached through the
    /// handle [`create_topic`](Self::create_topic) returned (clone it).
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`]; [`Error::TypeMismatch`] naming both types (the Rust types of
    /// an open topic, or the codec type ids in a persisted topic's metadata); for a
    /// replicated persisted topic, [`Error::InvalidConfig`] (`data_dirs`) when the data
    /// directories are not in the order it was created with (replica ids are directory
    /// indexes); I/O errors opening a persisted topic's files.
    pub fn topic<K, V>(&self, name: &str) -> Result<Topic<K, V>>
    where
        K: Codec + Send + Sync + 'static,
        V: Codec + Send + Sync + 'static,
    {
        match self.topic_inner(name) {
            Err(Error::TopicNotOpen { .. }) => self.open_persisted(name),
            found => found.map(Topic::from_inner),
        }
    }

    pub(crate) fn topic_inner<K, V>(&self, name: &str) -> Result<Arc<TopicInner<K, V>>>
    where
        K: Send + Sync + 'static,
        V: Send + Sync + 'static,
    {
        let slot = self.slot(name)?;
        if slot.key.0 != TypeId::of::<K>() || slot.value.0 != TypeId::of::<V>() {
            return Err(Error::TypeMismatch {
                topic: name.to_owned(),
                existing: format!("Topic<{}, {}>", slot.key.1, slot.value.1),
                requested: format!("Topic<{}, {}>", type_name::<K>(), type_name::<V>()),
            });
        }
        match slot.typed.downcast::<TopicInner<K, V>>() {
            Ok(inner) => Ok(inner),
            // The type ids matched, so the downcast cannot fail; say so rather than panic.
            Err(_) => Err(Error::TypeMismatch {
                topic: name.to_owned(),
                existing: format!("Topic<{}, {}>", slot.key.1, slot.value.1),
                requested: format!("Topic<{}, {}>", type_name::<K>(), type_name::<V>()),
            }),
        }
    }

    pub(super) fn slot(&self, name: &str) -> Result<TopicSlot> {
        if let Some(slot) = self.inner.topics.lock().get(name) {
            return Ok(slot.clone());
        }
        // A persisted topic not opened yet is known, but not its Rust types.
        let stored = self.stored_types(name);
        if stored.is_some() {
            // Registered since the look above, by a create that hid it until then.
            if let Some(slot) = self.inner.topics.lock().get(name) {
                return Ok(slot.clone());
            }
        }
        match stored {
            Some((key_type, value_type)) => Err(Error::TopicNotOpen {
                topic: name.to_owned(),
                key_type,
                value_type,
            }),
            None => Err(Error::UnknownTopic {
                topic: name.to_owned(),
            }),
        }
    }

    /// Grows topic `name` to `total` partitions. Keys hash over the new count from then on
    /// (as in Kafka: a key may land on another partition than before).
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`]; [`Error::PartitionsCannotShrink`] when `total` is not above
    /// the current count; [`Error::InvalidConfig`] above [`MAX_PARTITIONS`](super::MAX_PARTITIONS).
    pub fn add_partitions(&self, name: &str, total: u32) -> Result<()> {
        self.slot(name)?.admin.add_partitions(total)?;
        self.bump_metadata();
        Ok(())
    }

    /// Deletes topic `name`: its records and its groups' offsets go (a persisted topic's
    /// files too); producers sending to it and consumers assigned to it get an error; a new
    /// topic may take the name.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`]; for a persisted topic, the I/O error that stopped the
    /// removal of its files (the topic is gone from the broker either way).
    /// [`Error::LogOffline`] naming a failed data directory, for a replicated persisted
    /// topic while one is failed: nothing is deleted (that directory would keep the
    /// topic's files and bring it back at the next open); restore it first.
    pub fn delete_topic(&self, name: &str) -> Result<()> {
        if let Some(r) = self
            .replicated_dirs()
            .filter(|r| r.meta_types(name).is_some())
        {
            r.check_online()?;
        }
        // Deleted while still registered, removed after: a persisted topic removed first
        // looked like one on disk not opened yet, and a `topic` call in between opened it
        // again, registered over the files this delete then removed.
        let slot = self.inner.topics.lock().get(name).cloned();
        let Some(slot) = slot else {
            // A persisted topic not opened: only its files.
            if let Some(r) = self
                .replicated_dirs()
                .filter(|r| r.meta_types(name).is_some())
            {
                // Under the creation lock, which `topic()` holds while it opens one (the
                // one-replica kind's delete takes it itself): not opened meanwhile, or
                // deleted as an open topic.
                let opening = self.data().map(|d| d.creating());
                if self.inner.topics.lock().contains_key(name) {
                    drop(opening);
                    return self.delete_topic(name);
                }
                return super::persisted::delete_replicated(self.data().map(|d| &**d), &r, name);
            }
            return match self.data() {
                Some(d) if d.meta_types(name).is_some() => d.delete_topic(name),
                _ => Err(Error::UnknownTopic {
                    topic: name.to_owned(),
                }),
            };
        };
        let removed = slot.admin.delete();
        let ours = {
            let mut topics = self.inner.topics.lock();
            let ours = topics
                .get(name)
                .is_some_and(|s| Arc::ptr_eq(&s.admin, &slot.admin));
            if ours {
                topics.remove(name);
            }
            ours
        };
        self.bump_metadata();
        if !ours {
            // Another delete of this topic removed it first.
            return Err(Error::UnknownTopic {
                topic: name.to_owned(),
            });
        }
        removed
    }

    /// The names of all topics, sorted: on a broker opened on a data directory, with the
    /// persisted topics not opened yet.
    pub fn topics(&self) -> Vec<String> {
        let mut names: Vec<_> = self.inner.topics.lock().keys().cloned().collect();
        if let Some(d) = self.data() {
            names.extend(d.topic_names());
        }
        if let Some(r) = self.replicated_dirs() {
            names.extend(r.names());
        }
        names.sort();
        names.dedup();
        names
    }

    /// Topic `name`'s types, configuration and, per partition, log start, high watermark,
    /// log end and records in memory.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`].
    pub fn describe_topic(&self, name: &str) -> Result<TopicDescription> {
        self.expire_empty_groups();
        let slot = self.slot(name)?;
        let now = self.now_ms();
        let config = slot.admin.config();
        let mut partitions = (0..config.partitions)
            .map(|p| {
                slot.admin.offsets(p, now).map(|o| PartitionInfo {
                    partition: p,
                    log_start: o.log_start,
                    high_watermark: o.high_watermark,
                    log_end: o.log_end,
                    // A compacted partition: its ring's records and the ones it keeps.
                    records_in_memory: match o.compacted {
                        Some(c) => o.log_end - c.covered.clamp(o.log_start, o.log_end) + c.keys,
                        None => o.log_end - o.log_start,
                    },
                    overwritten_unread: o.overwritten_unread,
                    compacted: o.compacted.map(|c| CompactedInfo {
                        keys: c.keys,
                        tombstones: c.tombstones,
                        retained_below: c.covered,
                        dropped: c.dropped,
                        unkeyed: c.unkeyed,
                    }),
                    cleaner: self.data().and_then(|d| d.cleaner_progress(name, p)),
                    last_stable_offset: o.last_stable_offset,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let replicas = match &*self.inner.replication.lock() {
            Some(rt) if config.replication_factor > 1 => rt.describe_topic(name),
            _ => Vec::new(),
        };
        if let Some(d) = self.data() {
            // A replicated compacted partition: its leader's cleaner (each replica cleans its
            // own log).
            for r in &replicas {
                let leader = d
                    .replica_cleaner_progress(name, r.partition)
                    .into_iter()
                    .find(|(id, _)| Some(*id) == r.leader);
                if let (Some(info), Some((_, progress))) =
                    (partitions.get_mut(r.partition as usize), leader)
                {
                    info.cleaner = Some(progress);
                }
            }
        }
        Ok(TopicDescription {
            name: name.to_owned(),
            key_type: slot.key.1,
            value_type: slot.value.1,
            config,
            partitions,
            replicas,
        })
    }

    /// Changes when topics are created, deleted or grown.
    pub(crate) fn metadata_version(&self) -> u64 {
        // Acquire: pairs with the Release in `bump_metadata`, so the new topics are seen.
        self.inner.metadata_version.load(Ordering::Acquire)
    }

    pub(super) fn bump_metadata(&self) {
        // Release: pairs with the Acquire in `metadata_version`.
        self.inner.metadata_version.fetch_add(1, Ordering::Release);
    }

    /// Whether topic `name` exists with key type `K` and value type `V`.
    pub(crate) fn has_topic_of<K: 'static, V: 'static>(&self, name: &str) -> bool {
        self.slot(name)
            .is_ok_and(|s| s.key.0 == TypeId::of::<K>() && s.value.0 == TypeId::of::<V>())
    }

    /// The partition count of topic `name`, if it exists.
    pub(crate) fn partition_count(&self, name: &str) -> Option<u32> {
        self.slot(name).ok().map(|s| s.admin.partition_count())
    }

    pub(crate) fn offsets(&self, tp: &TopicPartition) -> Result<Offsets> {
        self.slot(&tp.topic)?
            .admin
            .offsets(tp.partition, self.now_ms())
    }

    pub(crate) fn offset_for_time(
        &self,
        tp: &TopicPartition,
        timestamp: i64,
    ) -> Result<Option<(u64, i64)>> {
        self.slot(&tp.topic)?
            .admin
            .offset_for_time(tp.partition, timestamp, self.now_ms())
    }

    /// Checks that `tp` names an existing partition.
    /// A topic's type-erased admin operations (transaction markers, offsets).
    pub(super) fn topic_admin(&self, name: &str) -> Result<Arc<dyn super::topic::TopicAdmin>> {
        Ok(self.slot(name)?.admin)
    }

    pub(crate) fn check_partition(&self, tp: &TopicPartition) -> Result<()> {
        let count = self.slot(&tp.topic)?.admin.partition_count();
        if tp.partition >= count {
            return Err(Error::PartitionOutOfRange {
                topic: tp.topic.clone(),
                partition: tp.partition,
                count,
            });
        }
        Ok(())
    }
}

/// What [`Broker::create_topic`] creates a topic from: a [`TopicConfig`] (an in-memory
/// topic; any `Clone` key and value types), a [`CompactedTopicConfig`] (an in-memory
/// compacted topic, from [`TopicConfig::compacted`]; key and value types with a [`Codec`]) or
/// a [`PersistedTopicConfig`] (a persisted topic, from [`TopicConfig::persist`]; key and
/// value types with a [`Codec`]). Sealed: these three are the only kinds.
pub trait NewTopic<K, V>: sealed::Sealed {
    /// Creates topic `name` on `broker` (what `create_topic` runs).
    #[doc(hidden)]
    fn create_in(self, broker: &Broker, name: &str) -> Result<Topic<K, V>>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::TopicConfig {}
    impl Sealed for super::PersistedTopicConfig {}
    impl Sealed for super::CompactedTopicConfig {}
}

/// A topic's configuration for an in-memory compacted topic: what [`TopicConfig::compacted`]
/// returns and [`Broker::create_topic`] takes. A type of its own because compaction compares
/// keys by their encoding, so its key and value types need a [`Codec`], which a plain
/// in-memory topic's do not: the compiler checks it where the types are known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactedTopicConfig {
    topic: TopicConfig,
}

impl CompactedTopicConfig {
    /// The topic's settings (partitions, ring size, cleanup policy, compaction bounds).
    pub const fn topic_config(&self) -> TopicConfig {
        self.topic
    }
}

/// The topic's settings, its compacting cleanup policy included: a Kafka cluster's topic is
/// made from them (`KafkaBroker::create_topic`, feature `kafka`).
impl From<CompactedTopicConfig> for TopicConfig {
    fn from(config: CompactedTopicConfig) -> Self {
        config.topic
    }
}

impl TopicConfig {
    /// An in-memory compacted topic, for [`Broker::create_topic`]: besides its ring, each
    /// partition keeps the latest record of every key the ring lets go (Kafka's log
    /// compaction, in memory), so that a replay from offset 0 reads at least the latest value
    /// of every key, however many records the history had. The cleanup policy becomes
    /// [`CleanupPolicy::Compact`](super::CleanupPolicy::Compact) unless it compacts already.
    /// What it keeps:
    ///
    /// - the ring's `records_in_memory` latest records, as any in-memory topic, dense;
    /// - below them, the latest record of each key (compared by its [`Codec`] encoding, as
    ///   the durable log cleaner compares them), in offset order, with gaps where records
    ///   were replaced: consumers move on to the next offset present;
    /// - a tombstone (a null value: `None` of a `Topic<K, Option<V>>`; an empty value is a
    ///   value) deletes its key: it stays for
    ///   [`TopicConfig::delete_retention`] on the broker's clock, counted from when the ring
    ///   let it go, so that a consumer behind sees the deletion;
    /// - memory is bounded by key count: at most [`TopicConfig::max_compacted_keys`] keys
    ///   per partition besides the ring; a record of a new key beyond them is not kept and
    ///   is counted in [`PartitionInfo::compacted`] (nothing is dropped silently);
    /// - with [`CleanupPolicy::CompactAndDelete`](super::CleanupPolicy::CompactAndDelete)
    ///   and a retention age, records older than it are deleted as well.
    ///
    /// Sends without a key are refused ([`Error::KeyRequired`]), and so are a transaction's
    /// records ([`Error::InvalidConfig`]: the section keeps a key's latest record whatever
    /// its transaction's outcome). A persisted topic is compacted on disk instead, its
    /// cleaner following the transaction rules: a compacting [`cleanup_policy`](Self::cleanup_policy) and
    /// [`persist`](Self::persist).
    ///
    /// `create_topic` refuses a replication factor above 1 ([`Error::InvalidConfig`]: a
    /// replicated topic compacts on disk, persist it), and what it refuses for any topic.
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::broker::{Broker, TopicConfig, TopicPartition};
    /// use logbus::consumer::{ConsumerConfig, OffsetReset};
    /// use logbus::producer::Record;
    /// use std::time::Duration;
    ///
    /// let broker = Broker::in_memory();
    /// let config = TopicConfig::new(1).records_in_memory(4).compacted();
    /// broker.create_topic::<String, u64>("prices", config)?;
    /// let producer = broker.producer::<String, u64>();
    /// for v in 0..100 {
    ///     let key = ["apple", "pear", "plum"][v as usize % 3];
    ///     producer.send(Record::new("prices", v).key(key.to_string()))?;
    /// }
    /// // The ring holds 4 records; the three keys' latest values are all still there.
    /// let mut consumer = broker.consumer::<String, u64>(
    ///     ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest),
    /// )?;
    /// consumer.assign(&[TopicPartition::new("prices", 0)])?;
    /// let mut latest = std::collections::HashMap::new();
    /// loop {
    ///     let records = consumer.poll(Duration::from_millis(10))?;
    ///     if records.is_empty() {
    ///         break;
    ///     }
    ///     for r in records.iter() {
    ///         latest.insert(r.key.clone().unwrap(), r.value);
    ///     }
    /// }
    /// assert_eq!((latest["apple"], latest["pear"], latest["plum"]), (99, 97, 98));
    /// # Ok::<(), logbus::Error>(())
    /// ```
    ///
    /// **Deleting a key**: make the value type an `Option` and send `None`, Kafka's null
    /// value (a tombstone). A durable topic writes it as length −1, as Kafka does, and its
    /// log cleaner drops it after `delete_retention`; a [`Table`](crate::consumer::Table)
    /// removes the key. An empty value (`Some("")`) is a value, not a deletion.
    ///
    /// ```
    /// use logbus::broker::{Broker, TopicConfig};
    /// use logbus::producer::Record;
    /// use std::time::Duration;
    ///
    /// let broker = Broker::in_memory();
    /// let config = TopicConfig::new(1).records_in_memory(2).compacted();
    /// broker.create_topic::<String, Option<String>>("carts", config)?;
    /// let producer = broker.producer::<String, Option<String>>();
    /// let key = |k: &str| k.to_string();
    /// producer.send(Record::new("carts", Some("tea".to_string())).key(key("ann")))?;
    /// producer.send(Record::new("carts", Some("jam".to_string())).key(key("bob")))?;
    /// producer.send(Record::new("carts", Some(String::new())).key(key("cy")))?;
    /// producer.send(Record::new("carts", None).key(key("ann")))?; // deletes "ann"
    /// for n in 0..10 {
    ///     producer.send(Record::new("carts", Some(format!("n{n}"))).key(key("filler")))?;
    /// }
    /// let mut table = broker.table::<String, Option<String>>("carts")?;
    /// table.catch_up(Duration::from_secs(5))?;
    /// assert!(table.get(&key("ann")).is_none());
    /// assert_eq!(table.get(&key("bob")), Some(&Some("jam".to_string())));
    /// assert_eq!(table.get(&key("cy")), Some(&Some(String::new())));
    /// # Ok::<(), logbus::Error>(())
    /// ```
    pub fn compacted(self) -> CompactedTopicConfig {
        let topic = if self.cleanup().compacts() {
            self
        } else {
            self.cleanup_policy(super::CleanupPolicy::Compact)
        };
        CompactedTopicConfig { topic }
    }
}

impl<K, V> NewTopic<K, V> for CompactedTopicConfig
where
    K: Codec + Clone + Send + Sync + 'static,
    V: Codec + Clone + Send + Sync + 'static,
{
    fn create_in(self, broker: &Broker, name: &str) -> Result<Topic<K, V>> {
        broker.create_compacted(name, self.topic)
    }
}

impl<K, V> NewTopic<K, V> for TopicConfig
where
    K: Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    fn create_in(self, broker: &Broker, name: &str) -> Result<Topic<K, V>> {
        broker.create_in_memory(name, self)
    }
}

impl<K, V> NewTopic<K, V> for PersistedTopicConfig
where
    K: Codec + Send + Sync + 'static,
    V: Codec + Send + Sync + 'static,
{
    fn create_in(self, broker: &Broker, name: &str) -> Result<Topic<K, V>> {
        broker.create_persisted(name, self.topic_config(), self.persist_config())
    }
}
