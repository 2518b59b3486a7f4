//! Waiting, in one place: what a thread does while the condition it needs does not hold.
//!
//! A waiter goes through up to four phases, each configured per structure by a [`Policy`]
//! (a constant next to the structure, where the measurements that chose it are cited):
//! 1. a **dense poll**: it polls the one word it waits on, one spin hint apart, up to
//!    [`Policy::dense_polls`] times (once per operation); it sees the word move within one
//!    poll, where exponentially growing spins would see it late. It pays only while the
//!    thread it waits for is running on another core: with more runnable threads than
//!    cores (four threads of an MPMC queue on two cores) that thread is usually waiting for
//!    this core, and the poll only delays the yield that would let it run. So a structure
//!    keeps a [`PollHistory`] per side: after [`Policy::skip_after_misses`] polls in a row
//!    that saw nothing, its waiters skip the poll, all but one wait in [`PROBE_EVERY`],
//!    which polls to find out whether polling pays again;
//! 2. **spin rounds**: round `k` spins `2^k` hints, then the caller looks again;
//! 3. **yields**: each gives the core to the thread being waited for (on two cores a waiter
//!    that only spins starves it; BENCHMARKS.md);
//! 4. **park**, in a [`WaitSet`](super::WaitSet) (the dearest wake-up; the notifier pays
//!    a system call), only once the phases above are used up.
//!
//! Besides waiting for a condition, a reader that keeps catching up with its writer after
//! short runs *paces* itself: [`pace`] spins [`Policy::pace_spins`] hints without touching
//! shared memory, so that its next look finds a longer run and the two sides stop pulling
//! each other's cache lines (the ring's readers, the queue's owners).
//!
//! [`Backoff`](super::Backoff) is the same machine with the phases of a lock-free retry loop
//! (spins, a few yields, then the caller's choice: park, or keep yielding for a step that
//! ends in bounded time).
//!
//! Under loom a spin hint is a loom yield and time does not pass; the policies' loom
//! variants keep one spin round and at most one yield, so a model reaches the park quickly
//! without livelocking in a spin loop.

use super::atomic::{AtomicU32, Ordering};
use super::{hint, thread};

/// Once its [`PollHistory`] says the dense polls stopped paying, one wait in this many
/// still polls (a *probe*), so that a structure whose threads are back on cores of their
/// own returns to polling within this many waits. Each skipped poll saves its length
/// (`dense_polls` hints, a few µs); each probe costs it once more.
pub(crate) const PROBE_EVERY: u32 = 16;

/// How a structure waits: the length of each phase (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    /// Polls of the awaited word, one spin hint apart, before the other phases (once per
    /// waiting operation); 0 for none.
    pub(crate) dense_polls: u32,
    /// Dense polls in a row that saw nothing after which waiters skip theirs (but probe,
    /// see [`PollHistory`]); 0: never skip.
    pub(crate) skip_after_misses: u32,
    /// Exponential spin rounds (round `k` spins `2^k` hints) before the yields.
    pub(crate) spin_rounds: u32,
    /// Yields before parking.
    pub(crate) yields: u32,
    /// Spin hints of a paced look ([`pace`]); 0 for no pacing.
    pub(crate) pace_spins: u32,
}

/// One waiting operation's progress through its [`Policy`]'s phases. Not `Sync`: one per
/// waiting call.
#[derive(Debug)]
pub(crate) struct Waiter {
    policy: Policy,
    /// Spin rounds and yields taken so far (at most `spin_rounds + yields`).
    step: u32,
    /// Whether the dense poll has been done.
    polled: bool,
    /// Whether the waiter has parked (see [`before_park`](Self::before_park)).
    parked: bool,
}

impl Waiter {
    pub(crate) const fn new(policy: Policy) -> Self {
        Self {
            policy,
            step: 0,
            polled: false,
            parked: false,
        }
    }

    /// The dense poll, the first time it is called: polls `changed` up to
    /// `dense_polls` times, one spin hint apart, stopping when it returns `true`. Returns
    /// whether it polled (the caller then looks again); `false` once done, or when the
    /// policy has no dense poll.
    #[inline]
    pub(crate) fn dense_poll(&mut self, mut changed: impl FnMut() -> bool) -> bool {
        if self.policy.dense_polls == 0 || self.polled {
            return false;
        }
        self.polled = true;
        for _ in 0..self.policy.dense_polls {
            hint::spin_loop();
            if changed() {
                break;
            }
        }
        true
    }

    /// [`dense_poll`](Self::dense_poll), unless `history` says this side's polls have kept
    /// seeing nothing (the module docs): then, outside a probe, the poll has length zero
    /// (it still returns `true` the first time, so the caller looks again before it
    /// pauses). Records whether a poll saw the word move.
    #[inline]
    pub(crate) fn dense_poll_adaptive(
        &mut self,
        history: &PollHistory,
        mut changed: impl FnMut() -> bool,
    ) -> bool {
        if self.policy.dense_polls == 0 || self.polled {
            return false;
        }
        let limit = self.policy.skip_after_misses;
        if limit == 0 {
            return self.dense_poll(changed);
        }
        let misses = history.misses();
        if misses > limit {
            // Skipped: counts as a miss, and brings the next probe closer.
            self.polled = true;
            history.record(misses, false, limit);
            return true;
        }
        let mut hit = false;
        self.dense_poll(|| {
            hit = changed();
            hit
        });
        history.record(misses, hit, limit);
        true
    }

    /// Pauses once, by the next phase: a spin round while any remain, then a yield.
    /// `false`, without pausing, once both are used up: time to park.
    #[inline]
    pub(crate) fn pause(&mut self) -> bool {
        let step = self.step;
        if step < self.policy.spin_rounds {
            for _ in 0..1u32 << step {
                hint::spin_loop();
            }
        } else if step < self.policy.spin_rounds + self.policy.yields {
            thread::yield_now();
        } else {
            return false;
        }
        self.step = step + 1;
        true
    }

    /// Pauses by the next phase, and once the phases are used up keeps yielding: for a wait
    /// that ends in bounded time and never parks.
    #[inline]
    pub(crate) fn snooze(&mut self) {
        if !self.pause() {
            thread::yield_now();
        }
    }

    /// One spin round of a lock-free retry loop (a CAS lost to another thread): spins
    /// `2^k` hints, `k` growing with each call up to the policy's last spin round; never
    /// yields.
    #[inline]
    pub(crate) fn spin(&mut self) {
        let last = self.policy.spin_rounds.saturating_sub(1);
        for _ in 0..1u32 << self.step.min(last) {
            hint::spin_loop();
        }
        if self.step < self.policy.spin_rounds {
            self.step += 1;
        }
    }

    /// Whether the spin rounds and yields are used up (the caller should park).
    #[inline]
    pub(crate) fn is_completed(&self) -> bool {
        self.step >= self.policy.spin_rounds + self.policy.yields
    }

    /// Call right before each park: a waiter woken from an earlier park that found its
    /// condition still unmet (the operation it waits for still in flight) yields before it
    /// parks again, so it never spins on a descheduled peer.
    #[inline]
    pub(crate) fn before_park(&mut self) {
        if self.parked {
            thread::yield_now();
        }
        self.parked = true;
    }

    /// Starts over (after progress was made).
    #[cfg(all(test, not(logbus_loom)))]
    pub(crate) fn reset(&mut self) {
        self.step = 0;
        self.polled = false;
        self.parked = false;
    }
}

/// Whether a structure's dense polls have been paying (see the module docs): the number of
/// waits in a row whose dense poll saw nothing or was skipped, which cycles through
/// `limit + 1 ..= limit + PROBE_EVERY - 1` once past `limit` (`limit` is
/// [`Policy::skip_after_misses`]), a wait that finds it at `limit` or below polling.
/// Shared by the threads waiting on one side of a structure; a hint, so plain loads and
/// stores: two waiters racing may lose a count, which only moves a probe.
#[derive(Debug, Default)]
pub(crate) struct PollHistory(AtomicU32);

impl PollHistory {
    pub(crate) fn new() -> Self {
        Self(AtomicU32::new(0))
    }

    #[inline]
    fn misses(&self) -> u32 {
        // Relaxed: a hint (see the type's docs); it orders nothing.
        self.0.load(Ordering::Relaxed)
    }

    /// After a wait that found the count at `misses`: a poll that saw the word move starts
    /// the count over, a miss or a skip adds one, wrapping back to `limit` (the next wait
    /// probes) after `PROBE_EVERY - 1` skips.
    #[inline]
    fn record(&self, misses: u32, hit: bool, limit: u32) {
        let next = if hit {
            0
        } else if misses + 1 >= limit + PROBE_EVERY {
            limit
        } else {
            misses + 1
        };
        if next != misses {
            // Relaxed: a hint (see the type's docs).
            self.0.store(next, Ordering::Relaxed);
        }
    }
}

/// A reader's pacing: spins `policy.pace_spins` hints without touching shared memory (see
/// the module docs); nothing when the policy has none.
#[inline]
pub(crate) fn pace(policy: &Policy) {
    for _ in 0..policy.pace_spins {
        hint::spin_loop();
    }
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use super::*;

    const P: Policy = Policy {
        dense_polls: 4,
        skip_after_misses: 0,
        spin_rounds: 3,
        yields: 2,
        pace_spins: 0,
    };

    #[test]
    fn phases_run_in_order_then_say_park() {
        let mut w = Waiter::new(P);
        let mut polls = 0;
        assert!(w.dense_poll(|| {
            polls += 1;
            false
        }));
        assert_eq!(polls, 4, "the whole dense poll when nothing changes");
        assert!(!w.dense_poll(|| unreachable!("once per operation")));
        for _ in 0..5 {
            assert!(!w.is_completed());
            assert!(w.pause(), "three spin rounds, then two yields");
        }
        assert!(w.is_completed());
        assert!(!w.pause(), "time to park");
        w.snooze(); // keeps yielding
        w.reset();
        assert!(!w.is_completed());
    }

    #[test]
    fn a_dense_poll_stops_when_the_word_moves_and_spins_cap_their_rounds() {
        let mut w = Waiter::new(P);
        let mut polls = 0;
        assert!(w.dense_poll(|| {
            polls += 1;
            polls == 2
        }));
        assert_eq!(polls, 2);
        for _ in 0..10 {
            w.spin();
        }
        assert_eq!(w.step, 3, "spin stops counting at the last spin round");
        let none = Policy {
            dense_polls: 0,
            ..P
        };
        assert!(!Waiter::new(none).dense_poll(|| unreachable!()));
    }

    /// Runs one wait's dense poll against `history`, the word moving at the `at`-th poll
    /// (never with `None`); how many polls it made.
    fn one_wait(policy: Policy, history: &PollHistory, at: Option<u32>) -> u32 {
        let mut w = Waiter::new(policy);
        let mut polls = 0;
        assert!(w.dense_poll_adaptive(history, || {
            polls += 1;
            Some(polls) == at
        }));
        assert!(!w.dense_poll_adaptive(history, || unreachable!("once per operation")));
        polls
    }

    #[test]
    fn dense_polls_that_keep_missing_are_skipped_but_for_probes() {
        let policy = Policy {
            skip_after_misses: 2,
            ..P
        };
        let history = PollHistory::new();
        // Misses up to the limit and one more keep polling (the full length each time).
        for _ in 0..3 {
            assert_eq!(one_wait(policy, &history, None), 4);
        }
        // Then every wait skips, except one probe in PROBE_EVERY.
        let polls: Vec<u32> = (0..2 * PROBE_EVERY)
            .map(|_| one_wait(policy, &history, None))
            .collect();
        let probes: Vec<usize> = (0..polls.len()).filter(|&i| polls[i] > 0).collect();
        assert_eq!(
            probes,
            [PROBE_EVERY as usize - 1, 2 * PROBE_EVERY as usize - 1],
            "{polls:?}"
        );
        // Skip until the next probe; a probe that sees the word move restores polling.
        while one_wait(policy, &history, Some(1)) == 0 {}
        for _ in 0..5 {
            assert_eq!(one_wait(policy, &history, Some(3)), 3);
        }
        // A policy that never skips polls through any run of misses.
        let never = PollHistory::new();
        for _ in 0..3 * PROBE_EVERY {
            assert_eq!(one_wait(P, &never, None), 4);
        }
    }
}
