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
//!
//! ## Inputs are never an error
//!
//! Kafka's assignors accept any subscriptions and skip what does not apply; logbus's do the
//! same, so [`PartitionAssignor::assign`] returns an assignment, never an error, and never
//! panics:
//! - a subscribed topic missing from `partitions_per_topic`, or with 0 partitions, is skipped
//!   (Kafka: "no metadata is available");
//! - a topic in `partitions_per_topic` that no member subscribes to is not assigned;
//! - owned partitions of topics that are unknown or no longer subscribed, and owned partition
//!   numbers at or beyond the topic's partition count, are ignored;
//! - conflicting ownership claims follow Kafka's generation rule (see [`Subscription`]);
//! - no members gives an empty assignment; a member subscribed to nothing gets an empty list.
//!
//! The result has one entry per member and one element per assigned partition, so its size
//! is bounded by the partition counts the caller passes.
//!
//! ## Order
//!
//! Kafka compares member ids, group instance ids and topic names as Java strings (by UTF-16
//! code unit); so do these assignors. For the names Kafka allows (`[a-zA-Z0-9._-]`) that is
//! plain byte order. Where Kafka's result depends on the iteration order of a Java `HashMap`
//! (of member ids in the sticky assignors, of topics in the range assignor's lists), logbus
//! iterates in that same order, computed from Java's `String.hashCode`. Two keys in one hash
//! bucket are iterated by Java in the order they were inserted, which the assignor cannot
//! know; logbus takes them in string order.

mod assignor;
pub(crate) mod config;
pub(crate) mod coordinator;
mod describe;
mod listener;
pub(crate) mod member;
mod push;

pub use crate::topic_partition::TopicPartition;
pub use assignor::{
    CooperativeStickyAssignor, PartitionAssignor, RangeAssignor, RebalanceProtocol,
    RoundRobinAssignor, StickyAssignor, Subscription,
};
pub use config::{DEFAULT_AUTO_COMMIT_INTERVAL, DEFAULT_MAX_POLL_INTERVAL};
pub use coordinator::GroupState;
pub use describe::{GroupDescription, GroupListing, MemberDescription, PartitionLag};
pub use listener::RebalanceListener;
pub use push::{PushReport, PushSubscription};
