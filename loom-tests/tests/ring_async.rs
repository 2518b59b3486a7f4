//! Loom models of the ring's async reads: a task's waker registration racing a publish,
//! several tasks waiting for one publish, a cancelled read racing the publish's wake-up.
//!
//! Producers notify waiting readers with the light fence (`notify_all_light`), so a task's
//! registration must complete the handshake with the heavy one (`WaitSet::poll_until` with
//! light notifiers). Each model keeps its producer alive until the reads resolve: dropping
//! it would close the ring, and the close's wake-up (a full fence) would hide a lost one.
//! The light fences are modelled as on the membarrier build (the shim's loom `asym_fence`).
#![cfg(logbus_loom)]

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Waker};

use futures_core::Stream;
use logbus::ring::{Ring, RingConfig, Start};
use loom::sync::Arc;
use loom::thread;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(f);
}

/// A task reads while a producer publishes one entry: the task resolves with it (loom
/// reports a deadlock in `block_on` if the task could stay pending with nobody to wake it).
/// Key ordering: the heavy fence after the task's registration, against the producer's
/// light fence before its look at the waiters; without it the registration and the publish
/// can miss each other.
#[test]
fn a_task_read_racing_a_publish() {
    model(|| {
        let (mut producer, ring) = Ring::single_producer(RingConfig::new(2)).unwrap();
        let mut reader = ring.gating_reader(Start::Tail).unwrap();
        let t = thread::spawn(move || {
            producer.publish(Arc::new(7u64)).unwrap();
            producer
        });
        let got = loom::future::block_on(reader.read_async()).unwrap();
        assert_eq!(*got, 7);
        drop(t.join().unwrap());
    });
}

/// Two tasks on two threads, each with its own reader, wait for one publish: one wake-up
/// reaches both. Key ordering: as in `a_task_read_racing_a_publish`, for each registration.
#[test]
fn two_tasks_wait_for_one_publish() {
    model(|| {
        let (mut producer, ring) = Ring::<Arc<u64>>::single_producer(RingConfig::new(2)).unwrap();
        let mut first = ring.reader(Start::Tail).unwrap();
        let mut second = ring.reader(Start::Tail).unwrap();
        let other = thread::spawn(move || {
            let got = loom::future::block_on(second.read_async()).unwrap();
            assert_eq!(*got, 3);
        });
        let t = thread::spawn(move || {
            producer.publish(Arc::new(3u64)).unwrap();
            producer
        });
        let got = loom::future::block_on(first.read_async()).unwrap();
        assert_eq!(*got, 3);
        other.join().unwrap();
        drop(t.join().unwrap());
    });
}

/// A task's read registers (polled once, pending), then is dropped (cancelled) while the
/// producer publishes and wakes it; a new read of the same reader resolves with the entry,
/// which the cancelled one did not take. The wake-up may land on the cancelled
/// registration, between the two, or on the new one. Key ordering: the new registration's
/// heavy fence (a wake-up that went to the cancelled one is gone).
#[test]
fn a_cancelled_read_racing_a_wake_up_loses_nothing() {
    model(|| {
        let (mut producer, ring) = Ring::single_producer(RingConfig::new(2)).unwrap();
        let mut reader = ring.gating_reader(Start::Tail).unwrap();
        let t = thread::spawn(move || {
            producer.publish(Arc::new(5u64)).unwrap();
            producer
        });
        let mut cx = Context::from_waker(Waker::noop());
        let first = {
            let mut read = pin!(reader.read_async());
            read.as_mut().poll(&mut cx)
        }; // dropped here: cancelled unless it resolved
        let got = match first {
            std::task::Poll::Ready(r) => r.unwrap(),
            std::task::Poll::Pending => loom::future::block_on(reader.read_async()).unwrap(),
        };
        assert_eq!(*got, 5);
        assert_eq!(reader.position(), 1);
        drop(t.join().unwrap());
    });
}

/// A task waits on the bus's event stream while another thread publishes one event: the
/// stream yields it (it reads a ring of its own, so the key ordering is that of
/// `a_task_read_racing_a_publish`); then dropping the stream unsubscribes.
#[test]
fn an_event_stream_racing_a_publish() {
    use logbus::observer::{EventBus, SlowSubscriberPolicy};
    model(|| {
        let bus = EventBus::<u8>::new();
        let mut events = bus
            .subscribe_stream(1, SlowSubscriberPolicy::Block)
            .unwrap();
        let t = thread::spawn(move || {
            assert_eq!(bus.publish(4), 1);
            bus
        });
        let got = loom::future::block_on(std::future::poll_fn(|cx| {
            std::pin::Pin::new(&mut events).poll_next(cx)
        }));
        assert_eq!(got, Some(4));
        let bus = t.join().unwrap();
        drop(events);
        assert_eq!(bus.subscriber_count(), 0);
    });
}
