//! The crate's error type.
//!
//! One enum for the whole crate, `#[non_exhaustive]` so that each layer can add the variants
//! it needs without breaking users. Every variant carries the facts a caller needs to act on
//! it (what was wrong and what would have been valid); I/O failures keep the `io::Error` as
//! their `source`.

use std::io;

/// Everything that can go wrong in logbus.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration value is out of its valid range.
    #[error("invalid config `{name}` = {value}: {valid}")]
    InvalidConfig {
        /// The setting's name, as in the config struct.
        name: &'static str,
        /// The rejected value, printed.
        value: String,
        /// What would have been accepted.
        valid: String,
    },

    /// Bytes could not be decoded as the requested type.
    #[error("cannot decode {type_id}: {reason}")]
    Decode {
        /// The [`Codec::TYPE_ID`](crate::Codec::TYPE_ID) of the type being decoded.
        type_id: &'static str,
        /// What was wrong with the bytes.
        reason: String,
    },

    /// A position (a ring sequence, a partition offset) lies outside the range that can be
    /// served.
    #[error("sequence {requested} out of range: valid is {oldest}..={newest}")]
    SequenceOutOfRange {
        /// The sequence asked for.
        requested: u64,
        /// The oldest valid sequence at the time of the request.
        oldest: u64,
        /// The newest valid sequence at the time of the request (inclusive; for a reader's
        /// start this is the next sequence to be published).
        newest: u64,
    },

    /// An operation did not complete before its deadline.
    #[error("timed out")]
    Timeout,

    /// An I/O operation failed.
    #[error("I/O error while {context}")]
    Io {
        /// What logbus was doing (with the file's path where there is one).
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// `Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An [`Error::Io`] with a description of what was being done.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}
