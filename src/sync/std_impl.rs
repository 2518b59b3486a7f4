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
}

/// Threads: spawning, yielding, parking.
pub(crate) mod thread {
    pub(crate) use std::thread::{current, park, spawn, yield_now, JoinHandle, Thread};

    /// The first token handed out; smaller values are left to callers as sentinels.
    pub(crate) const FIRST_TOKEN: usize = 16;

    /// A number naming the calling thread: the same on every call from one thread, never
    /// given to another thread, at least [`FIRST_TOKEN`]. One thread-local read after the
    /// first call (`std::thread::current()` would clone an `Arc`, a locked increment).
    #[inline]
    pub(crate) fn token() -> usize {
        use std::cell::Cell;
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(FIRST_TOKEN);
        thread_local! {
            static TOKEN: Cell<usize> = const { Cell::new(0) };
        }
        // A `Cell<usize>` has no destructor, so `with` works at any point of the thread's
        // life, thread-local teardown included.
        TOKEN.with(|t| {
            let v = t.get();
            if v != 0 {
                return v;
            }
            // Relaxed: only uniqueness matters, which the read-modify-write gives.
            let v = NEXT.fetch_add(1, Ordering::Relaxed);
            assert!(v >= FIRST_TOKEN, "thread tokens exhausted");
            t.set(v);
            v
        })
    }

    /// Spawns a named thread.
    pub(crate) fn spawn_named<F, T>(name: String, f: F) -> std::io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        std::thread::Builder::new().name(name).spawn(f)
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

    pub(crate) fn notify_one(&self) -> bool {
        self.0.notify_one()
    }

    pub(crate) fn notify_all(&self) -> usize {
        self.0.notify_all()
    }
}
