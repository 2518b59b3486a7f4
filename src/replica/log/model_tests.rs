//! Several replicas' logs sharing open chunks, checked against a plain model (a vector of
//! `(epoch, value)` per log) over random elections, single-record appends, retried sends
//! appended again from their slots, fetches of both kinds, cuts and trims: no log's records
//! ever change under it, whoever writes into a chunk it shares.

use proptest::prelude::*;

use super::{truncation_point, Chunk, ReplicaLog, Run};
use crate::partition::Entry;

const LOGS: usize = 3;

#[derive(Debug, Clone)]
enum Op {
    /// The leader appends one record into its open chunk.
    Append,
    /// The leader appends again the record placed at this index (mod the placed count): a
    /// retried send, in the leader's epoch, from its old slot.
    Retry(usize),
    /// Log `.0` (if not the leader) reconciles with the leader, then copies up to `.1`
    /// records, moving its run's end (`.2`) or by slices.
    Fetch(usize, u64, bool),
    /// Log `.0` is elected leader in a new epoch.
    Elect(usize),
    /// Log `.0` cuts this many records below its end (the leader too: an unclean election's
    /// loser, or a test's cut).
    Truncate(usize, u64),
    /// Log `.0` drops its oldest records beyond this many.
    Trim(usize, usize),
}

fn op() -> impl Strategy<Value = Op> {
    let log = 0..LOGS;
    prop_oneof![
        6 => Just(Op::Append),
        2 => any::<usize>().prop_map(Op::Retry),
        5 => (log.clone(), 1u64..12, any::<bool>()).prop_map(|(i, n, m)| Op::Fetch(i, n, m)),
        2 => log.clone().prop_map(Op::Elect),
        1 => (log.clone(), 0u64..6).prop_map(|(i, n)| Op::Truncate(i, n)),
        1 => (log, 1usize..20).prop_map(|(i, n)| Op::Trim(i, n)),
    ]
}

/// A log as the model has it: its start offset and its records from there.
#[derive(Default, Clone)]
struct Model {
    start: u64,
    records: Vec<(i32, u64)>,
}

impl Model {
    fn end(&self) -> u64 {
        self.start + self.records.len() as u64
    }

    /// Whether every record it holds is `other`'s at the same offset, and it ends no
    /// later.
    fn prefix_of(&self, other: &Self) -> bool {
        self.end() <= other.end()
            && (self.start.max(other.start)..self.end()).all(|o| {
                self.records[(o - self.start) as usize] == other.records[(o - other.start) as usize]
            })
    }

    fn truncate_to(&mut self, offset: u64) {
        let keep = offset.saturating_sub(self.start) as usize;
        self.records.truncate(keep);
        if offset < self.start {
            self.start = offset;
        }
    }
}

fn held(l: &ReplicaLog<(), u64>) -> Vec<(i32, u64)> {
    let mut out = Vec::new();
    l.for_each(l.start(), l.end(), |_, e, r| out.push((e, *r.value())));
    out
}

/// Reconciles `logs[i]` with the leader's as a follower does before it fetches (KIP-279's
/// loop), mirrored on the model.
fn reconcile(logs: &mut [ReplicaLog<(), u64>], models: &mut [Model], i: usize, l: usize) {
    while logs[i].end() > logs[i].log_start() {
        let answer = logs[l].end_offset_for_epoch(logs[i].latest_epoch());
        match truncation_point(&logs[i], answer) {
            Some(at) => {
                logs[i].truncate_to(at);
                models[i].truncate_to(logs[i].end());
            }
            None => break,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn logs_sharing_open_chunks_match_the_model(
        ops in proptest::collection::vec(op(), 1..120),
        room in 1usize..6,
    ) {
        let mut logs: Vec<ReplicaLog<(), u64>> = (0..LOGS).map(|_| ReplicaLog::new(0)).collect();
        let mut models = vec![Model::default(); LOGS];
        let mut placed: Vec<(Chunk<(), u64>, u32, u64)> = Vec::new();
        let (mut leader, mut epoch) = (0usize, 0i32);
        logs[0].begin_epoch(0);
        let mut next = 0u64;
        let mut spare = Vec::new();
        for op in &ops {
            match *op {
                Op::Append => {
                    let (chunk, at) = logs[leader].append_one(epoch, Entry::plain(0, next), room);
                    placed.push((chunk, at, next));
                    models[leader].records.push((epoch, next));
                    next += 1;
                }
                Op::Retry(k) => {
                    if placed.is_empty() {
                        continue;
                    }
                    let (chunk, at, v) = placed[k % placed.len()].clone();
                    logs[leader].append_run(Run::slot(epoch, chunk, at));
                    models[leader].records.push((epoch, v));
                }
                Op::Fetch(i, n, moving) => {
                    if i == leader {
                        continue;
                    }
                    reconcile(&mut logs, &mut models, i, leader);
                    if logs[i].end() == logs[i].log_start() {
                        // Cut to nothing (its divergence began below what it held): its
                        // epochs go too, as the divergent records did. The logs' own
                        // behaviour here is outside this model (it keeps the epochs).
                        let start = logs[i].start();
                        logs[i].reset_to(start);
                    }
                    let (from, start) = (logs[i].end(), logs[leader].start());
                    if from < start || from > logs[leader].end() {
                        // Too far behind, or still ahead: starts over at the leader's start.
                        logs[i].reset_to(start);
                        models[i] = Model { start, records: Vec::new() };
                    }
                    let from = logs[i].end();
                    let to = (from + n).min(logs[leader].end());
                    let (a, b) = if leader < i {
                        let (a, b) = logs.split_at_mut(i);
                        (&a[leader], &mut b[0])
                    } else {
                        let (a, b) = logs.split_at_mut(leader);
                        (&b[0], &mut a[i])
                    };
                    if moving {
                        b.copy_from(a, to, &mut spare);
                    } else {
                        a.runs_in(from, to, &mut spare);
                        for run in spare.drain(..) {
                            b.append_run(run);
                        }
                    }
                    let lm = &models[leader];
                    let got: Vec<_> = lm.records
                        [(from - lm.start) as usize..(to - lm.start) as usize]
                        .to_vec();
                    models[i].records.extend(got);
                }
                Op::Elect(i) => {
                    if !models[i].prefix_of(&models[leader]) {
                        // Only a replica holding a prefix of the leader's log is elected (an
                        // ISR member, perhaps behind): unclean elections' epoch handling is
                        // not what this model checks.
                        continue;
                    }
                    epoch += 1;
                    leader = i;
                    logs[i].begin_epoch(epoch);
                }
                Op::Truncate(i, n) => {
                    let at = logs[i].end().saturating_sub(n).max(logs[i].start());
                    logs[i].truncate_to(at);
                    models[i].truncate_to(at);
                }
                Op::Trim(i, n) => {
                    logs[i].trim(n, u64::MAX);
                    let start = logs[i].start();
                    let m = &mut models[i];
                    let drop = (start - m.start) as usize;
                    m.records.drain(..drop);
                    m.start = start;
                }
            }
            for (i, (log, model)) in logs.iter().zip(&models).enumerate() {
                prop_assert_eq!(log.start(), model.start, "log {} start after {:?}", i, op);
                prop_assert_eq!(log.end(), model.end(), "log {} end after {:?}", i, op);
                prop_assert_eq!(held(log), model.records.clone(), "log {} after {:?}", i, op);
            }
        }
    }
}
