//! Isolating a panicking subscriber: the panic is caught, counted, and reported to the
//! bus's error hook; the other subscribers still run.

use std::any::Any;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::{Arc, Mutex};

/// What the error hook is told when a subscriber's callback panics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriberPanic {
    /// The [`Subscription::id`](super::Subscription::id) of the subscriber that panicked.
    pub subscriber: u64,
    /// The panic message (`"<non-string panic payload>"` when it was not a string).
    pub message: String,
}

impl fmt::Display for SubscriberPanic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "subscriber {} panicked: {} (the event was skipped for it; other subscribers ran)",
            self.subscriber, self.message
        )
    }
}

impl std::error::Error for SubscriberPanic {}

/// The user's error hook.
pub(crate) type Hook = Arc<Box<dyn Fn(&SubscriberPanic) + Send + Sync>>;

/// Counts panics and forwards them to the hook; shared by the bus and its worker threads.
#[derive(Default)]
pub(crate) struct Reporter {
    panics: AtomicU64,
    hook: Mutex<Option<Hook>>,
}

/// Per-subscriber counters, shared by its [`Subscription`](super::Subscription), the bus
/// and its worker thread.
#[derive(Default, Debug)]
pub(crate) struct Stats {
    pub(crate) delivered: AtomicU64,
    pub(crate) panics: AtomicU64,
    pub(crate) dropped: AtomicU64,
}

fn message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "<non-string panic payload>".to_string()
    }
}

/// Drops a panic payload without letting a panic escape: its `Drop` runs inside
/// `catch_unwind`, and when that panics too, the payload of that second panic is leaked
/// rather than dropped (its `Drop` may panic in turn, without end; a leak is bounded).
pub(crate) fn dispose(payload: Box<dyn Any + Send>) {
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(again);
    }
}

impl Reporter {
    pub(crate) fn set_hook(&self, hook: Option<Hook>) {
        *self.hook.lock() = hook;
    }

    pub(crate) fn panics(&self) -> u64 {
        // Relaxed: a statistic; no other data is published through it.
        self.panics.load(Ordering::Relaxed)
    }

    /// Runs `callback` for subscriber `id`, catching a panic; `true` when it returned.
    pub(crate) fn run(&self, id: u64, stats: &Stats, callback: impl FnOnce()) -> bool {
        match catch_unwind(AssertUnwindSafe(callback)) {
            Ok(()) => {
                // Relaxed: a statistic.
                stats.delivered.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(payload) => {
                // Relaxed: statistics.
                stats.panics.fetch_add(1, Ordering::Relaxed);
                self.panics.fetch_add(1, Ordering::Relaxed);
                let report = SubscriberPanic {
                    subscriber: id,
                    message: message(&*payload),
                };
                // Clone the hook out so that it runs with no lock held (it may set a new one).
                let hook = self.hook.lock().clone();
                if let Some(hook) = hook {
                    // A panicking hook must not take the publisher down either, nor may
                    // dropping the hook (the last clone, if it was replaced meanwhile).
                    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || {
                        hook(&report);
                        drop(hook);
                    })) {
                        dispose(payload);
                    }
                }
                dispose(payload);
                false
            }
        }
    }
}
