use std::cell::RefCell;
use std::time::Duration;

use crate::broker::{Broker, TopicConfig};
use crate::persist::{FlushPolicy, PersistConfig};
use crate::storage::fault::FaultyIo;
use crate::sync::StdArc as Arc;
use crate::{Error, Record};

thread_local! {
    /// Run by `start_topic` between starting a topic's writers and tracking them.
    static BEFORE_TRACKING: RefCell<Option<Box<dyn FnOnce()>>> = const { RefCell::new(None) };
}

pub(super) fn before_tracking() {
    if let Some(f) = BEFORE_TRACKING.with(|h| h.borrow_mut().take()) {
        f();
    }
}

fn broker(fs: &FaultyIo) -> Broker {
    Broker::builder()
        .io(Arc::new(fs.clone()))
        .data_dir("/data")
        .create(true)
        .retention_check_interval(Duration::from_millis(2))
        .open()
        .unwrap()
}

/// Only a topic left to the OS's write-back skips starting it on every write-out.
#[test]
fn write_back_starts_unless_the_os_flushes() {
    use crate::persist::TopicMeta;
    for (policy, starts) in [
        (FlushPolicy::Os, false),
        (FlushPolicy::EveryBatch, true),
        (FlushPolicy::Bytes(1 << 20), true),
        (FlushPolicy::Messages(10), true),
        (FlushPolicy::Interval(Duration::from_secs(1)), true),
    ] {
        let meta = TopicMeta::new::<(), String>(
            "t",
            &TopicConfig::new(1),
            PersistConfig::new().flush(policy),
        );
        assert_eq!(meta.log_config().start_writeback, starts, "{policy:?}");
    }
}

/// A checkpoint taken while a topic opens, after its partitions took their groups'
/// offsets from the checkpoint and before they are tracked, then a crash: the reopened
/// directory still has every group's committed offset (the window once wrote a
/// checkpoint without them, and a SIGKILL there lost them all).
#[test]
fn a_checkpoint_while_a_topic_opens_keeps_its_groups_offsets() {
    use crate::broker::TopicPartition;
    use crate::consumer::ConsumerConfig;
    let fs = FaultyIo::new(5);
    let first = broker(&fs);
    first
        .create_topic::<(), String>(
            "t",
            TopicConfig::new(1).persist(PersistConfig::new().flush(FlushPolicy::EveryBatch)),
        )
        .unwrap();
    let p = first.producer::<(), String>();
    for i in 0..10 {
        p.send(Record::new("t", format!("v{i}"))).unwrap();
    }
    let tp = TopicPartition::new("t", 0);
    let mut c = first
        .consumer::<(), String>(ConsumerConfig::new().group_id("g"))
        .unwrap();
    c.assign(std::slice::from_ref(&tp)).unwrap();
    c.commit_offsets(&[(tp.clone(), 7)]).unwrap();
    drop(c);
    first.close().unwrap();
    let b = broker(&fs);
    let syncing = b.clone();
    BEFORE_TRACKING.with(|h| {
        *h.borrow_mut() = Some(Box::new(move || {
            syncing.fsync_and_checkpoint().unwrap();
            syncing.simulate_process_death();
        }));
    });
    let _ = b.topic::<(), String>("t");
    fs.crash();
    let again = broker(&fs);
    again.topic::<(), String>("t").unwrap();
    let c = again
        .consumer::<(), String>(ConsumerConfig::new().group_id("g"))
        .unwrap();
    assert_eq!(c.committed(&tp).unwrap(), Some(7));
    again.close().unwrap();
}

/// The process dies while a thread opens a topic, after its writers started: the open
/// fails, and no partition that the death never closed is left taking sends (the hang
/// of `power_loss_rounds`: a producer sending `Ok` for ever to a dead broker).
#[test]
fn a_topic_opening_as_the_process_dies_takes_no_sends() {
    let fs = FaultyIo::new(3);
    let first = broker(&fs);
    first
        .create_topic::<(), String>(
            "t",
            TopicConfig::new(1).persist(PersistConfig::new().flush(FlushPolicy::Os)),
        )
        .unwrap();
    first.close().unwrap();
    for create in [false, true] {
        let b = broker(&fs);
        let dying = b.clone();
        BEFORE_TRACKING.with(|h| {
            *h.borrow_mut() = Some(Box::new(move || dying.simulate_process_death()));
        });
        let opened = if create {
            b.create_topic::<(), String>(
                "u",
                TopicConfig::new(1).persist(PersistConfig::new().flush(FlushPolicy::Os)),
            )
        } else {
            b.topic::<(), String>("t")
        };
        assert!(
            matches!(opened, Err(Error::Closed { .. })),
            "create {create}: {opened:?}"
        );
        let p = b.producer::<(), String>();
        let name = if create { "u" } else { "t" };
        let sent = p.send(Record::new(name, "after death".to_string()));
        assert!(
            sent.is_err(),
            "create {create}: a dead broker took {sent:?}"
        );
        fs.crash();
    }
}

/// An in-memory topic created while a persisted topic of the same name is being created
/// (between its metadata and its registration): one of the two creations is refused with
/// `TopicExists`, and the broker and its directory agree on which topic won. The window
/// once let both "succeed" as far as the in-memory one could tell: the persisted create
/// returned `TopicExists` with its metadata, partition directories and writers left
/// behind, and the next open found a persisted topic whose creation had failed.
#[test]
fn an_in_memory_create_racing_a_persisted_create_of_the_name_is_refused() {
    let fs = FaultyIo::new(7);
    let b = broker(&fs);
    let racing = b.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let other = Arc::new(crate::sync::Mutex::new(None));
    let joined = Arc::clone(&other);
    BEFORE_TRACKING.with(|h| {
        *h.borrow_mut() = Some(Box::new(move || {
            let t = crate::sync::thread::spawn(move || {
                let made = racing
                    .create_topic::<(), String>("t", TopicConfig::new(1))
                    .map(drop);
                let _ = tx.send(());
                made
            });
            // Long enough for an unserialised create to finish inside the window.
            let _ = rx.recv_timeout(Duration::from_millis(300));
            *joined.lock() = Some(t);
        }));
    });
    let persisted = b
        .create_topic::<(), String>("t", TopicConfig::new(1).persist(PersistConfig::new()))
        .map(drop);
    let in_memory = other.lock().take().unwrap().join().unwrap();
    assert!(
        persisted.is_ok() && matches!(in_memory, Err(Error::TopicExists { .. })),
        "persisted: {persisted:?}, in memory: {in_memory:?}"
    );
    b.close().unwrap();
}
