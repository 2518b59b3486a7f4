//! The async API of producers and consumers: `PendingSend` awaited, `Consumer::poll_async`
//! and `Consumer::stream`, on tokio's multi-thread and current-thread runtimes and on
//! `futures::executor` (`on_every_executor`); their cancel safety under random
//! cancellation (receives and sends).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use futures::StreamExt;
use logbus::broker::{Broker, TopicConfig, TopicPartition};
use logbus::consumer::{ConsumerConfig, ConsumerRecords, OffsetReset};
use logbus::persist::{FlushPolicy, PersistConfig};
use logbus::producer::{Acks, ProducerConfig, Record};

/// Where an async body runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exec {
    TokioMultiThread,
    TokioCurrentThread,
    Futures,
}

/// A boxed future, as `Exec::spawn` returns it.
pub(crate) type Task<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl Exec {
    /// Runs `fut` as a task of its own where the executor has tasks (tokio), else returns
    /// it to be awaited (joined) by the body: either way, awaiting the result runs it
    /// concurrently with the others awaited alongside.
    pub(crate) fn spawn<T: Send + 'static>(
        self,
        fut: impl Future<Output = T> + Send + 'static,
    ) -> Task<T> {
        match self {
            Exec::Futures => Box::pin(fut),
            _ => {
                let handle = tokio::spawn(fut);
                Box::pin(async move { handle.await.expect("the task panicked") })
            }
        }
    }
}

/// Runs `body` on each executor in turn.
pub(crate) fn on_every_executor<F, Fut>(body: F)
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

fn log_end(broker: &Broker, topic: &str) -> u64 {
    broker.describe_topic(topic).unwrap().partitions[0].log_end
}

fn tp(topic: &str, partition: u32) -> TopicPartition {
    TopicPartition::new(topic, partition)
}

fn earliest(group: Option<&str>) -> ConsumerConfig {
    let c = ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest);
    match group {
        Some(g) => c.group_id(g),
        None => c,
    }
}

/// A waker that records that it was woken.
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

#[test]
fn send_async_awaited_and_poll_async_on_every_executor() {
    on_every_executor(|exec| async move {
        let broker = Broker::in_memory();
        broker
            .create_topic::<(), u64>("t", TopicConfig::new(2))
            .unwrap();
        let mut consumer = broker.consumer::<(), u64>(earliest(None)).unwrap();
        consumer.assign(&[tp("t", 0), tp("t", 1)]).unwrap();
        let producer = broker.producer::<(), u64>();
        let sender = exec.spawn(async move {
            for v in 0..1000u64 {
                let meta = producer
                    .send_async(Record::new("t", v).partition((v % 2) as u32))
                    .await
                    .unwrap();
                assert_eq!(meta.offset, v / 2);
                if v % 100 == 0 {
                    // Let the consumer run on single-threaded executors.
                    yield_now::now().await;
                }
            }
        });
        let reader = exec.spawn(async move {
            let mut seen = [0u64; 2];
            let mut sum = 0;
            while seen.iter().sum::<u64>() < 1000 {
                for r in consumer.poll_async().await.unwrap() {
                    assert_eq!(r.offset, seen[r.partition as usize], "in order");
                    seen[r.partition as usize] += 1;
                    sum += r.value;
                }
            }
            assert_eq!(sum, 999 * 1000 / 2);
        });
        futures::join!(sender, reader);
    });
}

/// A `futures::pending!` stand-in that reschedules (the macro alone would never wake).
mod yield_now {
    pub(crate) async fn now() {
        let mut yielded = false;
        futures::future::poll_fn(|cx| {
            if yielded {
                std::task::Poll::Ready(())
            } else {
                yielded = true;
                cx.waker().wake_by_ref();
                std::task::Poll::Pending
            }
        })
        .await
    }
}

#[test]
fn a_send_to_a_full_block_partition_waits_in_its_task_not_its_thread() {
    // On a single-threaded executor a send that blocked its thread would never let the
    // consumer task commit: the test would hang.
    on_every_executor(|exec| async move {
        let broker = Broker::in_memory();
        broker
            .create_topic::<(), u64>("t", TopicConfig::new(1).records_in_memory(4))
            .unwrap();
        let mut consumer = broker.consumer::<(), u64>(earliest(Some("g"))).unwrap();
        consumer.assign(&[tp("t", 0)]).unwrap();
        let producer = broker.producer::<(), u64>();
        const N: u64 = 200;
        let sender = exec.spawn(async move {
            for v in 0..N {
                let pending = producer.send_async(Record::new("t", v));
                assert_eq!(pending.await.unwrap().offset, v);
            }
        });
        let reader = exec.spawn(async move {
            let mut next = 0;
            while next < N {
                for r in consumer.poll_async().await.unwrap() {
                    assert_eq!(r.value, next);
                    next += 1;
                }
                consumer.commit_sync().unwrap();
                yield_now::now().await;
            }
        });
        futures::join!(sender, reader);
    });
}

#[test]
fn send_async_on_a_full_partition_holds_the_record_until_polled() {
    let broker = Broker::in_memory();
    broker
        .create_topic::<(), u64>("t", TopicConfig::new(1).records_in_memory(2))
        .unwrap();
    let mut consumer = broker.consumer::<(), u64>(earliest(Some("g"))).unwrap();
    consumer.assign(&[tp("t", 0)]).unwrap();
    let producer = broker.producer::<(), u64>();
    producer.send(Record::new("t", 0)).unwrap();
    producer.send(Record::new("t", 1)).unwrap();
    // The call returns at once; the record is not in the log.
    let mut held = producer.send_async(Record::new("t", 2));
    assert!(format!("{held:?}").contains("held"));
    let (flag, waker) = flag_waker();
    let mut cx = Context::from_waker(&waker);
    assert!(poll_until_parked(&mut held, &flag, &mut cx).is_pending());
    assert_eq!(log_end(&broker, "t"), 2);
    // A commit frees room and wakes the task; the poll appends.
    assert_eq!(consumer.poll(Duration::ZERO).unwrap().len(), 2);
    consumer.commit_sync().unwrap();
    assert!(flag.0.load(Ordering::SeqCst));
    match Pin::new(&mut held).poll(&mut cx) {
        Poll::Ready(Ok(meta)) => assert_eq!(meta.offset, 2),
        other => panic!("{other:?}"),
    }
    // Dropped while held: never appended.
    producer.send(Record::new("t", 3)).unwrap();
    let mut dropped = producer.send_async(Record::new("t", 4));
    assert!(poll_until_parked(&mut dropped, &flag, &mut cx).is_pending());
    drop(dropped);
    assert_eq!(consumer.poll(Duration::ZERO).unwrap().len(), 2);
    consumer.commit_sync().unwrap();
    assert_eq!(log_end(&broker, "t"), 4);
    // `wait` still blocks for room, for threads.
    producer.send(Record::new("t", 5)).unwrap();
    producer.send(Record::new("t", 6)).unwrap();
    let pending = producer.send_async(Record::new("t", 7));
    let waiter = std::thread::spawn(move || pending.wait().unwrap().offset);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(consumer.poll(Duration::ZERO).unwrap().len(), 2);
    consumer.commit_sync().unwrap();
    assert_eq!(waiter.join().unwrap(), 6);
}

#[test]
fn acks_all_on_a_replicated_topic_is_awaited() {
    on_every_executor(|exec| async move {
        let broker = Broker::in_memory();
        let config = TopicConfig::new(1)
            .replication_factor(3)
            .min_insync_replicas(2);
        broker.create_topic::<(), u64>("r", config).unwrap();
        let producer = broker.producer::<(), u64>();
        let sender = exec.spawn(async move {
            let in_flight: Vec<_> = (0..200u64)
                .map(|v| producer.send_async(Record::new("r", v)))
                .collect();
            for (v, pending) in in_flight.into_iter().enumerate() {
                assert_eq!(pending.await.unwrap().offset, v as u64);
            }
            for v in 200..300u64 {
                assert_eq!(
                    producer
                        .send_async(Record::new("r", v))
                        .await
                        .unwrap()
                        .offset,
                    v
                );
            }
        });
        sender.await;
        assert_eq!(
            broker.describe_topic("r").unwrap().partitions[0].high_watermark,
            300
        );
    });
}

#[test]
fn acks_one_and_none_complete_at_the_call() {
    let broker = Broker::in_memory();
    let config = TopicConfig::new(1).replication_factor(2);
    broker.create_topic::<(), u64>("r", config).unwrap();
    for acks in [Acks::Leader, Acks::None] {
        let producer = broker
            .producer_with_config::<(), u64>(ProducerConfig::new().acks(acks))
            .unwrap();
        let mut pending = producer.send_async(Record::new("r", 1));
        let (_, waker) = flag_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(matches!(
            Pin::new(&mut pending).poll(&mut cx),
            Poll::Ready(Ok(_))
        ));
    }
}

#[test]
fn a_persisted_every_batch_send_awaits_its_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::builder()
        .data_dir(dir.path())
        .create(true)
        .open()
        .unwrap();
    broker
        .create_topic::<(), u64>(
            "p",
            TopicConfig::new(1).persist(PersistConfig::new().flush(FlushPolicy::EveryBatch)),
        )
        .unwrap();
    on_every_executor(|_| {
        let producer = broker.producer::<(), u64>();
        async move {
            let in_flight: Vec<_> = (0..50u64)
                .map(|v| producer.send_async(Record::new("p", v)))
                .collect();
            let mut last = None;
            for pending in in_flight {
                let offset = pending.await.unwrap().offset;
                assert!(last.map_or(true, |l| offset > l));
                last = Some(offset);
            }
        }
    });
    assert_eq!(log_end(&broker, "p"), 150);
}

#[test]
fn a_woken_then_dropped_poll_async_loses_nothing() {
    let broker = Broker::in_memory();
    broker
        .create_topic::<(), u64>("t", TopicConfig::new(1))
        .unwrap();
    let mut consumer = broker.consumer::<(), u64>(earliest(None)).unwrap();
    consumer.assign(&[tp("t", 0)]).unwrap();
    let producer = broker.producer::<(), u64>();
    let (flag, waker) = flag_waker();
    let mut cx = Context::from_waker(&waker);
    {
        let mut fut = consumer.poll_async();
        assert!(poll_until_parked(&mut fut, &flag, &mut cx).is_pending());
        producer.send(Record::new("t", 42)).unwrap();
        assert!(flag.0.load(Ordering::SeqCst), "the send woke the task");
        // Dropped after its wake-up, before it ran again.
    }
    let got = futures::executor::block_on(consumer.poll_async()).unwrap();
    assert_eq!(got.iter().map(|r| r.value).collect::<Vec<_>>(), [42]);
}

#[test]
fn stream_yields_in_order_and_puts_back_what_it_did_not_yield() {
    let broker = Broker::in_memory();
    broker
        .create_topic::<(), u64>("t", TopicConfig::new(1))
        .unwrap();
    let producer = broker.producer::<(), u64>();
    for v in 0..100 {
        producer.send(Record::new("t", v)).unwrap();
    }
    let mut consumer = broker.consumer::<(), u64>(earliest(Some("g"))).unwrap();
    consumer.assign(&[tp("t", 0)]).unwrap();
    futures::executor::block_on(async {
        let mut stream = consumer.stream();
        for v in 0..30 {
            assert_eq!(stream.next().await.unwrap().unwrap().value, v);
        }
        stream.consumer().commit_sync().unwrap();
        for v in 30..40 {
            assert_eq!(stream.next().await.unwrap().unwrap().value, v);
        }
    });
    assert_eq!(consumer.committed(&tp("t", 0)).unwrap(), Some(30));
    assert_eq!(consumer.position(&tp("t", 0)).unwrap(), 40);
    assert_eq!(consumer.metrics().records_consumed(), 40);
    // With nothing assigned the stream ends.
    consumer.assign(&[]).unwrap();
    assert!(futures::executor::block_on(consumer.stream().next()).is_none());
}

/// A noop waker for polling a future once by hand.
fn noop_waker() -> Waker {
    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    Waker::from(Arc::new(Noop))
}

/// A small xorshift generator (deterministic per seed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// What a reader of `randomly_cancelled_receives_lose_and_duplicate_nothing` saw.
struct Seen {
    next: [u64; 4],
    count: u64,
    sum: u64,
}

impl Seen {
    fn take(&mut self, records: ConsumerRecords<(), u64>) {
        for r in records {
            let p = r.partition as usize;
            assert_eq!(r.offset, self.next[p], "partition {p} in order, once each");
            assert_eq!(r.value, u64::from(r.partition) * PER_PARTITION + r.offset);
            self.next[p] += 1;
            self.count += 1;
            self.sum += r.value;
        }
    }
}

const PER_PARTITION: u64 = 20_000;

const RECEIVES: u64 = if cfg!(debug_assertions) {
    1_000_000
} else {
    2_000_000
};

/// Receive futures cancelled at random under contention: producer threads send to four
/// partitions while two consumer tasks (two partitions each) race `poll_async` against
/// cancellation, `RECEIVES` futures in all: most dropped without a poll or after one
/// poll (pending, registered, possibly already woken), some awaited. No record is lost or
/// duplicated: count, checksum and each partition's order.
#[test]
fn randomly_cancelled_receives_lose_and_duplicate_nothing() {
    const PARTITIONS: u32 = 4;
    let broker = Broker::in_memory();
    broker
        .create_topic::<(), u64>("t", TopicConfig::new(PARTITIONS).records_in_memory(1 << 16))
        .unwrap();
    let producers: Vec<_> = (0..2u32)
        .map(|t| {
            let producer = broker.producer::<(), u64>();
            std::thread::spawn(move || {
                for i in 0..PER_PARTITION {
                    for p in [t, t + 2] {
                        let v = u64::from(p) * PER_PARTITION + i;
                        producer.send(Record::new("t", v).partition(p)).unwrap();
                    }
                    if i % 4 == 0 {
                        // Spread the sends over the readers' run.
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();
    let futures_made = Arc::new(AtomicUsize::new(0));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let readers: Vec<_> = (0..2u32)
        .map(|c| {
            let mut consumer = broker.consumer::<(), u64>(earliest(None)).unwrap();
            consumer.assign(&[tp("t", c), tp("t", c + 2)]).unwrap();
            let made = Arc::clone(&futures_made);
            runtime.spawn(async move {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ u64::from(c + 1));
                let mut seen = Seen {
                    next: [0; PARTITIONS as usize],
                    count: 0,
                    sum: 0,
                };
                let noop = noop_waker();
                let quota = RECEIVES / 2;
                let mut made_here = 0;
                while seen.count < 2 * PER_PARTITION || made_here < quota {
                    made_here += 1;
                    let mut fut = consumer.poll_async();
                    match rng.next() % 8 {
                        // Dropped unpolled.
                        0 => drop(fut),
                        // Polled once with a waker that does nothing, then dropped.
                        1..=5 => {
                            if let Poll::Ready(r) =
                                Pin::new(&mut fut).poll(&mut Context::from_waker(&noop))
                            {
                                seen.take(r.unwrap());
                            }
                        }
                        // Raced against a yield: dropped if the yield comes first.
                        6 => {
                            let yielded = yield_now::now();
                            futures::pin_mut!(yielded);
                            match futures::future::select(fut, yielded).await {
                                futures::future::Either::Left((r, _)) => seen.take(r.unwrap()),
                                futures::future::Either::Right(((), fut)) => drop(fut),
                            }
                        }
                        // Awaited while records are still to come.
                        _ => {
                            if seen.count < 2 * PER_PARTITION {
                                seen.take(fut.await.unwrap());
                            }
                        }
                    }
                    if made_here % 64 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
                made.fetch_add(made_here as usize, Ordering::Relaxed);
                (seen.count, seen.sum)
            })
        })
        .collect();
    let results: Vec<(u64, u64)> = runtime.block_on(async {
        let mut out = Vec::new();
        for r in readers {
            out.push(r.await.unwrap());
        }
        out
    });
    for p in producers {
        p.join().unwrap();
    }
    let count: u64 = results.iter().map(|r| r.0).sum();
    let sum: u64 = results.iter().map(|r| r.1).sum();
    let n = u64::from(PARTITIONS) * PER_PARTITION;
    assert_eq!(count, n);
    assert_eq!(sum, n * (n - 1) / 2);
    assert!(futures_made.load(Ordering::Relaxed) as u64 >= RECEIVES.min(n));
}

/// Send futures cancelled at random, on a small `Block` partition kept full by a slow
/// committing consumer: a future that completed `Ok` names its record's offset, and the
/// record is there exactly once; a future polled to `Pending` held its record (not
/// appended): dropped then, its record never appears; a future dropped unpolled appended
/// its record at the call if there was room. No record appears twice.
#[test]
fn randomly_cancelled_sends_append_each_record_at_most_once() {
    const SENDS: u64 = if cfg!(debug_assertions) {
        100_000
    } else {
        400_000
    };
    let broker = Broker::in_memory();
    broker
        .create_topic::<(), u64>("t", TopicConfig::new(1).records_in_memory(64))
        .unwrap();
    let mut consumer = broker.consumer::<(), u64>(earliest(Some("g"))).unwrap();
    consumer.assign(&[tp("t", 0)]).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    // What each sent value became: 1 completed, 2 dropped while held, 3 dropped unpolled.
    let fates = Arc::new(Mutex::new(vec![0u8; SENDS as usize]));
    let reported = Arc::new(Mutex::new(Vec::new()));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let senders: Vec<_> = (0..2u64)
        .map(|s| {
            let producer = broker.producer::<(), u64>();
            let (fates, reported) = (Arc::clone(&fates), Arc::clone(&reported));
            runtime.spawn(async move {
                let mut rng = Rng(0xD1B5_4A32_D192_ED03 ^ (s + 1));
                let noop = noop_waker();
                let mut v = s;
                while v < SENDS {
                    let mut fut = producer.send_async(Record::new("t", v));
                    let fate = match rng.next() % 4 {
                        0 => 3,
                        1 | 2 => match Pin::new(&mut fut).poll(&mut Context::from_waker(&noop)) {
                            Poll::Ready(r) => {
                                reported.lock().unwrap().push((v, r.unwrap().offset));
                                1
                            }
                            Poll::Pending => 2,
                        },
                        _ => {
                            let offset = fut.await.unwrap().offset;
                            reported.lock().unwrap().push((v, offset));
                            1
                        }
                    };
                    fates.lock().unwrap()[v as usize] = fate;
                    v += 2;
                }
            })
        })
        .collect();
    let reader = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            loop {
                let finished = done.load(Ordering::SeqCst);
                let got = consumer.poll(Duration::from_millis(1)).unwrap();
                for r in got.iter() {
                    seen.push((r.value, r.offset));
                }
                consumer.commit_sync().unwrap();
                if finished && got.is_empty() {
                    return seen;
                }
            }
        })
    };
    runtime.block_on(async {
        for s in senders {
            s.await.unwrap();
        }
    });
    done.store(true, Ordering::SeqCst);
    let seen = reader.join().unwrap();
    let fates = fates.lock().unwrap();
    let mut appeared = vec![None; SENDS as usize];
    for (i, &(v, offset)) in seen.iter().enumerate() {
        assert_eq!(offset, i as u64, "dense offsets, read in order");
        assert!(appeared[v as usize].is_none(), "value {v} appended twice");
        appeared[v as usize] = Some(offset);
    }
    for &(v, offset) in reported.lock().unwrap().iter() {
        assert_eq!(
            appeared[v as usize],
            Some(offset),
            "reported {v} at {offset}"
        );
    }
    // Each producer's records (values s, s + 2, ...) in call order.
    for s in 0..2u64 {
        let order: Vec<u64> = seen
            .iter()
            .map(|&(v, _)| v)
            .filter(|v| v % 2 == s)
            .collect();
        assert!(
            order.windows(2).all(|w| w[0] < w[1]),
            "producer {s}'s records out of call order"
        );
    }
    let mut held_dropped = 0;
    for (v, fate) in fates.iter().enumerate() {
        assert_ne!(*fate, 0);
        if *fate == 2 {
            held_dropped += 1;
            assert_eq!(
                appeared[v], None,
                "value {v} dropped while held, yet appended"
            );
        }
    }
    assert!(
        held_dropped > 0,
        "the partition was never full: nothing tested"
    );
}

/// A replicated topic whose followers stall: an awaited `acks = all` send parks (its
/// record in the leader's log); the followers resuming wake it with its offset. Then, with
/// the followers stalled again, an ISR shrink (HW passing the record with too few in-sync
/// replicas) wakes an awaiting task with `NotEnoughReplicasAfterAppend` and its record.
#[test]
fn an_awaited_acks_all_send_is_woken_by_the_replicas() {
    use logbus::ManualClock;
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let broker = Broker::builder().clock(clock.clone()).build().unwrap();
    let config = TopicConfig::new(1)
        .replication_factor(3)
        .min_insync_replicas(2);
    broker.create_topic::<(), u64>("r", config).unwrap();
    let producer = broker
        .producer_with_config::<(), u64>(
            ProducerConfig::new()
                .acks(Acks::All)
                .retries(0)
                .request_timeout(Duration::from_secs(20)),
        )
        .unwrap();
    let stall = |stalled: bool| {
        for r in [1, 2] {
            if stalled {
                broker.faults().stall_replica("r", 0, r).unwrap();
            } else {
                broker.faults().resume_replica("r", 0, r).unwrap();
            }
        }
    };
    let (flag, waker) = flag_waker();
    let mut cx = Context::from_waker(&waker);
    stall(true);
    let mut pending = producer.send_async(Record::new("r", 1));
    assert!(poll_until_parked(&mut pending, &flag, &mut cx).is_pending());
    stall(false);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !flag.0.load(Ordering::SeqCst) {
        assert!(std::time::Instant::now() < deadline, "never woken");
        std::thread::sleep(Duration::from_millis(1));
    }
    let meta = futures::executor::block_on(&mut pending).unwrap();
    assert_eq!(meta.offset, 0);

    stall(true);
    let mut pending = producer.send_async(Record::new("r", 2));
    assert!(poll_until_parked(&mut pending, &flag, &mut cx).is_pending());
    clock.advance(Duration::from_secs(31));
    broker.faults().check_isr_now();
    assert!(flag.0.load(Ordering::SeqCst), "the shrink woke the task");
    match Pin::new(&mut pending).poll(&mut cx) {
        Poll::Ready(Err(e)) => {
            assert!(
                matches!(
                    e.error(),
                    logbus::Error::NotEnoughReplicasAfterAppend { isr: 1, min: 2, .. }
                ),
                "{e:?}"
            );
            assert_eq!(e.into_record().unwrap().value, 2);
        }
        other => panic!("{other:?}"),
    }
}

/// The leader crashes with an awaited record in flight (its followers stalled, so no one
/// has it): the task is woken by the election, its poll appends the record again on the
/// new leader and parks (it does not wait for the new acknowledgement on the thread:
/// the followers are still stalled), and completes once they resume.
#[test]
fn an_awaited_send_retries_across_a_leader_change_without_blocking() {
    let broker = Broker::in_memory();
    let config = TopicConfig::new(1)
        .replication_factor(3)
        .min_insync_replicas(2);
    broker.create_topic::<(), u64>("r", config).unwrap();
    let producer = broker
        .producer_with_config::<(), u64>(
            ProducerConfig::new()
                .acks(Acks::All)
                .retries(u32::MAX)
                .delivery_timeout(Duration::from_secs(60))
                .request_timeout(Duration::from_secs(20)),
        )
        .unwrap();
    for v in 0..5 {
        producer.send(Record::new("r", v)).unwrap();
    }
    let stall = |stalled: bool| {
        for r in [1, 2] {
            if stalled {
                broker.faults().stall_replica("r", 0, r).unwrap();
            } else {
                broker.faults().resume_replica("r", 0, r).unwrap();
            }
        }
    };
    stall(true);
    let (flag, waker) = flag_waker();
    let mut cx = Context::from_waker(&waker);
    let mut pending = producer.send_async(Record::new("r", 5));
    assert!(poll_until_parked(&mut pending, &flag, &mut cx).is_pending());
    broker.faults().crash_replica("r", 0, 0).unwrap();
    assert!(flag.0.load(Ordering::SeqCst), "the election woke the task");
    let started = std::time::Instant::now();
    assert!(poll_until_parked(&mut pending, &flag, &mut cx).is_pending());
    // A blocking wait would have taken the request timeout here.
    assert!(started.elapsed() < Duration::from_secs(10));
    stall(false);
    let meta = futures::executor::block_on(&mut pending).unwrap();
    assert_eq!(
        meta.offset, 5,
        "appended again on the new leader, at its log end"
    );
    let m = producer.metrics();
    assert!(m.retries >= 1 && m.possible_duplicates >= 1, "{m:?}");
}

/// Records held for room keep their producer's call order, whichever handle is awaited
/// first: later handles awaited before earlier ones (here in reverse) append the earlier
/// records on their way, and none waits for another to be polled.
#[test]
fn held_sends_keep_call_order_awaited_in_any_order() {
    on_every_executor(|_| async {
        let broker = Broker::in_memory();
        broker
            .create_topic::<(), u64>("t", TopicConfig::new(1).records_in_memory(4))
            .unwrap();
        let mut consumer = broker.consumer::<(), u64>(earliest(Some("g"))).unwrap();
        consumer.assign(&[tp("t", 0)]).unwrap();
        let producer = broker.producer::<(), u64>();
        // 4 fit; 5..20 are held (the group gates the partition), in one line.
        let handles: Vec<_> = (0..20u64)
            .map(|v| producer.send_async(Record::new("t", v)))
            .collect();
        let send = async {
            let mut offsets = Vec::new();
            for h in handles.into_iter().rev() {
                offsets.push(h.await.unwrap().offset);
            }
            offsets
        };
        let read = async {
            let mut got = Vec::new();
            while got.len() < 20 {
                let records = consumer.poll_async().await.unwrap();
                got.extend(records.iter().map(|r| (r.offset, r.value)));
                drop(records);
                consumer.commit_sync().unwrap();
            }
            got
        };
        let (mut offsets, got) = futures::join!(send, read);
        offsets.reverse();
        assert_eq!(offsets, (0..20).collect::<Vec<_>>());
        assert_eq!(got, (0..20).map(|v| (v, v)).collect::<Vec<_>>());
    });
}

/// A thread waiting on a later held handle appends the earlier held records first, and a
/// held handle dropped unpolled leaves the line without its record (the records behind it
/// go on).
#[test]
fn waiting_on_a_later_held_send_appends_the_earlier_ones_first() {
    let broker = Broker::in_memory();
    broker
        .create_topic::<(), u64>("t", TopicConfig::new(1).records_in_memory(2))
        .unwrap();
    let mut consumer = broker.consumer::<(), u64>(earliest(Some("g"))).unwrap();
    consumer.assign(&[tp("t", 0)]).unwrap();
    let producer = broker.producer::<(), u64>();
    let mut handles: Vec<_> = (0..6u64)
        .map(|v| producer.send_async(Record::new("t", v)))
        .collect();
    let last = handles.pop().unwrap();
    drop(handles.remove(3)); // held, dropped unsent
    let waiter = std::thread::spawn(move || last.wait().unwrap().offset);
    let mut got = Vec::new();
    while got.len() < 5 {
        let records = consumer.poll(Duration::from_millis(5)).unwrap();
        got.extend(records.iter().map(|r| r.value));
        drop(records);
        consumer.commit_sync().unwrap();
    }
    assert_eq!(waiter.join().unwrap(), 4);
    assert_eq!(got, [0, 1, 2, 4, 5]);
    let offsets: Vec<_> = handles
        .into_iter()
        .map(|h| h.wait().unwrap().offset)
        .collect();
    assert_eq!(offsets, [0, 1, 2, 3]); // values 0, 1, 2 and 4
}
