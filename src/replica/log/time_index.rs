//! A replica log's time index: where a search for the first record with a timestamp at or
//! after `t` may start, so `offset_for_time` reads a few runs instead of walking the log
//! under the partition's lock.
//!
//! Timestamps within a partition need not grow (producers choose them), so the index keys
//! on what Kafka's time index keys on, the largest timestamp so far: at run boundaries, at
//! least `INTERVAL` records apart, an entry `(before, offset)` where `before` bounds every
//! timestamp held below `offset`. The bounds never decrease along the log, so a binary
//! search finds the last entry whose bound is below `t`: no record before its offset can
//! match, and the answer (Kafka's ListOffsets by time: the first offset whose timestamp is
//! at or after `t`) is found by reading forward from there, skipping each run whose chunk
//! holds no timestamp that large. The bounds are chunks' largest timestamps, exact for a
//! run holding its whole chunk (most do) and loose for a slice of one, which costs a longer
//! read, never a wrong answer.

use std::collections::VecDeque;

/// Records between two entries at least (runs are never split for an entry, so the gap
/// may be longer): a read from an entry covers about this many records, at 16 bytes of
/// index per this many records.
const INTERVAL: u64 = 64;

/// The time index of one replica log (module docs).
pub(super) struct TimeIndex {
    /// `(bound on every timestamp held below offset, offset)`, both non-decreasing.
    entries: VecDeque<(i64, u64)>,
    /// Bounds every timestamp held (`i64::MIN` when nothing was appended).
    max: i64,
}

impl TimeIndex {
    pub(super) fn new() -> Self {
        Self {
            entries: VecDeque::new(),
            max: i64::MIN,
        }
    }

    /// A run was appended at `first`, its timestamps at most `max`.
    #[inline]
    pub(super) fn appended(&mut self, first: u64, max: i64) {
        if self
            .entries
            .back()
            .is_none_or(|&(_, at)| first - at >= INTERVAL)
        {
            self.entries.push_back((self.max, first));
        }
        self.max = self.max.max(max);
    }

    /// The records at and above `end` were removed. `max_from(offset)` bounds the
    /// timestamps of the records held from `offset` to `end` (the caller's runs there, at
    /// most about `INTERVAL` records' worth): the bound of the whole log is tightened to
    /// what is left, so that later entries do not carry the removed records' timestamps.
    pub(super) fn truncated(&mut self, end: u64, max_from: impl FnOnce(u64) -> i64) {
        while self.entries.back().is_some_and(|&(_, at)| at > end) {
            self.entries.pop_back();
        }
        let (before, from) = self.entries.back().copied().unwrap_or((i64::MIN, 0));
        self.max = before.max(max_from(from));
    }

    /// The records below `start` were dropped: entries before the last one at or below it
    /// go (that one still bounds the records before it, none of them held).
    pub(super) fn trimmed(&mut self, start: u64) {
        while self.entries.get(1).is_some_and(|&(_, at)| at <= start) {
            self.entries.pop_front();
        }
    }

    /// Everything was removed.
    pub(super) fn reset(&mut self) {
        self.entries.clear();
        self.max = i64::MIN;
    }

    /// Where a read for the first timestamp at or after `timestamp` starts (no record
    /// before it has one; the caller raises it to its start): `None` when no record held
    /// has one.
    pub(super) fn start_for(&self, timestamp: i64) -> Option<u64> {
        if self.max < timestamp {
            return None;
        }
        let i = self
            .entries
            .partition_point(|&(before, _)| before < timestamp);
        Some(i.checked_sub(1).map_or(0, |i| self.entries[i].1))
    }
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use proptest::prelude::*;

    use super::super::{Chunk, ReplicaLog, Run};
    use crate::partition::Entry;

    fn entry(timestamp: i64) -> Entry<(), u64> {
        Entry {
            timestamp,
            key: None,
            value: 0,
            headers: None,
        }
    }

    /// The answer by walking every record held in memory below `to`.
    fn linear(log: &ReplicaLog<(), u64>, to: u64, timestamp: i64) -> Option<(u64, i64)> {
        let mut found = None;
        log.for_each(log.start(), to, |o, _, e| {
            if found.is_none() && e.timestamp >= timestamp {
                found = Some((o, e.timestamp));
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
        // Timestamps from a small range, so that repeats, drops and rises all happen.
        let ts = -5i64..40;
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
                let chunk = if ts.len() == 1 {
                    Chunk::one(entry(ts[0]))
                } else {
                    Chunk::many(ts.iter().map(|&t| entry(t)).collect())
                };
                leader.append_run(Run::whole(0, chunk));
            }
            Op::Fetch(n) => {
                if follower.end() < leader.start() || follower.end() > leader.end() {
                    follower.reset_to(leader.start());
                }
                let mut runs = Vec::new();
                let from = follower.end();
                leader.runs_in(from, (from + n).min(leader.end()), &mut runs);
                for run in runs {
                    follower.append_run(run);
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

    fn check(log: &ReplicaLog<(), u64>, to: u64, timestamp: i64) -> Result<(), TestCaseError> {
        prop_assert_eq!(
            log.offset_for_time(to, timestamp),
            linear(log, to, timestamp),
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
        /// into slices by a follower's fetches; trimmed and truncated), the indexed answer
        /// is the linear walk's, for every timestamp and bound.
        #[test]
        fn offset_for_time_matches_the_linear_walk(
            ops in proptest::collection::vec(op(), 1..120),
            cut in 0u64..40,
        ) {
            let mut leader = ReplicaLog::new(0);
            let mut follower = ReplicaLog::new(0);
            for op in &ops {
                apply(&mut leader, &mut follower, op);
                for log in [&leader, &follower] {
                    let to = log.end().saturating_sub(cut);
                    for timestamp in -6..42 {
                        check(log, to, timestamp)?;
                        check(log, log.end(), timestamp)?;
                    }
                }
            }
        }
    }

    /// A timestamp above every one held: answered from the bound, without reading.
    #[test]
    fn a_timestamp_above_all_is_answered_at_once() {
        let mut log = ReplicaLog::new(0);
        for t in 0..1000 {
            log.append_run(Run::whole(0, Chunk::one(entry(t))));
        }
        assert_eq!(log.times.start_for(1000), None);
        assert_eq!(log.offset_for_time(1000, 1000), None);
        // In the middle: the read starts at most one interval (a run each here) before it.
        let from = log.times.start_for(500).unwrap();
        assert!((500 - super::INTERVAL..=500).contains(&from), "{from}");
        assert_eq!(log.offset_for_time(1000, 500), Some((500, 500)));
    }
}
