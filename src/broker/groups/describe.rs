//! What `kafka-consumer-groups --describe` and `--list` show: [`Broker::describe_group`]
//! and [`Broker::list_groups`].

use std::collections::BTreeSet;
use std::fmt;

use crate::broker::groups::coordinator::GroupState;
use crate::broker::groups::RebalanceProtocol;
use crate::broker::Broker;
use crate::topic_partition::TopicPartition;
use crate::Result;

/// One member of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemberDescription {
    /// The member id (`{client_id or group_instance_id}-{sequence}`).
    pub member_id: String,
    /// The consumer's client id.
    pub client_id: String,
    /// The static member id, if any.
    pub group_instance_id: Option<String>,
    /// The topics it subscribes to.
    pub topics: Vec<String>,
    /// Its partitions in the current generation.
    pub assignment: Vec<TopicPartition>,
    /// A static member whose consumer is closed (its partitions wait for it).
    pub departed: bool,
}

/// One partition of a group: who reads it and how far behind the group is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionLag {
    /// The partition.
    pub partition: TopicPartition,
    /// The member it is assigned to, if any.
    pub owner: Option<String>,
    /// The group's committed offset (the next record to read), if it committed.
    pub committed: Option<u64>,
    /// The log end offset as the group's consumers see it: the high watermark, or for a
    /// group with a read-committed consumer the last stable offset.
    pub log_end: u64,
    /// `log_end - committed`; `None` without a committed offset.
    pub lag: Option<u64>,
    /// Records past the committed offset the group can no longer read: `log_start -
    /// committed` when the log start has moved past it (overwritten after the group
    /// [expired](GroupDescription::expired), on a `DropOldest` topic, or by retention);
    /// a consumer of the group resuming there counts them as skipped. 0 otherwise.
    pub missed: u64,
}

/// A consumer group at one moment (see [`Broker::describe_group`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupDescription {
    /// The group id.
    pub group: String,
    /// Its state.
    pub state: GroupState,
    /// The assignor its members use (`range`, `cooperative-sticky`, ...), once one joined.
    pub assignor: Option<String>,
    /// Eager or cooperative.
    pub protocol: RebalanceProtocol,
    /// The current generation (0 before the first rebalance).
    pub generation: i32,
    /// Rebalances completed so far.
    pub rebalances: u64,
    /// The members, by member id.
    pub members: Vec<MemberDescription>,
    /// Every partition of the subscribed topics, and every partition with a committed
    /// offset, by topic and partition.
    pub partitions: Vec<PartitionLag>,
    /// The group has no open consumer and has had none for the broker's
    /// [`empty_group_timeout`](crate::broker::BrokerBuilder::empty_group_timeout): its
    /// gates were let go, so it no longer holds the producers of `Block` topics back (a
    /// consumer of the group assigned a partition again holds them back there again), and
    /// what it misses shows in [`PartitionLag::missed`].
    pub expired: bool,
}

impl GroupDescription {
    /// The total lag over partitions with a committed offset.
    pub fn total_lag(&self) -> u64 {
        self.partitions.iter().filter_map(|p| p.lag).sum()
    }
}

impl fmt::Display for GroupDescription {
    /// The table `kafka-consumer-groups --describe` prints.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "GROUP {}  state {}  assignor {}  generation {}",
            self.group,
            self.state,
            self.assignor.as_deref().unwrap_or("-"),
            self.generation
        )?;
        writeln!(
            f,
            "{:<16} {:>9} {:>14} {:>14} {:>8}  CONSUMER-ID",
            "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"
        )?;
        let dash = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
        for p in &self.partitions {
            writeln!(
                f,
                "{:<16} {:>9} {:>14} {:>14} {:>8}  {}",
                p.partition.topic,
                p.partition.partition,
                dash(p.committed),
                p.log_end,
                dash(p.lag),
                p.owner.as_deref().unwrap_or("-")
            )?;
        }
        Ok(())
    }
}

/// One group as [`Broker::list_groups`] shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupListing {
    /// The group id.
    pub group: String,
    /// Its state.
    pub state: GroupState,
    /// The assignor its members use, once one joined.
    pub assignor: Option<String>,
    /// Its members (static members whose consumer closed included).
    pub members: usize,
}

impl Broker {
    /// Group `name`: state, assignor, protocol, generation, members with their assignments,
    /// and per partition the owner, committed offset, log end and lag. Evicts members whose
    /// `max_poll_interval` passed first, as any group operation does.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownGroup`](crate::Error::UnknownGroup).
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::{Broker, ConsumerConfig, TopicConfig};
    /// use logbus::group::GroupState;
    ///
    /// let broker = Broker::in_memory();
    /// broker.create_topic::<(), u64>("orders", TopicConfig::new(2))?;
    /// let mut c = broker.consumer::<(), u64>(ConsumerConfig::new().group_id("billing"))?;
    /// c.subscribe(&["orders"])?;
    /// c.poll(std::time::Duration::ZERO)?;
    /// let d = broker.describe_group("billing")?;
    /// assert_eq!((d.state, d.generation, d.members.len()), (GroupState::Stable, 1, 1));
    /// assert_eq!(d.partitions.len(), 2);
    /// # Ok::<(), logbus::Error>(())
    /// ```
    pub fn describe_group(&self, name: &str) -> Result<GroupDescription> {
        self.expire_empty_groups();
        let coordinator = self.group_coordinator(name)?;
        let snap = coordinator.map(|c| c.snapshot(self, self.now_ms()));
        let mut topics: BTreeSet<String> = BTreeSet::new();
        let mut members = Vec::new();
        if let Some(s) = &snap {
            for m in &s.members {
                topics.extend(m.topics.iter().cloned());
                members.push(MemberDescription {
                    member_id: m.member_id.clone(),
                    client_id: m.client_id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    topics: m.topics.iter().cloned().collect(),
                    assignment: m.assignment.clone(),
                    departed: m.departed,
                });
            }
        }
        let mut partitions = Vec::new();
        let read_committed = self.is_read_committed_group(name);
        for topic in self.topics() {
            let Some(count) = self.partition_count(&topic) else {
                continue;
            };
            for p in 0..count {
                let tp = TopicPartition::new(topic.as_str(), p);
                let committed = self.committed(name, &tp).ok().flatten();
                if committed.is_none() && !topics.contains(&topic) {
                    continue;
                }
                let Ok(offsets) = self.offsets(&tp) else {
                    continue;
                };
                let owner = members
                    .iter()
                    .find(|m| m.assignment.contains(&tp))
                    .map(|m| m.member_id.clone());
                // A read-committed group reads to the LSO: its lag counts to there.
                let end = if read_committed {
                    offsets.last_stable_offset
                } else {
                    offsets.high_watermark
                };
                partitions.push(PartitionLag {
                    log_end: end,
                    lag: committed.map(|c| end.saturating_sub(c)),
                    missed: committed.map_or(0, |c| offsets.log_start.saturating_sub(c)),
                    partition: tp,
                    owner,
                    committed,
                });
            }
        }
        Ok(GroupDescription {
            group: name.to_owned(),
            state: snap.as_ref().map_or(GroupState::Empty, |s| s.state),
            assignor: snap.as_ref().and_then(|s| s.protocol.clone()),
            protocol: if snap.as_ref().is_some_and(|s| s.cooperative) {
                RebalanceProtocol::Cooperative
            } else {
                RebalanceProtocol::Eager
            },
            generation: snap.as_ref().map_or(0, |s| s.generation),
            rebalances: snap.as_ref().map_or(0, |s| s.rebalances),
            members,
            partitions,
            expired: self.group_expired(name),
        })
    }

    /// Every known group (a group is known from its first consumer until
    /// [`delete_group`](Broker::delete_group)), sorted by name: its state, protocol and
    /// member count (Kafka's `listGroups`).
    pub fn list_groups(&self) -> Vec<GroupListing> {
        self.group_names()
            .into_iter()
            .filter_map(|g| {
                let c = self.group_coordinator(&g).ok()?;
                let snap = c.map(|c| c.snapshot(self, self.now_ms()));
                Some(GroupListing {
                    state: snap.as_ref().map_or(GroupState::Empty, |s| s.state),
                    assignor: snap.as_ref().and_then(|s| s.protocol.clone()),
                    members: snap.as_ref().map_or(0, |s| s.members.len()),
                    group: g,
                })
            })
            .collect()
    }
}
