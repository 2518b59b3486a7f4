//! Kafka's range assignor (`RangeAssignor`, protocol name `range`).

use std::collections::BTreeMap;

use super::{
    empty_assignment, java_hash_map_order, member_info_cmp, MemberSubscription, PartitionAssignor,
    Topics,
};
use crate::topic_partition::TopicPartition;

/// Kafka's range assignor: works topic by topic.
///
/// For each topic, its subscribers are ordered (static members first by group instance id,
/// then the others by member id) and its partitions split into contiguous ranges in that
/// order: with `n` partitions and `k` subscribers each gets `n / k`, and the first `n % k`
/// get one more. Topics are independent, so with many topics the first members carry the
/// extra partitions of every topic. Each member's list is ordered by topic, then partition.
///
/// Kafka's rack-aware variant (consumer `client.rack` against replica racks) is not
/// implemented: logbus has no replicas.
///
/// # Examples
///
/// Kafka's own example: two members, two topics of three partitions.
///
/// ```
/// use std::collections::BTreeMap;
/// use logbus::group::{PartitionAssignor, RangeAssignor, MemberSubscription, TopicPartition};
///
/// let partitions = BTreeMap::from([("t0".to_string(), 3), ("t1".to_string(), 3)]);
/// let members = BTreeMap::from([
///     ("c0".to_string(), MemberSubscription::new(["t0", "t1"])),
///     ("c1".to_string(), MemberSubscription::new(["t0", "t1"])),
/// ]);
/// let a = RangeAssignor.assign(&partitions, &members);
/// let tp = TopicPartition::new;
/// assert_eq!(a["c0"], [tp("t0", 0), tp("t0", 1), tp("t1", 0), tp("t1", 1)]);
/// assert_eq!(a["c1"], [tp("t0", 2), tp("t1", 2)]);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct RangeAssignor;

impl PartitionAssignor for RangeAssignor {
    fn name(&self) -> &str {
        "range"
    }

    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, u32>,
        subscriptions: &BTreeMap<String, MemberSubscription>,
    ) -> BTreeMap<String, Vec<TopicPartition>> {
        let mut assignment = empty_assignment(subscriptions);
        let topics = Topics::new(partitions_per_topic, subscriptions);
        // Kafka walks the topics in its `HashMap`'s order, which orders each member's list.
        for topic in java_hash_map_order(topics.names.iter().copied()) {
            let Some(t) = topics.get(topic) else { continue };
            let mut members: Vec<(&str, &MemberSubscription)> = subscriptions
                .iter()
                .filter(|(_, s)| s.topics.contains(topic))
                .map(|(m, s)| (m.as_str(), s))
                .collect();
            members.sort_by(|a, b| member_info_cmp(*a, *b));
            let count = u64::from(topics.counts[t as usize]);
            // `members` is not empty: `Topics` keeps only subscribed topics.
            let k = members.len() as u64;
            let (per_member, with_extra) = (count / k, count % k);
            for (i, (member, _)) in members.iter().enumerate() {
                let i = i as u64;
                let start = per_member * i + i.min(with_extra);
                let len = per_member + u64::from(i < with_extra);
                if let Some(list) = assignment.get_mut(*member) {
                    // start + len <= count, which is a u32.
                    list.extend((start..start + len).map(|p| TopicPartition::new(topic, p as u32)));
                }
            }
        }
        assignment
    }
}
