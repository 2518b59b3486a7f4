//! An observer bus with several subscribers while events flow: a synchronous logger, an
//! asynchronous slow consumer that drops the oldest events when it falls behind, one
//! subscriber added and one removed mid-stream, and a panicking one that is isolated.
//!
//! ```sh
//! cargo run --release --example event_bus
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use logbus::observer::{Delivery, EventBus, SlowSubscriberPolicy};

#[derive(Clone, Debug)]
struct Order {
    id: u64,
    amount: u64,
}

fn main() {
    // The bus reports panicking subscribers through its own error hook; keep std's default
    // panic message (and backtrace) off the terminal so the output reads as a story.
    std::panic::set_hook(Box::new(|_| {}));
    let bus = EventBus::<Order>::new();
    bus.set_error_hook(|p| println!("  error hook: {p}"));

    let total = Arc::new(AtomicU64::new(0));
    let t = Arc::clone(&total);
    let ledger = bus.subscribe(move |o| {
        t.fetch_add(o.amount, Ordering::Relaxed);
    });

    let slow = bus
        .subscribe_with(
            Delivery::Async {
                capacity: 4,
                overflow: SlowSubscriberPolicy::DropOldest,
            },
            |_o| thread::sleep(Duration::from_millis(2)),
        )
        .expect("spawn the slow subscriber's thread");

    let flaky = bus.subscribe(|o| {
        if o.id == 13 {
            panic!("order {} is unlucky", o.id);
        }
    });

    let mut auditor = None;
    let audited = Arc::new(AtomicU64::new(0));
    let mut temporary = Some(bus.subscribe(|o| {
        if o.id == 0 {
            println!("  temporary subscriber saw order 0");
        }
    }));

    for id in 0..40 {
        if id == 10 {
            let a = Arc::clone(&audited);
            auditor = Some(
                bus.subscribe_with(
                    Delivery::Async {
                        capacity: 64,
                        overflow: SlowSubscriberPolicy::Block,
                    },
                    move |_o| {
                        a.fetch_add(1, Ordering::Relaxed);
                    },
                )
                .expect("spawn the auditor's thread"),
            );
            println!(
                "order 10: auditor subscribed ({} subscribers)",
                bus.subscriber_count()
            );
        }
        if id == 20 {
            drop(temporary.take());
            println!(
                "order 20: temporary subscriber removed ({} subscribers)",
                bus.subscriber_count()
            );
        }
        bus.publish(Order {
            id,
            amount: 10 + id,
        });
    }

    let auditor = auditor.expect("subscribed at order 10");
    drop(bus); // async subscribers deliver what is buffered; their threads are joined
    println!(
        "ledger: {} orders, total amount {}",
        ledger.delivered(),
        total.load(Ordering::Relaxed)
    );
    println!(
        "auditor (joined at order 10): saw {} orders",
        audited.load(Ordering::Relaxed)
    );
    println!(
        "slow async subscriber: {} delivered, {} dropped as oldest while it lagged",
        slow.delivered(),
        slow.dropped()
    );
    println!(
        "flaky subscriber: {} delivered, {} panicked (isolated; the others still got order 13)",
        flaky.delivered(),
        flaky.panics()
    );
    assert_eq!(ledger.delivered(), 40);
    assert_eq!(auditor.delivered(), 30);
    assert_eq!(slow.delivered() + slow.dropped(), 40);
    assert_eq!(flaky.panics(), 1);
}
