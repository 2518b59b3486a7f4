//! The ring's waiting strategy: spin briefly, then yield, then park.
//!
//! A waiter spins a few exponentially growing rounds (63 pause instructions in all, a
//! couple of microseconds, checking between rounds), then yields up to [`YIELDS`] times
//! (tens of microseconds, checking after each), and only then parks in a [`WaitSet`].
//! Parking costs the parked thread a wake-up of ~10–15 µs and the notifier a system call,
//! so it is kept for waits that are long compared to that; yielding costs ~0.5 µs per round
//! and hands the core to the thread being waited for when threads outnumber cores
//! (`BENCHMARKS.md`: spin-only waiting collapses on 2 cores). This is the schedule of
//! `sync::Backoff` with a longer yield phase; it is written out here because the ring's
//! waiters also need the yield phase bounded and the park at its end.
//!
//! The park is the heavy side of an asymmetric Dekker handshake: the waiter registers, then
//! calls [`asym_fence::heavy`] before each check of its condition, while the notifying side
//! (a producer after publishing, a gating reader after moving its cursor) pays only
//! [`asym_fence::light`] in [`WaitSet::notify_all_light`]. So there is no fence and no system
//! call on the fast path while nobody is parked.
//!
//! Under loom there is one spin round (a loom yield) and no yield rounds, so models reach
//! the park quickly.

use crate::sync::time::{self, Instant};
use crate::sync::{asym_fence, hint, thread, WaitSet};

/// Spin rounds before the first yield: round `k` spins `2^k` pause instructions, then
/// checks. Short on purpose: on a 2-core machine shared with other work, a waiter that spins
/// long keeps the core from the very thread it waits for (measured: 2000 pauses before the
/// first yield cut the SPSC throughput four- to tenfold).
#[cfg(not(logbus_loom))]
const SPIN_ROUNDS: u32 = 6;
#[cfg(logbus_loom)]
const SPIN_ROUNDS: u32 = 1;

/// Yield rounds (each followed by a check) before parking: tens of microseconds.
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
    for round in 0..SPIN_ROUNDS {
        if ready() {
            return true;
        }
        for _ in 0..1u32 << round {
            hint::spin_loop();
        }
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
