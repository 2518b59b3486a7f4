//! A keyed state store (account balances) restored after a restart from a compacted topic:
//! the service keeps its state in a map and writes every change to a topic, its changelog;
//! after a restart it rebuilds the map with one call (`Broker::table(...)?.catch_up(...)`).
//! Compaction keeps the latest record per key, so the restore reads about as many records as
//! there are accounts, not the whole history. Closed accounts are tombstones (`None`, Kafka's
//! null value): the restore drops them.
//!
//! Twice: with an in-memory compacted topic (`TopicConfig::compacted`: a ring of
//! 1024 records and, below it, the latest record of each key), then with a persisted one in
//! `DATA_DIR` (a temporary directory without it), which the broker's log cleaner compacts on
//! disk and which stays there, in Kafka's segment format, for `logbus describe` and Kafka's
//! tools. Its batches are written by two producers, one per compression codec.
//!
//! ```text
//! cargo run --example compacted_state -- /tmp/logbus-balances
//! ```

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use logbus::broker::{Broker, CleanupPolicy, TopicConfig};
use logbus::persist::PersistConfig;
use logbus::producer::{Compression, Producer, ProducerConfig, Record};

const TOPIC: &str = "balances";
const ACCOUNTS: u64 = 2_000;
/// Changes written: many per account.
const HISTORY: u64 = 100_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let temp;
    let dir = match std::env::args().nth(1) {
        Some(dir) => std::path::PathBuf::from(dir),
        None => {
            temp = tempfile::tempdir()?;
            temp.path().to_path_buf()
        }
    };

    println!("in memory:");
    let broker = Broker::in_memory();
    let config = TopicConfig::new(4).records_in_memory(1024).compacted();
    broker.create_topic::<String, Option<String>>(TOPIC, config)?;
    let state = run_service(&[broker.producer::<String, Option<String>>()])?;
    restore(&broker, &state)?;

    println!("on disk, in {}:", dir.display());
    let open = |path: &Path| {
        Broker::builder()
            .data_dir(path)
            .create(true)
            .log_cleaner_backoff(Duration::from_millis(50))
            .open()
    };
    let state = {
        let broker = open(&dir)?;
        if broker.topics().iter().any(|t| t == TOPIC) {
            broker.delete_topic(TOPIC)?;
        }
        let config = TopicConfig::new(4)
            .records_in_memory(1024)
            .cleanup_policy(CleanupPolicy::Compact)
            // Small segments, so that most of the log is in closed segments the cleaner takes.
            .persist(PersistConfig::new().segment_bytes(64 * 1024));
        broker.create_topic::<String, Option<String>>(TOPIC, config)?;
        // Two producers, one per compression codec, taking turns: the log holds batches of
        // both (a batch takes the codec of the producer that last began sending to it).
        let producers = [
            broker.producer_with_config::<String, Option<String>>(
                ProducerConfig::new().compression(Compression::Lz4),
            )?,
            broker.producer_with_config::<String, Option<String>>(
                ProducerConfig::new().compression(Compression::Zstd),
            )?,
        ];
        let state = run_service(&producers)?;
        broker.close()?;
        state
    };
    // The restart: a new broker on the same directory. Its cleaner threads compact the
    // closed segments in the background; here the log is cleaned first, on this thread, so
    // that the restore reads the compacted log (the active segments stay as they are).
    let broker = open(&dir)?;
    let cleaned = broker.compact_now()?;
    println!(
        "  the log cleaner rewrote {} segments: {} of {} records removed ({} KiB -> {} KiB)",
        cleaned.segments_cleaned,
        cleaned.records_removed,
        cleaned.records_read,
        cleaned.bytes_read / 1024,
        cleaned.bytes_written / 1024
    );
    restore(&broker, &state)?;
    broker.close()?;
    Ok(())
}

/// The service before the restart: `HISTORY` balance changes, spread over `ACCOUNTS`
/// accounts (some closed: a tombstone), each applied to the state and written to the
/// changelog, the producers taking turns by run of 500. Returns the state.
fn run_service(
    producers: &[Producer<String, Option<String>>],
) -> Result<HashMap<String, Option<String>>, Box<dyn std::error::Error>> {
    let mut state = HashMap::new();
    for n in 0..HISTORY {
        // A deterministic walk over the accounts, repeating each one many times.
        let account = format!("account-{:05}", n.wrapping_mul(7919) % ACCOUNTS);
        let balance = if n % 97 == 0 {
            // Closed: a tombstone (`None`, Kafka's null value) deletes the key.
            state.remove(&account);
            None
        } else {
            let balance = (n * 31 % 10_000).to_string();
            state.insert(account.clone(), Some(balance.clone()));
            Some(balance)
        };
        let producer = &producers[(n / 500) as usize % producers.len()];
        producer.send(Record::new(TOPIC, balance).key(account))?;
    }
    for producer in producers {
        producer.flush()?;
    }
    Ok(state)
}

/// The service after the restart: its state rebuilt from the changelog in one call, checked
/// against the state it had.
fn restore(
    broker: &Broker,
    before: &HashMap<String, Option<String>>,
) -> Result<(), Box<dyn std::error::Error>> {
    let start = Instant::now();
    let mut table = broker.table::<String, Option<String>>(TOPIC)?;
    table.catch_up(Duration::from_secs(60))?;
    let took = start.elapsed();
    let read = table.metrics().records_read;
    println!(
        "  restored {} accounts in {took:.1?}: the replay read {read} records, the history \
         has {HISTORY} ({:.1}%)",
        table.len(),
        100.0 * read as f64 / HISTORY as f64
    );
    if table.as_map() != before {
        return Err("the restored state differs from the state before the restart".into());
    }
    println!("  the restored state equals the state before the restart");
    Ok(())
}
