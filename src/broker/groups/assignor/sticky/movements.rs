//! Partition movements during one general sticky assignment (Kafka's `PartitionMovements`).
//!
//! Each moved partition is recorded as (first owner → current owner). Before moving a
//! partition of topic `t` from `a` to `b`, the assignor asks for "the actual partition to
//! move": if some partition of `t` already moved from `b` to `a`'s side, that one moves back
//! instead, so partitions of one topic never travel both ways between two members.

use std::collections::{BTreeSet, HashMap};

#[derive(Default)]
pub(super) struct Movements {
    /// Partition → (member it moved from first, member holding it now).
    by_partition: HashMap<usize, (usize, usize)>,
    /// Topic → (from, to) → partitions of the topic that moved so.
    by_topic: HashMap<u32, HashMap<(usize, usize), BTreeSet<usize>>>,
}

impl Movements {
    /// The partition to move when `partition` (of `topic`) should go from `old` to `new`.
    /// Kafka takes any element of a hash set here; logbus takes the lowest-numbered one.
    pub fn actual_partition_to_move(
        &self,
        partition: usize,
        topic: u32,
        mut old: usize,
        new: usize,
    ) -> usize {
        let Some(pairs) = self.by_topic.get(&topic) else {
            return partition;
        };
        if let Some(&(first_owner, _)) = self.by_partition.get(&partition) {
            old = first_owner;
        }
        pairs
            .get(&(new, old))
            .and_then(|set| set.first().copied())
            .unwrap_or(partition)
    }

    /// Records that `partition` (of `topic`) moved from `old` to `new`.
    pub fn record_move(&mut self, partition: usize, topic: u32, old: usize, new: usize) {
        match self.remove(partition, topic) {
            // Moving back to where it started: no longer a movement.
            Some((first_owner, _)) if first_owner == new => {}
            Some((first_owner, _)) => self.add(partition, topic, (first_owner, new)),
            None => self.add(partition, topic, (old, new)),
        }
    }

    fn remove(&mut self, partition: usize, topic: u32) -> Option<(usize, usize)> {
        let pair = self.by_partition.remove(&partition)?;
        if let Some(pairs) = self.by_topic.get_mut(&topic) {
            if let Some(set) = pairs.get_mut(&pair) {
                set.remove(&partition);
                if set.is_empty() {
                    pairs.remove(&pair);
                }
            }
            if pairs.is_empty() {
                self.by_topic.remove(&topic);
            }
        }
        Some(pair)
    }

    fn add(&mut self, partition: usize, topic: u32, pair: (usize, usize)) {
        self.by_partition.insert(partition, pair);
        self.by_topic
            .entry(topic)
            .or_default()
            .entry(pair)
            .or_default()
            .insert(partition);
    }
}
