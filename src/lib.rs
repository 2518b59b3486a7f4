//! # logbus — Kafka's model inside one process
//!
//! Threads produce records to topics split into partitions; each partition is an
//! append-only log addressed by offsets; consumer groups share partitions and commit
//! offsets; any reader can replay from an offset or a timestamp. Beside it
//! sit the two simpler shapes programs need first: a bounded blocking queue and an observer
//! bus.
//!
//! Topics live in memory, or on disk in Kafka's segment format ([`persist`]); consumers are
//! [assigned](Consumer::assign) partitions or [subscribe](Consumer::subscribe) as members of
//! a [`group`] whose partitions Kafka's assignors share out.
//!
//! The crate is built in layers, bottom up. A module calls only modules of its own layer or
//! below (a type two layers share lives in the lower one), and no chain of references between
//! modules leads back to where it started. `scripts/check-layers` reads the table below and
//! fails CI on an upward reference or a cycle, so the table and the code cannot disagree.
//!
//! <!-- layers: begin (scripts/check-layers parses the rows up to "layers: end") -->
//! | layer | modules | what they are |
//! |---|---|---|
//! | 0 | `sync` (private) | the loom-switchable synchronisation shim: the only code naming atomics, locks, parking, spawning, fences |
//! | 1 | [`clock`], [`codec`], [`error`], `topic_partition` (private; [`TopicPartition`]) | time, bytes, errors and partition names, shared by every layer |
//! | 2 | [`ring`] | the lock-free ring (the Disruptor's structure): the in-memory tail of every log |
//! | 3 | [`queue`], [`observer`] | a bounded blocking MPMC queue (crossbeam-channel's API, plus batches); an observer bus |
//! | 4 | [`storage`] | one partition's log on disk, in Kafka's segment format (RecordBatch v2), behind an I/O trait |
//! | 5 | `partition` (private), [`persist`] | one partition's log (the ring as its tail, log start / HW / LEO, commit gating; a replica's log; topic configuration); the one write path to disk of every persisted topic, whatever its replication factor: data directories, segment sets, flush policies, checkpoints, retention |
//! | 6 | [`replica`] | replication over partition logs: follower fetches, ISR, HW, acks, elections, truncation by leader epoch, the fault hooks |
//! | 7 | [`broker`] | the registry of topics and groups, their admin operations, the builder, the fault-injection API, the group coordinator and the assignors it runs |
//! | 8 | [`producer`], [`consumer`], [`group`] | the public face: partitioning, batching, acks; assign / subscribe / poll / commit / seek, group membership and rebalance listeners, lag |
//! | 9 | `kafka` (feature `kafka`) | the same producer and consumer API over a Kafka cluster (rdkafka) |
//! <!-- layers: end -->
//!
//! `impl Broker` is the broker's, in `broker/`, except the constructors of the clients above
//! it: [`Broker::producer`] and [`Broker::consumer`] live with the producer and the consumer,
//! and [`Broker::subscribe_with`] with the groups, each calling down into the broker. The
//! `logbus` binary (`src/bin/`, feature `cli`) is a crate of its own on the public API.
//!
//! ## Topics: Kafka's model in memory
//!
//! A [`Broker`] holds typed topics split into partitions; a [`Producer`] sends
//! [`Record`]s (a key lands on the partition Kafka's default partitioner would choose); a
//! [`Consumer`] is assigned partitions, polls from its position, commits under its group id
//! and seeks back by offset or timestamp to replay.
//!
//! ```
//! use std::time::Duration;
//! use logbus::{Broker, ConsumerConfig, OffsetReset, Record, TopicConfig, TopicPartition};
//!
//! let broker = Broker::in_memory();
//! broker.create_topic::<String, u64>("orders", TopicConfig::new(3))?;
//! let producer = broker.producer::<String, u64>();
//! let sent = producer.send(Record::new("orders", 42).key("customer-7".to_string()))?;
//!
//! let mut consumer = broker.consumer::<String, u64>(
//!     ConsumerConfig::new().group_id("billing").auto_offset_reset(OffsetReset::Earliest),
//! )?;
//! let tp = TopicPartition::new("orders", sent.partition);
//! consumer.assign(&[tp.clone()])?;
//! let records = consumer.poll(Duration::from_secs(1))?;
//! assert_eq!(records.iter().next().map(|r| r.value), Some(42));
//! consumer.commit_sync()?; // the group resumes after this record
//! consumer.seek(&tp, 0)?; // replay
//! # Ok::<(), logbus::Error>(())
//! ```
//!
//! What blocks: `send` on an [`Overflow::Block`] topic while a partition is full of records
//! a registered group has not committed; `poll` until a record arrives or the timeout
//! passes. What allocates: creating topics, producers and consumers, and `poll`'s result
//! vector; never `send` or [`poll_with`](Consumer::poll_with) per record (no key, no
//! headers). Ordering: per partition, in offset order; offsets are dense from 0.
//!
//! Transactions (Kafka's KIP-98, with an epoch per transaction as KIP-890): a producer with
//! a `transactional_id` writes to many partitions and commits its consumer group's offsets
//! atomically; read-committed consumers see committed transactions only. The producer
//! module's "Delivery semantics" says what each configuration may lose or repeat.
//!
//! ## The ring: one producer, readers at their own pace
//!
//! [`ring`] is the lock-free ring every log is built on (the LMAX Disruptor's structure):
//! sequence-numbered slots, a single- or multi-producer sequencer, and any number of readers
//! with their own cursors. *Gating* readers hold producers back; the others never do and are
//! told exactly how many entries they missed when they fall a lap behind.
//!
//! ```
//! use logbus::ring::{LapPolicy, ReadError, Ring, RingConfig, Start, TryReadError};
//!
//! // Drop-oldest mode: the producer never waits for readers.
//! let config = RingConfig::new(8).overflow(LapPolicy::DropOldest);
//! let (mut producer, ring) = Ring::single_producer(config)?;
//! let mut follower = ring.reader(Start::Tail)?;
//!
//! producer.publish_with(20, |seq| seq * 2).unwrap(); // a batch, written in place
//! // The follower was a lap and more behind: 12 entries are gone, it is told so...
//! assert_eq!(follower.try_read(), Err(TryReadError::Lagged(12)));
//! // ...and continues from the oldest entry still in the ring.
//! assert_eq!(follower.try_read(), Ok(24));
//!
//! drop(producer); // closes the ring: readers drain what is left, then see `Closed`
//! let mut rest = Vec::new();
//! while let Ok(n) = follower.read_batch(&mut rest, 16) {
//!     assert!(n > 0);
//! }
//! assert_eq!(rest.len(), 7);
//! assert_eq!(follower.read(), Err(ReadError::Closed));
//! # Ok::<(), logbus::Error>(())
//! ```
//!
//! What blocks: `publish*` on an [`LapPolicy::Block`](ring::LapPolicy::Block) ring while a
//! gating reader is a full lap behind, and `read*` on an empty ring (yield, then park);
//! every `try_*` returns at once. What allocates: creating a ring or a reader, never an entry.
//! Ordering: every reader sees entries in sequence order, each producer's in its own order.
//!
//! ## Guarantees
//!
//! - No `unsafe` block without a written safety argument; every lock-free structure is
//!   model-checked with [loom](https://docs.rs/loom) and its unsafe core runs under Miri.
//! - Bad input is a typed [`Error`] that says what was wrong and what is valid.
//!
//! ## The bounded queue and the observer bus
//!
//! [`queue::bounded`] is a drop-in for `crossbeam_channel::bounded` (same methods, same
//! error types), plus batch operations that move many messages per synchronisation:
//!
//! ```
//! use logbus::queue::bounded;
//!
//! let (tx, rx) = bounded::<u64>(1024);
//! let mut batch: Vec<u64> = (0..64).collect();
//! tx.send_batch(&mut batch).unwrap(); // one claim for the 64 slots
//! let mut out = Vec::with_capacity(64);
//! assert_eq!(rx.recv_batch(&mut out, 64), Ok(64));
//! ```
//!
//! [`observer::EventBus`] calls every subscriber for each published event, on the
//! publisher's thread or on the subscriber's own thread through a bounded buffer:
//!
//! ```
//! use logbus::observer::EventBus;
//!
//! let bus = EventBus::new();
//! let sub = bus.subscribe(|e: &&str| assert_eq!(*e, "deployed"));
//! assert_eq!(bus.publish("deployed"), 1);
//! drop(sub); // unsubscribes
//! ```
//!
//! ## Running logbus inside your own loom model
//!
//! Build with `RUSTFLAGS="--cfg logbus_loom"`: logbus then takes every atomic, lock, park and
//! spawn from loom, so its structures can be used inside `loom::model` like loom's own types.
//! The cfg is logbus's own (`logbus_loom`, not `loom`), so turning on loom for your crate
//! does not flip logbus by accident. One command, with a preemption bound that keeps models
//! small enough to finish:
//!
//! ```text
//! RUSTFLAGS="--cfg logbus_loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release
//! ```
//!
//! Declare the cfg so that your builds do not warn about it (`Cargo.toml`):
//!
//! ```toml
//! [lints.rust]
//! unexpected_cfgs = { level = "warn", check-cfg = ["cfg(logbus_loom)"] }
//! ```

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod sync;

pub mod broker;
pub mod clock;
pub mod codec;
pub mod consumer;
pub mod error;
pub mod group;
// Beyond one process: the same API against a Kafka cluster (librdkafka, off by default).
#[cfg(all(feature = "kafka", not(logbus_loom)))]
pub mod kafka;
pub mod observer;
mod partition;
pub mod persist;
pub mod producer;
pub mod queue;
pub mod replica;
pub mod ring;
pub mod storage;
mod topic_partition;

pub use broker::{Broker, Overflow, Topic, TopicConfig};
// The README's snippets compile and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The byte buffer of `Codec`'s impls and of record headers, re-exported so that callers need
/// no `bytes` dependency of their own.
pub use bytes::Bytes;
pub use clock::{Clock, ManualClock, SystemClock};
pub use codec::Codec;
pub use consumer::{Consumer, ConsumerConfig, ConsumerRecord, ConsumerRecords, OffsetReset};
pub use error::{Error, Result};
pub use partition::{Headers, MAX_TIMESTAMP};
pub use producer::{Producer, Record, RecordMetadata};
pub use topic_partition::TopicPartition;
