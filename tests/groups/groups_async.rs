//! Group members driven by tasks (`Consumer::poll_async`): on tokio's multi-thread and
//! current-thread runtimes and on `futures::executor`, a group whose member leaves
//! mid-stream processes every record; a member's task parked in a poll keeps its
//! membership (not evicted while it waits, woken by a rebalance, whose callbacks run in
//! the woken poll).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use futures::future::{select, Either};
use logbus::broker::{Broker, TopicConfig, TopicPartition};
use logbus::consumer::{Consumer, ConsumerConfig, OffsetReset};
use logbus::group::RebalanceListener;
use logbus::producer::Record;
use logbus::ManualClock;

/// Where an async body runs (as in `tests/topics/topics_async.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exec {
    TokioMultiThread,
    TokioCurrentThread,
    Futures,
}

type Task<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl Exec {
    /// A task of its own on tokio; on `futures::executor`, the future itself, joined by
    /// the body.
    fn spawn<T: Send + 'static>(self, fut: impl Future<Output = T> + Send + 'static) -> Task<T> {
        match self {
            Exec::Futures => Box::pin(fut),
            _ => {
                let handle = tokio::spawn(fut);
                Box::pin(async move { handle.await.expect("the task panicked") })
            }
        }
    }
}

fn on_every_executor<F, Fut>(body: F)
where
    F: Fn(Exec) -> Fut,
    Fut: Future<Output = ()>,
{
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap()
        .block_on(body(Exec::TokioMultiThread));
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(body(Exec::TokioCurrentThread));
    futures::executor::block_on(body(Exec::Futures));
}

fn tp(topic: &str, p: u32) -> TopicPartition {
    TopicPartition::new(topic, p)
}

fn cfg(group: &str, client: &str) -> ConsumerConfig {
    ConsumerConfig::new()
        .group_id(group)
        .client_id(client)
        .auto_offset_reset(OffsetReset::Earliest)
        .max_poll_records(50)
}

/// Lets other tasks run once.
async fn yield_now() {
    let mut yielded = false;
    futures::future::poll_fn(|cx| {
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

/// A stop signal any executor can wait for.
#[derive(Default)]
struct Stop {
    set: AtomicBool,
    wakers: Mutex<Vec<Waker>>,
}

impl Stop {
    fn raise(&self) {
        self.set.store(true, Ordering::SeqCst);
        for w in self.wakers.lock().unwrap().drain(..) {
            w.wake();
        }
    }

    async fn wait(&self) {
        futures::future::poll_fn(|cx| {
            if self.set.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            self.wakers.lock().unwrap().push(cx.waker().clone());
            if self.set.load(Ordering::SeqCst) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }
}

/// What the members processed: how often each `(partition, offset)`, and the records of
/// batches whose commit was refused (the only ones that may come again).
#[derive(Default)]
struct Processed {
    times: HashMap<(u32, u64), u32>,
    uncommitted: Vec<(u32, u64)>,
    distinct: u64,
}

const PARTITIONS: u32 = 4;
const RECORDS: u64 = if cfg!(debug_assertions) {
    4_000
} else {
    40_000
};

/// Three members (tasks) of one group read a topic while a producer task sends to it;
/// each processes a batch, then commits synchronously. One member leaves (commits, then
/// closes) once it processed a quarter of the records. Every record is processed; a
/// record processed twice was in a batch whose commit was refused (a rebalance moved its
/// partition between the poll and the commit): the documented redelivery window.
#[test]
fn a_group_of_async_members_processes_every_record_when_one_leaves() {
    on_every_executor(|exec| async move {
        let broker = Broker::in_memory();
        broker
            .create_topic::<(), u64>("t", TopicConfig::new(PARTITIONS))
            .unwrap();
        let processed = Arc::new(Mutex::new(Processed::default()));
        let stop = Arc::new(Stop::default());
        let producer = broker.producer::<(), u64>();
        let sender = exec.spawn(async move {
            for v in 0..RECORDS {
                let p = (v % u64::from(PARTITIONS)) as u32;
                producer
                    .send_async(Record::new("t", v).partition(p))
                    .await
                    .unwrap();
                if v % 64 == 0 {
                    yield_now().await;
                }
            }
        });
        let members: Vec<_> = (0..3)
            .map(|m| {
                let mut consumer = broker
                    .consumer::<(), u64>(cfg("g", &format!("m{m}")))
                    .unwrap();
                consumer.subscribe(&["t"]).unwrap();
                let (processed, stop) = (Arc::clone(&processed), Arc::clone(&stop));
                exec.spawn(async move {
                    let mut mine = 0u64;
                    loop {
                        let records = {
                            let polled = consumer.poll_async();
                            let stopped = stop.wait();
                            futures::pin_mut!(stopped);
                            match select(polled, stopped).await {
                                Either::Left((records, _)) => records.unwrap(),
                                Either::Right(_) => break,
                            }
                        };
                        let batch: Vec<(u32, u64)> =
                            records.iter().map(|r| (r.partition, r.offset)).collect();
                        let committed = consumer.commit_sync().is_ok();
                        {
                            let mut p = processed.lock().unwrap();
                            for at in &batch {
                                let n = p.times.entry(*at).or_insert(0);
                                *n += 1;
                                if *n == 1 {
                                    p.distinct += 1;
                                }
                                if !committed {
                                    p.uncommitted.push(*at);
                                }
                            }
                            if p.distinct == RECORDS {
                                stop.raise();
                            }
                        }
                        mine += batch.len() as u64;
                        if m == 0 && mine >= RECORDS / 4 {
                            // Leaves mid-stream: its commit is done, it closes.
                            break;
                        }
                        yield_now().await;
                    }
                    drop(consumer);
                    mine
                })
            })
            .collect();
        sender.await;
        let counts = futures::future::join_all(members).await;
        let p = processed.lock().unwrap();
        assert_eq!(p.distinct, RECORDS, "every record processed ({counts:?})");
        for part in 0..PARTITIONS {
            for offset in 0..RECORDS / u64::from(PARTITIONS) {
                assert!(
                    p.times.contains_key(&(part, offset)),
                    "lost {part}/{offset}"
                );
            }
        }
        for (at, n) in &p.times {
            if *n > 1 {
                assert!(
                    p.uncommitted.contains(at),
                    "{at:?} processed {n} times though its batch was committed"
                );
            }
        }
        assert!(
            counts[0] >= RECORDS / 4,
            "the leaver processed its share first"
        );
    });
}

/// Records every callback, with the member's generation at the time.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<&'static str>>>);

impl RebalanceListener<(), u64> for Log {
    fn on_partitions_revoked(&mut self, _: &mut Consumer<(), u64>, _: &[TopicPartition]) {
        self.0.lock().unwrap().push("revoked");
    }
    fn on_partitions_assigned(&mut self, _: &mut Consumer<(), u64>, _: &[TopicPartition]) {
        self.0.lock().unwrap().push("assigned");
    }
    fn on_partitions_lost(&mut self, _: &mut Consumer<(), u64>, _: &[TopicPartition]) {
        self.0.lock().unwrap().push("lost");
    }
}

struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn flag_waker() -> (Arc<Flag>, Waker) {
    let flag = Arc::new(Flag(AtomicBool::new(false)));
    (Arc::clone(&flag), Waker::from(flag))
}

/// Polls `fut` until it parks: `Pending` without having woken itself (a task reschedules
/// itself a few times before it registers and parks).
fn poll_until_parked<F: Future + Unpin>(
    fut: &mut F,
    flag: &Flag,
    cx: &mut Context<'_>,
) -> Poll<F::Output> {
    for _ in 0..1000 {
        flag.0.store(false, Ordering::SeqCst);
        match Pin::new(&mut *fut).poll(cx) {
            Poll::Ready(r) => return Poll::Ready(r),
            Poll::Pending if !flag.0.load(Ordering::SeqCst) => return Poll::Pending,
            Poll::Pending => {}
        }
    }
    panic!("the future never parked");
}

/// A member's task parked in `poll_async` longer than its `max_poll_interval` stays in
/// the group (a thread parked in `poll` would have woken to say it is alive); another
/// member joining wakes the task, and its next poll revokes, rejoins and takes its new
/// assignment, calling its listener there. Once woken, the task must come back within
/// the interval, or it is evicted (its partitions lost).
#[test]
fn a_member_parked_in_poll_async_keeps_its_membership() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let broker = Broker::builder().clock(clock.clone()).build().unwrap();
    broker
        .create_topic::<(), u64>("t", TopicConfig::new(2))
        .unwrap();
    let interval = Duration::from_secs(1);
    let log = Log::default();
    let mut a = broker
        .consumer::<(), u64>(cfg("g", "a").max_poll_interval(interval))
        .unwrap();
    a.subscribe_with_listener(&["t"], log.clone()).unwrap();
    assert!(a.poll(Duration::ZERO).unwrap().is_empty());
    assert_eq!(a.assignment().len(), 2);
    let (woken, waker) = flag_waker();
    let mut cx = Context::from_waker(&waker);
    let mut polled = a.poll_async();
    assert!(poll_until_parked(&mut polled, &woken, &mut cx).is_pending());
    clock.advance(Duration::from_secs(5));
    let mut b = broker
        .consumer::<(), u64>(cfg("g", "b").max_poll_interval(interval))
        .unwrap();
    b.subscribe(&["t"]).unwrap();
    assert_eq!(
        broker.describe_group("g").unwrap().members.len(),
        2,
        "the parked member was not evicted"
    );
    assert!(
        woken.0.load(Ordering::SeqCst),
        "the rebalance woke the task"
    );
    log.0.lock().unwrap().clear();
    // The woken poll does the member's part: revoke (eager), rejoin, take its share.
    assert!(Pin::new(&mut polled).poll(&mut cx).is_pending());
    assert_eq!(*log.0.lock().unwrap(), ["revoked", "assigned"]);
    for _ in 0..4 {
        b.poll(Duration::ZERO).unwrap();
        let _ = Pin::new(&mut polled).poll(&mut cx);
    }
    drop(polled);
    assert_eq!(a.assignment().len(), 1);
    assert_eq!(b.assignment().len(), 1);
    // Parked again; woken by a rebalance and not polled within the interval: evicted.
    let mut polled = a.poll_async();
    assert!(poll_until_parked(&mut polled, &woken, &mut cx).is_pending());
    let mut c = broker
        .consumer::<(), u64>(cfg("g", "c").max_poll_interval(interval))
        .unwrap();
    c.subscribe(&["t"]).unwrap();
    clock.advance(Duration::from_secs(5));
    b.poll(Duration::ZERO).unwrap();
    log.0.lock().unwrap().clear();
    let _ = Pin::new(&mut polled).poll(&mut cx);
    drop(polled);
    assert_eq!(log.0.lock().unwrap().first(), Some(&"lost"));
}

/// Records arriving while every member's task is parked wake them, on each executor.
#[test]
fn parked_members_are_woken_by_records() {
    on_every_executor(|exec| async move {
        let broker = Broker::in_memory();
        broker
            .create_topic::<(), u64>("t", TopicConfig::new(2))
            .unwrap();
        let total = Arc::new(AtomicU64::new(0));
        let mut members = Vec::new();
        let mut consumers: Vec<_> = (0..2)
            .map(|m| {
                let mut c = broker
                    .consumer::<(), u64>(cfg("w", &format!("m{m}")))
                    .unwrap();
                c.subscribe(&["t"]).unwrap();
                c
            })
            .collect();
        // Settle the group before the tasks start.
        for _ in 0..4 {
            for c in consumers.iter_mut() {
                c.poll(Duration::ZERO).unwrap();
            }
        }
        for mut c in consumers {
            let total = Arc::clone(&total);
            members.push(exec.spawn(async move {
                let mut n = 0;
                while n < 100 {
                    n += c.poll_async().await.unwrap().len() as u64;
                    c.commit_sync().unwrap();
                }
                total.fetch_add(n, Ordering::SeqCst);
            }));
        }
        let producer = broker.producer::<(), u64>();
        let sender = exec.spawn(async move {
            yield_now().await;
            for v in 0..200u64 {
                producer
                    .send_async(Record::new("t", v).partition((v % 2) as u32))
                    .await
                    .unwrap();
            }
        });
        sender.await;
        futures::future::join_all(members).await;
        assert_eq!(total.load(Ordering::SeqCst), 200);
        assert_eq!(tp("t", 0).partition, 0);
    });
}
