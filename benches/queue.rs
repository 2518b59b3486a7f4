//! Criterion benches of `logbus::queue` for profiling (`perf record` on this binary): the
//! uncontended cost of one send + receive, batches, and SPSC across two threads. The
//! same-run comparisons with peers are in `queue_vs_peers.rs`.
//!
//! ```sh
//! cargo bench --bench queue
//! ```

use std::hint::black_box;
use std::thread;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use logbus::queue::bounded;

fn single_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("queue/single_thread");
    g.throughput(Throughput::Elements(1));
    let (tx, rx) = bounded::<u64>(1024);
    g.bench_function("send_recv", |b| {
        b.iter(|| {
            tx.send(black_box(1)).unwrap();
            black_box(rx.recv().unwrap());
        })
    });
    g.bench_function("try_send_try_recv", |b| {
        b.iter(|| {
            tx.try_send(black_box(1)).unwrap();
            black_box(rx.try_recv().unwrap());
        })
    });
    // The harness itself: the same loop on a plain Vec.
    let mut v = Vec::with_capacity(1);
    g.bench_function("baseline_vec_push_pop", |b| {
        b.iter(|| {
            v.push(black_box(1u64));
            black_box(v.pop());
        })
    });
    g.throughput(Throughput::Elements(64));
    let mut batch = Vec::with_capacity(64);
    let mut out = Vec::with_capacity(64);
    g.bench_function("batch64", |b| {
        b.iter_batched_ref(
            || (),
            |_| {
                batch.extend(0..64u64);
                tx.send_batch(&mut batch).unwrap();
                out.clear();
                rx.recv_batch(&mut out, 64).unwrap();
                black_box(&out);
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn spsc(c: &mut Criterion) {
    let mut g = c.benchmark_group("queue/spsc");
    const N: u64 = 100_000;
    g.throughput(Throughput::Elements(N));
    g.sample_size(20);
    g.bench_function("u64_cap1024", |b| {
        b.iter(|| {
            let (tx, rx) = bounded::<u64>(1024);
            let p = thread::spawn(move || {
                for i in 0..N {
                    tx.send(i).unwrap();
                }
            });
            let mut sum = 0;
            for v in &rx {
                sum += v;
            }
            p.join().unwrap();
            black_box(sum)
        })
    });
    g.finish();
}

criterion_group!(benches, single_thread, spsc);
criterion_main!(benches);
