//! A subscriber as a `Stream`: the events go into a ring of its own, which the stream reads.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;

use super::bus::Shared;
use super::report::Stats;
use super::subscriber::Subscriber;
use crate::ring::{ReadError, Reader};
use crate::sync::atomic::Ordering;
use crate::sync::Arc;

/// A subscription as a [`Stream`] of events, from
/// [`EventBus::subscribe_stream`](super::EventBus::subscribe_stream). Dropping it
/// unsubscribes: publishes that start afterwards skip it, and a publish waiting for room in
/// its buffer ([`SlowSubscriberPolicy::Block`](super::SlowSubscriberPolicy::Block)) gives
/// up on it at once (and does not count it in its return value).
///
/// It yields the events in the order they entered its buffer, and ends (`None`) once the
/// bus is dropped and it has yielded everything buffered. Under
/// [`SlowSubscriberPolicy::DropOldest`](super::SlowSubscriberPolicy::DropOldest) the events
/// a full buffer overwrote are skipped and counted in [`dropped`](Self::dropped), as a
/// callback's are in [`Subscription::dropped`](super::Subscription::dropped).
///
/// # Cancel safety
///
/// `next()` (and any poll of the stream) is cancel safe: an event leaves the buffer only in
/// the poll that yields it, so a `next()` future dropped at any other point (a `select!`
/// whose other branch won, a timeout, right after it was woken) loses nothing; the next
/// `next()` yields that event.
///
/// # Examples
///
/// ```
/// use futures::StreamExt;
/// use logbus::observer::{EventBus, SlowSubscriberPolicy};
///
/// let bus = EventBus::new();
/// let mut events = bus.subscribe_stream(2, SlowSubscriberPolicy::DropOldest)?;
/// for i in 0..5u32 {
///     bus.publish(i); // never waits: the oldest buffered events are overwritten
/// }
/// drop(bus);
/// let seen: Vec<u32> = futures::executor::block_on(events.by_ref().collect());
/// assert_eq!(seen, [3, 4]);
/// assert_eq!(events.dropped(), 3);
/// assert_eq!(events.delivered(), 2);
/// # Ok::<(), logbus::Error>(())
/// ```
#[must_use = "dropping the stream unsubscribes at once"]
pub struct EventStream<T> {
    bus: Arc<Shared<T>>,
    sub: Arc<Subscriber<T>>,
    reader: Reader<T>,
    stats: Arc<Stats>,
}

impl<T> EventStream<T> {
    pub(crate) fn new(
        bus: &Arc<Shared<T>>,
        sub: Arc<Subscriber<T>>,
        reader: Reader<T>,
        stats: Arc<Stats>,
    ) -> Self {
        Self {
            bus: Arc::clone(bus),
            sub,
            reader,
            stats,
        }
    }

    /// This subscriber's identifier (unique within its bus).
    pub fn id(&self) -> u64 {
        self.sub.id
    }

    /// Events this stream has yielded.
    pub fn delivered(&self) -> u64 {
        // Relaxed: a statistic.
        self.stats.delivered.load(Ordering::Relaxed)
    }

    /// Events overwritten in the full buffer before the stream read them
    /// ([`SlowSubscriberPolicy::DropOldest`](super::SlowSubscriberPolicy::DropOldest)),
    /// counted when the stream reaches the gap, before it yields the event after it.
    pub fn dropped(&self) -> u64 {
        // Relaxed: a statistic.
        self.stats.dropped.load(Ordering::Relaxed)
    }

    /// How many events wait in the buffer (a hint: publishers keep going).
    pub fn backlog(&self) -> u64 {
        self.reader.backlog()
    }
}

impl<T: Clone> Stream for EventStream<T> {
    type Item = T;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let this = &mut *self;
        loop {
            match Pin::new(&mut this.reader).poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Ready(Some(Ok(event))) => {
                    // Relaxed: a statistic (only this stream writes it).
                    this.stats.delivered.fetch_add(1, Ordering::Relaxed);
                    return Poll::Ready(Some(event));
                }
                Poll::Ready(Some(Err(ReadError::Lagged(n)))) => {
                    // Relaxed: a statistic (only this stream writes it).
                    this.stats.dropped.fetch_add(n, Ordering::Relaxed);
                }
                // The reader's stream ends instead of yielding `Closed`.
                Poll::Ready(Some(Err(_))) => return Poll::Ready(None),
            }
        }
    }
}

impl<T> Drop for EventStream<T> {
    fn drop(&mut self) {
        // Closes the ring (a publish waiting for room gives up) and leaves the list; the
        // reader goes after, with the rest of the fields.
        self.bus.leave(&self.sub);
    }
}

impl<T> fmt::Debug for EventStream<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventStream")
            .field("id", &self.sub.id)
            .field("delivered", &self.delivered())
            .field("dropped", &self.dropped())
            .finish()
    }
}
