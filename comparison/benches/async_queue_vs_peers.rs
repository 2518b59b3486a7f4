//! logbus::queue's async API against tokio's `mpsc`, flume (`send_async`/`recv_async`),
//! kanal (`bounded_async`) and async-channel, all bounded with capacity 1024 and `u64`
//! messages, every side tasks on one tokio multi-thread runtime (two workers), interleaved
//! in one run (A B A B …): each repetition runs every contender once, and the figure quoted
//! is the median over the repetitions of the per-repetition ratio logbus / peer, with its
//! spread.
//!
//! Rows (`LOGBUS_BENCH_ONLY` names them): `async-spsc` (one producer task, one consumer
//! task), `async-mpmc2x2` (two and two; tokio's `mpsc` has one receiver and sits it out),
//! `async-batch` (SPSC moving batches of 64: logbus `send_batch_async`/`recv_batch_async`,
//! the peers moving `[u64; 64]` chunks with a length through a channel bounded at 16 chunks,
//! i.e. 1024 records, as `queue_vs_peers`'s `batch` row does for crossbeam).
//!
//! Checks, on both sides: producer i sends its own range of values; every consumer counts
//! and checksums what it got (`logbus_comparison::Tally`), and the run asserts the exact
//! count and checksum of every value sent (in order for SPSC, order-independent with
//! several). `LOGBUS_BENCH_LOSE=ours` (or `theirs`) makes that side's producers skip the
//! middle value: the run must then panic naming the row, the side, the counts and
//! checksums. Consumers end when their queue disconnects, so a loss cannot hang a run.
//! Each comparison prints a `ROW|<row>|<peer>|<median ratio>|<min>|<max>` line for
//! `scripts/bench-table`.
//!
//! ```sh
//! scripts/bench -p logbus-comparison --bench async_queue_vs_peers
//! LOGBUS_BENCH_MSGS=2000000 LOGBUS_BENCH_REPS=9 scripts/bench -p logbus-comparison --bench async_queue_vs_peers
//! LOGBUS_BENCH_ONLY=async-spsc LOGBUS_BENCH_PEERS=flume scripts/bench -p logbus-comparison --bench async_queue_vs_peers
//! # must fail: the peer's producer loses a message
//! LOGBUS_BENCH_LOSE=theirs LOGBUS_BENCH_ONLY=async-spsc LOGBUS_BENCH_MSGS=20000 LOGBUS_BENCH_REPS=1 \
//!     cargo bench -p logbus-comparison --bench async_queue_vs_peers
//! ```

use std::future::Future;
use std::time::Instant;

use logbus_comparison::{env_usize as env, lost_value, print_row, Pairs, Side, Source, Tally};

const CAP: usize = 1024;
const BATCH: usize = 64;

/// One queue's async API.
trait Contender: 'static {
    const NAME: &'static str;
    const SIDE: Side = Side::Theirs;
    type S: Send + Sync + 'static;
    type R: Send + 'static;
    fn make(cap: usize) -> (Self::S, Self::R);
    fn clone_s(s: &Self::S) -> Self::S;
    /// `None` when the receiver cannot be cloned (tokio's `mpsc`).
    fn clone_r(r: &Self::R) -> Option<Self::R>;
    fn send(s: &Self::S, v: u64) -> impl Future<Output = ()> + Send;
    fn recv(r: &mut Self::R) -> impl Future<Output = Option<u64>> + Send;
}

struct Logbus;
impl Contender for Logbus {
    const NAME: &'static str = "logbus";
    const SIDE: Side = Side::Ours;
    type S = logbus::queue::Sender<u64>;
    type R = logbus::queue::Receiver<u64>;
    fn make(cap: usize) -> (Self::S, Self::R) {
        logbus::queue::bounded(cap)
    }
    fn clone_s(s: &Self::S) -> Self::S {
        s.clone()
    }
    fn clone_r(r: &Self::R) -> Option<Self::R> {
        Some(r.clone())
    }
    async fn send(s: &Self::S, v: u64) {
        s.send_async(v).await.unwrap()
    }
    async fn recv(r: &mut Self::R) -> Option<u64> {
        r.recv_async().await.ok()
    }
}

struct Tokio;
impl Contender for Tokio {
    const NAME: &'static str = "tokio mpsc";
    type S = tokio::sync::mpsc::Sender<u64>;
    type R = tokio::sync::mpsc::Receiver<u64>;
    fn make(cap: usize) -> (Self::S, Self::R) {
        tokio::sync::mpsc::channel(cap)
    }
    fn clone_s(s: &Self::S) -> Self::S {
        s.clone()
    }
    fn clone_r(_: &Self::R) -> Option<Self::R> {
        None
    }
    async fn send(s: &Self::S, v: u64) {
        s.send(v).await.unwrap()
    }
    async fn recv(r: &mut Self::R) -> Option<u64> {
        r.recv().await
    }
}

struct Flume;
impl Contender for Flume {
    const NAME: &'static str = "flume";
    type S = flume::Sender<u64>;
    type R = flume::Receiver<u64>;
    fn make(cap: usize) -> (Self::S, Self::R) {
        flume::bounded(cap)
    }
    fn clone_s(s: &Self::S) -> Self::S {
        s.clone()
    }
    fn clone_r(r: &Self::R) -> Option<Self::R> {
        Some(r.clone())
    }
    async fn send(s: &Self::S, v: u64) {
        s.send_async(v).await.unwrap()
    }
    async fn recv(r: &mut Self::R) -> Option<u64> {
        r.recv_async().await.ok()
    }
}

struct Kanal;
impl Contender for Kanal {
    const NAME: &'static str = "kanal";
    type S = kanal::AsyncSender<u64>;
    type R = kanal::AsyncReceiver<u64>;
    fn make(cap: usize) -> (Self::S, Self::R) {
        kanal::bounded_async(cap)
    }
    fn clone_s(s: &Self::S) -> Self::S {
        s.clone()
    }
    fn clone_r(r: &Self::R) -> Option<Self::R> {
        Some(r.clone())
    }
    async fn send(s: &Self::S, v: u64) {
        s.send(v).await.unwrap()
    }
    async fn recv(r: &mut Self::R) -> Option<u64> {
        r.recv().await.ok()
    }
}

struct AsyncChannel;
impl Contender for AsyncChannel {
    const NAME: &'static str = "async-channel";
    type S = async_channel::Sender<u64>;
    type R = async_channel::Receiver<u64>;
    fn make(cap: usize) -> (Self::S, Self::R) {
        async_channel::bounded(cap)
    }
    fn clone_s(s: &Self::S) -> Self::S {
        s.clone()
    }
    fn clone_r(r: &Self::R) -> Option<Self::R> {
        Some(r.clone())
    }
    async fn send(s: &Self::S, v: u64) {
        s.send(v).await.unwrap()
    }
    async fn recv(r: &mut Self::R) -> Option<u64> {
        r.recv().await.ok()
    }
}

/// The values producer `i` of `producers` sends out of `0..total` (side `side`: the lost
/// value, if any, is skipped by whichever producer owns it).
fn source(side: Side, i: u64, producers: u64, total: u64) -> Source {
    let per = total / producers;
    let range = i * per..if i + 1 == producers {
        total
    } else {
        (i + 1) * per
    };
    let lost = lost_value(side, total).filter(|v| range.contains(v));
    Source::new(range, lost)
}

/// `producers` × `consumers` tasks through one queue of `C`; messages per second.
fn run<C: Contender>(
    rt: &tokio::runtime::Runtime,
    row: &str,
    producers: u64,
    consumers: usize,
    total: u64,
) -> f64 {
    let (s, r) = C::make(CAP);
    let start = Instant::now();
    let tallies = rt.block_on(async {
        let mut sends = Vec::new();
        for i in 0..producers {
            let s = C::clone_s(&s);
            sends.push(tokio::spawn(async move {
                for v in source(C::SIDE, i, producers, total) {
                    C::send(&s, v).await;
                }
            }));
        }
        drop(s);
        let mut recvs = Vec::new();
        let mut receivers = vec![r];
        while receivers.len() < consumers {
            receivers.push(C::clone_r(&receivers[0]).expect("a cloneable receiver"));
        }
        for mut r in receivers {
            recvs.push(tokio::spawn(async move {
                let mut t = Tally::default();
                while let Some(v) = C::recv(&mut r).await {
                    t.add(v);
                }
                t
            }));
        }
        for s in sends {
            s.await.unwrap();
        }
        let mut tallies = Vec::new();
        for r in recvs {
            tallies.push(r.await.unwrap());
        }
        tallies
    });
    let secs = start.elapsed().as_secs_f64();
    let want = Tally::of(0..total);
    if consumers == 1 && producers == 1 {
        tallies[0].assert_in_order(C::SIDE, row, &want);
    } else {
        let got = tallies.into_iter().fold(Tally::default(), Tally::merge);
        got.assert_any_order(C::SIDE, row, &want);
    }
    total as f64 / secs
}

/// A chunk of up to `BATCH` values for the peers' batch row.
type Chunk = (usize, [u64; BATCH]);

/// One queue's async API moving chunks (the peers' side of `async-batch`).
trait ChunkContender: 'static {
    const NAME: &'static str;
    type S: Send + Sync + 'static;
    type R: Send + 'static;
    fn make(cap: usize) -> (Self::S, Self::R);
    fn send(s: &Self::S, c: Chunk) -> impl Future<Output = ()> + Send;
    fn recv(r: &mut Self::R) -> impl Future<Output = Option<Chunk>> + Send;
}

struct TokioChunks;
impl ChunkContender for TokioChunks {
    const NAME: &'static str = "tokio mpsc";
    type S = tokio::sync::mpsc::Sender<Chunk>;
    type R = tokio::sync::mpsc::Receiver<Chunk>;
    fn make(cap: usize) -> (Self::S, Self::R) {
        tokio::sync::mpsc::channel(cap)
    }
    async fn send(s: &Self::S, c: Chunk) {
        s.send(c).await.unwrap()
    }
    async fn recv(r: &mut Self::R) -> Option<Chunk> {
        r.recv().await
    }
}

struct FlumeChunks;
impl ChunkContender for FlumeChunks {
    const NAME: &'static str = "flume";
    type S = flume::Sender<Chunk>;
    type R = flume::Receiver<Chunk>;
    fn make(cap: usize) -> (Self::S, Self::R) {
        flume::bounded(cap)
    }
    async fn send(s: &Self::S, c: Chunk) {
        s.send_async(c).await.unwrap()
    }
    async fn recv(r: &mut Self::R) -> Option<Chunk> {
        r.recv_async().await.ok()
    }
}

struct KanalChunks;
impl ChunkContender for KanalChunks {
    const NAME: &'static str = "kanal";
    type S = kanal::AsyncSender<Chunk>;
    type R = kanal::AsyncReceiver<Chunk>;
    fn make(cap: usize) -> (Self::S, Self::R) {
        kanal::bounded_async(cap)
    }
    async fn send(s: &Self::S, c: Chunk) {
        s.send(c).await.unwrap()
    }
    async fn recv(r: &mut Self::R) -> Option<Chunk> {
        r.recv().await.ok()
    }
}

struct AsyncChannelChunks;
impl ChunkContender for AsyncChannelChunks {
    const NAME: &'static str = "async-channel";
    type S = async_channel::Sender<Chunk>;
    type R = async_channel::Receiver<Chunk>;
    fn make(cap: usize) -> (Self::S, Self::R) {
        async_channel::bounded(cap)
    }
    async fn send(s: &Self::S, c: Chunk) {
        s.send(c).await.unwrap()
    }
    async fn recv(r: &mut Self::R) -> Option<Chunk> {
        r.recv().await.ok()
    }
}

/// logbus's `async-batch`: batches of `BATCH` through `send_batch_async`/`recv_batch_async`.
fn run_logbus_batches(rt: &tokio::runtime::Runtime, row: &str, total: u64) -> f64 {
    let (s, r) = logbus::queue::bounded::<u64>(CAP);
    let start = Instant::now();
    let tally = rt.block_on(async {
        let send = tokio::spawn(async move {
            let mut src = Source::all(Side::Ours, total);
            let mut buf = [0u64; BATCH];
            let mut batch = Vec::with_capacity(BATCH);
            loop {
                let n = src.fill(&mut buf);
                if n == 0 {
                    break;
                }
                batch.extend_from_slice(&buf[..n]);
                s.send_batch_async(&mut batch).await.unwrap();
            }
        });
        let recv = tokio::spawn(async move {
            let mut t = Tally::default();
            let mut out = Vec::with_capacity(BATCH);
            while r.recv_batch_async(&mut out, BATCH).await.is_ok() {
                for v in out.drain(..) {
                    t.add(v);
                }
            }
            t
        });
        send.await.unwrap();
        recv.await.unwrap()
    });
    let secs = start.elapsed().as_secs_f64();
    tally.assert_in_order(Side::Ours, row, &Tally::of(0..total));
    total as f64 / secs
}

/// A peer's `async-batch`: chunks of `BATCH` through a channel of `CAP / BATCH` chunks.
fn run_chunks<C: ChunkContender>(rt: &tokio::runtime::Runtime, row: &str, total: u64) -> f64 {
    let (s, mut r) = C::make(CAP / BATCH);
    let start = Instant::now();
    let tally = rt.block_on(async {
        let send = tokio::spawn(async move {
            let mut src = Source::all(Side::Theirs, total);
            loop {
                let mut chunk = [0u64; BATCH];
                let n = src.fill(&mut chunk);
                if n == 0 {
                    break;
                }
                C::send(&s, (n, chunk)).await;
            }
        });
        let recv = tokio::spawn(async move {
            let mut t = Tally::default();
            while let Some((n, chunk)) = C::recv(&mut r).await {
                for &v in &chunk[..n] {
                    t.add(v);
                }
            }
            t
        });
        send.await.unwrap();
        recv.await.unwrap()
    });
    let secs = start.elapsed().as_secs_f64();
    tally.assert_in_order(Side::Theirs, row, &Tally::of(0..total));
    total as f64 / secs
}

type Run = Box<dyn Fn(&tokio::runtime::Runtime, &str) -> f64>;
/// A row: its name, logbus's run, and each peer's name and run.
type Row = (&'static str, Run, Vec<(&'static str, Run)>);

fn boxed(f: impl Fn(&tokio::runtime::Runtime, &str) -> f64 + 'static) -> Run {
    Box::new(f)
}

fn wanted(list: &str, name: &str) -> bool {
    list.is_empty() || list.split(',').any(|w| name.contains(w.trim()))
}

fn main() {
    let total = env("LOGBUS_BENCH_MSGS", 1_000_000) as u64;
    let reps = env("LOGBUS_BENCH_REPS", 7);
    let only = std::env::var("LOGBUS_BENCH_ONLY").unwrap_or_default();
    let peers = std::env::var("LOGBUS_BENCH_PEERS").unwrap_or_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    println!("async_queue_vs_peers: {total} messages, {reps} repetitions, capacity {CAP}, tokio multi-thread (2 workers)");

    let rows: Vec<Row> = vec![
        (
            "async-spsc",
            boxed(move |rt, row| run::<Logbus>(rt, row, 1, 1, total)),
            vec![
                (
                    Tokio::NAME,
                    boxed(move |rt, row| run::<Tokio>(rt, row, 1, 1, total)),
                ),
                (
                    Flume::NAME,
                    boxed(move |rt, row| run::<Flume>(rt, row, 1, 1, total)),
                ),
                (
                    Kanal::NAME,
                    boxed(move |rt, row| run::<Kanal>(rt, row, 1, 1, total)),
                ),
                (
                    AsyncChannel::NAME,
                    boxed(move |rt, row| run::<AsyncChannel>(rt, row, 1, 1, total)),
                ),
            ],
        ),
        (
            "async-mpmc2x2",
            boxed(move |rt, row| run::<Logbus>(rt, row, 2, 2, total)),
            vec![
                (
                    Flume::NAME,
                    boxed(move |rt, row| run::<Flume>(rt, row, 2, 2, total)),
                ),
                (
                    Kanal::NAME,
                    boxed(move |rt, row| run::<Kanal>(rt, row, 2, 2, total)),
                ),
                (
                    AsyncChannel::NAME,
                    boxed(move |rt, row| run::<AsyncChannel>(rt, row, 2, 2, total)),
                ),
            ],
        ),
        (
            "async-batch",
            boxed(move |rt, row| run_logbus_batches(rt, row, total)),
            vec![
                (
                    TokioChunks::NAME,
                    boxed(move |rt, row| run_chunks::<TokioChunks>(rt, row, total)),
                ),
                (
                    FlumeChunks::NAME,
                    boxed(move |rt, row| run_chunks::<FlumeChunks>(rt, row, total)),
                ),
                (
                    KanalChunks::NAME,
                    boxed(move |rt, row| run_chunks::<KanalChunks>(rt, row, total)),
                ),
                (
                    AsyncChannelChunks::NAME,
                    boxed(move |rt, row| run_chunks::<AsyncChannelChunks>(rt, row, total)),
                ),
            ],
        ),
    ];

    for (row, ours, theirs) in &rows {
        if !wanted(&only, row) {
            continue;
        }
        let theirs: Vec<_> = theirs.iter().filter(|(n, _)| wanted(&peers, n)).collect();
        let mut pairs: Vec<Pairs> = vec![Pairs::default(); theirs.len()];
        for _ in 0..reps {
            // One repetition: logbus once, then each peer once; each peer's pair is
            // (this repetition's logbus, that peer).
            let a = ours(&rt, row);
            for (k, (_, run)) in theirs.iter().enumerate() {
                pairs[k].push(a, run(&rt, row));
            }
        }
        for ((name, _), p) in theirs.iter().zip(&pairs) {
            println!(
                "{row:<14} logbus {:>7.2} M/s  {name:<14} {:>7.2} M/s  ratio {:.2} ({:.2}–{:.2})",
                p.ours_median() / 1e6,
                p.theirs_median() / 1e6,
                p.median_ratio(),
                p.ratio_range().0,
                p.ratio_range().1
            );
            print_row(row, name, p);
        }
    }
}
