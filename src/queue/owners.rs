//! Which protocol a queue runs: one thread per side at a time (the *owned* protocol) or
//! the shared one.
//!
//! Each side of a queue is *owned* by one thread at a time, and the queue runs a
//! cursor-only protocol: the sending owner writes messages and stores `tail`, the receiving
//! owner reads them and stores `head`, each with a plain store and no per-slot stamps
//! (Lamport's single-producer single-consumer queue). Another thread that operates on a
//! side *takes it over*: it waits out the owner's operation in flight and becomes the owner,
//! and the queue stays owned. Only when a side changes hands faster than its budget allows
//! (at most [`TRANSFER_BURST`] banked, one earned per [`TRANSFER_RUN`] messages) is the queue
//! *revoked* for good: both owners' operations are waited out, the stamps are rebuilt from
//! the cursors, and from then on every thread runs the shared protocol (stamps and CAS
//! claims, `array`).
//!
//! This is *biased locking* with rebiasing (Kawachiya, Koseki and Onodera, "Lock
//! reservation", OOPSLA 2002; the JVM's biased locks) applied to the two sides of a queue.
//! It pays because threads on the same side rarely run at the same moment: in the MPMC 2×2
//! and MPSC 4→1 benchmarks on two cores, consecutive claims on one side came from different
//! threads only once every few thousand messages (BENCHMARKS.md, "Tuning constants"), while a claim
//! by CAS costs a locked instruction per message. A `Sender` is `Sync` and `Clone`, so "one handle"
//! does not mean "one thread": ownership is per thread, named by a thread token.
//!
//! # The handshake
//!
//! Each side's `owner` is [`UNOWNED`], a thread token, [`REVOKING`] or [`SHARED`].
//! UNOWNED becomes a token by the first operation's CAS; a token becomes REVOKING, then
//! another token (a change of owner) or SHARED (for good), only in the one thread elected
//! by `revoker`. An owner brackets each operation: it stores its busy flag, issues the light
//! side of an asymmetric fence, and checks that `owner` still names it; at the end it
//! clears the flag (Release). The elected thread stores REVOKING, issues the heavy fence,
//! and waits for the previous owner's flag to clear (Acquire) before it stores the new
//! owner or SHARED (Release). The fences make it impossible for an owner and the changer
//! both to miss the other's store (Dekker): either the owner sees REVOKING and backs off,
//! or the changer sees it busy and waits. So every operation of an owner happens before
//! every operation of the next owner, and before the conversion to the shared protocol.
//!
//! The busy flags are per thread slot ([`thread::slot`]), not one per side: a thread whose
//! `hold` failed clears only its own flag, never the flag of the owner that replaced it.
//! Threads beyond the slots never own; their first operation makes the queue shared.
//!
//! An owner never waits while busy (a full or empty queue ends the operation and the
//! blocking call waits outside it), so a change waits at most for one operation. It waits
//! by parking in `waits`, not by spinning, and so do the threads that find a change in
//! progress: an owner's [`Owners::leave`] pays the light side of an asymmetric fence and a
//! load, the changer the heavy side (a `membarrier`, a system call). Loom found three
//! things on the way, each fixed and noted where it happens: a plain store lost against a
//! read-modify-write (tokio-rs/loom#254, so the words move by `swap`), an owner whose failed
//! `hold` did not wake the changer, and waiters that looped on an old `false` of `revoker`
//! instead of parking.

use crate::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use crate::sync::{asym_fence, thread, CachePadded, WaitSet};

/// No thread has operated on the side yet.
const UNOWNED: usize = 0;
/// A thread is changing the side's owner (a transfer, or the revocation for good) and waits
/// out the operation of the owner it replaces.
const REVOKING: usize = 1;
/// Every thread uses the shared protocol, for good.
const SHARED: usize = 2;
const _: () = assert!(SHARED < thread::FIRST_TOKEN);

/// How many owner changes a side may bank: it starts with this many (the first operations
/// of threads that start using a queue together), spends one per change, and earns one back
/// per [`TRANSFER_RUN`] messages moved through it, never holding more than this. A change
/// with none left makes the queue shared for good instead: threads taking turns that fast
/// would pay more for the changes (a `membarrier` each, the time of a few hundred owned
/// messages) than the shared protocol saves them. A cap, not a running total, so that
/// a long-lived queue cannot bank millions of changes and then spend them all on a pattern
/// that thrashes: that costs at most this many changes.
///
/// In the benchmarks' MPMC 2×2 runs a side changed hands rarely on average, but in bursts:
/// two senders filling the queue in turn changed it every few hundred messages for a while.
/// A small cap made those bursts turn the queue shared, at a large cost; this cap and
/// [`TRANSFER_RUN`] keep it owned (BENCHMARKS.md, "Tuning constants").
pub(crate) const TRANSFER_BURST: usize = 64;
/// Messages moved per change of owner earned back (see [`TRANSFER_BURST`]).
const TRANSFER_RUN: usize = 256;

/// One side's ownership.
#[derive(Debug)]
pub(crate) struct Side {
    /// Read on every operation of this side, written a few times in the queue's life: on a
    /// line of its own, so the owner's `busy` stores do not pull it away from readers.
    owner: CachePadded<AtomicUsize>,
    /// One flag per thread slot ([`thread::slot`]), set by that thread while it holds the
    /// side for an operation: written twice per owned operation, read by the thread that
    /// changes owners. Per thread, not one per side: a thread whose `hold` fails because the
    /// side was taken from it clears only its own flag, never the flag of the owner that
    /// took over (with one flag, that late clear could hide the new owner's operation from
    /// the next change of owner).
    busy: CachePadded<[AtomicBool; thread::SLOTS]>,
    /// Owner changes the side may still make (see [`TRANSFER_BURST`]). Only the thread
    /// changing owners touches it and `earned_at` (under `revoker`).
    changes_left: AtomicUsize,
    /// The messages moved through the side when `changes_left` last earned changes back.
    earned_at: AtomicUsize,
}

impl Side {
    fn new(burst: usize) -> Self {
        Self {
            owner: CachePadded::new(AtomicUsize::new(UNOWNED)),
            busy: CachePadded::new(std::array::from_fn(|_| AtomicBool::new(false))),
            changes_left: AtomicUsize::new(burst),
            earned_at: AtomicUsize::new(0),
        }
    }

    /// The busy flag of the thread with token `token`, which must have a slot (only such
    /// threads own sides).
    #[inline]
    fn busy(&self, token: usize) -> &AtomicBool {
        &self.busy[thread::slot(token).expect("an owner holds a thread slot")]
    }

    /// The owner's side of the handshake: marks an operation in flight, then checks that
    /// the side is still ours. The flag stays set either way: the caller clears it with
    /// [`Owners::leave`], which also wakes a thread waiting for it.
    #[inline(always)]
    fn hold(&self, me: usize) -> bool {
        // Relaxed: ordered before the load below by the light fence, which pairs with the
        // heavy fence of the thread changing owners.
        self.busy(me).store(true, Ordering::Relaxed);
        asym_fence::light();
        // Relaxed: ordered by the fence above.
        self.owner.load(Ordering::Relaxed) == me
    }

    /// Whether the side runs the shared protocol for good.
    #[inline]
    fn is_shared(&self) -> bool {
        // Acquire: pairs with the revoker's Release store of SHARED (the conversion happens
        // before what the caller does next).
        self.owner.load(Ordering::Acquire) == SHARED
    }
}

/// The ownership of both sides of one queue.
#[derive(Debug)]
pub(crate) struct Owners {
    pub(crate) send: Side,
    pub(crate) recv: Side,
    /// Set by the one thread changing an owner; stays set once the queue is shared.
    revoker: AtomicBool,
    /// [`TRANSFER_BURST`], or another burst for a model.
    burst: usize,
    /// The thread changing owners waits here for an owner's operation to end, and the other
    /// threads for the change to end: parking, not spinning, so loom's executions stay short.
    waits: CachePadded<WaitSet>,
}

impl Owners {
    /// Both sides unowned: the first thread to operate on a side will own it.
    pub(crate) fn new() -> Self {
        Self::with_burst(TRANSFER_BURST)
    }

    /// [`new`](Self::new), with `burst` in place of [`TRANSFER_BURST`]: the owner changes
    /// each side starts with and may bank at most (0: the first change makes the queue
    /// shared).
    pub(crate) fn with_burst(burst: usize) -> Self {
        // The owners' fences are the light side of asymmetric fences: register for the
        // heavy side now (once per process), or every light fence stays a full `mfence`
        // (three per owned operation) until some thread happens to issue a heavy one.
        asym_fence::init();
        Self {
            send: Side::new(burst),
            recv: Side::new(burst),
            revoker: AtomicBool::new(false),
            burst,
            waits: CachePadded::new(WaitSet::new()),
        }
    }

    /// Shared from the start: the owned protocol is never used.
    pub(crate) fn shared() -> Self {
        let owners = Self::new();
        owners.revoke(|| {});
        owners
    }

    /// Starts an operation on `side`. `Some(token)`: the calling thread (named by `token`)
    /// owns the side and runs the owned protocol until it calls [`leave`](Self::leave),
    /// which it must do before the operation returns or waits. `None`: the queue runs the
    /// shared protocol, and every owned operation and the conversion happen before this
    /// call returns.
    ///
    /// A side owned by another thread is taken over (the previous owner's operation in
    /// flight is waited out) while the side's change budget allows, see
    /// [`TRANSFER_BURST`]; `moved` says how many messages have gone through the side. Past
    /// the budget, the queue is made shared for good, `convert` turning the owned state
    /// into the shared one.
    #[inline]
    pub(crate) fn enter(
        &self,
        side: &Side,
        moved: impl Fn() -> usize,
        convert: impl Fn(),
    ) -> Option<usize> {
        // Acquire: when it reads SHARED, as in `is_shared`; when it reads our token, `hold`
        // checks again after its fence.
        let owner = side.owner.load(Ordering::Acquire);
        if owner == SHARED {
            // The common case of a side with several threads: one load, no thread token.
            return None;
        }
        let me = thread::token();
        if owner == me && self.hold(side, me) {
            return Some(me);
        }
        self.enter_slow(side, me, &moved, &convert)
    }

    /// The owner's fast entry: the owner's token when the calling thread owns `side` and
    /// now holds it for one operation (end it with [`leave`](Self::leave) or
    /// [`leave_notifying`](Self::leave_notifying)); `None` in every other case, which
    /// [`enter`](Self::enter) sorts out.
    #[inline(always)]
    pub(crate) fn try_hold(&self, side: &Side) -> Option<usize> {
        let me = thread::token();
        // Relaxed: `hold` checks again after its fence.
        (side.owner.load(Ordering::Relaxed) == me && self.hold(side, me)).then_some(me)
    }

    /// Whether the calling thread owns `side` (a hint: the side may change owners next).
    #[inline]
    pub(crate) fn owns(&self, side: &Side) -> bool {
        // Relaxed: a hint.
        side.owner.load(Ordering::Relaxed) == thread::token()
    }

    /// [`Side::hold`], leaving at once when the side is no longer ours.
    #[inline(always)]
    fn hold(&self, side: &Side, me: usize) -> bool {
        if side.hold(me) {
            return true;
        }
        self.leave(side, me);
        false
    }

    /// Ends an owned operation of the thread `me` on `side` (after [`enter`](Self::enter)
    /// or [`try_hold`](Self::try_hold)): clears its busy flag and wakes a thread waiting for
    /// it to change owners.
    #[inline(always)]
    pub(crate) fn leave(&self, side: &Side, me: usize) {
        // Release: the operation's accesses happen before the Acquire load of the thread
        // changing owners.
        side.busy(me).store(false, Ordering::Release);
        // The light side of the handshake with the heavy fence in `wait_idle`.
        self.waits.notify_all_light();
    }

    /// [`leave`](Self::leave), then wakes the threads parked in `peers` (the other side's
    /// waiters, after the owner published its progress before this call): one light fence
    /// serves both handshakes.
    #[inline(always)]
    pub(crate) fn leave_notifying(&self, side: &Side, me: usize, peers: &WaitSet) {
        // `leave` ends with the light fence, which orders this load too.
        self.leave(side, me);
        peers.notify_all_after_light_fence();
    }

    #[cold]
    fn enter_slow(
        &self,
        side: &Side,
        me: usize,
        moved: &dyn Fn() -> usize,
        convert: &dyn Fn(),
    ) -> Option<usize> {
        loop {
            // Acquire: as in `enter`.
            match side.owner.load(Ordering::Acquire) {
                SHARED => return None,
                REVOKING => self.wait_change(),
                UNOWNED if thread::slot(me).is_none() => {
                    // A thread without a slot cannot own: the queue goes shared.
                    self.revoke(convert);
                }
                UNOWNED => {
                    // The side's first operation: take it. Relaxed: `hold` fences next round;
                    // what the other side did is ordered by the cursors' Acquire loads.
                    let _ = side.owner.compare_exchange(
                        UNOWNED,
                        me,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                }
                owner if owner == me => {
                    if self.hold(side, me) {
                        return Some(me);
                    }
                }
                _ => self.take_over(side, me, moved, convert),
            }
        }
    }

    /// Another thread owns `side`: take it over if the budget allows, or make the queue
    /// shared. Returns when the caller should look again.
    #[cold]
    fn take_over(&self, side: &Side, me: usize, moved: &dyn Fn() -> usize, convert: &dyn Fn()) {
        if !self.elect() {
            self.wait_change();
            return;
        }
        // Relaxed: only the thread holding `revoker` changes a token into another value.
        let prev = side.owner.load(Ordering::Relaxed);
        if prev < thread::FIRST_TOKEN || prev == me {
            // The side changed while we were getting here: look again.
            self.end_change();
            return;
        }
        if thread::slot(me).is_none() || !self.spend_change(side, moved()) {
            // Too many changes (or we could not own): shared for good.
            self.revoke_elected(convert);
            return;
        }
        // A `swap`, not a store: loom 0.7 can lose a plain store racing a read-modify-write
        // (tokio-rs/loom#254). Relaxed: the heavy fence in `wait_idle` orders it before the
        // busy load.
        side.owner.swap(REVOKING, Ordering::Relaxed);
        self.wait_idle(side, prev);
        // Release: the previous owner's operations (ordered before by `wait_idle`'s Acquire)
        // happen before ours, which start with an Acquire load of this.
        side.owner.swap(me, Ordering::Release);
        self.end_change();
    }

    /// Takes one change of owner from `side`'s budget, after earning back one per
    /// [`TRANSFER_RUN`] of the `moved` messages since the last time (up to the cap, see
    /// [`TRANSFER_BURST`]); `false` when none is left. Only under `revoker`.
    fn spend_change(&self, side: &Side, moved: usize) -> bool {
        // Relaxed (all four): only the thread holding `revoker` touches these, and the
        // election orders the holders one after the other.
        let at = side.earned_at.load(Ordering::Relaxed);
        let earned = moved.wrapping_sub(at) / TRANSFER_RUN;
        let mut left = side.changes_left.load(Ordering::Relaxed);
        if earned > 0 {
            left = left.saturating_add(earned).min(self.burst);
            side.earned_at
                .store(at.wrapping_add(earned * TRANSFER_RUN), Ordering::Relaxed);
        }
        let spent = left > 0;
        side.changes_left
            .store(left.saturating_sub(1), Ordering::Relaxed);
        spent
    }

    /// Makes the calling thread the one changing owners, if no other thread is.
    fn elect(&self) -> bool {
        // A CAS: a loser writes nothing. Acquire: the previous change happens before ours.
        self.revoker
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Ends a change of owner: lets the next one start and wakes the threads waiting.
    fn end_change(&self) {
        // Release: pairs with the Acquire of the next thread elected, and of the waiters in
        // `wait_change`. A `swap`, not a store: loom 0.7 can lose a plain store racing a
        // read-modify-write of the same atomic (tokio-rs/loom#254), here another thread's
        // election; the model found the waiters of `wait_change` parked for good.
        self.revoker.swap(false, Ordering::Release);
        self.waits.notify_all();
    }

    /// After storing REVOKING on `side`: waits until the thread `prev`, which owned it, is
    /// not inside an operation. Every operation it starts from now on fails its `hold`.
    fn wait_idle(&self, side: &Side, prev: usize) {
        if thread::slot(prev).is_none() {
            // UNOWNED: nobody to wait for.
            return;
        }
        let busy = side.busy(prev);
        // The heavy side of the handshake with `hold`'s light fence: either the owner's
        // busy store is visible below, or its owner check sees REVOKING.
        asym_fence::heavy();
        // Acquire: pairs with the owner's Release clear in `leave`, so its last operation
        // happens before what the caller does next.
        if busy.load(Ordering::Acquire) {
            // The heavy side of the handshake with `leave`'s light fence, once per park.
            let _ = self.waits.wait_until_heavy(
                None,
                || true,
                // Acquire: as above.
                || (!busy.load(Ordering::Acquire)).then_some(()),
            );
        }
    }

    /// Waits until the change of owner in progress has ended (or the queue is shared).
    #[cold]
    fn wait_change(&self) {
        let _ = self.waits.wait_until(None, || {
            // A read-modify-write, not a load: it reads the newest value. A load may return
            // an old `false` (from before the election), and the caller would loop back
            // here without parking, a loop loom explores without bound. Acquire: pairs with
            // `end_change`, so the caller's next look sees the new owner.
            (!self.revoker.fetch_or(false, Ordering::Acquire) || self.is_shared()).then_some(())
        });
    }

    /// Whether both sides run the shared protocol for good.
    #[inline]
    pub(crate) fn is_shared(&self) -> bool {
        self.send.is_shared() && self.recv.is_shared()
    }

    /// Makes the queue shared for good (idempotent): waits out the owners' operations in
    /// flight, runs `convert` (only in the thread that does the revoking), and returns once
    /// every thread will use the shared protocol. The caller must not be inside an owned
    /// operation.
    pub(crate) fn revoke(&self, convert: impl Fn()) {
        loop {
            if self.is_shared() {
                return;
            }
            if self.elect() {
                break;
            }
            self.wait_change();
        }
        self.revoke_elected(&convert);
    }

    /// [`revoke`](Self::revoke) for the thread holding `revoker`, which it keeps for good.
    fn revoke_elected(&self, convert: &dyn Fn()) {
        if self.is_shared() {
            return;
        }
        // `swap`s, as in `take_over`: a first operation may be taking the side with a CAS
        // at the same moment.
        let prev =
            [&self.send, &self.recv].map(|side| side.owner.swap(REVOKING, Ordering::Relaxed));
        self.wait_idle(&self.send, prev[0]);
        self.wait_idle(&self.recv, prev[1]);
        convert();
        for side in [&self.send, &self.recv] {
            // Release: pairs with the Acquire loads that find SHARED. A `swap` as above.
            side.owner.swap(SHARED, Ordering::Release);
        }
        self.waits.notify_all();
    }
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use super::*;
    use crate::sync::Arc;

    /// Runs `f(0)`, `f(1)`, … `f(n - 1)` one after the other, each on its own thread, and
    /// keeps every thread alive until all have run: a thread's token (its slot) goes back
    /// to the pool when it exits, and a later thread reusing it would inherit what it owned.
    fn in_turns<T: Send + 'static>(
        n: usize,
        f: impl Fn(usize) -> T + Send + Sync + 'static,
    ) -> Vec<T> {
        let f = Arc::new(f);
        let turn = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let (f, turn) = (Arc::clone(&f), Arc::clone(&turn));
                crate::sync::thread::spawn(move || {
                    while turn.load(Ordering::Acquire) != i {
                        crate::sync::thread::yield_now();
                    }
                    let out = f(i);
                    turn.fetch_add(1, Ordering::AcqRel);
                    while turn.load(Ordering::Acquire) != n {
                        crate::sync::thread::yield_now();
                    }
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn the_first_thread_of_each_side_owns_it_and_a_second_one_takes_it_over() {
        let owners = Arc::new(Owners::new());
        let me = owners.enter(&owners.send, || 0, || unreachable!());
        assert!(me.is_some());
        owners.leave(&owners.send, me.unwrap());
        let also = owners.enter(&owners.recv, || 0, || unreachable!());
        assert_eq!(also, me, "one thread may own both sides");
        owners.leave(&owners.recv, also.unwrap());

        let o = Arc::clone(&owners);
        let main_owns = Arc::new(AtomicBool::new(false));
        let m = Arc::clone(&main_owns);
        let other = in_turns(1, move |_| {
            let t = o.enter(
                &o.recv,
                || 0,
                || unreachable!("a transfer converts nothing"),
            );
            o.leave(&o.recv, t.unwrap());
            // While this thread lives, the side stays its own.
            m.store(o.owns(&o.recv), Ordering::Relaxed);
            t
        });
        assert!(
            other[0].is_some() && other[0] != me,
            "the receiving side changed hands"
        );
        assert!(main_owns.load(Ordering::Relaxed));
        assert!(owners.owns(&owners.send) && !owners.owns(&owners.recv));
        // And back: the budget allows a burst of changes.
        let back = owners.enter(&owners.recv, || 0, || unreachable!());
        assert_eq!(back, me);
        owners.leave(&owners.recv, me.unwrap());
        assert!(!owners.is_shared());
    }

    #[test]
    fn changes_past_the_budget_make_the_queue_shared_converting_once() {
        let owners = Arc::new(Owners::with_burst(2));
        let converted = Arc::new(AtomicUsize::new(0));
        let (o, c) = (Arc::clone(&owners), Arc::clone(&converted));
        let owned = in_turns(5, move |_| {
            let t = o.enter(
                &o.send,
                || 0,
                || {
                    c.fetch_add(1, Ordering::Relaxed);
                },
            );
            if let Some(t) = t {
                o.leave(&o.send, t);
            }
            t.is_some()
        });
        // The first thread owns, two more take over, the fourth finds the budget spent.
        assert_eq!(owned, [true, true, true, false, false]);
        assert!(owners.is_shared());
        assert_eq!(converted.load(Ordering::Relaxed), 1);
        assert_eq!(owners.enter(&owners.send, || 0, || unreachable!()), None);
        assert_eq!(owners.enter(&owners.recv, || 0, || unreachable!()), None);
    }

    /// Four threads take the sending side in turn, the first at no cost, each next one
    /// after `moved(i)` messages; which of them owned it.
    fn changes_after(burst: usize, moved: fn(usize) -> usize) -> Vec<bool> {
        let owners = Arc::new(Owners::with_burst(burst));
        let o = Arc::clone(&owners);
        in_turns(4, move |i| {
            let t = o.enter(&o.send, || moved(i), || {});
            if let Some(t) = t {
                o.leave(&o.send, t);
            }
            t.is_some()
        })
    }

    #[test]
    fn messages_moved_earn_changes_back_up_to_the_cap() {
        // One change banked: spent at once, earned back by a run of messages.
        assert_eq!(changes_after(1, |i| i * TRANSFER_RUN), [true; 4]);
        // No message moved: the second thread spends the one banked, the third thread
        // finds none left and makes the queue shared.
        assert_eq!(changes_after(1, |_| 0), [true, true, false, false]);
        // Earning never banks more than the cap: ten runs earn one change, spent by the
        // third thread; the fourth, with nothing moved since, finds none.
        assert_eq!(
            changes_after(1, |i| if i < 2 { 0 } else { 10 * TRANSFER_RUN }),
            [true, true, true, false]
        );
        // No change allowed at all.
        assert_eq!(
            changes_after(0, |i| i * TRANSFER_RUN),
            [true, false, false, false]
        );
    }

    #[test]
    fn revoking_an_unused_queue_converts_it_once() {
        let owners = Owners::new();
        let n = AtomicUsize::new(0);
        owners.revoke(|| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        owners.revoke(|| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 1);
        assert_eq!(owners.enter(&owners.send, || 0, || unreachable!()), None);
    }

    #[test]
    fn racing_threads_convert_once_and_all_end_shared() {
        let owners = Arc::new(Owners::new());
        let converted = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (o, c) = (Arc::clone(&owners), Arc::clone(&converted));
                crate::sync::thread::spawn(move || {
                    for _ in 0..200 {
                        if let Some(t) = o.enter(
                            &o.send,
                            || 0,
                            || {
                                c.fetch_add(1, Ordering::Relaxed);
                            },
                        ) {
                            o.leave(&o.send, t);
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        owners.revoke(|| {
            converted.fetch_add(1, Ordering::Relaxed);
        });
        assert!(owners.is_shared());
        assert_eq!(converted.load(Ordering::Relaxed), 1);
    }
}
