//! The observer bus through its public API: churn from several threads while events flow,
//! subscribing and unsubscribing inside callbacks, panicking subscribers, both delivery
//! modes and both overflow behaviours.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use logbus::observer::{Delivery, EventBus, Overflow, Subscription};

const ASYNC_BLOCK: Delivery = Delivery::Async {
    capacity: 8,
    overflow: Overflow::Block,
};

/// Records every event it sees, per publisher, to check "exactly once, in order".
#[derive(Default)]
struct Log(Mutex<Vec<(u64, u64)>>);

impl Log {
    fn push(&self, e: &(u64, u64)) {
        self.0.lock().unwrap().push(*e);
    }

    fn check_complete(&self, publishers: u64, per: u64) {
        let log = self.0.lock().unwrap();
        assert_eq!(
            log.len() as u64,
            publishers * per,
            "missed or doubled deliveries"
        );
        for p in 0..publishers {
            let mine: Vec<u64> = log.iter().filter(|e| e.0 == p).map(|e| e.1).collect();
            assert_eq!(mine, (0..per).collect::<Vec<_>>(), "publisher {p}'s order");
        }
    }
}

#[test]
fn subscribers_that_stay_get_everything_while_others_churn() {
    const PUBLISHERS: u64 = 3;
    let per: u64 = 2_000;
    let bus = Arc::new(EventBus::<(u64, u64)>::new());
    let sync_log = Arc::new(Log::default());
    let async_log = Arc::new(Log::default());
    let l = Arc::clone(&sync_log);
    let _stay_sync = bus.subscribe(move |e| l.push(e));
    let l = Arc::clone(&async_log);
    let _stay_async = bus.subscribe_with(ASYNC_BLOCK, move |e| l.push(e)).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let churned = Arc::new(AtomicU64::new(0));
    let churners: Vec<_> = (0..2)
        .map(|c| {
            let (bus, stop, churned) = (Arc::clone(&bus), Arc::clone(&stop), Arc::clone(&churned));
            thread::spawn(move || {
                let mut rounds = 0;
                while !stop.load(Ordering::Relaxed) || rounds < 5 {
                    let seen = Arc::new(AtomicUsize::new(0));
                    let s = Arc::clone(&seen);
                    let delivery = if c == 0 {
                        Delivery::Sync
                    } else {
                        Delivery::Async {
                            capacity: 4,
                            overflow: Overflow::DropOldest,
                        }
                    };
                    let sub = bus
                        .subscribe_with(delivery, move |_| {
                            s.fetch_add(1, Ordering::Relaxed);
                        })
                        .unwrap();
                    thread::yield_now();
                    drop(sub);
                    churned.fetch_add(1, Ordering::Relaxed);
                    rounds += 1;
                }
            })
        })
        .collect();
    let publishers: Vec<_> = (0..PUBLISHERS)
        .map(|p| {
            let bus = Arc::clone(&bus);
            thread::spawn(move || {
                for i in 0..per {
                    assert!(bus.publish((p, i)) >= 2);
                }
            })
        })
        .collect();
    for p in publishers {
        p.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for c in churners {
        c.join().unwrap();
    }
    assert!(churned.load(Ordering::Relaxed) >= 10);
    assert_eq!(bus.subscriber_count(), 2);
    drop(Arc::try_unwrap(bus).unwrap()); // drains the async subscriber and joins it
    sync_log.check_complete(PUBLISHERS, per);
    async_log.check_complete(PUBLISHERS, per);
}

#[test]
fn callbacks_subscribe_and_unsubscribe_without_deadlock() {
    let bus = Arc::new(EventBus::<u32>::new());
    let added: Arc<Mutex<Vec<Subscription>>> = Arc::default();
    let late_seen = Arc::new(AtomicUsize::new(0));
    // On event 1 this callback adds a subscriber; on event 3 it removes it again.
    let weak = Arc::downgrade(&bus);
    let (a, seen) = (Arc::clone(&added), Arc::clone(&late_seen));
    let _manager = bus.subscribe(move |e| {
        let Some(bus) = weak.upgrade() else { return };
        match e {
            1 => {
                let seen = Arc::clone(&seen);
                a.lock().unwrap().push(bus.subscribe(move |_| {
                    seen.fetch_add(1, Ordering::SeqCst);
                }));
            }
            3 => a.lock().unwrap().clear(),
            _ => {}
        }
    });
    let stay = Arc::new(AtomicUsize::new(0));
    let s = Arc::clone(&stay);
    let _stay = bus.subscribe(move |_| {
        s.fetch_add(1, Ordering::SeqCst);
    });
    for e in 0..6 {
        bus.publish(e);
    }
    // Added during event 1 (sees 2 and 3: publishes that started after it subscribed;
    // its removal happens during 3 before it is reached, as it runs after the manager).
    assert_eq!(late_seen.load(Ordering::SeqCst), 1);
    assert_eq!(stay.load(Ordering::SeqCst), 6);
    assert_eq!(bus.subscriber_count(), 2);
}

#[test]
fn a_panicking_subscriber_is_isolated_and_reported() {
    let bus = EventBus::<u32>::new();
    let reports = Arc::new(Mutex::new(Vec::new()));
    let r = Arc::clone(&reports);
    bus.set_error_hook(move |p| r.lock().unwrap().push((p.subscriber, p.message.clone())));
    let before = Arc::new(AtomicUsize::new(0));
    let after = Arc::new(AtomicUsize::new(0));
    let b = Arc::clone(&before);
    let _s1 = bus.subscribe(move |_| {
        b.fetch_add(1, Ordering::SeqCst);
    });
    let bad = bus.subscribe(|e| {
        if *e == 2 {
            panic!("cannot handle event {e}");
        }
    });
    let a = Arc::clone(&after);
    let _s3 = bus.subscribe(move |_| {
        a.fetch_add(1, Ordering::SeqCst);
    });
    let bad_async = bus
        .subscribe_with(ASYNC_BLOCK, |e: &u32| {
            if *e == 3 {
                std::panic::panic_any(42u8); // a non-string payload
            }
        })
        .unwrap();
    for e in 0..5 {
        bus.publish(e);
    }
    assert_eq!(before.load(Ordering::SeqCst), 5);
    assert_eq!(after.load(Ordering::SeqCst), 5);
    assert_eq!(bad.panics(), 1);
    assert_eq!(bad.delivered(), 4);
    let async_id = bad_async.id();
    drop(bus); // lets the async subscriber deliver what is buffered
    drop(bad_async);
    let mut reports = reports.lock().unwrap().clone();
    reports.sort();
    assert_eq!(reports.len(), 2);
    assert!(reports.contains(&(bad.id(), "cannot handle event 2".to_string())));
    assert!(reports.contains(&(async_id, "<non-string panic payload>".to_string())));
    let text = logbus::observer::SubscriberPanic {
        subscriber: 7,
        message: "x".into(),
    }
    .to_string();
    assert!(text.contains("subscriber 7 panicked: x"));
}

#[test]
fn a_panicking_hook_is_contained_and_can_be_cleared() {
    let bus = EventBus::<u8>::new();
    bus.set_error_hook(|_| panic!("the hook itself fails"));
    let _bad = bus.subscribe(|_| panic!("bad"));
    let ok = Arc::new(AtomicUsize::new(0));
    let o = Arc::clone(&ok);
    let _good = bus.subscribe(move |_| {
        o.fetch_add(1, Ordering::SeqCst);
    });
    assert_eq!(bus.publish(1), 1);
    bus.clear_error_hook();
    assert_eq!(bus.publish(2), 1);
    assert_eq!(bus.panic_count(), 2);
    assert_eq!(ok.load(Ordering::SeqCst), 2);
}

#[test]
fn async_delivery_runs_on_its_own_thread_in_order() {
    let bus = EventBus::<u32>::new();
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = Arc::clone(&log);
    let publisher = thread::current().id();
    let sub = bus
        .subscribe_with(ASYNC_BLOCK, move |e| {
            assert_ne!(thread::current().id(), publisher);
            assert!(thread::current()
                .name()
                .unwrap()
                .starts_with("logbus-observer-"));
            l.lock().unwrap().push(*e);
        })
        .unwrap();
    for e in 0..100 {
        assert_eq!(bus.publish(e), 1);
    }
    drop(bus);
    assert_eq!(*log.lock().unwrap(), (0..100).collect::<Vec<_>>());
    assert_eq!(sub.delivered(), 100);
    assert_eq!(sub.dropped(), 0);
}

#[test]
fn block_overflow_applies_backpressure() {
    let bus = Arc::new(EventBus::<u32>::new());
    let gate = Arc::new(Mutex::new(()));
    let held = gate.lock().unwrap();
    let g = Arc::clone(&gate);
    let sub = bus
        .subscribe_with(
            Delivery::Async {
                capacity: 2,
                overflow: Overflow::Block,
            },
            move |_| drop(g.lock().unwrap()),
        )
        .unwrap();
    let published = Arc::new(AtomicUsize::new(0));
    let (b, p) = (Arc::clone(&bus), Arc::clone(&published));
    let publisher = thread::spawn(move || {
        for e in 0..10 {
            b.publish(e);
            p.fetch_add(1, Ordering::SeqCst);
        }
    });
    thread::sleep(Duration::from_millis(50));
    // One event in the callback, two buffered, the publisher stuck on the fourth.
    let so_far = published.load(Ordering::SeqCst);
    drop(held);
    assert!(so_far <= 3, "published {so_far} events past a full buffer");
    publisher.join().unwrap();
    drop(Arc::try_unwrap(bus).unwrap());
    assert_eq!(sub.delivered(), 10);
    assert_eq!(sub.dropped(), 0);
}

#[test]
fn drop_oldest_overflow_never_blocks_and_counts() {
    let bus = EventBus::<u32>::new();
    let gate = Arc::new(Mutex::new(()));
    let held = gate.lock().unwrap();
    let g = Arc::clone(&gate);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    let sub = bus
        .subscribe_with(
            Delivery::Async {
                capacity: 3,
                overflow: Overflow::DropOldest,
            },
            move |e| {
                drop(g.lock().unwrap());
                s.lock().unwrap().push(*e);
            },
        )
        .unwrap();
    for e in 0..100 {
        assert_eq!(bus.publish(e), 1); // never waits although the subscriber is stuck
    }
    drop(held);
    drop(bus);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len() as u64 + sub.dropped(), 100);
    assert!(seen.len() <= 4, "{seen:?}"); // one in the callback + three buffered
    assert_eq!(&seen[seen.len() - 3..], &[97, 98, 99]); // the newest survive
}

#[test]
fn unsubscribing_an_async_subscriber_joins_its_thread_and_stops_delivery() {
    let bus = EventBus::<u32>::new();
    let n = Arc::new(AtomicUsize::new(0));
    let m = Arc::clone(&n);
    let sub = bus
        .subscribe_with(ASYNC_BLOCK, move |_| {
            m.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    bus.publish(1);
    sub.unsubscribe();
    let after = n.load(Ordering::SeqCst);
    assert!(after <= 1);
    assert_eq!(bus.publish(2), 0);
    thread::sleep(Duration::from_millis(10));
    assert_eq!(n.load(Ordering::SeqCst), after);
    assert_eq!(bus.subscriber_count(), 0);
    assert!(format!("{bus:?}").contains("subscribers: 0"));
}
