//! The main demo: one producer, three readers at their own pace.
//!
//! ```text
//! cargo run --release --example ring_fanout
//! ```
//!
//! The producer publishes `u64` entries into a ring that never blocks it
//! ([`LapPolicy::DropOldest`]) for about two seconds. Three readers follow it:
//!
//! - **fast** reads in batches and keeps up;
//! - **slowed** pauses regularly (its own pace, below the producer's), falls behind, and is
//!   told exactly how many entries it missed ([`ReadError::Lagged`]) each time the
//!   producer laps it;
//! - **late** joins after half a second at the oldest entry still in the ring.
//!
//! Then a second, shorter phase uses [`LapPolicy::Block`] with the slowed reader gating: the
//! producer now waits for it, so it never misses an entry. The fast reader there is not
//! gating: the producer does not wait for it either, so if the scheduler takes its core
//! away for a moment it may be lapped and is told so, like any non-gating reader.
//!
//! Each reader checks that what it reads plus what it was told it missed is exactly the span
//! it was attached for, and the table shows throughput and lag per reader.

use std::thread;
use std::time::{Duration, Instant};

use logbus::ring::{LapPolicy, ReadError, Reader, Ring, RingConfig, Start};

#[derive(Debug, Default)]
struct Report {
    name: &'static str,
    read: u64,
    missed: u64,
    lag_events: u64,
    first: Option<u64>,
    elapsed: Duration,
}

/// Reads until the ring closes; `work` runs per entry (the reader's own pace).
fn follow(name: &'static str, mut reader: Reader<u64>, work: fn(u64) -> u64) -> Report {
    let started = Instant::now();
    let mut report = Report {
        name,
        ..Report::default()
    };
    let mut expect = reader.position();
    let mut sink = 0u64;
    // Clones of up to 256 entries at a time; the reader's own work runs on them after the
    // read, never while it holds a slot (producers may be waiting to overwrite it).
    let mut batch = Vec::with_capacity(256);
    loop {
        batch.clear();
        match reader.read_batch(&mut batch, 256) {
            Ok(n) => {
                report.first.get_or_insert(expect);
                for (i, v) in batch.iter().enumerate() {
                    assert_eq!(*v, expect + i as u64, "entry value is its sequence");
                    sink = sink.wrapping_add(work(*v));
                }
                expect += n as u64;
                report.read += n as u64;
            }
            Err(ReadError::Lagged(n)) => {
                report.missed += n;
                report.lag_events += 1;
                expect += n;
            }
            Err(ReadError::Closed) => break,
            Err(e) => panic!("{name}: {e}"),
        }
        assert_eq!(
            reader.position(),
            expect,
            "{name}: read + missed covers the span"
        );
    }
    std::hint::black_box(sink);
    report.elapsed = started.elapsed();
    report
}

fn fast(v: u64) -> u64 {
    v
}

/// The slowed reader's pace: a 1 ms pause every 250 entries (at most ~250 k entries/s),
/// sleeping rather than burning a core, so the demo behaves on a 2-core machine.
fn slowed(v: u64) -> u64 {
    if v % 250 == 0 {
        thread::sleep(Duration::from_millis(1));
    }
    v
}

fn print(title: &str, published: u64, secs: f64, reports: &[Report]) {
    println!("\n{title}");
    println!(
        "producer: {published} entries in {secs:.2} s = {:.1} M entries/s",
        published as f64 / secs / 1e6
    );
    println!(
        "{:<8} {:>12} {:>12} {:>10} {:>12} {:>10}",
        "reader", "read", "missed", "lag events", "M entries/s", "joined at"
    );
    for r in reports {
        println!(
            "{:<8} {:>12} {:>12} {:>10} {:>12.1} {:>10}",
            r.name,
            r.read,
            r.missed,
            r.lag_events,
            r.read as f64 / r.elapsed.as_secs_f64() / 1e6,
            r.first.map_or("-".into(), |f| f.to_string())
        );
    }
}

fn main() -> Result<(), logbus::Error> {
    // Phase 1: overwrite mode, the producer never waits.
    let config = RingConfig::new(1 << 14).overflow(LapPolicy::DropOldest);
    let (mut producer, ring) = Ring::<u64>::single_producer(config)?;
    let fast_r = ring.reader(Start::Tail)?;
    let slow_r = ring.reader(Start::Tail)?;
    let mut handles = vec![
        thread::spawn(move || follow("fast", fast_r, fast)),
        thread::spawn(move || follow("slowed", slow_r, slowed)),
    ];
    let late_ring = ring.clone();
    handles.push(thread::spawn(move || {
        thread::sleep(Duration::from_millis(500));
        let late = late_ring.reader(Start::Oldest).expect("the ring is open");
        follow("late", late, fast)
    }));
    // Paced at about 2 M entries/s: a burst of 2000 entries written in place every
    // millisecond, sleeping in between (so the readers get the CPU on small machines).
    const BURST: usize = 2000;
    let started = Instant::now();
    let mut published = 0u64;
    let mut tick = started;
    while started.elapsed() < Duration::from_secs(2) {
        producer
            .publish_with(BURST, |seq| seq)
            .expect("the ring is open");
        published += BURST as u64;
        tick += Duration::from_millis(1);
        if let Some(wait) = tick.checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
    }
    let secs = started.elapsed().as_secs_f64();
    drop(producer); // closes the ring: readers drain, then see Closed
    let reports: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    print(
        "phase 1: LapPolicy::DropOldest (producer never waits; a reader it laps is told how many entries it missed; late joins at the oldest entry still there)",
        published,
        secs,
        &reports,
    );

    // Phase 2: the slowed reader gates; the producer waits for it, so it misses nothing. The
    // fast reader does not gate: nothing waits for it, and a lap behind it is told so.
    let (mut producer, ring) = Ring::<u64>::single_producer(RingConfig::new(4096))?;
    let gating = ring.gating_reader(Start::Tail)?;
    let fast_r = ring.reader(Start::Tail)?;
    let handles = [
        thread::spawn(move || follow("fast", fast_r, fast)),
        thread::spawn(move || follow("slowed", gating, slowed)),
    ];
    let started = Instant::now();
    let mut published = 0u64;
    let mut batch = Vec::with_capacity(64);
    while started.elapsed() < Duration::from_millis(700) {
        batch.extend(published..published + 64);
        producer.publish_batch(&mut batch).expect("open");
        published += 64;
    }
    let secs = started.elapsed().as_secs_f64();
    drop(producer);
    let reports: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(reports[1].missed, 0, "a gating reader never misses");
    assert_eq!(reports[1].read, published);
    print(
        "phase 2: LapPolicy::Block, slowed reader gating (producer waits for it: it misses nothing; fast does not gate)",
        published,
        secs,
        &reports,
    );
    Ok(())
}
