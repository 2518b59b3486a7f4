//! The transactional producer (KIP-98): `init_transactions`, `begin_transaction`, sends,
//! `send_offsets_to_transaction`, `commit_transaction`, `abort_transaction`.
//!
//! The producer's side of a transaction is a small state machine, shared by its clones
//! under one lock ([`TxnClient`]); each call checks the state and says, when it refuses,
//! which state the producer was in and what is valid there ([`Error::InvalidTxnState`]).
//! Sends of a transaction are serialized under that lock, so `commit_transaction` finds
//! every send of the transaction finished (Kafka's commit flushes first).
//!
//! A send registers its partition with the coordinator before the first record goes
//! there (once per transaction: the producer remembers the partitions it registered), then
//! appends a transactional record (the producer id and the transaction's epoch in the
//! entry) with no retry: a failed send leaves the transaction abortable only
//! ([`Error::TransactionAbortable`]), since its record may or may not be in the log and a
//! retry could land it twice. A `send_batch` run to one partition held in its ring alone
//! goes in one claim as plain entries, as a plain batch does; that partition's
//! transaction table keeps their offsets instead (`partition::txn`). Each transaction has
//! its own epoch (KIP-890), returned by the coordinator when the previous one completes.
//!
//! Dropping the last clone of a producer with a transaction open aborts it (the
//! producer's clones share the transaction; the drop waits for the ABORT markers), as
//! Kafka's client's graceful `close` does ("Aborting incomplete transaction due to
//! shutdown"). A producer that never runs its drop (its process died, `mem::forget`, a
//! forced close in Kafka's terms) leaves the transaction to the coordinator, which aborts
//! it once it is open longer than
//! [`transaction_timeout`](crate::producer::ProducerConfig::transaction_timeout) (on its
//! own thread, checked every
//! [`transaction_abort_timed_out_transaction_cleanup_interval`](crate::broker::BrokerBuilder::transaction_abort_timed_out_transaction_cleanup_interval)),
//! or at once when a producer with the same transactional id calls `init_transactions`.
//! A commit begun and not finished is left as it is (its outcome is decided; the next
//! `init_transactions` finishes it).

use foldhash::{HashMap, HashSet};

use super::{ProduceBatchError, ProduceError, Producer, Record, RecordMetadata};
use crate::broker::{TopicInner, TopicPartition};
use crate::partition::txn::{TxnAppendError, TxnRefusal};
use crate::partition::{AppendWait, Entry, SendPolicy};
use crate::sync::{Mutex, StdArc};
use crate::{Error, Result};

/// The ids the coordinator gave: producer id and the epoch of the current transaction.
type Ids = crate::broker::TxnIds;

/// Where a transactional producer is (the `kafka` face's producer keeps the same states).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase {
    /// `init_transactions` not called yet.
    Uninitialized,
    /// Between transactions.
    Ready,
    /// In a transaction.
    InTransaction,
    /// `commit_transaction` failed part way (markers not all written): call it again.
    Committing,
    /// `abort_transaction` failed part way: call it again.
    Aborting,
    /// A send failed: only `abort_transaction` is valid.
    Abortable(String),
    /// The coordinator aborted the transaction on timeout: begin again (or abort, a no-op).
    TimedOut,
    /// Fenced by a newer producer with the same id: close this one.
    Fenced,
}

impl Phase {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Phase::Uninitialized => "Uninitialized",
            Phase::Ready => "Ready",
            Phase::InTransaction => "InTransaction",
            Phase::Committing => "Committing",
            Phase::Aborting => "Aborting",
            Phase::Abortable(_) => "AbortableError",
            Phase::TimedOut => "TimedOut",
            Phase::Fenced => "Fenced",
        }
    }

    /// Whether a commit (`commit`) or an abort may be made in this phase (a `TimedOut`
    /// transaction's abort is answered without one).
    pub(crate) fn may_end(&self, commit: bool) -> bool {
        match self {
            Phase::InTransaction => true,
            Phase::Committing => commit,
            Phase::Aborting | Phase::Abortable(_) => !commit,
            _ => false,
        }
    }

    pub(crate) fn valid(&self) -> &'static str {
        match self {
            Phase::Uninitialized => "init_transactions",
            Phase::Ready => "begin_transaction",
            Phase::InTransaction => {
                "send, send_offsets_to_transaction, commit_transaction, abort_transaction"
            }
            Phase::Committing => "commit_transaction (again)",
            Phase::Aborting => "abort_transaction (again)",
            Phase::Abortable(_) => "abort_transaction",
            Phase::TimedOut => "begin_transaction or abort_transaction",
            Phase::Fenced => "nothing: close this producer",
        }
    }
}

#[derive(Debug)]
struct TxnClientState {
    phase: Phase,
    ids: Option<Ids>,
    /// Partitions registered with the coordinator in this transaction.
    added: AddedPartitions,
}

/// The partitions registered in a transaction, looked up by topic name (the topic's
/// own handle on its name first) on every send: a list while a transaction has few, a
/// map by name beyond.
#[derive(Debug, Default)]
struct AddedPartitions {
    few: Vec<(StdArc<str>, u32)>,
    /// Every registration once there are more than [`FEW_ADDED`]; `few` is then empty.
    many: HashMap<StdArc<str>, HashSet<u32>>,
}

/// How many registrations [`AddedPartitions`] keeps in its list.
const FEW_ADDED: usize = 16;

impl AddedPartitions {
    fn contains(&self, topic: &StdArc<str>, partition: u32) -> bool {
        if self.many.is_empty() {
            return self
                .few
                .iter()
                .any(|(t, p)| *p == partition && (StdArc::ptr_eq(t, topic) || **t == **topic));
        }
        self.many
            .get(&**topic)
            .is_some_and(|p| p.contains(&partition))
    }

    fn insert(&mut self, topic: &StdArc<str>, partition: u32) {
        if self.many.is_empty() && self.few.len() < FEW_ADDED {
            self.few.push((StdArc::clone(topic), partition));
            return;
        }
        for (t, p) in self.few.drain(..) {
            self.many.entry(t).or_default().insert(p);
        }
        self.many
            .entry(StdArc::clone(topic))
            .or_default()
            .insert(partition);
    }

    fn clear(&mut self) {
        self.few.clear();
        self.many.clear();
    }
}

/// A transactional producer's state (module docs).
#[derive(Debug)]
pub(crate) struct TxnClient {
    id: &'static str,
    state: Mutex<TxnClientState>,
    /// For the abort when the last clone of the producer is dropped.
    broker: crate::broker::Broker,
}

impl Drop for TxnClient {
    /// The last clone of the producer dropped with a transaction open (or an abort
    /// unfinished) aborts it, as Kafka's graceful `close` does (module docs); errors are
    /// ignored (the coordinator's timeout aborts what this could not). A commit begun is
    /// left to finish: its outcome is decided.
    fn drop(&mut self) {
        let (open, ids) = {
            let st = self.state.lock();
            let open = matches!(
                st.phase,
                Phase::InTransaction | Phase::Aborting | Phase::Abortable(_)
            );
            (open, st.ids)
        };
        if let (true, Some(ids)) = (open, ids) {
            let _ = self.broker.txn_end(self.id, ids, false);
        }
    }
}

impl TxnClient {
    pub(crate) fn new(id: &'static str, broker: crate::broker::Broker) -> Self {
        Self {
            broker,
            id,
            state: Mutex::new(TxnClientState {
                phase: Phase::Uninitialized,
                ids: None,
                added: AddedPartitions::default(),
            }),
        }
    }

    fn refuse(&self, phase: &Phase, operation: &'static str) -> Error {
        match phase {
            Phase::Fenced => Error::ProducerFenced {
                producer_id: -1,
                epoch: -1,
                current_epoch: -1,
            },
            Phase::Abortable(reason) if operation != "abort_transaction" => {
                Error::TransactionAbortable {
                    transactional_id: self.id.to_owned(),
                    reason: reason.clone(),
                }
            }
            _ => Error::InvalidTxnState {
                transactional_id: self.id.to_owned(),
                state: phase.name(),
                operation,
                valid: phase.valid(),
            },
        }
    }
}

pub(crate) fn not_transactional(operation: &'static str) -> Error {
    Error::InvalidTxnState {
        transactional_id: String::new(),
        state: "NotTransactional",
        operation,
        valid: "sends only; set ProducerConfig::transactional_id for transactions",
    }
}

impl<K, V> Producer<K, V>
where
    K: Send + Sync + 'static,
    V: Send + Sync + 'static,
{
    fn txn_client(&self, operation: &'static str) -> Result<&TxnClient> {
        self.txn
            .as_deref()
            .ok_or_else(|| not_transactional(operation))
    }

    /// The state after an error of the coordinator: fenced, timed out, or unchanged.
    fn txn_after(&self, txn: &TxnClient, st: &mut TxnClientState, e: &Error) {
        match e {
            Error::ProducerFenced { .. } => st.phase = Phase::Fenced,
            Error::TransactionTimedOut { .. } => {
                match st
                    .ids
                    .and_then(|ids| self.broker.txn_after_timeout(txn.id, ids))
                {
                    Some(ids) => {
                        st.ids = Some(ids);
                        st.phase = Phase::TimedOut;
                    }
                    None => st.phase = Phase::Fenced,
                }
            }
            _ => {}
        }
    }

    /// Registers the transactional id with the coordinator (Kafka's `initTransactions`):
    /// a previous producer with the same id is fenced (the epoch is bumped: its sends,
    /// commits and aborts fail with [`Error::ProducerFenced`]), and the transaction it
    /// left is finished first: committed if it was committing (its markers were being
    /// written), else aborted. Call once, before the first transaction.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTxnState`] (a producer without `transactional_id`, or called twice),
    /// errors of writing the previous transaction's markers (retriable: call again).
    pub fn init_transactions(&self) -> Result<()> {
        let txn = self.txn_client("init_transactions")?;
        let mut st = txn.state.lock();
        if st.phase != Phase::Uninitialized {
            return Err(txn.refuse(&st.phase, "init_transactions"));
        }
        let timeout = self
            .config
            .transaction_timeout
            .as_millis()
            .min(u64::MAX as u128) as u64;
        let ids = self.broker.txn_init(txn.id, timeout)?;
        st.ids = Some(ids);
        st.phase = Phase::Ready;
        Ok(())
    }

    /// Begins a transaction: sends until its commit or abort are part of it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTxnState`] outside `Ready` (say, a transaction already open),
    /// [`Error::ProducerFenced`].
    pub fn begin_transaction(&self) -> Result<()> {
        let txn = self.txn_client("begin_transaction")?;
        let mut st = txn.state.lock();
        match st.phase {
            Phase::Ready | Phase::TimedOut => {
                st.phase = Phase::InTransaction;
                st.added.clear();
                Ok(())
            }
            ref p => Err(txn.refuse(p, "begin_transaction")),
        }
    }

    /// Adds a consumer group's offsets to the transaction (Kafka's
    /// `sendOffsetsToTransaction`): they become `group`'s committed offsets when the
    /// transaction commits, atomically with its records, and never if it aborts. Each
    /// offset is the next one to read (as [`Consumer::commit`](crate::Consumer) takes).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTxnState`] outside a transaction, [`Error::ProducerFenced`],
    /// [`Error::TransactionTimedOut`], [`Error::UnknownTopic`] /
    /// [`Error::PartitionOutOfRange`].
    pub fn send_offsets_to_transaction(
        &self,
        offsets: &[(TopicPartition, u64)],
        group: &str,
    ) -> Result<()> {
        let txn = self.txn_client("send_offsets_to_transaction")?;
        let mut st = txn.state.lock();
        if st.phase != Phase::InTransaction {
            return Err(txn.refuse(&st.phase, "send_offsets_to_transaction"));
        }
        let ids = st.ids.expect("initialized");
        let done = self.broker.txn_add_offsets(txn.id, ids, group, offsets);
        if let Err(e) = &done {
            self.txn_after(txn, &mut st, e);
        }
        done
    }

    /// Commits the transaction: writes COMMIT markers to every partition it wrote to
    /// (with `acks = all`), commits its group offsets, and moves to the next epoch. A
    /// partition whose topic was deleted since (and has no partition of that number under
    /// its name now) gets no marker: its records went with it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTxnState`] without an open transaction,
    /// [`Error::TransactionAbortable`] after a failed send (abort instead),
    /// [`Error::ProducerFenced`], [`Error::TransactionTimedOut`] (it was aborted);
    /// a marker write's error (not enough replicas, ...): the commit is decided, call
    /// `commit_transaction` again to finish it.
    pub fn commit_transaction(&self) -> Result<()> {
        self.end_transaction(true)
    }

    /// Aborts the transaction: writes ABORT markers to every partition it wrote to; its
    /// records are never read by read-committed consumers, its offsets never committed.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTxnState`] without an open transaction, [`Error::ProducerFenced`];
    /// a marker write's error: call `abort_transaction` again to finish it.
    pub fn abort_transaction(&self) -> Result<()> {
        self.end_transaction(false)
    }

    fn end_transaction(&self, commit: bool) -> Result<()> {
        let operation = if commit {
            "commit_transaction"
        } else {
            "abort_transaction"
        };
        let txn = self.txn_client(operation)?;
        let mut st = txn.state.lock();
        if st.phase == Phase::TimedOut && !commit {
            st.phase = Phase::Ready;
            return Ok(());
        }
        if !st.phase.may_end(commit) {
            return Err(txn.refuse(&st.phase, operation));
        }
        let ids = st.ids.expect("initialized");
        match self.broker.txn_end(txn.id, ids, commit) {
            Ok(next) => {
                st.ids = Some(next);
                st.phase = Phase::Ready;
                st.added.clear();
                Ok(())
            }
            Err(e) => {
                self.txn_after(txn, &mut st, &e);
                if matches!(st.phase, Phase::InTransaction | Phase::Abortable(_)) {
                    st.phase = if commit {
                        Phase::Committing
                    } else {
                        Phase::Aborting
                    };
                }
                Err(e)
            }
        }
    }

    /// The producer id and the epoch of the current (or next) transaction of a
    /// transactional producer, once `init_transactions` returned.
    pub fn transaction_ids(&self) -> Option<(i64, i16)> {
        let st = self.txn.as_ref()?.state.lock();
        st.ids.map(|i| (i.producer_id, i.epoch))
    }

    /// Fault injection: appends `record` as a send of this producer's transaction at
    /// `epoch` arriving late (a retry delayed in the network, or a zombie's send): straight
    /// to the partition, past the coordinator and the producer's own state. The partition
    /// decides; `Err` with [`Error::ProducerFenced`] when it refuses.
    ///
    /// # Errors
    ///
    /// As [`send`](Producer::send), and [`Error::InvalidTxnState`] on a producer without
    /// `transactional_id` or before `init_transactions`.
    pub fn deliver_delayed_send(
        &self,
        record: Record<K, V>,
        epoch: i16,
    ) -> Result<RecordMetadata, ProduceError<K, V>> {
        let ids = match self.transaction_ids() {
            Some((p, _)) => p,
            None => {
                return Err(ProduceError::new(
                    not_transactional("deliver_delayed_send"),
                    record,
                ))
            }
        };
        let mut state = self.state.lock();
        let (t, partition) = match self.route(&mut state, &record) {
            Ok(at) => at,
            Err(error) => return Err(ProduceError::new(error, record)),
        };
        let topic = state.topics[t].topic.clone();
        drop(state);
        let (entry, sent) = self.entry_of(record, partition);
        let (timestamp, key, value, headers) = entry.into_parts();
        let entry = Entry::transactional(timestamp, key, value, headers, ids, epoch);
        let p = topic
            .partition(partition)
            .expect("routed to an existing partition");
        let mut appender = p.appender().with_policy(SendPolicy {
            retries: 0,
            // The partition's transaction table fences by the transaction's epoch; no
            // sequences (a transaction's sends are never retried).
            producer: None,
            ..self.policy()
        });
        match appender.append_txn(entry, ids, epoch, AppendWait::Until(None)) {
            Ok(offset) => sent.outcome(Ok(offset)),
            Err(TxnAppendError::Refused(why, entry)) => {
                let current = match why {
                    TxnRefusal::Fenced { current, .. } => current,
                    TxnRefusal::StaleMarker { .. } | TxnRefusal::PreviousOpen { .. } => epoch,
                };
                let (_, key, value, headers) = entry.into_parts();
                Err(ProduceError::new(
                    Error::ProducerFenced {
                        producer_id: ids,
                        epoch,
                        current_epoch: current,
                    },
                    Record {
                        topic: sent.topic,
                        partition: sent.explicit,
                        timestamp: sent.given,
                        key,
                        value,
                        headers,
                    },
                ))
            }
            Err(TxnAppendError::Append(back, why)) => sent.outcome(Err((back, why))),
        }
    }

    /// A send of a transactional producer (module docs).
    pub(super) fn send_txn(
        &self,
        txn: &TxnClient,
        record: Record<K, V>,
        wait: AppendWait,
    ) -> Result<RecordMetadata, ProduceError<K, V>> {
        let mut st = txn.state.lock();
        if st.phase != Phase::InTransaction {
            return Err(ProduceError::new(txn.refuse(&st.phase, "send"), record));
        }
        let ids = st.ids.expect("initialized");
        let mut state = self.state.lock();
        let (t, partition) = match self.route(&mut state, &record) {
            Ok(at) => at,
            Err(error) => return Err(ProduceError::new(error, record)),
        };
        let topic = state.topics[t].topic.clone();
        drop(state);
        let now = || self.broker.now_ms();
        if let Err(e) = self.txn_register(txn, &mut st, ids, &topic, partition, now) {
            self.txn_after(txn, &mut st, &e);
            return Err(ProduceError::new(e, record));
        }
        let (entry, sent) = self.entry_of(record, partition);
        let (timestamp, key, value, headers) = entry.into_parts();
        let entry =
            Entry::transactional(timestamp, key, value, headers, ids.producer_id, ids.epoch);
        // No retry: a record that may be in the log is never appended again (module docs).
        let policy = SendPolicy {
            retries: 0,
            // The partition's transaction table fences by the transaction's epoch; no
            // sequences (a transaction's sends are never retried).
            producer: None,
            ..self.policy()
        };
        let p = match topic.partition(partition) {
            Ok(p) => p,
            Err(e) => {
                let (_, key, value, headers) = entry.into_parts();
                return Err(ProduceError::new(
                    e,
                    Record {
                        topic: sent.topic,
                        partition: sent.explicit,
                        timestamp: sent.given,
                        key,
                        value,
                        headers,
                    },
                ));
            }
        };
        let mut appender = p.appender().with_policy(policy);
        match appender.append_txn(entry, ids.producer_id, ids.epoch, wait) {
            Ok(offset) => sent.outcome(Ok(offset)),
            Err(TxnAppendError::Refused(why, entry)) => {
                let error = match why {
                    TxnRefusal::Fenced { epoch, current } => {
                        st.phase = Phase::Fenced;
                        Error::ProducerFenced {
                            producer_id: ids.producer_id,
                            epoch,
                            current_epoch: current,
                        }
                    }
                    other => {
                        st.phase = Phase::Abortable(format!("{other:?}"));
                        Error::TransactionAbortable {
                            transactional_id: txn.id.to_owned(),
                            reason: format!(
                                "partition {} refused the record: {other:?}",
                                TopicPartition::new(topic.name.to_string(), partition)
                            ),
                        }
                    }
                };
                let (_, key, value, headers) = entry.into_parts();
                Err(ProduceError::new(
                    error,
                    Record {
                        topic: sent.topic,
                        partition: sent.explicit,
                        timestamp: sent.given,
                        key,
                        value,
                        headers,
                    },
                ))
            }
            Err(TxnAppendError::Append(back, why)) => {
                let done = sent.outcome(Err((back, why)));
                if let Err(e) = &done {
                    st.phase = Phase::Abortable(e.to_string());
                }
                done
            }
        }
    }

    /// `send_batch` of a transactional producer: each run of records for one explicit
    /// partition of a partition held in its ring alone is appended in one claim, as plain
    /// entries (the partition's transaction table keeps their offsets: `partition::txn`),
    /// under the transaction lock; the rest one by one.
    pub(super) fn send_batch_txn(
        &self,
        txn: &TxnClient,
        records: &mut Vec<Record<K, V>>,
    ) -> Result<usize, ProduceBatchError> {
        let mut sent = 0;
        let mut unsent = Vec::new();
        let mut failed = None;
        let mut rest = records.drain(..).peekable();
        let valid = |r: &Record<K, V>| r.timestamp.is_none_or(crate::partition::valid_timestamp);
        while let Some(record) = rest.next() {
            // A run: this record and the next ones naming the same explicit partition of
            // the same topic (the common shape of a transactional batch).
            let one_by_one = match record.partition {
                Some(partition) if valid(&record) => {
                    self.append_txn_run(txn, record, partition, &mut rest, &mut sent)
                }
                _ => vec![record],
            };
            let mut left = one_by_one.into_iter();
            for r in left.by_ref() {
                if let Err(e) = self.send_txn(txn, r, AppendWait::Until(None)) {
                    let (error, record) = e.into_parts();
                    unsent.extend(record);
                    failed = Some(error);
                    break;
                }
                sent += 1;
            }
            if failed.is_some() {
                unsent.extend(left);
                unsent.extend(rest.by_ref());
                break;
            }
        }
        drop(rest);
        match failed {
            None => Ok(sent),
            Some(error) => {
                *records = unsent;
                Err(ProduceBatchError { sent, error })
            }
        }
    }

    /// Appends `first` and the records after it in `rest` naming the same topic and
    /// `partition` as one run, if the transaction is open and the partition takes runs
    /// (`Appender::append_txn_run`); counts them in `sent`. Returns the records of the run
    /// it did not append (all of them when it could not), for the caller to send one by one.
    fn append_txn_run(
        &self,
        txn: &TxnClient,
        first: Record<K, V>,
        partition: u32,
        rest: &mut std::iter::Peekable<std::vec::Drain<'_, Record<K, V>>>,
        sent: &mut usize,
    ) -> Vec<Record<K, V>> {
        let mut st = txn.state.lock();
        let mut state = self.state.lock();
        let Ok((t, _)) = self.route(&mut state, &first) else {
            return vec![first];
        };
        // One clock read: the coordinator's and the records' timestamps.
        let clock = self.broker.now_ms();
        let Some(ids) = self.txn_run_ready(txn, &mut st, &state.topics[t].topic, partition, clock)
        else {
            return vec![first];
        };
        let now = clock.clamp(0, crate::MAX_TIMESTAMP);
        let mut run = std::mem::take(&mut state.run);
        run.clear();
        let Record {
            topic,
            timestamp,
            key,
            value,
            headers,
            ..
        } = first;
        // Plain entries: the table records where they land (`partition::txn`).
        run.push(Entry::new(timestamp.unwrap_or(now), key, value, headers));
        // The topic as `send_batch`'s plain path recognises it (a `&'static str` name by
        // its address first), not by comparing names per record.
        let cached = &state.topics[t];
        let same = |r: &Record<K, V>| {
            cached.is_named(&r.topic)
                && r.partition == Some(partition)
                && r.timestamp.is_none_or(crate::partition::valid_timestamp)
        };
        while let Some(r) = rest.next_if(same) {
            run.push(Entry::new(
                r.timestamp.unwrap_or(now),
                r.key,
                r.value,
                r.headers,
            ));
        }
        let n = run.len();
        let appender = &mut state.topics[t].appenders[partition as usize];
        if let Some(Ok(())) = appender.append_txn_run(&mut run, ids.producer_id, ids.epoch) {
            *sent += n - run.len();
        }
        // What did not fit (or was refused) goes one by one.
        let left = run
            .drain(..)
            .map(|e| {
                let (timestamp, key, value, headers) = e.into_parts();
                Record {
                    topic: topic.clone(),
                    partition: Some(partition),
                    timestamp: Some(timestamp),
                    key,
                    value,
                    headers,
                }
            })
            .collect();
        state.run = run;
        left
    }

    /// The transaction's ids if it is open, with `topic`'s `partition` registered with the
    /// coordinator at `now` (registering it if needed): a run to it may then be appended at
    /// once.
    fn txn_run_ready(
        &self,
        txn: &TxnClient,
        st: &mut TxnClientState,
        topic: &StdArc<TopicInner<K, V>>,
        partition: u32,
        now: i64,
    ) -> Option<Ids> {
        if st.phase != Phase::InTransaction {
            return None;
        }
        let ids = st.ids.expect("initialized");
        self.txn_register(txn, st, ids, topic, partition, || now)
            .ok()?;
        Some(ids)
    }

    /// Registers `topic`'s `partition` with the coordinator at `now()` (read only then),
    /// unless this transaction did already.
    fn txn_register(
        &self,
        txn: &TxnClient,
        st: &mut TxnClientState,
        ids: Ids,
        topic: &StdArc<TopicInner<K, V>>,
        partition: u32,
        now: impl FnOnce() -> i64,
    ) -> Result<()> {
        if !st.added.contains(&topic.name, partition) {
            self.broker
                .txn_add_partition(txn.id, ids, topic, partition, now())?;
            st.added.insert(&topic.name, partition);
        }
        Ok(())
    }
}
