//! SIGKILL of a process producing to and committing group offsets on a replicated
//! persisted topic (and on a single-copy one beside it): after each reopen every group has
//! at least the offset of the last checkpoint that returned, and at most two more commits
//! than that, none clamped (the replicated partition reopens with a high watermark that
//! covers the checkpointed offsets, not the one of its last leader or ISR change).

use std::path::{Path, PathBuf};
use std::time::Duration;

use logbus::broker::{Broker, TopicConfig, TopicPartition};
use logbus::consumer::ConsumerConfig;
use logbus::persist::PersistConfig;
use logbus::producer::{Acks, ProducerConfig, Record};

use crate::persisted_common::one_at_a_time;

const CHILD_ENV: &str = "LOGBUS_REPLICATED_OFFSETS_CRASH_DIR";
const RECORDS: u64 = 300;
/// Replication factor 3 and 1.
const TOPICS: [(&str, u32); 2] = [("replicated", 3), ("single", 1)];
const GROUPS: [&str; 2] = ["g0", "g1"];

fn dirs(root: &Path) -> Vec<PathBuf> {
    (0..3).map(|i| root.join(format!("d{i}"))).collect()
}

fn open(root: &Path) -> Broker {
    Broker::builder()
        .data_dirs(dirs(root))
        .create(true)
        .offsets_checkpoint_interval(Duration::from_millis(1))
        .open()
        .unwrap()
}

fn every_partition() -> Vec<TopicPartition> {
    TOPICS
        .iter()
        .map(|(t, _)| TopicPartition::new(*t, 0))
        .collect()
}

/// The topics, empty: the children write the records.
fn setup(root: &Path) {
    let broker = open(root);
    for (t, rf) in TOPICS {
        let config = TopicConfig::new(1)
            .replication_factor(rf)
            .persist(PersistConfig::new());
        broker.create_topic::<(), u64>(t, config).unwrap();
    }
    broker.close().unwrap();
}

/// Every group's committed offset on every partition, `None` where it has none.
fn committed(broker: &Broker) -> Vec<Option<u64>> {
    for (t, _) in TOPICS {
        broker.topic::<(), u64>(t).unwrap();
    }
    let mut out = Vec::new();
    for g in GROUPS {
        let c = broker
            .consumer::<(), u64>(ConsumerConfig::new().group_id(g))
            .unwrap();
        for tp in every_partition() {
            out.push(c.committed(&tp).unwrap());
        }
        c.close();
    }
    out
}

/// The child of `sigkill_keeps_the_checkpointed_offsets_of_a_replicated_topic`: appends a
/// record to each topic (acknowledged by every in-sync replica), commits the new end for
/// every group and checkpoints (printing `synced N` once the checkpoint returned), the
/// background thread checkpointing every millisecond meanwhile.
#[test]
#[ignore = "run by sigkill_keeps_the_checkpointed_offsets_of_a_replicated_topic as its child"]
fn replicated_offsets_crash_child() {
    let Some(root) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    use std::io::Write;
    let broker = open(Path::new(&root));
    let start = committed(&broker).into_iter().flatten().min().unwrap_or(0);
    let mut consumers: Vec<_> = GROUPS
        .iter()
        .map(|g| {
            let mut c = broker
                .consumer::<(), u64>(ConsumerConfig::new().group_id(*g))
                .unwrap();
            c.assign(&every_partition()).unwrap();
            c
        })
        .collect();
    let producer = broker
        .producer_with_config::<(), u64>(ProducerConfig::new().acks(Acks::All))
        .unwrap();
    let mut out = std::io::stdout().lock();
    for o in start + 1..=RECORDS {
        for (t, _) in TOPICS {
            let end = broker.describe_topic(t).unwrap().partitions[0].log_end;
            // A record the previous child acknowledged but did not commit is not sent again.
            if end < o {
                producer.send(Record::new(t, o)).unwrap();
            }
        }
        producer.flush().unwrap();
        for c in &mut consumers {
            let offsets: Vec<_> = every_partition().into_iter().map(|tp| (tp, o)).collect();
            c.commit_offsets(&offsets).unwrap();
        }
        broker.fsync_and_checkpoint().unwrap();
        writeln!(out, "synced {o}").unwrap();
        out.flush().unwrap();
    }
}

/// SIGKILL at random moments of a process committing offsets on a replication-factor-3
/// topic and a single-copy one (12 rounds, a few seconds in a debug build): every reopen
/// has each group's offset on each partition at the last offset checkpointed (the child
/// printed it, or the previous reopen found it), or one of the two the child may have
/// committed after it; none lost, none clamped below the last checkpoint.
#[test]
fn sigkill_keeps_the_checkpointed_offsets_of_a_replicated_topic() {
    let _serial = one_at_a_time();
    let root = tempfile::tempdir().unwrap();
    setup(root.path());
    let mut rng = fastrand::Rng::with_seed(30);
    let mut synced: Option<u64> = None;
    // The offsets the previous reopen found (all checkpointed again by its close).
    let mut floor = 0u64;
    for round in 0..12 {
        let stdout = crate::kill_child_after(
            module_path!(),
            "replicated_offsets_crash_child",
            CHILD_ENV,
            root.path(),
            Duration::from_millis(rng.u64(100..600)),
        );
        for o in crate::numbers_after(&stdout, "synced ") {
            synced = Some(synced.map_or(o, |s| s.max(o)));
            floor = floor.max(o);
        }
        let broker = Broker::builder()
            .data_dirs(dirs(root.path()))
            .open()
            .unwrap_or_else(|e| panic!("round {round}: the directories do not reopen: {e}"));
        let got = committed(&broker);
        // At least the last offset checkpointed (printed, or found by the previous
        // reopen); at most two commits past it (the next one's checkpoint may return
        // unprinted, and the background thread may checkpoint the one after).
        for g in &got {
            assert!(
                g.is_some_and(|g| (floor..=floor + 2).contains(&g)) || (floor == 0 && g.is_none()),
                "round {round}: committed {got:?}, {floor} was checkpointed last"
            );
        }
        // Only those commits past the last checkpoint can lie past the recovered end (the
        // background thread checkpointed one before its record was synced): clamped to at
        // least that checkpoint's offset, and reported.
        for c in broker.clamped_offsets() {
            assert!(
                c.committed <= floor + 2 && c.log_end >= floor,
                "round {round}: {c:?}, {floor} was checkpointed last"
            );
        }
        floor = got
            .iter()
            .flatten()
            .copied()
            .min()
            .unwrap_or(floor)
            .max(floor);
        broker.close().unwrap();
    }
    assert!(synced.is_some(), "no child checkpointed anything");
    eprintln!("last checkpointed offset {synced:?}");
}
