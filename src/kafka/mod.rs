//! Beyond one process: logbus's producer and consumer API against a Kafka cluster (the
//! `kafka` feature, off by default).
//!
//! Code written against [`Broker`](crate::Broker), [`Producer`](crate::Producer) and
//! [`Consumer`](crate::Consumer) runs against Kafka by changing how the broker is built:
//!
//! ```no_run
//! use logbus::kafka::{KafkaBroker, KafkaConfig};
//! # fn main() -> logbus::Result<()> {
//! // let broker = logbus::Broker::in_memory();
//! let broker = KafkaBroker::connect(KafkaConfig::new("kafka-1:9092,kafka-2:9092"))?;
//! // Everything below is unchanged.
//! # Ok(()) }
//! ```
//!
//! [`KafkaBroker`], [`KafkaProducer`] and [`KafkaConsumer`] have the in-process types'
//! methods, with the same names, arguments, results and errors, and take and return the same
//! record types ([`Record`](crate::Record), [`RecordMetadata`](crate::RecordMetadata),
//! [`ConsumerRecords`](crate::ConsumerRecords), [`TopicPartition`](crate::TopicPartition),
//! [`ConsumerConfig`](crate::ConsumerConfig), [`TopicConfig`](crate::TopicConfig)), so code
//! whose types are inferred from the broker compiles against either unchanged.
//!
//! # Why mirror types, not one type with two backends, nor traits
//!
//! - *One type with a Kafka backend inside* cannot be built without changing the in-process
//!   API: in-process topics hold typed values (no encoding, `V` needs no [`Codec`]), and
//!   Kafka holds bytes, so every Kafka-backed method needs `K: Codec, V: Codec`. A cargo
//!   feature must be additive, so it cannot add those bounds to `Broker::producer` or
//!   `Broker::consumer`; the codecs would have to be found at run time (a type-erased lookup
//!   per topic), and each of some thirty methods would branch on the backend, in the hot
//!   paths other work keeps tuning.
//! - *Traits both implement* make every user write generic code (`fn run<B: Backend>`) and
//!   freeze the lowest common denominator into the API (in-process `send` never waits for a
//!   network; Kafka's does).
//! - *Mirror types* keep both APIs whole, keep librdkafka out of the default build, and leave
//!   user code identical wherever the types are inferred: the example
//!   `examples/to_kafka.rs` is `examples/replay.rs` with its first line changed.
//!
//! # The same observable behaviour
//!
//! - Keys land on the partitions logbus's partitioner gives: the producer sets
//!   `partitioner=murmur2_random` (Java's murmur2 of the key bytes, positive, modulo the
//!   partition count; librdkafka's own default is CRC32). Records without a key go to a
//!   random partition (in process: sticky batches).
//! - [`ConsumerConfig`](crate::ConsumerConfig) maps onto the client's settings: `group_id`
//!   → `group.id`, `client_id` → `client.id`, `auto_offset_reset` → `auto.offset.reset`,
//!   the assignor → `partition.assignment.strategy` (`range`, `roundrobin`,
//!   `cooperative-sticky`; Kafka's eager `sticky` has no librdkafka equivalent and is an
//!   [`Error::InvalidConfig`]), `enable_auto_commit`, `auto_commit_interval`,
//!   `max_poll_interval`, `group_instance_id`. Auto-commit commits the positions past
//!   the records `poll` handed out, as Kafka's consumer does: each poll gives them to the
//!   client's offset store (`enable.auto.offset.store=false`), since librdkafka's own
//!   store would take messages fetched and dropped (a batch an error cut short).
//! - Acknowledgement: `acks=all` unless set otherwise ([`KafkaConfig::acks`]): `send`
//!   returns when every in-sync replica has the record.
//! - A committed offset is the next record to read, as in process; a new partition starts
//!   at the group's committed offset, else per `auto_offset_reset`.
//!
//! Where the two cannot agree, Kafka decides and the docs of each method say so: Kafka
//! assigns offsets itself (an exported record keeps its partition, not necessarily its
//! offset: see [`export`]); timestamps left unset are the client's clock, not a
//! [`Clock`](crate::Clock); `send` waits for the cluster's acknowledgement (a round trip:
//! use [`KafkaProducer::send_batch`] for throughput); an empty `poll` costs a watermark
//! request per assigned partition (it checks that the consumer has caught up, see
//! [`KafkaConsumer::poll`]).
//!
//! # Errors
//!
//! Kafka's error codes become [`Error::Kafka`] (the operation, topic, partition, code, its
//! name, whether Kafka calls it retriable) or [`Error::Timeout`]; an unknown topic is
//! [`Error::UnknownTopic`], a partition past the topic's count
//! [`Error::PartitionOutOfRange`], a record over the size limit [`Error::RecordTooLarge`].
//!
//! Where each error carries its topic and partition:
//! - A send's error names the record's topic and its partition (the one it named, else the
//!   one the partitioner chose, when librdkafka got that far).
//! - `committed`, `offsets_for_times`, a watermark lookup (behind `assign`, `seek_to_*`,
//!   `beginning_offsets`, `end_offsets`) and a commit of one partition name that partition;
//!   a commit of several, `assign`, `seek` and `pause` name none (librdkafka answers those
//!   for the whole list).
//! - An error fetching a partition, reported by `poll`, names that partition (the consumer
//!   reads each partition's fetched messages from librdkafka's queues itself); an error of
//!   the client or the group, also reported by `poll`, names none.
//!
//! A send whose outcome is in doubt (Kafka's "possibly persisted": the request went out and
//! no answer came within `message.timeout.ms`) is [`Error::Timeout`] with the record
//! handed back, not [`Error::NotAcknowledged`]: that error names the offset the record has
//! in a log, and Kafka gave the record none; whether to send it again (and perhaps
//! duplicate it) is the caller's choice, as with Kafka's own producer. An in-process
//! `NotAcknowledged` has no Kafka counterpart otherwise: with `acks=all`, Kafka answers
//! only once the in-sync replicas have the record.
//!
//! # Testing without a cluster
//!
//! [`MockCluster`] is librdkafka's in-process mock cluster (the real Kafka protocol,
//! consumer groups included) with its fault injection; [`KafkaBroker::mock`] builds a broker
//! on a new one.
//!
//! # Notes for contributors
//!
//! `src/kafka/` runs logbus's producer and consumer API against a Kafka cluster through
//! [rdkafka](https://docs.rs/rdkafka) 0.39, with librdkafka bundled and built from source by its
//! own `./configure` + `make` (a C compiler, make and perl; no cmake, no system librdkafka). It
//! is off by default, so the default build never compiles librdkafka; `--all-features` (clippy,
//! rustdoc, the `tests` step, the interop build) compiles it once per target directory, in the
//! dev profile.
//!
//! | file | what |
//! |---|---|
//! | `src/kafka/mod.rs` | why mirror types (`KafkaBroker`, `KafkaProducer`, `KafkaConsumer`), what maps to what |
//! | `src/kafka/broker.rs` | `KafkaConfig` (bootstrap servers, client settings), topics, metadata, watermarks |
//! | `src/kafka/producer.rs` | one shared `ThreadedProducer`; delivery reports routed to the waiting batch |
//! | `src/kafka/consumer/` | positions kept by logbus; rebalances queued by the context and run in `poll` |
//! | `src/kafka/error.rs` | Kafka error codes → `Error::Kafka` / `Error::Timeout` |
//! | `src/kafka/mock.rs` | librdkafka's mock cluster, `Send + Sync` |
//! | `src/kafka/export.rs` | `export` / `import` (and `logbus export` / `logbus import` in `src/bin/logbus/kafka.rs`) |
//!
//! Tests run against librdkafka's mock cluster (in the test process; no Kafka to install):
//! the `tests/kafka/` binary (`kafka_mock`, `kafka_differential`, `kafka_export`, `kafka_faults`,
//! `kafka_auto_commit`).
//!
//! ```sh
//! cargo test --features kafka,cli --test kafka
//! cargo run --features kafka --example to_kafka
//! cargo bench -p logbus-comparison --features kafka --bench kafka_vs_rdkafka
//! ```
//!
//! What the mock cluster does not do, and the tests therefore do not show: it answers no
//! CreateTopics request (`KafkaBroker::create_topic` creates through the mock's own API when the
//! broker was built by `KafkaBroker::mock`), no timestamp lookup in ListOffsets (on a mock,
//! `offsets_for_times` reads the partition instead), and no commit while a group prepares to
//! rebalance (REBALANCE_IN_PROGRESS; Kafka accepts the current generation's). Each rebalance
//! waits for the session timeout less one second: the group tests use `session.timeout.ms=6000`.

mod broker;
mod consumer;
mod error;
pub mod export;
mod mock;
mod producer;
mod txn;

pub use broker::{KafkaBroker, KafkaConfig, KafkaTopic};
pub use consumer::{KafkaConsumer, KafkaRebalanceListener};
pub use mock::MockCluster;
pub use producer::KafkaProducer;

/// The `rdkafka` crate logbus is built on (for settings and fault-injection codes; and to
/// use the client directly next to logbus).
pub use rdkafka;

#[allow(unused_imports)] // for the docs' links
use crate::{codec::Codec, error::Error};
