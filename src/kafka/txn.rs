//! The transactional producer over librdkafka's (KIP-98): `init_transactions`,
//! `begin_transaction`, sends, `send_offsets_to_transaction`, `commit_transaction`,
//! `abort_transaction`, with the in-process producer's names, states and errors.
//!
//! The producer keeps the in-process producer's states (`Phase`, shared by its clones under
//! one lock) and refuses a call out of turn with the same [`Error::InvalidTxnState`] before
//! librdkafka sees it; the sends of a transaction are serialized under that lock, so a
//! commit finds every send finished. librdkafka runs the protocol (InitProducerId,
//! AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn) and classifies each error
//! it returns; the classes become these errors (what to do is in the
//! [module docs](super#idempotence-and-transactions)):
//!
//! | librdkafka | logbus | state after |
//! |---|---|---|
//! | fenced (`PRODUCER_FENCED`, `INVALID_PRODUCER_EPOCH`, `_FENCED`) | [`Error::ProducerFenced`] | `Fenced` |
//! | other fatal (`rd_kafka_error_is_fatal`) | [`Error::ProducerFatal`] | `Fenced` |
//! | abortable (`rd_kafka_error_txn_requires_abort`) | [`Error::TransactionAbortable`] | `AbortableError` |
//! | retriable (`rd_kafka_error_is_retriable`) | [`Error::Timeout`] (a timeout) or [`Error::Kafka`] with `retriable` | unchanged, or `Committing` / `Aborting` |
//! | `_STATE` | [`Error::InvalidTxnState`] | unchanged |
//! | other | as [`from_code`] maps them | unchanged |
//!
//! A send that fails inside a transaction leaves it abortable only (librdkafka does the same
//! with a failed delivery of a transactional record).

use std::ffi::CString;
use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode as Code};
use rdkafka::producer::Producer as _;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::error::{code_of, fenced, from_code, is_fenced, is_timeout, At};
use super::producer::{fatal_error, KafkaProducer, SharedProducer};
use crate::error::{Error, Result};
use crate::producer::txn::{not_transactional, Phase};
use crate::sync::{Arc, Mutex, MutexGuard};
use crate::TopicPartition;

/// How a transactional call failed, as librdkafka classifies it.
struct Failure {
    code: Code,
    reason: String,
    fatal: bool,
    retriable: bool,
    abortable: bool,
}

impl Failure {
    fn of(error: KafkaError) -> Self {
        match error {
            KafkaError::Transaction(e) => Self {
                code: e.code(),
                reason: e.string(),
                fatal: e.is_fatal(),
                retriable: e.is_retriable(),
                abortable: e.txn_requires_abort(),
            },
            other => Self {
                code: code_of(&other).unwrap_or(Code::Fail),
                reason: other.to_string(),
                fatal: false,
                retriable: false,
                abortable: false,
            },
        }
    }

    /// The failure `error` describes (`None`: no error), destroying it.
    ///
    /// # Safety
    ///
    /// `error` is null or an error object librdkafka returned and the caller owns; it is
    /// not used after this call.
    unsafe fn take(error: *mut rdkafka::bindings::rd_kafka_error_t) -> Option<Self> {
        use rdkafka::bindings as rd;
        if error.is_null() {
            return None;
        }
        // SAFETY: `error` is a live error object (the caller's contract); its string stays
        // valid until it is destroyed, below, after the string was copied.
        let failure = unsafe {
            Self {
                code: rd::rd_kafka_error_code(error).into(),
                reason: std::ffi::CStr::from_ptr(rd::rd_kafka_error_string(error))
                    .to_string_lossy()
                    .into_owned(),
                fatal: rd::rd_kafka_error_is_fatal(error) != 0,
                retriable: rd::rd_kafka_error_is_retriable(error) != 0,
                abortable: rd::rd_kafka_error_txn_requires_abort(error) != 0,
            }
        };
        // SAFETY: owned by the caller, who hands it over; nothing refers to it any more.
        unsafe { rd::rd_kafka_error_destroy(error) };
        Some(failure)
    }
}

/// A transactional producer's state: the in-process producer's phase, and the fatal error
/// that ended it (for a `Fenced` producer that was not fenced but failed for good).
pub(crate) struct TxnState {
    phase: Phase,
    fatal: Option<(String, String)>,
}

/// The transactional side of a [`KafkaProducer`] (module docs), shared by its clones.
pub(crate) struct KafkaTxn {
    id: &'static str,
    state: Mutex<TxnState>,
    shared: Arc<SharedProducer>,
    /// How long `init_transactions`, `send_offsets_to_transaction`, commits and aborts wait
    /// for the cluster (the broker's request timeout).
    timeout: Duration,
}

impl Drop for KafkaTxn {
    /// The last clone of the producer dropped with a transaction open aborts it, as the
    /// in-process producer and Kafka's graceful `close` do, waiting up to the broker's
    /// request timeout; errors are ignored (the coordinator aborts what this could not,
    /// after `transaction.timeout.ms`).
    fn drop(&mut self) {
        let open = matches!(
            self.state.lock().phase,
            Phase::InTransaction | Phase::Aborting | Phase::Abortable(_)
        );
        if open {
            let _ = self.shared.client.abort_transaction(self.timeout);
        }
    }
}

/// The state after `error` ended a send inside a transaction.
pub(crate) fn after_failed_send(st: &mut TxnState, error: &Error) {
    match error {
        Error::ProducerFenced { .. } => st.phase = Phase::Fenced,
        Error::ProducerFatal { name, reason, .. } => {
            st.phase = Phase::Fenced;
            st.fatal = Some((name.clone(), reason.clone()));
        }
        other => st.phase = Phase::Abortable(other.to_string()),
    }
}

impl KafkaTxn {
    pub(crate) fn new(id: &'static str, shared: Arc<SharedProducer>, timeout: Duration) -> Self {
        Self {
            id,
            state: Mutex::new(TxnState {
                phase: Phase::Uninitialized,
                fatal: None,
            }),
            shared,
            timeout,
        }
    }

    pub(crate) fn id(&self) -> &'static str {
        self.id
    }

    /// The state, locked for a send of the open transaction; the refusal otherwise.
    pub(crate) fn enter_send(&self) -> Result<MutexGuard<'_, TxnState>> {
        let st = self.state.lock();
        if st.phase == Phase::InTransaction {
            Ok(st)
        } else {
            Err(self.refuse(&st, "send"))
        }
    }

    /// Why `operation` is not valid in `st` (the in-process producer's refusals).
    fn refuse(&self, st: &TxnState, operation: &'static str) -> Error {
        match (&st.phase, &st.fatal) {
            (Phase::Fenced, Some((name, reason))) => Error::ProducerFatal {
                transactional_id: Some(self.id.to_owned()),
                name: name.clone(),
                reason: reason.clone(),
            },
            (Phase::Fenced, None) => fenced(),
            (Phase::Abortable(reason), _) if operation != "abort_transaction" => {
                Error::TransactionAbortable {
                    transactional_id: self.id.to_owned(),
                    reason: reason.clone(),
                }
            }
            (phase, _) => Error::InvalidTxnState {
                transactional_id: self.id.to_owned(),
                state: phase.name(),
                operation,
                valid: phase.valid(),
            },
        }
    }

    /// `failure` of `operation` as a logbus error, moving the state as librdkafka's class
    /// of the error says (module docs); a retriable failure moves to `retry` if given.
    fn fail(
        &self,
        st: &mut TxnState,
        failure: Failure,
        operation: &'static str,
        retry: Option<Phase>,
    ) -> Error {
        if failure.fatal || failure.code == Code::Fatal {
            // The cause, when librdkafka reports only that the client failed for good.
            let error = self.shared.fatal(Some(self.id)).unwrap_or_else(|| {
                fatal_error(failure.code, failure.reason.clone(), Some(self.id))
            });
            after_failed_send(st, &error);
            return error;
        }
        if is_fenced(failure.code) {
            st.phase = Phase::Fenced;
            return fenced();
        }
        if failure.abortable {
            st.phase = Phase::Abortable(failure.reason.clone());
            return Error::TransactionAbortable {
                transactional_id: self.id.to_owned(),
                reason: failure.reason,
            };
        }
        if failure.code == Code::State {
            return self.refuse(st, operation);
        }
        let at = At::op(operation).timeout(self.timeout);
        if failure.retriable {
            if let Some(phase) = retry {
                st.phase = phase;
            }
            if !is_timeout(failure.code) {
                return Error::Kafka {
                    operation,
                    topic: None,
                    partition: None,
                    code: failure.code as i32,
                    name: format!("{:?}", failure.code),
                    retriable: true,
                    reason: failure.reason,
                };
            }
        }
        from_code(failure.code, failure.reason, at)
    }
}

impl<K, V> KafkaProducer<K, V> {
    fn txn(&self, operation: &'static str) -> Result<&KafkaTxn> {
        self.txn
            .as_deref()
            .ok_or_else(|| not_transactional(operation))
    }

    /// Registers the transactional id with the cluster's transaction coordinator (Kafka's
    /// `initTransactions`), as [`Producer::init_transactions`](crate::Producer::init_transactions):
    /// a previous producer with the same id is fenced and the transaction it left is
    /// finished (by the coordinator). Call once, before the first transaction.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTxnState`] (a producer without `transactional_id`, or called twice);
    /// [`Error::Timeout`] or a retriable [`Error::Kafka`] (the coordinator did not answer in
    /// the broker's request timeout: call again); [`Error::ProducerFatal`].
    pub fn init_transactions(&self) -> Result<()> {
        let txn = self.txn("init_transactions")?;
        let mut st = txn.state.lock();
        if st.phase != Phase::Uninitialized {
            return Err(txn.refuse(&st, "init_transactions"));
        }
        match txn.shared.client.init_transactions(txn.timeout) {
            Ok(()) => {
                st.phase = Phase::Ready;
                Ok(())
            }
            Err(e) => Err(txn.fail(&mut st, Failure::of(e), "init_transactions", None)),
        }
    }

    /// Begins a transaction: sends until its commit or abort are part of it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTxnState`] outside `Ready` (say, a transaction already open),
    /// [`Error::ProducerFenced`], [`Error::ProducerFatal`].
    pub fn begin_transaction(&self) -> Result<()> {
        let txn = self.txn("begin_transaction")?;
        let mut st = txn.state.lock();
        if st.phase != Phase::Ready {
            return Err(txn.refuse(&st, "begin_transaction"));
        }
        match txn.shared.client.begin_transaction() {
            Ok(()) => {
                st.phase = Phase::InTransaction;
                Ok(())
            }
            Err(e) => Err(txn.fail(&mut st, Failure::of(e), "begin_transaction", None)),
        }
    }

    /// Adds group `group`'s offsets to the transaction (Kafka's `sendOffsetsToTransaction`),
    /// as [`Producer::send_offsets_to_transaction`](crate::Producer::send_offsets_to_transaction):
    /// they become the group's committed offsets when the transaction commits, and never if
    /// it aborts. Each offset is the next one to read.
    ///
    /// The group is named, not described by a consumer's group metadata: librdkafka sends
    /// it with no member id and generation -1, so the coordinator does not check that the
    /// offsets come from the group's current generation (KIP-447's fencing of a zombie
    /// consumer); the transactional id's fencing applies as usual.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTxnState`] outside a transaction, [`Error::InvalidConfig`] (a group
    /// name with a NUL byte), [`Error::ProducerFenced`], [`Error::TransactionAbortable`],
    /// [`Error::Timeout`] (call again), [`Error::ProducerFatal`], [`Error::Kafka`].
    pub fn send_offsets_to_transaction(
        &self,
        offsets: &[(TopicPartition, u64)],
        group: &str,
    ) -> Result<()> {
        let operation = "send_offsets_to_transaction";
        let txn = self.txn(operation)?;
        let mut st = txn.state.lock();
        if st.phase != Phase::InTransaction {
            return Err(txn.refuse(&st, operation));
        }
        let group_id = CString::new(group).map_err(|_| Error::InvalidConfig {
            name: "group",
            value: group.to_owned(),
            valid: "a group id without NUL bytes".into(),
        })?;
        let mut list = TopicPartitionList::with_capacity(offsets.len());
        for (tp, offset) in offsets {
            list.add_partition_offset(
                &tp.topic,
                tp.partition as i32,
                Offset::Offset(*offset as i64),
            )
            .map_err(|e| from_kafka_at(e, operation, tp))?;
        }
        let timeout_ms = txn.timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: the client handle lives as long as `txn.shared`; `group_id` is a
        // NUL-terminated string that outlives the call that copies it; the group metadata
        // made here is used by the one call below (which copies what it needs) and destroyed
        // once; `list` outlives the call, which only reads it. The returned error, if any,
        // is ours to destroy (`Failure::take` does).
        let failure = unsafe {
            use rdkafka::bindings as rd;
            let metadata = rd::rd_kafka_consumer_group_metadata_new(group_id.as_ptr());
            let error = rd::rd_kafka_send_offsets_to_transaction(
                txn.shared.client.client().native_ptr(),
                list.ptr(),
                metadata,
                timeout_ms,
            );
            rd::rd_kafka_consumer_group_metadata_destroy(metadata);
            Failure::take(error)
        };
        match failure {
            None => Ok(()),
            Some(f) => Err(txn.fail(&mut st, f, operation, None)),
        }
    }

    /// Commits the transaction: librdkafka flushes its sends, then the coordinator writes
    /// COMMIT markers to every partition it wrote to and commits its group offsets.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTxnState`] without an open transaction,
    /// [`Error::TransactionAbortable`] (a send failed, or the coordinator said so: call
    /// `abort_transaction`), [`Error::ProducerFenced`], [`Error::ProducerFatal`];
    /// [`Error::Timeout`] or a retriable [`Error::Kafka`]: the outcome is not known yet,
    /// call `commit_transaction` again.
    pub fn commit_transaction(&self) -> Result<()> {
        self.end_transaction(true)
    }

    /// Aborts the transaction: its records are never read by read-committed consumers, its
    /// offsets never committed.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTxnState`] without an open transaction, [`Error::ProducerFenced`],
    /// [`Error::ProducerFatal`]; [`Error::Timeout`] or a retriable [`Error::Kafka`]: call
    /// `abort_transaction` again.
    pub fn abort_transaction(&self) -> Result<()> {
        self.end_transaction(false)
    }

    fn end_transaction(&self, commit: bool) -> Result<()> {
        let operation = if commit {
            "commit_transaction"
        } else {
            "abort_transaction"
        };
        let txn = self.txn(operation)?;
        let mut st = txn.state.lock();
        // No `TimedOut` phase here: librdkafka reports a coordinator's timeout abort as an
        // abortable or fenced error.
        if !st.phase.may_end(commit) {
            return Err(txn.refuse(&st, operation));
        }
        let done = if commit {
            txn.shared.client.commit_transaction(txn.timeout)
        } else {
            txn.shared.client.abort_transaction(txn.timeout)
        };
        match done {
            Ok(()) => {
                st.phase = Phase::Ready;
                Ok(())
            }
            Err(e) => {
                let again = if commit {
                    Phase::Committing
                } else {
                    Phase::Aborting
                };
                Err(txn.fail(&mut st, Failure::of(e), operation, Some(again)))
            }
        }
    }
}

fn from_kafka_at(e: KafkaError, operation: &'static str, tp: &TopicPartition) -> Error {
    super::error::from_kafka(
        e,
        At::op(operation).topic(&tp.topic).partition(tp.partition),
    )
}
