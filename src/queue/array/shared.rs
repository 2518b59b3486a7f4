//! The stamped protocol, which any number of threads run at once.
//!
//!
//! # Linearizability
//!
//! A claim is an operation's linearization point: once a sender's CAS has moved `tail`
//! past a slot, its send has taken effect, even before the message is written. So a look
//! that finds the slot at `head` claimed but not yet written (or, for a sender, the slot at
//! `tail` claimed by a receiver but not yet freed) waits that operation out instead of
//! reporting `Empty` (`Full`), as crossbeam's array flavour does: `try_recv`, `try_send`
//! and the batch forms answer as if the queue were behind one lock (a batch as a sequence
//! of single operations that stops only where the queue was empty, full). The window is a
//! few instructions long unless the other thread was descheduled, and the wait yields.
//! Only a blocking operation without a deadline skips this: nobody sees its answer, and it
//! waits for the stamp (or parks) and looks again.

use std::mem::MaybeUninit;
use std::ptr;

use super::owned::store_own_cursor;
use super::{Channel, Claim, Look};
use crate::queue::error::{TryRecvError, TrySendError};
use crate::sync::atomic::{fence, AtomicUsize, Ordering};
use crate::sync::Backoff;

/// The ordering of [`read_awaited`]'s load, on both builds: one constant, so that weakening
/// it is seen by the models, which run the loom form. Acquire: pairs with the Release stamp
/// store ([`STAMP_STORE`]) the waiter waits for. Only `take_for_discard` reads a slot on the
/// strength of it; the claims look again with their own Acquire stamp load before they
/// touch one. The crate's one drain, the queue's drop, runs after every handle is gone, and
/// the `Arc` holding the queue (each handle's Release decrement, the last one's Acquire)
/// already orders every sender's write before it: there the std build needs no Acquire. It
/// is kept for the drain's contract, waiting out a send claimed before the disconnection,
/// which `a_drain_waits_out_a_send_claimed_before_the_disconnection` checks (it fails when
/// this is Relaxed).
const AWAITED_LOAD: Ordering = Ordering::Acquire;

/// Reads the stamp a thread waits on to change (an operation of the other side in flight on
/// that slot). Under loom by a read-modify-write, which reads the newest value: a load may
/// return the old one for ever, and the model's wait would never end (loom counts it as a
/// spin lock). A plain load on the std build, where a store becomes visible. Both with
/// [`AWAITED_LOAD`]: an RMW that only reads orders no more than the load with its ordering.
#[inline]
pub(super) fn read_awaited(stamp: &AtomicUsize) -> usize {
    if cfg!(logbus_loom) {
        stamp.fetch_add(0, AWAITED_LOAD)
    } else {
        stamp.load(AWAITED_LOAD)
    }
}

/// The ordering of [`store_stamp`], on both builds: one constant, so that weakening it is
/// seen by the models, which run the loom form. Release: publishes the slot accesses made
/// before to the other side's Acquire stamp loads (named at each call).
const STAMP_STORE: Ordering = Ordering::Release;

/// Stores a slot's stamp with [`STAMP_STORE`]. Under loom a `swap`: loom 0.7 can lose a
/// plain store that races a read-modify-write of the same atomic (tokio-rs/loom#254), here
/// `read_awaited`, and the waiter would wait for ever. The swap publishes this thread's
/// accesses exactly as the store does; it may also carry on the release sequence of the
/// slot's previous stamp store, which the std store does not, so the models see at most
/// that edge more than the std build has.
#[inline]
pub(super) fn store_stamp(stamp: &AtomicUsize, value: usize) {
    if cfg!(logbus_loom) {
        stamp.swap(value, STAMP_STORE);
    } else {
        stamp.store(value, STAMP_STORE);
    }
}

impl<T> Channel<T> {
    /// How many consecutive slots from `index` (at most `max`, within the lap) carry the
    /// stamps `stamp, stamp + 1, ...`: the run a claim can take once the slot at `index`
    /// was seen with `stamp` (empty slots for a sender, messages for a receiver).
    pub(super) fn run_len(&self, index: usize, max: usize, stamp: usize) -> usize {
        let limit = max.min(self.cap - index);
        let mut n = 1;
        // Acquire: pairs with the Release stamp store that made each further slot
        // empty (`free_run`) or full (`publish_stamps`), as for the first one.
        while n < limit && self.stamps[index + n].load(Ordering::Acquire) == stamp + n {
            n += 1;
        }
        n
    }

    /// Claims up to `max` (≥ 1) consecutive empty slots of the current lap for sending.
    ///
    /// With `look.settle`, `Full` means the queue was full at one instant during the call:
    /// a slot whose receiver has claimed it (moved `head` past it) but not yet freed it is
    /// waited out, since that receive has taken effect. Otherwise such a slot is reported
    /// as `Full` at once (the first look of a blocking send, which retries anyway).
    pub(super) fn claim_send(&self, max: usize, look: Look) -> Result<Claim, TrySendError<()>> {
        let side = &self.owners.send;
        if let Some(me) = self
            .owners
            .enter(side, || self.moved(&self.tail), || self.convert())
        {
            let claim = self.claim_send_owned(max, look, me);
            if claim.is_err() {
                self.owners.leave(side, me);
            }
            return claim;
        }
        let mut backoff = Backoff::new();
        // Relaxed: only a guess; the CAS below validates it.
        let mut tail = self.tail.load(Ordering::Relaxed);
        loop {
            if tail & self.mark_bit != 0 {
                return Err(TrySendError::Disconnected(()));
            }
            let index = tail & (self.mark_bit - 1);
            // Acquire: pairs with the Release stamp store of the receiver that emptied the
            // slot, so its read of the old message happens before our write.
            let stamp = self.stamps[index].load(Ordering::Acquire);
            if stamp == tail {
                let n = self.run_len(index, max, tail);
                let new_tail = self.advance(tail, n);
                // SeqCst on success: one total order with the disconnect mark and the
                // fences of the full/empty checks (Relaxed on failure: we only retry).
                match self.tail.compare_exchange_weak(
                    tail,
                    new_tail,
                    Ordering::SeqCst,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        return Ok(Claim {
                            pos: tail,
                            n,
                            held: None,
                        })
                    }
                    Err(current) => {
                        tail = current;
                        backoff.spin();
                    }
                }
            } else if stamp.wrapping_add(self.one_lap) == tail + 1 {
                // The slot still holds last lap's message: full, unless a receiver is
                // between its claim and its stamp store.
                if !look.settle {
                    return Err(TrySendError::Full(()));
                }
                // SeqCst: orders the load of `head` after the stamp load in the total order
                // of the cursor CASes, as in `claim_recv`.
                fence(Ordering::SeqCst);
                // Relaxed: ordered by the fence above.
                let head = self.head.load(Ordering::Relaxed);
                if head.wrapping_add(self.one_lap) == tail {
                    // Nobody has claimed the slot: full at this instant.
                    return Err(TrySendError::Full(()));
                }
                // A receiver moved `head` past the slot: its receive has taken effect and
                // the slot is as good as free. Wait for its stamp store (crossbeam's array
                // flavour waits there too); it is a few instructions away unless that
                // thread was descheduled, and `snooze` yields.
                while read_awaited(&self.stamps[index]) == stamp {
                    backoff.snooze();
                }
                // Relaxed: a guess, validated by the CAS.
                tail = self.tail.load(Ordering::Relaxed);
            } else {
                // Another sender claimed this slot and has not finished; look again.
                backoff.snooze();
                // Relaxed: a guess, validated by the CAS.
                tail = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Writes the messages of `msgs` into the claimed slots and publishes them: all the
    /// messages first, then all the stamps, so a run's message lines are written in one
    /// tight loop and its stamp lines are touched once.
    ///
    /// # Safety
    ///
    /// `claim` came from `claim_send` and is written exactly once; `msgs` yields at least
    /// `claim.n` messages and cannot panic (only trusted iterators are passed: `Once`,
    /// `vec::Drain`), since receivers would wait forever on a claimed slot left unwritten.
    pub(super) unsafe fn publish(&self, claim: Claim, msgs: impl Iterator<Item = T>) {
        let index = claim.pos & (self.mark_bit - 1);
        let cells = &self.cells[index..index + claim.n];
        let mut written = 0;
        for (cell, msg) in cells.iter().zip(msgs) {
            // SAFETY: `claim_send` gave this thread the slot: by a CAS past a stamp saying
            // empty (shared; no other sender can claim the position again), or as the
            // sending owner with the slot between `tail` and the receiver's `head` (owned).
            // No receiver reads it before the stamp or cursor store that publishes it.
            cell.with_mut(|p| unsafe { ptr::write(p, MaybeUninit::new(msg)) });
            written += 1;
        }
        debug_assert_eq!(written, claim.n, "a claimed slot was left unwritten");
        self.publish_stamps(&claim);
    }

    /// Publishes a claimed run whose messages are all written: stores its stamps and wakes
    /// parked receivers.
    pub(super) fn publish_stamps(&self, claim: &Claim) {
        if let Some(me) = claim.held {
            store_own_cursor(
                &self.tail,
                &self.send_cache,
                self.advance(claim.pos, claim.n),
            );
            // No read-modify-write ordered the progress: the light fence pairs with the heavy
            // one a parking waiter issues in the owned protocol (`wait`).
            self.owners
                .leave_notifying(&self.owners.send, me, &self.receivers);
            return;
        }
        let index = claim.pos & (self.mark_bit - 1);
        // Last slot first: a receiver claims a run from its first slot on, so once it sees
        // the first stamp the whole run is there and it takes the run with one claim
        // instead of chasing the stamps one by one.
        for (i, stamp) in self.stamps[index..index + claim.n].iter().enumerate().rev() {
            // Release: pairs with the Acquire stamp load in `claim_recv`, publishing the
            // message writes made before this call.
            store_stamp(stamp, claim.pos + i + 1);
        }
        // The claim's SeqCst CAS on `tail` published the progress receivers wait for.
        self.receivers.notify_all_after_rmw();
    }

    /// Claims up to `max` (≥ 1) consecutive full slots of the current lap for receiving.
    ///
    /// With `exact` false, an empty slot at the head is reported as `Empty` at once, without
    /// the fence and the load of `tail` that tell `Disconnected` apart: the first look of a
    /// blocking receive, which then polls the head's stamp and looks again exactly. Loading
    /// `tail` there would pull the senders' cursor line away from them just before the
    /// send the receiver is waiting for (a cache miss on the round trip of every hop).
    pub(super) fn claim_recv(&self, max: usize, look: Look) -> Result<Claim, TryRecvError> {
        let exact = look.exact;
        let side = &self.owners.recv;
        if let Some(me) = self
            .owners
            .enter(side, || self.moved(&self.head), || self.convert())
        {
            let claim = self.claim_recv_owned(max, look, me);
            if claim.is_err() {
                self.owners.leave(side, me);
            }
            return claim;
        }
        let mut backoff = Backoff::new();
        // Relaxed: only a guess; the CAS below validates it.
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            let index = head & (self.mark_bit - 1);
            // Acquire: pairs with the Release stamp store in `publish`: the message is written.
            let stamp = self.stamps[index].load(Ordering::Acquire);
            if stamp == head + 1 {
                let n = self.run_len(index, max, head + 1);
                let new_head = self.advance(head, n);
                // SeqCst on success: one total order with the tail and the fences of the
                // full/empty checks (Relaxed on failure: we only retry).
                match self.head.compare_exchange_weak(
                    head,
                    new_head,
                    Ordering::SeqCst,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        return Ok(Claim {
                            pos: head,
                            n,
                            held: None,
                        })
                    }
                    Err(current) => {
                        head = current;
                        backoff.spin();
                    }
                }
            } else if stamp == head && !exact {
                return Err(TryRecvError::Empty);
            } else if stamp == head {
                // The slot is empty for this lap: the queue is empty, unless a sender is
                // between its claim and its stamp store. SeqCst: orders the load of `tail`
                // after the stamp load in the total order of the cursor CASes (a sender's
                // claim of this slot moved `tail` before it stored the stamp).
                fence(Ordering::SeqCst);
                // Relaxed: ordered by the fence above.
                let tail = self.tail.load(Ordering::Relaxed);
                if tail & !self.mark_bit == head || !look.settle {
                    // Nobody has claimed the slot: empty at this instant (`head` only grows
                    // and never passes `tail`). (Or a sender has, and this look need not
                    // wait for it: not disconnected then, since the mark stops claims.)
                    return Err(
                        if tail & !self.mark_bit == head && tail & self.mark_bit != 0 {
                            TryRecvError::Disconnected
                        } else {
                            TryRecvError::Empty
                        },
                    );
                }
                // A sender moved `tail` past the slot: its send has taken effect (a thread
                // may already have seen it complete), so reporting `Empty` would be a lie.
                // Wait for its stamp store, as crossbeam's array flavour does; `snooze`
                // yields, for a sender that was descheduled.
                while read_awaited(&self.stamps[index]) == stamp {
                    backoff.snooze();
                }
                // Relaxed: a guess, validated by the CAS.
                head = self.head.load(Ordering::Relaxed);
            } else {
                // Another receiver claimed this slot and has not finished; look again.
                backoff.snooze();
                // Relaxed: a guess, validated by the CAS.
                head = self.head.load(Ordering::Relaxed);
            }
        }
    }

    /// Reads the messages out of the claimed slots, hands each to `sink`, then frees the
    /// slots (all the messages first, then all the stamps, as in `publish`).
    ///
    /// # Safety
    ///
    /// `claim` came from `claim_recv` and is consumed exactly once; `sink` cannot panic
    /// (senders would wait forever on a slot never freed).
    pub(super) unsafe fn consume(&self, claim: Claim, mut sink: impl FnMut(T)) {
        let index = claim.pos & (self.mark_bit - 1);
        for cell in &self.cells[index..index + claim.n] {
            // SAFETY: `claim_recv` gave this thread the slot, which holds an initialised
            // message (its stamp said so, or the sending owner's `tail` had passed it); we
            // move it out exactly once (`free_run`, after the reads, hands the slot to the
            // next lap's sender).
            sink(cell.with(|p| unsafe { ptr::read(p).assume_init() }));
        }
        self.free_run(&claim);
    }

    /// Frees a claimed run whose messages were all moved out: stores its stamps for the next
    /// lap and wakes parked senders.
    pub(super) fn free_run(&self, claim: &Claim) {
        if let Some(me) = claim.held {
            store_own_cursor(
                &self.head,
                &self.recv_cache,
                self.advance(claim.pos, claim.n),
            );
            // As in `publish_stamps`.
            self.owners
                .leave_notifying(&self.owners.recv, me, &self.senders);
            return;
        }
        let index = claim.pos & (self.mark_bit - 1);
        // Last slot first, for the same reason as in `publish_stamps`.
        for (i, stamp) in self.stamps[index..index + claim.n].iter().enumerate().rev() {
            // Release: pairs with the Acquire stamp load in `claim_send` (next lap's write
            // comes after the reads made before this call).
            store_stamp(stamp, claim.pos + i + self.one_lap);
        }
        // The claim's SeqCst CAS on `head` published the progress senders wait for.
        self.senders.notify_all_after_rmw();
    }

    /// Takes the next message of a disconnected queue, to discard it: waits out a sender that
    /// claimed its slot before the disconnection but has not written it yet. `None` once the
    /// queue is empty.
    ///
    /// Only one thread drains at a time: in the crate, the queue's own drop (once every
    /// handle is gone, so no send is in flight there).
    pub(super) fn take_for_discard(&self) -> Option<T> {
        // SeqCst: after the disconnect mark no claim moves `tail` again, so this is final.
        let tail = self.tail.load(Ordering::SeqCst) & !self.mark_bit;
        // Relaxed: only this thread moves `head` now (no receiver is left).
        let head = self.head.load(Ordering::Relaxed);
        if head == tail {
            return None;
        }
        let index = head & (self.mark_bit - 1);
        let stamp = &self.stamps[index];
        let mut backoff = Backoff::new();
        // `AWAITED_LOAD`, Acquire: orders the read of the message below after the send.
        while read_awaited(stamp) != head + 1 {
            backoff.snooze();
        }
        // Relaxed: no other receiver reads `head` any more; senders see the mark first.
        self.head.store(self.advance(head, 1), Ordering::Relaxed);
        // SAFETY: the stamp says the slot holds a message and no other receiver exists, so
        // this thread moves it out exactly once (head moved past it before it is dropped).
        let msg = self.cells[index].with(|p| unsafe { ptr::read(p).assume_init() });
        // Release: pairs with the Acquire stamp load of any later reader of the slot.
        store_stamp(stamp, head.wrapping_add(self.one_lap));
        Some(msg)
    }
}
