//! The tests that run child processes of this binary (SIGKILL at random moments, a lock
//! held by another process): one test binary, a module per former file.
//!
//! A child re-runs this binary with `--exact <module>::<test>` (`child_test`). A spawned child holds a copy of every open file of this process until its
//! `exec`, data directories' lock files included, so a test that closes and reopens a
//! directory must not run beside a spawn: every test here that spawns or reopens a
//! directory holds `persisted_common::one_at_a_time()`.

mod persisted_common;
#[path = "../storage_common/mod.rs"]
mod storage_common;

mod compaction;
mod persisted;
mod persisted_checkpoints;
mod persisted_open;
mod replicated_compaction;
mod replicated_offsets;
mod storage_crash;

/// The harness's name for test `test` of the module whose `module_path!()` is `module`: the
/// path without the crate's name (`persisted::crash_child`), which a child's `--exact` needs.
/// A name the harness does not know would run no test in the child, and the parent would
/// check nothing.
fn child_test(module: &str, test: &str) -> String {
    match module.split_once("::") {
        Some((_crate, path)) => format!("{path}::{test}"),
        None => test.to_owned(),
    }
}
