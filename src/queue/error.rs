//! The queue's error types, shaped like crossbeam-channel's so that code switching between
//! the two keeps its `match` arms.
//!
//! The send-side errors carry the message that could not be sent, so nothing is lost:
//! `into_inner()` hands it back. None of them needs `T: Debug` to be printed with `{:?}`:
//! the payload is shown as `..`.

use std::error::Error as StdError;
use std::fmt;

/// [`Sender::send`](super::Sender::send) failed because every receiver is gone; the message
/// is inside.
#[derive(PartialEq, Eq, Clone, Copy)]
pub struct SendError<T>(pub T);

/// [`Sender::try_send`](super::Sender::try_send) could not send the message right away.
#[derive(PartialEq, Eq, Clone, Copy)]
pub enum TrySendError<T> {
    /// The queue holds `capacity` messages (for a rendezvous queue: no receiver is waiting).
    Full(T),
    /// Every receiver is gone.
    Disconnected(T),
}

/// [`Sender::send_timeout`](super::Sender::send_timeout) or
/// [`send_deadline`](super::Sender::send_deadline) did not send the message.
#[derive(PartialEq, Eq, Clone, Copy)]
pub enum SendTimeoutError<T> {
    /// The queue stayed full until the deadline.
    Timeout(T),
    /// Every receiver is gone.
    Disconnected(T),
}

/// [`Receiver::recv`](super::Receiver::recv) failed: the queue is empty and every sender is
/// gone, so no message will ever arrive.
#[derive(PartialEq, Eq, Clone, Copy, Debug)]
pub struct RecvError;

/// [`Receiver::try_recv`](super::Receiver::try_recv) found no message.
#[derive(PartialEq, Eq, Clone, Copy, Debug)]
pub enum TryRecvError {
    /// The queue is empty right now; senders remain, so a message may still arrive.
    Empty,
    /// The queue is empty and every sender is gone.
    Disconnected,
}

/// [`Receiver::recv_timeout`](super::Receiver::recv_timeout) or
/// [`recv_deadline`](super::Receiver::recv_deadline) received nothing.
#[derive(PartialEq, Eq, Clone, Copy, Debug)]
pub enum RecvTimeoutError {
    /// No message arrived before the deadline; senders remain.
    Timeout,
    /// The queue is empty and every sender is gone.
    Disconnected,
}

impl<T> SendError<T> {
    /// The message that was not sent.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> TrySendError<T> {
    /// The message that was not sent.
    pub fn into_inner(self) -> T {
        match self {
            Self::Full(v) | Self::Disconnected(v) => v,
        }
    }

    /// Whether the queue was full.
    pub fn is_full(&self) -> bool {
        matches!(self, Self::Full(_))
    }

    /// Whether every receiver was gone.
    pub fn is_disconnected(&self) -> bool {
        matches!(self, Self::Disconnected(_))
    }
}

impl<T> SendTimeoutError<T> {
    /// The message that was not sent.
    pub fn into_inner(self) -> T {
        match self {
            Self::Timeout(v) | Self::Disconnected(v) => v,
        }
    }

    /// Whether the deadline passed.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Timeout(_))
    }

    /// Whether every receiver was gone.
    pub fn is_disconnected(&self) -> bool {
        matches!(self, Self::Disconnected(_))
    }
}

impl TryRecvError {
    /// Whether the queue was merely empty.
    pub fn is_empty(&self) -> bool {
        matches!(self, Self::Empty)
    }

    /// Whether every sender was gone.
    pub fn is_disconnected(&self) -> bool {
        matches!(self, Self::Disconnected)
    }
}

impl RecvTimeoutError {
    /// Whether the deadline passed.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Timeout)
    }

    /// Whether every sender was gone.
    pub fn is_disconnected(&self) -> bool {
        matches!(self, Self::Disconnected)
    }
}

// crossbeam-channel's send-side errors print their `Debug` form quoted (it formats a
// string with `Debug`); so do these, for code that compares `{:?}` output.
impl<T> fmt::Debug for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt("SendError(..)", f)
    }
}

impl<T> fmt::Debug for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full(_) => fmt::Debug::fmt("Full(..)", f),
            Self::Disconnected(_) => fmt::Debug::fmt("Disconnected(..)", f),
        }
    }
}

impl<T> fmt::Debug for SendTimeoutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt("SendTimeoutError(..)", f)
    }
}

// Each message starts with crossbeam-channel's wording, word for word (code may match on
// it), and says more after it.
const SEND_DISCONNECTED: &str =
    "sending on a disconnected channel (every receiver is gone; the message is returned)";

impl<T> fmt::Display for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(SEND_DISCONNECTED)
    }
}

impl<T> fmt::Display for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full(_) => f.write_str(
                "sending on a full channel (it holds `capacity` messages; the message is returned)",
            ),
            Self::Disconnected(_) => f.write_str(SEND_DISCONNECTED),
        }
    }
}

impl<T> fmt::Display for SendTimeoutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Timeout(_) => f.write_str(
                "timed out waiting on send operation (the queue stayed full until the deadline; \
                 the message is returned)",
            ),
            Self::Disconnected(_) => f.write_str(SEND_DISCONNECTED),
        }
    }
}

const RECV_DISCONNECTED: &str =
    "receiving on an empty and disconnected channel (every sender is gone)";

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(RECV_DISCONNECTED)
    }
}

impl fmt::Display for TryRecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("receiving on an empty channel (senders remain)"),
            Self::Disconnected => f.write_str(RECV_DISCONNECTED),
        }
    }
}

impl fmt::Display for RecvTimeoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Timeout => f.write_str(
                "timed out waiting on receive operation (the queue stayed empty until the \
                 deadline; senders remain)",
            ),
            Self::Disconnected => {
                f.write_str("channel is empty and disconnected (every sender is gone)")
            }
        }
    }
}

impl<T> StdError for SendError<T> {}
impl<T> StdError for TrySendError<T> {}
impl<T> StdError for SendTimeoutError<T> {}
impl StdError for RecvError {}
impl StdError for TryRecvError {}
impl StdError for RecvTimeoutError {}

impl<T> From<SendError<T>> for TrySendError<T> {
    fn from(err: SendError<T>) -> Self {
        Self::Disconnected(err.0)
    }
}

impl<T> From<SendError<T>> for SendTimeoutError<T> {
    fn from(err: SendError<T>) -> Self {
        Self::Disconnected(err.0)
    }
}

impl From<RecvError> for TryRecvError {
    fn from(_: RecvError) -> Self {
        Self::Disconnected
    }
}

impl From<RecvError> for RecvTimeoutError {
    fn from(_: RecvError) -> Self {
        Self::Disconnected
    }
}

/// [`Select::try_select`](super::Select::try_select) found no operation ready.
#[derive(PartialEq, Eq, Clone, Copy, Debug)]
pub struct TrySelectError;

/// [`Select::select_timeout`](super::Select::select_timeout) or
/// [`select_deadline`](super::Select::select_deadline) found no operation ready in time.
#[derive(PartialEq, Eq, Clone, Copy, Debug)]
pub struct SelectTimeoutError;

/// [`Select::try_ready`](super::Select::try_ready) found no operation ready.
#[derive(PartialEq, Eq, Clone, Copy, Debug)]
pub struct TryReadyError;

/// [`Select::ready_timeout`](super::Select::ready_timeout) or
/// [`ready_deadline`](super::Select::ready_deadline) found no operation ready in time.
#[derive(PartialEq, Eq, Clone, Copy, Debug)]
pub struct ReadyTimeoutError;

// crossbeam-channel's wording.
impl fmt::Display for TrySelectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        "all operations in select would block".fmt(f)
    }
}

impl fmt::Display for SelectTimeoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        "timed out waiting on select".fmt(f)
    }
}

impl fmt::Display for TryReadyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        "all operations in select would block".fmt(f)
    }
}

impl fmt::Display for ReadyTimeoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        "timed out waiting on ready".fmt(f)
    }
}

impl StdError for TrySelectError {}
impl StdError for SelectTimeoutError {}
impl StdError for TryReadyError {}
impl StdError for ReadyTimeoutError {}

/// A batch send stopped because every receiver is gone. The batch operations share one
/// contract with the ring's ([`BatchClosed`](crate::ring::BatchClosed)): the messages not
/// sent stay in the caller's `Vec`, in order, and the error counts those that were.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("sending into a disconnected queue ({sent} of the batch were sent before)")]
pub struct SendBatchError {
    /// How many messages from the front of the batch were sent before the queue
    /// disconnected.
    pub sent: usize,
}

/// [`Sender::send_batch_timeout`](super::Sender::send_batch_timeout) or
/// [`send_batch_deadline`](super::Sender::send_batch_deadline) did not send the whole batch.
/// As with [`SendBatchError`], the messages not sent stay in the caller's `Vec`, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendBatchTimeoutError {
    /// The queue stayed full until the deadline.
    #[error("timed out waiting for room ({sent} of the batch were sent before)")]
    Timeout {
        /// How many messages from the front of the batch were sent in time.
        sent: usize,
    },
    /// Every receiver is gone.
    #[error("sending into a disconnected queue ({sent} of the batch were sent before)")]
    Disconnected {
        /// How many messages from the front of the batch were sent before it disconnected.
        sent: usize,
    },
}

impl SendBatchTimeoutError {
    /// How many messages from the front of the batch were sent.
    pub fn sent(&self) -> usize {
        match *self {
            Self::Timeout { sent } | Self::Disconnected { sent } => sent,
        }
    }

    /// Whether the deadline passed.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Timeout { .. })
    }

    /// Whether every receiver is gone.
    pub fn is_disconnected(&self) -> bool {
        matches!(self, Self::Disconnected { .. })
    }
}

impl From<SendBatchError> for SendBatchTimeoutError {
    fn from(e: SendBatchError) -> Self {
        Self::Disconnected { sent: e.sent }
    }
}
