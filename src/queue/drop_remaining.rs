//! Dropping the messages a queue still holds when it goes, for every flavour.

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};

/// Drops every message `next` hands out, each exactly once, until it returns `None`, and
/// returns the first panic a message's `Drop` raised (the caller resumes it once its own
/// clean-up is done). Every drop runs inside `catch_unwind`: a second panic escaping while
/// the first unwinds would abort the process, so the later ones go to the panic hook and no
/// further. A thread already unwinding when it drops a queue gets nothing back: resuming
/// would be that second panic.
///
/// `next` must leave the queue consistent before it returns a message (the message has
/// left the buffer), so a panicking `Drop` finds nothing half-updated.
pub(super) fn drop_each<T>(mut next: impl FnMut() -> Option<T>) -> Option<Box<dyn Any + Send>> {
    let mut first = None;
    let unwinding = std::thread::panicking();
    while let Some(msg) = next() {
        if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(move || drop(msg))) {
            if first.is_none() && !unwinding {
                first = Some(payload);
            }
        }
    }
    first
}

/// [`drop_each`], then the first panic goes on unwinding.
pub(super) fn drop_all<T>(next: impl FnMut() -> Option<T>) {
    if let Some(payload) = drop_each(next) {
        panic::resume_unwind(payload);
    }
}
