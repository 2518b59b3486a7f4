//! librdkafka's in-process mock cluster, shareable between threads.

use std::fmt;
use std::time::Duration;

use rdkafka::mocking::MockCluster as RdMock;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

use super::error::{from_kafka, At};
use crate::error::{Error, Result};

/// librdkafka's mock cluster: brokers inside this process speaking the Kafka protocol
/// (produce, fetch, offsets, consumer groups, topic creation), with fault injection. For
/// tests and examples; see [`KafkaBroker::mock`](super::KafkaBroker::mock).
///
/// # Examples
///
/// ```no_run
/// use logbus::kafka::{KafkaBroker, MockCluster};
///
/// let cluster = MockCluster::start(3)?;
/// let servers = cluster.bootstrap_servers();
/// assert!(!servers.is_empty());
/// # Ok::<(), logbus::Error>(())
/// ```
pub struct MockCluster {
    inner: RdMock<'static, DefaultProducerContext>,
    brokers: u32,
}

// SAFETY: librdkafka's mock cluster is driven by its own thread; every `rd_kafka_mock_*`
// call the wrapper makes (broker up/down, request errors, topic creation, RTT) sends an op
// to that thread and waits for it (`rd_kafka_mock_cluster_cmd`), so any thread may make
// them, concurrently. The bootstrap string is written once at creation, then only read.
// The owning client handle is itself `Send + Sync` (rdkafka's `NativeClient`).
unsafe impl Send for MockCluster {}
// SAFETY: as for `Send` above: every method takes `&self` and goes through the mock
// cluster's op queue.
unsafe impl Sync for MockCluster {}

impl fmt::Debug for MockCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockCluster")
            .field("brokers", &self.brokers)
            .field("bootstrap_servers", &self.bootstrap_servers())
            .finish()
    }
}

impl MockCluster {
    /// Starts a cluster of `brokers` brokers (ids 1 to `brokers`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for 0 brokers (or more than 64); [`Error::Kafka`] when
    /// librdkafka cannot start it.
    pub fn start(brokers: u32) -> Result<Self> {
        if !(1..=64).contains(&brokers) {
            return Err(Error::InvalidConfig {
                name: "brokers",
                value: brokers.to_string(),
                valid: "1 to 64 brokers".into(),
            });
        }
        let inner = RdMock::new(brokers as i32).map_err(|e| from_kafka(e, At::op("mock")))?;
        Ok(Self { inner, brokers })
    }

    /// The brokers' `host:port` list.
    pub fn bootstrap_servers(&self) -> String {
        self.inner.bootstrap_servers()
    }

    /// How many brokers it has.
    pub fn brokers(&self) -> u32 {
        self.brokers
    }

    /// Takes broker `id` down: its connections close and it accepts none until
    /// [`broker_up`](Self::broker_up).
    ///
    /// # Errors
    ///
    /// [`Error::Kafka`] for an unknown broker id.
    pub fn broker_down(&self, id: i32) -> Result<()> {
        self.inner
            .broker_down(id)
            .map_err(|e| from_kafka(e, At::op("mock broker_down")))
    }

    /// Brings broker `id` back.
    ///
    /// # Errors
    ///
    /// [`Error::Kafka`] for an unknown broker id.
    pub fn broker_up(&self, id: i32) -> Result<()> {
        self.inner
            .broker_up(id)
            .map_err(|e| from_kafka(e, At::op("mock broker_up")))
    }

    /// Delays every response of broker `id` by `delay`.
    ///
    /// # Errors
    ///
    /// [`Error::Kafka`] for an unknown broker id.
    pub fn broker_round_trip_time(&self, id: i32, delay: Duration) -> Result<()> {
        self.inner
            .broker_round_trip_time(id, delay)
            .map_err(|e| from_kafka(e, At::op("mock round_trip_time")))
    }

    /// The next requests of kind `api` fail with `errors`, one each, in order.
    pub fn request_errors(&self, api: RDKafkaApiKey, errors: &[RDKafkaRespErr]) {
        self.inner.request_errors(api, errors);
    }

    /// Clears the errors queued for `api`.
    pub fn clear_request_errors(&self, api: RDKafkaApiKey) {
        self.inner.clear_request_errors(api);
    }

    /// Creates topic `name` with `partitions` partitions, each with `replication`
    /// replicas (the mock cluster answers no CreateTopics request: this is how
    /// [`KafkaBroker::create_topic`](super::KafkaBroker::create_topic) creates on it).
    ///
    /// # Errors
    ///
    /// [`Error::Kafka`] when the mock cluster refuses (a replication above its brokers).
    pub fn create_topic(&self, name: &str, partitions: u32, replication: u32) -> Result<()> {
        self.inner
            .create_topic(name, partitions as i32, replication as i32)
            .map_err(|e| from_kafka(e, At::op("create_topic").topic(name)))
    }

    /// The broker leading partition `partition` of `topic` becomes broker `id`.
    ///
    /// # Errors
    ///
    /// [`Error::Kafka`] for an unknown topic, partition or broker.
    pub fn partition_leader(&self, topic: &str, partition: u32, id: i32) -> Result<()> {
        self.inner
            .partition_leader(topic, partition as i32, Some(id))
            .map_err(|e| from_kafka(e, At::op("mock partition_leader").topic(topic)))
    }
}
