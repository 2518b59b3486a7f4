//! How a consumer is set up (Kafka's consumer configs).

use crate::partition::IsolationLevel;
use crate::{Error, Result};

/// Where a consumer starts when its group has no committed offset, and where it goes when
/// its position is out of range (Kafka's `auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OffsetReset {
    /// The log start.
    Earliest,
    /// The log end (Kafka's default).
    #[default]
    Latest,
    /// Neither: fail with a typed error and keep the position for the user to seek.
    None,
}

/// How a consumer is set up (Kafka's consumer configs of the same names).
///
/// # Examples
///
/// ```
/// use logbus::consumer::{ConsumerConfig, OffsetReset};
///
/// let config = ConsumerConfig::new()
///     .group_id("billing")
///     .client_id("billing-1")
///     .auto_offset_reset(OffsetReset::Earliest)
///     .max_poll_records(1000);
/// assert_eq!(config.group(), Some("billing"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerConfig {
    pub(super) group_id: Option<String>,
    pub(super) client_id: Option<String>,
    pub(crate) auto_offset_reset: OffsetReset,
    pub(super) max_poll_records: usize,
    pub(crate) isolation_level: IsolationLevel,
    /// Group membership settings (`crate::consumer::group_config`).
    pub(crate) member: crate::consumer::group_config::MemberConfig,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl ConsumerConfig {
    /// No group, no client id, `Latest`, at most 500 records per poll (Kafka's defaults).
    pub fn new() -> Self {
        Self {
            group_id: None,
            client_id: None,
            auto_offset_reset: OffsetReset::Latest,
            max_poll_records: 500,
            isolation_level: IsolationLevel::ReadUncommitted,
            member: crate::consumer::group_config::MemberConfig::default(),
        }
    }

    /// Which records polls return (Kafka's `isolation.level`):
    /// [`IsolationLevel::ReadUncommitted`] (the default, as Kafka's) returns every record
    /// below the high watermark, those of open and aborted transactions too;
    /// [`IsolationLevel::ReadCommitted`] returns records below the last stable offset only,
    /// without those of aborted transactions. Neither returns control records
    /// (transaction markers), whose offsets are gaps for consumers.
    pub fn isolation_level(mut self, level: IsolationLevel) -> Self {
        self.isolation_level = level;
        self
    }

    /// The consumer group whose committed offsets this consumer uses.
    pub fn group_id(mut self, group: impl Into<String>) -> Self {
        self.group_id = Some(group.into());
        self
    }

    /// A name for this consumer (for messages and metrics).
    pub fn client_id(mut self, id: impl Into<String>) -> Self {
        self.client_id = Some(id.into());
        self
    }

    /// See [`OffsetReset`].
    pub fn auto_offset_reset(mut self, reset: OffsetReset) -> Self {
        self.auto_offset_reset = reset;
        self
    }

    /// The most records one [`Consumer::poll`](super::Consumer::poll) returns (at least 1).
    pub fn max_poll_records(mut self, max: usize) -> Self {
        self.max_poll_records = max;
        self
    }

    /// The group id, if any.
    pub fn group(&self) -> Option<&str> {
        self.group_id.as_deref()
    }

    /// The most records one poll returns.
    pub fn poll_records(&self) -> usize {
        self.max_poll_records
    }

    /// The client id, if any.
    pub fn client(&self) -> Option<&str> {
        self.client_id.as_deref()
    }

    pub(super) fn validate(&self) -> Result<()> {
        self.member.validate()?;
        if self.max_poll_records == 0 {
            return Err(Error::InvalidConfig {
                name: "max_poll_records",
                value: "0".into(),
                valid: "at least 1".into(),
            });
        }
        crate::consumer::group_config::check_name_not_empty(
            "group_id",
            self.group_id.as_deref(),
            "no group id",
        )
    }
}
