//! A topic with three replicas on three data directories, a producer with `acks = all`, a
//! directory failing mid-stream: the election and the ISR change are printed, and a
//! consumer sees every acknowledged record. Each replica is a log in Kafka's format in
//! `<dir>/payments-0/`, with its `leader-epoch-checkpoint`; the broker is then closed and
//! reopened, and every replica recovers.
//!
//! ```sh
//! cargo run --example replicas
//! ```

use std::collections::BTreeSet;
use std::thread;
use std::time::Duration;

use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::persist::PersistConfig;
use logbus::producer::{Acks, ProducerConfig, Record};
use logbus::replica::EventKind;
use logbus::{Broker, TopicConfig, TopicPartition};

fn describe(broker: &Broker, when: &str) -> logbus::Result<()> {
    let p = &broker.describe_topic("payments")?.replicas[0];
    println!(
        "{when}: leader {:?}, epoch {}, ISR {:?}, HW {}",
        p.leader, p.leader_epoch, p.isr, p.high_watermark
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp: Vec<_> = (0..3)
        .map(|_| tempfile::tempdir())
        .collect::<Result<_, _>>()?;
    let dirs: Vec<_> = tmp.iter().map(|t| t.path().to_path_buf()).collect();
    let broker = Broker::builder().data_dirs(&dirs).create(true).open()?;
    let config = TopicConfig::new(1)
        .replication_factor(3)
        .min_insync_replicas(2)
        .records_in_memory(1 << 12);
    broker.create_topic::<(), u64>("payments", config.persist(PersistConfig::new()))?;
    let show = |when: &str| describe(&broker, when);
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
            EventKind::Crashed { replica, .. } => println!("  replica {replica} offline"),
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
        let records = consumer.poll(Duration::from_secs(5))?;
        if records.is_empty() {
            break;
        }
        for r in records.iter() {
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
    for (i, dir) in dirs.iter().enumerate() {
        let epochs = std::fs::read_to_string(dir.join("payments-0/leader-epoch-checkpoint"))?;
        println!(
            "directory {i}: leader-epoch-checkpoint {:?}",
            epochs.lines().collect::<Vec<_>>()
        );
    }
    drop(consumer);
    broker.close()?;

    let broker = Broker::builder().data_dirs(&dirs).open()?;
    broker.topic::<(), u64>("payments")?;
    broker
        .faults()
        .wait_in_sync("payments", 0, Duration::from_secs(10))?;
    describe(&broker, "reopened")?;
    for r in &broker.describe_topic("payments")?.replicas[0].replicas {
        println!(
            "  replica {}: log end {}, epochs {:?}",
            r.id, r.log_end, r.epochs
        );
    }
    broker.close()?;
    Ok(())
}
