//! No allocation per entry on the async read paths once warmed up: a counting global
//! allocator watches a window of publishing and async reading (`read_async`,
//! `read_batch_async`, `read_run_async`, the reader as a `Stream`, the bus's `EventStream`),
//! each read both on a ring that has the entry and on an empty one (the future wakes
//! itself, registers its waker, is woken by the publish), and must count zero.

mod alloc_common;

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use alloc_common::allocations_during;
use futures::StreamExt;
use logbus::observer::{EventBus, SlowSubscriberPolicy};
use logbus::ring::{Reader, Ring, RingConfig, SingleProducer, Start};

/// Polls `fut` with a waker that does nothing until it is ready; if it is still pending
/// after `publish_after` polls, calls `publish` once (the wake-up a pending read waits for).
fn run<F: Future>(fut: F, publish_after: usize, mut publish: impl FnMut()) -> F::Output {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    let mut polls = 0;
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        polls += 1;
        if polls == publish_after {
            publish();
        }
        assert!(polls < 1000, "the read never resolved");
    }
}

/// One round of every async read form, each once with its entries already published and
/// once pending until the publish.
fn round(p: &mut SingleProducer<u64>, r: &mut Reader<u64>, out: &mut Vec<u64>, i: u64) {
    p.publish(i).unwrap();
    assert_eq!(run(r.read_async(), 0, || {}), Ok(i));
    assert_eq!(
        run(r.read_async(), 40, || p.publish(i + 1).unwrap()),
        Ok(i + 1)
    );
    out.clear();
    p.publish(i).unwrap();
    assert_eq!(run(r.read_batch_async(out, 8), 0, || {}), Ok(1));
    out.clear();
    assert_eq!(
        run(r.read_batch_async(out, 8), 40, || p.publish(i).unwrap()),
        Ok(1)
    );
    p.publish(i).unwrap();
    let mut run_ = run(r.read_run_async(8), 0, || {}).unwrap();
    assert_eq!((&mut run_).next(), Some(&i));
    drop(run_);
    let mut run_ = run(r.read_run_async(8), 40, || p.publish(i).unwrap()).unwrap();
    assert_eq!((&mut run_).count(), 1);
    drop(run_);
    p.publish(i).unwrap();
    assert_eq!(run(r.next(), 0, || {}), Some(Ok(i)));
    assert_eq!(run(r.next(), 40, || p.publish(i).unwrap()), Some(Ok(i)));
}

#[test]
fn no_allocation_per_entry_on_async_reads() {
    let (mut producer, ring) = Ring::<u64>::single_producer(RingConfig::new(64)).unwrap();
    let mut reader = ring.gating_reader(Start::Tail).unwrap();
    let mut out = Vec::with_capacity(8);
    for i in 0..100 {
        round(&mut producer, &mut reader, &mut out, i);
    }
    let n = allocations_during(|| {
        for i in 100..1_100 {
            round(&mut producer, &mut reader, &mut out, i);
        }
    });
    assert_eq!(n, 0, "allocations on the async read paths");
}

#[test]
fn no_allocation_per_event_on_an_event_stream() {
    for policy in [
        SlowSubscriberPolicy::Block,
        SlowSubscriberPolicy::DropOldest,
    ] {
        let bus = EventBus::<u64>::new();
        let mut events = bus.subscribe_stream(64, policy).unwrap();
        let mut round = |i: u64| {
            assert_eq!(bus.publish(i), 1);
            assert_eq!(run(events.next(), 0, || {}), Some(i));
            let got = run(events.next(), 40, || assert_eq!(bus.publish(i + 1), 1));
            assert_eq!(got, Some(i + 1));
        };
        for i in 0..100 {
            round(i);
        }
        let n = allocations_during(|| {
            for i in 100..1_100 {
                round(i);
            }
        });
        assert_eq!(n, 0, "allocations on an event stream ({policy:?})");
    }
}
