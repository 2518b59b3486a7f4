//! [`NotRegularFile`]: how an I/O implementation tells [`Error::opening`](super::Error::opening)
//! that a path is not a regular file. It lives with the error type, not with the storage
//! layer's I/O trait that produces it, so that `error` stays below `storage` (the storage
//! layer re-exports it as `storage::io::NotRegularFile`).

use std::fmt;
use std::io;

/// The payload of the `io::Error` an [`Io`](crate::storage::Io) returns for a path that is
/// not a regular file; the storage layer turns it into
/// [`Error::NotRegularFile`](crate::Error::NotRegularFile).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotRegularFile {
    /// What the path is instead (`"a symbolic link"`, `"a directory"`, ...).
    pub what: &'static str,
}

impl NotRegularFile {
    /// An `io::Error` (kind `InvalidInput`) carrying this payload for `path`.
    pub fn error(what: &'static str) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidInput, NotRegularFile { what })
    }

    /// The payload, if `e` carries one.
    pub fn of(e: &io::Error) -> Option<&NotRegularFile> {
        e.get_ref().and_then(|inner| inner.downcast_ref())
    }
}

impl fmt::Display for NotRegularFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not a regular file: it is {}", self.what)
    }
}

impl std::error::Error for NotRegularFile {}
