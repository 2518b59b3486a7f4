//! Backoff for lock-free retry loops and waits that end in bounded time: the [`wait`]
//! machine with fixed phases.
//!
//! On this project's 2-core machines a waiter that only spins starves the thread it waits
//! for (a busy-spinning ring collapses when threads outnumber cores), and a waiter that
//! parks at once pays a dear wake-up each time. So a waiter spins a few
//! exponentially growing rounds (cheap when the other side is running on the other core),
//! then yields its time slice a few times, and only then parks (or, for a step that ends in
//! bounded time, keeps yielding).
//!
//! [`wait`]: super::wait

use super::wait::{Policy, Waiter};

/// The phases: rounds of 1, 2, … 64 spin hints, then 4 yields. Under loom one spin round
/// (a loom yield) and one yield.
#[cfg(not(logbus_loom))]
pub(crate) const POLICY: Policy = Policy {
    dense_polls: 0,
    skip_after_misses: 0,
    spin_rounds: 7,
    yields: 4,
    pace_spins: 0,
};
#[cfg(logbus_loom)]
pub(crate) const POLICY: Policy = Policy {
    dense_polls: 0,
    skip_after_misses: 0,
    spin_rounds: 1,
    yields: 1,
    pace_spins: 0,
};

/// Exponential backoff for a waiting thread. Not `Sync`: one per waiting call.
#[derive(Debug)]
pub(crate) struct Backoff(Waiter);

impl Backoff {
    pub(crate) const fn new() -> Self {
        Self(Waiter::new(POLICY))
    }

    /// Starts over (after progress was made).
    #[cfg(all(test, not(logbus_loom)))]
    pub(crate) fn reset(&mut self) {
        self.0.reset();
    }

    /// Backs off in a lock-free retry loop (a CAS lost to another thread): spins only.
    #[inline]
    pub(crate) fn spin(&mut self) {
        self.0.spin();
    }

    /// Backs off while waiting for another thread to make progress: spins, then yields.
    #[inline]
    pub(crate) fn snooze(&mut self) {
        self.0.snooze();
    }

    /// Whether spinning and yielding are exhausted and the caller should park.
    #[inline]
    pub(crate) fn is_completed(&self) -> bool {
        self.0.is_completed()
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}
