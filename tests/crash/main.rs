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

/// Runs test `test` of the module whose `module_path!()` is `module` in a child process of
/// this binary, with the environment variable `env` naming `dir`, kills it (SIGKILL) after
/// `after`, and returns what it printed. Fails if the child ran no test: its `--exact` name
/// matched none, and the parent would check nothing.
fn kill_child_after(
    module: &str,
    test: &str,
    env: &str,
    dir: &std::path::Path,
    after: std::time::Duration,
) -> String {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            &child_test(module, test),
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(env, dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(after);
    child.kill().unwrap(); // SIGKILL
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        !stdout.contains("running 0 tests"),
        "the child ran no test: {test} matched none in {module}"
    );
    stdout
}

/// The numbers a child printed on lines starting with `prefix` (`"synced "`).
fn numbers_after<'a>(stdout: &'a str, prefix: &'a str) -> impl Iterator<Item = u64> + 'a {
    stdout
        .lines()
        .filter_map(move |l| l.strip_prefix(prefix))
        .map(|n| {
            n.trim()
                .parse()
                .expect("a child prints numbers after its prefix")
        })
}
