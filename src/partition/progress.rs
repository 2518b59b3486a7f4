//! One send's progress on a replicated partition: where it stands, its time budget and the
//! retries it has left. The partition keeps it in a pipelined send ([`Pending`](super::Pending))
//! between the append and the wait; the replica layer drives it.

use super::{Acks, SendPolicy};
use crate::sync::time::{self, Instant};

/// A send's time limits: the producer's `delivery_timeout` (with the caller's deadline,
/// if any) for the whole send and `request_timeout` for one wait. The clock is read only
/// when first needed — when a send waits or fails — so an append that does neither reads
/// none; the delivery budget then counts from that moment, microseconds after the call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    pub(crate) caller: Option<Instant>,
    /// Set at the first read of the clock.
    pub(crate) delivery: Option<Option<Instant>>,
    /// A pipelined send: when it was sent (`time::coarse_ns`), the delivery budget's start
    /// (read cheaply at every send; turned into a deadline only if a wait must block).
    pub(crate) sent: Option<u64>,
}

impl Budget {
    /// When the whole send gives up (`None`: never).
    pub(crate) fn delivery(&mut self, policy: &SendPolicy) -> Option<Instant> {
        self.delivery_from(policy, None)
    }

    fn delivery_from(&mut self, policy: &SendPolicy, now: Option<Instant>) -> Option<Instant> {
        if self.delivery.is_none() {
            let now = now.unwrap_or_else(Instant::now);
            let start = self.sent.map_or(now, |mark| time::since_coarse(mark, now));
            self.delivery = Some(earliest(
                start.checked_add(policy.delivery_timeout),
                self.caller,
            ));
        }
        self.delivery.flatten()
    }

    /// When one wait for an acknowledgement starting now gives up.
    pub(crate) fn request(&mut self, policy: &SendPolicy) -> Option<Instant> {
        let now = Instant::now();
        let delivery = self.delivery_from(policy, Some(now));
        earliest(now.checked_add(policy.request_timeout), delivery)
    }
}

/// The earlier of two optional deadlines (`None`: never).
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Where a send stands.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Step {
    /// Not in the log (yet, or again after a failure).
    Append,
    /// Appended in leader epoch `.0` with its last record at offset `.1`.
    Await(i32, u64),
}

/// One send's progress: where it stands, its time budget and the retries it has left.
/// A pipelined send (`Producer::send_async`) keeps it between its append and its wait.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SendProgress {
    pub(crate) step: Step,
    pub(crate) budget: Budget,
    pub(crate) retries: u32,
    /// An idempotent send's producer and first sequence (assigned at its first append;
    /// every retry carries the same).
    pub(crate) idem: Idem,
}

/// An idempotent send's producer and, once assigned, its first sequence.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Idem {
    pub(crate) producer: Option<super::ProducerIdentity>,
    pub(crate) seq: Option<i32>,
    /// The leader answered its last attempt as a duplicate (for the producer's metrics).
    pub(crate) deduplicated: bool,
    /// The caller gave the sequence (`send_sequenced`): out of order is its answer, not
    /// retried.
    pub(crate) explicit: bool,
}

impl SendProgress {
    /// `(epoch, last offset)` of its append, once appended.
    pub(crate) fn appended_at(&self) -> Option<(i32, u64)> {
        match self.step {
            Step::Await(epoch, last) => Some((epoch, last)),
            Step::Append => None,
        }
    }

    pub(crate) fn new(policy: &SendPolicy, caller: Option<Instant>) -> Self {
        Self {
            step: Step::Append,
            budget: Budget {
                caller,
                delivery: None,
                sent: None,
            },
            retries: if policy.acks == Acks::None {
                0
            } else {
                policy.retries
            },
            idem: Idem {
                producer: policy.producer.as_ref().map(|h| h.current()),
                seq: None,
                deduplicated: false,
                explicit: false,
            },
        }
    }
}
