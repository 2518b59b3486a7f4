//! The subscriber registry: a copy-on-write list, so that publishing runs every callback
//! with no lock held.

use std::fmt;

use super::report::{Hook, Reporter, Stats, SubscriberPanic};
use super::stream::EventStream;
use super::subscriber::{Callback, Delivery, Feed, SlowSubscriberPolicy, Subscriber, WorkerThread};
use super::subscription::Subscription;
use crate::error::{Error, Result};
use crate::ring::{LapPolicy, Ring, RingConfig, Start};
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::thread;
use crate::sync::{Arc, Mutex};

/// State shared by the bus, its subscriptions and its worker threads.
pub(crate) struct Shared<T> {
    /// The current subscribers. Replaced (never mutated in place) on every change, so a
    /// publish clones the `Arc` under the lock and iterates with the lock released. (An
    /// `Arc<Vec<_>>` rather than an `Arc<[_]>`: loom's `Arc` holds only sized values.)
    subscribers: Mutex<Arc<Vec<Arc<Subscriber<T>>>>>,
    next_id: AtomicU64,
    pub(crate) reporter: Arc<Reporter>,
    /// Every asynchronous subscriber's thread not yet joined, `(subscriber id, thread)`,
    /// from its subscribe on: one that left where joining it could deadlock stays here until
    /// it has finished (or the bus is dropped), so a thread is always either here or with
    /// whoever joins it.
    threads: Mutex<Vec<(u64, WorkerThread)>>,
}

impl<T> Shared<T> {
    /// Removes subscriber `id` from the list (publishes already running keep their snapshot).
    fn remove(&self, id: u64) {
        let mut list = self.subscribers.lock();
        if list.iter().any(|s| s.id == id) {
            let kept: Vec<_> = list.iter().filter(|s| s.id != id).cloned().collect();
            let old = std::mem::replace(&mut *list, Arc::new(kept));
            drop(list);
            drop(old);
        }
    }

    /// Unsubscribes `sub`: no publish starting from now reaches it; an asynchronous one's
    /// buffer is closed (its thread delivers what is buffered, then ends) and its thread is
    /// joined — except on a subscriber's thread, which must never wait for another one to
    /// end (that one may be waiting for room in its buffer): the thread is then left to the
    /// bus, joined once finished.
    pub(crate) fn leave(&self, sub: &Subscriber<T>) {
        sub.close();
        self.remove(sub.id);
        if !sub.is_async() {
            return;
        }
        let worker = {
            let mut threads = self.threads.lock();
            let Some(k) = threads.iter().position(|(id, _)| *id == sub.id) else {
                // Taken by the bus's drop, which joins it.
                return;
            };
            if threads[k].1.is_current() || thread::is_drainer() {
                None
            } else {
                Some(threads.swap_remove(k).1)
            }
        };
        if let Some(worker) = worker {
            worker.join();
        }
        self.reap();
    }

    /// Joins the threads that have finished (which waits for nobody): only subscribers that
    /// left, or whose buffer the bus's drop closed, finish.
    fn reap(&self) {
        let finished: Vec<_> = {
            let mut threads = self.threads.lock();
            let (done, running) = std::mem::take(&mut *threads)
                .into_iter()
                .partition(|(_, w)| w.is_done());
            *threads = running;
            done
        };
        for (_, worker) in finished {
            worker.join();
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
                threads: Mutex::new(Vec::new()),
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
    /// use logbus::observer::{Delivery, EventBus, SlowSubscriberPolicy};
    ///
    /// let bus = EventBus::new();
    /// let (tx, rx) = mpsc::channel();
    /// let sub = bus
    ///     .subscribe_with(Delivery::Async { capacity: 16, overflow: SlowSubscriberPolicy::Block }, move |e: &String| {
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
            Delivery::Async { capacity, overflow } => {
                let (sub, worker) = Subscriber::new_async(
                    id,
                    callback,
                    capacity,
                    overflow,
                    Arc::clone(&self.shared.reporter),
                )
                .map_err(|e| Error::io(format!("spawning the thread of subscriber {id}"), e))?;
                // The bus is alive (`&self`): its drop has not taken the threads yet.
                self.shared.threads.lock().push((id, worker));
                sub
            }
        };
        Ok(self.register(sub))
    }

    /// Subscribes a [`Stream`](futures_core::Stream) of events, for async code: an
    /// [`EventStream`] that yields each event published from now on, in order, and ends once
    /// the bus is dropped and the stream has yielded what was buffered. Dropping the stream
    /// unsubscribes.
    ///
    /// Events wait for the stream in a ring of `capacity` rounded up to a power of two (at
    /// least 2). When it is full, `overflow` decides, as for [`Delivery::Async`]:
    /// [`SlowSubscriberPolicy::Block`] makes `publish` wait until the stream takes an event
    /// or is dropped; [`SlowSubscriberPolicy::DropOldest`] overwrites the oldest events,
    /// which the stream skips and counts in [`EventStream::dropped`] (as
    /// [`Subscription::dropped`] does for a callback) when it reaches the gap. Nothing is
    /// lost silently: once the bus is gone and the stream ended, what it yielded plus what
    /// it dropped is every event published to it.
    ///
    /// The stream needs no runtime (any executor's waker does) and no thread of its own.
    /// `publish` wakes the stream's task while it holds the stream's feed: a waker that
    /// publishes to this bus from inside `wake` (an executor that polls the task inline)
    /// would wait for itself. Executors that schedule the task (tokio, smol,
    /// `futures::executor`) never do.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when `capacity` is 0 or above 2^32.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures::StreamExt;
    /// use logbus::observer::{EventBus, SlowSubscriberPolicy};
    /// use std::thread;
    ///
    /// let bus = EventBus::new();
    /// let mut events = bus.subscribe_stream(16, SlowSubscriberPolicy::Block)?;
    /// let t = thread::spawn(move || {
    ///     for i in 0..100u32 {
    ///         bus.publish(i); // waits while 16 events wait for the stream
    ///     }
    /// }); // dropping the bus ends the stream once it is drained
    /// let sum = futures::executor::block_on(async {
    ///     let mut sum = 0;
    ///     while let Some(e) = events.next().await {
    ///         sum += e;
    ///     }
    ///     sum
    /// });
    /// t.join().unwrap();
    /// assert_eq!(sum, 4950);
    /// assert_eq!(events.dropped(), 0);
    /// # Ok::<(), logbus::Error>(())
    /// ```
    pub fn subscribe_stream(
        &self,
        capacity: usize,
        overflow: SlowSubscriberPolicy,
    ) -> Result<EventStream<T>>
    where
        T: Sync,
    {
        if capacity == 0 || capacity > 1 << 32 {
            return Err(Error::InvalidConfig {
                name: "subscribe_stream capacity",
                value: capacity.to_string(),
                valid: "1..=2^32 buffered events".to_string(),
            });
        }
        let lap = match overflow {
            SlowSubscriberPolicy::Block => LapPolicy::Block,
            SlowSubscriberPolicy::DropOldest => LapPolicy::DropOldest,
        };
        let config = RingConfig::new(capacity.next_power_of_two().max(2)).overflow(lap);
        let (producer, ring) = Ring::single_producer(config)?;
        let reader = match overflow {
            SlowSubscriberPolicy::Block => ring.gating_reader(Start::Tail)?,
            SlowSubscriberPolicy::DropOldest => ring.reader(Start::Tail)?,
        };
        // One producer handle for every publishing thread: the lock serialises them (a
        // publish waiting for room holds it, and the others would wait for the same room).
        let producer = Mutex::new(producer);
        let feed = Feed {
            push: Box::new(move |event: &T| producer.lock().publish(event.clone()).is_ok()),
            close: Box::new(move || ring.close()),
        };
        let id = self.next_id();
        let stats = Arc::new(Stats::default());
        let sub = self.add(Subscriber::new_stream(id, feed, Arc::clone(&stats)));
        Ok(EventStream::new(&self.shared, sub, reader, stats))
    }

    fn next_id(&self) -> u64 {
        // Relaxed: only uniqueness matters, which the RMW gives.
        self.shared.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn register(&self, sub: Subscriber<T>) -> Subscription {
        let sub = self.add(sub);
        Subscription::new(&self.shared, sub)
    }

    /// Adds `sub` to the list: publishes that start from now on reach it.
    fn add(&self, sub: Subscriber<T>) -> Arc<Subscriber<T>> {
        self.shared.reap();
        let sub = Arc::new(sub);
        {
            let mut list = self.shared.subscribers.lock();
            let mut grown: Vec<_> = list.iter().cloned().collect();
            grown.push(Arc::clone(&sub));
            let old = std::mem::replace(&mut *list, Arc::new(grown));
            drop(list);
            drop(old);
        }
        sub
    }

    /// Publishes `event` to every current subscriber and returns how many it reached
    /// (delivered, for synchronous ones; buffered, for asynchronous ones). Synchronous
    /// callbacks run here, in subscription order, with no lock held; a panicking callback is
    /// caught, counted and reported to the [error hook](Self::set_error_hook), and the
    /// others still run. With [`SlowSubscriberPolicy::Block`](super::SlowSubscriberPolicy::Block) this waits while
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
    /// their threads are joined (unless dropped on a subscriber's thread: see the module
    /// docs, "Threads").
    fn drop(&mut self) {
        let list = {
            let mut list = self.shared.subscribers.lock();
            std::mem::replace(&mut *list, Arc::new(Vec::new()))
        };
        // Every buffer is closed before any thread is joined: a subscriber's callback
        // waiting for room in another one's buffer wakes up instead of holding the join.
        for sub in list.iter() {
            sub.close();
        }
        // No thread is added afterwards: subscribing needs the bus.
        let threads = std::mem::take(&mut *self.shared.threads.lock());
        let drainer = thread::is_drainer();
        for (_, worker) in threads {
            if worker.is_current() || (drainer && !worker.is_done()) {
                // Dropped on a subscriber's thread: joining a thread that may be waiting
                // for room in this one's buffer could wait for good. It ends on its own.
                drop(worker);
            } else {
                worker.join();
            }
        }
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
