//! The broker (layer 7): an in-process registry of typed topics and consumer groups.
//!
//! A [`Broker`] is a cheap handle (`Clone`, `Send + Sync`); every clone sees the same topics.
//! Topics are typed: [`Broker::create_topic::<K, V>`](Broker::create_topic) fixes the key and
//! value types, and asking for the topic with other types is an [`Error::TypeMismatch`].
//! Producers and consumers come from the broker ([`Broker::producer`], [`Broker::consumer`]).
//!
//! # Examples
//!
//! ```
//! use logbus::broker::{Broker, TopicConfig};
//!
//! let broker = Broker::in_memory();
//! let topic = broker.create_topic::<String, u64>("orders", TopicConfig::new(3))?;
//! assert_eq!(topic.partition_count(), 3);
//! broker.add_partitions("orders", 6)?;
//! assert_eq!(broker.describe_topic("orders")?.partitions.len(), 6);
//! assert!(broker.topic::<String, String>("orders").is_err()); // other value type
//! # Ok::<(), logbus::Error>(())
//! ```

use std::any::{type_name, Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use crate::partition::{GateExpiry, Offsets, Partition};
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
// Std's Arc (also under loom): the broker shares unsized values (see `sync::StdArc`).
use crate::sync::StdArc as Arc;
use crate::sync::{Mutex, WaitSet};
pub use crate::topic_partition::TopicPartition;
use crate::{Error, Result};

mod config;
pub(crate) use config::{check_partition_count, validate_kafka_topic_name};
pub use config::{
    validate_topic_name, Overflow, TopicConfig, KAFKA_MAX_TOPIC_NAME_LEN, MAX_PARTITIONS,
    MAX_RECORDS_IN_MEMORY, MAX_REPLICATION_FACTOR, MAX_TOPIC_NAME_LEN,
};

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
    /// Records held in memory (`log_end - log_start`).
    pub records_in_memory: u64,
    /// Records an [`Overflow::Block`] topic overwrote while no consumer group held them
    /// (none registered on the partition, or the last one deleted or expired): no group
    /// had read them (consumers without a group id hold nothing back, so one may have).
    /// Records a group committed are not counted when they are overwritten later. Always
    /// 0 for other topics: `DropOldest` drops by design, persisted and replicated topics
    /// keep records on disk.
    pub overwritten_unread: u64,
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

/// A topic's partitions at one moment (replaced whole when partitions are added).
pub(crate) type PartitionList<K, V> = Arc<[Arc<Partition<K, V>>]>;

/// Builds partition `n` of a replicated topic (captures the types' `Clone`).
type PartitionFactory<K, V> = Arc<dyn Fn(u32) -> Result<Arc<Partition<K, V>>> + Send + Sync>;

/// The state of one topic shared by every handle, producer and consumer.
pub(crate) struct TopicInner<K, V> {
    pub(crate) name: Arc<str>,
    config: TopicConfig,
    partitions: Mutex<PartitionList<K, V>>,
    /// Bumped when partitions are added; producers re-read the list when it moved.
    generation: AtomicU64,
    deleted: AtomicBool,
    /// Producers notify it after each append; consumers wait on it.
    pub(crate) arrivals: Arc<WaitSet>,
    /// A persisted topic's disk side (`None` in memory).
    store: Option<Arc<dyn TopicStore<K, V>>>,
    /// Replicated topics: how added partitions are built.
    factory: Option<PartitionFactory<K, V>>,
    /// `Block` topics in memory: the broker's group expiry, for added partitions.
    gate_expiry: Option<GateExpiry>,
}

/// A persisted topic's files, as the admin operations reach them (`crate::persist`).
pub(crate) trait TopicStore<K, V>: Send + Sync {
    /// Persisted partitions `from..to`: directories, then metadata (atomically).
    fn add_partitions(
        &self,
        from: u32,
        to: u32,
        arrivals: &Arc<WaitSet>,
    ) -> Result<Vec<Arc<Partition<K, V>>>>;
    /// Removes the topic's files (its partitions are closed).
    fn delete(&self) -> Result<()>;
}

impl<K, V> TopicInner<K, V> {
    /// A topic of the given partitions (all notifying `arrivals`).
    pub(crate) fn new(
        name: &str,
        config: TopicConfig,
        partitions: Vec<Arc<Partition<K, V>>>,
        arrivals: Arc<WaitSet>,
    ) -> Self {
        Self {
            name: Arc::from(name),
            config,
            partitions: Mutex::new(partitions.into()),
            generation: AtomicU64::new(0),
            deleted: AtomicBool::new(false),
            arrivals,
            store: None,
            factory: None,
            gate_expiry: None,
        }
    }

    /// The topic, persisted through `store`.
    pub(crate) fn with_store(mut self, store: Arc<dyn TopicStore<K, V>>) -> Self {
        self.store = Some(store);
        self
    }

    /// The current partitions.
    pub(crate) fn partitions(&self) -> PartitionList<K, V> {
        Arc::clone(&self.partitions.lock())
    }

    /// The partition list's generation (changes when partitions are added).
    pub(crate) fn generation(&self) -> u64 {
        // Acquire: pairs with the Release bump in `add_partitions`, so a new generation
        // comes with the new list (also published under the mutex).
        self.generation.load(Ordering::Acquire)
    }

    /// Whether the topic was deleted.
    pub(crate) fn is_deleted(&self) -> bool {
        // Acquire: pairs with the Release store in `delete`.
        self.deleted.load(Ordering::Acquire)
    }

    pub(crate) fn partition(&self, partition: u32) -> Result<Arc<Partition<K, V>>> {
        let parts = self.partitions();
        parts
            .get(partition as usize)
            .cloned()
            .ok_or_else(|| Error::PartitionOutOfRange {
                topic: self.name.to_string(),
                partition,
                count: parts.len() as u32,
            })
    }
}

/// The operations on a topic that need no knowledge of its types.
trait TopicAdmin: Send + Sync {
    fn config(&self) -> TopicConfig;
    fn partition_count(&self) -> u32;
    fn add_partitions(&self, total: u32) -> Result<()>;
    fn delete(&self) -> Result<()>;
    /// Closes every partition because the broker is closing (`Broker::close`).
    fn close_for_broker(&self);
    fn offsets(&self, partition: u32, now_ms: i64) -> Result<Offsets>;
    fn offset_for_time(
        &self,
        partition: u32,
        timestamp: i64,
        now_ms: i64,
    ) -> Result<Option<(u64, i64)>>;
    fn commit(&self, group: &Arc<str>, partition: u32, offset: u64, now_ms: i64) -> Result<()>;
    fn committed(&self, group: &str, partition: u32) -> Result<Option<u64>>;
    fn remove_group(&self, group: &str);
    /// Lets go of `group`'s gates (its committed offsets stay).
    fn release_group(&self, group: &str);
}

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> TopicAdmin for TopicInner<K, V> {
    fn config(&self) -> TopicConfig {
        TopicConfig {
            partitions: self.partition_count(),
            ..self.config
        }
    }

    fn partition_count(&self) -> u32 {
        self.partitions.lock().len() as u32
    }

    fn add_partitions(&self, total: u32) -> Result<()> {
        let mut parts = self.partitions.lock();
        let current = parts.len() as u32;
        if total <= current {
            return Err(Error::PartitionsCannotShrink {
                topic: self.name.to_string(),
                current,
                requested: total,
            });
        }
        check_partition_count(total)?;
        let mut grown: Vec<_> = parts.iter().cloned().collect();
        match (&self.store, &self.factory) {
            (Some(store), _) => {
                grown.extend(store.add_partitions(current, total, &self.arrivals)?)
            }
            (None, Some(make)) => {
                for n in current..total {
                    grown.push(make(n)?);
                }
            }
            (None, None) => {
                for _ in current..total {
                    grown.push(Arc::new(
                        Partition::new(self.config.partition_config(), Arc::clone(&self.arrivals))?
                            .with_gate_expiry(self.gate_expiry.clone()),
                    ));
                }
            }
        }
        *parts = grown.into();
        // Release: pairs with the Acquire in `generation`.
        self.generation.fetch_add(1, Ordering::Release);
        Ok(())
    }

    fn delete(&self) -> Result<()> {
        // Release: pairs with the Acquire in `is_deleted`.
        self.deleted.store(true, Ordering::Release);
        for p in self.partitions().iter() {
            p.close();
        }
        self.arrivals.notify_all();
        match &self.store {
            Some(store) => store.delete(),
            None => Ok(()),
        }
    }

    fn close_for_broker(&self) {
        for p in self.partitions().iter() {
            p.close_for_broker();
        }
        self.arrivals.notify_all();
    }

    fn offsets(&self, partition: u32, now_ms: i64) -> Result<Offsets> {
        Ok(self.partition(partition)?.offsets(now_ms))
    }

    fn offset_for_time(
        &self,
        partition: u32,
        timestamp: i64,
        now_ms: i64,
    ) -> Result<Option<(u64, i64)>> {
        Ok(self
            .partition(partition)?
            .offset_for_time(timestamp, now_ms))
    }

    fn commit(&self, group: &Arc<str>, partition: u32, offset: u64, now_ms: i64) -> Result<()> {
        self.partition(partition)?
            .commit(group, offset, now_ms)
            .map_err(|(start, end)| Error::OffsetOutOfRange {
                topic: Some(self.name.to_string()),
                partition: Some(partition),
                requested: offset,
                start,
                end,
            })
    }

    fn committed(&self, group: &str, partition: u32) -> Result<Option<u64>> {
        Ok(self.partition(partition)?.committed(group))
    }

    fn remove_group(&self, group: &str) {
        for p in self.partitions().iter() {
            p.remove_group(group);
        }
    }

    fn release_group(&self, group: &str) {
        for p in self.partitions().iter() {
            p.release_group(group);
        }
    }
}

/// A registered topic, typed or not.
#[derive(Clone)]
struct TopicSlot {
    key: (TypeId, &'static str),
    value: (TypeId, &'static str),
    typed: Arc<dyn Any + Send + Sync>,
    admin: Arc<dyn TopicAdmin>,
}

#[derive(Debug, Default)]
struct GroupState {
    /// Open consumers with this group id.
    open: usize,
    /// Broker clock time at which the last open consumer closed (`None` while one is open).
    empty_since_ms: Option<i64>,
    /// Empty for longer than the broker's `empty_group_timeout`: its gates were let go.
    expired: bool,
    /// Membership and rebalancing, once a consumer of the group subscribed.
    coordinator: Option<Arc<crate::group::coordinator::Coordinator>>,
}

struct BrokerInner {
    clock: Arc<dyn Clock>,
    /// The data directory of a broker opened on one (`crate::persist`).
    data: Option<Arc<crate::persist::DataDir>>,
    topics: Mutex<HashMap<String, TopicSlot>>,
    groups: Mutex<HashMap<String, GroupState>>,
    /// How long a group without an open consumer keeps holding producers back, in
    /// milliseconds of the broker's clock (`BrokerBuilder::empty_group_timeout`).
    empty_group_timeout_ms: AtomicU64,
    /// Bumped when a topic is created, deleted or grown (subscriptions look again).
    metadata_version: AtomicU64,
    /// Replication threads and fault injection, started with the first replicated topic.
    replication: Mutex<Option<Arc<crate::replica::Runtime>>>,
}

impl Drop for BrokerInner {
    /// The last handle of a broker on a data directory dropped without
    /// [`close`](Broker::close): closed as `close` would (errors ignored), so that its
    /// threads stop and its directory is released rather than held locked until the process
    /// exits.
    fn drop(&mut self) {
        if let Some(d) = &self.data {
            let runtime = self.replication.lock().clone();
            if let Some(replicas) = runtime.and_then(|r| r.disk()) {
                let _ = replicas.close();
            }
            let _ = d.close_dropped();
        }
    }
}

/// An in-process broker: typed topics of partitioned logs, and the consumer groups' offsets.
///
/// Cheap to clone (an `Arc`); `Send + Sync`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use logbus::broker::{Broker, TopicConfig, TopicPartition};
/// use logbus::consumer::{ConsumerConfig, OffsetReset};
/// use logbus::producer::Record;
///
/// let broker = Broker::in_memory();
/// broker.create_topic::<(), String>("greetings", TopicConfig::new(1))?;
/// let producer = broker.producer::<(), String>();
/// let meta = producer.send(Record::new("greetings", "hello".to_string()))?;
/// assert_eq!((meta.partition, meta.offset), (0, 0));
///
/// let config = ConsumerConfig::new().group_id("readers").auto_offset_reset(OffsetReset::Earliest);
/// let mut consumer = broker.consumer::<(), String>(config)?;
/// consumer.assign(&[TopicPartition::new("greetings", 0)])?;
/// let records = consumer.poll(Duration::from_secs(1))?;
/// assert_eq!(records.iter().next().unwrap().value, "hello");
/// consumer.commit_sync()?;
/// # Ok::<(), logbus::Error>(())
/// ```
#[derive(Clone)]
pub struct Broker {
    inner: Arc<BrokerInner>,
}

impl fmt::Debug for Broker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Broker")
            .field("topics", &self.topics())
            .finish_non_exhaustive()
    }
}

/// Builds a [`Broker`] (today: which clock it reads).
#[derive(Debug)]
pub struct BrokerBuilder {
    pub(crate) clock: Arc<dyn Clock>,
    /// See [`BrokerBuilder::empty_group_timeout`].
    pub(crate) empty_group_timeout: Duration,
    /// Where and how a data directory is opened ([`BrokerBuilder::open`]).
    pub(crate) persist: crate::persist::DataDirConfig,
}

impl BrokerBuilder {
    /// The clock for record timestamps and retention ([`SystemClock`] by default;
    /// [`ManualClock`](crate::ManualClock) in tests).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// How long a consumer group with no open consumer keeps holding the producers of
    /// [`Overflow::Block`] topics back: 45 seconds by default (Kafka's default session
    /// timeout; Kafka never blocks a producer on a consumer, and expires an empty group's
    /// offsets after `offsets.retention.minutes`). Measured on the broker's
    /// [clock](Self::clock). Once a group has been empty that long, its gates are let go:
    /// producers overwrite what it had not committed, counted in
    /// [`PartitionInfo::overwritten_unread`] once no group holds those records. Its
    /// committed offsets stay; a consumer of the group assigned a partition again holds
    /// producers back from there, and counts what was overwritten meanwhile as skipped
    /// ([`ConsumerMetrics::skipped`](crate::consumer::ConsumerMetrics::skipped)) when its
    /// position resets. A member leaving and another joining within the timeout (an
    /// ordinary rebalance) keeps every record the group had not committed.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync;
    /// use std::time::Duration;
    /// use logbus::broker::{Broker, TopicConfig, TopicPartition};
    /// use logbus::consumer::ConsumerConfig;
    /// use logbus::producer::Record;
    /// use logbus::ManualClock;
    ///
    /// let clock = sync::Arc::new(ManualClock::new(0));
    /// let broker = Broker::builder()
    ///     .clock(clock.clone())
    ///     .empty_group_timeout(Duration::from_secs(60))
    ///     .build()?;
    /// broker.create_topic::<(), u64>("t", TopicConfig::new(1).records_in_memory(4))?;
    /// let mut consumer = broker.consumer::<(), u64>(ConsumerConfig::new().group_id("g"))?;
    /// consumer.assign(&[TopicPartition::new("t", 0)])?; // "g" holds producers at 0
    /// drop(consumer);
    /// let producer = broker.producer::<(), u64>();
    /// for i in 0..4 {
    ///     producer.send(Record::new("t", i))?;
    /// }
    /// assert!(producer.try_send(Record::new("t", 4)).is_err()); // full: "g" holds it
    /// clock.advance(Duration::from_secs(60));
    /// producer.send(Record::new("t", 4))?; // "g" was let go
    /// assert!(broker.describe_group("g")?.expired);
    /// # Ok::<(), logbus::Error>(())
    /// ```
    pub fn empty_group_timeout(mut self, timeout: Duration) -> Self {
        self.empty_group_timeout = timeout;
        self
    }

    /// The broker: in memory, or, when a data directory was given
    /// ([`data_dir`](Self::data_dir), [`data_dirs`](Self::data_dirs)), opened on it exactly as
    /// [`open`](Self::open) opens it — a builder given a directory never quietly builds an
    /// in-memory broker.
    ///
    /// # Errors
    ///
    /// Only with a data directory: as [`open`](Self::open) (a missing or unformatted
    /// directory without [`create`](Self::create), a locked one, ...).
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::broker::{Broker, TopicConfig};
    /// use logbus::persist::PersistConfig;
    /// use logbus::Error;
    ///
    /// let in_memory = Broker::builder().build()?;
    /// # drop(in_memory);
    /// let tmp = tempfile::tempdir()?;
    /// let missing = tmp.path().join("data");
    /// assert!(matches!(
    ///     Broker::builder().data_dir(&missing).build(),
    ///     Err(Error::DataDirUnformatted { missing: true, .. })
    /// ));
    /// let persisted = Broker::builder().data_dir(&missing).create(true).build()?;
    /// persisted.create_persisted_topic::<(), String>("t", TopicConfig::new(1), PersistConfig::new())?;
    /// persisted.close()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn build(self) -> Result<Broker> {
        if self.persist.dir.is_some() || self.persist.no_dirs {
            return self.open();
        }
        let broker = Broker::from_parts(self.clock, None);
        broker.set_empty_group_timeout(self.empty_group_timeout);
        Ok(broker)
    }
}

/// [`BrokerBuilder::empty_group_timeout`]'s default.
const DEFAULT_EMPTY_GROUP_TIMEOUT: Duration = Duration::from_secs(45);

/// `d` in whole milliseconds (saturating).
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Broker {
    /// A broker reading `clock`, persisting to `data` if given.
    pub(crate) fn from_parts(
        clock: Arc<dyn Clock>,
        data: Option<Arc<crate::persist::DataDir>>,
    ) -> Broker {
        Broker {
            inner: Arc::new(BrokerInner {
                clock,
                data,
                topics: Mutex::new(HashMap::new()),
                groups: Mutex::new(HashMap::new()),
                empty_group_timeout_ms: AtomicU64::new(millis(DEFAULT_EMPTY_GROUP_TIMEOUT)),
                metadata_version: AtomicU64::new(0),
                replication: Mutex::new(None),
            }),
        }
    }
}

impl Broker {
    /// A broker keeping everything in memory, reading the system clock.
    pub fn in_memory() -> Self {
        Broker::from_parts(Arc::new(SystemClock), None)
    }

    /// A builder, to choose the clock.
    pub fn builder() -> BrokerBuilder {
        BrokerBuilder {
            clock: Arc::new(SystemClock),
            empty_group_timeout: DEFAULT_EMPTY_GROUP_TIMEOUT,
            persist: crate::persist::DataDirConfig::default(),
        }
    }

    /// The broker's clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    pub(crate) fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    /// The replication runtime (created on first use).
    pub(crate) fn replication(&self) -> Arc<crate::replica::Runtime> {
        let mut r = self.inner.replication.lock();
        Arc::clone(r.get_or_insert_with(|| {
            Arc::new(crate::replica::Runtime::new(Arc::clone(&self.inner.clock)))
        }))
    }

    /// Creates a topic with key type `K` and value type `V`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTopicName`], [`Error::InvalidConfig`] (partition count, memory,
    /// retention), [`Error::TopicExists`].
    pub fn create_topic<K, V>(&self, name: &str, config: TopicConfig) -> Result<Topic<K, V>>
    where
        K: Clone + Send + Sync + 'static,
        V: Clone + Send + Sync + 'static,
    {
        validate_topic_name(name)?;
        config.validate()?;
        // Before the topics' lock: persisted topics take their lock, then this one.
        let on_disk = self.stored_types(name).is_some();
        let mut topics = self.inner.topics.lock();
        if topics.contains_key(name) || on_disk {
            return Err(Error::TopicExists {
                topic: name.to_owned(),
            });
        }
        let arrivals = Arc::new(WaitSet::new());
        let factory: Option<PartitionFactory<K, V>> = (config.replication_factor > 1).then(|| {
            let (runtime, name, arrivals) =
                (self.replication(), Arc::from(name), Arc::clone(&arrivals));
            Arc::new(move |n| {
                crate::replica::build_partition(&runtime, &name, n, &config, &arrivals)
            }) as PartitionFactory<K, V>
        });
        let partitions = (0..config.partitions)
            .map(|n| match &factory {
                Some(make) => make(n),
                None => Partition::new(config.partition_config(), Arc::clone(&arrivals))
                    .map(|p| Arc::new(p.with_gate_expiry(Some(self.gate_expiry())))),
            })
            .collect::<Result<Vec<_>>>()?;
        let inner = Arc::new(TopicInner {
            factory,
            gate_expiry: Some(self.gate_expiry()),
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
        Ok(Topic { inner })
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

    /// The data directory, for a broker opened on one.
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

    pub(crate) fn data(&self) -> Option<&Arc<crate::persist::DataDir>> {
        self.inner.data.as_ref()
    }

    /// The data directories of replicated persisted topics (a broker opened on disk).
    fn replicated_dirs(&self) -> Option<Arc<crate::replica::persisted::DiskDirs>> {
        self.data()?;
        self.inner.replication.lock().as_ref()?.disk()
    }

    /// The codec type ids of a persisted topic on disk (open or not).
    fn stored_types(&self, name: &str) -> Option<(String, String)> {
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

    /// The topic `name`, which must have key type `K` and value type `V`.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`], or [`Error::TypeMismatch`] naming both types.
    pub fn topic<K, V>(&self, name: &str) -> Result<Topic<K, V>>
    where
        K: Send + Sync + 'static,
        V: Send + Sync + 'static,
    {
        self.topic_inner(name).map(|inner| Topic { inner })
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

    fn slot(&self, name: &str) -> Result<TopicSlot> {
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
    /// the current count; [`Error::InvalidConfig`] above [`MAX_PARTITIONS`].
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
        let slot = self.inner.topics.lock().remove(name);
        let Some(slot) = slot else {
            // A persisted topic not opened: only its files.
            if let Some(r) = self
                .replicated_dirs()
                .filter(|r| r.meta_types(name).is_some())
            {
                return crate::replica::persisted::delete_files(&r, name);
            }
            return match self.data() {
                Some(d) if d.meta_types(name).is_some() => d.delete_topic(name),
                _ => Err(Error::UnknownTopic {
                    topic: name.to_owned(),
                }),
            };
        };
        let removed = slot.admin.delete();
        self.bump_metadata();
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
        let partitions = (0..config.partitions)
            .map(|p| {
                slot.admin.offsets(p, now).map(|o| PartitionInfo {
                    partition: p,
                    log_start: o.log_start,
                    high_watermark: o.high_watermark,
                    log_end: o.log_end,
                    records_in_memory: o.log_end - o.log_start,
                    overwritten_unread: o.overwritten_unread,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let replicas = match &*self.inner.replication.lock() {
            Some(rt) if config.replication_factor > 1 => rt.describe_topic(name),
            _ => Vec::new(),
        };
        Ok(TopicDescription {
            name: name.to_owned(),
            key_type: slot.key.1,
            value_type: slot.value.1,
            config,
            partitions,
            replicas,
        })
    }

    /// The consumer groups known (every group a consumer was created with, until
    /// [`delete_group`](Self::delete_group)), sorted.
    pub fn groups(&self) -> Vec<String> {
        let mut names: Vec<_> = self.inner.groups.lock().keys().cloned().collect();
        names.sort();
        names
    }

    /// Deletes consumer group `name`: its committed offsets go, and it stops holding the
    /// producers of `Block` topics back.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownGroup`]; [`Error::GroupNotEmpty`] while a consumer of the group is
    /// open.
    pub fn delete_group(&self, name: &str) -> Result<()> {
        {
            let mut groups = self.inner.groups.lock();
            match groups.get(name) {
                None => {
                    return Err(Error::UnknownGroup {
                        group: name.to_owned(),
                    })
                }
                Some(g) if g.open > 0 => {
                    return Err(Error::GroupNotEmpty {
                        group: name.to_owned(),
                        members: g.open,
                    })
                }
                Some(_) => {
                    if let Some(c) = groups.remove(name).and_then(|g| g.coordinator) {
                        c.kill();
                    }
                }
            }
        }
        let admins: Vec<_> = self
            .inner
            .topics
            .lock()
            .values()
            .map(|s| Arc::clone(&s.admin))
            .collect();
        for admin in admins {
            admin.remove_group(name);
        }
        Ok(())
    }

    /// A consumer opened with `group`.
    pub(crate) fn join_group(&self, group: &str) {
        let mut groups = self.inner.groups.lock();
        let g = groups.entry(group.to_owned()).or_default();
        g.open += 1;
        g.empty_since_ms = None;
        // Its gates come back as its consumers are assigned partitions.
        g.expired = false;
    }

    /// Sets [`BrokerBuilder::empty_group_timeout`].
    pub(crate) fn set_empty_group_timeout(&self, timeout: Duration) {
        // Relaxed: a setting read on its own; nothing else is published with it.
        self.inner
            .empty_group_timeout_ms
            .store(millis(timeout), Ordering::Relaxed);
    }

    /// Lets go of the gates of every group that has had no open consumer for the broker's
    /// `empty_group_timeout` (its committed offsets stay). Called by producers waiting for
    /// room on a gated partition, and by the describe calls. The groups' lock is held
    /// while the gates go, so a consumer of the group opening meanwhile finds them gone
    /// and registers again.
    pub(crate) fn expire_empty_groups(&self) {
        // Relaxed: see `set_empty_group_timeout`.
        let timeout = self.inner.empty_group_timeout_ms.load(Ordering::Relaxed);
        let timeout = i64::try_from(timeout).unwrap_or(i64::MAX);
        let mut groups = self.inner.groups.lock();
        let mut now = None;
        let mut expired = Vec::new();
        for (name, g) in groups.iter_mut() {
            if g.open > 0 || g.expired {
                continue;
            }
            let now = *now.get_or_insert_with(|| self.now_ms());
            let since = *g.empty_since_ms.get_or_insert(now);
            if now.saturating_sub(since) >= timeout {
                g.expired = true;
                expired.push(name.clone());
            }
        }
        if expired.is_empty() {
            return;
        }
        let admins: Vec<_> = self
            .inner
            .topics
            .lock()
            .values()
            .map(|t| Arc::clone(&t.admin))
            .collect();
        for name in &expired {
            for admin in &admins {
                admin.release_group(name);
            }
        }
        drop(groups);
    }

    /// Whether `group` was let go for having been empty too long (see
    /// [`expire_empty_groups`](Self::expire_empty_groups)).
    pub(crate) fn group_expired(&self, group: &str) -> bool {
        self.inner
            .groups
            .lock()
            .get(group)
            .is_some_and(|g| g.expired)
    }

    /// The hook gated partitions call while a producer waits for room.
    fn gate_expiry(&self) -> GateExpiry {
        let broker = Arc::downgrade(&self.inner);
        Arc::new(move || {
            if let Some(inner) = broker.upgrade() {
                Broker { inner }.expire_empty_groups();
            }
        })
    }

    /// The coordinator of `group` (created on first use).
    pub(crate) fn coordinator(&self, group: &str) -> Arc<crate::group::coordinator::Coordinator> {
        let mut groups = self.inner.groups.lock();
        let g = groups.entry(group.to_owned()).or_default();
        Arc::clone(
            g.coordinator.get_or_insert_with(|| {
                Arc::new(crate::group::coordinator::Coordinator::new(group))
            }),
        )
    }

    /// The coordinator of `group`, if the group exists and has one; `Err` if unknown.
    pub(crate) fn group_coordinator(
        &self,
        group: &str,
    ) -> Result<Option<Arc<crate::group::coordinator::Coordinator>>> {
        match self.inner.groups.lock().get(group) {
            None => Err(Error::UnknownGroup {
                group: group.to_owned(),
            }),
            Some(g) => Ok(g.coordinator.clone()),
        }
    }

    /// Changes when topics are created, deleted or grown.
    pub(crate) fn metadata_version(&self) -> u64 {
        // Acquire: pairs with the Release in `bump_metadata`, so the new topics are seen.
        self.inner.metadata_version.load(Ordering::Acquire)
    }

    fn bump_metadata(&self) {
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

    /// A consumer of `group` closed.
    pub(crate) fn leave_group(&self, group: &str) {
        let mut groups = self.inner.groups.lock();
        if let Some(g) = groups.get_mut(group) {
            g.open = g.open.saturating_sub(1);
            if g.open == 0 {
                g.empty_since_ms = Some(self.now_ms());
            }
        }
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

    pub(crate) fn commit(&self, group: &Arc<str>, tp: &TopicPartition, offset: u64) -> Result<()> {
        self.slot(&tp.topic)?
            .admin
            .commit(group, tp.partition, offset, self.now_ms())
    }

    pub(crate) fn committed(&self, group: &str, tp: &TopicPartition) -> Result<Option<u64>> {
        self.slot(&tp.topic)?.admin.committed(group, tp.partition)
    }

    /// Checks that `tp` names an existing partition.
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

/// A handle to a typed topic. Cheap to clone.
pub struct Topic<K, V> {
    inner: Arc<TopicInner<K, V>>,
}

impl<K, V> Clone for Topic<K, V> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K, V> fmt::Debug for Topic<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Topic")
            .field("name", &self.inner.name)
            .finish_non_exhaustive()
    }
}

impl<K, V> Topic<K, V> {
    pub(crate) fn from_inner(inner: Arc<TopicInner<K, V>>) -> Self {
        Self { inner }
    }

    pub(crate) fn inner(&self) -> &Arc<TopicInner<K, V>> {
        &self.inner
    }

    /// The topic's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The current partition count.
    pub fn partition_count(&self) -> u32 {
        self.inner.partitions().len() as u32
    }

    /// Whether the topic was deleted (this handle then refers to nothing).
    pub fn is_deleted(&self) -> bool {
        self.inner.is_deleted()
    }
}

impl crate::group::coordinator::Metadata for Broker {
    fn partition_count(&self, topic: &str) -> Option<u32> {
        Broker::partition_count(self, topic)
    }
}
