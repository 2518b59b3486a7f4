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
//! Where membarrier is unavailable (other systems, older kernels, seccomp filters, Miri), both
//! sides fall back to `fence(SeqCst)`. Under loom both are `fence(SeqCst)`, so the models
//! check the handshake itself.
//!
//! Pairing rule: every [`light`] on one side of a handshake must be paired with a [`heavy`]
//! on the other side (or with `fence(SeqCst)` on both when the fallback is active, which this
//! module arranges by itself).

#[cfg(logbus_loom)]
mod imp {
    use crate::sync::atomic::{fence, Ordering};

    pub(crate) fn init() {}

    std::thread_local! {
        /// Set by [`light_as_compiler_fence`]; loom runs a model's threads on the thread
        /// that calls `check`, so this is per model.
        static LIGHT_IS_FREE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    #[inline]
    pub(crate) fn light() {
        if !LIGHT_IS_FREE.with(|free| free.get()) {
            fence(Ordering::SeqCst);
        }
    }

    /// Runs `f` (a model's `check`) with [`light`] as what it is in the std build with
    /// membarrier: no fence at all. Only for models with no heavy side (no change of owner,
    /// no parking): there the `SeqCst` fence loom otherwise puts in `light` orders accesses
    /// that real hardware does not, and hides store-buffering between the light fence's
    /// neighbours.
    #[cfg(test)]
    pub(crate) fn light_as_compiler_fence<R>(f: impl FnOnce() -> R) -> R {
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                LIGHT_IS_FREE.with(|free| free.set(false));
            }
        }
        LIGHT_IS_FREE.with(|free| free.set(true));
        let _reset = Reset;
        f()
    }

    pub(crate) fn heavy() {
        fence(Ordering::SeqCst);
    }
}

#[cfg(not(logbus_loom))]
mod imp {
    use std::sync::atomic::{compiler_fence, fence, AtomicU8, Ordering};

    const UNKNOWN: u8 = 0;
    const MEMBARRIER: u8 = 1;
    const FALLBACK: u8 = 2;

    /// Whether membarrier is registered for this process. Moves once from `UNKNOWN` to one of
    /// the other two and never changes again. While it reads `UNKNOWN`, both sides use full
    /// fences, which pair with anything.
    static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

    /// Registers this process for expedited membarriers (once; later calls are a load).
    pub(crate) fn init() {
        // Relaxed: STATE only selects which fence the callers use; both choices are correct
        // while the other side still sees the older state (see `light`).
        if STATE.load(Ordering::Relaxed) == UNKNOWN {
            let state = if register() { MEMBARRIER } else { FALLBACK };
            // Only the first decision stands: two threads may race here, and a second store
            // could otherwise take STATE from MEMBARRIER to FALLBACK, which `light`'s argument
            // forbids (a `light` that ran as a compiler fence would then meet a `heavy` that
            // issues no membarrier). A loser that registered leaves the registration unused.
            // SeqCst (both): the transition is rare; no weaker ordering is needed (see above).
            let _ = STATE.compare_exchange(UNKNOWN, state, Ordering::SeqCst, Ordering::SeqCst);
        }
    }

    /// The hot side's fence.
    #[inline]
    pub(crate) fn light() {
        // Relaxed: a `light` that reads MEMBARRIER pairs with a `heavy` that can only have
        // read MEMBARRIER too (the state never leaves it); any other reading takes a full fence.
        if STATE.load(Ordering::Relaxed) == MEMBARRIER {
            compiler_fence(Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
    }

    /// The rare side's fence: a barrier on every running thread of the process.
    pub(crate) fn heavy() {
        init();
        fence(Ordering::SeqCst);
        // Relaxed: set by `init` on this thread or read after it (see `light`).
        if STATE.load(Ordering::Relaxed) == MEMBARRIER && !expedited_or_retry() {
            // `light` callers that ran as compiler fences rely on this barrier, and no other
            // way to force one on every running thread is known to hold on every architecture
            // (see `expedited_or_retry`): returning would break the handshake silently.
            std::process::abort();
        }
    }

    /// Issues the expedited membarrier, retrying the failures that can happen after a
    /// successful registration. Registration belongs to the address space: a child of `fork`
    /// inherits it and `exec` discards it together with this module's memory, so `EPERM`
    /// (not registered) and `EINVAL`/`ENOSYS` cannot follow a registration that succeeded.
    /// What remains is `ENOMEM` (the kernel allocates a CPU mask per call), and, defensively,
    /// `EINTR`/`EAGAIN`: transient, and no barrier was issued, so retrying is sound; retries
    /// are bounded and yield between attempts.
    ///
    /// A failure that persists returns `false`. Why there is no fallback then: full fences
    /// from now on would cover future handshakes, but not a `light` that already ran as a
    /// compiler fence and whose handshake is in flight; covering it needs a barrier on that
    /// thread's CPU, issued from here. The known ways are an `mprotect` TLB shootdown (its
    /// IPIs serialize on x86, but arm64 invalidates TLBs by broadcast without interrupting
    /// other CPUs, and the kernel owes no IPI to a CPU in lazy-TLB mode), or a signal to every
    /// thread that ever ran `light`, acknowledged from its handler (liburcu's signal flavour;
    /// it needs a registry of those threads and a signal number taken from the application).
    /// Until one of those is built, abort is the only sound answer to a kernel that refuses.
    fn expedited_or_retry() -> bool {
        const ATTEMPTS: u32 = 64;
        for _ in 0..ATTEMPTS {
            match expedited() {
                Ok(()) => return true,
                Err(Errno::Transient) => std::thread::yield_now(),
                Err(Errno::Other) => return false,
            }
        }
        false
    }

    /// Why an expedited membarrier failed.
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
    fn register() -> bool {
        const MEMBARRIER_CMD_QUERY: libc::c_long = 0;
        const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
        const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;
        // SAFETY: membarrier takes integer arguments only and touches no user memory.
        let supported = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0) };
        if supported < 0 || supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED == 0 {
            return false;
        }
        // SAFETY: as above.
        let registered = unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
                0,
                0,
            )
        };
        registered == 0 && expedited().is_ok()
    }

    #[cfg(all(target_os = "linux", not(miri)))]
    fn expedited() -> Result<(), Errno> {
        const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
        // SAFETY: membarrier takes integer arguments only and touches no user memory.
        let r =
            unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) };
        if r == 0 {
            return Ok(());
        }
        Err(match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::ENOMEM | libc::EINTR | libc::EAGAIN) => Errno::Transient,
            _ => Errno::Other,
        })
    }

    #[cfg(not(all(target_os = "linux", not(miri))))]
    fn register() -> bool {
        false
    }

    #[cfg(not(all(target_os = "linux", not(miri))))]
    fn expedited() -> Result<(), Errno> {
        Err(Errno::Other)
    }
}

#[cfg(all(test, logbus_loom))]
pub(crate) use imp::light_as_compiler_fence;
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

    /// `expedited_or_retry` relies on a child of `fork` inheriting the registration along
    /// with the memory that says "registered": its `heavy` must issue the barrier, not abort.
    #[cfg(all(target_os = "linux", not(miri)))]
    #[test]
    fn heavy_works_in_a_forked_child() {
        super::init();
        // SAFETY: the child runs only `heavy` (system calls and atomics: no lock, no
        // allocation, nothing a fork of a multi-threaded process makes unsafe) and `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            super::heavy();
            super::light();
            super::heavy();
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
}
