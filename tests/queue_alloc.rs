//! No allocation per message in steady state: a counting global allocator sees zero
//! allocations while messages flow through a warmed-up queue, single and batched, with a
//! second thread on the other side.

mod alloc_common;

use alloc_common::allocations_during;
use std::thread;
use std::time::Duration;

use logbus::queue::bounded;

#[test]
fn steady_state_sends_and_receives_do_not_allocate() {
    const WARM_UP: u64 = 8_192;
    const WINDOW: u64 = 204_800;
    let (tx, rx) = bounded::<u64>(64);
    let (done_tx, done_rx) = bounded::<()>(1);
    let consumer = thread::spawn(move || {
        // Let the producer fill the queue and park once during the warm-up (parking_lot
        // sets up its per-thread parking data on a thread's first park).
        thread::sleep(Duration::from_millis(30));
        let mut out = Vec::with_capacity(64);
        let mut sum = 0u64;
        let mut n = 0u64;
        while n < 2 * (WARM_UP + WINDOW) {
            if n % 2 == 0 {
                sum += rx.recv().unwrap();
                n += 1;
            } else {
                out.clear();
                n += rx.recv_batch(&mut out, 64).unwrap() as u64;
                sum += out.iter().sum::<u64>();
            }
        }
        done_tx.send(()).unwrap();
        sum
    });
    let mut batch = Vec::with_capacity(32);
    let mut send_phase = |count: u64| {
        for i in 0..count {
            tx.send(i).unwrap();
            batch.push(i);
            if batch.len() == 32 {
                tx.send_batch(&mut batch).unwrap();
            }
        }
    };
    send_phase(WARM_UP);
    // And let the consumer find the queue empty and park once, still before counting.
    thread::sleep(Duration::from_millis(30));
    let counted = allocations_during(|| send_phase(WINDOW));
    done_rx.recv().unwrap();
    let sum = consumer.join().unwrap();
    assert_eq!(
        sum,
        2 * (WARM_UP * (WARM_UP - 1) / 2 + WINDOW * (WINDOW - 1) / 2)
    );
    assert_eq!(counted, 0, "allocations while messages flowed");
}
