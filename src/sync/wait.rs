//! Waiting, in one place: what a thread does while the condition it needs does not hold.
//!
//! A waiter goes through up to four phases, each configured per structure by a [`Policy`]
//! (a constant next to the structure, where the measurements that chose it are cited):
//! 1. a **dense poll**: it polls the one word it waits on, one spin hint apart, up to
//!    [`Policy::dense_polls`] times (once per operation); it sees the word move within one
//!    poll, where exponentially growing spins would see it late;
//! 2. **spin rounds**: round `k` spins `2^k` hints, then the caller looks again;
//! 3. **yields**: each gives the core to the thread being waited for (on two cores a waiter
//!    that only spins starves it; BENCHMARKS.md);
//! 4. **park**, in a [`WaitSet`](super::WaitSet) (10–15 µs to wake here; the notifier pays
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

use super::{hint, thread};

/// How a structure waits: the length of each phase (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    /// Polls of the awaited word, one spin hint apart, before the other phases (once per
    /// waiting operation); 0 for none.
    pub(crate) dense_polls: u32,
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
}
