//! A consumer as a group member: subscribe, rejoin, take assignments, revoke, auto-commit,
//! leave. Runs on the consumer's own thread, inside `poll`, `unsubscribe` and close.

use std::collections::{BTreeSet, HashSet};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use crate::broker::groups::coordinator::{Coordinator, JoinRequest, Signal, Step};
use crate::broker::{validate_kafka_topic_name, Broker};
use crate::consumer::listener::{NoListener, RebalanceListener};
use crate::consumer::Consumer;
use crate::topic_partition::TopicPartition;
// Std's Arc (also under loom): shared with the broker's registry (see `sync::StdArc`).
use crate::sync::StdArc as Arc;
use crate::sync::WaitSet;
use crate::{Error, Result};

/// What a member subscribes to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Spec {
    Topics(BTreeSet<String>),
    Pattern(String),
}

/// A consumer's membership of its group (set while subscribed).
pub(crate) struct Membership<K, V> {
    coordinator: Arc<Coordinator>,
    member_id: String,
    /// The generation of the last assignment this member applied (0: none yet).
    generation: i32,
    spec: Spec,
    pub(crate) signal: Arc<Signal>,
    listener: Option<Box<dyn RebalanceListener<K, V>>>,
    seen_metadata: u64,
    last_commit_ms: i64,
    consumed_at_commit: u64,
    in_listener: bool,
}

impl<K, V> Membership<K, V> {
    /// Tells the coordinator whether this member's task is parked in an asynchronous poll
    /// (it then counts as polling until the group raises its signal).
    pub(crate) fn set_parked(&self, broker: &Broker, parked: bool) {
        self.coordinator
            .set_parked(&self.member_id, parked, broker.now_ms());
    }

    /// Runs `commit` if this member is in the group's current generation.
    pub(crate) fn commit<R>(
        &self,
        broker: &Broker,
        commit: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        self.coordinator.commit(
            &self.member_id,
            self.generation,
            broker,
            broker.now_ms(),
            commit,
        )
    }
}

/// Whether `name` matches `pattern`: `*` matches any run of characters (also none), `?`
/// exactly one, every other character itself.
pub(crate) fn glob_matches(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let (mut i, mut j) = (0, 0);
    // The last `*` seen and the name position it was tried at (classic backtracking glob,
    // linear in practice, quadratic at worst: topic names are at most 249 bytes, Kafka's limit).
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        if i < p.len() && (p[i] == b'?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == b'*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|c| *c == b'*')
}

fn validate_pattern(pattern: &str) -> Result<()> {
    let fail = |reason: String| {
        Err(Error::InvalidPattern {
            pattern: pattern.to_owned(),
            reason,
        })
    };
    if pattern.is_empty() {
        return fail("it is empty".into());
    }
    if let Some((i, c)) = pattern
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '*' | '?')))
    {
        return fail(format!(
            "character {c:?} at byte {i} is not allowed: topic-name characters \
             `[a-zA-Z0-9._-]`, `*` (any run) and `?` (one character)"
        ));
    }
    Ok(())
}

enum Callback {
    Revoked,
    Assigned,
    Lost,
}

/// Membership steps that need nothing of `K` and `V` (so that `Drop` can run them).
impl<K, V> Consumer<K, V> {
    /// Commits every assigned position (no generation check).
    /// Every partition that can be is committed; the first refusal is returned after.
    pub(crate) fn commit_positions(&self, group: &Arc<str>) -> Result<()> {
        let mut first = None;
        for a in &self.assigned {
            if let Some(p) = a.position {
                if a.topic.is_deleted() {
                    first.get_or_insert(Error::UnknownTopic {
                        topic: a.tp.topic.clone(),
                    });
                    continue;
                }
                let now = || self.broker.now_ms();
                // The group's state held since `assign`: no lookup by name.
                let done = match &a.group {
                    Some(slot) => a.partition.commit_slot(slot, p, now),
                    None => a.partition.commit(group, p, now()),
                };
                if let Err((start, end)) = done {
                    first.get_or_insert(Error::OffsetOutOfRange {
                        topic: Some(a.tp.topic.clone()),
                        partition: Some(a.tp.partition),
                        requested: p,
                        start,
                        end,
                    });
                }
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// The member id while subscribed (`{client_id or group_instance_id}-{sequence}`,
    /// so the assignors see members in a predictable order).
    pub fn member_id(&self) -> Option<&str> {
        self.membership.as_ref().map(|m| m.member_id.as_str())
    }

    /// The generation of the last assignment this consumer applied, while subscribed
    /// (0 until its first).
    pub fn generation(&self) -> Option<i32> {
        self.membership.as_ref().map(|m| m.generation)
    }

    fn call_listener(&mut self, which: Callback, partitions: &[TopicPartition]) {
        let Some(m) = self.membership.as_mut() else {
            return;
        };
        let Some(mut listener) = m.listener.take() else {
            return;
        };
        m.in_listener = true;
        let outcome = catch_unwind(AssertUnwindSafe(|| match which {
            Callback::Revoked => listener.on_partitions_revoked(self, partitions),
            Callback::Assigned => listener.on_partitions_assigned(self, partitions),
            Callback::Lost => listener.on_partitions_lost(self, partitions),
        }));
        if let Some(m) = self.membership.as_mut() {
            m.in_listener = false;
            if m.listener.is_none() {
                m.listener = Some(listener);
            }
        }
        // A panicking listener panics the caller's poll, as in Kafka; the consumer stays
        // usable (its listener is back, polls are allowed).
        if let Err(payload) = outcome {
            resume_unwind(payload);
        }
    }

    /// Commits all positions if auto-commit is on (failures are dropped, as Kafka's
    /// auto-commit only logs them: the group then re-reads from its last commit).
    fn auto_commit_all(&mut self) {
        if !self.config.member.enable_auto_commit {
            return;
        }
        let (Some(m), Some(group)) = (&self.membership, &self.group) else {
            return;
        };
        let _ = m.commit(&self.broker, || self.commit_positions(group));
        let now = self.broker.now_ms();
        let consumed = self.metrics.records_consumed();
        if let Some(m) = self.membership.as_mut() {
            m.last_commit_ms = now;
            m.consumed_at_commit = consumed;
        }
    }

    /// Leaves the group (close, drop, unsubscribe): commits if auto-commit is on, revokes
    /// everything through the listener, tells the coordinator.
    pub(crate) fn leave_group(&mut self) {
        if !matches!(&self.membership, Some(m) if !m.in_listener) {
            return;
        }
        self.auto_commit_all();
        let held: Vec<TopicPartition> = self.assigned.iter().map(|a| a.tp.clone()).collect();
        if !held.is_empty() {
            // As Kafka's onLeavePrepare: evicted before a poll noticed, the member no
            // longer owns what it holds, and another member may already read it.
            let evicted = self.membership.as_ref().is_some_and(|m| {
                !m.coordinator
                    .is_member(&m.member_id, &self.broker, self.broker.now_ms())
            });
            let callback = if evicted {
                Callback::Lost
            } else {
                Callback::Revoked
            };
            self.call_listener(callback, &held);
        }
        if let Some(m) = self.membership.take() {
            m.coordinator
                .leave(&m.member_id, &self.broker, self.broker.now_ms());
        }
        self.assigned.clear();
        self.next = 0;
    }
}

/// The consumer closes (dropped): leave the group.
pub(crate) fn on_close<K, V>(consumer: &mut Consumer<K, V>) {
    consumer.leave_group();
}

impl<K, V> Consumer<K, V>
where
    K: Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// Joins the consumer's group and reads the partitions the group assigns it from the
    /// given topics (Kafka's `subscribe`). Replaces an earlier subscription; an empty list
    /// unsubscribes. Topics need not exist yet: the group rebalances when they appear, and
    /// when they gain partitions. The assignment arrives in a later [`poll`](Self::poll).
    ///
    /// # Errors
    ///
    /// [`Error::NoGroupId`]; [`Error::InvalidTopicName`]; [`Error::TypeMismatch`] (a topic
    /// exists with other types); [`Error::SubscriptionConflict`] (partitions assigned by
    /// hand); [`Error::InconsistentGroupProtocol`] (the group's members use another
    /// assignor); [`Error::DuplicateInstanceId`]; [`Error::UnknownGroup`] (deleted
    /// meanwhile).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use logbus::{Broker, ConsumerConfig, OffsetReset, Record, TopicConfig};
    ///
    /// let broker = Broker::in_memory();
    /// broker.create_topic::<(), u64>("orders", TopicConfig::new(2))?;
    /// broker.producer::<(), u64>().send(Record::new("orders", 7))?;
    /// let mut consumer = broker.consumer::<(), u64>(
    ///     ConsumerConfig::new().group_id("billing").auto_offset_reset(OffsetReset::Earliest),
    /// )?;
    /// consumer.subscribe(&["orders"])?;
    /// let records = consumer.poll(Duration::from_secs(1))?; // joins, gets both partitions
    /// assert_eq!(consumer.assignment().len(), 2);
    /// assert_eq!(records.iter().map(|r| r.value).collect::<Vec<_>>(), [7]);
    /// # Ok::<(), logbus::Error>(())
    /// ```
    pub fn subscribe<S: AsRef<str>>(&mut self, topics: &[S]) -> Result<()> {
        self.subscribe_topics(topics, None)
    }

    /// [`subscribe`](Self::subscribe) with a [`RebalanceListener`].
    ///
    /// # Errors
    ///
    /// As [`subscribe`](Self::subscribe).
    pub fn subscribe_with_listener<S: AsRef<str>>(
        &mut self,
        topics: &[S],
        listener: impl RebalanceListener<K, V> + 'static,
    ) -> Result<()> {
        self.subscribe_topics(topics, Some(Box::new(listener)))
    }

    /// Subscribes to every topic, existing or created later, whose name matches `pattern`
    /// and whose types are `K` and `V` (Kafka's pattern subscription). The pattern is a
    /// glob, not a regular expression: `*` matches any run of characters, `?` one
    /// character, anything else itself (`orders-*`, `metrics.??`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPattern`] (characters other than topic-name characters, `*`, `?`),
    /// and as [`subscribe`](Self::subscribe).
    pub fn subscribe_pattern(&mut self, pattern: &str) -> Result<()> {
        self.subscribe_pattern_with_listener_inner(pattern, None)
    }

    /// [`subscribe_pattern`](Self::subscribe_pattern) with a [`RebalanceListener`].
    ///
    /// # Errors
    ///
    /// As [`subscribe_pattern`](Self::subscribe_pattern).
    pub fn subscribe_pattern_with_listener(
        &mut self,
        pattern: &str,
        listener: impl RebalanceListener<K, V> + 'static,
    ) -> Result<()> {
        self.subscribe_pattern_with_listener_inner(pattern, Some(Box::new(listener)))
    }

    /// Leaves the group (committing first if auto-commit is on; the listener's
    /// `on_partitions_revoked` runs) and drops every partition, also ones assigned by hand.
    pub fn unsubscribe(&mut self) {
        self.leave_group();
        self.assigned.clear();
        self.next = 0;
    }

    /// The topics this consumer subscribes to now (for a pattern: the matching topics).
    pub fn subscription(&self) -> Vec<String> {
        match &self.membership {
            Some(m) => self.resolve(&m.spec).into_iter().collect(),
            None => Vec::new(),
        }
    }

    fn subscribe_pattern_with_listener_inner(
        &mut self,
        pattern: &str,
        listener: Option<Box<dyn RebalanceListener<K, V>>>,
    ) -> Result<()> {
        self.group("subscribe_pattern")?;
        validate_pattern(pattern)?;
        self.set_subscription(Spec::Pattern(pattern.to_owned()), listener)
    }

    fn subscribe_topics<S: AsRef<str>>(
        &mut self,
        topics: &[S],
        listener: Option<Box<dyn RebalanceListener<K, V>>>,
    ) -> Result<()> {
        self.group("subscribe")?;
        let mut set = BTreeSet::new();
        for t in topics {
            let t = t.as_ref();
            // Kafka's rule: a topic found on disk may carry a longer name than new topics.
            validate_kafka_topic_name(t)?;
            if self.broker.partition_count(t).is_some() {
                // Checks the types (a topic of other types is refused now, not per poll).
                self.broker.topic_inner::<K, V>(t)?;
            }
            set.insert(t.to_owned());
        }
        if set.is_empty() {
            self.unsubscribe();
            return Ok(());
        }
        self.set_subscription(Spec::Topics(set), listener)
    }

    fn set_subscription(
        &mut self,
        spec: Spec,
        listener: Option<Box<dyn RebalanceListener<K, V>>>,
    ) -> Result<()> {
        if self.membership.is_none() && !self.assigned.is_empty() {
            return Err(Error::SubscriptionConflict {
                operation: "subscribe",
                current: "has partitions assigned by hand",
            });
        }
        let listener = listener.unwrap_or_else(|| Box::new(NoListener));
        let topics = self.resolve(&spec);
        if let Some(m) = self.membership.as_mut() {
            if m.in_listener {
                return Err(Error::PollInListener);
            }
            m.spec = spec;
            m.listener = Some(listener);
            m.coordinator
                .update_topics(&m.member_id, topics, &self.broker);
            return Ok(());
        }
        let group = self.group("subscribe")?;
        let coordinator = self.broker.coordinator(&group);
        let seen_metadata = self.broker.metadata_version();
        let (member_id, signal) = self.join(&coordinator, topics)?;
        self.membership = Some(Membership {
            coordinator,
            member_id,
            generation: 0,
            spec,
            signal,
            listener: Some(listener),
            seen_metadata,
            last_commit_ms: self.broker.now_ms(),
            consumed_at_commit: self.metrics.records_consumed(),
            in_listener: false,
        });
        Ok(())
    }

    fn join(
        &self,
        coordinator: &Coordinator,
        topics: BTreeSet<String>,
    ) -> Result<(String, Arc<Signal>)> {
        let default_client;
        let client_id = match self.config.client() {
            Some(c) => c,
            None => {
                default_client = format!("consumer-{}", coordinator.group);
                &default_client
            }
        };
        let member = &self.config.member;
        coordinator.join_new(
            JoinRequest {
                client_id,
                instance_id: member.group_instance_id.as_deref(),
                assignor: &member.assignor.0,
                max_poll_interval_ms: i64::try_from(member.max_poll_interval.as_millis())
                    .unwrap_or(i64::MAX),
                topics,
            },
            &self.broker,
            self.broker.now_ms(),
        )
    }

    fn resolve(&self, spec: &Spec) -> BTreeSet<String> {
        match spec {
            Spec::Topics(t) => t.clone(),
            Spec::Pattern(p) => self
                .broker
                .topics()
                .into_iter()
                .filter(|t| glob_matches(p, t) && self.broker.has_topic_of::<K, V>(t))
                .collect(),
        }
    }

    /// The group's part of a poll: rejoin, take assignments, revoke, auto-commit.
    pub(crate) fn group_poll(&mut self) -> Result<()> {
        let Some(m) = self.membership.as_mut() else {
            return Ok(());
        };
        if m.in_listener {
            return Err(Error::PollInListener);
        }
        m.signal.take();
        let version = self.broker.metadata_version();
        if version != m.seen_metadata {
            m.seen_metadata = version;
            if let Some(m) = &self.membership {
                if matches!(m.spec, Spec::Pattern(_)) {
                    let topics = self.resolve(&m.spec);
                    m.coordinator
                        .update_topics(&m.member_id, topics, &self.broker);
                }
                m.coordinator.check_metadata(&self.broker);
            }
        }
        let mut failure = None;
        // Each round is one transition; a few cover any sequence one poll can see.
        for _ in 0..8 {
            let Some(m) = &self.membership else {
                return Ok(());
            };
            let now = self.broker.now_ms();
            match m.coordinator.step(&m.member_id, &self.broker, now) {
                Step::Idle => break,
                Step::Fenced => self.fenced()?,
                Step::Rejoin { cooperative } => self.rejoin(cooperative),
                Step::Assign {
                    generation,
                    assignment,
                } => {
                    if let Err(e) = self.take_assignment(generation, assignment) {
                        failure.get_or_insert(e);
                    }
                }
            }
        }
        self.maybe_auto_commit();
        failure.map_or(Ok(()), Err)
    }

    /// Evicted: the partitions are lost; join again as a new member.
    fn fenced(&mut self) -> Result<()> {
        let lost: Vec<TopicPartition> = self.assigned.iter().map(|a| a.tp.clone()).collect();
        self.assigned.clear();
        self.next = 0;
        if !lost.is_empty() {
            self.call_listener(Callback::Lost, &lost);
        }
        let Some(m) = &self.membership else {
            return Ok(());
        };
        let coordinator = match self.broker.group_coordinator(&m.coordinator.group) {
            Ok(Some(c)) => c,
            // The group was deleted: this member cannot rejoin it.
            _ => {
                self.membership = None;
                return Err(Error::UnknownGroup {
                    group: self.group.as_deref().unwrap_or_default().to_owned(),
                });
            }
        };
        let topics = self.resolve(&m.spec);
        let (id, signal) = self.join(&coordinator, topics)?;
        if let Some(m) = self.membership.as_mut() {
            m.coordinator = coordinator;
            m.member_id = id;
            m.signal = signal;
            m.generation = 0;
        }
        Ok(())
    }

    fn rejoin(&mut self, cooperative: bool) {
        let held: Vec<TopicPartition> = self.assigned.iter().map(|a| a.tp.clone()).collect();
        if !cooperative {
            self.auto_commit_all();
            if !held.is_empty() {
                self.call_listener(Callback::Revoked, &held);
            }
            self.assigned.clear();
            self.next = 0;
        }
        if let Some(m) = &self.membership {
            let still = if cooperative {
                held.clone()
            } else {
                Vec::new()
            };
            m.coordinator
                .rejoin(&m.member_id, held, still, &self.broker);
        }
    }

    fn take_assignment(&mut self, generation: i32, assignment: Vec<TopicPartition>) -> Result<()> {
        let Some(m) = self.membership.as_mut() else {
            return Ok(());
        };
        m.generation = generation;
        let target: HashSet<&TopicPartition> = assignment.iter().collect();
        let held: HashSet<TopicPartition> = self.assigned.iter().map(|a| a.tp.clone()).collect();
        let revoked: Vec<TopicPartition> = self
            .assigned
            .iter()
            .filter(|a| !target.contains(&a.tp))
            .map(|a| a.tp.clone())
            .collect();
        let added: Vec<TopicPartition> = assignment
            .iter()
            .filter(|tp| !held.contains(*tp))
            .cloned()
            .collect();
        if !revoked.is_empty() {
            self.auto_commit_all();
            self.call_listener(Callback::Revoked, &revoked);
            let gone: HashSet<&TopicPartition> = revoked.iter().collect();
            self.assigned.retain(|a| !gone.contains(&a.tp));
            self.next = 0;
        }
        let mut failure = None;
        let mut target: Vec<TopicPartition> = self.assigned.iter().map(|a| a.tp.clone()).collect();
        target.extend(added.iter().cloned());
        let mut taken = added.clone();
        if self.assign_inner(&target).is_err() {
            // One partition is refused (its topic deleted or retyped meanwhile): take the
            // others one by one; the metadata change rebalances the group again.
            taken.clear();
            for tp in &added {
                let mut with: Vec<TopicPartition> =
                    self.assigned.iter().map(|a| a.tp.clone()).collect();
                with.push(tp.clone());
                match self.assign_inner(&with) {
                    Ok(()) => taken.push(tp.clone()),
                    Err(e @ Error::TypeMismatch { .. }) => {
                        failure.get_or_insert(e);
                    }
                    Err(_) => {}
                }
            }
        }
        self.call_listener(Callback::Assigned, &taken);
        let mut wakers: Vec<Arc<WaitSet>> = Vec::new();
        for a in &self.assigned {
            if !wakers.iter().any(|w| Arc::ptr_eq(w, &a.topic.arrivals)) {
                wakers.push(Arc::clone(&a.topic.arrivals));
            }
        }
        if let Some(m) = &self.membership {
            m.signal.set_wakers(wakers);
            let held: Vec<TopicPartition> = self.assigned.iter().map(|a| a.tp.clone()).collect();
            m.coordinator.synced(
                &m.member_id,
                generation,
                held,
                !revoked.is_empty(),
                &self.broker,
            );
        }
        failure.map_or(Ok(()), Err)
    }

    /// Auto-commit at the start of a poll: every `auto_commit_interval`, and once half of
    /// the smallest partition capacity was read since the last commit (see
    /// [`ConsumerConfig::enable_auto_commit`](crate::ConsumerConfig::enable_auto_commit)).
    fn maybe_auto_commit(&mut self) {
        let Some(m) = &self.membership else {
            return;
        };
        if !self.config.member.enable_auto_commit || self.assigned.is_empty() {
            return;
        }
        let now = self.broker.now_ms();
        let interval =
            i64::try_from(self.config.member.auto_commit_interval.as_millis()).unwrap_or(i64::MAX);
        let half = self
            .assigned
            .iter()
            .map(|a| a.partition.capacity() / 2)
            .min()
            .unwrap_or(u64::MAX)
            .max(1);
        let read = self.metrics.records_consumed() - m.consumed_at_commit;
        if now.saturating_sub(m.last_commit_ms) >= interval || read >= half {
            self.auto_commit_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob() {
        assert!(glob_matches("orders-*", "orders-eu"));
        assert!(glob_matches("orders-*", "orders-"));
        assert!(!glob_matches("orders-*", "order"));
        assert!(glob_matches("*", ""));
        assert!(glob_matches("a?c", "abc"));
        assert!(!glob_matches("a?c", "ac"));
        assert!(glob_matches("*.metrics.*", "eu.metrics.cpu"));
        assert!(!glob_matches("*.metrics.*", "eu.metric.cpu"));
        assert!(glob_matches("a*b*c", "axxbyyc"));
        assert!(!glob_matches("a*b*c", "axxbyy"));
        assert!(glob_matches("exact", "exact"));
        assert!(!glob_matches("exact", "exact2"));
    }

    #[test]
    fn patterns_are_checked() {
        assert!(validate_pattern("orders-*").is_ok());
        assert!(matches!(
            validate_pattern(""),
            Err(Error::InvalidPattern { .. })
        ));
        assert!(matches!(
            validate_pattern("orders|x"),
            Err(Error::InvalidPattern { .. })
        ));
        assert!(matches!(
            validate_pattern("a+"),
            Err(Error::InvalidPattern { .. })
        ));
    }
}
