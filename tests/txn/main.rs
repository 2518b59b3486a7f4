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
mod txn_timeout_task;
