//! The broker's replication threads: one fetcher per data directory, serving every follower
//! replica on that directory (as Kafka runs fetcher threads per source broker), and one
//! controller that expires lagging followers from the ISR on the broker's clock.
//!
//! One fetcher per directory rather than per partition: the thread count stays at the
//! directory count however many partitions there are, and a failed directory's fetcher
//! simply finds its replicas offline.

use std::time::Duration;

use super::events::Events;
use super::set::{ReplicaSet, Wake};
use super::PartitionReplicas;
use crate::clock::Clock;
use crate::persist::replicated::DiskDirs;
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::thread::{self, JoinHandle};
use crate::sync::time;
// Std's Arc: the registry holds type-erased sets (see `sync::StdArc`).
use crate::sync::StdArc as Arc;
use crate::sync::{Backoff, Mutex};

/// How often a parked fetcher looks again without being woken (slow replicas, restarts).
const FETCH_IDLE: Duration = Duration::from_millis(20);
/// How often the controller checks follower lag.
const CONTROL_EVERY: Duration = Duration::from_millis(10);

/// A replicated partition with its types erased, as the threads and the fault API see it.
pub(crate) trait ReplicaControl: Send + Sync {
    fn topic(&self) -> &str;
    fn partition(&self) -> u32;
    fn fetch(&self, dir: u32) -> bool;
    fn check_isr(&self, now_ms: i64);
    fn crash(&self, id: u32, cut: Option<u64>, dir_failed: bool) -> bool;
    fn restart(&self, id: u32, restore: bool) -> bool;
    fn set_stalled(&self, id: u32, stalled: bool) -> bool;
    fn set_slow(&self, id: u32, every: Duration) -> bool;
    fn wait_in_sync(&self, timeout: Duration) -> bool;
    fn describe(&self) -> PartitionReplicas;
    fn is_closed(&self) -> bool;
}

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> ReplicaControl for ReplicaSet<K, V> {
    fn topic(&self) -> &str {
        ReplicaSet::topic(self)
    }
    fn partition(&self) -> u32 {
        ReplicaSet::partition(self)
    }
    fn fetch(&self, dir: u32) -> bool {
        ReplicaSet::fetch(self, dir)
    }
    fn check_isr(&self, now_ms: i64) {
        ReplicaSet::check_isr(self, now_ms);
    }
    fn crash(&self, id: u32, cut: Option<u64>, dir_failed: bool) -> bool {
        ReplicaSet::crash(self, id, cut, dir_failed)
    }
    fn restart(&self, id: u32, restore: bool) -> bool {
        ReplicaSet::restart(self, id, restore)
    }
    fn set_stalled(&self, id: u32, stalled: bool) -> bool {
        ReplicaSet::set_stalled(self, id, stalled)
    }
    fn set_slow(&self, id: u32, every: Duration) -> bool {
        ReplicaSet::set_slow(self, id, every)
    }
    fn wait_in_sync(&self, timeout: Duration) -> bool {
        ReplicaSet::wait_in_sync(self, timeout)
    }
    fn describe(&self) -> PartitionReplicas {
        ReplicaSet::describe(self)
    }
    fn is_closed(&self) -> bool {
        ReplicaSet::is_closed(self)
    }
}

/// What the threads share.
pub(crate) struct Shared {
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) events: Arc<Events>,
    sets: Mutex<Vec<Arc<dyn ReplicaControl>>>,
    /// Bumped when `sets` changes; fetchers re-read the list when it moved.
    generation: AtomicU64,
    /// Per directory: wakes its fetcher.
    wakes: Mutex<Vec<Arc<Wake>>>,
    controller: Wake,
    shutdown: AtomicBool,
    /// Directories failed by the fault API (their new replicas start offline).
    failed_dirs: Mutex<Vec<u32>>,
    /// A broker opened on data directories: the persisted replicas' directories.
    disk: Mutex<Option<Arc<DiskDirs>>>,
}

/// The broker's replication runtime: joined when the broker is dropped.
pub(crate) struct Runtime {
    pub(crate) shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").finish_non_exhaustive()
    }
}

impl Runtime {
    /// A runtime with no threads yet (the first replicated partition starts them).
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        let shared = Arc::new(Shared {
            clock,
            events: Arc::new(Events::default()),
            sets: Mutex::new(Vec::new()),
            generation: AtomicU64::new(0),
            wakes: Mutex::new(Vec::new()),
            controller: Wake::default(),
            shutdown: AtomicBool::new(false),
            failed_dirs: Mutex::new(Vec::new()),
            disk: Mutex::new(None),
        });
        Self {
            shared,
            threads: Mutex::new(Vec::new()),
        }
    }

    /// The directory count: the broker's data directories, or the fetchers started so far
    /// (in memory), whichever is larger.
    pub(crate) fn dirs(&self) -> u32 {
        let disk = self.disk().map_or(0, |d| d.count());
        disk.max(self.shared.wakes.lock().len() as u32)
    }

    /// The broker's data directories, for persisted replicas.
    pub(crate) fn disk(&self) -> Option<Arc<DiskDirs>> {
        self.shared.disk.lock().clone()
    }

    /// Gives the runtime the broker's data directories (at open).
    pub(crate) fn attach_disk(&self, dirs: Arc<DiskDirs>) {
        *self.shared.disk.lock() = Some(dirs);
    }

    /// Takes directory `dir`'s replicas offline in every partition.
    pub(crate) fn fail_dir(&self, dir: u32) {
        self.mark_dir(dir, true);
        for s in self.sets() {
            s.crash(dir, None, true);
        }
    }

    /// The wake handles of directories `ids`, starting fetchers for new directories.
    ///
    /// # Errors
    ///
    /// [`Error::Io`](crate::Error::Io) when a fetcher thread cannot be started.
    pub(crate) fn fetchers(&self, ids: &[u32]) -> crate::Result<Vec<Arc<Wake>>> {
        let mut wakes = self.shared.wakes.lock();
        if wakes.is_empty() {
            let s = Arc::clone(&self.shared);
            let t = thread::spawn_named("logbus-controller".into(), move || controller(&s))
                .map_err(|source| crate::Error::Io {
                    context: "starting the replication controller thread".into(),
                    source,
                })?;
            self.threads.lock().push(t);
        }
        let need = ids.iter().max().map_or(0, |m| *m as usize + 1);
        while wakes.len() < need {
            let dir = wakes.len() as u32;
            let wake = Arc::new(Wake::default());
            let s = Arc::clone(&self.shared);
            let w = Arc::clone(&wake);
            let t = thread::spawn_named(format!("logbus-fetcher-{dir}"), move || {
                fetcher(&s, dir, &w)
            })
            .map_err(|source| crate::Error::Io {
                context: format!("starting the fetcher thread of directory {dir}"),
                source,
            })?;
            wakes.push(wake);
            self.threads.lock().push(t);
        }
        Ok(ids
            .iter()
            .map(|&i| Arc::clone(&wakes[i as usize]))
            .collect())
    }

    /// Registers a partition with the threads and the fault API.
    pub(crate) fn register(&self, set: Arc<dyn ReplicaControl>) {
        let failed = self.shared.failed_dirs.lock().clone();
        for d in failed {
            set.crash(d, None, true);
        }
        self.shared.sets.lock().push(set);
        // Release: pairs with the Acquire in `fetcher`.
        self.shared.generation.fetch_add(1, Ordering::Release);
    }

    /// The live partitions.
    pub(crate) fn sets(&self) -> Vec<Arc<dyn ReplicaControl>> {
        self.shared
            .sets
            .lock()
            .iter()
            .filter(|s| !s.is_closed())
            .cloned()
            .collect()
    }

    /// Every partition of topic `name`, described, in partition order.
    pub(crate) fn describe_topic(&self, name: &str) -> Vec<PartitionReplicas> {
        let mut out: Vec<_> = self
            .sets()
            .iter()
            .filter(|s| s.topic() == name)
            .map(|s| s.describe())
            .collect();
        out.sort_by_key(|p| p.partition);
        out
    }

    /// Records a directory failure (or its end) for partitions created later.
    pub(crate) fn mark_dir(&self, dir: u32, failed: bool) {
        let mut dirs = self.shared.failed_dirs.lock();
        dirs.retain(|&d| d != dir);
        if failed {
            dirs.push(dir);
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // Release: pairs with the Acquire loads in the threads' loops.
        self.shared.shutdown.store(true, Ordering::Release);
        self.shared.controller.wake();
        for w in self.shared.wakes.lock().iter() {
            w.wake();
        }
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
    }
}

fn fetcher(shared: &Shared, dir: u32, wake: &Wake) {
    let mut generation = u64::MAX;
    let mut sets: Vec<Arc<dyn ReplicaControl>> = Vec::new();
    let mut busy = false;
    // Acquire: pairs with the Release store in `Runtime::drop`.
    while !shared.shutdown.load(Ordering::Acquire) {
        // Acquire: pairs with the Release bump in `register`.
        let g = shared.generation.load(Ordering::Acquire);
        if g != generation {
            sets = shared.sets.lock().clone();
            generation = g;
        }
        if !fetch_step(&sets, dir, wake, &mut busy) {
            // Spin, then yield, before parking: a leader under load appends again within
            // microseconds, and waking a parked thread costs more than that.
            let mut backoff = Backoff::new();
            // Relaxed: a hint; the parking below re-checks under the wake protocol.
            while !backoff.is_completed() && !wake.pending.load(Ordering::Relaxed) {
                backoff.snooze();
            }
            // Relaxed: as above.
            if wake.pending.load(Ordering::Relaxed) {
                continue;
            }
            wake.set.wait_until(time::deadline_after(FETCH_IDLE), || {
                // Relaxed: read after the WaitSet's SeqCst fence (see `Wake::wake`).
                (wake.pending.load(Ordering::Relaxed) || shared.shutdown.load(Ordering::Relaxed))
                    .then_some(())
            });
        }
    }
}

/// One step of a fetcher: a round of fetches (`fetch_round`); `false` when the fetcher may
/// park. `busy`: the last round copied something, and `pending` was left set.
///
/// A busy fetcher leaves `pending` as it is, so the appends that come while it copies find
/// it set and skip their wake (`Wake::nudge`: a load, not a store and a fence per append).
/// A round that copies nothing ends the busy spell; the fetcher then parks only if
/// `pending` is clear (`wait_until`'s check), and a `pending` left set sends it round again,
/// clearing it first: `Wake::nudge`'s argument needs a clear before the fetches of the
/// round after which the fetcher parks.
pub(crate) fn fetch_step<S: ReplicaControl + ?Sized>(
    sets: &[Arc<S>],
    dir: u32,
    wake: &Wake,
    busy: &mut bool,
) -> bool {
    *busy = fetch_round(sets, dir, wake, !*busy);
    *busy
}

/// One fetch for each of directory `dir`'s followers; whether any copied something.
/// `clear`: `pending` is cleared first, before any fetch takes a partition's lock: a wake
/// that comes after the clear is seen before parking, and `Wake::nudge` relies on the order.
pub(crate) fn fetch_round<S: ReplicaControl + ?Sized>(
    sets: &[Arc<S>],
    dir: u32,
    wake: &Wake,
    clear: bool,
) -> bool {
    if clear {
        // Relaxed: the wake protocol's fences order it (see `Wake::wake`), and the
        // partitions' locks order it for `Wake::nudge`.
        wake.pending.store(false, Ordering::Relaxed);
    }
    let mut progress = false;
    for s in sets {
        progress |= s.fetch(dir);
    }
    progress
}

fn controller(shared: &Shared) {
    // Acquire: pairs with the Release store in `Runtime::drop`.
    while !shared.shutdown.load(Ordering::Acquire) {
        let now = shared.clock.now_ms();
        let (sets, pruned) = {
            let mut all = shared.sets.lock();
            let before = all.len();
            all.retain(|s| !s.is_closed());
            let pruned = all.len() != before;
            (all.clone(), pruned)
        };
        if pruned {
            // Release: as in `register`.
            shared.generation.fetch_add(1, Ordering::Release);
        }
        for s in &sets {
            s.check_isr(now);
        }
        let disk = shared.disk.lock().clone();
        if let Some(d) = disk {
            // A directory that returned an I/O error, or vanished: all its replicas go.
            for dir in d.take_failures() {
                shared.failed_dirs.lock().push(dir);
                for s in &sets {
                    s.crash(dir, None, true);
                }
            }
        }
        shared
            .controller
            .set
            .wait_until(time::deadline_after(CONTROL_EVERY), || {
                // Relaxed: read after the WaitSet's SeqCst fence.
                shared.shutdown.load(Ordering::Relaxed).then_some(())
            });
    }
}
