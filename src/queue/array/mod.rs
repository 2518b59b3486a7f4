//! The bounded flavour: Dmitry Vyukov's bounded MPMC queue ("Bounded MPMC queue",
//! 1024cores.net), an array of slots each carrying a *stamp*, as in crossbeam's `ArrayQueue`
//! and the array flavour of crossbeam-channel.
//!
//! # Positions and stamps
//!
//! `head` and `tail` are *positions*: the low bits (below `mark_bit`) are an index into the
//! buffer, the bits from `one_lap` up count laps, and `tail` alone may carry `mark_bit`, set
//! once when the queue is disconnected. `one_lap = 2 * mark_bit` and `mark_bit` is the
//! smallest power of two above `cap`, so any capacity works exactly (no rounding up) and a
//! position moves to the next lap with one addition when its index reaches `cap`.
//!
//! A slot's stamp says whose turn it is. For the slot at position `p` (this lap):
//! - `stamp == p`: empty, a sender may claim it by moving `tail` past `p`;
//! - `stamp == p + 1`: holds a message, a receiver may claim it by moving `head` past `p`;
//! - `stamp == p + one_lap`: consumed, empty for the next lap.
//!
//! So the fast path of a send is one CAS on `tail`, one slot write and one `Release` store
//! of the stamp; a receive is one CAS on `head`, one slot read and one `Release` store. A
//! batch claims `n` consecutive slots of one lap with a single CAS.
//!
//! # Layout and batches
//!
//! Unlike crossbeam's `{stamp, message}` slots, the stamps and the messages live in two
//! arrays (structure of arrays, as in the `ring` layer): eight `u64` messages share a cache
//! line that only senders write and only receivers read, and the stamps, the only lines
//! both sides write, pack eight to a line. A batch copies its messages straight between the
//! caller's `Vec` and the message array in one loop, then stores the run's stamps in one
//! loop, last slot first: the first stamp is a `Release` store made after the others, so a
//! thread whose `Acquire` load sees it sees the whole run, and a consumer takes a
//!
//! # Files
//!
//! - `shared.rs`: the stamped protocol every thread can run (claims by CAS, stamps, the
//!   linearizable looks), and the drain of a disconnected queue.
//! - `owned.rs`: the owned protocol (one thread per side, cursors only) and the conversion
//!   from it to the stamped one.
//! - `waiting.rs`: what a blocking operation does while the queue is full or empty.
//! - `batch.rs`: the batch operations.
//! - `task.rs`: tasks waiting (the async API's polls).
//! - `tests.rs`, `loom_models.rs`: unit tests and the owned protocol's loom models.

mod batch;
#[cfg(all(test, logbus_loom))]
mod loom_models;
mod owned;
mod shared;
mod task;
#[cfg(all(test, not(logbus_loom)))]
mod tests;
mod waiting;

use std::mem::MaybeUninit;

use super::error::{RecvTimeoutError, SendTimeoutError, TryRecvError, TrySendError};
use super::owners::Owners;
use crate::sync::atomic::{fence, AtomicUsize, Ordering};
use crate::sync::time::Instant;
use crate::sync::{asym_fence, Arc, CachePadded, Signal, UnsafeCell, WaitSet};
use owned::OwnerCache;
use waiting::POLICY;

/// One message cell of the buffer; initialised exactly when its stamp is `position + 1`.
type Cell<T> = UnsafeCell<MaybeUninit<T>>;

/// How an operation looks at the queue.
#[derive(Clone, Copy)]
struct Look {
    /// Tell an empty queue from a disconnected one (see `claim_recv`).
    exact: bool,
    /// Answer as of one instant (linearizable): a slot claimed by an operation of the other
    /// side that has not finished counts as moved (that operation has taken effect), so the
    /// look waits it out rather than report `Empty` (`Full`), and an owner fences before it
    /// reports either. Every `try_` look and every look of a timed operation settles; a
    /// blocking operation without a deadline need not, since nobody sees its `Empty`
    /// (`Full`): it waits (parks) and looks again.
    settle: bool,
    /// The first look of a blocking operation, which may hold back first (see `Channel::hold_back_if_trailing`).
    may_hold_back: bool,
}

impl Look {
    /// A `try_` operation.
    const TRY: Self = Self {
        exact: true,
        settle: true,
        may_hold_back: false,
    };

    /// The first look of a blocking operation. It need not be exact when it has no
    /// deadline and will poll densely next: it looks again exactly before it ever yields or
    /// parks.
    fn first(deadline: Option<Instant>) -> Self {
        Self {
            exact: POLICY.dense_polls == 0 || deadline.is_some(),
            settle: deadline.is_some(),
            may_hold_back: true,
        }
    }

    /// A look of a blocking operation after it waited, or a later claim of a batch.
    fn again(self) -> Self {
        Self {
            exact: true,
            settle: self.settle,
            may_hold_back: false,
        }
    }
}

/// A claimed run of slots: positions `pos .. pos + n`, all in one lap.
struct Claim {
    pos: usize,
    n: usize,
    /// Claimed by the side's owner (the owned protocol), whose token this is: published by
    /// a cursor store, and the owner leaves its operation then.
    held: Option<usize>,
}

/// A bounded MPMC queue of `T`.
pub(crate) struct Channel<T> {
    /// The next position to receive from. Never carries `mark_bit`.
    head: CachePadded<AtomicUsize>,
    /// The next position to send to, plus `mark_bit` once disconnected.
    tail: CachePadded<AtomicUsize>,
    /// One stamp per slot (whose turn it is, see the module docs); slot `i` starts with
    /// stamp `i` (empty, lap 0). Kept apart from the messages (structure of arrays).
    stamps: Box<[AtomicUsize]>,
    /// One message cell per slot, initialised exactly when its stamp is `position + 1`.
    /// Only senders write these lines and only receivers read them, so a line of messages
    /// travels one way per lap; the stamps are the only lines both sides write.
    cells: Box<[Cell<T>]>,
    /// The capacity asked for.
    cap: usize,
    /// The smallest power of two above `cap`: the disconnection bit of `tail`.
    mark_bit: usize,
    /// `2 * mark_bit`: adding it moves a position to the same index one lap later.
    one_lap: usize,
    /// Senders parked until a slot frees up or the queue disconnects.
    senders: CachePadded<WaitSet>,
    /// Receivers parked until a message arrives or the queue disconnects.
    receivers: CachePadded<WaitSet>,
    /// Whether one thread per side owns the queue (the owned protocol) or it is shared.
    owners: Owners,
    /// Owned protocol: the sending owner's last look at `head` (only it touches this).
    send_cache: CachePadded<OwnerCache>,
    /// Owned protocol: the receiving owner's last look at `tail` (only it touches this).
    recv_cache: CachePadded<OwnerCache>,
}

// SAFETY: messages move between threads through the slots (so `T: Send` is needed and
// enough); every access to a slot's contents is made exclusive by the protocol: in the
// shared one a thread touches a slot's message only between claiming it with a CAS and
// publishing the next stamp; in the owned one only the side's owner touches slots, only
// those between the two cursors that belong to its side, and changes of owner and the
// conversion are ordered after the previous owner's operations (`owners`).
unsafe impl<T: Send> Send for Channel<T> {}
// SAFETY: as above; shared references hand out no `&T`, only owned messages.
unsafe impl<T: Send> Sync for Channel<T> {}

impl<T> Channel<T> {
    /// A queue holding at most `cap` messages.
    ///
    /// # Panics
    ///
    /// If `cap` is 0 (the rendezvous flavour handles that) or so large that positions would
    /// overflow a `usize`.
    pub(crate) fn with_capacity(cap: usize) -> Self {
        // Under loom the owned protocol is checked by this module's own models
        // (`loom_models`); every other model (the public API's, a user's) checks the shared
        // protocol, whose revocation paths would otherwise multiply each model's states past
        // what loom explores in reasonable time and memory.
        let owners = if cfg!(logbus_loom) {
            Owners::shared()
        } else {
            Owners::new()
        };
        Self::with_protocol(cap, owners)
    }

    /// A queue holding at most `cap` messages, whose protocol `owners` decides: owned while
    /// one thread per side uses it ([`Owners::new`]), or shared from the start
    /// ([`Owners::shared`]).
    pub(super) fn with_protocol(cap: usize, owners: Owners) -> Self {
        assert!(cap > 0, "the array flavour needs a capacity of at least 1");
        let mark_bit = (cap + 1).next_power_of_two();
        let one_lap = mark_bit
            .checked_mul(2)
            .expect("queue capacity too large for its position encoding");
        let stamps = (0..cap).map(AtomicUsize::new).collect();
        let cells = (0..cap)
            .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
            .collect();
        Self {
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
            stamps,
            cells,
            cap,
            mark_bit,
            one_lap,
            senders: CachePadded::new(WaitSet::new()),
            receivers: CachePadded::new(WaitSet::new()),
            owners,
            // An empty queue: every slot free, no message.
            send_cache: CachePadded::new(OwnerCache::new(cap)),
            recv_cache: CachePadded::new(OwnerCache::new(0)),
        }
    }

    /// How many messages lie between `head` and `tail` (neither marked, `tail` at most one
    /// lap ahead): from the indices, and the laps only when the indices are equal.
    #[inline]
    fn distance(&self, head: usize, tail: usize) -> usize {
        let hix = head & (self.mark_bit - 1);
        let tix = tail & (self.mark_bit - 1);
        if hix < tix {
            tix - hix
        } else if hix > tix {
            self.cap - hix + tix
        } else if tail == head {
            0
        } else {
            self.cap
        }
    }

    /// How many messages have gone through `cursor` (`head` or `tail`) since the queue was
    /// made: the laps times the capacity plus the index (a hint for the owners' change
    /// budget, see `owners`).
    fn moved(&self, cursor: &AtomicUsize) -> usize {
        // Relaxed: a hint.
        let pos = cursor.load(Ordering::Relaxed) & !self.mark_bit;
        (pos / self.one_lap)
            .wrapping_mul(self.cap)
            .wrapping_add(pos & (self.mark_bit - 1))
    }

    /// The position `n` (≤ cap) slots after `pos`, into the next lap if need be: the
    /// position after a claimed run (which ends inside the lap), or a look ahead of the
    /// tail (`send_changed`).
    #[inline]
    fn advance(&self, pos: usize, n: usize) -> usize {
        let index = pos & (self.mark_bit - 1);
        debug_assert!(n <= self.cap);
        if index + n < self.cap {
            pos + n
        } else {
            (pos & !(self.one_lap - 1)).wrapping_add(self.one_lap) + (index + n - self.cap)
        }
    }

    /// Sends `msg` if a slot is free.
    #[inline]
    pub(crate) fn try_send(&self, msg: T) -> Result<(), TrySendError<T>> {
        match self.send_owned_fast(msg) {
            Ok(()) => Ok(()),
            Err(msg) => self.send_now(msg, Look::TRY),
        }
    }

    /// `try_send`, with `look` as in `claim_send`.
    fn send_now(&self, msg: T, look: Look) -> Result<(), TrySendError<T>> {
        match self.claim_send(1, look) {
            Ok(claim) => {
                // SAFETY: a fresh claim of one slot, filled with one message.
                unsafe { self.publish(claim, std::iter::once(msg)) };
                Ok(())
            }
            Err(TrySendError::Full(())) => Err(TrySendError::Full(msg)),
            Err(TrySendError::Disconnected(())) => Err(TrySendError::Disconnected(msg)),
        }
    }

    /// Receives a message if one is there.
    #[inline]
    pub(crate) fn try_recv(&self) -> Result<T, TryRecvError> {
        match self.recv_owned_fast() {
            Some(msg) => Ok(msg),
            None => self.recv_now(Look::TRY),
        }
    }

    /// `try_recv`, with `look` as in `claim_recv`.
    fn recv_now(&self, look: Look) -> Result<T, TryRecvError> {
        let claim = self.claim_recv(1, look)?;
        let mut out = None;
        // SAFETY: a fresh claim, consumed once.
        unsafe { self.consume(claim, |m| out = Some(m)) };
        Ok(out.expect("a claim of one slot yields one message"))
    }

    /// Sends, waiting for room until `deadline` (forever with `None`).
    #[inline]
    pub(crate) fn send(
        &self,
        msg: T,
        deadline: Option<Instant>,
    ) -> Result<(), SendTimeoutError<T>> {
        match self.send_owned_fast(msg) {
            Ok(()) => Ok(()),
            Err(msg) => self.send_slow(msg, deadline),
        }
    }

    /// Receives, waiting for a message until `deadline` (forever with `None`).
    #[inline]
    pub(crate) fn recv(&self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        match self.recv_owned_fast() {
            Some(msg) => Ok(msg),
            None => self.recv_slow(deadline),
        }
    }

    /// Marks the queue disconnected and wakes every parked thread; `true` if this call did it.
    pub(crate) fn disconnect(&self) -> bool {
        // An owner moves `tail` with plain stores, which could overwrite the mark: the
        // queue goes shared first (once; a heavy fence if it was owned).
        self.owners.revoke(|| self.convert());
        // SeqCst: one total order with the cursor CASes and the wait sets' fences.
        let tail = self.tail.fetch_or(self.mark_bit, Ordering::SeqCst);
        if tail & self.mark_bit == 0 {
            self.senders.notify_all();
            self.receivers.notify_all();
            true
        } else {
            false
        }
    }

    /// Drops every message still queued, each exactly once, each after it has left the
    /// buffer (so the queue stays consistent whatever a `Drop` does). If a message's `Drop`
    /// panics, that panic propagates once the rest are dropped (see `drop_remaining`).
    pub(crate) fn discard_all(&self) {
        // The stamps say what is left, so the queue must be shared (it is, after
        // `disconnect`; a queue dropped by another path is converted here).
        self.owners.revoke(|| self.convert());
        super::drop_remaining::drop_all(|| self.take_for_discard());
    }

    /// The number of messages in the queue.
    pub(crate) fn len(&self) -> usize {
        // SeqCst: owners move the cursors by plain stores; the fence orders this thread's
        // last one before the loads (as in `claim_send_owned`), so two threads each moving
        // one cursor and then asking `len` cannot both read the other's old cursor.
        fence(Ordering::SeqCst);
        loop {
            // SeqCst: a consistent snapshot of both cursors (re-checked below).
            let tail = self.tail.load(Ordering::SeqCst);
            let head = self.head.load(Ordering::SeqCst);
            if self.tail.load(Ordering::SeqCst) == tail {
                return self.distance(head, tail & !self.mark_bit);
            }
        }
    }

    /// Whether the queue runs the shared protocol (for good).
    pub(crate) fn is_shared(&self) -> bool {
        self.owners.is_shared()
    }

    /// The capacity asked for.
    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }

    /// Whether the queue is disconnected.
    pub(crate) fn is_disconnected(&self) -> bool {
        // SeqCst: in the total order with the disconnect mark's `fetch_or`.
        self.tail.load(Ordering::SeqCst) & self.mark_bit != 0
    }

    /// A select watches the senders' (`sending`) or the receivers' wait set: every wake-up
    /// of that set raises `signal`. The caller re-checks the queue after this returns.
    pub(crate) fn watch(&self, signal: &Arc<Signal>, sending: bool) {
        if sending {
            &self.senders
        } else {
            &self.receivers
        }
        .watch(signal);
        if !self.owners.is_shared() {
            // An owner notifies with the light fence only: this is the heavy side of that
            // handshake, as a parking waiter issues it (`wait`).
            asym_fence::heavy();
        }
    }

    /// Undoes [`watch`](Self::watch).
    pub(crate) fn unwatch(&self, signal: &Arc<Signal>, sending: bool) {
        if sending {
            &self.senders
        } else {
            &self.receivers
        }
        .unwatch(signal);
    }
}

impl<T> Drop for Channel<T> {
    fn drop(&mut self) {
        // The messages still queued: the last receiver leaves them (`disconnect_receivers`).
        // Every handle is gone, and the `Arc` holding the queue orders their operations
        // before this.
        self.discard_all();
    }
}
