//! Consumer groups: Kafka's partition assignors as a pure API.
//!
//! A consumer group splits the partitions of the topics its members subscribe to: each
//! partition has one owner per generation. *Which* member owns which partition is decided by
//! an assignor, a pure function from the topics' partition counts and the members'
//! [`Subscription`]s to an assignment (member id → its partitions). logbus ships Kafka's four
//! assignors with Kafka's protocol names and Kafka's results for the same inputs:
//!
//! | assignor | [`name`](PartitionAssignor::name) | protocol | what it does |
//! |---|---|---|---|
//! | [`RangeAssignor`] | `range` | eager | per topic, contiguous ranges; the first members get one extra |
//! | [`RoundRobinAssignor`] | `roundrobin` | eager | all partitions dealt out in turn, skipping members not subscribed |
//! | [`StickyAssignor`] | `sticky` | eager | balanced within one partition, moving as few partitions as possible |
//! | [`CooperativeStickyAssignor`] | `cooperative-sticky` | cooperative | sticky, but a partition changing owner is first only revoked |
//!
//! The assignors use nothing but their arguments, so they serve equally to plan and test
//! assignments without a broker. A group may also use an assignor of your own: implement
//! [`PartitionAssignor`].
//!
//! ```
//! use std::collections::BTreeMap;
//! use logbus::group::{PartitionAssignor, RangeAssignor, Subscription, TopicPartition};
//!
//! let partitions = BTreeMap::from([("orders".to_string(), 3)]);
//! let members = BTreeMap::from([
//!     ("consumer-a".to_string(), Subscription::new(["orders"])),
//!     ("consumer-b".to_string(), Subscription::new(["orders"])),
//! ]);
//! let assignment = RangeAssignor.assign(&partitions, &members);
//! assert_eq!(assignment["consumer-a"], [TopicPartition::new("orders", 0), TopicPartition::new("orders", 1)]);
//! assert_eq!(assignment["consumer-b"], [TopicPartition::new("orders", 2)]);
//! ```

use std::fmt;

mod assignor;

pub use assignor::{
    CooperativeStickyAssignor, PartitionAssignor, RangeAssignor, RebalanceProtocol,
    RoundRobinAssignor, StickyAssignor, Subscription,
};

/// One partition of one topic: Kafka's `TopicPartition`.
///
/// Ordered by topic, then partition; printed as `topic-partition` (`orders-3`), like Kafka.
///
/// # Examples
///
/// ```
/// use logbus::group::TopicPartition;
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
