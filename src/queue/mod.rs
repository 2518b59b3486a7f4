//! A blocking queue: point-to-point, each message taken by exactly one receiver, first in
//! first out; bounded (a full queue blocks senders) or unbounded.
//!
//! The API is crossbeam-channel's (`bounded`, `unbounded`, `send`/`try_send`/`send_timeout`/
//! `send_deadline`, the same for `recv`, `iter`/`try_iter`, the same error types), so code
//! switches between the two by changing an import. On top of it, batch operations move many
//! messages per synchronisation: [`Sender::send_batch`], [`Sender::try_send_batch`],
//! [`Receiver::recv_batch`], [`Receiver::try_recv_batch`].
//!
//! # Flavours
//!
//! - `bounded(n)` with `n > 0`: an array of slots (`array/`). While one thread at a time
//!   uses each side, it runs Lamport's single-producer single-consumer protocol with no
//!   locked instruction per message (the *owned* protocol; another thread taking a side
//!   over keeps it); once threads take turns faster than that allows, Vyukov's bounded
//!   MPMC protocol with per-slot stamps, one CAS per operation (the *shared* protocol), for
//!   good. Head and tail live on separate cache lines.
//! - `bounded(0)`: a rendezvous queue (`zero.rs`): a send completes when a receiver takes
//!   the message.
//! - `unbounded()`: a linked list of blocks of 31 slots (`list.rs`), as crossbeam's list
//!   flavour: a send claims a slot with one CAS and never blocks; drained blocks are
//!   recycled (a few spares per queue) or freed.
//! - `after`, `at`, `tick`, `never` (`timer.rs`): receive-only queues of `Instant`s, as
//!   crossbeam's: computed from the clock when received, no thread behind them.
//!
//! [`select!`](crate::select!) and [`Select`] wait on several operations of any of these at
//! once, choosing at random among the ready ones (`select.rs`);
//! [`select_biased!`](crate::select_biased!) and [`Select::new_biased`] choose the first
//! ready one in the order written.
//!
//! # Async
//!
//! The same queues serve tasks: [`Sender::send_async`], [`Receiver::recv_async`], their
//! batch forms [`Sender::send_batch_async`] and [`Receiver::recv_batch_async`],
//! [`Receiver::stream`] / [`Receiver::into_stream`] (a `futures_core::Stream`) and
//! [`Sender::sink`] / [`Sender::into_sink`] (a `futures_sink::Sink`). They need no
//! runtime (any executor: tokio, `futures::executor`, others), and threads and tasks mix
//! freely on one queue, on either side: a thread parked in `recv` and a task awaiting
//! `recv_async` wait side by side and every wake-up reaches both. A future's first poll
//! does what the `try_` form does; only when it would have to wait does it register its
//! waker (under the wait set's lock, no allocation once warm) and return `Pending`.
//!
//! - **Rendezvous** (`bounded(0)`): an async send puts its message in the hand-off slot
//!   and completes when a receiver (thread or task) takes it, so two tasks meet as two
//!   threads do, on any executor. A waiting *task* does not count as a waiting receiver
//!   for [`Sender::try_send`], which then reports `Full` rather than block until that task
//!   runs.
//! - **Timers**: `recv_async` on [`after`], [`at`] and [`tick`] resolves when the message
//!   is due (one helper thread per process, started on first use, wakes the tasks);
//!   [`never()`] pends for good.
//! - **Select**: the futures work as branches of `tokio::select!` and, being
//!   [`FusedFuture`](futures_core::future::FusedFuture)s, of `futures::select!`; the
//!   branches that lose are dropped, which their cancel safety covers. (The crate's own
//!   [`select!`](crate::select!) is for threads.)
//! - **Cancel safety** (each method's docs say it exactly): dropping a receive future
//!   (`recv_async`, `recv_batch_async`, a stream's `next`) never loses a message, even
//!   one it was woken for; dropping a send future that did not complete means its message
//!   was not sent (it is dropped with the future; [`SendFut::cancel`] hands it back
//!   instead), never both sent and returned; a batch send dropped midway leaves exactly
//!   the unsent messages in the caller's `Vec`.
//!
//! ```
//! use futures::executor::block_on;
//! use std::thread;
//!
//! let (tx, rx) = logbus::queue::bounded(2);
//! let producer = thread::spawn(move || {
//!     for i in 0..10u32 {
//!         tx.send(i).unwrap(); // a thread sends...
//!     }
//! });
//! let sum = block_on(async {
//!     let mut sum = 0;
//!     while let Ok(m) = rx.recv_async().await { // ...a task receives
//!         sum += m;
//!     }
//!     sum
//! });
//! producer.join().unwrap();
//! assert_eq!(sum, 45);
//! ```
//!
//! # Guarantees
//!
//! - **Linearizability.** Every operation takes effect at one instant between its call and
//!   its return, whichever threads use the queue and however often they take turns:
//!   `try_recv`, `try_send`, `len`, `is_empty` and `is_full` answer as if the queue were
//!   behind one lock (`try_recv` never reports `Empty` while a message whose send has
//!   returned is waiting). `try_send_batch` and `try_recv_batch` are sequences of such
//!   single operations: they move fewer messages than asked only when the queue was full
//!   (empty) at an instant during the call.
//! - **Order.** Messages from one sender are received in the order sent; messages from
//!   different senders interleave in the order their sends claimed slots.
//! - **Blocking.** `send` blocks only while the queue is full, `recv` only while it is
//!   empty (and `send_async`, `recv_async` return `Pending` only then). A waiting thread spins briefly, yields, and then parks; a thread that completes
//!   an operation pays one load to check for parked threads (its claim's `SeqCst` CAS
//!   orders that load; no fence), and a system call only when one is parked.
//! - **Allocation.** `bounded` allocates the buffer once; sending and receiving never
//!   allocate (the batch operations may grow the `Vec` the caller passes in). `unbounded`
//!   allocates a block when its spares run out: never per message, and not at all in a
//!   steady state whose length stays within a few blocks. The async operations allocate
//!   nothing per message either: a waiting task's registration reuses the wait set's list
//!   once it has grown to the number of tasks waiting at once.
//! - **Disconnection.** When every `Sender` is gone, receivers drain what is left and then
//!   get `Disconnected`; when every `Receiver` is gone, sends hand their message back, and
//!   the messages still queued stay until the senders go too: the last handle of either
//!   side drops them, each exactly once (as crossbeam-channel's bounded flavour does).
//!   Threads blocked on either side wake up.
//! - **Panics.** A message whose `Drop` panics leaves the queue consistent: a message leaves
//!   the queue before it is dropped. When the queue drops the messages left in it (in the
//!   drop of its last handle), the first such panic propagates from that drop
//!   after every other message has been dropped, once each; further panics from those
//!   drops are reported by the panic hook and go no further (a second panic escaping while
//!   unwinding would abort the process). crossbeam-channel instead leaks the messages after
//!   the first panic. The handles are `UnwindSafe` and `RefUnwindSafe`.
//!
//! # Differences from crossbeam-channel
//!
//! - [`select!`](crate::select!) builds a send arm's message the first time it finds the
//!   send could complete, or when a rendezvous send arm offers it as the select parks
//!   (crossbeam: once the arm is chosen, with the receiver reserved); a message built for an
//!   arm that was not chosen is dropped. So a message expression that itself waits on the
//!   same queues (crossbeam's `recv_in_send` tests on a rendezvous queue) may wait for good
//!   where crossbeam's would not. A [`Select`] receive takes its message when it is selected
//!   ([`SelectedOperation::recv`] hands it over; dropping the operation drops it, where
//!   crossbeam panics), and a selected [`Select`] send completes at once unless another
//!   sender took the room meanwhile (it then waits as `send` does; crossbeam reserves the
//!   slot). [`Select`] needs `T: Send` (crossbeam's does not, and is `Send` regardless).
//! - When the last receiver of an unbounded queue goes, the queued messages stay until the
//!   senders go too, as in the bounded flavours (crossbeam's list flavour drops them at
//!   once); sends fail from then on, so the queue does not grow.
//! - When the queue drops its messages and one's `Drop` panics, the others are still
//!   dropped (crossbeam leaks them); see **Panics** above.
//! - The batch operations are logbus's own.
//!
//! # Examples
//!
//! ```
//! use std::thread;
//!
//! let (tx, rx) = logbus::queue::bounded(16);
//! let producer = thread::spawn(move || {
//!     for i in 0..100u64 {
//!         tx.send(i).unwrap(); // blocks while 16 messages wait
//!     }
//! }); // `tx` dropped: the receiver sees the end after draining
//! let sum: u64 = rx.iter().sum();
//! producer.join().unwrap();
//! assert_eq!(sum, 4950);
//! ```

mod array;
mod batch;
mod counter;
mod drop_remaining;
mod error;
mod future;
#[cfg(all(test, not(logbus_loom)))]
mod linearizability;
mod list;
mod select;
#[macro_use]
mod select_macro;
mod owners;
pub mod protocol;
mod timer;
mod zero;

use std::fmt;
use std::iter::FusedIterator;
use std::panic::{RefUnwindSafe, UnwindSafe};
use std::time::{Duration, Instant};

#[doc(inline)]
pub use crate::select;
#[doc(inline)]
pub use crate::select_biased;
use counter::{Disconnect, Handle};
pub use error::{
    ReadyTimeoutError, RecvError, RecvTimeoutError, SelectTimeoutError, SendBatchError,
    SendBatchTimeoutError, SendError, SendTimeoutError, TryReadyError, TryRecvError,
    TrySelectError, TrySendError,
};
pub use future::{RecvBatchFut, RecvFut, RecvStream, SendBatchFut, SendFut, SendSink};
pub use protocol::{bounded_shared, Protocol};
#[doc(hidden)]
pub use select::{
    run as __select_run, Arm as __SelectArm, RecvArm as __RecvArm, SendArm as __SendArm,
    Wait as __SelectWait,
};
pub use select::{Select, SelectedOperation};

use crate::sync::time;

/// The two implementations behind one pair of handle types.
// One per queue, inside its `Arc`: the array's size is its cache padding, and boxing it
// would put an extra indirection on the hot path.
#[allow(clippy::large_enum_variant)]
enum Flavor<T> {
    Array(array::Channel<T>),
    List(list::Channel<T>),
    Zero(zero::Channel<T>),
    /// `after`, `at`, `tick`, `never`: receive-only. The function turns the timer's
    /// `Instant` into the message: the identity, for the timers made with `T = Instant` (a
    /// safe stand-in for crossbeam's transmute), and `None` for `never::<T>()`, which has no
    /// message to convert.
    Timer(timer::Channel, Option<fn(Instant) -> T>),
}

impl<T> Disconnect for Flavor<T> {
    fn disconnect_senders(&self) {
        match self {
            Flavor::Array(ch) => {
                ch.disconnect();
            }
            Flavor::List(ch) => {
                ch.disconnect();
            }
            Flavor::Zero(ch) => ch.disconnect(),
            // A timer has no senders and never disconnects.
            Flavor::Timer(..) => {}
        }
    }

    fn disconnect_receivers(&self) {
        // The messages still queued stay until the queue is freed (the last handle of
        // either side), as in crossbeam-channel's bounded flavour: `len` still counts them.
        self.disconnect_senders();
    }
}

/// Creates a queue holding at most `capacity` messages; `bounded(0)` makes a rendezvous
/// queue, where each send waits for a receiver to take its message.
///
/// The queue starts in the owned protocol and may go shared for good (see [`protocol`]
/// for when, including the 64-token limit; [`bounded_shared`] starts shared).
///
/// # Panics
///
/// If `capacity` exceeds `usize::MAX / 4` (its position encoding needs two spare bits);
/// memory would run out long before.
///
/// # Examples
///
/// ```
/// use logbus::queue::{bounded, TrySendError};
///
/// let (tx, rx) = bounded(2);
/// tx.send("a").unwrap();
/// tx.send("b").unwrap();
/// assert_eq!(tx.try_send("c"), Err(TrySendError::Full("c")));
/// assert_eq!(rx.recv(), Ok("a"));
/// assert_eq!(tx.capacity(), Some(2));
/// ```
pub fn bounded<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    protocol::bounded_with(capacity, array::Channel::with_capacity)
}

/// Creates a queue with no capacity limit: sends never block (and never report `Full`).
///
/// Messages live in blocks of 31 slots linked in a list; a block whose messages have all
/// been received is kept for reuse (up to a few spare blocks per queue) or freed, so a
/// queue whose receivers keep up allocates nothing per message once warm.
///
/// # Examples
///
/// ```
/// let (tx, rx) = logbus::queue::unbounded();
/// for i in 0..1000 {
///     tx.send(i).unwrap(); // never blocks
/// }
/// assert_eq!(tx.len(), 1000);
/// assert_eq!(tx.capacity(), None);
/// drop(tx);
/// assert_eq!(rx.iter().sum::<i32>(), 499_500);
/// ```
pub fn unbounded<T>() -> (Sender<T>, Receiver<T>) {
    let (s, r) = counter::new(Flavor::List(list::Channel::new()));
    (Sender { inner: s }, Receiver { inner: r })
}

/// A receiver with no sender, for the timers: it never disconnects.
fn timer(ch: timer::Channel) -> Receiver<Instant> {
    let (s, r) = counter::new(Flavor::Timer(ch, Some(|t| t)));
    drop(s);
    Receiver { inner: r }
}

/// A receiver that delivers one message, the instant `duration` from now, once that instant
/// has passed (as crossbeam-channel's `after`). It never disconnects: after its message,
/// `recv` blocks for good and `try_recv` reports `Empty`. Useful as a timeout arm.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, Instant};
///
/// let start = Instant::now();
/// let timeout = logbus::queue::after(Duration::from_millis(5));
/// let fired = timeout.recv().unwrap();
/// assert!(fired >= start + Duration::from_millis(5));
/// ```
pub fn after(duration: Duration) -> Receiver<Instant> {
    match Instant::now().checked_add(duration) {
        Some(when) => at(when),
        None => never(),
    }
}

/// A receiver that delivers one message, `when`, once `when` has passed (as
/// crossbeam-channel's `at`); otherwise as [`after`].
///
/// # Examples
///
/// ```
/// use std::time::Instant;
///
/// let now = Instant::now();
/// assert_eq!(logbus::queue::at(now).recv(), Ok(now));
/// ```
pub fn at(when: Instant) -> Receiver<Instant> {
    timer(timer::Channel::at(when))
}

/// A receiver that delivers the instant each tick was due, every `duration` (as
/// crossbeam-channel's `tick`): the first a `duration` after this call, then one a
/// `duration` after each tick received. Ticks nobody receives do not pile up: at most one
/// is waiting. With cloned receivers each tick goes to one of them.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// let ticker = logbus::queue::tick(Duration::from_millis(1));
/// let first = ticker.recv().unwrap();
/// let second = ticker.recv().unwrap();
/// assert!(second >= first + Duration::from_millis(1));
/// ```
pub fn tick(duration: Duration) -> Receiver<Instant> {
    timer(timer::Channel::tick(duration))
}

/// A receiver that never delivers anything and never disconnects (as crossbeam-channel's
/// `never`): `recv` blocks for good, `recv_timeout` times out, `try_recv` reports `Empty`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use logbus::queue::{never, RecvTimeoutError};
///
/// let rx = never::<std::time::Instant>();
/// assert_eq!(rx.recv_timeout(Duration::from_millis(1)), Err(RecvTimeoutError::Timeout));
/// ```
pub fn never<T>() -> Receiver<T> {
    let (s, r) = counter::new(Flavor::Timer(timer::Channel::Never, None));
    drop(s);
    Receiver { inner: r }
}

/// The sending side of a queue. Clone it for more producers; the queue disconnects for
/// receivers when the last clone is dropped.
pub struct Sender<T> {
    inner: Handle<Flavor<T>>,
}

/// The receiving side of a queue. Clone it for more consumers (each message goes to one of
/// them); the queue disconnects for senders when the last clone is dropped.
pub struct Receiver<T> {
    inner: Handle<Flavor<T>>,
}

// Both handles are `Send + Sync` exactly when `T: Send`: the flavours are (see their
// `unsafe impl`s and the std/loom types they hold), and the `Arc` in `Handle` passes that on.

// A panic never leaves a queue half-updated: no user code runs inside an operation except a
// message's `Drop`, and a message leaves the buffer before it is dropped. So a handle used
// after a caught panic behaves as before, and code wrapping a send or a receive in
// `catch_unwind` compiles as it does with crossbeam-channel, whose handles are both.
impl<T> UnwindSafe for Sender<T> {}
impl<T> RefUnwindSafe for Sender<T> {}
impl<T> UnwindSafe for Receiver<T> {}
impl<T> RefUnwindSafe for Receiver<T> {}

fn deadline(timeout: Duration) -> Option<Instant> {
    time::deadline_after(timeout)
}

fn timeout_to_try<T>(e: SendTimeoutError<T>) -> SendError<T> {
    SendError(e.into_inner())
}

impl<T> Sender<T> {
    /// Sends `msg`, blocking while the queue is full.
    ///
    /// # Errors
    ///
    /// [`SendError`] with the message when every receiver is gone.
    ///
    /// # Examples
    ///
    /// ```
    /// let (tx, rx) = logbus::queue::bounded(1);
    /// tx.send(1).unwrap();
    /// drop(rx);
    /// assert_eq!(tx.send(2).unwrap_err().into_inner(), 2);
    /// ```
    pub fn send(&self, msg: T) -> Result<(), SendError<T>> {
        match &*self.inner {
            Flavor::Array(ch) => ch.send(msg, None),
            Flavor::List(ch) => ch.send(msg).map_err(SendTimeoutError::Disconnected),
            Flavor::Zero(ch) => ch.send(msg, None),
            Flavor::Timer(..) => Err(SendTimeoutError::Disconnected(msg)),
        }
        .map_err(timeout_to_try)
    }

    /// Sends `msg` if that is possible without waiting.
    ///
    /// # Errors
    ///
    /// [`TrySendError::Full`] when the queue is full (rendezvous: no receiver is waiting),
    /// [`TrySendError::Disconnected`] when every receiver is gone; both carry the message.
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::queue::{bounded, TrySendError};
    ///
    /// let (tx, _rx) = bounded(1);
    /// assert_eq!(tx.try_send(1), Ok(()));
    /// assert_eq!(tx.try_send(2), Err(TrySendError::Full(2)));
    /// ```
    pub fn try_send(&self, msg: T) -> Result<(), TrySendError<T>> {
        match &*self.inner {
            Flavor::Array(ch) => ch.try_send(msg),
            Flavor::List(ch) => ch.send(msg).map_err(TrySendError::Disconnected),
            Flavor::Zero(ch) => ch.try_send(msg),
            Flavor::Timer(..) => Err(TrySendError::Disconnected(msg)),
        }
    }

    /// Sends `msg`, waiting at most `timeout` for room.
    ///
    /// # Errors
    ///
    /// [`SendTimeoutError::Timeout`] when the queue stayed full,
    /// [`SendTimeoutError::Disconnected`] when every receiver is gone; both carry the message.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use logbus::queue::{bounded, SendTimeoutError};
    ///
    /// let (tx, _rx) = bounded(1);
    /// tx.send(1).unwrap();
    /// let r = tx.send_timeout(2, Duration::from_millis(1));
    /// assert_eq!(r, Err(SendTimeoutError::Timeout(2)));
    /// ```
    pub fn send_timeout(&self, msg: T, timeout: Duration) -> Result<(), SendTimeoutError<T>> {
        self.send_until(msg, deadline(timeout))
    }

    /// Sends `msg`, waiting for room until `deadline`.
    ///
    /// # Errors
    ///
    /// As [`send_timeout`](Self::send_timeout).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    ///
    /// let (tx, rx) = logbus::queue::bounded(1);
    /// tx.send_deadline(1, Instant::now() + Duration::from_secs(1)).unwrap();
    /// assert_eq!(rx.recv(), Ok(1));
    /// ```
    pub fn send_deadline(&self, msg: T, deadline: Instant) -> Result<(), SendTimeoutError<T>> {
        self.send_until(msg, Some(deadline))
    }

    fn send_until(&self, msg: T, deadline: Option<Instant>) -> Result<(), SendTimeoutError<T>> {
        match &*self.inner {
            Flavor::Array(ch) => ch.send(msg, deadline),
            Flavor::List(ch) => ch.send(msg).map_err(SendTimeoutError::Disconnected),
            Flavor::Zero(ch) => ch.send(msg, deadline),
            Flavor::Timer(..) => Err(SendTimeoutError::Disconnected(msg)),
        }
    }

    /// Whether the queue is empty.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// Whether the queue is full (always for a rendezvous queue, never for an unbounded
    /// one).
    pub fn is_full(&self) -> bool {
        self.inner.is_full()
    }

    /// The number of messages in the queue.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// The capacity given to [`bounded`] (`Some(n)` exactly as asked), `None` for
    /// [`unbounded`].
    pub fn capacity(&self) -> Option<usize> {
        self.inner.capacity()
    }

    /// Whether both senders belong to the same queue.
    pub fn same_channel(&self, other: &Sender<T>) -> bool {
        self.inner.same_queue(&other.inner)
    }

    /// Disconnects the queue for everyone (used by the observer bus to stop a worker):
    /// sends fail from now on, receivers drain and then see `Disconnected`.
    pub(crate) fn close(&self) {
        match &*self.inner {
            Flavor::Array(ch) => {
                ch.disconnect();
            }
            Flavor::List(ch) => {
                ch.disconnect();
            }
            Flavor::Zero(ch) => ch.disconnect(),
            // A timer has no senders and never disconnects.
            Flavor::Timer(..) => {}
        }
    }
}

impl<T> Flavor<T> {
    fn len(&self) -> usize {
        match self {
            Flavor::Array(ch) => ch.len(),
            Flavor::List(ch) => ch.len(),
            Flavor::Zero(_) => 0,
            Flavor::Timer(ch, _) => ch.len(),
        }
    }

    fn capacity(&self) -> Option<usize> {
        match self {
            Flavor::Array(ch) => Some(ch.capacity()),
            Flavor::List(_) => None,
            Flavor::Zero(_) => Some(0),
            Flavor::Timer(ch, _) => Some(ch.capacity()),
        }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn is_full(&self) -> bool {
        Some(self.len()) == self.capacity()
    }

    fn recv_until(&self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        match self {
            Flavor::Array(ch) => ch.recv(deadline),
            Flavor::List(ch) => ch.recv(deadline),
            Flavor::Zero(ch) => ch.recv(deadline),
            Flavor::Timer(ch, to_msg) => ch.recv(deadline).and_then(|t| match to_msg {
                Some(f) => Ok(f(t)),
                // `never` delivers nothing; a timeout is all it can report.
                None => Err(RecvTimeoutError::Timeout),
            }),
        }
    }

    fn try_recv(&self) -> Result<T, TryRecvError> {
        match self {
            Flavor::Array(ch) => ch.try_recv(),
            Flavor::List(ch) => ch.try_recv(),
            Flavor::Zero(ch) => ch.try_recv(),
            Flavor::Timer(ch, to_msg) => ch
                .try_recv()
                .and_then(|t| to_msg.map(|f| f(t)).ok_or(TryRecvError::Empty)),
        }
    }
}

impl<T> Receiver<T> {
    /// Receives a message, blocking while the queue is empty.
    ///
    /// # Errors
    ///
    /// [`RecvError`] when the queue is empty and every sender is gone.
    ///
    /// # Examples
    ///
    /// ```
    /// let (tx, rx) = logbus::queue::bounded(1);
    /// tx.send(5).unwrap();
    /// drop(tx);
    /// assert_eq!(rx.recv(), Ok(5));
    /// assert!(rx.recv().is_err());
    /// ```
    pub fn recv(&self) -> Result<T, RecvError> {
        self.inner.recv_until(None).map_err(|_| RecvError)
    }

    /// Receives a message if one is waiting.
    ///
    /// # Errors
    ///
    /// [`TryRecvError::Empty`] when none is waiting, [`TryRecvError::Disconnected`] when
    /// moreover every sender is gone.
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::queue::{bounded, TryRecvError};
    ///
    /// let (tx, rx) = bounded::<u8>(1);
    /// assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    /// drop(tx);
    /// assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    /// ```
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        self.inner.try_recv()
    }

    /// Receives a message, waiting at most `timeout`.
    ///
    /// # Errors
    ///
    /// [`RecvTimeoutError::Timeout`] when nothing arrived in time,
    /// [`RecvTimeoutError::Disconnected`] when the queue is empty and every sender is gone.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use logbus::queue::{bounded, RecvTimeoutError};
    ///
    /// let (_tx, rx) = bounded::<u8>(1);
    /// assert_eq!(rx.recv_timeout(Duration::from_millis(1)), Err(RecvTimeoutError::Timeout));
    /// ```
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.inner.recv_until(deadline(timeout))
    }

    /// Receives a message, waiting until `deadline`.
    ///
    /// # Errors
    ///
    /// As [`recv_timeout`](Self::recv_timeout).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    ///
    /// let (tx, rx) = logbus::queue::bounded(1);
    /// tx.send(3).unwrap();
    /// assert_eq!(rx.recv_deadline(Instant::now() + Duration::from_secs(1)), Ok(3));
    /// ```
    pub fn recv_deadline(&self, deadline: Instant) -> Result<T, RecvTimeoutError> {
        self.inner.recv_until(Some(deadline))
    }

    /// A blocking iterator: yields messages until the queue is empty and disconnected.
    ///
    /// # Examples
    ///
    /// ```
    /// let (tx, rx) = logbus::queue::bounded(4);
    /// tx.send(1).unwrap();
    /// tx.send(2).unwrap();
    /// drop(tx);
    /// assert_eq!(rx.iter().collect::<Vec<_>>(), [1, 2]);
    /// ```
    pub fn iter(&self) -> Iter<'_, T> {
        Iter { rx: self }
    }

    /// A non-blocking iterator: yields the messages waiting now, stops at the first empty.
    ///
    /// # Examples
    ///
    /// ```
    /// let (tx, rx) = logbus::queue::bounded(4);
    /// tx.send(1).unwrap();
    /// assert_eq!(rx.try_iter().collect::<Vec<_>>(), [1]);
    /// ```
    pub fn try_iter(&self) -> TryIter<'_, T> {
        TryIter { rx: self }
    }

    /// Whether the queue is empty.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// Whether the queue is full (always for a rendezvous queue, never for an unbounded
    /// one).
    pub fn is_full(&self) -> bool {
        self.inner.is_full()
    }

    /// The number of messages in the queue.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// The capacity given to [`bounded`] (`Some(n)` exactly as asked), `None` for
    /// [`unbounded`].
    pub fn capacity(&self) -> Option<usize> {
        self.inner.capacity()
    }

    /// Whether both receivers belong to the same queue. Every [`never()`] receiver counts as
    /// the same queue, as crossbeam-channel's (none ever delivers anything).
    pub fn same_channel(&self, other: &Receiver<T>) -> bool {
        let never = |r: &Self| matches!(&*r.inner, Flavor::Timer(timer::Channel::Never, _));
        self.inner.same_queue(&other.inner) || (never(self) && never(other))
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<T> Clone for Receiver<T> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

// The handles and iterators print as crossbeam-channel's do.
impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Sender { .. }")
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Receiver { .. }")
    }
}

impl<T> fmt::Debug for Iter<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Iter { .. }")
    }
}

impl<T> fmt::Debug for TryIter<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("TryIter { .. }")
    }
}

impl<T> fmt::Debug for IntoIter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("IntoIter { .. }")
    }
}

/// The blocking iterator of [`Receiver::iter`].
pub struct Iter<'a, T> {
    rx: &'a Receiver<T>,
}

impl<T> Iterator for Iter<'_, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        self.rx.recv().ok()
    }
}

// Fused: `recv` fails only once the queue is empty and every sender is gone, and no sender
// can appear after that.
impl<T> FusedIterator for Iter<'_, T> {}

/// The non-blocking iterator of [`Receiver::try_iter`].
pub struct TryIter<'a, T> {
    rx: &'a Receiver<T>,
}

impl<T> Iterator for TryIter<'_, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        self.rx.try_recv().ok()
    }
}

/// The owning blocking iterator of `Receiver`'s `IntoIterator`.
pub struct IntoIter<T> {
    rx: Receiver<T>,
}

impl<T> Iterator for IntoIter<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        self.rx.recv().ok()
    }
}

// Fused, as `Iter`.
impl<T> FusedIterator for IntoIter<T> {}

impl<'a, T> IntoIterator for &'a Receiver<T> {
    type Item = T;
    type IntoIter = Iter<'a, T>;

    fn into_iter(self) -> Iter<'a, T> {
        self.iter()
    }
}

impl<T> IntoIterator for Receiver<T> {
    type Item = T;
    type IntoIter = IntoIter<T>;

    fn into_iter(self) -> IntoIter<T> {
        IntoIter { rx: self }
    }
}
