//! The async API: futures, a [`Stream`] and a [`Sink`] over the same queues, for any
//! executor (they wait through `std::task` wakers, no runtime of their own).
//!
//! Each future polls the operation as its `try_` form does; when it would have to wait, it
//! registers its task's waker in the wait set a blocking call would park in (the array
//! flavour's senders or receivers, the list flavour's receivers, the rendezvous queue's
//! tasks), tries once more, and returns `Pending`. Every wake-up of a set wakes every task
//! registered there, as it wakes every parked thread, so threads and tasks wait side by
//! side on either end of one queue. A future takes its registration back when it completes
//! or is dropped.

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::future::FusedFuture;
use futures_core::stream::{FusedStream, Stream};
use futures_sink::Sink;

use super::error::{RecvError, SendBatchError, SendError, TrySendError};
use super::{Flavor, Receiver, Sender};
use crate::sync::WakerSlot;

/// A handle a future borrows, or owns (`into_stream`, `into_sink`).
enum Ref<'a, H> {
    Borrowed(&'a H),
    Owned(H),
}

impl<H> Deref for Ref<'_, H> {
    type Target = H;

    fn deref(&self) -> &H {
        match self {
            Ref::Borrowed(h) => h,
            Ref::Owned(h) => h,
        }
    }
}

/// A send in progress: the message while it is not sent, the task's registration, and for a
/// rendezvous queue the ticket of the message put in the hand-off slot.
struct Sending<T> {
    msg: Option<T>,
    slot: WakerSlot,
    ticket: Option<u64>,
}

impl<T> Sending<T> {
    const fn new(msg: Option<T>) -> Self {
        Self {
            msg,
            slot: WakerSlot::new(),
            ticket: None,
        }
    }

    /// Whether a message is still on its way (not sent, not handed back).
    fn in_flight(&self) -> bool {
        self.msg.is_some() || self.ticket.is_some()
    }

    /// Polls the send of the message in flight: `Ready(Ok)` once sent, `Ready(Err(msg))`
    /// when every receiver is gone.
    fn poll(&mut self, flavor: &Flavor<T>, cx: &mut Context<'_>) -> Poll<Result<(), T>> {
        match flavor {
            Flavor::Array(ch) => ch.poll_send(cx, &mut self.slot, &mut self.msg),
            Flavor::List(ch) => Poll::Ready(ch.send(self.take())),
            Flavor::Zero(ch) => ch.poll_send(cx, &mut self.slot, &mut self.msg, &mut self.ticket),
            Flavor::Timer(..) => Poll::Ready(Err(self.take())),
        }
    }

    fn take(&mut self) -> T {
        self.msg.take().expect("a send in flight holds its message")
    }

    /// Ends a send that will not be polled again: its registration leaves the wait set,
    /// and the message comes back if it was not sent.
    fn cancel(&mut self, flavor: &Flavor<T>) -> Option<T> {
        match flavor {
            Flavor::Array(ch) => ch.cancel_send(&mut self.slot),
            Flavor::Zero(ch) => {
                if let Some(msg) = ch.cancel_send(&mut self.slot, &mut self.ticket) {
                    return Some(msg);
                }
            }
            Flavor::List(_) | Flavor::Timer(..) => {}
        }
        self.msg.take()
    }
}

impl<T> Flavor<T> {
    /// Polls a receive for a task.
    fn poll_recv(&self, cx: &mut Context<'_>, slot: &mut WakerSlot) -> Poll<Result<T, RecvError>> {
        match self {
            Flavor::Array(ch) => ch.poll_recv(cx, slot),
            Flavor::List(ch) => ch.poll_recv(cx, slot),
            Flavor::Zero(ch) => ch.poll_recv(cx, slot),
            Flavor::Timer(ch, to_msg) => match to_msg {
                Some(f) => return ch.poll_recv(cx, slot).map(|t| Ok(f(t))),
                // `never`: nothing will come, and nothing to register for.
                None => return Poll::Pending,
            },
        }
        .map(|r| r.map_err(|()| RecvError))
    }

    /// Takes a receive's registration off its wait set.
    fn cancel_recv(&self, slot: &mut WakerSlot) {
        match self {
            Flavor::Array(ch) => ch.cancel_recv(slot),
            Flavor::List(ch) => ch.cancel_recv(slot),
            Flavor::Zero(ch) => ch.cancel_recv(slot),
            Flavor::Timer(..) => super::timer::Channel::cancel_recv(slot),
        }
    }
}

/// The future of [`Sender::send_async`].
#[must_use = "futures do nothing unless polled"]
pub struct SendFut<'a, T> {
    tx: &'a Sender<T>,
    sending: Sending<T>,
}

// Never pinned structurally: the message is moved in and out by value.
impl<T> Unpin for SendFut<'_, T> {}

impl<T> SendFut<'_, T> {
    /// Cancels the send and says how it ended: `Some(msg)` when the message was not sent
    /// (it comes back), `None` when it was (the future had completed, or on a rendezvous
    /// queue a receiver had taken it from the hand-off slot). Dropping the future does the
    /// same and drops the message.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::pin::pin;
    /// use std::task::{Context, Poll};
    ///
    /// let (tx, _rx) = logbus::queue::bounded(1);
    /// tx.send(1).unwrap();
    /// let mut send = tx.send_async(2);
    /// let waker = futures::task::noop_waker();
    /// let mut cx = Context::from_waker(&waker);
    /// assert!(std::pin::Pin::new(&mut send).poll(&mut cx).is_pending()); // full
    /// assert_eq!(send.cancel(), Some(2));
    /// # use std::future::Future;
    /// ```
    pub fn cancel(mut self) -> Option<T> {
        self.sending.cancel(&self.tx.inner)
    }
}

impl<T> Future for SendFut<'_, T> {
    type Output = Result<(), SendError<T>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if !this.sending.in_flight() {
            // Completed already (see `FusedFuture`): pends for good.
            return Poll::Pending;
        }
        this.sending
            .poll(&this.tx.inner, cx)
            .map(|r| r.map_err(SendError))
    }
}

impl<T> FusedFuture for SendFut<'_, T> {
    fn is_terminated(&self) -> bool {
        !self.sending.in_flight()
    }
}

impl<T> Drop for SendFut<'_, T> {
    fn drop(&mut self) {
        // Not sent: dropped here, after the queue's locks are released.
        drop(self.sending.cancel(&self.tx.inner));
    }
}

/// The future of [`Receiver::recv_async`].
#[must_use = "futures do nothing unless polled"]
pub struct RecvFut<'a, T> {
    rx: &'a Receiver<T>,
    slot: WakerSlot,
    done: bool,
}

impl<T> Future for RecvFut<'_, T> {
    type Output = Result<T, RecvError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.done {
            return Poll::Pending;
        }
        let r = this.rx.inner.poll_recv(cx, &mut this.slot);
        this.done = r.is_ready();
        r
    }
}

impl<T> FusedFuture for RecvFut<'_, T> {
    fn is_terminated(&self) -> bool {
        self.done
    }
}

impl<T> Drop for RecvFut<'_, T> {
    fn drop(&mut self) {
        self.rx.inner.cancel_recv(&mut self.slot);
    }
}

/// The future of [`Sender::send_batch_async`].
#[must_use = "futures do nothing unless polled"]
pub struct SendBatchFut<'a, T> {
    tx: &'a Sender<T>,
    batch: &'a mut Vec<T>,
    /// The batch's length when the future was made: the error counts from it.
    len: usize,
    /// A rendezvous queue's send of the batch's front message, taken out of the batch.
    sending: Sending<T>,
    /// Whether a rendezvous send reversed `batch` (so each message comes off its end in
    /// constant time); put back in order before the future completes or is dropped.
    reversed: bool,
    done: bool,
}

// Never pinned structurally, as `SendFut`.
impl<T> Unpin for SendBatchFut<'_, T> {}

impl<T> Future for SendBatchFut<'_, T> {
    type Output = Result<(), SendBatchError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.done {
            return Poll::Pending;
        }
        let r = this.poll_batch(cx);
        this.done = r.is_ready();
        r
    }
}

impl<T> SendBatchFut<'_, T> {
    fn sent(&self) -> usize {
        self.len - self.batch.len() - usize::from(self.sending.in_flight())
    }

    /// Puts the batch a rendezvous send reversed back in order.
    fn restore_order(&mut self) {
        if std::mem::take(&mut self.reversed) {
            self.batch.reverse();
        }
    }

    fn poll_batch(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), SendBatchError>> {
        let failed = |this: &Self| Poll::Ready(Err(SendBatchError { sent: this.sent() }));
        match &*self.tx.inner {
            Flavor::Array(ch) => match ch.poll_send_batch(cx, &mut self.sending.slot, self.batch) {
                Poll::Ready(Ok(())) => Poll::Ready(Ok(())),
                Poll::Ready(Err(())) => failed(self),
                Poll::Pending => Poll::Pending,
            },
            Flavor::List(_) | Flavor::Timer(..) => match self.tx.try_send_batch(self.batch) {
                Ok(_) if self.batch.is_empty() => Poll::Ready(Ok(())),
                _ => failed(self),
            },
            Flavor::Zero(_) => loop {
                if !self.sending.in_flight() {
                    if self.batch.is_empty() {
                        return Poll::Ready(Ok(()));
                    }
                    // Reversed while the future runs: each message comes off the end.
                    if !self.reversed {
                        self.batch.reverse();
                        self.reversed = true;
                    }
                    self.sending.msg = self.batch.pop();
                }
                match self.sending.poll(&self.tx.inner, cx) {
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(msg)) => {
                        self.batch.push(msg);
                        self.restore_order();
                        return failed(self);
                    }
                    Poll::Pending => return Poll::Pending,
                }
            },
        }
    }
}

impl<T> FusedFuture for SendBatchFut<'_, T> {
    fn is_terminated(&self) -> bool {
        self.done
    }
}

impl<T> Drop for SendBatchFut<'_, T> {
    fn drop(&mut self) {
        // A rendezvous send not taken goes back to the front of the batch (its end while
        // the batch is reversed).
        if let Some(msg) = self.sending.cancel(&self.tx.inner) {
            if self.reversed {
                self.batch.push(msg);
            } else {
                self.batch.insert(0, msg);
            }
        }
        self.restore_order();
    }
}

/// The future of [`Receiver::recv_batch_async`].
#[must_use = "futures do nothing unless polled"]
pub struct RecvBatchFut<'a, T> {
    rx: &'a Receiver<T>,
    out: &'a mut Vec<T>,
    max: usize,
    slot: WakerSlot,
    done: bool,
}

impl<T> Future for RecvBatchFut<'_, T> {
    type Output = Result<usize, RecvError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.done {
            return Poll::Pending;
        }
        let r = if this.max == 0 {
            Poll::Ready(Ok(0))
        } else if let Flavor::Array(ch) = &*this.rx.inner {
            ch.poll_recv_batch(cx, &mut this.slot, this.out, this.max)
                .map(|r| r.map_err(|()| RecvError))
        } else {
            this.rx.inner.poll_recv(cx, &mut this.slot).map(|r| {
                r.map(|first| {
                    this.out.push(first);
                    let mut n = 1;
                    while n < this.max {
                        match this.rx.inner.try_recv() {
                            Ok(m) => this.out.push(m),
                            Err(_) => break,
                        }
                        n += 1;
                    }
                    n
                })
            })
        };
        this.done = r.is_ready();
        r
    }
}

impl<T> FusedFuture for RecvBatchFut<'_, T> {
    fn is_terminated(&self) -> bool {
        self.done
    }
}

impl<T> Drop for RecvBatchFut<'_, T> {
    fn drop(&mut self) {
        self.rx.inner.cancel_recv(&mut self.slot);
    }
}

/// The [`Stream`] of [`Receiver::stream`] and [`Receiver::into_stream`]: the messages as
/// they arrive, ending once the queue is empty and every sender is gone.
#[must_use = "streams do nothing unless polled"]
pub struct RecvStream<'a, T> {
    rx: Ref<'a, Receiver<T>>,
    slot: WakerSlot,
    done: bool,
}

impl<T> Stream for RecvStream<'_, T> {
    type Item = T;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        match this.rx.inner.poll_recv(cx, &mut this.slot) {
            Poll::Ready(Ok(msg)) => Poll::Ready(Some(msg)),
            Poll::Ready(Err(RecvError)) => {
                this.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T> FusedStream for RecvStream<'_, T> {
    fn is_terminated(&self) -> bool {
        self.done
    }
}

impl<T> Drop for RecvStream<'_, T> {
    fn drop(&mut self) {
        self.rx.inner.cancel_recv(&mut self.slot);
    }
}

/// The [`Sink`] of [`Sender::sink`] and [`Sender::into_sink`]. It holds at most one message
/// on its way: `start_send` tries to send it at once, and `poll_ready`, `poll_flush` and
/// `poll_close` drive it until it is sent. Its error, [`SendError`], hands back the message
/// that could not be sent because every receiver is gone. Closing the sink sends what it
/// holds but does not disconnect the queue (other senders may live on): drop the sink, or
/// the senders, for that.
#[must_use = "sinks do nothing unless polled"]
pub struct SendSink<'a, T> {
    tx: Ref<'a, Sender<T>>,
    sending: Sending<T>,
}

// Never pinned structurally, as `SendFut`.
impl<T> Unpin for SendSink<'_, T> {}

impl<T> SendSink<'_, T> {
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), SendError<T>>> {
        if !self.sending.in_flight() {
            return Poll::Ready(Ok(()));
        }
        self.sending
            .poll(&self.tx.inner, cx)
            .map(|r| r.map_err(SendError))
    }
}

impl<T> Sink<T> for SendSink<'_, T> {
    type Error = SendError<T>;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.get_mut().poll_pending(cx)
    }

    fn start_send(self: Pin<&mut Self>, item: T) -> Result<(), Self::Error> {
        let this = self.get_mut();
        // A message still in flight (`start_send` without `poll_ready`) is not sent.
        drop(this.sending.cancel(&this.tx.inner));
        if matches!(&*this.tx.inner, Flavor::Zero(_)) {
            // Handed over when polled.
            this.sending.msg = Some(item);
            return Ok(());
        }
        match this.tx.try_send(item) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(m)) => {
                this.sending.msg = Some(m);
                Ok(())
            }
            Err(TrySendError::Disconnected(m)) => Err(SendError(m)),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.get_mut().poll_pending(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.get_mut().poll_pending(cx)
    }
}

impl<T> Drop for SendSink<'_, T> {
    fn drop(&mut self) {
        drop(self.sending.cancel(&self.tx.inner));
    }
}

impl<T> Sender<T> {
    /// Sends `msg`, waiting asynchronously while the queue is full: a future resolving to
    /// `Ok(())` once the message is in the queue (for a rendezvous queue: once a receiver,
    /// thread or task, has taken it). The first poll sends at once when there is room; it
    /// needs no runtime, and threads and tasks may wait on either end of the same queue.
    ///
    /// # Errors
    ///
    /// [`SendError`] with the message when every receiver is gone.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in the sense that a message is never both sent and lost: if the future
    /// is dropped before it completes (as a `select!` branch that did not win), the message
    /// was not sent, and it is dropped with the future. A message is in the queue only if
    /// the future returned `Ok(())`, or was dropped after the send had already happened
    /// inside a poll that returned `Ready` (which a `select!` never discards). On a
    /// rendezvous queue a message waiting in the hand-off slot is taken back when the
    /// future is dropped, unless a receiver took it first (then it was sent). To keep an
    /// unsent message, keep the future (or use [`try_send`](Self::try_send) in a loop).
    ///
    /// # Examples
    ///
    /// ```
    /// use futures::executor::block_on;
    ///
    /// let (tx, rx) = logbus::queue::bounded(1);
    /// block_on(async {
    ///     tx.send_async(1).await.unwrap();
    ///     assert_eq!(rx.recv_async().await, Ok(1));
    ///     drop(rx);
    ///     assert_eq!(tx.send_async(2).await.unwrap_err().into_inner(), 2);
    /// });
    /// ```
    pub fn send_async(&self, msg: T) -> SendFut<'_, T> {
        SendFut {
            tx: self,
            sending: Sending::new(Some(msg)),
        }
    }

    /// Moves every message of `batch` into the queue, in order, waiting asynchronously for
    /// room; the future resolves once `batch` is empty (its allocation kept). Each poll
    /// sends what fits with one claim per stretch of free slots, as
    /// [`send_batch`](Self::send_batch). (A rendezvous queue hands the messages over one by
    /// one.)
    ///
    /// # Errors
    ///
    /// [`SendBatchError`] when every receiver is gone: the messages not sent stay in
    /// `batch`, in order, and the error counts those sent.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped before it completes, every message it sent is
    /// out of `batch` and every other one is still there, in order (a rendezvous queue's
    /// message not yet taken goes back to the front). Awaiting a new future on the same
    /// `batch` carries on where the dropped one stopped.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures::executor::block_on;
    ///
    /// let (tx, rx) = logbus::queue::bounded(8);
    /// let mut batch = vec![1, 2, 3];
    /// block_on(tx.send_batch_async(&mut batch)).unwrap();
    /// assert!(batch.is_empty());
    /// let mut out = Vec::new();
    /// assert_eq!(block_on(rx.recv_batch_async(&mut out, 8)), Ok(3));
    /// assert_eq!(out, [1, 2, 3]);
    /// ```
    pub fn send_batch_async<'a>(&'a self, batch: &'a mut Vec<T>) -> SendBatchFut<'a, T> {
        SendBatchFut {
            tx: self,
            len: batch.len(),
            batch,
            sending: Sending::new(None),
            reversed: false,
            done: false,
        }
    }

    /// A [`Sink`] of messages into this queue, borrowing the sender (see [`SendSink`]).
    ///
    /// # Cancel safety
    ///
    /// A future driving the sink (`SinkExt::send`, `feed`, `flush`) may be dropped: the
    /// sink keeps the message it holds, and the next `poll_ready`, `poll_flush` or
    /// `poll_close` carries on sending it. Dropping the sink drops a message it still holds
    /// unsent (on a rendezvous queue: not taken by a receiver).
    ///
    /// # Examples
    ///
    /// ```
    /// use futures::executor::block_on;
    /// use futures::{SinkExt, StreamExt};
    ///
    /// let (tx, rx) = logbus::queue::bounded(4);
    /// block_on(async {
    ///     let mut sink = tx.sink();
    ///     sink.send(1).await.unwrap();
    ///     sink.send(2).await.unwrap();
    ///     drop(sink);
    ///     drop(tx);
    ///     assert_eq!(rx.stream().collect::<Vec<_>>().await, [1, 2]);
    /// });
    /// ```
    pub fn sink(&self) -> SendSink<'_, T> {
        SendSink {
            tx: Ref::Borrowed(self),
            sending: Sending::new(None),
        }
    }

    /// [`sink`](Self::sink), owning the sender: the queue disconnects for receivers when
    /// the sink (and every other sender) is dropped.
    ///
    /// # Cancel safety
    ///
    /// As [`sink`](Self::sink).
    ///
    /// # Examples
    ///
    /// ```
    /// use futures::executor::block_on;
    /// use futures::{SinkExt, StreamExt};
    ///
    /// let (tx, rx) = logbus::queue::unbounded();
    /// block_on(async {
    ///     let mut sink = tx.into_sink();
    ///     sink.send_all(&mut futures::stream::iter([1, 2, 3]).map(Ok)).await.unwrap();
    ///     drop(sink); // the last sender: the stream ends after the messages
    ///     assert_eq!(rx.into_stream().collect::<Vec<_>>().await, [1, 2, 3]);
    /// });
    /// ```
    pub fn into_sink(self) -> SendSink<'static, T> {
        SendSink {
            tx: Ref::Owned(self),
            sending: Sending::new(None),
        }
    }
}

impl<T> Receiver<T> {
    /// Receives a message, waiting asynchronously while the queue is empty: a future
    /// resolving to the message, or to [`RecvError`] once the queue is empty and every
    /// sender is gone. The first poll takes a waiting message at once; it needs no runtime,
    /// and threads and tasks may wait on either end of the same queue.
    ///
    /// From the timers: [`after`](super::after), [`at`](super::at) and
    /// [`tick`](super::tick) resolve when their message is due (a helper thread, started on
    /// first use, wakes the task then); [`never()`](super::never()) (and an `after` whose
    /// message was taken) pends for good.
    ///
    /// # Errors
    ///
    /// [`RecvError`] when the queue is empty and every sender is gone.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a message is taken only inside the poll that returns it. If the future
    /// is dropped before it completes (a `select!` branch that did not win, a timeout), no
    /// message was taken, and none is lost, even if the future had been woken for one: a
    /// wake-up wakes every waiting task and thread, so the message is there for another
    /// receiver, or for the next `recv_async`.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures::executor::block_on;
    /// use std::thread;
    ///
    /// let (tx, rx) = logbus::queue::bounded(1);
    /// let producer = thread::spawn(move || tx.send(7).unwrap()); // a thread sends
    /// assert_eq!(block_on(rx.recv_async()), Ok(7)); // a task receives
    /// producer.join().unwrap();
    /// assert!(block_on(rx.recv_async()).is_err()); // empty and disconnected
    /// ```
    pub fn recv_async(&self) -> RecvFut<'_, T> {
        RecvFut {
            rx: self,
            slot: WakerSlot::new(),
            done: false,
        }
    }

    /// Appends between 1 and `max` messages to `out`, waiting asynchronously for the first;
    /// resolves to how many (0 only when `max` is 0). Each stretch of waiting messages is
    /// claimed with one atomic operation, as [`recv_batch`](Self::recv_batch).
    ///
    /// # Errors
    ///
    /// [`RecvError`] when the queue is empty and every sender is gone.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: messages are taken only inside the poll that returns them (appended to
    /// `out` then); a future dropped before it completes took nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures::executor::block_on;
    ///
    /// let (tx, rx) = logbus::queue::bounded(8);
    /// tx.send_batch(&mut vec![1, 2, 3, 4]).unwrap();
    /// let mut out = Vec::new();
    /// assert_eq!(block_on(rx.recv_batch_async(&mut out, 3)), Ok(3));
    /// assert_eq!(out, [1, 2, 3]);
    /// ```
    pub fn recv_batch_async<'a>(&'a self, out: &'a mut Vec<T>, max: usize) -> RecvBatchFut<'a, T> {
        RecvBatchFut {
            rx: self,
            out,
            max,
            slot: WakerSlot::new(),
            done: false,
        }
    }

    /// A [`Stream`] of the messages, borrowing the receiver: it yields each message as it
    /// arrives and ends (`None`) once the queue is empty and every sender is gone.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: `StreamExt::next` on it can be dropped (a `select!` branch) without
    /// losing a message, as with [`recv_async`](Self::recv_async).
    ///
    /// # Examples
    ///
    /// ```
    /// use futures::executor::block_on;
    /// use futures::StreamExt;
    ///
    /// let (tx, rx) = logbus::queue::bounded(4);
    /// tx.send(1).unwrap();
    /// tx.send(2).unwrap();
    /// drop(tx);
    /// let sum: i32 = block_on(rx.stream().fold(0, |a, m| async move { a + m }));
    /// assert_eq!(sum, 3);
    /// ```
    pub fn stream(&self) -> RecvStream<'_, T> {
        RecvStream {
            rx: Ref::Borrowed(self),
            slot: WakerSlot::new(),
            done: false,
        }
    }

    /// [`stream`](Self::stream), owning the receiver (a `'static` stream, for a spawned
    /// task).
    ///
    /// # Cancel safety
    ///
    /// As [`stream`](Self::stream).
    ///
    /// # Examples
    ///
    /// ```
    /// use futures::executor::block_on;
    /// use futures::StreamExt;
    ///
    /// let (tx, rx) = logbus::queue::unbounded();
    /// tx.send("a").unwrap();
    /// drop(tx);
    /// assert_eq!(block_on(rx.into_stream().collect::<Vec<_>>()), ["a"]);
    /// ```
    pub fn into_stream(self) -> RecvStream<'static, T> {
        RecvStream {
            rx: Ref::Owned(self),
            slot: WakerSlot::new(),
            done: false,
        }
    }
}

// The futures print as the handles do.
macro_rules! opaque_debug {
    ($($name:ident),*) => {$(
        impl<T> fmt::Debug for $name<'_, T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.pad(concat!(stringify!($name), " { .. }"))
            }
        }
    )*};
}
opaque_debug!(
    SendFut,
    RecvFut,
    SendBatchFut,
    RecvBatchFut,
    RecvStream,
    SendSink
);
