//! The async API allocates nothing per message once warm: a counting global allocator sees
//! zero allocations while messages flow between tasks through `send_async`/`recv_async`
//! (tasks waiting and being woken all along), on `futures::executor` and on a tokio
//! current-thread runtime, SPSC on one thread and MPMC across threads. (A binary of its own:
//! counting windows must not overlap with another test's.)

mod alloc_common;

use std::thread;
use std::time::Duration;

use alloc_common::allocations_during;
use logbus::queue::{bounded, bounded_shared, unbounded, Receiver, Sender};

/// The tests' windows run one at a time (the allocator counts every thread's).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

type Make = fn() -> (Sender<u64>, Receiver<u64>);

fn flavours() -> [(&'static str, Make); 3] {
    [
        ("bounded", || bounded(8)),
        ("bounded_shared", || bounded_shared(8)),
        ("unbounded", unbounded),
    ]
}

async fn produce(tx: &Sender<u64>, from: u64, n: u64) {
    for i in from..from + n {
        tx.send_async(i).await.unwrap();
        if i % 16 == 0 {
            // Lets a consumer joined on this thread keep up with an unbounded queue (whose
            // sends never wait), so that it stays within its spare blocks.
            yield_now().await;
        }
    }
}

async fn yield_now() {
    let mut yielded = false;
    futures::future::poll_fn(move |cx| {
        if std::mem::replace(&mut yielded, true) {
            std::task::Poll::Ready(())
        } else {
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await
}

async fn consume(rx: &Receiver<u64>, n: u64) -> u64 {
    let mut sum = 0;
    for _ in 0..n {
        sum += rx.recv_async().await.unwrap();
    }
    sum
}

/// A producer and a consumer task joined on one thread (each waits for the other in
/// turn: a bounded queue fills and empties every few messages).
async fn spsc_round(tx: &Sender<u64>, rx: &Receiver<u64>, n: u64) {
    let ((), sum) = futures::join!(produce(tx, 0, n), consume(rx, n));
    assert_eq!(sum, n * (n - 1) / 2);
}

#[test]
fn spsc_tasks_on_one_thread_do_not_allocate() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for (name, make) in flavours() {
        let (tx, rx) = make();
        futures::executor::block_on(spsc_round(&tx, &rx, 10_000));
        let n = allocations_during(|| futures::executor::block_on(spsc_round(&tx, &rx, 100_000)));
        assert_eq!(n, 0, "{name} on futures::executor");
        rt.block_on(spsc_round(&tx, &rx, 10_000));
        let n = allocations_during(|| rt.block_on(spsc_round(&tx, &rx, 100_000)));
        assert_eq!(n, 0, "{name} on tokio current-thread");
    }
}

/// Makes a task wait once on each side of an empty (`recv_async`) and a full
/// (`send_async`, when bounded) queue, so that each wait set has made room for a waker
/// before counting starts (it allocates while it grows to the tasks waiting at once).
fn prewarm<T: Default>(tx: &Sender<T>, rx: &Receiver<T>) {
    use std::future::Future;
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    assert!(std::pin::pin!(rx.recv_async()).poll(&mut cx).is_pending());
    if tx.capacity().is_some() {
        while tx.try_send(T::default()).is_ok() {}
        assert!(std::pin::pin!(tx.send_async(T::default()))
            .poll(&mut cx)
            .is_pending());
        while rx.try_recv().is_ok() {}
    }
}

/// Sends `n` messages from `from`, each after taking a credit.
async fn produce_paced(tx: &Sender<u64>, credits: &Receiver<()>, from: u64, n: u64) {
    for i in from..from + n {
        credits.recv_async().await.unwrap();
        tx.send_async(i).await.unwrap();
    }
}

/// Receives `n` messages, giving a credit back for each.
async fn consume_paced(rx: &Receiver<u64>, credits: &Sender<()>, n: u64) -> u64 {
    let mut sum = 0;
    for _ in 0..n {
        sum += rx.recv_async().await.unwrap();
        credits.send_async(()).await.unwrap();
    }
    sum
}

#[test]
fn mpmc_tasks_across_threads_do_not_allocate() {
    // Two producer tasks and two consumer tasks, each on a thread of its own (its own
    // `block_on`), 2×2 through a small queue: tasks wait on both sides and wake each other
    // across threads. The main thread is one producer; the window is its second half. At
    // most 20 messages are in flight (credits come back through a bounded queue, tasks
    // waiting on it too), so the unbounded queue stays within its spare blocks.
    const WARM: u64 = 50_000;
    const WINDOW: u64 = 100_000;
    const PER: u64 = WARM + WINDOW;
    const IN_FLIGHT: usize = 20;
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for (name, make) in flavours() {
        let (tx, rx) = make();
        let (credit_tx, credit_rx) = bounded::<()>(IN_FLIGHT);
        prewarm(&tx, &rx);
        prewarm(&credit_tx, &credit_rx);
        for _ in 0..IN_FLIGHT {
            credit_tx.send(()).unwrap();
        }
        let consumers: Vec<_> = (0..2)
            .map(|_| {
                let (rx, credits) = (rx.clone(), credit_tx.clone());
                thread::spawn(move || {
                    futures::executor::block_on(consume_paced(&rx, &credits, PER))
                })
            })
            .collect();
        let (other_tx, other_credits) = (tx.clone(), credit_rx.clone());
        let other = thread::spawn(move || {
            futures::executor::block_on(produce_paced(&other_tx, &other_credits, 0, WARM));
            thread::sleep(Duration::from_millis(20));
            futures::executor::block_on(produce_paced(&other_tx, &other_credits, 0, WINDOW));
        });
        futures::executor::block_on(produce_paced(&tx, &credit_rx, 0, WARM));
        // Let the consumers drain and wait (register) once, still before counting.
        thread::sleep(Duration::from_millis(20));
        let counted = allocations_during(|| {
            futures::executor::block_on(produce_paced(&tx, &credit_rx, 0, WINDOW))
        });
        other.join().unwrap();
        let sum: u64 = consumers.into_iter().map(|c| c.join().unwrap()).sum();
        let want = 2 * (WARM * (WARM - 1) / 2 + WINDOW * (WINDOW - 1) / 2);
        assert_eq!(sum, want, "{name}");
        // A handful at most, never one per message (the window moves 200,000): a thread's
        // first contended lock sets up parking_lot's data for it, and on the unbounded
        // queue two producers' blocks in flight can outnumber its spare blocks at a rare
        // moment; neither is the async path's, and warm-up makes both unlikely.
        assert!(
            counted <= 4,
            "{name}: {counted} allocations while messages flowed"
        );
    }
}
