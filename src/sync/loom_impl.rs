//! The model-checking side of the shim: loom's types, wrapped where their signatures differ
//! from the std side (`Mutex::lock` returning a `Result`, `Condvar::wait` taking the guard by
//! value, no timed waits).

pub(crate) use loom::sync::Arc;

/// A loom model builder with at most two preemptions unless `LOOM_MAX_PREEMPTIONS` sets the
/// bound: the house default, which keeps each model to seconds instead of minutes.
#[cfg(test)]
pub(crate) fn loom_builder() -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder
}

/// Checks the model `f` under [`loom_builder`]'s bound.
#[cfg(test)]
pub(crate) fn loom_model(f: impl Fn() + Sync + Send + 'static) {
    loom_builder().check(f);
}

/// Atomics, loom's.
pub(crate) mod atomic {
    pub(crate) use loom::sync::atomic::{
        fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
    };
}

/// Spin-loop hint: under loom it yields to the model's scheduler.
pub(crate) mod hint {
    pub(crate) use loom::hint::spin_loop;

    /// A prefetch changes no result, so loom has nothing to model.
    #[inline(always)]
    pub(crate) fn prefetch_read<T>(p: *const T) {
        let _ = p;
    }

    /// See the std side; under loom there is never a proof, so nothing is prefetched.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct WritePrefetch(());

    impl WritePrefetch {
        pub(crate) fn detect() -> Option<Self> {
            None
        }

        pub(crate) fn lines(self, p: *const u8, len: usize) {
            let _ = (p, len);
        }
    }
}

/// Threads, loom's.
pub(crate) mod thread {
    #[cfg(test)]
    pub(crate) use loom::thread::spawn;
    pub(crate) use loom::thread::{current, yield_now, JoinHandle};

    /// The first token handed out; smaller values are left to callers as sentinels.
    pub(crate) const FIRST_TOKEN: usize = 16;

    /// See the std side. Fewer than there: every slot is an atomic in the model's state.
    pub(crate) const SLOTS: usize = 8;

    /// See the std side.
    pub(crate) fn slot(token: usize) -> Option<usize> {
        token.checked_sub(FIRST_TOKEN).filter(|&s| s < SLOTS)
    }

    /// A number naming the calling model thread (see the std side): `FIRST_TOKEN` plus
    /// loom's index of the thread in this execution, so every model thread has a slot and
    /// the token adds no atomic (and no state) to the model.
    pub(crate) fn token() -> usize {
        let chosen = TOKEN_OVERRIDE.with(|t| t.get());
        if chosen != 0 {
            return chosen;
        }
        let n = model_thread_index();
        assert!(n < SLOTS, "more model threads than slots");
        FIRST_TOKEN + n
    }

    /// Loom's index of the calling thread in this execution (below `loom::MAX_THREADS`).
    pub(crate) fn model_thread_index() -> usize {
        // loom exposes the index only through `Debug`: "ThreadId(3)".
        let id = format!("{:?}", loom::thread::current().id());
        id.trim_start_matches("ThreadId(")
            .trim_end_matches(')')
            .parse()
            .expect("loom's ThreadId debug format")
    }

    loom::thread_local! {
        /// A token a model thread chose for itself ([`set_token`]), 0 for none.
        static TOKEN_OVERRIDE: std::cell::Cell<usize> = std::cell::Cell::new(0);
    }

    /// From now on the calling model thread's token is `token`: a model of a token handed
    /// from a thread that exits to a later thread (the std pool reuses slots) gives both
    /// threads the same token, drawn from a pool of its own (`sync::token_pool`).
    #[cfg(test)]
    pub(crate) fn set_token(token: usize) {
        assert!(slot(token).is_some(), "a slot token");
        TOKEN_OVERRIDE.with(|t| t.set(token));
    }

    loom::thread_local! {
        static DRAINS: std::cell::Cell<bool> = std::cell::Cell::new(false);
    }

    /// See the std side.
    pub(crate) fn mark_drainer() {
        let _ = DRAINS.try_with(|d| d.set(true));
    }

    /// See the std side.
    pub(crate) fn is_drainer() -> bool {
        DRAINS.try_with(|d| d.get()).unwrap_or(true)
    }

    /// Spawns a thread in the model (loom threads carry no names).
    pub(crate) fn spawn_named<F, T>(_name: String, f: F) -> std::io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        Ok(loom::thread::spawn(f))
    }
}

pub(crate) use loom::cell::UnsafeCell;

/// A mutex with parking_lot's shape over loom's.
#[derive(Debug, Default)]
pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

/// The guard of [`Mutex`]; it remembers its mutex so that a wait can re-lock it.
pub(crate) struct MutexGuard<'a, T> {
    mutex: &'a Mutex<T>,
    inner: Option<loom::sync::MutexGuard<'a, T>>,
}

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(loom::sync::Mutex::new(value))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        // A loom mutex is poisoned only if a model thread panicked, which fails the model.
        let inner = self.0.lock().unwrap_or_else(|e| e.into_inner());
        MutexGuard {
            mutex: self,
            inner: Some(inner),
        }
    }

    /// Locks the mutex if nobody holds it.
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        match self.0.try_lock() {
            Ok(inner) => Some(MutexGuard {
                mutex: self,
                inner: Some(inner),
            }),
            // As in `lock`: a poisoned loom mutex already failed the model.
            Err(std::sync::TryLockError::Poisoned(e)) => Some(MutexGuard {
                mutex: self,
                inner: Some(e.into_inner()),
            }),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }
}

impl<T> std::ops::Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.inner.as_ref().expect("guard is held outside a wait")
    }
}

impl<T> std::ops::DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.inner.as_mut().expect("guard is held outside a wait")
    }
}

/// Runs `f` with `guard`'s mutex unlocked, then locks it again.
pub(crate) fn unlocked<T, R>(guard: &mut MutexGuard<'_, T>, f: impl FnOnce() -> R) -> R {
    drop(guard.inner.take());
    let r = f();
    // As in `lock`: a poisoned loom mutex already failed the model.
    guard.inner = Some(guard.mutex.0.lock().unwrap_or_else(|e| e.into_inner()));
    r
}

/// A condition variable with parking_lot's shape over loom's.
#[derive(Debug, Default)]
pub(crate) struct Condvar(loom::sync::Condvar);

impl Condvar {
    pub(crate) fn new() -> Self {
        Self(loom::sync::Condvar::new())
    }

    pub(crate) fn wait<T>(&self, guard: &mut MutexGuard<'_, T>) {
        let inner = guard.inner.take().expect("guard is held outside a wait");
        let inner = self.0.wait(inner).unwrap_or_else(|e| e.into_inner());
        guard.inner = Some(inner);
    }

    /// Loom models no time: the wait releases the lock, lets the other threads run, re-locks
    /// and reports that the deadline passed. Together with `time::expired` never firing on
    /// its own, this makes "the deadline expires here" a point loom explores against every
    /// interleaving of the other threads.
    pub(crate) fn wait_until<T>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        _deadline: std::time::Instant,
    ) -> bool {
        drop(guard.inner.take());
        loom::thread::yield_now();
        let relocked = guard.mutex.lock().inner.take();
        guard.inner = relocked;
        true
    }

    pub(crate) fn notify_all(&self) -> usize {
        self.0.notify_all();
        0
    }
}
