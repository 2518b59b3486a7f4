//! The fault-injecting I/O itself: what survives a simulated power loss, and how faults fire.

use std::io::ErrorKind;
use std::path::Path;

use logbus::storage::fault::{Fault, FaultyIo, PAGE_SIZE};
use logbus::storage::{Io, OpenMode};

fn setup(seed: u64) -> FaultyIo {
    let fs = FaultyIo::new(seed);
    fs.create_dir_all(Path::new("/d")).unwrap();
    fs
}

#[test]
fn synced_data_and_names_survive_every_crash() {
    for seed in 0..200 {
        let fs = setup(seed);
        let p = Path::new("/d/f");
        let f = fs.open(p, OpenMode::CreateNew).unwrap();
        f.write_all_at(&[7u8; 10_000], 0).unwrap();
        f.sync_data().unwrap();
        fs.sync_dir(Path::new("/d")).unwrap();
        f.write_all_at(&[9u8; 3 * PAGE_SIZE + 100], 10_000).unwrap();
        fs.crash();
        let after = fs.read_file(p).expect("a synced name survives");
        assert!(after.len() >= 10_000, "seed {seed}");
        assert!(
            after[..10_000].iter().all(|&b| b == 7),
            "seed {seed}: synced bytes changed"
        );
        // The unsynced write survives as a prefix of itself, possibly followed by zeros.
        let tail = &after[10_000..];
        let kept = tail.iter().take_while(|&&b| b == 9).count();
        assert!(
            tail[kept..].iter().all(|&b| b == 0),
            "seed {seed}: not a prefix"
        );
        assert!(tail.len() <= 3 * PAGE_SIZE + 100, "seed {seed}: grew");
        // Whole pages from the write's start, then at most one torn page.
        let page_start = |x: usize| (10_000 + x) / PAGE_SIZE;
        if kept > 0 && tail.len() > kept {
            assert_eq!(
                page_start(kept),
                page_start(tail.len() - 1),
                "seed {seed}: zeros beyond the torn page"
            );
        }
        // Handles from before the crash are gone.
        assert!(f.len().is_err());
    }
}

#[test]
fn unsynced_names_and_writes_may_vanish_and_outcomes_vary_by_seed() {
    let mut vanished = 0;
    let mut kept_whole = 0;
    let mut torn = 0;
    for seed in 0..200 {
        let fs = setup(seed);
        let p = Path::new("/d/new");
        let f = fs.open(p, OpenMode::CreateNew).unwrap();
        f.write_all_at(&[1u8; 2 * PAGE_SIZE], 0).unwrap();
        f.sync_data().unwrap(); // data durable, but the name was never synced
        let g = fs.open(Path::new("/d/other"), OpenMode::CreateNew).unwrap();
        g.write_all_at(&[2u8; 2 * PAGE_SIZE], 0).unwrap();
        fs.sync_dir(Path::new("/d")).unwrap(); // both names durable; "other" has no fsync
        g.write_all_at(&[3u8; PAGE_SIZE], 2 * PAGE_SIZE as u64)
            .unwrap();
        fs.crash();
        let other = fs.read_file(Path::new("/d/other")).unwrap();
        // Whatever survived is a prefix of the writes, in order.
        let first_write = other.iter().take_while(|&&b| b == 2).count();
        let second_write = other[first_write..].iter().take_while(|&&b| b == 3).count();
        assert!(
            other[first_write + second_write..].iter().all(|&b| b == 0),
            "seed {seed}"
        );
        assert!(
            second_write == 0 || first_write == 2 * PAGE_SIZE,
            "seed {seed}: out of order"
        );
        if second_write == PAGE_SIZE {
            kept_whole += 1;
        } else if first_write < 2 * PAGE_SIZE {
            vanished += 1; // part of the first unsynced write is gone
        } else {
            torn += 1;
        }
        assert!(fs.read_file(p).is_some(), "synced by sync_dir");
        drop(f);
    }
    assert!(
        vanished > 0 && kept_whole > 0 && torn > 0,
        "{vanished} {kept_whole} {torn}"
    );

    // A created name without sync_dir survives some crashes and not others.
    let mut survived = 0;
    for seed in 0..100 {
        let fs = setup(seed);
        let f = fs.open(Path::new("/d/x"), OpenMode::CreateNew).unwrap();
        f.write_all_at(b"x", 0).unwrap();
        f.sync_all().unwrap();
        fs.crash();
        survived += usize::from(fs.read_file(Path::new("/d/x")).is_some());
    }
    assert!(survived > 0 && survived < 100, "{survived}");
}

#[test]
fn faults_fire_once_after_the_given_skip() {
    let fs = setup(1);
    let f = fs.open(Path::new("/d/f"), OpenMode::CreateNew).unwrap();
    fs.inject(Fault::WriteError, 2);
    f.write_all_at(b"a", 0).unwrap();
    f.write_all_at(b"b", 1).unwrap();
    assert!(f.write_all_at(b"c", 2).is_err());
    f.write_all_at(b"c", 2).unwrap();
    assert_eq!(fs.read_file(Path::new("/d/f")).unwrap(), b"abc");

    fs.inject(Fault::SyncError, 0);
    assert!(f.sync_data().is_err());
    f.sync_data().unwrap();
    fs.inject(Fault::DirSyncError, 0);
    assert!(fs.sync_dir(Path::new("/d")).is_err());
    fs.sync_dir(Path::new("/d")).unwrap();

    fs.inject(Fault::ShortWrite, 0);
    let n = f.write_at(&[5u8; 100], 3).unwrap();
    assert!((1..100).contains(&n), "{n}");
}

#[test]
fn a_full_disk_cuts_writes_then_fails_with_enospc() {
    let fs = setup(2);
    let f = fs.open(Path::new("/d/f"), OpenMode::CreateNew).unwrap();
    fs.set_capacity(Some(1000));
    assert_eq!(f.write_at(&[1u8; 600], 0).unwrap(), 600);
    assert_eq!(f.write_at(&[1u8; 600], 600).unwrap(), 400, "what fits");
    let e = f.write_at(&[1u8; 10], 1000).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(28));
    // Overwriting in place needs no space.
    assert_eq!(f.write_at(&[2u8; 10], 0).unwrap(), 10);
    assert_eq!(fs.used_bytes(), 1000);
    fs.set_capacity(None);
    assert_eq!(f.write_at(&[1u8; 10], 1000).unwrap(), 10);
}

#[test]
fn namespace_operations_behave_like_a_file_system() {
    let fs = setup(3);
    assert_eq!(
        fs.open(Path::new("/d/missing"), OpenMode::Read)
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        fs.open(Path::new("/nodir/f"), OpenMode::Create)
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    let f = fs.open(Path::new("/d/a"), OpenMode::Create).unwrap();
    f.write_all_at(b"hello", 0).unwrap();
    assert_eq!(
        fs.open(Path::new("/d/a"), OpenMode::CreateNew)
            .unwrap_err()
            .kind(),
        ErrorKind::AlreadyExists
    );
    let ro = fs.open(Path::new("/d/a"), OpenMode::Read).unwrap();
    assert!(ro.write_at(b"x", 0).is_err());
    fs.rename(Path::new("/d/a"), Path::new("/d/b")).unwrap();
    assert_eq!(fs.list_dir(Path::new("/d")).unwrap(), vec!["b".to_string()]);
    assert_eq!(
        ro.read_all().unwrap(),
        b"hello",
        "a handle follows its file"
    );
    let t = fs.open(Path::new("/d/b"), OpenMode::Truncate).unwrap();
    assert_eq!(t.len().unwrap(), 0);
    fs.remove_file(Path::new("/d/b")).unwrap();
    assert!(!fs.exists(Path::new("/d/b")).unwrap());
}
