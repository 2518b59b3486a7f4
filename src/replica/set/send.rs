//! One send on a replicated partition: the append, the wait for the acks level, the
//! retries, and the time budget they share. A pipelined send (`Producer::send_async`)
//! stops after the append and resumes at the wait later ([`Pending`]).

use std::time::Duration;

use super::combine::Entered;
use super::{Failure, ReplicaSet, Run, SendRecords, State, FETCH_MAX, OPEN_CHUNK};
use crate::partition::producer_state::{seq_add, Check, Stamp};
use crate::partition::progress::{Budget, Idem, SendProgress, Step};
use crate::partition::{Acks, AppendError, Entry, Pending, Refused, SendPolicy};
use crate::sync::atomic::Ordering;
use crate::sync::time::{self, Instant};
use crate::sync::{Backoff, MutexGuard};

/// An append that happened: the partition still locked (`None`: the lock's holder appended
/// it, `combine`), its epoch and last offset.
type Appended<'a, K, V> = (Option<MutexGuard<'a, State<K, V>>>, i32, u64);

/// How long a retry waits for the partition to change before trying again.
const RETRY_BACKOFF: Duration = Duration::from_millis(10);
/// Fetch rounds a waiting sender runs for its followers before it sleeps, again after
/// each wake-up: bounded, as a fetch may report a change without a copy.
///
/// A sender waiting for acks does its followers' copying itself (`fetch_all_locked`):
/// the same two fetch steps as a fetcher thread's, under the lock it already holds
/// (stalled and slowed followers are left alone as there), without the two context
/// switches of waking a fetcher thread and being woken back, which cost far more than
/// the copy on a machine with fewer cores than replicas.
const HELPS: u32 = 64;

/// When an append wakes the fetcher threads. Waking a parked thread costs microseconds,
/// far more than copying a record, so a sender that will wait for its acknowledgement
/// copies for the followers itself (`help`) and wakes the fetchers only if it cannot.
/// Ordered by strength: an append made for several senders (`combine`) wakes as the
/// strongest asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Nudge {
    /// A blocking `acks = all` send: it helps, then wakes them if it must (`await_acks`).
    Never,
    /// A pipelined `acks = all` send (`send_async`): once four fetches' worth of records
    /// (`4 * FETCH_MAX`) is not yet on the ISR, a sender running ahead of its own waits.
    /// Below that, its `PendingSend::wait` or `flush` copies them, or (if it never waits) a
    /// fetcher's idle round, within 20 ms.
    Backlog,
    /// `acks = 0 / 1`: nobody waits, the fetchers copy.
    Always,
}

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> ReplicaSet<K, V> {
    /// One attempt at appending `records` (all or none): the epoch they were appended in
    /// and the last offset, with the lock still held (an `acks = all` wait goes on under
    /// it), or without it when the lock's holder appended them (`combine`).
    /// `wake`: when to nudge the fetcher threads.
    fn append_once(
        &self,
        records: &mut SendRecords<K, V>,
        acks: Acks,
        idem: &mut Idem,
        wake: Nudge,
    ) -> Result<Appended<'_, K, V>, Failure> {
        let mut st = match self.enter(records, acks, idem, wake) {
            Entered::Locked(st) => st,
            Entered::Served(outcome) => return outcome.map(|(epoch, last)| (None, epoch, last)),
        };
        let mut moved = false;
        let own = self.append_locked(&mut st, records, acks, idem, &mut moved);
        let mut wake = if own.is_ok() { wake } else { Nudge::Never };
        self.serve(&mut st, &mut moved, &mut wake);
        if let Some(l) = st.leader {
            let backlog = st.replicas[l].log.end() - st.hw;
            if wake == Nudge::Always || (wake == Nudge::Backlog && backlog >= 4 * FETCH_MAX as u64)
            {
                self.wake_followers(&st);
            }
        }
        if moved {
            self.notify(true);
        }
        own.map(|(epoch, last)| (Some(st), epoch, last))
    }

    /// Appends `records` to the leader's log (all or none), under the lock: the epoch and
    /// the last offset. `moved`: set if HW moved. A single record not yet in any log goes
    /// into the leader's open chunk and becomes `SendRecords::Placed` there (a retry appends
    /// that slot again, shared).
    ///
    /// An idempotent send (`idem.producer`) gets its first sequence at its first append,
    /// here, from the partition's counter for its producer (`State::sequences`), and keeps
    /// it for its retries. The leader's producer state checks it under this lock, so the
    /// check and the append are one step (`producer_state`): a retry of records the leader
    /// holds returns their offsets (in the current epoch: the wait for acks then waits for
    /// HW to pass them) and appends nothing. A send going on from its producer's record at
    /// the log's end, the common case, needs no look-up: the check would append it
    /// (`ReplicaLog::continues`).
    #[inline]
    pub(super) fn append_locked(
        &self,
        st: &mut State<K, V>,
        records: &mut SendRecords<K, V>,
        acks: Acks,
        idem: &mut Idem,
        moved: &mut bool,
    ) -> Result<(i32, u64), Failure> {
        if st.closed {
            return Err(self.closed());
        }
        let Some(l) = st.leader else {
            return Err(Failure::Refused(AppendError::LeaderNotAvailable));
        };
        let min = self.config.min_insync;
        if acks == Acks::All && st.isr.len() < min {
            return Err(Failure::Refused(AppendError::NotEnoughReplicas(
                st.isr.len(),
                min,
            )));
        }
        if records.count() == 0 {
            // Never asked for (a send has records; a lent one is back before it appends).
            return Err(Failure::Refused(AppendError::LeaderNotAvailable));
        }
        let epoch = st.epoch;
        // The idempotent producer's stamp (`seq` counting the send's records from 0).
        let stamp = match idem.producer {
            None => Stamp::NONE,
            Some(id) => {
                // Looked up once: read here, moved on below.
                let counter = st.sequences.get_mut(id.id);
                let seq = match idem.seq {
                    Some(seq) => seq,
                    None => match counter.as_deref() {
                        Some(&(e, next)) if e == id.epoch => next,
                        _ => st.replicas[l].log.producers().next_seq(id).unwrap_or(0),
                    },
                };
                let stamp = Stamp::based(id, seq, 0, false);
                let n = records.count() as u64;
                let in_memory = st.replicas[l].store.is_none();
                let log = &mut st.replicas[l].log;
                // A send going on from its producer's last record at the log's end is in
                // order (`ReplicaLog::continues`): no lookup. A single record kept in
                // memory is placed in the same step that finds it continues. Any other
                // send is checked.
                #[cfg(debug_assertions)]
                let continued = log.continues(&stamp, 0) && {
                    assert_eq!(log.producers().check(&stamp, 0, n), Check::Append);
                    true
                };
                let placed = match std::mem::replace(records, SendRecords::Lent) {
                    SendRecords::One(entry) if in_memory => {
                        match log.extend_continued(epoch, entry, &stamp) {
                            Ok((chunk, at)) => {
                                *records = SendRecords::Placed(chunk, at);
                                true
                            }
                            Err(entry) => {
                                *records = SendRecords::One(entry);
                                false
                            }
                        }
                    }
                    other => {
                        *records = other;
                        false
                    }
                };
                #[cfg(debug_assertions)]
                debug_assert!(!placed || continued);
                let check = if placed || log.continues(&stamp, 0) {
                    Check::Append
                } else {
                    log.producers().check(&stamp, 0, n)
                };
                match check {
                    Check::Append => {}
                    Check::Duplicate(_, last) => {
                        idem.deduplicated = true;
                        return Ok((epoch, last));
                    }
                    Check::Fenced { current } => {
                        return Err(Failure::Refused(AppendError::ProducerFenced {
                            producer: id,
                            current,
                        }))
                    }
                    Check::OutOfOrder { expected } => {
                        return Err(Failure::Refused(AppendError::OutOfOrderSequence {
                            producer: id,
                            expected,
                            got: seq,
                        }))
                    }
                }
                if idem.seq.is_none() {
                    idem.seq = Some(seq);
                    let next = (id.epoch, seq_add(seq, n));
                    match counter {
                        Some(c) => *c = next,
                        None => {
                            st.sequences.insert(id.id, next);
                        }
                    }
                }
                if placed {
                    return Ok((epoch, self.appended(st, l, moved)));
                }
                stamp
            }
        };
        // Nothing was appended on an error: a record too large, or the leader's directory
        // failed (a new leader took over).
        if st.replicas[l].store.is_some() {
            records
                .with_entries(|entries| {
                    self.append_to_disk(
                        st,
                        l,
                        entries
                            .enumerate()
                            .map(|(i, e)| (epoch, stamp.moved(i as u64, 0), e)),
                    )
                })
                .map_err(Failure::Refused)?;
        }
        let room = self.config.capacity.clamp(1, OPEN_CHUNK);
        let log = &mut st.replicas[l].log;
        match std::mem::replace(records, SendRecords::Lent) {
            SendRecords::One(entry) => {
                let producer = idem.producer.map(|id| (id, stamp.seq));
                let (chunk, at) = log.append_one(epoch, entry, room, producer);
                *records = SendRecords::Placed(chunk, at);
            }
            SendRecords::Placed(chunk, at) => {
                let run =
                    Run::slot(epoch, chunk.clone(), at).stamped(stamp.moved(0, u64::from(at)));
                log.append_run(run);
                *records = SendRecords::Placed(chunk, at);
            }
            SendRecords::Chunks(chunks) => {
                let mut done = 0u64;
                for chunk in &chunks {
                    log.append_run(Run::whole(epoch, chunk.clone()).stamped(stamp.moved(done, 0)));
                    done += chunk.len() as u64;
                }
                *records = SendRecords::Chunks(chunks);
            }
            SendRecords::Lent => {}
        }
        Ok((epoch, self.appended(st, l, moved)))
    }

    /// After leader `l` appended a send: HW moved as far as the ISR allows and memory
    /// trimmed; the offset of the send's last record.
    #[inline]
    fn appended(&self, st: &mut State<K, V>, l: usize, moved: &mut bool) -> u64 {
        let last = st.replicas[l].log.end() - 1;
        *moved |= self.advance_hw(st);
        // Records not yet below HW stay, so a follower can always copy what it lacks.
        let hw = st.hw;
        st.replicas[l].log.trim(self.config.capacity, hw);
        last
    }

    /// Why a send to the closed partition fails: the broker was closed, or the topic
    /// deleted (the partition's flag, marked before the set was closed).
    fn closed(&self) -> Failure {
        Failure::Closed(self.broker_closed.why())
    }

    /// Waits until HW passes `last` (the ISR has it), in leader epoch `epoch`; the wait is
    /// bounded by `budget`'s request deadline, read from the clock only if it must wait.
    fn await_acks(
        &self,
        mut st: MutexGuard<'_, State<K, V>>,
        epoch: i32,
        last: u64,
        budget: &mut Budget,
        policy: &SendPolicy,
    ) -> Result<u64, Failure> {
        let min = self.config.min_insync;
        let mut deadline = None;
        let mut helps = HELPS;
        let mut woken = false;
        loop {
            if st.closed {
                return Err(self.closed());
            }
            if let Some(done) = Self::acked_in(&st, epoch, last) {
                return done;
            }
            // HW and the ISR size are read in one critical section: a shrink that lets HW
            // jump past `last` is seen together with the smaller ISR.
            if st.hw > last {
                return if st.isr.len() >= min {
                    Ok(last)
                } else {
                    Err(Failure::Appended(
                        AppendError::NotEnoughReplicasAfterAppend(st.isr.len(), min),
                    ))
                };
            }
            if helps > 0 {
                // Looked at again after, copy or not: a fetch that finds its follower
                // caught up may move HW without copying.
                helps -= 1;
                if !self.fetch_all_locked(&mut st) {
                    helps = 0;
                }
                continue;
            }
            if !woken {
                // Nothing more to copy now (a stalled, slow or crashed follower): the
                // fetcher threads take over.
                self.wake_followers(&st);
                woken = true;
            }
            match *deadline.get_or_insert_with(|| budget.request(policy)) {
                None => {
                    self.changed.wait(&mut st);
                    helps = HELPS;
                }
                Some(d) => {
                    helps = HELPS;
                    if time::expired(d) || self.changed.wait_until(&mut st, d) {
                        if let Some(Ok(last)) = Self::acked_in(&st, epoch, last) {
                            return Ok(last);
                        }
                        if st.epoch == epoch && st.hw > last && st.isr.len() >= min {
                            return Ok(last);
                        }
                        return Err(Failure::Appended(AppendError::Timeout));
                    }
                }
            }
        }
    }

    /// After the lock's holder appended a blocking send's records (`combine`): it helps
    /// its followers copy them right after, so wait for that briefly without the lock.
    /// `None`: acknowledged; else the lock, to wait under it.
    fn served_acked(&self, epoch: i32, last: u64) -> Option<MutexGuard<'_, State<K, V>>> {
        let mut backoff = Backoff::new();
        while !backoff.is_completed() {
            if self.acked_now(epoch, last) {
                return None;
            }
            backoff.snooze();
        }
        if self.acked_now(epoch, last) {
            return None;
        }
        Some(self.state.lock())
    }

    /// Lock-free: whether the record at `last`, appended in `epoch`, is acknowledged in
    /// the current epoch (`false` may be stale: the caller then looks under the lock).
    /// The epoch is read before and after `acked`: an `acked` read between two reads of
    /// `epoch` is that epoch's, as `mirror_epoch` stores `acked` before a new epoch.
    pub(crate) fn acked_now(&self, epoch: i32, last: u64) -> bool {
        // Acquire: pairs with the Release store in `mirror_epoch`: an `acked` read next is
        // no older than this epoch's reset.
        let before = self.epoch_mirror.load(Ordering::Acquire);
        // Acquire: pairs with the Release stores in `advance_hw` / `mirror_epoch`: an epoch
        // stored before this `acked` is seen by the load below.
        let acked = self.acked_mirror.load(Ordering::Acquire);
        // Relaxed: ordered after the Acquire load above.
        let after = self.epoch_mirror.load(Ordering::Relaxed);
        before == i64::from(epoch) && after == before && acked > last
    }

    /// `acked_in`'s answer under the lock: whether the record is acknowledged (models).
    #[cfg(all(test, logbus_loom))]
    pub(crate) fn acked_locked(&self, epoch: i32, last: u64) -> bool {
        matches!(Self::acked_in(&self.state.lock(), epoch, last), Some(Ok(_)))
    }

    /// Whether the record at `last`, appended in `epoch`, is settled whatever comes next:
    /// acknowledged (HW passed it while the ISR held `min_insync` replicas, in its epoch),
    /// or not and never to be (its epoch is over).
    fn acked_in(st: &State<K, V>, epoch: i32, last: u64) -> Option<Result<u64, Failure>> {
        if st.epoch == epoch {
            return (st.acked > last).then_some(Ok(last));
        }
        let acked = st.past_acked.iter().any(|&(e, a)| e == epoch && a > last);
        Some(if acked {
            Ok(last)
        } else {
            Err(Failure::Appended(AppendError::NotLeader))
        })
    }

    /// Drives one send from `step` on with the policy's retries: appends (again after a
    /// failure), then, under `acks = all` and if `wait`, waits for the acknowledgement.
    /// The epoch and last offset of the append that succeeded, or the last error.
    fn drive(
        &self,
        records: &mut SendRecords<K, V>,
        policy: &SendPolicy,
        pending: &mut SendProgress,
        wait: bool,
    ) -> Result<(i32, u64), AppendError> {
        let done = self.drive_steps(records, policy, pending, wait);
        if std::mem::take(&mut pending.idem.deduplicated) {
            // Relaxed: counters read for metrics only.
            policy.counters.deduplicated.fetch_add(1, Ordering::Relaxed);
        }
        if let (Err(why), Some(handle), Some(id)) = (&done, &policy.producer, pending.idem.producer)
        {
            // Given up with a sequence assigned (its records may be in a log) or behind a
            // gap: the producer's next sends start a new epoch (KIP-360).
            let gap =
                pending.idem.seq.is_some() || matches!(why, AppendError::OutOfOrderSequence { .. });
            if gap && !matches!(why, AppendError::ProducerFenced { .. }) {
                handle.gave_up(id);
            }
        }
        done
    }

    /// [`drive`](Self::drive)'s steps.
    fn drive_steps(
        &self,
        records: &mut SendRecords<K, V>,
        policy: &SendPolicy,
        pending: &mut SendProgress,
        wait: bool,
    ) -> Result<(i32, u64), AppendError> {
        loop {
            let failure = match pending.step {
                Step::Append => match self.append_once(
                    records,
                    policy.acks,
                    &mut pending.idem,
                    match (policy.acks, wait) {
                        (Acks::All, true) => Nudge::Never,
                        (Acks::All, false) => Nudge::Backlog,
                        _ => Nudge::Always,
                    },
                ) {
                    Ok((st, epoch, last)) => {
                        if policy.acks != Acks::All || !wait {
                            pending.step = Step::Await(epoch, last);
                            return Ok((epoch, last));
                        }
                        let st = match st {
                            Some(st) => st,
                            None => match self.served_acked(epoch, last) {
                                Some(st) => st,
                                None => return Ok((epoch, last)),
                            },
                        };
                        match self.await_acks(st, epoch, last, &mut pending.budget, policy) {
                            Ok(last) => return Ok((epoch, last)),
                            Err(f) => f,
                        }
                    }
                    Err(f) => f,
                },
                Step::Await(epoch, last) => {
                    if policy.acks != Acks::All || self.acked_now(epoch, last) {
                        return Ok((epoch, last));
                    }
                    let st = self.state.lock();
                    match self.await_acks(st, epoch, last, &mut pending.budget, policy) {
                        Ok(last) => return Ok((epoch, last)),
                        Err(f) => f,
                    }
                }
            };
            let (why, appended) = match failure {
                Failure::Closed(why) => return Err(why),
                // No retry makes a record smaller, or a fenced producer current.
                Failure::Refused(
                    why @ (AppendError::TooLarge(..) | AppendError::ProducerFenced { .. }),
                ) => return Err(why),
                // A sequence its caller gave: the answer is the caller's (a sequence the
                // producer gave waits for the retries of the records before it instead).
                Failure::Refused(why @ AppendError::OutOfOrderSequence { .. })
                    if pending.idem.explicit =>
                {
                    return Err(why)
                }
                Failure::Refused(why) => (why, false),
                Failure::Appended(why) => (why, true),
            };
            let delivery = pending.budget.delivery(policy);
            if pending.retries == 0 || delivery.is_some_and(time::expired) {
                return Err(why);
            }
            pending.retries -= 1;
            pending.step = Step::Append;
            // Relaxed: counters read for metrics only.
            policy.counters.retries.fetch_add(1, Ordering::Relaxed);
            if appended {
                // Relaxed: as above.
                policy
                    .counters
                    .resent_after_append
                    .fetch_add(1, Ordering::Relaxed);
            }
            // Back off until the partition changes (an election, the ISR growing).
            let backoff = time::deadline_after(RETRY_BACKOFF);
            let until = match (backoff, delivery) {
                (Some(b), Some(d)) => b.min(d),
                (b, d) => match b.or(d) {
                    Some(t) => t,
                    None => continue,
                },
            };
            let mut st = self.state.lock();
            if !st.closed && !time::expired(until) {
                self.changed.wait_until(&mut st, until);
            }
        }
    }

    /// Appends with the policy's retries and waits for the acks level; the last offset.
    pub(super) fn send(
        &self,
        records: &mut SendRecords<K, V>,
        policy: &SendPolicy,
        deadline: Option<Instant>,
    ) -> Result<u64, AppendError> {
        let mut progress = SendProgress::new(policy, deadline);
        self.drive(records, policy, &mut progress, true)
            .map(|(_, last)| last)
    }

    /// [`send`](Self::send) of records whose producer and first sequence the caller gives.
    pub(super) fn send_sequenced(
        &self,
        records: &mut SendRecords<K, V>,
        policy: &SendPolicy,
        id: crate::partition::ProducerIdentity,
        seq: i32,
    ) -> Result<u64, AppendError> {
        let mut progress = SendProgress::new(policy, None);
        progress.idem = Idem {
            producer: Some(id),
            seq: Some(seq),
            deduplicated: false,
            explicit: true,
        };
        self.drive(records, policy, &mut progress, true)
            .map(|(_, last)| last)
    }

    /// `Producer::send_async`'s first half: appends (retrying refusals), does not wait.
    pub(crate) fn begin(
        &self,
        entry: Entry<K, V>,
        policy: &SendPolicy,
    ) -> Result<Pending<K, V>, Refused<K, V>> {
        let mut entry = SendRecords::One(entry);
        let mut progress = SendProgress::new(policy, None);
        // The delivery timeout counts from the send, however late the wait comes.
        progress.budget.sent = Some(time::coarse_ns());
        match self.drive(&mut entry, policy, &mut progress, false) {
            Ok(_) => Ok(Pending { entry, progress }),
            Err(why) => Err((self.take_back(entry), why)),
        }
    }

    /// Its second half: waits for the acks level, retrying (appending again) on failure.
    pub(crate) fn finish(
        &self,
        pending: Pending<K, V>,
        policy: &SendPolicy,
    ) -> Result<u64, Refused<K, V>> {
        let Pending {
            mut entry,
            mut progress,
        } = pending;
        match self.drive(&mut entry, policy, &mut progress, true) {
            Ok((_, last)) => Ok(last),
            Err(why) => Err((self.take_back(entry), why)),
        }
    }

    /// Waits until HW passes `offset` in epoch `epoch`, the epoch changes, the partition
    /// closes, or `deadline` (`Producer::flush`).
    pub(crate) fn settle_at(&self, epoch: i32, offset: u64, deadline: Option<Instant>) {
        let mut st = self.state.lock();
        let mut helps = HELPS;
        while !st.closed && st.epoch == epoch && st.hw <= offset {
            if helps > 0 {
                // As in `await_acks`: copy for the followers rather than wait for it.
                helps -= 1;
                if !self.fetch_all_locked(&mut st) {
                    helps = 0;
                }
                continue;
            }
            match deadline {
                None => self.changed.wait(&mut st),
                Some(d) => {
                    if time::expired(d) || self.changed.wait_until(&mut st, d) {
                        return;
                    }
                }
            }
            helps = HELPS;
        }
    }

    /// `ReplicatedLog::resume_pending`: drives a settled pending send without waiting
    /// for acks (`drive` with `wait` off): at its own step it finds the acknowledgement
    /// (or the failure, at once: it is settled), and a retry stops after its append. The
    /// same place back means acknowledged; a new one, appended again.
    pub(super) fn resume(
        &self,
        pending: Pending<K, V>,
        policy: &SendPolicy,
    ) -> Result<crate::partition::Resumed<K, V>, Refused<K, V>> {
        let Pending {
            mut entry,
            mut progress,
        } = pending;
        let before = progress.appended_at();
        match self.drive(&mut entry, policy, &mut progress, false) {
            Ok(at) if Some(at) == before => Ok(crate::partition::Resumed::Acked(at.1)),
            Ok(_) => Ok(crate::partition::Resumed::Again(Pending {
                entry,
                progress,
            })),
            Err(why) => Err((self.take_back(entry), why)),
        }
    }

    /// `ReplicatedLog::poll_pending`: `Ready` once the pending send's acknowledgement is
    /// settled (see there). Before registering, it copies for the followers under the lock
    /// (bounded, as `await_acks` does), then wakes the fetcher threads; `changed`'s
    /// notifications (`notify`, `close`) wake the task through `acks`.
    pub(super) fn poll_settled(
        &self,
        cx: &mut std::task::Context<'_>,
        slot: &mut crate::sync::WakerSlot,
        pending: &Pending<K, V>,
        policy: &SendPolicy,
    ) -> std::task::Poll<()> {
        let Step::Await(epoch, last) = pending.progress.step else {
            self.acks.cancel_waker(slot);
            return std::task::Poll::Ready(());
        };
        if policy.acks != Acks::All || self.acked_now(epoch, last) {
            self.acks.cancel_waker(slot);
            return std::task::Poll::Ready(());
        }
        let settled =
            |st: &State<K, V>| st.closed || st.epoch != epoch || st.hw > last || st.acked > last;
        {
            let mut st = self.state.lock();
            let mut helps = HELPS;
            while !settled(&st) && helps > 0 {
                helps -= 1;
                if !self.fetch_all_locked(&mut st) {
                    break;
                }
            }
            if settled(&st) {
                drop(st);
                self.acks.cancel_waker(slot);
                return std::task::Poll::Ready(());
            }
            self.wake_followers(&st);
        }
        self.acks.poll_until(
            cx,
            slot,
            || false,
            || (self.acked_now(epoch, last) || settled(&self.state.lock())).then_some(()),
        )
    }
}
