//! Consumer groups through the public API: subscriptions, generations, eager and
//! cooperative rebalances, listeners, eviction, static members, auto-commit, describe /
//! list / delete, push-style members, and every error path of issue 13.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use logbus::broker::{Broker, TopicConfig, TopicPartition};
use logbus::consumer::{Consumer, ConsumerConfig, OffsetReset};
use logbus::group::{
    CooperativeStickyAssignor, GroupState, MemberSubscription, PartitionAssignor,
    RebalanceListener, RoundRobinAssignor, StickyAssignor,
};
use logbus::producer::Record;
use logbus::{ConsumerRecord, Error, ManualClock};

const T0: i64 = 1_700_000_000_000;
const Z: Duration = Duration::ZERO;

fn broker() -> (Broker, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(T0));
    (
        Broker::builder().clock(clock.clone()).build().unwrap(),
        clock,
    )
}

fn tp(topic: &str, p: u32) -> TopicPartition {
    TopicPartition::new(topic, p)
}

fn cfg(group: &str, client: &str) -> ConsumerConfig {
    ConsumerConfig::new()
        .group_id(group)
        .client_id(client)
        .auto_offset_reset(OffsetReset::Earliest)
}

fn produce(b: &Broker, topic: &'static str, partitions: u32, per_partition: u64) {
    let p = b.producer::<(), u64>();
    for i in 0..per_partition {
        for part in 0..partitions {
            p.send(Record::new(topic, i).partition(part)).unwrap();
        }
    }
}

fn sorted(mut v: Vec<TopicPartition>) -> Vec<TopicPartition> {
    v.sort();
    v
}

/// Polls every consumer (in order) until none has anything left to do for the group.
fn settle(consumers: &mut [&mut Consumer<(), u64>]) {
    for _ in 0..6 {
        for c in consumers.iter_mut() {
            c.poll(Z).unwrap();
        }
    }
}

/// Records every callback, as `(kind, partitions)`.
type Event = (&'static str, Vec<TopicPartition>);

#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<Event>>>);

impl Log {
    fn take(&self) -> Vec<Event> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

impl RebalanceListener<(), u64> for Log {
    fn on_partitions_revoked(&mut self, _: &mut Consumer<(), u64>, p: &[TopicPartition]) {
        self.0.lock().unwrap().push(("revoked", sorted(p.to_vec())));
    }
    fn on_partitions_assigned(&mut self, _: &mut Consumer<(), u64>, p: &[TopicPartition]) {
        self.0
            .lock()
            .unwrap()
            .push(("assigned", sorted(p.to_vec())));
    }
    fn on_partitions_lost(&mut self, _: &mut Consumer<(), u64>, p: &[TopicPartition]) {
        self.0.lock().unwrap().push(("lost", sorted(p.to_vec())));
    }
}

#[test]
fn one_member_gets_every_partition_and_reads() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(3)).unwrap();
    produce(&b, "t", 3, 2);
    let mut c = b.consumer::<(), u64>(cfg("g", "a")).unwrap();
    c.subscribe(&["t"]).unwrap();
    assert_eq!(c.generation(), Some(0));
    assert_eq!(c.member_id(), Some("a-000000"));
    let got = c.poll(Z).unwrap();
    assert_eq!(got.len(), 6);
    assert_eq!(sorted(c.assignment()), [tp("t", 0), tp("t", 1), tp("t", 2)]);
    assert_eq!(c.generation(), Some(1));
    assert_eq!(c.subscription(), ["t"]);
}

#[test]
fn two_members_split_as_kafkas_range_assignor() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(3)).unwrap();
    let mut a = b.consumer::<(), u64>(cfg("g", "a")).unwrap();
    let mut c = b.consumer::<(), u64>(cfg("g", "c")).unwrap();
    a.subscribe(&["t"]).unwrap();
    c.subscribe(&["t"]).unwrap();
    settle(&mut [&mut a, &mut c]);
    // Member ids "a-000000" < "c-000001": range gives the first member the extra one.
    assert_eq!(sorted(a.assignment()), [tp("t", 0), tp("t", 1)]);
    assert_eq!(c.assignment(), [tp("t", 2)]);
    assert_eq!(a.generation(), c.generation());
    // The same as the pure assignor on the same inputs.
    let subs = BTreeMap::from([
        ("a-000000".to_string(), MemberSubscription::new(["t"])),
        ("c-000001".to_string(), MemberSubscription::new(["t"])),
    ]);
    let pure = logbus::group::RangeAssignor.assign(&BTreeMap::from([("t".into(), 3)]), &subs);
    assert_eq!(pure["a-000000"], a.assignment());
}

#[test]
fn eager_revokes_everything_then_assigns() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(4)).unwrap();
    let log = Log::default();
    let mut a = b.consumer::<(), u64>(cfg("g", "a")).unwrap();
    a.subscribe_with_listener(&["t"], log.clone()).unwrap();
    a.poll(Z).unwrap();
    assert_eq!(
        log.take(),
        [(
            "assigned",
            vec![tp("t", 0), tp("t", 1), tp("t", 2), tp("t", 3)]
        )]
    );
    let mut c = b.consumer::<(), u64>(cfg("g", "c")).unwrap();
    c.subscribe(&["t"]).unwrap();
    // The rebalance waits for `a` to rejoin: `c` gets nothing until then.
    c.poll(Z).unwrap();
    assert!(c.assignment().is_empty());
    assert_eq!(
        b.describe_group("g").unwrap().state,
        GroupState::PreparingRebalance
    );
    a.poll(Z).unwrap();
    assert_eq!(
        log.take(),
        [
            (
                "revoked",
                vec![tp("t", 0), tp("t", 1), tp("t", 2), tp("t", 3)]
            ),
            ("assigned", vec![tp("t", 0), tp("t", 1)]),
        ]
    );
    c.poll(Z).unwrap();
    assert_eq!(sorted(c.assignment()), [tp("t", 2), tp("t", 3)]);
    assert_eq!(b.describe_group("g").unwrap().state, GroupState::Stable);
    assert_eq!(b.describe_group("g").unwrap().generation, 2);
}

#[test]
fn cooperative_revokes_only_what_moves_and_keeps_reading_the_rest() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(4)).unwrap();
    let coop = |client: &str| cfg("g", client).assignor(CooperativeStickyAssignor);
    let log = Log::default();
    let mut a = b.consumer::<(), u64>(coop("a")).unwrap();
    a.subscribe_with_listener(&["t"], log.clone()).unwrap();
    a.poll(Z).unwrap();
    log.take();
    let mut c = b.consumer::<(), u64>(coop("c")).unwrap();
    c.subscribe(&["t"]).unwrap();
    produce(&b, "t", 4, 1);
    // `a` rejoins keeping all four, the first round takes two from it (withheld from `c`
    // until `a` let them go), and it reads the two it keeps in the same poll, while the
    // group still owes `c` its partitions.
    let got = a.poll(Z).unwrap();
    assert_eq!(got.len(), 2);
    assert!(c.assignment().is_empty());
    assert_eq!(
        b.describe_group("g").unwrap().state,
        GroupState::PreparingRebalance
    );
    settle(&mut [&mut a, &mut c]);
    let events = log.take();
    // Two partitions moved: revoked once, never re-assigned to `a`.
    let revoked: Vec<_> = events.iter().filter(|e| e.0 == "revoked").collect();
    assert_eq!(revoked.len(), 1);
    assert_eq!(revoked[0].1.len(), 2);
    for moved in &revoked[0].1 {
        assert!(c.assignment().contains(moved));
        assert!(!a.assignment().contains(moved));
    }
    assert_eq!(a.assignment().len(), 2);
    assert_eq!(c.assignment().len(), 2);
    // Two rounds: the withheld partitions go to `c` in the second.
    assert_eq!(b.describe_group("g").unwrap().generation, 3);
    assert_eq!(
        b.describe_group("g").unwrap().protocol,
        logbus::group::RebalanceProtocol::Cooperative
    );
}

#[test]
fn a_closed_member_s_partitions_resume_from_the_group_s_commit() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(2)).unwrap();
    let mut a = b
        .consumer::<(), u64>(cfg("g", "a").enable_auto_commit(false).max_poll_records(3))
        .unwrap();
    let mut c = b
        .consumer::<(), u64>(cfg("g", "c").enable_auto_commit(false))
        .unwrap();
    a.subscribe(&["t"]).unwrap();
    c.subscribe(&["t"]).unwrap();
    settle(&mut [&mut a, &mut c]);
    produce(&b, "t", 2, 10);
    assert_eq!(a.assignment(), [tp("t", 0)]);
    let first = a.poll(Z).unwrap();
    assert_eq!(first.len(), 3);
    a.commit_sync().unwrap();
    a.poll(Z).unwrap(); // read 3 more, not committed
    drop(a);
    let mut seen = Vec::new();
    for _ in 0..4 {
        for r in c.poll(Z).unwrap() {
            if r.partition == 0 {
                seen.push(r.offset);
            }
        }
    }
    assert_eq!(seen, (3..10).collect::<Vec<_>>()); // from the commit: 3..6 again
}

#[test]
fn auto_commit_commits_on_close_and_before_revocation() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(2)).unwrap();
    produce(&b, "t", 2, 5);
    let mut a = b.consumer::<(), u64>(cfg("g", "a")).unwrap();
    a.subscribe(&["t"]).unwrap();
    assert_eq!(a.poll(Z).unwrap().len(), 10);
    let mut c = b.consumer::<(), u64>(cfg("g", "c")).unwrap();
    c.subscribe(&["t"]).unwrap();
    a.poll(Z).unwrap(); // rejoin: auto-commit first
    assert_eq!(a.committed(&tp("t", 0)).unwrap(), Some(5));
    assert_eq!(a.committed(&tp("t", 1)).unwrap(), Some(5));
    produce(&b, "t", 2, 1);
    settle(&mut [&mut a, &mut c]);
    a.poll(Z).unwrap();
    let mine = a.assignment();
    drop(a); // commit on close
    assert_eq!(c.committed(&mine[0]).unwrap(), Some(6));
}

#[test]
fn auto_commit_by_interval_on_the_broker_clock() {
    let (b, clock) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(1)).unwrap();
    produce(&b, "t", 1, 3);
    let mut a = b
        .consumer::<(), u64>(cfg("g", "a").auto_commit_interval(Duration::from_secs(5)))
        .unwrap();
    a.subscribe(&["t"]).unwrap();
    assert_eq!(a.poll(Z).unwrap().len(), 3);
    a.poll(Z).unwrap();
    assert_eq!(a.committed(&tp("t", 0)).unwrap(), None);
    clock.advance(Duration::from_secs(5));
    a.poll(Z).unwrap();
    assert_eq!(a.committed(&tp("t", 0)).unwrap(), Some(3));
}

#[test]
fn auto_commit_keeps_block_producers_going_with_the_default_interval() {
    // Capacity 8, default 5 s interval on a clock that never moves: without the
    // half-capacity commit the producer would wait forever after 8 records.
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(1).records_in_memory(8))
        .unwrap();
    let mut a = b.consumer::<(), u64>(cfg("g", "a")).unwrap();
    a.subscribe(&["t"]).unwrap();
    a.poll(Z).unwrap(); // registers the group's gate
    let producer = {
        let b = b.clone();
        std::thread::spawn(move || produce(&b, "t", 1, 1000))
    };
    let mut next = 0;
    while next < 1000 {
        for r in a.poll(Duration::from_millis(50)).unwrap() {
            assert_eq!(r.value, next);
            next += 1;
        }
    }
    producer.join().unwrap();
}

/// Kafka's `onLeavePrepare`: a member that closes after the group evicted it (and before
/// a poll told it so) no longer owns its partitions: they are reported lost, not revoked.
#[test]
fn closing_after_an_unnoticed_eviction_reports_the_partitions_lost() {
    let (b, clock) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(2)).unwrap();
    let short = |c: &str| cfg("g", c).max_poll_interval(Duration::from_secs(10));
    let log = Log::default();
    let mut a = b.consumer::<(), u64>(short("a")).unwrap();
    let mut c = b.consumer::<(), u64>(short("c")).unwrap();
    a.subscribe_with_listener(&["t"], log.clone()).unwrap();
    c.subscribe(&["t"]).unwrap();
    settle(&mut [&mut a, &mut c]);
    log.take();
    clock.advance(Duration::from_secs(6));
    c.poll(Z).unwrap();
    clock.advance(Duration::from_secs(5));
    c.poll(Z).unwrap(); // evicts `a`, which has not polled since
    assert_eq!(c.assignment().len(), 2);
    drop(a);
    assert_eq!(log.take(), [("lost", vec![tp("t", 0)])]);
    // A member still in the group revokes on close, as before.
    let log = Log::default();
    let mut d = b.consumer::<(), u64>(short("d")).unwrap();
    d.subscribe_with_listener(&["t"], log.clone()).unwrap();
    settle(&mut [&mut c, &mut d]);
    let held = sorted(d.assignment());
    assert!(!held.is_empty());
    log.take();
    d.close();
    assert_eq!(log.take(), [("revoked", held)]);
}

#[test]
fn eviction_for_not_polling_fences_commits_with_both_generations() {
    let (b, clock) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(2)).unwrap();
    let short = |c: &str| cfg("g", c).max_poll_interval(Duration::from_secs(10));
    let log = Log::default();
    let mut a = b.consumer::<(), u64>(short("a")).unwrap();
    let mut c = b.consumer::<(), u64>(short("c")).unwrap();
    a.subscribe_with_listener(&["t"], log.clone()).unwrap();
    c.subscribe(&["t"]).unwrap();
    settle(&mut [&mut a, &mut c]);
    assert_eq!(a.generation(), Some(2)); // 1: `a` alone, 2: with `c`
    log.take();
    clock.advance(Duration::from_secs(6));
    c.poll(Z).unwrap();
    clock.advance(Duration::from_secs(5));
    c.poll(Z).unwrap(); // evicts `a` (silent for 11 s), takes both partitions in generation 3
    assert_eq!(c.assignment().len(), 2);
    assert_eq!(c.generation(), Some(3));
    match a.commit_sync() {
        Err(Error::StaleGeneration {
            group,
            member,
            member_generation,
            group_generation,
        }) => {
            assert_eq!((group.as_str(), member.as_str()), ("g", "a-000000"));
            assert_eq!((member_generation, group_generation), (2, 3));
        }
        other => panic!("expected StaleGeneration, got {other:?}"),
    }
    assert!(matches!(
        a.commit_offsets(&[(tp("t", 0), 0)]),
        Err(Error::StaleGeneration { .. })
    ));
    // Its next poll: the partitions are lost, it rejoins as a new member.
    a.poll(Z).unwrap();
    assert_eq!(log.take()[0], ("lost", vec![tp("t", 0)]));
    assert_eq!(a.member_id(), Some("a-000002"));
    settle(&mut [&mut a, &mut c]);
    assert_eq!(a.assignment().len() + c.assignment().len(), 2);
    assert!(a.commit_sync().is_ok());
}

#[test]
fn added_partitions_and_new_matching_topics_rebalance() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("orders-eu", TopicConfig::new(1))
        .unwrap();
    b.create_topic::<(), String>("orders-typed", TopicConfig::new(1))
        .unwrap();
    let mut a = b.consumer::<(), u64>(cfg("g", "a")).unwrap();
    a.subscribe_pattern("orders-*").unwrap();
    a.poll(Z).unwrap();
    assert_eq!(a.assignment(), [tp("orders-eu", 0)]); // the other types are not matched
    b.add_partitions("orders-eu", 2).unwrap();
    a.poll(Z).unwrap();
    assert_eq!(
        sorted(a.assignment()),
        [tp("orders-eu", 0), tp("orders-eu", 1)]
    );
    b.create_topic::<(), u64>("orders-us", TopicConfig::new(1))
        .unwrap();
    b.create_topic::<(), u64>("payments", TopicConfig::new(1))
        .unwrap();
    a.poll(Z).unwrap();
    assert_eq!(a.assignment().len(), 3);
    assert_eq!(a.subscription(), ["orders-eu", "orders-us"]);
    b.delete_topic("orders-us").unwrap();
    a.poll(Z).unwrap();
    assert_eq!(a.assignment().len(), 2);
    // An explicit subscription to a topic created later.
    let mut c = b.consumer::<(), u64>(cfg("h", "c")).unwrap();
    c.subscribe(&["later"]).unwrap();
    c.poll(Z).unwrap();
    assert!(c.assignment().is_empty());
    b.create_topic::<(), u64>("later", TopicConfig::new(2))
        .unwrap();
    c.poll(Z).unwrap();
    assert_eq!(c.assignment().len(), 2);
}

#[test]
fn subscribe_again_and_unsubscribe_rebalance() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("x", TopicConfig::new(1)).unwrap();
    b.create_topic::<(), u64>("y", TopicConfig::new(1)).unwrap();
    let mut a = b.consumer::<(), u64>(cfg("g", "a")).unwrap();
    let mut c = b.consumer::<(), u64>(cfg("g", "c")).unwrap();
    a.subscribe(&["x"]).unwrap();
    c.subscribe(&["x"]).unwrap();
    settle(&mut [&mut a, &mut c]);
    a.subscribe(&["x", "y"]).unwrap();
    settle(&mut [&mut a, &mut c]);
    assert_eq!(sorted(a.assignment()), [tp("x", 0), tp("y", 0)]);
    a.unsubscribe();
    assert!(a.assignment().is_empty());
    assert_eq!(a.member_id(), None);
    settle(&mut [&mut c]);
    assert_eq!(c.assignment(), [tp("x", 0)]);
    // Subscribing to nothing is unsubscribing; assign works again after.
    c.subscribe::<&str>(&[]).unwrap();
    c.assign(&[tp("y", 0)]).unwrap();
    assert_eq!(b.describe_group("g").unwrap().state, GroupState::Empty);
}

#[test]
fn static_members_come_back_to_their_partitions_without_a_rebalance() {
    let (b, clock) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(4)).unwrap();
    let stat = |client: &str, inst: &str| {
        cfg("g", client)
            .group_instance_id(inst)
            .max_poll_interval(Duration::from_secs(30))
    };
    let mut a = b.consumer::<(), u64>(stat("a", "w1")).unwrap();
    let mut c = b.consumer::<(), u64>(stat("c", "w2")).unwrap();
    a.subscribe(&["t"]).unwrap();
    c.subscribe(&["t"]).unwrap();
    settle(&mut [&mut a, &mut c]);
    assert_eq!(a.member_id(), Some("w1-000000"));
    let before = sorted(a.assignment());
    let generation = b.describe_group("g").unwrap().generation;
    // A second consumer with the same instance id while `a` is open is refused.
    let mut dup = b.consumer::<(), u64>(stat("d", "w1")).unwrap();
    assert!(matches!(
        dup.subscribe(&["t"]),
        Err(Error::DuplicateInstanceId { ref instance, .. }) if instance == "w1"
    ));
    drop(dup);
    drop(a);
    c.poll(Z).unwrap();
    let d = b.describe_group("g").unwrap();
    assert_eq!(d.generation, generation);
    assert!(d.members.iter().any(|m| m.departed));
    let mut back = b.consumer::<(), u64>(stat("a2", "w1")).unwrap();
    back.subscribe(&["t"]).unwrap();
    back.poll(Z).unwrap();
    assert_eq!(sorted(back.assignment()), before);
    assert_eq!(b.describe_group("g").unwrap().generation, generation);
    // Gone for longer than its session: evicted, the group rebalances.
    drop(back);
    clock.advance(Duration::from_secs(31));
    c.poll(Z).unwrap();
    c.poll(Z).unwrap();
    assert_eq!(c.assignment().len(), 4);
}

#[test]
fn describe_list_and_delete() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(2)).unwrap();
    produce(&b, "t", 2, 10);
    let mut a = b
        .consumer::<(), u64>(cfg("g", "a").enable_auto_commit(false).max_poll_records(4))
        .unwrap();
    a.subscribe(&["t"]).unwrap();
    a.poll(Z).unwrap();
    a.commit_sync().unwrap();
    let d = b.describe_group("g").unwrap();
    assert_eq!(d.state, GroupState::Stable);
    assert_eq!(d.assignor.as_deref(), Some("range"));
    assert_eq!(d.generation, 1);
    assert_eq!(d.members.len(), 1);
    assert_eq!(d.members[0].client_id, "a");
    let lag: Vec<_> = d
        .partitions
        .iter()
        .map(|p| {
            (
                p.partition.partition,
                p.committed,
                p.log_end,
                p.lag,
                p.owner.clone(),
            )
        })
        .collect();
    let owner = Some("a-000000".to_string());
    // Four records read from the first partition polled.
    let read0 = a.position(&tp("t", 0)).unwrap();
    let read1 = a.position(&tp("t", 1)).unwrap();
    assert_eq!(read0 + read1, 4);
    assert_eq!(
        lag,
        [
            (0, Some(read0), 10, Some(10 - read0), owner.clone()),
            (1, Some(read1), 10, Some(10 - read1), owner)
        ]
    );
    assert_eq!(d.total_lag(), 16);
    let table = d.to_string();
    assert!(table.contains("LOG-END-OFFSET"), "{table}");
    let listed = b.list_groups();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].group.as_str(), listed[0].members), ("g", 1));
    // Delete: refused while a member is open; unknown groups are errors.
    assert!(matches!(
        b.delete_group("g"),
        Err(Error::GroupNotEmpty { members: 1, .. })
    ));
    assert!(matches!(
        b.describe_group("nope"),
        Err(Error::UnknownGroup { .. })
    ));
    assert!(matches!(
        b.delete_group("nope"),
        Err(Error::UnknownGroup { .. })
    ));
    drop(a);
    assert_eq!(b.describe_group("g").unwrap().state, GroupState::Empty);
    b.delete_group("g").unwrap();
    assert!(matches!(
        b.describe_group("g"),
        Err(Error::UnknownGroup { .. })
    ));
    assert!(b.list_groups().is_empty());
}

#[test]
fn error_paths() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(1)).unwrap();
    b.create_topic::<(), String>("s", TopicConfig::new(1))
        .unwrap();
    // No group id.
    let mut n = b.consumer::<(), u64>(ConsumerConfig::new()).unwrap();
    assert!(matches!(n.subscribe(&["t"]), Err(Error::NoGroupId { .. })));
    assert!(matches!(
        n.subscribe_pattern("t*"),
        Err(Error::NoGroupId { .. })
    ));
    let mut c = b.consumer::<(), u64>(cfg("g", "a")).unwrap();
    // Invalid names and patterns.
    assert!(matches!(
        c.subscribe(&["bad name"]),
        Err(Error::InvalidTopicName { .. })
    ));
    assert!(matches!(
        c.subscribe(&[".."]),
        Err(Error::InvalidTopicName { .. })
    ));
    assert!(matches!(
        c.subscribe_pattern("a|b"),
        Err(Error::InvalidPattern { .. })
    ));
    assert!(matches!(
        c.subscribe_pattern(""),
        Err(Error::InvalidPattern { .. })
    ));
    // Types.
    assert!(matches!(
        c.subscribe(&["s"]),
        Err(Error::TypeMismatch { .. })
    ));
    // Assign and subscribe are exclusive.
    c.assign(&[tp("t", 0)]).unwrap();
    assert!(matches!(
        c.subscribe(&["t"]),
        Err(Error::SubscriptionConflict {
            operation: "subscribe",
            ..
        })
    ));
    c.unsubscribe();
    c.subscribe(&["t"]).unwrap();
    assert!(matches!(
        c.assign(&[tp("t", 0)]),
        Err(Error::SubscriptionConflict {
            operation: "assign",
            ..
        })
    ));
    // Another assignor while the group has members.
    let mut rr = b
        .consumer::<(), u64>(cfg("g", "r").assignor(RoundRobinAssignor))
        .unwrap();
    match rr.subscribe(&["t"]) {
        Err(Error::InconsistentGroupProtocol {
            current, requested, ..
        }) => assert_eq!(
            (current.as_str(), requested.as_str()),
            ("range", "roundrobin")
        ),
        other => panic!("{other:?}"),
    }
    // Configs.
    for bad in [
        cfg("g", "x").max_poll_interval(Duration::ZERO),
        cfg("g", "x").group_instance_id(""),
    ] {
        assert!(matches!(
            b.consumer::<(), u64>(bad),
            Err(Error::InvalidConfig { .. })
        ));
    }
    // Poll inside a listener.
    struct Repoll(Arc<Mutex<Option<String>>>);
    impl RebalanceListener<(), u64> for Repoll {
        fn on_partitions_assigned(&mut self, c: &mut Consumer<(), u64>, _: &[TopicPartition]) {
            let e = c.poll(Z).err().map(|e| e.to_string());
            *self.0.lock().unwrap() = e;
        }
    }
    let seen = Arc::new(Mutex::new(None));
    let mut l = b.consumer::<(), u64>(cfg("h", "l")).unwrap();
    l.subscribe_with_listener(&["t"], Repoll(seen.clone()))
        .unwrap();
    l.poll(Z).unwrap();
    assert!(seen
        .lock()
        .unwrap()
        .as_deref()
        .is_some_and(|e| e.contains("listener")));
    // A group deleted under a subscribed consumer (after its members closed? No: deletion
    // is refused while it is open, so delete an empty group and re-subscribe).
    drop(l);
    b.delete_group("h").unwrap();
}

#[test]
fn a_commit_in_on_partitions_revoked_is_accepted_and_seen_by_the_next_owner() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(1)).unwrap();
    produce(&b, "t", 1, 5);
    struct Commit;
    impl RebalanceListener<(), u64> for Commit {
        fn on_partitions_revoked(&mut self, c: &mut Consumer<(), u64>, _: &[TopicPartition]) {
            c.commit_sync().unwrap();
        }
    }
    for assignor in ["sticky", "cooperative-sticky"] {
        let group = format!("g-{assignor}");
        let mk = |client: &str| {
            let c = cfg(&group, client).enable_auto_commit(false);
            if assignor == "sticky" {
                c.assignor(StickyAssignor)
            } else {
                c.assignor(CooperativeStickyAssignor)
            }
        };
        // `z` sorts after `a`, and the sticky assignors would keep the partition with
        // `z`; unsubscribe moves it for sure.
        let mut z = b.consumer::<(), u64>(mk("z")).unwrap();
        z.subscribe_with_listener(&["t"], Commit).unwrap();
        assert_eq!(z.poll(Z).unwrap().len(), 5);
        let mut a = b.consumer::<(), u64>(mk("a")).unwrap();
        a.subscribe(&["t"]).unwrap();
        settle(&mut [&mut z, &mut a]);
        z.unsubscribe();
        settle(&mut [&mut a]);
        assert_eq!(a.assignment(), [tp("t", 0)]);
        assert_eq!(a.position(&tp("t", 0)).unwrap(), 5);
    }
}

#[test]
fn a_plugged_in_assignor_is_used_and_cannot_break_ownership() {
    /// Gives every partition to every member: the coordinator hands each to one only.
    struct Greedy;
    impl PartitionAssignor for Greedy {
        fn name(&self) -> &str {
            "greedy"
        }
        fn assign(
            &self,
            partitions: &BTreeMap<String, u32>,
            subs: &BTreeMap<String, MemberSubscription>,
        ) -> BTreeMap<String, Vec<TopicPartition>> {
            let all: Vec<_> = partitions
                .iter()
                .flat_map(|(t, n)| (0..*n).map(move |p| TopicPartition::new(t.as_str(), p)))
                .chain([TopicPartition::new("t", 99), TopicPartition::new("zzz", 0)])
                .collect();
            subs.keys().map(|m| (m.clone(), all.clone())).collect()
        }
    }
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(3)).unwrap();
    let mut a = b
        .consumer::<(), u64>(cfg("g", "a").assignor(Greedy))
        .unwrap();
    let mut c = b
        .consumer::<(), u64>(cfg("g", "c").assignor(Greedy))
        .unwrap();
    a.subscribe(&["t"]).unwrap();
    c.subscribe(&["t"]).unwrap();
    settle(&mut [&mut a, &mut c]);
    assert_eq!(
        b.describe_group("g").unwrap().assignor.as_deref(),
        Some("greedy")
    );
    assert_eq!(a.assignment().len(), 3);
    assert!(c.assignment().is_empty());
}

#[test]
fn push_members_process_at_least_once_and_report_panics_without_losing_positions() {
    let b = Broker::in_memory();
    b.create_topic::<(), u64>("t", TopicConfig::new(2)).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let bad = b
        .subscribe_with("g", &["t"], move |r: &ConsumerRecord<(), u64>| {
            if r.value == 7 {
                panic!("value seven");
            }
            s.lock().unwrap().push((r.partition, r.value));
        })
        .unwrap();
    produce(&b, "t", 2, 10);
    // The panicking member stops by itself.
    while !bad.is_finished() {
        std::thread::sleep(Duration::from_millis(1));
    }
    match bad.stop() {
        Err(Error::CallbackPanicked {
            offset, message, ..
        }) => {
            assert_eq!(offset, 7);
            assert_eq!(message, "value seven");
        }
        other => panic!("expected CallbackPanicked, got {other:?}"),
    }
    // A healthy member takes over from the commits: 7 (and after) are delivered again.
    let s = seen.clone();
    let good = b
        .subscribe_with("g", &["t"], move |r: &ConsumerRecord<(), u64>| {
            s.lock().unwrap().push((r.partition, r.value));
        })
        .unwrap();
    loop {
        let v = seen.lock().unwrap().clone();
        let complete = (0..2).all(|p| (0..10).all(|x| v.contains(&(p, x))));
        if complete {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let report = good.stop().unwrap();
    assert!(report.records >= 3);
    assert!(report.commits >= 1);
    let c = b.consumer::<(), u64>(cfg("g", "check")).unwrap();
    assert_eq!(c.committed(&tp("t", 0)).unwrap(), Some(10));
    assert_eq!(c.committed(&tp("t", 1)).unwrap(), Some(10));
}

#[test]
fn a_panicking_listener_panics_that_poll_and_the_consumer_carries_on() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(2)).unwrap();
    produce(&b, "t", 2, 3);
    struct Boom(bool);
    impl RebalanceListener<(), u64> for Boom {
        fn on_partitions_assigned(&mut self, _: &mut Consumer<(), u64>, _: &[TopicPartition]) {
            if !self.0 {
                self.0 = true;
                panic!("listener fails once");
            }
        }
    }
    let mut c = b.consumer::<(), u64>(cfg("g", "a")).unwrap();
    c.subscribe_with_listener(&["t"], Boom(false)).unwrap();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.poll(Z)));
    assert!(caught.is_err());
    // The next poll finishes taking the assignment and reads.
    assert_eq!(c.poll(Z).unwrap().len(), 6);
    assert_eq!(c.assignment().len(), 2);
    assert_eq!(b.describe_group("g").unwrap().state, GroupState::Stable);
}

#[test]
fn a_push_member_stops_on_an_error_that_would_repeat_and_reports_it() {
    let b = Broker::in_memory();
    b.create_topic::<(), u64>("t", TopicConfig::new(1)).unwrap();
    let config = ConsumerConfig::new()
        .group_id("g")
        .auto_offset_reset(OffsetReset::None);
    let member = b
        .subscribe_with_config(config, &["t"], |_: &ConsumerRecord<(), u64>| {})
        .unwrap();
    while !member.is_finished() {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(matches!(
        member.stop(),
        Err(Error::NoOffsetForPartition { partition: 0, .. })
    ));
    // It left the group.
    assert!(b.describe_group("g").unwrap().members.is_empty());
    assert!(matches!(
        b.subscribe_with_config(
            ConsumerConfig::new(),
            &["t"],
            |_: &ConsumerRecord<(), u64>| {}
        ),
        Err(Error::NoGroupId { .. })
    ));
}

/// A broker whose empty groups hold producers back for 60 s of its manual clock, with a
/// `Block` topic `t` of one partition keeping 16 records in memory.
fn expiring_broker() -> (Broker, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(T0));
    let b = Broker::builder()
        .clock(clock.clone())
        .empty_group_timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    b.create_topic::<(), u64>("t", TopicConfig::new(1).records_in_memory(16))
        .unwrap();
    (b, clock)
}

/// Whether a send to `t` times out (held back by a gate) after waiting a little.
fn held_back(p: &logbus::Producer<(), u64>, v: u64) -> bool {
    match p.send_timeout(Record::new("t", v), Duration::from_millis(30)) {
        Err(e) => {
            assert!(matches!(e.into_error(), Error::Timeout { .. }));
            true
        }
        Ok(_) => false,
    }
}

/// Kafka never blocks a producer on a consumer: a group whose only consumer was dropped
/// holds the producers of a `Block` topic back for the broker's empty-group timeout only
/// (on the broker's clock). A producer already parked on the group's gate notices the
/// timeout itself and proceeds; what the group then misses is counted: in the topic's
/// description (overwritten unread), in the group's (`missed`, `expired`), and as skipped
/// by its consumer when it comes back, which holds producers back again from there.
#[test]
fn an_abandoned_group_stops_holding_producers_after_the_empty_group_timeout() {
    let (b, clock) = expiring_broker();
    let p = b.producer::<(), u64>();
    let mut c = b
        .consumer::<(), u64>(cfg("g", "c1").enable_auto_commit(false))
        .unwrap();
    c.assign(&[tp("t", 0)]).unwrap();
    for i in 0..10 {
        p.send(Record::new("t", i)).unwrap();
    }
    let mut got = Vec::new();
    assert_eq!(c.poll_with(4, Z, |r| got.push(r.to_record())).unwrap(), 4);
    c.commit_sync().unwrap();
    drop(c);
    // The gate at 4 leaves room up to 20.
    for i in 10..20 {
        p.send(Record::new("t", i)).unwrap();
    }
    assert!(p.try_send(Record::new("t", 20)).is_err());
    // A producer parked on the gate until the group expires.
    let parked = std::thread::spawn({
        let b = b.clone();
        move || {
            let p = b.producer::<(), u64>();
            for i in 20..120 {
                p.send(Record::new("t", i)).unwrap();
            }
        }
    });
    clock.advance(Duration::from_secs(59));
    assert!(held_back(&p, 999));
    assert_eq!(b.describe_topic("t").unwrap().partitions[0].log_end, 20);
    assert!(!b.describe_group("g").unwrap().expired);
    clock.advance(Duration::from_secs(1));
    // Nobody else looks: the parked producer notices the timeout by itself.
    parked.join().unwrap();
    let d = b.describe_topic("t").unwrap().partitions[0];
    assert_eq!((d.log_start, d.log_end), (104, 120));
    // 4..104: never committed by the group, overwritten once it let go.
    assert_eq!(d.overwritten_unread, 100);
    let g = b.describe_group("g").unwrap();
    assert!(g.expired);
    assert_eq!(
        (g.partitions[0].committed, g.partitions[0].missed),
        (Some(4), 100)
    );

    // The group comes back: it resumes at its committed offset, which is gone, and says so.
    let mut c = b
        .consumer::<(), u64>(cfg("g", "c2").enable_auto_commit(false))
        .unwrap();
    c.assign(&[tp("t", 0)]).unwrap();
    assert!(!b.describe_group("g").unwrap().expired);
    let mut got = Vec::new();
    while c.poll_with(100, Z, |r| got.push(r.to_record())).unwrap() > 0 {}
    let offsets: Vec<u64> = got.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, (104..120).collect::<Vec<_>>());
    assert_eq!(c.metrics().skipped(&tp("t", 0)), 100);
    // It holds producers back again: from its commit, or from as far as the producer's
    // claim limit taken while nothing held the ring (at most a capacity ahead).
    c.commit_sync().unwrap();
    let mut sent = 0;
    while sent < 100 && !held_back(&p, 120 + sent) {
        sent += 1;
    }
    assert!((16..=32).contains(&sent), "{sent} sent before a gate held");
    got.clear();
    while c.poll_with(100, Z, |r| got.push(r.to_record())).unwrap() > 0 {}
    assert_eq!(got.len() as u64, sent, "none of them overwritten");
    assert_eq!(c.metrics().skipped(&tp("t", 0)), 100);
    assert_eq!(
        b.describe_topic("t").unwrap().partitions[0].overwritten_unread,
        100
    );
}

/// A group with an open consumer never expires, however long it does not commit; and a
/// member leaving and another joining within the timeout (an ordinary rebalance) keeps
/// every record the group had not committed (at-least-once), the timeout starting again
/// only when the group is empty again.
#[test]
fn a_group_with_an_active_member_never_expires() {
    let (b, clock) = expiring_broker();
    let p = b.producer::<(), u64>();
    let mut c1 = b.consumer::<(), u64>(cfg("g", "c1")).unwrap();
    c1.assign(&[tp("t", 0)]).unwrap();
    for i in 0..16 {
        p.send(Record::new("t", i)).unwrap();
    }
    clock.advance(Duration::from_secs(24 * 3600));
    assert!(held_back(&p, 16));
    assert!(!b.describe_group("g").unwrap().expired);
    // c1 leaves; c2 joins within the timeout.
    drop(c1);
    clock.advance(Duration::from_secs(59));
    assert!(held_back(&p, 16));
    let mut c2 = b
        .consumer::<(), u64>(cfg("g", "c2").enable_auto_commit(false))
        .unwrap();
    clock.advance(Duration::from_secs(24 * 3600));
    assert!(held_back(&p, 16));
    c2.assign(&[tp("t", 0)]).unwrap();
    let mut got = Vec::new();
    while c2.poll_with(100, Z, |r| got.push(r.to_record())).unwrap() > 0 {}
    assert_eq!(got.len(), 16, "every record the group had not committed");
    assert_eq!(c2.metrics().total_skipped(), 0);
    // Empty again: held back for the timeout from now, then let go.
    drop(c2);
    clock.advance(Duration::from_secs(59));
    assert!(held_back(&p, 16));
    clock.advance(Duration::from_secs(1));
    assert!(!held_back(&p, 16));
    assert!(b.describe_group("g").unwrap().expired);
    assert_eq!(
        b.describe_topic("t").unwrap().partitions[0].overwritten_unread,
        1
    );
}
