//! Kafka's round-robin assignor (`RoundRobinAssignor`, protocol name `roundrobin`).

use std::collections::BTreeMap;

use super::{empty_assignment, member_info_cmp, MemberSubscription, PartitionAssignor, Topics};
use crate::topic_partition::TopicPartition;

/// Kafka's round-robin assignor: deals all partitions out in turn.
///
/// Members are ordered (static members first by group instance id, then the others by
/// member id) and the partitions of all subscribed topics listed by topic name, then number.
/// Each partition goes to the next member in circular order that subscribes to its topic;
/// members that do not are skipped. With identical subscriptions the counts differ by at
/// most one; with different ones the result can be unbalanced (see Kafka's documentation of
/// `RoundRobinAssignor`, whose example is below).
///
/// # Examples
///
/// ```
/// use std::collections::BTreeMap;
/// use logbus::group::{PartitionAssignor, RoundRobinAssignor, MemberSubscription, TopicPartition};
///
/// let partitions =
///     BTreeMap::from([("t0".to_string(), 1), ("t1".to_string(), 2), ("t2".to_string(), 3)]);
/// let members = BTreeMap::from([
///     ("c0".to_string(), MemberSubscription::new(["t0"])),
///     ("c1".to_string(), MemberSubscription::new(["t0", "t1"])),
///     ("c2".to_string(), MemberSubscription::new(["t0", "t1", "t2"])),
/// ]);
/// let a = RoundRobinAssignor.assign(&partitions, &members);
/// let tp = TopicPartition::new;
/// assert_eq!(a["c0"], [tp("t0", 0)]);
/// assert_eq!(a["c1"], [tp("t1", 0)]);
/// assert_eq!(a["c2"], [tp("t1", 1), tp("t2", 0), tp("t2", 1), tp("t2", 2)]);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct RoundRobinAssignor;

impl PartitionAssignor for RoundRobinAssignor {
    fn name(&self) -> &str {
        "roundrobin"
    }

    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, u32>,
        subscriptions: &BTreeMap<String, MemberSubscription>,
    ) -> BTreeMap<String, Vec<TopicPartition>> {
        let mut assignment = empty_assignment(subscriptions);
        let topics = Topics::new(partitions_per_topic, subscriptions);
        let mut members: Vec<(&str, &MemberSubscription)> =
            subscriptions.iter().map(|(m, s)| (m.as_str(), s)).collect();
        members.sort_by(|a, b| member_info_cmp(*a, *b));
        let mut next = 0;
        for (t, &topic) in topics.names.iter().enumerate() {
            // Some member subscribes to `topic` (`Topics` keeps only those), so this search
            // ends within one lap.
            for p in 0..topics.counts[t] {
                let Some(skip) = (0..members.len())
                    .find(|i| members[(next + i) % members.len()].1.topics.contains(topic))
                else {
                    break;
                };
                let member = members[(next + skip) % members.len()].0;
                next = (next + skip + 1) % members.len();
                if let Some(list) = assignment.get_mut(member) {
                    list.push(TopicPartition::new(topic, p));
                }
            }
        }
        assignment
    }
}
