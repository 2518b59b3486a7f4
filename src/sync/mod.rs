//! The synchronisation shim: the only module that names atomics, `UnsafeCell`,
//! `Mutex`/`Condvar`, parking, yielding, thread spawning and the clock used for deadlines.
//!
//! Everything above this layer imports its primitives from here, so that building with
//! `RUSTFLAGS="--cfg logbus_loom"` swaps every one of them for [loom]'s model-checked
//! equivalent and the whole crate can be explored by loom's scheduler (in `loom-tests/`, or
//! inside a user's own loom model). `.ci/run` fails if any other file under `src/` names the
//! std or parking_lot primitives directly (clippy's `disallowed-types` cannot tell a
//! re-export from the original, so the check is a plain search).
//!
//! Two things loom does not model, and how the shim stands in for them:
//! - **Time.** Under loom a timed wait ([`Condvar::wait_until`]) releases the lock, lets
//!   other threads run and then reports that the deadline passed: a deadline "may expire at
//!   any point". [`time::expired`] never reports expiry on its own under loom, so the only
//!   way time passes in a model is through a timed wait, and every interleaving of that
//!   expiry with the other threads is explored.
//! - **Spinning.** Busy-wait hints become loom yields, and the waiting policies ([`wait`])
//!   keep one spin round and at most one yield, so a model never livelocks in a spin loop.
//!
//! [loom]: https://docs.rs/loom
//!
//! # Notes for contributors: loom, Miri, waiting, fences, tokens
//!
//! The loom models of the public API live in `loom-tests/tests/` (ring, queue, observer, clock,
//! and a user-style model); models of crate-private pieces (the wait set, the ring's slots, the
//! queue's owned protocol, its changes of owner and its revocation) sit beside their code as
//! `#[cfg(all(test, logbus_loom))]` unit tests. Under `--cfg logbus_loom`, `queue::bounded`
//! creates queues that run the shared (stamp) protocol from the start: the owned protocol's
//! ownership paths made the public-API models too long for loom, so that protocol is checked by
//! its own models in `src/queue/array/loom_models.rs` instead, and a user's loom model of code built on
//! `logbus::queue` checks it against the shared protocol. Run them all with
//!
//! ```sh
//! LOGBUS_STEPS=loom scripts/test-all.sh
//! # or by hand:
//! RUSTFLAGS="--cfg logbus_loom" LOOM_MAX_PREEMPTIONS=2 \
//!     cargo test -p logbus --lib --release --target-dir target/loom
//! RUSTFLAGS="--cfg logbus_loom" LOOM_MAX_PREEMPTIONS=2 \
//!     cargo test -p logbus-loom-tests --release --target-dir target/loom
//! ```
//!
//! Miri runs the unit tests of the unsafe core (`sync::`, `ring::`, `queue::`, `observer::`,
//! `partition::lend::`, `partition::entry::`, `replica::log::chunk::`; counts shrunk under
//! `cfg(miri)`) with `LOGBUS_STEPS=miri scripts/test-all.sh`; it installs the nightly
//! toolchain with Miri when missing.
//!
//! What the models check, and its limits. The ring's publish uses an asymmetric fence
//! (`membarrier(2)` on the waiting side, a compiler fence on the publishing side;
//! `src/sync/asym_fence.rs`). Under loom the light side is modelled as what it is there: it
//! orders nothing except through its pairing with a heavy fence (a read-modify-write on a
//! per-thread word that every heavy fence also updates), not as loom's `SeqCst` fence, which
//! loom orders after every earlier `SeqCst` fence and which would order two light fences by
//! itself. The owned queue's models with a change of owner opt into that `SeqCst` stand-in
//! (`light_as_seqcst_fence`): paired, they run too long. The queue's wake-up relies on the
//! `SeqCst` compare-and-swap that claimed the slot (`WaitSet::notify_all_after_rmw`), an
//! argument written at the code, since loom treats `SeqCst` accesses as `AcqRel`. Where the
//! shim substitutes an RMW for a load or store under loom (the array queue's stamps and owned
//! cursors), the ordering is one constant used by both forms, so the mutation check weakens
//! the std build's ordering.
//!
//! Each model names the ordering it guards, and `scripts/loom-mutations.sh` (the `mutations`
//! step) weakens each listed one in a scratch copy and expects its model to fail; add a pair
//! there with every new model. `scripts/loom-mutations.sh WORD` runs the pairs whose name
//! contains WORD.
//!
//!
//! - **Waiting.** Every blocking structure waits through `sync::wait`: a `Waiter` runs the
//!   phases of a `Policy` (dense poll, spin rounds, yields, then the caller parks in a
//!   `WaitSet`), and `wait::pace` is the reader's pacing. A structure declares its policy as a
//!   constant next to its code (`queue::array::waiting::POLICY`, `ring::wait::POLICY`,
//!   `sync::backoff::POLICY`), with a loom variant (one spin round, at most one yield) and the
//!   reasons for its numbers; do not add spin or yield loops of your own.
//! - **Asymmetric fences.** A waiter whose notifiers use `notify_all_light` parks with
//!   `WaitSet::wait_until_heavy`, which issues `asym_fence::heavy` once per park, not per
//!   check. `heavy` never fails: if the kernel stops issuing expedited membarriers it
//!   degrades to full fences on both sides, covering the handshakes in flight with a global
//!   barrier (tests: `sync::asym_fence::tests`, in forked children).
//! - **Thread tokens.** The pool of 64 ownership tokens lives in `sync::token_pool`, shared by
//!   the std build and the loom models. A loom model can give a thread a chosen token with
//!   `thread::set_token` (test only), to model a token handed from a thread that exits to a
//!   later one (`queue::array::loom_models::an_heir_to_a_token_inherits_the_side_it_owned`).
//!   Light fences in such a model should run as the compiler fences they are on std
//!   (`asym_fence::light_as_compiler_fence`): loom joins every `SeqCst` fence into one
//!   causality, which would order the threads by itself.

pub(crate) mod asym_fence;
mod backoff;
mod intern;
mod signal;
pub(crate) mod token_pool;
pub(crate) mod wait;
mod wait_set;

#[cfg(not(logbus_loom))]
mod std_impl;
#[cfg(not(logbus_loom))]
pub(crate) use std_impl::*;

#[cfg(logbus_loom)]
mod loom_impl;
#[cfg(logbus_loom)]
pub(crate) use loom_impl::*;

pub(crate) use backoff::Backoff;
pub(crate) use crossbeam_utils::CachePadded;
pub(crate) use intern::intern;
pub(crate) use signal::{block_on, Signal};
pub(crate) use wait_set::{WaitSet, WakerSlot};

/// `std::sync::Arc`, under loom too: loom's `Arc` cannot hold unsized values (`Arc<str>`,
/// `Arc<[T]>`, `Arc<dyn Trait>`), which the broker layer shares (names, partition lists,
/// type-erased topics, clocks, partitioners). Its reference count is invisible to loom, so
/// it only shares values built before they are shared and synchronised by their own
/// (loom-visible) primitives inside.
pub(crate) use std::sync::Arc as StdArc;
/// [`StdArc`]'s weak reference (a background thread that must not keep its owner alive).
pub(crate) use std::sync::Weak as StdWeak;

/// A [`StdArc`] as the shim's `Arc` (the same type, except under loom): for values built
/// unsized (`dyn Trait`), which loom's `Arc` cannot coerce to.
pub(crate) fn arc_from_std<T: ?Sized>(arc: StdArc<T>) -> Arc<T> {
    #[cfg(logbus_loom)]
    return Arc::from_std(arc);
    #[cfg(not(logbus_loom))]
    arc
}

/// Deadlines for the timed operations (`send_timeout`, `recv_deadline`, ...).
pub(crate) mod time {
    pub(crate) use std::time::{Duration, Instant};

    /// The deadline `timeout` from now, or `None` when it lies beyond what `Instant` can
    /// represent (treated as "wait forever").
    pub(crate) fn deadline_after(timeout: Duration) -> Option<Instant> {
        Instant::now().checked_add(timeout)
    }

    /// A monotonic reading in nanoseconds, coarse (the kernel's tick, a few milliseconds)
    /// but several times cheaper than `Instant::now`: for marking when something started
    /// whose deadline is far off and may never be needed (a send's delivery timeout);
    /// [`since_coarse`] turns it into an `Instant`. Constant under loom.
    pub(crate) fn coarse_ns() -> u64 {
        coarse::now_ns()
    }

    /// The `Instant`, up to the coarse clock's tick, at which `coarse_ns` read `mark`.
    pub(crate) fn since_coarse(mark: u64, now: Instant) -> Instant {
        let ago = Duration::from_nanos(coarse::now_ns().saturating_sub(mark));
        now.checked_sub(ago).unwrap_or(now)
    }

    #[cfg(all(target_os = "linux", not(miri), not(logbus_loom)))]
    mod coarse {
        pub(super) fn now_ns() -> u64 {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: `ts` is a valid, writable timespec for the duration of the call;
            // CLOCK_MONOTONIC_COARSE exists on every Linux since 2.6.32.
            let r = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
            if r != 0 {
                return super::fallback_ns();
            }
            u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000
                + u64::try_from(ts.tv_nsec).unwrap_or(0)
        }
    }

    #[cfg(all(not(all(target_os = "linux", not(miri))), not(logbus_loom)))]
    mod coarse {
        pub(super) fn now_ns() -> u64 {
            super::fallback_ns()
        }
    }

    #[cfg(logbus_loom)]
    mod coarse {
        pub(super) fn now_ns() -> u64 {
            0
        }
    }

    /// Nanoseconds since the first call, from `Instant` (where no coarse clock is known).
    #[cfg(not(logbus_loom))]
    fn fallback_ns() -> u64 {
        static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        let origin = *ORIGIN.get_or_init(Instant::now);
        u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether `deadline` has passed.
    ///
    /// Under loom time never passes on its own: expiry is observed only through a timed
    /// wait returning `true` (see the module docs).
    pub(crate) fn expired(deadline: Instant) -> bool {
        if cfg!(logbus_loom) {
            false
        } else {
            Instant::now() >= deadline
        }
    }
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn unsafe_cell_gives_access_through_closures() {
        let cell = UnsafeCell::new(5u64);
        // SAFETY: the cell is local to this test; no other reference to it exists.
        cell.with_mut(|p| unsafe { *p += 1 });
        // SAFETY: as above; the write has completed.
        assert_eq!(cell.with(|p| unsafe { *p }), 6);
        assert_eq!(cell.into_inner(), 6);
    }

    #[test]
    fn a_coarse_mark_maps_back_to_its_instant() {
        let before = std::time::Instant::now();
        let mark = time::coarse_ns();
        std::thread::sleep(Duration::from_millis(30));
        let now = std::time::Instant::now();
        let at = time::since_coarse(mark, now);
        // Within the coarse clock's tick (at most 10 ms at HZ = 100) of when it was read.
        assert!(at <= now - Duration::from_millis(15), "{:?}", now - at);
        assert!(
            at + Duration::from_millis(10) >= before,
            "{:?}",
            before - at
        );
    }

    #[test]
    fn backoff_spins_then_yields_then_completes() {
        let mut b = Backoff::new();
        let mut rounds = 0;
        while !b.is_completed() {
            b.snooze();
            rounds += 1;
            assert!(rounds < 100, "backoff never completes");
        }
        b.reset();
        assert!(!b.is_completed());
        b.spin();
        assert!(!b.is_completed());
    }

    #[test]
    fn timed_wait_reports_expiry_and_notify_wakes() {
        let pair = Arc::new((Mutex::new(false), Condvar::new()));
        let mut guard = pair.0.lock();
        let deadline = time::deadline_after(Duration::from_millis(1)).unwrap();
        while !time::expired(deadline) {
            if pair.1.wait_until(&mut guard, deadline) {
                break;
            }
        }
        assert!(time::expired(deadline));
        drop(guard);

        let other = Arc::clone(&pair);
        let t = thread::spawn_named("notifier".into(), move || {
            *other.0.lock() = true;
            other.1.notify_all();
        })
        .unwrap();
        let mut guard = pair.0.lock();
        while !*guard {
            pair.1.wait(&mut guard);
        }
        drop(guard);
        t.join().unwrap();
    }

    #[test]
    fn far_deadlines_mean_forever() {
        assert!(time::deadline_after(Duration::MAX).is_none());
    }
}
