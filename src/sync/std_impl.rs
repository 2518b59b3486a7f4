//! The production side of the shim: std atomics, parking_lot locks, std threads.

pub(crate) use std::sync::Arc;

/// Atomics, re-exported so that the loom build can substitute its own.
pub(crate) mod atomic {
    pub(crate) use std::sync::atomic::{
        fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
    };
}

/// Spin-loop and prefetch hints.
pub(crate) mod hint {
    pub(crate) use std::hint::spin_loop;

    /// Starts loading the cache line holding `p` into the nearest cache (a hint: it changes
    /// no result and never faults, whatever the address). Lets a reader that knows a whole
    /// run of slots up front wait for all its cache misses at once instead of one by one.
    #[inline(always)]
    pub(crate) fn prefetch_read<T>(p: *const T) {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        // SAFETY: `prefetcht0` is a hint; it reads no memory architecturally and never
        // faults, so any address is fine.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
        }
        #[cfg(not(all(target_arch = "x86_64", not(miri))))]
        let _ = p;
    }

    /// Proof that this processor has a write prefetch (x86-64's `prefetchw`), which
    /// [`lines`](Self::lines) issues. Not every x86-64 processor has it, and a read prefetch
    /// is no stand-in: it fetches a line shared, so a store to it must still take it from
    /// the other cores.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct WritePrefetch(());

    impl WritePrefetch {
        /// The proof, where the processor has the instruction (asked once per process).
        pub(crate) fn detect() -> Option<Self> {
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            {
                use std::sync::atomic::{AtomicU8, Ordering};
                /// 0 before the first question, then 1 (absent) or 2 (present).
                static HAS: AtomicU8 = AtomicU8::new(0);
                // Relaxed (load and store): every thread that asks computes the same answer;
                // the value carries no other data.
                let has = match HAS.load(Ordering::Relaxed) {
                    0 => {
                        let has = if has_prefetchw() { 2 } else { 1 };
                        HAS.store(has, Ordering::Relaxed);
                        has
                    }
                    has => has,
                };
                (has == 2).then_some(Self(()))
            }
            #[cfg(not(all(target_arch = "x86_64", not(miri))))]
            None
        }

        /// Starts taking, for writing, the cache lines that hold the `len` bytes from `p`: a
        /// writer that knows which lines it stores to next asks for them early, so that
        /// taking them from another core's cache overlaps its other work instead of
        /// stalling its stores (and any fence after them). A hint: it changes no result and
        /// never faults, whatever the addresses.
        #[inline(always)]
        pub(crate) fn lines(self, p: *const u8, len: usize) {
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            {
                const LINE: usize = 64;
                let mut at = p as usize & !(LINE - 1);
                let end = (p as usize).saturating_add(len);
                while at < end {
                    // SAFETY: `prefetchw` reads and writes no memory architecturally and
                    // never faults, whatever the address; `self` proves the processor has
                    // it.
                    unsafe {
                        std::arch::asm!(
                            "prefetchw [{0}]",
                            in(reg) at,
                            options(nomem, nostack, preserves_flags)
                        );
                    }
                    at += LINE;
                }
            }
            #[cfg(not(all(target_arch = "x86_64", not(miri))))]
            let _ = (p, len);
        }
    }

    /// Whether the processor has `prefetchw`: CPUID leaf 0x8000_0001, ECX bit 8
    /// (3DNowPrefetch, which Intel processors report for it too).
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    #[cold]
    fn has_prefetchw() -> bool {
        use std::arch::x86_64::__cpuid;
        #[allow(unused_unsafe)]
        // SAFETY: CPUID exists on every x86-64 processor, and the extended leaf is asked
        // only when the processor reports it.
        unsafe {
            __cpuid(0x8000_0000).eax >= 0x8000_0001 && __cpuid(0x8000_0001).ecx & (1 << 8) != 0
        }
    }
}

/// Threads: spawning, yielding, parking.
pub(crate) mod thread {
    #[cfg(test)]
    pub(crate) use std::thread::spawn;
    pub(crate) use std::thread::{current, yield_now, JoinHandle};

    /// The first token handed out; smaller values are left to callers as sentinels.
    pub(crate) const FIRST_TOKEN: usize = 16;

    /// How many live threads can hold a *slot*: a token in `FIRST_TOKEN .. FIRST_TOKEN +
    /// SLOTS`, which callers use to index small per-thread arrays (see [`slot`]).
    pub(crate) const SLOTS: usize = 64;

    /// The slot of a token, if it has one.
    #[inline]
    pub(crate) fn slot(token: usize) -> Option<usize> {
        token.checked_sub(FIRST_TOKEN).filter(|&s| s < SLOTS)
    }

    /// A number naming the calling thread: the same on every call from one thread while it
    /// lives, never held by two live threads at once, at least [`FIRST_TOKEN`]. The first
    /// [`SLOTS`] live threads get slot tokens, which go back to a pool when the thread
    /// exits (so a later thread may get the same token); the others get tokens never
    /// handed out before. One thread-local read after the first call
    /// (`std::thread::current()` would clone an `Arc`, a locked increment).
    ///
    /// During thread-local teardown each call returns a fresh slotless token.
    #[inline(always)]
    pub(crate) fn token() -> usize {
        TOKEN
            .try_with(|t| {
                let v = t.0.get();
                if v != 0 {
                    return v;
                }
                let v = Token::take();
                t.0.set(v);
                v
            })
            .unwrap_or_else(|_| Token::unslotted())
    }

    thread_local! {
        static TOKEN: Token = const { Token(std::cell::Cell::new(0)) };
    }

    /// Which slots are held (bit `s` set: slot `s` is some live thread's).
    static SLOTS_HELD: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    /// The next slotless token.
    static NEXT_UNSLOTTED: std::sync::atomic::AtomicUsize =
        std::sync::atomic::AtomicUsize::new(FIRST_TOKEN + SLOTS);
    const _: () = assert!(SLOTS <= 64);

    /// A thread's token (0 until its first call); gives its slot back when the thread exits.
    struct Token(std::cell::Cell<usize>);

    impl Token {
        fn take() -> usize {
            match crate::sync::token_pool::take(&SLOTS_HELD) {
                Some(s) => FIRST_TOKEN + s,
                None => Self::unslotted(),
            }
        }

        fn unslotted() -> usize {
            // Relaxed: only uniqueness matters, which the read-modify-write gives.
            let v = NEXT_UNSLOTTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            assert!(v >= FIRST_TOKEN + SLOTS, "thread tokens exhausted");
            v
        }
    }

    impl Drop for Token {
        fn drop(&mut self) {
            if let Some(s) = slot(self.0.get()) {
                crate::sync::token_pool::give_back(&SLOTS_HELD, s);
            }
        }
    }

    /// Spawns a named thread.
    pub(crate) fn spawn_named<F, T>(name: String, f: F) -> std::io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        std::thread::Builder::new().name(name).spawn(f)
    }

    thread_local! {
        static DRAINS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// Marks the calling thread, for the rest of its life, as one that drains a buffer other
    /// threads may wait on (an observer subscriber's thread).
    pub(crate) fn mark_drainer() {
        let _ = DRAINS.try_with(|d| d.set(true));
    }

    /// Whether [`mark_drainer`] marked the calling thread: if so, others may be waiting on
    /// it, and it must not wait for them to end. `true` during thread-local teardown, when
    /// the mark can no longer be read (assume the worst).
    pub(crate) fn is_drainer() -> bool {
        DRAINS.try_with(|d| d.get()).unwrap_or(true)
    }

    /// Spawns a thread with a small stack of `bytes`, for tests that a path does not
    /// recurse.
    #[cfg(test)]
    pub(crate) fn spawn_with_stack<F, T>(bytes: usize, f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        std::thread::Builder::new()
            .stack_size(bytes)
            .spawn(f)
            .expect("spawning a test thread")
    }
}

/// An `UnsafeCell` with loom's closure-based access shape (`with` / `with_mut`), so that
/// loom can track every access to the cell's contents in the model build.
#[derive(Debug, Default)]
#[repr(transparent)]
pub(crate) struct UnsafeCell<T: ?Sized>(std::cell::UnsafeCell<T>);

impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    #[cfg(test)]
    pub(crate) fn into_inner(self) -> T {
        self.0.into_inner()
    }
}

impl<T: ?Sized> UnsafeCell<T> {
    /// Runs `f` with a shared pointer to the contents.
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Runs `f` with a mutable pointer to the contents.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// A mutex (parking_lot's: no poisoning, so a panicking holder leaves it usable).
pub(crate) type Mutex<T> = parking_lot::Mutex<T>;
/// The guard of [`Mutex`].
pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;

/// Runs `f` with `guard`'s mutex unlocked, then locks it again (for a wait that must not
/// hold the lock).
pub(crate) fn unlocked<T, R>(guard: &mut MutexGuard<'_, T>, f: impl FnOnce() -> R) -> R {
    parking_lot::MutexGuard::unlocked(guard, f)
}

/// A condition variable paired with [`Mutex`].
#[derive(Debug, Default)]
pub(crate) struct Condvar(parking_lot::Condvar);

impl Condvar {
    pub(crate) const fn new() -> Self {
        Self(parking_lot::Condvar::new())
    }

    /// Blocks until notified (or woken spuriously: callers re-check their condition).
    pub(crate) fn wait<T>(&self, guard: &mut MutexGuard<'_, T>) {
        self.0.wait(guard);
    }

    /// Blocks until notified or until `deadline`; returns `true` when the deadline passed.
    /// Callers re-check their condition either way.
    pub(crate) fn wait_until<T>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        deadline: std::time::Instant,
    ) -> bool {
        self.0.wait_until(guard, deadline).timed_out()
    }

    pub(crate) fn notify_all(&self) -> usize {
        self.0.notify_all()
    }
}
