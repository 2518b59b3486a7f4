//! The batch contract shared by the ring and the queue: a batch send keeps what it could
//! not send in the caller's `Vec`, in order, and its error counts what was sent; every
//! blocking batch operation has `_timeout` and `_deadline` forms. The error paths of each.

use std::thread;
use std::time::{Duration, Instant};

use logbus::queue::{bounded, unbounded, RecvTimeoutError, SendBatchError, SendBatchTimeoutError};
use logbus::ring::{
    BatchClosed, PublishBatchTimeoutError, ReadTimeoutError, Ring, RingConfig, Start,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn a_queue_batch_send_that_times_out_keeps_the_rest() {
    let (tx, rx) = bounded(3);
    let mut batch = vec![1, 2, 3, 4, 5];
    let e = tx.send_batch_timeout(&mut batch, ms(5)).unwrap_err();
    assert_eq!(e, SendBatchTimeoutError::Timeout { sent: 3 });
    assert!(e.is_timeout() && !e.is_disconnected());
    assert_eq!(e.sent(), 3);
    assert_eq!(batch, [4, 5]);
    let past = Instant::now();
    assert_eq!(
        tx.send_batch_deadline(&mut batch, past),
        Err(SendBatchTimeoutError::Timeout { sent: 0 })
    );
    assert_eq!(batch, [4, 5]);
    let mut out = Vec::new();
    assert_eq!(rx.recv_batch(&mut out, 8), Ok(3));
    assert_eq!(out, [1, 2, 3]);
    // Room again: the rest goes through, and the batch is emptied.
    tx.send_batch_timeout(&mut batch, ms(1000)).unwrap();
    assert!(batch.is_empty());
    assert_eq!(rx.len(), 2);
}

#[test]
fn a_queue_batch_send_cut_by_a_disconnection_counts_what_went_in() {
    let (tx, rx) = bounded(2);
    let taker = thread::spawn(move || {
        let mut out = Vec::new();
        // Take the first two, then go: the sender is blocked on the third.
        rx.recv_batch(&mut out, 2).unwrap();
        if out.len() < 2 {
            rx.recv_batch(&mut out, 1).unwrap();
        }
        out
    });
    let mut batch: Vec<u32> = (0..10).collect();
    let e = tx.send_batch(&mut batch).unwrap_err();
    assert_eq!(taker.join().unwrap(), [0, 1]);
    // Two were taken, up to two more waited in the queue when the receiver went; the
    // rest stayed with the caller, in order, and the count says where the cut fell.
    assert!((2..=4).contains(&e.sent), "{e}");
    assert_eq!(batch, (e.sent as u32..10).collect::<Vec<_>>());
    assert_eq!(
        tx.send_batch_timeout(&mut batch, ms(5)),
        Err(SendBatchTimeoutError::Disconnected { sent: 0 })
    );
    assert_eq!(
        tx.try_send_batch(&mut batch),
        Err(SendBatchError { sent: 0 })
    );
    assert_eq!(batch.len(), 10 - e.sent);
}

#[test]
fn a_rendezvous_batch_send_times_out_with_no_receiver() {
    let (tx, rx) = bounded::<u8>(0);
    let mut batch = vec![1, 2];
    assert_eq!(
        tx.send_batch_timeout(&mut batch, ms(5)),
        Err(SendBatchTimeoutError::Timeout { sent: 0 })
    );
    assert_eq!(tx.try_send_batch(&mut batch), Ok(0));
    assert_eq!(batch, [1, 2]);
    let taker = thread::spawn(move || rx.recv().unwrap());
    assert_eq!(
        tx.send_batch_timeout(&mut batch, Duration::from_secs(30))
            .unwrap_err()
            .sent(),
        1,
        "one receiver, one message: the second times out (or finds it gone)"
    );
    assert_eq!(taker.join().unwrap(), 1);
    assert_eq!(batch, [2]);
}

#[test]
fn queue_batch_receives_time_out_and_see_disconnection_in_every_flavour() {
    for (tx, rx) in [bounded::<u8>(4), unbounded(), bounded(0)] {
        let mut out = Vec::new();
        assert_eq!(
            rx.recv_batch_timeout(&mut out, 4, ms(2)),
            Err(RecvTimeoutError::Timeout)
        );
        assert_eq!(
            rx.recv_batch_deadline(&mut out, 4, Instant::now()),
            Err(RecvTimeoutError::Timeout)
        );
        assert_eq!(rx.recv_batch_timeout(&mut out, 0, ms(2)), Ok(0));
        drop(tx);
        assert_eq!(
            rx.recv_batch_timeout(&mut out, 4, ms(1000)),
            Err(RecvTimeoutError::Disconnected)
        );
        assert!(out.is_empty());
    }
    let (tx, rx) = unbounded();
    tx.send_batch(&mut vec![1, 2, 3]).unwrap();
    let mut out = Vec::new();
    assert_eq!(rx.recv_batch_timeout(&mut out, 2, ms(1000)), Ok(2));
    assert_eq!(rx.recv_batch_deadline(&mut out, 2, Instant::now()), Ok(1));
    assert_eq!(out, [1, 2, 3]);
}

#[test]
fn a_ring_batch_publish_that_times_out_keeps_the_rest() {
    let (mut producer, ring) = Ring::<u32>::single_producer(RingConfig::new(2)).unwrap();
    let mut gating = ring.gating_reader(Start::Tail).unwrap();
    let mut batch = vec![1, 2, 3, 4];
    let e = producer
        .publish_batch_timeout(&mut batch, ms(5))
        .unwrap_err();
    assert_eq!(e, PublishBatchTimeoutError::Timeout { published: 2 });
    assert_eq!(e.published(), 2);
    assert_eq!(batch, [3, 4]);
    assert_eq!(
        producer.publish_batch_deadline(&mut batch, Instant::now()),
        Err(PublishBatchTimeoutError::Timeout { published: 0 })
    );
    let mut out = Vec::new();
    assert_eq!(
        gating.read_batch_deadline(&mut out, 8, Instant::now() + ms(1000)),
        Ok(2)
    );
    assert_eq!(out, [1, 2]);
    producer
        .publish_batch_timeout(&mut batch, ms(1000))
        .unwrap();
    assert!(batch.is_empty());

    ring.close();
    let mut more = vec![5, 6];
    assert_eq!(
        producer.publish_batch_timeout(&mut more, ms(5)),
        Err(PublishBatchTimeoutError::Closed { published: 0 })
    );
    assert_eq!(
        producer.publish_batch(&mut more),
        Err(BatchClosed { published: 0 })
    );
    assert_eq!(more, [5, 6]);
}

#[test]
fn a_ring_batch_read_with_a_deadline_times_out_then_sees_the_close() {
    let (mut producer, ring) = Ring::<u32>::single_producer(RingConfig::new(4)).unwrap();
    let mut reader = ring.reader(Start::Tail).unwrap();
    let mut out = Vec::new();
    assert_eq!(
        reader.read_batch_deadline(&mut out, 4, Instant::now() + ms(2)),
        Err(ReadTimeoutError::Timeout)
    );
    producer.publish_batch(&mut vec![7, 8]).unwrap();
    assert_eq!(
        reader.read_batch_deadline(&mut out, 4, Instant::now() + ms(1000)),
        Ok(2)
    );
    ring.close();
    assert!(matches!(
        reader.read_batch_deadline(&mut out, 4, Instant::now() + ms(1000)),
        Err(ReadTimeoutError::Closed)
    ));
    assert_eq!(out, [7, 8]);
}
