//! What the persisted-topic test files that spawn child processes share.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use logbus::broker::TopicPartition;

/// The tests of a file that uses this run one at a time: a child process spawned by one
/// inherits, until its `exec`, every open file of the test process, the data directories'
/// locked `.lock` files included, so another test's reopen right after a close could find
/// its directory still locked.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Partition 0 of topic `t`.
pub fn tp() -> TopicPartition {
    TopicPartition::new("t", 0)
}

/// Adds to `acked` (per key, `offset % keys`, the last offset acknowledged) the offsets a
/// killed child printed as `acked <offset>`.
pub fn note_acked(stdout: &str, keys: u64, acked: &mut HashMap<u64, u64>) {
    for o in crate::numbers_after(stdout, "acked ") {
        let last = acked.entry(o % keys).or_insert(o);
        *last = (*last).max(o);
    }
}

/// Records `(offset, key, value)` of a child that sent `v<offset>-…` under key
/// `k<offset % keys>`: offsets increase and each record is the one sent at its offset.
/// Returns key → latest offset.
pub fn latest_by_key(
    records: &[(u64, String, String)],
    keys: u64,
    what: &str,
) -> BTreeMap<u64, u64> {
    for w in records.windows(2) {
        assert!(w[0].0 < w[1].0, "{what}: {} then {}", w[0].0, w[1].0);
    }
    let mut latest = BTreeMap::new();
    for (o, k, v) in records {
        assert!(v.starts_with(&format!("v{o}-")), "{what}: {v} at {o}");
        assert_eq!(*k, format!("k{}", o % keys), "{what}");
        latest.insert(o % keys, *o);
    }
    latest
}

/// The check after a kill round's reopen, on the records read back: as `latest_by_key`,
/// and each key's last acknowledged offset (`acked`), or a later one, is there. Returns key
/// → latest offset.
pub fn check_read_back(
    records: &[(u64, String, String)],
    keys: u64,
    acked: &HashMap<u64, u64>,
    what: &str,
) -> BTreeMap<u64, u64> {
    let latest = latest_by_key(records, keys, what);
    for (k, a) in acked {
        let l = latest.get(k).copied();
        assert!(
            l.is_some_and(|l| l >= *a),
            "{what}: key k{k} acked at {a}, latest present {l:?}"
        );
    }
    latest
}

/// A closed partition directory verifies with no problem.
pub fn assert_verifies(part: &Path, what: &str) {
    let report = logbus::storage::verify_dir(&logbus::storage::FsIo, part).unwrap();
    assert!(report.problem.is_none(), "{what}: {:?}", report.problem);
}
