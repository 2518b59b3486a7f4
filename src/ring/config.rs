//! How a ring is shaped: capacity, what happens when it is full, where its sequences start.

use super::slot::MAX_START;
use crate::Error;

/// What a producer does when the slot it needs still holds an entry a reader has not read:
/// when it would lap the slowest reader, a full ring behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LapPolicy {
    /// Producers wait for *gating* readers (yield, then park): no entry a gating reader
    /// has not passed is ever overwritten. Non-gating readers never hold producers back; when
    /// they fall a full lap behind they are told how much they missed.
    #[default]
    Block,
    /// Producers never wait for readers: the oldest entry is overwritten, and a reader that
    /// falls behind gets [`TryReadError::Lagged`](super::TryReadError::Lagged) with the exact
    /// count it missed. Gating readers cannot be created on such a ring. (The same word as
    /// topics' and the observer's `DropOldest`.)
    DropOldest,
}

impl LapPolicy {
    /// The old name of [`LapPolicy::DropOldest`] (usable in expressions and patterns).
    #[deprecated(note = "renamed `LapPolicy::DropOldest`, as topics and the observer call it")]
    #[allow(non_upper_case_globals)]
    pub const Overwrite: LapPolicy = LapPolicy::DropOldest;
}

/// The configuration of a ring.
///
/// # Examples
///
/// ```
/// use logbus::ring::{LapPolicy, RingConfig};
///
/// let config = RingConfig::new(1024).overflow(LapPolicy::DropOldest).start_sequence(5000);
/// assert_eq!(config.capacity(), 1024);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingConfig {
    pub(crate) capacity: usize,
    pub(crate) overflow: LapPolicy,
    pub(crate) start: u64,
}

impl RingConfig {
    /// A ring of `capacity` slots (a power of two, at least 2), in [`LapPolicy::Block`] mode,
    /// starting at sequence 0. The capacity is checked when the ring is built.
    pub const fn new(capacity: usize) -> Self {
        Self {
            capacity,
            overflow: LapPolicy::Block,
            start: 0,
        }
    }

    /// What producers do when the ring is full.
    pub const fn overflow(mut self, overflow: LapPolicy) -> Self {
        self.overflow = overflow;
        self
    }

    /// The first sequence the ring hands out (e.g. a partition's log end after recovery).
    /// At most 2^55.
    pub const fn start_sequence(mut self, start: u64) -> Self {
        self.start = start;
        self
    }

    /// The configured capacity.
    pub const fn capacity(&self) -> usize {
        self.capacity
    }

    /// Checks the configuration.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        if self.capacity < 2 || !self.capacity.is_power_of_two() || self.capacity > 1 << 32 {
            return Err(Error::InvalidConfig {
                name: "capacity",
                value: self.capacity.to_string(),
                valid: "a power of two from 2 to 2^32".into(),
            });
        }
        if self.start > MAX_START {
            return Err(Error::InvalidConfig {
                name: "start_sequence",
                value: self.start.to_string(),
                valid: format!("0..={MAX_START}"),
            });
        }
        Ok(())
    }
}
