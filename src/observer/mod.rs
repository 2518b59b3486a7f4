//! An observer bus: publish an event once, every subscriber's callback runs.
//!
//! [`EventBus::subscribe`] registers a callback and returns a [`Subscription`] guard;
//! dropping the guard unsubscribes. Subscribers come and go at run time, from any thread and
//! from inside callbacks, without deadlock.
//!
//! # How it works
//!
//! The registry is a copy-on-write list (the read-copy-update idea in its simplest form): an
//! `Arc<[subscriber]>` behind a mutex, replaced by a new list on every subscribe or
//! unsubscribe. A publish takes a snapshot (clones the `Arc` under the lock) and runs the
//! callbacks with no lock held. Each subscriber chooses its [`Delivery`]:
//! - [`Delivery::Sync`]: the callback runs on the publisher's thread, inside `publish`.
//! - [`Delivery::Async`]: `publish` puts a clone of the event into the subscriber's bounded
//!   buffer (a [`crate::queue`]); the subscriber's own thread runs the callback. When the
//!   buffer is full, [`SlowSubscriberPolicy::Block`] makes `publish` wait, [`SlowSubscriberPolicy::DropOldest`]
//!   evicts the oldest buffered event and counts it ([`Subscription::dropped`]).
//!
//! For async code, [`EventBus::subscribe_stream`] subscribes an [`EventStream`] instead of a
//! callback: a `futures_core::Stream` of the events, reading a ring of its own (no thread,
//! no runtime: any executor's waker). The same [`SlowSubscriberPolicy`] applies to its
//! buffer: `Block` makes `publish` wait for the stream (and a publish waiting for room gives
//! up on a stream that is dropped meanwhile), `DropOldest` overwrites the oldest events,
//! which the stream skips and counts in [`EventStream::dropped`], as a callback's are in
//! [`Subscription::dropped`]: the counter, where users of this bus already look, rather
//! than an error item in the stream. Dropping the stream unsubscribes, and discards what it
//! had not read yet.
//!
//! # Guarantees
//!
//! - **Exactly once to subscribers that stay.** A subscriber present for the whole of a
//!   publish receives that event exactly once (asynchronous ones: unless evicted under
//!   `DropOldest`, which is counted). Subscribing or unsubscribing others meanwhile, even
//!   from inside a callback, changes nothing for it.
//! - **Joining and leaving.** A subscriber added during a publish receives the events of
//!   publishes that start after `subscribe` returned. After its guard is dropped, no
//!   publish that starts afterwards reaches it; a publish already under way may still run
//!   its callback once (the snapshot was taken before). An asynchronous subscriber that
//!   leaves loses nothing: what is already in its buffer is delivered before its thread
//!   ends, and the drop returns once that thread has ended (except on a subscriber's
//!   thread, see "Threads"). A stream's unread events go with the stream. A publish that was waiting for room in the buffer of a
//!   subscriber that leaves gives up on it and does not count it in its return value.
//! - **Order.** Events from one publishing thread reach each subscriber in publish order.
//!   Synchronous callbacks run in subscription order; with several publishing threads they
//!   may run concurrently (callbacks are `Fn + Sync`). An asynchronous subscriber sees its
//!   events one at a time, in the order they entered its buffer.
//! - **Panics.** A panicking callback is caught (`catch_unwind`), counted
//!   ([`EventBus::panic_count`], [`Subscription::panics`]) and reported to the
//!   [error hook](EventBus::set_error_hook); the other subscribers still get the event, and
//!   the panicking one stays subscribed.
//! - **Threads.** Each asynchronous subscriber owns one thread, joined when it unsubscribes
//!   or when the bus is dropped (which first lets it deliver what is already buffered). A
//!   subscriber's thread never waits for another one to end, since that one may be waiting
//!   for room in its buffer: a guard dropped inside an asynchronous callback (its own or
//!   another subscriber's) returns without joining, and the bus joins that thread once it
//!   has finished (at a later subscribe or unsubscribe) or when the bus is dropped. A bus
//!   dropped inside an asynchronous callback joins only the threads that have finished; the
//!   others end on their own once their buffers are delivered.
//! - **Deadlock.** Callbacks may publish, subscribe and unsubscribe, and drop the bus.
//!   Waiting for room is the one wait a callback's publish can add, and [`SlowSubscriberPolicy::Block`]
//!   subscribers whose callbacks publish can close a cycle of such waits that nothing
//!   breaks: a callback publishing into its own full buffer; two subscribers whose callbacks
//!   publish to each other while both buffers are full (each thread waits for room that only
//!   the other one makes), and likewise any longer ring of them. Those wait for good, and
//!   are the caller's to avoid: give one subscriber on every such ring
//!   [`SlowSubscriberPolicy::DropOldest`] (which never waits, and counts what it evicts), or a
//!   synchronous delivery, or publish from outside the callbacks.
//!
//! # Examples
//!
//! ```
//! use logbus::observer::{Delivery, EventBus, SlowSubscriberPolicy};
//!
//! let bus = EventBus::<String>::new();
//! let (lengths, seen) = logbus::queue::bounded(8);
//! let sync_sub = bus.subscribe(move |e| lengths.send(e.len()).unwrap());
//! let async_sub = bus
//!     .subscribe_with(Delivery::Async { capacity: 8, overflow: SlowSubscriberPolicy::DropOldest }, |e| {
//!         let _ = e.to_uppercase();
//!     })
//!     .unwrap();
//! assert_eq!(bus.publish("hello".to_string()), 2);
//! assert_eq!(seen.try_recv(), Ok(5));
//! drop(async_sub); // joins its thread
//! drop(sync_sub);
//! assert_eq!(bus.publish("unheard".to_string()), 0);
//! ```

mod bus;
mod report;
mod stream;
mod subscriber;
mod subscription;

pub use bus::EventBus;
pub use report::SubscriberPanic;
pub use stream::EventStream;
pub use subscriber::{Delivery, SlowSubscriberPolicy};
pub use subscription::Subscription;

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use super::*;
    use crate::sync::atomic::{AtomicUsize, Ordering};
    use crate::sync::{thread, Arc, Mutex};

    fn counter() -> (Arc<AtomicUsize>, impl Fn(&u32) + Send + Sync + 'static) {
        let n = Arc::new(AtomicUsize::new(0));
        let m = Arc::clone(&n);
        (n, move |_: &u32| {
            m.fetch_add(1, Ordering::SeqCst);
        })
    }

    #[test]
    fn sync_and_async_subscribers_each_get_every_event() {
        let events = if cfg!(miri) { 20 } else { 500 };
        let bus = EventBus::new();
        let (a, fa) = counter();
        let (b, fb) = counter();
        let sa = bus.subscribe(fa);
        let sb = bus
            .subscribe_with(
                Delivery::Async {
                    capacity: 4,
                    overflow: SlowSubscriberPolicy::Block,
                },
                fb,
            )
            .unwrap();
        for i in 0..events {
            assert_eq!(bus.publish(i as u32), 2);
        }
        drop(bus); // drains the async buffer, joins the thread
        assert_eq!(a.load(Ordering::SeqCst), events);
        assert_eq!(b.load(Ordering::SeqCst), events);
        assert_eq!(sb.delivered(), events as u64);
        assert_eq!(sa.delivered(), events as u64);
    }

    #[test]
    fn drop_oldest_counts_what_it_evicts() {
        let bus = EventBus::new();
        let gate = Arc::new(Mutex::new(()));
        let held = gate.lock();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (g, s) = (Arc::clone(&gate), Arc::clone(&seen));
        let sub = bus
            .subscribe_with(
                Delivery::Async {
                    capacity: 2,
                    overflow: SlowSubscriberPolicy::DropOldest,
                },
                move |e: &u32| {
                    drop(g.lock());
                    s.lock().push(*e);
                },
            )
            .unwrap();
        for i in 0..10 {
            bus.publish(i);
        }
        drop(held);
        drop(bus);
        let seen = seen.lock().clone();
        assert_eq!(sub.dropped() as usize + seen.len(), 10);
        assert!(sub.dropped() >= 7, "dropped {}", sub.dropped());
        assert_eq!(seen.last(), Some(&9));
        assert!(seen.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn a_panicking_callback_is_isolated_on_both_paths() {
        let bus = EventBus::new();
        let reports = Arc::new(AtomicUsize::new(0));
        let r = Arc::clone(&reports);
        bus.set_error_hook(move |p| {
            assert!(p.message.contains("odd"));
            r.fetch_add(1, Ordering::SeqCst);
        });
        let bad = |e: &u32| assert!(e % 2 == 0, "odd event");
        let s1 = bus.subscribe(bad);
        let s2 = bus
            .subscribe_with(
                Delivery::Async {
                    capacity: 8,
                    overflow: SlowSubscriberPolicy::Block,
                },
                bad,
            )
            .unwrap();
        let (good, fg) = counter();
        let _s3 = bus.subscribe(fg);
        for i in 0..4 {
            bus.publish(i);
        }
        drop(s2);
        assert_eq!(good.load(Ordering::SeqCst), 4);
        assert_eq!(s1.panics(), 2);
        assert_eq!(s1.delivered(), 2);
        assert!(bus.panic_count() >= 2);
        assert_eq!(reports.load(Ordering::SeqCst) as u64, bus.panic_count());
    }

    #[test]
    fn unsubscribing_inside_a_callback_and_from_another_thread() {
        let bus = Arc::new(EventBus::new());
        let slot: Arc<Mutex<Option<Subscription>>> = Arc::new(Mutex::new(None));
        let sl = Arc::clone(&slot);
        let (n, fn_) = counter();
        *slot.lock() = Some(bus.subscribe(move |e: &u32| {
            fn_(e);
            drop(sl.lock().take()); // leaves after its first event
        }));
        let (stay, fs) = counter();
        let _keep = bus.subscribe(fs);
        let publishers: Vec<_> = (0..2)
            .map(|_| {
                let bus = Arc::clone(&bus);
                thread::spawn(move || {
                    for i in 0..50 {
                        bus.publish(i);
                    }
                })
            })
            .collect();
        for p in publishers {
            p.join().unwrap();
        }
        assert!(n.load(Ordering::SeqCst) >= 1 && n.load(Ordering::SeqCst) <= 2);
        assert_eq!(stay.load(Ordering::SeqCst), 100);
        assert_eq!(bus.subscriber_count(), 1);
    }

    #[test]
    fn an_async_subscriber_can_drop_itself() {
        let bus = EventBus::new();
        let slot: Arc<Mutex<Option<Subscription>>> = Arc::new(Mutex::new(None));
        let sl = Arc::clone(&slot);
        let (n, fn_) = counter();
        let sub = bus
            .subscribe_with(
                Delivery::Async {
                    capacity: 4,
                    overflow: SlowSubscriberPolicy::Block,
                },
                move |e| {
                    fn_(e);
                    drop(sl.lock().take());
                },
            )
            .unwrap();
        *slot.lock() = Some(sub);
        bus.publish(1);
        while bus.subscriber_count() > 0 {
            thread::yield_now();
        }
        bus.publish(2);
        drop(bus); // joins the adopted thread
        assert_eq!(n.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn zero_capacity_is_rejected() {
        let bus = EventBus::<u8>::new();
        let err = bus
            .subscribe_with(
                Delivery::Async {
                    capacity: 0,
                    overflow: SlowSubscriberPolicy::Block,
                },
                |_| {},
            )
            .unwrap_err();
        assert!(err.to_string().contains("at least 1"), "{err}");
    }
}
