//! Replicated topics: acks, ISR, HW, elections, truncation by leader epoch, the fault API,
//! and the failure scenarios of Kafka's replication (Jepsen 2013, KIP-101, KIP-279).

use std::sync::Arc;
use std::time::Duration;

use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::producer::{Acks, ProducerConfig, Record};
use logbus::replica::{EventKind, PartitionReplicas};
use logbus::{Broker, Error, ManualClock, TopicConfig, TopicPartition};

const T: &str = "replicated";
const WAIT: Duration = Duration::from_secs(20);

fn broker() -> (Broker, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let broker = Broker::builder().clock(clock.clone()).build().unwrap();
    (broker, clock)
}

fn topic(broker: &Broker, min_isr: u32, unclean: bool) {
    let config = TopicConfig::new(1)
        .replication_factor(3)
        .min_insync_replicas(min_isr)
        .unclean_leader_election(unclean);
    broker.create_topic::<(), u64>(T, config).unwrap();
}

fn producer(broker: &Broker, acks: Acks) -> logbus::Producer<(), u64> {
    let config = ProducerConfig::new()
        .acks(acks)
        .retries(0)
        .request_timeout(Duration::from_secs(20));
    broker.producer_with_config(config).unwrap()
}

fn describe(broker: &Broker) -> PartitionReplicas {
    broker.describe_topic(T).unwrap().replicas[0].clone()
}

/// Every record a consumer reads from the start, until `end`.
fn read_all(broker: &Broker, end: u64) -> Vec<(u64, u64)> {
    let config = ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest);
    let mut c = broker.consumer::<(), u64>(config).unwrap();
    c.assign(&[TopicPartition::new(T, 0)]).unwrap();
    c.seek_to_beginning(&[TopicPartition::new(T, 0)]).unwrap();
    let mut out = Vec::new();
    while c.position(&TopicPartition::new(T, 0)).unwrap() < end {
        let batch = c.poll(WAIT).unwrap();
        assert!(!batch.is_empty(), "nothing read before {end}: {out:?}");
        out.extend(batch.iter().map(|r| (r.offset, r.value)));
    }
    out
}

/// Values of every replica's log, by replica id.
fn logs(broker: &Broker) -> Vec<(u32, Vec<(u64, u64)>)> {
    let topic = broker.topic::<(), u64>(T).unwrap();
    topic
        .replica_logs(0)
        .unwrap()
        .into_iter()
        .map(|l| (l.replica, l.records.iter().map(|r| (r.0, r.3)).collect()))
        .collect()
}

fn send_all(p: &logbus::Producer<(), u64>, values: std::ops::Range<u64>) -> Vec<u64> {
    values
        .map(|v| p.send(Record::new(T, v)).unwrap().offset)
        .collect()
}

#[test]
fn acks_all_returns_once_every_isr_replica_has_the_record() {
    let (broker, _) = broker();
    topic(&broker, 2, false);
    let p = producer(&broker, Acks::All);
    let offsets = send_all(&p, 0..50);
    assert_eq!(offsets, (0..50).collect::<Vec<_>>());
    let d = describe(&broker);
    assert_eq!(
        (d.leader, d.leader_epoch, d.isr.clone()),
        (Some(0), 0, vec![0, 1, 2])
    );
    assert_eq!(d.high_watermark, 50);
    // Acknowledged under acks = all: on every in-sync replica.
    for r in &d.replicas {
        assert!(r.log_end >= 50, "{d:?}");
    }
    assert_eq!(read_all(&broker, 50).len(), 50);
}

#[test]
fn replicas_are_placed_on_different_directories_and_rotate_by_partition() {
    let (broker, _) = broker();
    let config = TopicConfig::new(3).replication_factor(3);
    broker.create_topic::<(), u64>(T, config).unwrap();
    let d = broker.describe_topic(T).unwrap();
    let ids: Vec<Vec<u32>> = d
        .replicas
        .iter()
        .map(|p| p.replicas.iter().map(|r| r.id).collect())
        .collect();
    assert_eq!(ids, vec![vec![0, 1, 2], vec![1, 2, 0], vec![2, 0, 1]]);
    let leaders: Vec<_> = d.replicas.iter().map(|p| p.leader).collect();
    assert_eq!(leaders, vec![Some(0), Some(1), Some(2)]);
}

#[test]
fn a_stalled_follower_leaves_the_isr_after_the_lag_time_on_the_broker_clock() {
    let (broker, clock) = broker();
    topic(&broker, 1, false);
    let faults = broker.faults();
    let p = producer(&broker, Acks::Leader);
    send_all(&p, 0..5);
    assert!(faults.wait_in_sync(T, 0, WAIT).unwrap());
    faults.stall_replica(T, 0, 2).unwrap();
    send_all(&p, 5..10);
    // Replica 1 copies them (before the clock jumps: a follower behind at the check and
    // last caught up more than the lag time ago is out, whatever the reason).
    while describe(&broker).replicas[1].log_end < 10 {
        std::thread::yield_now();
    }
    // Behind, but not for long enough on the broker's clock.
    clock.advance(Duration::from_secs(29));
    faults.check_isr_now();
    assert_eq!(describe(&broker).isr, vec![0, 1, 2]);
    clock.advance(Duration::from_secs(2));
    faults.check_isr_now();
    // Replica 1 keeps up, so it stays.
    let d = describe(&broker);
    assert!(!d.isr.contains(&2), "{d:?}");
    let events = faults.events();
    assert!(
        events.iter().any(|e| e.kind
            == EventKind::IsrShrunk {
                replica: 2,
                isr: vec![0, 1],
                reason: "lagging"
            }),
        "{events:?}"
    );
    // Resumed, it catches up and rejoins.
    faults.resume_replica(T, 0, 2).unwrap();
    assert!(faults.wait_in_sync(T, 0, WAIT).unwrap());
    assert_eq!(describe(&broker).isr, vec![0, 1, 2]);
    assert!(faults
        .events()
        .iter()
        .any(|e| matches!(e.kind, EventKind::IsrExpanded { replica: 2, .. })));
}

/// A follower that is caught up is never out of sync, however long it was idle.
#[test]
fn an_idle_caught_up_follower_stays_in_sync() {
    let (broker, clock) = broker();
    topic(&broker, 2, false);
    let faults = broker.faults();
    let p = producer(&broker, Acks::All);
    send_all(&p, 0..3);
    faults.stall_replica(T, 0, 1).unwrap();
    clock.advance(Duration::from_secs(3600));
    faults.check_isr_now();
    assert_eq!(describe(&broker).isr, vec![0, 1, 2]);
}

/// Jepsen 2013's case, as Kafka answers it today: the ISR shrinks to the leader, then the
/// leader dies. With `min_insync_replicas = 2` writes are refused once the ISR is the
/// leader alone, and with unclean election off no other replica may lead: nothing
/// acknowledged is lost (the partition waits for the leader to return).
#[test]
fn isr_shrinks_to_the_leader_then_it_dies_min_isr_2_unclean_off_loses_nothing() {
    let (broker, clock) = broker();
    topic(&broker, 2, false);
    let faults = broker.faults();
    let p = producer(&broker, Acks::All);
    let acked = send_all(&p, 0..20);
    faults.stall_replica(T, 0, 1).unwrap();
    faults.stall_replica(T, 0, 2).unwrap();
    // An acks = all send now waits: the followers do not copy it.
    let waiting = {
        let p = p.clone();
        std::thread::spawn(move || p.send(Record::new(T, 20)))
    };
    // Wait until the record is on the leader, then let the lag time pass.
    while describe(&broker).replicas[0].log_end < 21 {
        std::thread::yield_now();
    }
    clock.advance(Duration::from_secs(31));
    faults.check_isr_now();
    assert_eq!(describe(&broker).isr, vec![0]);
    // The ISR shrank under the waiting send: appended, but not acknowledged.
    let err = waiting.join().unwrap().unwrap_err();
    assert!(
        matches!(
            err.error(),
            Error::NotEnoughReplicasAfterAppend { isr: 1, min: 2, .. }
        ),
        "{err:?}"
    );
    // And new writes are refused before they are appended.
    let err = p.send(Record::new(T, 21)).unwrap_err();
    assert!(
        matches!(err.error(), Error::NotEnoughReplicas { isr: 1, min: 2, .. }),
        "{err:?}"
    );
    assert_eq!(
        err.into_record().expect("the record is handed back").value,
        21,
        "the refused record is handed back"
    );
    assert_eq!(describe(&broker).replicas[0].log_end, 21);

    faults.crash_replica(T, 0, 0).unwrap();
    let d = describe(&broker);
    assert_eq!(
        (d.leader, d.isr.clone()),
        (None, vec![0]),
        "unclean off: no leader"
    );
    let err = p.send(Record::new(T, 22)).unwrap_err();
    assert!(
        matches!(err.error(), Error::LeaderNotAvailable { .. }),
        "{err:?}"
    );
    // The stalled replicas come back: still no leader, as they are out of sync.
    faults.resume_replica(T, 0, 1).unwrap();
    faults.resume_replica(T, 0, 2).unwrap();
    assert_eq!(describe(&broker).leader, None);
    // The leader returns and leads again in a new epoch, with everything it had.
    faults.restart_replica(T, 0, 0).unwrap();
    let d = describe(&broker);
    assert_eq!((d.leader, d.leader_epoch), (Some(0), 1));
    assert!(faults.wait_in_sync(T, 0, WAIT).unwrap());
    let read = read_all(&broker, 21);
    for (i, offset) in acked.iter().enumerate() {
        assert_eq!(read[*offset as usize], (*offset, i as u64));
    }
    assert!(!faults
        .events()
        .iter()
        .any(|e| matches!(e.kind, EventKind::RecordsLost { .. })));
}

/// The same failure with `min_insync_replicas = 1` (Jepsen 2013's setting) and unclean
/// election on: the leader alone acknowledges, dies, and an out-of-sync replica takes over
/// without those records. The loss happens, and the events say exactly which offsets.
#[test]
fn unclean_election_loses_acknowledged_records_and_reports_them() {
    let (broker, clock) = broker();
    topic(&broker, 1, true);
    let faults = broker.faults();
    let p = producer(&broker, Acks::All);
    send_all(&p, 0..10);
    assert!(faults.wait_in_sync(T, 0, WAIT).unwrap());
    faults.stall_replica(T, 0, 1).unwrap();
    faults.stall_replica(T, 0, 2).unwrap();
    // The followers don't copy these: the sends wait until the ISR shrinks to the
    // leader, which min 1 allows, and are then acknowledged by the leader alone.
    let waiting = {
        let p = p.clone();
        std::thread::spawn(move || send_all(&p, 10..15))
    };
    while describe(&broker).replicas[0].log_end < 11 {
        std::thread::yield_now();
    }
    clock.advance(Duration::from_secs(31));
    faults.check_isr_now();
    assert_eq!(waiting.join().unwrap(), (10..15).collect::<Vec<_>>());
    assert_eq!(describe(&broker).high_watermark, 15);

    faults.crash_replica(T, 0, 0).unwrap();
    let d = describe(&broker);
    assert_eq!(
        (d.leader, d.leader_epoch, d.isr.clone()),
        (Some(1), 1, vec![1])
    );
    let events = faults.events();
    assert!(events.iter().any(|e| e.kind
        == EventKind::LeaderElected {
            leader: Some(1),
            epoch: 1,
            unclean: true
        }));
    assert!(
        events
            .iter()
            .any(|e| e.kind == EventKind::RecordsLost { from: 10, to: 15 }),
        "{events:?}"
    );
    assert_eq!(d.high_watermark, 10);
    // The partition goes on from offset 10 with other records.
    assert_eq!(p.send(Record::new(T, 100)).unwrap().offset, 10);
}

/// Without unclean election (min ISR 1): the same crash leaves the partition leaderless
/// instead, and the acknowledged records come back with the leader.
#[test]
fn clean_only_election_waits_for_the_last_in_sync_replica() {
    let (broker, clock) = broker();
    topic(&broker, 1, false);
    let faults = broker.faults();
    let p = producer(&broker, Acks::All);
    send_all(&p, 0..10);
    faults.stall_replica(T, 0, 1).unwrap();
    faults.stall_replica(T, 0, 2).unwrap();
    let waiting = {
        let p = p.clone();
        std::thread::spawn(move || send_all(&p, 10..15))
    };
    while describe(&broker).replicas[0].log_end < 11 {
        std::thread::yield_now();
    }
    clock.advance(Duration::from_secs(31));
    faults.check_isr_now();
    assert_eq!(waiting.join().unwrap(), (10..15).collect::<Vec<_>>());
    faults.crash_replica(T, 0, 0).unwrap();
    assert_eq!(describe(&broker).leader, None);
    faults.restart_replica(T, 0, 0).unwrap();
    assert_eq!(describe(&broker).leader, Some(0));
    let read = read_all(&broker, 15);
    assert_eq!(read, (0..15).map(|v| (v, v)).collect::<Vec<_>>());
}

/// Under `acks = 1` a leader crash loses exactly the records no follower copied yet:
/// acknowledged to the producer, gone from the partition, cut from the old leader when it
/// returns.
#[test]
fn acks_1_leader_crash_loses_exactly_the_uncopied_records() {
    let (broker, _) = broker();
    topic(&broker, 1, false);
    let faults = broker.faults();
    let p = producer(&broker, Acks::Leader);
    send_all(&p, 0..10);
    assert!(faults.wait_in_sync(T, 0, WAIT).unwrap());
    faults.stall_replica(T, 0, 1).unwrap();
    faults.stall_replica(T, 0, 2).unwrap();
    let uncopied = send_all(&p, 10..15);
    assert_eq!(uncopied, vec![10, 11, 12, 13, 14]);
    assert_eq!(describe(&broker).high_watermark, 10);

    faults.crash_replica(T, 0, 0).unwrap();
    let d = describe(&broker);
    assert_eq!((d.leader, d.leader_epoch), (Some(1), 1));
    // The new leader has offsets 0..10; the five acknowledged records are gone.
    let new_leader = logs(&broker).into_iter().find(|l| l.0 == 1).unwrap().1;
    assert_eq!(new_leader, (0..10).map(|v| (v, v)).collect::<Vec<_>>());
    let next = p.send(Record::new(T, 99)).unwrap();
    assert_eq!(next.offset, 10, "offset 10 now holds another record");

    faults.resume_replica(T, 0, 2).unwrap();
    faults.restart_replica(T, 0, 0).unwrap();
    assert!(faults.wait_in_sync(T, 0, WAIT).unwrap());
    // The old leader cut exactly the five records by leader epoch.
    let events = faults.events();
    assert!(
        events.iter().any(|e| e.kind
            == EventKind::Truncated {
                replica: 0,
                from: 15,
                to: 10
            }),
        "{events:?}"
    );
    let expected: Vec<_> = (0..10).map(|v| (v, v)).chain([(10, 99)]).collect();
    for (id, log) in logs(&broker) {
        assert_eq!(log, expected, "replica {id}");
    }
}

/// KIP-279's case: two leaders crash back to back, each holding records the next leader
/// never got. Truncating by leader epoch (iterated) leaves every replica with the same
/// records at the same offsets.
#[test]
fn back_to_back_leader_crashes_leave_replicas_identical() {
    let (broker, _) = broker();
    topic(&broker, 1, false);
    let faults = broker.faults();
    let p = producer(&broker, Acks::Leader);
    send_all(&p, 0..1); // r0 on every replica
    assert!(faults.wait_in_sync(T, 0, WAIT).unwrap());
    faults.stall_replica(T, 0, 1).unwrap();
    faults.stall_replica(T, 0, 2).unwrap();
    send_all(&p, 1..3); // epoch 0, on replica 0 only
    faults.crash_replica(T, 0, 0).unwrap();
    assert_eq!(describe(&broker).leader, Some(1));
    assert_eq!(send_all(&p, 3..5), vec![1, 2]); // epoch 1, on replica 1 only
    faults.crash_replica(T, 0, 1).unwrap();
    let d = describe(&broker);
    assert_eq!((d.leader, d.leader_epoch), (Some(2), 2));
    assert_eq!(send_all(&p, 5..6), vec![1]); // epoch 2, on replica 2

    // Three different records at offset 1: 1 (epoch 0), 3 (epoch 1), 5 (epoch 2).
    faults.restart_replica(T, 0, 0).unwrap();
    faults.restart_replica(T, 0, 1).unwrap();
    assert!(faults.wait_in_sync(T, 0, WAIT).unwrap());
    let expected = vec![(0, 0), (1, 5)];
    for (id, log) in logs(&broker) {
        assert_eq!(log, expected, "replica {id}");
    }
    let topic = broker.topic::<(), u64>(T).unwrap();
    for view in topic.replica_logs(0).unwrap() {
        let epochs: Vec<i32> = view.records.iter().map(|r| r.1).collect();
        assert_eq!(epochs, vec![0, 2], "replica {}", view.replica);
    }
    let truncated: Vec<_> = faults
        .events()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Truncated { replica, from, to } => Some((replica, from, to)),
            _ => None,
        })
        .collect();
    assert!(truncated.contains(&(0, 3, 1)), "{truncated:?}");
    assert!(truncated.contains(&(1, 3, 1)), "{truncated:?}");
}

/// A crash that loses an unsynced tail (power loss), on a follower: it re-copies what it
/// lost and the partition keeps every acknowledged record.
#[test]
fn a_follower_losing_its_tail_recopies_it() {
    let (broker, _) = broker();
    topic(&broker, 2, false);
    let faults = broker.faults();
    let p = producer(&broker, Acks::All);
    send_all(&p, 0..30);
    faults.crash_replica_losing(T, 0, 2, 12).unwrap();
    assert_eq!(describe(&broker).replicas[2].log_end, 12);
    send_all(&p, 30..40); // ISR {0, 1} still meets min 2
    faults.restart_replica(T, 0, 2).unwrap();
    assert!(faults.wait_in_sync(T, 0, WAIT).unwrap());
    for (id, log) in logs(&broker) {
        assert_eq!(
            log,
            (0..40).map(|v| (v, v)).collect::<Vec<_>>(),
            "replica {id}"
        );
    }
}

/// A failed data directory takes its replicas (and their logs) away; leadership moves;
/// restored, the directory's replicas copy everything back.
#[test]
fn a_failed_directory_moves_leadership_and_loses_nothing_acknowledged() {
    let (broker, _) = broker();
    let config = TopicConfig::new(3)
        .replication_factor(3)
        .min_insync_replicas(2);
    broker.create_topic::<(), u64>(T, config).unwrap();
    let faults = broker.faults();
    let p = producer(&broker, Acks::All);
    for v in 0..90u64 {
        p.send(Record::new(T, v).partition((v % 3) as u32)).unwrap();
    }
    faults.fail_data_dir(0).unwrap();
    let d = broker.describe_topic(T).unwrap();
    assert_eq!(
        d.replicas[0].leader,
        Some(1),
        "partition 0 led from directory 0"
    );
    for part in &d.replicas {
        assert!(!part.isr.contains(&0), "{part:?}");
        let on_0 = part.replicas.iter().find(|r| r.id == 0).unwrap();
        assert!(!on_0.online);
        assert_eq!(on_0.log_end, on_0.log_start, "its log is gone");
    }
    for v in 90..120u64 {
        p.send(Record::new(T, v).partition((v % 3) as u32)).unwrap();
    }
    faults.restore_data_dir(0).unwrap();
    for part in 0..3 {
        assert!(faults.wait_in_sync(T, part, WAIT).unwrap());
    }
    let topic = broker.topic::<(), u64>(T).unwrap();
    for part in 0..3u32 {
        let want: Vec<u64> = (0..120).filter(|v| v % 3 == u64::from(part)).collect();
        for view in topic.replica_logs(part).unwrap() {
            let got: Vec<u64> = view.records.iter().map(|r| r.3).collect();
            assert_eq!(got, want, "partition {part} replica {}", view.replica);
        }
    }
}

#[test]
fn a_slow_follower_fetches_once_per_interval_of_broker_time() {
    let (broker, clock) = broker();
    topic(&broker, 1, false);
    let faults = broker.faults();
    let p = producer(&broker, Acks::Leader);
    faults
        .slow_replica(T, 0, 2, Duration::from_secs(5))
        .unwrap();
    send_all(&p, 0..10);
    assert!(faults
        .wait_for_event(Duration::from_millis(200), |_| false)
        .is_none());
    assert_eq!(
        describe(&broker).replicas[2].log_end,
        0,
        "no broker time passed"
    );
    clock.advance(Duration::from_secs(5));
    assert!(faults.wait_in_sync(T, 0, WAIT).unwrap());
    faults.slow_replica(T, 0, 2, Duration::ZERO).unwrap();
}

#[test]
fn acks_all_on_a_single_replica_topic_is_met_at_append() {
    let broker = Broker::in_memory();
    broker
        .create_topic::<(), u64>(T, TopicConfig::new(1))
        .unwrap();
    let p = producer(&broker, Acks::All);
    assert_eq!(send_all(&p, 0..3), vec![0, 1, 2]);
    assert!(broker.describe_topic(T).unwrap().replicas.is_empty());
}

#[test]
fn invalid_replication_settings_are_refused_with_what_is_valid() {
    let broker = Broker::in_memory();
    let cases = [
        (
            TopicConfig::new(1).replication_factor(0),
            "replication_factor",
        ),
        (
            TopicConfig::new(1).replication_factor(17),
            "replication_factor",
        ),
        (
            TopicConfig::new(1)
                .replication_factor(2)
                .min_insync_replicas(3),
            "min_insync_replicas",
        ),
        (
            TopicConfig::new(1).min_insync_replicas(0),
            "min_insync_replicas",
        ),
        (
            TopicConfig::new(1).replica_lag_time_max(Duration::ZERO),
            "replica_lag_time_max",
        ),
    ];
    for (config, field) in cases {
        match broker.create_topic::<(), u64>(T, config) {
            Err(Error::InvalidConfig { name, valid, .. }) => {
                assert_eq!(name, field);
                assert!(!valid.is_empty());
            }
            other => panic!("{field}: {other:?}"),
        }
    }
    let config = ProducerConfig::new().delivery_timeout(Duration::ZERO);
    assert!(matches!(
        broker.producer_with_config::<(), u64>(config),
        Err(Error::InvalidConfig {
            name: "delivery_timeout",
            ..
        })
    ));
}

#[test]
fn fault_calls_name_what_does_not_exist() {
    let (broker, _) = broker();
    topic(&broker, 1, false);
    let faults = broker.faults();
    assert!(matches!(
        faults.crash_replica("nope", 0, 0),
        Err(Error::UnknownTopic { .. })
    ));
    assert!(matches!(
        faults.crash_replica(T, 4, 0),
        Err(Error::PartitionOutOfRange { count: 1, .. })
    ));
    match faults.stall_replica(T, 0, 7) {
        Err(Error::UnknownReplica { replicas, .. }) => assert_eq!(replicas, vec![0, 1, 2]),
        other => panic!("{other:?}"),
    }
    // Not replicated: no replica logs.
    broker
        .create_topic::<(), u64>("plain", TopicConfig::new(1))
        .unwrap();
    let plain = broker.topic::<(), u64>("plain").unwrap();
    assert!(matches!(
        plain.replica_logs(0),
        Err(Error::InvalidConfig { .. })
    ));
    // A deleted topic is gone from the fault API too.
    broker.delete_topic(T).unwrap();
    assert!(matches!(
        faults.crash_replica(T, 0, 0),
        Err(Error::UnknownTopic { .. })
    ));
}

#[test]
fn added_partitions_are_replicated_too() {
    let (broker, _) = broker();
    topic(&broker, 2, false);
    broker.add_partitions(T, 3).unwrap();
    let d = broker.describe_topic(T).unwrap();
    assert_eq!(d.replicas.len(), 3);
    let p = producer(&broker, Acks::All);
    let meta = p.send(Record::new(T, 7).partition(2)).unwrap();
    assert_eq!((meta.partition, meta.offset), (2, 0));
    assert_eq!(
        broker.describe_topic(T).unwrap().replicas[2].high_watermark,
        1
    );
}

/// Records 0..5 sent with `acks = all`; then, with the followers stalled, the send of 5
/// waits, the leader (replica 0) crashes under it, and the send is retried on the new
/// leader (replica 1 has offsets 0..5 only), succeeding at offset 5 once the followers
/// resume. The broker and the producer, for what the test checks next.
fn leader_crash_under_a_waiting_send() -> (Broker, logbus::Producer<(), u64>) {
    let (broker, _) = broker();
    topic(&broker, 2, false);
    let faults = broker.faults();
    let config = ProducerConfig::new()
        .acks(Acks::All)
        .delivery_timeout(Duration::from_secs(30));
    let p: logbus::Producer<(), u64> = broker.producer_with_config(config).unwrap();
    send_all(&p, 0..5);
    faults.stall_replica(T, 0, 1).unwrap();
    faults.stall_replica(T, 0, 2).unwrap();
    let waiting = {
        let p = p.clone();
        std::thread::spawn(move || p.send(Record::new(T, 5)).map(|m| m.offset))
    };
    while describe(&broker).replicas[0].log_end < 6 {
        std::thread::yield_now();
    }
    faults.crash_replica(T, 0, 0).unwrap();
    faults.resume_replica(T, 0, 1).unwrap();
    faults.resume_replica(T, 0, 2).unwrap();
    assert_eq!(waiting.join().unwrap().unwrap(), 5);
    (broker, p)
}

#[test]
fn retries_across_a_leader_change_are_counted() {
    let (_broker, p) = leader_crash_under_a_waiting_send();
    let m = p.metrics();
    assert!(m.retries >= 1 && m.possible_duplicates >= 1, "{m:?}");
}

/// Single records share the leader's open chunk, and an election comes while it is open:
/// the old leader holds a record the others never copied, the send of that record is
/// retried on the new leader (the same record appended again, from the old chunk), and the
/// new leader goes on appending. The old leader, restarted, cuts the uncopied record by
/// leader epoch and copies the rest: every replica ends with the same records, in order.
#[test]
fn an_election_while_the_leaders_chunk_is_open_keeps_replicas_identical() {
    let (broker, p) = leader_crash_under_a_waiting_send();
    let faults = broker.faults();
    assert_eq!(send_all(&p, 6..9), vec![6, 7, 8]);
    faults.restart_replica(T, 0, 0).unwrap();
    assert!(faults.wait_in_sync(T, 0, WAIT).unwrap());
    let expected: Vec<_> = (0..9).map(|v| (v, v)).collect();
    for (id, log) in logs(&broker) {
        assert_eq!(log, expected, "replica {id}");
    }
    assert_eq!(read_all(&broker, 9), expected);
}

/// KIP-966's case: the last in-sync replica loses an unsynced tail in a crash and is
/// elected again (clean: it is the ISR). The committed records it lost are reported.
#[test]
fn the_last_isr_member_losing_its_tail_reports_the_loss() {
    let (broker, clock) = broker();
    topic(&broker, 1, false);
    let faults = broker.faults();
    let p = producer(&broker, Acks::All);
    send_all(&p, 0..5);
    assert!(faults.wait_in_sync(T, 0, WAIT).unwrap());
    faults.stall_replica(T, 0, 1).unwrap();
    faults.stall_replica(T, 0, 2).unwrap();
    let waiting = {
        let p = p.clone();
        std::thread::spawn(move || send_all(&p, 5..10))
    };
    while describe(&broker).replicas[0].log_end < 6 {
        std::thread::yield_now();
    }
    clock.advance(Duration::from_secs(31));
    faults.check_isr_now();
    waiting.join().unwrap();
    assert_eq!(describe(&broker).high_watermark, 10);
    faults.crash_replica_losing(T, 0, 0, 7).unwrap();
    faults.restart_replica(T, 0, 0).unwrap();
    let d = describe(&broker);
    assert_eq!((d.leader, d.high_watermark), (Some(0), 7));
    assert!(faults
        .events()
        .iter()
        .any(|e| e.kind == EventKind::RecordsLost { from: 7, to: 10 }));
}

/// A leader keeps the records its in-sync followers have not copied yet even beyond
/// `records_in_memory`, so a slow in-sync follower never misses any.
#[test]
fn a_leader_keeps_unreplicated_records_beyond_its_capacity() {
    let (broker, _) = broker();
    let config = TopicConfig::new(1)
        .replication_factor(3)
        .records_in_memory(4);
    broker.create_topic::<(), u64>(T, config).unwrap();
    let faults = broker.faults();
    let p = producer(&broker, Acks::Leader);
    faults.stall_replica(T, 0, 2).unwrap();
    send_all(&p, 0..10);
    let leader = &describe(&broker).replicas[0];
    assert_eq!((leader.log_start, leader.log_end), (0, 10));
    faults.resume_replica(T, 0, 2).unwrap();
    assert!(faults.wait_in_sync(T, 0, WAIT).unwrap());
    let topic = broker.topic::<(), u64>(T).unwrap();
    let follower = topic
        .replica_logs(0)
        .unwrap()
        .into_iter()
        .find(|v| v.replica == 2);
    let values: Vec<u64> = follower.unwrap().records.iter().map(|r| r.3).collect();
    assert_eq!(
        values,
        vec![6, 7, 8, 9],
        "it copied all ten, keeping its last four"
    );
    send_all(&p, 10..11);
    assert_eq!(
        describe(&broker).replicas[0].log_end - describe(&broker).replicas[0].log_start,
        4
    );
}

#[test]
fn send_timeout_bounds_the_wait_for_acks() {
    let (broker, _) = broker();
    topic(&broker, 2, false);
    let faults = broker.faults();
    let config = ProducerConfig::new().acks(Acks::All);
    let p: logbus::Producer<(), u64> = broker.producer_with_config(config).unwrap();
    faults.stall_replica(T, 0, 1).unwrap();
    faults.stall_replica(T, 0, 2).unwrap();
    let err = p
        .send_timeout(Record::new(T, 1), Duration::from_millis(50))
        .unwrap_err();
    assert!(matches!(err.error(), Error::Timeout { .. }), "{err:?}");
    assert_eq!(
        err.into_record().expect("the record is handed back").value,
        1,
        "handed back (a copy: the leader keeps it)"
    );
}

#[test]
fn unknown_data_directories_are_refused() {
    let (broker, _) = broker();
    topic(&broker, 1, false);
    let faults = broker.faults();
    assert!(matches!(
        faults.fail_data_dir(3),
        Err(Error::DataDirOutOfRange { index: 3, count: 3 })
    ));
    assert!(
        faults.restore_data_dir(2).is_ok(),
        "restoring a healthy directory is a no-op"
    );
}

/// The same failure with `min_insync_replicas = 2` and unclean election on: the stalled
/// replicas take over. Every send acknowledged under `acks = all` survives (they were on
/// every replica); the record appended while the ISR shrank (answered
/// `NotEnoughReplicasAfterAppend`, yet below HW once the ISR was the leader alone) is lost,
/// and the loss is reported.
#[test]
fn isr_shrinks_to_the_leader_then_it_dies_min_isr_2_unclean_on_reports_the_loss() {
    let (broker, clock) = broker();
    topic(&broker, 2, true);
    let faults = broker.faults();
    let p = producer(&broker, Acks::All);
    let acked = send_all(&p, 0..20);
    faults.stall_replica(T, 0, 1).unwrap();
    faults.stall_replica(T, 0, 2).unwrap();
    let waiting = {
        let p = p.clone();
        std::thread::spawn(move || p.send(Record::new(T, 20)))
    };
    while describe(&broker).replicas[0].log_end < 21 {
        std::thread::yield_now();
    }
    clock.advance(Duration::from_secs(31));
    faults.check_isr_now();
    let err = waiting.join().unwrap().unwrap_err();
    assert!(
        matches!(err.error(), Error::NotEnoughReplicasAfterAppend { .. }),
        "{err:?}"
    );
    assert_eq!(describe(&broker).high_watermark, 21);

    faults.crash_replica(T, 0, 0).unwrap();
    let d = describe(&broker);
    assert_eq!(
        (d.leader, d.leader_epoch, d.high_watermark),
        (Some(1), 1, 20)
    );
    let events = faults.events();
    assert!(events.iter().any(|e| e.kind
        == EventKind::LeaderElected {
            leader: Some(1),
            epoch: 1,
            unclean: true
        }));
    assert!(
        events
            .iter()
            .any(|e| e.kind == EventKind::RecordsLost { from: 20, to: 21 }),
        "{events:?}"
    );
    // Nothing acknowledged was lost.
    let read = read_all(&broker, 20);
    for (i, offset) in acked.iter().enumerate() {
        assert_eq!(read[*offset as usize], (*offset, i as u64));
    }
}

/// The borrowing fast paths (`PartitionProducer::send_iter`, `poll_with`) go through the
/// replicas too.
#[test]
fn send_iter_and_poll_with_use_the_replicas() {
    let (broker, _) = broker();
    topic(&broker, 2, false);
    let faults = broker.faults();
    let p = producer(&broker, Acks::All);
    let sent = p
        .partition(T, 0)
        .unwrap()
        .send_iter((0..10u64).map(logbus::producer::Payload::new))
        .unwrap();
    assert_eq!(sent, 10);
    let d = describe(&broker);
    assert_eq!(
        d.high_watermark, 10,
        "acks = all: on the ISR when send_iter returns"
    );
    assert!(faults.wait_in_sync(T, 0, WAIT).unwrap());
    for (id, log) in logs(&broker) {
        assert_eq!(
            log,
            (0..10).map(|v| (v, v)).collect::<Vec<_>>(),
            "replica {id}"
        );
    }
    let config = ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest);
    let mut c = broker.consumer::<(), u64>(config).unwrap();
    c.assign(&[TopicPartition::new(T, 0)]).unwrap();
    let mut seen = Vec::new();
    while seen.len() < 10 {
        c.poll_with(16, WAIT, |r| seen.push((r.offset, *r.value)))
            .unwrap();
    }
    assert_eq!(seen, (0..10).map(|v| (v, v)).collect::<Vec<_>>());
}

/// A replica that led an epoch without appending keeps that epoch in its cache; when it
/// follows a leader that holds older-epoch records past its end (records it never got),
/// the epoch exchange cuts nothing and it copies those older-epoch records on top of its
/// empty epoch. Its cache must drop the empty epoch (Kafka's cache removes entries at or
/// past a new entry's start), not keep epochs out of order.
#[test]
fn a_replica_that_led_an_empty_epoch_then_copies_older_epoch_records() {
    let (broker, _) = broker();
    topic(&broker, 1, false);
    let faults = broker.faults();
    let p = producer(&broker, Acks::Leader);
    send_all(&p, 0..2); // epoch 0, everywhere
    assert!(faults.wait_in_sync(T, 0, WAIT).unwrap());
    faults.stall_replica(T, 0, 1).unwrap();
    send_all(&p, 2..4); // epoch 0, on replicas 0 and 2 only
    let deadline = std::time::Instant::now() + WAIT;
    while logs(&broker).iter().find(|l| l.0 == 2).unwrap().1.len() < 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "replica 2 never copied 2..4"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    faults.stall_replica(T, 0, 2).unwrap();
    faults.crash_replica(T, 0, 0).unwrap();
    let d = describe(&broker);
    // Replica 1 leads epoch 1 from offset 2 and appends nothing; replica 2 (stalled)
    // keeps 2..4 of epoch 0.
    assert_eq!((d.leader, d.leader_epoch), (Some(1), 1));
    faults.crash_replica(T, 0, 1).unwrap();
    let d = describe(&broker);
    assert_eq!((d.leader, d.leader_epoch), (Some(2), 2));
    assert_eq!(send_all(&p, 99..100), vec![4]); // epoch 2

    // Replica 1 (cache: epoch 0 from 0, epoch 1 from 2) copies 2..4 of epoch 0, then 4.
    faults.restart_replica(T, 0, 1).unwrap();
    faults.restart_replica(T, 0, 0).unwrap();
    assert!(faults.wait_in_sync(T, 0, WAIT).unwrap());
    let expected: Vec<_> = (0..4).map(|v| (v, v)).chain([(4, 99)]).collect();
    for (id, log) in logs(&broker) {
        assert_eq!(log, expected, "replica {id}");
    }
    let topic = broker.topic::<(), u64>(T).unwrap();
    for view in topic.replica_logs(0).unwrap() {
        let epochs: Vec<i32> = view.records.iter().map(|r| r.1).collect();
        assert_eq!(epochs, vec![0, 0, 0, 0, 2], "replica {}", view.replica);
    }
}

/// A value counting how many of it are alive (clones included).
#[derive(Debug)]
struct Live(Arc<std::sync::atomic::AtomicUsize>);

impl Live {
    fn new(count: &Arc<std::sync::atomic::AtomicUsize>) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Live(Arc::clone(count))
    }
}

impl Clone for Live {
    fn clone(&self) -> Self {
        Live::new(&self.0)
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Single records share open chunks (wave 10): a chunk lives while any of its slots is in
/// any replica's memory, so single sends, blocking and pipelined (their deliveries
/// dropped once done), keep alive no more than `records_in_memory` per log plus a bounded
/// piece, as batches do.
#[test]
fn single_sends_are_not_kept_beyond_the_logs_memory() {
    let (broker, _) = broker();
    let config = TopicConfig::new(1)
        .replication_factor(3)
        .records_in_memory(16);
    broker.create_topic::<(), Live>("singles", config).unwrap();
    let config = ProducerConfig::new().acks(Acks::All);
    let p = broker.producer_with_config::<(), Live>(config).unwrap();
    let live = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // 1,925 sends in all: 30 chunks of 64 and 5 records, so a chunk as large as 64 would
    // keep 59 of the logs' trimmed records alive too.
    for i in 0..1_924 {
        if i % 2 == 0 {
            p.send(Record::new("singles", Live::new(&live))).unwrap();
        } else {
            p.send_async(Record::new("singles", Live::new(&live)))
                .wait()
                .unwrap();
        }
    }
    assert!(broker.faults().wait_in_sync("singles", 0, WAIT).unwrap());
    p.send(Record::new("singles", Live::new(&live))).unwrap();
    let alive = live.load(std::sync::atomic::Ordering::SeqCst);
    // The logs keep the last 16 records, in chunks of 16 (the memory's size): at most
    // three chunks.
    assert!(
        (16..=3 * 16).contains(&alive),
        "{alive} records alive after 1,925 sends"
    );
    drop(p);
    broker.delete_topic("singles").unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    while live.load(std::sync::atomic::Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(live.load(std::sync::atomic::Ordering::SeqCst), 0);
}

/// A replica log shares a batch's records among the replicas in chunks; a chunk lives while
/// any of its records is in any replica's memory. One huge batch must still be held only as
/// far as `records_in_memory` allows (plus a bounded piece), not whole: the records every
/// replica has trimmed are dropped.
#[test]
fn a_huge_batch_is_not_kept_whole_after_its_records_are_trimmed() {
    let (broker, _) = broker();
    let config = TopicConfig::new(1)
        .replication_factor(3)
        .records_in_memory(16);
    broker.create_topic::<(), Live>("huge", config).unwrap();
    let config = ProducerConfig::new().acks(Acks::All);
    let p = broker.producer_with_config::<(), Live>(config).unwrap();
    let live = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let n = 20_000;
    let mut batch: Vec<_> = (0..n)
        .map(|_| Record::new("huge", Live::new(&live)))
        .collect();
    p.send_batch(&mut batch).unwrap();
    assert!(batch.is_empty());
    assert!(broker.faults().wait_in_sync("huge", 0, WAIT).unwrap());
    // The leader trims what its followers have copied at its next append.
    p.send(Record::new("huge", Live::new(&live))).unwrap();
    let alive = live.load(std::sync::atomic::Ordering::SeqCst);
    // Each of three logs keeps 16 records and at most one partly trimmed piece of 16.
    assert!(
        alive <= 3 * (16 + 16),
        "{alive} records alive after a batch of {n}"
    );
    drop(p);
    broker.delete_topic("huge").unwrap();
    // The replica threads let go of their logs as they stop.
    let deadline = std::time::Instant::now() + WAIT;
    while live.load(std::sync::atomic::Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(live.load(std::sync::atomic::Ordering::SeqCst), 0);
}

/// Waits until replica `id`'s log ends at `end` (offsets below it held in memory).
fn wait_for_end(broker: &Broker, id: u32, end: u64) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let log = logs(broker).into_iter().find(|l| l.0 == id).unwrap().1;
        if log.last().map_or(0, |r| r.0 + 1) == end {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "replica {id} never reached {end}: {log:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A follower whose divergent records began below its log start (it trimmed them away:
/// followers keep `records_in_memory`, HW or not) is cut by epoch down to that start. It
/// kept the epochs of the records cut, so the older-epoch records it then copied from the
/// new leader went in behind a newer epoch (the epoch cache stopped increasing; a debug
/// build panicked in the fetcher thread and the replica never caught up).
#[test]
fn a_follower_cut_to_its_log_start_copies_older_epochs_cleanly() {
    let (broker, _) = broker();
    let config = TopicConfig::new(1)
        .replication_factor(3)
        .records_in_memory(4);
    broker.create_topic::<(), u64>(T, config).unwrap();
    let faults = broker.faults();
    let p = producer(&broker, Acks::Leader);
    // Replica 2 leads epoch 2, with 0 and 1 back in the ISR.
    faults.crash_replica(T, 0, 0).unwrap();
    faults.crash_replica(T, 0, 1).unwrap();
    faults.restart_replica(T, 0, 0).unwrap();
    faults.restart_replica(T, 0, 1).unwrap();
    assert!(faults.wait_in_sync(T, 0, WAIT).unwrap());
    assert_eq!(describe(&broker).leader_epoch, 2);
    // Epoch 2: replica 0 copies 0, replica 1 copies 0..4 (HW stays at 1: 0 is stalled).
    send_all(&p, 0..1);
    assert!(faults.wait_in_sync(T, 0, WAIT).unwrap());
    faults.stall_replica(T, 0, 0).unwrap();
    send_all(&p, 1..4);
    wait_for_end(&broker, 1, 4);
    // Replica 1 stops fetching; 2 crashes: 0 leads epoch 3 and takes five records, which 2
    // (back) copies, trimming to its last four: 2..6, all of epoch 3.
    faults.stall_replica(T, 0, 1).unwrap();
    faults.crash_replica(T, 0, 2).unwrap();
    assert_eq!(describe(&broker).leader, Some(0));
    faults.restart_replica(T, 0, 2).unwrap();
    assert_eq!(send_all(&p, 10..15), vec![1, 2, 3, 4, 5]);
    wait_for_end(&broker, 2, 6);
    // 0 crashes: 1 leads epoch 4 with 0..4 of epoch 2. Replica 2 cuts to its start (2)
    // and copies 2..4 of epoch 2 from 1, then 4.. of epoch 4.
    faults.crash_replica(T, 0, 0).unwrap();
    assert_eq!(describe(&broker).leader, Some(1));
    faults.resume_replica(T, 0, 1).unwrap();
    faults.resume_replica(T, 0, 0).unwrap();
    assert_eq!(send_all(&p, 20..22), vec![4, 5]);
    faults.restart_replica(T, 0, 0).unwrap();
    assert!(
        faults.wait_in_sync(T, 0, WAIT).unwrap(),
        "{:?}",
        describe(&broker)
    );
    let topic = broker.topic::<(), u64>(T).unwrap();
    let views = topic.replica_logs(0).unwrap();
    for v in &views {
        // Every replica holds 1's history where it holds anything: epoch 2's 0..4, then
        // epoch 4's 4..6.
        for r in &v.records {
            let expected = if r.0 < 4 { (2, r.0) } else { (4, 16 + r.0) };
            assert_eq!((r.1, r.3), expected, "replica {} at {}", v.replica, r.0);
        }
        assert_eq!(
            v.records.last().map(|r| r.0),
            Some(5),
            "replica {}",
            v.replica
        );
    }
}
