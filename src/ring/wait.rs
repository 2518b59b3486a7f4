//! The ring's waiting strategy: spin briefly, then yield, then park.
//!
//! A waiter first runs [`Backoff`] (a few exponentially growing spins, then a few yields),
//! then keeps yielding for up to [`YIELDS`] more rounds (tens of microseconds) before it
//! parks in a [`WaitSet`]. Parking costs the parked thread a wake-up of ~10–15 µs and the
//! notifier a system call, so it is kept for waits that are long compared to that; yielding
//! costs ~1 µs per round and hands the core to the thread being waited for when threads
//! outnumber cores (`BENCHMARKS.md`: spin-only waiting collapses on 2 cores).
//!
//! The park is the heavy side of an asymmetric Dekker handshake: the waiter registers, then
//! calls [`asym_fence::heavy`] before each check of its condition, while the notifying side
//! (a producer after publishing, a gating reader after moving its cursor) pays only
//! [`asym_fence::light`] in [`WaitSet::notify_all_light`]. So there is no fence and no system
//! call on the fast path while nobody is parked.
//!
//! Under loom, [`Backoff`] completes after one step and there are no extra yields, so models
//! reach the park quickly.

use crate::sync::time::{self, Instant};
use crate::sync::{asym_fence, thread, Backoff, WaitSet};

/// Extra yield rounds between the backoff and the park.
#[cfg(not(logbus_loom))]
const YIELDS: u32 = 64;
#[cfg(logbus_loom)]
const YIELDS: u32 = 0;

/// Waits until `ready()` holds or `deadline` passes; returns whether `ready()` held.
///
/// `ready` must be cheap and must not take locks that a notifier holds while notifying
/// `set` (it runs under `set`'s lock once parked).
pub(crate) fn wait_until(
    set: &WaitSet,
    deadline: Option<Instant>,
    mut ready: impl FnMut() -> bool,
) -> bool {
    let mut backoff = Backoff::new();
    while !backoff.is_completed() {
        if ready() {
            return true;
        }
        backoff.snooze();
    }
    for _ in 0..YIELDS {
        if ready() {
            return true;
        }
        if deadline.is_some_and(time::expired) {
            return false;
        }
        thread::yield_now();
    }
    if deadline.is_some_and(time::expired) {
        return ready();
    }
    set.wait_until(deadline, || {
        // The heavy side of the handshake with the notifier's light fence.
        asym_fence::heavy();
        ready().then_some(())
    })
    .is_some()
}
