//! `Producer::send_async` on replicated topics: records in flight without waiting, each
//! [`PendingSend`] reporting what `send` would have (offsets, refusals, a shrink after the
//! append, retries across a leader change), and `flush` waiting for the records in flight.

use std::sync::Arc;
use std::time::Duration;

use logbus::producer::{Acks, PendingSend, ProducerConfig, Record};
use logbus::replica::PartitionReplicas;
use logbus::{Broker, Error, ManualClock, TopicConfig};

const T: &str = "replicated";
const WAIT: Duration = Duration::from_secs(20);

fn broker() -> (Broker, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let broker = Broker::builder().clock(clock.clone()).build().unwrap();
    let config = TopicConfig::new(1)
        .replication_factor(3)
        .min_insync_replicas(2);
    broker.create_topic::<(), u64>(T, config).unwrap();
    (broker, clock)
}

fn producer(broker: &Broker, retries: u32) -> logbus::Producer<(), u64> {
    let config = ProducerConfig::new()
        .acks(Acks::All)
        .retries(retries)
        .delivery_timeout(Duration::from_secs(60))
        .request_timeout(Duration::from_secs(20));
    broker.producer_with_config(config).unwrap()
}

fn describe(broker: &Broker) -> PartitionReplicas {
    broker.describe_topic(T).unwrap().replicas[0].clone()
}

fn stall_followers(broker: &Broker, stalled: bool) {
    let faults = broker.faults();
    for r in [1, 2] {
        if stalled {
            faults.stall_replica(T, 0, r).unwrap();
        } else {
            faults.resume_replica(T, 0, r).unwrap();
        }
    }
}

/// With both followers stalled a blocking `send` under `acks = all` would wait; ten
/// `send_async` calls return with their records in the leader's log, and each delivery
/// reports its record's offset once the followers copy them.
#[test]
fn records_in_flight_are_appended_in_order_and_acknowledged_later() {
    let (broker, _) = broker();
    let p = producer(&broker, 0);
    stall_followers(&broker, true);
    let in_flight: Vec<PendingSend<(), u64>> =
        (0..10).map(|v| p.send_async(Record::new(T, v))).collect();
    let d = describe(&broker);
    assert_eq!((d.replicas[0].log_end, d.high_watermark), (10, 0), "{d:?}");
    stall_followers(&broker, false);
    for (v, delivery) in in_flight.into_iter().enumerate() {
        let meta = delivery.wait().unwrap();
        assert_eq!((meta.partition, meta.offset), (0, v as u64));
    }
    let d = describe(&broker);
    assert_eq!(d.high_watermark, 10);
    for r in &d.replicas {
        assert!(
            r.log_end >= 10,
            "acknowledged: on every in-sync replica: {d:?}"
        );
    }
    let logs = broker.topic::<(), u64>(T).unwrap().replica_logs(0).unwrap();
    for log in logs {
        let values: Vec<u64> = log.records.iter().map(|r| r.3).collect();
        assert_eq!(
            values,
            (0..10).collect::<Vec<_>>(),
            "replica {}",
            log.replica
        );
    }
}

/// The ISR shrinks to the leader while records are in flight: HW passes them with one
/// in-sync replica, below `min_insync_replicas`, so each delivery answers
/// `NotEnoughReplicasAfterAppend` (as `send` does) and hands its record back.
#[test]
fn a_shrink_while_in_flight_is_reported_on_each_delivery() {
    let (broker, clock) = broker();
    let p = producer(&broker, 0);
    stall_followers(&broker, true);
    let in_flight: Vec<_> = (0..3).map(|v| p.send_async(Record::new(T, v))).collect();
    clock.advance(Duration::from_secs(31));
    broker.faults().check_isr_now();
    assert_eq!(describe(&broker).isr, vec![0]);
    for (v, delivery) in in_flight.into_iter().enumerate() {
        let err = delivery.wait().unwrap_err();
        assert!(
            matches!(
                err.error(),
                Error::NotEnoughReplicasAfterAppend { isr: 1, min: 2, .. }
            ),
            "{err:?}"
        );
        assert_eq!(err.into_record().unwrap().value, v as u64);
    }
}

/// A send refused before its append (the ISR below the minimum, no retries left) reports
/// `NotEnoughReplicas` on its delivery, with its record; nothing reached the log.
#[test]
fn a_refused_send_reports_not_enough_replicas_on_its_delivery() {
    let (broker, clock) = broker();
    let p = producer(&broker, 0);
    stall_followers(&broker, true);
    // A record the followers lack, so the lag rule removes them.
    let first = p.send_async(Record::new(T, 0));
    clock.advance(Duration::from_secs(31));
    broker.faults().check_isr_now();
    let end = describe(&broker).replicas[0].log_end;
    let err = p.send_async(Record::new(T, 7)).wait().unwrap_err();
    assert!(
        matches!(err.error(), Error::NotEnoughReplicas { isr: 1, min: 2, .. }),
        "{err:?}"
    );
    assert_eq!(err.into_record().unwrap().value, 7);
    assert_eq!(describe(&broker).replicas[0].log_end, end);
    first.wait().unwrap_err();
}

/// Errors found before any append (an unknown topic) come on the delivery too.
#[test]
fn routing_errors_come_on_the_delivery() {
    let (broker, _) = broker();
    let p = producer(&broker, 0);
    let err = p.send_async(Record::new("nowhere", 3)).wait().unwrap_err();
    assert!(matches!(err.error(), Error::UnknownTopic { .. }), "{err:?}");
    assert_eq!(err.into_record().unwrap().value, 3);
}

/// The leader crashes with a record in flight (its followers stalled, so no one has it):
/// `wait` retries on the new leader and succeeds once the followers resume, and the
/// retry is counted as a possible duplicate.
#[test]
fn a_delivery_retries_across_a_leader_change() {
    let (broker, _) = broker();
    let p = producer(&broker, u32::MAX);
    for v in 0..5 {
        p.send(Record::new(T, v)).unwrap();
    }
    stall_followers(&broker, true);
    let delivery = p.send_async(Record::new(T, 5));
    assert_eq!(describe(&broker).replicas[0].log_end, 6);
    broker.faults().crash_replica(T, 0, 0).unwrap();
    stall_followers(&broker, false);
    let meta = delivery.wait().unwrap();
    assert_eq!(
        meta.offset, 5,
        "appended again on the new leader, at its log end"
    );
    let m = p.metrics();
    assert!(m.retries >= 1 && m.possible_duplicates >= 1, "{m:?}");
    assert!(describe(&broker).high_watermark >= 6);
}

/// `flush` returns only once the records in flight are acknowledged (the handles are not
/// waited on here).
#[test]
fn flush_waits_for_the_records_in_flight() {
    let (broker, _) = broker();
    let p = producer(&broker, 0);
    stall_followers(&broker, true);
    let in_flight: Vec<_> = (0..5).map(|v| p.send_async(Record::new(T, v))).collect();
    let (tx, rx) = std::sync::mpsc::channel();
    let flusher = {
        let (p, broker) = (p.clone(), broker.clone());
        std::thread::spawn(move || {
            // A clone shares no in-flight records: its flush has nothing to wait for.
            p.flush().unwrap();
            tx.send(describe(&broker).high_watermark).unwrap();
        })
    };
    flusher.join().unwrap();
    assert_eq!(rx.recv().unwrap(), 0);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            p.flush().unwrap();
            tx.send(describe(&broker).high_watermark).unwrap();
        });
        // Not before the followers copy the records.
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        stall_followers(&broker, false);
        assert_eq!(rx.recv_timeout(WAIT).unwrap(), 5);
    });
    for d in in_flight {
        d.wait().unwrap();
    }
}

/// On a topic with one replica (and under `acks = 1`) the send completes before
/// `send_async` returns.
#[test]
fn unreplicated_sends_complete_at_once() {
    let plain = Broker::in_memory();
    plain
        .create_topic::<(), u64>("plain", TopicConfig::new(1))
        .unwrap();
    let p = plain.producer::<(), u64>();
    let d = p.send_async(Record::new("plain", 1));
    assert_eq!(
        plain.describe_topic("plain").unwrap().partitions[0].high_watermark,
        1
    );
    assert_eq!(d.wait().unwrap().offset, 0);
    let (broker, _) = broker();
    let config = ProducerConfig::new().acks(Acks::Leader);
    let p = broker.producer_with_config::<(), u64>(config).unwrap();
    stall_followers(&broker, true);
    assert_eq!(p.send_async(Record::new(T, 1)).wait().unwrap().offset, 0);
}

/// A record acknowledged while its delivery was not waited on stays acknowledged: the
/// leader changing before `wait` does not turn it into a failure (nor a retry, nor a
/// duplicate).
#[test]
fn a_delivery_acknowledged_before_a_leader_change_reports_success() {
    let (broker, _) = broker();
    let p = producer(&broker, u32::MAX);
    let delivery = p.send_async(Record::new(T, 9));
    let faults = broker.faults();
    assert!(faults.wait_in_sync(T, 0, WAIT).unwrap());
    assert_eq!(describe(&broker).high_watermark, 1);
    faults.crash_replica(T, 0, 0).unwrap();
    assert_eq!(describe(&broker).leader_epoch, 1);
    assert_eq!(delivery.wait().unwrap().offset, 0);
    assert_eq!(p.metrics().retries, 0, "no retry");
    let d = describe(&broker);
    assert_eq!(d.replicas[1].log_end, 1, "no duplicate: {d:?}");
}

/// The same after an ISR shrink: acknowledged with two in-sync replicas, it is not
/// reported `NotEnoughReplicasAfterAppend` because the ISR shrank before `wait`.
#[test]
fn a_delivery_acknowledged_before_an_isr_shrink_reports_success() {
    let (broker, clock) = broker();
    let p = producer(&broker, 0);
    let delivery = p.send_async(Record::new(T, 9));
    let faults = broker.faults();
    assert!(faults.wait_in_sync(T, 0, WAIT).unwrap());
    stall_followers(&broker, true);
    let lagging = p.send_async(Record::new(T, 10));
    clock.advance(Duration::from_secs(31));
    faults.check_isr_now();
    assert_eq!(describe(&broker).isr, vec![0]);
    assert_eq!(delivery.wait().unwrap().offset, 0);
    assert!(matches!(
        lagging.wait().unwrap_err().error(),
        Error::NotEnoughReplicasAfterAppend { .. }
    ));
}

/// Records whose deliveries are dropped without a wait still reach every replica: a
/// pipelined send wakes no fetcher until a backlog builds (its own wait would copy the
/// records), so the fetchers' idle rounds must pick them up, and HW covers them.
#[test]
fn records_of_dropped_deliveries_are_replicated() {
    let (broker, _) = broker();
    let p = producer(&broker, 0);
    for v in 0..10 {
        drop(p.send_async(Record::new(T, v)));
    }
    assert!(broker.faults().wait_in_sync(T, 0, WAIT).unwrap());
    let d = describe(&broker);
    assert_eq!(d.high_watermark, 10, "{d:?}");
    assert!(d.replicas.iter().all(|r| r.log_end == 10), "{d:?}");
}
