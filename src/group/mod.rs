//! Consumer groups: membership, generations, rebalancing, lag; and Kafka's partition
//! assignors as a pure API.
//!
//! ## Groups in a broker
//!
//! Consumers with one group id that [`subscribe`](crate::Consumer::subscribe) (or
//! [`subscribe_pattern`](crate::Consumer::subscribe_pattern)) are the members of that group:
//! each partition of the subscribed topics is read by one member per *generation*. The group
//! rebalances — a new generation, the assignor run again — when a member subscribes,
//! changes its subscription, unsubscribes, closes or is dropped, does not poll within its
//! `max_poll_interval` (on the broker's [`Clock`](crate::Clock); it is then evicted), when a
//! subscribed topic gains partitions, and when a topic matching a pattern is created.
//! Everything a member does for the group happens on its own thread, inside its `poll`:
//! - **eager** assignors (range, round-robin, sticky, or yours): every member revokes
//!   everything (its [`RebalanceListener::on_partitions_revoked`] runs, and it may commit
//!   there), rejoins, and once all have rejoined gets its new assignment;
//! - **cooperative** (cooperative-sticky): members keep reading while they rejoin; only the
//!   partitions that move are revoked from their old owner, and handed to the new one in a
//!   second round once revoked.
//!
//! Member ids are `{client_id}-{sequence}` (`{group_instance_id}-{sequence}` for static
//! members), so the assignors see members in the order they joined within each client id.
//! A commit by a member that is not in the group's current generation is refused with
//! [`Error::StaleGeneration`](crate::Error::StaleGeneration), carrying both generations.
//! [`Broker::describe_group`](crate::Broker::describe_group) shows the group as
//! `kafka-consumer-groups --describe` does; [`Broker::subscribe_with`](crate::Broker::subscribe_with)
//! runs a member on a thread of its own and calls back per record.
//!
//! Kafka's defaults: range assignor, auto-commit on every 5 s, `max_poll_interval` 5
//! minutes, `auto_offset_reset` latest. logbus adds one rule to auto-commit: it also commits
//! after half a partition's in-memory capacity was read, so producers of `Block` topics
//! (which wait on the group's commits) never wait for the interval.
//!
//! ```
//! use std::time::Duration;
//! use logbus::{Broker, ConsumerConfig, OffsetReset, TopicConfig};
//!
//! let broker = Broker::in_memory();
//! broker.create_topic::<(), u64>("orders", TopicConfig::new(4))?;
//! let config = |name: &str| {
//!     ConsumerConfig::new().group_id("billing").client_id(name).auto_offset_reset(OffsetReset::Earliest)
//! };
//! let mut a = broker.consumer::<(), u64>(config("a"))?;
//! let mut b = broker.consumer::<(), u64>(config("b"))?;
//! a.subscribe(&["orders"])?;
//! b.subscribe(&["orders"])?;
//! for _ in 0..3 {
//!     a.poll(Duration::ZERO)?;
//!     b.poll(Duration::ZERO)?;
//! }
//! assert_eq!((a.assignment().len(), b.assignment().len()), (2, 2));
//! drop(a); // leaves: `b` gets everything at its next poll
//! b.poll(Duration::ZERO)?;
//! assert_eq!(b.assignment().len(), 4);
//! # Ok::<(), logbus::Error>(())
//! ```
//!
//! ## Assignors
//!
//! A consumer group splits the partitions of the topics its members subscribe to: each
//! partition has one owner per generation. *Which* member owns which partition is decided by
//! an assignor, a pure function from the topics' partition counts and the members'
//! [`MemberSubscription`]s to an assignment (member id → its partitions). logbus ships Kafka's four
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
//! use logbus::group::{PartitionAssignor, RangeAssignor, MemberSubscription, TopicPartition};
//!
//! let partitions = BTreeMap::from([("orders".to_string(), 3)]);
//! let members = BTreeMap::from([
//!     ("consumer-a".to_string(), MemberSubscription::new(["orders"])),
//!     ("consumer-b".to_string(), MemberSubscription::new(["orders"])),
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
//! - conflicting ownership claims follow Kafka's generation rule (see [`MemberSubscription`]);
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

// What a group is made of lives below this module, so that the layers only call downward:
// the coordinator, the assignors it runs and the describe/list reports are the broker's
// (`crate::broker::groups`); membership, its settings and the rebalance listener are the
// consumer's (`crate::consumer::membership`). This module is the public face of groups.
mod push;

pub use crate::broker::groups::{
    CooperativeStickyAssignor, GroupDescription, GroupListing, GroupState, MemberDescription,
    MemberSubscription, PartitionAssignor, PartitionLag, RangeAssignor, RebalanceProtocol,
    RoundRobinAssignor, StickyAssignor,
};
pub use crate::consumer::group_config::{DEFAULT_AUTO_COMMIT_INTERVAL, DEFAULT_MAX_POLL_INTERVAL};
pub use crate::consumer::listener::RebalanceListener;
pub use crate::topic_partition::TopicPartition;
pub use push::{PushReport, PushSubscription};
