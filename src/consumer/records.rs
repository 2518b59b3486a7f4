//! What polls return: records, batches of them per partition, and the consumer's counts.

use std::collections::HashMap;
use std::fmt;

use crate::broker::TopicPartition;
use crate::partition::Headers;

/// A record as a consumer receives it (Kafka's `ConsumerRecord`).
#[derive(Clone, PartialEq, Eq)]
pub struct ConsumerRecord<K, V> {
    /// The topic (an interned name: copying it into each record costs nothing).
    pub topic: &'static str,
    /// The partition.
    pub partition: u32,
    /// The record's offset in the partition.
    pub offset: u64,
    /// Milliseconds since the Unix epoch.
    pub timestamp: i64,
    /// The key, if any.
    pub key: Option<K>,
    /// The value.
    pub value: V,
    /// The headers.
    pub headers: Headers,
}

impl<K, V> fmt::Debug for ConsumerRecord<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsumerRecord")
            .field("topic", &self.topic)
            .field("partition", &self.partition)
            .field("offset", &self.offset)
            .field("timestamp", &self.timestamp)
            .finish_non_exhaustive()
    }
}

/// The records one [`Consumer::poll`](super::Consumer::poll) returned, in the order read (offset order within each
/// partition).
pub struct ConsumerRecords<K, V> {
    pub(super) records: Vec<ConsumerRecord<K, V>>,
}

impl<K, V> fmt::Debug for ConsumerRecords<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsumerRecords")
            .field("len", &self.records.len())
            .finish()
    }
}

impl<K, V> ConsumerRecords<K, V> {
    /// Records read by another front end (the `kafka` feature's consumer).
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    pub(crate) fn from_vec(records: Vec<ConsumerRecord<K, V>>) -> Self {
        Self { records }
    }

    /// How many records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Every record.
    pub fn iter(&self) -> std::slice::Iter<'_, ConsumerRecord<K, V>> {
        self.records.iter()
    }

    /// The records of one partition, in offset order.
    pub fn records<'a>(
        &'a self,
        tp: &'a TopicPartition,
    ) -> impl Iterator<Item = &'a ConsumerRecord<K, V>> + 'a {
        self.records
            .iter()
            .filter(move |r| r.partition == tp.partition && r.topic == tp.topic)
    }

    /// The partitions that have records here, in first-seen order.
    pub fn partitions(&self) -> Vec<TopicPartition> {
        let mut seen: Vec<TopicPartition> = Vec::new();
        for r in &self.records {
            if !seen
                .iter()
                .any(|tp| tp.partition == r.partition && tp.topic == r.topic)
            {
                seen.push(TopicPartition::new(r.topic, r.partition));
            }
        }
        seen
    }

    /// The records as a vector.
    pub fn into_vec(self) -> Vec<ConsumerRecord<K, V>> {
        self.records
    }
}

impl<K, V> IntoIterator for ConsumerRecords<K, V> {
    type Item = ConsumerRecord<K, V>;
    type IntoIter = std::vec::IntoIter<ConsumerRecord<K, V>>;

    fn into_iter(self) -> Self::IntoIter {
        self.records.into_iter()
    }
}

impl<'a, K, V> IntoIterator for &'a ConsumerRecords<K, V> {
    type Item = &'a ConsumerRecord<K, V>;
    type IntoIter = std::slice::Iter<'a, ConsumerRecord<K, V>>;

    fn into_iter(self) -> Self::IntoIter {
        self.records.iter()
    }
}

/// An offset with the timestamp of its record ([`Consumer::offsets_for_times`](super::Consumer::offsets_for_times)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetAndTimestamp {
    /// The offset.
    pub offset: u64,
    /// Its record's timestamp.
    pub timestamp: i64,
}

/// What a consumer counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerMetrics {
    pub(super) records: u64,
    pub(super) skipped: HashMap<TopicPartition, u64>,
}

impl ConsumerMetrics {
    /// Counts `n` more records returned by a poll.
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    pub(crate) fn add_consumed(&mut self, n: u64) {
        self.records += n;
    }

    /// Records returned by polls.
    pub fn records_consumed(&self) -> u64 {
        self.records
    }

    /// Records skipped on `tp` because the position fell behind the log start and was
    /// reset (`Earliest`/`Latest`), or, for a consumer starting `Earliest` on an
    /// [`Overflow::Block`](crate::broker::Overflow::Block) topic in memory, because the
    /// topic had overwritten them before it started (no group held them then, or the
    /// group that did has committed them, been deleted or expired).
    pub fn skipped(&self, tp: &TopicPartition) -> u64 {
        self.skipped.get(tp).copied().unwrap_or(0)
    }

    /// Records skipped over every partition.
    pub fn total_skipped(&self) -> u64 {
        self.skipped.values().sum()
    }

    /// Skipped counts per partition (only partitions with a skip).
    pub fn skipped_by_partition(&self) -> &HashMap<TopicPartition, u64> {
        &self.skipped
    }
}
