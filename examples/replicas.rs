//! A topic with three replicas on three data directories, a producer with `acks = all`, a
//! directory failing mid-stream: the election and the ISR change are printed, and a
//! consumer sees every acknowledged record.
//!
//! ```sh
//! cargo run --example replicas
//! ```

use std::collections::BTreeSet;
use std::thread;
use std::time::Duration;

use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::producer::{Acks, ProducerConfig, Record};
use logbus::replica::EventKind;
use logbus::{Broker, TopicConfig, TopicPartition};

fn main() -> logbus::Result<()> {
    let broker = Broker::in_memory();
    let config = TopicConfig::new(1)
        .replication_factor(3)
        .min_insync_replicas(2)
        .records_in_memory(1 << 16);
    broker.create_topic::<(), u64>("payments", config)?;
    let show = |when: &str| -> logbus::Result<()> {
        let p = &broker.describe_topic("payments")?.replicas[0];
        println!(
            "{when}: leader {:?}, epoch {}, ISR {:?}, HW {}",
            p.leader, p.leader_epoch, p.isr, p.high_watermark
        );
        Ok(())
    };
    show("start")?;

    let producer = {
        let broker = broker.clone();
        thread::spawn(move || -> logbus::Result<Vec<u64>> {
            let config = ProducerConfig::new().acks(Acks::All);
            let p = broker.producer_with_config::<(), u64>(config)?;
            let mut acked = Vec::new();
            for v in 0..20_000u64 {
                p.send(Record::new("payments", v))?;
                acked.push(v);
            }
            Ok(acked)
        })
    };

    // Mid-stream, the leader's data directory fails.
    while broker.describe_topic("payments")?.replicas[0].high_watermark < 5_000 {
        thread::sleep(Duration::from_millis(1));
    }
    let faults = broker.faults();
    faults.fail_data_dir(0)?;
    println!("data directory 0 failed");
    for e in faults.events() {
        match e.kind {
            EventKind::LeaderElected {
                leader,
                epoch,
                unclean,
            } => {
                println!("  election: leader {leader:?}, epoch {epoch}, unclean {unclean}")
            }
            EventKind::IsrShrunk {
                replica,
                isr,
                reason,
            } => {
                println!("  ISR shrank: replica {replica} out ({reason}), ISR {isr:?}")
            }
            EventKind::Crashed { replica, lost_from } => {
                println!("  replica {replica} down, its log cut to {lost_from:?}")
            }
            _ => {}
        }
    }
    show("after the failure")?;

    let acked = producer.join().expect("the producer thread")?;
    show("producer done")?;

    let config = ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest);
    let mut consumer = broker.consumer::<(), u64>(config)?;
    consumer.assign(&[TopicPartition::new("payments", 0)])?;
    let mut seen = BTreeSet::new();
    while seen.len() < acked.len() {
        for r in consumer.poll(Duration::from_secs(5))?.iter() {
            seen.insert(r.value);
        }
    }
    let missing = acked.iter().filter(|v| !seen.contains(v)).count();
    println!(
        "consumer read {} records; acknowledged {}, missing {missing}",
        seen.len(),
        acked.len()
    );
    assert_eq!(missing, 0);

    faults.restore_data_dir(0)?;
    faults.wait_in_sync("payments", 0, Duration::from_secs(10))?;
    show("directory 0 restored and caught up")?;
    Ok(())
}
