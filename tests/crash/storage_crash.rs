//! A real process crash: the test binary re-runs itself as a child that appends and syncs on
//! real files, the parent kills it at a random moment, reopens the directory and checks what
//! survived (sled's `test_crash_recovery` pattern). The page cache survives a killed process,
//! so every record appended before the kill may survive; every synced one must.

use crate::storage_common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use logbus::storage::{Checkpoints, FsIo, LogConfig};
use storage_common::*;

use crate::persisted_common::one_at_a_time;

const CHILD_ENV: &str = "LOGBUS_STORAGE_CRASH_CHILD_DIR";

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 64 << 10,
        index_interval_bytes: 1024,
        write_buffer_bytes: 4096,
        ..LogConfig::default()
    }
}

/// The child: appends forever (bounded by time), syncing now and then, and prints each sync's
/// log end offset.
#[test]
#[ignore = "run by kill_at_random_moments as its child process"]
fn crash_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let (mut log, _) = open(
        Path::new(&dir),
        config(),
        Arc::new(FsIo),
        clock(),
        Checkpoints::default(),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut i = log.log_end_offset();
    while Instant::now() < deadline {
        log.append(&[record(i, 200)]).unwrap();
        i += 1;
        if i % 37 == 0 {
            log.fsync().unwrap();
            println!("synced {}", log.log_end_offset());
        }
    }
}

#[test]
fn kill_at_random_moments() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let mut rng = fastrand::Rng::with_seed(11);
    let mut total = 0;
    for round in 0..4 {
        let out = crate::kill_child_after(
            module_path!(),
            "crash_child",
            CHILD_ENV,
            dir.path(),
            Duration::from_millis(rng.u64(50..400)),
        );
        let synced = crate::numbers_after(&out, "synced ").max().unwrap_or(0);

        // Unclean shutdown: recover everything.
        let (log, report) = open(
            dir.path(),
            config(),
            Arc::new(FsIo),
            clock(),
            Checkpoints::default(),
        );
        let all = read_all(&log);
        assert!(
            all.len() as u64 >= synced,
            "round {round}: {} records survived, {synced} were synced; {report:?}",
            all.len()
        );
        for (i, (offset, r)) in all.iter().enumerate() {
            assert_eq!(*offset, i as u64);
            assert_eq!(r, &record(i as u64, 200), "round {round}: not a prefix");
        }
        assert_consistent(&FsIo, dir.path());
        assert!(
            all.len() >= total,
            "round {round}: records lost across rounds"
        );
        total = all.len();
    }
    assert!(total > 0, "the child never appended");
}
