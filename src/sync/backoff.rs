//! Spin, then yield, then tell the caller to park.
//!
//! On this project's 2-core machines a waiter that only spins starves the thread it waits
//! for (see `BENCHMARKS.md`: a busy-spinning ring falls ~500× when threads outnumber cores),
//! and a waiter that parks at once pays ~10–15 µs per wake-up. So a waiter spins a few
//! exponentially growing rounds (cheap when the other side is running on the other core),
//! then yields its time slice a few times, and only then parks.
//!
//! Under loom the spin hint is a loom yield and the backoff completes after one step, so a
//! model explores "gave up and parked" without livelocking in a spin loop.

use super::{hint, thread};

/// Exponential backoff for a waiting thread. Not `Sync`: one per waiting call.
#[derive(Debug)]
pub(crate) struct Backoff {
    step: u32,
}

#[cfg(not(logbus_loom))]
const SPIN_LIMIT: u32 = 6;
#[cfg(not(logbus_loom))]
const YIELD_LIMIT: u32 = 10;

#[cfg(logbus_loom)]
const SPIN_LIMIT: u32 = 0;
#[cfg(logbus_loom)]
const YIELD_LIMIT: u32 = 1;

impl Backoff {
    pub(crate) const fn new() -> Self {
        Self { step: 0 }
    }

    /// Starts over (after progress was made).
    #[cfg(all(test, not(logbus_loom)))]
    pub(crate) fn reset(&mut self) {
        self.step = 0;
    }

    /// Backs off in a lock-free retry loop (a CAS lost to another thread): spins only.
    pub(crate) fn spin(&mut self) {
        for _ in 0..1u32 << self.step.min(SPIN_LIMIT) {
            hint::spin_loop();
        }
        if self.step <= SPIN_LIMIT {
            self.step += 1;
        }
    }

    /// Backs off while waiting for another thread to make progress: spins, then yields.
    pub(crate) fn snooze(&mut self) {
        if self.step <= SPIN_LIMIT {
            for _ in 0..1u32 << self.step {
                hint::spin_loop();
            }
        } else {
            thread::yield_now();
        }
        if self.step <= YIELD_LIMIT {
            self.step += 1;
        }
    }

    /// Whether spinning and yielding are exhausted and the caller should park.
    pub(crate) fn is_completed(&self) -> bool {
        self.step > YIELD_LIMIT
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}
