//! A plain persisted partition whose log went offline (its writer hit an I/O error): sends,
//! flushes and consumers get [`Error::PartitionOffline`] with the I/O error, not the error
//! of a deleted topic.

use std::sync::Arc;
use std::time::Duration;

use logbus::broker::{Broker, Topic, TopicConfig, TopicPartition};
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::persist::{FlushPolicy, PersistConfig};
use logbus::producer::{Producer, Record};
use logbus::storage::fault::{Fault, FaultyIo};
use logbus::Error;

/// A broker on a simulated disk with topic `t` (one partition, `policy`), whose background
/// checkpoints wait an hour (so the injected fault hits the partition's writer), and three
/// records acknowledged.
fn broker_with_records(policy: FlushPolicy) -> (FaultyIo, Broker, Topic<(), String>) {
    let fs = FaultyIo::new(11);
    let broker = Broker::builder()
        .io(Arc::new(fs.clone()))
        .data_dir("/data")
        .create(true)
        .retention_check_interval(Duration::from_secs(3600))
        .offsets_checkpoint_interval(Duration::from_secs(3600))
        .open()
        .unwrap();
    let topic = broker
        .create_topic::<(), String>(
            "t",
            TopicConfig::new(1)
                .records_in_memory(16)
                .persist(PersistConfig::new().flush(policy)),
        )
        .unwrap();
    let p = broker.producer::<(), String>();
    for i in 0..3 {
        p.send(Record::new("t", format!("r{i}"))).unwrap();
    }
    topic.write_to_files().unwrap();
    (fs, broker, topic)
}

/// Whether `e` says `t`-0 is offline because of the injected write error.
fn is_offline(e: &Error) -> bool {
    matches!(e, Error::PartitionOffline { topic, partition: 0, dir, reason }
        if topic == "t" && dir.ends_with("t-0") && reason.contains("injected I/O error"))
}

/// Takes `t`-0 offline: the next write fails; a record is sent (acknowledged in memory)
/// and the flush that writes it reports the failure.
fn fail_the_log(fs: &FaultyIo, p: &Producer<(), String>, topic: &Topic<(), String>) {
    fs.inject(Fault::WriteError, 0);
    p.send(Record::new("t", "in memory".to_string())).unwrap();
    let err = topic.write_to_files().unwrap_err();
    assert!(is_offline(&err), "{err}");
}

#[test]
fn sends_to_an_offline_partition_say_so_and_hand_the_record_back() {
    let (fs, broker, topic) = broker_with_records(FlushPolicy::Os);
    let p = broker.producer::<(), String>();
    fail_the_log(&fs, &p, &topic);
    for _ in 0..3 {
        let err = p.send(Record::new("t", "later".to_string())).unwrap_err();
        assert!(is_offline(err.error()), "{}", err.error());
        assert!(err.to_string().contains("offline"), "{err}");
        assert!(!err.to_string().contains("deleted"), "{err}");
        assert_eq!(err.into_record().unwrap().value, "later");
    }
    // The pipelined form (one replica: it completes at the send).
    let err = p
        .send_async(Record::new("t", "async".to_string()))
        .wait()
        .unwrap_err();
    assert!(is_offline(err.error()), "{}", err.error());
    assert_eq!(err.into_record().unwrap().value, "async");
    // A batch: nothing appended, every record handed back.
    let mut batch: Vec<_> = (0..5).map(|i| Record::new("t", format!("b{i}"))).collect();
    let err = p.send_batch(&mut batch).unwrap_err();
    assert!(is_offline(&err.error), "{}", err.error);
    assert_eq!(err.sent, 0);
    assert_eq!(batch[0].value, "b0");
    assert_eq!(batch.len(), 5);
    // Flushing and syncing the topic say why, every time.
    for _ in 0..2 {
        assert!(is_offline(&topic.write_to_files().unwrap_err()));
        assert!(is_offline(&topic.fsync().unwrap_err()));
    }
    assert!(p.flush().is_ok());
    let _ = broker.close();
}

/// `EveryBatch`: the send whose batch failed is unacknowledged (it is in the log); the
/// sends after it are refused before they reach the log, saying why.
#[test]
fn an_every_batch_send_after_its_log_failed_is_refused_with_the_reason() {
    let (fs, broker, _topic) = broker_with_records(FlushPolicy::EveryBatch);
    let p = broker.producer::<(), String>();
    fs.inject(Fault::SyncError, 0);
    let err = p.send(Record::new("t", "lost".to_string())).unwrap_err();
    assert!(
        matches!(err.error(), Error::NotAcknowledged { offset: 3, reason, .. }
            if reason.contains("injected I/O error")),
        "{}",
        err.error()
    );
    let err = p.send(Record::new("t", "later".to_string())).unwrap_err();
    assert!(
        matches!(err.error(), Error::PartitionOffline { reason, .. }
            if reason.contains("injected I/O error (fsync)")),
        "{}",
        err.error()
    );
    assert!(err.into_record().is_some());
    let _ = broker.close();
}

/// A consumer of the offline partition reads every record the partition holds, then gets
/// the partition's error instead of waiting for records that cannot come.
#[test]
fn a_consumer_of_an_offline_partition_reads_what_it_holds_then_gets_the_error() {
    let (fs, broker, topic) = broker_with_records(FlushPolicy::Os);
    let p = broker.producer::<(), String>();
    fail_the_log(&fs, &p, &topic);
    let mut c = broker
        .consumer::<(), String>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    c.assign(&[TopicPartition::new("t", 0)]).unwrap();
    let mut got = Vec::new();
    let err = loop {
        match c.poll_with(100, Duration::from_secs(10), |r| got.push(r.to_record())) {
            Ok(0) => panic!("an empty poll: the consumer waited out its timeout"),
            Ok(_) => {}
            Err(e) => break e,
        }
    };
    assert!(is_offline(&err), "{err}");
    let values: Vec<_> = got.iter().map(|r| r.value.as_str()).collect();
    assert_eq!(values, ["r0", "r1", "r2", "in memory"]);
    // And again at the next poll, at once.
    assert!(is_offline(&c.poll(Duration::from_secs(10)).unwrap_err()));
    let _ = broker.close();
}

/// A deleted topic is still reported as such, not as an offline partition.
#[test]
fn a_deleted_topic_is_not_reported_offline() {
    let (_fs, broker, _topic) = broker_with_records(FlushPolicy::Os);
    let p = broker.producer::<(), String>();
    broker.delete_topic("t").unwrap();
    let err = p.send(Record::new("t", "x".to_string())).unwrap_err();
    assert!(
        !matches!(err.error(), Error::PartitionOffline { .. }),
        "{}",
        err.error()
    );
    broker.close().unwrap();
}

/// The writer itself hits the error (no flush asked for): the sends after it learn why,
/// not that the topic was deleted.
#[test]
fn sends_after_the_writer_failed_say_why() {
    let (fs, broker, _topic) = broker_with_records(FlushPolicy::Os);
    let p = broker.producer::<(), String>();
    fs.inject(Fault::WriteError, 0);
    let mut sent = 0;
    let err = loop {
        match p.send(Record::new("t", format!("w{sent}"))) {
            Ok(_) => sent += 1,
            Err(e) => break e,
        }
        assert!(sent < 100_000, "the writer never failed");
        std::thread::sleep(Duration::from_millis(1));
    };
    assert!(is_offline(err.error()), "{}", err.error());
    assert!(err.into_record().is_some());
    let _ = broker.close();
}
