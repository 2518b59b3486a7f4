//! Moving data between a logbus data directory and a Kafka cluster: [`export`] copies
//! persisted topics into Kafka topics, [`import`] copies Kafka topics into persisted topics.
//!
//! Each record keeps its partition, key, value, timestamp and headers. Offsets are the
//! target's to assign: the [`OffsetMapping`] of each partition says where each source offset
//! went (runs of consecutive offsets with a constant shift).
//!
//! # Resuming an export
//!
//! An export sends each partition's records in order through an idempotent producer
//! (`enable.idempotence=true`: no duplicate on a retry, no reordering), so what reached a
//! target partition is always a prefix of what was sent. The first export of a partition
//! records the target's high watermark before it (its *base*) as the offset committed by
//! group [`ExportOptions::group`] on the target partition; an export run again finds the
//! base, counts the records past it (`high watermark - base`), skips that many source
//! records and sends the rest: an interrupted export (stopped, killed, a lost connection)
//! resumes without duplicates and without gaps. No other producer may write to the target
//! partitions during an export.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;

use super::producer::{send_raw, RawRecord};
use super::KafkaBroker;
use crate::broker::{Broker, TopicConfig};
use crate::consumer::{ConsumerConfig, OffsetReset};
use crate::error::{Error, Result};
use crate::persist::PersistConfig;
use crate::producer::Record;
use crate::storage::{Checkpoints, LogOptions, SegmentSet};
use crate::TopicPartition;

/// Source offsets `[source, source + count)` went to `[target, target + count)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetRun {
    /// The first source offset.
    pub source: u64,
    /// Where it went.
    pub target: u64,
    /// How many consecutive offsets.
    pub count: u64,
}

/// Where one partition's records went, as runs of consecutive offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetMapping {
    /// The topic (the same name on both sides).
    pub topic: String,
    /// The partition (the same number on both sides).
    pub partition: u32,
    /// The runs, in offset order (empty for an empty partition).
    pub runs: Vec<OffsetRun>,
    /// Records copied by this run (an export run again after an interruption copies only
    /// what the first one did not).
    pub copied: u64,
    /// Records found already copied by an earlier, interrupted export (0 for an import).
    pub already_copied: u64,
}

impl OffsetMapping {
    fn new(topic: &str, partition: u32) -> Self {
        Self {
            topic: topic.to_owned(),
            partition,
            runs: Vec::new(),
            copied: 0,
            already_copied: 0,
        }
    }

    fn push(&mut self, source: u64, target: u64) {
        if let Some(last) = self.runs.last_mut() {
            if last.source + last.count == source && last.target + last.count == target {
                last.count += 1;
                return;
            }
        }
        self.runs.push(OffsetRun {
            source,
            target,
            count: 1,
        });
    }

    /// Where source offset `offset` went, if it was copied.
    pub fn target_of(&self, offset: u64) -> Option<u64> {
        self.runs
            .iter()
            .find(|r| offset >= r.source && offset < r.source + r.count)
            .map(|r| r.target + (offset - r.source))
    }
}

impl std::fmt::Display for OffsetMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}-{}: {} copied, {} already there",
            self.topic, self.partition, self.copied, self.already_copied
        )?;
        for r in &self.runs {
            write!(
                f,
                "; source [{}, {}) -> target [{}, {})",
                r.source,
                r.source + r.count,
                r.target,
                r.target + r.count
            )?;
        }
        Ok(())
    }
}

/// How far a copy got, handed to the progress callback after each batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// The partition being copied.
    pub topic: String,
    /// Its number.
    pub partition: u32,
    /// Records of this partition copied or found copied so far.
    pub done: u64,
    /// Records the partition holds.
    pub total: u64,
    /// Records copied so far over every partition (this run).
    pub copied_total: u64,
}

/// The progress callback.
type ProgressFn<'a> = Box<dyn FnMut(&Progress) -> ControlFlow<()> + 'a>;

/// What [`export`] and [`import`] do.
pub struct ExportOptions<'a> {
    topics: Option<Vec<String>>,
    batch: usize,
    group: String,
    progress: Option<ProgressFn<'a>>,
}

impl std::fmt::Debug for ExportOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExportOptions")
            .field("topics", &self.topics)
            .field("batch", &self.batch)
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

impl Default for ExportOptions<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a> ExportOptions<'a> {
    /// Every topic, batches of 1,000 records, group `logbus-export`, no progress callback.
    pub fn new() -> Self {
        Self {
            topics: None,
            batch: 1000,
            group: "logbus-export".into(),
            progress: None,
        }
    }

    /// Only these topics.
    pub fn topics(mut self, topics: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.topics = Some(topics.into_iter().map(Into::into).collect());
        self
    }

    /// Records per batch (at least 1): each batch is acknowledged before the next.
    pub fn batch(mut self, records: usize) -> Self {
        self.batch = records.max(1);
        self
    }

    /// The group whose committed offsets on the target record each partition's base (see
    /// the module docs).
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = group.into();
        self
    }

    /// Called after each batch; `ControlFlow::Break` stops the copy there (what was sent
    /// stays; an export run again resumes after it).
    pub fn progress(mut self, f: impl FnMut(&Progress) -> ControlFlow<()> + 'a) -> Self {
        self.progress = Some(Box::new(f));
        self
    }

    fn report(&mut self, p: &Progress) -> ControlFlow<()> {
        match &mut self.progress {
            Some(f) => f(p),
            None => ControlFlow::Continue(()),
        }
    }

    fn wants(&self, topic: &str) -> bool {
        self.topics
            .as_ref()
            .map_or(true, |t| t.iter().any(|n| n == topic))
    }
}

/// What a copy did: one mapping per partition, and whether it was stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyReport {
    /// Per partition, in topic and partition order.
    pub partitions: Vec<OffsetMapping>,
    /// Whether the progress callback stopped the copy before the end.
    pub stopped: bool,
}

/// Copies the persisted topics of the data directory `data_dir` (which must not be open:
/// it is opened, recovered and closed first) into `broker`'s cluster, creating each missing
/// topic with the same partition count. See the [module docs](self) for resuming.
///
/// # Errors
///
/// [`Error::InvalidConfig`] unless the broker's producer is idempotent
/// (`enable.idempotence=true`); [`Error::UnknownTopic`] for a topic asked for that the
/// directory does not have; [`Error::InvalidConfig`] for a target topic with fewer
/// partitions; the data directory's errors ([`Error::DirectoryLocked`], I/O, corruption);
/// [`Error::Kafka`] / [`Error::KafkaTimeout`] from the cluster (what was acknowledged stays:
/// run the export again to resume).
pub fn export(
    data_dir: impl AsRef<Path>,
    broker: &KafkaBroker,
    mut options: ExportOptions<'_>,
) -> Result<CopyReport> {
    if broker.config().get("enable.idempotence") != Some("true") {
        return Err(Error::InvalidConfig {
            name: "enable.idempotence",
            value: broker
                .config()
                .get("enable.idempotence")
                .unwrap_or("unset")
                .into(),
            valid: "true: an export resumes by counting what reached each partition, which \
                    needs a producer that neither duplicates nor reorders"
                .into(),
        });
    }
    let dir = data_dir.as_ref();
    let described = crate::persist::describe_data_dir(dir)?;
    if let Some(asked) = &options.topics {
        for t in asked {
            if !described.topics.iter().any(|(name, ..)| name == t) {
                return Err(Error::UnknownTopic { topic: t.clone() });
            }
        }
    }
    let mut topics: Vec<(String, u32)> = described
        .topics
        .iter()
        .filter(|(name, ..)| options.wants(name))
        .map(|(name, partitions, ..)| (name.clone(), *partitions))
        .collect();
    topics.sort();
    let group_consumer = broker.consumer::<Bytes, Bytes>(
        ConsumerConfig::new()
            .group_id(options.group.clone())
            .enable_auto_commit(false),
    )?;
    let mut report = CopyReport {
        partitions: Vec::new(),
        stopped: false,
    };
    let mut copied_total = 0;
    for (topic, partitions) in &topics {
        match broker.partition_count(topic) {
            Ok(n) if n < *partitions => {
                return Err(Error::InvalidConfig {
                    name: "target partitions",
                    value: format!("topic `{topic}` has {n} partitions on the cluster"),
                    valid: format!("at least {partitions}, the source's count"),
                })
            }
            Ok(_) => {}
            Err(Error::UnknownTopic { .. }) => broker.create_raw(topic, *partitions)?,
            Err(e) => return Err(e),
        }
        for p in 0..*partitions {
            let tp = TopicPartition::new(topic.clone(), p);
            let mapping = export_partition(
                dir,
                broker,
                &group_consumer,
                &tp,
                &mut options,
                &mut copied_total,
            )?;
            let stopped = mapping.1;
            report.partitions.push(mapping.0);
            if stopped {
                report.stopped = true;
                return Ok(report);
            }
        }
    }
    Ok(report)
}

/// Copies one partition; returns its mapping and whether the callback stopped the copy.
fn export_partition(
    dir: &Path,
    broker: &KafkaBroker,
    group: &super::KafkaConsumer<Bytes, Bytes>,
    tp: &TopicPartition,
    options: &mut ExportOptions<'_>,
    copied_total: &mut u64,
) -> Result<(OffsetMapping, bool)> {
    let (set, _) = SegmentSet::open(
        dir.join(format!("{}-{}", tp.topic, tp.partition)),
        LogOptions {
            // `describe_data_dir` just closed the directory cleanly: nothing to revalidate.
            checkpoints: Checkpoints {
                recovery_point: u64::MAX,
                log_start_offset: 0,
                clean_shutdown: true,
            },
            ..LogOptions::default()
        },
    )?;
    let (_, high) = broker.watermarks(tp)?;
    let base = match group.committed(tp)? {
        Some(base) => base,
        None => {
            group.commit_list(&[(tp.clone(), high)])?;
            high
        }
    };
    let already = high.saturating_sub(base);
    let mut mapping = OffsetMapping::new(&tp.topic, tp.partition);
    mapping.already_copied = already;
    let total = count_records(&set)?;
    let mut index = 0u64;
    let mut from = set.log_start_offset();
    let end = set.log_end_offset();
    let mut pending: Vec<(u64, crate::storage::Record)> = Vec::new();
    let mut stopped = false;
    while from < end && !stopped {
        let records = set.read_records(from, 1 << 20)?;
        let Some(last) = records.last().map(|r| r.0) else {
            break;
        };
        from = last + 1;
        for (offset, record) in records {
            if index >= already {
                pending.push((offset, record));
            } else {
                mapping.push(offset, base + index);
            }
            index += 1;
            if pending.len() >= options.batch {
                stopped = flush(
                    broker,
                    tp,
                    &mut pending,
                    &mut mapping,
                    base,
                    index,
                    total,
                    options,
                    copied_total,
                )?;
                if stopped {
                    break;
                }
            }
        }
    }
    if !stopped && !pending.is_empty() {
        stopped = flush(
            broker,
            tp,
            &mut pending,
            &mut mapping,
            base,
            index,
            total,
            options,
            copied_total,
        )?;
    }
    set.close()?;
    Ok((mapping, stopped))
}

/// Sends `pending` (ending at source index `index`), records the mapping, reports progress.
#[allow(clippy::too_many_arguments)]
fn flush(
    broker: &KafkaBroker,
    tp: &TopicPartition,
    pending: &mut Vec<(u64, crate::storage::Record)>,
    mapping: &mut OffsetMapping,
    base: u64,
    index: u64,
    total: u64,
    options: &mut ExportOptions<'_>,
    copied_total: &mut u64,
) -> Result<bool> {
    let raw: Vec<RawRecord<'_>> = pending
        .iter()
        .map(|(_, r)| RawRecord {
            topic: &tp.topic,
            partition: tp.partition,
            timestamp: r.timestamp,
            key: r.key.as_deref(),
            value: r.value.as_deref(),
            headers: &r.headers,
        })
        .collect();
    let acked = send_raw(&broker.inner.producer, &raw)?;
    let first = index - pending.len() as u64;
    for (i, ((source, _), (_, target))) in pending.iter().zip(&acked).enumerate() {
        // The prefix rule says where it must land; the acknowledgement says where it did.
        let expected = base + first + i as u64;
        if *target != expected {
            return Err(Error::InvalidConfig {
                name: "target partition",
                value: format!(
                    "`{}`-{}: a record went to offset {target}, the export expected {expected}",
                    tp.topic, tp.partition
                ),
                valid: "no other producer writing to the target partitions during an export".into(),
            });
        }
        mapping.push(*source, *target);
    }
    mapping.copied += pending.len() as u64;
    *copied_total += pending.len() as u64;
    pending.clear();
    let progress = Progress {
        topic: tp.topic.clone(),
        partition: tp.partition,
        done: index,
        total,
        copied_total: *copied_total,
    };
    Ok(options.report(&progress).is_break())
}

/// How many records a partition holds.
fn count_records(set: &SegmentSet) -> Result<u64> {
    let mut n = 0;
    let mut from = set.log_start_offset();
    let end = set.log_end_offset();
    while from < end {
        let records = set.read_records(from, 1 << 20)?;
        let Some(last) = records.last().map(|r| r.0) else {
            break;
        };
        n += records.len() as u64;
        from = last + 1;
    }
    Ok(n)
}

/// Copies Kafka topics `topics` from `broker`'s cluster into the data directory `data_dir`
/// (opened, formatted first when missing or empty, and closed at the end) as persisted topics of raw bytes
/// (`open_topic::<Bytes, Bytes>`; decode with the codecs the producers used), with the same
/// partition counts. Each record keeps its partition, key, value (a null value becomes
/// empty), timestamp and headers; offsets are dense from 0 in the target (Kafka's may have
/// gaps: see the mapping). The topics must not exist in the directory yet.
///
/// # Errors
///
/// [`Error::TopicExists`] when the directory has one of the topics; [`Error::UnknownTopic`];
/// the data directory's errors; [`Error::Kafka`] / [`Error::KafkaTimeout`].
pub fn import(
    data_dir: impl Into<PathBuf>,
    broker: &KafkaBroker,
    mut options: ExportOptions<'_>,
) -> Result<CopyReport> {
    let Some(topics) = options.topics.clone() else {
        return Err(Error::InvalidConfig {
            name: "topics",
            value: "none".into(),
            valid: "the Kafka topics to import, by name".into(),
        });
    };
    let target = Broker::builder().data_dir(data_dir).create(true).open()?;
    let result = import_into(&target, broker, &topics, &mut options);
    let closed = target.close();
    let report = result?;
    closed?;
    Ok(report)
}

fn import_into(
    target: &Broker,
    broker: &KafkaBroker,
    topics: &[String],
    options: &mut ExportOptions<'_>,
) -> Result<CopyReport> {
    let mut report = CopyReport {
        partitions: Vec::new(),
        stopped: false,
    };
    let mut copied_total = 0;
    for topic in topics {
        let partitions = broker.partition_count(topic)?;
        target.create_persisted_topic::<Bytes, Bytes>(
            topic,
            TopicConfig::new(partitions),
            PersistConfig::default(),
        )?;
        let producer = target.producer::<Bytes, Bytes>();
        let mut reader = broker.consumer::<Bytes, Bytes>(
            ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest),
        )?;
        for p in 0..partitions {
            let tp = TopicPartition::new(topic.clone(), p);
            let (low, high) = broker.watermarks(&tp)?;
            let mut mapping = OffsetMapping::new(topic, p);
            reader.assign(std::slice::from_ref(&tp))?;
            reader.seek(&tp, low)?;
            let mut done = 0;
            while reader.position(&tp)? < high {
                let records = reader.poll(Duration::from_millis(100))?;
                let mut batch = Vec::with_capacity(records.len());
                let mut sources = Vec::with_capacity(records.len());
                for r in records {
                    if r.offset >= high {
                        continue;
                    }
                    sources.push(r.offset);
                    let mut record = Record::new(topic.clone(), r.value)
                        .partition(p)
                        .timestamp(r.timestamp.max(0));
                    record.key = r.key;
                    record.headers = r.headers;
                    batch.push(record);
                }
                for (source, record) in sources.into_iter().zip(batch) {
                    let meta = producer.send(record)?;
                    mapping.push(source, meta.offset);
                    mapping.copied += 1;
                    done += 1;
                    copied_total += 1;
                }
                let progress = Progress {
                    topic: topic.clone(),
                    partition: p,
                    done,
                    total: high - low,
                    copied_total,
                };
                if options.report(&progress).is_break() {
                    report.partitions.push(mapping);
                    report.stopped = true;
                    target.sync()?;
                    return Ok(report);
                }
            }
            report.partitions.push(mapping);
        }
        target.sync()?;
    }
    Ok(report)
}
