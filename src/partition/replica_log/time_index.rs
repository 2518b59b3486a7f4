//! A replica log's time index: where a lookup of the first record with a timestamp at or
//! after `t` (Kafka's ListOffsets by time) starts reading, so `offset_for_time` reads one
//! block of records instead of walking the log under the partition's lock.
//!
//! Timestamps within a partition need not grow (producers choose them), so the index keeps,
//! for each block of `INTERVAL` offsets, the largest timestamp in it (as a Kafka segment's
//! time index bounds its records by the largest timestamp so far). A lookup passes over the
//! blocks whose largest timestamp is below `t` (none of their records can match) and reads
//! the records of the first block that may hold a match: the answer is the first offset whose
//! timestamp is at or after `t`, the same as a walk from the log start.
//!
//! The index is built by the lookups, not by the appends: a lookup first adds the records
//! appended since the last one (each record is read once), so appends, on every replica,
//! pay nothing. Trimmed blocks go at the next lookup; a truncation drops the blocks it cuts
//! into, and the next lookup reads their kept records again.
//!
//! Not a binary search: the blocks' own maxima are not sorted, and sorted bounds (the
//! largest timestamp *so far*) would have to be computed again whenever the log's start
//! moves (on every append of a full log); passing over 16-byte blocks reads 1/`INTERVAL`
//! of what the walk read.

use std::collections::VecDeque;

/// Offsets in a block: a lookup reads at most this many records (one block) beyond the
/// blocks it passes over, at 16 bytes of index per this many records.
const INTERVAL: u64 = 64;

/// The time index of one replica log (module docs).
#[derive(Default)]
pub(super) struct TimestampBlocks {
    /// `(first offset, largest timestamp)` of each block: the block at `b` covers the
    /// offsets `b..b + INTERVAL` (`b` a multiple of `INTERVAL`) held below `indexed_to`.
    /// Consecutive; the first may also bound records since trimmed (a bound too high only
    /// costs a read).
    blocks: VecDeque<(u64, i64)>,
    /// The records below this (from the log's start) are in `blocks`.
    indexed_to: u64,
}

impl TimestampBlocks {
    /// Before a lookup on a log holding `start..end`: drops the blocks wholly below
    /// `start`; returns the offset from which the records up to `end` go to
    /// [`add`](Self::add).
    pub(super) fn update(&mut self, start: u64, end: u64) -> u64 {
        while self
            .blocks
            .front()
            .is_some_and(|&(at, _)| at + INTERVAL <= start)
        {
            self.blocks.pop_front();
        }
        self.indexed_to = self.indexed_to.max(start).min(end);
        self.indexed_to
    }

    /// Adds the record at `offset` (the next one after those added) with its timestamp.
    pub(super) fn add(&mut self, offset: u64, timestamp: i64) {
        let at = offset - offset % INTERVAL;
        match self.blocks.back_mut() {
            Some((last, max)) if *last == at => *max = (*max).max(timestamp),
            _ => self.blocks.push_back((at, timestamp)),
        }
        self.indexed_to = offset + 1;
    }

    /// The records at and above `end` were removed: the blocks holding any of them go (a
    /// block cut in two would keep the removed records' largest timestamp).
    pub(super) fn truncated(&mut self, end: u64) {
        if self.indexed_to <= end {
            return;
        }
        while self
            .blocks
            .back()
            .is_some_and(|&(at, _)| at + INTERVAL > end)
        {
            self.blocks.pop_back();
        }
        self.indexed_to = self.blocks.back().map_or(0, |&(at, _)| at + INTERVAL);
    }

    /// The first record below `to` (and from `start`, the log's first in memory) with a
    /// timestamp at or after `timestamp`: `read(from, to)` reads the records of one block
    /// that may hold it. The index must cover `start..to` ([`update`](Self::update), then
    /// [`add`](Self::add)).
    pub(super) fn find(
        &self,
        start: u64,
        to: u64,
        timestamp: i64,
        mut read: impl FnMut(u64, u64) -> Option<(u64, i64)>,
    ) -> Option<(u64, i64)> {
        for &(at, max) in &self.blocks {
            if at >= to {
                break;
            }
            if max >= timestamp {
                if let Some(found) = read(at.max(start), (at + INTERVAL).min(to)) {
                    return Some(found);
                }
            }
        }
        None
    }
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use proptest::prelude::*;

    use super::super::{Chunk, ReplicaLog, Run};
    use crate::partition::Entry;

    fn entry(timestamp: i64) -> Entry<(), u64> {
        Entry::plain(timestamp, 0)
    }

    /// The answer by walking every record held in memory below `to`.
    fn linear(log: &ReplicaLog<(), u64>, to: u64, timestamp: i64) -> Option<(u64, i64)> {
        let mut found = None;
        log.for_each(log.start(), to, |o, _, e| {
            if found.is_none() && e.timestamp() >= timestamp {
                found = Some((o, e.timestamp()));
            }
        });
        found
    }

    /// What happens to the leader's log, and to a follower copying it in pieces.
    #[derive(Debug, Clone)]
    enum Op {
        /// The leader appends one chunk of records with these timestamps.
        Append(Vec<i64>),
        /// The follower copies up to this many records from the leader.
        Fetch(u64),
        /// Both drop their oldest records beyond this many (below their ends).
        Trim(usize),
        /// The follower cuts its log this many records below its end.
        Truncate(u64),
        /// The leader cuts its log this many records below its end (an unclean election).
        TruncateLeader(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Timestamps from a small range (stored ones are never negative), so that repeats,
        // drops and rises all happen.
        let ts = 0i64..45;
        prop_oneof![
            4 => proptest::collection::vec(ts, 1..6).prop_map(Op::Append),
            3 => (1u64..200).prop_map(Op::Fetch),
            1 => (1usize..300).prop_map(Op::Trim),
            1 => (0u64..80).prop_map(Op::Truncate),
            1 => (0u64..20).prop_map(Op::TruncateLeader),
        ]
    }

    fn apply(leader: &mut ReplicaLog<(), u64>, follower: &mut ReplicaLog<(), u64>, op: &Op) {
        match op {
            Op::Append(ts) => {
                if ts.len() == 1 {
                    // Into the leader's open chunk (a new one after a cut inside it).
                    leader.append_one(0, entry(ts[0]), 4, None);
                } else {
                    let chunk = Chunk::many(ts.iter().map(|&t| entry(t)).collect());
                    leader.append_run(Run::whole(0, chunk));
                }
            }
            Op::Fetch(n) => {
                if follower.end() < leader.start() || follower.end() > leader.end() {
                    follower.reset_to(leader.start());
                }
                let mut runs = Vec::new();
                let from = follower.end();
                let to = (from + n).min(leader.end());
                if n % 2 == 0 {
                    // As a helping sender copies (moving the end of a shared run).
                    follower.copy_from(leader, to, &mut runs);
                } else {
                    leader.runs_in(from, to, &mut runs);
                    for run in runs {
                        follower.append_run(run);
                    }
                }
            }
            Op::Trim(capacity) => {
                leader.trim(*capacity, leader.end());
                follower.trim(*capacity, follower.end());
            }
            Op::Truncate(n) => follower.truncate_to(follower.end().saturating_sub(*n)),
            Op::TruncateLeader(n) => leader.truncate_to(leader.end().saturating_sub(*n)),
        }
    }

    fn check(log: &mut ReplicaLog<(), u64>, to: u64, timestamp: i64) -> Result<(), TestCaseError> {
        let expected = linear(log, to, timestamp);
        prop_assert_eq!(
            log.offset_for_time(to, timestamp),
            expected,
            "log [{}, {}), to {}, timestamp {}",
            log.start(),
            log.end(),
            to,
            timestamp
        );
        Ok(())
    }

    proptest! {
        /// On random logs (timestamps rising, falling and repeating; chunks shared and cut
        /// into slices by a follower's fetches; trimmed and truncated, with lookups after
        /// some steps only, so the index catches up over several changes), the indexed
        /// answer is the linear walk's, for every timestamp and two bounds.
        #[test]
        fn offset_for_time_matches_the_linear_walk(
            ops in proptest::collection::vec((op(), any::<bool>()), 1..150),
            cut in 0u64..40,
        ) {
            let mut leader = ReplicaLog::new(0);
            let mut follower = ReplicaLog::new(0);
            for (op, look) in &ops {
                apply(&mut leader, &mut follower, op);
                for log in [&leader, &follower] {
                    // Every offset held reads a record (no run covers an empty slot).
                    let mut held = 0;
                    log.for_each(log.start(), log.end(), |_, _, _| held += 1);
                    prop_assert_eq!(held, log.end() - log.start());
                }
                if !look {
                    continue;
                }
                for log in [&mut leader, &mut follower] {
                    let to = log.end().saturating_sub(cut);
                    for timestamp in -1..47 {
                        check(log, to, timestamp)?;
                        let end = log.end();
                        check(log, end, timestamp)?;
                    }
                }
            }
        }
    }

    /// Appends leave the index alone; a lookup indexes what was appended, then reads one
    /// block: the one holding the answer when timestamps grow.
    #[test]
    fn a_lookup_indexes_then_reads_one_block() {
        let mut log = ReplicaLog::new(0);
        for t in 0..1000 {
            log.append_run(Run::whole(0, Chunk::one(entry(t))));
        }
        assert!(log.times.blocks.is_empty());
        assert_eq!(log.offset_for_time(1000, 500), Some((500, 500)));
        assert_eq!(
            log.times.blocks.len(),
            1000usize.div_ceil(super::INTERVAL as usize)
        );
        let mut reads = Vec::new();
        log.times.find(0, 1000, 500, |from, to| {
            reads.push((from, to));
            Some((from, 0))
        });
        assert_eq!(reads, vec![(448, 512)]);
        assert_eq!(log.offset_for_time(1000, 1000), None);
        assert_eq!(log.offset_for_time(700, 800), None);
    }
}
