//! Asymmetric fences: a nearly free fence for the hot side of a Dekker-style handshake, paid
//! for by a heavy fence on the rare side.
//!
//! The handshake between a publisher and a thread about to park is Dekker's: each side stores
//! (its progress / its registration), then fences, then loads the other side's word. With a
//! `SeqCst` fence on both sides, the publisher pays an `mfence` per publication, which on x86
//! waits for its store buffer to drain — the single most expensive step of a ring publish.
//!
//! Linux's `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` issues a full memory barrier on every
//! CPU currently running a thread of this process. With it, the hot side needs only a
//! compiler fence ([`light`]) and the waiting side calls [`heavy`] (a system call, cheap next
//! to the park that follows). This is the "asymmetric fence" of the membarrier man page and of
//! folly's `asymmetricLightBarrier`/`asymmetricHeavyBarrier`.
//!
//! Where membarrier is unavailable (other systems, older kernels, `nohz_full`, seccomp
//! filters, Miri), both sides fall back to `fence(SeqCst)`. If the kernel stops issuing
//! expedited barriers after registering us, [`heavy`] covers the handshakes in flight with a
//! slower barrier on every CPU and moves both sides to full fences for good (`degrade`); it
//! never fails and never aborts. Under loom `heavy` is a `SeqCst` fence plus a stand-in for the
//! barrier on the other threads, and `light` orders nothing but its pairing with `heavy` (see
//! the loom `imp`), so the models check the handshake as the membarrier build runs it.
//!
//! Pairing rule: every [`light`] on one side of a handshake must be paired with a [`heavy`]
//! on the other side (or with `fence(SeqCst)` on both when the fallback is active, which this
//! module arranges by itself).

#[cfg(logbus_loom)]
mod imp {
    use crate::sync::atomic::{fence, AtomicUsize, Ordering};
    use crate::sync::thread::model_thread_index;

    pub(crate) fn init() {}

    loom::lazy_static! {
        /// One word per model thread, written only by that thread's `light` and by every
        /// `heavy`: the stand-in for membarrier's barrier on the other CPUs. A `light`
        /// pairs with a `heavy` through its own thread's word and never with another
        /// thread's `light` (on std it is a compiler fence). Loom's `SeqCst` fence would
        /// not do: loom orders every `SeqCst` fence after all earlier ones, so it would
        /// order two `light`s (and the accesses around them) by itself.
        static ref PAIRING: [AtomicUsize; loom::MAX_THREADS] =
            std::array::from_fn(|_| AtomicUsize::new(0));
    }

    std::thread_local! {
        /// Set by [`light_as_seqcst_fence`]; loom runs a model's threads on the thread
        /// that calls `check`, so this is per model.
        static LIGHT_IS_SEQCST: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// On std a compiler fence. Here an AcqRel RMW on this thread's pairing word: a `heavy`
    /// whose RMW on that word comes later sees everything before this `light`; one whose RMW
    /// came earlier is seen by everything after it. That is membarrier's guarantee for a
    /// `light`/`heavy` pair, and no more (two `light`s are not ordered).
    #[inline]
    pub(crate) fn light() {
        if LIGHT_IS_SEQCST.with(|f| f.get()) {
            fence(Ordering::SeqCst);
        } else {
            // AcqRel: pairs with the AcqRel RMWs on this word in `heavy` (see above).
            PAIRING[model_thread_index()].fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Runs `f` (a model's `check`) with [`light`] as loom's `SeqCst` fence, the fallback of
    /// the std build without membarrier. Loom orders that fence after every earlier one, so
    /// it orders two `light`s too, which the membarrier build does not: only for models whose
    /// length the pairing words make too long for the house budget, and whose orderings
    /// between `light`s are checked by models that run paired.
    #[cfg(test)]
    pub(crate) fn light_as_seqcst_fence<R>(f: impl FnOnce() -> R) -> R {
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                LIGHT_IS_SEQCST.with(|f| f.set(false));
            }
        }
        LIGHT_IS_SEQCST.with(|f| f.set(true));
        let _reset = Reset;
        f()
    }

    /// A `SeqCst` fence on this thread, and the barrier membarrier puts on every other
    /// thread: an RMW on each other thread's pairing word.
    pub(crate) fn heavy() {
        fence(Ordering::SeqCst);
        let me = model_thread_index();
        for (i, word) in PAIRING.iter().enumerate() {
            if i != me {
                // AcqRel: pairs with the RMW in that thread's `light` (see `light`).
                word.fetch_add(1, Ordering::AcqRel);
            }
        }
    }
}

#[cfg(not(logbus_loom))]
mod imp {
    use std::sync::atomic::{compiler_fence, fence, AtomicU8, Ordering};

    const UNKNOWN: u8 = 0;
    /// `light` is a compiler fence, `heavy` an expedited membarrier.
    const MEMBARRIER: u8 = 1;
    /// Full fences on both sides.
    const FALLBACK: u8 = 2;
    /// On the way from MEMBARRIER to FALLBACK (see `degrade`): `light` is a full fence
    /// already, `heavy` still issues a barrier on every CPU.
    const DEGRADING: u8 = 3;

    /// Which fences the two sides use. Moves from `UNKNOWN` to `MEMBARRIER` or `FALLBACK`
    /// once (`init`), and from `MEMBARRIER` to `DEGRADING` to `FALLBACK` at most once, if
    /// the kernel stops issuing expedited barriers (`degrade`); never back. While it reads
    /// `UNKNOWN`, both sides use full fences, which pair with anything.
    static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

    /// Registers this process for expedited membarriers (once; later calls are a load).
    /// Race-free: the first decision stands (a compare-exchange from `UNKNOWN`).
    pub(crate) fn init() {
        // Relaxed: STATE only selects which fence the callers use; both choices are correct
        // while the other side still sees the older state (see `light`).
        if STATE.load(Ordering::Relaxed) == UNKNOWN {
            let state = if register() { MEMBARRIER } else { FALLBACK };
            // Only the first decision stands: two threads may race here, and a second store
            // could otherwise take STATE from MEMBARRIER to FALLBACK with no barrier for the
            // `light`s that ran as compiler fences (see `degrade` for the way that is safe).
            // A loser that registered leaves the registration unused.
            // SeqCst (both): the transition is rare; no weaker ordering is needed (see above).
            let _ = STATE.compare_exchange(UNKNOWN, state, Ordering::SeqCst, Ordering::SeqCst);
        }
    }

    /// The hot side's fence.
    #[inline]
    pub(crate) fn light() {
        // Relaxed: a `light` that reads MEMBARRIER pairs with a `heavy` that issues a barrier
        // on every CPU (an expedited one, or in `degrade` a global one, which covers every
        // `light` that read MEMBARRIER before it); any other reading takes a full fence.
        if STATE.load(Ordering::Relaxed) == MEMBARRIER {
            compiler_fence(Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
    }

    /// The rare side's fence: a barrier on every running thread of the process. Never
    /// fails: if the kernel refuses the expedited barrier, both sides move to full fences
    /// for good (`degrade`).
    pub(crate) fn heavy() {
        init();
        fence(Ordering::SeqCst);
        #[cfg(test)]
        HEAVY_CALLS.with(|n| n.set(n.get() + 1));
        // Acquire: pairs with `degrade`'s Release store of FALLBACK, so that a `heavy` that
        // reads it comes after the global barrier that covered the old `light`s.
        let state = STATE.load(Ordering::Acquire);
        // A DEGRADING reader cannot tell whether the degrading thread's global barrier has
        // finished, so it issues its own.
        if state == DEGRADING || (state == MEMBARRIER && !expedited_or_retry()) {
            degrade();
        }
    }

    #[cfg(test)]
    std::thread_local! {
        /// How many `heavy` calls this thread made (tests count the barriers of one wait).
        pub(crate) static HEAVY_CALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    /// The kernel refused expedited barriers after registering us (`ENOMEM` that persists,
    /// or a seccomp filter installed since): move both sides to full fences without leaving
    /// a handshake in flight uncovered. A `light` that read MEMBARRIER may still be between
    /// its store and its load, relying on this very `heavy`; so:
    /// 1. STATE becomes DEGRADING: every `light` that reads it from now on is a full fence;
    /// 2. a *global* membarrier (`MEMBARRIER_CMD_GLOBAL`: the kernel waits until every CPU
    ///    has passed a full barrier, an RCU grace period, milliseconds; it needs no
    ///    registration and allocates nothing) puts a barrier after every `light` that read
    ///    MEMBARRIER before step 1 became visible, which is what the expedited one would
    ///    have done;
    /// 3. STATE becomes FALLBACK: a `heavy` that reads it is a full fence only, which is
    ///    enough, since every `light` it can meet is a full fence or was covered by step 2
    ///    (its Acquire load orders it after the barrier).
    ///
    /// A `heavy` that reads DEGRADING issues its own global barrier (it cannot tell whether
    /// step 2 has finished). `register` only registers when the global barrier is supported,
    /// so step 2 is available whenever step 1 can happen; should even it be refused (a
    /// seccomp filter against `membarrier` altogether), each CPU is made to switch context
    /// instead (`barrier_by_migration`).
    #[cold]
    fn degrade() {
        // SeqCst: the transitions are rare; a loser of this race is already DEGRADING or
        // FALLBACK and still issues a barrier below (DEGRADING) or needs none (FALLBACK).
        let _ = STATE.compare_exchange(MEMBARRIER, DEGRADING, Ordering::SeqCst, Ordering::SeqCst);
        if !global_or_retry() {
            barrier_by_migration();
        }
        // SeqCst: in one order with the step-1 store; Release is what `heavy`'s Acquire
        // load needs (the barrier above happens before a FALLBACK it reads).
        let _ = STATE.compare_exchange(DEGRADING, FALLBACK, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Issues the expedited membarrier, retrying the failures that can happen after a
    /// successful registration. Registration belongs to the address space: a child of `fork`
    /// inherits it and `exec` discards it together with this module's memory, so `EPERM`
    /// (not registered) and `EINVAL`/`ENOSYS` cannot follow a registration that succeeded,
    /// short of a seccomp filter installed since. What remains is `ENOMEM` (the kernel
    /// allocates a CPU mask per call), and, defensively, `EINTR`/`EAGAIN`: transient, and no
    /// barrier was issued, so retrying is sound; retries are bounded and yield between
    /// attempts. `false` once a failure persists (the caller degrades).
    fn expedited_or_retry() -> bool {
        retry(expedited)
    }

    /// The global membarrier, with the retries of [`expedited_or_retry`].
    fn global_or_retry() -> bool {
        retry(global)
    }

    fn retry(barrier: fn() -> Result<(), Errno>) -> bool {
        const ATTEMPTS: u32 = 64;
        for _ in 0..ATTEMPTS {
            match barrier() {
                Ok(()) => return true,
                Err(Errno::Transient) => std::thread::yield_now(),
                Err(Errno::Other) => return false,
            }
        }
        false
    }

    /// Why a membarrier failed.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    // Off Linux (and under Miri) no membarrier is issued, so no errno is ever classified.
    #[cfg_attr(not(all(target_os = "linux", not(miri))), allow(dead_code))]
    enum Errno {
        /// `ENOMEM`, `EINTR`, `EAGAIN`: worth retrying.
        Transient,
        /// Anything else.
        Other,
    }

    #[cfg(all(target_os = "linux", not(miri)))]
    mod linux {
        pub(super) const QUERY: libc::c_long = 0;
        pub(super) const GLOBAL: libc::c_long = 1 << 0;
        pub(super) const PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
        pub(super) const REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

        /// `membarrier(cmd, 0, 0)`.
        pub(super) fn membarrier(cmd: libc::c_long) -> libc::c_long {
            // SAFETY: membarrier takes integer arguments only and touches no user memory.
            unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0, 0) }
        }
    }

    /// Registers for expedited barriers when the kernel offers them *and* the global
    /// barrier `degrade` falls back on (the kernel withdraws the global one on `nohz_full`
    /// systems; those use full fences throughout).
    #[cfg(all(target_os = "linux", not(miri)))]
    fn register() -> bool {
        use linux::*;
        let supported = membarrier(QUERY);
        let needed = PRIVATE_EXPEDITED | GLOBAL;
        if supported < 0 || supported & needed != needed {
            return false;
        }
        membarrier(REGISTER_PRIVATE_EXPEDITED) == 0 && expedited().is_ok()
    }

    #[cfg(all(target_os = "linux", not(miri)))]
    fn expedited() -> Result<(), Errno> {
        #[cfg(test)]
        if REFUSE_EXPEDITED.load(Ordering::Relaxed) {
            return Err(Errno::Other);
        }
        errno(linux::membarrier(linux::PRIVATE_EXPEDITED))
    }

    #[cfg(all(target_os = "linux", not(miri)))]
    fn global() -> Result<(), Errno> {
        #[cfg(test)]
        if REFUSE_GLOBAL.load(Ordering::Relaxed) {
            return Err(Errno::Other);
        }
        errno(linux::membarrier(linux::GLOBAL))
    }

    #[cfg(all(target_os = "linux", not(miri)))]
    fn errno(r: libc::c_long) -> Result<(), Errno> {
        if r == 0 {
            return Ok(());
        }
        Err(match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::ENOMEM | libc::EINTR | libc::EAGAIN) => Errno::Transient,
            _ => Errno::Other,
        })
    }

    /// The last resort of `degrade`: run the calling thread on every CPU it may use, one
    /// after the other. A CPU that runs it has switched context since this call began, and
    /// a context switch is a full barrier on that CPU (the guarantee membarrier itself is
    /// built on), so every thread of the process that ran there before has passed one. The
    /// other threads of the process run only on CPUs of the same cpuset. The thread's own
    /// affinity is restored afterwards.
    #[cfg(all(target_os = "linux", not(miri)))]
    fn barrier_by_migration() {
        // SAFETY: a zeroed `cpu_set_t` is a valid empty set.
        let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: `allowed` is a valid out pointer of `size` bytes; 0 names this thread.
        if unsafe { libc::sched_getaffinity(0, size, &mut allowed) } != 0 {
            return;
        }
        for cpu in 0..libc::CPU_SETSIZE as usize {
            // SAFETY: `cpu` is below CPU_SETSIZE, the set's capacity.
            if !unsafe { libc::CPU_ISSET(cpu, &allowed) } {
                continue;
            }
            // SAFETY: as above.
            let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            unsafe { libc::CPU_SET(cpu, &mut one) };
            // SAFETY: `one` is a valid set of `size` bytes. On success the kernel has moved
            // this thread onto `cpu` before the call returns.
            let _ = unsafe { libc::sched_setaffinity(0, size, &one) };
        }
        // SAFETY: restores the set read above.
        let _ = unsafe { libc::sched_setaffinity(0, size, &allowed) };
    }

    #[cfg(not(all(target_os = "linux", not(miri))))]
    fn register() -> bool {
        false
    }

    #[cfg(not(all(target_os = "linux", not(miri))))]
    fn expedited() -> Result<(), Errno> {
        Err(Errno::Other)
    }

    #[cfg(not(all(target_os = "linux", not(miri))))]
    fn global() -> Result<(), Errno> {
        Err(Errno::Other)
    }

    #[cfg(not(all(target_os = "linux", not(miri))))]
    fn barrier_by_migration() {}

    /// Test hooks: make the kernel's answers fail, to run `degrade` (in a forked child, so
    /// the test process keeps its state).
    #[cfg(all(test, target_os = "linux", not(miri)))]
    pub(crate) static REFUSE_EXPEDITED: std::sync::atomic::AtomicBool =
        std::sync::atomic::AtomicBool::new(false);
    #[cfg(all(test, target_os = "linux", not(miri)))]
    pub(crate) static REFUSE_GLOBAL: std::sync::atomic::AtomicBool =
        std::sync::atomic::AtomicBool::new(false);

    /// Whether `light` is a compiler fence now (tests).
    #[cfg(all(test, target_os = "linux", not(miri)))]
    pub(crate) fn light_is_free() -> bool {
        STATE.load(Ordering::Relaxed) == MEMBARRIER
    }
}

#[cfg(all(test, logbus_loom))]
pub(crate) use imp::light_as_seqcst_fence;
#[cfg(all(test, not(logbus_loom)))]
pub(crate) use imp::HEAVY_CALLS;
pub(crate) use imp::{heavy, init, light};

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    #[test]
    fn fences_run_in_either_mode() {
        super::light();
        super::init();
        super::heavy();
        super::light();
    }

    /// Runs `child` in a forked child of the test process (so what it does to the fence
    /// state stays there) and asserts that it exited normally with status 0.
    #[cfg(all(target_os = "linux", not(miri)))]
    fn in_forked_child(child: fn()) {
        super::init();
        // SAFETY: the child runs only `child` (system calls and atomics: no lock, no
        // allocation, nothing a fork of a multi-threaded process makes unsafe) and `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            child();
            // SAFETY: `_exit` ends the child without running the parent's atexit handlers.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: `pid` is our child; `status` is a valid out pointer.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(waited, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child died: status {status:#x}"
        );
    }

    /// `expedited_or_retry` relies on a child of `fork` inheriting the registration along
    /// with the memory that says "registered": its `heavy` must issue the barrier, not abort.
    #[cfg(all(target_os = "linux", not(miri)))]
    #[test]
    fn heavy_works_in_a_forked_child() {
        in_forked_child(|| {
            super::heavy();
            super::light();
            super::heavy();
        });
    }

    /// A kernel that stops issuing expedited barriers after registering us: `heavy` moves
    /// both sides to full fences (a global barrier covering the `light`s in flight) and
    /// returns, instead of aborting the process.
    #[cfg(all(target_os = "linux", not(miri)))]
    #[test]
    fn heavy_degrades_to_full_fences_when_membarrier_fails() {
        use std::sync::atomic::Ordering;
        in_forked_child(|| {
            super::imp::REFUSE_EXPEDITED.store(true, Ordering::Relaxed);
            super::light();
            super::heavy();
            super::light();
            super::heavy();
            if super::imp::light_is_free() {
                // SAFETY: ends the child with a failure status.
                unsafe { libc::_exit(3) };
            }
        });
    }

    /// As above, with the global barrier refused too (a seccomp filter against
    /// `membarrier`): the barrier comes from running on every CPU, and `heavy` returns.
    #[cfg(all(target_os = "linux", not(miri)))]
    #[test]
    fn heavy_degrades_when_every_membarrier_fails() {
        use std::sync::atomic::Ordering;
        in_forked_child(|| {
            super::imp::REFUSE_EXPEDITED.store(true, Ordering::Relaxed);
            super::imp::REFUSE_GLOBAL.store(true, Ordering::Relaxed);
            super::heavy();
            super::light();
            super::heavy();
            if super::imp::light_is_free() {
                // SAFETY: ends the child with a failure status.
                unsafe { libc::_exit(3) };
            }
        });
    }
}
