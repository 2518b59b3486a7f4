//! The idempotent producer on replicated partitions: a retry answered after an election by
//! the new leader (its producer state followed the log), and idle producer ids expiring on
//! the broker's clock.

use std::sync::Arc;
use std::time::Duration;

use logbus::producer::{Producer, ProducerIdentity, Record};
use logbus::{Broker, ManualClock, TopicConfig};

#[test]
fn the_new_leader_answers_a_retry_and_idle_producers_expire() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let broker = Broker::builder().clock(clock.clone()).build().unwrap();
    let config = TopicConfig::new(1)
        .replication_factor(3)
        .min_insync_replicas(2)
        .producer_id_expiration(Duration::from_secs(60));
    broker.create_topic::<(), u64>("t", config).unwrap();
    let p = broker.producer::<(), u64>();
    let id = broker.init_producer_id();
    let first = p.send_sequenced(Record::new("t", 1), id, 0).unwrap();
    p.send_sequenced(Record::new("t", 2), id, 1).unwrap();

    // The leader crashes; the new one has the producer's state from the records it copied.
    let d = broker.describe_topic("t").unwrap();
    let leader = d.replicas[0].leader.unwrap();
    broker.faults().crash_replica("t", 0, leader).unwrap();
    let again = p.send_sequenced(Record::new("t", 1), id, 0).unwrap();
    assert_eq!(
        again.offset, first.offset,
        "the new leader answered the retry"
    );
    let gap = p.send_sequenced(Record::new("t", 9), id, 7);
    assert!(
        matches!(
            gap.as_ref().map_err(|e| e.error()),
            Err(logbus::Error::OutOfOrderSequence {
                expected: 2,
                got: 7,
                ..
            })
        ),
        "{:?}",
        gap.map_err(|e| e.to_string())
    );
    assert_eq!(broker.describe_topic("t").unwrap().partitions[0].log_end, 2);

    // Idle past the expiration: the producer is forgotten, its old sequence accepted anew.
    clock.advance(Duration::from_secs(61));
    broker.faults().check_isr_now();
    let fresh = p.send_sequenced(Record::new("t", 1), id, 0).unwrap();
    assert_eq!(fresh.offset, 2, "an expired producer's record is appended");
}

/// Followers copying two producers' records one at a time (their producer state deferred
/// and joined while a producer's run continues, applied when the other's begins): after
/// the leader crashes, the new leader answers every retry of either producer with its
/// first offset, takes each producer's next sequence, and refuses a gap; a second election
/// does the same.
#[test]
fn after_elections_every_retry_is_answered_and_every_next_sequence_taken() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let broker = Broker::builder().clock(clock.clone()).build().unwrap();
    let config = TopicConfig::new(1)
        .replication_factor(3)
        .min_insync_replicas(1);
    broker.create_topic::<(), u64>("t", config).unwrap();
    let p = broker.producer::<(), u64>();
    let (a, b) = (broker.init_producer_id(), broker.init_producer_id());
    let mut offsets = Vec::new();
    let plan = [
        (a, 0),
        (a, 1),
        (a, 2),
        (b, 0),
        (b, 1),
        (a, 3),
        (a, 4),
        (b, 2),
        (a, 5),
    ];
    for (i, &(id, seq)) in plan.iter().enumerate() {
        let m = p
            .send_sequenced(Record::new("t", i as u64), id, seq)
            .unwrap();
        offsets.push(m.offset);
    }
    let mut next = [(a, 6), (b, 3)];
    for round in 0..2 {
        let d = broker.describe_topic("t").unwrap();
        let leader = d.replicas[0].leader.unwrap();
        broker.faults().crash_replica("t", 0, leader).unwrap();
        for (i, &(id, seq)) in plan.iter().enumerate() {
            let again = p
                .send_sequenced(Record::new("t", i as u64), id, seq)
                .unwrap_or_else(|e| panic!("round {round}: retry of {seq}: {e}"));
            assert_eq!(again.offset, offsets[i], "round {round}: retry of {seq}");
        }
        for (id, seq) in next.iter_mut() {
            let gap = p.send_sequenced(Record::new("t", 99), *id, *seq + 1);
            assert!(gap.is_err(), "round {round}: a gap after {seq} was taken");
            let m = p
                .send_sequenced(Record::new("t", 100), *id, *seq)
                .unwrap_or_else(|e| panic!("round {round}: next sequence {seq}: {e}"));
            offsets.push(m.offset);
            *seq += 1;
        }
        broker.faults().restart_replica("t", 0, leader).unwrap();
    }
}

/// Waits (real time, generous) until every online replica of `t`-0 holds `end` records
/// and is back in the ISR (a replica may copy the last record a fetch before the leader
/// takes it in: electable only then).
fn caught_up(broker: &Broker, end: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r = &broker.describe_topic("t").unwrap().replicas[0];
        if r.replicas
            .iter()
            .filter(|x| x.online)
            .all(|x| x.log_end == end && r.isr.contains(&x.id))
        {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "not caught up: {r:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A broker with topic "t" (RF 3, `min_insync_replicas` 1) and an `acks = 1` producer whose
/// id sent sequences 0 to 2, copied by every replica; then the followers stalled, so what
/// the leader takes next reaches it alone. Returns the leader and the followers too.
fn three_records_then_followers_stalled(
) -> (Broker, Producer<(), u64>, ProducerIdentity, u32, Vec<u32>) {
    use logbus::producer::{Acks, ProducerConfig};
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let broker = Broker::builder().clock(clock).build().unwrap();
    let config = TopicConfig::new(1)
        .replication_factor(3)
        .min_insync_replicas(1);
    broker.create_topic::<(), u64>("t", config).unwrap();
    let p = broker
        .producer_with_config::<(), u64>(ProducerConfig::new().acks(Acks::Leader))
        .unwrap();
    let a = broker.init_producer_id();
    for seq in 0..3 {
        p.send_sequenced(Record::new("t", seq as u64), a, seq)
            .unwrap();
    }
    caught_up(&broker, 3);
    let first = broker.describe_topic("t").unwrap().replicas[0]
        .leader
        .unwrap();
    let followers: Vec<u32> = (0..3).filter(|&r| r != first).collect();
    for &f in &followers {
        broker.faults().stall_replica("t", 0, f).unwrap();
    }
    (broker, p, a, first, followers)
}

/// A leader's tail of one producer's records that no follower copied (followers stalled,
/// `acks = 1`) is lost to an election: the new leader takes those sequences anew, once
/// (a second retry is answered with the new offset); the old leader, restarted, truncates
/// that tail and copies the new records one at a time (deferred producer state), and led
/// again it answers every retry with the offsets the log now holds and takes the next
/// sequence.
#[test]
fn a_tail_lost_to_an_election_is_taken_anew_once_and_the_truncated_replica_agrees() {
    let (broker, p, a, first, followers) = three_records_then_followers_stalled();
    for seq in 3..5 {
        let m = p
            .send_sequenced(Record::new("t", 50 + seq as u64), a, seq)
            .unwrap();
        assert_eq!(m.offset, seq as u64);
    }
    broker.faults().crash_replica("t", 0, first).unwrap();
    for &f in &followers {
        broker.faults().resume_replica("t", 0, f).unwrap();
    }
    // The new leader never had sequences 3 and 4: they are legit sends, taken once.
    for seq in 3..5 {
        let m = p
            .send_sequenced(Record::new("t", seq as u64), a, seq)
            .unwrap_or_else(|e| panic!("sequence {seq} lost to the election: {e}"));
        assert_eq!(m.offset, seq as u64);
    }
    let again = p.send_sequenced(Record::new("t", 3), a, 3).unwrap();
    assert_eq!(again.offset, 3, "the retry answered, not appended");
    broker.faults().restart_replica("t", 0, first).unwrap();
    caught_up(&broker, 5);
    // Lead with the truncated replica: crash the others in turn until it leads.
    let second = broker.describe_topic("t").unwrap().replicas[0]
        .leader
        .unwrap();
    broker.faults().crash_replica("t", 0, second).unwrap();
    let third = followers.iter().copied().find(|&f| f != second).unwrap();
    if broker.describe_topic("t").unwrap().replicas[0].leader != Some(first) {
        broker.faults().crash_replica("t", 0, third).unwrap();
    }
    assert_eq!(
        broker.describe_topic("t").unwrap().replicas[0].leader,
        Some(first)
    );
    for seq in 0..5 {
        let m = p
            .send_sequenced(Record::new("t", seq as u64), a, seq)
            .unwrap_or_else(|e| panic!("retry of {seq} on the truncated replica: {e}"));
        assert_eq!(
            m.offset, seq as u64,
            "retry of {seq} on the truncated replica"
        );
    }
    let m = p.send_sequenced(Record::new("t", 5), a, 5).unwrap();
    assert_eq!(m.offset, 5);
    assert_eq!(broker.describe_topic("t").unwrap().partitions[0].log_end, 6);
}

/// An expired producer's sequence counter goes with its state: its next send starts over at
/// sequence 0, as a new producer's does (kept, the counters of every idempotent producer
/// ever made would pile up). Seen in every replica's batch headers.
#[test]
fn an_expired_producers_next_send_starts_its_sequences_over() {
    use logbus::persist::{producer_states, PersistConfig};
    use logbus::producer::{Acks, ProducerConfig};
    use logbus::Clock;
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let broker = Broker::builder()
        .data_dirs(dirs.iter().map(|d| d.path()))
        .create(true)
        .clock(clock.clone() as Arc<dyn Clock>)
        .open()
        .unwrap();
    let config = TopicConfig::new(1)
        .replication_factor(3)
        .min_insync_replicas(2)
        .producer_id_expiration(Duration::from_secs(60))
        .persist(PersistConfig::new());
    broker.create_topic::<(), u64>("t", config).unwrap();
    let p = broker
        .producer_with_config::<(), u64>(ProducerConfig::new().acks(Acks::All))
        .unwrap();
    for v in 0..3 {
        p.send(Record::new("t", v)).unwrap();
    }
    clock.advance(Duration::from_secs(61));
    broker.faults().check_isr_now();
    p.send(Record::new("t", 3)).unwrap();
    broker.close().unwrap();
    for d in &dirs {
        let states = producer_states(&d.path().join("t-0")).unwrap();
        assert_eq!(states.len(), 1, "{states:?}");
        assert_eq!(
            states[0].last_sequence, 0,
            "the send after the expiry started over: {states:?}"
        );
    }
}

/// A replica that applied a producer's newer epoch keeps it when that record is truncated
/// away (`ProducerStates::truncate`), while its last run is still the producer's older
/// epoch. Led again, it fences an older-epoch send that goes on from that run, as it
/// fences one that does not.
#[test]
fn a_truncated_newer_epoch_still_fences_a_continuing_older_send() {
    let (broker, p, a, first, followers) = three_records_then_followers_stalled();
    // The producer's epoch is bumped (fencing `a`); its first record of epoch 1 reaches
    // the leader alone.
    let a1 = broker.bump_producer_epoch(a).unwrap();
    assert_eq!(
        p.send_sequenced(Record::new("t", 100), a1, 0)
            .unwrap()
            .offset,
        3
    );
    broker.faults().crash_replica("t", 0, first).unwrap();
    for &f in &followers {
        broker.faults().resume_replica("t", 0, f).unwrap();
    }
    broker.faults().restart_replica("t", 0, first).unwrap();
    caught_up(&broker, 3);
    // Lead with the truncated replica (it keeps epoch 1 for the producer).
    let second = broker.describe_topic("t").unwrap().replicas[0]
        .leader
        .unwrap();
    broker.faults().crash_replica("t", 0, second).unwrap();
    let third = followers.iter().copied().find(|&f| f != second).unwrap();
    if broker.describe_topic("t").unwrap().replicas[0].leader != Some(first) {
        broker.faults().crash_replica("t", 0, third).unwrap();
    }
    assert_eq!(
        broker.describe_topic("t").unwrap().replicas[0].leader,
        Some(first)
    );
    // The same send not continuing (a gap) is fenced by the check:
    let gap = p.send_sequenced(Record::new("t", 7), a, 4);
    assert!(
        matches!(
            gap.as_ref().map_err(|e| e.error()),
            Err(logbus::Error::ProducerFenced { .. })
        ),
        "gap: {:?}",
        gap.map_err(|e| e.to_string())
    );
    // ... and so must the continuing one be.
    let zombie = p.send_sequenced(Record::new("t", 3), a, 3);
    assert!(
        matches!(
            zombie.as_ref().map_err(|e| e.error()),
            Err(logbus::Error::ProducerFenced { .. })
        ),
        "an epoch-0 send after the bump was taken: {:?}",
        zombie.map(|m| m.offset).map_err(|e| e.to_string())
    );
}
