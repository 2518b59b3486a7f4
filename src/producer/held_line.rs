//! [`HeldLine`]: one producer's records held for room on one partition, in call order.
//!
//! A `send_async` that finds its `Block` partition full returns with its record held, to be
//! appended when room frees. Kafka's producer keeps each partition's records in send order;
//! so do held records: they wait in one line per producer and partition, a record behind
//! held ones is held too (even where it would fit), and whichever handle of the line is
//! polled (or waited on) appends the records at its front, in order, as far as room allows,
//! keeping each outcome for its own handle. No handle waits for another to be polled, so
//! handles may be awaited in any order.

use std::collections::VecDeque;

use crate::partition::{Appender, Entry, Refused, Unsynced};
use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::Mutex;

/// An append's outcome, kept for the handle whose record it was.
type Outcome<K, V> = Result<Unsynced<K, V>, Refused<K, V>>;

/// The held records of one producer on one partition.
pub(super) struct HeldLine<K, V> {
    line: Mutex<Line<K, V>>,
    /// How many records wait in the line: read without the lock by every `send_async` to
    /// the partition (zero: nothing held, append at once).
    waiting: AtomicUsize,
}

struct Line<K, V> {
    next_ticket: u64,
    waiting: VecDeque<(u64, Entry<K, V>)>,
    /// Outcomes of records appended by another handle's poll, until their handle looks.
    done: Vec<(u64, Outcome<K, V>)>,
}

impl<K, V> Default for HeldLine<K, V> {
    fn default() -> Self {
        Self {
            line: Mutex::new(Line {
                next_ticket: 0,
                waiting: VecDeque::new(),
                done: Vec::new(),
            }),
            waiting: AtomicUsize::new(0),
        }
    }
}

impl<K, V> HeldLine<K, V> {
    /// Whether records are held: a new record must then be held behind them.
    #[inline]
    pub(super) fn has_held(&self) -> bool {
        // Acquire: pairs with the Release decrement in `drive` after an append, so a send
        // that reads zero appends after every held record.
        self.waiting.load(Ordering::Acquire) != 0
    }

    /// Puts `entry` at the back of the line; its ticket. Called under the producer's lock,
    /// so tickets follow call order.
    pub(super) fn hold(&self, entry: Entry<K, V>) -> u64 {
        let mut line = self.line.lock();
        let ticket = line.next_ticket;
        line.next_ticket += 1;
        line.waiting.push_back((ticket, entry));
        // Relaxed: under the lock; `drive`'s Release decrement is what readers pair with.
        self.waiting.fetch_add(1, Ordering::Relaxed);
        ticket
    }

    /// Appends the records at the front of the line, in order, while there is room, and
    /// returns the outcome of `ticket`'s record once it has one (`None`: it still waits
    /// for room).
    pub(super) fn drive(
        &self,
        appender: &mut Appender<K, V>,
        ticket: u64,
    ) -> Option<Outcome<K, V>> {
        let mut line = self.line.lock();
        if let Some(i) = line.done.iter().position(|(t, _)| *t == ticket) {
            return Some(line.done.swap_remove(i).1);
        }
        let mut mine = None;
        while let Some((t, entry)) = line.waiting.pop_front() {
            match appender.try_append_unsynced(entry) {
                Err((Some(entry), crate::partition::AppendError::Full)) => {
                    line.waiting.push_front((t, entry));
                    break;
                }
                outcome => {
                    // Release: this append is seen by a send that reads the count after
                    // (`has_held`'s Acquire).
                    self.waiting.fetch_sub(1, Ordering::Release);
                    if t == ticket {
                        mine = Some(outcome);
                    } else {
                        line.done.push((t, outcome));
                    }
                }
            }
        }
        mine
    }

    /// Forgets `ticket`'s record: dropped unsent if it still waits, its outcome dropped if
    /// another handle appended it.
    pub(super) fn cancel(&self, ticket: u64) {
        let mut line = self.line.lock();
        if let Some(i) = line.waiting.iter().position(|(t, _)| *t == ticket) {
            let dropped = line.waiting.remove(i);
            self.waiting.fetch_sub(1, Ordering::Release);
            drop(line);
            drop(dropped);
        } else if let Some(i) = line.done.iter().position(|(t, _)| *t == ticket) {
            let dropped = line.done.swap_remove(i);
            drop(line);
            drop(dropped);
        }
    }
}
