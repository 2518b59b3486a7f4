//! A topic's state shared by every handle, producer and consumer, the operations on it
//! that need no knowledge of its types, and the public [`Topic`] handle.

use std::any::{Any, TypeId};
use std::fmt;

use super::{check_partition_count, TopicConfig};
use crate::partition::{GateExpiry, Offsets, Partition, ProducerExpiry};
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
// Std's Arc (also under loom): the broker shares unsized values (see `sync::StdArc`).
use crate::sync::StdArc as Arc;
use crate::sync::{Mutex, WaitSet};
use crate::{Error, Result};

/// A topic's partitions at one moment (replaced whole when partitions are added).
pub(crate) type PartitionList<K, V> = Arc<[Arc<Partition<K, V>>]>;

/// Builds partition `n` of a replicated topic (captures the types' `Clone`).
pub(super) type PartitionFactory<K, V> =
    Arc<dyn Fn(u32) -> Result<Arc<Partition<K, V>>> + Send + Sync>;

/// The state of one topic shared by every handle, producer and consumer.
pub(crate) struct TopicInner<K, V> {
    pub(crate) name: Arc<str>,
    pub(super) config: TopicConfig,
    pub(super) partitions: Mutex<PartitionList<K, V>>,
    /// Bumped when partitions are added; producers re-read the list when it moved.
    pub(super) generation: AtomicU64,
    pub(super) deleted: AtomicBool,
    /// Producers notify it after each append; consumers wait on it.
    pub(crate) arrivals: Arc<WaitSet>,
    /// A persisted topic's disk side (`None` in memory).
    pub(super) store: Option<Arc<dyn TopicStore<K, V>>>,
    /// Replicated topics: how added partitions are built.
    pub(super) factory: Option<PartitionFactory<K, V>>,
    /// `Block` topics in memory: the broker's group expiry, for added partitions.
    pub(super) gate_expiry: Option<GateExpiry>,
    /// One-replica topics in memory: how added partitions expire idle producer ids.
    pub(super) producer_expiry: Option<ProducerExpiry>,
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
    /// Whether the topic's cleanup policy compacts (its records need keys).
    #[inline]
    pub(crate) fn compacts(&self) -> bool {
        self.config.cleanup_policy.compacts()
    }

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
            producer_expiry: None,
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
pub(super) trait TopicAdmin: Send + Sync {
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
    /// Writes a transaction's end marker on `partition` (`acks = all`): `Ok(true)` written,
    /// `Ok(false)` already there (or a later transaction of the producer is open there).
    fn write_marker(&self, partition: u32, marker: &MarkerWrite) -> Result<bool>;
    /// Whether the topic was deleted.
    fn is_deleted(&self) -> bool;
    /// The partition's open and aborted transactions.
    fn transactions(
        &self,
        partition: u32,
    ) -> Result<(
        Vec<crate::partition::OpenTxn>,
        Vec<crate::partition::AbortedTxn>,
    )>;
}

/// One end marker to write ([`TopicAdmin::write_marker`]).
#[derive(Debug, Clone)]
pub(crate) struct MarkerWrite {
    pub(crate) producer_id: i64,
    pub(crate) epoch: i16,
    pub(crate) commit: bool,
    pub(crate) coordinator_epoch: i32,
    pub(crate) now_ms: i64,
    /// The write's policy ([`marker_policy`]): shared, so that a marker allocates none.
    pub(crate) policy: Arc<crate::partition::SendPolicy>,
}

/// How a transaction marker is written: `acks = all`, no retry, waiting at most `timeout`
/// for its acknowledgement.
pub(crate) fn marker_policy(timeout: std::time::Duration) -> Arc<crate::partition::SendPolicy> {
    // No producer sequence (the partition's transaction table fences markers); the codec is
    // the batch builder's to refuse for a control batch.
    Arc::new(crate::partition::SendPolicy {
        acks: crate::partition::Acks::All,
        retries: 0,
        delivery_timeout: timeout,
        request_timeout: timeout,
        ..crate::partition::SendPolicy::default()
    })
}

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> TopicAdmin for TopicInner<K, V> {
    fn is_deleted(&self) -> bool {
        TopicInner::is_deleted(self)
    }

    fn write_marker(&self, partition: u32, m: &MarkerWrite) -> Result<bool> {
        use crate::partition::txn::{TxnAppendError, TxnRefusal};
        let p = self.partition(partition)?;
        let policy = Arc::clone(&m.policy);
        let marker = crate::partition::ControlMarker {
            commit: m.commit,
            coordinator_epoch: m.coordinator_epoch,
        };
        let timeout = policy.request_timeout;
        match p.write_marker(m.producer_id, m.epoch, marker, m.now_ms, policy, timeout) {
            Ok(_) => Ok(true),
            // Already written, or a later transaction of the producer is open here (which
            // the coordinator lets begin only after this one's markers were all written).
            Err(TxnAppendError::Refused(TxnRefusal::StaleMarker { epoch, open }, _))
                if open.is_none_or(|o| o > epoch) =>
            {
                Ok(false)
            }
            Err(TxnAppendError::Refused(why, _)) => Err(Error::InvalidTxnState {
                transactional_id: String::new(),
                state: "PrepareCommit/PrepareAbort",
                operation: "write transaction marker",
                valid: if matches!(why, TxnRefusal::StaleMarker { .. }) {
                    "a marker for the transaction open on the partition"
                } else {
                    "a marker of the current epoch"
                },
            }),
            Err(TxnAppendError::Append(_, why)) => {
                Err(crate::partition::append_error(why, &self.name, partition))
            }
        }
    }

    fn transactions(
        &self,
        partition: u32,
    ) -> Result<(
        Vec<crate::partition::OpenTxn>,
        Vec<crate::partition::AbortedTxn>,
    )> {
        Ok(self.partition(partition)?.transactions())
    }

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
                    let mut p =
                        Partition::new(self.config.partition_config(), Arc::clone(&self.arrivals))?
                            .with_gate_expiry(self.gate_expiry.clone());
                    if let Some(expiry) = &self.producer_expiry {
                        p = p.with_producer_expiry(expiry.clone());
                    }
                    grown.push(Arc::new(p));
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
pub(super) struct TopicSlot {
    pub(super) key: (TypeId, &'static str),
    pub(super) value: (TypeId, &'static str),
    pub(super) typed: Arc<dyn Any + Send + Sync>,
    pub(super) admin: Arc<dyn TopicAdmin>,
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
