//! A consumer's group-membership settings (Kafka's consumer configs of the same names).

use std::fmt;
use std::time::Duration;

use crate::broker::groups::{PartitionAssignor, RangeAssignor};
use crate::consumer::ConsumerConfig;
// Std's Arc: assignors are `dyn` (see `sync::StdArc`).
use crate::sync::StdArc as Arc;
use crate::{Error, Result};

/// Kafka's `max.poll.interval.ms` default: 5 minutes.
pub const DEFAULT_MAX_POLL_INTERVAL: Duration = Duration::from_secs(300);
/// Kafka's `auto.commit.interval.ms` default: 5 seconds.
pub const DEFAULT_AUTO_COMMIT_INTERVAL: Duration = Duration::from_secs(5);

/// The assignor a consumer proposes, compared by [name](PartitionAssignor::name).
#[derive(Clone)]
pub(crate) struct AssignorChoice(pub(crate) Arc<dyn PartitionAssignor>);

impl fmt::Debug for AssignorChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name())
    }
}

impl PartialEq for AssignorChoice {
    fn eq(&self, other: &Self) -> bool {
        self.0.name() == other.0.name()
    }
}

impl Eq for AssignorChoice {}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemberConfig {
    pub(crate) group_instance_id: Option<String>,
    pub(crate) assignor: AssignorChoice,
    pub(crate) max_poll_interval: Duration,
    pub(crate) enable_auto_commit: bool,
    pub(crate) auto_commit_interval: Duration,
}

impl Default for MemberConfig {
    fn default() -> Self {
        Self {
            group_instance_id: None,
            assignor: AssignorChoice(Arc::new(RangeAssignor)),
            max_poll_interval: DEFAULT_MAX_POLL_INTERVAL,
            enable_auto_commit: true,
            auto_commit_interval: DEFAULT_AUTO_COMMIT_INTERVAL,
        }
    }
}

impl MemberConfig {
    pub(crate) fn validate(&self) -> Result<()> {
        if self.max_poll_interval < Duration::from_millis(1)
            || self.max_poll_interval.as_millis() > i64::MAX as u128
        {
            return Err(Error::InvalidConfig {
                name: "max_poll_interval",
                value: format!("{:?}", self.max_poll_interval),
                valid: "at least 1 ms".into(),
            });
        }
        if self.auto_commit_interval.as_millis() > i64::MAX as u128 {
            return Err(Error::InvalidConfig {
                name: "auto_commit_interval",
                value: format!("{:?}", self.auto_commit_interval),
                valid: "at most i64::MAX ms".into(),
            });
        }
        check_name_not_empty(
            "group_instance_id",
            self.group_instance_id.as_deref(),
            "no instance id",
        )
    }
}

/// A name that may be left out (`absent` says what that means) but not given empty.
pub(crate) fn check_name_not_empty(
    name: &'static str,
    value: Option<&str>,
    absent: &str,
) -> Result<()> {
    match value {
        Some("") => Err(Error::InvalidConfig {
            name,
            value: "\"\"".into(),
            valid: format!("a non-empty name (or {absent})"),
        }),
        _ => Ok(()),
    }
}

/// Group membership: used once the consumer [subscribes](crate::Consumer::subscribe).
impl ConsumerConfig {
    /// Makes the consumer a *static* member (Kafka's `group.instance.id`): closing it does
    /// not rebalance the group; its partitions wait for a consumer with the same instance
    /// id for up to `max_poll_interval`, which gets the same assignment back. The range and
    /// round-robin assignors order static members first, by instance id.
    pub fn group_instance_id(mut self, id: impl Into<String>) -> Self {
        self.member.group_instance_id = Some(id.into());
        self
    }

    /// The assignor this consumer proposes (Kafka's `partition.assignment.strategy`):
    /// [`RangeAssignor`] by default. The group uses the assignor of its first member; a
    /// consumer proposing another one while the group has members is refused
    /// ([`Error::InconsistentGroupProtocol`]). An assignor whose first
    /// [supported protocol](PartitionAssignor::supported_protocols) is cooperative makes
    /// the group rebalance incrementally.
    pub fn assignor(mut self, assignor: impl PartitionAssignor + 'static) -> Self {
        self.member.assignor = AssignorChoice(Arc::new(assignor));
        self
    }

    /// A member that does not poll within this interval (on the broker's clock) is evicted
    /// and its partitions reassigned (Kafka's `max.poll.interval.ms`, default 5 minutes;
    /// also the rebalance timeout and, for static members, the session timeout).
    pub fn max_poll_interval(mut self, interval: Duration) -> Self {
        self.member.max_poll_interval = interval;
        self
    }

    /// Whether a subscribed consumer commits its positions by itself (Kafka's
    /// `enable.auto.commit`, default on): at the start of a `poll` once
    /// `auto_commit_interval` has passed, before its partitions are revoked, and on close.
    /// It also commits at the start of a `poll` once it has read half of the smallest
    /// in-memory capacity of its partitions since its last commit, so producers of
    /// [`Overflow::Block`](crate::Overflow::Block) topics, which wait on the group's
    /// committed offsets, never wait for the interval.
    pub fn enable_auto_commit(mut self, on: bool) -> Self {
        self.member.enable_auto_commit = on;
        self
    }

    /// See [`enable_auto_commit`](Self::enable_auto_commit) (Kafka's
    /// `auto.commit.interval.ms`, default 5 s).
    pub fn auto_commit_interval(mut self, interval: Duration) -> Self {
        self.member.auto_commit_interval = interval;
        self
    }

    /// The static member id, if any.
    pub fn instance_id(&self) -> Option<&str> {
        self.member.group_instance_id.as_deref()
    }

    /// The name of the assignor this consumer proposes.
    pub fn assignor_name(&self) -> &str {
        self.member.assignor.0.name()
    }
}
