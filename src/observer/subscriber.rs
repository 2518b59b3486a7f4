//! One subscriber: its callback, how events reach it (on the publisher's thread, or through
//! a bounded buffer drained by its own thread), and how it stops.

use std::fmt;

use super::report::{Reporter, Stats};
use crate::queue::{self, TrySendError};
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::thread::{self, JoinHandle};
use crate::sync::Arc;

/// How events reach a subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The callback runs on the publisher's thread, inside [`EventBus::publish`]
    /// (`publish` returns after it did). Several publishing threads may run it at once.
    ///
    /// [`EventBus::publish`]: super::EventBus::publish
    Sync,
    /// `publish` puts a clone of the event into a bounded buffer of `capacity` events; the
    /// subscriber's own thread takes events out in order and runs the callback.
    Async {
        /// Events the buffer holds (at least 1).
        capacity: usize,
        /// What `publish` does when the buffer is full.
        overflow: SlowSubscriberPolicy,
    },
}

/// What publishing does when an asynchronous subscriber's buffer is full: the policy for a
/// slow subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlowSubscriberPolicy {
    /// `publish` waits for room (backpressure: a slow subscriber slows publishers down).
    Block,
    /// `publish` drops the oldest buffered event to make room and counts it
    /// ([`Subscription::dropped`](super::Subscription::dropped)); it never waits.
    DropOldest,
}

/// A boxed subscriber callback.
pub(crate) type Callback<T> = Arc<Box<dyn Fn(&T) + Send + Sync>>;

/// The asynchronous part of a subscriber.
struct Worker<T> {
    tx: queue::Sender<T>,
    /// Held by publishers to evict the oldest event (`SlowSubscriberPolicy::DropOldest` only).
    evict: Option<queue::Receiver<T>>,
}

/// A stream subscriber's side of its ring (`stream`): type-erased, so that `Subscriber<T>`
/// stays `Send + Sync` for every `T: Send` (a ring of `T` is shared only when `T: Sync`).
pub(crate) struct Feed<T> {
    /// Publishes a clone of the event into the ring (waiting for room under
    /// [`SlowSubscriberPolicy::Block`]); `false` once the ring is closed.
    pub(crate) push: Box<dyn Fn(&T) -> bool + Send + Sync>,
    /// Closes the ring: a publish waiting for room gives up, the stream ends once drained.
    pub(crate) close: Box<dyn Fn() + Send + Sync>,
}

/// An asynchronous subscriber's thread, to be joined once its buffer is closed.
pub(crate) struct WorkerThread {
    handle: JoinHandle<()>,
    /// Set by the thread as its last step, after dropping everything it held.
    done: Arc<AtomicBool>,
}

impl WorkerThread {
    /// Whether this is the calling thread (a callback unsubscribing its own subscriber).
    pub(crate) fn is_current(&self) -> bool {
        self.handle.thread().id() == thread::current().id()
    }

    /// Whether the thread has finished its work: joining it then waits for nobody.
    pub(crate) fn is_done(&self) -> bool {
        // Acquire: pairs with the Release store at the end of the thread's loop (the join
        // orders everything anyway; this only decides whether joining may wait).
        self.done.load(Ordering::Acquire)
    }

    /// Waits for the thread to end.
    pub(crate) fn join(self) {
        // A panic inside the worker is caught per callback; the thread itself does not panic.
        if let Err(payload) = self.handle.join() {
            super::report::dispose(payload);
        }
    }
}

/// A registered subscriber.
pub(crate) struct Subscriber<T> {
    pub(crate) id: u64,
    callback: Callback<T>,
    /// Cleared on unsubscription; publishes that start afterwards skip this subscriber.
    active: AtomicBool,
    pub(crate) stats: Arc<Stats>,
    worker: Option<Worker<T>>,
    /// A stream subscriber's ring (then `callback` does nothing and `worker` is `None`).
    feed: Option<Feed<T>>,
}

impl<T> fmt::Debug for Subscriber<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscriber")
            .field("id", &self.id)
            .field("async", &self.worker.is_some())
            .field("stream", &self.feed.is_some())
            .finish()
    }
}

impl<T: Send + 'static> Subscriber<T> {
    /// A subscriber delivered on the publisher's thread.
    pub(crate) fn new_sync(id: u64, callback: Callback<T>) -> Self {
        Self {
            id,
            callback,
            active: AtomicBool::new(true),
            stats: Arc::new(Stats::default()),
            worker: None,
            feed: None,
        }
    }

    /// A subscriber whose events go into a ring read by an [`EventStream`](super::EventStream).
    pub(crate) fn new_stream(id: u64, feed: Feed<T>, stats: Arc<Stats>) -> Self {
        Self {
            id,
            callback: Arc::new(Box::new(|_: &T| {})),
            active: AtomicBool::new(true),
            stats,
            worker: None,
            feed: Some(feed),
        }
    }

    /// A subscriber with its own thread draining a buffer of `capacity` (≥ 1) events, and
    /// that thread (for the bus to join).
    pub(crate) fn new_async(
        id: u64,
        callback: Callback<T>,
        capacity: usize,
        overflow: SlowSubscriberPolicy,
        reporter: Arc<Reporter>,
    ) -> std::io::Result<(Self, WorkerThread)> {
        let (tx, rx) = queue::bounded::<T>(capacity);
        let evict = (overflow == SlowSubscriberPolicy::DropOldest).then(|| rx.clone());
        let done = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Stats::default());
        let handle = {
            let (callback, stats, done) =
                (Arc::clone(&callback), Arc::clone(&stats), Arc::clone(&done));
            thread::spawn_named(format!("logbus-observer-{id}"), move || {
                // Publishers may wait for room in this thread's buffer: it must never wait
                // for another subscriber's thread to end.
                thread::mark_drainer();
                drain(id, rx, callback, stats, reporter);
                // Release: pairs with the Acquire load in `WorkerThread::is_done`.
                done.store(true, Ordering::Release);
            })?
        };
        let sub = Self {
            id,
            callback,
            active: AtomicBool::new(true),
            stats,
            worker: Some(Worker { tx, evict }),
            feed: None,
        };
        Ok((sub, WorkerThread { handle, done }))
    }
}

/// An asynchronous subscriber's loop: delivers every buffered event until the buffer is
/// closed and empty, then drops what it holds (before the thread says it is done).
fn drain<T>(
    id: u64,
    rx: queue::Receiver<T>,
    callback: Callback<T>,
    stats: Arc<Stats>,
    reporter: Arc<Reporter>,
) {
    // One event at a time (not a batch): an event taken out of the buffer is no longer
    // evictable, so the buffer's bound stays exactly `capacity`.
    while let Ok(event) = rx.recv() {
        reporter.run(id, &stats, || callback(&event));
    }
}

impl<T: Clone> Subscriber<T> {
    /// Delivers `event` (sync) or buffers a clone of it (async). `false` when the
    /// subscriber has left, or its synchronous callback panicked.
    pub(crate) fn deliver(&self, event: &T, reporter: &Reporter) -> bool {
        // Acquire: pairs with the Release store in `deactivate`.
        if !self.active.load(Ordering::Acquire) {
            return false;
        }
        if let Some(feed) = &self.feed {
            // A stream dropped while this publish waited for room closed the ring, and the
            // wait may still end in a publish (a ring's publish in flight completes): the
            // stream is gone, so it did not reach it. Acquire: as above.
            return (feed.push)(event) && self.active.load(Ordering::Acquire);
        }
        let Some(worker) = &self.worker else {
            return reporter.run(self.id, &self.stats, || (self.callback)(event));
        };
        let Some(evict) = &worker.evict else {
            return worker.tx.send(event.clone()).is_ok();
        };
        let mut event = event.clone();
        loop {
            match worker.tx.try_send(event) {
                Ok(()) => return true,
                Err(TrySendError::Disconnected(_)) => return false,
                Err(TrySendError::Full(back)) => {
                    event = back;
                    if let Ok(oldest) = evict.try_recv() {
                        // Relaxed: a statistic.
                        self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                        drop(oldest);
                    }
                }
            }
        }
    }
}

impl<T> Subscriber<T> {
    /// No publish starting from now delivers to this subscriber.
    pub(crate) fn deactivate(&self) {
        // Release: pairs with the Acquire load in `deliver`.
        self.active.store(false, Ordering::Release);
    }

    /// Closes an asynchronous subscriber's buffer: publishes fail from now on (one waiting
    /// for room wakes up and fails), and the thread delivers what is buffered, then ends.
    pub(crate) fn close(&self) {
        self.deactivate();
        if let Some(worker) = &self.worker {
            worker.tx.close();
        }
        if let Some(feed) = &self.feed {
            (feed.close)();
        }
    }

    /// Whether the subscriber has a thread of its own.
    pub(crate) fn is_async(&self) -> bool {
        self.worker.is_some()
    }
}
