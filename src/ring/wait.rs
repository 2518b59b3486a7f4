//! The ring's waiting policy ([`POLICY`], run by `sync::wait`): check, (spin briefly,)
//! yield, then park.
//!
//! A waiter checks its condition, then spins `spin_rounds` exponentially growing rounds
//! of pause instructions (checking between rounds), then yields up to `yields` times
//! (tens of microseconds, checking after each), and only then parks in a [`WaitSet`].
//! Parking costs the parked thread a wake-up and the notifier a system call, so it is kept
//! for waits that are long compared to that; a yield costs far less and hands the core to
//! the thread being waited for when threads outnumber cores (spin-only waiting collapses
//! on two cores).
//!
//! On two-vCPU VMs spinning did worse than yielding at once, and long spins before the first
//! yield did far worse (BENCHMARKS.md, "Tuning constants"). A pause-loop exit to the hypervisor, or
//! a host sibling thread, would explain it; either way the waiter's core is better given back. So
//! the spin phase is zero rounds by default (a constant, to revisit on bare metal).
//!
//! The park is the heavy side of an asymmetric Dekker handshake: the waiter registers, then
//! issues `asym_fence::heavy` once, before its first check of its condition, while the
//! notifying side (a producer after publishing, a gating reader after moving its cursor)
//! pays only `asym_fence::light` in [`WaitSet::notify_all_light`]. So there is no fence and
//! no system call on the fast path while nobody is parked.
//!
//! Waiting for an *empty* ring is one half of a reader's patience; the other is not looking
//! too soon after catching up (the reader's pacing, `Reader::pace`: `pace_spins` hints,
//! about half a microsecond on the VMs it was tuned on), which keeps a reader off the lines
//! the producer is writing.
//!
//! Under loom there is one spin round (a loom yield), no yield rounds and no pacing, so
//! models reach the park quickly.

use crate::sync::time::{self, Instant};
use crate::sync::wait::{Policy, Waiter};
use crate::sync::WaitSet;

/// No spin rounds on the std side (see the module docs for the measurements), 64 yields,
/// 20 hints of pacing; one spin round (a loom yield) under loom.
#[cfg(not(logbus_loom))]
pub(crate) const POLICY: Policy = Policy {
    dense_polls: 0,
    skip_after_misses: 0,
    spin_rounds: 0,
    yields: 64,
    pace_spins: 20,
};
#[cfg(logbus_loom)]
pub(crate) const POLICY: Policy = Policy {
    dense_polls: 0,
    skip_after_misses: 0,
    spin_rounds: 1,
    yields: 0,
    pace_spins: 0,
};

/// Waits until `ready()` holds or `deadline` passes; returns whether `ready()` held.
///
/// `ready` must be cheap and must not take locks that a notifier holds while notifying
/// `set` (it runs under `set`'s lock once parked).
pub(crate) fn wait_until(
    set: &WaitSet,
    deadline: Option<Instant>,
    mut ready: impl FnMut() -> bool,
) -> bool {
    let mut waiter = Waiter::new(POLICY);
    loop {
        if ready() {
            return true;
        }
        if deadline.is_some_and(time::expired) {
            return false;
        }
        if !waiter.pause() {
            break;
        }
    }
    if deadline.is_some_and(time::expired) {
        return ready();
    }
    // The heavy side of the handshake with the notifier's light fence, once per park.
    set.wait_until_heavy(deadline, || true, || ready().then_some(()))
        .is_some()
}
