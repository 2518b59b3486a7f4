//! Reads of a persisted partition that race its disk writer.

use super::*;
use crate::sync::atomic::AtomicBool;
use crate::sync::thread;

/// A log on disk whose end, as readers see it, lags what is written by `lag` more
/// `disk_end` calls: the writer freed the ring's slots but is descheduled before it
/// publishes its end (or, with `stopped`, never publishes it).
struct LaggingDisk {
    records: Mutex<Vec<Entry<(), u64>>>,
    written: AtomicU64,
    lag: AtomicU64,
    stopped: AtomicBool,
}

impl LaggingDisk {
    fn new() -> Self {
        Self {
            records: Mutex::new(Vec::new()),
            written: AtomicU64::new(0),
            lag: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
        }
    }
}

impl DiskLog<(), u64> for LaggingDisk {
    fn log_start(&self) -> u64 {
        0
    }

    fn read(
        &self,
        offset: u64,
        max: usize,
        f: &mut dyn FnMut(u64, Entry<(), u64>),
    ) -> Result<(usize, u64)> {
        let records = self.records.lock();
        let end = (offset as usize + max).min(records.len());
        for (i, e) in records[offset as usize..end].iter().enumerate() {
            f(offset + i as u64, e.clone());
        }
        Ok((end - offset as usize, end as u64))
    }

    fn offset_for_time(&self, _timestamp: i64) -> Result<Option<(u64, i64)>> {
        Ok(None)
    }

    fn disk_end(&self) -> u64 {
        // Relaxed (all three): the test's threads are ordered by spawn and join.
        if self.stopped.load(Ordering::Relaxed) {
            return 0;
        }
        if self.lag.load(Ordering::Relaxed) > 0 {
            self.lag.fetch_sub(1, Ordering::Relaxed);
            return 0;
        }
        self.written.load(Ordering::Relaxed)
    }

    fn check_size(&self, _entry: &Entry<(), u64>) -> std::result::Result<(), (u64, u64)> {
        Ok(())
    }

    fn wait_acked(&self, _offset: u64) -> Result<()> {
        Ok(())
    }

    fn take_error(&self) -> Error {
        Error::Closed {
            what: "test log".into(),
        }
    }

    fn sync_to(&self, _end: u64, _fsync: bool) -> Result<()> {
        Ok(())
    }

    fn offline_error(&self) -> Option<Error> {
        None
    }
}

fn entry(v: u64) -> Entry<(), u64> {
    Entry::plain(v as i64, v)
}

/// A persisted partition of 4 slots whose records 0..4 were written to `disk` and then
/// overwritten in the ring by 4..8, before the disk's end moved past 0.
fn overwritten_before_published(disk: &Arc<LaggingDisk>) -> Arc<Partition<(), u64>> {
    let config = PartitionConfig {
        capacity: 4,
        gated: false,
        retention_ms: None,
    };
    let dyn_disk: Arc<dyn DiskLog<(), u64>> = disk.clone();
    let (p, mut gate) =
        Partition::persisted(config, Arc::new(WaitSet::new()), 0, dyn_disk).unwrap();
    let mut a = p.appender();
    for v in 0..4 {
        a.append(entry(v), AppendWait::No)
            .map_err(|(_, e)| e)
            .unwrap();
    }
    disk.records.lock().extend((0..4).map(entry));
    // Relaxed: ordered by the reader thread's spawn.
    disk.written.store(4, Ordering::Relaxed);
    assert_eq!(gate.try_read_with(4, |_, _| ()).unwrap().0, 4);
    for v in 4..8 {
        a.append(entry(v), AppendWait::No)
            .map_err(|(_, e)| e)
            .unwrap();
    }
    Arc::new(p)
}

/// Reads offset 0 on a thread with a 64 KiB stack.
fn read_first(p: &Arc<Partition<(), u64>>) -> (ReadOutcome, Vec<u64>) {
    let p = Arc::clone(p);
    thread::spawn_with_stack(64 << 10, move || {
        let mut got = Vec::new();
        let outcome = p.read(0, 4, 0, None, |_, e| got.push(*e.into_entry().value()));
        (outcome, got)
    })
    .join()
    .unwrap()
}

/// A reader that finds its record overwritten in the ring while the writer has not yet
/// published its end waits for it (in constant stack, however long), then reads the disk.
#[test]
fn a_read_racing_the_writer_waits_in_constant_stack() {
    let disk = Arc::new(LaggingDisk::new());
    let p = overwritten_before_published(&disk);
    // Relaxed: ordered by the reader thread's spawn.
    disk.lag.store(2_000, Ordering::Relaxed);
    assert_eq!(read_first(&p), (ReadOutcome::Read(4), vec![0, 1, 2, 3]));
}

/// A record that left the ring unwritten (the writer stopped, the ring closed) fails the
/// read instead of retrying for ever.
#[test]
fn a_record_lost_by_a_stopped_writer_fails_the_read() {
    let disk = Arc::new(LaggingDisk::new());
    let p = overwritten_before_published(&disk);
    // Relaxed: ordered by the reader thread's spawn.
    disk.stopped.store(true, Ordering::Relaxed);
    p.close();
    assert_eq!(read_first(&p).0, ReadOutcome::Failed);
}
