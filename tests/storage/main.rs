//! One partition's log on disk (`logbus::storage`): one test binary, a module per former
//! file. Binaries of their own: the crash test, which re-runs this binary as a child
//! (`tests/crash/storage_crash.rs`), and the tests with a global allocator of their own
//! (`tests/storage_alloc.rs`, `tests/storage_crafted.rs`, `tests/storage_defects.rs`).

#[path = "../storage_common/mod.rs"]
mod storage_common;

mod storage_codec;
mod storage_compaction;
mod storage_fault_io;
mod storage_faults;
mod storage_hostile;
mod storage_interop;
mod storage_model;
mod storage_power_loss;
mod storage_segment_set;
