//! [`PendingSend`]: the outcome of a pipelined send ([`Producer::send_async`]), available
//! once the record's acks level holds.
//!
//! [`Producer::send_async`]: super::Producer::send_async

use std::borrow::Cow;
use std::fmt;

use super::{append_error, ProduceError, Record, RecordMetadata};
use crate::partition::{AppendError, Entry, Pending, ReplicatedLog, SendPolicy};
// Std's Arc (also under loom): the log is a trait object (see `sync::StdArc`).
use crate::sync::StdArc as Arc;

/// What a send must remember to report its outcome: where the record went, and what the
/// record said about its partition and timestamp (to hand it back unchanged).
pub(super) struct Sent {
    pub(super) topic: Cow<'static, str>,
    pub(super) partition: u32,
    pub(super) explicit: Option<u32>,
    pub(super) given: Option<i64>,
    pub(super) timestamp: i64,
}

impl Sent {
    /// The send's result from the append's: its metadata, or the error with the record
    /// (`None`: it reached the log, unacknowledged).
    #[inline]
    pub(super) fn outcome<K, V>(
        self,
        done: Result<u64, (Option<Entry<K, V>>, AppendError)>,
    ) -> Result<RecordMetadata, ProduceError<K, V>> {
        match done {
            Ok(offset) => Ok(RecordMetadata {
                partition: self.partition,
                offset,
                timestamp: self.timestamp,
            }),
            Err(failed) => self.failed(failed),
        }
    }

    /// [`outcome`](Self::outcome) of an append that failed.
    #[cold]
    #[inline(never)]
    fn failed<K, V>(
        self,
        failed: (Option<Entry<K, V>>, AppendError),
    ) -> Result<RecordMetadata, ProduceError<K, V>> {
        match failed {
            (None, why) => Err(ProduceError::unacknowledged(append_error(
                why,
                &self.topic,
                self.partition,
            ))),
            (Some(entry), why) => {
                let error = append_error(why, &self.topic, self.partition);
                let (_, key, value, headers) = entry.into_parts();
                let record = Record {
                    topic: self.topic,
                    partition: self.explicit,
                    timestamp: self.given,
                    key,
                    value,
                    headers,
                };
                Err(ProduceError::new(error, record))
            }
        }
    }
}

/// A record sent with [`Producer::send_async`](super::Producer::send_async): in the
/// leader's log, its acknowledgement pending. [`wait`](Self::wait) gives the outcome
/// `send` would have given (Kafka's `Future<RecordMetadata>`). `Send`, so another thread
/// may wait on it.
///
/// Dropping it without `wait` leaves the record where it is (in the log, or not sent),
/// without the retries `wait` would do.
#[must_use = "the send's outcome (and its retries) comes from `wait`"]
pub struct PendingSend<K, V> {
    state: State<K, V>,
}

enum State<K, V> {
    /// Completed at the send: its result.
    Done(Result<RecordMetadata, ProduceError<K, V>>),
    /// In the leader's log, awaiting the acks level (boxed: a handle stays a few words,
    /// cheap to move into a caller's queue of many).
    InFlight(Box<InFlight<K, V>>),
}

struct InFlight<K, V> {
    log: Arc<dyn ReplicatedLog<K, V>>,
    policy: Arc<SendPolicy>,
    pending: Pending<K, V>,
    sent: Sent,
}

impl<K, V> fmt::Debug for PendingSend<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Done(Ok(meta)) => format!("{meta:?}"),
            State::Done(Err(e)) => format!("failed: {e:?}"),
            State::InFlight(f) => match f.pending.at() {
                Some((epoch, offset)) => format!("in flight at offset {offset}, epoch {epoch}"),
                None => "in flight".to_string(),
            },
        };
        f.debug_struct("PendingSend")
            .field("state", &state)
            .finish()
    }
}

impl<K, V> PendingSend<K, V> {
    pub(super) fn done(result: Result<RecordMetadata, ProduceError<K, V>>) -> Self {
        Self {
            state: State::Done(result),
        }
    }

    pub(super) fn in_flight(
        log: Arc<dyn ReplicatedLog<K, V>>,
        policy: Arc<SendPolicy>,
        pending: Pending<K, V>,
        sent: Sent,
    ) -> Self {
        Self {
            state: State::InFlight(Box::new(InFlight {
                log,
                policy,
                pending,
                sent,
            })),
        }
    }

    /// Waits until the record's acks level holds (retrying as `send` does when it fails)
    /// and returns where it went.
    ///
    /// # Errors
    ///
    /// Those of [`Producer::send`](super::Producer::send), with the record handed back
    /// (a copy, when the log also holds it): among them
    /// [`Error::NotEnoughReplicasAfterAppend`](crate::Error::NotEnoughReplicasAfterAppend),
    /// [`Error::NotLeader`](crate::Error::NotLeader) and
    /// [`Error::Timeout`](crate::Error::Timeout) once the retries or the
    /// `delivery_timeout` ran out.
    pub fn wait(self) -> Result<RecordMetadata, ProduceError<K, V>> {
        match self.state {
            State::Done(result) => result,
            State::InFlight(f) => {
                let InFlight {
                    log,
                    policy,
                    pending,
                    sent,
                } = *f;
                sent.outcome(log.await_pending(pending, &policy))
            }
        }
    }
}
