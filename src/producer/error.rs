//! Why a send failed, one type per operation (crossbeam-channel's shape: `SendError`,
//! `TrySendError`, `SendTimeoutError`), each handing back what was not sent.
//!
//! The names say "produce" rather than "send": the queue's `SendError<T>` family is
//! crossbeam-channel's contract and keeps its names.

use std::fmt;

use super::Record;
use crate::Error;

/// A [`send`](super::Producer::send) (or a [`PendingSend::wait`](super::PendingSend::wait))
/// that failed: the reason, and the record handed back unless it reached the log
/// ([`Error::NotAcknowledged`]).
///
/// `Debug` prints the reason only (no `K: Debug` bound). Converts into [`Error`] with `?`.
pub struct ProduceError<K, V> {
    /// Boxed: a send's `Result` stays small on the path that succeeds.
    inner: Box<(Error, Option<Record<K, V>>)>,
}

impl<K, V> ProduceError<K, V> {
    /// A failed send, with its record handed back.
    pub(crate) fn new(error: Error, record: Record<K, V>) -> Self {
        Self {
            inner: Box::new((error, Some(record))),
        }
    }

    /// A send whose record reached the log but was not acknowledged.
    pub(crate) fn unacknowledged(error: Error) -> Self {
        Self {
            inner: Box::new((error, None)),
        }
    }

    /// The reason and the record, if handed back.
    pub(crate) fn into_parts(self) -> (Error, Option<Record<K, V>>) {
        *self.inner
    }

    /// Why the send failed.
    pub fn error(&self) -> &Error {
        &self.inner.0
    }

    /// The record that was not sent; `None` when it was appended but not acknowledged
    /// ([`Error::NotAcknowledged`]: the record is in the log, and may survive a crash).
    pub fn into_record(self) -> Option<Record<K, V>> {
        self.inner.1
    }

    /// The reason, dropping the record.
    pub fn into_error(self) -> Error {
        self.inner.0
    }
}

impl<K, V> fmt::Debug for ProduceError<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProduceError")
            .field("error", self.error())
            .field("record_handed_back", &self.inner.1.is_some())
            .finish()
    }
}

impl<K, V> fmt::Display for ProduceError<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "send failed: {}", self.error())
    }
}

impl<K, V> std::error::Error for ProduceError<K, V> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.error())
    }
}

impl<K, V> From<ProduceError<K, V>> for Error {
    fn from(e: ProduceError<K, V>) -> Self {
        e.into_error()
    }
}

/// The methods every per-operation error shares with [`ProduceError`], which it wraps.
macro_rules! wraps_produce_error {
    ($name:ident, $what:literal) => {
        impl<K, V> $name<K, V> {
            /// Why the send failed.
            pub fn error(&self) -> &Error {
                self.0.error()
            }

            /// The record that was not sent; `None` when it was appended but not
            /// acknowledged ([`Error::NotAcknowledged`]).
            pub fn into_record(self) -> Option<Record<K, V>> {
                self.0.into_record()
            }

            /// The reason, dropping the record.
            pub fn into_error(self) -> Error {
                self.0.into_error()
            }
        }

        impl<K, V> fmt::Debug for $name<K, V> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_tuple(stringify!($name)).field(&self.0).finish()
            }
        }

        impl<K, V> fmt::Display for $name<K, V> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($what, " failed: {}"), self.error())
            }
        }

        impl<K, V> std::error::Error for $name<K, V> {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(self.error())
            }
        }

        impl<K, V> From<$name<K, V>> for ProduceError<K, V> {
            fn from(e: $name<K, V>) -> Self {
                e.0
            }
        }

        impl<K, V> From<$name<K, V>> for Error {
            fn from(e: $name<K, V>) -> Self {
                e.into_error()
            }
        }
    };
}

/// A [`try_send`](super::Producer::try_send) that failed: [`is_full`](Self::is_full) when
/// the partition had no room ([`Error::Full`]), else any reason [`ProduceError`] gives;
/// the record is handed back.
pub struct TryProduceError<K, V>(pub(crate) ProduceError<K, V>);

wraps_produce_error!(TryProduceError, "try_send");

impl<K, V> TryProduceError<K, V> {
    /// Whether the partition was full (of records a registered group has not committed).
    pub fn is_full(&self) -> bool {
        matches!(self.error(), Error::Full { .. })
    }
}

/// A [`send_timeout`](super::Producer::send_timeout) or
/// [`send_deadline`](super::Producer::send_deadline) that failed:
/// [`is_timeout`](Self::is_timeout) when the deadline passed before the partition had room
/// (or, on a replicated partition, before the acks level held), else any reason
/// [`ProduceError`] gives; the record is handed back unless it reached the log.
pub struct ProduceTimeoutError<K, V>(pub(crate) ProduceError<K, V>);

wraps_produce_error!(ProduceTimeoutError, "send_timeout");

impl<K, V> ProduceTimeoutError<K, V> {
    /// Whether the deadline passed.
    pub fn is_timeout(&self) -> bool {
        matches!(self.error(), Error::Timeout { .. })
    }
}

/// A send of many records that stopped early ([`Producer::send_batch`],
/// [`PartitionProducer::send_iter`], [`PartitionProducer::send_slice`]): how many were
/// sent, in order, and why the next one was not. What was not sent stays with the caller:
/// `send_batch` leaves it in its vector, `send_slice` sent `records[..sent]`. Converts
/// into [`Error`] with `?`.
///
/// [`Producer::send_batch`]: super::Producer::send_batch
/// [`PartitionProducer::send_iter`]: super::PartitionProducer::send_iter
/// [`PartitionProducer::send_slice`]: super::PartitionProducer::send_slice
#[derive(Debug, thiserror::Error)]
#[error("sent {sent} records, then: {error}")]
#[non_exhaustive]
pub struct ProduceBatchError {
    /// Records appended before the failure, in order.
    pub sent: usize,
    /// Why the next was not.
    #[source]
    pub error: Error,
}

impl From<ProduceBatchError> for Error {
    fn from(e: ProduceBatchError) -> Self {
        e.error
    }
}
