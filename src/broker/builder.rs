//! [`BrokerBuilder`]: the clock, the expiry of empty groups, and (with `crate::persist`)
//! the data directories a broker opens.

use std::time::Duration;

use super::Broker;
use crate::clock::{Clock, SystemClock};
// Std's Arc (also under loom): the broker shares unsized values (see `sync::StdArc`).
use crate::sync::StdArc as Arc;
use crate::Result;

/// Builds a [`Broker`] (today: which clock it reads).
#[derive(Debug)]
pub struct BrokerBuilder {
    pub(crate) clock: Arc<dyn Clock>,
    /// See [`BrokerBuilder::empty_group_timeout`].
    pub(crate) empty_group_timeout: Duration,
    /// Where and how a data directory is opened ([`BrokerBuilder::open`]).
    pub(crate) persist: crate::persist::DataDirConfig,
    /// See [`BrokerBuilder::transaction_abort_timed_out_transaction_cleanup_interval`].
    pub(crate) txn_cleanup_interval: Duration,
}

impl BrokerBuilder {
    /// The clock for record timestamps and retention ([`SystemClock`] by default;
    /// [`ManualClock`](crate::ManualClock) in tests).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// How long a consumer group with no open consumer keeps holding the producers of
    /// [`Overflow::Block`](super::Overflow::Block) topics back: 45 seconds by default (Kafka's default session
    /// timeout; Kafka never blocks a producer on a consumer, and expires an empty group's
    /// offsets after `offsets.retention.minutes`). Measured on the broker's
    /// [clock](Self::clock). Once a group has been empty that long, its gates are let go:
    /// producers overwrite what it had not committed, counted in
    /// [`PartitionInfo::overwritten_unread`](super::PartitionInfo::overwritten_unread) once no group holds those records. Its
    /// committed offsets stay; a consumer of the group assigned a partition again holds
    /// producers back from there, and counts what was overwritten meanwhile as skipped
    /// ([`ConsumerMetrics::skipped`](crate::consumer::ConsumerMetrics::skipped)) when its
    /// position resets. A member leaving and another joining within the timeout (an
    /// ordinary rebalance) keeps every record the group had not committed.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync;
    /// use std::time::Duration;
    /// use logbus::broker::{Broker, TopicConfig, TopicPartition};
    /// use logbus::consumer::ConsumerConfig;
    /// use logbus::producer::Record;
    /// use logbus::ManualClock;
    ///
    /// let clock = sync::Arc::new(ManualClock::new(0));
    /// let broker = Broker::builder()
    ///     .clock(clock.clone())
    ///     .empty_group_timeout(Duration::from_secs(60))
    ///     .build()?;
    /// broker.create_topic::<(), u64>("t", TopicConfig::new(1).records_in_memory(4))?;
    /// let mut consumer = broker.consumer::<(), u64>(ConsumerConfig::new().group_id("g"))?;
    /// consumer.assign(&[TopicPartition::new("t", 0)])?; // "g" holds producers at 0
    /// drop(consumer);
    /// let producer = broker.producer::<(), u64>();
    /// for i in 0..4 {
    ///     producer.send(Record::new("t", i))?;
    /// }
    /// assert!(producer.try_send(Record::new("t", 4)).is_err()); // full: "g" holds it
    /// clock.advance(Duration::from_secs(60));
    /// producer.send(Record::new("t", 4))?; // "g" was let go
    /// assert!(broker.describe_group("g")?.expired);
    /// # Ok::<(), logbus::Error>(())
    /// ```
    pub fn empty_group_timeout(mut self, timeout: Duration) -> Self {
        self.empty_group_timeout = timeout;
        self
    }

    /// How often the transaction coordinator looks for transactions open longer than their
    /// [`transaction_timeout`](crate::producer::ProducerConfig::transaction_timeout) and
    /// aborts them, with no call from any producer (Kafka's
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`): 10 seconds by
    /// default. Real time between two checks, from the broker's first
    /// `init_transactions` until [`close`](Broker::close); whether a transaction is past
    /// its timeout is read on the broker's [clock](Self::clock). A transaction whose
    /// producer died stays open (holding read-committed consumers at its first offset) for
    /// at most its timeout plus this interval.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) and [`open`](Self::open) refuse a zero interval with
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use logbus::broker::Broker;
    /// use logbus::Error;
    ///
    /// let broker = Broker::builder()
    ///     .transaction_abort_timed_out_transaction_cleanup_interval(Duration::from_millis(100))
    ///     .build()?;
    /// # drop(broker);
    /// assert!(matches!(
    ///     Broker::builder()
    ///         .transaction_abort_timed_out_transaction_cleanup_interval(Duration::ZERO)
    ///         .build(),
    ///     Err(Error::InvalidConfig { .. })
    /// ));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn transaction_abort_timed_out_transaction_cleanup_interval(
        mut self,
        interval: Duration,
    ) -> Self {
        self.txn_cleanup_interval = interval;
        self
    }

    /// Refuses a zero [`transaction_abort_timed_out_transaction_cleanup_interval`](Self::transaction_abort_timed_out_transaction_cleanup_interval).
    pub(crate) fn validate_txn_cleanup_interval(&self) -> Result<()> {
        if self.txn_cleanup_interval.is_zero() {
            return Err(crate::Error::InvalidConfig {
                name: "transaction_abort_timed_out_transaction_cleanup_interval",
                value: format!("{:?}", self.txn_cleanup_interval),
                valid: "a positive duration (Kafka's default: 10 s)".into(),
            });
        }
        Ok(())
    }

    /// The broker: in memory, or, when a data directory was given
    /// ([`data_dir`](Self::data_dir), [`data_dirs`](Self::data_dirs)), opened on it exactly as
    /// [`open`](Self::open) opens it — a builder given a directory never quietly builds an
    /// in-memory broker.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for a zero
    /// [`transaction_abort_timed_out_transaction_cleanup_interval`](Self::transaction_abort_timed_out_transaction_cleanup_interval).
    /// With a data directory: as [`open`](Self::open) (a missing or unformatted
    /// directory without [`create`](Self::create), a locked one, ...).
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::broker::{Broker, TopicConfig};
    /// use logbus::persist::PersistConfig;
    /// use logbus::Error;
    ///
    /// let in_memory = Broker::builder().build()?;
    /// # drop(in_memory);
    /// let tmp = tempfile::tempdir()?;
    /// let missing = tmp.path().join("data");
    /// assert!(matches!(
    ///     Broker::builder().data_dir(&missing).build(),
    ///     Err(Error::DataDirUnformatted { missing: true, .. })
    /// ));
    /// let persisted = Broker::builder().data_dir(&missing).create(true).build()?;
    /// persisted.create_topic::<(), String>("t", TopicConfig::new(1).persist(PersistConfig::new()))?;
    /// persisted.close()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn build(self) -> Result<Broker> {
        if self.persist.dir.is_some() || self.persist.no_dirs {
            return self.open();
        }
        self.validate_txn_cleanup_interval()?;
        let broker = Broker::from_parts(self.clock, None, super::txn::TxnCoordinator::in_memory());
        broker.set_empty_group_timeout(self.empty_group_timeout);
        broker.set_txn_cleanup_interval(self.txn_cleanup_interval);
        Ok(broker)
    }
}

/// [`BrokerBuilder::empty_group_timeout`]'s default.
pub(super) const DEFAULT_EMPTY_GROUP_TIMEOUT: Duration = Duration::from_secs(45);

/// `d` in whole milliseconds (saturating).
pub(super) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Broker {
    /// A builder, to choose the clock.
    pub fn builder() -> BrokerBuilder {
        BrokerBuilder {
            clock: Arc::new(SystemClock),
            empty_group_timeout: DEFAULT_EMPTY_GROUP_TIMEOUT,
            persist: crate::persist::DataDirConfig::default(),
            txn_cleanup_interval: super::txn::DEFAULT_TXN_CLEANUP_INTERVAL,
        }
    }
}
