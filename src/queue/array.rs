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
//! producer's batch with one claim instead of chasing the stamps as they appear.
//!
//! # Waiting
//!
//! A thread that finds the queue full (empty) first polls the one stamp it waits on, one
//! spin hint apart (`DENSE_POLLS`, the spin budget of a [`Backoff`]), then yields, and only
//! then parks in the `senders` (`receivers`) [`WaitSet`]. A sender polls the stamp a few
//! slots past the tail rather than the first (`full_slack`), so that it does not write the
//! lines the receivers are reading. A blocking receive's first look
//! does not load `tail` (which tells `Disconnected` from `Empty`) when the head slot is
//! empty: that load would make the sender's next claim miss in the cache on every round
//! trip; the look after the dense poll is exact. The other side calls
//! [`WaitSet::notify_all_after_rmw`] after each operation, which costs one load while nobody
//! is parked: the operation's claim (a `SeqCst` CAS) already orders it, so no fence is needed
//! (see `send_ready` for what the waiters check, and why loom checks a fenced variant).
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
//!
//! The owned protocol has no such window (an owner publishes with one cursor store), but
//! its cursors move by plain stores: an owner that finds the queue full (empty) fences and
//! reads the other cursor again before it says so, and `len` fences before it reads both
//! cursors (see `claim_send_owned`).

//!
//! # One thread per side at a time: the owned protocol
//!
//! Each side is *owned* by one thread at a time (`owners`), and the queue runs Lamport's
//! single-producer single-consumer protocol instead of the above:
//! - the sender writes the messages and stores `tail`, and the receiver reads them and
//!   stores `head`, each with a plain `Release` store (`store_own_cursor`);
//! - each side checks for room or messages against a cached copy of the other's cursor;
//! - no stamps are kept and there is no locked instruction per message.
//!
//! A locked instruction costs ~13 ns on the target VMs, and the stamp protocol pays one per
//! message on each side. An owner notifies with a light fence ([`Owners::leave_notifying`]),
//! so a waiter issues [`asym_fence::heavy`] before it parks while the queue is owned.
//!
//! Each owner keeps, on a line of its own (`Seen`), a copy of its own cursor, the other
//! side's cursor at its last look, and a *credit*: how many slots that look showed it and it
//! has not used yet. A single send or receive the credit covers takes an inline fast path
//! (`send_owned_fast`, `recv_owned_fast`): hold the side, move one message, store the
//! cursor, leave. It never reads a line the other side writes, except the message's own; a
//! look at the other side's cursor happens once per run, in `claim_send_owned` /
//! `claim_recv_owned`, and a blocking owner that keeps finding short runs paces itself
//! before it looks (`pace`).
//!
//! Another thread operating on a side takes it over (the owner's `Seen` goes with the
//! side), and the queue stays owned. When a side changes hands faster than its budget
//! allows (`owners`), the queue is *revoked*: the owners' operations in flight are waited
//! out, every stamp is rebuilt from the two cursors (`convert`), and from then on every
//! thread runs the shared protocol for good. `disconnect` and `discard_all` revoke first,
//! since an owner's plain store of `tail` would overwrite the disconnect mark. Under loom
//! the public constructor keeps queues shared (see `with_capacity`), and this module's own
//! models check the owned protocol, its changes of owner and its revocation.

use std::mem::MaybeUninit;
use std::ptr;

use super::error::{RecvTimeoutError, SendTimeoutError, TryRecvError, TrySendError};
use super::owners::{Owners, Side};
use crate::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use crate::sync::time::{self, Instant};
use crate::sync::{asym_fence, hint, thread, Backoff, CachePadded, UnsafeCell, WaitSet};

/// The yields of a [`Backoff`] (its steps 7 to 10), taken by a waiter that polled densely
/// instead of running the backoff's spin rounds.
const BACKOFF_YIELDS: u32 = 4;

/// Yields after the [`Backoff`] is exhausted and before parking. Waking a parked thread
/// costs ~10–15 µs on the target VMs (BENCHMARKS.md), a yield well under 1 µs, so a waiter
/// keeps yielding a while longer when the other side is likely still running.
#[cfg(not(logbus_loom))]
const EXTRA_YIELDS: u32 = 32;
#[cfg(logbus_loom)]
const EXTRA_YIELDS: u32 = 0;

/// How many times a waiter polls the one stamp it waits on, one spin hint apart, before it
/// starts yielding. This replaces the spin rounds of the [`Backoff`] with the same budget
/// (its rounds spin 1 + 2 + … + 64 = 127 hints; a hint takes ~17 ns on the target VMs, so
/// about 2–3 µs with the loads): the waiter burns no more time before yielding, but instead
/// of looking again only after exponentially growing spins (a reply arriving after 0.5 µs
/// was seen after ~1 µs), it sees the stamp move within one poll, which is what a
/// ping-pong round trip and a batch consumer racing a filling queue wait on. The poll reads
/// only that slot's stamp and this side's cursor (no fence, no cursor of the other side).
/// Loom models no spinning: there the [`Backoff`] runs as before.
#[cfg(not(logbus_loom))]
const DENSE_POLLS: u32 = 128;
#[cfg(logbus_loom)]
const DENSE_POLLS: u32 = 0;

/// Spin hints an owner waits before it looks at the other side's cursor again when its last
/// look found it on that side's heels (`Channel::pace`). None under loom, which models no
/// time.
#[cfg(not(logbus_loom))]
const PACE_SPINS: u32 = 20;
#[cfg(logbus_loom)]
const PACE_SPINS: u32 = 0;

/// See `Channel::full_slack`.
const FULL_SLACK: usize = 16;

/// One message cell of the buffer; initialised exactly when its stamp is `position + 1`.
type Cell<T> = UnsafeCell<MaybeUninit<T>>;

/// Poll densely, spin, yield, then park: the waiting strategy of every blocking operation.
struct Patience {
    /// Whether the dense poll of the awaited stamp has been done (once per operation).
    polled: bool,
    backoff: Backoff,
    extra_yields: u32,
    /// Set once the waiter has parked: a wake-up that finds the operation still in flight
    /// yields before looking again, so it never spins on a descheduled peer.
    parked: bool,
}

impl Patience {
    fn new() -> Self {
        Self {
            polled: false,
            backoff: Backoff::new(),
            extra_yields: 0,
            parked: false,
        }
    }

    /// Waits a little without parking; `false` once it is time to park.
    fn snooze(&mut self) -> bool {
        if self.polled {
            // The dense poll took the place of the spin rounds: yield, then park.
            if self.extra_yields < EXTRA_YIELDS + BACKOFF_YIELDS {
                self.extra_yields += 1;
                thread::yield_now();
                true
            } else {
                false
            }
        } else if !self.backoff.is_completed() {
            self.backoff.snooze();
            true
        } else if self.extra_yields < EXTRA_YIELDS {
            self.extra_yields += 1;
            thread::yield_now();
            true
        } else {
            false
        }
    }
}

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
    /// The first look of a blocking operation, which may pace itself (see `Channel::pace`).
    pace: bool,
}

impl Look {
    /// A `try_` operation.
    const TRY: Self = Self {
        exact: true,
        settle: true,
        pace: false,
    };

    /// The first look of a blocking operation. It need not be exact when it has no
    /// deadline and will poll densely next: it looks again exactly before it ever yields or
    /// parks.
    fn first(deadline: Option<Instant>) -> Self {
        Self {
            exact: DENSE_POLLS == 0 || deadline.is_some(),
            settle: deadline.is_some(),
            pace: true,
        }
    }

    /// A look of a blocking operation after it waited, or a later claim of a batch.
    fn again(self) -> Self {
        Self {
            exact: true,
            settle: self.settle,
            pace: false,
        }
    }
}

/// The outcome of one round of waiting.
enum Waited {
    /// Try the operation again.
    Retry,
    /// The deadline passed while the condition did not hold.
    Expired,
}

/// A claimed run of slots: positions `pos .. pos + n`, all in one lap.
struct Claim {
    pos: usize,
    n: usize,
    /// Claimed by the side's owner (the owned protocol), whose token this is: published by
    /// a cursor store, and the owner leaves its operation then.
    held: Option<usize>,
}

/// Moves a cursor that only the calling thread moves (it owns the side), and the owner's
/// copy of it in `seen`: a plain `Release` store (pairs with the other side's `Acquire`
/// loads). Under loom a `swap`: loom 0.7 can lose a plain store that races a
/// read-modify-write of the same atomic (tokio-rs/loom#254), and waiters read the cursors
/// with `fetch_add(0)`.
#[inline]
fn store_own_cursor(cursor: &AtomicUsize, seen: &Seen, pos: usize) {
    // Relaxed: only the owner reads its copy.
    seen.own.store(pos, Ordering::Relaxed);
    if cfg!(logbus_loom) {
        // Release: as the store below.
        cursor.swap(pos, Ordering::Release);
    } else {
        // Release: publishes the operation's slot accesses to the other side's Acquire loads.
        cursor.store(pos, Ordering::Release);
    }
}

/// Reads the stamp a thread waits on to change (an operation of the other side in flight on
/// that slot). Under loom by a read-modify-write, which reads the newest value: a load may
/// return the old one for ever, and the model's wait would never end (loom counts it as a
/// spin lock). A plain load on the std build, where a store becomes visible.
#[inline]
fn read_awaited(stamp: &AtomicUsize) -> usize {
    if cfg!(logbus_loom) {
        // Acquire: as below.
        stamp.fetch_add(0, Ordering::Acquire)
    } else {
        // Acquire: pairs with the Release stamp store the waiter waits for.
        stamp.load(Ordering::Acquire)
    }
}

/// Stores a slot's stamp (`Release`: publishes the slot accesses made before to the other
/// side's `Acquire` stamp loads). Under loom a `swap`: loom 0.7 can lose a plain store that
/// races a read-modify-write of the same atomic (tokio-rs/loom#254), here `read_awaited`,
/// and the waiter would wait for ever.
#[inline]
fn store_stamp(stamp: &AtomicUsize, value: usize) {
    if cfg!(logbus_loom) {
        // Release: as below.
        stamp.swap(value, Ordering::Release);
    } else {
        // Release: see above; the pairing Acquire loads are named at each call.
        stamp.store(value, Ordering::Release);
    }
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
    send_seen: CachePadded<Seen>,
    /// Owned protocol: the receiving owner's last look at `tail` (only it touches this).
    recv_seen: CachePadded<Seen>,
}

/// What a side's owner remembers of the other side's cursor between its operations (owned
/// protocol). Only the owner touches it: atomics only because the channel is shared.
struct Seen {
    /// The owner's own cursor (`tail` for the sender, `head` for the receiver), which only
    /// it moves: it reads this copy, never the shared cursor, whose line the other side
    /// keeps pulling away (an owner that loaded its shared cursor stalled on that load in
    /// every operation).
    own: AtomicUsize,
    /// The other side's cursor at the owner's last look.
    cursor: AtomicUsize,
    /// How many slots (for the sender: free; for the receiver: holding messages) that look
    /// found beyond the owner's own cursor and it has not claimed yet. Always what the
    /// distance between the two cursors says; kept as a count so that an operation it
    /// covers needs no position arithmetic (`send_owned_fast`).
    credit: AtomicUsize,
    /// That look, made on the first try of a blocking operation, found only a short run
    /// (of messages, or of free slots): the owner is on the other side's heels, and its
    /// next look paces first (see `Channel::pace`).
    close: AtomicBool,
}

impl Seen {
    fn new(credit: usize) -> Self {
        Self {
            own: AtomicUsize::new(0),
            cursor: AtomicUsize::new(0),
            credit: AtomicUsize::new(credit),
            close: AtomicBool::new(false),
        }
    }
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
            send_seen: CachePadded::new(Seen::new(cap)),
            recv_seen: CachePadded::new(Seen::new(0)),
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

    /// Owned to shared: writes every slot's stamp from the cursors, which the owned
    /// protocol keeps alone. Runs in the revoker, after both owners' last operations (see
    /// `owners`) and before any shared one.
    fn convert(&self) {
        // Relaxed: the owners' cursor stores happen before (their Release `leave`, the
        // revoker's Acquire `busy` loads); `tail` carries no mark yet (`disconnect` revokes
        // before it marks).
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

    /// How many consecutive slots from `index` (at most `max`, within the lap) carry the
    /// stamps `stamp, stamp + 1, ...`: the run a claim can take once the slot at `index`
    /// was seen with `stamp` (empty slots for a sender, messages for a receiver).
    fn run_len(&self, index: usize, max: usize, stamp: usize) -> usize {
        let limit = max.min(self.cap - index);
        let mut n = 1;
        // Acquire: pairs with the Release stamp store that made each further slot
        // empty (`free_run`) or full (`publish_stamps`), as for the first one.
        while n < limit && self.stamps[index + n].load(Ordering::Acquire) == stamp + n {
            n += 1;
        }
        n
    }

    /// Owned protocol, before an owner looks at the other side's cursor: if its last look
    /// found it on the other side's heels, spin a little without touching shared memory
    /// first, so that this look finds a longer run (the `ring` reader's pacing, for the
    /// same reason: an owner that follows the other side closely keeps pulling its cursor
    /// and the lines it is writing into its own cache, and the other side stalls on its
    /// next store to them). Only the first look of a blocking operation paces, so a `try_`
    /// call never waits and a thread that had to wait for its message (a ping-pong) never
    /// paces. In interleaved SPSC runs of `benches/queue_vs_peers.rs` in the VM's slower
    /// regime it raised the rate from ~26 to ~35 M/s; in the faster one it is neutral.
    #[inline]
    fn pace(&self, seen: &Seen, pace: bool) {
        // Relaxed: only the owner touches `close`.
        if PACE_SPINS > 0 && pace && seen.close.load(Ordering::Relaxed) {
            for _ in 0..PACE_SPINS {
                hint::spin_loop();
            }
        }
    }

    /// Owned protocol, after an owner's look found `run` messages (free slots) made by the
    /// owner of `other`: whether its next look paces first. Never when this thread owns the
    /// other side too: nothing can arrive while it spins.
    #[inline]
    fn note_run(&self, seen: &Seen, other: &Side, pace: bool, run: usize) {
        if PACE_SPINS > 0 {
            let close = pace && run > 0 && run < self.cap / 4 && !self.owners.owns(other);
            // Relaxed: only the owner touches `close`.
            seen.close.store(close, Ordering::Relaxed);
        }
    }

    /// Claims up to `max` (≥ 1) consecutive empty slots of the current lap for sending.
    ///
    /// With `look.settle`, `Full` means the queue was full at one instant during the call:
    /// a slot whose receiver has claimed it (moved `head` past it) but not yet freed it is
    /// waited out, since that receive has taken effect. Otherwise such a slot is reported
    /// as `Full` at once (the first look of a blocking send, which retries anyway).
    fn claim_send(&self, max: usize, look: Look) -> Result<Claim, TrySendError<()>> {
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
    fn claim_send_owned(
        &self,
        max: usize,
        look: Look,
        me: usize,
    ) -> Result<Claim, TrySendError<()>> {
        let pace = look.pace;
        let seen = &self.send_seen;
        // Relaxed: only this thread moves `tail` while it owns the side. It carries no
        // disconnect mark: `disconnect` revokes before it marks, so no owned operation sees
        // one (the next operation finds the queue shared, and the mark).
        let tail = seen.own.load(Ordering::Relaxed);
        // Relaxed: only this thread uses its `Seen`.
        let mut free = seen.credit.load(Ordering::Relaxed);
        let want = max.min(self.cap);
        if free < want {
            self.pace(seen, pace);
            // Acquire: pairs with the receiving owner's Release store of `head`, made after
            // it read the slots it frees (or with the revoker's SHARED store, transitively).
            let head = self.head.load(Ordering::Acquire);
            // Relaxed: only this thread uses its `Seen`.
            seen.cursor.store(head, Ordering::Relaxed);
            free = self.cap - self.distance(head, tail);
            if free == 0 && look.settle {
                // SeqCst: pairs with the receiving owner's fence before it reports `Empty`
                // (Dekker: one of the two sees the other's cursor store).
                fence(Ordering::SeqCst);
                // Acquire: as above.
                let head = self.head.load(Ordering::Acquire);
                // Relaxed: only this thread uses its `Seen`.
                seen.cursor.store(head, Ordering::Relaxed);
                free = self.cap - self.distance(head, tail);
            }
            self.note_run(seen, &self.owners.recv, pace, free);
        }
        if free == 0 {
            // Relaxed: as above.
            seen.credit.store(0, Ordering::Relaxed);
            return Err(TrySendError::Full(()));
        }
        let index = tail & (self.mark_bit - 1);
        let n = free.min(want).min(self.cap - index);
        // Relaxed: as above.
        seen.credit.store(free - n, Ordering::Relaxed);
        Ok(Claim {
            pos: tail,
            n,
            held: Some(me),
        })
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
    unsafe fn publish(&self, claim: Claim, msgs: impl Iterator<Item = T>) {
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
    fn publish_stamps(&self, claim: &Claim) {
        if let Some(me) = claim.held {
            store_own_cursor(
                &self.tail,
                &self.send_seen,
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

    /// The owned protocol's send of one message, inline and without a claim: the message
    /// comes back when this path does not apply (the side is not this thread's, or the
    /// owner knows of no free slot) and the general path (`claim_send`) decides.
    #[inline]
    fn send_owned_fast(&self, msg: T) -> Result<(), T> {
        let side = &self.owners.send;
        let Some(me) = self.owners.try_hold(side) else {
            return Err(msg);
        };
        let seen = &self.send_seen;
        // Relaxed: only the owner uses its `Seen`.
        let credit = seen.credit.load(Ordering::Relaxed);
        if credit == 0 {
            self.owners.leave(side, me);
            return Err(msg);
        }
        // Relaxed: only this thread moves `tail` while it owns the side (no disconnect mark,
        // as in `claim_send_owned`).
        let tail = seen.own.load(Ordering::Relaxed);
        // Relaxed: as above.
        seen.credit.store(credit - 1, Ordering::Relaxed);
        // SAFETY: the credit says the slot at `tail` is free: the receiving owner moved
        // `head` past it (Release, read by our Acquire refresh) after reading its last
        // message, and only the sending side's owner writes slots (a change of owner waits
        // out the previous owner's operation and orders it before ours, see `owners`). The
        // receiver reads the slot only after the `tail` store below.
        self.cells[tail & (self.mark_bit - 1)]
            .with_mut(|p| unsafe { ptr::write(p, MaybeUninit::new(msg)) });
        store_own_cursor(&self.tail, seen, self.advance(tail, 1));
        // As in `publish_stamps`.
        self.owners.leave_notifying(side, me, &self.receivers);
        Ok(())
    }

    /// The owned protocol's receive of one message, the mirror image of `send_owned_fast`:
    /// `None` when this path does not apply.
    #[inline]
    fn recv_owned_fast(&self) -> Option<T> {
        let side = &self.owners.recv;
        let me = self.owners.try_hold(side)?;
        let seen = &self.recv_seen;
        // Relaxed: only the owner uses its `Seen`.
        let credit = seen.credit.load(Ordering::Relaxed);
        if credit == 0 {
            self.owners.leave(side, me);
            return None;
        }
        // Relaxed: only this thread moves `head` while it owns the side.
        let head = seen.own.load(Ordering::Relaxed);
        // Relaxed: as above.
        seen.credit.store(credit - 1, Ordering::Relaxed);
        // SAFETY: the credit says the slot at `head` holds a message: the sending owner
        // moved `tail` past it (Release, read by our Acquire refresh) after writing it, and
        // only the receiving side's owner reads slots (changes of owner are ordered, see
        // `owners`). We move it out once: `head` moves past it below, and the sender writes
        // the slot only after that store.
        let msg =
            self.cells[head & (self.mark_bit - 1)].with(|p| unsafe { ptr::read(p).assume_init() });
        store_own_cursor(&self.head, seen, self.advance(head, 1));
        // As in `free_run`.
        self.owners.leave_notifying(side, me, &self.senders);
        Some(msg)
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

    /// Moves as many messages from the front of `batch` as fit right now (at most one lap's
    /// worth per claim) and returns how many went in. The messages are copied straight from
    /// the `Vec`'s buffer into the slots, and what is left is moved to the front once.
    pub(crate) fn try_send_batch(&self, batch: &mut Vec<T>) -> Result<usize, TrySendError<()>> {
        self.send_batch_now(batch, Look::TRY)
    }

    /// `try_send_batch`, with `look` as in `claim_send` (for the first claim; later ones
    /// only end the batch when they fail, and settle when it does). A settling batch is a
    /// sequence of sends: it stops short only when the queue was full at one instant.
    fn send_batch_now(&self, batch: &mut Vec<T>, look: Look) -> Result<usize, TrySendError<()>> {
        let len = batch.len();
        let base = batch.as_mut_ptr();
        // SAFETY: 0 ≤ capacity. Until the length is restored below the `Vec` owns no
        // message, so nothing is dropped twice even if something here panicked (the rest
        // would leak instead).
        unsafe { batch.set_len(0) };
        let mut sent = 0;
        let result = loop {
            if sent == len {
                break Ok(());
            }
            let look = if sent == 0 { look } else { look.again() };
            match self.claim_send(len - sent, look) {
                Ok(claim) => {
                    let index = claim.pos & (self.mark_bit - 1);
                    for (i, cell) in self.cells[index..index + claim.n].iter().enumerate() {
                        // SAFETY: `sent + i < len`: an initialised message of the batch, read
                        // exactly once (`sent` moves past it below and the `Vec` no longer
                        // owns it).
                        let msg = unsafe { ptr::read(base.add(sent + i)) };
                        // SAFETY: `claim_send` gave this thread the slot (as in `publish`),
                        // and no receiver reads it before `publish_stamps`.
                        cell.with_mut(|p| unsafe { ptr::write(p, MaybeUninit::new(msg)) });
                    }
                    self.publish_stamps(&claim);
                    sent += claim.n;
                }
                Err(TrySendError::Full(())) if sent > 0 => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        // SAFETY: the messages `sent .. len` were not moved out; they go to the front of the
        // buffer (the ranges may overlap: `ptr::copy`) and the `Vec` owns them again.
        unsafe {
            ptr::copy(base.add(sent), base, len - sent);
            batch.set_len(len - sent);
        }
        result.map(|()| sent)
    }

    /// Claims up to `max` (≥ 1) consecutive full slots of the current lap for receiving.
    ///
    /// With `exact` false, an empty slot at the head is reported as `Empty` at once, without
    /// the fence and the load of `tail` that tell `Disconnected` apart: the first look of a
    /// blocking receive, which then polls the head's stamp and looks again exactly. Loading
    /// `tail` there would pull the senders' cursor line away from them just before the
    /// send the receiver is waiting for (a cache miss on the round trip of every hop).
    fn claim_recv(&self, max: usize, look: Look) -> Result<Claim, TryRecvError> {
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

    /// `claim_recv` for the receiving owner: the messages are those the sending owner has
    /// moved `tail` past (it stores `tail` after writing them), seen through a cached copy
    /// refreshed only when it cannot cover the request. An empty queue's `tail` says whether
    /// it is disconnected; an exact look fences before it reports `Empty`, as in
    /// `claim_send_owned`.
    fn claim_recv_owned(&self, max: usize, look: Look, me: usize) -> Result<Claim, TryRecvError> {
        let pace = look.pace;
        let seen = &self.recv_seen;
        // Relaxed: only this thread moves `head` while it owns the side.
        let head = seen.own.load(Ordering::Relaxed);
        // Relaxed: only this thread uses its `Seen`.
        let mut available = seen.credit.load(Ordering::Relaxed);
        let want = max.min(self.cap);
        if available < want {
            self.pace(seen, pace);
            // Acquire: pairs with the sending owner's Release store of `tail`, made after it
            // wrote the messages (or with the revoker's SHARED store, transitively).
            let mut tail = self.tail.load(Ordering::Acquire);
            if tail == head && look.settle {
                // SeqCst: pairs with the sending owner's fence before it reports `Full`.
                fence(Ordering::SeqCst);
                // Acquire: as above.
                tail = self.tail.load(Ordering::Acquire);
            }
            // Relaxed: only this thread uses its `Seen`.
            seen.cursor.store(tail, Ordering::Relaxed);
            available = self.distance(head, tail & !self.mark_bit);
            self.note_run(seen, &self.owners.send, pace, available);
            if available == 0 {
                // Relaxed: as above.
                seen.credit.store(0, Ordering::Relaxed);
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
        seen.credit.store(available - n, Ordering::Relaxed);
        Ok(Claim {
            pos: head,
            n,
            held: Some(me),
        })
    }

    /// Reads the messages out of the claimed slots, hands each to `sink`, then frees the
    /// slots (all the messages first, then all the stamps, as in `publish`).
    ///
    /// # Safety
    ///
    /// `claim` came from `claim_recv` and is consumed exactly once; `sink` cannot panic
    /// (senders would wait forever on a slot never freed).
    unsafe fn consume(&self, claim: Claim, mut sink: impl FnMut(T)) {
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
    fn free_run(&self, claim: &Claim) {
        if let Some(me) = claim.held {
            store_own_cursor(
                &self.head,
                &self.recv_seen,
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

    /// Appends up to `max` (≥ 1) waiting messages to `out`; `Empty`/`Disconnected` when none.
    pub(crate) fn try_recv_batch(
        &self,
        out: &mut Vec<T>,
        max: usize,
    ) -> Result<usize, TryRecvError> {
        self.recv_batch_now(out, max, Look::TRY)
    }

    /// `try_recv_batch`, with `look` as in `claim_recv` (for the first claim; later ones
    /// only end the batch when they fail).
    fn recv_batch_now(
        &self,
        out: &mut Vec<T>,
        max: usize,
        look: Look,
    ) -> Result<usize, TryRecvError> {
        let mut got = 0;
        while got < max {
            // Reserve before claiming: nothing may panic between a claim and its
            // consumption (a claim takes at most `cap` slots).
            out.reserve((max - got).min(self.cap));
            let look = if got == 0 {
                look
            } else {
                // Later claims only end the batch when they fail.
                look.again()
            };
            match self.claim_recv(max - got, look) {
                Ok(claim) => {
                    let index = claim.pos & (self.mark_bit - 1);
                    // `claim.n ≤ (max - got).min(cap)`: the reservation above covers it.
                    let spare = &mut out.spare_capacity_mut()[..claim.n];
                    for (dst, cell) in spare.iter_mut().zip(&self.cells[index..]) {
                        // SAFETY: `claim_recv` gave this thread the slot, which holds an
                        // initialised message (as in `consume`), moved out exactly once
                        // (`free_run` hands the slot to the next lap after).
                        *dst = cell.with(|p| unsafe { ptr::read(p) });
                    }
                    // SAFETY: the `claim.n` elements after the length were just initialised.
                    unsafe { out.set_len(out.len() + claim.n) };
                    self.free_run(&claim);
                    got += claim.n;
                }
                Err(_) if got > 0 => break,
                Err(e) => return Err(e),
            }
        }
        Ok(got)
    }

    /// One round of waiting: first (once) a dense poll until `changed` says the awaited
    /// stamp moved, then the spin/yield rounds of the [`Backoff`], then parking until
    /// `ready` (checked under the wait set's lock after registering, so a notification
    /// cannot be missed).
    fn wait(
        &self,
        set: &WaitSet,
        deadline: Option<Instant>,
        patience: &mut Patience,
        changed: impl Fn(&Self) -> bool,
        ready: impl Fn(&Self) -> bool,
    ) -> Waited {
        if let Some(deadline) = deadline {
            if time::expired(deadline) {
                return Waited::Expired;
            }
        }
        if DENSE_POLLS > 0 && !patience.polled {
            patience.polled = true;
            for _ in 0..DENSE_POLLS {
                hint::spin_loop();
                if changed(self) {
                    break;
                }
            }
            return Waited::Retry;
        }
        if patience.snooze() {
            return Waited::Retry;
        }
        if patience.parked {
            thread::yield_now();
        }
        patience.parked = true;
        match set.wait_until(deadline, || {
            if !self.owners.is_shared() {
                // An owner notifies with the light fence only (`publish_stamps`): this is the
                // heavy side of that handshake. Once shared, the claims' CASes order it.
                asym_fence::heavy();
            }
            ready(self).then_some(())
        }) {
            Some(()) => Waited::Retry,
            None => Waited::Expired,
        }
    }

    /// A hint for the dense poll of a waiting sender: the receivers have freed a few slots
    /// past the tail (`full_slack`), or the queue is disconnected. Relaxed loads: only a
    /// hint, the retry that follows claims with the full protocol.
    ///
    /// Not the first free slot: a sender that jumps on each slot as it frees writes the
    /// stamp and message lines the receiver is reading next, and both sides then pay a line
    /// transfer per message. Waiting for a few more lets the receiver leave those lines and
    /// the sender fill them in one go. The poll is bounded (`DENSE_POLLS`), so a receiver
    /// that frees only one slot still lets the sender in, a poll later.
    fn send_changed(&self) -> bool {
        let slack = self.full_slack();
        if !self.owners.is_shared() {
            // The owned protocol keeps no stamps: look for the receiving owner's progress
            // past the `head` the failed claim saw. Relaxed: a hint (see above).
            let head = self.head.load(Ordering::Relaxed);
            // Relaxed: a hint (see above).
            let seen = self.send_seen.cursor.load(Ordering::Relaxed);
            return (head != seen && self.distance(seen, head) > slack)
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
    /// freed (`send_changed`): two lines of stamps, at most half the queue. In interleaved
    /// runs of `benches/queue_vs_peers.rs` (senders often find the queue full there), 16
    /// raised MPMC 2×2 from 26–29 to 32–35 M/s and MPSC 4→1 from 25–29 to 27–32 M/s against
    /// 0 (8 and 32 did no better).
    #[inline]
    fn full_slack(&self) -> usize {
        FULL_SLACK.min((self.cap - 1) / 2)
    }

    /// A hint for the dense poll of a waiting receiver: the slot at the head is no longer
    /// empty for this lap. Disconnection is left to the [`Backoff`] rounds (the poll ends
    /// after `DENSE_POLLS` at most). Relaxed loads, as in `send_changed`.
    fn recv_changed(&self) -> bool {
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
    fn send_ready(&self) -> bool {
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
    fn recv_ready(&self) -> bool {
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

    /// `send` past the owned fast path.
    #[inline(never)]
    fn send_slow(&self, mut msg: T, deadline: Option<Instant>) -> Result<(), SendTimeoutError<T>> {
        let mut patience = Patience::new();
        // A local, not a field of `patience`: the fast path reads nothing back from it.
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
                &mut patience,
                Self::send_changed,
                Self::send_ready,
            ) {
                return Err(SendTimeoutError::Timeout(msg));
            }
        }
    }

    /// Moves every message of `batch` into the queue, waiting for room as needed.
    pub(crate) fn send_batch(&self, batch: &mut Vec<T>) -> Result<(), TrySendError<()>> {
        let mut patience = Patience::new();
        // As in `send`.
        let mut look = Look::first(None);
        loop {
            let this = look;
            look = this.again();
            match self.send_batch_now(batch, this) {
                Ok(_) if batch.is_empty() => return Ok(()),
                Ok(0) | Err(TrySendError::Full(())) => {}
                Ok(_) => (patience, look) = (Patience::new(), Look::first(None)),
                Err(e) => return Err(e),
            }
            // No deadline: the wait cannot expire.
            let _ = self.wait(
                &self.senders,
                None,
                &mut patience,
                Self::send_changed,
                Self::send_ready,
            );
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

    /// `recv` past the owned fast path.
    #[inline(never)]
    fn recv_slow(&self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        let mut patience = Patience::new();
        // As in `send`.
        let mut look = Look::first(deadline);
        loop {
            let this = look;
            look = this.again();
            match self.recv_now(this) {
                Ok(m) => return Ok(m),
                Err(TryRecvError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
                Err(TryRecvError::Empty) => {}
            }
            if let Waited::Expired = self.wait(
                &self.receivers,
                deadline,
                &mut patience,
                Self::recv_changed,
                Self::recv_ready,
            ) {
                return Err(RecvTimeoutError::Timeout);
            }
        }
    }

    /// Appends between 1 and `max` (≥ 1) messages to `out`, waiting for the first until
    /// `deadline`.
    pub(crate) fn recv_batch(
        &self,
        out: &mut Vec<T>,
        max: usize,
        deadline: Option<Instant>,
    ) -> Result<usize, RecvTimeoutError> {
        let mut patience = Patience::new();
        // As in `send`.
        let mut look = Look::first(deadline);
        loop {
            let this = look;
            look = this.again();
            match self.recv_batch_now(out, max, this) {
                Ok(n) => return Ok(n),
                Err(TryRecvError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
                Err(TryRecvError::Empty) => {}
            }
            if let Waited::Expired = self.wait(
                &self.receivers,
                deadline,
                &mut patience,
                Self::recv_changed,
                Self::recv_ready,
            ) {
                return Err(RecvTimeoutError::Timeout);
            }
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

    /// Takes the next message on behalf of the last receiver, which is going away: waits out
    /// a sender that claimed its slot before the disconnection but has not written it yet.
    /// `None` once the queue is empty.
    ///
    /// Only one thread drains at a time (the last receiver's drop, or the queue's own drop).
    fn take_for_discard(&self) -> Option<T> {
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

    /// Drops every message still queued, each exactly once, each after it has left the
    /// buffer (so the queue stays consistent whatever a `Drop` does). If a message's `Drop`
    /// panics, that panic propagates once the rest are dropped: they are dropped while it
    /// unwinds, each inside `catch_unwind`, since a second panic escaping a destructor during
    /// unwinding would abort the process; their panics go to the panic hook and no further.
    /// A thread that is already unwinding when it drops the queue catches every drop.
    pub(crate) fn discard_all(&self) {
        // The stamps say what is left, so the queue must be shared (it is, after
        // `disconnect`; a queue dropped by another path is converted here).
        self.owners.revoke(|| self.convert());
        struct Rest<'a, T>(&'a Channel<T>);
        impl<T> Drop for Rest<'_, T> {
            fn drop(&mut self) {
                while let Some(msg) = self.0.take_for_discard() {
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                        drop(msg);
                    }));
                }
            }
        }
        let rest = Rest(self);
        // A thread already unwinding (it dropped the last handle while panicking) must not
        // let a panic escape at all: `rest` then catches every drop.
        if !std::thread::panicking() {
            while let Some(msg) = self.take_for_discard() {
                drop(msg);
            }
        }
        drop(rest);
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

    /// The capacity asked for.
    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }
}

impl<T> Drop for Channel<T> {
    fn drop(&mut self) {
        // The last receiver already discarded everything; this covers a queue dropped with
        // messages by any other path.
        self.discard_all();
    }
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use super::*;
    use crate::sync::atomic::AtomicUsize as Counter;
    use crate::sync::Arc;

    struct Tracked(Arc<Counter>);
    impl Drop for Tracked {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn an_owner_paces_only_behind_another_thread() {
        // One thread owning both sides: nothing can arrive while it spins.
        let ch = Channel::with_capacity(64);
        for i in 0..10 {
            ch.send(i, None).unwrap();
            assert_eq!(ch.recv(None), Ok(i));
        }
        assert!(!ch.recv_seen.close.load(Ordering::Relaxed));

        // A short run of another thread's messages, found by a blocking receive's first look.
        let ch = Arc::new(Channel::with_capacity(64));
        let tx = Arc::clone(&ch);
        crate::sync::thread::spawn(move || {
            tx.send(1, None).unwrap();
            tx.send(2, None).unwrap();
        })
        .join()
        .unwrap();
        assert_eq!(ch.recv(None), Ok(1));
        assert!(
            ch.recv_seen.close.load(Ordering::Relaxed),
            "2 of 64: close behind"
        );
        // The credit covers the second message: no look, no pacing.
        assert_eq!(ch.recv(None), Ok(2));
        // A `try_` look never paces, and clears the mark.
        assert_eq!(ch.try_recv(), Err(TryRecvError::Empty));
        assert!(!ch.recv_seen.close.load(Ordering::Relaxed));
    }

    #[test]
    fn positions_ahead_cross_into_the_next_lap() {
        let ch = Channel::<u8>::with_capacity(5);
        let lap = ch.one_lap;
        assert_eq!(ch.advance(1, 3), 4);
        assert_eq!(ch.advance(3, 2), lap);
        assert_eq!(ch.advance(3, 3), lap + 1);
        assert_eq!(ch.advance(lap + 4, 4), 2 * lap + 3);
        assert_eq!(ch.advance(0, 5), lap, "a whole lap's run");
        assert_eq!(ch.full_slack(), 2, "at most half the queue");
        assert_eq!(Channel::<u8>::with_capacity(1).full_slack(), 0);
        assert_eq!(Channel::<u8>::with_capacity(1024).full_slack(), FULL_SLACK);
    }

    #[test]
    fn exact_capacity_and_positions_wrap_many_laps() {
        for cap in [1, 2, 3, 7, 8] {
            let ch = Channel::with_capacity(cap);
            for round in 0..(if cfg!(miri) { 5 } else { 50 }) {
                for i in 0..cap {
                    ch.try_send(round * 100 + i).unwrap();
                }
                assert_eq!(ch.len(), cap);
                assert!(matches!(ch.try_send(0), Err(TrySendError::Full(0))));
                for i in 0..cap {
                    assert_eq!(ch.try_recv(), Ok(round * 100 + i));
                }
                assert_eq!(ch.try_recv(), Err(TryRecvError::Empty));
                assert_eq!(ch.len(), 0);
            }
        }
    }

    #[test]
    fn batches_stop_at_the_lap_end_and_continue() {
        let ch = Channel::with_capacity(5);
        ch.try_send(0u32).unwrap();
        ch.try_send(1).unwrap();
        assert_eq!(ch.try_recv(), Ok(0));
        assert_eq!(ch.try_recv(), Ok(1));
        let mut batch: Vec<u32> = (10..20).collect();
        assert_eq!(ch.try_send_batch(&mut batch).unwrap(), 5);
        assert_eq!(batch, (15..20).collect::<Vec<_>>());
        let mut out = Vec::new();
        assert_eq!(ch.try_recv_batch(&mut out, 4).unwrap(), 4);
        assert_eq!(out, vec![10, 11, 12, 13]);
        assert_eq!(ch.try_send_batch(&mut batch).unwrap(), 4);
        out.clear();
        assert_eq!(ch.try_recv_batch(&mut out, 100).unwrap(), 5);
        assert_eq!(out, vec![14, 15, 16, 17, 18]);
        assert_eq!(ch.try_recv_batch(&mut out, 1), Err(TryRecvError::Empty));
    }

    #[test]
    fn disconnect_then_drain_then_disconnected() {
        let ch = Channel::with_capacity(2);
        ch.try_send(1).unwrap();
        assert!(ch.disconnect());
        assert!(!ch.disconnect());
        assert!(matches!(ch.try_send(2), Err(TrySendError::Disconnected(2))));
        assert_eq!(ch.try_recv(), Ok(1));
        assert_eq!(ch.try_recv(), Err(TryRecvError::Disconnected));
        assert_eq!(ch.recv(None), Err(RecvTimeoutError::Disconnected));
    }

    #[test]
    fn queued_messages_are_dropped_once() {
        let drops = Arc::new(Counter::new(0));
        {
            let ch = Channel::with_capacity(3);
            for _ in 0..3 {
                ch.try_send(Tracked(Arc::clone(&drops))).unwrap();
            }
            drop(ch.try_recv().unwrap());
            assert_eq!(drops.load(Ordering::Relaxed), 1);
            ch.try_send(Tracked(Arc::clone(&drops))).unwrap();
            ch.disconnect();
            ch.discard_all();
            assert_eq!(drops.load(Ordering::Relaxed), 4);
        }
        assert_eq!(drops.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn batches_of_owned_messages_move_each_message_once() {
        let drops = Arc::new(Counter::new(0));
        let ch = Channel::with_capacity(4);
        ch.try_send(Tracked(Arc::clone(&drops))).unwrap();
        let mut batch: Vec<_> = (0..6).map(|_| Tracked(Arc::clone(&drops))).collect();
        // Three fit now; the other three stay in the batch, moved to its front.
        assert_eq!(ch.try_send_batch(&mut batch).unwrap(), 3);
        assert_eq!(batch.len(), 3);
        let mut out = Vec::new();
        assert_eq!(ch.try_recv_batch(&mut out, 10).unwrap(), 4);
        assert_eq!(drops.load(Ordering::Relaxed), 0);
        drop(out);
        assert_eq!(drops.load(Ordering::Relaxed), 4);
        // The next lap, from the first slot on.
        assert_eq!(ch.try_send_batch(&mut batch).unwrap(), 3);
        assert!(batch.is_empty());
        assert_eq!(ch.len(), 3);
        drop(ch);
        assert_eq!(drops.load(Ordering::Relaxed), 7);
    }

    #[test]
    fn a_panicking_drop_leaves_the_rest_dropped_once() {
        struct Bomb(bool, Arc<Counter>);
        impl Drop for Bomb {
            fn drop(&mut self) {
                self.1.fetch_add(1, Ordering::Relaxed);
                if self.0 {
                    panic!("boom");
                }
            }
        }
        let drops = Arc::new(Counter::new(0));
        let ch = Channel::with_capacity(4);
        ch.try_send(Bomb(false, Arc::clone(&drops))).unwrap();
        ch.try_send(Bomb(true, Arc::clone(&drops))).unwrap();
        ch.try_send(Bomb(false, Arc::clone(&drops))).unwrap();
        ch.disconnect();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ch.discard_all()));
        assert!(r.is_err());
        assert_eq!(drops.load(Ordering::Relaxed), 3);
        assert_eq!(ch.len(), 0);
        assert_eq!(ch.try_recv().err(), Some(TryRecvError::Disconnected));
    }

    #[test]
    fn threads_pass_every_message_once() {
        let n = if cfg!(miri) { 200 } else { 20_000 };
        let ch = Arc::new(Channel::with_capacity(4));
        let producers: Vec<_> = (0..2)
            .map(|p| {
                let ch = Arc::clone(&ch);
                thread::spawn(move || {
                    let mut batch = Vec::new();
                    for i in 0..n {
                        if i % 3 == 0 {
                            batch.push(p * n + i);
                            ch.send_batch(&mut batch).unwrap();
                        } else {
                            ch.send(p * n + i, None).unwrap();
                        }
                    }
                })
            })
            .collect();
        let consumer = {
            let ch = Arc::clone(&ch);
            thread::spawn(move || {
                let mut seen = vec![false; 2 * n];
                let mut last = [None::<usize>; 2];
                let mut out = Vec::new();
                let mut count = 0;
                while count < 2 * n {
                    out.clear();
                    ch.recv_batch(&mut out, 3, None).unwrap();
                    for &m in &out {
                        assert!(!seen[m]);
                        seen[m] = true;
                        let p = m / n;
                        assert!(last[p].map_or(true, |l| l < m), "per-producer order");
                        last[p] = Some(m);
                        count += 1;
                    }
                }
            })
        };
        for p in producers {
            p.join().unwrap();
        }
        consumer.join().unwrap();
        assert_eq!(ch.len(), 0);
    }

    #[test]
    fn timed_operations_expire() {
        let ch = Channel::with_capacity(1);
        let soon = time::deadline_after(std::time::Duration::from_millis(5));
        assert_eq!(ch.recv(soon), Err(RecvTimeoutError::Timeout));
        ch.try_send(1).unwrap();
        let soon = time::deadline_after(std::time::Duration::from_millis(5));
        assert!(matches!(
            ch.send(2, soon),
            Err(SendTimeoutError::Timeout(2))
        ));
    }
}

#[cfg(all(test, logbus_loom))]
mod loom_models {
    //! The owned protocol and its revocation (the public-API models in `loom-tests/` run
    //! the shared protocol, see `Channel::with_capacity`). `Arc` payloads: a message lost or
    //! delivered twice shows up as a leak or a double drop.
    use super::super::owners::TRANSFER_BURST;
    use super::*;
    use crate::sync::{thread, Arc};

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut builder = loom::model::Builder::new();
        if builder.preemption_bound.is_none() {
            builder.preemption_bound = Some(2);
        }
        builder.max_branches = 20_000;
        builder.check(f);
    }

    /// One sending thread, one receiving thread, capacity 1: both own their sides, the
    /// sender waits on a full queue and the receiver on an empty one, every message arrives
    /// once and in order, and the last one is still delivered after the disconnection.
    #[test]
    fn owners_pass_messages_through_a_full_and_an_empty_queue() {
        model(|| {
            let ch = Arc::new(Channel::with_protocol(1, Owners::new()));
            let tx = Arc::clone(&ch);
            let sender = thread::spawn(move || {
                for i in 0..3u8 {
                    tx.send(Arc::new(i), None).unwrap();
                }
                tx.disconnect();
            });
            let mut got = Vec::new();
            while let Ok(m) = ch.recv(None) {
                got.push(*m);
            }
            sender.join().unwrap();
            assert_eq!(got, [0, 1, 2]);
        });
    }

    /// Capacity 2 and four messages: the owners take runs of two, so the second message of
    /// each run goes through the fast paths (`send_owned_fast`, `recv_owned_fast`, which
    /// spend a credit instead of claiming), and the sender refills each slot right after
    /// the receiver frees it.
    #[test]
    fn owners_spend_their_credit_on_the_fast_paths() {
        model(|| {
            let ch = Arc::new(Channel::with_protocol(2, Owners::new()));
            let tx = Arc::clone(&ch);
            let sender = thread::spawn(move || {
                for i in 0..4u8 {
                    tx.send(Arc::new(i), None).unwrap();
                }
            });
            for i in 0..4u8 {
                assert_eq!(*ch.recv(None).unwrap(), i);
            }
            sender.join().unwrap();
        });
    }

    /// A second sending thread arrives while the owners run, with no owner change allowed:
    /// the revocation converts the cursors into stamps between their operations, and both
    /// messages arrive once.
    #[test]
    fn a_second_sender_revokes_the_owners_mid_stream() {
        model(|| {
            let ch = Arc::new(Channel::with_protocol(2, Owners::with_burst(0)));
            let senders: Vec<_> = (0..2u8)
                .map(|p| {
                    let tx = Arc::clone(&ch);
                    thread::spawn(move || tx.send(Arc::new(p), None).unwrap())
                })
                .collect();
            let mut got = [*ch.recv(None).unwrap(), *ch.recv(None).unwrap()];
            for s in senders {
                s.join().unwrap();
            }
            got.sort_unstable();
            assert_eq!(got, [0, 1]);
            assert_eq!(ch.try_recv().unwrap_err(), TryRecvError::Empty);
        });
    }

    /// Two sending threads, one of them sending twice: whichever comes second revokes (no
    /// owner change allowed), possibly between the first one's two sends or while the
    /// receiver waits on an empty queue; every message arrives once and each sender's in
    /// order.
    #[test]
    fn senders_in_order_across_a_revocation() {
        senders_in_order(0);
    }

    /// As `senders_in_order_across_a_revocation`, with owner changes allowed: the second
    /// sender takes the sending side over (and the first may take it back), the queue
    /// staying owned.
    #[test]
    fn senders_in_order_across_owner_changes() {
        senders_in_order(TRANSFER_BURST);
    }

    /// As above, with one change allowed: the first change is a transfer, a second one
    /// makes the queue shared.
    #[test]
    fn senders_in_order_across_a_transfer_then_a_revocation() {
        senders_in_order(1);
    }

    fn senders_in_order(burst: usize) {
        model(move || {
            let ch = Arc::new(Channel::with_protocol(2, Owners::with_burst(burst)));
            let senders: Vec<_> = (0..2u8)
                .map(|p| {
                    let tx = Arc::clone(&ch);
                    thread::spawn(move || {
                        for i in 0..2 - p {
                            tx.send(Arc::new((p, i)), None).unwrap();
                        }
                    })
                })
                .collect();
            let mut next = [0u8; 2];
            for _ in 0..3 {
                let m = ch.recv(None).unwrap();
                let (p, i) = *m;
                assert_eq!(next[p as usize], i, "sender {p} out of order");
                next[p as usize] += 1;
            }
            for s in senders {
                s.join().unwrap();
            }
            assert_eq!(next, [2, 1]);
        });
    }

    /// A second receiving thread revokes (no owner change allowed) while the first receives
    /// and the sender sends: each message is taken exactly once.
    #[test]
    fn a_second_receiver_revokes_the_owners() {
        receivers_take_each_once(0);
    }

    /// As `a_second_receiver_revokes_the_owners`, the second receiver taking the receiving
    /// side over instead.
    #[test]
    fn a_second_receiver_takes_the_side_over() {
        receivers_take_each_once(TRANSFER_BURST);
    }

    fn receivers_take_each_once(burst: usize) {
        model(move || {
            let ch = Arc::new(Channel::<Arc<u8>>::with_protocol(
                2,
                Owners::with_burst(burst),
            ));
            let receivers: Vec<_> = (0..2)
                .map(|_| {
                    let rx = Arc::clone(&ch);
                    thread::spawn(move || *rx.recv(None).unwrap())
                })
                .collect();
            ch.send(Arc::new(0u8), None).unwrap();
            ch.send(Arc::new(1u8), None).unwrap();
            let mut got: Vec<u8> = receivers.into_iter().map(|r| r.join().unwrap()).collect();
            got.sort_unstable();
            assert_eq!(got, [0, 1]);
        });
    }

    /// Linearizability of the owned protocol's `try_` paths: the sending owner sends `a` and
    /// `b` into a queue of 2, then `try_send`s; the receiving owner takes `a`, then
    /// `try_recv`s. `Full` on the third send says `a` was still there after `b` went in;
    /// `Empty` after taking `a` says `b` had not gone in: no order of the operations gives
    /// both. The cursors move by plain stores, so without the fences before `Full`/`Empty`
    /// (`claim_send_owned`, `claim_recv_owned`) each side may read the other's old cursor;
    /// taking out either fence makes this model fail. The owners' light fences are modelled
    /// as the compiler fences they are on the std build (no owner change or parking here
    /// pairs with them), or loom's `SeqCst` stand-in would order the cursors by itself.
    #[test]
    fn owned_try_operations_are_linearizable() {
        asym_fence::light_as_compiler_fence(|| owned_try_model());
    }

    fn owned_try_model() {
        model(|| {
            let ch = Arc::new(Channel::<Arc<u8>>::with_protocol(2, Owners::new()));
            let rx = Arc::clone(&ch);
            let receiver = thread::spawn(move || {
                // Whether it took `a`, and then what its next look found.
                let first = rx.try_recv().ok().map(|m| *m);
                first.map(|a| (a, rx.try_recv().map(|m| *m)))
            });
            ch.try_send(Arc::new(0u8)).unwrap();
            ch.try_send(Arc::new(1u8)).unwrap();
            let third = ch.try_send(Arc::new(2u8));
            let full = matches!(third, Err(TrySendError::Full(_)));
            if let Some((a, second)) = receiver.join().unwrap() {
                assert_eq!(a, 0);
                assert!(
                    !(full && second == Err(TryRecvError::Empty)),
                    "`Full` with `a` taken, `Empty` with `b` sent"
                );
            }
        });
    }

    /// The receiving side disconnects (revoking) while the sending owner sends: each send
    /// either lands, and its message is received or discarded exactly once, or hands its
    /// message back; none lands after a send saw the disconnection.
    #[test]
    fn a_disconnection_revokes_the_sending_owner_mid_send() {
        model(|| {
            let ch = Arc::new(Channel::with_protocol(2, Owners::new()));
            let tx = Arc::clone(&ch);
            let sender = thread::spawn(move || {
                let first = tx.try_send(Arc::new(1u8)).is_ok();
                let second = tx.try_send(Arc::new(2u8)).is_ok();
                (first, second)
            });
            let got = ch.try_recv().ok().map(|m| *m);
            ch.disconnect();
            let (first, second) = sender.join().unwrap();
            assert!(
                first || !second,
                "a send landed after one saw the disconnection"
            );
            if let Some(v) = got {
                assert_eq!(v, 1);
                assert!(first);
            }
            ch.discard_all();
            assert!(ch.try_send(Arc::new(3)).is_err());
        });
    }
}
