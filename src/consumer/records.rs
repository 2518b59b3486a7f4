//! What polls return: records, batches of them per partition, and the consumer's counts.

use std::collections::HashMap;
use std::fmt;

use crate::broker::TopicPartition;
use crate::partition::Headers;
use crate::sync::Mutex;
// Std's Arc (also under loom), as the consumer's.
use crate::sync::StdArc as Arc;

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
///
/// Dropped, it hands its emptied buffer back to its consumer for the next poll (unless the
/// consumer's spare buffer is already as large), so polls allocate nothing once the buffer
/// has grown to the records they return.
pub struct ConsumerRecords<K, V> {
    pub(super) records: Vec<ConsumerRecord<K, V>>,
    /// Where the buffer goes back to when dropped: its consumer's spare.
    pub(super) spare: Option<Spare<K, V>>,
    /// Some record's headers own memory (else, when neither `K` nor `V` needs dropping,
    /// dropping the records is a no-op, skipped).
    pub(super) headers: bool,
}

/// A consumer's spare poll buffer, shared with the [`ConsumerRecords`] it returned.
pub(crate) type Spare<K, V> = Arc<Mutex<Vec<ConsumerRecord<K, V>>>>;

impl<K, V> Drop for ConsumerRecords<K, V> {
    fn drop(&mut self) {
        let Some(spare) = &self.spare else {
            return;
        };
        if self.records.capacity() == 0 {
            return;
        }
        if self.headers || std::mem::needs_drop::<K>() || std::mem::needs_drop::<V>() {
            // Dropped before the lock is taken: a record's drop runs user code.
            self.records.clear();
        } else {
            // SAFETY: shrinking only; every record's drop is a no-op (neither `K` nor `V`
            // has drop glue, and no record's headers own memory: `headers` is set by the
            // poll that made them, and nothing hands out `&mut` access to them), so
            // forgetting them leaks nothing and skips a pass over the buffer.
            unsafe { self.records.set_len(0) };
        }
        let mut slot = spare.lock();
        if slot.capacity() < self.records.capacity() {
            std::mem::swap(&mut *slot, &mut self.records);
        }
    }
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
        Self {
            records,
            spare: None,
            headers: true,
        }
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
    pub fn into_vec(mut self) -> Vec<ConsumerRecord<K, V>> {
        std::mem::take(&mut self.records)
    }
}

impl<K, V> IntoIterator for ConsumerRecords<K, V> {
    type Item = ConsumerRecord<K, V>;
    type IntoIter = std::vec::IntoIter<ConsumerRecord<K, V>>;

    fn into_iter(mut self) -> Self::IntoIter {
        std::mem::take(&mut self.records).into_iter()
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

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use crate::broker::{Broker, TopicConfig, TopicPartition};
    use crate::consumer::{ConsumerConfig, OffsetReset};
    use crate::producer::Record;

    /// Dropped records hand their buffer back to the consumer, and the next poll fills it
    /// anew: records with drop glue (a `String` value) and with headers (owned memory, so
    /// dropped one by one) come out whole, and `into_vec` takes the buffer for good.
    #[test]
    fn a_poll_reuses_the_buffer_of_the_records_dropped_before_it() {
        let b = Broker::in_memory();
        b.create_topic::<(), String>("t", TopicConfig::new(1))
            .unwrap();
        let p = b.producer::<(), String>();
        let mut c = b
            .consumer::<(), String>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
            .unwrap();
        c.assign(&[TopicPartition::new("t", 0)]).unwrap();
        for i in 0..3 {
            p.send(Record::new("t", format!("v{i}"))).unwrap();
        }
        let first = c.poll(Duration::ZERO).unwrap();
        let at = first.records.as_ptr();
        assert_eq!(
            first.iter().map(|r| r.value.as_str()).collect::<Vec<_>>(),
            ["v0", "v1", "v2"]
        );
        drop(first);
        p.send(Record::new("t", "h".to_owned()).header("k", Some(Bytes::from_static(b"x"))))
            .unwrap();
        p.send(Record::new("t", "plain".to_owned())).unwrap();
        let second = c.poll(Duration::ZERO).unwrap();
        assert_eq!(
            second.records.as_ptr(),
            at,
            "the first poll's buffer, reused"
        );
        assert!(second.headers, "a record's headers own memory");
        assert_eq!(second.iter().next().unwrap().headers.len(), 1);
        assert_eq!(second.iter().nth(1).unwrap().value, "plain");
        let kept = second.into_vec();
        assert_eq!(kept.len(), 2);
        p.send(Record::new("t", "last".to_owned())).unwrap();
        let third = c.poll(Duration::ZERO).unwrap();
        assert_ne!(
            third.records.as_ptr(),
            kept.as_ptr(),
            "the kept vector is the caller's"
        );
        assert_eq!(
            third.into_iter().map(|r| r.value).collect::<Vec<_>>(),
            ["last"]
        );
    }
}
