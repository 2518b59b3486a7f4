//! The async API (`send_async`, `recv_async`, the batch forms, `stream`, `sink`) on every
//! flavour, each behaviour run on tokio's multi-thread and current-thread runtimes and on
//! `futures`' own executor, with threads and tasks mixed on one queue; and inside
//! `tokio::select!` and `futures::select!`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::thread;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use logbus::queue::{
    after, bounded, bounded_shared, never, tick, unbounded, Receiver, RecvError, Sender,
    TryRecvError, TrySendError,
};

/// Where an async test body runs.
#[derive(Clone, Copy, Debug)]
pub enum Exec {
    /// tokio, two worker threads; tasks are `tokio::spawn`ed.
    TokioMulti,
    /// tokio on one thread; every task shares it.
    TokioCurrent,
    /// `futures::executor::block_on`; each spawned task gets a thread of its own.
    Futures,
}

/// A spawned task: awaits its end (and re-raises its panic).
pub struct Joined<R>(Pin<Box<dyn Future<Output = R> + Send>>);

impl<R> Future for Joined<R> {
    type Output = R;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<R> {
        self.0.as_mut().poll(cx)
    }
}

impl Exec {
    pub const ALL: [Exec; 3] = [Exec::TokioMulti, Exec::TokioCurrent, Exec::Futures];

    /// Spawns `fut` as a task of this executor.
    pub fn spawn<R: Send + 'static>(
        self,
        fut: impl Future<Output = R> + Send + 'static,
    ) -> Joined<R> {
        match self {
            Exec::TokioMulti | Exec::TokioCurrent => {
                let handle = tokio::spawn(fut);
                Joined(Box::pin(
                    async move { handle.await.expect("task panicked") },
                ))
            }
            Exec::Futures => {
                // The end of the task travels through a queue of our own: the sender drops
                // (disconnecting it) when the thread ends, panicking or not.
                let (done_tx, done_rx) = bounded::<R>(1);
                let t = thread::spawn(move || {
                    done_tx.send(futures::executor::block_on(fut)).ok().unwrap();
                });
                Joined(Box::pin(async move {
                    match done_rx.recv_async().await {
                        Ok(r) => r,
                        Err(_) => std::panic::resume_unwind(t.join().unwrap_err()),
                    }
                }))
            }
        }
    }

    /// Runs `body` to completion on this executor.
    pub fn run<Fut: Future<Output = ()> + Send + 'static>(self, body: Fut) {
        match self {
            Exec::TokioMulti => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_time()
                .build()
                .unwrap()
                .block_on(async move { tokio::spawn(body).await.unwrap() }),
            Exec::TokioCurrent => tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap()
                .block_on(body),
            Exec::Futures => futures::executor::block_on(body),
        }
    }
}

/// Runs the body `make(exec)` on each executor in turn.
pub fn on_each_executor<Fut>(make: impl Fn(Exec) -> Fut)
where
    Fut: Future<Output = ()> + Send + 'static,
{
    for exec in Exec::ALL {
        exec.run(make(exec));
    }
}

/// The queues under test: name and constructor (capacity where bounded).
pub type Make<T> = fn(usize) -> (Sender<T>, Receiver<T>);

pub fn flavours<T>() -> [(&'static str, Make<T>); 4] {
    [
        ("bounded", bounded::<T> as Make<T>),
        ("bounded_shared", bounded_shared::<T>),
        ("unbounded", |_| unbounded::<T>()),
        ("zero", |_| bounded::<T>(0)),
    ]
}

/// A future that yields once (lets other tasks run), on any executor.
pub async fn yield_now() {
    let mut yielded = false;
    futures::future::poll_fn(move |cx| {
        if yielded {
            Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
    .await
}

#[test]
fn spsc_tasks_every_flavour_every_executor() {
    const N: u64 = 2_000;
    for (name, make) in flavours::<u64>() {
        on_each_executor(move |exec| async move {
            let (tx, rx) = make(4);
            let producer = exec.spawn(async move {
                for i in 0..N {
                    tx.send_async(i).await.unwrap();
                }
            });
            let mut next = 0;
            while let Ok(m) = rx.recv_async().await {
                assert_eq!(m, next, "{name} on {exec:?}");
                next += 1;
            }
            assert_eq!(next, N, "{name} on {exec:?}");
            producer.await;
        });
    }
}

#[test]
fn mpmc_tasks_and_threads_mixed() {
    // On each side two tasks and one thread share the queue: every message arrives once,
    // each producer's in order at each consumer.
    const N: u64 = 1_000;
    for (name, make) in flavours::<(u64, u64)>() {
        on_each_executor(move |exec| async move {
            let (tx, rx) = make(3);
            let mut producers = Vec::new();
            for p in 0..2 {
                let tx = tx.clone();
                producers.push(exec.spawn(async move {
                    for i in 0..N {
                        tx.send_async((p, i)).await.unwrap();
                    }
                }));
            }
            let thread_tx = tx.clone();
            let thread_producer = thread::spawn(move || {
                for i in 0..N {
                    thread_tx.send((2, i)).unwrap();
                }
            });
            drop(tx);
            let check = |got: &[(u64, u64)]| {
                let mut last = [None::<u64>; 3];
                for &(p, i) in got {
                    let p = p as usize;
                    assert!(
                        last[p].is_none_or(|l| l < i),
                        "{name}: producer {p} out of order"
                    );
                    last[p] = Some(i);
                }
            };
            let mut consumers = Vec::new();
            let (got_tx, got_rx) = unbounded::<Vec<(u64, u64)>>();
            for _ in 0..2 {
                let (rx, got_tx) = (rx.clone(), got_tx.clone());
                consumers.push(exec.spawn(async move {
                    let mut got = Vec::new();
                    while let Ok(m) = rx.recv_async().await {
                        got.push(m);
                    }
                    got_tx.send(got).unwrap();
                }));
            }
            let thread_rx = rx.clone();
            let thread_consumer = thread::spawn(move || thread_rx.iter().collect::<Vec<_>>());
            drop(rx);
            for p in producers {
                p.await;
            }
            thread_producer.join().unwrap();
            for c in consumers {
                c.await;
            }
            drop(got_tx);
            let mut all = thread_consumer.join().unwrap();
            check(&all);
            for got in got_rx.iter() {
                check(&got);
                all.extend(got);
            }
            all.sort_unstable();
            let want: Vec<_> = (0..3).flat_map(|p| (0..N).map(move |i| (p, i))).collect();
            assert_eq!(all, want, "{name} on {exec:?}");
        });
    }
}

#[test]
fn a_parked_thread_and_a_waiting_task_on_one_side() {
    // Both wait on an empty queue; two messages arrive, one for each.
    for (name, make) in flavours::<u32>() {
        on_each_executor(move |exec| async move {
            let (tx, rx) = make(2);
            let thread_rx = rx.clone();
            let parked = thread::spawn(move || thread_rx.recv());
            let task = exec.spawn(async move {
                let m = rx.recv_async().await.unwrap();
                assert!(m == 1 || m == 2, "{name}");
            });
            thread::sleep(Duration::from_millis(5));
            let sender = thread::spawn(move || {
                tx.send(1).unwrap();
                tx.send(2).unwrap();
            });
            task.await;
            let m = parked.join().unwrap().unwrap();
            assert!(m == 1 || m == 2, "{name}");
            sender.join().unwrap();
        });
    }
}

#[test]
fn a_full_queue_wakes_a_waiting_sender_task_and_thread() {
    for (name, make) in flavours::<u32>() {
        if name == "unbounded" {
            continue; // never full
        }
        on_each_executor(move |exec| async move {
            let (tx, rx) = make(1);
            if name != "zero" {
                tx.send(0).unwrap();
            }
            let thread_tx = tx.clone();
            let blocked = thread::spawn(move || thread_tx.send(1).unwrap());
            let task = exec.spawn(async move { tx.send_async(2).await.unwrap() });
            let mut got = Vec::new();
            let want = if name == "zero" { 2 } else { 3 };
            while got.len() < want {
                got.push(rx.recv_async().await.unwrap());
            }
            task.await;
            blocked.join().unwrap();
            got.sort_unstable();
            assert_eq!(got, [0, 1, 2][3 - want..], "{name} on {exec:?}");
        });
    }
}

#[test]
fn disconnection_wakes_waiting_tasks_and_hands_messages_back() {
    for (name, make) in flavours::<u32>() {
        on_each_executor(move |exec| async move {
            // Receivers gone: a waiting (or new) send fails with its message.
            let (tx, rx) = make(1);
            if name == "bounded" || name == "bounded_shared" {
                tx.send(0).unwrap();
            }
            let sender = exec.spawn(async move {
                let r = tx.send_async(7).await;
                if name == "unbounded" {
                    // An unbounded send never waits: sent if the task ran before the
                    // receiver went, handed back otherwise.
                    assert!(r.is_ok() || r.unwrap_err().into_inner() == 7);
                } else {
                    assert_eq!(r.unwrap_err().into_inner(), 7, "{name}");
                }
                if name != "unbounded" {
                    assert_eq!(tx.send_async(8).await.unwrap_err().into_inner(), 8);
                }
                tx
            });
            thread::sleep(Duration::from_millis(5));
            drop(rx);
            let tx = sender.await;
            assert_eq!(
                tx.send_async(9).await.unwrap_err().into_inner(),
                9,
                "{name}"
            );
            // Senders gone: a waiting receive ends with `RecvError` after the messages.
            let (tx, rx) = make(1);
            let receiver = exec.spawn(async move {
                assert_eq!(rx.recv_async().await, Err(RecvError), "{name}");
                assert_eq!(rx.recv_async().await, Err(RecvError));
            });
            thread::sleep(Duration::from_millis(5));
            drop(tx);
            receiver.await;
        });
    }
}

#[test]
fn two_async_ends_meet_on_a_rendezvous_queue() {
    // Both ends tasks, on a one-thread runtime too: the sender parks its message in the
    // hand-off slot, the receiver takes it.
    on_each_executor(|_| async {
        let (tx, rx) = bounded::<u32>(0);
        let (sent, got) = futures::join!(
            async {
                for i in 0..100 {
                    tx.send_async(i).await.unwrap();
                }
            },
            async {
                let mut got = Vec::new();
                for _ in 0..100 {
                    got.push(rx.recv_async().await.unwrap());
                }
                got
            }
        );
        let () = sent;
        assert_eq!(got, (0..100).collect::<Vec<_>>());
    });
}

#[test]
fn rendezvous_send_completes_only_when_taken_and_cancelling_takes_it_back() {
    let (tx, rx) = bounded::<u32>(0);
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    let mut send = tx.send_async(5);
    assert!(Pin::new(&mut send).poll(&mut cx).is_pending());
    // The message waits in the slot: a receiver (thread or task) can take it.
    assert_eq!(rx.len(), 0);
    drop(send);
    // Taken back: nothing to receive, and no receiver was waiting for `try_send`.
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    // A task waiting to receive does not make `try_send` succeed (it would have to block
    // until the task runs): a typed `Full`, never a hang.
    let mut recv = rx.recv_async();
    assert!(Pin::new(&mut recv).poll(&mut cx).is_pending());
    assert_eq!(tx.try_send(6), Err(TrySendError::Full(6)));
    // A send future meets it.
    let mut send = tx.send_async(7);
    assert!(Pin::new(&mut send).poll(&mut cx).is_pending());
    assert_eq!(Pin::new(&mut recv).poll(&mut cx), Poll::Ready(Ok(7)));
    assert_eq!(Pin::new(&mut send).poll(&mut cx), Poll::Ready(Ok(())));
    // Taken, then the future dropped before it saw it: sent, not taken back.
    let mut send = tx.send_async(8);
    assert!(Pin::new(&mut send).poll(&mut cx).is_pending());
    assert_eq!(rx.try_recv(), Ok(8));
    drop(send);
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
}

#[test]
fn send_cancel_returns_the_message_only_when_not_sent() {
    for (name, make) in flavours::<u32>() {
        let (tx, rx) = make(1);
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        if name != "zero" {
            tx.send(0).unwrap();
        }
        let mut send = tx.send_async(1);
        let pending = Pin::new(&mut send).poll(&mut cx).is_pending();
        assert_eq!(pending, name != "unbounded", "{name}");
        if pending {
            assert_eq!(send.cancel(), Some(1), "{name}");
        } else {
            assert_eq!(send.cancel(), None, "{name}");
        }
        if name == "zero" {
            let mut send = tx.send_async(2);
            assert!(Pin::new(&mut send).poll(&mut cx).is_pending());
            assert_eq!(rx.try_recv(), Ok(2));
            assert_eq!(send.cancel(), None, "taken: sent");
        }
    }
}

#[test]
fn batches_async() {
    for (name, make) in flavours::<u32>() {
        on_each_executor(move |exec| async move {
            let (tx, rx) = make(4);
            let producer = exec.spawn(async move {
                let mut batch = Vec::new();
                for round in 0..50u32 {
                    batch.extend(round * 10..round * 10 + 10);
                    tx.send_batch_async(&mut batch).await.unwrap();
                    assert!(batch.is_empty());
                }
            });
            let mut out = Vec::new();
            while let Ok(n) = rx.recv_batch_async(&mut out, 7).await {
                assert!((1..=7).contains(&n), "{name}");
            }
            assert_eq!(out, (0..500).collect::<Vec<_>>(), "{name} on {exec:?}");
            producer.await;
            // Disconnected: the batch keeps what was not sent.
            let (tx, rx) = make(4);
            drop(rx);
            let mut batch = vec![1, 2, 3];
            let e = tx.send_batch_async(&mut batch).await.unwrap_err();
            assert_eq!(e.sent, 0);
            assert_eq!(batch, [1, 2, 3], "{name}");
        });
    }
}

#[test]
fn a_cancelled_batch_send_leaves_the_rest_in_the_batch() {
    let (tx, rx) = bounded::<u32>(2);
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    let mut batch = vec![1, 2, 3, 4, 5];
    let mut fut = tx.send_batch_async(&mut batch);
    assert!(Pin::new(&mut fut).poll(&mut cx).is_pending());
    drop(fut);
    assert_eq!(batch, [3, 4, 5]);
    assert_eq!(rx.try_iter().collect::<Vec<_>>(), [1, 2]);
}

#[test]
fn stream_and_sink() {
    for (name, make) in flavours::<u32>() {
        on_each_executor(move |exec| async move {
            let (tx, rx) = make(2);
            let producer = exec.spawn(async move {
                let mut sink = tx.into_sink();
                for i in 0..100 {
                    sink.send(i).await.unwrap();
                }
                sink.close().await.unwrap();
            });
            let got: Vec<u32> = rx.stream().collect().await;
            assert_eq!(got, (0..100).collect::<Vec<_>>(), "{name} on {exec:?}");
            producer.await;
            // The stream is fused, and so is one made after the end.
            let mut s = rx.into_stream();
            assert_eq!(s.next().await, None);
            assert_eq!(s.next().await, None);
            // A sink into a queue without receivers hands the message back.
            let (tx, rx) = make(2);
            drop(rx);
            let mut sink = tx.sink();
            assert_eq!(sink.send(3).await.unwrap_err().into_inner(), 3);
        });
    }
}

#[test]
fn timers_with_recv_async() {
    on_each_executor(|_| async {
        let start = Instant::now();
        let t = after(Duration::from_millis(20)).recv_async().await.unwrap();
        assert!(t >= start + Duration::from_millis(20));
        assert!(Instant::now() >= t);
        let ticker = tick(Duration::from_millis(5));
        let a = ticker.recv_async().await.unwrap();
        let b = ticker.recv_async().await.unwrap();
        assert!(b >= a + Duration::from_millis(5));
        // `never` pends: a timer wins the race.
        let n = never::<Instant>();
        let timeout = after(Duration::from_millis(10));
        futures::select! {
            _ = n.recv_async() => panic!("never delivered"),
            t = timeout.recv_async() => assert!(t.is_ok()),
        }
    });
}

#[test]
fn inside_tokio_select() {
    for exec in [Exec::TokioMulti, Exec::TokioCurrent] {
        exec.run(async {
            let (tx, rx) = bounded::<u32>(1);
            let (tx2, rx2) = unbounded::<u32>();
            tx2.send(9).unwrap();
            // The ready branch wins; the other future is dropped, losing nothing.
            tokio::select! {
                m = rx.recv_async() => panic!("nothing was sent: {m:?}"),
                m = rx2.recv_async() => assert_eq!(m, Ok(9)),
            }
            tx.send(1).unwrap();
            assert_eq!(rx.recv_async().await, Ok(1));
            // A send branch against a timeout: full, so the timeout wins and the message
            // was not sent.
            tx.send(2).unwrap();
            tokio::select! {
                r = tx.send_async(3) => panic!("the queue is full: {r:?}"),
                () = tokio::time::sleep(Duration::from_millis(5)) => {}
            }
            assert_eq!(rx.try_iter().collect::<Vec<_>>(), [2]);
            // In a loop, with a timeout per round.
            let producer = tokio::spawn(async move {
                for i in 0..200 {
                    tx.send_async(i).await.unwrap();
                    if i % 50 == 0 {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                }
            });
            let mut got = Vec::new();
            loop {
                tokio::select! {
                    m = rx.recv_async() => match m {
                        Ok(m) => got.push(m),
                        Err(_) => break,
                    },
                    () = tokio::time::sleep(Duration::from_micros(100)) => {}
                }
            }
            producer.await.unwrap();
            assert_eq!(got, (0..200).collect::<Vec<_>>());
        });
    }
}

#[test]
fn inside_futures_select() {
    on_each_executor(|_| async {
        use futures::FutureExt;
        let (tx, rx) = bounded::<u32>(1);
        let (tx2, rx2) = bounded::<u32>(1);
        tx2.send(4).unwrap();
        futures::select! {
            m = rx.recv_async() => panic!("nothing was sent: {m:?}"),
            m = rx2.recv_async() => assert_eq!(m, Ok(4)),
        }
        // Send and receive branches together: the send to the empty queue completes.
        futures::select! {
            r = tx.send_async(1) => r.unwrap(),
            m = rx2.recv_async() => panic!("nothing was sent: {m:?}"),
        }
        assert_eq!(rx.try_recv(), Ok(1));
        // Futures made once and polled across rounds (fused, pinned outside the loop).
        let mut recv = rx.recv_async();
        let mut rounds = 0;
        loop {
            let tick = yield_now().fuse();
            futures::pin_mut!(tick);
            futures::select! {
                m = recv => { assert_eq!(m, Ok(2)); break; }
                () = tick => {
                    rounds += 1;
                    if rounds == 3 {
                        tx.send(2).unwrap();
                    }
                }
            }
        }
        assert!(rounds >= 3);
        let stream = rx2.stream();
        drop(tx2);
        futures::pin_mut!(stream);
        futures::select! {
            m = stream.next() => assert_eq!(m, None),
        }
    });
}

#[test]
fn a_receive_future_dropped_after_its_wake_up_loses_nothing() {
    // Two tasks wait; one message arrives and wakes both; the first is dropped unpolled.
    // The second (or any later receive) still gets the message.
    for (name, make) in flavours::<u32>() {
        let (tx, rx) = make(1);
        let (count_a, waker_a) = counting_waker();
        let (count_b, waker_b) = counting_waker();
        let mut a = rx.recv_async();
        let mut b = rx.recv_async();
        assert!(Pin::new(&mut a)
            .poll(&mut Context::from_waker(&waker_a))
            .is_pending());
        assert!(Pin::new(&mut b)
            .poll(&mut Context::from_waker(&waker_b))
            .is_pending());
        let sender = thread::spawn(move || tx.send(1).unwrap());
        while count_a.load() == 0 {
            thread::yield_now();
        }
        drop(a);
        while count_b.load() == 0 {
            thread::yield_now();
        }
        assert_eq!(
            Pin::new(&mut b).poll(&mut Context::from_waker(&waker_b)),
            Poll::Ready(Ok(1)),
            "{name}"
        );
        sender.join().unwrap();
    }
}

/// A waker counting its wake-ups.
pub struct Counter(std::sync::atomic::AtomicUsize);

impl Counter {
    pub fn load(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl std::task::Wake for Counter {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

pub fn counting_waker() -> (std::sync::Arc<Counter>, std::task::Waker) {
    let c = std::sync::Arc::new(Counter(std::sync::atomic::AtomicUsize::new(0)));
    (c.clone(), std::task::Waker::from(c))
}

#[test]
fn futures_are_send_and_small() {
    fn is_send<F: Send>(_: &F) {}
    let (tx, rx) = bounded::<u64>(1);
    let s = tx.send_async(1);
    let r = rx.recv_async();
    is_send(&s);
    is_send(&r);
    assert!(
        std::mem::size_of_val(&s) <= 64,
        "{}",
        std::mem::size_of_val(&s)
    );
    assert!(
        std::mem::size_of_val(&r) <= 32,
        "{}",
        std::mem::size_of_val(&r)
    );
}

/// A timer's receive future dropped while it waits lets go of its task's waker: the alarm
/// thread does not keep it (and the task it belongs to) until the far due instant, nor
/// does a server's loop of per-request timeouts pile up one alarm per request.
#[test]
fn a_dropped_timer_receive_releases_its_waker() {
    use std::sync::Arc;
    use std::task::{Context, Wake, Waker};
    struct Task;
    impl Wake for Task {
        fn wake(self: Arc<Self>) {}
    }
    for timer in [
        logbus::queue::after(std::time::Duration::from_secs(3600)),
        logbus::queue::tick(std::time::Duration::from_secs(3600)),
    ] {
        let tasks: Vec<Arc<Task>> = (0..100).map(|_| Arc::new(Task)).collect();
        for task in &tasks {
            let waker = Waker::from(Arc::clone(task));
            let mut cx = Context::from_waker(&waker);
            let mut fut = timer.recv_async();
            assert!(std::pin::Pin::new(&mut fut).poll(&mut cx).is_pending());
            drop(fut);
        }
        for task in &tasks {
            assert_eq!(
                Arc::strong_count(task),
                1,
                "the alarm kept the dropped future's waker"
            );
        }
    }
}

/// A rendezvous queue's `send_batch_async` hands its messages over one by one, in order
/// (it takes them off the end of the batch it reversed, not off the front: linear in the
/// batch, as the blocking `send_batch`), and a batch send dropped midway still leaves the
/// rest in order.
#[test]
fn a_rendezvous_batch_send_hands_over_in_order() {
    let n: u32 = if cfg!(miri) { 50 } else { 4_000 };
    let (tx, rx) = bounded::<[u32; 128]>(0);
    let receiver = thread::spawn(move || {
        let mut next = 0;
        while let Ok(m) = rx.recv() {
            assert_eq!(m[0], next, "out of order");
            next += 1;
        }
        next
    });
    let mut batch: Vec<[u32; 128]> = (0..n).map(|i| [i; 128]).collect();
    futures::executor::block_on(tx.send_batch_async(&mut batch)).unwrap();
    assert!(batch.is_empty());
    drop(tx);
    assert_eq!(receiver.join().unwrap(), n);

    // Dropped midway: the rest stays, in order.
    let (tx, rx) = bounded::<u32>(0);
    let mut batch: Vec<u32> = (0..10).collect();
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    {
        let mut send = tx.send_batch_async(&mut batch);
        for want in 0..4 {
            assert!(Pin::new(&mut send).poll(&mut cx).is_pending());
            assert_eq!(rx.try_recv(), Ok(want));
        }
        assert!(Pin::new(&mut send).poll(&mut cx).is_pending()); // 4 in the slot
    }
    assert_eq!(batch, (4..10).collect::<Vec<_>>());
    drop(rx);
    let err = futures::executor::block_on(tx.send_batch_async(&mut batch)).unwrap_err();
    assert_eq!(err.sent, 0);
    assert_eq!(batch, (4..10).collect::<Vec<_>>());
}
