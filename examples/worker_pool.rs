//! A bounded job queue feeding a pool of worker threads.
//!
//! - **Backpressure:** the queue holds 8 jobs; a producer faster than the workers blocks in
//!   `send` until a worker takes a job (the example counts how often `try_send` found the
//!   queue full before falling back to the blocking `send`).
//! - **Clean shutdown:** dropping the last `Sender` disconnects the queue; each worker
//!   drains what is left and its `for job in &rx` loop ends; the main thread joins them all.
//!
//! ```sh
//! cargo run --release --example worker_pool
//! ```

use std::thread;
use std::time::{Duration, Instant};

use logbus::queue::{bounded, TrySendError};

struct Job {
    id: u32,
    work: Duration,
}

fn main() {
    const WORKERS: usize = 4;
    const JOBS: u32 = 200;
    let (jobs, queue) = bounded::<Job>(8);
    let (results, collected) = bounded::<(usize, u32)>(64);
    let start = Instant::now();

    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let queue = queue.clone();
            let results = results.clone();
            thread::spawn(move || {
                let mut done = 0;
                for job in &queue {
                    thread::sleep(job.work); // the "work"
                    results
                        .send((w, job.id))
                        .expect("the collector outlives the workers");
                    done += 1;
                }
                done
            })
        })
        .collect();
    drop(queue);
    drop(results);

    let collector = thread::spawn(move || {
        let mut per_worker = [0u32; WORKERS];
        let mut ids: Vec<u32> = Vec::new();
        for (w, id) in collected {
            per_worker[w] += 1;
            ids.push(id);
        }
        ids.sort_unstable();
        (per_worker, ids)
    });

    let mut full = 0;
    for id in 0..JOBS {
        let job = Job {
            id,
            work: Duration::from_micros(200 + u64::from(id % 7) * 100),
        };
        match jobs.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(job)) => {
                full += 1;
                jobs.send(job).expect("workers are running"); // blocks: backpressure
            }
            Err(TrySendError::Disconnected(_)) => unreachable!("workers hold the receivers"),
        }
    }
    println!(
        "producer: queued {JOBS} jobs; the queue (capacity {}) was full {full} times, so the producer waited",
        jobs.capacity().unwrap()
    );
    drop(jobs); // shutdown: workers drain what is queued, then stop

    let mut total = 0;
    for (w, h) in workers.into_iter().enumerate() {
        let done = h.join().unwrap();
        println!("worker {w}: {done} jobs, then saw the queue disconnected and stopped");
        total += done;
    }
    let (per_worker, ids) = collector.join().unwrap();
    assert_eq!(total, JOBS);
    assert_eq!(
        ids,
        (0..JOBS).collect::<Vec<_>>(),
        "every job ran exactly once"
    );
    println!(
        "all {JOBS} jobs ran exactly once ({per_worker:?} per worker) in {:.0?}; clean shutdown",
        start.elapsed()
    );
}
