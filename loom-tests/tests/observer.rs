//! Loom models of `logbus::observer`: unsubscription racing publication.
#![cfg(logbus_loom)]

use logbus::observer::{Delivery, EventBus, SlowSubscriberPolicy, Subscription};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;

fn counter() -> (Arc<AtomicUsize>, impl Fn(&u8) + Send + Sync + 'static) {
    let n = Arc::new(AtomicUsize::new(0));
    let m = Arc::clone(&n);
    (n, move |_: &u8| {
        m.fetch_add(1, Ordering::SeqCst);
    })
}

/// A synchronous subscriber leaves while another thread publishes: it gets the event at
/// most once, the subscriber that stays gets it exactly once, and nothing leaks.
#[test]
fn unsubscribe_races_a_publish() {
    loom::model(|| {
        let bus = Arc::new(EventBus::<u8>::new());
        let (left, f_left) = counter();
        let (stay, f_stay) = counter();
        let leaving = bus.subscribe(f_left);
        let _staying = bus.subscribe(f_stay);
        let b = Arc::clone(&bus);
        let publisher = thread::spawn(move || b.publish(1));
        drop(leaving);
        let reached = publisher.join().unwrap();
        assert_eq!(stay.load(Ordering::SeqCst), 1);
        let l = left.load(Ordering::SeqCst);
        assert!(l <= 1);
        assert_eq!(reached, 1 + l);
        assert_eq!(bus.publish(2), 1);
        assert_eq!(left.load(Ordering::SeqCst), l);
    });
}

/// An asynchronous subscriber (its own thread, capacity 2) leaves while another thread
/// publishes: its thread is joined, it sees the event at most once, nothing leaks.
#[test]
fn async_unsubscribe_races_a_publish() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
        let bus = Arc::new(EventBus::<u8>::new());
        let (seen, f) = counter();
        let sub = bus
            .subscribe_with(
                Delivery::Async {
                    capacity: 2,
                    overflow: SlowSubscriberPolicy::Block,
                },
                f,
            )
            .unwrap();
        let b = Arc::clone(&bus);
        let publisher = thread::spawn(move || b.publish(1));
        drop(sub);
        let after_join = seen.load(Ordering::SeqCst);
        publisher.join().unwrap();
        assert!(after_join <= 1);
        // The thread is joined: nothing is delivered after the drop returned.
        assert_eq!(seen.load(Ordering::SeqCst), after_join);
    });
}

/// Subscribing while another thread publishes: the new subscriber sees the event at most
/// once, the existing one exactly once.
#[test]
fn subscribe_races_a_publish() {
    loom::model(|| {
        let bus = Arc::new(EventBus::<u8>::new());
        let (old, f_old) = counter();
        let _old = bus.subscribe(f_old);
        let b = Arc::clone(&bus);
        let publisher = thread::spawn(move || b.publish(1));
        let (new, f_new) = counter();
        let _new = bus.subscribe(f_new);
        publisher.join().unwrap();
        assert_eq!(old.load(Ordering::SeqCst), 1);
        assert!(new.load(Ordering::SeqCst) <= 1);
    });
}

/// An asynchronous subscriber leaves while another thread publishes: what the publish
/// buffered for it is delivered before the drop returns (nothing is discarded), and
/// nothing after.
#[test]
fn async_unsubscribe_delivers_what_was_buffered() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
        let bus = Arc::new(EventBus::<u8>::new());
        let (seen, f) = counter();
        let sub = bus
            .subscribe_with(
                Delivery::Async {
                    capacity: 1,
                    overflow: SlowSubscriberPolicy::Block,
                },
                f,
            )
            .unwrap();
        let b = Arc::clone(&bus);
        let publisher = thread::spawn(move || b.publish(1));
        drop(sub);
        let after_drop = seen.load(Ordering::SeqCst);
        let reached = publisher.join().unwrap();
        assert_eq!(after_drop, reached);
        assert_eq!(seen.load(Ordering::SeqCst), reached);
    });
}

/// A callback drops its own guard while the publisher may be waiting for room: the bus
/// adopts the thread, delivers what was buffered, and joins the thread when dropped.
#[test]
fn a_subscriber_leaving_inside_its_callback_is_joined_by_the_bus() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
        let bus = EventBus::<u8>::new();
        let slot: Arc<Mutex<Option<Subscription>>> = Arc::new(Mutex::new(None));
        let (seen, f) = counter();
        let sl = Arc::clone(&slot);
        let sub = bus
            .subscribe_with(
                Delivery::Async {
                    capacity: 1,
                    overflow: SlowSubscriberPolicy::Block,
                },
                move |e| {
                    f(e);
                    drop(sl.lock().unwrap().take());
                },
            )
            .unwrap();
        *slot.lock().unwrap() = Some(sub);
        assert_eq!(bus.publish(1), 1);
        let second = bus.publish(2);
        drop(bus);
        // Joined: everything buffered was delivered, nothing more comes.
        assert_eq!(seen.load(Ordering::SeqCst), 1 + second);
        assert!(slot.lock().unwrap().is_none());
    });
}
