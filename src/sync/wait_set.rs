//! Parking for waiters, with no system call on the notifying side while nobody waits.
//!
//! A waiter spins and yields first (see [`Backoff`](super::Backoff)); only when that fails
//! does it come here to park. The notifier (the thread that just published progress) pays one
//! `SeqCst` fence and one load per notification; it takes the lock and wakes threads only
//! when a waiter is registered.
//!
//! The lost-wake-up argument is Dekker's: the notifier publishes its progress, then
//! `fence(SeqCst)`, then reads `waiters`; the waiter increments `waiters`, then
//! `fence(SeqCst)`, then re-checks the condition. The two fences are ordered one way or the
//! other, so either the waiter's re-check sees the progress, or the notifier sees the waiter
//! (and then takes the lock, which the waiter holds from registration until it is inside
//! `Condvar::wait`, so the notification cannot fall between its check and its sleep).
//!
//! A wake-up takes the waiters it wakes off the count (those of [`wait_until`], whose
//! handshake is that `SeqCst` fence): a waiter that finds its condition still unmet
//! registers again, with the fence, before it checks. Without that, a woken thread kept
//! counting until it ran again, and with more runnable threads than cores that took long:
//! every notifier meanwhile took the lock to wake nobody (a counting build of the MPMC 2×2
//! benchmark counted thousands of such wake-ups for every thread actually woken). The
//! waiters of
//! [`wait_until_heavy`](WaitSet::wait_until_heavy) with light notifiers stay counted until
//! they leave: registering again would cost them a `membarrier` per wake-up.
//!
//! Tasks wait too ([`poll_until`](WaitSet::poll_until)): a future registers its task's
//! [`Waker`] under the lock, counted in `waiters` like a parked thread, with the same fence
//! after it, and re-checks its condition before returning `Pending`. Every wake-up takes
//! all registered wakers off the list and wakes them, outside the lock, a few at a time
//! (`WAKE_BATCH`, in an array on the stack: a wake-up allocates nothing, and wake-ups
//! racing each other never trade buffers); a woken future that must wait on registers
//! again on its next poll. Since a wake-up wakes every waiter, a
//! future dropped after it was woken takes nothing with it: the other waiters were woken
//! too, and the progress they wait for is still there.
//!
//! [`wait_until`]: WaitSet::wait_until

use std::collections::VecDeque;
use std::task::{Context, Poll, Waker};

use super::atomic::{fence, AtomicUsize, Ordering};
use super::time::{self, Instant};
use super::{asym_fence, Arc, Condvar, Mutex, MutexGuard, Signal};

/// Wakers a wake-up takes off the list at a time (see `wake_all`).
const WAKE_BATCH: usize = 16;

/// A set of parked threads waiting for a condition another thread makes true.
#[derive(Debug, Default)]
pub(crate) struct WaitSet {
    /// Registered threads: watchers, waiters that stay counted until they leave, and
    /// waiters registered since the last wake-up (see the module docs). Changed only under
    /// `lock`; read without it by notifiers.
    waiters: AtomicUsize,
    lock: Mutex<Registry>,
    cond: Condvar,
}

/// What the lock of a [`WaitSet`] guards.
#[derive(Debug, Default)]
struct Registry {
    /// The signals of threads watching this set from a `select` (see
    /// [`WaitSet::watch`]), raised by every wake-up.
    watchers: Vec<Arc<Signal>>,
    /// Waiters counted in `waiters` that the next wake-up takes off the count.
    rearm: usize,
    /// Wake-ups that took waiters off the count so far (wrapping): a waiter that finds it
    /// moved since it registered is no longer counted.
    round: usize,
    /// Registered tasks' wakers, each counted in `waiters`, by key (see [`WakerSlot`]), in
    /// the order they registered: a wake-up takes them from the front, so the ones there
    /// when it started are all taken before any registered since (see `wake_all`). It
    /// allocates only while it grows to the number of tasks that wait at once.
    wakers: VecDeque<(u64, Waker)>,
    /// The key of the next registered waker.
    next_key: u64,
}

/// A future's registration in a [`WaitSet`]: empty, or the key of its waker there. The
/// future calls [`WaitSet::cancel_waker`] when it completes or is dropped.
#[derive(Debug, Default)]
pub(crate) struct WakerSlot {
    key: Option<u64>,
}

impl WakerSlot {
    /// An empty slot.
    pub(crate) const fn new() -> Self {
        Self { key: None }
    }

    /// The key held, for a registry other than a [`WaitSet`] (the timers' alarms).
    #[cfg_attr(logbus_loom, allow(dead_code))]
    pub(crate) const fn key(&self) -> Option<u64> {
        self.key
    }

    /// Sets (or clears) the key held, for a registry other than a [`WaitSet`].
    #[cfg_attr(logbus_loom, allow(dead_code))]
    pub(crate) fn set_key(&mut self, key: Option<u64>) {
        self.key = key;
    }
}

impl WaitSet {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Wakes every parked waiter. Call it *after* publishing the progress waiters look for.
    #[inline]
    pub(crate) fn notify_all(&self) {
        // SeqCst fence: pairs with the fence in `wait_until` (see the module docs).
        fence(Ordering::SeqCst);
        // Relaxed: the fence above orders this load after the caller's publication.
        if self.waiters.load(Ordering::Relaxed) != 0 {
            self.wake_all();
        }
    }

    /// Like [`notify_all`](Self::notify_all), but the notifier pays only
    /// [`asym_fence::light`] (a compiler fence where membarrier is available). Only for wait
    /// sets whose waiters call [`asym_fence::heavy`] at the start of their `ready` closure,
    /// which completes the Dekker handshake from the waiting side.
    #[inline]
    pub(crate) fn notify_all_light(&self) {
        asym_fence::light();
        // Relaxed: the fence above (paired with the waiter's heavy fence) orders this load
        // after the caller's publication.
        if self.waiters.load(Ordering::Relaxed) != 0 {
            self.wake_all();
        }
    }

    /// The notification of [`notify_all_light`](Self::notify_all_light) for a caller that
    /// has just issued [`asym_fence::light`] itself (after publishing its progress), so that
    /// one fence serves several handshakes.
    #[inline]
    pub(crate) fn notify_all_after_light_fence(&self) {
        // Relaxed: the caller's light fence orders this load after its publication.
        if self.waiters.load(Ordering::Relaxed) != 0 {
            self.wake_all();
        }
    }

    /// Wakes every parked waiter, for a notifier whose progress was published by a `SeqCst`
    /// read-modify-write (a CAS that claimed a slot, say) sequenced before this call, and
    /// whose waiters' `ready` reads that same atomic with a `SeqCst` read-modify-write.
    /// Then no fence is needed on the notifying side: the notifier's RMW and its `SeqCst`
    /// load of `waiters` are in the single total order S with the waiter's fence and RMW
    /// (C++20 [atomics.order]: if the waiter's RMW reads a value older than the notifier's,
    /// it precedes it in S, so the waiter's fence precedes the notifier's load in S and that
    /// load sees the registration). On x86 this is one plain load: the RMW's `lock` prefix
    /// is already a full barrier.
    ///
    /// Loom does not model the total order of `SeqCst` loads (it treats them as `Acquire`),
    /// so under loom this is [`notify_all`](Self::notify_all), fence included: models check
    /// the fenced protocol, and the argument above is what carries it over to the std build.
    #[inline]
    pub(crate) fn notify_all_after_rmw(&self) {
        if cfg!(logbus_loom) {
            self.notify_all();
        } else if self.waiters.load(Ordering::SeqCst) != 0 {
            self.wake_all();
        }
    }

    /// Whether any thread is parked or about to park.
    #[cfg(all(test, not(logbus_loom)))]
    pub(crate) fn has_waiters(&self) -> bool {
        fence(Ordering::SeqCst);
        self.waiters.load(Ordering::Relaxed) != 0
    }

    #[cold]
    fn wake_all(&self) {
        // Taking the lock orders this wake-up after a registered waiter's last check.
        let mut reg = self.lock.lock();
        for signal in reg.watchers.iter() {
            signal.raise();
        }
        if reg.rearm > 0 {
            // Woken, they count no more: each registers again if it must wait on.
            // Relaxed: under the lock, like every change of the count; a notifier that
            // reads the old count takes the lock for nothing, one that reads the new one
            // skips only waiters that check their condition again after registering.
            self.waiters.fetch_sub(reg.rearm, Ordering::Relaxed);
            reg.rearm = 0;
            reg.round = reg.round.wrapping_add(1);
        }
        // The wakers registered now, taken a batch at a time from the front: later
        // registrations queue behind them, so `left` of them covers every one of these
        // still registered (a cancelled one leaves; a newer one taken instead is woken for
        // nothing, harmlessly).
        let mut left = reg.wakers.len();
        let mut batch = self.take_wakers(&mut reg, &mut left);
        drop(reg);
        self.cond.notify_all();
        loop {
            // Outside the lock: a waker may run code that registers again in this set.
            for waker in batch.iter_mut().filter_map(Option::take) {
                wake(waker);
            }
            if left == 0 {
                return;
            }
            let mut reg = self.lock.lock();
            batch = self.take_wakers(&mut reg, &mut left);
        }
    }

    /// Takes up to [`WAKE_BATCH`] of the next `left` wakers off the front of the list (all
    /// of them when fewer remain: `left` drops to 0), each off the count of waiters.
    fn take_wakers(&self, reg: &mut Registry, left: &mut usize) -> [Option<Waker>; WAKE_BATCH] {
        let n = (*left).min(WAKE_BATCH).min(reg.wakers.len());
        *left = if n == reg.wakers.len() { 0 } else { *left - n };
        if n > 0 {
            // Relaxed: as for `rearm` above; each task registers again if it must wait on.
            self.waiters.fetch_sub(n, Ordering::Relaxed);
        }
        std::array::from_fn(|i| {
            (i < n)
                .then(|| reg.wakers.pop_front().map(|(_, w)| w))
                .flatten()
        })
    }

    /// The asynchronous [`wait_until`](Self::wait_until): `Ready` with what `ready` returns
    /// once it returns `Some`; otherwise registers the task's waker in `slot` (or refreshes
    /// it), checks `ready` once more, and returns `Pending`. The caller polls again when
    /// woken, and calls [`cancel_waker`](Self::cancel_waker) when dropped before completion.
    ///
    /// `light_notifiers()`: whether notifiers may use the light fence
    /// ([`notify_all_light`](Self::notify_all_light)); the registration then completes the
    /// handshake with [`asym_fence::heavy`], as [`wait_until_heavy`](Self::wait_until_heavy)
    /// does. `ready` is called without the lock.
    pub(crate) fn poll_until<R>(
        &self,
        cx: &mut Context<'_>,
        slot: &mut WakerSlot,
        light_notifiers: impl FnOnce() -> bool,
        mut ready: impl FnMut() -> Option<R>,
    ) -> Poll<R> {
        if let Some(r) = ready() {
            self.cancel_waker(slot);
            return Poll::Ready(r);
        }
        // A registration the poll only refreshed (polled again before a wake-up: `join!`,
        // `select!`, a self-wake) has been counted since the heavy fence of the poll that
        // made it, and no wake-up has taken it since (a wake-up takes every waker): as in
        // `wait_until_heavy`, once per registration is enough.
        if self.register_waker(slot, cx.waker()) && light_notifiers() {
            asym_fence::heavy();
        }
        match ready() {
            Some(r) => {
                self.cancel_waker(slot);
                Poll::Ready(r)
            }
            None => Poll::Pending,
        }
    }

    /// Registers `waker` in `slot` (replacing the waker there if a wake-up has not taken
    /// it yet), counted as a waiter, then the `SeqCst` fence of the handshake (see the
    /// module docs): the caller checks its condition after this returns. Returns whether
    /// the slot was registered anew (`false`: its registration was still there, refreshed).
    pub(crate) fn register_waker(&self, slot: &mut WakerSlot, waker: &Waker) -> bool {
        let mut reg = self.lock.lock();
        let present = slot
            .key
            .and_then(|key| reg.wakers.iter().position(|(k, _)| *k == key));
        // Dropped after the lock is released: dropping a waker runs its task's code.
        let mut replaced = None;
        match present {
            Some(i) => {
                if !reg.wakers[i].1.will_wake(waker) {
                    replaced = Some(std::mem::replace(&mut reg.wakers[i].1, waker.clone()));
                }
            }
            None => {
                let key = reg.next_key;
                reg.next_key = key.wrapping_add(1);
                reg.wakers.push_back((key, waker.clone()));
                slot.key = Some(key);
                // Relaxed increment: the SeqCst fence below is what pairs with the
                // notifier's.
                self.waiters.fetch_add(1, Ordering::Relaxed);
            }
        }
        drop(reg);
        fence(Ordering::SeqCst);
        drop(replaced);
        present.is_none()
    }

    /// Takes the waker of `slot` off the set if a wake-up has not already, and empties the
    /// slot. Free when the slot is empty.
    pub(crate) fn cancel_waker(&self, slot: &mut WakerSlot) {
        let Some(key) = slot.key.take() else {
            return;
        };
        // No lock when nobody is counted: our registration counted until a wake-up took
        // it off the list (every change of the count is a read-modify-write under the
        // lock, and this thread's load sees its own increment or later), so a count of
        // zero says it is gone. The common case of a future completing after its wake-up.
        // Relaxed: as argued, coherence alone decides.
        if self.waiters.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut reg = self.lock.lock();
        if let Some(i) = reg.wakers.iter().position(|(k, _)| *k == key) {
            let removed = reg.wakers.remove(i);
            // Relaxed: as when a waiter leaves `wait_until`.
            self.waiters.fetch_sub(1, Ordering::Relaxed);
            drop(reg);
            // After the lock: dropping a waker runs its task's code, which may use this
            // set (its last reference may drop a future registered here).
            drop(removed);
        }
    }

    /// Registers `signal` to be raised by every wake-up from now on, as a parked waiter
    /// would be woken, until [`unwatch`](Self::unwatch): for a thread that waits on several
    /// sets at once. It counts as a waiter, so notifiers take their slow path meanwhile.
    /// The caller re-checks its conditions after this returns, then parks on the signal:
    /// the fence here pairs with the notifier's as in [`wait_until`](Self::wait_until).
    pub(crate) fn watch(&self, signal: &Arc<Signal>) {
        let mut reg = self.lock.lock();
        reg.watchers.push(Arc::clone(signal));
        // Relaxed increment: the SeqCst fence below is what pairs with the notifier's.
        self.waiters.fetch_add(1, Ordering::Relaxed);
        drop(reg);
        fence(Ordering::SeqCst);
    }

    /// Undoes one [`watch`](Self::watch) of `signal`.
    pub(crate) fn unwatch(&self, signal: &Arc<Signal>) {
        let mut reg = self.lock.lock();
        if let Some(i) = reg.watchers.iter().position(|s| Arc::ptr_eq(s, signal)) {
            reg.watchers.swap_remove(i);
            // Relaxed: as when a waiter leaves `wait_until`.
            self.waiters.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// [`wait_until`](Self::wait_until) for a waiter whose notifiers use
    /// [`notify_all_light`](Self::notify_all_light) (or another light fence): the waiter
    /// completes the Dekker handshake with [`asym_fence::heavy`], once per call, after it has
    /// registered and before its first check of `ready` — when `light_notifiers()` (asked
    /// once, then) says notifiers may still be using the light fence.
    ///
    /// Once is enough: such a waiter stays counted until this call returns (wake-ups do not
    /// take it off the count, see the module docs), and the heavy fence puts a barrier on
    /// every CPU after its registration. A notifier whose load of `waiters` comes after that
    /// barrier sees the registration (and wakes us under the lock, which we hold from each
    /// check until we sleep); one whose load came before it had published its progress
    /// before that barrier too, and the first check sees the progress. Each further
    /// `membarrier` would interrupt every CPU running a thread of this process for nothing.
    /// When `light_notifiers()` says no, this is [`wait_until`](Self::wait_until).
    pub(crate) fn wait_until_heavy<R>(
        &self,
        deadline: Option<Instant>,
        light_notifiers: impl FnOnce() -> bool,
        ready: impl FnMut() -> Option<R>,
    ) -> Option<R> {
        let mut guard = self.lock.lock();
        let sticky = light_notifiers();
        self.wait_locked(&mut guard, deadline, sticky, ready)
    }

    /// Parks until `ready` returns `Some`, or until `deadline` passes (then `None`, after one
    /// last check of `ready`). `ready` must be cheap and is called with the wait set's lock
    /// held; it is re-checked after every wake-up, spurious ones included.
    pub(crate) fn wait_until<R>(
        &self,
        deadline: Option<Instant>,
        ready: impl FnMut() -> Option<R>,
    ) -> Option<R> {
        let mut guard = self.lock.lock();
        self.wait_locked(&mut guard, deadline, false, ready)
    }

    /// The wait of [`wait_until`](Self::wait_until) and
    /// [`wait_until_heavy`](Self::wait_until_heavy): `sticky`, the waiter stays counted
    /// until it leaves and issues the heavy fence after registering; otherwise a wake-up
    /// takes it off the count and it registers again (with the fence) before its next
    /// check.
    fn wait_locked<R>(
        &self,
        guard: &mut MutexGuard<'_, Registry>,
        deadline: Option<Instant>,
        sticky: bool,
        mut ready: impl FnMut() -> Option<R>,
    ) -> Option<R> {
        let mut round = self.register(guard, sticky);
        if sticky {
            asym_fence::heavy();
        }
        let result = loop {
            if let Some(r) = ready() {
                break Some(r);
            }
            match deadline {
                None => self.cond.wait(guard),
                Some(deadline) => {
                    if time::expired(deadline) || self.cond.wait_until(guard, deadline) {
                        break ready();
                    }
                }
            }
            if !sticky && guard.round != round {
                // Woken and taken off the count: count again before looking.
                round = self.register(guard, false);
            }
        };
        if sticky || guard.round == round {
            if !sticky {
                guard.rearm -= 1;
            }
            // Relaxed: leaving only makes notifiers' fast path more likely; a stale count
            // costs one spurious lock/notify, never a lost wake-up.
            self.waiters.fetch_sub(1, Ordering::Relaxed);
        }
        result
    }

    /// Counts the calling waiter in `waiters` (under the lock), then the `SeqCst` fence of
    /// the handshake (see the module docs); the current round.
    fn register(&self, guard: &mut MutexGuard<'_, Registry>, sticky: bool) -> usize {
        if !sticky {
            guard.rearm += 1;
        }
        // Relaxed increment: the SeqCst fence right after it is what pairs with the
        // notifier's fence.
        self.waiters.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        guard.round
    }
}

/// Wakes a task taken off the list by a wake-up, containing a panic of its `wake` (an
/// executor's bug, which the panic hook has already reported by the time it is caught).
/// Unwinding from here would drop the wakers not yet woken, whose tasks would then wait for
/// good (they are off the list), and would leave the notifier's own step half done: a
/// single producer's publish that never leaves, so the ring can never finish closing.
fn wake(waker: Waker) {
    // Nothing is observed after a panic: the waker is consumed either way.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| waker.wake()));
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use super::*;
    use crate::sync::atomic::AtomicBool;
    use crate::sync::{thread, Arc};
    use std::time::Duration;

    #[test]
    fn notify_wakes_a_parked_waiter() {
        let set = Arc::new(WaitSet::new());
        let flag = Arc::new(AtomicBool::new(false));
        let (s, f) = (Arc::clone(&set), Arc::clone(&flag));
        let waiter = thread::spawn_named("waiter".into(), move || {
            s.wait_until(None, || f.load(Ordering::Acquire).then_some(7))
        })
        .unwrap();
        while !set.has_waiters() {
            thread::yield_now();
        }
        flag.store(true, Ordering::Release);
        set.notify_all();
        assert_eq!(waiter.join().unwrap(), Some(7));
        assert!(!set.has_waiters());
    }

    /// A waker that counts its wake-ups.
    struct CountingWaker(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for CountingWaker {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn counting_waker() -> (std::sync::Arc<CountingWaker>, Waker) {
        let count = std::sync::Arc::new(CountingWaker(std::sync::atomic::AtomicUsize::new(0)));
        (std::sync::Arc::clone(&count), Waker::from(count))
    }

    #[test]
    fn a_registered_task_is_woken_once_and_counted_until_then() {
        let set = WaitSet::new();
        let (count, waker) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        let mut slot = WakerSlot::new();
        let flag = AtomicBool::new(false);
        let ready = || flag.load(Ordering::Acquire).then_some(5);
        assert!(set
            .poll_until(&mut cx, &mut slot, || false, ready)
            .is_pending());
        // Polled again before a wake-up: still one registration.
        assert!(set
            .poll_until(&mut cx, &mut slot, || false, ready)
            .is_pending());
        assert_eq!(set.waiters.load(Ordering::Relaxed), 1);
        flag.store(true, Ordering::Release);
        set.notify_all();
        set.notify_all();
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        assert!(!set.has_waiters());
        assert_eq!(
            set.poll_until(&mut cx, &mut slot, || false, ready),
            Poll::Ready(5)
        );
    }

    #[test]
    fn a_cancelled_task_is_not_woken_and_no_longer_counted() {
        let set = WaitSet::new();
        let (count, waker) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        let mut slot = WakerSlot::new();
        assert!(set
            .poll_until(&mut cx, &mut slot, || false, || None::<()>)
            .is_pending());
        set.cancel_waker(&mut slot);
        assert!(!set.has_waiters());
        set.notify_all();
        assert_eq!(count.0.load(Ordering::Relaxed), 0);
        // Cancelling twice, or after a wake-up took the waker, changes nothing.
        set.cancel_waker(&mut slot);
        assert!(set
            .poll_until(&mut cx, &mut slot, || false, || None::<()>)
            .is_pending());
        set.notify_all();
        set.cancel_waker(&mut slot);
        assert_eq!(set.waiters.load(Ordering::Relaxed), 0);
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn waking_many_tasks_allocates_only_while_the_lists_grow() {
        let set = WaitSet::new();
        let wakers: Vec<_> = (0..8).map(|_| counting_waker()).collect();
        let mut slots: Vec<_> = (0..8).map(|_| WakerSlot::new()).collect();
        for _ in 0..3 {
            for ((_, w), slot) in wakers.iter().zip(slots.iter_mut()) {
                let mut cx = Context::from_waker(w);
                assert!(set
                    .poll_until(&mut cx, slot, || false, || None::<()>)
                    .is_pending());
            }
            set.notify_all();
        }
        let reg = set.lock.lock();
        assert!(reg.wakers.capacity() >= 8);
        drop(reg);
        for (count, _) in &wakers {
            assert_eq!(count.0.load(Ordering::Relaxed), 3);
        }
    }

    /// A waker whose `wake` panics (an executor's bug).
    struct PanickingWaker;

    impl std::task::Wake for PanickingWaker {
        fn wake(self: std::sync::Arc<Self>) {
            panic!("a waker panicked (on purpose, in a test)");
        }
    }

    /// A wake-up has taken every waker off the list before it wakes them: a panicking
    /// `wake` must not cost the tasks after it their wake-up (they would stay pending for
    /// good), nor reach the notifier (a publish or a close, left half done).
    #[test]
    fn a_panicking_waker_costs_the_other_tasks_nothing() {
        let set = WaitSet::new();
        let bad = Waker::from(std::sync::Arc::new(PanickingWaker));
        let (count, good) = counting_waker();
        let mut slots = [WakerSlot::new(), WakerSlot::new()];
        for (waker, slot) in [&bad, &good].into_iter().zip(slots.iter_mut()) {
            let mut cx = Context::from_waker(waker);
            assert!(set
                .poll_until(&mut cx, slot, || false, || None::<()>)
                .is_pending());
        }
        let notified = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| set.notify_all()));
        assert!(
            notified.is_ok(),
            "a waker's panic unwound into the notifier"
        );
        assert_eq!(
            count.0.load(Ordering::Relaxed),
            1,
            "the other task was not woken"
        );
        assert!(!set.has_waiters());
        // The set works on: the good task registers again and is woken again.
        let mut cx = Context::from_waker(&good);
        assert!(set
            .poll_until(&mut cx, &mut slots[1], || false, || None::<()>)
            .is_pending());
        set.notify_all();
        assert_eq!(count.0.load(Ordering::Relaxed), 2);
    }

    /// A waker holding the last reference to its task, whose drop drops a future
    /// registered in the same set, which cancels its registration there (as a pending task
    /// of an executor that keeps its tasks alive only through their wakers is dropped).
    struct ReentrantDrop {
        set: Arc<WaitSet>,
        slot: WakerSlot,
    }

    impl std::task::Wake for ReentrantDrop {
        fn wake(self: std::sync::Arc<Self>) {}
    }

    impl Drop for ReentrantDrop {
        fn drop(&mut self) {
            self.set.cancel_waker(&mut self.slot);
        }
    }

    /// A waker registered in `set` that only the set references, and whose drop cancels
    /// another registration in `set`.
    fn reentrant_waker_in(set: &Arc<WaitSet>, slot: &mut WakerSlot) {
        let (_, other) = counting_waker();
        let mut inner = WakerSlot::new();
        set.register_waker(&mut inner, &other);
        let waker = Waker::from(std::sync::Arc::new(ReentrantDrop {
            set: Arc::clone(set),
            slot: inner,
        }));
        set.register_waker(slot, &waker);
    }

    /// Runs `f` on a thread and fails if it has not returned within a few seconds (a
    /// deadlock).
    fn returns(what: &str, f: impl FnOnce() + Send + 'static) {
        let (done, finished) = std::sync::mpsc::channel();
        thread::spawn_named("reentrant".into(), move || {
            f();
            done.send(()).unwrap();
        })
        .unwrap();
        assert!(
            finished.recv_timeout(Duration::from_secs(5)).is_ok(),
            "{what} deadlocked"
        );
    }

    /// Dropping a waker runs the task's code (its last reference may go with it): the set
    /// drops the wakers it removes or replaces after it has released its lock.
    #[test]
    fn a_waker_the_set_drops_may_use_the_set() {
        let set = Arc::new(WaitSet::new());
        let mut slot = WakerSlot::new();
        reentrant_waker_in(&set, &mut slot);
        let s = Arc::clone(&set);
        returns("cancel_waker", move || s.cancel_waker(&mut slot));
        assert!(!set.has_waiters());

        let mut slot = WakerSlot::new();
        reentrant_waker_in(&set, &mut slot);
        let s = Arc::clone(&set);
        returns("register_waker replacing the waker", move || {
            let (_, another) = counting_waker();
            s.register_waker(&mut slot, &another);
            s.cancel_waker(&mut slot);
        });
        assert!(!set.has_waiters());
    }

    /// A task polled again before any wake-up (a spurious poll) is still registered, and
    /// counted since the heavy fence of its first poll: the refresh pays no second
    /// `membarrier` (a barrier on every CPU running the process). A registration made anew
    /// after a wake-up does.
    #[test]
    fn a_spurious_poll_with_light_notifiers_issues_no_heavy_fence() {
        let heavy = || asym_fence::HEAVY_CALLS.with(|n| n.get());
        let set = WaitSet::new();
        let (count, waker) = counting_waker();
        let (_, other) = counting_waker();
        let mut slot = WakerSlot::new();
        let before = heavy();
        for w in [&waker, &waker, &other, &waker] {
            let mut cx = Context::from_waker(w);
            assert!(set
                .poll_until(&mut cx, &mut slot, || true, || None::<()>)
                .is_pending());
        }
        assert_eq!(heavy() - before, 1, "a refreshed registration fenced again");
        assert_eq!(set.waiters.load(Ordering::Relaxed), 1);
        set.notify_all_light();
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        let mut cx = Context::from_waker(&waker);
        assert!(set
            .poll_until(&mut cx, &mut slot, || true, || None::<()>)
            .is_pending());
        assert_eq!(
            heavy() - before,
            2,
            "a new registration completes the handshake"
        );
        set.cancel_waker(&mut slot);
        assert!(!set.has_waiters());
    }

    #[test]
    fn deadline_ends_the_wait_with_a_last_check() {
        let set = WaitSet::new();
        let deadline = time::deadline_after(Duration::from_millis(2));
        assert_eq!(set.wait_until(deadline, || None::<()>), None);
        let mut calls = 0;
        let past = Some(Instant::now());
        assert_eq!(
            set.wait_until(past, || {
                calls += 1;
                (calls == 2).then_some(calls)
            }),
            Some(2)
        );
    }
}

/// Loom models of the wait set itself (crate-private, so they live here rather than in
/// `loom-tests/`; the test script runs them with the other models).
#[cfg(all(test, logbus_loom))]
mod loom_models {
    use super::*;
    use crate::sync::atomic::AtomicBool;
    use crate::sync::{thread, Arc};

    /// A wait set, a flag, and a thread that sets the flag, then notifies the set.
    fn flag_set_by_a_notifier() -> (Arc<WaitSet>, Arc<AtomicBool>, thread::JoinHandle<()>) {
        let set = Arc::new(WaitSet::new());
        let flag = Arc::new(AtomicBool::new(false));
        let (s, f) = (Arc::clone(&set), Arc::clone(&flag));
        let notifier = thread::spawn(move || {
            f.store(true, Ordering::Release);
            s.notify_all();
        });
        (set, flag, notifier)
    }

    /// A notification racing a waiter's registration is never lost: loom reports a deadlock
    /// if the waiter could sleep forever.
    #[test]
    fn no_lost_wake_up() {
        loom::model(|| {
            let (set, flag, notifier) = flag_set_by_a_notifier();
            let got = set.wait_until(None, || flag.load(Ordering::Acquire).then_some(()));
            assert_eq!(got, Some(()));
            notifier.join().unwrap();
        });
    }

    /// A wake-up for nothing takes the waiter off the count, and a notifier that then
    /// finds no waiter skips its wake-up: the waiter must count itself again, with the
    /// fence, before it checks. A first notifier wakes it with its flag unset; a second sets
    /// the flag and notifies. Loom reports a deadlock if the waiter could sleep forever.
    #[test]
    fn a_waiter_woken_for_nothing_counts_again() {
        loom::model(|| {
            let set = Arc::new(WaitSet::new());
            let flag = Arc::new(AtomicBool::new(false));
            let nothing = {
                let s = Arc::clone(&set);
                thread::spawn(move || s.notify_all())
            };
            let (s, f) = (Arc::clone(&set), Arc::clone(&flag));
            let setter = thread::spawn(move || {
                f.store(true, Ordering::Release);
                s.notify_all();
            });
            let got = set.wait_until(None, || flag.load(Ordering::Acquire).then_some(()));
            assert_eq!(got, Some(()));
            nothing.join().unwrap();
            setter.join().unwrap();
            // Nobody waits any more: the count is back to zero.
            assert_eq!(set.waiters.load(Ordering::Relaxed), 0);
        });
    }

    /// A timed wait may expire at any point; when it reports `None` the flag was not yet set
    /// at its last check, and when it reports `Some` the flag was set.
    #[test]
    fn timed_wait_expiry_races_notification() {
        loom::model(|| {
            let (set, flag, notifier) = flag_set_by_a_notifier();
            let deadline = Some(Instant::now());
            let got = set.wait_until(deadline, || flag.load(Ordering::Acquire).then_some(()));
            notifier.join().unwrap();
            if got.is_some() {
                assert!(flag.load(Ordering::Relaxed));
            }
        });
    }

    /// A task polling for the flag while a notifier sets it: the task is never left
    /// pending with nobody to wake it (loom reports a deadlock in `block_on` if it could
    /// be), and it registers at most once per wake-up.
    #[test]
    fn no_lost_wake_up_of_a_task() {
        loom::model(|| {
            let (set, flag, notifier) = flag_set_by_a_notifier();
            loom::future::block_on(FlagFuture::new(&set, &flag));
            notifier.join().unwrap();
            assert_eq!(set.waiters.load(Ordering::Relaxed), 0);
        });
    }

    /// As `no_lost_wake_up_of_a_task`, with a notifier using the light fence: the task's
    /// registration completes the handshake with the heavy one. Key ordering: that heavy
    /// fence, after a registration made anew.
    #[test]
    fn no_lost_wake_up_of_a_task_with_a_light_notifier() {
        loom::model(|| {
            let (set, flag, notifier) = flag_set_by_a_light_notifier();
            loom::future::block_on(FlagFuture::light(&set, &flag, 0));
            notifier.join().unwrap();
            assert_eq!(set.waiters.load(Ordering::Relaxed), 0);
        });
    }

    /// A task polled again before any wake-up (a spurious poll) refreshes its registration
    /// without a heavy fence, against a notifier using the light fence: no wake-up is lost
    /// (loom reports a deadlock in `block_on` if one could be).
    #[test]
    fn a_refreshed_registration_needs_no_second_heavy_fence() {
        loom::model(|| {
            let (set, flag, notifier) = flag_set_by_a_light_notifier();
            loom::future::block_on(FlagFuture::light(&set, &flag, 1));
            notifier.join().unwrap();
            assert_eq!(set.waiters.load(Ordering::Relaxed), 0);
        });
    }

    /// A wait set, a flag, and a thread that sets the flag, then notifies the set with the
    /// light fence.
    fn flag_set_by_a_light_notifier() -> (Arc<WaitSet>, Arc<AtomicBool>, thread::JoinHandle<()>) {
        let set = Arc::new(WaitSet::new());
        let flag = Arc::new(AtomicBool::new(false));
        let (s, f) = (Arc::clone(&set), Arc::clone(&flag));
        let notifier = thread::spawn(move || {
            f.store(true, Ordering::Release);
            s.notify_all_light();
        });
        (set, flag, notifier)
    }

    /// Two tasks on two threads wait for one flag: one notification wakes both.
    #[test]
    fn one_wake_up_reaches_every_waiting_task() {
        loom::model(|| {
            let (set, flag, notifier) = flag_set_by_a_notifier();
            let other = {
                let (s, f) = (Arc::clone(&set), Arc::clone(&flag));
                thread::spawn(move || loom::future::block_on(FlagFuture::new(&s, &f)))
            };
            loom::future::block_on(FlagFuture::new(&set, &flag));
            other.join().unwrap();
            notifier.join().unwrap();
        });
    }

    /// A task registers, then its future is dropped (cancelled) while a notifier wakes the
    /// set; a parked thread waiting on the same set still gets its wake-up, and the count
    /// of waiters ends at zero whichever came first.
    #[test]
    fn cancellation_racing_a_wake_up_loses_nothing() {
        loom::model(|| {
            let (set, flag, notifier) = flag_set_by_a_notifier();
            let canceller = {
                let (s, f) = (Arc::clone(&set), Arc::clone(&flag));
                thread::spawn(move || {
                    let waker = futures_noop_waker();
                    let mut cx = Context::from_waker(&waker);
                    let mut fut = FlagFuture::new(&s, &f);
                    let _ = std::pin::Pin::new(&mut fut).poll(&mut cx);
                    drop(fut);
                })
            };
            let got = set.wait_until(None, || flag.load(Ordering::Acquire).then_some(()));
            assert_eq!(got, Some(()));
            canceller.join().unwrap();
            notifier.join().unwrap();
            assert_eq!(set.waiters.load(Ordering::Relaxed), 0);
        });
    }

    use std::future::Future;
    use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};

    /// A waker that does nothing (the canceller never waits for it).
    fn futures_noop_waker() -> Waker {
        const VTABLE: RawWakerVTable = RawWakerVTable::new(
            |_| RawWaker::new(std::ptr::null(), &VTABLE),
            |_| {},
            |_| {},
            |_| {},
        );
        // SAFETY: every function of the vtable ignores the data pointer, so any pointer
        // (here null) is valid for it; nothing is ever dereferenced.
        unsafe { Waker::from_raw(RawWaker::new(std::ptr::null(), &VTABLE)) }
    }

    /// Ready once the flag is set; cancels its registration when dropped.
    struct FlagFuture<'a> {
        set: &'a WaitSet,
        flag: &'a AtomicBool,
        slot: WakerSlot,
        /// Whether the notifier uses the light fence.
        light: bool,
        /// Polls left that, finding the flag unset, poll again at once (spurious polls).
        again: usize,
    }

    impl<'a> FlagFuture<'a> {
        fn new(set: &'a WaitSet, flag: &'a AtomicBool) -> Self {
            Self {
                set,
                flag,
                slot: WakerSlot::new(),
                light: false,
                again: 0,
            }
        }

        /// For a notifier using the light fence, polling again at once `again` times.
        fn light(set: &'a WaitSet, flag: &'a AtomicBool, again: usize) -> Self {
            Self {
                set,
                flag,
                slot: WakerSlot::new(),
                light: true,
                again,
            }
        }
    }

    impl Future for FlagFuture<'_> {
        type Output = ();
        fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            let this = &mut *self;
            let (flag, light) = (this.flag, this.light);
            loop {
                let polled = this.set.poll_until(
                    cx,
                    &mut this.slot,
                    || light,
                    || flag.load(Ordering::Acquire).then_some(()),
                );
                if polled.is_ready() || this.again == 0 {
                    return polled;
                }
                this.again -= 1;
            }
        }
    }

    impl Drop for FlagFuture<'_> {
        fn drop(&mut self) {
            self.set.cancel_waker(&mut self.slot);
        }
    }
}
