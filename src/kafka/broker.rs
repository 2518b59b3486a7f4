//! The cluster as a broker: connection settings, topics, producers and consumers.

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::RDKafkaErrorCode as Code;

use super::error::{from_code, from_kafka, At};
use super::mock::MockCluster;
use super::producer::{KafkaProducer, SharedProducer};
use crate::broker::{PartitionInfo, TopicConfig, TopicDescription};
use crate::codec::Codec;
use crate::error::{Error, Result};
use crate::sync::Arc;
use crate::TopicPartition;

/// How to reach a cluster: its bootstrap servers and any librdkafka client settings.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use logbus::kafka::KafkaConfig;
///
/// let config = KafkaConfig::new("localhost:9092")
///     .set("compression.type", "lz4")
///     .acks("all")
///     .request_timeout(Duration::from_secs(10));
/// assert_eq!(config.get("acks"), Some("all"));
/// ```
#[derive(Debug, Clone)]
pub struct KafkaConfig {
    settings: Vec<(String, String)>,
    timeout: Duration,
    catch_up: Duration,
    replication: Option<i32>,
}

impl KafkaConfig {
    /// The cluster at `bootstrap_servers` (`host:port`, comma-separated).
    pub fn new(bootstrap_servers: impl Into<String>) -> Self {
        Self {
            settings: vec![("bootstrap.servers".into(), bootstrap_servers.into())],
            timeout: Duration::from_secs(30),
            catch_up: Duration::from_secs(10),
            replication: None,
        }
    }

    /// Sets a librdkafka client setting (`compression.type`, `security.protocol`, ...),
    /// for the producers and consumers of this broker. Consumer-only or producer-only
    /// settings are passed to that kind of client only when they are known to be one
    /// (`linger.ms`, `acks`, ... to producers; `fetch.*`, `session.timeout.ms`, ... to
    /// consumers); the rest go to both.
    pub fn set(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        let key = key.into();
        self.settings.retain(|(k, _)| *k != key);
        self.settings.push((key, value.into()));
        self
    }

    /// A setting's value, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.settings
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The producers' `acks`: `"all"` (the default: every in-sync replica has the record
    /// before `send` returns), `"1"` (the leader) or `"0"` (none: the offset is then
    /// unknown). When logbus's `ProducerConfig` carries an `Acks`, this is where it maps.
    pub fn acks(self, acks: &str) -> Self {
        self.set("acks", acks)
    }

    /// How long a request to the cluster (metadata, offsets, commits, topic creation) may
    /// take before [`Error::Timeout`] (30 s by default).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long past its timeout a `poll` keeps waiting while records it has not fetched
    /// yet are known to be on the cluster (10 s by default; see [`KafkaConsumer::poll`]).
    ///
    /// [`KafkaConsumer::poll`]: super::KafkaConsumer::poll
    pub fn poll_catch_up(mut self, limit: Duration) -> Self {
        self.catch_up = limit;
        self
    }

    /// The replication factor of topics this broker creates (by default 3, or the number
    /// of brokers when fewer).
    pub fn replication_factor(mut self, replicas: i32) -> Self {
        self.replication = Some(replicas);
        self
    }

    /// Whether the broker's shared producer is idempotent: `enable.idempotence` if set,
    /// else whether `acks` is `all` (the default), as in process.
    pub(crate) fn idempotent(&self) -> bool {
        match self.get("enable.idempotence") {
            Some(v) => v == "true",
            None => matches!(
                self.get("acks")
                    .or(self.get("request.required.acks"))
                    .unwrap_or("all"),
                "all" | "-1"
            ),
        }
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    pub(crate) fn catch_up(&self) -> Duration {
        self.catch_up
    }

    /// The client configuration for a producer or a consumer.
    pub(crate) fn client(&self, producer: bool) -> ClientConfig {
        let mut c = ClientConfig::new();
        for (k, v) in &self.settings {
            let only_producer = PRODUCER_ONLY.iter().any(|p| k.starts_with(p));
            let only_consumer = CONSUMER_ONLY.iter().any(|p| k.starts_with(p));
            if (producer && !only_consumer) || (!producer && !only_producer) {
                c.set(k, v);
            }
        }
        c
    }
}

/// Settings only producers take (librdkafka warns about them on consumers).
const PRODUCER_ONLY: &[&str] = &[
    "acks",
    "request.required.acks",
    "linger.ms",
    "queue.buffering",
    "batch.",
    "compression",
    "enable.idempotence",
    "enable.gapless.guarantee",
    "message.timeout.ms",
    "delivery.timeout.ms",
    "partitioner",
    "retries",
    "message.send.max.retries",
    "sticky.partitioning",
    "transactional.id",
];

/// Settings only consumers take.
const CONSUMER_ONLY: &[&str] = &[
    "fetch.",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "group.",
    "partition.assignment.strategy",
    "enable.auto",
    "auto.",
    "max.poll.interval.ms",
    "isolation.level",
    "queued.",
    "check.crcs",
];

pub(crate) struct BrokerInner {
    pub(crate) config: KafkaConfig,
    pub(crate) admin: AdminClient<DefaultClientContext>,
    /// For metadata and watermarks (no group).
    pub(crate) meta: BaseConsumer,
    pub(crate) producer: Arc<SharedProducer>,
    /// Declared after the clients: dropped after them, so they close while it still runs.
    pub(crate) mock: Option<MockCluster>,
}

/// A Kafka cluster behind the in-process [`Broker`](crate::Broker)'s API: create topics,
/// then producers and consumers. Cheap to clone; `Send + Sync`.
///
/// # Examples
///
/// ```no_run
/// use logbus::kafka::{KafkaBroker, KafkaConfig};
/// use logbus::{Record, TopicConfig};
///
/// let broker = KafkaBroker::connect(KafkaConfig::new("localhost:9092"))?;
/// broker.create_topic::<String, u64>("orders", TopicConfig::new(3))?;
/// let producer = broker.producer::<String, u64>();
/// let meta = producer.send(Record::new("orders", 7).key("customer-1".to_string()))?;
/// println!("partition {}, offset {}", meta.partition, meta.offset);
/// # Ok::<(), logbus::Error>(())
/// ```
#[derive(Clone)]
pub struct KafkaBroker {
    pub(crate) inner: Arc<BrokerInner>,
}

impl fmt::Debug for KafkaBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaBroker")
            .field(
                "bootstrap.servers",
                &self.inner.config.get("bootstrap.servers"),
            )
            .finish_non_exhaustive()
    }
}

/// A topic of a Kafka cluster, as [`KafkaBroker::create_topic`] returns it.
pub struct KafkaTopic<K, V> {
    name: String,
    partitions: u32,
    _types: PhantomData<fn(K, V)>,
}

impl<K, V> fmt::Debug for KafkaTopic<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaTopic")
            .field("name", &self.name)
            .field("partitions", &self.partitions)
            .finish()
    }
}

impl<K, V> KafkaTopic<K, V> {
    /// The topic's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its partition count when this handle was made.
    pub fn partition_count(&self) -> u32 {
        self.partitions
    }
}

impl KafkaBroker {
    /// Connects to the cluster `config` names (the clients connect lazily; a cluster that
    /// cannot be reached shows in the first request's error).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a setting librdkafka refuses.
    pub fn connect(config: KafkaConfig) -> Result<Self> {
        Self::build(config, None)
    }

    /// A broker on a new [`MockCluster`] of `brokers` brokers (librdkafka's in-process
    /// cluster), kept running as long as the broker or a clone of it lives.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a broker count below 1; [`Error::Kafka`] when the mock
    /// cluster cannot start.
    pub fn mock(brokers: u32) -> Result<Self> {
        let mock = MockCluster::start(brokers)?;
        let config = KafkaConfig::new(mock.bootstrap_servers());
        Self::build(config, Some(mock))
    }

    /// A broker on `mock` with `config`'s settings (its bootstrap servers replaced by the
    /// mock cluster's).
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub fn mock_with(mock: MockCluster, config: KafkaConfig) -> Result<Self> {
        let config = config.set("bootstrap.servers", mock.bootstrap_servers());
        Self::build(config, Some(mock))
    }

    fn build(config: KafkaConfig, mock: Option<MockCluster>) -> Result<Self> {
        let bad = |e| from_kafka(e, At::op("connect"));
        let admin = config
            .client(false)
            .create::<AdminClient<DefaultClientContext>>()
            .map_err(|e| config_error(e).unwrap_or_else(bad))?;
        // Watermarks are the high watermark, whatever the consumers' isolation level
        // (librdkafka's default, read_committed, would answer the last stable offset).
        let meta = config
            .client(false)
            .set("isolation.level", "read_uncommitted")
            .create::<BaseConsumer>()
            .map_err(|e| config_error(e).unwrap_or_else(bad))?;
        let producer = SharedProducer::new(&config, None)?;
        Ok(Self {
            inner: Arc::new(BrokerInner {
                config,
                admin,
                meta,
                producer: Arc::new(producer),
                mock,
            }),
        })
    }

    /// The settings this broker was built with.
    pub fn config(&self) -> &KafkaConfig {
        &self.inner.config
    }

    /// The mock cluster this broker runs on, if it was built by [`mock`](Self::mock): for
    /// fault injection.
    pub fn mock_cluster(&self) -> Option<&MockCluster> {
        self.inner.mock.as_ref()
    }

    /// Creates topic `name` with `config`'s partition count (its other settings are
    /// in-process ones and do not apply), with `K` and `V` as the types producers and
    /// consumers encode with. As [`Broker::create_topic`](crate::Broker::create_topic), it
    /// takes a [`TopicConfig`] or a persisted one ([`TopicConfig::persist`]): the cluster
    /// keeps every topic on disk by its own settings, so the persistence settings do not
    /// apply either.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTopicName`], [`Error::InvalidConfig`] (partition count),
    /// [`Error::TopicExists`], [`Error::Kafka`] / [`Error::Timeout`].
    pub fn create_topic<K, V>(
        &self,
        name: &str,
        config: impl Into<TopicConfig>,
    ) -> Result<KafkaTopic<K, V>>
    where
        K: Codec + Send + Sync + 'static,
        V: Codec + Send + Sync + 'static,
    {
        let config: TopicConfig = config.into();
        crate::broker::validate_kafka_topic_name(name)?;
        config.validate()?;
        let partitions = config.partitions();
        self.create_raw(name, partitions)?;
        Ok(KafkaTopic {
            name: name.to_owned(),
            partitions,
            _types: PhantomData,
        })
    }

    /// Creates topic `name` with `partitions` partitions, whatever its records hold.
    pub(crate) fn create_raw(&self, name: &str, partitions: u32) -> Result<()> {
        let timeout = self.inner.config.timeout;
        let at = At::op("create_topic").topic(name).timeout(timeout);
        let replication = match self.inner.config.replication {
            Some(r) => r,
            None => self.broker_count()?.clamp(1, 3) as i32,
        };
        if let Some(mock) = &self.inner.mock {
            match self.partition_count(name) {
                Ok(_) => {
                    return Err(Error::TopicExists {
                        topic: name.to_owned(),
                    })
                }
                Err(Error::UnknownTopic { .. }) => {}
                Err(e) => return Err(e),
            }
            mock.create_topic(name, partitions, replication.max(1) as u32)?;
        } else {
            let topic = NewTopic::new(
                name,
                partitions as i32,
                TopicReplication::Fixed(replication),
            );
            let options = AdminOptions::new().operation_timeout(Some(timeout));
            let results =
                futures_executor::block_on(self.inner.admin.create_topics([&topic], &options))
                    .map_err(|e| from_kafka(e, at))?;
            for r in results {
                if let Err((_, code)) = r {
                    return Err(match code {
                        Code::TopicAlreadyExists => Error::TopicExists {
                            topic: name.to_owned(),
                        },
                        c => from_code(c, "topic creation refused".into(), at),
                    });
                }
            }
        }
        // Creation returns before every broker knows the topic: wait until metadata has
        // its partitions, so a send or an assign right after sees it.
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if self.partition_count(name).ok() == Some(partitions) {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                return Err(from_code(Code::OperationTimedOut, String::new(), at));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// How many brokers the cluster has.
    fn broker_count(&self) -> Result<usize> {
        let timeout = self.inner.config.timeout;
        let m = self
            .inner
            .meta
            .fetch_metadata(None, timeout)
            .map_err(|e| from_kafka(e, At::op("metadata").timeout(timeout)))?;
        Ok(m.brokers().len())
    }

    /// The partition count of topic `name`.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`]; [`Error::Kafka`] / [`Error::Timeout`].
    pub fn partition_count(&self, name: &str) -> Result<u32> {
        let timeout = self.inner.config.timeout;
        let at = At::op("metadata").topic(name).timeout(timeout);
        let m = self
            .inner
            .meta
            .fetch_metadata(Some(name), timeout)
            .map_err(|e| from_kafka(e, at))?;
        let t = m
            .topics()
            .iter()
            .find(|t| t.name() == name)
            .ok_or_else(|| Error::UnknownTopic {
                topic: name.to_owned(),
            })?;
        match t.error() {
            None if !t.partitions().is_empty() => Ok(t.partitions().len() as u32),
            Some(e) if Code::from(e) != Code::UnknownTopicOrPartition => {
                Err(from_code(Code::from(e), "metadata".into(), at))
            }
            _ => Err(Error::UnknownTopic {
                topic: name.to_owned(),
            }),
        }
    }

    /// The names of all topics, sorted (internal ones, `__`-prefixed, left out).
    ///
    /// # Errors
    ///
    /// [`Error::Kafka`] / [`Error::Timeout`].
    pub fn topics(&self) -> Result<Vec<String>> {
        let timeout = self.inner.config.timeout;
        let m = self
            .inner
            .meta
            .fetch_metadata(None, timeout)
            .map_err(|e| from_kafka(e, At::op("metadata").timeout(timeout)))?;
        let mut names: Vec<String> = m
            .topics()
            .iter()
            .filter(|t| !t.name().starts_with("__") && t.error().is_none())
            .map(|t| t.name().to_owned())
            .collect();
        names.sort();
        Ok(names)
    }

    /// Topic `name`'s partitions with their log start and high watermark (`log_end` is the
    /// high watermark: Kafka does not show a client the records beyond it;
    /// `records_in_memory` is the count of records the partition holds). The key and value
    /// types are `"bytes"`: a cluster does not know them.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`]; [`Error::Kafka`] / [`Error::Timeout`].
    pub fn describe_topic(&self, name: &str) -> Result<TopicDescription> {
        let count = self.partition_count(name)?;
        let partitions = (0..count)
            .map(|p| {
                let (low, high) = self.watermarks(&TopicPartition::new(name, p))?;
                Ok(PartitionInfo {
                    partition: p,
                    log_start: low,
                    high_watermark: high,
                    log_end: high,
                    records_in_memory: high - low,
                    overwritten_unread: 0,
                    compacted: None,
                    cleaner: None,
                    // librdkafka's watermark query gives no LSO: the high watermark (the LSO
                    // of a partition without open transactions).
                    last_stable_offset: high,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(TopicDescription {
            name: name.to_owned(),
            key_type: "bytes",
            value_type: "bytes",
            config: TopicConfig::new(count),
            partitions,
            // In-process replicas only: a cluster's are described by Kafka's own tools.
            replicas: Vec::new(),
        })
    }

    /// Deletes topic `name`.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`]; [`Error::Kafka`] / [`Error::Timeout`].
    pub fn delete_topic(&self, name: &str) -> Result<()> {
        let timeout = self.inner.config.timeout;
        let at = At::op("delete_topic").topic(name).timeout(timeout);
        let options = AdminOptions::new().operation_timeout(Some(timeout));
        let results = futures_executor::block_on(self.inner.admin.delete_topics(&[name], &options))
            .map_err(|e| from_kafka(e, at))?;
        for r in results {
            if let Err((_, code)) = r {
                return Err(match code {
                    Code::UnknownTopicOrPartition => Error::UnknownTopic {
                        topic: name.to_owned(),
                    },
                    c => from_code(c, "topic deletion refused".into(), at),
                });
            }
        }
        Ok(())
    }

    /// The log start and the high watermark of `tp`.
    pub(crate) fn watermarks(&self, tp: &TopicPartition) -> Result<(u64, u64)> {
        self.watermarks_by(&self.inner.meta, tp)
    }

    /// The log start and the end of `tp` as `client` asks for them: the end is the high
    /// watermark, or the last stable offset for a read-committed client.
    pub(crate) fn watermarks_by<C: rdkafka::consumer::ConsumerContext>(
        &self,
        client: &BaseConsumer<C>,
        tp: &TopicPartition,
    ) -> Result<(u64, u64)> {
        let timeout = self.inner.config.timeout;
        let (low, high) = client
            .fetch_watermarks(&tp.topic, tp.partition as i32, timeout)
            .map_err(|e| {
                from_kafka(
                    e,
                    At::op("watermarks")
                        .topic(&tp.topic)
                        .partition(tp.partition)
                        .timeout(timeout),
                )
            })?;
        Ok((low.max(0) as u64, high.max(0) as u64))
    }

    /// A producer of records with keys `K` and values `V`, encoded with their codecs.
    /// Every producer made here shares the broker's one client (as librdkafka advises),
    /// set by the broker's [`KafkaConfig`]: `acks=all` and, with it, idempotence
    /// (`enable.idempotence`) unless the config says otherwise, as in process.
    pub fn producer<K, V>(&self) -> KafkaProducer<K, V>
    where
        K: Codec + Send + Sync + 'static,
        V: Codec + Send + Sync + 'static,
    {
        KafkaProducer::new(self.clone())
    }

    /// A producer with its own client, set by `config` as
    /// [`Broker::producer_with_config`](crate::Broker::producer_with_config) sets an
    /// in-process one (the broker's [`KafkaConfig`] for everything else). `config` maps
    /// onto the client's settings, replacing the broker's for the same setting:
    ///
    /// | `ProducerConfig` | librdkafka |
    /// |---|---|
    /// | `acks` | `acks` (`0`, `1`, `all`) |
    /// | `enable_idempotence` (on by default with `acks = all`) | `enable.idempotence` |
    /// | `retries` | `retries` |
    /// | `delivery_timeout` | `message.timeout.ms` (at most the transaction timeout for a transactional producer, as librdkafka requires) |
    /// | `request_timeout` | `request.timeout.ms` |
    /// | `compression` | `compression.type` |
    /// | `transactional_id` | `transactional.id` (idempotence on) |
    /// | `transaction_timeout` | `transaction.timeout.ms` (only with a transactional id) |
    ///
    /// `sticky_batch` has no librdkafka counterpart counted in records and does not apply.
    /// A transactional producer calls
    /// [`init_transactions`](KafkaProducer::init_transactions) first (see the
    /// [module docs](super#idempotence-and-transactions)).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`]: what `Broker::producer_with_config` refuses (idempotence
    /// asked for without `acks = all`, an empty transactional id, a zero timeout, ...), and
    /// a setting librdkafka refuses.
    pub fn producer_with_config<K, V>(
        &self,
        config: crate::producer::ProducerConfig,
    ) -> Result<KafkaProducer<K, V>>
    where
        K: Codec + Send + Sync + 'static,
        V: Codec + Send + Sync + 'static,
    {
        KafkaProducer::with_config(self.clone(), &config)
    }
}

/// A setting librdkafka refused, as [`Error::InvalidConfig`]; other errors back.
pub(crate) fn config_error(
    e: rdkafka::error::KafkaError,
) -> std::result::Result<Error, rdkafka::error::KafkaError> {
    match e {
        rdkafka::error::KafkaError::ClientConfig(_, ref desc, ref key, ref value) => {
            Ok(Error::InvalidConfig {
                name: "kafka client setting",
                value: format!("{key} = {value}"),
                valid: desc.clone(),
            })
        }
        other => Err(other),
    }
}
