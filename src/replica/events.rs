//! What happened to replicas, in order: elections, ISR changes, truncations, faults.

use std::time::Duration;

use crate::sync::time::{self};
use crate::sync::{Condvar, Mutex};

/// One thing that happened to a replicated partition ([`Faults::events`](super::Faults::events)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaEvent {
    /// The broker clock's time (milliseconds since the Unix epoch).
    pub at_ms: i64,
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// What happened.
    pub kind: EventKind,
}

/// What a [`ReplicaEvent`] reports. Replicas are named by their id (the data directory
/// index they live on).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventKind {
    /// A leader was chosen (`None`: no replica could be, the partition is offline).
    LeaderElected {
        /// The new leader.
        leader: Option<u32>,
        /// The new leader epoch.
        epoch: i32,
        /// Chosen from outside the ISR (`unclean_leader_election`).
        unclean: bool,
    },
    /// Records below the old high watermark that the new leader does not have: committed
    /// records lost, offsets `from..to` — to an unclean election, or because the last
    /// in-sync replica lost an unsynced tail in a crash and was elected again (KIP-966's
    /// case).
    RecordsLost {
        /// The first offset lost (the new leader's log end).
        from: u64,
        /// One past the last committed offset lost (the old high watermark).
        to: u64,
    },
    /// A replica left the ISR.
    IsrShrunk {
        /// The replica removed.
        replica: u32,
        /// The ISR after the change.
        isr: Vec<u32>,
        /// Why (`"lagging"`, `"crashed"`, `"directory failed"`).
        reason: &'static str,
    },
    /// A replica caught up and joined the ISR.
    IsrExpanded {
        /// The replica added.
        replica: u32,
        /// The ISR after the change.
        isr: Vec<u32>,
    },
    /// A replica cut its log by leader epoch: offsets `to..from` removed.
    Truncated {
        /// The replica.
        replica: u32,
        /// Its log end before.
        from: u64,
        /// Its log end after.
        to: u64,
    },
    /// A replica crashed (`lost_from`: the offset its log was cut to, when the crash lost
    /// an unsynced tail or, for a failed directory, everything).
    Crashed {
        /// The replica.
        replica: u32,
        /// Where its log now ends, if the crash cut it.
        lost_from: Option<u64>,
    },
    /// A crashed replica came back (as a follower, out of the ISR).
    Restarted {
        /// The replica.
        replica: u32,
    },
}

/// The most events kept: the oldest are dropped beyond it (a long-running broker with
/// flapping followers must not grow without bound).
pub const MAX_EVENTS: usize = 1 << 16;

/// The broker's event log.
#[derive(Debug, Default)]
pub(crate) struct Events {
    log: Mutex<Vec<ReplicaEvent>>,
    added: Condvar,
}

impl Events {
    pub(crate) fn push(&self, event: ReplicaEvent) {
        let mut log = self.log.lock();
        if log.len() >= MAX_EVENTS {
            log.drain(..MAX_EVENTS / 2);
        }
        log.push(event);
        drop(log);
        self.added.notify_all();
    }

    pub(crate) fn all(&self) -> Vec<ReplicaEvent> {
        self.log.lock().clone()
    }

    /// Waits until an event matching `pred` was recorded (at any time), up to `timeout`.
    pub(crate) fn wait_for(
        &self,
        timeout: Duration,
        mut pred: impl FnMut(&ReplicaEvent) -> bool,
    ) -> Option<ReplicaEvent> {
        let deadline = time::deadline_after(timeout);
        let mut log = self.log.lock();
        loop {
            if let Some(e) = log.iter().find(|e| pred(e)) {
                return Some(e.clone());
            }
            match deadline {
                None => self.added.wait(&mut log),
                Some(d) => {
                    if time::expired(d) || self.added.wait_until(&mut log, d) {
                        return log.iter().find(|e| pred(e)).cloned();
                    }
                }
            }
        }
    }
}
