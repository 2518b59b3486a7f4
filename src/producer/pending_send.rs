//! [`PendingSend`]: the outcome of a pipelined send ([`Producer::send_async`]), available
//! once the record's acks level holds.
//!
//! [`Producer::send_async`]: super::Producer::send_async

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::held_line::HeldLine;
use super::{append_error, ProduceError, Record, RecordMetadata};
use crate::partition::EXPIRY_LOOK;
use crate::partition::{
    AppendError, Appender, DiskLog, Entry, Pending, Refused, ReplicatedLog, Resumed, SendPolicy,
    Unsynced,
};
use crate::sync::{self, WakerSlot};
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
    /// A stand-in for a `Sent` moved out of a state being replaced.
    fn placeholder() -> Self {
        Self {
            topic: Cow::Borrowed(""),
            partition: 0,
            explicit: None,
            given: None,
            timestamp: 0,
        }
    }

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
/// leader's log with its acknowledgement pending, or held until its partition has room.
/// [`wait`](Self::wait) gives the outcome `send` would have given (Kafka's
/// `Future<RecordMetadata>`), blocking the thread; `.await` gives the same outcome without
/// blocking the executor (it is a [`Future`]). `Send`, so another thread or task may wait
/// on it.
///
/// Dropping it without `wait` or `.await` leaves the record where it is (in the log, or not
/// sent), without the retries `wait` would do.
///
/// # Cancel safety
///
/// Dropping it (a `select!` branch not taken, a timeout) never appends a record twice and
/// never loses one silently; what happened is decided by how far it was polled:
///
/// - `send_async` appended the record already when its partition had room (every topic
///   that is not full; `acks = all` on a replicated one: in the leader's log). Dropping
///   the handle then only gives up its outcome (and, replicated, the retries of a failed
///   acknowledgement).
/// - On a full [`Overflow::Block`](crate::broker::Overflow::Block) partition the record
///   is held, in its producer's line of held records for that partition (records sent
///   after it to that partition are held behind it, to keep call order): a poll (or
///   `wait`) of any handle of the line that finds room appends the records at the front
///   of the line, in order. Dropped while its record is still held, the handle takes the
///   record out of the line unsent; if another handle of the line appended it already,
///   the record stays appended and only its outcome is lost.
/// - A persisted record awaiting its fsync is in the log; dropping the handle does not
///   take it out.
///
/// # Examples
///
/// ```
/// use logbus::{Broker, Record, TopicConfig};
///
/// let broker = Broker::in_memory();
/// broker.create_topic::<(), u64>("ticks", TopicConfig::new(1))?;
/// let producer = broker.producer::<(), u64>();
/// let first = producer.send_async(Record::new("ticks", 1)).wait()?; // a thread waits
/// let second = futures::executor::block_on(producer.send_async(Record::new("ticks", 2)))?;
/// assert_eq!((first.offset, second.offset), (0, 1));
/// # Ok::<(), logbus::Error>(())
/// ```
#[must_use = "the send's outcome (and its retries) comes from `wait` or `.await`"]
pub struct PendingSend<K, V> {
    state: State<K, V>,
}

enum State<K, V> {
    /// Completed at the send: its result.
    Done(Result<RecordMetadata, ProduceError<K, V>>),
    /// In the leader's log, awaiting the acks level (boxed: a handle stays a few words,
    /// cheap to move into a caller's queue of many).
    InFlight(Box<InFlight<K, V>>),
    /// Not appended: its partition was full (a gated topic); appended when room frees.
    Held(Box<Held<K, V>>),
    /// Appended to a persisted partition, awaiting its flush policy's fsync.
    Syncing(Box<Syncing<K, V>>),
    /// Its outcome was taken (by `wait`, or by the poll that completed it).
    Taken,
}

/// A record waiting for room, with its own handle on the partition (the producer's lock
/// is not held meanwhile).
struct Held<K, V> {
    appender: Appender<K, V>,
    sent: Sent,
    slot: WakerSlot,
    /// The producer's line of held records on this partition, which holds the record, and
    /// its ticket there (see `HeldLine`: held records keep call order).
    line: Arc<HeldLine<K, V>>,
    ticket: u64,
    /// Times it rescheduled itself before registering for room (as a blocking wait for
    /// room yields its thread before parking; not under loom, which models no time).
    #[cfg_attr(logbus_loom, allow(dead_code))]
    yields: u32,
}

/// How often a held send reschedules itself before it registers for room.
#[cfg(not(logbus_loom))]
const ROOM_YIELDS: u32 = 64;

/// A persisted record in the log, awaiting its fsync.
struct Syncing<K, V> {
    disk: Arc<dyn DiskLog<K, V>>,
    offset: u64,
    sent: Sent,
    slot: WakerSlot,
}

impl<K, V> State<K, V> {
    /// The state after a non-blocking append to a partition that is not replicated.
    fn unsynced(done: Result<Unsynced<K, V>, Refused<K, V>>, sent: Sent) -> Self {
        match done {
            Ok(Unsynced::Acked(offset)) => State::Done(sent.outcome(Ok(offset))),
            Ok(Unsynced::Syncing(disk, offset)) => State::Syncing(Box::new(Syncing {
                disk,
                offset,
                sent,
                slot: WakerSlot::new(),
            })),
            Err(failed) => State::Done(sent.outcome(Err(failed))),
        }
    }
}

struct InFlight<K, V> {
    log: Arc<dyn ReplicatedLog<K, V>>,
    policy: Arc<SendPolicy>,
    pending: Pending<K, V>,
    sent: Sent,
    /// The task's registration while it awaits the acknowledgement.
    slot: WakerSlot,
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
            State::Held(_) => "held until its partition has room".to_string(),
            State::Syncing(s) => format!("at offset {}, awaiting its fsync", s.offset),
            State::Taken => "taken".to_string(),
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
                slot: WakerSlot::new(),
            })),
        }
    }

    /// A record not appended (its partition was full): the handle appends it when polled
    /// or waited on.
    pub(super) fn held(
        appender: Appender<K, V>,
        sent: Sent,
        line: Arc<HeldLine<K, V>>,
        ticket: u64,
    ) -> Self {
        Self {
            state: State::Held(Box::new(Held {
                appender,
                sent,
                slot: WakerSlot::new(),
                line,
                ticket,
                yields: 0,
            })),
        }
    }

    /// The outcome of a non-blocking append to a partition that is not replicated.
    pub(super) fn unsynced(done: Result<Unsynced<K, V>, Refused<K, V>>, sent: Sent) -> Self {
        Self {
            state: State::unsynced(done, sent),
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
    pub fn wait(mut self) -> Result<RecordMetadata, ProduceError<K, V>> {
        match std::mem::replace(&mut self.state, State::Taken) {
            State::Done(result) => result,
            State::InFlight(f) => {
                let InFlight {
                    log,
                    policy,
                    pending,
                    sent,
                    mut slot,
                } = *f;
                log.cancel_pending(&mut slot);
                sent.outcome(log.await_pending(pending, &policy))
            }
            State::Held(h) => {
                let Held {
                    mut appender,
                    sent,
                    mut slot,
                    line,
                    ticket,
                    ..
                } = *h;
                // The future's protocol, on this thread: it looks at the gate's expiry
                // every few milliseconds, as a blocking append waiting for room does.
                let done = sync::block_on(
                    std::future::poll_fn(|cx| loop {
                        if let Some(done) = line.drive(&mut appender, ticket) {
                            return Poll::Ready(done);
                        }
                        if appender.poll_room(cx, &mut slot).is_pending() {
                            return Poll::Pending;
                        }
                    }),
                    EXPIRY_LOOK,
                );
                appender.cancel_room(&mut slot);
                PendingSend {
                    state: State::unsynced(done, sent),
                }
                .wait()
            }
            State::Syncing(s) => {
                let Syncing {
                    disk,
                    offset,
                    sent,
                    mut slot,
                } = *s;
                disk.cancel_acked(&mut slot);
                sent.outcome(synced(disk.wait_acked(offset), offset))
            }
            State::Taken => panic!("`PendingSend` polled after completion"),
        }
    }
}

/// A persisted append's outcome from its fsync's.
fn synced<K, V>(
    acked: crate::Result<()>,
    offset: u64,
) -> Result<u64, (Option<Entry<K, V>>, AppendError)> {
    match acked {
        Ok(()) => Ok(offset),
        Err(e) => Err((None, AppendError::Unacknowledged(Box::new(e)))),
    }
}

// The future is never pinned in place: its state is moved out by value when it completes.
impl<K, V> Unpin for PendingSend<K, V> {}

/// `.await` gives what [`wait`](PendingSend::wait) gives, parking the task (not the thread)
/// while the record waits for room, for its fsync, or for its acknowledgement by the
/// in-sync replicas. See the type's docs for what dropping it mid-way does (cancel safety).
///
/// One wait stays on the polling thread: a retry after a failed acknowledgement on a
/// replicated partition (a leader change, an ISR shrink) backs off there (up to a few
/// milliseconds, until the partition changes) before it appends again; the new append's
/// acknowledgement is awaited in the task. And with no timer of its own, an awaited send differs from a blocking one
/// in two waits that end by time: the `request_timeout` of one acknowledgement is checked
/// when the task is woken (by every HW move, ISR change, election or close), not at its
/// deadline; and on a gated partition a group left empty for the broker's
/// `empty_group_timeout` lets go of its gate only when someone looks (a blocking send
/// waiting for room looks every few milliseconds, `describe_topic` and `describe_group`
/// look, and a held send looks each time it is polled), so a task waiting for room on a
/// partition held only by such a group stays parked until one of those looks. Where that
/// may happen, await the send under a timeout (it is cancel safe: the record is then
/// dropped unsent) and deal with the group ([`Broker::delete_group`](crate::Broker::delete_group)).
impl<K, V> Future for PendingSend<K, V> {
    type Output = Result<RecordMetadata, ProduceError<K, V>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        loop {
            match &mut this.state {
                State::Done(_) => {}
                State::InFlight(f) => {
                    let InFlight {
                        log,
                        policy,
                        pending,
                        slot,
                        ..
                    } = &mut **f;
                    if log.poll_pending(cx, slot, pending, policy).is_pending() {
                        return Poll::Pending;
                    }
                    // Settled: acknowledged, or failed (retried here, its new
                    // acknowledgement awaited as the first was).
                    let State::InFlight(f) = std::mem::replace(&mut this.state, State::Taken)
                    else {
                        unreachable!("matched above");
                    };
                    let InFlight {
                        log,
                        policy,
                        pending,
                        sent,
                        slot,
                    } = *f;
                    match log.resume_pending(pending, &policy) {
                        Ok(Resumed::Acked(offset)) => {
                            return Poll::Ready(sent.outcome(Ok(offset)));
                        }
                        Ok(Resumed::Again(pending)) => {
                            this.state = State::InFlight(Box::new(InFlight {
                                log,
                                policy,
                                pending,
                                sent,
                                slot,
                            }));
                            continue;
                        }
                        Err(refused) => return Poll::Ready(sent.outcome(Err(refused))),
                    }
                }
                State::Held(h) => {
                    let Held {
                        appender,
                        sent,
                        slot,
                        line,
                        ticket,
                        yields,
                    } = &mut **h;
                    #[cfg(logbus_loom)]
                    let _ = yields;
                    match line.drive(appender, *ticket) {
                        None => {
                            #[cfg(not(logbus_loom))]
                            if *yields < ROOM_YIELDS {
                                *yields += 1;
                                cx.waker().wake_by_ref();
                                return Poll::Pending;
                            }
                            if appender.poll_room(cx, slot).is_pending() {
                                return Poll::Pending;
                            }
                            // Room may have freed: append again.
                            continue;
                        }
                        Some(done) => {
                            appender.cancel_room(slot);
                            let sent = std::mem::replace(sent, Sent::placeholder());
                            this.state = State::unsynced(done, sent);
                            continue;
                        }
                    }
                }
                State::Syncing(s) => {
                    let Syncing {
                        disk, offset, slot, ..
                    } = &mut **s;
                    if disk.poll_acked(cx, slot, *offset).is_pending() {
                        return Poll::Pending;
                    }
                }
                State::Taken => panic!("`PendingSend` polled after completion"),
            }
            // Settled: what `wait` returns now comes without blocking (but a retry's).
            let done = PendingSend {
                state: std::mem::replace(&mut this.state, State::Taken),
            };
            return Poll::Ready(done.wait());
        }
    }
}

impl<K, V> Drop for PendingSend<K, V> {
    fn drop(&mut self) {
        match &mut self.state {
            State::InFlight(f) => f.log.cancel_pending(&mut f.slot),
            State::Held(h) => {
                // Out of the line: dropped unsent, unless another handle of the line
                // appended it meanwhile (then only its outcome goes).
                h.appender.cancel_room(&mut h.slot);
                h.line.cancel(h.ticket);
            }
            State::Syncing(s) => s.disk.cancel_acked(&mut s.slot),
            State::Done(_) | State::Taken => {}
        }
    }
}
