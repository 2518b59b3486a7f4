//! Loom models of the async producer and consumer through the public API: a consumer
//! task parked in `poll_async` against a producer's record (the task's registration in
//! the topic's arrivals, then the heavy fence, then its re-check, against the producer's
//! publish and light-fenced notification), and a send awaiting room on a full `Block`
//! partition against the commit that frees it (the ring's producers' wait set, the same
//! handshake), and a member's task parked with nothing to read against another member's
//! join (the task's check of its group signal after registering). Loom reports a deadlock
//! in `block_on` if a wake-up could be lost.
#![cfg(logbus_loom)]

use logbus::broker::{Broker, TopicConfig, TopicPartition};
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::producer::Record;

fn earliest(group: Option<&str>) -> ConsumerConfig {
    let c = ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest);
    match group {
        Some(g) => c.group_id(g),
        None => c,
    }
}

/// A record sent by another thread reaches a consumer task parked in `poll_async`.
#[test]
fn a_record_wakes_a_consumer_task() {
    loom::model(|| {
        let broker = Broker::in_memory();
        broker
            .create_topic::<(), u64>("t", TopicConfig::new(1).records_in_memory(2))
            .unwrap();
        let mut consumer = broker.consumer::<(), u64>(earliest(None)).unwrap();
        consumer.assign(&[TopicPartition::new("t", 0)]).unwrap();
        let producer = broker.producer::<(), u64>();
        let sender = loom::thread::spawn(move || {
            producer.send(Record::new("t", 7)).unwrap();
        });
        let got = loom::future::block_on(consumer.poll_async()).unwrap();
        assert_eq!(got.iter().map(|r| r.value).collect::<Vec<_>>(), [7]);
        sender.join().unwrap();
    });
}

/// A send awaited on a full `Block` partition completes once another thread's commit
/// frees room.
#[test]
fn a_commit_wakes_a_send_awaiting_room() {
    loom::model(|| {
        let broker = Broker::in_memory();
        broker
            .create_topic::<(), u64>("t", TopicConfig::new(1).records_in_memory(2))
            .unwrap();
        let mut consumer = broker.consumer::<(), u64>(earliest(Some("g"))).unwrap();
        consumer.assign(&[TopicPartition::new("t", 0)]).unwrap();
        let producer = broker.producer::<(), u64>();
        producer.send(Record::new("t", 0)).unwrap();
        producer.send(Record::new("t", 1)).unwrap();
        let reader = loom::thread::spawn(move || {
            let got = consumer.poll(std::time::Duration::ZERO).unwrap();
            assert_eq!(got.len(), 2);
            consumer.commit_sync().unwrap();
        });
        let meta = loom::future::block_on(producer.send_async(Record::new("t", 2))).unwrap();
        assert_eq!(meta.offset, 2);
        reader.join().unwrap();
    });
}

/// Flags the revocation of a member's partitions (the first step of its rejoin).
struct Revoked(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl logbus::group::RebalanceListener<(), u64> for Revoked {
    fn on_partitions_revoked(
        &mut self,
        _: &mut logbus::consumer::Consumer<(), u64>,
        _: &[TopicPartition],
    ) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A member's task parked in `poll_async` (nothing to read) is woken by a rebalance that
/// another member's joining starts, and its woken poll rejoins (revoking, eager): the
/// task's registration in its group signal against the coordinator's raise.
#[test]
fn a_rebalance_wakes_a_member_task() {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::task::Poll;

    // A group's join and rebalance take more steps than loom's default bound.
    let mut model = loom::model::Builder::new();
    model.max_branches = 20_000;
    model.check(|| {
        let broker = Broker::in_memory();
        broker
            .create_topic::<(), u64>("t", TopicConfig::new(2).records_in_memory(2))
            .unwrap();
        let revoked = Arc::new(AtomicBool::new(false));
        let mut a = broker
            .consumer::<(), u64>(earliest(Some("g")).client_id("a"))
            .unwrap();
        a.subscribe_with_listener(&["t"], Revoked(Arc::clone(&revoked)))
            .unwrap();
        let mut b = broker
            .consumer::<(), u64>(earliest(Some("g")).client_id("b"))
            .unwrap();
        let joiner = loom::thread::spawn(move || {
            b.subscribe(&["t"]).unwrap();
            b
        });
        let mut polled = a.poll_async();
        loom::future::block_on(futures_poll_fn(|cx| {
            if Pin::new(&mut polled).poll(cx).is_ready() {
                panic!("no record was sent");
            }
            if revoked.load(Ordering::SeqCst) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }));
        drop(polled);
        drop(joiner.join().unwrap());
    });
}

/// `std::future::poll_fn`, named for the model.
fn futures_poll_fn<T>(
    f: impl FnMut(&mut std::task::Context<'_>) -> std::task::Poll<T>,
) -> impl std::future::Future<Output = T> {
    std::future::poll_fn(f)
}
