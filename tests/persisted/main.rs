//! Persisted topics under injected faults and defects found there (no child processes: those
//! tests are in `tests/crash/`): one test binary, a module per former file.

#[path = "../replay_common/mod.rs"]
mod replay_common;

mod persisted_adversarial;
mod persisted_compaction;
mod persisted_compression;
mod persisted_defects;
mod persisted_idempotence;
mod persisted_offline;
