//! Biased ownership of one side of a queue (its senders or its receivers): while only one
//! thread has ever operated on a side, that thread moves the side's cursor with plain
//! stores instead of a compare-and-swap.
//!
//! This is *biased locking* (Kawachiya, Koseki and Onodera, "Lock reservation", OOPSLA
//! 2002; the JVM's biased locks): a lock almost always taken by one thread is reserved for
//! it, its owner enters and leaves with plain stores, and another thread that wants it must
//! first *revoke* the reservation. On x86 a CAS drains the store buffer, and in a
//! single-producer queue the stores it waits for are the previous message's, to lines the
//! consumer is polling: the CAS was most of the cost of a send. A `Sender` is `Sync` and
//! `Clone`, so "one handle" does not mean "one thread"; the bias is per thread, and the
//! first operation from a second thread revokes it for good.
//!
//! # The handshake
//!
//! `owner` is [`UNOWNED`], a thread token, [`REVOKING`] or [`SHARED`]; it only moves in
//! that order (UNOWNED may also go straight to SHARED). The owner brackets each operation:
//! it stores `busy = true`, issues the light side of an asymmetric fence, and checks that
//! `owner` still names it; at the end it stores `busy = false` (Release). A revoker moves
//! `owner` to REVOKING, issues the heavy fence, waits for `busy == false` (Acquire), then
//! stores SHARED (Release). The fences make it impossible for both to miss the other's
//! store (Dekker): either the owner sees REVOKING and backs off, or the revoker sees it busy
//! and waits. Every operation the owner completed therefore happens before the SHARED store,
//! and every thread that sees SHARED (Acquire) uses the shared protocol after them. Threads
//! that find REVOKING wait for SHARED.
//!
//! The owner's operations never wait while busy (a full queue ends the operation, and the
//! blocking call waits outside it), so a revoker waits at most for one operation.

use crate::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use crate::sync::{asym_fence, thread, Backoff};

/// No thread has operated on the side yet.
const UNOWNED: usize = 0;
/// A revocation is waiting out the owner's operation in flight.
const REVOKING: usize = 1;
/// Every thread uses the shared (CAS) protocol, for good.
const SHARED: usize = 2;
const _: () = assert!(SHARED < thread::FIRST_TOKEN);

/// One side's reservation; see the module docs.
#[derive(Debug)]
pub(crate) struct Bias {
    owner: AtomicUsize,
    busy: AtomicBool,
}

impl Bias {
    pub(crate) fn new() -> Self {
        Self {
            owner: AtomicUsize::new(UNOWNED),
            busy: AtomicBool::new(false),
        }
    }

    /// Starts an operation on the side. `true`: the calling thread owns the side and may
    /// move its cursor with plain stores until it calls [`leave`](Self::leave), which it
    /// must do before the operation returns or waits. `false`: the side is shared, and
    /// every operation any owner made happens before this call returns.
    #[inline]
    pub(crate) fn enter(&self) -> bool {
        let me = thread::token();
        // Acquire: when it reads SHARED, pairs with the revoker's Release store (see the
        // module docs); when it reads our token, `hold` re-checks after the fence.
        let owner = self.owner.load(Ordering::Acquire);
        if owner == me && self.hold(me) {
            return true;
        }
        self.enter_slow(me)
    }

    /// Ends the owner's operation.
    #[inline]
    pub(crate) fn leave(&self) {
        // Release: the operation's stores happen before a revoker's Acquire load of `busy`.
        self.busy.store(false, Ordering::Release);
    }

    /// The owner's side of the handshake: marks an operation in flight, then checks that the
    /// side is still ours.
    #[inline]
    fn hold(&self, me: usize) -> bool {
        // Relaxed: ordered before the load below by the light fence, which pairs with the
        // revoker's heavy fence.
        self.busy.store(true, Ordering::Relaxed);
        asym_fence::light();
        // Relaxed: ordered by the fence above.
        if self.owner.load(Ordering::Relaxed) == me {
            return true;
        }
        self.leave();
        false
    }

    #[cold]
    fn enter_slow(&self, me: usize) -> bool {
        let mut backoff = Backoff::new();
        loop {
            // Acquire: as in `enter`.
            match self.owner.load(Ordering::Acquire) {
                SHARED => return false,
                REVOKING => backoff.snooze(),
                UNOWNED => {
                    // The side's first operation: reserve it. Relaxed: nothing to order yet
                    // (no operation has happened on the side); `hold` fences next round.
                    let _ = self.owner.compare_exchange(
                        UNOWNED,
                        me,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                }
                owner if owner == me => {
                    if self.hold(me) {
                        return true;
                    }
                }
                _ => self.revoke(),
            }
        }
    }

    /// Makes the side shared for good. When this returns, every operation an owner made
    /// happens before the caller's next step.
    pub(crate) fn revoke(&self) {
        let mut backoff = Backoff::new();
        loop {
            // Acquire: as in `enter`.
            let owner = self.owner.load(Ordering::Acquire);
            match owner {
                SHARED => return,
                REVOKING => backoff.snooze(),
                UNOWNED => {
                    // Nobody ever operated on the side: nothing to wait for. AcqRel: the
                    // SHARED store publishes to later Acquire loads (nothing precedes it).
                    if self
                        .owner
                        .compare_exchange(UNOWNED, SHARED, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                    {
                        return;
                    }
                }
                token => {
                    // Relaxed: the heavy fence below orders it before the `busy` load.
                    if self
                        .owner
                        .compare_exchange(token, REVOKING, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok()
                    {
                        asym_fence::heavy();
                        let mut wait = Backoff::new();
                        // Acquire: pairs with the owner's Release in `leave`, so its last
                        // operation happens before what follows.
                        while self.busy.load(Ordering::Acquire) {
                            wait.snooze();
                        }
                        // Release: pairs with the Acquire loads that find SHARED.
                        self.owner.store(SHARED, Ordering::Release);
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn first_thread_owns_until_another_operates() {
        let bias = Arc::new(Bias::new());
        assert!(bias.enter());
        bias.leave();
        assert!(bias.enter());
        bias.leave();
        let other = Arc::clone(&bias);
        let shared = std::thread::spawn(move || other.enter()).join().unwrap();
        assert!(!shared, "a second thread finds the side shared");
        assert!(!bias.enter(), "and so does the first one afterwards");
        bias.revoke();
        assert!(!bias.enter());
    }

    #[test]
    fn revoking_an_unused_side_shares_it() {
        let bias = Bias::new();
        bias.revoke();
        assert!(!bias.enter());
    }
}
