//! Waiting: what a blocking operation does while the queue is full (empty).
//!
//!
//! A thread that finds the queue full (empty) first polls the one stamp it waits on, one
//! spin hint apart, then yields, and only
//! then parks in the `senders` (`receivers`) [`WaitSet`]. A sender polls the stamp a few
//! slots past the tail rather than the first (`freed_before_refill`), so that it does not write the
//! lines the receivers are reading. A blocking receive's first look
//! does not load `tail` (which tells `Disconnected` from `Empty`) when the head slot is
//! empty: that load would make the sender's next claim miss in the cache on every round
//! trip; the look after the dense poll is exact. The other side calls
//! [`WaitSet::notify_all_after_rmw`] after each operation, which costs one load while nobody
//! is parked: the operation's claim (a `SeqCst` CAS) already orders it, so no fence is needed

use super::{Channel, Look};
use crate::queue::error::{RecvTimeoutError, SendTimeoutError, TryRecvError, TrySendError};
use crate::sync::atomic::Ordering;
use crate::sync::time::{self, Instant};
use crate::sync::wait::{Policy, Waiter};
use crate::sync::WaitSet;

/// How a blocking operation waits (the phases are `sync::wait`'s):
/// - **dense poll**: 128 polls of the one stamp it waits on, one spin hint apart. The same
///   budget as the spin rounds of a `Backoff` it replaces (1 + 2 + … + 64 = 127 hints, a few
///   microseconds with the loads): the waiter burns no more time before yielding, but
///   instead of looking again only after exponentially growing spins (which see a reply
///   up to one round late), it sees the stamp
///   move within one poll, which is what a ping-pong round trip and a batch consumer racing
///   a filling queue wait on. The poll reads only that slot's stamp and this side's cursor
///   (no fence, no cursor of the other side);
/// - **skipped after 2 misses**: once three polls in a row on one side saw nothing, that
///   side's waiters skip the poll but for one probe in `sync::wait::PROBE_EVERY` (the side's
///   `PollHistory`, in its `OwnerCache` line). With more runnable threads than cores (MPMC
///   2×2 on two cores) the thread a waiter needs is waiting for this core: a counting build
///   saw almost none of those polls succeed while they took a large share of the samples,
///   and skipping them raised MPMC, SPSC and ping-pong alike on a loaded machine
///   (BENCHMARKS.md, "Tuning constants"); where the other side runs on its own core the polls hit
///   and stay on;
/// - **no spin rounds** (the dense poll took their place);
/// - **36 yields**: the backoff's 4 and 32 more, since waking a parked thread costs far more
///   than a yield (BENCHMARKS.md, "Tuning constants"), so a waiter keeps yielding a while longer
///   when the other side is likely still running;
/// - then it parks;
/// - **pacing** (`Channel::hold_back_if_trailing`): 20 spin hints before an owner looks at
///   the other side's cursor after its last look found it on that side's heels.
///
/// Loom models no time: there a waiter takes one spin round and one yield, then parks.
#[cfg(not(logbus_loom))]
pub(super) const POLICY: Policy = Policy {
    dense_polls: 128,
    skip_after_misses: 2,
    spin_rounds: 0,
    yields: 36,
    pace_spins: 20,
};
#[cfg(logbus_loom)]
pub(super) const POLICY: Policy = Policy {
    dense_polls: 0,
    skip_after_misses: 0,
    spin_rounds: 1,
    yields: 1,
    pace_spins: 0,
};

/// See `Channel::freed_before_refill`.
pub(super) const FREED_BEFORE_REFILL: usize = 16;

/// The outcome of one round of waiting.
pub(super) enum Waited {
    /// Try the operation again.
    Retry,
    /// The deadline passed while the condition did not hold.
    Expired,
}

impl<T> Channel<T> {
    /// One round of waiting: first (once) a dense poll until `changed` says the awaited
    /// stamp moved, then the yields of [`POLICY`], then parking until
    /// `ready` (checked under the wait set's lock after registering, so a notification
    /// cannot be missed).
    pub(super) fn wait(
        &self,
        set: &WaitSet,
        deadline: Option<Instant>,
        waiting: &mut Waiter,
        changed: impl Fn(&Self) -> bool,
        ready: impl Fn(&Self) -> bool,
    ) -> Waited {
        if let Some(deadline) = deadline {
            if time::expired(deadline) {
                return Waited::Expired;
            }
        }
        let history = if std::ptr::eq(set, &*self.senders) {
            &self.send_cache.polls
        } else {
            &self.recv_cache.polls
        };
        if waiting.dense_poll_adaptive(history, || changed(self)) || waiting.pause() {
            return Waited::Retry;
        }
        waiting.before_park();
        // An owner notifies with the light fence only (`publish_stamps`): while the queue is
        // owned, the waiter issues the heavy side of that handshake, once per park. Once
        // shared (for good), the claims' CASes order it.
        match set.wait_until_heavy(
            deadline,
            || !self.owners.is_shared(),
            || ready(self).then_some(()),
        ) {
            Some(()) => Waited::Retry,
            None => Waited::Expired,
        }
    }

    /// A hint for the dense poll of a waiting sender: the receivers have freed a few slots
    /// past the tail (`freed_before_refill`), or the queue is disconnected. Relaxed loads: only a
    /// hint, the retry that follows claims with the full protocol.
    ///
    /// Not the first free slot: a sender that jumps on each slot as it frees writes the
    /// stamp and message lines the receiver is reading next, and both sides then pay a line
    /// transfer per message. Waiting for a few more lets the receiver leave those lines and
    /// the sender fill them in one go. The poll is bounded (`POLICY.dense_polls`), so a receiver
    /// that frees only one slot still lets the sender in, a poll later.
    pub(super) fn send_changed(&self) -> bool {
        let slack = self.freed_before_refill();
        if !self.owners.is_shared() {
            // The owned protocol keeps no stamps: look for the receiving owner's progress
            // past the `head` the failed claim saw. Relaxed: a hint (see above).
            let head = self.head.load(Ordering::Relaxed);
            // Relaxed: a hint (see above).
            let last_head = self.send_cache.cursor.load(Ordering::Relaxed);
            return (head != last_head && self.distance(last_head, head) > slack)
                // Relaxed: a hint (see above).
                || self.tail.load(Ordering::Relaxed) & self.mark_bit != 0;
        }
        // Relaxed: a hint (see above).
        let tail = self.tail.load(Ordering::Relaxed);
        if tail & self.mark_bit != 0 {
            return true;
        }
        let pos = self.advance(tail, slack);
        // Relaxed: a hint (see above).
        let stamp = self.stamps[pos & (self.mark_bit - 1)].load(Ordering::Relaxed);
        // No longer last lap's message: freed (or taken by a receiver about to free it).
        stamp.wrapping_add(self.one_lap) != pos + 1
    }

    /// How many slots past the first free one a sender waiting on a full queue waits to see
    /// freed (`send_changed`): two lines of stamps, at most half the queue. Chosen in
    /// interleaved runs of `queue_vs_peers`, where senders often find the queue full, over
    /// 0, 8 and 32 (BENCHMARKS.md, "Tuning constants").
    #[inline]
    pub(super) fn freed_before_refill(&self) -> usize {
        FREED_BEFORE_REFILL.min((self.cap - 1) / 2)
    }

    /// A hint for the dense poll of a waiting receiver: the slot at the head is no longer
    /// empty for this lap. Disconnection is left to the yields (the poll ends
    /// after `POLICY.dense_polls` at most). Relaxed loads, as in `send_changed`.
    pub(super) fn recv_changed(&self) -> bool {
        if !self.owners.is_shared() {
            // The owned protocol keeps no stamps: `tail` moved (or was marked) past `head`.
            // Relaxed: a hint (see above).
            return self.tail.load(Ordering::Relaxed) != self.head.load(Ordering::Relaxed);
        }
        // Relaxed: a hint (see above).
        let head = self.head.load(Ordering::Relaxed);
        // Relaxed: a hint (see above).
        self.stamps[head & (self.mark_bit - 1)].load(Ordering::Relaxed) != head
    }

    /// Whether a sender could make progress (checked by a registered waiter, see
    /// `WaitSet`). Two predicates, one for each way a receiver notifies:
    /// - std build: receivers notify with [`WaitSet::notify_all_after_rmw`], no fence; the
    ///   progress they publish is their `SeqCst` CAS on `head`, so the waiter must look at
    ///   the cursors (read by read-modify-write, as that method requires): a receiver has
    ///   claimed a slot of the last lap, so one is free or about to be. A retry that finds
    ///   the receiver still in flight yields and looks again (as crossbeam-channel spins
    ///   there).
    /// - loom build: `notify_all_after_rmw` keeps the fence, which lets the waiter use the
    ///   exact predicate (the slot at the tail is free, by its stamp) and park through the
    ///   in-flight window. Loom explores a waiter spinning on an in-flight peer without
    ///   bound, so it checks this fenced variant; the std variant rests on the argument in
    ///   `notify_all_after_rmw`, the same one crossbeam-channel's waker relies on.
    ///
    /// Both read the cursors with read-modify-writes: they see the newest values (a plain
    /// load may return an older one, and a waiter would retry and find nothing, in a loop
    /// that never parks), and a cursor that moves while we look means ready (retry) rather
    /// than sleeping on a stale view.
    pub(super) fn send_ready(&self) -> bool {
        let tail = self.tail.fetch_add(0, Ordering::SeqCst);
        if tail & self.mark_bit != 0 {
            return true;
        }
        // The owned protocol has no in-flight window (an owner publishes with one store)
        // and keeps no stamps: the cursors are exact there, in both builds.
        if cfg!(logbus_loom) && self.owners.is_shared() {
            // Acquire: pairs with the Release stamp store in `consume`.
            let stamp = self.stamps[tail & (self.mark_bit - 1)].load(Ordering::Acquire);
            stamp == tail || self.tail.fetch_add(0, Ordering::SeqCst) != tail
        } else {
            let head = self.head.fetch_add(0, Ordering::SeqCst);
            head.wrapping_add(self.one_lap) != tail
        }
    }

    /// Whether a receiver could make progress; the mirror image of `send_ready`: std build,
    /// a sender has claimed a slot (its `SeqCst` CAS on `tail`) or the queue is
    /// disconnected; loom build, the slot at the head holds a message (by its stamp) or the
    /// queue is disconnected with no send in flight.
    pub(super) fn recv_ready(&self) -> bool {
        let head = self.head.fetch_add(0, Ordering::SeqCst);
        let tail = self.tail.fetch_add(0, Ordering::SeqCst);
        // As in `send_ready`: cursors in the owned protocol.
        if cfg!(logbus_loom) && self.owners.is_shared() {
            // Acquire: pairs with the Release stamp store in `publish`.
            let stamp = self.stamps[head & (self.mark_bit - 1)].load(Ordering::Acquire);
            stamp == head + 1
                || (tail & self.mark_bit != 0 && tail & !self.mark_bit == head)
                || self.head.fetch_add(0, Ordering::SeqCst) != head
        } else {
            tail & self.mark_bit != 0 || tail & !self.mark_bit != head
        }
    }

    /// `send` past the owned fast path.
    #[inline(never)]
    pub(super) fn send_slow(
        &self,
        mut msg: T,
        deadline: Option<Instant>,
    ) -> Result<(), SendTimeoutError<T>> {
        let mut waiting = Waiter::new(POLICY);
        // A local, not a field of `waiting`: the fast path reads nothing back from it.
        let mut look = Look::first(deadline);
        loop {
            let this = look;
            look = this.again();
            match self.send_now(msg, this) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Disconnected(m)) => {
                    return Err(SendTimeoutError::Disconnected(m))
                }
                Err(TrySendError::Full(m)) => msg = m,
            }
            if let Waited::Expired = self.wait(
                &self.senders,
                deadline,
                &mut waiting,
                Self::send_changed,
                Self::send_ready,
            ) {
                return Err(SendTimeoutError::Timeout(msg));
            }
        }
    }

    /// `recv` past the owned fast path.
    #[inline(never)]
    pub(super) fn recv_slow(&self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        self.recv_waiting(deadline, |look| self.recv_now(look))
    }

    /// Runs `attempt` (a receive of one message or of a batch, looking as told) until it
    /// takes something, finds the queue disconnected and drained, or `deadline` passes,
    /// waiting on the receivers' set between attempts.
    #[inline(always)]
    pub(super) fn recv_waiting<R>(
        &self,
        deadline: Option<Instant>,
        mut attempt: impl FnMut(Look) -> Result<R, TryRecvError>,
    ) -> Result<R, RecvTimeoutError> {
        let mut waiting = Waiter::new(POLICY);
        // As in `send`.
        let mut look = Look::first(deadline);
        loop {
            let this = look;
            look = this.again();
            match attempt(this) {
                Ok(r) => return Ok(r),
                Err(TryRecvError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
                Err(TryRecvError::Empty) => {}
            }
            if let Waited::Expired = self.wait(
                &self.receivers,
                deadline,
                &mut waiting,
                Self::recv_changed,
                Self::recv_ready,
            ) {
                return Err(RecvTimeoutError::Timeout);
            }
        }
    }
}
