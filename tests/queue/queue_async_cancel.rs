//! Cancel safety under contention: a million receive futures, and a million send futures,
//! cancelled at random (right after registering, or right after a wake-up, before they
//! look again), while several producers and consumers (tasks and threads) share the queue.
//! No message may be lost or received twice: every producer's sequence arrives complete,
//! once, in order at each consumer, with the right checksum.
//!
//! The side whose futures are cancelled paces the other through a queue of credits: one
//! per future cancelled or left waiting, and the other side takes one per message. So the
//! queue keeps running empty (full) and the futures keep having to wait, about one message
//! per cancellation, with no thread spinning.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::thread;
use std::time::Duration;

use logbus::queue::{unbounded, Receiver, RecvTimeoutError, SendFut, Sender};

use super::queue_async::{flavours, Exec, Make};

/// Cancelled futures per direction (receive, send), over the flavours.
const CANCELS: usize = 1_000_000;
/// Messages per producer at most: a run whose futures are rarely pending fails its count
/// of cancellations rather than run on.
const MAX_SEQ: u64 = 1_000_000;

/// A message: the producer in the high half, its sequence number in the low one.
fn msg(p: u64, seq: u64) -> u64 {
    (p << 32) | seq
}

/// Polls `inner` and drops it at random while it is pending: right after a poll that
/// registered it, or at a later poll (a wake-up) before polling it again. `None`: dropped.
struct RandomCancel<'a, F> {
    inner: Option<F>,
    rng: fastrand::Rng,
    polled: bool,
    /// Gets a credit each time the future is left waiting.
    credits: &'a Sender<()>,
}

impl<F: Future + Unpin> Future for RandomCancel<'_, F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.polled && this.rng.bool() {
            // Woken (or polled for another reason): cancelled before it looks again.
            this.inner = None;
            return Poll::Ready(None);
        }
        this.polled = true;
        let inner = this.inner.as_mut().expect("polled after completion");
        match Pin::new(inner).poll(cx) {
            Poll::Ready(r) => Poll::Ready(Some(r)),
            Poll::Pending if this.rng.u8(..4) == 0 => {
                this.inner = None;
                Poll::Ready(None)
            }
            Poll::Pending => {
                let _ = this.credits.send(());
                Poll::Pending
            }
        }
    }
}

fn random_cancel<'a, F>(
    inner: F,
    rng: &mut fastrand::Rng,
    credits: &'a Sender<()>,
) -> RandomCancel<'a, F> {
    RandomCancel {
        inner: Some(inner),
        rng: rng.fork(),
        polled: false,
        credits,
    }
}

/// What one consumer received, in order.
type Got = Vec<u64>;

/// Checks that the consumers' messages are exactly `0..sent[p]` of each producer `p`, each
/// once, each consumer seeing a producer's messages in order.
fn check(name: &str, sent: &[u64], consumers: &[Got]) {
    let mut seen: Vec<Vec<bool>> = sent.iter().map(|&n| vec![false; n as usize]).collect();
    let (mut count, mut sum) = (0u64, 0u64);
    for got in consumers {
        let mut last = vec![None::<u64>; sent.len()];
        for &m in got {
            let (p, seq) = ((m >> 32) as usize, m & 0xffff_ffff);
            assert!(
                last[p].is_none_or(|l| l < seq),
                "{name}: producer {p} out of order"
            );
            last[p] = Some(seq);
            assert!(
                !std::mem::replace(&mut seen[p][seq as usize], true),
                "{name}: message {p}/{seq} received twice"
            );
            count += 1;
            sum = sum.wrapping_add(m);
        }
    }
    let want_count: u64 = sent.iter().sum();
    let want_sum = sent
        .iter()
        .enumerate()
        .flat_map(|(p, &n)| (0..n).map(move |s| msg(p as u64, s)))
        .fold(0u64, u64::wrapping_add);
    assert_eq!(count, want_count, "{name}: messages lost");
    assert_eq!(sum, want_sum, "{name}: checksum");
}

/// A consumer thread that waits with short timeouts (cancelling its waits, too), taking a
/// credit (if any are still given) before each receive.
fn thread_consumer(rx: Receiver<u64>, credits: Option<Receiver<()>>) -> thread::JoinHandle<Got> {
    thread::spawn(move || {
        let mut got = Vec::new();
        loop {
            if let Some(credits) = &credits {
                let _ = credits.recv();
            }
            loop {
                match rx.recv_timeout(Duration::from_micros(50)) {
                    Ok(m) => {
                        got.push(m);
                        break;
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return got,
                }
            }
        }
    })
}

#[test]
fn a_million_cancelled_receive_futures_lose_nothing() {
    for (name, make) in flavours::<u64>() {
        Exec::TokioMulti.run(recv_side(name, make, CANCELS / 4));
    }
}

async fn recv_side(name: &'static str, make: Make<u64>, target: usize) {
    let (tx, rx) = make(4);
    let cancels = Arc::new(AtomicUsize::new(0));
    let (credit_tx, credit_rx) = unbounded::<()>();
    // Producers: a thread and three tasks, each taking a credit per message, until the
    // consumers have cancelled enough futures (`MAX_SEQ` stops a run whose consumers
    // never wait).
    let thread_producer = {
        let (tx, cancels, credits) = (tx.clone(), Arc::clone(&cancels), credit_rx.clone());
        thread::spawn(move || {
            let mut seq = 0;
            while cancels.load(Ordering::Relaxed) < target && seq < MAX_SEQ {
                let _ = credits.recv();
                tx.send(msg(0, seq)).unwrap();
                seq += 1;
            }
            seq
        })
    };
    let mut task_producers = Vec::new();
    for p in 1..4u64 {
        let (tx, cancels, credits) = (tx.clone(), Arc::clone(&cancels), credit_rx.clone());
        task_producers.push(Exec::TokioMulti.spawn(async move {
            let mut seq = 0;
            while cancels.load(Ordering::Relaxed) < target && seq < MAX_SEQ {
                let _ = credits.recv_async().await;
                tx.send_async(msg(p, seq)).await.unwrap();
                seq += 1;
            }
            seq
        }));
    }
    drop((tx, credit_rx));
    // Consumers: three tasks cancelling at random, one thread with timeouts.
    let mut consumers = Vec::new();
    for c in 0..3u64 {
        let (rx, cancels, credits) = (rx.clone(), Arc::clone(&cancels), credit_tx.clone());
        consumers.push(Exec::TokioMulti.spawn(async move {
            let mut rng = fastrand::Rng::with_seed(c);
            let mut got = Vec::new();
            loop {
                match random_cancel(rx.recv_async(), &mut rng, &credits).await {
                    Some(Ok(m)) => got.push(m),
                    Some(Err(_)) => return got,
                    None => {
                        cancels.fetch_add(1, Ordering::Relaxed);
                        let _ = credits.send(());
                    }
                }
            }
        }));
    }
    drop(credit_tx);
    let blocking = thread_consumer(rx, None);
    let mut sent = vec![thread_producer.join().unwrap()];
    for p in task_producers {
        sent.push(p.await);
    }
    let mut got = Vec::new();
    for c in consumers {
        got.push(c.await);
    }
    got.push(blocking.join().unwrap());
    finish(name, &cancels, target, &sent, &got);
}

fn finish(name: &str, cancels: &AtomicUsize, target: usize, sent: &[u64], got: &[Got]) {
    let cancelled = cancels.load(Ordering::Relaxed);
    eprintln!(
        "{name}: {cancelled} futures cancelled, {} messages",
        sent.iter().sum::<u64>()
    );
    assert!(
        cancelled >= target,
        "{name}: only {cancelled} cancellations"
    );
    check(name, sent, got);
}

#[test]
fn a_million_cancelled_send_futures_never_send_and_return() {
    // An unbounded send never waits: nothing to cancel there.
    for (name, make) in flavours::<u64>() {
        if name != "unbounded" {
            Exec::TokioMulti.run(send_side(name, make, CANCELS / 3));
        }
    }
}

/// Sends `seq` onwards until `cancels` reaches the target, cancelling pending sends at
/// random: a cancelled send is retried with the same sequence number exactly when it was
/// not sent (`SendFut::cancel` says which; a dropped pending send of a buffered queue was
/// never sent).
async fn cancelling_producer(
    tx: Sender<u64>,
    p: u64,
    cancels: Arc<AtomicUsize>,
    explicit: bool,
    target: usize,
    credits: Sender<()>,
) -> u64 {
    let mut rng = fastrand::Rng::with_seed(p + 100);
    let mut seq = 0;
    while cancels.load(Ordering::Relaxed) < target && seq < MAX_SEQ {
        let mut fut = Some(tx.send_async(msg(p, seq)));
        let sent = CancelSend {
            fut: &mut fut,
            rng: rng.fork(),
            polled: false,
            credits: &credits,
        }
        .await;
        match sent {
            Some(r) => {
                r.unwrap();
                seq += 1;
            }
            None => {
                cancels.fetch_add(1, Ordering::Relaxed);
                let _ = credits.send(());
                let fut = fut.take().expect("cancelled, not dropped yet");
                if explicit {
                    if fut.cancel().is_none() {
                        // Taken by a receiver before the cancel: it was sent.
                        seq += 1;
                    }
                } else {
                    // Pending, hence not sent (a buffered queue's send completes in the
                    // poll that sends it).
                    drop(fut);
                }
            }
        }
    }
    seq
}

/// Polls the send future in `fut` and gives up on it at random while it is pending (as
/// `RandomCancel`), leaving it in `fut` for the caller to cancel or drop.
struct CancelSend<'a, 'b> {
    fut: &'a mut Option<SendFut<'b, u64>>,
    rng: fastrand::Rng,
    polled: bool,
    credits: &'a Sender<()>,
}

impl Future for CancelSend<'_, '_> {
    type Output = Option<Result<(), logbus::queue::SendError<u64>>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.polled && this.rng.bool() {
            return Poll::Ready(None);
        }
        this.polled = true;
        let fut = this.fut.as_mut().expect("a send to poll");
        match Pin::new(fut).poll(cx) {
            Poll::Ready(r) => Poll::Ready(Some(r)),
            Poll::Pending if this.rng.u8(..4) == 0 => Poll::Ready(None),
            Poll::Pending => {
                let _ = this.credits.send(());
                Poll::Pending
            }
        }
    }
}

async fn send_side(name: &'static str, make: Make<u64>, target: usize) {
    let (tx, rx) = make(4);
    let cancels = Arc::new(AtomicUsize::new(0));
    let (credit_tx, credit_rx) = unbounded::<()>();
    let mut producers = Vec::new();
    for p in 0..4u64 {
        // A rendezvous send may be taken between its last poll and its cancellation: only
        // `cancel` tells; the buffered queues also drop half of their pending sends.
        let explicit = name == "zero" || p % 2 == 0;
        producers.push(Exec::TokioMulti.spawn(cancelling_producer(
            tx.clone(),
            p,
            Arc::clone(&cancels),
            explicit,
            target,
            credit_tx.clone(),
        )));
    }
    let thread_tx = tx.clone();
    let thread_cancels = Arc::clone(&cancels);
    let thread_producer = thread::spawn(move || {
        let mut seq = 0;
        while thread_cancels.load(Ordering::Relaxed) < target && seq < MAX_SEQ {
            thread_tx.send(msg(4, seq)).unwrap();
            seq += 1;
        }
        seq
    });
    drop((tx, credit_tx));
    // Consumers: two tasks and a thread, each taking a credit per message.
    let mut consumers = Vec::new();
    for _ in 0..2 {
        let (rx, credits) = (rx.clone(), credit_rx.clone());
        consumers.push(Exec::TokioMulti.spawn(async move {
            let mut got = Vec::new();
            loop {
                let _ = credits.recv_async().await;
                match rx.recv_async().await {
                    Ok(m) => got.push(m),
                    Err(_) => return got,
                }
            }
        }));
    }
    let blocking = thread_consumer(rx, Some(credit_rx));
    let mut sent = Vec::new();
    for p in producers {
        sent.push(p.await);
    }
    sent.push(thread_producer.join().unwrap());
    let mut got = Vec::new();
    for c in consumers {
        got.push(c.await);
    }
    got.push(blocking.join().unwrap());
    finish(name, &cancels, target, &sent, &got);
}
