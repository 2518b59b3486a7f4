//! The subscriber registry: a copy-on-write list, so that publishing runs every callback
//! with no lock held.

use std::fmt;

use super::report::{Hook, Reporter, SubscriberPanic};
use super::subscriber::{Callback, Delivery, Stop, Subscriber};
use super::subscription::Subscription;
use crate::error::{Error, Result};
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::thread::{self, JoinHandle};
use crate::sync::{Arc, Mutex};

/// State shared by the bus, its subscriptions and its worker threads.
pub(crate) struct Shared<T> {
    /// The current subscribers. Replaced (never mutated in place) on every change, so a
    /// publish clones the `Arc` under the lock and iterates with the lock released. (An
    /// `Arc<Vec<_>>` rather than an `Arc<[_]>`: loom's `Arc` holds only sized values.)
    subscribers: Mutex<Arc<Vec<Arc<Subscriber<T>>>>>,
    next_id: AtomicU64,
    pub(crate) reporter: Arc<Reporter>,
    /// Worker threads of subscriptions dropped inside their own callback, to be joined;
    /// the flag is set once the bus is dropped (nobody would join them any more).
    orphans: Mutex<(bool, Vec<JoinHandle<()>>)>,
}

impl<T> Shared<T> {
    /// Removes subscriber `id` from the list (publishes already running keep their snapshot).
    pub(crate) fn remove(&self, id: u64) {
        let mut list = self.subscribers.lock();
        if list.iter().any(|s| s.id == id) {
            let kept: Vec<_> = list.iter().filter(|s| s.id != id).cloned().collect();
            let old = std::mem::replace(&mut *list, Arc::new(kept));
            drop(list);
            drop(old);
        }
    }

    /// Takes over a worker thread that could not join itself.
    pub(crate) fn adopt(&self, handle: JoinHandle<()>) {
        let mut orphans = self.orphans.lock();
        if orphans.0 {
            // The bus is gone: the thread ends as soon as the callback calling this returns.
            drop(orphans);
            drop(handle);
        } else {
            orphans.1.push(handle);
        }
    }

    /// Joins the adopted threads (all of them have been told to stop).
    fn join_orphans(&self, closing: bool) {
        let orphans = {
            let mut orphans = self.orphans.lock();
            orphans.0 |= closing;
            std::mem::take(&mut orphans.1)
        };
        for h in orphans {
            if h.thread().id() != thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

/// A publish/subscribe bus: every event published reaches every current subscriber.
///
/// See the [module documentation](super) for the delivery guarantees.
pub struct EventBus<T> {
    shared: Arc<Shared<T>>,
}

impl<T: Clone + Send + 'static> EventBus<T> {
    /// An empty bus.
    pub fn new() -> Self {
        Self {
            shared: Arc::new(Shared {
                subscribers: Mutex::new(Arc::new(Vec::new())),
                next_id: AtomicU64::new(1),
                reporter: Arc::new(Reporter::default()),
                orphans: Mutex::new((false, Vec::new())),
            }),
        }
    }

    /// Subscribes `callback`, run on the publisher's thread ([`Delivery::Sync`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::observer::EventBus;
    ///
    /// let bus = EventBus::new();
    /// let (seen, log) = logbus::queue::bounded(8);
    /// let sub = bus.subscribe(move |e: &u32| seen.send(*e).unwrap());
    /// bus.publish(2);
    /// drop(sub); // drops the callback, and with it `seen`
    /// bus.publish(40); // nobody listens any more
    /// assert_eq!(log.iter().collect::<Vec<_>>(), [2]);
    /// ```
    pub fn subscribe<F>(&self, callback: F) -> Subscription
    where
        F: Fn(&T) + Send + Sync + 'static,
    {
        let id = self.next_id();
        self.register(Subscriber::new_sync(id, Arc::new(Box::new(callback))))
    }

    /// Subscribes `callback` with the given [`Delivery`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when an asynchronous buffer's capacity is 0;
    /// [`Error::Io`] when the subscriber's thread cannot be spawned.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::mpsc;
    /// use logbus::observer::{Delivery, EventBus, Overflow};
    ///
    /// let bus = EventBus::new();
    /// let (tx, rx) = mpsc::channel();
    /// let sub = bus
    ///     .subscribe_with(Delivery::Async { capacity: 16, overflow: Overflow::Block }, move |e: &String| {
    ///         tx.send(e.clone()).unwrap();
    ///     })
    ///     .unwrap();
    /// bus.publish("hello".to_string());
    /// assert_eq!(rx.recv().unwrap(), "hello"); // delivered on the subscriber's own thread
    /// drop(sub); // stops and joins that thread
    /// ```
    pub fn subscribe_with<F>(&self, delivery: Delivery, callback: F) -> Result<Subscription>
    where
        F: Fn(&T) + Send + Sync + 'static,
    {
        let id = self.next_id();
        let callback: Callback<T> = Arc::new(Box::new(callback));
        let sub = match delivery {
            Delivery::Sync => Subscriber::new_sync(id, callback),
            Delivery::Async { capacity: 0, .. } => {
                return Err(Error::InvalidConfig {
                    name: "Delivery::Async::capacity",
                    value: "0".to_string(),
                    valid: "at least 1 buffered event".to_string(),
                })
            }
            Delivery::Async { capacity, overflow } => Subscriber::new_async(
                id,
                callback,
                capacity,
                overflow,
                Arc::clone(&self.shared.reporter),
            )
            .map_err(|e| Error::io(format!("spawning the thread of subscriber {id}"), e))?,
        };
        Ok(self.register(sub))
    }

    fn next_id(&self) -> u64 {
        // Relaxed: only uniqueness matters, which the RMW gives.
        self.shared.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn register(&self, sub: Subscriber<T>) -> Subscription {
        self.shared.join_orphans(false);
        let sub = Arc::new(sub);
        {
            let mut list = self.shared.subscribers.lock();
            let mut grown: Vec<_> = list.iter().cloned().collect();
            grown.push(Arc::clone(&sub));
            let old = std::mem::replace(&mut *list, Arc::new(grown));
            drop(list);
            drop(old);
        }
        Subscription::new(&self.shared, sub)
    }

    /// Publishes `event` to every current subscriber and returns how many it reached
    /// (delivered, for synchronous ones; buffered, for asynchronous ones). Synchronous
    /// callbacks run here, in subscription order, with no lock held; a panicking callback is
    /// caught, counted and reported to the [error hook](Self::set_error_hook), and the
    /// others still run. With [`Overflow::Block`](super::Overflow::Block) this waits while
    /// an asynchronous subscriber's buffer is full.
    ///
    /// Allocates nothing (asynchronous subscribers get a clone of `event`).
    pub fn publish(&self, event: T) -> usize {
        let snapshot = Arc::clone(&*self.shared.subscribers.lock());
        let reporter = &*self.shared.reporter;
        snapshot
            .iter()
            .filter(|s| s.deliver(&event, reporter))
            .count()
    }

    /// The number of current subscribers.
    pub fn subscriber_count(&self) -> usize {
        self.shared.subscribers.lock().len()
    }

    /// Callbacks that panicked so far, over all subscribers.
    pub fn panic_count(&self) -> u64 {
        self.shared.reporter.panics()
    }

    /// Sets the function told about every panicking callback (it runs on the thread where
    /// the callback ran; a panic inside it is caught and ignored). Replaces any earlier hook.
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::observer::EventBus;
    ///
    /// let bus = EventBus::new();
    /// let (report, reports) = logbus::queue::bounded(8);
    /// bus.set_error_hook(move |p| report.send(p.message.clone()).unwrap());
    /// let _bad = bus.subscribe(|_: &u8| panic!("bad subscriber"));
    /// assert_eq!(bus.publish(1), 0);
    /// assert_eq!(reports.try_recv().unwrap(), "bad subscriber");
    /// assert_eq!(bus.panic_count(), 1);
    /// ```
    pub fn set_error_hook<H>(&self, hook: H)
    where
        H: Fn(&SubscriberPanic) + Send + Sync + 'static,
    {
        let hook: Hook = Arc::new(Box::new(hook));
        self.shared.reporter.set_hook(Some(hook));
    }

    /// Removes the error hook (panics are still caught and counted).
    pub fn clear_error_hook(&self) {
        self.shared.reporter.set_hook(None);
    }
}

impl<T: Clone + Send + 'static> Default for EventBus<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Drop for EventBus<T> {
    /// Removes every subscriber; asynchronous ones deliver what is already buffered, then
    /// their threads are joined.
    fn drop(&mut self) {
        let list = {
            let mut list = self.shared.subscribers.lock();
            std::mem::replace(&mut *list, Arc::new(Vec::new()))
        };
        for sub in list.iter() {
            sub.deactivate();
        }
        for sub in list.iter() {
            if let Some(own) = sub.stop(Stop::Drain) {
                // Dropped from inside one of its own asynchronous callbacks: that thread
                // ends when the callback returns; it cannot join itself.
                drop(own);
            }
        }
        self.shared.join_orphans(true);
    }
}

impl<T> fmt::Debug for EventBus<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventBus")
            .field("subscribers", &self.shared.subscribers.lock().len())
            .field("panics", &self.shared.reporter.panics())
            .finish()
    }
}
