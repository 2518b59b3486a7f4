//! Which protocol a bounded queue runs, for diagnostics, and a constructor that starts
//! shared.
//!
//! # Owned and shared
//!
//! A bounded queue starts *owned*: each side belongs to one thread at a time, which moves
//! messages with plain loads and stores (no locked instruction). Ownership is per thread,
//! named by a thread token; another thread using a side takes it over, and a queue whose
//! sides change hands faster than a small budget allows goes *shared* for good: every
//! operation then claims its slot with a CAS, as crossbeam-channel's array flavour does.
//! Both are correct for any number of threads; they differ only in cost (figures in
//! BENCHMARKS.md).
//!
//! **The 64-token cliff.** The tokens that can own a side come from a pool of 64 per
//! process: a thread takes one at its first queue operation and gives it back when it
//! exits (a later thread then inherits what the token owned, with no change of owner). A
//! thread that finds the pool empty (64 other live threads have used queues), or that uses
//! a queue from a thread-local destructor (its token is gone by then), cannot own: its
//! first operation on a bounded queue makes that queue shared for good. Nothing is lost,
//! but a program with more than 64 live threads using queues may find queues shared that
//! one thread per side would have kept owned, and a queue shared this way never goes back.
//! [`Sender::protocol`] and [`Receiver::protocol`] tell which protocol a queue runs.
//!
//! A queue that many threads will use from the start gains nothing from the owned protocol
//! and pays for the changes of owner before it goes shared: [`bounded_shared`] makes it
//! shared from the first message.
//!
//! Under loom (`--cfg logbus_loom`) every queue is shared: the owned protocol has models of
//! its own, and its changes of owner would multiply every other model's states.

use super::array;
use super::owners::Owners;
use super::{counter, zero, Flavor, Receiver, Sender};

/// The protocol a queue runs: see the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Protocol {
    /// A bounded queue whose sides each belong to one thread at a time (or to none yet):
    /// no locked instruction per message.
    Owned,
    /// Every thread claims slots with a CAS, for good. Unbounded, rendezvous and timer
    /// queues are always shared; a bounded queue is once its sides changed hands too fast,
    /// a thread without an ownership token used it, it was disconnected, or it was made by
    /// [`bounded_shared`].
    Shared,
}

/// Creates a queue holding at most `capacity` messages that runs the shared protocol from
/// the start (see the [module docs](self)); otherwise the same as
/// [`bounded`](super::bounded), whose queues start owned. For a queue that several threads
/// per side use at once: it skips the changes of owner (a `membarrier` each) that such a
/// queue would pay before going shared anyway.
///
/// # Panics
///
/// As [`bounded`](super::bounded): if `capacity` exceeds `usize::MAX / 4`.
///
/// # Examples
///
/// ```
/// use logbus::queue::{bounded_shared, Protocol};
///
/// let (tx, rx) = bounded_shared(8);
/// assert_eq!(tx.protocol(), Protocol::Shared);
/// tx.send(1).unwrap();
/// assert_eq!(rx.recv(), Ok(1));
/// ```
pub fn bounded_shared<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    bounded_with(capacity, |cap| {
        array::Channel::with_protocol(cap, Owners::shared())
    })
}

/// A queue of `capacity`: rendezvous for 0, otherwise the array flavour made by `array`.
pub(super) fn bounded_with<T>(
    capacity: usize,
    array: impl FnOnce(usize) -> array::Channel<T>,
) -> (Sender<T>, Receiver<T>) {
    let flavor = if capacity == 0 {
        Flavor::Zero(zero::Channel::new())
    } else {
        assert!(
            capacity <= usize::MAX / 4,
            "queue capacity {capacity} is too large (at most usize::MAX / 4)"
        );
        Flavor::Array(array(capacity))
    };
    let (s, r) = counter::new(flavor);
    (Sender { inner: s }, Receiver { inner: r })
}

fn protocol_of<T>(flavor: &Flavor<T>) -> Protocol {
    match flavor {
        Flavor::Array(ch) if !ch.is_shared() => Protocol::Owned,
        _ => Protocol::Shared,
    }
}

impl<T> Sender<T> {
    /// Which protocol the queue runs now (a diagnostic: an owned queue may go shared at
    /// any moment, never the other way). See the [`protocol`](self) module docs.
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::queue::{bounded, unbounded, Protocol};
    ///
    /// let (tx, rx) = bounded::<u8>(4);
    /// assert_eq!(tx.protocol(), Protocol::Owned);
    /// drop(rx); // disconnecting makes a queue shared
    /// assert_eq!(tx.protocol(), Protocol::Shared);
    /// assert_eq!(unbounded::<u8>().0.protocol(), Protocol::Shared);
    /// ```
    pub fn protocol(&self) -> Protocol {
        protocol_of(&self.inner)
    }
}

impl<T> Receiver<T> {
    /// Which protocol the queue runs now; as [`Sender::protocol`].
    pub fn protocol(&self) -> Protocol {
        protocol_of(&self.inner)
    }
}
