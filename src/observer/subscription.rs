//! The guard returned by `subscribe`: dropping it unsubscribes.

use std::fmt;

use super::bus::Shared;
use super::subscriber::Subscriber;
use crate::sync::atomic::Ordering;
use crate::sync::Arc;

/// A live subscription. Dropping it (or calling [`unsubscribe`](Self::unsubscribe))
/// removes the subscriber: publishes that start afterwards skip it. An asynchronous
/// subscriber's buffer is closed and its thread delivers what was already buffered (nothing
/// is discarded), then ends; `drop` returns once it has ended — unless the subscription is
/// dropped inside a callback of an asynchronous subscriber (this one's or another one's),
/// on that subscriber's thread: then `drop` returns at once, the thread finishes delivering
/// on its own, and the bus joins it later (once finished, at a subscribe or unsubscribe, or
/// when the bus is dropped).
///
/// Dropping the guard from inside any callback is allowed and does not deadlock.
#[must_use = "dropping the subscription unsubscribes at once"]
pub struct Subscription {
    pub(crate) id: u64,
    pub(crate) leave: Option<Box<dyn FnOnce() + Send + Sync>>,
    pub(crate) stats: Arc<super::report::Stats>,
}

impl Subscription {
    /// Builds the guard for `sub`, registered in `bus`.
    pub(crate) fn new<T: Send + 'static>(bus: &Arc<Shared<T>>, sub: Arc<Subscriber<T>>) -> Self {
        let bus = Arc::clone(bus);
        let id = sub.id;
        let stats = Arc::clone(&sub.stats);
        Self {
            id,
            stats,
            leave: Some(Box::new(move || bus.leave(&sub))),
        }
    }

    /// This subscriber's identifier (unique within its bus), as reported to the error hook.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Events whose callback returned normally.
    pub fn delivered(&self) -> u64 {
        // Relaxed: a statistic.
        self.stats.delivered.load(Ordering::Relaxed)
    }

    /// Events whose callback panicked.
    pub fn panics(&self) -> u64 {
        // Relaxed: a statistic.
        self.stats.panics.load(Ordering::Relaxed)
    }

    /// Events dropped from the buffer because it was full ([`SlowSubscriberPolicy::DropOldest`]).
    ///
    /// [`SlowSubscriberPolicy::DropOldest`]: super::SlowSubscriberPolicy::DropOldest
    pub fn dropped(&self) -> u64 {
        // Relaxed: a statistic.
        self.stats.dropped.load(Ordering::Relaxed)
    }

    /// Unsubscribes (the same as dropping the guard).
    pub fn unsubscribe(self) {}
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(leave) = self.leave.take() {
            leave();
        }
    }
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription")
            .field("id", &self.id)
            .field("delivered", &self.delivered())
            .field("panics", &self.panics())
            .field("dropped", &self.dropped())
            .finish()
    }
}
