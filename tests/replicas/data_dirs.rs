//! Data directory markers (`meta.properties`): creation is explicit, a directory that
//! vanished is not an empty log, crafted markers are typed errors, and a wiped member of a
//! broker's several directories never passes for a valid replica.

use crate::replicas_adversarial_common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use logbus::persist::{read_dir_marker, PersistConfig};
use logbus::producer::Record;
use logbus::replica::EventKind;
use logbus::{Broker, Error, TopicConfig};
use replicas_adversarial_common::*;

fn create(dir: &Path) -> logbus::Result<Broker> {
    Broker::builder().data_dir(dir).create(true).open()
}

fn open_dirs(dirs: &[PathBuf]) -> logbus::Result<Broker> {
    Broker::builder().data_dirs(dirs.iter()).open()
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// Wipes a data directory as a failed disk or a mistaken `rm -r` would: `empty` leaves the
/// path as an empty directory (a mount that did not come up), else removes it.
fn wipe(dir: &Path, empty: bool) {
    std::fs::remove_dir_all(dir).unwrap();
    if empty {
        std::fs::create_dir(dir).unwrap();
    }
}

#[test]
fn a_missing_path_is_refused_untouched_without_create() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let err = Broker::open(&dir).unwrap_err();
    assert!(
        matches!(&err, Error::DataDirUnformatted { dir: d, missing: true, .. } if *d == dir),
        "{err}"
    );
    assert!(err.to_string().contains("create(true)"), "{err}");
    assert!(!dir.exists(), "a refused open created the directory");
    let err = logbus::persist::describe_data_dir(&dir).unwrap_err();
    assert!(
        matches!(err, Error::DataDirUnformatted { missing: true, .. }),
        "{err}"
    );
    assert!(!dir.exists(), "describe created the directory");
}

#[test]
fn an_empty_directory_is_formatted_only_with_create() {
    let tmp = tempfile::tempdir().unwrap();
    let err = Broker::open(tmp.path()).unwrap_err();
    assert!(
        matches!(err, Error::DataDirUnformatted { entries: 0, .. }),
        "{err}"
    );
    assert!(entries(tmp.path()).is_empty(), "{:?}", entries(tmp.path()));
    let broker = create(tmp.path()).unwrap();
    broker.close().unwrap();
    drop(broker);
    let marker = read_dir_marker(tmp.path()).unwrap().expect("a marker");
    assert_eq!(marker.version, 1);
    assert_eq!(marker.node_id, 0);
    assert_eq!(marker.directory_id.len(), 22);
    assert_ne!(marker.directory_id, marker.cluster_id);
    assert_eq!(marker.directories, vec![marker.directory_id.clone()]);
    // Formatted: reopened without `create`, with the same marker; `create` changes nothing.
    Broker::open(tmp.path()).unwrap().close().unwrap();
    create(tmp.path()).unwrap().close().unwrap();
    assert_eq!(read_dir_marker(tmp.path()).unwrap(), Some(marker));
}

#[test]
fn a_directory_holding_anything_else_is_refused_even_with_create() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("notes.txt"), "mine").unwrap();
    for r in [Broker::open(tmp.path()), create(tmp.path())] {
        let err = r.unwrap_err();
        assert!(
            matches!(&err, Error::DataDirUnformatted { entries: 1, example: Some(e), .. }
                if e == "notes.txt"),
            "{err}"
        );
        assert!(
            err.to_string().contains("not a logbus data directory"),
            "{err}"
        );
    }
    assert_eq!(entries(tmp.path()), ["notes.txt"], "nothing written");
}

/// On main before markers, each of these reopened as an empty broker: the topic and its
/// records silently gone.
#[test]
fn a_vanished_data_directory_is_not_an_empty_log() {
    for empty in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let broker = create(&dir).unwrap();
        broker
            .create_topic::<(), u64>("t", TopicConfig::new(1).persist(PersistConfig::new()))
            .unwrap();
        broker
            .producer::<(), u64>()
            .send(Record::new("t", 1))
            .unwrap();
        broker.close().unwrap();
        drop(broker);
        wipe(&dir, empty);
        let err = Broker::open(&dir).unwrap_err();
        if empty {
            assert!(
                matches!(err, Error::DataDirUnformatted { entries: 0, .. }),
                "{err}"
            );
        } else {
            assert!(
                matches!(err, Error::DataDirUnformatted { missing: true, .. }),
                "{err}"
            );
        }
    }
}

/// A valid marker's text, for crafting damaged ones.
fn valid_marker_text() -> (tempfile::TempDir, String) {
    let tmp = tempfile::tempdir().unwrap();
    create(tmp.path()).unwrap().close().unwrap();
    let text = std::fs::read_to_string(tmp.path().join("meta.properties")).unwrap();
    (tmp, text)
}

#[test]
fn crafted_markers_are_typed_errors() {
    let (tmp, text) = valid_marker_text();
    let marker = tmp.path().join("meta.properties");
    let id_line = text
        .lines()
        .find(|l| l.starts_with("directory.id="))
        .unwrap()
        .to_owned();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", Vec::new(), "missing"),
        (
            "truncated",
            text.as_bytes()[..text.len() / 2].to_vec(),
            "truncated",
        ),
        (
            "wrong version",
            text.replace("version=1", "version=2").into_bytes(),
            "version",
        ),
        (
            "version 0 (Kafka's ZooKeeper layout)",
            text.replace("version=1", "version=0").into_bytes(),
            "version",
        ),
        (
            "duplicate key",
            format!("{text}{id_line}\n").into_bytes(),
            "twice",
        ),
        (
            "huge",
            {
                let mut v = text.clone().into_bytes();
                v.extend(std::iter::repeat_n(b'#', 1 << 20));
                v.push(b'\n');
                v
            },
            "at most",
        ),
        (
            "not UTF-8",
            {
                let mut v = text.clone().into_bytes();
                v.splice(0..0, [0xFF, 0xFE, b'\n']);
                v
            },
            "UTF-8",
        ),
        (
            "no key=value",
            format!("{text}garbage\n").into_bytes(),
            "key=value",
        ),
        (
            "bad id",
            text.replace(&id_line, "directory.id=not-an-id")
                .into_bytes(),
            "directory.id",
        ),
        (
            "missing key",
            text.lines()
                .filter(|l| !l.starts_with("cluster.id"))
                .map(|l| format!("{l}\n"))
                .collect::<String>()
                .into_bytes(),
            "cluster.id",
        ),
        (
            "bad node id",
            text.replace("node.id=0", "node.id=-1").into_bytes(),
            "node.id",
        ),
        (
            "own id not listed",
            text.lines()
                .map(|l| {
                    if l.starts_with("logbus.directories=") {
                        "logbus.directories=AAAAAAAAAAAAAAAAAAAAAA\n".to_owned()
                    } else {
                        format!("{l}\n")
                    }
                })
                .collect::<String>()
                .into_bytes(),
            "does not list",
        ),
    ];
    for (what, bytes, says) in cases {
        std::fs::write(&marker, &bytes).unwrap();
        for how in ["read_dir_marker", "open", "create", "describe"] {
            let r = catch_unwind(AssertUnwindSafe(|| match how {
                "read_dir_marker" => read_dir_marker(tmp.path()).map(|_| ()),
                "open" => Broker::open(tmp.path()).map(|b| b.close().unwrap()),
                "create" => create(tmp.path()).map(|b| b.close().unwrap()),
                _ => logbus::persist::describe_data_dir(tmp.path()).map(|_| ()),
            }));
            let err = match r {
                Err(_) => panic!("{what}: {how} panicked"),
                Ok(Ok(())) => panic!("{what}: {how} accepted it"),
                Ok(Err(e)) => e,
            };
            assert!(
                matches!(&err, Error::InvalidDirMarker { file, reason }
                    if *file == marker && reason.contains(says)),
                "{what}: {how}: {err}"
            );
        }
        // The damaged marker is left as it was, for the user to look at.
        assert_eq!(std::fs::read(&marker).unwrap(), bytes, "{what}");
    }
    std::fs::write(&marker, &text).unwrap();
    Broker::open(tmp.path()).unwrap().close().unwrap();
}

#[test]
fn a_lost_member_of_several_directories_is_refused_naming_it() {
    for empty in [false, true] {
        let (_t, dirs) = tempdirs(3);
        let broker = open(&dirs);
        broker.close().unwrap();
        drop(broker);
        let before = read_dir_marker(&dirs[1]).unwrap().unwrap();
        wipe(&dirs[1], empty);
        for r in [open_dirs(&dirs), try_open(&dirs)] {
            let err = r.unwrap_err();
            assert!(
                matches!(&err, Error::DataDirLost { dir, index: 1, directory_id, missing }
                    if *dir == dirs[1] && *directory_id == before.directory_id
                        && *missing != empty),
                "{err}"
            );
            assert!(err.to_string().contains("replace_lost_data_dirs"), "{err}");
        }
        assert_eq!(
            dirs[1].exists(),
            empty,
            "a refused open touched the lost directory"
        );
        if empty {
            assert!(entries(&dirs[1]).is_empty());
        }
        // The other directories are untouched too: no lock file, same markers.
        assert_eq!(entries(&dirs[2]), [".lock", "meta.properties"]);
    }
}

/// Issue's test: RF 3 on three directories, `acks = all`; close, wipe one directory,
/// reopen (continuing), keep producing: every acknowledged record is read and the replicas
/// agree. Each directory in turn (directory 0 holds partition 0's leader, 1 partition 1's,
/// 2 partition 2's), removed or left empty. The wiped directory's replicas never lead,
/// start out of the ISR, and nothing is truncated or lost.
#[test]
fn rf3_acks_all_survives_a_wiped_directory() {
    for (wiped, empty) in [(0usize, false), (1, true), (2, false)] {
        let what = format!("directory {wiped} wiped (left empty: {empty})");
        let (_t, dirs) = tempdirs(3);
        let broker = open(&dirs);
        let persist = PersistConfig::new().segment_bytes(4096);
        broker
            .create_topic::<(), u64>(T, config(3).records_in_memory(16).persist(persist))
            .unwrap();
        let p = producer(&broker);
        let send_all = |p: &logbus::Producer<(), u64>, values: std::ops::Range<u64>| {
            values
                .filter(|&v| p.send(Record::new(T, v).partition((v % 3) as u32)).is_ok())
                .collect::<Vec<u64>>()
        };
        let mut acked = send_all(&p, 0..300);
        assert_eq!(acked.len(), 300, "{what}");
        drop(p);
        broker.close().unwrap();
        drop(broker);
        let siblings: Vec<_> = (0..3)
            .filter(|&d| d != wiped)
            .map(|d| read_dir_marker(&dirs[d]).unwrap().unwrap())
            .collect();
        wipe(&dirs[wiped], empty);

        let broker = Broker::builder()
            .data_dirs(dirs.iter())
            .replace_lost_data_dirs(true)
            .open()
            .unwrap();
        assert_eq!(
            broker.replaced_data_dirs(),
            vec![dirs[wiped].clone()],
            "{what}"
        );
        let fresh = read_dir_marker(&dirs[wiped]).unwrap().unwrap();
        assert!(
            !siblings[0].directories.contains(&fresh.directory_id),
            "{what}: a new directory id"
        );
        assert_eq!(fresh.cluster_id, siblings[0].cluster_id, "{what}");
        for (d, dir) in dirs.iter().enumerate() {
            let m = read_dir_marker(dir).unwrap().unwrap();
            assert_eq!(
                m.directories, fresh.directories,
                "{what}: directory {d}'s set"
            );
            assert_eq!(m.index(), Some(d), "{what}");
        }
        broker.topic::<(), u64>(T).unwrap();
        let wiped_id = wiped as u32;
        for part in broker.describe_topic(T).unwrap().replicas {
            assert_ne!(
                part.leader,
                Some(wiped_id),
                "{what}: the empty replica leads"
            );
            assert!(
                part.leader.is_some(),
                "{what}: partition {} has no leader",
                part.partition
            );
            // Saved ISR state must not keep an empty replica in sync: every in-sync
            // replica holds everything below the high watermark.
            for r in &part.replicas {
                assert!(
                    !r.in_sync || r.log_end >= part.high_watermark,
                    "{what}: partition {}: replica {} in sync with log end {} below HW {}",
                    part.partition,
                    r.id,
                    r.log_end,
                    part.high_watermark
                );
            }
        }
        let p = producer(&broker);
        acked.extend(send_all(&p, 300..600));
        assert_eq!(acked.len(), 600, "{what}");
        for part in 0..3 {
            assert!(
                broker.faults().wait_in_sync(T, part, WAIT).unwrap(),
                "{what}: partition {part} never back in sync"
            );
            assert_replicas_agree(&broker, part, &what);
            let got = read_partition(&broker, part);
            let mine: Vec<u64> = acked
                .iter()
                .copied()
                .filter(|v| v % 3 == part as u64)
                .collect();
            assert_has_all(&got, &mine, &what);
            assert_eq!(got.len(), mine.len(), "{what}: partition {part} duplicates");
        }
        for e in broker.faults().events() {
            assert!(
                !matches!(
                    e.kind,
                    EventKind::RecordsLost { .. } | EventKind::Truncated { .. }
                ),
                "{what}: {e:?}"
            );
        }
        drop(p);
        broker.close().unwrap();
        drop(broker);
        // Formatted again: an ordinary reopen, everything there.
        let broker = open_dirs(&dirs).unwrap();
        broker.topic::<(), u64>(T).unwrap();
        for part in 0..3 {
            let got = read_partition(&broker, part);
            let mine: Vec<u64> = acked
                .iter()
                .copied()
                .filter(|v| v % 3 == part as u64)
                .collect();
            assert_has_all(&got, &mine, &format!("{what}, reopened"));
        }
        broker.close().unwrap();
    }
}

/// The wiped directory held partition 0's only in-sync replica (RF 2 on directories 0 and
/// 1 of three; directory 1 fell out of the ISR and missed records 40..80; directory 2 keeps
/// a current copy of the partition state): the empty replica is not elected on the
/// strength of the ISR it had, and the stale one is not elected either (unclean election
/// is off). The partition has no leader; nothing is truncated. Before the replica layer
/// knew lost replicas, the empty one was elected and the other truncated to it.
#[test]
fn the_last_in_sync_replica_wiped_leaves_the_partition_leaderless() {
    let (_t, dirs) = tempdirs(3);
    let broker = open(&dirs);
    let config = TopicConfig::new(1)
        .replication_factor(2)
        .min_insync_replicas(1);
    broker
        .create_topic::<(), u64>(T, config.persist(PersistConfig::new()))
        .unwrap();
    let p = producer(&broker);
    assert_eq!(send(&p, 0..40).len(), 40);
    broker.faults().fail_data_dir(1).unwrap();
    assert_eq!(send(&p, 40..80).len(), 40);
    drop(p);
    broker.close().unwrap();
    drop(broker);
    wipe(&dirs[0], false);
    let broker = Broker::builder()
        .data_dirs(dirs.iter())
        .replace_lost_data_dirs(true)
        .open()
        .unwrap();
    broker.topic::<(), u64>(T).unwrap();
    let part = describe(&broker);
    assert_eq!(part.leader, None, "{part:?}");
    // (The partition starts out as created, led by replica 0 in epoch 0, before its state
    // is read from disk: a real election bumps the saved epoch, 0 here.)
    for e in broker.faults().events() {
        let elected = matches!(e.kind, EventKind::LeaderElected { leader: Some(_), epoch, .. }
            if epoch > 0);
        assert!(
            !elected && !matches!(e.kind, EventKind::Truncated { .. }),
            "{e:?}"
        );
    }
    let quick = logbus::producer::ProducerConfig::new()
        .retries(0)
        .request_timeout(std::time::Duration::from_millis(200));
    let p = broker.producer_with_config::<(), u64>(quick).unwrap();
    assert!(
        p.send(Record::new(T, 80).partition(0)).is_err(),
        "a leaderless partition took a send"
    );
    drop(p);
    broker.close().unwrap();
    // Directory 1 kept its records 0..40 untouched.
    let d = logbus::persist::describe_data_dir(&dirs[1]).unwrap();
    let local = d.replicated[0].local.clone().unwrap();
    assert_eq!(local.log_end, 40);
}

#[test]
fn a_directory_appended_to_the_set_needs_create() {
    let (t, dirs) = tempdirs(2);
    open(&dirs).close().unwrap();
    let mut more = dirs.clone();
    more.push(t[0].path().join("third"));
    let err = open_dirs(&more).unwrap_err();
    assert!(
        matches!(&err, Error::DataDirUnformatted { dir, missing: true, .. } if *dir == more[2]),
        "{err}"
    );
    open(&more).close().unwrap();
    let ids: Vec<_> = more
        .iter()
        .map(|d| read_dir_marker(d).unwrap().unwrap())
        .collect();
    assert_eq!(ids[0].directories.len(), 3);
    for (i, m) in ids.iter().enumerate() {
        assert_eq!(m.directories, ids[0].directories);
        assert_eq!(m.index(), Some(i));
    }
    open_dirs(&more).unwrap().close().unwrap();
}

#[test]
fn a_directory_left_out_of_the_set_is_refused() {
    let (_t, dirs) = tempdirs(3);
    open(&dirs).close().unwrap();
    let two = vec![dirs[0].clone(), dirs[2].clone()];
    let err = open_dirs(&two).unwrap_err();
    let id = read_dir_marker(&dirs[1]).unwrap().unwrap().directory_id;
    assert!(
        matches!(&err, Error::InvalidConfig { name: "data_dirs", valid, .. }
            if valid.contains(&id) && valid.contains("directory 1")),
        "{err}"
    );
    // One directory alone is read by `describe`, without its siblings.
    let d = logbus::persist::describe_data_dir(&dirs[1]).unwrap();
    assert_eq!(d.marker.unwrap().directory_id, id);
}

#[test]
fn a_directory_of_another_broker_is_foreign() {
    let (_a, a) = tempdirs(2);
    let (_b, b) = tempdirs(2);
    open(&a).close().unwrap();
    open(&b).close().unwrap();
    let mixed = vec![a[0].clone(), b[1].clone()];
    for r in [open_dirs(&mixed), try_open(&mixed)] {
        let err = r.unwrap_err();
        assert!(
            matches!(&err, Error::ForeignDataDir { dir, reason }
                if *dir == b[1] && reason.contains("cluster id")),
            "{err}"
        );
    }
}

/// Markers are durable once `open` returns: a power loss right after keeps them (else the
/// next open would refuse the directories as unformatted, or as lost).
#[test]
fn markers_survive_a_power_loss_after_open() {
    use logbus::storage::fault::FaultyIo;
    use std::sync::Arc;
    for seed in 0..20 {
        let fs = FaultyIo::new(seed);
        let broker = open_on(&fs, &virtual_dirs());
        broker.simulate_process_death();
        drop(broker);
        fs.crash();
        let broker = Broker::builder()
            .io(Arc::new(fs.clone()))
            .data_dirs(virtual_dirs())
            .open()
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        broker.close().unwrap();
    }
}

/// `create(true)` on formatted directories opens them as they are: the same ids every time.
#[test]
fn ids_are_stable_across_reopens() {
    let (_t, dirs) = tempdirs(2);
    open(&dirs).close().unwrap();
    let first: Vec<_> = dirs.iter().map(|d| read_dir_marker(d).unwrap()).collect();
    for _ in 0..3 {
        open(&dirs).close().unwrap();
        open_dirs(&dirs).unwrap().close().unwrap();
    }
    let again: Vec<_> = dirs.iter().map(|d| read_dir_marker(d).unwrap()).collect();
    assert_eq!(first, again);
}

/// A crash while a replaced directory's set is written: the replaced directory's marker
/// lists the new set, a sibling's still the old one (naming the lost directory's old id).
/// The next open takes the list naming every directory found, and rewrites the stale one.
#[test]
fn a_marker_left_with_the_old_set_is_brought_up_to_date() {
    let (_t, dirs) = tempdirs(3);
    open(&dirs).close().unwrap();
    let stale = std::fs::read(dirs[0].join("meta.properties")).unwrap();
    wipe(&dirs[1], false);
    Broker::builder()
        .data_dirs(dirs.iter())
        .replace_lost_data_dirs(true)
        .open()
        .unwrap()
        .close()
        .unwrap();
    let new_set = read_dir_marker(&dirs[2]).unwrap().unwrap().directories;
    std::fs::write(dirs[0].join("meta.properties"), &stale).unwrap();
    assert_ne!(
        read_dir_marker(&dirs[0]).unwrap().unwrap().directories,
        new_set
    );
    open_dirs(&dirs).unwrap().close().unwrap();
    for d in &dirs {
        assert_eq!(read_dir_marker(d).unwrap().unwrap().directories, new_set);
    }
}

/// Markers of one broker whose lists do not name each other (edited by hand, or copied
/// from elsewhere): no set can be trusted, a typed error names one.
#[test]
fn markers_whose_sets_disagree_are_foreign() {
    let (_t, dirs) = tempdirs(2);
    open(&dirs).close().unwrap();
    for d in &dirs {
        let path = d.join("meta.properties");
        let m = read_dir_marker(d).unwrap().unwrap();
        let text = std::fs::read_to_string(&path).unwrap().replace(
            &format!("logbus.directories={}", m.directories.join(",")),
            &format!("logbus.directories={}", m.directory_id),
        );
        std::fs::write(&path, text).unwrap();
    }
    let err = open_dirs(&dirs).unwrap_err();
    assert!(
        matches!(&err, Error::ForeignDataDir { reason, .. }
            if reason.contains("no list names every directory")),
        "{err}"
    );
    // Each alone is still a readable directory.
    for d in &dirs {
        Broker::open(d).unwrap().close().unwrap();
    }
}
