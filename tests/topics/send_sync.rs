//! Which public types are `Send`, `Sync` and `UnwindSafe`, checked at compile time — and which
//! must not be. One file for the whole crate: a type added to the public API gets its line here.

use std::cell::Cell;
use std::panic::{RefUnwindSafe, UnwindSafe};
use std::rc::Rc;

fn send_sync<T: Send + Sync>() {}
fn send<T: Send>() {}
fn unpin<T: Unpin>() {}
fn unwind_safe<T: UnwindSafe + RefUnwindSafe>() {}

/// Compile-time negative checks, without trybuild: `<T as AmbiguousIfSend<_>>::some_item()`
/// compiles only if exactly one impl applies, so it fails to compile when `T: Send` (both
/// blanket impls apply and the call is ambiguous). The same for `Sync`.
trait AmbiguousIfSend<A> {
    fn some_item() {}
}
impl<T: ?Sized> AmbiguousIfSend<()> for T {}
struct Invalid;
impl<T: ?Sized + Send> AmbiguousIfSend<Invalid> for T {}

trait AmbiguousIfSync<A> {
    fn some_item() {}
}
impl<T: ?Sized> AmbiguousIfSync<()> for T {}
impl<T: ?Sized + Sync> AmbiguousIfSync<Invalid> for T {}

macro_rules! assert_not_send {
    ($t:ty) => {
        <$t as AmbiguousIfSend<_>>::some_item()
    };
}
macro_rules! assert_not_sync {
    ($t:ty) => {
        <$t as AmbiguousIfSync<_>>::some_item()
    };
}

mod queue {
    use super::*;
    use logbus::queue::{
        IntoIter, Iter, Protocol, Receiver, RecvError, RecvTimeoutError, SendError,
        SendTimeoutError, Sender, TryIter, TryRecvError, TrySendError,
    };

    #[test]
    fn handles_are_send_and_sync_for_send_payloads() {
        // `Cell` is Send but not Sync: the handles still are both.
        send_sync::<Sender<Cell<u32>>>();
        send_sync::<Receiver<Cell<u32>>>();
        send_sync::<Sender<Vec<u8>>>();
        send_sync::<Receiver<Vec<u8>>>();
        send::<IntoIter<Cell<u32>>>();
        send_sync::<Iter<'static, u32>>();
        send_sync::<TryIter<'static, u32>>();
        unpin::<Sender<Rc<u8>>>();
        send_sync::<Protocol>();
        send_sync::<SendError<u8>>();
        send_sync::<TrySendError<u8>>();
        send_sync::<SendTimeoutError<u8>>();
        send_sync::<RecvError>();
        send_sync::<TryRecvError>();
        send_sync::<RecvTimeoutError>();
        send_sync::<logbus::queue::SendBatchError>();
        send_sync::<logbus::queue::SendBatchTimeoutError>();
    }

    #[test]
    fn handles_are_not_send_for_rc_payloads() {
        assert_not_send!(Sender<Rc<u8>>);
        assert_not_send!(Receiver<Rc<u8>>);
    }

    #[test]
    fn handles_are_unwind_safe_as_crossbeam_channels_are() {
        // For any payload, even one that is neither (`Cell` is not `RefUnwindSafe`).
        unwind_safe::<Sender<Cell<u32>>>();
        unwind_safe::<Receiver<Cell<u32>>>();
        unwind_safe::<Iter<'static, Cell<u32>>>();
        unwind_safe::<TryIter<'static, Cell<u32>>>();
        unwind_safe::<IntoIter<Cell<u32>>>();
    }

    #[test]
    fn a_send_wrapped_in_catch_unwind_compiles_and_the_queue_works_after() {
        let (tx, rx) = logbus::queue::bounded(2);
        // No `AssertUnwindSafe`: the closure borrows both handles.
        let r = std::panic::catch_unwind(|| {
            tx.send(1).unwrap();
            assert_eq!(rx.recv(), Ok(1));
            tx.send(2).unwrap();
            panic!("after the send");
        });
        assert!(r.is_err());
        assert_eq!(rx.try_recv(), Ok(2));
        tx.send(3).unwrap();
        assert_eq!(rx.recv(), Ok(3));
    }
}

mod ring {
    use super::*;
    use logbus::ring::{
        BatchClosed, GetError, MultiProducer, PublishError, PublishTimeoutError, ReadError,
        ReadTimeoutError, Reader, Ring, RingConfig, SingleProducer, TryPublishError, TryReadError,
    };

    /// Readers clone entries on several threads at once and producers move values in from
    /// other threads: the handles are `Send`/`Sync` exactly when `T: Send + Sync`.
    #[test]
    fn handles_are_send_and_sync_for_send_sync_payloads() {
        send_sync::<Ring<String>>();
        send_sync::<SingleProducer<String>>();
        send_sync::<MultiProducer<String>>();
        send_sync::<Reader<String>>();
        send_sync::<RingConfig>();
        send_sync::<BatchClosed>();
        send_sync::<GetError>();
        send_sync::<ReadError>();
        send_sync::<TryReadError>();
        send_sync::<ReadTimeoutError>();
        send_sync::<PublishError<u8>>();
        send_sync::<TryPublishError<u8>>();
        send_sync::<PublishTimeoutError<u8>>();
    }

    #[test]
    fn handles_are_not_send_or_sync_for_rc_or_cell_payloads() {
        assert_not_send!(Ring<Rc<u8>>);
        assert_not_send!(Ring<Cell<u8>>);
        assert_not_sync!(Ring<Cell<u8>>);
        assert_not_send!(Reader<Cell<u8>>);
        assert_not_send!(SingleProducer<Rc<u8>>);
        assert_not_sync!(MultiProducer<Cell<u8>>);
    }
}

mod observer {
    use super::*;
    use logbus::observer::{
        Delivery, EventBus, SlowSubscriberPolicy, SubscriberPanic, Subscription,
    };

    #[test]
    fn bus_and_subscriptions_are_send_and_sync() {
        send_sync::<EventBus<String>>();
        send_sync::<Subscription>();
        send_sync::<SubscriberPanic>();
        send_sync::<Delivery>();
        send_sync::<SlowSubscriberPolicy>();
    }
}

mod topics {
    use super::*;
    use logbus::broker::{BrokerBuilder, PartitionInfo, TopicDescription};
    use logbus::consumer::RecordRef;
    use logbus::consumer::{ConsumerMetrics, OffsetAndTimestamp};
    use logbus::producer::{
        PartitionProducer, Payload, PendingSend, ProduceBatchError, ProduceError,
        ProduceTimeoutError, ProducerConfig, TryProduceError,
    };
    use logbus::{
        Broker, Consumer, ConsumerConfig, ConsumerRecord, ConsumerRecords, Error, OffsetReset,
        Overflow, Producer, Record, RecordMetadata, Topic, TopicConfig, TopicPartition,
    };

    #[test]
    fn broker_producer_and_values_are_send_and_sync() {
        send_sync::<Broker>();
        send_sync::<BrokerBuilder>();
        send_sync::<Topic<String, Vec<u8>>>();
        send_sync::<TopicConfig>();
        send_sync::<TopicDescription>();
        send_sync::<PartitionInfo>();
        send_sync::<Overflow>();
        send_sync::<Producer<String, Vec<u8>>>();
        send_sync::<ProducerConfig>();
        send_sync::<Record<String, Vec<u8>>>();
        send_sync::<RecordMetadata>();
        send_sync::<ProduceError<String, Vec<u8>>>();
        send_sync::<TryProduceError<String, Vec<u8>>>();
        send_sync::<ProduceTimeoutError<String, Vec<u8>>>();
        send_sync::<Payload<String, Vec<u8>>>();
        send_sync::<ProduceBatchError>();
        send_sync::<PartitionProducer<'static, String, Vec<u8>>>();
        send_sync::<PendingSend<String, Vec<u8>>>();
        send_sync::<RecordRef<'static, String, Vec<u8>>>();
        send_sync::<ConsumerConfig>();
        send_sync::<ConsumerRecord<String, Vec<u8>>>();
        send_sync::<ConsumerRecords<String, Vec<u8>>>();
        send_sync::<OffsetAndTimestamp>();
        send_sync::<ConsumerMetrics>();
        send_sync::<OffsetReset>();
        send_sync::<TopicPartition>();
        send_sync::<Error>();
    }

    /// A consumer moves to another thread, but is used from one thread at a time (as Kafka's
    /// `KafkaConsumer`): it is `Send` and not `Sync`.
    #[test]
    fn consumer_is_send_not_sync() {
        send::<Consumer<String, Vec<u8>>>();
        assert_not_sync!(Consumer<String, Vec<u8>>);
    }
}

mod storage {
    use super::*;
    use logbus::storage::fault::{Fault, FaultyIo};
    use logbus::storage::record_batch::{Batch, BatchBuilder, BatchIter, BatchRecords};
    use logbus::storage::verify::{PartitionReport, TreeReport, VerifyConfig};
    use logbus::storage::{
        AppendInfo, BatchHeader, BatchRecord, Checkpoints, FsIo, LogConfig, Problem, ProblemKind,
        RecoveryReport, ScanEnd, SegmentInfo, SegmentSet, Truncation, VerifyReport,
    };

    #[test]
    fn logs_and_reports_are_send_and_sync() {
        send_sync::<SegmentSet>();
        send_sync::<LogConfig>();
        send_sync::<Checkpoints>();
        send_sync::<AppendInfo>();
        send_sync::<SegmentInfo>();
        send_sync::<RecoveryReport>();
        send_sync::<Truncation>();
        send_sync::<VerifyReport>();
        send_sync::<Problem>();
        send_sync::<ProblemKind>();
        send_sync::<VerifyConfig>();
        send_sync::<PartitionReport>();
        send_sync::<TreeReport>();
        send_sync::<ScanEnd>();
        send_sync::<FsIo>();
        send_sync::<FaultyIo>();
        send_sync::<Fault>();
        send_sync::<BatchRecord>();
        send_sync::<BatchHeader>();
        send_sync::<BatchBuilder>();
        send_sync::<Batch<'static>>();
        send_sync::<BatchIter<'static>>();
        send_sync::<BatchRecords<'static>>();
    }

    #[test]
    fn plain_values_are_unwind_safe() {
        unwind_safe::<LogConfig>();
        unwind_safe::<Checkpoints>();
        unwind_safe::<RecoveryReport>();
        unwind_safe::<VerifyReport>();
        unwind_safe::<BatchRecord>();
        unwind_safe::<BatchBuilder>();
    }
}

mod group_and_clock {
    use super::*;
    use logbus::group::{
        CooperativeStickyAssignor, MemberSubscription, RangeAssignor, RebalanceProtocol,
        RoundRobinAssignor, StickyAssignor,
    };
    use logbus::{ManualClock, SystemClock};

    #[test]
    fn assignors_and_clocks_are_send_and_sync() {
        send_sync::<RangeAssignor>();
        send_sync::<RoundRobinAssignor>();
        send_sync::<StickyAssignor>();
        send_sync::<CooperativeStickyAssignor>();
        send_sync::<RebalanceProtocol>();
        send_sync::<MemberSubscription>();
        send_sync::<SystemClock>();
        send_sync::<ManualClock>();
        unwind_safe::<SystemClock>();
    }
}

mod replicas {
    use super::*;
    use logbus::replica::{
        EventKind, Faults, LocalReplica, PartitionReplicas, ReplicaEvent, ReplicaInfo,
        StoredPartition, StoredTopic,
    };

    #[test]
    fn faults_events_and_descriptions_are_send_and_sync() {
        send_sync::<Faults>();
        send_sync::<ReplicaEvent>();
        send_sync::<EventKind>();
        send_sync::<ReplicaInfo>();
        send_sync::<PartitionReplicas>();
        send_sync::<StoredPartition>();
        send_sync::<StoredTopic>();
        send_sync::<LocalReplica>();
        send_sync::<logbus::ring::PublishBatchTimeoutError>();
        send_sync::<logbus::storage::LogSetup>();
    }
}
