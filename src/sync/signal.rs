//! A one-shot wake-up flag a thread parks on while it waits for any of several things (a
//! `select` over several queues): each queue it watches holds the signal and raises it
//! when it makes progress (`WaitSet::watch`).

use super::time::{self, Instant};
use super::{Arc, Condvar, Mutex};

/// Raised by any notifier, waited on by one thread.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    raised: Mutex<bool>,
    cond: Condvar,
}

impl Signal {
    /// A lowered signal. On the std build each thread keeps one ([`Signal::for_this_thread`]),
    /// so a blocking select allocates nothing.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// This thread's signal, lowered. Under loom a new one each time (loom forbids state that
    /// outlives a model's execution).
    pub(crate) fn for_this_thread() -> Arc<Self> {
        #[cfg(not(logbus_loom))]
        {
            thread_local! {
                static SIGNAL: Arc<Signal> = Signal::new();
            }
            // A thread-local destructor may select after the slot is gone: a fresh signal.
            let s = SIGNAL
                .try_with(Arc::clone)
                .unwrap_or_else(|_| Signal::new());
            s.lower();
            s
        }
        #[cfg(logbus_loom)]
        Signal::new()
    }

    /// Raises the signal and wakes its waiter.
    pub(crate) fn raise(&self) {
        let mut raised = self.raised.lock();
        *raised = true;
        self.cond.notify_all();
    }

    /// Lowers the signal (before the waiter registers it anywhere).
    #[cfg(not(logbus_loom))]
    fn lower(&self) {
        *self.raised.lock() = false;
    }

    /// Parks until the signal is raised (`true`) or `deadline` passes (`false`, unless it was
    /// raised meanwhile). The flag is read under the lock `raise` takes, so a raise between
    /// the caller's last check and this wait is not lost.
    pub(crate) fn wait(&self, deadline: Option<Instant>) -> bool {
        let mut raised = self.raised.lock();
        loop {
            if *raised {
                return true;
            }
            match deadline {
                None => self.cond.wait(&mut raised),
                Some(d) => {
                    if time::expired(d) || self.cond.wait_until(&mut raised, d) {
                        return *raised;
                    }
                }
            }
        }
    }
}

#[cfg(not(logbus_loom))]
impl std::task::Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.raise();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.raise();
    }
}

/// Runs `future` to completion on this thread, parking on its signal while it is pending
/// and polling it again at least every `every` (for futures that look at something no
/// wake-up announces, such as a clock): for a blocking method that shares its logic with
/// its future (one protocol, one place). Under loom, loom's own `block_on`.
pub(crate) fn block_on<F: std::future::Future>(future: F, every: time::Duration) -> F::Output {
    #[cfg(logbus_loom)]
    {
        let _ = every;
        loom::future::block_on(future)
    }
    #[cfg(not(logbus_loom))]
    {
        let mut future = std::pin::pin!(future);
        let signal = Signal::new();
        let waker = std::task::Waker::from(Arc::clone(&signal));
        let mut cx = std::task::Context::from_waker(&waker);
        loop {
            signal.lower();
            if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
                return out;
            }
            // A wake-up during the poll left the signal raised: no wait then.
            signal.wait(time::deadline_after(every));
        }
    }
}
