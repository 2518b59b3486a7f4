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
//! # Idempotence and transactions
//!
//! As in process (see the producer module's "Delivery semantics"): a producer with
//! `acks=all` is idempotent (`enable.idempotence`, off in librdkafka by default, is set
//! unless the [`KafkaConfig`] says otherwise), and
//! [`KafkaBroker::producer_with_config`] takes the same
//! [`ProducerConfig`](crate::producer::ProducerConfig) as
//! [`Broker::producer_with_config`](crate::Broker::producer_with_config), its
//! `transactional_id` making a transactional producer with its own client. The calls are
//! the in-process ones, in the same states, with the same refusals
//! ([`Error::InvalidTxnState`]): [`KafkaProducer::init_transactions`],
//! [`begin_transaction`](KafkaProducer::begin_transaction), sends,
//! [`send_offsets_to_transaction`](KafkaProducer::send_offsets_to_transaction),
//! [`commit_transaction`](KafkaProducer::commit_transaction),
//! [`abort_transaction`](KafkaProducer::abort_transaction); dropping the last clone with a
//! transaction open aborts it. A consumer's
//! [`isolation_level`](crate::ConsumerConfig::isolation_level) becomes `isolation.level`
//! (always set: librdkafka's own default is `read_committed`, Kafka's and logbus's
//! `read_uncommitted`); a read-committed consumer reads up to the last stable offset, and
//! a consumer's position moves past transaction markers and aborted records, which are
//! never returned, as in process.
//!
//! librdkafka sorts a transactional error into a class; each class is one logbus error,
//! and says what to do:
//!
//! | class | error | what to do |
//! |---|---|---|
//! | fenced: a newer producer with the same `transactional_id` called `init_transactions` | [`Error::ProducerFenced`] (producer id and epochs -1: librdkafka does not tell them) | nothing more with this producer: drop it; the newer one owns the id |
//! | fatal: any other error librdkafka cannot recover from (lost authorization, a broker without transactions) | [`Error::ProducerFatal`] | drop the producer; make a new one and call `init_transactions` |
//! | abortable: a send of the transaction failed, or the coordinator refused a partition or the offsets | [`Error::TransactionAbortable`] | `abort_transaction`, then do the transaction's work again from the last committed input offsets |
//! | retriable: no answer within the broker's request timeout, the coordinator moving | [`Error::Timeout`] or [`Error::Kafka`] with `retriable` | call the same method again (a commit or abort that timed out must be finished by calling it again: its outcome is not known) |
//!
//! After a fenced or fatal error every call fails the same way. A send's own error inside
//! a transaction is the send's (a record too large, an unknown partition); the transaction
//! is then abortable only, as in process. `send_offsets_to_transaction` names the group, as
//! in process: librdkafka sends it without member id and generation, so Kafka does not
//! check that the offsets come from the group's current generation (KIP-447).
//!
//! No `Producer::transaction_ids` or `producer_identity` here: librdkafka does not tell the
//! application its producer id and epoch. An in-process [`Error::TransactionTimedOut`] has
//! no counterpart either: a transaction the coordinator aborted on its timeout shows as
//! [`Error::ProducerFenced`] or an abortable error, as librdkafka reports it.
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
//! | `src/kafka/producer.rs` | one shared `ThreadedProducer` (or a producer's own, with a `ProducerConfig`); delivery reports routed to the waiting batch |
//! | `src/kafka/txn.rs` | the transactional calls: the in-process states, librdkafka's error classes |
//! | `src/kafka/consumer/` | positions kept by logbus; rebalances queued by the context and run in `poll` |
//! | `src/kafka/error.rs` | Kafka error codes → `Error::Kafka` / `Error::Timeout` |
//! | `src/kafka/mock.rs` | librdkafka's mock cluster, `Send + Sync` |
//! | `src/kafka/export.rs` | `export` / `import` (and `logbus export` / `logbus import` in `src/bin/logbus/kafka.rs`) |
//!
//! Tests run against librdkafka's mock cluster (in the test process; no Kafka to install):
//! the `tests/kafka/` binary (`kafka_mock`, `kafka_differential`, `kafka_export`, `kafka_faults`,
//! `kafka_auto_commit`, `kafka_txn`).
//!
//! ```sh
//! cargo test --features kafka,cli --test kafka
//! cargo run --features kafka --example to_kafka
//! cargo bench -p logbus-comparison --features kafka --bench kafka_vs_rdkafka
//! ```
//!
//! Transactions on the mock cluster (`kafka_txn`): the mock answers InitProducerId,
//! AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn and checks a
//! transactional record's producer id, epoch and sequence, so the calls, their states, the
//! records of committed and aborted transactions as read-uncommitted consumers see them, and
//! the error classes (by injected errors) are tested. It does not:
//! - write COMMIT or ABORT markers: EndTxn only checks the producer id, and its fetch
//!   responses give the high watermark as the last stable offset and list no aborted
//!   transactions, so a read-committed consumer reads open and aborted transactions' records
//!   (and positions never skip markers);
//! - commit offsets sent to a transaction: TxnOffsetCommit checks the request and stores
//!   nothing, so the group's committed offsets do not move;
//! - fence: each InitProducerId with a transactional id gets a new producer id at epoch 0,
//!   and the older producer's id stays valid, so a second producer with the same id does not
//!   fence the first (fencing is tested by injecting `PRODUCER_FENCED`);
//! - restart a producer's sequences at a new epoch: after an epoch bump (an abort that
//!   follows a failed send, KIP-360), it still expects the old epoch's next sequence on the
//!   partitions the producer wrote to, so the producer's next transaction fails there;
//! - check the sequences of an idempotent producer without a transactional id (nothing to
//!   see of idempotence but the settings).
//!
//! The `real_cluster_*` tests in `kafka_txn` check what the mock cannot (read committed
//! skips aborted and open transactions, offsets commit with the transaction, a second
//! producer fences the first) on a cluster named by `LOGBUS_KAFKA_BOOTSTRAP`; they are
//! `#[ignore]`d otherwise. The `mock_*` tests there pin each gap above, so a librdkafka
//! whose mock gains the feature fails them.
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
