//! Appends combined under one lock hold (flat combining): a sender that finds the
//! partition locked queues its records, and the holder appends them with its own before it
//! lets go, so the partition's state stays on one core while several producers send.
//!
//! Without it, two producers sending batches took the lock in turn, and each hand-off
//! moved the partition's state (its lock, three logs' ends, HW, the chunks' counts) to the
//! other core and often parked the loser: RF 3 `acks = all` ran at half its one-producer
//! rate with two (BENCHMARKS.md, "Tuning constants"). Now the holder appends both, helps the
//! followers copy both in one fetch each, and moves HW once.
//!
//! The protocol: a request enters the queue under the queue's lock, and leaves it only in
//! the hands of a thread holding the partition's lock, which appends it and marks it done
//! before it unlocks the partition. So a sender that takes the partition's lock itself and
//! finds its request not done finds it still queued, takes it out and appends it itself:
//! every request is appended exactly once, by whichever comes first.

use super::{Failure, Nudge, ReplicaSet, SendRecords, State};
use crate::partition::progress::Idem;
use crate::partition::{Acks, AppendError};
use crate::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use crate::sync::StdArc as Arc;
use crate::sync::{hint, thread};
use crate::sync::{Backoff, Mutex, MutexGuard};

/// What an append attempt gives: the epoch and the last offset, or why it failed.
pub(super) type Outcome = Result<(i32, u64), Failure>;

/// A send waiting in the queue for the partition's lock holder to append it.
pub(super) struct Queued<K, V> {
    /// The sender's records, lent: the holder appends them (a single record moves into
    /// the leader's open chunk), and the sender takes them back (for its retries, or to
    /// hand back on failure) once done or taken out of the queue.
    records: Mutex<SendRecords<K, V>>,
    acks: Acks,
    /// Its idempotence: the holder assigns the sequence at the first append; the sender
    /// takes it back with the records.
    idem: Mutex<Idem>,
    nudge: Nudge,
    /// Set (after `outcome`) by the thread that appended it, under the partition's lock.
    done: AtomicBool,
    /// The append's outcome, or the panic it raised (a user codec's, on a persisted
    /// topic): the sender's to take, and to resume in its own thread.
    outcome: Mutex<Option<std::thread::Result<Outcome>>>,
}

impl<K, V> Queued<K, V> {
    /// The outcome; a panic raised appending this request (by the holder, for it) goes on
    /// unwinding here, in the thread of the send that caused it.
    fn take(&self) -> Outcome {
        // `done` is set only after the outcome; `None` cannot be seen, and would mean the
        // append's fate is unknown: reported as a refusal the policy may retry.
        match self.outcome.lock().take() {
            Some(Ok(outcome)) => outcome,
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            None => Err(Failure::Refused(AppendError::LeaderNotAvailable)),
        }
    }
}

/// The sends queued for the lock holder, and when a sender hands its send over rather
/// than take a free lock.
pub(super) struct Combiner<K, V> {
    queue: Mutex<Vec<Arc<Queued<K, V>>>>,
    /// Whether the queue may hold requests; written under the queue's lock.
    queued: AtomicBool,
    /// The thread (`thread::token`) that appended last, 0 at first.
    owner: AtomicUsize,
    /// Whether a blocking `acks = all` sender hands its records to the last appender even
    /// when the lock is free (see `enter`): on once a queued send was served, off once a
    /// sender waited for the owner in vain.
    delegating: AtomicBool,
}

impl<K, V> Default for Combiner<K, V> {
    fn default() -> Self {
        Self {
            queue: Mutex::new(Vec::new()),
            queued: AtomicBool::new(false),
            owner: AtomicUsize::new(0),
            delegating: AtomicBool::new(false),
        }
    }
}

/// Spin hints a delegating sender waits for the owner before it takes the lock itself:
/// about one batch send's time on the owner's side (BENCHMARKS.md, "Tuning constants").
const DELEGATE_SPINS: u32 = 1000;

/// How a sender got its append done.
pub(super) enum Entered<'a, K, V> {
    /// It holds the partition's lock, its records not appended yet.
    Locked(MutexGuard<'a, State<K, V>>),
    /// The holder appended them for it.
    Served(Outcome),
}

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> ReplicaSet<K, V> {
    /// Takes the partition's lock to append `entries`, or queues them for the thread that
    /// holds it and waits until that thread appended them or the lock is free.
    ///
    /// A blocking `acks = all` sender (`Nudge::Never`) while `delegating` is on queues
    /// even when the lock is free if another thread appended last, and waits a little for
    /// it to come back: two producers taking a free lock in turn moved the partition's
    /// state between the cores at every send, which cost more than the sends themselves;
    /// this way one thread appends for both and helps their followers copy both at once.
    pub(super) fn enter(
        &self,
        records: &mut SendRecords<K, V>,
        acks: Acks,
        idem: &mut Idem,
        nudge: Nudge,
    ) -> Entered<'_, K, V> {
        // Only blocking `acks = all` senders hand over a send the lock does not force them
        // to, and only they name the owner (other sends skip the thread's token).
        let me = (nudge == Nudge::Never).then(thread::token);
        // Relaxed (both): hints; whoever appends, the protocol below holds.
        let delegate = me.is_some_and(|me| {
            self.combiner.delegating.load(Ordering::Relaxed)
                && !matches!(self.combiner.owner.load(Ordering::Relaxed), o if o == 0 || o == me)
        });
        if !delegate {
            if let Some(st) = self.state.try_lock() {
                self.own(me);
                return Entered::Locked(st);
            }
            if nudge == Nudge::Always && records.count() == 1 {
                // A single `acks = 0 / 1` record: the holder is most often a fetcher
                // copying, which serves no queue, and queueing cost a request's allocation
                // and a spin-and-yield before the lock (single `acks = 1` sends measured
                // slower, with a higher p50: BENCHMARKS.md, "Tuning constants"). Wait on the lock,
                // as before combining; batches still queue (they gain from it).
                return Entered::Locked(self.state.lock());
            }
        }
        let req = Arc::new(Queued {
            records: Mutex::new(std::mem::replace(records, SendRecords::Lent)),
            acks,
            idem: Mutex::new(*idem),
            nudge,
            done: AtomicBool::new(false),
            outcome: Mutex::new(None),
        });
        {
            let mut queue = self.combiner.queue.lock();
            queue.push(Arc::clone(&req));
            // Relaxed: a hint, written under the queue's lock (see `serve`).
            self.combiner.queued.store(true, Ordering::Relaxed);
        }
        let st = self.wait_served(&req, delegate);
        // Back from the request, appended or not: done, or (under the lock) still queued.
        let lent = |records: &mut SendRecords<K, V>, idem: &mut Idem| {
            *records = std::mem::replace(&mut *req.records.lock(), SendRecords::Lent);
            *idem = *req.idem.lock();
        };
        let Some(st) = st else {
            lent(records, idem);
            return Entered::Served(req.take());
        };
        // Under the partition's lock: a thread that appended the request marked it done
        // before it unlocked, so a request not done is still queued, and this sender
        // appends it (without this check, the loom model
        // `combined_sends_are_appended_once` appends a served request twice).
        // Relaxed: the partition's lock orders it after the server's store.
        if req.done.load(Ordering::Relaxed) {
            drop(st);
            lent(records, idem);
            return Entered::Served(req.take());
        }
        {
            let mut queue = self.combiner.queue.lock();
            queue.retain(|q| !Arc::ptr_eq(q, &req));
            if queue.is_empty() {
                // Relaxed: as in the push above.
                self.combiner.queued.store(false, Ordering::Relaxed);
            }
        }
        lent(records, idem);
        if delegate {
            // The owner did not come back in time: stop handing sends over until a
            // contended lock shows senders overlapping again (`serve`).
            // Relaxed: a hint.
            self.combiner.delegating.store(false, Ordering::Relaxed);
        }
        self.own(me);
        Entered::Locked(st)
    }

    /// Records the appending thread, a blocking `acks = all` sender's (written only when
    /// it changes: the line stays shared while one thread appends).
    fn own(&self, me: Option<usize>) {
        let Some(me) = me else { return };
        // Relaxed (both): a hint.
        if self.combiner.owner.load(Ordering::Relaxed) != me {
            self.combiner.owner.store(me, Ordering::Relaxed);
        }
    }

    /// Waits until `req` is done (`None`) or the partition's lock is taken (`Some`).
    /// `delegate`: the lock may be free; wait `DELEGATE_SPINS` for its owner first.
    /// Then spin while the holder is busy (it appends the request within its critical
    /// section), trying the lock, and block on it in the end.
    fn wait_served(
        &self,
        req: &Queued<K, V>,
        delegate: bool,
    ) -> Option<MutexGuard<'_, State<K, V>>> {
        if delegate && !cfg!(logbus_loom) {
            for _ in 0..DELEGATE_SPINS {
                // Acquire: as below.
                if req.done.load(Ordering::Acquire) {
                    return None;
                }
                hint::spin_loop();
            }
        }
        let mut backoff = Backoff::new();
        loop {
            // Acquire: pairs with the Release store in `serve` (the outcome is read under
            // its own lock; this orders the append before what the sender does next).
            if req.done.load(Ordering::Acquire) {
                return None;
            }
            if cfg!(logbus_loom) || backoff.is_completed() {
                // Under loom, straight to the lock: a spin adds schedules, not cases.
                return Some(self.state.lock());
            }
            if let Some(st) = self.state.try_lock() {
                return Some(st);
            }
            backoff.snooze();
        }
    }

    /// Appends every queued request (the caller holds the partition's lock, having made
    /// its own append), marking each done. `moved`: set if HW moved; `wake`: raised to the
    /// strongest fetcher wake-up a successful request asked for.
    pub(super) fn serve(&self, st: &mut State<K, V>, moved: &mut bool, wake: &mut Nudge) {
        // Relaxed: a hint; a request missed here is appended by its own sender once it
        // takes the lock (it re-checks `done` under it).
        if !self.combiner.queued.load(Ordering::Relaxed) {
            return;
        }
        let mut served = std::mem::take(&mut st.served);
        {
            let mut queue = self.combiner.queue.lock();
            std::mem::swap(&mut *queue, &mut served);
            // Relaxed: as in `enter`.
            self.combiner.queued.store(false, Ordering::Relaxed);
        }
        // Relaxed: a hint (see `enter`).
        if !served.is_empty() && !self.combiner.delegating.load(Ordering::Relaxed) {
            self.combiner.delegating.store(true, Ordering::Relaxed);
        }
        for req in served.drain(..) {
            // A panic appending someone else's records (a user codec's, encoding them for
            // a persisted topic) is theirs: caught here and resumed in their sender's
            // thread (`Queued::take`), so the holder's own send, already appended, still
            // returns, and every queued request is marked done. The state is as a panic in
            // the sender's own append would leave it (the lock does not poison).
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.append_locked(
                    st,
                    &mut req.records.lock(),
                    req.acks,
                    &mut req.idem.lock(),
                    moved,
                )
            }));
            if matches!(outcome, Ok(Ok(_))) {
                *wake = (*wake).max(req.nudge);
            }
            *req.outcome.lock() = Some(outcome);
            // Release: pairs with the Acquire load in `wait_served`.
            req.done.store(true, Ordering::Release);
        }
        st.served = served;
    }
}
