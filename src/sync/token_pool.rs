//! The pool of slot tokens behind `thread::token` (std build): a bit per slot, set while a
//! live thread holds it. Kept apart from the thread-local that uses it so that the loom
//! models can run the same take and give-back on a pool of their own (a token handed from
//! a thread that exits to a later one carries ownership of queue sides with it, and these
//! two orderings are what orders the two threads' operations).

use super::atomic::{AtomicU64, Ordering};

/// Takes the lowest free slot of `held`, or `None` when all 64 are held.
// Under loom only the models call these (the model build's `thread::token` is loom's
// thread index).
#[cfg_attr(logbus_loom, allow(dead_code))]
pub(crate) fn take(held: &AtomicU64) -> Option<usize> {
    // Relaxed: a guess, validated by the CAS.
    let mut now = held.load(Ordering::Relaxed);
    while now != u64::MAX {
        let s = now.trailing_ones() as usize;
        // Acquire: pairs with the Release in `give_back`, so whatever the slot's previous
        // thread did under its token (operations as the owner of a queue side) happens
        // before our first use of it.
        match held.compare_exchange_weak(now, now | 1 << s, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => return Some(s),
            Err(seen) => now = seen,
        }
    }
    None
}

/// Gives slot `s` back (its thread is exiting).
#[cfg_attr(logbus_loom, allow(dead_code))]
pub(crate) fn give_back(held: &AtomicU64, s: usize) {
    // Release: see `take`.
    held.fetch_and(!(1 << s), Ordering::Release);
}
