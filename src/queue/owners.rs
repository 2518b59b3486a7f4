//! Which protocol a queue runs: one thread per side (the *owned* protocol) or the shared one.
//!
//! While one thread has ever sent and one has ever received, each *owns* its side and the
//! queue runs a cursor-only protocol: the sender writes messages and stores `tail`, the
//! receiver reads them and stores `head`, each with a plain store and no per-slot stamps
//! (Lamport's single-producer single-consumer queue). The first operation of a second
//! thread on either side *revokes* both ownerships for good: it waits out the owners'
//! operations in flight, rebuilds the stamps from the cursors, and from then on every
//! thread runs the shared protocol (stamps and CAS claims, `array`).
//!
//! This is *biased locking* (Kawachiya, Koseki and Onodera, "Lock reservation", OOPSLA 2002;
//! the JVM's biased locks) applied to the two sides of a queue. A `Sender` is `Sync` and
//! `Clone`, so "one handle" does not mean "one thread": ownership is per thread.
//!
//! # The handshake
//!
//! Each side's `owner` is [`UNOWNED`], a thread token, [`REVOKING`] or [`SHARED`], and only
//! moves in that order (UNOWNED may go straight to REVOKING). An owner brackets each
//! operation: it stores `busy = true`, issues the light side of an asymmetric fence, and
//! checks that `owner` still names it; at the end it stores `busy = false` (Release). The
//! one revoker (elected by `revoker`) stores REVOKING on both sides, issues the heavy fence,
//! waits for both `busy` flags to clear (Acquire), runs the caller's conversion, then
//! stores SHARED on both sides (Release). The fences make it impossible for an owner and
//! the revoker both to miss the other's store (Dekker): either the owner sees REVOKING and
//! backs off, or the revoker sees it busy and waits. So every owned operation happens
//! before the conversion, and the conversion before every shared operation (threads that
//! find REVOKING wait for SHARED).
//!
//! An owner never waits while busy (a full or empty queue ends the operation and the
//! blocking call waits outside it), so the revoker waits at most for one operation per side.
//! It waits by parking in `waits`, not by spinning, and so do the threads that find a
//! revocation in progress: an owner's [`Owners::leave`] pays the light side of an asymmetric
//! fence and a load, the revoker the heavy side. (Spinning there made loom's executions run
//! past 20,000 branches; parking let it find a lost wake-up, an owner whose `hold` failed
//! clearing `busy` without waking the revoker, now fixed by leaving through `leave`.)

use crate::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use crate::sync::{asym_fence, thread, CachePadded, WaitSet};

/// No thread has operated on the side yet.
const UNOWNED: usize = 0;
/// The revoker is waiting out the owners' operations in flight.
const REVOKING: usize = 1;
/// Every thread uses the shared protocol, for good.
const SHARED: usize = 2;
const _: () = assert!(SHARED < thread::FIRST_TOKEN);

/// One side's ownership.
#[derive(Debug)]
pub(crate) struct Side {
    /// Read on every operation of this side, written a few times in the queue's life: on a
    /// line of its own, so the owner's `busy` stores do not pull it away from readers.
    owner: CachePadded<AtomicUsize>,
    /// Written twice per owned operation, read by the revoker.
    busy: CachePadded<AtomicBool>,
}

impl Side {
    fn new() -> Self {
        Self {
            owner: CachePadded::new(AtomicUsize::new(UNOWNED)),
            busy: CachePadded::new(AtomicBool::new(false)),
        }
    }

    /// Clears `busy` (see [`Owners::leave`]).
    #[inline]
    fn clear_busy(&self) {
        // Release: the operation's stores happen before the revoker's Acquire load of
        // `busy`.
        self.busy.store(false, Ordering::Release);
    }

    /// The owner's side of the handshake: marks an operation in flight, then checks that
    /// the side is still ours. `busy` stays set either way: the caller clears it with
    /// [`Owners::leave`], which also wakes a revoker that saw it set.
    #[inline]
    fn hold(&self, me: usize) -> bool {
        // Relaxed: ordered before the load below by the light fence, which pairs with the
        // revoker's heavy fence.
        self.busy.store(true, Ordering::Relaxed);
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
    /// Set by the one thread that revokes.
    revoker: AtomicBool,
    /// The revoker waits here for an owner's operation to end, and the other threads for
    /// the revocation to end: parking, not spinning, so loom's executions stay short.
    waits: CachePadded<WaitSet>,
}

impl Owners {
    /// Both sides unowned: the first thread to operate on a side will own it.
    pub(crate) fn new() -> Self {
        // The owners' fences are the light side of asymmetric fences: register for the
        // heavy side now (once per process), or every light fence stays a full `mfence`
        // (three per owned operation) until some thread happens to issue a heavy one.
        asym_fence::init();
        Self {
            send: Side::new(),
            recv: Side::new(),
            revoker: AtomicBool::new(false),
            waits: CachePadded::new(WaitSet::new()),
        }
    }

    /// Shared from the start: the owned protocol is never used.
    pub(crate) fn shared() -> Self {
        let owners = Self::new();
        owners.revoke(|| {});
        owners
    }

    /// Starts an operation on `side`. `true`: the calling thread owns it and runs the owned
    /// protocol until it calls [`Side::leave`], which it must do before the operation
    /// returns or waits. `false`: the queue runs the shared protocol, and every owned
    /// operation and the conversion happen before this call returns. `convert` turns the
    /// owned state into the shared one if this call has to revoke (see the module docs).
    #[inline]
    pub(crate) fn enter(&self, side: &Side, convert: impl FnOnce()) -> bool {
        // Acquire: when it reads SHARED, as in `is_shared`; when it reads our token, `hold`
        // checks again after its fence.
        let owner = side.owner.load(Ordering::Acquire);
        if owner == SHARED {
            // The common case of a side with several threads: one load, no thread token.
            return false;
        }
        let me = thread::token();
        if owner == me && self.hold(side, me) {
            return true;
        }
        self.enter_slow(side, me, convert)
    }

    /// The owner's fast entry: `true` when the calling thread owns `side` and now holds it
    /// for one operation (end it with [`leave`](Self::leave) or
    /// [`leave_notifying`](Self::leave_notifying)); `false` in every other case, which
    /// [`enter`](Self::enter) sorts out.
    #[inline]
    pub(crate) fn try_hold(&self, side: &Side) -> bool {
        let me = thread::token();
        // Relaxed: `hold` checks again after its fence.
        side.owner.load(Ordering::Relaxed) == me && self.hold(side, me)
    }

    /// Whether the calling thread owns `side` (a hint: the side may be revoked next).
    #[inline]
    pub(crate) fn owns(&self, side: &Side) -> bool {
        // Relaxed: a hint.
        side.owner.load(Ordering::Relaxed) == thread::token()
    }

    /// [`Side::hold`], leaving at once when the side is no longer ours.
    #[inline]
    fn hold(&self, side: &Side, me: usize) -> bool {
        if side.hold(me) {
            return true;
        }
        self.leave(side);
        false
    }

    /// Ends an owned operation on `side` (after [`enter`](Self::enter) returned `true`):
    /// clears `busy` and wakes a revoker waiting for it.
    #[inline]
    pub(crate) fn leave(&self, side: &Side) {
        side.clear_busy();
        // The light side of the handshake with the revoker's heavy fence (`revoke`).
        self.waits.notify_all_light();
    }

    /// [`leave`](Self::leave), then wakes the threads parked in `peers` (the other side's
    /// waiters, after the owner published its progress before this call): one light fence
    /// serves both handshakes.
    #[inline]
    pub(crate) fn leave_notifying(&self, side: &Side, peers: &WaitSet) {
        side.clear_busy();
        asym_fence::light();
        self.waits.notify_all_after_light_fence();
        peers.notify_all_after_light_fence();
    }

    /// Waits until the revocation in progress has ended.
    #[cold]
    fn wait_shared(&self) {
        let _ = self
            .waits
            .wait_until(None, || self.is_shared().then_some(()));
    }

    #[cold]
    fn enter_slow(&self, side: &Side, me: usize, convert: impl FnOnce()) -> bool {
        let mut convert = Some(convert);
        loop {
            // Acquire: as in `enter`.
            match side.owner.load(Ordering::Acquire) {
                SHARED => return false,
                REVOKING => self.wait_shared(),
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
                        return true;
                    }
                }
                _ => {
                    if let Some(convert) = convert.take() {
                        self.revoke(convert);
                    } else {
                        self.wait_shared();
                    }
                }
            }
        }
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
    pub(crate) fn revoke(&self, convert: impl FnOnce()) {
        if self.is_shared() {
            return;
        }
        // AcqRel: elects one revoker; a loser's Acquire of SHARED below orders the rest.
        if self.revoker.swap(true, Ordering::AcqRel) {
            self.wait_shared();
            return;
        }
        for side in [&self.send, &self.recv] {
            // A `swap`, not a store: a first operation may be taking the side with a CAS at
            // the same moment, and a read-modify-write must not miss this (loom 0.7 lets one
            // lose a racing plain store, tokio-rs/loom#254; hardware never does). Relaxed:
            // the heavy fence below orders it before the `busy` loads.
            side.owner.swap(REVOKING, Ordering::Relaxed);
        }
        asym_fence::heavy();
        for side in [&self.send, &self.recv] {
            // Acquire: pairs with the owner's Release in `clear_busy`, so its last operation
            // happens before the conversion.
            if side.busy.load(Ordering::Acquire) {
                let _ = self.waits.wait_until(None, || {
                    // The heavy side of the handshake with `leave`'s light fence.
                    asym_fence::heavy();
                    // Acquire: as above.
                    (!side.busy.load(Ordering::Acquire)).then_some(())
                });
            }
        }
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

    #[test]
    fn the_first_thread_of_each_side_owns_it_until_a_second_one_comes() {
        let owners = Arc::new(Owners::new());
        assert!(owners.enter(&owners.send, || unreachable!()));
        owners.leave(&owners.send);
        assert!(
            owners.enter(&owners.recv, || unreachable!()),
            "one thread may own both"
        );
        owners.leave(&owners.recv);
        let converted = Arc::new(AtomicUsize::new(0));
        let (o, c) = (Arc::clone(&owners), Arc::clone(&converted));
        let shared = crate::sync::thread::spawn(move || {
            o.enter(&o.recv, || {
                c.fetch_add(1, Ordering::Relaxed);
            })
        })
        .join()
        .unwrap();
        assert!(!shared, "a second thread finds the queue shared");
        assert_eq!(converted.load(Ordering::Relaxed), 1, "converted once");
        assert!(!owners.enter(&owners.send, || unreachable!()));
        assert!(!owners.enter(&owners.recv, || unreachable!()));
        assert!(owners.is_shared());
        owners.revoke(|| unreachable!("already shared"));
    }

    #[test]
    fn revoking_an_unused_queue_converts_it_once() {
        let owners = Owners::new();
        let mut n = 0;
        owners.revoke(|| n += 1);
        owners.revoke(|| n += 1);
        assert_eq!(n, 1);
        assert!(!owners.enter(&owners.send, || unreachable!()));
    }

    #[test]
    fn concurrent_revokers_convert_once_and_all_return_shared() {
        let owners = Arc::new(Owners::new());
        let converted = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (o, c) = (Arc::clone(&owners), Arc::clone(&converted));
                crate::sync::thread::spawn(move || {
                    for _ in 0..100 {
                        if o.enter(&o.send, || {
                            c.fetch_add(1, Ordering::Relaxed);
                        }) {
                            o.leave(&o.send);
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert!(owners.is_shared());
        assert_eq!(converted.load(Ordering::Relaxed), 1);
    }
}
