//! The transaction coordinator (KIP-98) and its transaction log.
//!
//! One coordinator per broker keeps, per `transactional_id`, the producer id, the current
//! epoch, the state (Kafka's `TransactionState`: `Empty`, `Ongoing`, `PrepareCommit`,
//! `PrepareAbort`, `CompleteCommit`, `CompleteAbort`), the partitions the open transaction
//! wrote to and the group offsets sent to it. Every state change is written to the
//! transaction log first.
//!
//! # One epoch per transaction (KIP-890), and why a late marker cannot land
//!
//! A transaction runs at one producer epoch; its end markers carry that epoch; completing
//! it bumps the epoch, and the producer's next transaction runs at the new one. Each
//! partition (`partition::txn`) refuses a record whose epoch has a marker there already,
//! and a marker whose epoch is not that of the transaction open there. So:
//!
//! - a record of transaction *k* sent late (a zombie, a retry) is refused once *k*'s
//!   marker is written: it cannot be read as committed, nor join transaction *k+1*;
//! - a marker of *k* delivered late (a coordinator retry after a failover) finds *k+1*
//!   open at a newer epoch and is refused: it cannot commit or abort *k+1* (the torn
//!   transaction Jepsen found in Kafka 3.x, where the marker carried no transaction
//!   identity beyond the producer id and epoch of a whole session);
//! - `init_transactions` bumps the epoch as well: the previous producer with the same id
//!   is fenced at the coordinator (`add partition`, `end`) and at every partition its
//!   abandoned transaction touched (its ABORT markers).
//!
//! The coordinator lets *k+1* begin only after all of *k*'s markers are written (its state
//! leaves `Prepare*` only then), and group offsets sent to *k* are committed after its
//! COMMIT markers and before the state becomes `CompleteCommit`: a later
//! `init_transactions` (the restarted worker) completes a `Prepare*` transaction first, so
//! it resumes from the offsets of exactly the transactions whose output is committed.
//!
//! # Transaction timeout
//!
//! A transaction open longer than its `transaction_timeout`, on the broker's
//! [`Clock`](crate::Clock), is aborted by the coordinator on its own (Kafka's
//! `abortTimedOutTransactions`): a broker thread, `logbus-txn-timeouts`, started with the
//! broker's first `init_transactions` and stopped and joined by
//! [`close`](Broker::close) or the drop of the broker's last handle, checks every
//! [`transaction_abort_timed_out_transaction_cleanup_interval`](crate::broker::BrokerBuilder::transaction_abort_timed_out_transaction_cleanup_interval)
//! of real time (10 s by default); every coordinator call and every
//! `describe_transactions` checks as well. So a producer that died with a transaction
//! open (dropped, its thread gone, never restarted) holds the LSO of the partitions it
//! wrote to for at most its timeout plus one interval. The interval is real time, the
//! timeout the broker's clock: with a [`ManualClock`](crate::ManualClock), advancing the
//! clock past the timeout lets the next check abort it, with no call on the coordinator.
//!
//! The thread also completes a transaction left `PrepareCommit` or `PrepareAbort` (a
//! marker write failed, or the broker closed between the decision and the markers), as
//! Kafka's coordinator resends a decided transaction's markers.
//!
//! The check aborts as `init_transactions` of a new producer would: under the
//! coordinator's lock it moves the transaction from `Ongoing` to `PrepareAbort` (logged),
//! so a racing `commit_transaction` either moved it to `PrepareCommit` first (the check
//! leaves it alone and the commit completes) or finds it `PrepareAbort` (and gets
//! [`Error::TransactionTimedOut`]): never both. It then writes the ABORT markers and bumps
//! the epoch. The producer of a timed-out transaction gets [`Error::TransactionTimedOut`]
//! at its next call and may begin again. The last clone of a
//! [`Producer`](crate::producer::Producer) dropped with a transaction open aborts it
//! itself (as Kafka's client's `close` does); the timeout is for the producers that never
//! run their drop.

//! # The transaction log
//!
//! In memory on an in-memory broker. On a broker with a data directory, the file
//! `__transaction_state.log` in it (Kafka's `__transaction_state` topic, in a format of
//! logbus's own: a single-writer file, compacted at open), appended and fsynced before each
//! state change takes effect. Each record:
//!
//! ```text
//! length u32 | crc32c(payload) u32 | payload
//! payload: version u8 (0) | transactional id (u16 length + UTF-8) | producer id i64 |
//!          epoch i16 | state u8 | timeout ms u64 | last update ms i64 |
//!          partitions u32 count, each (topic: u16 length + UTF-8, partition u32) |
//!          offsets u32 count, each (group, topic: u16 length + UTF-8, partition u32, offset u64)
//! ```
//!
//! all big-endian. The last record of an id is its state. Replay stops at the first
//! record that is short or fails its CRC (a torn tail of a crash) and rewrites the file
//! with the state of each id. The coordinator epoch (written into every marker) is one
//! more than the number of times the file was replayed (a first record with an empty id
//! counts the opens).

use std::path::PathBuf;
use std::time::Duration;

use super::topic::{MarkerWrite, TopicAdmin, TopicInner};
use super::{Broker, TopicPartition};
use crate::storage::{Io, IoFile, OpenMode};
use crate::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use crate::sync::thread::{self, JoinHandle};
use crate::sync::Arc as SyncArc;
use crate::sync::StdArc;
use crate::sync::{Mutex, WaitSet};
use crate::{Error, Result};
use foldhash::HashMap;

/// A transaction's state at the coordinator (Kafka's `TransactionState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TxnState {
    /// No transaction since the epoch was bumped.
    Empty,
    /// Records or offsets were added to the open transaction.
    Ongoing,
    /// Committing: COMMIT markers being written.
    PrepareCommit,
    /// Aborting: ABORT markers being written.
    PrepareAbort,
    /// The last transaction committed.
    CompleteCommit,
    /// The last transaction aborted.
    CompleteAbort,
}

impl TxnState {
    fn code(self) -> u8 {
        self as u8
    }

    fn from_code(c: u8) -> Option<Self> {
        Some(match c {
            0 => Self::Empty,
            1 => Self::Ongoing,
            2 => Self::PrepareCommit,
            3 => Self::PrepareAbort,
            4 => Self::CompleteCommit,
            5 => Self::CompleteAbort,
            _ => return None,
        })
    }

    /// Whether a new transaction may begin (no transaction open or being completed).
    fn is_idle(self) -> bool {
        matches!(
            self,
            Self::Empty | Self::CompleteCommit | Self::CompleteAbort
        )
    }
}

/// One transactional id at the coordinator ([`Broker::describe_transactions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionDescription {
    /// The transactional id.
    pub transactional_id: String,
    /// Its producer id.
    pub producer_id: i64,
    /// Its current epoch.
    pub epoch: i16,
    /// The state of its current (or last) transaction.
    pub state: TxnState,
    /// The partitions the open transaction wrote to.
    pub partitions: Vec<TopicPartition>,
    /// The transaction timeout.
    pub timeout_ms: u64,
}

/// One group offset sent to a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TxnOffset {
    group: String,
    tp: TopicPartition,
    offset: u64,
}

#[derive(Clone)]
struct TxnMeta {
    producer_id: i64,
    epoch: i16,
    state: TxnState,
    /// Shared with the marker writes of a `Prepare*` transaction, which take a handle
    /// rather than a copy.
    partitions: StdArc<TxnPartitions>,
    offsets: Vec<TxnOffset>,
    timeout_ms: u64,
    /// When the open transaction began (its first partition or offsets).
    started_ms: i64,
    /// The ids of the last transaction the coordinator aborted on timeout (its producer
    /// is told so rather than that it is fenced).
    timed_out: Option<TxnIds>,
}

/// A transaction's partitions, in order, each with the topic its sender routed to (`None`
/// when replayed from the log), where `txn_complete` writes its marker with no lookup by
/// name. The entries of the transactions before stay, out of the transaction, for a later
/// one to take back without allocating: an id's transactions mostly write to the same
/// partitions.
#[derive(Clone, Default)]
struct TxnPartitions {
    /// Sorted by topic and partition; those in the transaction marked `member`.
    entries: Vec<TxnPartition>,
}

#[derive(Clone)]
struct TxnPartition {
    tp: TopicPartition,
    writer: Option<StdArc<dyn TopicAdmin>>,
    member: bool,
}

/// How many entries out of the transaction [`TxnPartitions`] keeps for the next one.
const KEPT_PARTITIONS: usize = 64;

impl TxnPartitions {
    /// Adds partition `partition` of `topic`; `false` if it was in the transaction already.
    fn insert(
        &mut self,
        topic: &str,
        partition: u32,
        writer: Option<StdArc<dyn TopicAdmin>>,
    ) -> bool {
        let at = self
            .entries
            .binary_search_by(|e| (e.tp.topic.as_str(), e.tp.partition).cmp(&(topic, partition)));
        match at {
            Ok(i) => {
                let e = &mut self.entries[i];
                let added = !e.member;
                e.member = true;
                e.writer = writer;
                added
            }
            Err(i) => {
                self.entries.insert(
                    i,
                    TxnPartition {
                        tp: TopicPartition::new(topic.to_owned(), partition),
                        writer,
                        member: true,
                    },
                );
                true
            }
        }
    }

    /// Takes partition `partition` of `topic` out of the transaction.
    fn remove(&mut self, topic: &str, partition: u32) {
        for e in &mut self.entries {
            if e.tp.partition == partition && e.tp.topic == topic {
                e.member = false;
                e.writer = None;
            }
        }
    }

    /// Takes every partition out of the transaction.
    fn clear(&mut self) {
        if self.entries.len() > KEPT_PARTITIONS {
            self.entries.clear();
        }
        for e in &mut self.entries {
            e.member = false;
            e.writer = None;
        }
    }

    /// The transaction's partitions, in order, with their writers.
    fn iter(&self) -> impl Iterator<Item = (&TopicPartition, Option<&dyn TopicAdmin>)> {
        self.entries
            .iter()
            .filter(|e| e.member)
            .map(|e| (&e.tp, e.writer.as_deref()))
    }

    fn len(&self) -> usize {
        self.entries.iter().filter(|e| e.member).count()
    }
}

impl TxnMeta {
    /// The ids the current (or next) transaction runs under.
    fn ids(&self) -> TxnIds {
        TxnIds {
            producer_id: self.producer_id,
            epoch: self.epoch,
        }
    }

    /// The instant (broker clock) past which the open transaction times out.
    fn deadline_ms(&self) -> i64 {
        self.started_ms
            .saturating_add(i64::try_from(self.timeout_ms).unwrap_or(i64::MAX))
    }

    /// Forgets the transaction's partitions and offsets (it ended, or a new one begins).
    fn clear_members(&mut self) {
        match StdArc::get_mut(&mut self.partitions) {
            Some(p) => p.clear(),
            // A marker writer still holds the set it wrote from.
            None => self.partitions = StdArc::default(),
        }
        self.offsets.clear();
    }

    /// Moves on to the next epoch: past the last one, a fresh producer id at epoch 0
    /// (Kafka's rule at epoch exhaustion), so that a long-lived transactional id goes on
    /// fencing its earlier transactions instead of wrapping into negative epochs.
    fn bump_epoch(&mut self, ids: &crate::broker::producer_ids::ProducerIds) {
        if self.epoch == i16::MAX {
            self.producer_id = ids.allocate().id;
            self.epoch = 0;
        } else {
            self.epoch += 1;
        }
    }
}

/// The coordinator (module docs).
pub(crate) struct TxnCoordinator {
    txns: Mutex<HashMap<String, TxnMeta>>,
    /// The earliest deadline of an `Ongoing` transaction (`i64::MIN`: not known, look):
    /// `txn_expire` looks through the transactions only past it. Read and written under
    /// `txns`'s lock only.
    next_expiry: AtomicI64,
    /// A durable broker's transaction log (`None` in memory: its state changes then take
    /// no lock for it).
    log: Option<Mutex<TxnLogFile>>,
    coordinator_epoch: i32,
    /// The largest producer id in the replayed log (the broker's allocator reserves it).
    max_producer_id: i64,
    /// How a marker is written (`acks = all`, waiting at most 10 s for its
    /// acknowledgement): one policy shared by every marker.
    marker_policy: crate::sync::StdArc<crate::partition::SendPolicy>,
    /// Groups with a read-committed consumer: their lag counts to the LSO.
    read_committed_groups: Mutex<std::collections::HashSet<String>>,
    /// The thread aborting timed-out transactions (module docs).
    timeouts: TimeoutTask,
}

/// The name of the thread aborting timed-out transactions.
const TIMEOUT_THREAD: &str = "logbus-txn-timeouts";

/// The coordinator's thread aborting timed-out transactions, and how to stop it.
struct TimeoutTask {
    /// The real time between two checks.
    interval: Mutex<Duration>,
    /// The thread, once started; `None` again once joined.
    handle: Mutex<Option<JoinHandle<()>>>,
    /// Shared with the thread, which waits on it without holding the broker.
    stop: crate::sync::StdArc<TimeoutStop>,
}

/// Set by [`TimeoutTask::stop`]: the thread ends and no other starts.
struct TimeoutStop {
    stop: AtomicBool,
    wait: WaitSet,
}

impl TimeoutStop {
    fn stopping(&self) -> bool {
        // Acquire: pairs with the Release store in `TimeoutTask::stop`.
        self.stop.load(Ordering::Acquire)
    }
}

impl TimeoutTask {
    fn new() -> Self {
        Self {
            interval: Mutex::new(DEFAULT_TXN_CLEANUP_INTERVAL),
            handle: Mutex::new(None),
            stop: crate::sync::StdArc::new(TimeoutStop {
                stop: AtomicBool::new(false),
                wait: WaitSet::new(),
            }),
        }
    }

    /// Stops the thread and joins it (the drop of the last user handle, `close`), unless
    /// called on it (a handle it holds turned out the last): it then ends on its own as
    /// soon as this returns.
    fn stop(&self) {
        // Release: pairs with the Acquire in `stopping`.
        self.stop.stop.store(true, Ordering::Release);
        self.stop.wait.notify_all();
        let handle = self.handle.lock().take();
        if let Some(h) = handle {
            if thread::current().name() != Some(TIMEOUT_THREAD) {
                let _ = h.join();
            }
        }
    }
}

/// [`BrokerBuilder::transaction_abort_timed_out_transaction_cleanup_interval`](crate::broker::BrokerBuilder::transaction_abort_timed_out_transaction_cleanup_interval)'s
/// default (Kafka's `transaction.abort.timed.out.transaction.cleanup.interval.ms`).
pub(crate) const DEFAULT_TXN_CLEANUP_INTERVAL: Duration = Duration::from_secs(10);

impl std::fmt::Debug for TxnCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxnCoordinator").finish_non_exhaustive()
    }
}

/// The transaction log's file.
struct TxnLogFile {
    io: SyncArc<dyn Io>,
    dir: PathBuf,
    path: PathBuf,
    /// `None` until the first transaction.
    file: Option<Box<dyn IoFile>>,
    /// Where the next record goes.
    end: u64,
}

const LOG_NAME: &str = "__transaction_state.log";

impl TxnCoordinator {
    /// An in-memory coordinator.
    pub(crate) fn in_memory() -> Self {
        Self {
            txns: Mutex::new(HashMap::default()),
            next_expiry: AtomicI64::new(i64::MIN),
            log: None,
            coordinator_epoch: 0,
            max_producer_id: -1,
            marker_policy: super::topic::marker_policy(Duration::from_secs(10)),
            read_committed_groups: Mutex::default(),
            timeouts: TimeoutTask::new(),
        }
    }

    /// The coordinator of a data directory: replays and compacts its transaction log
    /// (through the directory's `Io`, so that fault-injecting file systems see it too).
    pub(crate) fn open(io: SyncArc<dyn Io>, dir: &std::path::Path) -> Result<Self> {
        let path = dir.join(LOG_NAME);
        let err = |what: &'static str, e: std::io::Error| Error::Io {
            context: format!("{what} the transaction log {}", path.display()),
            source: e,
        };
        let mut bytes = Vec::new();
        let exists = io.exists(&path).map_err(|e| err("looking for", e))?;
        if !exists {
            // Created with the first transaction (a directory without transactions keeps
            // only its topics).
            return Ok(Self {
                txns: Mutex::new(HashMap::default()),
                next_expiry: AtomicI64::new(i64::MIN),
                log: Some(Mutex::new(TxnLogFile {
                    io,
                    dir: dir.to_path_buf(),
                    path,
                    file: None,
                    end: 0,
                })),
                coordinator_epoch: 0,
                max_producer_id: -1,
                marker_policy: super::topic::marker_policy(Duration::from_secs(10)),
                read_committed_groups: Mutex::default(),
                timeouts: TimeoutTask::new(),
            });
        }
        {
            let f = io
                .open(&path, OpenMode::Read)
                .map_err(|e| err("opening", e))?;
            let len = f.len().map_err(|e| err("reading", e))?;
            bytes.resize(len as usize, 0);
            f.read_exact_at(&mut bytes, 0)
                .map_err(|e| err("reading", e))?;
        }
        let mut txns = HashMap::default();
        let mut opens = 0i32;
        let mut max_pid = -1i64;
        for (id, meta) in replay(&bytes) {
            if id.is_empty() {
                opens = opens.max(meta.epoch as i32 + 1);
                continue;
            }
            max_pid = max_pid.max(meta.producer_id);
            txns.insert(id, meta);
        }
        let coordinator_epoch = opens;
        // Compacted: the open's own record, then each id's state.
        let tmp = dir.join(format!("{LOG_NAME}.tmp"));
        let mut out = Vec::new();
        let open_meta = TxnMeta {
            producer_id: -1,
            epoch: coordinator_epoch as i16,
            state: TxnState::Empty,
            partitions: StdArc::default(),
            offsets: Vec::new(),
            timeout_ms: 0,
            started_ms: 0,
            timed_out: None,
        };
        encode_record(&mut out, "", &open_meta);
        for (id, meta) in &txns {
            encode_record(&mut out, id, meta);
        }
        {
            let f = io
                .open(&tmp, OpenMode::Truncate)
                .map_err(|e| err("creating", e))?;
            f.write_all_at(&out, 0).map_err(|e| err("writing", e))?;
            f.sync_all().map_err(|e| err("syncing", e))?;
        }
        io.rename(&tmp, &path).map_err(|e| err("renaming", e))?;
        io.sync_dir(dir)
            .map_err(|e| err("syncing the directory of", e))?;
        let file = io
            .open(&path, OpenMode::ReadWrite)
            .map_err(|e| err("opening", e))?;
        Ok(Self {
            txns: Mutex::new(txns),
            next_expiry: AtomicI64::new(i64::MIN),
            log: Some(Mutex::new(TxnLogFile {
                io,
                dir: dir.to_path_buf(),
                path,
                file: Some(file),
                end: out.len() as u64,
            })),
            coordinator_epoch,
            max_producer_id: max_pid,
            marker_policy: super::topic::marker_policy(Duration::from_secs(10)),
            read_committed_groups: Mutex::default(),
            timeouts: TimeoutTask::new(),
        })
    }

    /// Stops and joins the thread aborting timed-out transactions (`close`, drop); no
    /// other starts after.
    pub(crate) fn stop_timeouts(&self) {
        self.timeouts.stop();
    }

    /// Writes `meta` to the log (durable before it returns, on a durable broker).
    fn log(&self, id: &str, meta: &TxnMeta) -> Result<()> {
        let Some(log) = &self.log else {
            return Ok(());
        };
        let mut guard = log.lock();
        let l = &mut *guard;
        let mut out = Vec::new();
        let err = |e: std::io::Error| Error::Io {
            context: format!("appending to the transaction log {}", l.path.display()),
            source: e,
        };
        if l.file.is_none() {
            // The first record: the file begins with this open's record (epoch 0).
            let open = TxnMeta {
                producer_id: -1,
                epoch: self.coordinator_epoch as i16,
                state: TxnState::Empty,
                partitions: StdArc::default(),
                offsets: Vec::new(),
                timeout_ms: 0,
                started_ms: 0,
                timed_out: None,
            };
            encode_record(&mut out, "", &open);
            let f = l.io.open(&l.path, OpenMode::Truncate).map_err(err)?;
            l.io.sync_dir(&l.dir).map_err(err)?;
            l.file = Some(f);
        }
        encode_record(&mut out, id, meta);
        let f = l.file.as_ref().expect("opened above");
        f.write_all_at(&out, l.end).map_err(err)?;
        f.sync_data().map_err(err)?;
        l.end += out.len() as u64;
        Ok(())
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u16).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn encode_record(out: &mut Vec<u8>, id: &str, m: &TxnMeta) {
    let mut p = vec![0u8];
    put_str(&mut p, id);
    p.extend_from_slice(&m.producer_id.to_be_bytes());
    p.extend_from_slice(&m.epoch.to_be_bytes());
    p.push(m.state.code());
    p.extend_from_slice(&m.timeout_ms.to_be_bytes());
    p.extend_from_slice(&m.started_ms.to_be_bytes());
    p.extend_from_slice(&(m.partitions.len() as u32).to_be_bytes());
    for (tp, _) in m.partitions.iter() {
        put_str(&mut p, &tp.topic);
        p.extend_from_slice(&tp.partition.to_be_bytes());
    }
    p.extend_from_slice(&(m.offsets.len() as u32).to_be_bytes());
    for o in &m.offsets {
        put_str(&mut p, &o.group);
        put_str(&mut p, &o.tp.topic);
        p.extend_from_slice(&o.tp.partition.to_be_bytes());
        p.extend_from_slice(&o.offset.to_be_bytes());
    }
    out.extend_from_slice(&(p.len() as u32).to_be_bytes());
    out.extend_from_slice(&crate::storage::record_batch::crc32c(&p).to_be_bytes());
    out.extend_from_slice(&p);
}

/// A cursor over a payload; `None` past its end.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
    fn str(&mut self) -> Option<String> {
        let n = self.u16()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
}

fn decode_payload(p: &[u8]) -> Option<(String, TxnMeta)> {
    let mut c = Cursor(p);
    if c.u8()? != 0 {
        return None;
    }
    let id = c.str()?;
    let producer_id = c.u64()? as i64;
    let epoch = c.u16()? as i16;
    let state = TxnState::from_code(c.u8()?)?;
    let timeout_ms = c.u64()?;
    let started_ms = c.u64()? as i64;
    let mut partitions = TxnPartitions::default();
    for _ in 0..c.u32()? {
        let topic = c.str()?;
        partitions.insert(&topic, c.u32()?, None);
    }
    let mut offsets = Vec::new();
    for _ in 0..c.u32()? {
        let group = c.str()?;
        let topic = c.str()?;
        let partition = c.u32()?;
        offsets.push(TxnOffset {
            group,
            tp: TopicPartition::new(topic, partition),
            offset: c.u64()?,
        });
    }
    Some((
        id,
        TxnMeta {
            producer_id,
            epoch,
            state,
            partitions: StdArc::new(partitions),
            offsets,
            timeout_ms,
            started_ms,
            timed_out: None,
        },
    ))
}

/// The records of a transaction log, up to the first torn or corrupt one.
fn replay(bytes: &[u8]) -> Vec<(String, TxnMeta)> {
    let mut out = Vec::new();
    let mut c = Cursor(bytes);
    while let (Some(len), Some(crc)) = (c.u32(), c.u32()) {
        let Some(p) = c.take(len as usize) else {
            break;
        };
        if crate::storage::record_batch::crc32c(p) != crc {
            break;
        }
        let Some(r) = decode_payload(p) else { break };
        out.push(r);
    }
    out
}

/// What a transactional producer holds: its id and the epoch of its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TxnIds {
    pub(crate) producer_id: i64,
    pub(crate) epoch: i16,
}

fn state_name(s: TxnState) -> &'static str {
    match s {
        TxnState::Empty => "Empty",
        TxnState::Ongoing => "Ongoing",
        TxnState::PrepareCommit => "PrepareCommit",
        TxnState::PrepareAbort => "PrepareAbort",
        TxnState::CompleteCommit => "CompleteCommit",
        TxnState::CompleteAbort => "CompleteAbort",
    }
}

impl Broker {
    pub(crate) fn txn_coordinator(&self) -> &TxnCoordinator {
        &self.inner.txn
    }

    /// Notes that `group` has a read-committed consumer: `describe_group` then reports its
    /// lag against the last stable offset (what it can read), as Kafka's tools do.
    pub(crate) fn note_read_committed_group(&self, group: &str) {
        self.txn_coordinator()
            .read_committed_groups
            .lock()
            .insert(group.to_owned());
    }

    /// Whether `group` had a read-committed consumer.
    pub(crate) fn is_read_committed_group(&self, group: &str) -> bool {
        self.txn_coordinator()
            .read_committed_groups
            .lock()
            .contains(group)
    }

    /// Reserves the producer ids the replayed transaction log holds (at open).
    pub(crate) fn txn_reserve_ids(&self) {
        let max = self.txn_coordinator().max_producer_id;
        if max >= 0 {
            self.producer_ids().reserve_through(max);
        }
    }

    /// Sets [`BrokerBuilder::transaction_abort_timed_out_transaction_cleanup_interval`](crate::broker::BrokerBuilder::transaction_abort_timed_out_transaction_cleanup_interval)
    /// (checked non-zero by the builder).
    pub(crate) fn set_txn_cleanup_interval(&self, interval: Duration) {
        *self.txn_coordinator().timeouts.interval.lock() = interval;
    }

    /// Starts the thread aborting timed-out transactions, if not yet started (nor
    /// stopped by `close`).
    fn txn_start_timeouts(&self) -> Result<()> {
        if cfg!(logbus_loom) {
            // A loom model cannot hold a thread that waits forever on timed waits (each
            // may expire at once there): models see the coordinator calls' own checks.
            return Ok(());
        }
        let task = &self.txn_coordinator().timeouts;
        let mut handle = task.handle.lock();
        if handle.is_some() || task.stop.stopping() {
            return Ok(());
        }
        // Weak: the thread must not keep the broker alive (its drop stops the thread).
        let broker = crate::sync::StdArc::downgrade(&self.inner);
        let stop = crate::sync::StdArc::clone(&task.stop);
        let interval = *task.interval.lock();
        let h = thread::spawn_named(TIMEOUT_THREAD.into(), move || {
            Broker::txn_timeouts_thread(&broker, &stop, interval);
        })
        .map_err(|e| Error::io("spawning the transaction timeout thread", e))?;
        *handle = Some(h);
        Ok(())
    }

    /// At open: starts the timeout thread if the replayed transaction log holds a
    /// transaction left unfinished (its producer may never come back): it aborts an
    /// `Ongoing` one past its timeout and completes a `Prepare*` one.
    pub(crate) fn txn_start_timeouts_if_open(&self) -> Result<()> {
        let unfinished = self
            .txn_coordinator()
            .txns
            .lock()
            .values()
            .any(|m| !m.state.is_idle());
        if unfinished {
            self.txn_start_timeouts()?;
        }
        Ok(())
    }

    /// The body of the `logbus-txn-timeouts` thread: every `interval`, aborts the
    /// transactions past their timeout, until stopped or the broker is gone.
    fn txn_timeouts_thread(
        broker: &crate::sync::StdWeak<super::BrokerInner>,
        stop: &TimeoutStop,
        interval: Duration,
    ) {
        loop {
            let deadline = crate::sync::time::deadline_after(interval);
            stop.wait
                .wait_until(deadline, || stop.stopping().then_some(()));
            if stop.stopping() {
                return;
            }
            // The broker is held only for the check, by a handle that is not a user's:
            // the last user handle's drop joins this thread before the broker goes.
            let Some(inner) = broker.upgrade() else {
                return;
            };
            let broker = Broker::internal(inner);
            broker.txn_expire();
            broker.txn_complete_prepared();
        }
    }

    /// Writes the markers of every transaction left `Prepare*` (a marker write failed, or
    /// the broker was closed or reopened between the decision and its markers) and
    /// completes it, as Kafka's coordinator resends the markers of a decided transaction:
    /// otherwise its LSO would hold until its producer's next call. Only the timeout
    /// thread calls it (a marker may wait for its acknowledgement).
    fn txn_complete_prepared(&self) {
        let prepared: Vec<(String, TxnMeta)> = self
            .txn_coordinator()
            .txns
            .lock()
            .iter()
            .filter(|(_, m)| matches!(m.state, TxnState::PrepareAbort | TxnState::PrepareCommit))
            .map(|(id, m)| (id.clone(), m.clone()))
            .collect();
        for (id, target) in prepared {
            // Idempotent: a marker already written is refused; a completed one is left.
            let _ = self.txn_complete(&id, target, self.now_ms());
        }
    }

    /// The error for a producer at `ids` whose id is now at `meta`.
    fn txn_fenced(id: &str, ids: TxnIds, meta: Option<&TxnMeta>) -> Error {
        match meta {
            Some(m) if m.timed_out == Some(ids) => Error::TransactionTimedOut {
                transactional_id: id.to_owned(),
                epoch: ids.epoch,
                timeout_ms: m.timeout_ms,
            },
            _ => Error::ProducerFenced {
                producer_id: ids.producer_id,
                epoch: ids.epoch,
                current_epoch: meta.map_or(-1, |m| m.epoch),
            },
        }
    }

    /// `init_transactions`: completes (or aborts) what the previous producer with `id`
    /// left, bumps the epoch (fencing that producer) and returns the new ids.
    pub(crate) fn txn_init(&self, id: &str, timeout_ms: u64) -> Result<TxnIds> {
        self.txn_start_timeouts()?;
        self.txn_expire();
        let c = self.txn_coordinator();
        loop {
            let mut txns = c.txns.lock();
            let meta = txns.entry(id.to_owned()).or_insert_with(|| TxnMeta {
                producer_id: self.producer_ids().allocate().id,
                epoch: -1,
                state: TxnState::Empty,
                partitions: StdArc::default(),
                offsets: Vec::new(),
                timeout_ms,
                started_ms: 0,
                timed_out: None,
            });
            match meta.state {
                TxnState::Ongoing => {
                    meta.state = TxnState::PrepareAbort;
                    c.log(id, meta)?;
                    let target = meta.clone();
                    drop(txns);
                    self.txn_complete(id, target, self.now_ms())?;
                }
                TxnState::PrepareAbort | TxnState::PrepareCommit => {
                    let target = meta.clone();
                    drop(txns);
                    self.txn_complete(id, target, self.now_ms())?;
                }
                _ => {
                    // Read and written under the one lock: two racing inits get two epochs
                    // (loom: `two_producers_racing_init_transactions_get_two_epochs`).
                    meta.bump_epoch(self.producer_ids());
                    meta.state = TxnState::Empty;
                    meta.clear_members();
                    meta.timeout_ms = timeout_ms;
                    meta.timed_out = None;
                    c.log(id, meta)?;
                    return Ok(TxnIds {
                        producer_id: meta.producer_id,
                        epoch: meta.epoch,
                    });
                }
            }
        }
    }

    /// Checks that `ids` holds `id`'s current epoch and its transaction may take more
    /// (`Ongoing`, or idle: it begins now); returns the meta, locked.
    fn txn_ongoing<'a>(
        &self,
        txns: &'a mut HashMap<String, TxnMeta>,
        id: &str,
        ids: TxnIds,
        operation: &'static str,
        now: i64,
    ) -> Result<&'a mut TxnMeta> {
        let meta = match txns.get_mut(id) {
            Some(m) if m.producer_id == ids.producer_id && m.epoch == ids.epoch => m,
            other => return Err(Self::txn_fenced(id, ids, other.map(|m| &*m))),
        };
        if meta.state == TxnState::PrepareAbort && meta.timed_out == Some(ids) {
            // The timeout thread is aborting it: the caller completes the abort
            // (`txn_finish_timed_out`) so that the producer can begin again.
            return Err(Self::txn_fenced(id, ids, Some(meta)));
        }
        if meta.state.is_idle() {
            meta.state = TxnState::Ongoing;
            meta.started_ms = now;
            meta.clear_members();
            // Relaxed: under `txns`'s lock, as every access (field docs).
            self.txn_coordinator()
                .next_expiry
                .fetch_min(meta.deadline_ms(), Ordering::Relaxed);
        } else if meta.state != TxnState::Ongoing {
            return Err(Error::InvalidTxnState {
                transactional_id: id.to_owned(),
                state: state_name(meta.state),
                operation,
                valid: "commit_transaction or abort_transaction again, to finish it",
            });
        }
        Ok(meta)
    }

    /// Adds partition `partition` of `topic` to `id`'s open transaction (before the first
    /// record is sent there) at `now` on the broker's clock. `topic` is the sender's handle
    /// on the topic it routed the record to.
    pub(crate) fn txn_add_partition<K, V>(
        &self,
        id: &str,
        ids: TxnIds,
        topic: &StdArc<TopicInner<K, V>>,
        partition: u32,
        now: i64,
    ) -> Result<()>
    where
        K: Send + Sync + 'static,
        V: Send + Sync + 'static,
    {
        // An in-memory compacted partition keeps each key's latest record as the ring lets
        // it go, knowing nothing of transactions: an aborted record would replace its key's
        // committed value there. A persisted topic's cleaner follows the transaction rules.
        // (Asked of the partition alone: its offsets would read the clock and its stats.)
        if topic.partition(partition)?.compacts_in_memory() {
            return Err(Error::InvalidConfig {
                name: "cleanup_policy",
                value: format!("compact, in memory (topic `{}`)", topic.name),
                valid: "a topic that is persisted or does not compact, for a transaction's \
                        records: an in-memory compacted topic keeps a key's latest record \
                        whatever its transaction's outcome"
                    .into(),
            });
        }
        let c = self.txn_coordinator();
        let mut txns = self.txns_at(now);
        let meta = match self.txn_ongoing(&mut txns, id, ids, "send", now) {
            Ok(meta) => meta,
            Err(e) => {
                drop(txns);
                return Err(self.txn_finish_timed_out(id, ids, e));
            }
        };
        let writer = StdArc::clone(topic) as StdArc<dyn TopicAdmin>;
        if StdArc::make_mut(&mut meta.partitions).insert(&topic.name, partition, Some(writer)) {
            if let Err(e) = c.log(id, meta) {
                StdArc::make_mut(&mut meta.partitions).remove(&topic.name, partition);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Adds group offsets to `id`'s open transaction: committed with it, atomically.
    pub(crate) fn txn_add_offsets(
        &self,
        id: &str,
        ids: TxnIds,
        group: &str,
        offsets: &[(TopicPartition, u64)],
    ) -> Result<()> {
        let now = self.now_ms();
        self.txn_expire_at(now);
        for (tp, _) in offsets {
            self.check_partition(tp)?;
        }
        let c = self.txn_coordinator();
        let mut txns = c.txns.lock();
        let meta = match self.txn_ongoing(&mut txns, id, ids, "send_offsets_to_transaction", now) {
            Ok(meta) => meta,
            Err(e) => {
                drop(txns);
                return Err(self.txn_finish_timed_out(id, ids, e));
            }
        };
        for (tp, offset) in offsets {
            meta.offsets.retain(|o| !(o.group == group && o.tp == *tp));
            meta.offsets.push(TxnOffset {
                group: group.to_owned(),
                tp: tp.clone(),
                offset: *offset,
            });
        }
        c.log(id, meta)
    }

    /// Commits or aborts `id`'s transaction at `ids`: writes its markers (and, on commit,
    /// its group offsets), bumps the epoch; the ids of the next transaction.
    pub(crate) fn txn_end(&self, id: &str, ids: TxnIds, commit: bool) -> Result<TxnIds> {
        // One clock read: the timeouts' check and the markers' timestamp.
        let now = self.now_ms();
        let c = self.txn_coordinator();
        let mut txns = self.txns_at(now);
        let meta = match txns.get_mut(id) {
            Some(m) if m.producer_id == ids.producer_id && m.epoch == ids.epoch => m,
            other => return Err(Self::txn_fenced(id, ids, other.map(|m| &*m))),
        };
        let prepare = if commit {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        };
        match meta.state {
            TxnState::Ongoing => {
                meta.state = prepare;
                c.log(id, meta)?;
            }
            TxnState::PrepareAbort if meta.timed_out == Some(ids) => {
                // The timeout thread won the race to end it: it is aborted, whole.
                let e = Self::txn_fenced(id, ids, Some(meta));
                drop(txns);
                return Err(self.txn_finish_timed_out(id, ids, e));
            }
            s if s == prepare => {}
            s if s.is_idle() => {
                // Nothing was sent: nothing to write; the epoch still moves on.
                meta.state = if commit {
                    TxnState::CompleteCommit
                } else {
                    TxnState::CompleteAbort
                };
                meta.bump_epoch(self.producer_ids());
                meta.clear_members();
                c.log(id, meta)?;
                return Ok(meta.ids());
            }
            s => {
                return Err(Error::InvalidTxnState {
                    transactional_id: id.to_owned(),
                    state: state_name(s),
                    operation: if commit {
                        "commit_transaction"
                    } else {
                        "abort_transaction"
                    },
                    valid: "the call that began finishing it (commit or abort), again",
                })
            }
        }
        let target = meta.clone();
        drop(txns);
        self.txn_complete(id, target, now)
    }

    /// Writes the markers of the `Prepare*` transaction `target` and, on commit, its
    /// offsets; then completes it (if no other call completed it meanwhile) with the
    /// epoch bumped. Idempotent: partitions refuse a marker already written.
    fn txn_complete(&self, id: &str, target: TxnMeta, now_ms: i64) -> Result<TxnIds> {
        let c = self.txn_coordinator();
        let commit = target.state == TxnState::PrepareCommit;
        let now_ms = now_ms.clamp(0, crate::MAX_TIMESTAMP);
        for (tp, writer) in target.partitions.iter() {
            // The topic the records went to, unless deleted since (a topic of that name
            // created since is looked up, as for a transaction replayed from the log).
            let looked_up;
            let admin = match writer {
                Some(w) if !w.is_deleted() => w,
                _ => match self.topic_admin(&tp.topic) {
                    Ok(admin) if tp.partition < admin.partition_count() => {
                        looked_up = admin;
                        &*looked_up
                    }
                    // Deleted, with the transaction's records there, and no partition of
                    // that name since: nothing is left to mark (Kafka's coordinator skips
                    // such a partition too). A persisted topic not opened yet is not
                    // skipped: its marker waits for it.
                    Ok(_) | Err(Error::UnknownTopic { .. }) => continue,
                    Err(e) => return Err(e),
                },
            };
            admin.write_marker(
                tp.partition,
                &MarkerWrite {
                    producer_id: target.producer_id,
                    epoch: target.epoch,
                    commit,
                    coordinator_epoch: c.coordinator_epoch,
                    now_ms,
                    policy: crate::sync::StdArc::clone(&c.marker_policy),
                },
            )?;
        }
        if commit {
            for o in &target.offsets {
                let group: crate::sync::StdArc<str> = crate::sync::StdArc::from(o.group.as_str());
                self.commit(&group, &o.tp, o.offset)?;
            }
        }
        let (ids, state) = (target.ids(), target.state);
        // Its partitions' handle goes before the lock: the set is then cleared in place.
        drop(target);
        let mut txns = c.txns.lock();
        let meta = txns
            .get_mut(id)
            .expect("a transactional id is never removed");
        if meta.ids() == ids && meta.state == state {
            meta.state = if commit {
                TxnState::CompleteCommit
            } else {
                TxnState::CompleteAbort
            };
            meta.bump_epoch(self.producer_ids());
            meta.clear_members();
            c.log(id, meta)?;
        }
        Ok(meta.ids())
    }

    /// `e`, after completing the abort of `id`'s transaction at `ids` if it is the timeout
    /// thread's, still under way (its markers may not all be written): once this returns
    /// [`Error::TransactionTimedOut`], the producer's next transaction can begin. A marker
    /// write's error is returned instead (the abort is decided; a later call finishes it).
    fn txn_finish_timed_out(&self, id: &str, ids: TxnIds, e: Error) -> Error {
        let target = {
            let txns = self.txn_coordinator().txns.lock();
            match txns.get(id) {
                Some(m)
                    if m.producer_id == ids.producer_id
                        && m.epoch == ids.epoch
                        && m.state == TxnState::PrepareAbort
                        && m.timed_out == Some(ids) =>
                {
                    m.clone()
                }
                _ => return e,
            }
        };
        match self.txn_complete(id, target, self.now_ms()) {
            Ok(_) => e,
            Err(marker) => marker,
        }
    }

    /// Aborts every transaction open longer than its timeout, on the broker's clock.
    pub(crate) fn txn_expire(&self) {
        self.txn_expire_at(self.now_ms());
    }

    /// The transactions, locked, once those past their timeout at `now` are aborted: the
    /// lock is taken once unless one may be due.
    fn txns_at(&self, now: i64) -> crate::sync::MutexGuard<'_, HashMap<String, TxnMeta>> {
        let c = self.txn_coordinator();
        let txns = c.txns.lock();
        // Relaxed: read and written under the lock (field docs).
        if now <= c.next_expiry.load(Ordering::Relaxed) {
            return txns;
        }
        drop(txns);
        self.txn_expire_at(now);
        c.txns.lock()
    }

    /// [`txn_expire`](Self::txn_expire) at `now`, read by a caller that needs the time too.
    fn txn_expire_at(&self, now: i64) {
        let c = self.txn_coordinator();
        let expired: Vec<(String, TxnMeta)> = {
            let mut txns = c.txns.lock();
            // Relaxed: read and written under the lock (field docs).
            if now <= c.next_expiry.load(Ordering::Relaxed) {
                return;
            }
            let mut out = Vec::new();
            let mut next = i64::MAX;
            for (id, meta) in txns.iter_mut() {
                if meta.state != TxnState::Ongoing {
                    continue;
                }
                if now.saturating_sub(meta.started_ms) <= meta.timeout_ms as i64 {
                    next = next.min(meta.deadline_ms());
                    continue;
                }
                meta.state = TxnState::PrepareAbort;
                meta.timed_out = Some(meta.ids());
                if c.log(id, meta).is_err() {
                    meta.state = TxnState::Ongoing;
                    meta.timed_out = None;
                    // Due still: the next call tries again.
                    next = i64::MIN;
                    continue;
                }
                out.push((id.clone(), meta.clone()));
            }
            c.next_expiry.store(next, Ordering::Relaxed);
            out
        };
        for (id, target) in expired {
            // A failed marker leaves it `PrepareAbort`: the next call completes it.
            let _ = self.txn_complete(&id, target, self.now_ms());
        }
    }

    /// The ids of the transaction after the one the coordinator aborted on timeout at
    /// `ids` (if nothing happened to the id since).
    pub(crate) fn txn_after_timeout(&self, id: &str, ids: TxnIds) -> Option<TxnIds> {
        let txns = self.txn_coordinator().txns.lock();
        let m = txns.get(id)?;
        // The abort's own epoch bump, and nothing since: the epoch after `ids`, or a fresh
        // producer id at epoch 0 past the last epoch (`TxnMeta::bump_epoch`).
        let next = if ids.epoch == i16::MAX {
            m.producer_id != ids.producer_id && m.epoch == 0
        } else {
            m.producer_id == ids.producer_id && m.epoch == ids.epoch + 1
        };
        (m.timed_out == Some(ids) && next && m.state.is_idle()).then_some(m.ids())
    }

    /// Every transactional id the coordinator knows, with its state (after aborting the
    /// transactions past their timeout).
    pub fn describe_transactions(&self) -> Vec<TransactionDescription> {
        self.txn_expire();
        let txns = self.txn_coordinator().txns.lock();
        let mut out: Vec<_> = txns
            .iter()
            .map(|(id, m)| TransactionDescription {
                transactional_id: id.clone(),
                producer_id: m.producer_id,
                epoch: m.epoch,
                state: m.state,
                partitions: m.partitions.iter().map(|(tp, _)| tp.clone()).collect(),
                timeout_ms: m.timeout_ms,
            })
            .collect();
        out.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        out
    }

    /// A partition's open transactions and aborted ones (`describe`'s view).
    pub fn partition_transactions(
        &self,
        tp: &TopicPartition,
    ) -> Result<(
        Vec<crate::partition::OpenTxn>,
        Vec<crate::partition::AbortedTxn>,
    )> {
        self.topic_admin(&tp.topic)?.transactions(tp.partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transaction_log_replays_up_to_a_torn_tail() {
        let meta = TxnMeta {
            producer_id: 3,
            epoch: 7,
            state: TxnState::PrepareCommit,
            partitions: StdArc::new({
                let mut p = TxnPartitions::default();
                p.insert("out", 1, None);
                p
            }),
            offsets: vec![TxnOffset {
                group: "g".into(),
                tp: TopicPartition::new("in", 0),
                offset: 42,
            }],
            timeout_ms: 60_000,
            started_ms: 5,
            timed_out: None,
        };
        let mut bytes = Vec::new();
        encode_record(&mut bytes, "worker", &meta);
        let whole = bytes.len();
        encode_record(&mut bytes, "worker", &meta);
        bytes.truncate(whole + 5);
        let got = replay(&bytes);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, "worker");
        assert_eq!(got[0].1.offsets, meta.offsets);
        let tps = |m: &TxnMeta| -> Vec<TopicPartition> {
            m.partitions.iter().map(|(tp, _)| tp.clone()).collect()
        };
        assert_eq!(tps(&got[0].1), tps(&meta));
        assert_eq!(got[0].1.state, TxnState::PrepareCommit);
    }
}
