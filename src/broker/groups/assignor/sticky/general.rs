//! The sticky assignment when members subscribe to different topics (Kafka's
//! `GeneralAssignmentBuilder`, without its rack matching).
//!
//! 1. Members keep the partitions they own and still subscribe to.
//! 2. Free partitions, topics with the fewest possible takers first, go one by one to the
//!    least-loaded member subscribed to their topic (ties by member id).
//! 3. Balancing: partitions whose topic has two or more possible takers are visited in the
//!    same order, repeatedly, while the assignment is not balanced; a partition whose owner
//!    holds two or more more than its owner of an older generation returns there, else one
//!    whose owner holds two or more more than the least-loaded possible taker moves there
//!    (through [`Movements`], which keeps one topic's movements one-way). If the balancing
//!    moved owned partitions without lowering the balance score (the sum of count
//!    differences over all pairs of members), it is undone.

use std::collections::{BTreeSet, HashMap};

use super::movements::Movements;
use super::{generation, remove_first, Claims};
use crate::broker::groups::assignor::{MemberSubscription, Topics};

/// Returns the dense partitions per member.
pub(super) fn assign(
    topics: &Topics<'_>,
    subs: &[&MemberSubscription],
    claims: Claims,
    order: &[usize],
) -> Vec<Vec<usize>> {
    let Claims {
        owned,
        max_generation,
        ..
    } = claims;
    let mut state = State::new(topics, subs, owned);

    // The owner of an older generation of each partition: the claim of the highest
    // generation below the maximum (the first one Kafka visits on ties).
    let mut previous: HashMap<usize, (usize, i32)> = HashMap::new();
    for &m in order {
        let g = generation(subs[m]);
        if g >= max_generation {
            continue;
        }
        for d in subs[m]
            .owned_partitions
            .iter()
            .filter_map(|tp| topics.dense(tp))
        {
            match previous.get(&d) {
                Some(&(_, pg)) if g <= pg => {}
                _ => {
                    previous.insert(d, (m, g));
                }
            }
        }
    }

    // Topics with the fewest possible takers first, then by name; partitions by number.
    let mut topic_order: Vec<u32> = (0..topics.len() as u32).collect();
    topic_order.sort_by_key(|&t| (state.takers[t as usize], t));
    let sorted_partitions: Vec<usize> = topic_order
        .iter()
        .flat_map(|&t| topics.offsets[t as usize]..topics.offsets[t as usize + 1])
        .collect();
    let unassigned: Vec<usize> = sorted_partitions
        .iter()
        .copied()
        .filter(|&d| state.owner[d].is_none())
        .collect();

    let initializing = state.assignment.iter().all(Vec::is_empty);
    for &d in &unassigned {
        let t = topics.topic_of(d);
        if let Some(m) = state.least_loaded_taker(t) {
            state.give(d, m);
        }
    }

    // Partitions of topics with a single possible taker cannot move, nor can members that
    // hold all they could and only such partitions.
    let movable = |d: &usize| state.takers[topics.topic_of(*d) as usize] >= 2;
    let sorted_movable: Vec<usize> = sorted_partitions.iter().copied().filter(movable).collect();
    let unassigned_movable: Vec<usize> = unassigned.iter().copied().filter(movable).collect();
    for m in 0..subs.len() {
        let can_take_more = state.assignment[m].len() < state.capacity(m);
        let holds_movable = state.assignment[m]
            .iter()
            .any(|&d| state.takers[topics.topic_of(d) as usize] >= 2);
        if !can_take_more && !holds_movable {
            state.fix(m);
        }
    }

    let before = (state.assignment.clone(), state.owner.clone());
    let score_before = state.balance_score();
    if !state.revocation_required {
        state.rebalance(&unassigned_movable, &previous);
    }
    let moved = state.rebalance(&sorted_movable, &previous);
    if !initializing && moved && state.balance_score() >= score_before {
        (state.assignment, state.owner) = before;
    }
    state.assignment
}

struct State<'t, 'a> {
    topics: &'t Topics<'a>,
    /// Per member, the topics it subscribes to that exist, sorted.
    member_topics: Vec<Vec<u32>>,
    /// Per topic, how many members subscribe to it.
    takers: Vec<usize>,
    assignment: Vec<Vec<usize>>,
    owner: Vec<Option<usize>>,
    /// Members that take part in balancing, by (partition count, member index).
    by_load: BTreeSet<(usize, usize)>,
    fixed: Vec<bool>,
    movements: Movements,
    /// Some member owned a partition of a topic it no longer subscribes to.
    revocation_required: bool,
}

impl<'t, 'a> State<'t, 'a> {
    fn new(topics: &'t Topics<'a>, subs: &[&MemberSubscription], owned: Vec<Vec<usize>>) -> Self {
        let member_topics: Vec<Vec<u32>> = subs
            .iter()
            .map(|s| {
                let mut ts: Vec<u32> = s.topics.iter().filter_map(|t| topics.get(t)).collect();
                ts.sort_unstable();
                ts
            })
            .collect();
        let mut takers = vec![0; topics.len()];
        for ts in &member_topics {
            for &t in ts {
                takers[t as usize] += 1;
            }
        }
        let mut owner = vec![None; topics.total_partitions()];
        let mut revocation_required = false;
        let mut assignment = owned;
        for (m, list) in assignment.iter_mut().enumerate() {
            list.retain(|&d| {
                let subscribed = member_topics[m].binary_search(&topics.topic_of(d)).is_ok();
                revocation_required |= !subscribed;
                subscribed
            });
            for &d in list.iter() {
                owner[d] = Some(m);
            }
        }
        let by_load = assignment
            .iter()
            .enumerate()
            .map(|(m, list)| (list.len(), m))
            .collect();
        State {
            topics,
            member_topics,
            takers,
            fixed: vec![false; assignment.len()],
            assignment,
            owner,
            by_load,
            movements: Movements::default(),
            revocation_required,
        }
    }

    fn subscribes(&self, m: usize, t: u32) -> bool {
        self.member_topics[m].binary_search(&t).is_ok()
    }

    /// How many partitions member `m` could hold at most.
    fn capacity(&self, m: usize) -> usize {
        self.member_topics[m]
            .iter()
            .map(|&t| self.topics.counts[t as usize] as usize)
            .sum()
    }

    /// The balancing member with the fewest partitions that subscribes to `t`.
    fn least_loaded_taker(&self, t: u32) -> Option<usize> {
        self.by_load
            .iter()
            .map(|&(_, m)| m)
            .find(|&m| self.subscribes(m, t))
    }

    fn fix(&mut self, m: usize) {
        self.by_load.remove(&(self.assignment[m].len(), m));
        self.fixed[m] = true;
    }

    fn give(&mut self, d: usize, m: usize) {
        self.by_load.remove(&(self.assignment[m].len(), m));
        self.assignment[m].push(d);
        self.owner[d] = Some(m);
        self.by_load.insert((self.assignment[m].len(), m));
    }

    /// Kafka's shortcut in `isBalanced`: counts within one of each other.
    fn counts_within_one(&self) -> bool {
        match (self.by_load.first(), self.by_load.last()) {
            (Some(&(min, _)), Some(&(max, _))) => max <= min + 1,
            _ => true,
        }
    }

    /// The sum over all pairs of balancing members of their count difference.
    fn balance_score(&self) -> u64 {
        // `by_load` is sorted by count: the i-th smallest count is subtracted by the larger
        // ones after it and adds to the difference with the smaller ones before it.
        let n = self.by_load.len() as u64;
        self.by_load
            .iter()
            .enumerate()
            .map(|(i, &(count, _))| (count as u64, i as u64))
            .fold(0i128, |acc, (count, i)| {
                acc + i128::from(count) * (2 * i128::from(i) - i128::from(n) + 1)
            })
            .max(0) as u64
    }

    /// Moves partitions of `partitions`, in passes, until a pass moves nothing. Returns
    /// whether anything moved.
    fn rebalance(&mut self, partitions: &[usize], previous: &HashMap<usize, (usize, i32)>) -> bool {
        // Kafka has no bound; this one only guards against a cycle of moves.
        let mut budget = 8 * partitions.len() + 64;
        let mut moved = false;
        loop {
            let mut modified = false;
            for &d in partitions {
                // When every count is within one of the others no move applies; Kafka's
                // full balance check ends the pass in exactly the cases where no move would
                // apply either, so the cheap shortcut alone gives the same result.
                if self.counts_within_one() || budget == 0 {
                    break;
                }
                let Some(current) = self.owner[d] else {
                    continue;
                };
                let t = self.topics.topic_of(d);
                let load = self.assignment[current].len();
                // Kafka sends a partition back to its older owner even when that member no
                // longer subscribes to the topic; logbus requires that it still does.
                if let Some(&(prev, _)) = previous.get(&d) {
                    if !self.fixed[prev]
                        && self.subscribes(prev, t)
                        && load > self.assignment[prev].len() + 1
                    {
                        self.reassign(d, t, prev);
                        budget -= 1;
                        moved = true;
                        modified = true;
                        continue;
                    }
                }
                if let Some(target) = self.least_loaded_taker(t) {
                    if load > self.assignment[target].len() + 1 {
                        self.reassign(d, t, target);
                        budget -= 1;
                        moved = true;
                        modified = true;
                    }
                }
            }
            if !modified {
                return moved;
            }
        }
    }

    fn reassign(&mut self, d: usize, t: u32, new: usize) {
        let Some(old) = self.owner[d] else { return };
        let actual = self.movements.actual_partition_to_move(d, t, old, new);
        let Some(actual_old) = self.owner[actual] else {
            return;
        };
        if actual_old == new {
            return;
        }
        self.by_load
            .remove(&(self.assignment[actual_old].len(), actual_old));
        self.by_load.remove(&(self.assignment[new].len(), new));
        self.movements.record_move(actual, t, actual_old, new);
        remove_first(&mut self.assignment[actual_old], actual);
        self.assignment[new].push(actual);
        self.owner[actual] = Some(new);
        self.by_load.insert((self.assignment[new].len(), new));
        self.by_load
            .insert((self.assignment[actual_old].len(), actual_old));
    }
}
