//! Loom model of the transaction coordinator through the public API: two producers with one
//! `transactional_id` racing `init_transactions`. Each init reads the id's epoch and writes
//! the next one under the coordinator's lock, so the two get two epochs, and the one with
//! the older is fenced: its sends are refused, the newer one's transaction commits.
#![cfg(logbus_loom)]

use logbus::broker::{Broker, TopicConfig};
use logbus::producer::{ProducerConfig, Record};
use logbus::Error;

#[test]
fn two_producers_racing_init_transactions_get_two_epochs() {
    loom::model(|| {
        let broker = Broker::in_memory();
        broker
            .create_topic::<(), u64>("t", TopicConfig::new(1).records_in_memory(4))
            .unwrap();
        let config = ProducerConfig::new().transactional_id("w");
        let b = broker.clone();
        let other = loom::thread::spawn(move || {
            let p = b.producer_with_config::<(), u64>(config).unwrap();
            p.init_transactions().unwrap();
            p
        });
        let mine = broker.producer_with_config::<(), u64>(config).unwrap();
        mine.init_transactions().unwrap();
        let other = other.join().unwrap();
        let (a, b) = (
            mine.transaction_ids().unwrap(),
            other.transaction_ids().unwrap(),
        );
        assert_eq!(a.0, b.0, "one producer id per transactional id");
        assert_ne!(a.1, b.1, "two racing inits got the same epoch");
        let (old, new) = if a.1 < b.1 {
            (mine, other)
        } else {
            (other, mine)
        };
        old.begin_transaction().unwrap();
        let e = old.send(Record::new("t", 1)).unwrap_err().into_error();
        assert!(matches!(e, Error::ProducerFenced { .. }), "{e}");
        new.begin_transaction().unwrap();
        new.send(Record::new("t", 2)).unwrap();
        new.commit_transaction().unwrap();
    });
}
