//! What the persisted-topic test files that spawn child processes share.

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
