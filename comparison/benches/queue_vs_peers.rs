//! logbus::queue against crossbeam-channel, kanal, flume and std's `sync_channel`, all
//! bounded with capacity 1024 and `u64` messages, interleaved in one run (A B A B …): each
//! repetition runs every contender once, and the figure quoted is the median over the
//! repetitions of the per-repetition ratio logbus / peer, with its spread.
//!
//! Rows (`LOGBUS_BENCH_ONLY` names them): `spsc`, `mpsc4`, `mpmc2x2` (producers →
//! consumers, one message per `send`/`recv` on every side: each peer's documented blocking
//! mode, crossbeam's `send`/`recv`, kanal's sync API, flume's `send`/`recv`, std's
//! `SyncSender::send`/`Receiver::recv`); `unbounded-spsc`, `unbounded-mpmc2x2` (logbus
//! `unbounded()` against crossbeam's list flavour); `select2` (two producers, one consumer
//! in `select!` over both queues, the same code on both sides); `batch` (SPSC moving batches
//! of 64: logbus `send_batch`/`recv_batch`, crossbeam-channel moving `[u64; 64]` chunks with
//! a length through a channel bounded at 16 chunks, i.e. 1024 records; eight times the
//! messages of the other rows); `pingpong` (round trips, p50/p99); `baseline` (the harness's
//! own cost).
//!
//! Checks, on both sides: producer i sends its own range of values; every consumer counts
//! and checksums what it got (`logbus_comparison::Tally`), and the run asserts the exact
//! count and checksum of every value sent: in order for one producer and one consumer, as a
//! sum of mixed values (order-independent) with several; ping-pong asserts each echo.
//! `LOGBUS_BENCH_LOSE=ours` (or `theirs`) makes that side's producers skip the middle value:
//! the run must then panic naming the row, the side, the counts and checksums. Readers end
//! when their queue disconnects, so a loss cannot hang a run. Each comparison prints a
//! `ROW|<row>|<peer>|<median ratio>|<min>|<max>` line for `scripts/bench-table`.
//!
//! ```sh
//! cargo bench -p logbus-comparison --bench queue_vs_peers
//! LOGBUS_BENCH_MSGS=4000000 LOGBUS_BENCH_REPS=9 LOGBUS_BENCH_PINGS=50000 cargo bench -p logbus-comparison --bench queue_vs_peers
//! # only some rows and peers (crossbeam, kanal, flume, std), e.g. for a quick A/B of two builds:
//! LOGBUS_BENCH_ONLY=batch,pingpong LOGBUS_BENCH_PEERS=crossbeam cargo bench -p logbus-comparison --bench queue_vs_peers
//! # must fail: the peer's producer loses a message
//! LOGBUS_BENCH_LOSE=theirs LOGBUS_BENCH_ONLY=spsc LOGBUS_BENCH_MSGS=20000 LOGBUS_BENCH_REPS=1 \
//!     cargo bench -p logbus-comparison --bench queue_vs_peers
//! ```

use logbus_comparison::{env_usize as env, median, print_row, Pairs, Side, Source, Tally};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Instant;

const CAP: usize = 1024;
const BATCH: usize = 64;

/// One queue implementation in its blocking mode.
trait Contender: 'static {
    const NAME: &'static str;
    /// Which side of the comparison it is (whose producers `LOGBUS_BENCH_LOSE` names).
    const SIDE: Side = Side::Theirs;
    type S: Send + 'static;
    type R: Send + 'static;
    fn make(cap: usize) -> (Self::S, Self::R);
    fn clone_s(s: &Self::S) -> Self::S;
    /// `None` when the receiver cannot be cloned (std).
    fn clone_r(r: &Self::R) -> Option<Self::R>;
    fn send(s: &Self::S, v: u64);
    fn recv(r: &Self::R) -> Option<u64>;
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
    fn send(s: &Self::S, v: u64) {
        s.send(v).unwrap()
    }
    fn recv(r: &Self::R) -> Option<u64> {
        r.recv().ok()
    }
}

struct Crossbeam;
impl Contender for Crossbeam {
    const NAME: &'static str = "crossbeam-channel";
    type S = crossbeam_channel::Sender<u64>;
    type R = crossbeam_channel::Receiver<u64>;
    fn make(cap: usize) -> (Self::S, Self::R) {
        crossbeam_channel::bounded(cap)
    }
    fn clone_s(s: &Self::S) -> Self::S {
        s.clone()
    }
    fn clone_r(r: &Self::R) -> Option<Self::R> {
        Some(r.clone())
    }
    fn send(s: &Self::S, v: u64) {
        s.send(v).unwrap()
    }
    fn recv(r: &Self::R) -> Option<u64> {
        r.recv().ok()
    }
}

/// `unbounded()` (the capacity argument is ignored), for the unbounded rows.
struct LogbusUnbounded;
impl Contender for LogbusUnbounded {
    const NAME: &'static str = "logbus unbounded";
    const SIDE: Side = Side::Ours;
    type S = logbus::queue::Sender<u64>;
    type R = logbus::queue::Receiver<u64>;
    fn make(_cap: usize) -> (Self::S, Self::R) {
        logbus::queue::unbounded()
    }
    fn clone_s(s: &Self::S) -> Self::S {
        s.clone()
    }
    fn clone_r(r: &Self::R) -> Option<Self::R> {
        Some(r.clone())
    }
    fn send(s: &Self::S, v: u64) {
        s.send(v).unwrap()
    }
    fn recv(r: &Self::R) -> Option<u64> {
        r.recv().ok()
    }
}

/// crossbeam-channel's `unbounded()` (list flavour).
struct CrossbeamUnbounded;
impl Contender for CrossbeamUnbounded {
    const NAME: &'static str = "crossbeam-channel unbounded";
    type S = crossbeam_channel::Sender<u64>;
    type R = crossbeam_channel::Receiver<u64>;
    fn make(_cap: usize) -> (Self::S, Self::R) {
        crossbeam_channel::unbounded()
    }
    fn clone_s(s: &Self::S) -> Self::S {
        s.clone()
    }
    fn clone_r(r: &Self::R) -> Option<Self::R> {
        Some(r.clone())
    }
    fn send(s: &Self::S, v: u64) {
        s.send(v).unwrap()
    }
    fn recv(r: &Self::R) -> Option<u64> {
        r.recv().ok()
    }
}

struct Kanal;
impl Contender for Kanal {
    const NAME: &'static str = "kanal";
    type S = kanal::Sender<u64>;
    type R = kanal::Receiver<u64>;
    fn make(cap: usize) -> (Self::S, Self::R) {
        kanal::bounded(cap)
    }
    fn clone_s(s: &Self::S) -> Self::S {
        s.clone()
    }
    fn clone_r(r: &Self::R) -> Option<Self::R> {
        Some(r.clone())
    }
    fn send(s: &Self::S, v: u64) {
        s.send(v).unwrap()
    }
    fn recv(r: &Self::R) -> Option<u64> {
        r.recv().ok()
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
    fn send(s: &Self::S, v: u64) {
        s.send(v).unwrap()
    }
    fn recv(r: &Self::R) -> Option<u64> {
        r.recv().ok()
    }
}

struct StdSync;
impl Contender for StdSync {
    const NAME: &'static str = "std sync_channel";
    type S = std::sync::mpsc::SyncSender<u64>;
    type R = std::sync::mpsc::Receiver<u64>;
    fn make(cap: usize) -> (Self::S, Self::R) {
        std::sync::mpsc::sync_channel(cap)
    }
    fn clone_s(s: &Self::S) -> Self::S {
        s.clone()
    }
    fn clone_r(_: &Self::R) -> Option<Self::R> {
        None
    }
    fn send(s: &Self::S, v: u64) {
        s.send(v).unwrap()
    }
    fn recv(r: &Self::R) -> Option<u64> {
        r.recv().ok()
    }
}

/// Messages per second with `p` producers and `c` consumers moving `total` messages;
/// `None` when the contender cannot have several consumers. Producer `i` sends its own
/// range of values; every consumer tallies what it got, and the tallies must add up to
/// every value sent (in order, with one producer and one consumer).
fn throughput<C: Contender>(row: &str, p: usize, c: usize, total: usize) -> Option<f64> {
    let (tx, rx) = C::make(CAP);
    let mut rxs = vec![rx];
    for _ in 1..c {
        rxs.push(C::clone_r(&rxs[0])?);
    }
    let per = (total / p) as u64;
    let sent = per * p as u64;
    let lost = logbus_comparison::lost_value(C::SIDE, sent);
    let start = Instant::now();
    let producers: Vec<_> = (0..p as u64)
        .map(|i| {
            let tx = C::clone_s(&tx);
            thread::spawn(move || {
                for v in Source::new(i * per..(i + 1) * per, lost) {
                    C::send(&tx, v);
                }
            })
        })
        .collect();
    drop(tx);
    let consumers: Vec<_> = rxs
        .into_iter()
        .map(|rx| {
            thread::spawn(move || {
                let mut tally = Tally::default();
                while let Some(v) = C::recv(&rx) {
                    tally.add(v);
                }
                tally
            })
        })
        .collect();
    for t in producers {
        t.join().unwrap();
    }
    let tallies: Vec<Tally> = consumers.into_iter().map(|t| t.join().unwrap()).collect();
    let secs = start.elapsed().as_secs_f64();
    let row = format!("{row} ({})", C::NAME);
    let want = Tally::of(0..sent);
    if tallies.len() == 1 && p == 1 {
        tallies[0].assert_in_order(C::SIDE, &row, &want);
    } else {
        let all = tallies.iter().fold(Tally::default(), |a, t| a.merge(*t));
        all.assert_any_order(C::SIDE, &row, &want);
    }
    Some(sent as f64 / secs)
}

/// logbus SPSC moving messages in batches of `BATCH` (`send_batch` / `recv_batch`).
fn logbus_batched(total: usize) -> f64 {
    let (tx, rx) = logbus::queue::bounded::<u64>(CAP);
    let total = total as u64;
    let mut src = Source::all(Side::Ours, total);
    let start = Instant::now();
    let producer = thread::spawn(move || {
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            batch.extend(src.by_ref().take(BATCH));
            if batch.is_empty() {
                break;
            }
            tx.send_batch(&mut batch).unwrap();
        }
    });
    let mut out = Vec::with_capacity(BATCH);
    let mut tally = Tally::default();
    while rx.recv_batch(&mut out, BATCH).is_ok() {
        for &v in &out {
            tally.add(v);
        }
        out.clear();
    }
    producer.join().unwrap();
    let secs = start.elapsed().as_secs_f64();
    tally.assert_in_order(Side::Ours, "spsc batch 64 (logbus)", &Tally::of(0..total));
    total as f64 / secs
}

/// crossbeam-channel SPSC moving the same batches as chunks: `[u64; 64]` (with a length)
/// per message, the bound counted in records (`CAP / BATCH` chunks).
fn crossbeam_chunks(total: usize) -> f64 {
    let (tx, rx) = crossbeam_channel::bounded::<(usize, [u64; BATCH])>(CAP / BATCH);
    let total = total as u64;
    let mut src = Source::all(Side::Theirs, total);
    let start = Instant::now();
    let producer = thread::spawn(move || loop {
        let mut chunk = [0u64; BATCH];
        let k = src.fill(&mut chunk);
        if k == 0 {
            break;
        }
        tx.send((k, chunk)).unwrap();
    });
    let mut tally = Tally::default();
    while let Ok((k, chunk)) = rx.recv() {
        for &v in &chunk[..k] {
            tally.add(v);
        }
    }
    producer.join().unwrap();
    let secs = start.elapsed().as_secs_f64();
    tally.assert_in_order(
        Side::Theirs,
        "spsc batch 64 (crossbeam-channel [u64; 64] chunks)",
        &Tally::of(0..total),
    );
    total as f64 / secs
}

/// Two producers, each sending `total / 2` messages into its own queue (bounded, `CAP`),
/// and one consumer taking them with `select!` over both queues until both disconnect.
/// The same code for logbus and crossbeam-channel: only the crate names differ.
macro_rules! select_two {
    ($name:ident, $side:expr, $bounded:path, $select:path) => {
        fn $name(total: usize) -> f64 {
            use $select as select;
            let (tx1, rx1) = $bounded(CAP);
            let (tx2, rx2) = $bounded(CAP);
            let half = (total / 2) as u64;
            let lost = logbus_comparison::lost_value($side, half * 2);
            let start = Instant::now();
            let producers: Vec<_> = [tx1, tx2]
                .into_iter()
                .enumerate()
                .map(|(i, tx)| {
                    let i = i as u64;
                    thread::spawn(move || {
                        for v in Source::new(i * half..(i + 1) * half, lost) {
                            tx.send(v).unwrap();
                        }
                    })
                })
                .collect();
            let (mut open1, mut open2) = (true, true);
            let mut tally = Tally::default();
            while open1 || open2 {
                if open1 && open2 {
                    select! {
                        recv(rx1) -> m => match m {
                            Ok(v) => tally.add(v),
                            Err(_) => open1 = false,
                        },
                        recv(rx2) -> m => match m {
                            Ok(v) => tally.add(v),
                            Err(_) => open2 = false,
                        },
                    }
                } else {
                    let rx = if open1 { &rx1 } else { &rx2 };
                    match rx.recv() {
                        Ok(v) => tally.add(v),
                        Err(_) => (open1, open2) = (false, false),
                    }
                }
            }
            for p in producers {
                p.join().unwrap();
            }
            let secs = start.elapsed().as_secs_f64();
            tally.assert_any_order(
                $side,
                concat!("select! over 2 queues (", stringify!($name), ")"),
                &Tally::of(0..half * 2),
            );
            (half * 2) as f64 / secs
        }
    };
}

select_two!(
    logbus_select,
    Side::Ours,
    logbus::queue::bounded,
    logbus::select
);
select_two!(
    crossbeam_select,
    Side::Theirs,
    crossbeam_channel::bounded,
    crossbeam_channel::select
);

/// Round-trip latencies (ns, sorted) of `pings` ping-pongs between two threads.
fn ping_pong<C: Contender>(pings: usize) -> Vec<u64> {
    let (ping_tx, ping_rx) = C::make(CAP);
    let (pong_tx, pong_rx) = C::make(CAP);
    let echo = thread::spawn(move || {
        while let Some(v) = C::recv(&ping_rx) {
            C::send(&pong_tx, v);
        }
    });
    let mut lat = Vec::with_capacity(pings);
    for i in 0..pings as u64 {
        let t = Instant::now();
        C::send(&ping_tx, i);
        let v = C::recv(&pong_rx).unwrap();
        lat.push(t.elapsed().as_nanos() as u64);
        assert_eq!(v, i);
    }
    drop(ping_tx);
    echo.join().unwrap();
    lat.sort_unstable();
    lat
}

fn pct(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Results of one workload: per repetition, each contender's figure.
#[derive(Default)]
struct Series {
    rows: Vec<(&'static str, Vec<f64>)>,
}

impl Series {
    fn push(&mut self, name: &'static str, v: f64) {
        match self.rows.iter_mut().find(|(n, _)| *n == name) {
            Some((_, vs)) => vs.push(v),
            None => self.rows.push((name, vec![v])),
        }
    }

    fn get(&self, name: &str) -> &[f64] {
        &self.rows.iter().find(|(n, _)| *n == name).unwrap().1
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: keep that quick.
    let benching = std::env::args().any(|a| a == "--bench");
    let total = env(
        "LOGBUS_BENCH_MSGS",
        if benching { 2_000_000 } else { 20_000 },
    );
    let reps = env("LOGBUS_BENCH_REPS", if benching { 7 } else { 1 });
    let pings = env("LOGBUS_BENCH_PINGS", if benching { 20_000 } else { 200 });
    let only = std::env::var("LOGBUS_BENCH_ONLY").unwrap_or_default();
    let run = |w: &str| only.is_empty() || only.split(',').any(|o| o == w);
    let peers = std::env::var("LOGBUS_BENCH_PEERS").unwrap_or_default();
    let peer = |p: &str| peers.is_empty() || peers.split(',').any(|o| o == p);
    println!(
        "queue_vs_peers: capacity {CAP}, u64, {total} messages per run (8× for the batch row), {pings} ping-pongs, {reps} interleaved repetitions"
    );

    let workloads: [(&str, usize, usize); 3] = [("spsc", 1, 1), ("mpsc4", 4, 1), ("mpmc2x2", 2, 2)];
    let mut table: Vec<(String, Series)> = Vec::new();
    for (name, p, c) in workloads {
        if !run(name) {
            continue;
        }
        let mut s = Series::default();
        for _ in 0..reps {
            s.push(
                Logbus::NAME,
                throughput::<Logbus>(name, p, c, total).unwrap(),
            );
            if peer("crossbeam") {
                s.push(
                    Crossbeam::NAME,
                    throughput::<Crossbeam>(name, p, c, total).unwrap(),
                );
            }
            if peer("kanal") {
                s.push(Kanal::NAME, throughput::<Kanal>(name, p, c, total).unwrap());
            }
            if peer("flume") {
                s.push(Flume::NAME, throughput::<Flume>(name, p, c, total).unwrap());
            }
            if peer("std") {
                if let Some(v) = throughput::<StdSync>(name, p, c, total) {
                    s.push(StdSync::NAME, v);
                }
            }
        }
        table.push((name.to_string(), s));
    }
    // Unbounded queues (linked blocks), logbus against crossbeam's list flavour.
    for (name, p, c) in [("unbounded-spsc", 1, 1), ("unbounded-mpmc2x2", 2, 2)] {
        if !run(name) {
            continue;
        }
        let mut s = Series::default();
        for _ in 0..reps {
            s.push(
                LogbusUnbounded::NAME,
                throughput::<LogbusUnbounded>(name, p, c, total).unwrap(),
            );
            if peer("crossbeam") {
                s.push(
                    CrossbeamUnbounded::NAME,
                    throughput::<CrossbeamUnbounded>(name, p, c, total).unwrap(),
                );
            }
        }
        table.push((name.to_string(), s));
    }
    if run("select2") {
        let mut s = Series::default();
        for _ in 0..reps {
            s.push("logbus select!", logbus_select(total));
            if peer("crossbeam") {
                s.push("crossbeam-channel select!", crossbeam_select(total));
            }
        }
        table.push(("select! over 2 queues".to_string(), s));
    }
    if run("batch") {
        // Eight times the messages of the other rows, for both contenders: a batched run is
        // that much shorter, and thread start-up would otherwise decide its figure.
        let batch_total = total * 8;
        let mut s = Series::default();
        for _ in 0..reps {
            s.push(
                "logbus send_batch/recv_batch 64",
                logbus_batched(batch_total),
            );
            if peer("crossbeam") {
                s.push(
                    "crossbeam-channel, [u64; 64] chunks",
                    crossbeam_chunks(batch_total),
                );
            }
        }
        table.push(("spsc batch64".to_string(), s));
    }

    println!();
    println!("| workload | contender | median Mmsg/s | median ratio logbus/contender (min–max) |");
    println!("|---|---|---|---|");
    for (name, s) in &table {
        let ours_name = s.rows[0].0;
        let ours = s.get(ours_name);
        println!("| {name} | {ours_name} | {:.1} | |", median(ours) / 1e6);
        for (peer, vs) in s.rows.iter().skip(1) {
            let pairs = Pairs {
                ours: ours.to_vec(),
                theirs: vs.to_vec(),
            };
            let (lo, hi) = pairs.ratio_range();
            println!(
                "| {name} | {peer} | {:.1} | {:.2}× ({lo:.2}–{hi:.2}) |",
                median(vs) / 1e6,
                pairs.median_ratio()
            );
            print_row(&format!("queue {name}"), peer, &pairs);
        }
    }

    if run("pingpong") {
        let mut p50: Series = Series::default();
        let mut p99: Series = Series::default();
        fn one<C: Contender>(pings: usize, p50: &mut Series, p99: &mut Series) {
            let lat = ping_pong::<C>(pings);
            p50.push(C::NAME, pct(&lat, 0.50) as f64);
            p99.push(C::NAME, pct(&lat, 0.99) as f64);
        }
        for _ in 0..reps {
            one::<Logbus>(pings, &mut p50, &mut p99);
            if peer("crossbeam") {
                one::<Crossbeam>(pings, &mut p50, &mut p99);
            }
            if peer("kanal") {
                one::<Kanal>(pings, &mut p50, &mut p99);
            }
            if peer("flume") {
                one::<Flume>(pings, &mut p50, &mut p99);
            }
            if peer("std") {
                one::<StdSync>(pings, &mut p50, &mut p99);
            }
        }
        println!();
        println!("| ping-pong round trip | p50 ns (median) | p99 ns (median) | median ratio p50 logbus/contender |");
        println!("|---|---|---|---|");
        let ours = p50.get(Logbus::NAME).to_vec();
        for (name, vs) in &p50.rows {
            let ratios: Vec<f64> = ours.iter().zip(vs).map(|(a, b)| a / b).collect();
            println!(
                "| {name} | {:.0} | {:.0} | {:.2} |",
                median(vs),
                median(p99.get(name)),
                median(&ratios)
            );
        }
    }
    // The harness's own cost: an uncontended Mutex<u64> increment per "message".
    if benching && run("baseline") {
        let m = Arc::new(Mutex::new(0u64));
        let start = Instant::now();
        for _ in 0..total {
            *m.lock().unwrap() += 1;
        }
        println!(
            "\nbaseline: uncontended std Mutex increment, {:.1} M/s on one thread",
            total as f64 / start.elapsed().as_secs_f64() / 1e6
        );
    }
}
