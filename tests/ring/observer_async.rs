//! The observer bus's streams (`EventBus::subscribe_stream`): every event in order under
//! `Block`, counted drops under `DropOldest`, cancelled `next()` futures that lose nothing,
//! a publisher blocked on a full stream released when the stream is dropped, and the end of
//! the stream when the bus goes; on tokio multi-thread, current-thread and
//! `futures::executor`.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use futures::StreamExt;
use logbus::observer::{EventBus, EventStream, SlowSubscriberPolicy};

use crate::ring_async::on_each_executor;

/// Two threads publish `per` events each (`(publisher << 32) | i`), then drop their bus
/// handles; the last one drops the bus, which ends the streams once drained.
fn two_publishers(bus: EventBus<u64>, per: u64) -> Vec<thread::JoinHandle<()>> {
    let bus = Arc::new(bus);
    (0..2u64)
        .map(|p| {
            let bus = Arc::clone(&bus);
            thread::spawn(move || {
                for i in 0..per {
                    bus.publish((p << 32) | i);
                    if i % 1000 == 999 {
                        thread::sleep(Duration::from_micros(100));
                    }
                }
            })
        })
        .collect()
}

/// Reads `stream` to its end, cancelling a `next()` now and then (raced against an
/// immediately ready future); returns the events seen per
/// publisher, checking each publisher's order (dense when `dense`).
async fn drain(
    mut stream: EventStream<u64>,
    dense: bool,
    seed: u64,
) -> ([u64; 2], EventStream<u64>) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut next_of = [0u64; 2];
    let mut seen = [0u64; 2];
    loop {
        let event = if rng.u8(..) < 64 {
            // The `next()` future is polled first, then dropped if it is pending.
            match futures::future::select(stream.next(), futures::future::ready(())).await {
                futures::future::Either::Left((e, _)) => e,
                futures::future::Either::Right(_) => continue,
            }
        } else {
            stream.next().await
        };
        let Some(v) = event else { break };
        let (p, i) = ((v >> 32) as usize, v & 0xffff_ffff);
        if dense {
            assert_eq!(
                i, next_of[p],
                "publisher {p}: lost, duplicated or out of order"
            );
        } else {
            assert!(i >= next_of[p], "publisher {p}: out of order");
        }
        next_of[p] = i + 1;
        seen[p] += 1;
    }
    (seen, stream)
}

#[test]
fn a_blocking_stream_gets_every_event_in_order() {
    let per = if cfg!(debug_assertions) {
        20_000
    } else {
        100_000
    };
    on_each_executor(move || {
        let bus = EventBus::new();
        let a = bus
            .subscribe_stream(8, SlowSubscriberPolicy::Block)
            .unwrap();
        let b = bus
            .subscribe_stream(64, SlowSubscriberPolicy::Block)
            .unwrap();
        let publishers = two_publishers(bus, per);
        async move {
            let ((sa, a), (sb, b)) = futures::join!(drain(a, true, 1), drain(b, true, 2));
            for p in publishers {
                p.join().unwrap();
            }
            assert_eq!(sa, [per; 2]);
            assert_eq!(sb, [per; 2]);
            assert_eq!((a.delivered(), a.dropped()), (2 * per, 0));
            assert_eq!((b.delivered(), b.dropped()), (2 * per, 0));
        }
    });
}

#[test]
fn a_drop_oldest_stream_counts_what_it_skipped() {
    let per = if cfg!(debug_assertions) {
        20_000
    } else {
        100_000
    };
    on_each_executor(move || {
        let bus = EventBus::new();
        let s = bus
            .subscribe_stream(4, SlowSubscriberPolicy::DropOldest)
            .unwrap();
        let publishers = two_publishers(bus, per);
        async move {
            let (seen, s) = drain(s, false, 3).await;
            for p in publishers {
                p.join().unwrap();
            }
            assert_eq!(seen[0] + seen[1], s.delivered());
            assert_eq!(
                s.delivered() + s.dropped(),
                2 * per,
                "nothing lost silently"
            );
        }
    });
}

#[test]
fn dropping_the_stream_releases_a_blocked_publisher() {
    let bus = Arc::new(EventBus::<u64>::new());
    let stream = bus
        .subscribe_stream(2, SlowSubscriberPolicy::Block)
        .unwrap();
    let b = Arc::clone(&bus);
    // Two fill the buffer; the third waits for room until the stream goes.
    let publisher = thread::spawn(move || (0..3).map(|i| b.publish(i)).collect::<Vec<_>>());
    while stream.backlog() < 2 {
        thread::yield_now();
    }
    thread::sleep(Duration::from_millis(20));
    assert!(!publisher.is_finished(), "the third publish waits for room");
    drop(stream);
    assert_eq!(publisher.join().unwrap(), [1, 1, 0]);
    assert_eq!(bus.subscriber_count(), 0);
    assert_eq!(bus.publish(9), 0);
}

#[test]
fn a_stream_pending_on_an_idle_bus_ends_when_the_bus_is_dropped() {
    on_each_executor(|| {
        let bus = EventBus::<u64>::new();
        let mut s = bus
            .subscribe_stream(4, SlowSubscriberPolicy::Block)
            .unwrap();
        assert_eq!(bus.publish(1), 1);
        let t = thread::spawn(move || {
            thread::sleep(Duration::from_millis(5));
            bus.publish(2);
            thread::sleep(Duration::from_millis(5));
            drop(bus);
        });
        async move {
            assert_eq!(s.next().await, Some(1));
            assert_eq!(s.next().await, Some(2));
            assert_eq!(s.next().await, None);
            assert_eq!(s.next().await, None);
            t.join().unwrap();
        }
    });
}

#[test]
fn a_stream_joins_and_leaves_beside_callbacks() {
    let bus = EventBus::<u64>::new();
    let (tx, rx) = std::sync::mpsc::channel();
    let _cb = bus.subscribe(move |e| tx.send(*e).unwrap());
    let mut s = bus
        .subscribe_stream(4, SlowSubscriberPolicy::Block)
        .unwrap();
    assert_eq!(bus.subscriber_count(), 2);
    assert_eq!(bus.publish(5), 2);
    assert_eq!(futures::executor::block_on(s.next()), Some(5));
    assert_eq!(rx.recv().unwrap(), 5);
    assert!(s.id() > 0);
    drop(s);
    assert_eq!(bus.publish(6), 1);
}

#[test]
fn zero_or_huge_capacity_is_rejected() {
    let bus = EventBus::<u8>::new();
    for capacity in [0, (1 << 32) + 1] {
        let err = bus
            .subscribe_stream(capacity, SlowSubscriberPolicy::Block)
            .unwrap_err();
        assert!(err.to_string().contains("2^32"), "{err}");
    }
    assert!(bus
        .subscribe_stream(1, SlowSubscriberPolicy::DropOldest)
        .is_ok());
}
