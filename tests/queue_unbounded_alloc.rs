//! `unbounded()` allocates nothing per message in steady state: drained blocks go back to
//! the queue's spares and are linked again. A counting global allocator sees zero
//! allocations while messages flow through a warmed-up queue, on one thread and with a
//! producer and a consumer on two. (A binary of its own: counting windows must not overlap
//! with another test's.)

mod alloc_common;

use alloc_common::allocations_during;
use std::thread;
use std::time::Duration;

use logbus::queue::{bounded, unbounded};

#[test]
fn steady_state_unbounded_traffic_does_not_allocate() {
    // One thread: bursts of 100 messages (four blocks) in, then out.
    let (tx, rx) = unbounded::<u64>();
    let burst = |rounds: u64| {
        for r in 0..rounds {
            for i in 0..100 {
                tx.send(r * 100 + i).unwrap();
            }
            for i in 0..100 {
                assert_eq!(rx.try_recv(), Ok(r * 100 + i));
            }
        }
    };
    burst(10);
    // The fewest of three windows: the counter sees every thread of the process, and on a
    // loaded machine one of the harness's own may allocate during a window; an allocation
    // per message or per block would show in each.
    let fewest = (0..3)
        .map(|_| allocations_during(|| burst(1_000)))
        .min()
        .unwrap();
    assert_eq!(fewest, 0, "single thread");

    // Two threads: at most 20 messages in flight (credits come back through a bounded
    // queue, which never allocates), so at most three blocks are in use at once.
    const WARM_UP: u64 = 20_000;
    const WINDOW: u64 = 100_000;
    const IN_FLIGHT: usize = 20;
    let (tx, rx) = unbounded::<u64>();
    let (credit_tx, credit_rx) = bounded::<()>(IN_FLIGHT);
    for _ in 0..IN_FLIGHT {
        credit_tx.send(()).unwrap();
    }
    let consumer = thread::spawn(move || {
        // Park once during the warm-up (parking_lot sets up per-thread data on a first
        // park), then keep up.
        thread::sleep(Duration::from_millis(30));
        let mut sum = 0u64;
        for msg in rx.iter() {
            sum += msg;
            credit_tx.send(()).unwrap();
        }
        sum
    });
    let send = |from: u64, count: u64| {
        for i in from..from + count {
            credit_rx.recv().unwrap();
            tx.send(i).unwrap();
        }
    };
    send(0, WARM_UP);
    // Let the consumer drain and park on the empty queue once, still before counting.
    thread::sleep(Duration::from_millis(30));
    let counted = allocations_during(|| send(WARM_UP, WINDOW));
    drop(tx);
    let n = WARM_UP + WINDOW;
    assert_eq!(consumer.join().unwrap(), n * (n - 1) / 2);
    assert_eq!(counted, 0, "allocations while messages flowed");
}
