//! SIGKILL of a process committing group offsets on a replicated persisted topic (and on a
//! single-copy one beside it): after each reopen every group has at least the offset of
//! the last checkpoint that returned, and at most one more commit than that.

use std::path::{Path, PathBuf};
use std::time::Duration;

use logbus::broker::{Broker, TopicConfig, TopicPartition};
use logbus::consumer::ConsumerConfig;
use logbus::persist::PersistConfig;
use logbus::producer::Record;

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

fn setup(root: &Path) {
    let broker = open(root);
    let p = broker.producer::<(), u64>();
    for (t, rf) in TOPICS {
        let config = TopicConfig::new(1)
            .replication_factor(rf)
            .persist(PersistConfig::new());
        broker.create_topic::<(), u64>(t, config).unwrap();
        for v in 0..RECORDS {
            p.send(Record::new(t, v)).unwrap();
        }
    }
    p.flush().unwrap();
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

/// The child of `sigkill_keeps_the_checkpointed_offsets_of_a_replicated_topic`: commits
/// increasing offsets, the same for every group and partition, and checkpoints after each
/// (printing `synced N` once the checkpoint returned), the background thread checkpointing
/// every millisecond meanwhile.
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
    let mut out = std::io::stdout().lock();
    for o in start + 1..=RECORDS {
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
/// has each group's offset on each partition at the last offset checkpointed, or the one
/// committed after it, none lost and none clamped.
#[test]
fn sigkill_keeps_the_checkpointed_offsets_of_a_replicated_topic() {
    let _serial = one_at_a_time();
    let root = tempfile::tempdir().unwrap();
    setup(root.path());
    let exe = std::env::current_exe().unwrap();
    let mut rng = fastrand::Rng::with_seed(30);
    let mut synced: Option<u64> = None;
    for round in 0..12 {
        let mut child = std::process::Command::new(&exe)
            .args([
                &crate::child_test(module_path!(), "replicated_offsets_crash_child"),
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, root.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(rng.u64(20..120)));
        child.kill().unwrap(); // SIGKILL
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            !stdout.contains("running 0 tests"),
            "round {round}: the child ran no test (its `--exact` name matched none)"
        );
        for line in stdout.lines() {
            if let Some(o) = line.strip_prefix("synced ") {
                let o: u64 = o.parse().unwrap();
                synced = Some(synced.map_or(o, |s| s.max(o)));
            }
        }
        let broker = Broker::builder()
            .data_dirs(dirs(root.path()))
            .open()
            .unwrap_or_else(|e| panic!("round {round}: the directories do not reopen: {e}"));
        let got = committed(&broker);
        if let Some(s) = synced {
            for g in &got {
                assert!(
                    g.is_some_and(|g| g == s || g == s + 1),
                    "round {round}: committed {got:?}, {s} was checkpointed last"
                );
            }
        }
        assert!(
            broker.clamped_offsets().is_empty(),
            "round {round}: {:?}",
            broker.clamped_offsets()
        );
        broker.close().unwrap();
    }
    assert!(synced.is_some(), "no child checkpointed anything");
    eprintln!("last checkpointed offset {synced:?}");
}
