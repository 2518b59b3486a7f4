//! Recovery from damaged and arbitrary directory contents: never a panic, and after a full
//! recovery (recovery point 0) the directory is consistent and the log a prefix.

use crate::storage_common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use logbus::storage::fault::FaultyIo;
use logbus::storage::{verify_dir, Checkpoints, Io, LogConfig, LogSetup, OpenMode, SegmentSet};
use proptest::prelude::*;
use storage_common::*;

#[derive(Debug, Clone)]
enum Damage {
    Truncate {
        file: usize,
        keep: f64,
    },
    Flip {
        file: usize,
        at: f64,
        mask: u8,
    },
    Overwrite {
        file: usize,
        at: f64,
        bytes: Vec<u8>,
    },
    Remove {
        file: usize,
    },
    Add {
        name: String,
        bytes: Vec<u8>,
    },
}

fn damage() -> impl Strategy<Value = Damage> {
    let name = prop_oneof![
        (
            0u64..200,
            prop_oneof![
                Just("log"),
                Just("index"),
                Just("timeindex"),
                Just("log.swap"),
                Just("log.deleted"),
                Just("index.cleaned")
            ]
        )
            .prop_map(|(b, s)| format!("{b:020}.{s}")),
        "[a-z.]{1,12}",
    ];
    prop_oneof![
        (any::<usize>(), 0.0f64..1.0).prop_map(|(file, keep)| Damage::Truncate { file, keep }),
        (any::<usize>(), 0.0f64..1.0, 1u8..=255).prop_map(|(file, at, mask)| Damage::Flip {
            file,
            at,
            mask
        }),
        (
            any::<usize>(),
            0.0f64..1.0,
            proptest::collection::vec(any::<u8>(), 1..64)
        )
            .prop_map(|(file, at, bytes)| Damage::Overwrite { file, at, bytes }),
        any::<usize>().prop_map(|file| Damage::Remove { file }),
        (name, proptest::collection::vec(any::<u8>(), 0..300))
            .prop_map(|(name, bytes)| Damage::Add { name, bytes }),
    ]
}

fn dir() -> PathBuf {
    PathBuf::from("/hostile/t-0")
}

fn files(fs: &FaultyIo, dir: &Path) -> Vec<PathBuf> {
    fs.list_dir(dir)
        .unwrap()
        .into_iter()
        .map(|n| dir.join(n))
        .collect()
}

fn apply(fs: &FaultyIo, d: &Damage) {
    let all = files(fs, &dir());
    let pick = |i: usize| all.get(i % all.len().max(1)).cloned();
    match d {
        Damage::Truncate { file, keep } => {
            if let Some(p) = pick(*file) {
                let b = fs.read_file(&p).unwrap();
                let n = (b.len() as f64 * keep) as usize;
                fs.write_file(&p, &b[..n]);
            }
        }
        Damage::Flip { file, at, mask } => {
            if let Some(p) = pick(*file) {
                let mut b = fs.read_file(&p).unwrap();
                if !b.is_empty() {
                    let i = ((b.len() as f64 * at) as usize).min(b.len() - 1);
                    b[i] ^= mask;
                    fs.write_file(&p, &b);
                }
            }
        }
        Damage::Overwrite { file, at, bytes } => {
            if let Some(p) = pick(*file) {
                let mut b = fs.read_file(&p).unwrap();
                let i = (b.len() as f64 * at) as usize;
                for (k, v) in bytes.iter().enumerate() {
                    if i + k < b.len() {
                        b[i + k] = *v;
                    } else {
                        b.push(*v);
                    }
                }
                fs.write_file(&p, &b);
            }
        }
        Damage::Remove { file } => {
            if let Some(p) = pick(*file) {
                fs.remove_file(&p).unwrap();
            }
        }
        Damage::Add { name, bytes } => {
            let p = dir().join(name);
            let f = fs.open(&p, OpenMode::Truncate).unwrap();
            f.write_all_at(bytes, 0).unwrap();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn recovery_from_damaged_directories_never_panics(
        n in 1u64..60,
        damages in proptest::collection::vec(damage(), 1..5),
        recovery_point in 0u64..80,
        full in any::<bool>(),
    ) {
        let fs = FaultyIo::new(n);
        let io: Arc<dyn Io> = Arc::new(fs.clone());
        let config = LogConfig { index_interval_bytes: 200, ..small_config() };
        {
            let (mut log, _) = open(&dir(), config.clone(), io.clone(), clock(), Checkpoints::default());
            for i in 0..n {
                log.append(&[record(i, 60)]).unwrap();
            }
            log.close().unwrap();
        }
        for d in &damages {
            apply(&fs, d);
        }
        let cp = Checkpoints {
            recovery_point: if full { 0 } else { recovery_point },
            log_start_offset: 0,
            clean_shutdown: false,
        };
        let opened = SegmentSet::open(dir(), LogSetup { config, io: io.clone(), clock: clock(), checkpoints: cp });
        let (log, opened_report) = match opened {
            Ok(x) => x,
            // A typed error is an acceptable outcome; a panic is not.
            Err(e) => { let _ = e.to_string(); return Ok(()); }
        };
        // Reads: records or typed errors.
        let mut next = log.log_start_offset();
        while next < log.log_end_offset() {
            match log.read_records(next, 4096) {
                Ok(batch) if !batch.is_empty() => next = batch.last().unwrap().0 + 1,
                Ok(_) => break,
                Err(_) => break,
            }
        }
        let _ = log.offset_for_timestamp(T0 + 5);
        verify_dir(&fs, &dir()).unwrap();
        if full {
            // Everything was revalidated: the directory is consistent, every record held is
            // one that was written, and offsets increase. A record may sit above its offset:
            // a batch's base offset is outside its CRC (Kafka's format) and offsets may jump,
            // so a flipped bit that raises the last batch's base offset reads as a gap.
            // Files logbus never writes (a `.swap`, a `.cleaned`) stay, reported; without
            // them the directory is consistent.
            for foreign in &opened_report.foreign_files {
                fs.remove_file(foreign).unwrap();
            }
            let report = verify_dir(&fs, &dir()).unwrap();
            prop_assert_eq!(report.problem, None);
            let mut prev = None;
            for (offset, r) in read_all(&log) {
                let value = r.value.clone().unwrap_or_default();
                let i = u64::from_be_bytes(value[..8].try_into().unwrap());
                prop_assert_eq!(&r, &record(i, 60));
                prop_assert!(offset >= i && prev.is_none_or(|p| p < offset));
                prev = Some(offset);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any text is a checkpoint or an `InvalidCheckpoint` naming a line of the file.
    #[test]
    fn arbitrary_checkpoint_text_is_parsed_or_rejected_with_a_line(
        text in prop_oneof![
            "[0-9 a-z\n-]{0,60}",
            "0\n[0-9]{1,3}\n([a-z]{1,3} [0-9]{1,3} [0-9]{1,5}\n){0,4}",
        ],
    ) {
        use logbus::storage::checkpoint::{parse, TopicPartitionOffset};
        let path = Path::new("/x/recovery-point-offset-checkpoint");
        match parse::<TopicPartitionOffset>(path, &text) {
            Ok(entries) => prop_assert!(entries.len() <= text.lines().count()),
            Err(logbus::Error::InvalidCheckpoint { file, line, .. }) => {
                prop_assert_eq!(file.as_path(), path);
                prop_assert!(line >= 1 && line <= text.lines().count() + 1);
            }
            Err(other) => prop_assert!(false, "unexpected error {:?}", other),
        }
    }
}
