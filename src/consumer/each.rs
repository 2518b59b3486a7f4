//! [`Consumer::poll_with`]: records lent to a closure instead of moved into
//! [`ConsumerRecord`](super::ConsumerRecord)s.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;

use super::Consumer;
use crate::partition::Entry;
use crate::Result;

/// One record as [`Consumer::poll_with`] lends it: the fields of a
/// [`ConsumerRecord`](super::ConsumerRecord), borrowed.
pub struct RecordRef<'a, K, V> {
    /// The topic.
    pub topic: &'static str,
    /// The partition.
    pub partition: u32,
    /// The record's offset in the partition.
    pub offset: u64,
    /// Milliseconds since the Unix epoch.
    pub timestamp: i64,
    /// The key, if any.
    pub key: Option<&'a K>,
    /// The value.
    pub value: &'a V,
    /// The headers, in order.
    pub headers: &'a [(String, Option<Bytes>)],
}

impl<K, V> fmt::Debug for RecordRef<'_, K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordRef")
            .field("topic", &self.topic)
            .field("partition", &self.partition)
            .field("offset", &self.offset)
            .field("timestamp", &self.timestamp)
            .finish_non_exhaustive()
    }
}

/// A run of consecutive offsets of one partition in [`Buffers::entries`].
#[derive(Debug, Clone, Copy)]
struct Run {
    topic: &'static str,
    partition: u32,
    first: u64,
    len: usize,
}

/// What a fetch for [`Consumer::poll_with`] copied out of the partitions, kept for reuse.
pub(crate) struct Buffers<K, V> {
    entries: Vec<Entry<K, V>>,
    runs: Vec<Run>,
}

impl<K, V> Default for Buffers<K, V> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            runs: Vec::new(),
        }
    }
}

impl<K, V> Consumer<K, V>
where
    K: Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// Like [`poll_into`](Self::poll_into), lending each record to `f` instead of
    /// building a [`ConsumerRecord`](super::ConsumerRecord): at most `max` records, in
    /// the order `poll` returns them; returns how many. The entries are copied out of the
    /// partitions first (a value clone each, into a buffer the consumer keeps), so `f`
    /// runs with no lock held and may use the broker freely, and nothing is allocated
    /// once the buffer has grown to `max`. Positions move when the records are copied: if
    /// `f` panics, the records after it in this poll are not lent again (seek back to
    /// re-read them).
    ///
    /// # Errors
    ///
    /// As [`poll`](Self::poll); `f` is not called then.
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
    /// broker.create_topic::<(), u64>("ticks", TopicConfig::new(1))?;
    /// let producer = broker.producer::<(), u64>();
    /// for v in 0..3 {
    ///     producer.send(Record::new("ticks", v))?;
    /// }
    /// let mut consumer = broker.consumer::<(), u64>(
    ///     ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest),
    /// )?;
    /// consumer.assign(&[TopicPartition::new("ticks", 0)])?;
    /// let mut sum = 0;
    /// let n = consumer.poll_with(100, Duration::from_secs(1), |r| sum += *r.value)?;
    /// assert_eq!((n, sum), (3, 3));
    /// # Ok::<(), logbus::Error>(())
    /// ```
    pub fn poll_with(
        &mut self,
        max: usize,
        timeout: Duration,
        mut f: impl FnMut(RecordRef<'_, K, V>),
    ) -> Result<usize> {
        let Buffers {
            mut entries,
            mut runs,
        } = std::mem::take(&mut self.borrowed);
        entries.clear();
        runs.clear();
        let mut headers = false;
        let read = self.poll_loop(max, timeout, |c, max| {
            c.fetch_with(
                max,
                &mut |_, _, _, e: &Entry<K, V>| {
                    headers |= e.headers.is_some();
                    entries.push(e.clone());
                },
                &mut |topic, partition, first, len| {
                    runs.push(Run {
                        topic,
                        partition,
                        first,
                        len,
                    });
                },
            )
        });
        if read.is_ok() {
            let mut at = entries.iter();
            for run in &runs {
                for (i, e) in at.by_ref().take(run.len).enumerate() {
                    f(RecordRef {
                        topic: run.topic,
                        partition: run.partition,
                        offset: run.first + i as u64,
                        timestamp: e.timestamp,
                        key: e.key.as_ref(),
                        value: &e.value,
                        headers: e.headers.as_deref().map_or(&[], Vec::as_slice),
                    });
                }
            }
        }
        if std::mem::needs_drop::<K>() || std::mem::needs_drop::<V>() || headers {
            entries.clear();
        } else {
            // SAFETY: shrinking only; every entry's drop is a no-op (neither `K` nor `V` has
            // drop glue, and no entry holds headers), so forgetting them leaks nothing and
            // skips a pass over the buffer.
            unsafe { entries.set_len(0) };
        }
        runs.clear();
        self.borrowed = Buffers { entries, runs };
        read
    }
}
