//! Kafka's sticky assignors' shared engine (Kafka's `AbstractStickyAssignor`) and the eager
//! [`StickyAssignor`].
//!
//! The engine follows Kafka's algorithm step by step, because Kafka's users (and Kafka's
//! tests) depend on its exact results, not only on its properties:
//! 1. [`Claims`]: the partitions each member owned, after the generation rule settles
//!    conflicting claims (highest generation wins; a tie at that generation drops the
//!    partition from both). Claims are read in the order Kafka reads them.
//! 2. When all members subscribe to the same topics, the *constrained* algorithm
//!    ([`constrained`]): keep owned partitions up to a quota (`floor` or `ceil` of
//!    partitions / members), then deal the rest round-robin to the members below quota.
//! 3. Otherwise the *general* algorithm ([`general`]): keep owned partitions, give each free
//!    one to the least-loaded member subscribed to its topic, then move partitions from
//!    members with two or more above a possible taker until none can move; partitions prefer
//!    to return to their owner of an older generation, and movements of one topic between two
//!    members are kept one-way ([`movements`]).

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{
    empty_assignment, java_cmp, java_hash_map_order, MemberSubscription, PartitionAssignor, Topics,
};
use crate::topic_partition::TopicPartition;

mod constrained;
mod general;
mod movements;

/// Kafka's sticky assignor (eager protocol).
///
/// Its goals, in order: an assignment as balanced as possible (with identical subscriptions,
/// member counts differ by at most one; otherwise no partition could move from a member to
/// another subscribed to its topic holding two or more fewer), and as few partitions as
/// possible changing owner from the previous assignment, which each member reports in its
/// [`MemberSubscription`] (`owned_partitions` and `generation`).
///
/// Under the eager protocol every member gives up all its partitions before the new
/// assignment, so a partition may move from one member to another in a single rebalance.
/// Results follow Kafka's algorithm (see [`CooperativeStickyAssignor`] for the cooperative
/// variant). Kafka's rack-aware matching is not implemented (logbus has no replicas).
///
/// Where Kafka's algorithm depends on a `HashMap`'s iteration order, members are taken in
/// that same order (see the [`group`](crate::group) docs). Two departures from Kafka, both
/// where Kafka would assign a partition to a member not subscribed to its topic: Kafka takes
/// members with no topics that it happens to visit first as subscribed like the others
/// (logbus compares subscriptions exactly), and it may return a partition to its owner of an
/// older generation that no longer subscribes to the topic (logbus does not). One safeguard Kafka lacks: the balancing loop stops after a number of
/// moves proportional to the partition count (never reached in Kafka's tests or logbus's).
///
/// [`CooperativeStickyAssignor`]: crate::group::CooperativeStickyAssignor
///
/// # Examples
///
/// A member leaves; the others keep what they had and share its partitions.
///
/// ```
/// use std::collections::BTreeMap;
/// use logbus::group::{PartitionAssignor, StickyAssignor, MemberSubscription, TopicPartition};
///
/// let partitions = BTreeMap::from([("orders".to_string(), 6)]);
/// let tp = |p| TopicPartition::new("orders", p);
/// let mut members = BTreeMap::new();
/// for (id, owned) in [("a", [0, 1]), ("b", [2, 3]), ("c", [4, 5])] {
///     let sub = MemberSubscription::new(["orders"])
///         .with_owned_partitions(owned.map(tp))
///         .with_generation(1);
///     members.insert(id.to_string(), sub);
/// }
/// members.remove("c");
/// let a = StickyAssignor.assign(&partitions, &members);
/// assert_eq!(a["a"], [tp(0), tp(1), tp(4)]);
/// assert_eq!(a["b"], [tp(2), tp(3), tp(5)]);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct StickyAssignor;

impl PartitionAssignor for StickyAssignor {
    fn name(&self) -> &str {
        "sticky"
    }

    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, u32>,
        subscriptions: &BTreeMap<String, MemberSubscription>,
    ) -> BTreeMap<String, Vec<TopicPartition>> {
        Engine::new(partitions_per_topic, subscriptions)
            .run()
            .into_map()
    }
}

/// The members, in Java string order of their ids (index = position), and the topics.
pub(super) struct Engine<'a> {
    pub topics: Topics<'a>,
    pub ids: Vec<&'a str>,
    pub subs: Vec<&'a MemberSubscription>,
    /// Member indices in the order Kafka iterates its `HashMap` of subscriptions.
    pub hash_order: Vec<usize>,
    subscriptions: &'a BTreeMap<String, MemberSubscription>,
}

/// An assignment by dense partition index per member index.
pub(super) struct Outcome<'e, 'a> {
    pub engine: &'e Engine<'a>,
    pub assignment: Vec<Vec<usize>>,
    /// Partitions given to a member other than a current claimant, as (partition, member):
    /// computed by the constrained algorithm; `None` after the general one (Kafka's
    /// `partitionsTransferringOwnership`).
    pub transferring: Option<Vec<(usize, usize)>>,
}

impl<'a> Engine<'a> {
    pub fn new(
        partitions_per_topic: &'a BTreeMap<String, u32>,
        subscriptions: &'a BTreeMap<String, MemberSubscription>,
    ) -> Self {
        let mut members: Vec<(&'a str, &'a MemberSubscription)> =
            subscriptions.iter().map(|(m, s)| (m.as_str(), s)).collect();
        members.sort_by(|a, b| java_cmp(a.0, b.0));
        let ids: Vec<&'a str> = members.iter().map(|m| m.0).collect();
        let position: HashMap<&str, usize> = ids.iter().enumerate().map(|(i, m)| (*m, i)).collect();
        let hash_order = java_hash_map_order(ids.iter().copied())
            .into_iter()
            .filter_map(|m| position.get(m).copied())
            .collect();
        Engine {
            topics: Topics::new(partitions_per_topic, subscriptions),
            hash_order,
            ids,
            subs: members.iter().map(|m| m.1).collect(),
            subscriptions,
        }
    }

    pub fn run(&self) -> Outcome<'_, 'a> {
        if self.ids.is_empty() {
            return Outcome {
                engine: self,
                assignment: Vec::new(),
                transferring: Some(Vec::new()),
            };
        }
        let claims = Claims::resolve(&self.topics, &self.subs, &self.hash_order);
        let all_equal = self.subs.windows(2).all(|w| w[0].topics == w[1].topics);
        if all_equal {
            let (assignment, transferring) =
                constrained::assign(&self.topics, claims, &self.hash_order);
            Outcome {
                engine: self,
                assignment,
                transferring: Some(transferring),
            }
        } else {
            Outcome {
                engine: self,
                assignment: general::assign(&self.topics, &self.subs, claims, &self.hash_order),
                transferring: None,
            }
        }
    }
}

impl Outcome<'_, '_> {
    pub fn into_map(self) -> BTreeMap<String, Vec<TopicPartition>> {
        let mut map = empty_assignment(self.engine.subscriptions);
        for (m, partitions) in self.assignment.into_iter().enumerate() {
            if let Some(list) = map.get_mut(self.engine.ids[m]) {
                list.extend(
                    partitions
                        .into_iter()
                        .map(|d| self.engine.topics.partition(d)),
                );
            }
        }
        map
    }
}

/// The previously owned partitions after the generation rule (Kafka's
/// `allSubscriptionsEqual` bookkeeping).
pub(super) struct Claims {
    /// Per member, the owned partitions it keeps a claim on, in the order it reported them.
    pub owned: Vec<Vec<usize>>,
    /// Partitions that two members claimed in one generation at some point.
    pub multiple: HashSet<usize>,
    /// The highest generation any member reported (`-1` when none did).
    pub max_generation: i32,
}

impl Claims {
    fn resolve(topics: &Topics<'_>, subs: &[&MemberSubscription], order: &[usize]) -> Self {
        let mut owned: Vec<Vec<usize>> = vec![Vec::new(); subs.len()];
        let mut multiple = HashSet::new();
        let mut max_generation = -1;
        let mut holder: HashMap<usize, usize> = HashMap::new();
        for &m in order {
            let sub = subs[m];
            let generation = generation(sub);
            max_generation = max_generation.max(generation);
            for tp in &sub.owned_partitions {
                let Some(d) = topics.dense(tp) else { continue };
                let Some(&other) = holder.get(&d) else {
                    owned[m].push(d);
                    holder.insert(d, m);
                    continue;
                };
                let other_generation = generation_of(subs, other);
                if generation >= other_generation {
                    remove_first(&mut owned[other], d);
                    holder.insert(d, m);
                    if generation == other_generation {
                        multiple.insert(d);
                    } else {
                        owned[m].push(d);
                    }
                }
            }
        }
        Claims {
            owned,
            multiple,
            max_generation,
        }
    }
}

/// A member's generation, `-1` (Kafka's `DEFAULT_GENERATION`) when unknown.
pub(super) fn generation(sub: &MemberSubscription) -> i32 {
    sub.generation.unwrap_or(-1)
}

fn generation_of(subs: &[&MemberSubscription], m: usize) -> i32 {
    subs.get(m).map_or(-1, |s| generation(s))
}

/// Removes the first occurrence of `d` (Java's `List.remove(Object)`).
pub(super) fn remove_first(list: &mut Vec<usize>, d: usize) {
    if let Some(i) = list.iter().position(|&x| x == d) {
        list.remove(i);
    }
}
