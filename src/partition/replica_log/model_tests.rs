//! Several replicas' logs sharing open chunks, driven the way the replica set drives them
//! (`replica::set`) and checked against a plain model (a vector of `(epoch, value)` per
//! log) over random appends, retried sends appended again from their slots, fetches of
//! both kinds, crashes (some losing a tail), restarts and ISR shrinks: no log's records ever
//! change under it, whoever writes into a chunk it shares, and every in-sync replica holds
//! the same records below the high watermark — the ones that were there when it passed
//! them.
//!
//! Only histories the replica set produces are generated: the leader appends in its own
//! epoch and trims no record at or above the high watermark; a follower truncates only by
//! epoch (KIP-279) after an election or a restart, and starts over at the leader's log
//! start when its end is out of the leader's range; a log loses a tail only in a crash;
//! elections are clean (the first online ISR member, as `elect` picks) and happen when the
//! leader crashes or, with no leader, when a replica restarts.

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
    /// Replica `.0` (if an online follower) fetches up to `.1` records, moving its run's
    /// end (`.2`) or by slices.
    Fetch(usize, u64, bool),
    /// Replica `.0` crashes, losing this many records of its tail (`replica::Faults`'s cut:
    /// an unsynced tail).
    Crash(usize, u64),
    /// Replica `.0` comes back (a follower that truncates by epoch first).
    Restart(usize),
    /// Follower `.0` leaves the ISR if it is behind the leader (a lag check).
    Lag(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let log = 0..LOGS;
    prop_oneof![
        6 => Just(Op::Append),
        2 => any::<usize>().prop_map(Op::Retry),
        6 => (log.clone(), 1u64..12, any::<bool>()).prop_map(|(i, n, m)| Op::Fetch(i, n, m)),
        2 => (log.clone(), prop_oneof![Just(0u64), 1u64..6]).prop_map(|(i, n)| Op::Crash(i, n)),
        2 => log.clone().prop_map(Op::Restart),
        1 => log.prop_map(Op::Lag),
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

    fn get(&self, offset: u64) -> Option<(i32, u64)> {
        let i = offset.checked_sub(self.start)?;
        self.records.get(i as usize).copied()
    }

    fn truncate_to(&mut self, offset: u64) {
        let keep = offset.saturating_sub(self.start) as usize;
        self.records.truncate(keep);
    }

    /// The replica set's trim: the oldest records beyond `capacity`, none at or above
    /// `floor`.
    fn trim(&mut self, capacity: usize, floor: u64) {
        let held = self.records.len();
        if held > capacity && self.start < floor {
            let drop = (held - capacity).min((floor - self.start) as usize);
            self.records.drain(..drop);
            self.start += drop as u64;
        }
    }
}

fn held(l: &ReplicaLog<(), u64>) -> Vec<(i32, u64)> {
    let mut out = Vec::new();
    l.for_each(l.start(), l.end(), |_, e, r| out.push((e, *r.value())));
    out
}

/// One replica as the replica set keeps it, beside its log.
#[derive(Clone)]
struct State {
    online: bool,
    needs_truncation: bool,
    /// The log end the leader knows of (`known_leo`).
    known: u64,
}

/// The partition: logs, their models, and the replica set's bookkeeping.
struct Partition {
    logs: Vec<ReplicaLog<(), u64>>,
    models: Vec<Model>,
    states: Vec<State>,
    leader: Option<usize>,
    epoch: i32,
    hw: u64,
    /// Sorted, as the replica set keeps it (its first online member is elected).
    isr: Vec<usize>,
    /// What every offset below HW held when HW passed it (`None`: no replica in the ISR
    /// held it any more, trimmed).
    committed: Vec<Option<(i32, u64)>>,
    /// Records every log keeps in memory (`ReplicaConfig::capacity`).
    capacity: usize,
}

impl Partition {
    fn new(capacity: usize) -> Self {
        let mut logs: Vec<ReplicaLog<(), u64>> = (0..LOGS).map(|_| ReplicaLog::new(0)).collect();
        logs[0].begin_epoch(0);
        let state = State {
            online: true,
            needs_truncation: false,
            known: 0,
        };
        Self {
            logs,
            models: vec![Model::default(); LOGS],
            states: vec![state; LOGS],
            leader: Some(0),
            epoch: 0,
            hw: 0,
            isr: (0..LOGS).collect(),
            committed: Vec::new(),
            capacity,
        }
    }

    /// `advance_hw`: HW moves up to the lowest end known in the ISR, never down.
    fn advance_hw(&mut self) {
        let Some(l) = self.leader else { return };
        let mut hw = self.logs[l].end();
        for &i in &self.isr {
            if i != l {
                hw = hw.min(self.states[i].known);
            }
        }
        while self.hw < hw {
            let o = self.hw;
            let record = std::iter::once(l)
                .chain(self.isr.iter().copied())
                .find_map(|i| self.models[i].get(o));
            self.committed.push(record);
            self.hw += 1;
        }
    }

    /// `elect`: the first online ISR member, in a new epoch; none if the ISR is all down.
    fn elect(&mut self) {
        let Some(c) = self.isr.iter().copied().find(|&i| self.states[i].online) else {
            self.leader = None;
            return;
        };
        self.epoch += 1;
        self.leader = Some(c);
        self.logs[c].begin_epoch(self.epoch);
        self.states[c].needs_truncation = false;
        let end = self.logs[c].end();
        if end < self.hw {
            // The last ISR member lost a tail in its crash: committed records are gone
            // (the replica set reports them lost).
            self.hw = end;
            self.committed.truncate(end as usize);
        }
        for (i, s) in self.states.iter_mut().enumerate() {
            if i != c {
                s.needs_truncation = true;
                s.known = self.logs[i].end().min(self.hw);
            }
        }
        self.advance_hw();
    }

    fn remove_from_isr(&mut self, i: usize) {
        if self.isr.len() > 1 {
            self.isr.retain(|&x| x != i);
        }
    }

    /// `maybe_expand`: a follower back in sync rejoins the ISR.
    fn maybe_expand(&mut self, i: usize, l: usize) {
        let epoch_start = self.logs[l].epochs().last().map_or(0, |e| e.1);
        let s = &self.states[i];
        if self.isr.contains(&i)
            || !s.online
            || s.needs_truncation
            || s.known < self.hw
            || s.known < epoch_start
        {
            return;
        }
        self.isr.push(i);
        self.isr.sort_unstable();
    }

    /// `truncate_by_epoch` (KIP-279's loop), mirrored on the model.
    fn truncate_by_epoch(&mut self, i: usize, l: usize) {
        loop {
            let f = &self.logs[i];
            if f.end() == f.log_start() {
                break;
            }
            let answer = self.logs[l].end_offset_for_epoch(f.latest_epoch());
            match truncation_point(f, answer) {
                Some(at) => {
                    self.logs[i].truncate_to(at);
                    let end = self.logs[i].end();
                    self.models[i].truncate_to(end);
                }
                None => break,
            }
        }
        let s = &mut self.states[i];
        s.needs_truncation = false;
        s.known = s.known.min(self.logs[i].end());
    }

    /// A follower's fetch (`fetch_prepare` and `fetch_append`, or `copy_direct`).
    fn fetch(&mut self, i: usize, n: u64, moving: bool, spare: &mut Vec<Run<(), u64>>) {
        let Some(l) = self.leader else { return };
        if l == i || !self.states[i].online {
            return;
        }
        if self.states[i].needs_truncation {
            self.truncate_by_epoch(i, l);
        }
        let from = self.logs[i].end();
        let (leader_start, leader_end) = (self.logs[l].log_start(), self.logs[l].end());
        if from < leader_start || from > leader_end {
            self.logs[i].reset_to(leader_start);
            self.models[i] = Model {
                start: leader_start,
                records: Vec::new(),
            };
            return;
        }
        let to = (from + n).min(leader_end);
        let (a, b) = if l < i {
            let (a, b) = self.logs.split_at_mut(i);
            (&a[l], &mut b[0])
        } else {
            let (a, b) = self.logs.split_at_mut(l);
            (&b[0], &mut a[i])
        };
        if moving {
            b.copy_from(a, to, spare);
        } else {
            a.runs_in(from, to, spare);
            for run in spare.drain(..) {
                b.append_run(run);
            }
        }
        b.trim(self.capacity, u64::MAX);
        let lm = &self.models[l];
        let got = lm.records[(from - lm.start) as usize..(to - lm.start) as usize].to_vec();
        self.models[i].records.extend(got);
        self.models[i].trim(self.capacity, u64::MAX);
        self.states[i].known = self.logs[i].end();
        self.maybe_expand(i, l);
        self.advance_hw();
    }

    /// `crash`: the log loses `lost` records of its tail (not below its start), the
    /// replica leaves the ISR (unless it is the last member), and a leader is replaced.
    fn crash(&mut self, i: usize, lost: u64) {
        if !self.states[i].online {
            return;
        }
        self.states[i].online = false;
        if lost > 0 {
            let log = &mut self.logs[i];
            let at = log.end().saturating_sub(lost).max(log.start());
            log.truncate_to(at);
            self.models[i].truncate_to(at);
        }
        let s = &mut self.states[i];
        s.known = s.known.min(self.logs[i].end());
        self.remove_from_isr(i);
        if self.leader == Some(i) {
            self.leader = None;
            self.elect();
        }
        self.advance_hw();
    }

    /// `restart`: a follower that truncates by epoch before it fetches; elects a leader if
    /// there was none.
    fn restart(&mut self, i: usize) {
        if self.states[i].online {
            return;
        }
        self.states[i].online = true;
        self.states[i].needs_truncation = true;
        if self.leader.is_none() {
            self.elect();
        }
    }

    /// `check_isr`: a follower behind the leader at a lag check leaves the ISR.
    fn lag(&mut self, i: usize) {
        let Some(l) = self.leader else { return };
        if i != l && self.states[i].known < self.logs[l].end() {
            self.remove_from_isr(i);
        }
    }

    /// The leader's log after an append (`append_locked`): HW moves, then the log is
    /// trimmed, never at or above HW.
    fn appended(&mut self, l: usize) {
        self.advance_hw();
        self.logs[l].trim(self.capacity, self.hw);
        self.models[l].trim(self.capacity, self.hw);
    }
}

proptest! {
    // Modest for CI; a long run: PROPTEST_CASES=100000 in a release build.
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn logs_sharing_open_chunks_match_the_model(
        ops in proptest::collection::vec(op(), 1..120),
        room in 1usize..6,
        capacity in 1usize..24,
    ) {
        let mut p = Partition::new(capacity);
        let mut placed: Vec<(Chunk<(), u64>, u32, u64)> = Vec::new();
        let mut next = 0u64;
        let mut spare = Vec::new();
        for op in &ops {
            match *op {
                Op::Append => {
                    let Some(l) = p.leader else { continue };
                    let (chunk, at) = p.logs[l].append_one(p.epoch, Entry::plain(0, next), room, None);
                    placed.push((chunk, at, next));
                    p.models[l].records.push((p.epoch, next));
                    next += 1;
                    p.appended(l);
                }
                Op::Retry(k) => {
                    let Some(l) = p.leader else { continue };
                    if placed.is_empty() {
                        continue;
                    }
                    let (chunk, at, v) = placed[k % placed.len()].clone();
                    p.logs[l].append_run(Run::slot(p.epoch, chunk, at));
                    p.models[l].records.push((p.epoch, v));
                    p.appended(l);
                }
                Op::Fetch(i, n, moving) => p.fetch(i, n, moving, &mut spare),
                Op::Crash(i, lost) => p.crash(i, lost),
                Op::Restart(i) => p.restart(i),
                Op::Lag(i) => p.lag(i),
            }
            for (i, (log, model)) in p.logs.iter().zip(&p.models).enumerate() {
                prop_assert_eq!(log.start(), model.start, "log {} start after {:?}", i, op);
                prop_assert_eq!(log.end(), model.end(), "log {} end after {:?}", i, op);
                prop_assert_eq!(held(log), model.records.clone(), "log {} after {:?}", i, op);
            }
            // Below HW every in-sync replica holds what was there when HW passed it, so
            // they all agree with each other there.
            prop_assert_eq!(p.committed.len() as u64, p.hw);
            for &i in &p.isr {
                let m = &p.models[i];
                for o in m.start..m.end().min(p.hw) {
                    if let Some(c) = p.committed[o as usize] {
                        prop_assert_eq!(
                            m.get(o), Some(c),
                            "ISR member {} at offset {} below HW {} after {:?}", i, o, p.hw, op
                        );
                    }
                }
            }
            // A follower that truncated since the election holds the leader's records
            // wherever both hold one.
            if let Some(l) = p.leader {
                for i in 0..LOGS {
                    if i == l || p.states[i].needs_truncation {
                        continue;
                    }
                    let (f, lm) = (&p.models[i], &p.models[l]);
                    for o in f.start.max(lm.start)..f.end().min(lm.end()) {
                        prop_assert_eq!(
                            f.get(o), lm.get(o),
                            "follower {} at offset {} after {:?}", i, o, op
                        );
                    }
                }
            }
        }
    }
}

/// A follower cut by epoch down to its log start (its divergent records began below what
/// it kept after trimming) kept the epochs of the records it no longer held, so the
/// leader's older-epoch records it fetched next went in behind a newer epoch: the epoch
/// cache stopped increasing (the `debug_assert` in `append_in_new_epoch`), and answered
/// later followers' truncation with an epoch no record held.
#[test]
fn a_follower_cut_to_its_log_start_keeps_no_stale_epoch() {
    use Op::*;
    let mut p = Partition::new(3);
    let mut spare = Vec::new();
    let mut next = 0u64;
    let mut run = |p: &mut Partition, ops: &[Op]| {
        for op in ops {
            match *op {
                Append => {
                    let l = p.leader.expect("a leader");
                    p.logs[l].append_one(p.epoch, Entry::plain(0, next), 4, None);
                    p.models[l].records.push((p.epoch, next));
                    next += 1;
                    p.appended(l);
                }
                Fetch(i, n, moving) => p.fetch(i, n, moving, &mut spare),
                Crash(i, lost) => p.crash(i, lost),
                Restart(i) => p.restart(i),
                Retry(_) | Lag(_) => unreachable!(),
            }
        }
    };
    // Replica 2 leads epoch 2; 0 and 1 are back in the ISR.
    run(&mut p, &[Crash(0, 0), Crash(1, 0), Restart(0), Restart(1)]);
    run(&mut p, &[Fetch(0, 1, true), Fetch(1, 1, true)]);
    assert_eq!(
        (p.leader, p.epoch, p.isr.clone()),
        (Some(2), 2, vec![0, 1, 2])
    );
    // Four records of epoch 2: replica 0 copies one, replica 1 all (HW stays at 1).
    run(
        &mut p,
        &[
            Append,
            Append,
            Append,
            Append,
            Fetch(0, 1, true),
            Fetch(1, 4, true),
        ],
    );
    assert_eq!(p.hw, 1);
    // 2 crashes: 0 leads epoch 3 and appends five; 2 comes back, copies them and trims
    // its epoch-2 record away (1 does not fetch: HW stays at 1).
    run(&mut p, &[Crash(2, 0), Restart(2), Fetch(2, 1, true)]);
    run(
        &mut p,
        &[Append, Append, Append, Append, Append, Fetch(2, 5, true)],
    );
    assert_eq!((p.leader, p.epoch, p.hw), (Some(0), 3, 1));
    assert_eq!((p.logs[2].start(), p.logs[2].end()), (3, 6));
    // 0 crashes: 1 leads epoch 4 with its epoch-2 records; 2 cuts to its start (3) and
    // copies 1's epoch-2 record at 3.
    run(&mut p, &[Crash(0, 0), Fetch(2, 1, true)]);
    assert_eq!(p.leader, Some(1));
    let epochs = p.logs[2].epochs();
    assert!(
        epochs
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1),
        "replica 2's epochs {epochs:?}"
    );
    assert_eq!(held(&p.logs[2]), p.models[2].records);
}
