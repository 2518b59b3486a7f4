//! The ring's waiting strategy: check, (spin briefly,) yield, then park.
//!
//! A waiter checks its condition, then spins [`SPIN_ROUNDS`] exponentially growing rounds
//! of pause instructions (checking between rounds), then yields up to [`YIELDS`] times
//! (tens of microseconds, checking after each), and only then parks in a [`WaitSet`].
//! Parking costs the parked thread a wake-up of ~10–15 µs and the notifier a system call,
//! so it is kept for waits that are long compared to that; yielding costs ~0.5 µs per round
//! and hands the core to the thread being waited for when threads outnumber cores
//! (`BENCHMARKS.md`: spin-only waiting collapses on 2 cores).
//!
//! On the 2-vCPU development VMs spinning did worse than yielding at once: with 6 rounds
//! (63 pauses, ~1.8 µs; a pause costs ~28 ns there) the SPSC throughput was 0.7–0.95× the
//! disruptor's poller; with 0 rounds, 1.1–1.9× (interleaved runs of
//! `benches/ring_vs_disruptor.rs`); 2000 pauses before the first yield cut it four- to
//! tenfold. A pause-loop exit to the hypervisor, or a host sibling thread, would explain it;
//! either way the waiter's core is better given back. So the spin phase is zero rounds by
//! default (a constant, to revisit on bare metal).
//!
//! The park is the heavy side of an asymmetric Dekker handshake: the waiter registers, then
//! issues `asym_fence::heavy` once, before its first check of its condition, while the
//! notifying side (a producer after publishing, a gating reader after moving its cursor)
//! pays only `asym_fence::light` in [`WaitSet::notify_all_light`]. So there is no fence and
//! no system call on the fast path while nobody is parked.
//!
//! Waiting for an *empty* ring is one half of a reader's patience; the other is not looking
//! too soon after catching up (the reader's pacing, `reader`), which keeps a reader off the
//! lines the producer is writing.
//!
//! Under loom there is one spin round (a loom yield) and no yield rounds, so models reach
//! the park quickly.

use crate::sync::time::{self, Instant};
use crate::sync::{hint, thread, WaitSet};

/// Spin rounds before the first yield: round `k` spins `2^k` pause instructions, then
/// checks. Zero on the std side (see the module docs for the measurements); one under loom,
/// where a spin hint is a loom yield.
#[cfg(not(logbus_loom))]
const SPIN_ROUNDS: u32 = 0;
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
    // Empty on the std side (SPIN_ROUNDS = 0, see the module docs); kept for loom and for
    // retuning on other hardware.
    #[allow(clippy::reversed_empty_ranges)]
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
    // The heavy side of the handshake with the notifier's light fence, once per park.
    set.wait_until_heavy(deadline, || true, || ready().then_some(()))
        .is_some()
}
