//! The owned protocol: one thread per side at a time, and its conversion to the shared one.
//!
//! Each side is *owned* by one thread at a time (`owners`), and the queue runs Lamport's
//! single-producer single-consumer protocol instead of the above:
//! - the sender writes the messages and stores `tail`, and the receiver reads them and
//!   stores `head`, each with a plain `Release` store (`store_own_cursor`);
//! - each side checks for room or messages against a cached copy of the other's cursor;
//! - no stamps are kept and there is no locked instruction per message.
//!
//! The stamp protocol pays a locked instruction per message on each side; this one pays
//! none (figures in BENCHMARKS.md). An owner notifies with a light fence ([`Owners::leave_notifying`]),
//! so a waiter issues [`asym_fence::heavy`] before it parks while the queue is owned.
//!
//! Each owner keeps, on a line of its own (`OwnerCache`), a copy of its own cursor, the other
//! side's cursor at its last look, and how many slots that look showed it (free slots for
//! the sender, messages for the receiver) that it has not used yet (`available`). A single
//! send or receive those cover takes an inline fast path
//! (`send_owned_fast`, `recv_owned_fast`): hold the side, move one message, store the
//! cursor, leave. It never reads a line the other side writes, except the message's own; a
//! look at the other side's cursor happens once per run, in `claim_send_owned` /
//! `claim_recv_owned`, and a blocking owner that keeps finding short runs (it is *trailing*
//! the other side) holds back a few spin hints before it looks (`hold_back_if_trailing`).
//!
//! Another thread operating on a side takes it over (the owner's `OwnerCache` goes with the
//! side), and the queue stays owned. When a side changes hands faster than its budget
//! allows (`owners`), the queue is *revoked*: the owners' operations in flight are waited
//! out, every stamp is rebuilt from the two cursors (`convert`), and from then on every
//! thread runs the shared protocol for good. `disconnect` and `discard_all` revoke first,
//! since an owner's plain store of `tail` would overwrite the disconnect mark. Under loom
//! the public constructor keeps queues shared (see `with_capacity`), and the array
//! module's own models (`loom_models.rs`) check the owned protocol, its changes of owner and its revocation.
//!
//! # Linearizability
//!
//! An owner publishes with one cursor store, so there is no claimed-but-unwritten window as
//! in the shared protocol; but the cursors move by plain stores: an owner that finds the
//! queue full (empty) fences and reads the other cursor again before it says so, and `len`
//! fences before it reads both cursors (see `claim_send_owned`).

use std::mem::MaybeUninit;
use std::ptr;

use super::waiting::POLICY;
use super::{Channel, Claim, Look};
use crate::queue::error::{TryRecvError, TrySendError};
use crate::queue::owners::Side;
use crate::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use crate::sync::wait::{self, PollHistory};

/// What a side's owner remembers of the other side's cursor between its operations (owned
/// protocol). Only the owner touches it: atomics only because the channel is shared.
pub(super) struct OwnerCache {
    /// The owner's own cursor (`tail` for the sender, `head` for the receiver), which only
    /// it moves: it reads this copy, never the shared cursor, whose line the other side
    /// keeps pulling away (an owner that loaded its shared cursor stalled on that load in
    /// every operation).
    pub(super) own: AtomicUsize,
    /// The other side's cursor at the owner's last look.
    pub(super) cursor: AtomicUsize,
    /// How many slots (for the sender: free; for the receiver: holding messages) that look
    /// found beyond the owner's own cursor and it has not claimed yet. Always what the
    /// distance between the two cursors says; kept as a count so that an operation it
    /// covers needs no position arithmetic (`send_owned_fast`).
    pub(super) available: AtomicUsize,
    /// That look, made on the first try of a blocking operation, found only a short run
    /// (of messages, or of free slots): the owner is on the other side's heels, and its
    /// next look holds back first (see `Channel::hold_back_if_trailing`).
    pub(super) trailing: AtomicBool,
    /// Whether the dense polls of threads waiting on this side have been paying
    /// (`sync::wait`). Not part of the owned protocol: every waiter on the side uses it,
    /// in both protocols; it lives here because this line belongs to the side.
    pub(super) polls: PollHistory,
}

impl OwnerCache {
    pub(super) fn new(available: usize) -> Self {
        Self {
            own: AtomicUsize::new(0),
            cursor: AtomicUsize::new(0),
            available: AtomicUsize::new(available),
            trailing: AtomicBool::new(false),
            polls: PollHistory::new(),
        }
    }
}

/// The ordering of [`store_own_cursor`]'s store, on both builds: one constant, so that
/// weakening it is seen by the models, which run the loom form. Release: publishes the
/// operation's slot accesses to the other side's Acquire loads of the cursor.
const OWN_CURSOR_STORE: Ordering = Ordering::Release;

/// Moves a cursor that only the calling thread moves (it owns the side), and the owner's
/// copy of it in `cache`: a plain store with [`OWN_CURSOR_STORE`]. Under loom a `swap` with
/// the same ordering: loom 0.7 can lose a plain store that races a read-modify-write of the
/// same atomic (tokio-rs/loom#254), and waiters read the cursors with `fetch_add(0)`. The
/// swap publishes what the store does; it may also carry on the release sequence of the
/// previous store, the only edge the models see that the std build lacks.
#[inline]
pub(super) fn store_own_cursor(cursor: &AtomicUsize, cache: &OwnerCache, pos: usize) {
    // Relaxed: only the owner reads its copy.
    cache.own.store(pos, Ordering::Relaxed);
    if cfg!(logbus_loom) {
        cursor.swap(pos, OWN_CURSOR_STORE);
    } else {
        cursor.store(pos, OWN_CURSOR_STORE);
    }
}

impl<T> Channel<T> {
    /// Owned to shared: writes every slot's stamp from the cursors, which the owned
    /// protocol keeps alone. Runs in the revoker, after both owners' last operations (see
    /// `owners`) and before any shared one.
    pub(super) fn convert(&self) {
        // Relaxed: every owned cursor store happens before this, through the edge that
        // ordered its owner before the revoker: the revoker flag (an owner replaced by an
        // earlier change of owner: that change's `end_change` Release, our `elect` Acquire,
        // after it waited the owner out), the token pool's hand-over (an owner that exited:
        // its token's give-back Release and its heir's take Acquire), or, for the owners at
        // the moment of revoking, their Release `leave` read by `wait_idle`'s Acquire `busy`
        // load, which the heavy fence makes see their last operation. `tail` carries no mark
        // yet (`disconnect` revokes before it marks).
        let head = self.head.load(Ordering::Relaxed);
        // Relaxed: as above.
        let tail = self.tail.load(Ordering::Relaxed) & !self.mark_bit;
        let full = self.distance(head, tail);
        let mut pos = head;
        for k in 0..self.cap {
            // The first `full` positions from `head` hold messages, the rest are free.
            let stamp = if k < full { pos + 1 } else { pos };
            // Relaxed: the revoker's Release store of SHARED publishes it.
            self.stamps[pos & (self.mark_bit - 1)].store(stamp, Ordering::Relaxed);
            pos = self.advance(pos, 1);
        }
    }

    /// Owned protocol, before an owner looks at the other side's cursor: if its last look
    /// found it on the other side's heels, spin a little without touching shared memory
    /// first, so that this look finds a longer run (the `ring` reader's pacing, for the
    /// same reason: an owner that follows the other side closely keeps pulling its cursor
    /// and the lines it is writing into its own cache, and the other side stalls on its
    /// next store to them). Only the first look of a blocking operation holds back, so a
    /// `try_` call never waits and a thread that had to wait for its message (a ping-pong)
    /// never does (the SPSC figures with and without it are in BENCHMARKS.md).
    #[inline]
    pub(super) fn hold_back_if_trailing(&self, cache: &OwnerCache, may_hold_back: bool) {
        // Relaxed: only the owner touches `trailing`.
        if POLICY.pace_spins != 0 && may_hold_back && cache.trailing.load(Ordering::Relaxed) {
            wait::pace(&POLICY);
        }
    }

    /// Owned protocol, after an owner's look found `run` messages (free slots) made by the
    /// owner of `other`: whether its next look holds back first. Never when this thread owns the
    /// other side too: nothing can arrive while it spins.
    #[inline]
    pub(super) fn note_trailing(
        &self,
        cache: &OwnerCache,
        other: &Side,
        may_hold_back: bool,
        run: usize,
    ) {
        if POLICY.pace_spins != 0 {
            let trailing =
                may_hold_back && run > 0 && run < self.cap / 4 && !self.owners.owns(other);
            // Relaxed: only the owner touches `trailing`.
            cache.trailing.store(trailing, Ordering::Relaxed);
        }
    }

    /// `claim_send` for the sending owner: the free slots are those the receiving owner has
    /// moved `head` past (it stores `head` after reading), seen through a cached copy that is
    /// refreshed only when it cannot cover the request.
    ///
    /// An exact look that finds no free slot fences and looks again before it reports
    /// `Full`: the cursors move by plain stores, and without the fence this thread's last
    /// `tail` store and the receiver's last `head` store could both still sit in store
    /// buffers while each side reads the other's old cursor, one reporting `Full` and the
    /// other `Empty` about the same messages (no order of the operations gives both; the
    /// linearizability check found it with batches).
    pub(super) fn claim_send_owned(
        &self,
        max: usize,
        look: Look,
        me: usize,
    ) -> Result<Claim, TrySendError<()>> {
        let may_hold_back = look.may_hold_back;
        let cache = &self.send_cache;
        // Relaxed: only this thread moves `tail` while it owns the side. It carries no
        // disconnect mark: `disconnect` revokes before it marks, so no owned operation sees
        // one (the next operation finds the queue shared, and the mark).
        let tail = cache.own.load(Ordering::Relaxed);
        // Relaxed: only this thread uses its `OwnerCache`.
        let mut free = cache.available.load(Ordering::Relaxed);
        let want = max.min(self.cap);
        if free < want {
            self.hold_back_if_trailing(cache, may_hold_back);
            // Acquire: pairs with the receiving owner's Release store of `head`, made after
            // it read the slots it frees (or with the revoker's SHARED store, transitively).
            let head = self.head.load(Ordering::Acquire);
            // Relaxed: only this thread uses its `OwnerCache`.
            cache.cursor.store(head, Ordering::Relaxed);
            free = self.cap - self.distance(head, tail);
            if free == 0 && look.settle {
                // SeqCst: pairs with the receiving owner's fence before it reports `Empty`
                // (Dekker: one of the two sees the other's cursor store).
                fence(Ordering::SeqCst);
                // Acquire: as above.
                let head = self.head.load(Ordering::Acquire);
                // Relaxed: only this thread uses its `OwnerCache`.
                cache.cursor.store(head, Ordering::Relaxed);
                free = self.cap - self.distance(head, tail);
            }
            self.note_trailing(cache, &self.owners.recv, may_hold_back, free);
        }
        if free == 0 {
            // Relaxed: as above.
            cache.available.store(0, Ordering::Relaxed);
            return Err(TrySendError::Full(()));
        }
        let index = tail & (self.mark_bit - 1);
        let n = free.min(want).min(self.cap - index);
        // Relaxed: as above.
        cache.available.store(free - n, Ordering::Relaxed);
        Ok(Claim {
            pos: tail,
            n,
            held: Some(me),
        })
    }

    /// `claim_recv` for the receiving owner: the messages are those the sending owner has
    /// moved `tail` past (it stores `tail` after writing them), seen through a cached copy
    /// refreshed only when it cannot cover the request. An empty queue's `tail` says whether
    /// it is disconnected; an exact look fences before it reports `Empty`, as in
    /// `claim_send_owned`.
    pub(super) fn claim_recv_owned(
        &self,
        max: usize,
        look: Look,
        me: usize,
    ) -> Result<Claim, TryRecvError> {
        let may_hold_back = look.may_hold_back;
        let cache = &self.recv_cache;
        // Relaxed: only this thread moves `head` while it owns the side.
        let head = cache.own.load(Ordering::Relaxed);
        // Relaxed: only this thread uses its `OwnerCache`.
        let mut available = cache.available.load(Ordering::Relaxed);
        let want = max.min(self.cap);
        if available < want {
            self.hold_back_if_trailing(cache, may_hold_back);
            // Acquire: pairs with the sending owner's Release store of `tail`, made after it
            // wrote the messages (or with the revoker's SHARED store, transitively).
            let mut tail = self.tail.load(Ordering::Acquire);
            if tail == head && look.settle {
                // SeqCst: pairs with the sending owner's fence before it reports `Full`.
                fence(Ordering::SeqCst);
                // Acquire: as above.
                tail = self.tail.load(Ordering::Acquire);
            }
            // Relaxed: only this thread uses its `OwnerCache`.
            cache.cursor.store(tail, Ordering::Relaxed);
            available = self.distance(head, tail & !self.mark_bit);
            self.note_trailing(cache, &self.owners.send, may_hold_back, available);
            if available == 0 {
                // Relaxed: as above.
                cache.available.store(0, Ordering::Relaxed);
                return Err(if tail & self.mark_bit != 0 {
                    TryRecvError::Disconnected
                } else {
                    TryRecvError::Empty
                });
            }
        }
        let index = head & (self.mark_bit - 1);
        let n = available.min(want).min(self.cap - index);
        // Relaxed: as above.
        cache.available.store(available - n, Ordering::Relaxed);
        Ok(Claim {
            pos: head,
            n,
            held: Some(me),
        })
    }

    /// The owned protocol's send of one message, inline and without a claim: the message
    /// comes back when this path does not apply (the side is not this thread's, or the
    /// owner knows of no free slot) and the general path (`claim_send`) decides.
    #[inline]
    pub(super) fn send_owned_fast(&self, msg: T) -> Result<(), T> {
        let side = &self.owners.send;
        let Some(me) = self.owners.try_hold(side) else {
            return Err(msg);
        };
        let cache = &self.send_cache;
        // Relaxed: only the owner uses its `OwnerCache`.
        let available = cache.available.load(Ordering::Relaxed);
        if available == 0 {
            self.owners.leave(side, me);
            return Err(msg);
        }
        // Relaxed: only this thread moves `tail` while it owns the side (no disconnect mark,
        // as in `claim_send_owned`).
        let tail = cache.own.load(Ordering::Relaxed);
        // Relaxed: as above.
        cache.available.store(available - 1, Ordering::Relaxed);
        // SAFETY: the count of available slots says the slot at `tail` is free: the receiving owner moved
        // `head` past it (Release, read by our Acquire refresh) after reading its last
        // message, and only the sending side's owner writes slots (a change of owner waits
        // out the previous owner's operation and orders it before ours, see `owners`). The
        // receiver reads the slot only after the `tail` store below.
        self.cells[tail & (self.mark_bit - 1)]
            .with_mut(|p| unsafe { ptr::write(p, MaybeUninit::new(msg)) });
        store_own_cursor(&self.tail, cache, self.advance(tail, 1));
        // As in `publish_stamps`.
        self.owners.leave_notifying(side, me, &self.receivers);
        Ok(())
    }

    /// The owned protocol's receive of one message, the mirror image of `send_owned_fast`:
    /// `None` when this path does not apply.
    #[inline]
    pub(super) fn recv_owned_fast(&self) -> Option<T> {
        let side = &self.owners.recv;
        let me = self.owners.try_hold(side)?;
        let cache = &self.recv_cache;
        // Relaxed: only the owner uses its `OwnerCache`.
        let available = cache.available.load(Ordering::Relaxed);
        if available == 0 {
            self.owners.leave(side, me);
            return None;
        }
        // Relaxed: only this thread moves `head` while it owns the side.
        let head = cache.own.load(Ordering::Relaxed);
        // Relaxed: as above.
        cache.available.store(available - 1, Ordering::Relaxed);
        // SAFETY: the count of available slots says the slot at `head` holds a message: the sending owner
        // moved `tail` past it (Release, read by our Acquire refresh) after writing it, and
        // only the receiving side's owner reads slots (changes of owner are ordered, see
        // `owners`). We move it out once: `head` moves past it below, and the sender writes
        // the slot only after that store.
        let msg =
            self.cells[head & (self.mark_bit - 1)].with(|p| unsafe { ptr::read(p).assume_init() });
        store_own_cursor(&self.head, cache, self.advance(head, 1));
        // As in `free_run`.
        self.owners.leave_notifying(side, me, &self.senders);
        Some(msg)
    }
}
