//! The consumer: logbus's assign / subscribe / poll / commit / seek over librdkafka's.

use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer as _, ConsumerContext, RebalanceProtocol,
};
use rdkafka::error::RDKafkaErrorCode as Code;
use rdkafka::message::Message as _;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::ClientContext;

use super::broker::{config_error, KafkaBroker};
use super::error::{from_code, from_kafka, At};
use super::producer::from_headers;
use crate::codec::Codec;
use crate::consumer::{
    ConsumerConfig, ConsumerMetrics, ConsumerRecord, ConsumerRecords, OffsetAndTimestamp,
    OffsetReset,
};
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
}

/// Reads a Kafka cluster's partitions, as [`Consumer`](crate::Consumer) reads in-process
/// ones: the same methods, records, errors and positions. `Send`, not `Sync`.
///
/// The consumer keeps the positions itself (a new partition starts at the group's
/// committed offset, else per `auto_offset_reset`, resolved when it is assigned), so
/// `position`, `commit_sync` and a seek mean exactly what they mean in process.
pub struct KafkaConsumer<K, V> {
    broker: KafkaBroker,
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
        let client = c
            .create_with_context::<_, BaseConsumer<GroupContext>>(GroupContext::default())
            .map_err(|e| config_error(e).unwrap_or_else(|e| from_kafka(e, At::op("consumer"))))?;
        Ok(KafkaConsumer {
            broker: self.clone(),
            client,
            config,
            assigned: Vec::new(),
            subscription: Vec::new(),
            listener: None,
            in_listener: false,
            pending: None,
            metrics: ConsumerMetrics::default(),
            probe: None,
            _types: PhantomData,
        })
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

    /// Checks that `tp` exists on the cluster.
    fn check_partition(&self, tp: &TopicPartition) -> Result<()> {
        let count = self.broker.partition_count(&tp.topic)?;
        if tp.partition >= count {
            return Err(Error::PartitionOutOfRange {
                topic: tp.topic.clone(),
                partition: tp.partition,
                count,
            });
        }
        Ok(())
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
    /// [`Error::KafkaTimeout`].
    pub fn assign(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        if !self.subscription.is_empty() {
            return Err(Error::SubscriptionConflict {
                operation: "assign",
                current: "is subscribed",
            });
        }
        for tp in partitions {
            self.check_partition(tp)?;
        }
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
                });
            } else {
                let at = new.iter().position(|n| n == tp).unwrap_or(0);
                next.push(Assigned {
                    tp: tp.clone(),
                    position: starts.get(at).copied().flatten(),
                    paused: false,
                });
            }
        }
        self.client
            .assign(&Self::client_list(next.iter()))
            .map_err(|e| from_kafka(e, At::op("assign")))?;
        self.assigned = next;
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
            crate::broker::validate_topic_name(n)?;
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
                        })
                        .collect();
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

    /// Up to `max_poll_records` records from the assigned, unpaused partitions, waiting up
    /// to `timeout` for the first. Rebalances (and the listener) run here.
    ///
    /// Unlike in process, records can be on the cluster and not yet fetched. `poll` returns
    /// when it has read everything its partitions held at their last fetch (the high
    /// watermarks the fetch responses carry; the cluster is asked for a partition not
    /// fetched yet), or `max_poll_records`, or — with nothing read — when the timeout passed
    /// and nothing is left to fetch; it keeps waiting past the timeout (up to
    /// [`KafkaConfig::poll_catch_up`]) while records it has not fetched are known to be
    /// there. So, as in process, a poll returns what is there, and an empty poll means
    /// "caught up". (A subscribed consumer still joining its group waits only the timeout.)
    ///
    /// # Errors
    ///
    /// [`Error::PollInListener`], [`Error::NoOffsetForPartition`] (no position under
    /// `OffsetReset::None`), [`Error::Decode`], [`Error::Kafka`]. Records read before the
    /// problem are returned first; the error comes with the next poll.
    ///
    /// [`KafkaConfig::poll_catch_up`]: super::KafkaConfig::poll_catch_up
    pub fn poll(&mut self, timeout: Duration) -> Result<ConsumerRecords<K, V>> {
        let mut out = Vec::new();
        let max = self.config.poll_records();
        self.poll_into(&mut out, max, timeout)?;
        Ok(ConsumerRecords::from_vec(out))
    }

    /// Like [`poll`](Self::poll), appending at most `max` records to `out`.
    ///
    /// # Errors
    ///
    /// As [`poll`](Self::poll).
    pub fn poll_into(
        &mut self,
        out: &mut Vec<ConsumerRecord<K, V>>,
        max: usize,
        timeout: Duration,
    ) -> Result<usize> {
        if self.in_listener {
            return Err(Error::PollInListener);
        }
        if let Some(e) = self.pending.take() {
            return Err(e);
        }
        self.rebalance()?;
        if max == 0 || (self.assigned.is_empty() && self.subscription.is_empty()) {
            return Ok(0);
        }
        if let Some(a) = self.assigned.iter().find(|a| a.position.is_none()) {
            return Err(Error::NoOffsetForPartition {
                topic: a.tp.topic.clone(),
                partition: a.tp.partition,
            });
        }
        let start = out.len();
        let deadline = Instant::now().checked_add(timeout);
        let mut catch_up: Option<Instant> = None;
        // The assigned partition and interned topic name of the last record.
        let mut last: Option<(usize, &'static str)> = None;
        loop {
            // No clock read per record (a clock read costs about as much as a record here).
            let wait = match (catch_up, deadline) {
                // Waiting for records the cluster has and this consumer has not fetched.
                (Some(c), _) => c
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(50)),
                _ if out.len() > start => Duration::ZERO,
                (None, Some(d)) => d.saturating_duration_since(Instant::now()),
                (None, None) => Duration::from_secs(1),
            };
            let message = self.client.poll(wait);
            match message {
                Some(Ok(m)) => {
                    let topic = m.topic();
                    let partition = m.partition() as u32;
                    // Records come in runs of one partition: try the last one first.
                    let i = match last {
                        Some((i, name))
                            if self
                                .assigned
                                .get(i)
                                .is_some_and(|a| a.tp.partition == partition && name == topic) =>
                        {
                            Some(i)
                        }
                        _ => self
                            .assigned
                            .iter()
                            .position(|a| a.tp.partition == partition && a.tp.topic == topic),
                    };
                    let Some(i) = i.filter(|&i| !self.assigned[i].paused) else {
                        // Fetched before a pause or a revocation: read again from the
                        // position on resume.
                        continue;
                    };
                    let name = match last {
                        Some((_, name)) if name == topic => name,
                        _ => crate::sync::intern(topic),
                    };
                    last = Some((i, name));
                    let decoded = decode::<K, V>(&m, name);
                    match decoded {
                        Ok(record) => {
                            self.assigned[i].position = Some(record.offset + 1);
                            out.push(record);
                        }
                        Err(e) => {
                            // Skip the record that cannot be decoded, as the position says.
                            self.assigned[i].position = Some(m.offset().max(0) as u64 + 1);
                            if out.len() == start {
                                return Err(e);
                            }
                            self.pending = Some(e);
                            break;
                        }
                    }
                    if out.len() - start >= max {
                        break;
                    }
                }
                Some(Err(e)) => {
                    let e = from_kafka(e, At::op("poll"));
                    if out.len() == start {
                        return Err(e);
                    }
                    self.pending = Some(e);
                    break;
                }
                None => {
                    self.rebalance()?;
                    let now = Instant::now();
                    let got = out.len() > start;
                    if got || deadline.is_some_and(|d| now >= d) {
                        if self.fetched()? {
                            break;
                        }
                        let limit =
                            *catch_up.get_or_insert(now + self.broker.inner.config.catch_up());
                        if now >= limit {
                            break;
                        }
                    }
                }
            }
        }
        let n = out.len() - start;
        self.metrics.add_consumed(n as u64);
        Ok(n)
    }

    /// Whether this consumer read everything the cluster holds in its assigned, unpaused
    /// partitions: by the high watermarks the last fetch responses carried (kept by
    /// librdkafka, no request), or, for a partition not fetched yet, by asking the cluster.
    fn fetched(&self) -> Result<bool> {
        let mut unknown = false;
        for a in self.assigned.iter().filter(|a| !a.paused) {
            match self.cached_high(&a.tp) {
                Some(high) if a.position.is_some_and(|p| p < high) => return Ok(false),
                Some(_) => {}
                None => unknown = true,
            }
        }
        if unknown {
            self.caught_up()
        } else {
            Ok(true)
        }
    }

    /// The high watermark of `tp` in the last fetch response, if one came.
    fn cached_high(&self, tp: &TopicPartition) -> Option<u64> {
        let topic = std::ffi::CString::new(tp.topic.as_str()).ok()?;
        let (mut low, mut high) = (-1i64, -1i64);
        // SAFETY: the handle is this consumer's client, alive for the whole call; `topic` is
        // a NUL-terminated string that outlives it; `low` and `high` are valid for writes.
        // librdkafka reads its cached offsets under its own partition lock (thread-safe).
        let err = unsafe {
            rdkafka::bindings::rd_kafka_get_watermark_offsets(
                self.client.client().native_ptr(),
                topic.as_ptr(),
                tp.partition as i32,
                &mut low,
                &mut high,
            )
        };
        (err == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0).then_some(high as u64)
    }

    /// Whether every assigned, unpaused partition's position is at its high watermark,
    /// asking the cluster.
    fn caught_up(&self) -> Result<bool> {
        for a in self.assigned.iter().filter(|a| !a.paused) {
            let (_, high) = self.broker.watermarks(&a.tp)?;
            if a.position.is_some_and(|p| p < high) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Commits the current position of every assigned partition that has one, as the
    /// group's committed offsets, and waits for the cluster to store them.
    ///
    /// # Errors
    ///
    /// [`Error::NoGroupId`]; [`Error::Kafka`] (for example a rebalance in progress: the
    /// consumer is no longer in the generation that owned the partitions) /
    /// [`Error::KafkaTimeout`].
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
    /// [`Error::PartitionOffsetOutOfRange`] (an offset past the high watermark),
    /// [`Error::Kafka`] / [`Error::KafkaTimeout`].
    pub fn commit_offsets(&mut self, offsets: &[(TopicPartition, u64)]) -> Result<()> {
        self.group("commit_offsets")?;
        for (tp, o) in offsets {
            self.check_partition(tp)?;
            let (low, high) = self.broker.watermarks(tp)?;
            if *o > high {
                return Err(Error::PartitionOffsetOutOfRange {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
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
    /// [`Error::Kafka`] / [`Error::KafkaTimeout`].
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

    /// Moves the position in `tp` to `offset`; the next poll reads from there (an offset
    /// out of range is handled by the cluster per `auto_offset_reset`).
    ///
    /// # Errors
    ///
    /// [`Error::NotAssigned`]; [`Error::Kafka`].
    pub fn seek(&mut self, tp: &TopicPartition, offset: u64) -> Result<()> {
        let i = self.index(tp)?;
        self.assigned[i].position = Some(offset);
        self.reposition(&[i])
    }

    /// Tells the client the positions of `indices` (it drops what it fetched from before).
    fn reposition(&mut self, indices: &[usize]) -> Result<()> {
        let mut l = TopicPartitionList::new();
        for &i in indices {
            let a = &self.assigned[i];
            if let Some(p) = a.position {
                let _ = l.add_partition_offset(
                    &a.tp.topic,
                    a.tp.partition as i32,
                    Offset::Offset(p as i64),
                );
            }
        }
        if l.count() == 0 {
            return Ok(());
        }
        // A seek on a partition whose fetcher is not started yet is refused; assigning
        // again at the positions wants no fetcher.
        match self.client.seek_partitions(l, self.timeout()) {
            Ok(result) if result.elements().iter().all(|e| e.error().is_ok()) => Ok(()),
            _ => self.reassign(),
        }
    }

    /// Hands the client the whole assignment again, at this consumer's positions.
    fn reassign(&mut self) -> Result<()> {
        let list = Self::client_list(self.assigned.iter());
        let done = if matches!(
            self.client.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        ) {
            self.client
                .incremental_unassign(&list)
                .and_then(|()| self.client.incremental_assign(&list))
        } else {
            self.client.assign(&list)
        };
        done.map_err(|e| from_kafka(e, At::op("seek")))?;
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

    fn indices(&self, partitions: &[TopicPartition]) -> Result<Vec<usize>> {
        if partitions.is_empty() {
            return Ok((0..self.assigned.len()).collect());
        }
        partitions.iter().map(|tp| self.index(tp)).collect()
    }

    /// Moves the positions in `partitions` (every assigned partition if empty) to their
    /// log start.
    ///
    /// # Errors
    ///
    /// [`Error::NotAssigned`] (nothing moves); [`Error::Kafka`].
    pub fn seek_to_beginning(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        self.seek_to(partitions, true)
    }

    /// Moves the positions in `partitions` (every assigned partition if empty) to their
    /// log end (the high watermark).
    ///
    /// # Errors
    ///
    /// [`Error::NotAssigned`] (nothing moves); [`Error::Kafka`].
    pub fn seek_to_end(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        self.seek_to(partitions, false)
    }

    fn seek_to(&mut self, partitions: &[TopicPartition], beginning: bool) -> Result<()> {
        let indices = self.indices(partitions)?;
        let mut targets = Vec::with_capacity(indices.len());
        for &i in &indices {
            let (low, high) = self.broker.watermarks(&self.assigned[i].tp)?;
            targets.push(if beginning { low } else { high });
        }
        for (&i, t) in indices.iter().zip(targets) {
            self.assigned[i].position = Some(t);
        }
        self.reposition(&indices)
    }

    /// For each `(partition, timestamp)`, the first offset whose record's timestamp is at
    /// or after `timestamp`, with that timestamp (`None` when no record is). Partitions
    /// need not be assigned. (Kafka answers with the offset only; the timestamp is read
    /// from the record.)
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTimestamp`] (negative), [`Error::UnknownTopic`],
    /// [`Error::PartitionOutOfRange`], [`Error::Kafka`] / [`Error::KafkaTimeout`].
    pub fn offsets_for_times(
        &mut self,
        query: &[(TopicPartition, i64)],
    ) -> Result<HashMap<TopicPartition, Option<OffsetAndTimestamp>>> {
        let mut l = TopicPartitionList::with_capacity(query.len());
        for (tp, ts) in query {
            if *ts < 0 {
                return Err(Error::InvalidTimestamp { timestamp: *ts });
            }
            self.check_partition(tp)?;
            let _ = l.add_partition_offset(&tp.topic, tp.partition as i32, Offset::Offset(*ts));
        }
        let timeout = self.timeout();
        let found = self
            .client
            .offsets_for_times(l, timeout)
            .map_err(|e| from_kafka(e, At::op("offsets_for_times").timeout(timeout)))?;
        let mut out = HashMap::with_capacity(query.len());
        for (tp, ts) in query {
            let offset = match found
                .find_partition(&tp.topic, tp.partition as i32)
                .map(|e| (e.offset(), e.error()))
            {
                Some((_, Err(e))) => return Err(from_kafka(e, self.at("offsets_for_times", tp))),
                Some((Offset::Offset(o), _)) => Some(o as u64),
                _ => None,
            };
            let at = match offset {
                Some(o) => {
                    let high = self.broker.watermarks(tp)?.1;
                    self.scan(tp, o, high, |_| true)?
                }
                // librdkafka's mock cluster answers no timestamp lookup (every one is
                // "none"): on it, read the partition instead.
                None if self.broker.inner.mock.is_some() => {
                    let (low, high) = self.broker.watermarks(tp)?;
                    self.scan(tp, low, high, |t| t >= *ts)?
                }
                None => None,
            };
            out.insert(
                tp.clone(),
                at.map(|(offset, timestamp)| OffsetAndTimestamp { offset, timestamp }),
            );
        }
        Ok(out)
    }

    /// The first record of `tp` in offsets `[from, until)` whose timestamp passes `wanted`:
    /// its offset and timestamp.
    fn scan(
        &mut self,
        tp: &TopicPartition,
        from: u64,
        until: u64,
        wanted: impl Fn(i64) -> bool,
    ) -> Result<Option<(u64, i64)>> {
        if from >= until {
            return Ok(None);
        }
        let timeout = self.timeout();
        if self.probe.is_none() {
            let mut c = self.broker.inner.config.client(false);
            c.set("group.id", private_group());
            c.set("enable.auto.commit", "false");
            self.probe = Some(
                c.create::<BaseConsumer>()
                    .map_err(|e| from_kafka(e, At::op("offsets_for_times")))?,
            );
        }
        let at = self.at("offsets_for_times", tp);
        let probe = self.probe.as_ref().ok_or(Error::Timeout)?;
        let mut l = TopicPartitionList::new();
        let _ = l.add_partition_offset(&tp.topic, tp.partition as i32, Offset::Offset(from as i64));
        probe.assign(&l).map_err(|e| from_kafka(e, at))?;
        let mut deadline = Instant::now() + timeout;
        let result = loop {
            match probe.poll(deadline.saturating_duration_since(Instant::now())) {
                Some(Ok(m)) => {
                    let offset = m.offset().max(0) as u64;
                    let ts = m.timestamp().to_millis().unwrap_or(0);
                    if offset >= from && wanted(ts) {
                        break Ok(Some((offset, ts)));
                    }
                    if offset + 1 >= until {
                        break Ok(None);
                    }
                    deadline = Instant::now() + timeout;
                }
                Some(Err(e)) => break Err(from_kafka(e, at)),
                None if Instant::now() >= deadline => {
                    break Err(from_code(Code::OperationTimedOut, String::new(), at))
                }
                None => continue,
            }
        };
        let _ = probe.unassign();
        result
    }

    /// The log start offset of each partition. Partitions need not be assigned.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`], [`Error::PartitionOutOfRange`], [`Error::Kafka`].
    pub fn beginning_offsets(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, u64>> {
        partitions
            .iter()
            .map(|tp| Ok((tp.clone(), self.broker.watermarks(tp)?.0)))
            .collect()
    }

    /// The high watermark of each partition. Partitions need not be assigned.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`], [`Error::PartitionOutOfRange`], [`Error::Kafka`].
    pub fn end_offsets(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, u64>> {
        partitions
            .iter()
            .map(|tp| Ok((tp.clone(), self.broker.watermarks(tp)?.1)))
            .collect()
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

impl<K, V> Drop for KafkaConsumer<K, V> {
    fn drop(&mut self) {
        if !self.subscription.is_empty() {
            let revoked = self.assignment_list();
            if !revoked.is_empty() {
                if let Some(mut l) = self.listener.take() {
                    self.in_listener = true;
                    l.on_partitions_revoked(self, &revoked);
                    self.in_listener = false;
                }
            }
        }
        // librdkafka's close (in the client's drop) rebalances once more, with nobody left
        // to answer it: the context answers from now on.
        self.client.context().state.lock().closing = true;
    }
}

/// A fetched message as a logbus record.
fn decode<K: Codec, V: Codec>(
    m: &rdkafka::message::BorrowedMessage<'_>,
    topic: &'static str,
) -> Result<ConsumerRecord<K, V>> {
    let key = match m.key() {
        Some(k) => Some(K::decode(k)?),
        None => None,
    };
    let value = V::decode(m.payload().unwrap_or(&[]))?;
    Ok(ConsumerRecord {
        topic,
        partition: m.partition().max(0) as u32,
        offset: m.offset().max(0) as u64,
        timestamp: m.timestamp().to_millis().unwrap_or(0),
        key,
        value,
        headers: from_headers(m.headers()),
    })
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
