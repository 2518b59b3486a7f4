//! The idempotent producer on replicated partitions: a retry answered after an election by
//! the new leader (its producer state followed the log), and idle producer ids expiring on
//! the broker's clock.

use std::sync::Arc;
use std::time::Duration;

use logbus::producer::Record;
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
