//! The batch operations of the handles, every flavour, under one contract shared with the
//! ring: a batch send takes messages from the front of the caller's `Vec`; whatever it
//! could not send stays there, in order, and the error counts what was sent
//! ([`SendBatchError`], [`SendBatchTimeoutError`]). A batch receive appends to the caller's
//! `Vec` and returns how many. Each blocking operation comes with `_timeout` and
//! `_deadline` forms.

use std::time::{Duration, Instant};

use super::error::{
    RecvError, RecvTimeoutError, SendBatchError, SendBatchTimeoutError, SendTimeoutError,
    TryRecvError, TrySendError,
};
use super::{deadline, Flavor, Receiver, Sender};

/// Why a batch send stopped early.
enum Stop {
    /// Full until the deadline (or, for a `try_` send, full now).
    Full,
    Disconnected,
}

/// Sends the messages of `batch` one by one from the front with `send`; when a send fails,
/// its message and the rest go back into `batch`, in order.
fn send_each<T>(
    batch: &mut Vec<T>,
    mut send: impl FnMut(T) -> Result<(), SendTimeoutError<T>>,
) -> Result<(), Stop> {
    let mut rest = batch.drain(..);
    while let Some(msg) = rest.next() {
        if let Err(e) = send(msg) {
            let stop = if e.is_timeout() {
                Stop::Full
            } else {
                Stop::Disconnected
            };
            let left: Vec<T> = std::iter::once(e.into_inner()).chain(rest).collect();
            batch.extend(left);
            return Err(stop);
        }
    }
    Ok(())
}

/// Appends up to `max` waiting messages after `first` (already received) to `out`.
fn recv_more<T>(
    out: &mut Vec<T>,
    first: T,
    max: usize,
    mut try_recv: impl FnMut() -> Result<T, TryRecvError>,
) -> usize {
    out.push(first);
    let mut n = 1;
    while n < max {
        match try_recv() {
            Ok(m) => out.push(m),
            Err(_) => break,
        }
        n += 1;
    }
    n
}

impl<T> Sender<T> {
    /// Moves every message of `batch` into the queue, in order, blocking while the queue is
    /// full; `batch` is left empty (its allocation kept for reuse). Each wait-free stretch
    /// of free slots is claimed with one atomic operation and receivers are notified once
    /// per stretch, which is what makes batches cheaper than single sends. (A rendezvous
    /// queue hands the messages over one by one.)
    ///
    /// # Errors
    ///
    /// [`SendBatchError`] when every receiver is gone: the messages not sent stay in
    /// `batch`, in order, and the error says how many were sent.
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::queue::{bounded, SendBatchError};
    ///
    /// let (tx, rx) = bounded(8);
    /// let mut batch = vec![1, 2, 3];
    /// tx.send_batch(&mut batch).unwrap();
    /// assert!(batch.is_empty());
    /// let mut out = Vec::new();
    /// assert_eq!(rx.try_recv_batch(&mut out, 10), Ok(3));
    /// assert_eq!(out, [1, 2, 3]);
    ///
    /// drop(rx);
    /// let mut batch = vec![4, 5];
    /// assert_eq!(tx.send_batch(&mut batch), Err(SendBatchError { sent: 0 }));
    /// assert_eq!(batch, [4, 5]);
    /// ```
    pub fn send_batch(&self, batch: &mut Vec<T>) -> Result<(), SendBatchError> {
        self.send_batch_until(batch, None)
            .map_err(|e| SendBatchError { sent: e.sent() })
    }

    /// [`send_batch`](Self::send_batch), waiting for room at most `timeout` in all.
    ///
    /// # Errors
    ///
    /// [`SendBatchTimeoutError::Timeout`] when the queue stayed full until the deadline,
    /// [`SendBatchTimeoutError::Disconnected`] when every receiver is gone. Either way the
    /// messages not sent stay in `batch`, in order, and the error counts those sent.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use logbus::queue::{bounded, SendBatchTimeoutError};
    ///
    /// let (tx, _rx) = bounded(2);
    /// let mut batch = vec![1, 2, 3];
    /// let e = tx.send_batch_timeout(&mut batch, Duration::from_millis(1));
    /// assert_eq!(e, Err(SendBatchTimeoutError::Timeout { sent: 2 }));
    /// assert_eq!(batch, [3]);
    /// ```
    pub fn send_batch_timeout(
        &self,
        batch: &mut Vec<T>,
        timeout: Duration,
    ) -> Result<(), SendBatchTimeoutError> {
        self.send_batch_until(batch, deadline(timeout))
    }

    /// [`send_batch`](Self::send_batch), waiting for room until `deadline` at the latest.
    ///
    /// # Errors
    ///
    /// As [`send_batch_timeout`](Self::send_batch_timeout).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    ///
    /// let (tx, rx) = logbus::queue::bounded(4);
    /// let mut batch = vec![1, 2];
    /// tx.send_batch_deadline(&mut batch, Instant::now() + Duration::from_secs(1)).unwrap();
    /// assert_eq!(rx.len(), 2);
    /// ```
    pub fn send_batch_deadline(
        &self,
        batch: &mut Vec<T>,
        deadline: Instant,
    ) -> Result<(), SendBatchTimeoutError> {
        self.send_batch_until(batch, Some(deadline))
    }

    fn send_batch_until(
        &self,
        batch: &mut Vec<T>,
        deadline: Option<Instant>,
    ) -> Result<(), SendBatchTimeoutError> {
        let n = batch.len();
        let outcome = match &*self.inner {
            Flavor::Array(ch) => ch.send_batch(batch, deadline).map_err(|e| match e {
                TrySendError::Full(()) => Stop::Full,
                TrySendError::Disconnected(()) => Stop::Disconnected,
            }),
            Flavor::List(ch) => send_each(batch, |m| {
                ch.send(m).map_err(SendTimeoutError::Disconnected)
            }),
            Flavor::Zero(ch) => send_each(batch, |m| ch.send(m, deadline)),
            Flavor::Timer(..) => Err(Stop::Disconnected),
        };
        let sent = n - batch.len();
        outcome.map_err(|stop| match stop {
            Stop::Full => SendBatchTimeoutError::Timeout { sent },
            Stop::Disconnected => SendBatchTimeoutError::Disconnected { sent },
        })
    }

    /// Moves as many messages from the front of `batch` as fit without waiting and returns
    /// how many (0 when the queue is full); the rest stay in `batch`, in order.
    ///
    /// # Errors
    ///
    /// [`SendBatchError`] when every receiver is gone: the messages not sent stay in
    /// `batch`, in order, and the error says how many were sent.
    ///
    /// # Examples
    ///
    /// ```
    /// let (tx, _rx) = logbus::queue::bounded(2);
    /// let mut batch = vec![1, 2, 3];
    /// assert_eq!(tx.try_send_batch(&mut batch).unwrap(), 2);
    /// assert_eq!(batch, [3]);
    /// ```
    pub fn try_send_batch(&self, batch: &mut Vec<T>) -> Result<usize, SendBatchError> {
        if batch.is_empty() {
            return Ok(0);
        }
        let n = batch.len();
        let outcome = match &*self.inner {
            Flavor::Array(ch) => match ch.try_send_batch(batch) {
                Ok(_) | Err(TrySendError::Full(())) => Ok(()),
                Err(TrySendError::Disconnected(())) => Err(Stop::Disconnected),
            },
            Flavor::List(ch) => send_each(batch, |m| {
                ch.send(m).map_err(SendTimeoutError::Disconnected)
            }),
            Flavor::Zero(ch) => send_each(batch, |m| {
                ch.try_send(m).map_err(|e| match e {
                    TrySendError::Full(m) => SendTimeoutError::Timeout(m),
                    TrySendError::Disconnected(m) => SendTimeoutError::Disconnected(m),
                })
            }),
            Flavor::Timer(..) => Err(Stop::Disconnected),
        };
        let sent = n - batch.len();
        match outcome {
            Err(Stop::Disconnected) => Err(SendBatchError { sent }),
            Ok(()) | Err(Stop::Full) => Ok(sent),
        }
    }
}

impl<T> Receiver<T> {
    /// Appends between 1 and `max` messages to `out`, blocking until at least one is there;
    /// returns how many (0 only when `max` is 0). Each stretch of waiting messages is claimed
    /// with one atomic operation and senders are notified once per stretch. `out` grows by
    /// up to `min(max, capacity)` before any message is taken, so reusing one `Vec` keeps
    /// this allocation-free.
    ///
    /// # Errors
    ///
    /// [`RecvError`] when the queue is empty and every sender is gone.
    ///
    /// # Examples
    ///
    /// ```
    /// let (tx, rx) = logbus::queue::bounded(8);
    /// for i in 0..5 {
    ///     tx.send(i).unwrap();
    /// }
    /// let mut out = Vec::new();
    /// assert_eq!(rx.recv_batch(&mut out, 3), Ok(3));
    /// assert_eq!(out, [0, 1, 2]);
    /// ```
    pub fn recv_batch(&self, out: &mut Vec<T>, max: usize) -> Result<usize, RecvError> {
        self.recv_batch_until(out, max, None).map_err(|_| RecvError)
    }

    /// [`recv_batch`](Self::recv_batch), waiting at most `timeout` for the first message.
    ///
    /// # Errors
    ///
    /// [`RecvTimeoutError::Timeout`] when no message came in time,
    /// [`RecvTimeoutError::Disconnected`] when the queue is empty and every sender is gone.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use logbus::queue::{bounded, RecvTimeoutError};
    ///
    /// let (tx, rx) = bounded(8);
    /// let mut out = Vec::new();
    /// let short = Duration::from_millis(1);
    /// assert_eq!(rx.recv_batch_timeout(&mut out, 4, short), Err(RecvTimeoutError::Timeout));
    /// tx.send(1).unwrap();
    /// assert_eq!(rx.recv_batch_timeout(&mut out, 4, short), Ok(1));
    /// ```
    pub fn recv_batch_timeout(
        &self,
        out: &mut Vec<T>,
        max: usize,
        timeout: Duration,
    ) -> Result<usize, RecvTimeoutError> {
        self.recv_batch_until(out, max, deadline(timeout))
    }

    /// [`recv_batch`](Self::recv_batch), waiting for the first message until `deadline` at
    /// the latest.
    ///
    /// # Errors
    ///
    /// As [`recv_batch_timeout`](Self::recv_batch_timeout).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    ///
    /// let (tx, rx) = logbus::queue::bounded(8);
    /// tx.send_batch(&mut vec![1, 2, 3]).unwrap();
    /// let mut out = Vec::new();
    /// let deadline = Instant::now() + Duration::from_secs(1);
    /// assert_eq!(rx.recv_batch_deadline(&mut out, 8, deadline), Ok(3));
    /// ```
    pub fn recv_batch_deadline(
        &self,
        out: &mut Vec<T>,
        max: usize,
        deadline: Instant,
    ) -> Result<usize, RecvTimeoutError> {
        self.recv_batch_until(out, max, Some(deadline))
    }

    fn recv_batch_until(
        &self,
        out: &mut Vec<T>,
        max: usize,
        deadline: Option<Instant>,
    ) -> Result<usize, RecvTimeoutError> {
        if max == 0 {
            return Ok(0);
        }
        match &*self.inner {
            Flavor::Array(ch) => ch.recv_batch(out, max, deadline),
            Flavor::List(ch) => {
                let first = ch.recv(deadline)?;
                Ok(recv_more(out, first, max, || ch.try_recv()))
            }
            Flavor::Zero(_) | Flavor::Timer(..) => {
                let first = self.inner.recv_until(deadline)?;
                Ok(recv_more(out, first, max, || self.inner.try_recv()))
            }
        }
    }

    /// Appends up to `max` waiting messages to `out` without blocking; returns how many.
    ///
    /// # Errors
    ///
    /// [`TryRecvError::Empty`] when none is waiting (and `max > 0`),
    /// [`TryRecvError::Disconnected`] when moreover every sender is gone.
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::queue::{bounded, TryRecvError};
    ///
    /// let (tx, rx) = bounded(8);
    /// let mut out = Vec::new();
    /// assert_eq!(rx.try_recv_batch(&mut out, 4), Err(TryRecvError::Empty));
    /// tx.send(1).unwrap();
    /// assert_eq!(rx.try_recv_batch(&mut out, 4), Ok(1));
    /// ```
    pub fn try_recv_batch(&self, out: &mut Vec<T>, max: usize) -> Result<usize, TryRecvError> {
        if max == 0 {
            return Ok(0);
        }
        match &*self.inner {
            Flavor::Array(ch) => ch.try_recv_batch(out, max),
            Flavor::List(ch) => {
                let first = ch.try_recv()?;
                Ok(recv_more(out, first, max, || ch.try_recv()))
            }
            Flavor::Zero(_) | Flavor::Timer(..) => {
                let first = self.inner.try_recv()?;
                Ok(recv_more(out, first, max, || self.inner.try_recv()))
            }
        }
    }
}
