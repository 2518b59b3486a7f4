//! Helpers shared by the tests of replicated persisted topics (`replicas_disk`,
//! `replicas_disk_adversarial`, `replicas_disk_races`): one topic `T`, RF 3 on three data
//! directories, producers, a dense reader, and checks of a recorded history.
#![allow(dead_code)] // each test binary uses a part

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::persist::{FlushPolicy, PersistConfig};
use logbus::producer::{Acks, ProducerConfig, Record};
use logbus::replica::{EventKind, PartitionReplicas};
use logbus::storage::fault::FaultyIo;
use logbus::{Broker, Error, TopicConfig, TopicPartition};

pub const T: &str = "orders";
pub const WAIT: Duration = Duration::from_secs(20);

pub fn config(partitions: u32) -> TopicConfig {
    TopicConfig::new(partitions)
        .replication_factor(3)
        .min_insync_replicas(2)
}

/// The three data directories of a simulated file system.
pub fn virtual_dirs() -> Vec<PathBuf> {
    ["/d0", "/d1", "/d2"].iter().map(PathBuf::from).collect()
}

pub fn tempdirs(n: usize) -> (Vec<tempfile::TempDir>, Vec<PathBuf>) {
    let t: Vec<_> = (0..n).map(|_| tempfile::tempdir().unwrap()).collect();
    let paths = t.iter().map(|d| d.path().to_path_buf()).collect();
    (t, paths)
}

pub fn try_open(dirs: &[PathBuf]) -> logbus::Result<Broker> {
    Broker::builder().data_dirs(dirs.iter()).create(true).open()
}

pub fn open(dirs: &[PathBuf]) -> Broker {
    try_open(dirs).unwrap()
}

pub fn open_on(fs: &FaultyIo, dirs: &[PathBuf]) -> Broker {
    Broker::builder()
        .io(Arc::new(fs.clone()))
        .data_dirs(dirs.iter())
        .create(true)
        .open()
        .unwrap()
}

pub fn producer_with(broker: &Broker, acks: Acks) -> logbus::Producer<(), u64> {
    let config = ProducerConfig::new()
        .acks(acks)
        .retries(10)
        .request_timeout(WAIT);
    broker.producer_with_config(config).unwrap()
}

pub fn producer(broker: &Broker) -> logbus::Producer<(), u64> {
    producer_with(broker, Acks::All)
}

/// Sends `values` to partition 0; the values acknowledged.
pub fn send(p: &logbus::Producer<(), u64>, values: std::ops::Range<u64>) -> Vec<u64> {
    values
        .filter(|&v| p.send(Record::new(T, v).partition(0)).is_ok())
        .collect()
}

pub fn describe(broker: &Broker) -> PartitionReplicas {
    broker.describe_topic(T).unwrap().replicas[0].clone()
}

/// Every value of partition `p` below its high watermark, read by a consumer from offset 0
/// (dense: a gap fails the read).
pub fn read_partition(broker: &Broker, p: u32) -> Vec<u64> {
    let end = broker.describe_topic(T).unwrap().replicas[p as usize].high_watermark;
    let config = ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest);
    let mut c = broker.consumer::<(), u64>(config).unwrap();
    let tp = TopicPartition::new(T, p);
    c.assign(std::slice::from_ref(&tp)).unwrap();
    c.seek_to_beginning(std::slice::from_ref(&tp)).unwrap();
    let mut out = Vec::new();
    while c.position(&tp).unwrap() < end {
        let batch = c.poll(WAIT).unwrap();
        assert!(!batch.is_empty(), "nothing read at {}", out.len());
        for r in batch.iter() {
            assert_eq!(r.offset, out.len() as u64, "offsets are dense");
            out.push(r.value);
        }
    }
    out
}

pub fn read_all(broker: &Broker) -> Vec<u64> {
    read_partition(broker, 0)
}

pub fn assert_has_all(got: &[u64], acked: &[u64], what: &str) {
    let set: HashSet<u64> = got.iter().copied().collect();
    let missing: Vec<_> = acked.iter().filter(|v| !set.contains(v)).collect();
    assert!(
        missing.is_empty(),
        "{what}: acknowledged but lost: {missing:?}"
    );
}

/// Every replica of partition `p` holds the same records (epochs, values) at every offset
/// below the high watermark that both hold in memory (`replica_logs` shows each replica's
/// tail in memory, which may start at different offsets).
pub fn assert_replicas_agree(broker: &Broker, p: u32, what: &str) {
    let topic = broker.topic::<(), u64>(T).unwrap();
    let hw = broker.describe_topic(T).unwrap().replicas[p as usize].high_watermark;
    let logs = topic.replica_logs(p).unwrap();
    let maps: Vec<std::collections::HashMap<u64, (i32, u64)>> = logs
        .iter()
        .map(|l| {
            l.records
                .iter()
                .filter(|r| r.0 < hw)
                .map(|r| (r.0, (r.1, r.3)))
                .collect()
        })
        .collect();
    for (l, m) in logs.iter().zip(&maps).skip(1) {
        for (o, rec) in m {
            if let Some(first) = maps[0].get(o) {
                assert_eq!(
                    rec, first,
                    "{what}: replica {} disagrees with replica {} at offset {o}",
                    l.replica, logs[0].replica
                );
            }
        }
    }
}

/// A topic of one partition with 16 records in memory on segments of 4096 bytes: most of
/// its records are read back from disk.
pub fn create_mostly_on_disk(broker: &Broker) {
    broker
        .create_topic::<(), u64>(
            T,
            config(1)
                .records_in_memory(16)
                .persist(PersistConfig::new().segment_bytes(4096)),
        )
        .unwrap();
}

pub fn meta_file(dir: &Path) -> PathBuf {
    dir.join(format!("{T}.replicas"))
}

pub fn part_dir(dir: &Path, p: u32) -> PathBuf {
    dir.join(format!("{T}-{p}"))
}

/// What producers and consumers saw: `(partition, offset, value)`.
#[derive(Default)]
pub struct History {
    pub acked: Vec<(u32, u64, u64)>,
    pub read: Vec<(u32, u64, u64)>,
}

pub const PARTITIONS: u32 = 2;

/// Two producers (`acks = all`) and a consumer run against a topic on `broker` until
/// `stop`; each producer stops at its first error (the broker closing under it).
pub fn load(
    broker: &Broker,
    stop: &Arc<AtomicBool>,
    h: &Arc<Mutex<History>>,
) -> Vec<thread::JoinHandle<()>> {
    let mut threads: Vec<_> = (0..2u64)
        .map(|id| {
            let (broker, stop, h) = (broker.clone(), stop.clone(), h.clone());
            thread::spawn(move || {
                let config = ProducerConfig::new()
                    .acks(Acks::All)
                    .retries(3)
                    .request_timeout(Duration::from_secs(2))
                    .delivery_timeout(Duration::from_secs(5));
                let Ok(p) = broker.producer_with_config::<(), u64>(config) else {
                    return;
                };
                let mut seq = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let partition = (seq % u64::from(PARTITIONS)) as u32;
                    let v = (id << 32) | seq;
                    match p.send(Record::new(T, v).partition(partition)) {
                        Ok(m) => h.lock().unwrap().acked.push((partition, m.offset, v)),
                        Err(e) if matches!(e.error(), Error::Closed { .. }) => return,
                        Err(_) => {}
                    }
                    seq += 1;
                }
            })
        })
        .collect();
    let (broker, stop, h) = (broker.clone(), stop.clone(), h.clone());
    threads.push(thread::spawn(move || {
        let config = ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest);
        let Ok(mut c) = broker.consumer::<(), u64>(config) else {
            return;
        };
        let tps: Vec<_> = (0..PARTITIONS).map(|p| TopicPartition::new(T, p)).collect();
        if c.assign(&tps).is_err() {
            return;
        }
        while !stop.load(Ordering::Relaxed) {
            match c.poll(Duration::from_millis(5)) {
                Ok(batch) => h
                    .lock()
                    .unwrap()
                    .read
                    .extend(batch.iter().map(|r| (r.partition, r.offset, r.value))),
                Err(_) => return,
            }
        }
    }));
    threads
}

/// Creates the topic (`PARTITIONS` partitions of `records_in_memory`, on segments of 4096
/// bytes flushed per `flush`) on `broker`, runs `load` against it while `during` acts
/// (its last act ending the broker: a close, a process death, a crash), then stops the
/// load and drops the broker. Returns what the load saw.
pub fn under_load(
    broker: Broker,
    records_in_memory: usize,
    flush: Option<FlushPolicy>,
    during: impl FnOnce(&Broker, &Arc<Mutex<History>>),
) -> History {
    let mut persist = PersistConfig::new().segment_bytes(4096);
    if let Some(f) = flush {
        persist = persist.flush(f);
    }
    broker
        .create_topic::<(), u64>(
            T,
            config(PARTITIONS)
                .records_in_memory(records_in_memory)
                .persist(persist),
        )
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let h = Arc::new(Mutex::new(History::default()));
    let threads = load(&broker, &stop, &h);
    during(&broker, &h);
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    drop(broker);
    let seen = std::mem::take(&mut *h.lock().unwrap());
    seen
}

/// Fails data directory `dir`, then waits for `more` acknowledgements.
pub fn fail_dir_and_wait(broker: &Broker, h: &Arc<Mutex<History>>, dir: u32, more: usize) {
    broker.faults().fail_data_dir(dir).unwrap();
    let n = h.lock().unwrap().acked.len();
    wait_acked(h, n + more);
}

pub fn wait_acked(h: &Arc<Mutex<History>>, n: usize) {
    for _ in 0..20_000 {
        if h.lock().unwrap().acked.len() >= n {
            return;
        }
        thread::sleep(Duration::from_millis(1));
    }
    panic!("fewer than {n} records acknowledged");
}

/// After a reopen: every acknowledged record at the offset it was acknowledged with, every
/// record a consumer read at its offset, offsets dense, replicas agreeing below HW.
pub fn check_history(broker: &Broker, h: &History, what: &str) {
    broker.topic::<(), u64>(T).unwrap();
    for p in 0..PARTITIONS {
        assert!(
            broker.faults().wait_in_sync(T, p, WAIT).unwrap(),
            "{what}: partition {p} not in sync: {:?}",
            broker.describe_topic(T).unwrap().replicas[p as usize]
        );
        let log = read_partition(broker, p);
        for &(part, offset, v) in h.acked.iter().chain(&h.read) {
            if part == p {
                assert_eq!(
                    log.get(offset as usize),
                    Some(&v),
                    "{what}: partition {p} offset {offset}"
                );
            }
        }
        assert_replicas_agree(broker, p, what);
    }
    assert_nothing_lost(broker, what);
}

/// No `RecordsLost` event was reported.
pub fn assert_nothing_lost(broker: &Broker, what: &str) {
    let lost: Vec<_> = broker
        .faults()
        .events()
        .into_iter()
        .filter(|e| matches!(e.kind, EventKind::RecordsLost { .. }))
        .collect();
    assert!(lost.is_empty(), "{what}: {lost:?}");
}
