//! Committed group offsets on replicated persisted topics survive a reopen: the broker's
//! offsets checkpoint holds them as it holds a single-copy topic's (a replicated topic's
//! partitions once never reached it, and every group's offsets there were lost at close).

use crate::replicas_adversarial_common;

use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::persist::PersistConfig;
use logbus::storage::fault::FaultyIo;
use logbus::{Broker, TopicConfig, TopicPartition};
use replicas_adversarial_common::*;

/// A single-copy topic next to the replicated `T`.
const SINGLE: &str = "single";
const GROUPS: [&str; 3] = ["billing", "audit", "search"];

/// `T` (2 partitions, replication factor 3) and `SINGLE` (2 partitions, one copy), 100
/// records in each partition.
fn create_topics(broker: &Broker) {
    broker
        .create_topic::<(), u64>(T, config(2).persist(PersistConfig::new()))
        .unwrap();
    broker
        .create_topic::<(), u64>(SINGLE, TopicConfig::new(2).persist(PersistConfig::new()))
        .unwrap();
    let p = producer(broker);
    for topic in [T, SINGLE] {
        for part in 0..2 {
            for v in 0..100u64 {
                p.send(logbus::Record::new(topic, v).partition(part))
                    .unwrap();
            }
        }
    }
    p.flush().unwrap();
}

/// The offset group `g` commits on `(topic, partition)`: distinct per group and partition.
fn offset_of(g: usize, topic: &str, partition: u32) -> u64 {
    let base = if topic == T { 10 } else { 50 };
    base + 7 * g as u64 + 3 * u64::from(partition)
}

fn every_partition() -> Vec<TopicPartition> {
    [T, SINGLE]
        .iter()
        .flat_map(|t| (0..2).map(move |p| TopicPartition::new(*t, p)))
        .collect()
}

fn group_consumer(broker: &Broker, group: &str) -> logbus::Consumer<(), u64> {
    broker
        .consumer::<(), u64>(
            ConsumerConfig::new()
                .group_id(group)
                .auto_offset_reset(OffsetReset::Latest),
        )
        .unwrap()
}

/// Every group commits its own offsets on every partition of both topics.
fn commit_all(broker: &Broker) {
    for (g, group) in GROUPS.iter().enumerate() {
        let mut c = group_consumer(broker, group);
        c.assign(&every_partition()).unwrap();
        let offsets: Vec<_> = every_partition()
            .into_iter()
            .map(|tp| {
                let o = offset_of(g, &tp.topic, tp.partition);
                (tp, o)
            })
            .collect();
        c.commit_offsets(&offsets).unwrap();
        c.close();
    }
}

/// The offsets `commit_all` committed are there: as `committed`, in `describe_group`, and
/// where a new consumer of the group starts reading.
fn assert_committed(broker: &Broker, what: &str) {
    broker.topic::<(), u64>(T).unwrap();
    broker.topic::<(), u64>(SINGLE).unwrap();
    for (g, group) in GROUPS.iter().enumerate() {
        // A group is known to `describe_group` once a consumer of it opened.
        let mut c = group_consumer(broker, group);
        let described = broker.describe_group(group).unwrap();
        c.assign(&every_partition()).unwrap();
        for tp in every_partition() {
            let want = offset_of(g, &tp.topic, tp.partition);
            assert_eq!(
                c.committed(&tp).unwrap(),
                Some(want),
                "{what}: {group} on {tp:?}"
            );
            let lag = described
                .partitions
                .iter()
                .find(|p| p.partition == tp)
                .unwrap_or_else(|| panic!("{what}: {group} describes no {tp:?}"));
            assert_eq!(
                lag.committed,
                Some(want),
                "{what}: {group} describes {tp:?}"
            );
            assert_eq!(
                c.position(&tp).unwrap(),
                want,
                "{what}: {group} starts {tp:?}"
            );
        }
        // The first record a new member reads on partition 0 of `T` is the committed one.
        c.assign(&[TopicPartition::new(T, 0)]).unwrap();
        let got = c.poll(WAIT).unwrap();
        let first = got
            .iter()
            .next()
            .expect("records past the committed offset");
        assert_eq!(first.offset, offset_of(g, T, 0), "{what}: {group} reads");
        c.close();
    }
}

/// Several groups' offsets on a replication-factor-3 topic and a single-copy one survive
/// a close and a reopen, and a second one (the checkpoint written at the second close
/// still holds the offsets restored at the first reopen, none of them committed again).
#[test]
fn committed_offsets_on_a_replicated_topic_survive_close_and_reopen() {
    let (_t, dirs) = tempdirs(3);
    let broker = open(&dirs);
    create_topics(&broker);
    commit_all(&broker);
    assert_committed(&broker, "before the close");
    broker.close().unwrap();
    for round in ["first reopen", "second reopen"] {
        let broker = open(&dirs);
        assert_committed(&broker, round);
        assert!(broker.clamped_offsets().is_empty(), "{round}");
        broker.close().unwrap();
    }
}

/// The checkpoint written while the broker runs (`fsync_and_checkpoint`) holds the
/// replicated topic's offsets: a power loss after it loses none of them, and a commit made
/// after it comes back as itself or as the checkpointed offset, never as nothing.
#[test]
fn committed_offsets_on_a_replicated_topic_survive_a_crash_after_a_checkpoint() {
    let fs = FaultyIo::new(30);
    let dirs = virtual_dirs();
    let broker = open_on(&fs, &dirs);
    create_topics(&broker);
    commit_all(&broker);
    broker.fsync_and_checkpoint().unwrap();
    let later = TopicPartition::new(T, 1);
    let mut c = group_consumer(&broker, "later");
    c.assign(std::slice::from_ref(&later)).unwrap();
    c.commit_offsets(&[(later.clone(), 40)]).unwrap();
    broker.fsync_and_checkpoint().unwrap();
    c.commit_offsets(&[(later.clone(), 90)]).unwrap();
    c.close();
    broker.simulate_process_death();
    drop(broker);
    fs.crash(); // only what was fsynced survives
    let broker = open_on(&fs, &dirs);
    assert_committed(&broker, "after the crash");
    let c = group_consumer(&broker, "later");
    let got = c.committed(&later).unwrap();
    assert!(matches!(got, Some(40 | 90)), "{got:?}");
    c.close();
    broker.close().unwrap();
}

/// A committed offset beyond a replicated partition's recovered end (every replica's
/// records cut after the offset was checkpointed) is clamped to that end and reported, as
/// on a single-copy topic.
#[test]
fn a_committed_offset_beyond_the_recovered_replicated_log_is_clamped_and_reported() {
    let (_t, dirs) = tempdirs(3);
    let broker = open(&dirs);
    create_topics(&broker);
    commit_all(&broker);
    broker.close().unwrap();
    // Every replica of `T`-1 loses its records (its segment emptied).
    for dir in &dirs {
        let part = dir.join(format!("{T}-1"));
        for entry in std::fs::read_dir(&part).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "log") {
                std::fs::File::options()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_len(0)
                    .unwrap();
            }
        }
    }
    let broker = open(&dirs);
    broker.topic::<(), u64>(T).unwrap();
    let end = broker.describe_topic(T).unwrap().partitions[1].log_end;
    let tp = TopicPartition::new(T, 1);
    let mut clamped: Vec<_> = broker
        .clamped_offsets()
        .into_iter()
        .map(|c| (c.group, c.topic, c.partition, c.committed, c.log_end))
        .collect();
    clamped.sort();
    let mut want: Vec<_> = GROUPS
        .iter()
        .enumerate()
        .map(|(g, group)| (group.to_string(), T.to_string(), 1, offset_of(g, T, 1), end))
        .filter(|c| c.3 > end)
        .collect();
    want.sort();
    assert_eq!(clamped, want, "the log end is {end}");
    assert!(
        !want.is_empty(),
        "the log end {end} left no offset to clamp"
    );
    for (g, group) in GROUPS.iter().enumerate() {
        let c = group_consumer(&broker, group);
        let got = c.committed(&tp).unwrap();
        assert_eq!(got, Some(offset_of(g, T, 1).min(end)), "{group}");
        c.close();
    }
    broker.close().unwrap();
}

/// A replicated topic deleted and created again under its name starts with no committed
/// offsets, after a reopen too; offsets committed on the new topic survive.
#[test]
fn a_recreated_replicated_topic_does_not_inherit_the_old_offsets() {
    let (_t, dirs) = tempdirs(3);
    let broker = open(&dirs);
    create_topics(&broker);
    commit_all(&broker);
    broker.fsync_and_checkpoint().unwrap();
    broker.delete_topic(T).unwrap();
    broker
        .create_topic::<(), u64>(T, config(2).persist(PersistConfig::new()))
        .unwrap();
    let tp = TopicPartition::new(T, 1);
    let fresh = group_consumer(&broker, GROUPS[0]);
    assert_eq!(fresh.committed(&tp).unwrap(), None, "after the re-creation");
    fresh.close();
    broker.close().unwrap();
    let broker = open(&dirs);
    broker.topic::<(), u64>(T).unwrap();
    let c = group_consumer(&broker, GROUPS[0]);
    assert_eq!(c.committed(&tp).unwrap(), None, "after the reopen");
    let single = TopicPartition::new(SINGLE, 1);
    broker.topic::<(), u64>(SINGLE).unwrap();
    assert_eq!(c.committed(&single).unwrap(), Some(offset_of(0, SINGLE, 1)));
    c.close();
    broker.close().unwrap();
}

/// A topic of either kind deleted and created again, then a process death before any
/// later checkpoint: the offsets checkpoint on disk still named the deleted topic's
/// offsets, and a reopen must not hand them to the new one.
#[test]
fn a_recreated_topic_does_not_inherit_the_old_offsets_after_a_crash() {
    let fs = FaultyIo::new(32);
    let dirs = virtual_dirs();
    let broker = open_on(&fs, &dirs);
    create_topics(&broker);
    commit_all(&broker);
    broker.fsync_and_checkpoint().unwrap();
    for (topic, config) in [(T, config(2)), (SINGLE, TopicConfig::new(2))] {
        broker.delete_topic(topic).unwrap();
        broker
            .create_topic::<(), u64>(topic, config.persist(PersistConfig::new()))
            .unwrap();
    }
    broker.simulate_process_death();
    drop(broker);
    fs.kill();
    let broker = open_on(&fs, &dirs);
    broker.topic::<(), u64>(T).unwrap();
    broker.topic::<(), u64>(SINGLE).unwrap();
    let c = group_consumer(&broker, GROUPS[1]);
    for tp in every_partition() {
        assert_eq!(c.committed(&tp).unwrap(), None, "{tp:?}");
    }
    c.close();
    broker.close().unwrap();
}

/// As `a_recreated_topic_does_not_inherit_the_old_offsets_after_a_crash`, the offsets
/// checkpointed in an earlier life and no checkpoint written in this one before the
/// creation: the broker knows from the offsets checkpoint it read at open (the only file
/// that names a replicated topic) that it holds the topic's offsets, so the creation still
/// rewrites it. The single-copy topic's offsets stay.
#[test]
fn a_topic_recreated_after_a_reopen_does_not_inherit_the_checkpointed_offsets() {
    let fs = FaultyIo::new(33);
    let dirs = virtual_dirs();
    let open = || {
        Broker::builder()
            .io(std::sync::Arc::new(fs.clone()))
            .data_dirs(dirs.iter())
            .create(true)
            // No periodic offsets checkpoint: none is written between the open and the
            // creation.
            .offsets_checkpoint_interval(std::time::Duration::from_secs(3600))
            .open()
            .unwrap()
    };
    let broker = open();
    create_topics(&broker);
    commit_all(&broker);
    broker.close().unwrap();
    let broker = open();
    broker.delete_topic(T).unwrap();
    broker
        .create_topic::<(), u64>(T, config(2).persist(PersistConfig::new()))
        .unwrap();
    broker.simulate_process_death();
    drop(broker);
    fs.kill();
    let broker = open();
    broker.topic::<(), u64>(T).unwrap();
    broker.topic::<(), u64>(SINGLE).unwrap();
    let c = group_consumer(&broker, GROUPS[1]);
    for tp in every_partition() {
        let want = (tp.topic == SINGLE).then(|| offset_of(1, SINGLE, tp.partition));
        assert_eq!(c.committed(&tp).unwrap(), want, "{tp:?}");
    }
    c.close();
    broker.close().unwrap();
}
