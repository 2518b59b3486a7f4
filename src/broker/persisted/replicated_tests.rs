//! A replicated persisted topic opened as the broker dies.

use std::cell::RefCell;
use std::path::PathBuf;

use crate::broker::{Broker, TopicConfig};
use crate::persist::PersistConfig;
use crate::storage::fault::FaultyIo;
use crate::sync::StdArc as Arc;
use crate::{Error, Record};

thread_local! {
    /// Run between opening a topic's replica sets and tracking them.
    static BEFORE_TRACKING: RefCell<Option<Box<dyn FnOnce()>>> = const { RefCell::new(None) };
}

pub(super) fn before_tracking() {
    if let Some(f) = BEFORE_TRACKING.with(|h| h.borrow_mut().take()) {
        f();
    }
}

#[test]
fn a_replicated_topic_created_as_the_process_dies_is_refused() {
    let fs = FaultyIo::new(3);
    let dirs: Vec<PathBuf> = ["/d0", "/d1", "/d2"].iter().map(PathBuf::from).collect();
    let broker = Broker::builder()
        .io(Arc::new(fs.clone()))
        .data_dirs(dirs.iter())
        .create(true)
        .open()
        .unwrap();
    let dying = broker.clone();
    BEFORE_TRACKING.with(|h| {
        *h.borrow_mut() = Some(Box::new(move || dying.simulate_process_death()));
    });
    let created = broker.create_topic::<(), u64>(
        "t",
        TopicConfig::new(1)
            .replication_factor(3)
            .persist(PersistConfig::new()),
    );
    assert!(matches!(created, Err(Error::Closed { .. })), "{created:?}");
    assert!(broker
        .producer::<(), u64>()
        .send(Record::new("t", 1))
        .is_err());
}

/// A partition closed by `delete_topic` (or the broker's close) writes nothing more: not
/// the topic's metadata when a lagging follower leaves the ISR (the controller may hold
/// the partition from before the delete), nor when a replica restarts and is elected
/// (the fault API racing the delete). Both wrote it: the deleted topic came back at the
/// next open, with empty logs.
#[test]
fn a_closed_partition_writes_no_files() {
    use crate::producer::{Acks, ProducerConfig};
    use crate::storage::Io;
    use crate::{Clock, ManualClock};
    use std::time::Duration;

    let fs = FaultyIo::new(5);
    let clock = Arc::new(ManualClock::new(1_000_000));
    let dirs: Vec<PathBuf> = ["/d0", "/d1", "/d2"].iter().map(PathBuf::from).collect();
    let broker = Broker::builder()
        .clock(clock.clone())
        .io(Arc::new(fs.clone()))
        .data_dirs(dirs.iter())
        .create(true)
        .open()
        .unwrap();
    let faults = broker.faults();
    for t in ["lagging", "leaderless"] {
        let config = TopicConfig::new(1).replication_factor(3);
        broker
            .create_topic::<(), u64>(t, config.persist(PersistConfig::new()))
            .unwrap();
    }
    // "lagging": follower 1 stalled behind the leader; "leaderless": every replica down.
    faults.stall_replica("lagging", 0, 1).unwrap();
    let config = ProducerConfig::new().acks(Acks::Leader);
    let p = broker.producer_with_config::<(), u64>(config).unwrap();
    for v in 0..10 {
        p.send(Record::new("lagging", v)).unwrap();
    }
    for r in [1, 2, 0] {
        faults.crash_replica("leaderless", 0, r).unwrap();
    }
    let sets = broker.replication().sets();
    for t in ["lagging", "leaderless"] {
        broker.delete_topic(t).unwrap();
    }
    let gone = |what: &str| {
        for d in &dirs {
            for t in ["lagging", "leaderless"] {
                let meta = d.join(format!("{t}.replicas"));
                assert!(!fs.exists(&meta).unwrap(), "{what}: {meta:?}");
                let part = d.join(format!("{t}-0"));
                assert!(!fs.exists(&part).unwrap(), "{what}: {part:?}");
            }
        }
    };
    gone("deleted");
    clock.advance(Duration::from_secs(3600));
    for s in &sets {
        s.check_isr(clock.now_ms());
    }
    gone("a lagging follower after the delete");
    for s in &sets {
        s.restart(0, false);
    }
    gone("a restart after the delete");
    broker.close().unwrap();
}
