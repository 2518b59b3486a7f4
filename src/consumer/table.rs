//! [`Table`]: a keyed topic replayed into a map and kept current (Kafka Streams' `KTable`,
//! and the restore of a state store from its changelog, in one call). Its docs say how it
//! reads and who drives it.

use std::collections::hash_map::{self, HashMap};
use std::fmt;
use std::hash::Hash;
use std::time::Duration;

use super::{Consumer, ConsumerConfig, IsolationLevel, OffsetReset};
use crate::broker::{Broker, Topic, TopicPartition};
use crate::codec::Codec;
use crate::sync::time::{self, Instant};
use crate::{Error, Result};

/// What a [`Table`] has read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableMetrics {
    /// Records applied (tombstones and records without a key included).
    pub records_read: u64,
    /// Tombstones read (each removed its key, if present).
    pub tombstones: u64,
    /// Records without a key read: not applied (a table is keyed).
    pub unkeyed: u64,
}

/// A keyed topic replayed into a map and kept current by its owner: [`Broker::table`].
///
/// It reads every partition of its topic from the log start through a consumer of its own
/// (no group: it commits nothing and holds no producer back; read-committed, so a
/// transaction's records appear once it commits and an aborted one's never, as a Kafka
/// Streams restore under exactly-once reads its changelog), and applies each record to a
/// `HashMap`: a record replaces its key's value, a tombstone (a null value: `None` of a
/// `Table<K, Option<V>>`, the rule the log cleaner and in-memory compaction follow; an
/// empty value is a value) removes the key, a
/// record without a key is counted ([`TableMetrics::unkeyed`]) and skipped. Durable topics
/// are read from disk, then from the ring; in-memory compacted topics from what they keep,
/// then from the ring: a compacted topic replays in about as many records as it has live
/// keys (plus its ring), however long its history.
///
/// **Who drives it: the caller**, as a Kafka Streams task drives its tables. A `KTable` is
/// updated by the stream thread that owns it, between the records it processes, and a
/// state store's restore blocks until the changelog is read to the end offsets taken when
/// it started. So [`catch_up`](Self::catch_up) reads to the end offsets as of the call (the
/// restore, which can then say "caught up"), [`update`](Self::update) applies what has
/// arrived since without waiting, and [`wait_for`](Self::wait_for) waits until given
/// offsets (those a producer's sends returned) are applied: read your own writes. The table
/// has no thread of its own, so its map changes only inside those calls: [`get`](Self::get)
/// hands out plain references without a lock, and two reads between updates agree. A
/// table several threads read is owned by one and shared behind a lock, or each keeps its
/// own.
pub struct Table<K, V> {
    topic: Topic<K, V>,
    consumer: Consumer<K, V>,
    map: HashMap<K, V>,
    metrics: TableMetrics,
}

impl<K, V> fmt::Debug for Table<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Table")
            .field("topic", &self.topic.name())
            .field("len", &self.map.len())
            .field("metrics", &self.metrics)
            .finish_non_exhaustive()
    }
}

/// Records a table applies per poll.
const TABLE_POLL_RECORDS: usize = 4096;

impl Broker {
    /// A table of topic `name`: every partition's records from the log start, applied to a
    /// map by key (see [`Table`]). Empty until
    /// [`catch_up`](Table::catch_up) or [`update`](Table::update) reads; a restore is
    /// `broker.table(name)?.catch_up(timeout)?`. Any keyed topic works; a compacted one
    /// ([`TopicConfig::compacted`](crate::broker::TopicConfig::compacted), or persisted with
    /// [`CleanupPolicy::Compact`](crate::broker::CleanupPolicy::Compact)) replays fastest.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`], [`Error::TypeMismatch`], I/O errors opening a persisted
    /// topic.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use logbus::broker::{Broker, TopicConfig};
    /// use logbus::Bytes;
    /// use logbus::producer::Record;
    ///
    /// let broker = Broker::in_memory();
    /// let config = TopicConfig::new(2).records_in_memory(8).compacted();
    /// // `Option` values: `None` is Kafka's null, a tombstone.
    /// broker.create_topic::<String, Option<Bytes>>("users", config)?;
    /// let producer = broker.producer::<String, Option<Bytes>>();
    /// for n in 0..100 {
    ///     let record = Record::new("users", Some(Bytes::from(format!("v{n}"))));
    ///     producer.send(record.key(format!("user-{}", n % 10)))?;
    /// }
    /// producer.send(Record::new("users", None).key("user-3".to_string()))?; // tombstone
    /// // An empty value is a value, not a tombstone.
    /// producer.send(Record::new("users", Some(Bytes::new())).key("user-4".to_string()))?;
    ///
    /// let mut table = broker.table::<String, Option<Bytes>>("users")?;
    /// table.catch_up(Duration::from_secs(5))?;
    /// assert_eq!(table.len(), 9);
    /// assert_eq!(table.get(&"user-9".to_string()), Some(&Some(Bytes::from("v99"))));
    /// assert_eq!(table.get(&"user-4".to_string()), Some(&Some(Bytes::new())));
    /// assert!(table.get(&"user-3".to_string()).is_none());
    /// assert!(table.metrics().records_read < 102, "the compacted topic replays fewer");
    /// # Ok::<(), logbus::Error>(())
    /// ```
    pub fn table<K, V>(&self, name: &str) -> Result<Table<K, V>>
    where
        K: Codec + Hash + Eq + Clone + Send + Sync + 'static,
        V: Codec + Clone + Send + Sync + 'static,
    {
        let topic = self.topic::<K, V>(name)?;
        let consumer = self.consumer::<K, V>(
            ConsumerConfig::new()
                .auto_offset_reset(OffsetReset::Earliest)
                .isolation_level(IsolationLevel::ReadCommitted)
                .max_poll_records(TABLE_POLL_RECORDS),
        )?;
        let mut table = Table {
            topic,
            consumer,
            map: HashMap::new(),
            metrics: TableMetrics::default(),
        };
        table.assign_new()?;
        Ok(table)
    }
}

impl<K, V> Table<K, V>
where
    K: Codec + Hash + Eq + Clone + Send + Sync + 'static,
    V: Codec + Clone + Send + Sync + 'static,
{
    /// Assigns the topic's partitions not assigned yet (partitions added since), from
    /// their log start.
    fn assign_new(&mut self) -> Result<()> {
        let count = self.topic.partition_count();
        if self.consumer.assignment().len() as u32 == count {
            return Ok(());
        }
        let all: Vec<_> = (0..count)
            .map(|p| TopicPartition::new(self.topic.name(), p))
            .collect();
        self.consumer.assign(&all)
    }

    /// Polls once (waiting up to `timeout` for a record), applying what it read; how many.
    fn poll_once(&mut self, timeout: Duration) -> Result<usize> {
        let (map, metrics) = (&mut self.map, &mut self.metrics);
        self.consumer.poll_with(TABLE_POLL_RECORDS, timeout, |r| {
            metrics.records_read += 1;
            let Some(key) = r.key else {
                metrics.unkeyed += 1;
                return;
            };
            if r.value.is_null() {
                metrics.tombstones += 1;
                map.remove(key);
                return;
            }
            match map.entry(key.clone()) {
                hash_map::Entry::Occupied(mut e) => *e.get_mut() = r.value.clone(),
                hash_map::Entry::Vacant(e) => {
                    e.insert(r.value.clone());
                }
            }
        })
    }

    /// Applies every record that has arrived, without waiting; returns how many it read.
    ///
    /// # Errors
    ///
    /// The consumer's ([`Consumer::poll`]): a deleted topic, a failed read from disk.
    pub fn update(&mut self) -> Result<usize> {
        self.assign_new()?;
        let mut total = 0;
        loop {
            match self.poll_once(Duration::ZERO)? {
                0 => return Ok(total),
                n => total += n,
            }
        }
    }

    /// Reads until every partition's records below its end offset as of this call are
    /// applied (a state store's restore): afterwards the table holds the topic's state at
    /// that moment, or later.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when `timeout` passes first (what was read stays applied; call
    /// again to go on); the consumer's errors.
    pub fn catch_up(&mut self, timeout: Duration) -> Result<()> {
        self.assign_new()?;
        let parts = self.consumer.assignment();
        let ends = self.consumer.end_offsets(&parts)?;
        let ends: Vec<(u32, u64)> = ends.into_iter().map(|(tp, o)| (tp.partition, o)).collect();
        self.wait_for(&ends, timeout)
    }

    /// Reads until the record before each `(partition, offset)` is applied: the table then
    /// reflects every record below those offsets (pass a send's offset + 1 to read your own
    /// write). A record of a transaction is applied when its transaction commits: until then
    /// this waits (an aborted transaction's records are passed over, never applied).
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when `timeout` passes first; [`Error::PartitionOutOfRange`] for a
    /// partition the topic does not have; the consumer's errors.
    pub fn wait_for(&mut self, offsets: &[(u32, u64)], timeout: Duration) -> Result<()> {
        let deadline = time::deadline_after(timeout);
        self.assign_new()?;
        let count = self.topic.partition_count();
        if let Some(&(partition, _)) = offsets.iter().find(|&&(p, _)| p >= count) {
            return Err(Error::PartitionOutOfRange {
                topic: self.topic.name().to_owned(),
                partition,
                count,
            });
        }
        loop {
            let behind = offsets.iter().find(|&&(p, end)| {
                let tp = TopicPartition::new(self.topic.name(), p);
                // No position yet: not polled since assigned.
                self.consumer.position(&tp).map_or(end > 0, |at| at < end)
            });
            let Some(&(partition, _)) = behind else {
                // Caught up; what else arrived meanwhile is applied too, without waiting.
                self.update()?;
                return Ok(());
            };
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(3600),
            };
            if left.is_zero() {
                return Err(Error::Timeout {
                    operation: "table catch-up",
                    topic: Some(self.topic.name().to_owned()),
                    partition: Some(partition),
                    timeout_ms: Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
                    code: None,
                });
            }
            self.poll_once(left.min(Duration::from_millis(100)))?;
        }
    }

    /// The value of `key`, if the table has it.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key)
    }

    /// Keys in the table.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the table has no key.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Every key and its value, in no order.
    pub fn iter(&self) -> hash_map::Iter<'_, K, V> {
        self.map.iter()
    }

    /// The map itself (a snapshot: clone it to keep it past the next update).
    pub fn as_map(&self) -> &HashMap<K, V> {
        &self.map
    }

    /// The next offset the table reads in each partition (what it has applied is below).
    pub fn positions(&self) -> Vec<(u32, u64)> {
        self.consumer
            .assignment()
            .into_iter()
            .filter_map(|tp| Some((tp.partition, self.consumer.position(&tp).ok()?)))
            .collect()
    }

    /// What the table has read.
    pub fn metrics(&self) -> TableMetrics {
        self.metrics
    }

    /// The topic's name.
    pub fn topic(&self) -> &str {
        self.topic.name()
    }
}
