//! Consumer groups as the broker keeps them: which groups exist and how many consumers
//! each has open, their committed offsets, the expiry of empty groups, deletion; the group
//! coordinator of each group (`coordinator.rs`), the assignors it runs (`assignor/`), and
//! what `describe_group` and `list_groups` report (`describe.rs`). The public names are
//! re-exported by [`crate::group`].

use std::time::Duration;

use super::builder::millis;
use super::{Broker, TopicPartition};
use crate::partition::GateExpiry;
use crate::sync::atomic::Ordering;
// Std's Arc (also under loom): the broker shares unsized values (see `sync::StdArc`).
use crate::sync::StdArc as Arc;
use crate::{Error, Result};

pub(crate) mod assignor;
pub(crate) mod coordinator;
mod describe;

pub use assignor::{
    CooperativeStickyAssignor, MemberSubscription, PartitionAssignor, RangeAssignor,
    RebalanceProtocol, RoundRobinAssignor, StickyAssignor,
};
pub use coordinator::GroupState;
pub use describe::{GroupDescription, GroupListing, MemberDescription, PartitionLag};

/// What the broker keeps of one consumer group.
#[derive(Debug, Default)]
pub(super) struct GroupEntry {
    /// Open consumers with this group id.
    open: usize,
    /// Broker clock time at which the last open consumer closed (`None` while one is open).
    empty_since_ms: Option<i64>,
    /// Empty for longer than the broker's `empty_group_timeout`: its gates were let go.
    expired: bool,
    /// Membership and rebalancing, once a consumer of the group subscribed.
    coordinator: Option<Arc<coordinator::Coordinator>>,
}

impl Broker {
    /// The names of the consumer groups known, sorted ([`list_groups`](Self::list_groups)
    /// is the public listing).
    pub(crate) fn group_names(&self) -> Vec<String> {
        let mut names: Vec<_> = self.inner.groups.lock().keys().cloned().collect();
        names.sort();
        names
    }

    /// Deletes consumer group `name`: its committed offsets go, and it stops holding the
    /// producers of `Block` topics back.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownGroup`]; [`Error::GroupNotEmpty`] while a consumer of the group is
    /// open.
    pub fn delete_group(&self, name: &str) -> Result<()> {
        {
            let mut groups = self.inner.groups.lock();
            match groups.get(name) {
                None => {
                    return Err(Error::UnknownGroup {
                        group: name.to_owned(),
                    })
                }
                Some(g) if g.open > 0 => {
                    return Err(Error::GroupNotEmpty {
                        group: name.to_owned(),
                        members: g.open,
                    })
                }
                Some(_) => {
                    if let Some(c) = groups.remove(name).and_then(|g| g.coordinator) {
                        c.kill();
                    }
                }
            }
        }
        let admins: Vec<_> = self
            .inner
            .topics
            .lock()
            .values()
            .map(|s| Arc::clone(&s.admin))
            .collect();
        for admin in admins {
            admin.remove_group(name);
        }
        Ok(())
    }

    /// A consumer opened with `group`.
    pub(crate) fn join_group(&self, group: &str) {
        let mut groups = self.inner.groups.lock();
        let g = groups.entry(group.to_owned()).or_default();
        g.open += 1;
        g.empty_since_ms = None;
        // Its gates come back as its consumers are assigned partitions.
        g.expired = false;
    }

    /// Sets [`BrokerBuilder::empty_group_timeout`].
    pub(crate) fn set_empty_group_timeout(&self, timeout: Duration) {
        // Relaxed: a setting read on its own; nothing else is published with it.
        self.inner
            .empty_group_timeout_ms
            .store(millis(timeout), Ordering::Relaxed);
    }

    /// Lets go of the gates of every group that has had no open consumer for the broker's
    /// `empty_group_timeout` (its committed offsets stay). Called by producers waiting for
    /// room on a gated partition, and by the describe calls. The groups' lock is held
    /// while the gates go, so a consumer of the group opening meanwhile finds them gone
    /// and registers again.
    pub(crate) fn expire_empty_groups(&self) {
        // Relaxed: see `set_empty_group_timeout`.
        let timeout = self.inner.empty_group_timeout_ms.load(Ordering::Relaxed);
        let timeout = i64::try_from(timeout).unwrap_or(i64::MAX);
        let mut groups = self.inner.groups.lock();
        let mut now = None;
        let mut expired = Vec::new();
        for (name, g) in groups.iter_mut() {
            if g.open > 0 || g.expired {
                continue;
            }
            let now = *now.get_or_insert_with(|| self.now_ms());
            let since = *g.empty_since_ms.get_or_insert(now);
            if now.saturating_sub(since) >= timeout {
                g.expired = true;
                expired.push(name.clone());
            }
        }
        if expired.is_empty() {
            return;
        }
        let admins: Vec<_> = self
            .inner
            .topics
            .lock()
            .values()
            .map(|t| Arc::clone(&t.admin))
            .collect();
        for name in &expired {
            for admin in &admins {
                admin.release_group(name);
            }
        }
        drop(groups);
    }

    /// Whether `group` was let go for having been empty too long (see
    /// [`expire_empty_groups`](Self::expire_empty_groups)).
    pub(crate) fn group_expired(&self, group: &str) -> bool {
        self.inner
            .groups
            .lock()
            .get(group)
            .is_some_and(|g| g.expired)
    }

    /// The hook gated partitions call while a producer waits for room.
    pub(super) fn gate_expiry(&self) -> GateExpiry {
        let broker = Arc::downgrade(&self.inner);
        Arc::new(move || {
            if let Some(inner) = broker.upgrade() {
                Broker::internal(inner).expire_empty_groups();
            }
        })
    }

    /// The coordinator of `group` (created on first use).
    pub(crate) fn coordinator(&self, group: &str) -> Arc<coordinator::Coordinator> {
        let mut groups = self.inner.groups.lock();
        let g = groups.entry(group.to_owned()).or_default();
        Arc::clone(
            g.coordinator
                .get_or_insert_with(|| Arc::new(coordinator::Coordinator::new(group))),
        )
    }

    /// The coordinator of `group`, if the group exists and has one; `Err` if unknown.
    pub(crate) fn group_coordinator(
        &self,
        group: &str,
    ) -> Result<Option<Arc<coordinator::Coordinator>>> {
        match self.inner.groups.lock().get(group) {
            None => Err(Error::UnknownGroup {
                group: group.to_owned(),
            }),
            Some(g) => Ok(g.coordinator.clone()),
        }
    }

    /// A consumer of `group` closed.
    pub(crate) fn leave_group(&self, group: &str) {
        let mut groups = self.inner.groups.lock();
        if let Some(g) = groups.get_mut(group) {
            g.open = g.open.saturating_sub(1);
            if g.open == 0 {
                g.empty_since_ms = Some(self.now_ms());
            }
        }
    }

    pub(crate) fn commit(&self, group: &Arc<str>, tp: &TopicPartition, offset: u64) -> Result<()> {
        self.slot(&tp.topic)?
            .admin
            .commit(group, tp.partition, offset, self.now_ms())
    }

    pub(crate) fn committed(&self, group: &str, tp: &TopicPartition) -> Result<Option<u64>> {
        self.slot(&tp.topic)?.admin.committed(group, tp.partition)
    }
}

impl coordinator::Metadata for Broker {
    fn partition_count(&self, topic: &str) -> Option<u32> {
        Broker::partition_count(self, topic)
    }
}
