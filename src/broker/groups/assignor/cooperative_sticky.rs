//! Kafka's cooperative sticky assignor (`CooperativeStickyAssignor`, protocol name
//! `cooperative-sticky`).

use std::collections::{BTreeMap, HashSet};

use super::sticky::Engine;
use super::{MemberSubscription, PartitionAssignor, RebalanceProtocol};
use crate::topic_partition::TopicPartition;

/// Kafka's cooperative sticky assignor: the [`StickyAssignor`]'s assignment, made safe for
/// the cooperative protocol.
///
/// Under the cooperative protocol members keep consuming the partitions that stay theirs
/// during a rebalance, so a partition may not be handed to a new owner in the same rebalance
/// in which its old owner gives it up. This assignor computes the sticky assignment and then
/// leaves out every partition that would change owner while another member still claims it
/// (in its `owned_partitions`): that partition is unassigned in this round, its owner learns
/// that it is revoked, and the follow-up rebalance gives it to its new owner. Partitions that
/// nobody claims (new ones, those of members that left) are assigned at once.
///
/// Each member's `generation` is that of the assignment it reports owning, as in Kafka's
/// protocol (v2 and later, or the assignor's user data before that).
///
/// [`StickyAssignor`]: crate::group::StickyAssignor
///
/// # Examples
///
/// A member joins a group of one: the partitions moving to it are first only revoked.
///
/// ```
/// use std::collections::BTreeMap;
/// use logbus::group::{
///     CooperativeStickyAssignor, PartitionAssignor, MemberSubscription, TopicPartition,
/// };
///
/// let partitions = BTreeMap::from([("orders".to_string(), 4)]);
/// let tp = |p| TopicPartition::new("orders", p);
/// let owner = MemberSubscription::new(["orders"])
///     .with_owned_partitions((0..4).map(tp))
///     .with_generation(1);
/// let mut members = BTreeMap::from([
///     ("a".to_string(), owner),
///     ("b".to_string(), MemberSubscription::new(["orders"]).with_generation(1)),
/// ]);
/// let assignor = CooperativeStickyAssignor;
/// let first = assignor.assign(&partitions, &members);
/// assert_eq!(first["a"], [tp(0), tp(1)]); // a gives up 2 and 3...
/// assert!(first["b"].is_empty()); // ...which nobody gets yet.
///
/// // The follow-up rebalance, once `a` reports what it still owns:
/// for (member, owned) in &first {
///     let sub = members.get_mut(member).unwrap();
///     *sub = sub.clone().with_owned_partitions(owned.clone()).with_generation(2);
/// }
/// let second = assignor.assign(&partitions, &members);
/// assert_eq!(second["b"], [tp(2), tp(3)]);
/// assert!(assignor.supports_cooperative());
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct CooperativeStickyAssignor;

impl PartitionAssignor for CooperativeStickyAssignor {
    fn name(&self) -> &str {
        "cooperative-sticky"
    }

    fn supported_protocols(&self) -> &[RebalanceProtocol] {
        &[RebalanceProtocol::Cooperative, RebalanceProtocol::Eager]
    }

    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, u32>,
        subscriptions: &BTreeMap<String, MemberSubscription>,
    ) -> BTreeMap<String, Vec<TopicPartition>> {
        let engine = Engine::new(partitions_per_topic, subscriptions);
        let mut outcome = engine.run();
        let transferring = match outcome.transferring.take() {
            Some(transferring) => transferring,
            None => {
                // The general algorithm does not track them: a partition is transferring if
                // its new owner did not report it and some member reports it but loses it.
                let owned: Vec<HashSet<usize>> = engine
                    .subs
                    .iter()
                    .map(|s| {
                        let topics = &engine.topics;
                        s.owned_partitions
                            .iter()
                            .filter_map(|tp| topics.dense(tp))
                            .collect()
                    })
                    .collect();
                let mut revoked = HashSet::new();
                for (m, assigned) in outcome.assignment.iter().enumerate() {
                    let assigned: HashSet<usize> = assigned.iter().copied().collect();
                    revoked.extend(owned[m].difference(&assigned).copied());
                }
                let mut transferring = Vec::new();
                for (m, assigned) in outcome.assignment.iter().enumerate() {
                    transferring.extend(
                        assigned
                            .iter()
                            .filter(|d| !owned[m].contains(d) && revoked.contains(d))
                            .map(|&d| (d, m)),
                    );
                }
                transferring
            }
        };
        for (d, m) in transferring {
            if let Some(list) = outcome.assignment.get_mut(m) {
                if let Some(i) = list.iter().position(|&x| x == d) {
                    list.remove(i);
                }
            }
        }
        outcome.into_map()
    }
}
