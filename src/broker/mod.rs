//! The broker (layer 7): an in-process registry of typed topics and consumer groups.
//!
//! A [`Broker`] is a cheap handle (`Clone`, `Send + Sync`); every clone sees the same topics.
//! Topics are typed: [`Broker::create_topic::<K, V>`](Broker::create_topic) fixes the key and
//! value types, and asking for the topic with other types is an [`Error::TypeMismatch`](crate::Error::TypeMismatch).
//! Producers and consumers come from the broker ([`Broker::producer`], [`Broker::consumer`]).
//!
//! One file per concern: `topic.rs` (the [`Topic`] handle and a topic's shared state),
//! `topics.rs` (topic admin: create, look up, grow, delete, describe), `groups/` (group
//! admin, offsets, describe and list; the group coordinator and the assignors it runs),
//! `builder.rs` ([`BrokerBuilder`]), `persisted.rs` (a broker on data directories: opening
//! it, the persisted halves of `create_topic` and `topic`, fsync, close), `faults.rs`
//! ([`Broker::faults`] and the replication runtime it drives); [`TopicConfig`] and the name
//! and size limits live in the partition layer; this file holds the broker's shared state
//! and its constructors.
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

use std::collections::HashMap;
use std::fmt;

use crate::clock::{Clock, SystemClock};
use crate::sync::atomic::AtomicU64;
use crate::sync::Mutex;
// Std's Arc (also under loom): the broker shares unsized values (see `sync::StdArc`).
use crate::sync::StdArc as Arc;
pub use crate::topic_partition::TopicPartition;

mod builder;
mod faults;
pub(crate) mod groups;
mod persisted;
pub(crate) mod producer_ids;
mod topic;
mod topics;
mod txn;
pub(crate) use txn::TxnIds;
pub use txn::{TransactionDescription, TxnState};

use crate::partition::topic_config as config;
pub use builder::BrokerBuilder;
use builder::{millis, DEFAULT_EMPTY_GROUP_TIMEOUT};
pub(crate) use config::{check_partition_count, validate_kafka_topic_name};
pub use config::{
    validate_topic_name, CleanupPolicy, Overflow, TopicConfig, DEFAULT_DELETE_RETENTION,
    DEFAULT_MAX_COMPACTED_KEYS, DEFAULT_MIN_CLEANABLE_DIRTY_RATIO, KAFKA_MAX_TOPIC_NAME_LEN,
    MAX_COMPACTED_KEYS, MAX_PARTITIONS, MAX_RECORDS_IN_MEMORY, MAX_REPLICATION_FACTOR,
    MAX_TOPIC_NAME_LEN,
};
pub use topic::Topic;
use topic::TopicSlot;
pub(crate) use topic::{TopicInner, TopicStore};
pub use topics::{CompactedInfo, CompactedTopicConfig, NewTopic, PartitionInfo, TopicDescription};

struct BrokerInner {
    clock: Arc<dyn Clock>,
    /// The data directory of a broker opened on one (`crate::persist`).
    data: Option<Arc<crate::persist::DataDir>>,
    /// Looked up by name on every transaction (its partitions, its markers).
    topics: Mutex<foldhash::HashMap<String, TopicSlot>>,
    groups: Mutex<HashMap<String, groups::GroupEntry>>,
    /// How long a group without an open consumer keeps holding producers back, in
    /// milliseconds of the broker's clock (`BrokerBuilder::empty_group_timeout`).
    empty_group_timeout_ms: AtomicU64,
    /// Bumped when a topic is created, deleted or grown (subscriptions look again).
    metadata_version: AtomicU64,
    /// Replication threads and fault injection, started with the first replicated topic.
    replication: Mutex<Option<Arc<crate::replica::Runtime>>>,
    /// The transaction coordinator (`txn`).
    txn: txn::TxnCoordinator,
    /// Producer ids and epochs (`producer_ids`).
    producer_ids: producer_ids::ProducerIds,
}

impl Drop for BrokerInner {
    /// The last handle of a broker on a data directory dropped without
    /// [`close`](Broker::close): closed as `close` would (errors ignored), so that its
    /// threads stop and its directory is released rather than held locked until the process
    /// exits.
    fn drop(&mut self) {
        self.txn.stop_timeouts();
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
    /// Shared by the handles users hold (`None` in the broker's own threads' handles):
    /// dropped before `inner`, so that the last user handle stops and joins those
    /// threads first and its own `inner` is the broker's last (its drop closes it here,
    /// not later on one of those threads).
    // Read by no one: held for its drop.
    #[allow(dead_code)]
    handles: Option<Arc<UserHandles>>,
    inner: Arc<BrokerInner>,
}

/// See [`Broker`]'s `handles`.
struct UserHandles {
    inner: crate::sync::StdWeak<BrokerInner>,
}

impl Drop for UserHandles {
    fn drop(&mut self) {
        // The dropping handle still holds `inner`: the upgrade succeeds.
        if let Some(inner) = self.inner.upgrade() {
            inner.txn.stop_timeouts();
        }
    }
}

impl fmt::Debug for Broker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Broker")
            .field("topics", &self.topics())
            .finish_non_exhaustive()
    }
}

impl Broker {
    /// A broker reading `clock`, persisting to `data` if given.
    pub(crate) fn from_parts(
        clock: Arc<dyn Clock>,
        data: Option<Arc<crate::persist::DataDir>>,
        txn: txn::TxnCoordinator,
    ) -> Broker {
        let inner = Arc::new(BrokerInner {
            producer_ids: producer_ids::ProducerIds::starting(data.is_some()),
            clock,
            data,
            topics: Mutex::new(foldhash::HashMap::default()),
            groups: Mutex::new(HashMap::new()),
            empty_group_timeout_ms: AtomicU64::new(millis(DEFAULT_EMPTY_GROUP_TIMEOUT)),
            metadata_version: AtomicU64::new(0),
            replication: Mutex::new(None),
            txn,
        });
        Broker {
            handles: Some(Arc::new(UserHandles {
                inner: Arc::downgrade(&inner),
            })),
            inner,
        }
    }

    /// A handle for the broker's own threads: it does not count as a user's (see
    /// `handles`).
    fn internal(inner: Arc<BrokerInner>) -> Broker {
        Broker {
            handles: None,
            inner,
        }
    }
}

impl Broker {
    /// A broker keeping everything in memory, reading the system clock.
    pub fn in_memory() -> Self {
        Broker::from_parts(
            Arc::new(SystemClock),
            None,
            txn::TxnCoordinator::in_memory(),
        )
    }

    /// The broker's clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    pub(crate) fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    /// The data directory, for a broker opened on one.
    pub(crate) fn data(&self) -> Option<&Arc<crate::persist::DataDir>> {
        self.inner.data.as_ref()
    }
}
