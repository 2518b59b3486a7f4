//! Replicated topics, in memory and on data directories, and the data directories' markers:
//! one test binary, a module per former file.

#[path = "../replay_common/mod.rs"]
mod replay_common;
mod replicas_adversarial_common;

mod data_dirs;
mod replicas;
mod replicas_async;
mod replicas_combine_defects;
mod replicas_compaction;
mod replicas_disk;
mod replicas_disk_adversarial;
mod replicas_disk_races;
mod replicas_idempotence;
mod replicas_jepsen;
mod replicas_offsets;
