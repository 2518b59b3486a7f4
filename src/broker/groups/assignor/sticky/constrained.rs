//! The sticky assignment when every member subscribes to the same topics (Kafka's
//! `ConstrainedAssignmentBuilder`, without its rack matching).
//!
//! With `P` partitions and `N` members each member gets `floor(P/N)` (min quota) or
//! `ceil(P/N)` (max quota) partitions, and exactly `P % N` members get the max quota:
//! 1. Each member keeps what it owned up to its quota, taking its owned partitions by
//!    partition number, then topic, so that what it keeps spans its topics evenly. The first
//!    members (in Kafka's `HashMap` order) owning at least the max quota keep the max quota, until
//!    `P % N` members have it; the others keep the min quota.
//! 2. The free partitions (by topic, then number) are dealt round-robin, first to the
//!    members below the min quota, then one each to members at the min quota until `P % N`
//!    members have the max quota.

use std::collections::VecDeque;

use super::Claims;
use crate::broker::groups::assignor::Topics;

/// Returns the assignment (dense partitions per member) and the partitions handed to a new
/// owner although some member still claimed them, as (partition, new owner). `order` is the
/// order in which Kafka visits the members (its `HashMap`'s).
pub(super) fn assign(
    topics: &Topics<'_>,
    claims: Claims,
    order: &[usize],
) -> (Vec<Vec<usize>>, Vec<(usize, usize)>) {
    let Claims {
        mut owned,
        multiple,
        ..
    } = claims;
    let members = owned.len();
    let total = topics.total_partitions();
    let min_quota = total / members;
    let max_quota = total.div_ceil(members);
    let expected_over_min = total % members;
    let mut current_over_min = 0;

    let mut assignment: Vec<Vec<usize>> = vec![Vec::new(); members];
    let mut assigned = vec![false; total];
    let mut revoked = vec![false; total];
    let mut under_min: Vec<usize> = Vec::new();
    let mut at_min: VecDeque<usize> = VecDeque::new();

    for &m in order {
        let mut own = std::mem::take(&mut owned[m]);
        own.sort_by_key(|&d| {
            let t = topics.topic_of(d);
            (d - topics.offsets[t as usize], t)
        });
        own.retain(|d| !multiple.contains(d));
        let keep = if own.len() < min_quota {
            under_min.push(m);
            own.len()
        } else if own.len() >= max_quota && current_over_min < expected_over_min {
            current_over_min += 1;
            if current_over_min == expected_over_min {
                at_min.clear();
            }
            max_quota
        } else {
            if current_over_min < expected_over_min {
                at_min.push_back(m);
            }
            min_quota
        };
        for &d in &own[keep..] {
            revoked[d] = true;
        }
        own.truncate(keep);
        for &d in &own {
            assigned[d] = true;
        }
        assignment[m] = own;
    }

    // Member indices are in member-id order, so sorting them sorts by member id.
    under_min.sort_unstable();
    at_min.make_contiguous().sort_unstable();

    let mut transferring = Vec::new();
    // `next` plays Kafka's iterator over `under_min`: the position of the next member.
    let mut next = 0;
    for d in (0..total).filter(|&d| !assigned[d]) {
        let (m, from_under_min) = if next < under_min.len() {
            next += 1;
            (under_min[next - 1], true)
        } else if !under_min.is_empty() {
            next = 1;
            (under_min[0], true)
        } else if let Some(m) = at_min.pop_front() {
            (m, false)
        } else {
            // Kafka throws here ("No more unfilled consumers"); the quotas above make it
            // unreachable. Should it ever happen, the least-loaded member takes the partition.
            let least = (0..members).min_by_key(|&m| (assignment[m].len(), m));
            match least {
                Some(m) => (m, false),
                None => break,
            }
        };
        assignment[m].push(d);
        if revoked[d] || multiple.contains(&d) {
            transferring.push((d, m));
        }
        let count = assignment[m].len();
        if count == min_quota {
            if from_under_min {
                next -= 1;
                under_min.remove(next);
            }
            at_min.push_back(m);
        }
    }
    (assignment, transferring)
}
