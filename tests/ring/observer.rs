//! The observer bus through its public API: churn from several threads while events flow,
//! subscribing and unsubscribing inside callbacks, panicking subscribers, both delivery
//! modes and both overflow behaviours.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use logbus::observer::{Delivery, EventBus, SlowSubscriberPolicy, Subscription};

const ASYNC_BLOCK: Delivery = Delivery::Async {
    capacity: 8,
    overflow: SlowSubscriberPolicy::Block,
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
                            overflow: SlowSubscriberPolicy::DropOldest,
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
                overflow: SlowSubscriberPolicy::Block,
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
                overflow: SlowSubscriberPolicy::DropOldest,
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

// Regression tests of issue 34. The deadlock scenarios run under a watchdog: a hang
// becomes a failure (the bound is on a hang, it measures nothing).

/// Runs `f` on its own thread; fails the test if it has not finished within `secs`.
fn within<R: Send + 'static>(secs: u64, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    let t = thread::spawn(move || {
        let r = f();
        let _ = tx.send(());
        r
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(()) => t.join().unwrap(),
        // The body panicked: re-raise its message (a payload of another type is leaked, as
        // dropping it may panic again).
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => match t.join() {
            Ok(r) => r,
            Err(panic) => match panic.downcast::<String>() {
                Ok(message) => panic!("{message}"),
                Err(panic) => match panic.downcast::<&str>() {
                    Ok(message) => panic!("{message}"),
                    Err(other) => {
                        std::mem::forget(other);
                        panic!("the body panicked with a payload of another type")
                    }
                },
            },
        },
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("hung for {secs} s"),
    }
}

/// An async subscriber whose callback waits at `gate` (held by the test) and counts.
fn gated_counter(
    bus: &EventBus<u32>,
    capacity: usize,
    overflow: SlowSubscriberPolicy,
    gate: &Arc<Mutex<()>>,
) -> (Arc<AtomicUsize>, Subscription) {
    let n = Arc::new(AtomicUsize::new(0));
    let (m, g) = (Arc::clone(&n), Arc::clone(gate));
    let sub = bus
        .subscribe_with(Delivery::Async { capacity, overflow }, move |_| {
            drop(g.lock().unwrap());
            m.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    (n, sub)
}

/// Unsubscribing an asynchronous subscriber delivers what was buffered before the drop:
/// every event is delivered or counted as dropped, exactly.
#[test]
fn unsubscribing_loses_no_buffered_event() {
    const EVENTS: u32 = 1_000;
    let bus = EventBus::<u32>::new();
    let gate = Arc::new(Mutex::new(()));
    let held = gate.lock().unwrap();
    let (block_seen, block) =
        gated_counter(&bus, EVENTS as usize, SlowSubscriberPolicy::Block, &gate);
    let (oldest_seen, oldest) = gated_counter(&bus, 16, SlowSubscriberPolicy::DropOldest, &gate);
    for e in 0..EVENTS {
        assert_eq!(bus.publish(e), 2);
    }
    drop(held);
    assert_eq!(block.dropped(), 0);
    let evicted = oldest.dropped();
    block.unsubscribe();
    oldest.unsubscribe();
    assert_eq!(block_seen.load(Ordering::SeqCst), EVENTS as usize);
    assert_eq!(
        oldest_seen.load(Ordering::SeqCst) + evicted as usize,
        EVENTS as usize
    );
    // One event in the callback (perhaps) plus a full buffer: the rest were evicted.
    assert!(evicted >= u64::from(EVENTS) - 17, "evicted {evicted}");
    assert_eq!(bus.subscriber_count(), 0);
}

/// A subscriber that drops its own guard inside its callback still delivers what was
/// buffered behind the event in progress, then its thread ends.
#[test]
fn a_subscriber_leaving_inside_its_callback_delivers_its_buffer() {
    const EVENTS: u32 = 100;
    within(60, || {
        let bus = EventBus::<u32>::new();
        let gate = Arc::new(Mutex::new(()));
        let held = gate.lock().unwrap();
        let slot: Arc<Mutex<Option<Subscription>>> = Arc::default();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (sl, s, g) = (Arc::clone(&slot), Arc::clone(&seen), Arc::clone(&gate));
        let sub = bus
            .subscribe_with(
                Delivery::Async {
                    capacity: EVENTS as usize,
                    overflow: SlowSubscriberPolicy::Block,
                },
                move |e: &u32| {
                    drop(g.lock().unwrap());
                    s.lock().unwrap().push(*e);
                    if *e == 0 {
                        drop(sl.lock().unwrap().take());
                    }
                },
            )
            .unwrap();
        *slot.lock().unwrap() = Some(sub);
        for e in 0..EVENTS {
            assert_eq!(bus.publish(e), 1);
        }
        drop(held);
        while bus.subscriber_count() > 0 {
            thread::yield_now();
        }
        assert_eq!(bus.publish(EVENTS), 0);
        drop(bus); // joins the adopted thread
        assert_eq!(*seen.lock().unwrap(), (0..EVENTS).collect::<Vec<_>>());
    });
}

/// The deadlock of issue 34: subscriber A leaves inside its own callback (the bus adopts
/// its thread), then publishes to B (`Block`, capacity 1) whose callback subscribes. The
/// subscribe must not wait for A's thread, which waits for B to make room.
#[test]
fn subscribe_inside_a_callback_never_joins_a_thread_waiting_on_it() {
    within(60, || {
        let bus = Arc::new(EventBus::<u32>::new());
        let weak = Arc::downgrade(&bus);
        let (b_seen, bs) = (Arc::new(AtomicUsize::new(0)), Vec::<Subscription>::new());
        let added = Arc::new(Mutex::new(bs));
        let (seen, w, a2) = (Arc::clone(&b_seen), weak.clone(), Arc::clone(&added));
        // B: Block, capacity 1; events >= 100 come from A's callback. Each subscribes.
        let _b = bus
            .subscribe_with(
                Delivery::Async {
                    capacity: 1,
                    overflow: SlowSubscriberPolicy::Block,
                },
                move |e: &u32| {
                    if *e < 100 {
                        return;
                    }
                    seen.fetch_add(1, Ordering::SeqCst);
                    if let Some(bus) = w.upgrade() {
                        a2.lock().unwrap().push(bus.subscribe(|_| {}));
                    }
                },
            )
            .unwrap();
        let slot: Arc<Mutex<Option<Subscription>>> = Arc::default();
        let sl = Arc::clone(&slot);
        let a = bus
            .subscribe_with(ASYNC_BLOCK, move |e: &u32| {
                if *e != 0 {
                    return;
                }
                drop(sl.lock().unwrap().take()); // adopted by the bus from here on
                if let Some(bus) = weak.upgrade() {
                    // B's buffer holds one event: every second publish waits for B, which
                    // meanwhile subscribes.
                    for i in 100..110 {
                        bus.publish(i);
                    }
                }
            })
            .unwrap();
        *slot.lock().unwrap() = Some(a);
        bus.publish(0);
        while b_seen.load(Ordering::SeqCst) < 10 {
            thread::yield_now();
        }
        assert_eq!(added.lock().unwrap().len(), 10);
        added.lock().unwrap().clear();
        drop(bus);
    });
}

/// The same shape through an unsubscription: B's callback drops the guard of C, whose
/// callback is waiting for room in B's buffer. The drop must not wait for C's thread.
#[test]
fn unsubscribe_inside_a_callback_never_joins_a_thread_waiting_on_it() {
    within(60, || {
        let bus = Arc::new(EventBus::<u32>::new());
        let c_slot: Arc<Mutex<Option<Subscription>>> = Arc::default();
        let (cs, weak) = (Arc::clone(&c_slot), Arc::downgrade(&bus));
        let b_seen = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&b_seen);
        // B: Block, capacity 1; on C's first event it drops C's guard.
        let _b = bus
            .subscribe_with(
                Delivery::Async {
                    capacity: 1,
                    overflow: SlowSubscriberPolicy::Block,
                },
                move |e: &u32| {
                    if *e == 100 {
                        drop(cs.lock().unwrap().take());
                    }
                    if *e >= 100 {
                        seen.fetch_add(1, Ordering::SeqCst);
                    }
                },
            )
            .unwrap();
        // C: on event 0, publishes 100.. to B (waiting for room while B drops C's guard).
        let c = bus
            .subscribe_with(ASYNC_BLOCK, move |e: &u32| {
                if *e != 0 {
                    return;
                }
                if let Some(bus) = weak.upgrade() {
                    for i in 100..110 {
                        bus.publish(i);
                    }
                }
            })
            .unwrap();
        *c_slot.lock().unwrap() = Some(c);
        bus.publish(0);
        while b_seen.load(Ordering::SeqCst) < 10 {
            thread::yield_now();
        }
        assert!(c_slot.lock().unwrap().is_none());
        assert_eq!(bus.subscriber_count(), 1);
        drop(bus);
    });
}

/// A panic payload whose `Drop` panics, with a payload of the same kind (without end).
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        std::panic::panic_any(PanicsOnDrop);
    }
}

/// Issue 34: the error hook panicking with a payload whose `Drop` panics must not take
/// `publish` down; neither may a callback doing the same, on either delivery path.
#[test]
fn a_panic_payload_that_panics_on_drop_never_escapes_publish() {
    within(60, || {
        let bus = EventBus::<u32>::new();
        bus.set_error_hook(|_| std::panic::panic_any(PanicsOnDrop));
        let _bad = bus.subscribe(|_| std::panic::panic_any(PanicsOnDrop));
        let bad_async = bus
            .subscribe_with(ASYNC_BLOCK, |_| std::panic::panic_any(PanicsOnDrop))
            .unwrap();
        let ok = Arc::new(AtomicUsize::new(0));
        let o = Arc::clone(&ok);
        let _good = bus.subscribe(move |_| {
            o.fetch_add(1, Ordering::SeqCst);
        });
        for e in 0..3 {
            let reached = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| bus.publish(e)));
            match reached {
                // The good one and the async buffer; the panicking sync callback is not counted.
                Ok(n) => assert_eq!(n, 2),
                Err(payload) => {
                    std::mem::forget(payload); // dropping it would panic again
                    panic!("publish {e} panicked");
                }
            }
        }
        drop(bus); // drains the async subscriber: its thread survives all three
        assert_eq!(ok.load(Ordering::SeqCst), 3);
        assert_eq!(bad_async.panics(), 3);
    });
}
