//! A consumer group of worker threads sharing a partitioned topic: a member leaves
//! mid-stream, another joins, the group rebalances each time (the listeners print what
//! moves), and the lag table — what `kafka-consumer-groups --describe` shows — is printed
//! as it goes. Every order is processed; the group ends with no lag.
//!
//! ```sh
//! cargo run --example consumer_group
//! ```

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use logbus::group::{CooperativeStickyAssignor, RebalanceListener, TopicPartition};
use logbus::{Broker, Consumer, ConsumerConfig, OffsetReset, Record, TopicConfig};

const ORDERS: u64 = 60_000;

/// Prints every rebalance a worker sees.
struct Announce(String);

fn names(parts: &[TopicPartition]) -> String {
    let mut p: Vec<_> = parts.iter().map(|tp| tp.partition).collect();
    p.sort();
    format!("{p:?}")
}

impl RebalanceListener<String, u64> for Announce {
    fn on_partitions_revoked(&mut self, c: &mut Consumer<String, u64>, parts: &[TopicPartition]) {
        // Auto-commit has just committed what this worker read; nothing is read twice.
        println!(
            "  {:<9} revoked  {} (generation {})",
            self.0,
            names(parts),
            c.generation().unwrap_or(0)
        );
    }
    fn on_partitions_assigned(&mut self, c: &mut Consumer<String, u64>, parts: &[TopicPartition]) {
        if !parts.is_empty() {
            println!(
                "  {:<9} assigned {} (generation {})",
                self.0,
                names(parts),
                c.generation().unwrap_or(0)
            );
        }
    }
}

struct Worker {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    thread: thread::JoinHandle<()>,
}

fn worker(broker: &Broker, name: &str) -> logbus::Result<Worker> {
    let config = ConsumerConfig::new()
        .group_id("billing")
        .client_id(name)
        .auto_offset_reset(OffsetReset::Earliest)
        // Only the partitions that move stop; the others are read through the rebalance.
        .assignor(CooperativeStickyAssignor);
    let mut consumer = broker.consumer::<String, u64>(config)?;
    consumer.subscribe_with_listener(&["orders"], Announce(name.to_string()))?;
    let (stop, done) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let (s, d) = (stop.clone(), done.clone());
    let thread = thread::spawn(move || {
        while !s.load(Ordering::Relaxed) {
            // Auto-commit (on by default) commits at the start of the next poll what this
            // one returned, and on close.
            let records = consumer.poll(Duration::from_millis(20)).expect("poll");
            d.fetch_add(records.len() as u64, Ordering::Relaxed);
        }
        consumer.close(); // commits, revokes, leaves: the group rebalances
    });
    Ok(Worker { stop, done, thread })
}

fn wait_stable(broker: &Broker) {
    let stable = || {
        broker
            .describe_group("billing")
            .is_ok_and(|d| d.state == logbus::group::GroupState::Stable)
    };
    while !stable() {
        thread::sleep(Duration::from_millis(1));
    }
}

fn main() -> logbus::Result<()> {
    let broker = Broker::in_memory();
    broker.create_topic::<String, u64>("orders", TopicConfig::new(6))?;

    let producer = {
        let broker = broker.clone();
        thread::spawn(move || -> logbus::Result<()> {
            let p = broker.producer::<String, u64>();
            for i in 0..ORDERS {
                p.send(Record::new("orders", i).key(format!("customer-{}", i % 97)))?;
                if i % 2_000 == 0 {
                    thread::sleep(Duration::from_millis(10));
                }
            }
            Ok(())
        })
    };

    println!("three workers join");
    let mut workers: Vec<(String, Worker)> = Vec::new();
    for name in ["worker-1", "worker-2", "worker-3"] {
        workers.push((name.to_string(), worker(&broker, name)?));
    }
    wait_stable(&broker);
    thread::sleep(Duration::from_millis(50));
    println!("\n{}", broker.describe_group("billing")?);

    println!("worker-1 leaves mid-stream");
    let (_, w1) = workers.remove(0);
    w1.stop.store(true, Ordering::Relaxed);
    w1.thread.join().expect("worker-1");
    let w1_done = w1.done.load(Ordering::Relaxed);
    wait_stable(&broker);
    thread::sleep(Duration::from_millis(50));
    println!("\n{}", broker.describe_group("billing")?);

    println!("worker-4 joins");
    workers.push(("worker-4".to_string(), worker(&broker, "worker-4")?));
    wait_stable(&broker);

    producer.join().expect("producer")?;
    while broker.describe_group("billing")?.total_lag() > 0 {
        thread::sleep(Duration::from_millis(5));
    }
    let d = broker.describe_group("billing")?;
    println!("\nall {ORDERS} orders produced; the group caught up\n\n{d}");
    // Stop every worker first: each close rebalances and its listener prints, so the
    // table below comes after the last of those lines.
    println!("the workers stop");
    let mut done = Vec::new();
    for (name, w) in workers {
        w.stop.store(true, Ordering::Relaxed);
        w.thread.join().expect("worker");
        done.push((name, w.done.load(Ordering::Relaxed)));
    }
    println!("\nrecords processed: worker-1 {w1_done} (before it left)");
    let mut total = w1_done;
    for (name, n) in done {
        total += n;
        println!("                   {name} {n}");
    }
    println!("                   total {total} (at-least-once: >= {ORDERS})");
    assert!(total >= ORDERS);
    Ok(())
}
