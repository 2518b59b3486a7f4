//! The ring's error types.
//!
//! Errors that hand a value back (a publish into a closed or full ring) carry it and print no
//! payload in `Debug`, so they need no `T: Debug` bound. Errors about configuration or about a
//! reader's start position are [`crate::Error`] (`InvalidConfig`, `SequenceOutOfRange`).

use std::fmt;

/// Why [`Reader::try_read`](super::Reader::try_read) returned nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TryReadError {
    /// Nothing new has been published yet.
    #[error("no entry published yet at the reader's position")]
    Empty,
    /// The reader fell behind a producer that overwrote entries it had not read: it missed
    /// exactly this many entries and now stands at the oldest entry still available.
    #[error("reader lagged: {0} entries were overwritten before it read them")]
    Lagged(u64),
    /// The ring is closed and the reader has read everything that was published.
    #[error("ring closed and drained")]
    Closed,
}

/// Why a blocking [`Reader::read`](super::Reader::read) returned nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// See [`TryReadError::Lagged`].
    #[error("reader lagged: {0} entries were overwritten before it read them")]
    Lagged(u64),
    /// See [`TryReadError::Closed`].
    #[error("ring closed and drained")]
    Closed,
}

/// Why [`Reader::read_timeout`](super::Reader::read_timeout) returned nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadTimeoutError {
    /// Nothing was published before the deadline.
    #[error("timed out waiting for an entry")]
    Timeout,
    /// See [`TryReadError::Lagged`].
    #[error("reader lagged: {0} entries were overwritten before it read them")]
    Lagged(u64),
    /// See [`TryReadError::Closed`].
    #[error("ring closed and drained")]
    Closed,
}

impl From<ReadError> for ReadTimeoutError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Lagged(n) => ReadTimeoutError::Lagged(n),
            ReadError::Closed => ReadTimeoutError::Closed,
        }
    }
}

/// A blocking publish failed because the ring is closed; the value is handed back.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error("publishing into a closed ring")]
pub struct PublishError<T>(pub T);

impl<T> PublishError<T> {
    /// The value that was not published.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> fmt::Debug for PublishError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PublishError(..)")
    }
}

/// A non-blocking publish failed; the value is handed back.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TryPublishError<T> {
    /// Every slot holds an entry a gating reader has not read yet.
    #[error("ring full: a gating reader has not passed the slot")]
    Full(T),
    /// The ring is closed.
    #[error("publishing into a closed ring")]
    Closed(T),
}

impl<T> TryPublishError<T> {
    /// The value that was not published.
    pub fn into_inner(self) -> T {
        match self {
            TryPublishError::Full(v) | TryPublishError::Closed(v) => v,
        }
    }
}

impl<T> fmt::Debug for TryPublishError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryPublishError::Full(_) => f.write_str("Full(..)"),
            TryPublishError::Closed(_) => f.write_str("Closed(..)"),
        }
    }
}

/// A publish with a deadline failed; the value is handed back.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PublishTimeoutError<T> {
    /// The ring stayed full until the deadline.
    #[error("timed out waiting for a free slot")]
    Timeout(T),
    /// The ring is closed.
    #[error("publishing into a closed ring")]
    Closed(T),
}

impl<T> PublishTimeoutError<T> {
    /// The value that was not published.
    pub fn into_inner(self) -> T {
        match self {
            PublishTimeoutError::Timeout(v) | PublishTimeoutError::Closed(v) => v,
        }
    }
}

impl<T> fmt::Debug for PublishTimeoutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PublishTimeoutError::Timeout(_) => f.write_str("Timeout(..)"),
            PublishTimeoutError::Closed(_) => f.write_str("Closed(..)"),
        }
    }
}

/// A batch publish into a closed ring: the entries not published stay in the caller's `Vec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("publishing into a closed ring ({published} of the batch were published before it closed)")]
pub struct BatchClosed {
    /// How many entries of the batch were published before the ring closed.
    pub published: usize,
}

/// A batch publish with a deadline did not publish the whole batch: the entries not
/// published stay in the caller's `Vec`, in order (the contract of [`BatchClosed`], shared
/// with the queue's batch sends).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PublishBatchTimeoutError {
    /// The ring stayed full until the deadline.
    #[error("timed out waiting for a free slot ({published} of the batch were published)")]
    Timeout {
        /// How many entries from the front of the batch were published in time.
        published: usize,
    },
    /// The ring closed.
    #[error(
        "publishing into a closed ring ({published} of the batch were published before it closed)"
    )]
    Closed {
        /// How many entries from the front of the batch were published before it closed.
        published: usize,
    },
}

impl PublishBatchTimeoutError {
    /// How many entries from the front of the batch were published.
    pub fn published(&self) -> usize {
        match *self {
            Self::Timeout { published } | Self::Closed { published } => published,
        }
    }
}

impl From<BatchClosed> for PublishBatchTimeoutError {
    fn from(e: BatchClosed) -> Self {
        Self::Closed {
            published: e.published,
        }
    }
}

/// Why [`Reader::get`](super::Reader::get) could not return the entry at a sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GetError {
    /// The entry is no longer in the ring (or, for a gating reader, is behind its cursor);
    /// `oldest` is the oldest sequence this reader may still ask for.
    #[error("sequence {requested} is no longer in the ring (oldest available: {oldest})")]
    Evicted {
        /// The sequence asked for.
        requested: u64,
        /// The oldest sequence the reader may ask for now (a hint: it moves on).
        oldest: u64,
    },
    /// The entry has not been published yet.
    #[error("sequence {requested} is not published yet")]
    NotPublished {
        /// The sequence asked for.
        requested: u64,
    },
}
