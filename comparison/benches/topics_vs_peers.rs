//! logbus topics against their peers, interleaved in one run (A B A B …): each pair runs
//! logbus then the peer, and the table gives each side's median and the median of the
//! per-pair ratios (logbus / peer) with their spread. Records carry a u64 value and an i64
//! timestamp (equal to the value), no key, no headers; the peers move a struct with the same
//! two fields. Capacity 1024 records everywhere (records in memory per partition, a ring's
//! size, a channel's bound: 16 chunks where a channel moves chunks of 64).
//!
//! Both sides do the same work: where logbus moves batches of 64, the peer does too (its batch
//! API, or chunks of 64 events through the channel); single-operation rows compare single
//! operations. Rows (`TOPICS_BENCH_ONLY` names them):
//! - `1to1`: one partition, 1 producer → 1 consumer. logbus: `send_slice` of 64 and
//!   `poll_with` (up to 1024) + `commit_sync` per poll, `Block` topic. Peers:
//!   crossbeam-channel moving `[Event; 64]` chunks (bound 16 chunks), blocking `send`/`recv`;
//!   the `disruptor` crate's batch publish of 64 and its event poller, spin→yield.
//!   logbus-side A/B switches (this row and `fanout`): `TOPICS_BENCH_SEND_TO=1` (`send_iter` of
//!   `Payload`s), `TOPICS_BENCH_RECORD_API=1` (`send_batch` of `Record`s and `poll_with` +
//!   `to_record`),
//!   `TOPICS_BENCH_KEYED=1` (a u64 key equal to the value, on a `Topic<u64, u64>`).
//! - `kafka1`: the Kafka-style path, singly. logbus: `send(Record)` per record (topic and
//!   timestamp, no partition given: the partitioner picks the only one), `poll` (a
//!   `ConsumerRecords` per poll) + `commit_sync` per poll. Peer: crossbeam-channel,
//!   per-message `send`/`recv`.
//! - `kafka64`: the Kafka-style path in batches: logbus `send_batch` of 64 `Record`s, `poll` +
//!   `commit_sync` per poll. Peer: the disruptor with batch publishes of 64.
//! - `fanout`: 1 producer → 3 readers, per reader. logbus: 3 groups on one `Block` partition,
//!   `send_slice` of 64, `poll_with` + `commit_sync`. Peers: tokio broadcast moving
//!   chunks of 64 (bound 16 chunks; it never blocks a sender, so the producer holds back on
//!   the readers' published counts so that none lags) read with `try_recv` + spin→yield from
//!   threads, and with `recv().await` from tasks on a multi-thread runtime (its intended use;
//!   the producer a task too, yielding while it holds back); the `bus` crate moving chunks of
//!   64 (bound 16), blocking `broadcast`/`recv`; the disruptor with batch publishes of 64 and
//!   one event poller per reader.
//! - `scaling`: N producers → N partitions → N consumers of one group (producer i sends
//!   `send_slice` of 64 to partition i, consumer i reads partition i), N = 1, 2, 4, … up
//!   to the available cores (`TOPICS_BENCH_SCALING_MAX` overrides): records/s, per pair, and
//!   the efficiency against N = 1. The design predicts near-linear scaling while the
//!   2N threads have cores of their own (one lock-free ring per partition, nothing shared
//!   between partitions); a 2-core machine shows only N = 1 and N = 2, the latter with four
//!   threads on two cores.
//! - `latency`: one record in flight (the next is sent once the last was seen), produce →
//!   poll, p50/p99 one-way, against crossbeam-channel's send → recv.
//! - `replay`: seek to 0 and read in-memory records (`poll_with` + `to_record`), records/s (logbus alone).
//! - `memory`: bytes allocated per in-memory record beyond its 16 bytes of fields.
//!
//! Checks, on both sides: every reader counts what it got and folds every value, in order,
//! into a checksum (`logbus_comparison::Tally`), and asserts both against what the producer
//! was to send (readers of one partition or one channel are promised that order; the scaling
//! row checks each partition's own range). `LOGBUS_BENCH_LOSE=ours` (or `theirs`) makes that
//! side's producer skip its middle value: the run must then panic, naming the row, the side,
//! the count seen and expected. A logbus reader that waits for a count gives up after 10 s
//! without a record (`LOGBUS_BENCH_STALL_SECS`); peer readers end when their channel closes.
//! Each comparison also prints `ROW|<row>|<peer>|<median ratio>|<min>|<max>` for
//! `scripts/bench-table`.
//!
//! ```sh
//! cargo bench -p logbus-comparison --bench topics_vs_peers
//! TOPICS_BENCH_RECORDS=4000000 TOPICS_BENCH_PAIRS=9 cargo bench -p logbus-comparison --bench topics_vs_peers
//! TOPICS_BENCH_ONLY=1to1,kafka1,kafka64,fanout cargo bench -p logbus-comparison --bench topics_vs_peers
//! # must fail: logbus's producer loses a record
//! LOGBUS_BENCH_LOSE=ours TOPICS_BENCH_ONLY=1to1 TOPICS_BENCH_RECORDS=20000 TOPICS_BENCH_PAIRS=1 \
//!     cargo bench -p logbus-comparison --bench topics_vs_peers
//! # only the peers whose name contains a text:
//! TOPICS_BENCH_ONLY=fanout TOPICS_BENCH_PEER=bus cargo bench -p logbus-comparison --bench topics_vs_peers
//! # logbus alone, no peers (A/B between logbus builds):
//! TOPICS_BENCH_SOLO=1 TOPICS_BENCH_ONLY=1to1 cargo bench -p logbus-comparison --bench topics_vs_peers
//! # every pair's figures (logbus/peer, M/s), in the order they ran:
//! TOPICS_BENCH_VERBOSE=1 TOPICS_BENCH_ONLY=1to1 cargo bench -p logbus-comparison --bench topics_vs_peers
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use disruptor::{build_single_producer, BusySpin, EventPoller, Polling, SingleProducerBarrier};
use logbus::broker::{Broker, Overflow, TopicConfig, TopicPartition};
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::producer::{Payload, Record};
use logbus_comparison::{env_u64 as env, median, print_row, Pairs, Side, Source, Stall, Tally};

/// Counts bytes allocated, for the memory row.
struct Counting;
static BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; it only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const CAP: usize = 1024;
const BATCH: usize = 64;
/// A channel's bound where it moves chunks of `BATCH` events: `CAP` records.
const CHUNKS: usize = CAP / BATCH;
/// How long a logbus poll waits before the reader checks its stall bound.
const POLL_WAIT: Duration = Duration::from_millis(100);

/// What the peers move: the same fields as a logbus record without key or headers.
#[derive(Debug, Clone, Copy, Default)]
struct Event {
    value: u64,
    timestamp: i64,
}

/// Up to `BATCH` events, moved through a channel as one message (the peers' side of a
/// logbus batch).
#[derive(Debug, Clone, Copy)]
struct Chunk {
    len: usize,
    events: [Event; BATCH],
}

impl Chunk {
    /// The next chunk of `src`'s values, or `None` at its end.
    #[inline]
    fn next(src: &mut Source) -> Option<Chunk> {
        let mut c = Chunk {
            len: 0,
            events: [Event::default(); BATCH],
        };
        for v in src.by_ref().take(BATCH) {
            c.events[c.len] = Event {
                value: v,
                timestamp: v as i64,
            };
            c.len += 1;
        }
        (c.len > 0).then_some(c)
    }

    fn events(&self) -> &[Event] {
        &self.events[..self.len]
    }
}

/// Spin, then yield (the loop around peers' `try_` calls).
struct SpinYield(u32);

impl SpinYield {
    fn wait(&mut self) {
        if self.0 < 6 {
            for _ in 0..1 << self.0 {
                std::hint::spin_loop();
            }
        } else {
            thread::yield_now();
        }
        self.0 = (self.0 + 1).min(7);
    }
}

/// A record key for the benchmark: `()` (no key; the default) or `u64` (`TOPICS_BENCH_KEYED=1`).
trait BenchKey: logbus::Codec + Clone + Send + Sync + 'static {
    /// The key of the record whose value is `v`.
    fn of(v: u64) -> Option<Self>;
    /// What the reader folds into its key sum.
    fn fold(key: Option<&Self>) -> u64;
}

impl BenchKey for () {
    #[inline(always)]
    fn of(_: u64) -> Option<Self> {
        None
    }
    #[inline(always)]
    fn fold(_: Option<&Self>) -> u64 {
        0
    }
}

impl BenchKey for u64 {
    #[inline(always)]
    fn of(v: u64) -> Option<Self> {
        Some(v)
    }
    #[inline(always)]
    fn fold(key: Option<&Self>) -> u64 {
        key.copied().unwrap_or(0)
    }
}

/// Whether the logbus rows send records with a u64 key (`TOPICS_BENCH_KEYED=1`).
fn keyed() -> bool {
    std::env::var_os("TOPICS_BENCH_KEYED").is_some()
}

fn topic<K: BenchKey>(broker: &Broker, partitions: u32, records: usize) {
    broker
        .create_topic::<K, u64>(
            "t",
            TopicConfig::new(partitions)
                .records_in_memory(records)
                .overflow(Overflow::Block),
        )
        .unwrap();
}

fn group_consumer<K: BenchKey>(
    broker: &Broker,
    group: &str,
    tps: &[TopicPartition],
) -> logbus::Consumer<K, u64> {
    let mut c = broker
        .consumer::<K, u64>(
            ConsumerConfig::new()
                .group_id(group)
                .auto_offset_reset(OffsetReset::Earliest)
                .max_poll_records(CAP),
        )
        .unwrap();
    c.assign(tps).unwrap();
    c
}

/// How a logbus reader polls.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ReadApi {
    /// `poll_with` (records lent to a closure): the fast path.
    With,
    /// `poll_with` cloning each record into a reused `Vec` (`RecordRef::to_record`): the
    /// record API's per-record work without `poll`'s vector per call.
    Into,
    /// `poll` (a `ConsumerRecords` per poll): the Kafka-style path.
    Poll,
}

/// How the 1 → 1 and fan-out rows read: `poll_with`, or `poll_with` + `to_record` with
/// `TOPICS_BENCH_RECORD_API=1` (A/B).
fn fast_read() -> ReadApi {
    if std::env::var_os("TOPICS_BENCH_RECORD_API").is_some() {
        ReadApi::Into
    } else {
        ReadApi::With
    }
}

/// Reads `want.count` records with `read` + `commit_sync` per poll, asserts their count and
/// ordered checksum, and returns when it finished.
fn drain<K: BenchKey>(
    mut c: logbus::Consumer<K, u64>,
    read: ReadApi,
    row: &str,
    want: &Tally,
) -> Instant {
    let mut out = Vec::with_capacity(CAP);
    let mut tally = Tally::default();
    let mut keys = 0u64;
    let mut stall = Stall::new();
    // Polls made (`TOPICS_BENCH_POLLS=1` prints the records per poll).
    let mut polls = 0u64;
    while tally.count < want.count {
        let k = match read {
            ReadApi::With => c
                .poll_with(CAP, POLL_WAIT, |r| {
                    tally.add(*r.value);
                    keys = keys.wrapping_add(K::fold(r.key));
                })
                .unwrap(),
            ReadApi::Into => {
                out.clear();
                let k = c
                    .poll_with(CAP, POLL_WAIT, |r| out.push(r.to_record()))
                    .unwrap();
                for r in &out {
                    tally.add(r.value);
                    keys = keys.wrapping_add(K::fold(r.key.as_ref()));
                }
                k
            }
            ReadApi::Poll => {
                let records = c.poll(POLL_WAIT).unwrap();
                for r in records.iter() {
                    tally.add(r.value);
                    keys = keys.wrapping_add(K::fold(r.key.as_ref()));
                }
                records.len()
            }
        };
        polls += 1;
        stall.after(k, Side::Ours, row, tally.count, want.count);
        c.commit_sync().unwrap();
    }
    let end = Instant::now();
    black_box(keys);
    tally.assert_in_order(Side::Ours, row, want);
    if std::env::var_os("TOPICS_BENCH_POLLS").is_some() {
        eprintln!(
            "  {polls} polls, {:.1} records a poll",
            want.count as f64 / polls as f64
        );
    }
    end
}

/// How a logbus producer sends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SendApi {
    /// `PartitionProducer::send_slice` of `BATCH` (value, timestamp) pairs: the fast path.
    Slice,
    /// `PartitionProducer::send_iter` of `BATCH` `Payload`s.
    PayloadsTo,
    /// `send_batch` of `BATCH` `Record`s.
    Batch,
    /// `send` of one `Record` at a time.
    Single,
}

/// How the 1 → 1 and fan-out rows send: `send_slice`, or (A/B) `send_iter` with
/// `TOPICS_BENCH_SEND_TO=1` or keyed records, `send_batch` with `TOPICS_BENCH_RECORD_API=1`.
fn fast_send() -> SendApi {
    if std::env::var_os("TOPICS_BENCH_RECORD_API").is_some() {
        SendApi::Batch
    } else if std::env::var_os("TOPICS_BENCH_SEND_TO").is_some() || keyed() {
        // `send_slice` carries no key: keyed records go through `send_iter`.
        SendApi::PayloadsTo
    } else {
        SendApi::Slice
    }
}

/// Sends `src`'s values to `partition` of topic `"t"` (`Batch` and `Single` leave the
/// partition to the partitioner: the Kafka-style path on a one-partition topic).
fn produce<K: BenchKey>(
    p: &logbus::Producer<K, u64>,
    how: SendApi,
    partition: u32,
    mut src: Source,
) {
    match how {
        SendApi::Slice => {
            // The batch built on the stack, as the disruptor's side fills its claimed slots.
            let mut values = [0u64; BATCH];
            let mut batch = [(0i64, 0u64); BATCH];
            let to = p.partition("t", partition).unwrap();
            loop {
                let k = src.fill(&mut values);
                if k == 0 {
                    break;
                }
                for (r, &v) in batch.iter_mut().zip(&values[..k]) {
                    *r = (v as i64, v);
                }
                to.send_slice(&batch[..k]).unwrap();
            }
        }
        SendApi::PayloadsTo => {
            let mut values = [0u64; BATCH];
            let to = p.partition("t", partition).unwrap();
            loop {
                let k = src.fill(&mut values);
                if k == 0 {
                    break;
                }
                to.send_iter(values[..k].iter().map(|&v| {
                    let mut r = Payload::new(v).timestamp(v as i64);
                    r.key = K::of(v);
                    r
                }))
                .unwrap();
            }
        }
        SendApi::Batch => {
            let mut batch = Vec::with_capacity(BATCH);
            loop {
                batch.extend(src.by_ref().take(BATCH).map(|v| {
                    let mut r = Record::new("t", v).timestamp(v as i64);
                    r.key = K::of(v);
                    r
                }));
                if batch.is_empty() {
                    break;
                }
                p.send_batch(&mut batch).unwrap();
            }
        }
        SendApi::Single => {
            for v in src {
                let mut r = Record::new("t", v).timestamp(v as i64);
                r.key = K::of(v);
                p.send(r).unwrap();
            }
        }
    }
}

// ---- logbus: 1 -> readers ----

/// 1 producer → `groups` groups reading one partition; records/s through the slowest.
fn logbus_run<K: BenchKey>(row: &str, groups: usize, send: SendApi, read: ReadApi, n: u64) -> f64 {
    let broker = Broker::in_memory();
    topic::<K>(&broker, 1, CAP);
    let tp = [TopicPartition::new("t", 0)];
    let consumers: Vec<_> = (0..groups)
        .map(|g| group_consumer::<K>(&broker, &format!("g{g}"), &tp))
        .collect();
    let p = broker.producer::<K, u64>();
    let want = Tally::of(0..n);
    let src = Source::all(Side::Ours, n);
    let start = Instant::now();
    let readers: Vec<_> = consumers
        .into_iter()
        .map(|c| {
            let row = row.to_owned();
            thread::spawn(move || drain(c, read, &row, &want))
        })
        .collect();
    produce(&p, send, 0, src);
    let end = join_all(readers);
    n as f64 / (end - start).as_secs_f64()
}

/// Joins reader threads; the latest end.
fn join_all(readers: Vec<thread::JoinHandle<Instant>>) -> Instant {
    readers
        .into_iter()
        .map(|r| {
            r.join()
                .expect("a reader failed its check (see its panic above)")
        })
        .max()
        .unwrap()
}

// ---- crossbeam-channel ----

/// Per-message `send`/`recv`.
fn crossbeam_single(row: &str, n: u64) -> f64 {
    let row = &format!("{row} (crossbeam-channel)");
    let (tx, rx) = crossbeam_channel::bounded::<Event>(CAP);
    let want = Tally::of(0..n);
    let src = Source::all(Side::Theirs, n);
    let row = row.to_owned();
    let start = Instant::now();
    let reader = thread::spawn(move || {
        let mut tally = Tally::default();
        while let Ok(e) = rx.recv() {
            tally.add(e.value);
        }
        let end = Instant::now();
        tally.assert_in_order(Side::Theirs, &row, &want);
        end
    });
    for v in src {
        tx.send(Event {
            value: v,
            timestamp: v as i64,
        })
        .unwrap();
    }
    drop(tx);
    let end = join_all(vec![reader]);
    n as f64 / (end - start).as_secs_f64()
}

/// `[Event; 64]` chunks through a channel bounded at `CHUNKS`.
fn crossbeam_chunks(row: &str, n: u64) -> f64 {
    let row = &format!("{row} (crossbeam-channel chunks)");
    let (tx, rx) = crossbeam_channel::bounded::<Chunk>(CHUNKS);
    let want = Tally::of(0..n);
    let mut src = Source::all(Side::Theirs, n);
    let row = row.to_owned();
    let start = Instant::now();
    let reader = thread::spawn(move || {
        let mut tally = Tally::default();
        while let Ok(c) = rx.recv() {
            for e in c.events() {
                tally.add(e.value);
            }
        }
        let end = Instant::now();
        tally.assert_in_order(Side::Theirs, &row, &want);
        end
    });
    while let Some(c) = Chunk::next(&mut src) {
        tx.send(c).unwrap();
    }
    drop(tx);
    let end = join_all(vec![reader]);
    n as f64 / (end - start).as_secs_f64()
}

// ---- the disruptor ----

/// Batch publishes of 64, one event poller per reader (spin→yield around `poll` and
/// `try_batch_publish`); records/s through the slowest reader.
fn disruptor_run(row: &str, readers: usize, n: u64) -> f64 {
    let row = &format!("{row} (disruptor)");
    let builder = build_single_producer(CAP, Event::default, BusySpin);
    let (first, builder) = builder.new_event_poller();
    if readers == 1 {
        return disruptor_drive(row, n, builder.build(), vec![first]);
    }
    let (second, mut more) = builder.new_event_poller();
    let mut pollers = vec![first, second];
    for _ in 2..readers {
        let (p, b) = more.new_event_poller();
        pollers.push(p);
        more = b;
    }
    disruptor_drive(row, n, more.build(), pollers)
}

fn disruptor_drive<P: disruptor::Producer<Event>>(
    row: &str,
    n: u64,
    mut producer: P,
    pollers: Vec<EventPoller<Event, SingleProducerBarrier>>,
) -> f64 {
    let want = Tally::of(0..n);
    let mut src = Source::all(Side::Theirs, n);
    let start = Instant::now();
    let readers: Vec<_> = pollers
        .into_iter()
        .map(|mut poller| {
            let row = row.to_owned();
            thread::spawn(move || {
                let mut tally = Tally::default();
                let mut backoff = SpinYield(0);
                loop {
                    match poller.poll() {
                        Ok(mut events) => {
                            for e in &mut events {
                                tally.add(e.value);
                            }
                            backoff.0 = 0;
                        }
                        Err(Polling::NoEvents) => backoff.wait(),
                        Err(Polling::Shutdown) => break,
                    }
                }
                let end = Instant::now();
                tally.assert_in_order(Side::Theirs, &row, &want);
                end
            })
        })
        .collect();
    let mut backoff = SpinYield(0);
    let mut values = [0u64; BATCH];
    loop {
        let k = src.fill(&mut values);
        if k == 0 {
            break;
        }
        while producer
            .try_batch_publish(k, |iter| {
                for (e, &v) in iter.zip(&values[..k]) {
                    e.value = v;
                    e.timestamp = v as i64;
                }
            })
            .is_err()
        {
            backoff.wait();
        }
        backoff.0 = 0;
    }
    drop(producer);
    let end = join_all(readers);
    n as f64 / (end - start).as_secs_f64()
}

// ---- fan-out peers ----

/// tokio broadcast from threads: chunks of 64, `try_recv` + spin→yield; the producer holds
/// back on the readers' published chunk counts so that none lags.
fn tokio_threads_fanout(row: &str, n: u64) -> f64 {
    let row = &format!("{row} (tokio broadcast, threads)");
    let (tx, rx) = tokio::sync::broadcast::channel::<Chunk>(CHUNKS);
    let rxs: Vec<_> = (0..3).map(|_| tx.subscribe()).collect();
    drop(rx);
    // Each reader's chunk count, so the producer can hold back without `Sender::len` (which
    // takes the channel's lock).
    let counts: Arc<Vec<AtomicU64>> = Arc::new((0..3).map(|_| AtomicU64::new(0)).collect());
    let want = Tally::of(0..n);
    let mut src = Source::all(Side::Theirs, n);
    let start = Instant::now();
    let readers: Vec<_> = rxs
        .into_iter()
        .enumerate()
        .map(|(i, mut rx)| {
            let counts = Arc::clone(&counts);
            let row = row.to_owned();
            thread::spawn(move || {
                use tokio::sync::broadcast::error::TryRecvError;
                let mut tally = Tally::default();
                let mut chunks = 0;
                let mut backoff = SpinYield(0);
                loop {
                    match rx.try_recv() {
                        Ok(c) => {
                            for e in c.events() {
                                tally.add(e.value);
                            }
                            chunks += 1;
                            counts[i].store(chunks, Ordering::Release);
                            backoff.0 = 0;
                        }
                        Err(TryRecvError::Empty) => backoff.wait(),
                        Err(TryRecvError::Closed) => break,
                        Err(TryRecvError::Lagged(k)) => panic!("{row}: tokio reader lagged {k}"),
                    }
                }
                let end = Instant::now();
                tally.assert_in_order(Side::Theirs, &row, &want);
                end
            })
        })
        .collect();
    let mut backoff = SpinYield(0);
    let mut slowest = 0;
    let mut sent = 0u64;
    while let Some(c) = Chunk::next(&mut src) {
        // Hold back so that no reader lags (tokio broadcast never blocks a sender).
        while sent - slowest >= CHUNKS as u64 - 1 {
            slowest = counts
                .iter()
                .map(|c| c.load(Ordering::Acquire))
                .min()
                .unwrap_or(0);
            if sent - slowest >= CHUNKS as u64 - 1 {
                backoff.wait();
            }
        }
        backoff.0 = 0;
        tx.send(c).unwrap();
        sent += 1;
    }
    drop(tx);
    let end = join_all(readers);
    n as f64 / (end - start).as_secs_f64()
}

/// tokio broadcast from tasks on a multi-thread runtime: chunks of 64, `recv().await`; the
/// producer is a task that yields while it holds back so that no reader lags.
fn tokio_tasks_fanout(rt: &tokio::runtime::Runtime, row: &str, n: u64) -> f64 {
    let row = &format!("{row} (tokio broadcast, tasks)");
    let want = Tally::of(0..n);
    let mut src = Source::all(Side::Theirs, n);
    let row = row.to_owned();
    rt.block_on(async move {
        let (tx, rx) = tokio::sync::broadcast::channel::<Chunk>(CHUNKS);
        let rxs: Vec<_> = (0..3).map(|_| tx.subscribe()).collect();
        drop(rx);
        let counts: Arc<Vec<AtomicU64>> = Arc::new((0..3).map(|_| AtomicU64::new(0)).collect());
        let start = Instant::now();
        let readers: Vec<_> = rxs
            .into_iter()
            .enumerate()
            .map(|(i, mut rx)| {
                let counts = Arc::clone(&counts);
                let row = row.clone();
                tokio::spawn(async move {
                    use tokio::sync::broadcast::error::RecvError;
                    let mut tally = Tally::default();
                    let mut chunks = 0;
                    loop {
                        match rx.recv().await {
                            Ok(c) => {
                                for e in c.events() {
                                    tally.add(e.value);
                                }
                                chunks += 1;
                                counts[i].store(chunks, Ordering::Release);
                            }
                            Err(RecvError::Closed) => break,
                            Err(RecvError::Lagged(k)) => panic!("{row}: tokio task lagged {k}"),
                        }
                    }
                    let end = Instant::now();
                    tally.assert_in_order(Side::Theirs, &row, &want);
                    end
                })
            })
            .collect();
        let producer = tokio::spawn(async move {
            let mut sent = 0u64;
            while let Some(c) = Chunk::next(&mut src) {
                while sent
                    - counts
                        .iter()
                        .map(|c| c.load(Ordering::Acquire))
                        .min()
                        .unwrap_or(0)
                    >= CHUNKS as u64 - 1
                {
                    tokio::task::yield_now().await;
                }
                tx.send(c).unwrap();
                sent += 1;
            }
        });
        producer.await.unwrap();
        let mut end = start;
        for r in readers {
            end = end.max(
                r.await
                    .expect("a reader task failed its check (see its panic above)"),
            );
        }
        n as f64 / (end - start).as_secs_f64()
    })
}

/// The `bus` crate: chunks of 64, bound `CHUNKS`, blocking `broadcast`/`recv`.
fn bus_fanout(row: &str, n: u64) -> f64 {
    let row = &format!("{row} (bus)");
    let mut bus = bus::Bus::<Chunk>::new(CHUNKS);
    let rxs: Vec<_> = (0..3).map(|_| bus.add_rx()).collect();
    let want = Tally::of(0..n);
    let mut src = Source::all(Side::Theirs, n);
    let start = Instant::now();
    let readers: Vec<_> = rxs
        .into_iter()
        .map(|mut rx| {
            let row = row.to_owned();
            thread::spawn(move || {
                let mut tally = Tally::default();
                while let Ok(c) = rx.recv() {
                    for e in c.events() {
                        tally.add(e.value);
                    }
                }
                let end = Instant::now();
                tally.assert_in_order(Side::Theirs, &row, &want);
                end
            })
        })
        .collect();
    while let Some(c) = Chunk::next(&mut src) {
        bus.broadcast(c);
    }
    drop(bus);
    let end = join_all(readers);
    n as f64 / (end - start).as_secs_f64()
}

// ---- scaling ----

/// `k` producers → `k` partitions → `k` consumers of one group, `send_slice` of 64;
/// records/s in all.
fn logbus_scaling(k: u32, n: u64) -> f64 {
    let broker = Broker::in_memory();
    topic::<()>(&broker, k, CAP);
    let per = n / k as u64;
    let total = per * k as u64;
    let lost = logbus_comparison::lost_value(Side::Ours, total);
    let consumers: Vec<_> = (0..k)
        .map(|i| group_consumer::<()>(&broker, "g", &[TopicPartition::new("t", i)]))
        .collect();
    let start = Instant::now();
    let readers: Vec<_> = consumers
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let range = i as u64 * per..(i as u64 + 1) * per;
            thread::spawn(move || {
                let row = format!("scaling {k}, partition {i}");
                drain(c, ReadApi::With, &row, &Tally::of(range))
            })
        })
        .collect();
    let writers: Vec<_> = (0..k)
        .map(|i| {
            let p = broker.producer::<(), u64>();
            let src = Source::new(i as u64 * per..(i as u64 + 1) * per, lost);
            thread::spawn(move || produce(&p, SendApi::Slice, i, src))
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let end = join_all(readers);
    total as f64 / (end - start).as_secs_f64()
}

// ---- latency ----

fn pct(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// One-way produce → poll latencies, ns, sorted. The value carries the send time, the
/// timestamp the sample's index (what the reader checks).
fn logbus_latency(samples: u64) -> Vec<u64> {
    let broker = Broker::in_memory();
    topic::<()>(&broker, 1, CAP);
    let mut c = group_consumer::<()>(&broker, "g", &[TopicPartition::new("t", 0)]);
    let p = broker.producer::<(), u64>();
    let origin = Instant::now();
    let seen = Arc::new(AtomicU64::new(0));
    let seen2 = Arc::clone(&seen);
    let want = Tally::of(0..samples);
    let reader = thread::spawn(move || {
        let mut lat = Vec::with_capacity(samples as usize);
        let mut out = Vec::with_capacity(16);
        let mut tally = Tally::default();
        let mut stall = Stall::new();
        while tally.count < samples {
            out.clear();
            let k = c
                .poll_with(16, POLL_WAIT, |r| out.push(r.to_record()))
                .unwrap();
            let now = origin.elapsed().as_nanos() as u64;
            for r in &out {
                lat.push(now - r.value);
                tally.add(r.timestamp as u64);
            }
            seen2.store(tally.count, Ordering::Release);
            stall.after(k, Side::Ours, "latency", tally.count, samples);
            c.commit_sync().unwrap();
        }
        tally.assert_in_order(Side::Ours, "latency", &want);
        lat
    });
    let mut backoff = SpinYield(0);
    for (k, i) in Source::all(Side::Ours, samples).enumerate() {
        while seen.load(Ordering::Acquire) < k as u64 {
            backoff.wait();
        }
        backoff.0 = 0;
        let stamp = origin.elapsed().as_nanos() as u64;
        p.send(Record::new("t", stamp).timestamp(i as i64)).unwrap();
    }
    let mut lat = reader.join().expect("the latency reader failed its check");
    lat.sort_unstable();
    lat
}

fn crossbeam_latency(samples: u64) -> Vec<u64> {
    let (tx, rx) = crossbeam_channel::bounded::<Event>(CAP);
    let origin = Instant::now();
    let seen = Arc::new(AtomicU64::new(0));
    let seen2 = Arc::clone(&seen);
    let want = Tally::of(0..samples);
    let reader = thread::spawn(move || {
        let mut lat = Vec::with_capacity(samples as usize);
        let mut tally = Tally::default();
        while let Ok(e) = rx.recv() {
            lat.push(origin.elapsed().as_nanos() as u64 - e.value);
            tally.add(e.timestamp as u64);
            seen2.store(tally.count, Ordering::Release);
        }
        tally.assert_in_order(Side::Theirs, "latency", &want);
        lat
    });
    let mut backoff = SpinYield(0);
    for (k, i) in Source::all(Side::Theirs, samples).enumerate() {
        while seen.load(Ordering::Acquire) < k as u64 {
            backoff.wait();
        }
        backoff.0 = 0;
        let stamp = origin.elapsed().as_nanos() as u64;
        tx.send(Event {
            value: stamp,
            timestamp: i as i64,
        })
        .unwrap();
    }
    drop(tx);
    let mut lat = reader.join().expect("the latency reader failed its check");
    lat.sort_unstable();
    lat
}

// ---- replay ----

fn logbus_replay(n: u64) -> f64 {
    let broker = Broker::in_memory();
    topic::<()>(&broker, 1, (n as usize).next_power_of_two());
    let p = broker.producer::<(), u64>();
    produce(&p, SendApi::Batch, 0, Source::all(Side::Ours, n));
    let tp = TopicPartition::new("t", 0);
    let mut c = broker
        .consumer::<(), u64>(ConsumerConfig::new().max_poll_records(CAP))
        .unwrap();
    c.assign(std::slice::from_ref(&tp)).unwrap();
    let want = Tally::of(0..n);
    let mut out = Vec::with_capacity(CAP);
    let mut tally = Tally::default();
    let mut stall = Stall::new();
    let start = Instant::now();
    c.seek(&tp, 0).unwrap();
    while tally.count < n {
        out.clear();
        let k = c
            .poll_with(CAP, POLL_WAIT, |r| out.push(r.to_record()))
            .unwrap();
        for r in &out {
            tally.add(r.value);
        }
        stall.after(k, Side::Ours, "replay", tally.count, n);
    }
    let took = start.elapsed();
    tally.assert_in_order(Side::Ours, "replay", &want);
    n as f64 / took.as_secs_f64()
}

// ---- reporting ----

/// A peer of a row: its name and one run, returning records/s.
type Peer<'a> = (&'a str, &'a dyn Fn() -> f64);

/// Runs `ours` and each peer interleaved `pairs` times; prints one row per peer (and its
/// `ROW|` line).
fn compare(row: &str, pairs: u64, ours: &dyn Fn() -> f64, peers: &[Peer<'_>]) {
    if std::env::var_os("TOPICS_BENCH_SOLO").is_some() {
        // logbus alone (A/B of logbus builds): every run's figure and the median.
        let v: Vec<f64> = (0..pairs).map(|_| ours()).collect();
        let each: Vec<String> = v.iter().map(|x| format!("{:.1}", x / 1e6)).collect();
        println!(
            "| {row} | {:.1} | (solo: {}) |",
            median(&v) / 1e6,
            each.join(" ")
        );
        return;
    }
    // `TOPICS_BENCH_PEER=<text>`: only the peers whose name contains it.
    let pick = std::env::var("TOPICS_BENCH_PEER").unwrap_or_default();
    let peers: Vec<&Peer<'_>> = peers.iter().filter(|(n, _)| n.contains(&pick)).collect();
    let mut all: Vec<Pairs> = vec![Pairs::default(); peers.len()];
    for _ in 0..pairs {
        for (i, (_, peer)) in peers.iter().enumerate() {
            let a = ours();
            let b = peer();
            all[i].push(a / 1e6, b / 1e6);
        }
    }
    for (p, (name, _)) in all.iter().zip(&peers) {
        let (lo, hi) = p.ratio_range();
        println!(
            "| {row} | {:.1} | {name} | {:.1} | {:.2}× ({lo:.2}–{hi:.2}) |",
            p.ours_median(),
            p.theirs_median(),
            p.median_ratio(),
        );
        print_row(row, name, p);
        if std::env::var_os("TOPICS_BENCH_VERBOSE").is_some() {
            // Every run, in the order it ran: logbus, then the peer, per pair.
            let each: Vec<String> = p
                .ours
                .iter()
                .zip(&p.theirs)
                .map(|(a, b)| format!("{a:.1}/{b:.1}"))
                .collect();
            println!("  {row} vs {name}, M/s per pair: {}", each.join(" "));
        }
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: keep that quick.
    let benching = std::env::args().any(|a| a == "--bench");
    let n = env(
        "TOPICS_BENCH_RECORDS",
        if benching { 2_000_000 } else { 20_000 },
    );
    let pairs = env("TOPICS_BENCH_PAIRS", if benching { 5 } else { 1 });
    let replay = env(
        "TOPICS_BENCH_REPLAY",
        if benching { 10_000_000 } else { 50_000 },
    );
    let samples = env("TOPICS_BENCH_SAMPLES", if benching { 20_000 } else { 200 });
    let only = std::env::var("TOPICS_BENCH_ONLY").unwrap_or_default();
    let run = |w: &str| only.is_empty() || only.split(',').any(|o| o == w);
    let keyed = keyed();
    let cores = thread::available_parallelism().map_or(1, |c| c.get());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores)
        .build()
        .unwrap();
    println!(
        "topics_vs_peers: {n} records per run, capacity {CAP}, batches of {BATCH}, {pairs} interleaved pairs, {cores} cores"
    );
    println!();
    println!(
        "| row | logbus M rec/s (median) | peer | peer M/s (median) | median ratio (min–max) |"
    );
    println!("|---|---|---|---|---|");
    let (send, read) = (fast_send(), fast_read());
    if run("1to1") {
        let row = "topic 1 → 1, send_slice 64 + poll_with + commit_sync";
        compare(
            row,
            pairs,
            &|| {
                if keyed {
                    logbus_run::<u64>(row, 1, send, read, n)
                } else {
                    logbus_run::<()>(row, 1, send, read, n)
                }
            },
            &[
                ("crossbeam-channel, [Event; 64] chunks", &|| {
                    crossbeam_chunks(row, n)
                }),
                ("disruptor, batch publish 64 + event poller", &|| {
                    disruptor_run(row, 1, n)
                }),
            ],
        );
    }
    if run("kafka1") {
        let row = "topic 1 → 1, Kafka-style send(Record) + poll + commit_sync";
        compare(
            row,
            pairs,
            &|| logbus_run::<()>(row, 1, SendApi::Single, ReadApi::Poll, n),
            &[("crossbeam-channel, per-message send/recv", &|| {
                crossbeam_single(row, n)
            })],
        );
    }
    if run("kafka64") {
        let row = "topic 1 → 1, Kafka-style send_batch of 64 Records + poll + commit_sync";
        compare(
            row,
            pairs,
            &|| logbus_run::<()>(row, 1, SendApi::Batch, ReadApi::Poll, n),
            &[("disruptor, batch publish 64 + event poller", &|| {
                disruptor_run(row, 1, n)
            })],
        );
    }
    if run("fanout") {
        let row = "fan-out 1 → 3 groups, send_slice 64 + poll_with + commit_sync, per reader";
        compare(
            row,
            pairs,
            &|| {
                if keyed {
                    logbus_run::<u64>(row, 3, send, read, n)
                } else {
                    logbus_run::<()>(row, 3, send, read, n)
                }
            },
            &[
                ("tokio broadcast, chunks of 64, threads (try_recv)", &|| {
                    tokio_threads_fanout(row, n)
                }),
                (
                    "tokio broadcast, chunks of 64, tasks (recv().await)",
                    &|| tokio_tasks_fanout(&rt, row, n),
                ),
                ("bus, chunks of 64", &|| bus_fanout(row, n)),
                (
                    "disruptor, batch publish 64, one poller per reader",
                    &|| disruptor_run(row, 3, n),
                ),
            ],
        );
    }
    if run("scaling") {
        let max = env("TOPICS_BENCH_SCALING_MAX", cores as u64).max(1) as u32;
        println!();
        println!("| N producers → N partitions → N consumers | M rec/s (median) | M rec/s per pair | efficiency vs N = 1 |");
        println!("|---|---|---|---|");
        let mut base = 0.0;
        let mut k = 1;
        while k <= max {
            let v: Vec<f64> = (0..pairs).map(|_| logbus_scaling(k, n)).collect();
            let m = median(&v) / 1e6;
            if k == 1 {
                base = m;
            }
            println!(
                "| {k} | {m:.1} | {:.1} | {:.2} |",
                m / k as f64,
                m / (k as f64 * base)
            );
            k *= 2;
        }
    }
    if run("latency") {
        let (mut l50, mut l99, mut c50, mut c99) = (vec![], vec![], vec![], vec![]);
        for _ in 0..pairs {
            let l = logbus_latency(samples);
            let c = crossbeam_latency(samples);
            l50.push(pct(&l, 0.5) as f64);
            l99.push(pct(&l, 0.99) as f64);
            c50.push(pct(&c, 0.5) as f64);
            c99.push(pct(&c, 0.99) as f64);
        }
        println!();
        println!("| one-way latency, one record in flight | p50 ns | p99 ns |");
        println!("|---|---|---|");
        println!(
            "| logbus send → poll | {:.0} | {:.0} |",
            median(&l50),
            median(&l99)
        );
        println!(
            "| crossbeam-channel send → recv | {:.0} | {:.0} |",
            median(&c50),
            median(&c99)
        );
        // As rates (one over the latency), so that the ratio reads as the others do:
        // crossbeam's latency over logbus's, > 1 when logbus is faster.
        let rate = |v: &[f64]| v.iter().map(|ns| 1.0 / ns).collect::<Vec<_>>();
        for (row, ours, theirs) in [("p50", &l50, &c50), ("p99", &l99, &c99)] {
            let p = Pairs {
                ours: rate(ours),
                theirs: rate(theirs),
            };
            print_row(
                &format!("topic 1 → 1, latency {row}"),
                "crossbeam-channel, per-message send/recv",
                &p,
            );
        }
    }
    if run("replay") {
        let v: Vec<f64> = (0..pairs.min(3)).map(|_| logbus_replay(replay)).collect();
        println!();
        println!(
            "replay: seek to 0 and read {replay} in-memory records: {:.1} M rec/s (median)",
            median(&v) / 1e6
        );
    }
    if run("memory") {
        let records = 1usize << 20;
        let broker = Broker::in_memory();
        let before = BYTES.load(Ordering::Relaxed);
        broker
            .create_topic::<(), u64>("m", TopicConfig::new(1).records_in_memory(records))
            .unwrap();
        let bytes = BYTES.load(Ordering::Relaxed) - before;
        let per = bytes as f64 / records as f64;
        println!();
        println!(
            "memory: {per:.1} bytes allocated per in-memory record of Topic<(), u64> ({:.1} beyond its 16 bytes of value and timestamp)",
            per - 16.0
        );
    }
}
