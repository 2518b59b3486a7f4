//! Transactions (KIP-98): the transactional producer, the coordinator, control markers,
//! the last stable offset and read-committed consumers. One test binary, a module per
//! part: the basics, Kafka's anomalies Jepsen reported as named tests, and the history
//! checker under random fault schedules; the coordinator's own abort of timed-out
//! transactions.

mod txn_anomalies;
mod txn_basics;
mod txn_checker;
mod txn_checker_durable;
mod txn_durable;
mod txn_plain_runs;
mod txn_producer_expiry;
mod txn_timeout_task;

/// The seeds a history checker runs: the one named by `replay_var`, else `0..n` where `n` is
/// `count_var` (else `default`).
fn seeds(replay_var: &str, count_var: &str, default: u64) -> Vec<u64> {
    if let Ok(s) = std::env::var(replay_var) {
        return vec![s
            .parse()
            .unwrap_or_else(|_| panic!("{replay_var} is a number, not {s:?}"))];
    }
    let n = std::env::var(count_var)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default);
    (0..n).collect()
}

/// Fails with the seed's violations and the command that replays it.
fn assert_no_violations(seed: u64, replay_var: &str, module: &str, violations: Vec<String>) {
    assert!(
        violations.is_empty(),
        "seed {seed} (replay: {replay_var}={seed} cargo test --test txn {module}::): {violations:#?}"
    );
}
