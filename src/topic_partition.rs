//! [`TopicPartition`]: the name of one partition, shared by the topics and the group layers.

use std::fmt;

/// One partition of one topic: Kafka's `TopicPartition`.
///
/// Ordered by topic (byte order, which is Java's for Kafka's legal topic names), then
/// partition; printed as `topic-partition` (`orders-3`), like Kafka.
///
/// # Examples
///
/// ```
/// use logbus::TopicPartition;
///
/// let tp = TopicPartition::new("orders", 3);
/// assert_eq!(tp.to_string(), "orders-3");
/// assert!(TopicPartition::new("orders", 10) > tp);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    /// The topic's name.
    pub topic: String,
    /// The partition's number within its topic, from 0.
    pub partition: u32,
}

impl TopicPartition {
    /// The partition `partition` of `topic`.
    pub fn new(topic: impl Into<String>, partition: u32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}
