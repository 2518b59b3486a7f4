//! The assignor trait, the subscription a member sends, and what the assignors share.
//!
//! The public behaviour (inputs that do not apply, order) is documented on
//! [`crate::group`].

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::topic_partition::TopicPartition;

mod cooperative_sticky;
mod range;
mod round_robin;
mod sticky;

pub use cooperative_sticky::CooperativeStickyAssignor;
pub use range::RangeAssignor;
pub use round_robin::RoundRobinAssignor;
pub use sticky::StickyAssignor;

/// How a group moves partitions between members in a rebalance (Kafka's `RebalanceProtocol`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RebalanceProtocol {
    /// Every member gives up all its partitions, then receives its new assignment.
    Eager,
    /// Members keep the partitions that stay theirs; a partition changing owner is first
    /// revoked from the old owner and given to the new one in a follow-up rebalance.
    Cooperative,
}

/// A partition assignor: decides which member of a group owns which partition.
///
/// Implementations are pure functions of their arguments; logbus's four give Kafka's
/// assignments for the same inputs. Implement it to give a group an assignor of your own.
///
/// # Examples
///
/// ```
/// use std::collections::BTreeMap;
/// use logbus::group::{PartitionAssignor, MemberSubscription, TopicPartition};
///
/// /// Gives every partition to the member whose id sorts first.
/// struct FirstTakesAll;
///
/// impl PartitionAssignor for FirstTakesAll {
///     fn name(&self) -> &str {
///         "first-takes-all"
///     }
///
///     fn assign(
///         &self,
///         partitions_per_topic: &BTreeMap<String, u32>,
///         subscriptions: &BTreeMap<String, MemberSubscription>,
///     ) -> BTreeMap<String, Vec<TopicPartition>> {
///         let mut assignment: BTreeMap<_, _> =
///             subscriptions.keys().map(|m| (m.clone(), Vec::new())).collect();
///         if let Some(first) = assignment.values_mut().next() {
///             for (topic, &count) in partitions_per_topic {
///                 first.extend((0..count).map(|p| TopicPartition::new(topic.as_str(), p)));
///             }
///         }
///         assignment
///     }
/// }
///
/// let members = BTreeMap::from([("a".to_string(), MemberSubscription::new(["t"]))]);
/// let assignment = FirstTakesAll.assign(&BTreeMap::from([("t".to_string(), 2)]), &members);
/// assert_eq!(assignment["a"].len(), 2);
/// assert!(!FirstTakesAll.supports_cooperative());
/// ```
pub trait PartitionAssignor: Send + Sync {
    /// The assignor's protocol name, as members announce it when they join
    /// (`"range"`, `"roundrobin"`, `"sticky"`, `"cooperative-sticky"` for Kafka's).
    fn name(&self) -> &str;

    /// The rebalance protocols this assignor's assignments are valid for, preferred first.
    /// The default is eager only.
    fn supported_protocols(&self) -> &[RebalanceProtocol] {
        &[RebalanceProtocol::Eager]
    }

    /// Whether a group using this assignor may rebalance cooperatively.
    fn supports_cooperative(&self) -> bool {
        self.supported_protocols()
            .contains(&RebalanceProtocol::Cooperative)
    }

    /// Assigns partitions to members.
    ///
    /// `partitions_per_topic` gives each topic's partition count; `subscriptions` maps each
    /// member id to its [`MemberSubscription`]. The result has an entry for every member id, with
    /// an empty list for a member that gets nothing. See [`group`](crate::group#inputs-are-never-an-error)
    /// for how inputs that do not apply are handled (they are skipped, never an error).
    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, u32>,
        subscriptions: &BTreeMap<String, MemberSubscription>,
    ) -> BTreeMap<String, Vec<TopicPartition>>;
}

/// What one member tells the assignor (Kafka's `ConsumerPartitionAssignor.Subscription`): the
/// topics it subscribes to and what it owned.
///
/// `owned_partitions` and `generation` are what the sticky assignors build on (Kafka's
/// `ownedPartitions` and `generationId`, or the sticky assignor's user data): the partitions
/// the member owned in generation `generation`. When several members claim the same
/// partition, the claim of the highest generation wins; two claims at that same generation
/// cancel each other, and neither member keeps the partition. `None` is an unknown
/// generation (Kafka's `-1`), lower than any known one. `group_instance_id` marks a static
/// member; the range and round-robin assignors order static members first, by instance id.
///
/// # Examples
///
/// ```
/// use logbus::group::{MemberSubscription, TopicPartition};
///
/// let sub = MemberSubscription::new(["orders", "payments"])
///     .with_owned_partitions([TopicPartition::new("orders", 0)])
///     .with_generation(7)
///     .with_group_instance_id("worker-1");
/// assert!(sub.topics.contains("payments"));
/// assert_eq!(sub.generation, Some(7));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemberSubscription {
    /// The topics the member subscribes to.
    pub topics: BTreeSet<String>,
    /// The partitions the member owned before this rebalance, in the order it reports them.
    pub owned_partitions: Vec<TopicPartition>,
    /// The generation in which the member owned `owned_partitions`; `None` if unknown.
    pub generation: Option<i32>,
    /// The member's static identity (Kafka's `group.instance.id`), if any.
    pub group_instance_id: Option<String>,
}

impl MemberSubscription {
    /// A subscription to `topics`, owning nothing, of unknown generation, not static.
    pub fn new<I, S>(topics: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        MemberSubscription {
            topics: topics.into_iter().map(Into::into).collect(),
            ..MemberSubscription::default()
        }
    }

    /// Sets the partitions the member owned.
    pub fn with_owned_partitions(
        mut self,
        owned: impl IntoIterator<Item = TopicPartition>,
    ) -> Self {
        self.owned_partitions = owned.into_iter().collect();
        self
    }

    /// Sets the generation in which the member owned its partitions.
    pub fn with_generation(mut self, generation: i32) -> Self {
        self.generation = Some(generation);
        self
    }

    /// Makes the member static, with this group instance id.
    pub fn with_group_instance_id(mut self, id: impl Into<String>) -> Self {
        self.group_instance_id = Some(id.into());
        self
    }
}

/// Java's `String.compareTo`: lexicographic by UTF-16 code unit.
pub(super) fn java_cmp(a: &str, b: &str) -> Ordering {
    if a.is_ascii() && b.is_ascii() {
        return a.cmp(b);
    }
    a.encode_utf16().cmp(b.encode_utf16())
}

/// The order in which a Java `HashMap` built by inserting `keys` (into a default-sized map)
/// iterates them: by bucket, the bucket being the spread `String.hashCode` masked by the
/// table size. Kafka's assignors iterate such maps (members, topics) and their results depend
/// on it; within a bucket Java keeps insertion order, for which Java string order stands in.
pub(super) fn java_hash_map_order<'a>(keys: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut keys: Vec<&'a str> = keys.into_iter().collect();
    // The table doubles from 16 buckets whenever it is more than three quarters full.
    let mut buckets: u64 = 16;
    while keys.len() as u64 > buckets / 4 * 3 {
        buckets *= 2;
    }
    let bucket = |key: &str| {
        let hash = key.encode_utf16().fold(0u32, |h, unit| {
            h.wrapping_mul(31).wrapping_add(u32::from(unit))
        });
        u64::from(hash ^ (hash >> 16)) & (buckets - 1)
    };
    keys.sort_by(|a, b| bucket(a).cmp(&bucket(b)).then_with(|| java_cmp(a, b)));
    keys
}

/// Kafka's `MemberInfo` order: static members first, by group instance id, then the others by
/// member id. Kafka's sort is stable over a `HashMap`'s order; ties (two members with one
/// instance id) fall back to the member id here.
pub(super) fn member_info_cmp(
    a: (&str, &MemberSubscription),
    b: (&str, &MemberSubscription),
) -> Ordering {
    match (&a.1.group_instance_id, &b.1.group_instance_id) {
        (Some(x), Some(y)) => java_cmp(x, y).then_with(|| java_cmp(a.0, b.0)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => java_cmp(a.0, b.0),
    }
}

/// The topics an assignment covers: those some member subscribes to and that have at least
/// one partition (Kafka's `AbstractPartitionAssignor` builds `partitionsPerTopic` so), in
/// Java string order, with a dense numbering of their partitions.
pub(super) struct Topics<'a> {
    /// Names, in Java string order; a topic's index is its position here.
    pub names: Vec<&'a str>,
    /// Partition count of each topic.
    pub counts: Vec<u32>,
    /// `offsets[t]` is the dense index of partition 0 of topic `t`; `offsets[len]` the total.
    pub offsets: Vec<usize>,
    index: HashMap<&'a str, u32>,
}

impl<'a> Topics<'a> {
    pub fn new(
        partitions_per_topic: &'a BTreeMap<String, u32>,
        subscriptions: &BTreeMap<String, MemberSubscription>,
    ) -> Self {
        let mut names: Vec<&'a str> = partitions_per_topic
            .iter()
            .filter(|&(topic, &count)| {
                count > 0 && subscriptions.values().any(|s| s.topics.contains(topic))
            })
            .map(|(topic, _)| topic.as_str())
            .collect();
        names.sort_by(|a, b| java_cmp(a, b));
        let counts: Vec<u32> = names.iter().map(|t| partitions_per_topic[*t]).collect();
        let mut offsets = Vec::with_capacity(names.len() + 1);
        let mut total = 0usize;
        for &count in &counts {
            offsets.push(total);
            total += count as usize;
        }
        offsets.push(total);
        let index = names
            .iter()
            .enumerate()
            .map(|(i, t)| (*t, i as u32))
            .collect();
        Topics {
            names,
            counts,
            offsets,
            index,
        }
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn total_partitions(&self) -> usize {
        self.offsets[self.names.len()]
    }

    /// The index of `topic`, if it is covered.
    pub fn get(&self, topic: &str) -> Option<u32> {
        self.index.get(topic).copied()
    }

    /// The dense index of `tp`, if its topic is covered and the partition exists.
    pub fn dense(&self, tp: &TopicPartition) -> Option<usize> {
        let t = self.get(&tp.topic)? as usize;
        (tp.partition < self.counts[t]).then(|| self.offsets[t] + tp.partition as usize)
    }

    /// The topic index of a dense partition index.
    pub fn topic_of(&self, dense: usize) -> u32 {
        (self.offsets.partition_point(|&o| o <= dense) - 1) as u32
    }

    /// The `TopicPartition` of a dense partition index.
    pub fn partition(&self, dense: usize) -> TopicPartition {
        let t = self.topic_of(dense) as usize;
        TopicPartition::new(self.names[t], (dense - self.offsets[t]) as u32)
    }
}

/// An empty assignment: every member with no partitions.
pub(super) fn empty_assignment(
    subscriptions: &BTreeMap<String, MemberSubscription>,
) -> BTreeMap<String, Vec<TopicPartition>> {
    subscriptions
        .keys()
        .map(|member| (member.clone(), Vec::new()))
        .collect()
}
