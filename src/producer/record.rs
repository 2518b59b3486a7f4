//! What a producer sends and gets back: records and their metadata.

use std::borrow::Cow;
use std::fmt;

use bytes::Bytes;

use crate::partition::Headers;

/// A record to send (Kafka's `ProducerRecord`).
///
/// # Examples
///
/// ```
/// use logbus::producer::Record;
///
/// let record = Record::new("orders", 42u64)
///     .key("eu".to_string())
///     .partition(3)
///     .timestamp(1_700_000_000_000)
///     .header("trace", Some(logbus::Bytes::from_static(b"abc")));
/// assert_eq!(record.headers.len(), 1);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Record<K, V> {
    /// The topic's name (`&'static str` names cost no allocation).
    pub topic: Cow<'static, str>,
    /// An explicit partition, or `None` to let the partitioner choose.
    pub partition: Option<u32>,
    /// Milliseconds since the Unix epoch, or `None` for the broker clock's time at send.
    pub timestamp: Option<i64>,
    /// The key, if any.
    pub key: Option<K>,
    /// The value.
    pub value: V,
    /// Headers (none costs no allocation).
    pub headers: Headers,
}

impl<K, V> fmt::Debug for Record<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Record")
            .field("topic", &self.topic)
            .field("partition", &self.partition)
            .field("timestamp", &self.timestamp)
            .field("has_key", &self.key.is_some())
            .field("headers", &self.headers.len())
            .finish_non_exhaustive()
    }
}

impl<K, V> Record<K, V> {
    /// A record of `value` for `topic`, without key, partition, timestamp or headers.
    pub fn new(topic: impl Into<Cow<'static, str>>, value: V) -> Self {
        Self {
            topic: topic.into(),
            partition: None,
            timestamp: None,
            key: None,
            value,
            headers: Vec::new(),
        }
    }

    /// With a key.
    pub fn key(mut self, key: K) -> Self {
        self.key = Some(key);
        self
    }

    /// With an explicit partition.
    pub fn partition(mut self, partition: u32) -> Self {
        self.partition = Some(partition);
        self
    }

    /// With a timestamp (milliseconds since the Unix epoch, in `0..=`[`MAX_TIMESTAMP`](crate::MAX_TIMESTAMP)).
    pub fn timestamp(mut self, timestamp: i64) -> Self {
        self.timestamp = Some(timestamp);
        self
    }

    /// With one more header.
    pub fn header(mut self, key: impl Into<String>, value: Option<Bytes>) -> Self {
        self.headers.push((key.into(), value));
        self
    }
}

/// Where a sent record went (Kafka's `RecordMetadata`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecordMetadata {
    /// The partition.
    pub partition: u32,
    /// The record's offset in it.
    pub offset: u64,
    /// The record's timestamp.
    pub timestamp: i64,
}
