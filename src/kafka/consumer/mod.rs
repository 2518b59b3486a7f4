//! The consumer: logbus's assign / subscribe / poll / commit / seek over librdkafka's.

use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer as _, ConsumerContext, RebalanceProtocol,
};
use rdkafka::error::RDKafkaErrorCode as Code;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::ClientContext;

mod poll;
mod queue;
mod seek;

use super::broker::{config_error, KafkaBroker};
use super::error::{from_code, from_kafka, At};
use crate::codec::Codec;
use crate::consumer::{ConsumerConfig, ConsumerMetrics, IsolationLevel, OffsetReset};
use crate::error::{Error, Result};
use crate::sync::Mutex;
use crate::TopicPartition;

/// Called by a subscribed [`KafkaConsumer`] when its partitions change, on the consumer's
/// own thread inside its `poll`: [`RebalanceListener`](crate::group::RebalanceListener)
/// with the Kafka consumer in place of the in-process one, and the same order (eager
/// protocols revoke everything first; cooperative-sticky only what moves).
/// `on_partitions_revoked` runs before librdkafka lets the partitions go: commit there.
pub trait KafkaRebalanceListener<K, V>: Send {
    /// `partitions` are about to be taken from this consumer.
    fn on_partitions_revoked(
        &mut self,
        consumer: &mut KafkaConsumer<K, V>,
        partitions: &[TopicPartition],
    ) {
        let _ = (consumer, partitions);
    }

    /// `partitions` were given to this consumer (positions: the group's committed offsets,
    /// else `auto_offset_reset`); seek here to start elsewhere.
    fn on_partitions_assigned(
        &mut self,
        consumer: &mut KafkaConsumer<K, V>,
        partitions: &[TopicPartition],
    ) {
        let _ = (consumer, partitions);
    }

    /// `partitions` were taken without a revocation (the member was evicted).
    fn on_partitions_lost(
        &mut self,
        consumer: &mut KafkaConsumer<K, V>,
        partitions: &[TopicPartition],
    ) {
        self.on_partitions_revoked(consumer, partitions);
    }
}

struct NoListener;
impl<K, V> KafkaRebalanceListener<K, V> for NoListener {}

/// A rebalance librdkafka announced, handled in `poll` with the consumer at hand.
enum Event {
    Assign(TopicPartitionList),
    Revoke(TopicPartitionList),
    Failed(Code),
}

#[derive(Default)]
struct ContextState {
    events: Vec<Event>,
    /// Set when the consumer is dropped: librdkafka's close then rebalances with nobody
    /// left to call `assign`, so the context does it.
    closing: bool,
}

/// Queues librdkafka's rebalances for `poll` (which runs the listener first, then lets the
/// partitions go: librdkafka waits for that call).
#[derive(Default)]
pub(crate) struct GroupContext {
    state: Mutex<ContextState>,
}

impl ClientContext for GroupContext {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = false;

    fn log(&self, _level: RDKafkaLogLevel, _fac: &str, _log_message: &str) {
        // Faults injected in tests make librdkafka log every reconnect; errors reach the
        // caller as typed errors instead.
    }
}

impl ConsumerContext for GroupContext {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let mut state = self.state.lock();
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        if state.closing {
            let _ = match (err, cooperative) {
                (RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS, true) => {
                    consumer.incremental_assign(tpl)
                }
                (RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS, false) => {
                    consumer.assign(tpl)
                }
                (_, true) => consumer.incremental_unassign(tpl),
                (_, false) => consumer.unassign(),
            };
            return;
        }
        state.events.push(match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => Event::Assign(tpl.clone()),
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => Event::Revoke(tpl.clone()),
            other => Event::Failed(other.into()),
        });
    }
}

/// One assigned partition: where this consumer reads next.
struct Assigned {
    tp: TopicPartition,
    /// `None`: no committed offset under [`OffsetReset::None`].
    position: Option<u64>,
    paused: bool,
    /// `position` moved past records `poll` handed out since it was last given to the
    /// client's offset store (what auto-commit commits).
    unstored: bool,
}

/// Reads a Kafka cluster's partitions, as [`Consumer`](crate::Consumer) reads in-process
/// ones: the same methods, records, errors and positions. `Send`, not `Sync`.
///
/// The consumer keeps the positions itself (a new partition starts at the group's
/// committed offset, else per `auto_offset_reset`, resolved when it is assigned), so
/// `position`, `commit_sync` and a seek mean exactly what they mean in process.
///
/// No async face yet: [`Consumer::poll_async`](crate::Consumer::poll_async) and
/// [`Consumer::stream`](crate::Consumer::stream) are in-process only; here `poll` blocks its
/// thread up to its timeout (from a task, poll with a zero timeout between your own
/// waits, or from your runtime's blocking pool).
pub struct KafkaConsumer<K, V> {
    broker: KafkaBroker,
    /// Where fetched messages are taken from in batches. Declared before `client`: its
    /// queues are destroyed before the client is.
    fetched: Option<queue::Fetched>,
    client: BaseConsumer<GroupContext>,
    config: ConsumerConfig,
    assigned: Vec<Assigned>,
    subscription: Vec<String>,
    listener: Option<Box<dyn KafkaRebalanceListener<K, V>>>,
    in_listener: bool,
    /// An error met after records were read: reported by the next poll.
    pending: Option<Error>,
    metrics: ConsumerMetrics,
    /// Reads one record's timestamp for `offsets_for_times` (made on first use).
    probe: Option<BaseConsumer>,
    /// Auto-commit is on: each poll gives the positions it moved to the offset store.
    store_positions: bool,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> fmt::Debug for KafkaConsumer<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaConsumer")
            .field("config", &self.config)
            .field("assignment", &self.assignment_list())
            .finish_non_exhaustive()
    }
}

impl KafkaBroker {
    /// A consumer with `config` (see the [module docs](super) for how its settings map
    /// onto the client's).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] (`max_poll_records` of 0, an empty group id, an assignor
    /// librdkafka does not have, a setting librdkafka refuses).
    pub fn consumer<K, V>(&self, config: ConsumerConfig) -> Result<KafkaConsumer<K, V>>
    where
        K: Codec + Clone + Send + Sync + 'static,
        V: Codec + Clone + Send + Sync + 'static,
    {
        let c = self.consumer_client_config(&config)?;
        let auto_commit = config.member.enable_auto_commit && config.group().is_some();
        let client = c
            .create_with_context::<_, BaseConsumer<GroupContext>>(GroupContext::default())
            .map_err(|e| config_error(e).unwrap_or_else(|e| from_kafka(e, At::op("consumer"))))?;
        Ok(KafkaConsumer {
            broker: self.clone(),
            fetched: queue::Fetched::new(&client),
            client,
            config,
            assigned: Vec::new(),
            subscription: Vec::new(),
            listener: None,
            in_listener: false,
            pending: None,
            metrics: ConsumerMetrics::default(),
            probe: None,
            store_positions: auto_commit,
            _types: PhantomData,
        })
    }

    /// The client settings of a consumer with `config`.
    fn consumer_client_config(&self, config: &ConsumerConfig) -> Result<ClientConfig> {
        if config.poll_records() == 0 {
            return Err(Error::InvalidConfig {
                name: "max_poll_records",
                value: "0".into(),
                valid: "at least 1".into(),
            });
        }
        let mut c = self.inner.config.client(false);
        if let Some(g) = config.group() {
            if g.is_empty() {
                return Err(Error::InvalidConfig {
                    name: "group_id",
                    value: "\"\"".into(),
                    valid: "a non-empty name (or no group id)".into(),
                });
            }
            c.set("group.id", g);
        } else {
            // librdkafka assigns partitions only with a group id: a private one, never
            // committed to (commits without a group are refused before reaching it).
            c.set("group.id", private_group());
        }
        if let Some(id) = config.client() {
            c.set("client.id", id);
        }
        let member = &config.member;
        let auto_commit = member.enable_auto_commit && config.group().is_some();
        c.set(
            "partition.assignment.strategy",
            strategy(member.assignor.0.name())?,
        );
        c.set("enable.auto.commit", auto_commit.to_string());
        // librdkafka's own store takes every message the client hands over, including
        // those a poll drops (the rest of a batch an error cut short, a paused partition's):
        // auto-commit then commits past records the application never got. The poll stores
        // the positions of what it handed out instead, as Kafka's consumer commits
        // positions.
        c.set("enable.auto.offset.store", "false");
        c.set(
            "auto.commit.interval.ms",
            member.auto_commit_interval.as_millis().to_string(),
        );
        let max_poll = member.max_poll_interval.as_millis();
        c.set("max.poll.interval.ms", max_poll.to_string());
        // librdkafka requires the session timeout not to exceed the poll interval.
        let session = self
            .inner
            .config
            .get("session.timeout.ms")
            .and_then(|v| v.parse::<u128>().ok())
            .unwrap_or(45_000);
        if session > max_poll {
            c.set("session.timeout.ms", max_poll.max(1).to_string());
        }
        if let Some(id) = &member.group_instance_id {
            c.set("group.instance.id", id);
        }
        c.set(
            "auto.offset.reset",
            match config.auto_offset_reset {
                OffsetReset::Earliest => "earliest",
                OffsetReset::Latest => "latest",
                OffsetReset::None => "error",
            },
        );
        c.set("enable.partition.eof", "false");
        // Set always: librdkafka's own default is read_committed, Kafka's (and logbus's)
        // read_uncommitted.
        c.set(
            "isolation.level",
            match config.isolation_level {
                IsolationLevel::ReadUncommitted => "read_uncommitted",
                IsolationLevel::ReadCommitted => "read_committed",
            },
        );
        Ok(c)
    }
}

impl<K, V> KafkaConsumer<K, V> {
    fn assignment_list(&self) -> Vec<TopicPartition> {
        self.assigned.iter().map(|a| a.tp.clone()).collect()
    }
}

/// A group id no one else uses, for a consumer without one.
fn private_group() -> String {
    use std::hash::{BuildHasher, Hasher};
    // std's per-instance random keys: no RNG dependency outside `test-util`.
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    format!("logbus-private-{random:016x}")
}

/// librdkafka's name for logbus's assignor `name`.
fn strategy(name: &str) -> Result<&'static str> {
    match name {
        "range" => Ok("range"),
        "roundrobin" => Ok("roundrobin"),
        "cooperative-sticky" => Ok("cooperative-sticky"),
        other => Err(Error::InvalidConfig {
            name: "assignor",
            value: other.to_owned(),
            valid: "range, roundrobin or cooperative-sticky (the assignors librdkafka has)".into(),
        }),
    }
}

/// A logbus glob (`*`, `?`) as the regular expression librdkafka subscribes with.
fn glob_to_regex(pattern: &str) -> String {
    let mut re = String::from("^");
    for c in pattern.chars() {
        match c {
            '*' => re.push_str(".*"),
            '?' => re.push('.'),
            c if c.is_ascii_alphanumeric() || c == '_' || c == '-' => re.push(c),
            c => {
                re.push('\\');
                re.push(c);
            }
        }
    }
    re.push('$');
    re
}

fn tp_list(tps: &[TopicPartition]) -> TopicPartitionList {
    let mut l = TopicPartitionList::with_capacity(tps.len());
    for tp in tps {
        l.add_partition(&tp.topic, tp.partition as i32);
    }
    l
}

fn tps_of(list: &TopicPartitionList) -> Vec<TopicPartition> {
    let mut v: Vec<TopicPartition> = list
        .elements()
        .iter()
        .map(|e| TopicPartition::new(e.topic().to_owned(), e.partition().max(0) as u32))
        .collect();
    v.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    v
}

impl<K, V> KafkaConsumer<K, V>
where
    K: Codec + Clone + Send + Sync + 'static,
    V: Codec + Clone + Send + Sync + 'static,
{
    fn timeout(&self) -> Duration {
        self.broker.inner.config.timeout()
    }

    fn at<'a>(&self, op: &'static str, tp: &'a TopicPartition) -> At<'a> {
        At::op(op)
            .topic(&tp.topic)
            .partition(tp.partition)
            .timeout(self.timeout())
    }

    fn group(&self, operation: &'static str) -> Result<&str> {
        self.config.group().ok_or(Error::NoGroupId { operation })
    }

    fn index(&self, tp: &TopicPartition) -> Result<usize> {
        self.assigned
            .iter()
            .position(|a| a.tp == *tp)
            .ok_or_else(|| Error::NotAssigned {
                topic: tp.topic.clone(),
                partition: tp.partition,
            })
    }

    /// Checks that every partition of `tps` exists on the cluster: one metadata request
    /// per topic, not per partition.
    fn check_partitions(&self, tps: &[TopicPartition]) -> Result<()> {
        let mut counts: Vec<(&str, u32)> = Vec::new();
        for tp in tps {
            let count = match counts.iter().find(|(t, _)| *t == tp.topic) {
                Some(&(_, c)) => c,
                None => {
                    let c = self.broker.partition_count(&tp.topic)?;
                    counts.push((&tp.topic, c));
                    c
                }
            };
            if tp.partition >= count {
                return Err(Error::PartitionOutOfRange {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    count,
                });
            }
        }
        Ok(())
    }

    /// Checks that `tp` exists on the cluster.
    fn check_partition(&self, tp: &TopicPartition) -> Result<()> {
        self.check_partitions(std::slice::from_ref(tp))
    }

    /// Where a newly assigned partition starts: the group's committed offset, else per
    /// `auto_offset_reset` (`None`: no position under `OffsetReset::None`).
    fn start_positions(&self, tps: &[TopicPartition]) -> Result<Vec<Option<u64>>> {
        let committed = match self.config.group() {
            Some(_) if !tps.is_empty() => {
                let list = self
                    .client
                    .committed_offsets(tp_list(tps), self.timeout())
                    .map_err(|e| from_kafka(e, At::op("committed").timeout(self.timeout())))?;
                list.to_topic_map()
            }
            _ => HashMap::new(),
        };
        tps.iter()
            .map(|tp| {
                if let Some(Offset::Offset(o)) =
                    committed.get(&(tp.topic.clone(), tp.partition as i32))
                {
                    return Ok(Some(*o as u64));
                }
                match self.config.auto_offset_reset {
                    OffsetReset::None => Ok(None),
                    reset => {
                        let (low, high) = self.broker.watermarks(tp)?;
                        Ok(Some(if reset == OffsetReset::Earliest {
                            low
                        } else {
                            high
                        }))
                    }
                }
            })
            .collect()
    }

    /// The client's assignment list for `assigned` entries.
    fn client_list<'a>(entries: impl Iterator<Item = &'a Assigned>) -> TopicPartitionList {
        let mut l = TopicPartitionList::new();
        for a in entries {
            let offset = match a.position {
                Some(p) => Offset::Offset(p as i64),
                None => Offset::Stored,
            };
            let _ = l.add_partition_offset(&a.tp.topic, a.tp.partition as i32, offset);
        }
        l
    }

    /// Reads exactly `partitions` from now on; positions of partitions that stay assigned
    /// are kept, new ones start at the group's committed offset, else per
    /// `auto_offset_reset`.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`], [`Error::PartitionOutOfRange`],
    /// [`Error::SubscriptionConflict`] while subscribed; [`Error::Kafka`] /
    /// [`Error::Timeout`].
    pub fn assign(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        if !self.subscription.is_empty() {
            return Err(Error::SubscriptionConflict {
                operation: "assign",
                current: "is subscribed",
            });
        }
        self.check_partitions(partitions)?;
        let new: Vec<TopicPartition> = partitions
            .iter()
            .filter(|tp| !self.assigned.iter().any(|a| a.tp == **tp))
            .cloned()
            .collect();
        let starts = self.start_positions(&new)?;
        let mut next: Vec<Assigned> = Vec::with_capacity(partitions.len());
        for tp in partitions {
            if next.iter().any(|a| a.tp == *tp) {
                continue;
            }
            if let Some(i) = self.assigned.iter().position(|a| a.tp == *tp) {
                let old = &self.assigned[i];
                next.push(Assigned {
                    tp: tp.clone(),
                    position: old.position,
                    paused: old.paused,
                    unstored: old.unstored,
                });
            } else {
                let at = new.iter().position(|n| n == tp).unwrap_or(0);
                next.push(Assigned {
                    tp: tp.clone(),
                    position: starts.get(at).copied().flatten(),
                    paused: false,
                    unstored: false,
                });
            }
        }
        self.forward(next.iter().map(|a| &a.tp));
        self.client
            .assign(&Self::client_list(next.iter()))
            .map_err(|e| from_kafka(e, At::op("assign")))?;
        self.assigned = next;
        self.repause()
    }

    /// Forwards the queues of `partitions` to the consumer's own (see `queue`): before the
    /// client starts fetching them, so that none of their messages reach the consumer
    /// queue first.
    pub(super) fn forward<'a>(&mut self, partitions: impl Iterator<Item = &'a TopicPartition>) {
        if let Some(f) = &mut self.fetched {
            f.forward(partitions);
        }
    }

    /// Pauses again the partitions marked paused: a new assignment resumes every partition.
    pub(super) fn repause(&self) -> Result<()> {
        let paused: Vec<_> = self
            .assigned
            .iter()
            .filter(|a| a.paused)
            .map(|a| a.tp.clone())
            .collect();
        if !paused.is_empty() {
            self.client
                .pause(&tp_list(&paused))
                .map_err(|e| from_kafka(e, At::op("pause")))?;
        }
        Ok(())
    }

    /// The assigned partitions, in assignment order.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.assignment_list()
    }

    /// Joins the consumer's group reading `topics`; the group's assignor shares their
    /// partitions out among the members.
    ///
    /// # Errors
    ///
    /// [`Error::NoGroupId`], [`Error::SubscriptionConflict`] (partitions assigned by hand),
    /// [`Error::InvalidTopicName`], [`Error::Kafka`].
    pub fn subscribe<S: AsRef<str>>(&mut self, topics: &[S]) -> Result<()> {
        self.subscribe_with_listener(topics, NoListener)
    }

    /// [`subscribe`](Self::subscribe) with a rebalance listener.
    ///
    /// # Errors
    ///
    /// As [`subscribe`](Self::subscribe).
    pub fn subscribe_with_listener<S: AsRef<str>>(
        &mut self,
        topics: &[S],
        listener: impl KafkaRebalanceListener<K, V> + 'static,
    ) -> Result<()> {
        let names: Vec<String> = topics.iter().map(|t| t.as_ref().to_owned()).collect();
        for n in &names {
            crate::broker::validate_kafka_topic_name(n)?;
        }
        self.subscribe_names(names, Box::new(listener))
    }

    /// Joins the group reading every topic whose name matches `pattern` (`*` any run of
    /// characters, `?` one), as topics come and go.
    ///
    /// # Errors
    ///
    /// As [`subscribe`](Self::subscribe).
    pub fn subscribe_pattern(&mut self, pattern: &str) -> Result<()> {
        self.subscribe_names(vec![glob_to_regex(pattern)], Box::new(NoListener))
    }

    fn subscribe_names(
        &mut self,
        names: Vec<String>,
        listener: Box<dyn KafkaRebalanceListener<K, V>>,
    ) -> Result<()> {
        self.group("subscribe")?;
        if !self.assigned.is_empty() && self.subscription.is_empty() {
            return Err(Error::SubscriptionConflict {
                operation: "subscribe",
                current: "has partitions assigned by hand",
            });
        }
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        self.client
            .subscribe(&refs)
            .map_err(|e| from_kafka(e, At::op("subscribe")))?;
        self.subscription = names;
        self.listener = Some(listener);
        Ok(())
    }

    /// Leaves the group (its partitions are revoked first, with the listener called).
    pub fn unsubscribe(&mut self) {
        if self.subscription.is_empty() {
            return;
        }
        let revoked = self.assignment_list();
        if !revoked.is_empty() {
            self.with_listener(|l, c| l.on_partitions_revoked(c, &revoked));
        }
        self.client.unsubscribe();
        self.subscription.clear();
        self.assigned.clear();
        // librdkafka announces the revocation it did itself; nothing is left to run for it.
        self.state().events.clear();
    }

    /// The topics (or the pattern, as a regular expression) subscribed to.
    pub fn subscription(&self) -> Vec<String> {
        self.subscription.clone()
    }

    fn state(&self) -> crate::sync::MutexGuard<'_, ContextState> {
        self.client.context().state.lock()
    }

    fn with_listener(&mut self, f: impl FnOnce(&mut dyn KafkaRebalanceListener<K, V>, &mut Self)) {
        if let Some(mut l) = self.listener.take() {
            self.in_listener = true;
            f(&mut *l, self);
            self.in_listener = false;
            self.listener = Some(l);
        }
    }

    /// Runs the rebalances librdkafka announced: listener, then the client's (un)assign.
    fn rebalance(&mut self) -> Result<()> {
        let events = std::mem::take(&mut self.state().events);
        if events.is_empty() {
            // Asking the protocol is a request to librdkafka's group thread: not per poll.
            return Ok(());
        }
        let cooperative = matches!(
            self.client.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        for event in events {
            match event {
                Event::Revoke(list) => {
                    let tps = tps_of(&list);
                    if self.client.assignment_lost() {
                        self.with_listener(|l, c| l.on_partitions_lost(c, &tps));
                    } else {
                        self.with_listener(|l, c| l.on_partitions_revoked(c, &tps));
                    }
                    let done = if cooperative {
                        self.client.incremental_unassign(&list)
                    } else {
                        self.client.unassign()
                    };
                    done.map_err(|e| from_kafka(e, At::op("rebalance")))?;
                    self.assigned.retain(|a| !tps.contains(&a.tp));
                }
                Event::Assign(list) => {
                    let tps = tps_of(&list);
                    let starts = self.start_positions(&tps)?;
                    let added: Vec<Assigned> = tps
                        .iter()
                        .zip(starts)
                        .map(|(tp, position)| Assigned {
                            tp: tp.clone(),
                            position,
                            paused: false,
                            unstored: false,
                        })
                        .collect();
                    self.forward(tps.iter());
                    let done = if cooperative {
                        self.client
                            .incremental_assign(&Self::client_list(added.iter()))
                    } else {
                        self.assigned.clear();
                        self.client.assign(&Self::client_list(added.iter()))
                    };
                    done.map_err(|e| from_kafka(e, At::op("rebalance")))?;
                    self.assigned.extend(added);
                    self.with_listener(|l, c| l.on_partitions_assigned(c, &tps));
                }
                Event::Failed(code) => {
                    return Err(from_code(
                        code,
                        "rebalance failed".into(),
                        At::op("rebalance"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Commits the current position of every assigned partition that has one, as the
    /// group's committed offsets, and waits for the cluster to store them.
    ///
    /// # Errors
    ///
    /// [`Error::NoGroupId`]; [`Error::Kafka`] (for example a rebalance in progress: the
    /// consumer is no longer in the generation that owned the partitions) /
    /// [`Error::Timeout`].
    pub fn commit_sync(&mut self) -> Result<()> {
        self.group("commit_sync")?;
        let offsets: Vec<(TopicPartition, u64)> = self
            .assigned
            .iter()
            .filter_map(|a| a.position.map(|p| (a.tp.clone(), p)))
            .collect();
        self.commit_list(&offsets)
    }

    pub(crate) fn commit_list(&self, offsets: &[(TopicPartition, u64)]) -> Result<()> {
        if offsets.is_empty() {
            return Ok(());
        }
        let mut l = TopicPartitionList::with_capacity(offsets.len());
        for (tp, o) in offsets {
            let _ =
                l.add_partition_offset(&tp.topic, tp.partition as i32, Offset::Offset(*o as i64));
        }
        self.client.commit(&l, CommitMode::Sync).map_err(|e| {
            let at = match offsets {
                [(tp, _)] => self.at("commit", tp),
                _ => At::op("commit").timeout(self.timeout()),
            };
            from_kafka(e, at)
        })
    }

    /// Commits the given offsets (each the next record to read) for the group, on any
    /// existing partitions (assigned or not). All are checked before any is stored.
    ///
    /// # Errors
    ///
    /// [`Error::NoGroupId`], [`Error::UnknownTopic`], [`Error::PartitionOutOfRange`],
    /// [`Error::OffsetOutOfRange`] (an offset past the high watermark),
    /// [`Error::Kafka`] / [`Error::Timeout`].
    pub fn commit_offsets(&mut self, offsets: &[(TopicPartition, u64)]) -> Result<()> {
        self.group("commit_offsets")?;
        for (tp, o) in offsets {
            self.check_partition(tp)?;
            let (low, high) = self.broker.watermarks(tp)?;
            if *o > high {
                return Err(Error::OffsetOutOfRange {
                    topic: Some(tp.topic.clone()),
                    partition: Some(tp.partition),
                    requested: *o,
                    start: low,
                    end: high,
                });
            }
        }
        self.commit_list(offsets)
    }

    /// The group's committed offset for `tp`, if it committed one.
    ///
    /// # Errors
    ///
    /// [`Error::NoGroupId`], [`Error::UnknownTopic`], [`Error::PartitionOutOfRange`],
    /// [`Error::Kafka`] / [`Error::Timeout`].
    pub fn committed(&self, tp: &TopicPartition) -> Result<Option<u64>> {
        self.group("committed")?;
        self.check_partition(tp)?;
        let list = self
            .client
            .committed_offsets(tp_list(std::slice::from_ref(tp)), self.timeout())
            .map_err(|e| from_kafka(e, self.at("committed", tp)))?;
        let found = list.find_partition(&tp.topic, tp.partition as i32);
        Ok(match found.map(|e| e.offset()) {
            Some(Offset::Offset(o)) => Some(o as u64),
            _ => None,
        })
    }

    /// The offset of the next record this consumer will read from `tp`.
    ///
    /// # Errors
    ///
    /// [`Error::NotAssigned`]; [`Error::NoOffsetForPartition`].
    pub fn position(&self, tp: &TopicPartition) -> Result<u64> {
        let a = &self.assigned[self.index(tp)?];
        a.position.ok_or_else(|| Error::NoOffsetForPartition {
            topic: tp.topic.clone(),
            partition: tp.partition,
        })
    }

    /// Stops reading `partitions` until [`resume`](Self::resume) (positions stay).
    ///
    /// # Errors
    ///
    /// [`Error::NotAssigned`] (nothing changes); [`Error::Kafka`].
    pub fn pause(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        let indices: Vec<usize> = partitions
            .iter()
            .map(|tp| self.index(tp))
            .collect::<Result<_>>()?;
        self.client
            .pause(&tp_list(partitions))
            .map_err(|e| from_kafka(e, At::op("pause")))?;
        for i in indices {
            self.assigned[i].paused = true;
        }
        Ok(())
    }

    /// Reads `partitions` again, from their positions.
    ///
    /// # Errors
    ///
    /// [`Error::NotAssigned`] (nothing changes); [`Error::Kafka`].
    pub fn resume(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        let indices: Vec<usize> = partitions
            .iter()
            .map(|tp| self.index(tp))
            .collect::<Result<_>>()?;
        for &i in &indices {
            self.assigned[i].paused = false;
        }
        self.client
            .resume(&tp_list(partitions))
            .map_err(|e| from_kafka(e, At::op("resume")))?;
        // Records fetched while paused were dropped: read from the positions again.
        self.reposition(&indices)
    }

    /// The paused partitions.
    pub fn paused(&self) -> Vec<TopicPartition> {
        self.assigned
            .iter()
            .filter(|a| a.paused)
            .map(|a| a.tp.clone())
            .collect()
    }

    /// What this consumer counted (records consumed; Kafka resets positions itself, so no
    /// skips are counted).
    pub fn metrics(&self) -> &ConsumerMetrics {
        &self.metrics
    }

    /// The configuration.
    pub fn config(&self) -> &ConsumerConfig {
        &self.config
    }

    /// Closes the consumer (as dropping it does): a subscribed one runs its listener's
    /// `on_partitions_revoked` and leaves the group, which rebalances.
    pub fn close(self) {}
}

impl<K, V> KafkaConsumer<K, V> {
    /// Leaves the group and gives the partitions back while the group thread still serves
    /// assignments, so that librdkafka's close finds nothing to revoke. An unassign answered
    /// from inside close can wait forever: the group thread may already have stopped
    /// serving the request (librdkafka issue 4884, seen here as a hang in a consumer's drop).
    /// Bounded: past [`LEAVE_BEFORE_CLOSE`] the close answers what is left.
    fn leave_before_close(&mut self, cooperative: bool) {
        self.client.unsubscribe();
        let deadline = std::time::Instant::now() + LEAVE_BEFORE_CLOSE;
        loop {
            let events = std::mem::take(&mut self.client.context().state.lock().events);
            for event in events {
                answer_while_closing(&self.client, event, cooperative);
            }
            let assigned = self.client.assignment().map_or(0, |l| l.count());
            if assigned == 0 || std::time::Instant::now() >= deadline {
                return;
            }
            // Messages still arriving are dropped unread: the consumer is going away and its
            // positions are not committed by a drop.
            let _ = self.client.poll(Duration::from_millis(10));
        }
    }
}

/// How long a dropped consumer waits for the group to take its partitions back before
/// closing (it usually takes one round trip to the group coordinator).
const LEAVE_BEFORE_CLOSE: Duration = Duration::from_secs(10);

/// Lets librdkafka's rebalance go on while the consumer is being dropped: no listener runs
/// and nothing is left to report an error to.
fn answer_while_closing(client: &BaseConsumer<GroupContext>, event: Event, cooperative: bool) {
    let _ = match (event, cooperative) {
        (Event::Assign(tpl), true) => client.incremental_assign(&tpl),
        (Event::Assign(tpl), false) => client.assign(&tpl),
        (Event::Revoke(tpl), true) => client.incremental_unassign(&tpl),
        (Event::Revoke(_) | Event::Failed(_), false) => client.unassign(),
        (Event::Failed(_), true) => Ok(()),
    };
}

impl<K, V> Drop for KafkaConsumer<K, V> {
    fn drop(&mut self) {
        // Asked once: a request to librdkafka's group thread, which must still be serving.
        let cooperative = matches!(
            self.client.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        if !self.subscription.is_empty() {
            let revoked = self.assignment_list();
            if !revoked.is_empty() {
                if let Some(mut l) = self.listener.take() {
                    self.in_listener = true;
                    l.on_partitions_revoked(self, &revoked);
                    self.in_listener = false;
                }
            }
            self.leave_before_close(cooperative);
        }
        // librdkafka's close (in the client's drop) rebalances once more, with nobody left
        // to answer it: the context answers from now on. A rebalance announced before and
        // not yet handled by a poll is answered here: librdkafka's close waits for it.
        let pending = {
            let mut state = self.client.context().state.lock();
            state.closing = true;
            std::mem::take(&mut state.events)
        };
        for event in pending {
            answer_while_closing(&self.client, event, cooperative);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_become_anchored_regular_expressions() {
        assert_eq!(glob_to_regex("orders.*"), "^orders\\..*$");
        assert_eq!(glob_to_regex("a?c"), "^a.c$");
    }

    #[test]
    fn isolation_level_maps_and_is_always_set() {
        use crate::consumer::IsolationLevel;
        // No connection is made: clients connect lazily.
        let broker = KafkaBroker::connect(crate::kafka::KafkaConfig::new("127.0.0.1:1")).unwrap();
        let level = |config: ConsumerConfig| {
            let c = broker.consumer_client_config(&config).unwrap();
            c.get("isolation.level").map(str::to_owned)
        };
        // librdkafka's default is read_committed: logbus's (Kafka's) must be set.
        assert_eq!(
            level(ConsumerConfig::new()).as_deref(),
            Some("read_uncommitted")
        );
        assert_eq!(
            level(ConsumerConfig::new().isolation_level(IsolationLevel::ReadCommitted)).as_deref(),
            Some("read_committed")
        );
    }

    #[test]
    fn assignors_map_to_librdkafka_strategies() {
        assert_eq!(strategy("roundrobin").ok(), Some("roundrobin"));
        assert!(matches!(
            strategy("sticky"),
            Err(Error::InvalidConfig {
                name: "assignor",
                ..
            })
        ));
    }
}
