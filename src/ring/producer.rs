//! SingleProducer handles: [`SingleProducer`] (the single-producer fast path) and [`MultiProducer`]
//! (cloneable, claims by CAS). Both are thin wrappers over the `sequencer`.

use std::mem::ManuallyDrop;

use super::error::{
    BatchClosed, PublishBatchTimeoutError, PublishError, PublishTimeoutError, TryPublishError,
};
use super::sequencer::{Sequencer, Stop, Wait};
use super::Ring;
use crate::sync::atomic::Ordering;
use crate::sync::time::{self, Duration, Instant};
use crate::sync::Arc;

/// Publishes one value; hands it back with the reason when it was not published.
fn publish_one<T>(seq: &mut Sequencer<T>, value: T, wait: Wait) -> Result<(), (T, Stop)> {
    let value = ManuallyDrop::new(value);
    // SAFETY: one initialised value; if it is not published (0 returned) we still own it
    // and take it back below.
    let (done, stop) = unsafe { seq.publish_from(&*value, 1, wait, None) };
    if done == 1 {
        Ok(())
    } else {
        // SAFETY: not moved into the ring (done == 0).
        Err((
            ManuallyDrop::into_inner(value),
            stop.unwrap_or(Stop::Closed),
        ))
    }
}

/// Publishes the whole `batch` (or what fits, without waiting), leaving the rest in it.
/// `plain`: as `Sequencer::publish_from`'s.
fn publish_vec<T>(
    seq: &mut Sequencer<T>,
    batch: &mut Vec<T>,
    wait: Wait,
    plain: Option<bool>,
) -> (usize, Option<Stop>) {
    let len = batch.len();
    // SAFETY: from here the Vec owns nothing (a panic leaks instead of double-dropping);
    // `publish_from` moves out the first `done` values, we keep the rest.
    let (done, stop) = unsafe {
        batch.set_len(0);
        seq.publish_from(batch.as_ptr(), len, wait, plain)
    };
    // SAFETY: `done..len` are still initialised and owned by us; shift them to the front.
    unsafe {
        let p = batch.as_mut_ptr();
        std::ptr::copy(p.add(done), p, len - done);
        batch.set_len(len - done);
    }
    (done, stop)
}

macro_rules! producer_methods {
    () => {
        /// Publishes `value`, waiting (yield, then park) while the ring is full of
        /// entries a gating reader has not read.
        ///
        /// # Errors
        ///
        /// [`PublishError`] with the value when the ring is closed.
        #[inline]
        pub fn publish(&mut self, value: T) -> Result<(), PublishError<T>> {
            let value = match self.seq.try_fast_one(value) {
                Ok(()) => return Ok(()),
                Err(value) => value,
            };
            publish_one(&mut self.seq, value, Wait::Until(None)).map_err(|(v, _)| PublishError(v))
        }

        /// Publishes `value` if a slot is free now.
        ///
        /// # Errors
        ///
        /// [`TryPublishError::Full`] when a gating reader holds the slot,
        /// [`TryPublishError::Closed`] when the ring is closed; both hand the value back.
        #[inline]
        pub fn try_publish(&mut self, value: T) -> Result<(), TryPublishError<T>> {
            let value = match self.seq.try_fast_one(value) {
                Ok(()) => return Ok(()),
                Err(value) => value,
            };
            publish_one(&mut self.seq, value, Wait::No).map_err(|(v, stop)| match stop {
                Stop::Full => TryPublishError::Full(v),
                _ => TryPublishError::Closed(v),
            })
        }

        /// Like [`publish`](Self::publish), giving up after `timeout`.
        ///
        /// # Errors
        ///
        /// [`PublishTimeoutError::Timeout`] or [`PublishTimeoutError::Closed`], handing the
        /// value back.
        pub fn publish_timeout(
            &mut self,
            value: T,
            timeout: Duration,
        ) -> Result<(), PublishTimeoutError<T>> {
            self.publish_deadline_opt(value, time::deadline_after(timeout))
        }

        /// Like [`publish`](Self::publish), giving up at `deadline`.
        ///
        /// # Errors
        ///
        /// As [`publish_timeout`](Self::publish_timeout).
        pub fn publish_deadline(
            &mut self,
            value: T,
            deadline: Instant,
        ) -> Result<(), PublishTimeoutError<T>> {
            self.publish_deadline_opt(value, Some(deadline))
        }

        fn publish_deadline_opt(
            &mut self,
            value: T,
            deadline: Option<Instant>,
        ) -> Result<(), PublishTimeoutError<T>> {
            publish_one(&mut self.seq, value, Wait::Until(deadline)).map_err(|(v, stop)| match stop
            {
                Stop::Timeout | Stop::Full => PublishTimeoutError::Timeout(v),
                Stop::Closed => PublishTimeoutError::Closed(v),
            })
        }

        /// Publishes every entry of `batch` in order (draining it; its capacity is kept for
        /// reuse), claiming runs of slots and publishing each run once. Waits while the ring
        /// is full. With more entries than the capacity, it publishes in several runs.
        ///
        /// # Errors
        ///
        /// [`BatchClosed`] when the ring closed first: the entries not published stay in
        /// `batch`, in order.
        pub fn publish_batch(&mut self, batch: &mut Vec<T>) -> Result<(), BatchClosed> {
            match publish_vec(&mut self.seq, batch, Wait::Until(None), None) {
                (_, None) => Ok(()),
                (published, Some(_)) => Err(BatchClosed { published }),
            }
        }

        /// [`publish_batch`](Self::publish_batch), waiting for room at most `timeout` in
        /// all.
        ///
        /// # Errors
        ///
        /// [`PublishBatchTimeoutError::Timeout`] when the ring stayed full until the
        /// deadline, [`PublishBatchTimeoutError::Closed`] when it closed first. Either way
        /// the entries not published stay in `batch`, in order, and the error counts those
        /// published.
        pub fn publish_batch_timeout(
            &mut self,
            batch: &mut Vec<T>,
            timeout: Duration,
        ) -> Result<(), PublishBatchTimeoutError> {
            self.publish_batch_until(batch, time::deadline_after(timeout))
        }

        /// [`publish_batch`](Self::publish_batch), waiting for room until `deadline` at the
        /// latest.
        ///
        /// # Errors
        ///
        /// As [`publish_batch_timeout`](Self::publish_batch_timeout).
        pub fn publish_batch_deadline(
            &mut self,
            batch: &mut Vec<T>,
            deadline: Instant,
        ) -> Result<(), PublishBatchTimeoutError> {
            self.publish_batch_until(batch, Some(deadline))
        }

        fn publish_batch_until(
            &mut self,
            batch: &mut Vec<T>,
            deadline: Option<Instant>,
        ) -> Result<(), PublishBatchTimeoutError> {
            match publish_vec(&mut self.seq, batch, Wait::Until(deadline), None) {
                (_, None) => Ok(()),
                (published, Some(Stop::Closed)) => {
                    Err(PublishBatchTimeoutError::Closed { published })
                }
                (published, Some(Stop::Timeout | Stop::Full)) => {
                    Err(PublishBatchTimeoutError::Timeout { published })
                }
            }
        }

        /// Publishes as many entries from the front of `batch` as fit now, in one run;
        /// returns how many (possibly 0). The rest stay in `batch`, in order.
        ///
        /// # Errors
        ///
        /// [`BatchClosed`] when the ring is closed.
        pub fn try_publish_batch(&mut self, batch: &mut Vec<T>) -> Result<usize, BatchClosed> {
            match publish_vec(&mut self.seq, batch, Wait::No, None) {
                (published, Some(Stop::Closed)) => Err(BatchClosed { published }),
                (published, _) => Ok(published),
            }
        }

        /// The sequence of the last entry published through this handle (`None` before
        /// the first): after a successful [`publish`](Self::publish), the sequence that
        /// entry got — a partition's offset for the record just appended.
        pub fn last_sequence(&self) -> Option<u64> {
            self.seq.last_sequence()
        }

        /// A handle to the ring (to add readers, close it, query it).
        pub fn ring(&self) -> Ring<T> {
            Ring {
                shared: Arc::clone(&self.seq.shared),
            }
        }

        /// Closes the ring (see [`Ring::close`]).
        pub fn close(&self) {
            self.seq.shared.close();
        }
    };
}

/// The one producer of a single-producer ring (from [`Ring::single_producer`]): claims are
/// a private counter, publication one `Release` store per run. Not `Clone`; `Send` when
/// `T: Send + Sync`. Dropping it closes the ring.
///
/// # Examples
///
/// ```
/// use logbus::ring::{Ring, RingConfig, Start};
///
/// let (mut producer, ring) = Ring::single_producer(RingConfig::new(16))?;
/// let mut reader = ring.gating_reader(Start::Tail)?;
/// let mut batch = vec![1u32, 2, 3];
/// producer.publish_batch(&mut batch).unwrap();
/// assert!(batch.is_empty());
/// let mut out = Vec::new();
/// assert_eq!(reader.try_read_batch(&mut out, 10), Ok(3));
/// assert_eq!(out, [1, 2, 3]);
/// # Ok::<(), logbus::Error>(())
/// ```
#[derive(Debug)]
pub struct SingleProducer<T> {
    seq: Sequencer<T>,
}

impl<T> SingleProducer<T> {
    pub(crate) fn new(seq: Sequencer<T>) -> Self {
        Self { seq }
    }

    /// The sequence the next published entry gets.
    pub fn next_sequence(&self) -> u64 {
        self.seq.next_sequence()
    }

    producer_methods!();
}

impl<T> SingleProducer<T> {
    /// Publishes `n` entries made by `make(sequence)` directly in their slots: claims room
    /// for a whole run (up to the capacity), writes it, publishes it once — the Disruptor's
    /// batch publish, with no intermediate buffer. Waits while the ring is full.
    ///
    /// If `make` panics, the entries made so far are published, the rest of the claim is
    /// given back, and the panic continues.
    ///
    /// # Errors
    ///
    /// [`BatchClosed`] when the ring closed first (with how many were published).
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::ring::{Ring, RingConfig, Start};
    ///
    /// let (mut producer, ring) = Ring::single_producer(RingConfig::new(8))?;
    /// let mut reader = ring.gating_reader(Start::Tail)?;
    /// producer.publish_with(5, |seq| seq * 10).unwrap();
    /// let mut out = Vec::new();
    /// reader.try_read_batch(&mut out, 8).unwrap();
    /// assert_eq!(out, [0, 10, 20, 30, 40]);
    /// # Ok::<(), logbus::Error>(())
    /// ```
    pub fn publish_with(
        &mut self,
        n: usize,
        make: impl FnMut(u64) -> T,
    ) -> Result<(), BatchClosed> {
        match self.seq.publish_with(n, make, Wait::Until(None)) {
            (_, None) => Ok(()),
            (published, Some(_)) => Err(BatchClosed { published }),
        }
    }

    /// Like [`publish_with`](Self::publish_with), but only what fits now (possibly nothing):
    /// returns how many entries were made and published.
    ///
    /// # Errors
    ///
    /// [`BatchClosed`] when the ring is closed.
    pub fn try_publish_with(
        &mut self,
        n: usize,
        make: impl FnMut(u64) -> T,
    ) -> Result<usize, BatchClosed> {
        match self.seq.publish_with(n, make, Wait::No) {
            (published, Some(Stop::Closed)) => Err(BatchClosed { published }),
            (published, _) => Ok(published),
        }
    }
}

impl<T> SingleProducer<T> {
    /// [`try_publish_batch`](Self::try_publish_batch) for a caller that knows whether every
    /// entry of `batch` drops as a no-op (`plain`): the ring then need not ask each
    /// (`sequencer`, "Plain values").
    ///
    /// # Errors
    ///
    /// [`BatchClosed`] when the ring is closed: the entries not published stay in `batch`,
    /// in order.
    pub(crate) fn try_publish_batch_known(
        &mut self,
        batch: &mut Vec<T>,
        plain: bool,
    ) -> Result<usize, BatchClosed> {
        match publish_vec(&mut self.seq, batch, Wait::No, Some(plain)) {
            (published, Some(Stop::Closed)) => Err(BatchClosed { published }),
            (published, _) => Ok(published),
        }
    }
}

impl<T> SingleProducer<T> {
    /// Publishes up to `n` values made by `make(i)` straight in their slots, as many as fit
    /// now (one run, possibly none): returns how many, `make` having been called for
    /// `0..returned`, in order. `plain`: as for
    /// [`try_publish_batch_known`](Self::try_publish_batch_known).
    ///
    /// # Errors
    ///
    /// [`BatchClosed`] when the ring is closed.
    ///
    /// # Safety
    ///
    /// `make` never panics and touches no ring (it runs with slots claimed but not
    /// written); `plain` only if each value it makes drops as a no-op and the ring tracks
    /// plain values (`Ring::single_producer_plain` with a predicate, or `T` without drop
    /// glue).
    pub(crate) unsafe fn try_publish_made(
        &mut self,
        n: usize,
        make: impl Fn(usize) -> T + Copy,
        plain: bool,
    ) -> Result<usize, BatchClosed> {
        // SAFETY: the caller's contract is `publish_made`'s.
        match unsafe { self.seq.publish_made(n, make, Wait::No, plain) } {
            (published, Some(Stop::Closed)) => Err(BatchClosed { published }),
            (published, _) => Ok(published),
        }
    }
}

impl<T> Drop for SingleProducer<T> {
    fn drop(&mut self) {
        self.seq.shared.close();
    }
}

/// A producer of a multi-producer ring (from [`Ring::multi_producer`]): `Clone` it for
/// each producing thread. Claims are one CAS per run on a shared cursor. The ring closes
/// when the last `MultiProducer` is dropped.
///
/// # Examples
///
/// ```
/// use logbus::ring::{Ring, RingConfig, Start};
/// use std::thread;
///
/// let (producer, ring) = Ring::multi_producer(RingConfig::new(64))?;
/// let mut reader = ring.gating_reader(Start::Oldest)?;
/// let handles: Vec<_> = (0..2u64)
///     .map(|p| {
///         let mut producer = producer.clone();
///         thread::spawn(move || {
///             for i in 0..10 {
///                 producer.publish(p * 100 + i).unwrap();
///             }
///         })
///     })
///     .collect();
/// drop(producer);
/// let mut seen = Vec::new();
/// while let Ok(v) = reader.read() {
///     seen.push(v);
/// }
/// for h in handles {
///     h.join().unwrap();
/// }
/// assert_eq!(seen.len(), 20);
/// # Ok::<(), logbus::Error>(())
/// ```
#[derive(Debug)]
pub struct MultiProducer<T> {
    seq: Sequencer<T>,
}

impl<T> MultiProducer<T> {
    pub(crate) fn new(seq: Sequencer<T>) -> Self {
        Self { seq }
    }

    /// The ring's claim cursor: the sequence the next claimed entry gets (another producer
    /// may take it first).
    pub fn next_sequence(&self) -> u64 {
        self.seq.next_sequence()
    }

    producer_methods!();
}

impl<T> Clone for MultiProducer<T> {
    fn clone(&self) -> Self {
        // Relaxed: a counter; the last decrement (AcqRel in drop) decides the close.
        self.seq.shared.producers.fetch_add(1, Ordering::Relaxed);
        Self {
            seq: Sequencer::new(Arc::clone(&self.seq.shared)),
        }
    }
}

impl<T> Drop for MultiProducer<T> {
    fn drop(&mut self) {
        // AcqRel: the last producer sees every other producer's claims before closing.
        if self.seq.shared.producers.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.seq.shared.close();
        }
    }
}
