//! Replication (layer 6): leaders and followers, the ISR, the high watermark, `acks`,
//! leader epochs, failover — and a fault-injection API to test code against all of it.
//!
//! A topic created with [`TopicConfig::replication_factor`](crate::TopicConfig::replication_factor)
//! `n > 1` keeps each partition in `n` separate logs (*replicas*), placed on different data
//! directories: replica `i` of partition `p` on directory `(p + i) % dirs`, a replica's id
//! being its directory. In memory the directories are numbered virtual ones; a persisted
//! topic ([`Broker::create_topic`](crate::Broker::create_topic) on a
//! broker opened with [`data_dirs`](crate::broker::BrokerBuilder::data_dirs)) keeps each replica
//! as a log in Kafka's format in `<data dir>/<topic>-<partition>/`, with its
//! `leader-epoch-checkpoint`, and the partitions' leaders, epochs and ISRs in
//! `<data dir>/<topic>.replicas` (module `persisted`'s docs). One replica leads: it takes
//! every append and serves every read. The others follow: the broker's fetcher thread of each
//! directory copies the leader's new records into them in batches.
//!
//! Kafka's semantics, as current Kafka has them:
//! - **High watermark.** HW = the lowest log end over the in-sync replicas (ISR); consumers
//!   read only below it, so a record a consumer saw is on every in-sync replica.
//! - **ISR.** A follower leaves the ISR when it is behind the leader and was last caught up
//!   more than `replica_lag_time_max` ago on the broker's [`Clock`](crate::Clock) (or when it
//!   crashes), and rejoins once it holds everything below HW.
//! - **Acks** ([`Acks`](crate::producer::Acks)). `All` (the default) returns once every
//!   in-sync replica has the record, and refuses writes while the ISR is below
//!   `min_insync_replicas` ([`Error::NotEnoughReplicas`],
//!   or [`NotEnoughReplicasAfterAppend`](crate::Error::NotEnoughReplicasAfterAppend) when the
//!   ISR shrank while the send waited). `Leader` returns once the leader has it: a leader
//!   crash before a follower copied it loses it. Failed attempts are retried per the
//!   producer's `retries` / `delivery_timeout`; a retry after an append may duplicate the
//!   record (counted in [`ProducerMetrics`](crate::producer::ProducerMetrics)). A replicated
//!   partition always has room, so `try_send` waits for the acks level like `send`;
//!   `send_timeout` bounds that wait.
//! - **Elections.** When the leader fails, the first live ISR member in replica order leads,
//!   in a new leader epoch. With `unclean_leader_election` a replica outside the ISR may
//!   lead when no ISR member is alive; the committed records it lacks are lost, and the
//!   loss is reported ([`EventKind::RecordsLost`]).
//! - **Truncation by leader epoch.** Every record carries the epoch it was written in; each
//!   replica keeps the epochs' start offsets (Kafka's `leader-epoch-checkpoint`). After an
//!   election, and when a crashed replica returns, a follower asks the leader where its
//!   latest epoch ends and cuts its log there, repeating until they agree (KIP-101, KIP-279)
//!   — never at its high watermark, the pre-KIP-101 rule that let replicas diverge.
//!
//! In-memory replicas keep `records_in_memory` records each (the oldest beyond are dropped;
//! `Overflow` does not apply); persisted replicas keep that many of their latest records in
//! memory, and serve older ones from disk. A crash keeps a replica's log as written (a
//! process crash: the operating system still has it) unless a lost tail is asked for
//! ([`Faults::crash_replica_losing`]); a failed directory loses its in-memory replicas'
//! logs, and makes a persisted directory's I/O fail.
//!
//! A persisted replicated topic whose cleanup policy compacts has every replica's log
//! cleaned on its own by the broker's log cleaner, never at or past that replica's high
//! watermark (`set/clean.rs` states the rule); followers fetch across the offset gaps the
//! leader's cleaning leaves, as Kafka's do.
//!
//! Persisted replicated topics do not yet apply retention, grow partitions, or keep their
//! groups' committed offsets across a restart.
//!
//! # Fault injection
//!
//! [`Broker::faults`](crate::Broker::faults) returns a [`Faults`] handle: crash, stall, slow
//! or restart a replica, fail or restore a data directory, and read what happened
//! ([`Faults::events`]). Crashes, restarts and directory failures act at once (the election
//! they cause happens inside the call), so a test sees their outcome when the call returns;
//! lag-based ISR changes follow the broker's clock ([`Faults::check_isr_now`] applies them
//! at once).
//!
//! ```
//! use std::time::Duration;
//! use logbus::{Broker, TopicConfig};
//! use logbus::producer::Record;
//! use logbus::replica::EventKind;
//!
//! let broker = Broker::in_memory();
//! let config = TopicConfig::new(1).replication_factor(3).min_insync_replicas(2);
//! broker.create_topic::<(), u64>("payments", config)?;
//! let producer = broker.producer::<(), u64>(); // acks = all
//! producer.send(Record::new("payments", 1))?;
//!
//! let faults = broker.faults();
//! faults.crash_replica("payments", 0, 0)?; // the leader
//! let info = &broker.describe_topic("payments")?.replicas[0];
//! assert_eq!((info.leader, info.leader_epoch), (Some(1), 1));
//! assert!(faults.events().iter().any(|e| matches!(e.kind, EventKind::LeaderElected { leader: Some(1), .. })));
//! producer.send(Record::new("payments", 2))?; // the new leader and replica 2 are in sync
//! # Ok::<(), logbus::Error>(())
//! ```
//!
//! # Notes for contributors
//!
//! - One file per concern: `partition/replica_log.rs` (layer 5: a replica's log and
//!   leader-epoch cache, the KIP-101/279 truncation rule, unit-tested;
//!   `replica_log/time_index.rs`, where `offset_for_time` starts reading, proptested against
//!   the linear walk), `set/` (one partition's replicas, ISR, HW, acks, elections,
//!   faults, behind one lock; `view.rs` its read-only views, `disk.rs` its disk side), `runtime.rs` (the fetcher thread per data directory, the
//!   controller thread), `events.rs`, `mod.rs` (the public `Faults` API and types).
//! - `partition.rs` sees replication only through the `ReplicatedLog` trait (as it sees disks
//!   through `DiskLog`); keep new replication logic out of partition/broker/producer.
//! - Tests: `tests/replicas/replicas.rs` (named scenarios), `tests/replicas/replicas_jepsen.rs` (random fault
//!   schedules with a history checker; `LOGBUS_JEPSEN_SCHEDULES=2000` for a longer run,
//!   `LOGBUS_JEPSEN_SEED=n` to replay a failing seed), loom models in
//!   `src/replica/loom_models.rs` (run with the other lib models).
//! - With a `ManualClock`, let followers catch up before jumping the clock past
//!   `replica_lag_time_max`: a follower that is behind at the instant of a lag check and was
//!   last caught up more than the lag time ago leaves the ISR, whatever the reason.
//! - Persisted replicas (a broker on `data_dirs`): their files are `persist`'s (see the notes in `persist/data_dir.rs`); `set/disk.rs` is the replica set's disk side (disk first, then memory; an I/O
//!   error takes the directory offline). The replica set's lock covers the disk writes of its partition; the topic's
//!   metadata lock is taken under it, never the reverse.
//! - Tests: `tests/replicas/replicas_disk.rs` (placement, failing directories, reopen after close,
//!   process death and power loss), the Jepsen test's `_on_disk` half (50 schedules on a
//!   `FaultyIo` file system, then close and reopen), `cli` `describe_shows_replicas_isr_and_epochs`,
//!   and the interop step's `kafka_python_reads_every_replica_with_its_leader_epochs`.

mod events;
mod runtime;
mod set;

#[cfg(all(test, logbus_loom))]
mod loom_models;

use std::time::Duration;

pub(crate) use crate::partition::topic_config::TopicConfig;
use crate::partition::{ClosedByBroker, Entry, Partition};
pub use crate::persist::replicated::{LocalReplica, StoredPartition, StoredTopic};
use crate::sync::StdArc as Arc;
use crate::sync::WaitSet;
use crate::{Error, Result};
pub use events::{EventKind, ReplicaEvent, MAX_EVENTS};
pub(crate) use runtime::{ReplicaControl, Runtime};
pub(crate) use set::{ReplicaSet, ReplicationConfig};

/// One replica of a partition, as [`Broker::describe_topic`](crate::Broker::describe_topic)
/// sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaInfo {
    /// The replica's id (its data directory).
    pub id: u32,
    /// Its log start offset.
    pub log_start: u64,
    /// Its log end offset (LEO).
    pub log_end: u64,
    /// Whether it is up (not crashed, its directory not failed).
    pub online: bool,
    /// Whether it is in the ISR.
    pub in_sync: bool,
    /// Whether its fetching is stalled by the fault API.
    pub stalled: bool,
    /// The latest leader epoch in its log (`-1`: none).
    pub latest_epoch: i32,
    /// Its leader-epoch cache: `(epoch, start offset)` pairs, oldest first.
    pub epochs: Vec<(i32, u64)>,
}

/// A replicated partition's leader, ISR, epoch, HW and replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionReplicas {
    /// The partition.
    pub partition: u32,
    /// The leader's id, or `None` while no replica can lead.
    pub leader: Option<u32>,
    /// The current leader epoch (0 for the first leader).
    pub leader_epoch: i32,
    /// The in-sync replicas' ids.
    pub isr: Vec<u32>,
    /// The high watermark.
    pub high_watermark: u64,
    /// Every replica, in replica order (the first is the preferred leader).
    pub replicas: Vec<ReplicaInfo>,
}

/// One replica's records, for checking that replicas agree
/// ([`Topic::replica_logs`](crate::broker::Topic::replica_logs)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaLogView<K, V> {
    /// The replica's id.
    pub replica: u32,
    /// Its log start offset.
    pub log_start: u64,
    /// From the log start on: `(offset, leader epoch, key, value)`.
    pub records: Vec<(u64, i32, Option<K>, V)>,
}

/// Copies an entry (a failed send hands its record back while the log keeps it).
fn clone_entry<K: Clone, V: Clone>(e: &Entry<K, V>) -> Option<Entry<K, V>> {
    Some(e.clone())
}

/// Builds replicated partition `partition` of topic `name` on `runtime`.
pub(crate) fn build_partition<K, V>(
    runtime: &Runtime,
    name: &Arc<str>,
    partition: u32,
    config: &TopicConfig,
    arrivals: &Arc<WaitSet>,
) -> Result<Arc<Partition<K, V>>>
where
    K: Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    let rf = config.replicas_per_partition();
    let dirs = rf.max(runtime.dirs());
    let ids: Vec<u32> = (0..rf).map(|i| (partition + i) % dirs).collect();
    let fetchers = runtime.fetchers(&ids)?;
    let shared = &runtime.shared;
    let broker_closed = ClosedByBroker::default();
    let set = Arc::new(ReplicaSet::new(
        Arc::clone(name),
        partition,
        ReplicationConfig::of(config),
        &ids,
        fetchers,
        Arc::clone(arrivals),
        Arc::clone(&shared.clock),
        Arc::clone(&shared.events),
        clone_entry::<K, V>,
        broker_closed.clone(),
    ));
    let partition = Partition::replicated(
        config.partition_config(),
        Arc::clone(arrivals),
        Arc::clone(&set) as Arc<dyn crate::partition::ReplicatedLog<K, V>>,
        broker_closed,
    )?;
    runtime.register(set as Arc<dyn ReplicaControl>);
    Ok(Arc::new(partition))
}

/// The broker's fault-injection handle ([`Broker::faults`](crate::Broker::faults)): Kafka's
/// failures, on demand, for tests of code that uses replicated topics (module docs).
///
/// Replicas are named by id (their data directory), as
/// [`describe_topic`](crate::Broker::describe_topic) lists them. Calls on a topic deleted
/// meanwhile are refused with [`Error::UnknownTopic`].
#[derive(Debug, Clone)]
pub struct Faults {
    runtime: Arc<Runtime>,
}

impl Faults {
    pub(crate) fn new(runtime: Arc<Runtime>) -> Self {
        Self { runtime }
    }

    fn find(&self, topic: &str, partition: u32) -> Result<Arc<dyn ReplicaControl>> {
        let sets = self.runtime.sets();
        if let Some(s) = sets
            .iter()
            .find(|s| s.topic() == topic && s.partition() == partition)
        {
            return Ok(Arc::clone(s));
        }
        let count = sets.iter().filter(|s| s.topic() == topic).count() as u32;
        if count == 0 {
            return Err(Error::UnknownTopic {
                topic: topic.to_owned(),
            });
        }
        Err(Error::PartitionOutOfRange {
            topic: topic.to_owned(),
            partition,
            count,
        })
    }

    fn on_replica(
        &self,
        topic: &str,
        partition: u32,
        replica: u32,
        f: impl FnOnce(&dyn ReplicaControl) -> bool,
    ) -> Result<()> {
        let set = self.find(topic, partition)?;
        if f(&*set) {
            return Ok(());
        }
        Err(Error::UnknownReplica {
            topic: topic.to_owned(),
            partition,
            replica,
            replicas: set.describe().replicas.iter().map(|r| r.id).collect(),
        })
    }

    /// Crashes a replica: it stops, leaves the ISR (unless it is the last member), and if
    /// it led, a new leader is elected before this returns. Its log is kept as written.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`] (not a replicated topic), [`Error::PartitionOutOfRange`],
    /// [`Error::UnknownReplica`].
    pub fn crash_replica(&self, topic: &str, partition: u32, replica: u32) -> Result<()> {
        self.on_replica(topic, partition, replica, |s| s.crash(replica, None, false))
    }

    /// Crashes a replica losing its unsynced tail: its log keeps only the records below
    /// `keep_below` (a power loss; the storage layer's model keeps a prefix).
    ///
    /// # Errors
    ///
    /// As [`crash_replica`](Self::crash_replica).
    pub fn crash_replica_losing(
        &self,
        topic: &str,
        partition: u32,
        replica: u32,
        keep_below: u64,
    ) -> Result<()> {
        self.on_replica(topic, partition, replica, |s| {
            s.crash(replica, Some(keep_below), false)
        })
    }

    /// Restarts a crashed replica: it returns as a follower, truncates by leader epoch,
    /// catches up and rejoins the ISR. If the partition had no leader, one is elected
    /// before this returns (this replica, if it may lead). No-op on a live replica and on
    /// one whose data directory failed ([`restore_data_dir`](Self::restore_data_dir)
    /// brings those back).
    ///
    /// # Errors
    ///
    /// As [`crash_replica`](Self::crash_replica).
    pub fn restart_replica(&self, topic: &str, partition: u32, replica: u32) -> Result<()> {
        self.on_replica(topic, partition, replica, |s| s.restart(replica, false))
    }

    /// Stops a follower's fetching (a stalled broker or network): it falls behind and,
    /// after `replica_lag_time_max` of broker time with new records, leaves the ISR.
    ///
    /// # Errors
    ///
    /// As [`crash_replica`](Self::crash_replica).
    pub fn stall_replica(&self, topic: &str, partition: u32, replica: u32) -> Result<()> {
        self.on_replica(topic, partition, replica, |s| s.set_stalled(replica, true))
    }

    /// Lets a stalled follower fetch again.
    ///
    /// # Errors
    ///
    /// As [`crash_replica`](Self::crash_replica).
    pub fn resume_replica(&self, topic: &str, partition: u32, replica: u32) -> Result<()> {
        self.on_replica(topic, partition, replica, |s| s.set_stalled(replica, false))
    }

    /// Slows a follower to one fetch (of at most 1024 records) per `every` of the broker's
    /// clock; `Duration::ZERO` restores full speed.
    ///
    /// # Errors
    ///
    /// As [`crash_replica`](Self::crash_replica).
    pub fn slow_replica(
        &self,
        topic: &str,
        partition: u32,
        replica: u32,
        every: Duration,
    ) -> Result<()> {
        self.on_replica(topic, partition, replica, |s| s.set_slow(replica, every))
    }

    fn check_dir(&self, dir: u32) -> Result<()> {
        let count = self.runtime.dirs();
        if dir >= count {
            return Err(Error::DataDirOutOfRange { index: dir, count });
        }
        Ok(())
    }

    /// Fails data directory `dir`: every replica on it goes offline and loses its log
    /// (leaders move, ISRs shrink, before this returns). Partitions created while it is
    /// failed start with their replica on it offline. On a broker opened on data
    /// directories, `dir` is the directory's index in
    /// [`data_dirs`](crate::broker::BrokerBuilder::data_dirs), and every file operation under it
    /// fails from now on (its persisted replicas' logs stay on disk, unreachable); an I/O
    /// error or a directory removed outside does the same on its own.
    ///
    /// # Errors
    ///
    /// [`Error::DataDirOutOfRange`] (in memory, directories are numbered from 0 up to the
    /// largest replication factor asked for; on disk, up to the directory count).
    pub fn fail_data_dir(&self, dir: u32) -> Result<()> {
        self.check_dir(dir)?;
        if let Some(d) = self.runtime.disk() {
            // A persisted directory: its I/O fails from now on.
            d.set_failed(dir, true);
        }
        self.runtime.fail_dir(dir);
        Ok(())
    }

    /// Brings data directory `dir` back: its replicas restart, truncate by leader epoch and
    /// catch up from the leaders — in memory from an empty log, persisted from what the
    /// disk kept (reopened and recovered).
    ///
    /// # Errors
    ///
    /// [`Error::DataDirOutOfRange`].
    pub fn restore_data_dir(&self, dir: u32) -> Result<()> {
        self.check_dir(dir)?;
        if let Some(d) = self.runtime.disk() {
            d.set_failed(dir, false);
        }
        self.runtime.mark_dir(dir, false);
        for s in self.runtime.sets() {
            s.restart(dir, true);
        }
        Ok(())
    }

    /// Applies the ISR lag rule now, at the broker clock's time (the controller thread
    /// does it every few milliseconds anyway): with a [`ManualClock`](crate::ManualClock),
    /// advance the clock past `replica_lag_time_max`, then call this.
    pub fn check_isr_now(&self) {
        let now = self.runtime.shared.clock.now_ms();
        for s in self.runtime.sets() {
            s.check_isr(now);
        }
    }

    /// Waits until every live replica of the partition is in the ISR and holds the
    /// leader's whole log. `Ok(false)` on timeout.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`], [`Error::PartitionOutOfRange`].
    pub fn wait_in_sync(&self, topic: &str, partition: u32, timeout: Duration) -> Result<bool> {
        Ok(self.find(topic, partition)?.wait_in_sync(timeout))
    }

    /// Everything that happened to replicated partitions so far, in order (the latest
    /// [`MAX_EVENTS`] at most).
    pub fn events(&self) -> Vec<ReplicaEvent> {
        self.runtime.shared.events.all()
    }

    /// Waits up to `timeout` until an event matching `pred` has happened (at any time) and
    /// returns it.
    pub fn wait_for_event(
        &self,
        timeout: Duration,
        pred: impl FnMut(&ReplicaEvent) -> bool,
    ) -> Option<ReplicaEvent> {
        self.runtime.shared.events.wait_for(timeout, pred)
    }
}

/// Brings the lost replicas of a partition just opened (offline) back as followers of the
/// leader elected without them (see `persist::replicated::lost`). Without a leader (a lost
/// replica was the last in sync) they stay offline: restarting one would elect its empty log.
pub(crate) fn rejoin<K, V>(set: Arc<ReplicaSet<K, V>>, lost: &[u32]) -> Arc<ReplicaSet<K, V>>
where
    K: Send + Sync + 'static,
    V: Send + Sync + 'static,
{
    if !lost.is_empty() && set.describe().leader.is_some() {
        for &d in lost {
            set.restart(d, true);
        }
    }
    set
}
