//! The ring's async reads (`read_async`, `read_batch_async`, `read_run_async`, the reader
//! as a `Stream`): the outcomes of the blocking reads (entries, `Lagged`, `Closed`) on tokio
//! multi-thread, tokio current-thread and `futures::executor`; a million randomly cancelled
//! read futures under contention, with no entry lost, duplicated or out of order.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::thread;
use std::time::Duration;

use futures::StreamExt;
use logbus::ring::{LapPolicy, ReadError, Reader, Ring, RingConfig, Start};

/// Runs the future `make()` builds on each executor the async API is tested on.
pub(crate) fn on_each_executor<F, Fut>(make: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    multi.block_on(multi.spawn(make())).unwrap();
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    current.block_on(make());
    futures::executor::block_on(make());
}

/// A producer thread publishes `0..n` (in batches of up to 5), then drops its handle,
/// which closes the ring.
fn publish_then_close(n: u64, capacity: usize) -> (Reader<u64>, thread::JoinHandle<()>) {
    let (mut producer, ring) = Ring::single_producer(RingConfig::new(capacity)).unwrap();
    let reader = ring.gating_reader(Start::Tail).unwrap();
    let t = thread::spawn(move || {
        let mut i = 0;
        let mut batch = Vec::new();
        while i < n {
            let k = (i % 5 + 1).min(n - i);
            batch.extend(i..i + k);
            producer.publish_batch(&mut batch).unwrap();
            i += k;
            if i % 97 == 0 {
                thread::sleep(Duration::from_micros(50)); // the reader catches up and waits
            }
        }
    });
    (reader, t)
}

const N: u64 = 20_000;

#[test]
fn read_async_sees_every_entry_then_closed() {
    on_each_executor(|| async {
        let (mut reader, t) = publish_then_close(N, 16);
        for i in 0..N {
            assert_eq!(reader.read_async().await, Ok(i));
        }
        assert_eq!(reader.read_async().await, Err(ReadError::Closed));
        assert_eq!(reader.read_async().await, Err(ReadError::Closed));
        t.join().unwrap();
    });
}

#[test]
fn read_batch_async_sees_every_entry_in_order() {
    on_each_executor(|| async {
        let (mut reader, t) = publish_then_close(N, 16);
        let mut out = Vec::new();
        let mut next = 0;
        loop {
            out.clear();
            match reader.read_batch_async(&mut out, 7).await {
                Ok(n) => {
                    assert!((1..=7).contains(&n));
                    assert_eq!(out.len(), n);
                    for v in &out {
                        assert_eq!(*v, next);
                        next += 1;
                    }
                }
                Err(e) => {
                    assert_eq!(e, ReadError::Closed);
                    break;
                }
            }
        }
        assert_eq!(next, N);
        assert_eq!(reader.read_batch_async(&mut out, 0).await, Ok(0));
        t.join().unwrap();
    });
}

#[test]
fn read_run_async_lends_every_entry_in_order() {
    on_each_executor(|| async {
        let (mut reader, t) = publish_then_close(N, 16);
        let mut next = 0;
        loop {
            match reader.read_run_async(9).await {
                Ok(mut run) => {
                    assert!(!run.is_empty() && run.len() <= 9);
                    for v in &mut run {
                        assert_eq!(*v, next);
                        next += 1;
                    }
                }
                Err(e) => {
                    assert_eq!(e, ReadError::Closed);
                    break;
                }
            }
        }
        assert_eq!(next, N);
        t.join().unwrap();
    });
}

#[test]
fn a_reader_is_a_stream_that_ends_when_the_ring_closes() {
    on_each_executor(|| async {
        let (mut reader, t) = publish_then_close(N, 16);
        let mut next = 0;
        while let Some(v) = reader.next().await {
            assert_eq!(v, Ok(next));
            next += 1;
        }
        assert_eq!(next, N);
        assert!(reader.next().await.is_none());
        t.join().unwrap();
    });
}

#[test]
fn a_lapped_reader_is_told_how_many_it_missed() {
    on_each_executor(|| async {
        let config = RingConfig::new(4).overflow(LapPolicy::DropOldest);
        let (mut producer, ring) = Ring::single_producer(config).unwrap();
        let mut reader = ring.reader(Start::Tail).unwrap();
        let mut stream_reader = ring.reader(Start::Tail).unwrap();
        for i in 0..10u64 {
            producer.publish(i).unwrap();
        }
        assert_eq!(reader.read_async().await, Err(ReadError::Lagged(6)));
        assert_eq!(reader.read_async().await, Ok(6));
        let mut out = Vec::new();
        assert_eq!(reader.read_batch_async(&mut out, 8).await, Ok(3));
        assert_eq!(out, [7, 8, 9]);
        assert_eq!(stream_reader.next().await, Some(Err(ReadError::Lagged(6))));
        assert_eq!(stream_reader.next().await, Some(Ok(6)));
        // A later publish wakes a pending read.
        let t = thread::spawn(move || {
            thread::sleep(Duration::from_millis(5));
            producer.publish(10).unwrap();
        });
        assert_eq!(reader.read_async().await, Ok(10));
        t.join().unwrap();
        assert_eq!(reader.read_async().await, Err(ReadError::Closed));
    });
}

#[test]
fn a_pending_read_wakes_when_the_ring_closes() {
    on_each_executor(|| async {
        let (producer, ring) = Ring::<u64>::multi_producer(RingConfig::new(8)).unwrap();
        let mut reader = ring.reader(Start::Tail).unwrap();
        let t = thread::spawn(move || {
            thread::sleep(Duration::from_millis(5));
            drop(producer);
        });
        assert_eq!(reader.read_async().await, Err(ReadError::Closed));
        t.join().unwrap();
    });
}

/// Ready after `polls` polls that each wake the task at once: a cancellation at a random
/// point of a read's life (before its first poll, among its self-wakes, while it is
/// registered, right after a producer woke it).
struct CancelAfter(u32);

impl Future for CancelAfter {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 == 0 {
            return Poll::Ready(());
        }
        self.0 -= 1;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// `read` against `cancel`, polled in the given order: `None` when `cancel` won (and
/// `read` was dropped).
async fn race<F: Future + Unpin>(
    read: F,
    cancel: CancelAfter,
    read_first: bool,
) -> Option<F::Output> {
    use futures::future::{select, Either};
    if read_first {
        match select(read, cancel).await {
            Either::Left((r, _)) => Some(r),
            Either::Right(((), _)) => None,
        }
    } else {
        match select(cancel, read).await {
            Either::Right((r, _)) => Some(r),
            Either::Left(((), _)) => None,
        }
    }
}

/// What one reader task saw: entries read, futures cancelled.
#[derive(Debug, Default, Clone, Copy)]
struct Raced {
    read: u64,
    cancelled: u64,
}

/// Reads every entry of a ring two producers fill (`(producer << 32) | i`), racing each
/// read future against a random cancellation; checks dense sequence order per producer.
async fn race_reads(
    mut reader: Reader<u64>,
    seed: u64,
    batch: bool,
    cancelled: &AtomicU64,
    target: u64,
    enough: &AtomicBool,
) -> ([u64; 2], Raced) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut next_of = [0u64; 2];
    let mut raced = Raced::default();
    let mut out = Vec::with_capacity(8);
    let mut check = |v: u64, raced: &mut Raced| {
        let (p, i) = ((v >> 32) as usize, v & 0xffff_ffff);
        assert_eq!(
            i, next_of[p],
            "producer {p}: lost, duplicated or out of order"
        );
        next_of[p] += 1;
        raced.read += 1;
    };
    loop {
        // Mostly early cancellations, some late ones (after the self-wakes: registered).
        let polls = if rng.u8(..) < 200 {
            rng.u32(0..4)
        } else {
            rng.u32(0..40)
        };
        let cancel = CancelAfter(polls);
        let read_first = rng.bool();
        let outcome = if batch {
            out.clear();
            race(reader.read_batch_async(&mut out, 8), cancel, read_first)
                .await
                .map(|r| r.map(|_| ()))
        } else {
            race(reader.read_async(), cancel, read_first)
                .await
                .map(|r| r.map(|v| out.push(v)))
        };
        match outcome {
            None => {
                raced.cancelled += 1;
                if cancelled.fetch_add(1, Ordering::Relaxed) + 1 >= target {
                    // Enough: the producers stop, which closes the ring.
                    enough.store(true, Ordering::Relaxed);
                }
            }
            Some(Ok(())) => {
                for v in out.drain(..) {
                    check(v, &mut raced);
                }
            }
            Some(Err(ReadError::Closed)) => break,
            Some(Err(e)) => panic!("{e}"),
        }
    }
    (next_of, raced)
}

/// Two producer threads publish into a small ring until the two reader tasks (one reading
/// entries, one batches) have cancelled a third of a million read futures between them, on
/// each of the three executors; each reader saw every entry exactly once, in order.
#[test]
fn a_million_cancelled_reads_lose_nothing() {
    const PER_EXECUTOR: u64 = 340_000;
    let total = Arc::new(AtomicU64::new(0));
    let t = Arc::clone(&total);
    on_each_executor(move || {
        let total = Arc::clone(&t);
        async move {
            let (producer, ring) = Ring::<u64>::multi_producer(RingConfig::new(32)).unwrap();
            let readers: Vec<_> = (0..2)
                .map(|_| ring.gating_reader(Start::Tail).unwrap())
                .collect();
            let enough = Arc::new(AtomicBool::new(false));
            let cancelled = AtomicU64::new(0);
            let producers: Vec<_> = (0..2u64)
                .map(|p| {
                    let mut producer = producer.clone();
                    let enough = Arc::clone(&enough);
                    thread::spawn(move || {
                        let mut i = 0;
                        while !enough.load(Ordering::Relaxed) {
                            producer.publish((p << 32) | i).unwrap();
                            i += 1;
                        }
                        i
                    })
                })
                .collect();
            drop(producer);
            let tasks: Vec<_> = readers
                .into_iter()
                .enumerate()
                .map(|(k, r)| {
                    race_reads(r, 7 + k as u64, k == 1, &cancelled, PER_EXECUTOR, &enough)
                })
                .collect();
            let raced = futures::future::join_all(tasks).await;
            let published: Vec<u64> = producers.into_iter().map(|p| p.join().unwrap()).collect();
            for (seen, r) in raced {
                assert_eq!(
                    seen[..],
                    published[..],
                    "every entry of each producer, once"
                );
                assert_eq!(r.read, published.iter().sum::<u64>());
                total.fetch_add(r.cancelled, Ordering::Relaxed);
            }
        }
    });
    let cancelled = total.load(Ordering::Relaxed);
    assert!(
        cancelled >= 1_000_000,
        "only {cancelled} read futures were cancelled"
    );
}

/// A waker whose `wake` panics (an executor's bug).
struct PanickingWake;

impl std::task::Wake for PanickingWake {
    fn wake(self: Arc<Self>) {
        panic!("a waker panicked (on purpose, in a test)");
    }
}

/// A waker that counts its wake-ups.
struct CountingWake(AtomicU64);

impl std::task::Wake for CountingWake {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// One task's waker panics when a publish wakes it. The publish still succeeds (the panic
/// does not unwind into the producer, half way through it), the other task waiting on the
/// ring is woken by the same publish, and the ring still closes when the producer goes.
#[test]
fn a_panicking_waker_strands_neither_the_producer_nor_other_tasks() {
    use std::task::Waker;
    let (mut producer, ring) = Ring::single_producer(RingConfig::new(8)).unwrap();
    let mut bad_reader = ring.gating_reader(Start::Tail).unwrap();
    let mut good_reader = ring.gating_reader(Start::Tail).unwrap();
    let bad = Waker::from(Arc::new(PanickingWake));
    let count = Arc::new(CountingWake(AtomicU64::new(0)));
    let good = Waker::from(Arc::clone(&count));
    let mut bad_read = bad_reader.read_async();
    let mut good_read = good_reader.read_async();
    assert!(Pin::new(&mut bad_read)
        .poll(&mut Context::from_waker(&bad))
        .is_pending());
    assert!(Pin::new(&mut good_read)
        .poll(&mut Context::from_waker(&good))
        .is_pending());
    let published = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        producer.publish_batch(&mut vec![1u64, 2]).unwrap();
    }));
    assert!(
        published.is_ok(),
        "a waker's panic unwound into publish_batch"
    );
    assert_eq!(
        count.0.load(Ordering::Relaxed),
        1,
        "the other task was not woken"
    );
    assert_eq!(
        Pin::new(&mut good_read).poll(&mut Context::from_waker(&good)),
        Poll::Ready(Ok(1))
    );
    drop((bad_read, good_read));
    drop(producer); // closes the ring
    assert_eq!(good_reader.read_timeout(Duration::from_secs(5)), Ok(2));
    assert_eq!(
        good_reader.read_timeout(Duration::from_secs(5)),
        Err(logbus::ring::ReadTimeoutError::Closed)
    );
    drop(bad_reader);
}
