//! Readers in async code: futures for the blocking reads, and [`Reader`] as a `Stream`.
//!
//! Each future borrows its reader mutably and resolves as the blocking read of the same
//! name does (the same error types, `Lagged` and `Closed` included). It does no work of its
//! own beyond the `try_` read it polls: the reader's position moves only inside that `try_`
//! read, in the same poll that returns the entries, so a future dropped at any other point
//! (before its first poll, while pending, right after it was woken) leaves the reader
//! exactly where it was. That is the whole cancel-safety argument.
//!
//! # Waiting
//!
//! A poll that finds nothing first paces itself once, like a blocking read (`Reader::pace`:
//! a few spin hints, only after a read that caught up after a short run), and then, after
//! one more look (the fast re-check inside `WaitSet::poll_until`), registers its task's
//! waker in the ring's `readers_wait` and returns `Pending`. Producers notify that set with
//! the light fence, so the registration completes the handshake with `asym_fence::heavy`
//! (a `membarrier` on Linux): one per registration, that is, once per read that finds the
//! ring empty twice. A task does not first hand its thread back to the executor a few
//! times (waking itself), as a blocking read yields before it parks: with more threads than
//! cores the worker then keeps polling and takes the core from the producer it waits for,
//! and the fan-out benchmark (`fanout_async_vs_tokio`, BENCHMARKS.md) ran slower with it.
//! A wake-up wakes every task registered, so a future dropped after it was woken takes no
//! wake-up from another.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;

use super::error::{ReadError, TryReadError};
use super::reader::{ReadRun, Reader};
use crate::sync::WakerSlot;

/// A read's waiting state in a task: its registration, and whether it was polled before.
#[derive(Debug, Default)]
pub(crate) struct TaskWait {
    slot: WakerSlot,
    /// Polled before: the pacing is done.
    started: bool,
}

impl TaskWait {
    pub(crate) const fn new() -> Self {
        Self {
            slot: WakerSlot::new(),
            started: false,
        }
    }
}

impl<T> Reader<T> {
    /// Polls `attempt` (a `try_` read) for a task: `Ready` with what it returns unless it
    /// finds the ring empty; otherwise waits as the module docs say.
    pub(crate) fn poll_attempt<R>(
        &mut self,
        cx: &mut Context<'_>,
        wait: &mut TaskWait,
        mut attempt: impl FnMut(&mut Self) -> Result<R, TryReadError>,
    ) -> Poll<Result<R, ReadError>> {
        if !wait.started {
            wait.started = true;
            self.pace();
        }
        loop {
            let done = match attempt(self) {
                Ok(r) => Ok(r),
                Err(TryReadError::Lagged(n)) => Err(ReadError::Lagged(n)),
                Err(TryReadError::Closed) => Err(ReadError::Closed),
                Err(TryReadError::Empty) => {
                    let this = &*self;
                    // Light notifiers: producers publish with `notify_all_light`.
                    match this.shared.readers_wait.poll_until(
                        cx,
                        &mut wait.slot,
                        || true,
                        || this.readable().then_some(()),
                    ) {
                        Poll::Ready(()) => continue,
                        Poll::Pending => return Poll::Pending,
                    }
                }
            };
            // Done: the next read through the same state starts afresh.
            self.shared.readers_wait.cancel_waker(&mut wait.slot);
            *wait = TaskWait::new();
            return Poll::Ready(done);
        }
    }

    /// Takes `wait`'s registration off the ring (a future's or the stream's drop).
    pub(crate) fn cancel_wait(&self, wait: &mut TaskWait) {
        self.shared.readers_wait.cancel_waker(&mut wait.slot);
    }

    /// [`read`](Self::read) for async code: resolves to the next entry, waiting without
    /// blocking the thread until one is published.
    ///
    /// Resolves to [`ReadError::Lagged`] (non-gating readers, see
    /// [`try_read`](Self::try_read)) or [`ReadError::Closed`] once the ring is closed and
    /// drained, as `read` returns them.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the position moves only in the poll that resolves the future with the
    /// entry, so dropping the future at any other point (in a `select!` whose other branch
    /// won, on a timeout, right after it was woken) loses no entry; the next read gets it.
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::ring::{ReadError, Ring, RingConfig, Start};
    /// use std::thread;
    ///
    /// let (mut producer, ring) = Ring::single_producer(RingConfig::new(8))?;
    /// let mut reader = ring.gating_reader(Start::Tail)?;
    /// let t = thread::spawn(move || producer.publish(7u64).unwrap());
    /// futures::executor::block_on(async {
    ///     assert_eq!(reader.read_async().await, Ok(7));
    ///     t.join().unwrap(); // the producer is dropped: the ring closes
    ///     assert_eq!(reader.read_async().await, Err(ReadError::Closed));
    /// });
    /// # Ok::<(), logbus::Error>(())
    /// ```
    pub fn read_async(&mut self) -> ReadFuture<'_, T>
    where
        T: Clone,
    {
        ReadFuture {
            reader: self,
            wait: TaskWait::new(),
        }
    }

    /// [`read_batch`](Self::read_batch) for async code: appends up to `max` entries to
    /// `out` (clones, in order) once at least one is available, and resolves to how many.
    /// With `max == 0` it resolves to `Ok(0)` at once.
    ///
    /// Resolves to errors as [`read_async`](Self::read_async).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: entries are appended to `out` and the position moves in the one poll
    /// that resolves the future; a future dropped before that appended nothing and moved
    /// nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::ring::{Ring, RingConfig, Start};
    ///
    /// let (mut producer, ring) = Ring::single_producer(RingConfig::new(8))?;
    /// let mut reader = ring.gating_reader(Start::Tail)?;
    /// producer.publish_batch(&mut vec![1u64, 2, 3]).unwrap();
    /// let mut out = Vec::new();
    /// let n = futures::executor::block_on(reader.read_batch_async(&mut out, 64));
    /// assert_eq!(n, Ok(3));
    /// assert_eq!(out, [1, 2, 3]);
    /// # Ok::<(), logbus::Error>(())
    /// ```
    pub fn read_batch_async<'r>(
        &'r mut self,
        out: &'r mut Vec<T>,
        max: usize,
    ) -> ReadBatchFuture<'r, T>
    where
        T: Clone,
    {
        ReadBatchFuture {
            reader: self,
            out,
            max,
            wait: TaskWait::new(),
        }
    }

    /// [`read_run`](Self::read_run) for async code: resolves to a run of up to `max`
    /// entries borrowed in place (no clones) once at least one is available. Iterate it and
    /// drop it soon: producers wait for it.
    ///
    /// Resolves to [`ReadError::Closed`] once the ring is closed and drained.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the future moves nothing; the returned run moves the position past
    /// what was iterated when it is dropped, as [`read_run`](Self::read_run)'s does.
    ///
    /// # Panics
    ///
    /// When polled, if the reader is not gating (as [`try_read_run`](Self::try_read_run)).
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::ring::{Ring, RingConfig, Start};
    ///
    /// let (mut producer, ring) = Ring::single_producer(RingConfig::new(8))?;
    /// let mut reader = ring.gating_reader(Start::Tail)?;
    /// producer.publish_batch(&mut vec![1u64, 2, 3]).unwrap();
    /// let sum = futures::executor::block_on(async {
    ///     let mut run = reader.read_run_async(64).await.unwrap();
    ///     (&mut run).sum::<u64>()
    /// });
    /// assert_eq!(sum, 6);
    /// assert_eq!(reader.position(), 3);
    /// # Ok::<(), logbus::Error>(())
    /// ```
    pub fn read_run_async(&mut self, max: usize) -> ReadRunFuture<'_, T> {
        ReadRunFuture {
            reader: Some(self),
            max,
            wait: TaskWait::new(),
        }
    }
}

/// The future of [`Reader::read_async`]: `Unpin`, so it goes into `select!` as it is.
///
/// # Examples
///
/// ```
/// use futures::future::{select, ready, Either};
/// use logbus::ring::{Ring, RingConfig, Start};
///
/// let (mut producer, ring) = Ring::single_producer(RingConfig::new(8))?;
/// let mut reader = ring.gating_reader(Start::Tail)?;
/// futures::executor::block_on(async {
///     // Nothing published: the other branch wins and the read is dropped, cancelled.
///     assert!(matches!(select(reader.read_async(), ready(())).await, Either::Right(_)));
///     producer.publish(1u64).unwrap();
///     assert_eq!(reader.read_async().await, Ok(1)); // the cancelled read took nothing
/// });
/// # Ok::<(), logbus::Error>(())
/// ```
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct ReadFuture<'r, T> {
    reader: &'r mut Reader<T>,
    wait: TaskWait,
}

impl<T: Clone> Future for ReadFuture<'_, T> {
    type Output = Result<T, ReadError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        this.reader
            .poll_attempt(cx, &mut this.wait, |r| r.try_read())
    }
}

impl<T> Drop for ReadFuture<'_, T> {
    fn drop(&mut self) {
        self.reader.cancel_wait(&mut self.wait);
    }
}

/// The future of [`Reader::read_batch_async`].
///
/// # Examples
///
/// ```
/// use logbus::ring::{Ring, RingConfig, Start};
///
/// let (mut producer, ring) = Ring::single_producer(RingConfig::new(8))?;
/// let mut reader = ring.gating_reader(Start::Tail)?;
/// producer.publish(5u64).unwrap();
/// let mut out = Vec::new();
/// let read: logbus::ring::ReadBatchFuture<'_, u64> = reader.read_batch_async(&mut out, 4);
/// assert_eq!(futures::executor::block_on(read), Ok(1));
/// assert_eq!(out, [5]);
/// # Ok::<(), logbus::Error>(())
/// ```
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct ReadBatchFuture<'r, T> {
    reader: &'r mut Reader<T>,
    out: &'r mut Vec<T>,
    max: usize,
    wait: TaskWait,
}

impl<T: Clone> Future for ReadBatchFuture<'_, T> {
    type Output = Result<usize, ReadError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if this.max == 0 {
            return Poll::Ready(Ok(0));
        }
        let (out, max) = (&mut *this.out, this.max);
        this.reader
            .poll_attempt(cx, &mut this.wait, |r| r.try_read_batch(out, max))
    }
}

impl<T> Drop for ReadBatchFuture<'_, T> {
    fn drop(&mut self) {
        self.reader.cancel_wait(&mut self.wait);
    }
}

/// The future of [`Reader::read_run_async`].
///
/// # Examples
///
/// ```
/// use logbus::ring::{Ring, RingConfig, Start};
///
/// let (mut producer, ring) = Ring::single_producer(RingConfig::new(8))?;
/// let mut reader = ring.gating_reader(Start::Tail)?;
/// producer.publish(5u64).unwrap();
/// let read: logbus::ring::ReadRunFuture<'_, u64> = reader.read_run_async(4);
/// let run = futures::executor::block_on(read).unwrap();
/// assert_eq!(run.len(), 1);
/// # Ok::<(), logbus::Error>(())
/// ```
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct ReadRunFuture<'r, T> {
    /// `None` once the run was handed out.
    reader: Option<&'r mut Reader<T>>,
    max: usize,
    wait: TaskWait,
}

impl<'r, T> Future for ReadRunFuture<'r, T> {
    type Output = Result<ReadRun<'r, T>, ReadError>;

    /// # Panics
    ///
    /// When polled after it resolved, or when the reader is not gating.
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let max = this.max;
        let reader = this
            .reader
            .as_deref_mut()
            .expect("ReadRunFuture polled after it resolved");
        assert!(reader.is_gating(), "read_run_async needs a gating reader");
        match reader.poll_attempt(cx, &mut this.wait, |r| r.run_available(max)) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Ready(Ok(n)) => {
                let reader = this.reader.take().expect("checked above");
                Poll::Ready(Ok(reader.run_of(n)))
            }
        }
    }
}

impl<T> Drop for ReadRunFuture<'_, T> {
    fn drop(&mut self) {
        if let Some(reader) = self.reader.as_deref_mut() {
            reader.cancel_wait(&mut self.wait);
        }
    }
}

/// A reader is a [`Stream`] of its entries, in order: `Ok(entry)`, or
/// `Err(`[`ReadError::Lagged`]`(n))` when a non-gating reader fell a lap behind (it missed
/// exactly `n` entries and goes on from the oldest one still in the ring); the stream ends
/// once the ring is closed and drained (it never yields `Err(ReadError::Closed)`).
///
/// Poll it through `&mut reader` to keep the reader (`StreamExt::next(&mut reader)`), or
/// move it into a task. Each item resolves as [`Reader::read_async`] does, with the same
/// cancel safety: dropping a `next()` future loses nothing.
///
/// # Examples
///
/// ```
/// use futures::StreamExt;
/// use logbus::ring::{Ring, RingConfig, Start};
/// use std::thread;
///
/// let (mut producer, ring) = Ring::single_producer(RingConfig::new(8))?;
/// let mut reader = ring.gating_reader(Start::Tail)?;
/// let t = thread::spawn(move || {
///     for i in 0..20u64 {
///         producer.publish(i).unwrap();
///     }
/// }); // dropping the producer closes the ring, which ends the stream
/// let sum = futures::executor::block_on(async {
///     let mut sum = 0;
///     while let Some(entry) = reader.next().await {
///         sum += entry.unwrap();
///     }
///     sum
/// });
/// t.join().unwrap();
/// assert_eq!(sum, 190);
/// # Ok::<(), logbus::Error>(())
/// ```
impl<T: Clone> Stream for Reader<T> {
    type Item = Result<T, ReadError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let mut wait = std::mem::take(&mut this.stream_wait);
        let polled = this.poll_attempt(cx, &mut wait, |r| r.try_read());
        this.stream_wait = wait;
        match polled {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(ReadError::Closed)) => Poll::Ready(None),
            Poll::Ready(item) => Poll::Ready(Some(item)),
        }
    }
}
