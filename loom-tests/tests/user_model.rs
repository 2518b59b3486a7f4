//! A loom model written the way a downstream user would write one: only logbus's public
//! API, `loom::model` and `loom::thread::spawn`, built with
//! `RUSTFLAGS="--cfg loom --cfg logbus_loom"` (here `--cfg logbus_loom` alone: this crate
//! has no loom code of its own to switch).
//!
//! The user's code: a worker thread publishes progress events into a logbus ring while the
//! main thread follows them with a reader; the user checks that the last event always
//! arrives and that nothing arrives twice.
#![cfg(logbus_loom)]

use logbus::ring::{ReadError, Ring, RingConfig, Start};

#[derive(Debug, Clone, PartialEq)]
enum Event {
    Progress(u32),
    Done,
}

#[test]
fn worker_progress_reaches_the_watcher() {
    loom::model(|| {
        let (mut events, ring) = Ring::single_producer(RingConfig::new(2)).unwrap();
        let mut watcher = ring.gating_reader(Start::Tail).unwrap();

        let worker = loom::thread::spawn(move || {
            events.publish(Event::Progress(50)).unwrap();
            events.publish(Event::Done).unwrap();
            // Dropping `events` closes the ring.
        });

        let mut seen = Vec::new();
        loop {
            match watcher.read() {
                Ok(event) => seen.push(event),
                Err(ReadError::Closed) => break,
                Err(other) => panic!("unexpected {other}"),
            }
        }
        worker.join().unwrap();
        assert_eq!(seen, [Event::Progress(50), Event::Done]);
    });
}
