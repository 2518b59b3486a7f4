//! [`Error`]'s methods: whether a retry may succeed, and the constructors the layers share
//! (an I/O error with its context, the error of opening a path, a problem placed in its
//! file).

use std::io;
use std::path::Path;

use super::Error;

impl Error {
    /// Whether trying the same request again may succeed: a Kafka error its cluster calls
    /// retriable ([`Error::Kafka`] with `retriable`). Timeouts are told apart by their own
    /// variant ([`Error::Timeout`]): whether the request took effect is unknown there, so a
    /// retry may duplicate it.
    pub fn is_retriable(&self) -> bool {
        matches!(
            self,
            Error::Kafka {
                retriable: true,
                ..
            }
        )
    }

    /// An [`Error::Io`] with a description of what was being done.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// The error of opening `path`, doing `what` (`"opening"`, `"creating"`):
    /// [`Error::NotRegularFile`] when the [`Io`](crate::storage::Io) refused a path that is
    /// not a regular file, [`Error::Io`] naming the path otherwise.
    pub fn opening(what: &str, path: &Path, source: io::Error) -> Self {
        match super::not_regular_file::NotRegularFile::of(&source) {
            Some(n) => Error::NotRegularFile {
                path: path.to_path_buf(),
                what: n.what,
            },
            None => Error::io(format!("{what} {}", path.display()), source),
        }
    }

    /// Places a problem found in bytes read from `file` at `base` (the file position of the
    /// first byte decoded): [`Error::Corrupt`] and [`Error::UnsupportedCompression`] without a
    /// file gain it. Other errors pass through unchanged.
    pub fn in_file(self, file: &Path, base: u64) -> Self {
        match self {
            Error::Corrupt {
                file: None,
                position,
                reason,
            } => Error::Corrupt {
                file: Some(file.to_path_buf()),
                position: base + position,
                reason,
            },
            Error::UnsupportedCompression {
                file: None,
                position,
                codec,
            } => Error::UnsupportedCompression {
                file: Some(file.to_path_buf()),
                position: base + position,
                codec,
            },
            other => other,
        }
    }
}
