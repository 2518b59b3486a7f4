//! A replicated persisted topic opened as the broker dies.

use std::cell::RefCell;
use std::path::PathBuf;

use crate::broker::{Broker, TopicConfig};
use crate::persist::PersistConfig;
use crate::storage::fault::FaultyIo;
use crate::sync::StdArc as Arc;
use crate::{Error, Record};

thread_local! {
    /// Run between opening a topic's replica sets and tracking them.
    static BEFORE_TRACKING: RefCell<Option<Box<dyn FnOnce()>>> = const { RefCell::new(None) };
}

pub(super) fn before_tracking() {
    if let Some(f) = BEFORE_TRACKING.with(|h| h.borrow_mut().take()) {
        f();
    }
}

#[test]
fn a_replicated_topic_created_as_the_process_dies_is_refused() {
    let fs = FaultyIo::new(3);
    let dirs: Vec<PathBuf> = ["/d0", "/d1", "/d2"].iter().map(PathBuf::from).collect();
    let broker = Broker::builder()
        .io(Arc::new(fs.clone()))
        .data_dirs(dirs.iter())
        .open()
        .unwrap();
    let dying = broker.clone();
    BEFORE_TRACKING.with(|h| {
        *h.borrow_mut() = Some(Box::new(move || dying.simulate_process_death()));
    });
    let created = broker.create_persisted_topic::<(), u64>(
        "t",
        TopicConfig::new(1).replication_factor(3),
        PersistConfig::new(),
    );
    assert!(matches!(created, Err(Error::Closed { .. })), "{created:?}");
    assert!(broker
        .producer::<(), u64>()
        .send(Record::new("t", 1))
        .is_err());
}
