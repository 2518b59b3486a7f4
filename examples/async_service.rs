//! An async service on tokio: producer tasks send orders to a partitioned topic
//! (`send_async(..).await`), a consumer group of tasks bills them (`poll_async`, a commit
//! after each batch), and shutdown is graceful: once every order is committed (the group's
//! lag is zero) a signal through a `watch` channel stops the members, which leave the
//! group. No thread blocks in logbus: every wait is a parked task.
//!
//! ```sh
//! cargo run --example async_service
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use logbus::{Broker, Consumer, ConsumerConfig, OffsetReset, Record, TopicConfig};
use tokio::sync::watch;

const PRODUCERS: u64 = 2;
const ORDERS_EACH: u64 = 20_000;
const MEMBERS: usize = 3;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), logbus::Error> {
    let broker = Broker::in_memory();
    broker.create_topic::<String, u64>("orders", TopicConfig::new(4))?;
    let (shutdown, stopped) = watch::channel(false);
    let billed = Arc::new(AtomicU64::new(0));
    let cents = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));

    let mut members = Vec::new();
    for m in 0..MEMBERS {
        let mut consumer = broker.consumer::<String, u64>(
            ConsumerConfig::new()
                .group_id("billing")
                .client_id(format!("biller-{m}"))
                .auto_offset_reset(OffsetReset::Earliest),
        )?;
        consumer.subscribe(&["orders"])?;
        let (mut stopped, billed, cents, refused) = (
            stopped.clone(),
            billed.clone(),
            cents.clone(),
            refused.clone(),
        );
        members.push(tokio::spawn(async move {
            let mut mine = 0u64;
            loop {
                // `poll_async` is cancel safe: if the shutdown wins, no record is lost.
                let records = tokio::select! {
                    _ = stopped.changed() => break,
                    records = consumer.poll_async() => records?,
                };
                for order in &records {
                    cents.fetch_add(order.value, Ordering::Relaxed);
                }
                mine += records.len() as u64;
                billed.fetch_add(records.len() as u64, Ordering::Relaxed);
                // At least once: what was billed is committed before the next batch.
                commit(&mut consumer, &refused)?;
            }
            commit(&mut consumer, &refused)?;
            println!("biller-{m}: billed {mine} orders, leaving the group");
            Ok::<u64, logbus::Error>(mine)
        }));
    }

    let mut producers = Vec::new();
    for p in 0..PRODUCERS {
        let producer = broker.producer::<String, u64>();
        producers.push(tokio::spawn(async move {
            for i in 0..ORDERS_EACH {
                let customer = format!("customer-{}", (p * ORDERS_EACH + i) % 97);
                producer
                    .send_async(Record::new("orders", 100 + i % 900).key(customer))
                    .await?;
            }
            Ok::<(), logbus::Error>(())
        }));
    }
    for p in producers {
        p.await.expect("producer task")?;
    }
    println!("sent {} orders", PRODUCERS * ORDERS_EACH);

    // Graceful shutdown: wait until the group has committed everything, then signal.
    loop {
        let lag = broker.describe_group("billing")?.total_lag();
        if lag == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    shutdown.send(true).expect("members listen");
    let mut total = 0;
    for m in members {
        total += m.await.expect("member task")?;
    }
    // At least once: a batch whose commit a rebalance refused is billed again by the new
    // owner of its partition (none in most runs).
    let orders = PRODUCERS * ORDERS_EACH;
    assert!(total >= orders);
    assert_eq!(billed.load(Ordering::Relaxed), total);
    println!(
        "billed {total} orders ({} redelivered by a rebalance, {} commits refused), {} cents; \
         all committed",
        total - orders,
        refused.load(Ordering::Relaxed),
        cents.load(Ordering::Relaxed)
    );
    Ok(())
}

/// Commits what the member billed. A member too slow for its session (a busy machine) is
/// taken out of the group and its partitions go to the others: its commit is refused
/// (`StaleGeneration`), and the new owner bills those records again, from the group's
/// last commit. At least once: repeated, never lost; the member rejoins at its next poll.
fn commit(consumer: &mut Consumer<String, u64>, refused: &AtomicU64) -> logbus::Result<()> {
    match consumer.commit_sync() {
        Err(logbus::Error::StaleGeneration { .. }) => {
            refused.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        other => other,
    }
}
