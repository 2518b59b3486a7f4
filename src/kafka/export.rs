//! Moving data between a logbus data directory and a Kafka cluster: [`export`] copies
//! persisted topics into Kafka topics, [`import`] copies Kafka topics into persisted topics.
//!
//! Each record keeps its partition, key, value, timestamp and headers. Offsets are the
//! target's to assign: the [`OffsetMapping`] of each partition says where each source offset
//! went (runs of consecutive offsets with a constant shift).
//!
//! # What an exported record carries
//!
//! Each exported record gets one more header, last: [`SOURCE_HEADER`], whose value is
//! `<directory id>/<source offset>` (the id is the source directory's `directory.id`, from
//! its `meta.properties`). It says which record of which source the target record is a copy
//! of; [`import`] drops it again.
//!
//! # Resuming an export, and what it promises
//!
//! An export sends each partition's records in source order, one batch at a time, through
//! a producer of its own: idempotent (`enable.idempotence=true`, required: a retry neither
//! duplicates nor reorders) with one request in flight per connection
//! (`max.in.flight.requests.per.connection=1`), which withdraws the records still queued as
//! soon as one record fails. The first export of a partition records the target's high
//! watermark before it (its *base*) as the offset committed by group
//! [`ExportConfig::group`] on the target partition.
//!
//! An export run again reads the target partition from its base and matches each record to
//! the source by its [`SOURCE_HEADER`] and its content (key, value, headers), then sends the
//! source records after the last one found. The target therefore ends holding the source's
//! records once each, in order, or the export fails and says why:
//! - [`Error::ExportGap`]: the cluster refused some records (a permanent error such as
//!   `INVALID_RECORD` or `MSG_SIZE_TOO_LARGE`) and accepted records after them; the error
//!   lists the missing source offsets. Kafka appends only, so the export does not fill a gap
//!   out of order: recreate the target topic, or export to another one.
//! - [`Error::CopyTargetMismatch`]: the target holds, where the copy should continue,
//!   another source's records (another data directory exported to the same topic with the
//!   same group: use another group), a second copy of a record, a record another producer
//!   wrote, or a record that differs from the source's.
//! - A refusal with nothing accepted after it is the cluster's error ([`Error::Kafka`]):
//!   what was acknowledged is a prefix of the source, and a rerun resumes after it.
//!
//! An interrupted export (stopped, killed, a lost connection) resumes without duplicates and
//! without gaps. A first export with a new group refuses a target partition whose last
//! record came from this same source (it would copy the records again). Resuming costs a
//! read of what earlier runs copied. No other producer may write to the target partitions
//! during an export (it is detected, not prevented).
//!
//! # Resuming an import
//!
//! An import stopped before the end (its progress callback, `--max-records`, a kill) resumes
//! when run again: it matches the records already in the data directory's topic to the
//! cluster's from the start of each partition, by content (key, value, timestamp, headers),
//! and copies the rest, each record once.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;

use super::producer::{send_raw, RawOutcome, RawRecord, SharedProducer};
use super::{KafkaBroker, KafkaConsumer};
use crate::broker::{Broker, TopicConfig};
use crate::consumer::{ConsumerConfig, ConsumerRecord, OffsetReset};
use crate::error::{Error, Result};
use crate::persist::PersistConfig;
use crate::producer::Record;
use crate::storage::{Checkpoints, Header, LogSetup, SegmentSet};
use crate::{Headers, TopicPartition};

/// The header an export adds to each record it sends (see the [module docs](self)).
pub const SOURCE_HEADER: &str = "logbus.export.source";

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
    /// Records found already copied by an earlier, interrupted export or import.
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
pub struct ExportConfig<'a> {
    topics: Option<Vec<String>>,
    batch: usize,
    group: String,
    progress: Option<ProgressFn<'a>>,
}

impl std::fmt::Debug for ExportConfig<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExportConfig")
            .field("topics", &self.topics)
            .field("batch", &self.batch)
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

impl Default for ExportConfig<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a> ExportConfig<'a> {
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

    /// Records per batch (at least 1): an export's batch is acknowledged before the next is
    /// sent; the progress callback runs after each batch of an export or an import.
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
    /// stays; the same export or import run again resumes after it).
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
/// topic with the same partition count. See the [module docs](self) for resuming and what
/// the target holds afterwards.
///
/// # Errors
///
/// [`Error::InvalidConfig`] unless the broker's producer is idempotent (the default:
/// `acks=all` and `enable.idempotence` not set to `false`); [`Error::UnknownTopic`] for a topic asked for that the
/// directory does not have; [`Error::InvalidConfig`] for a target topic with fewer
/// partitions; the data directory's errors ([`Error::DirectoryLocked`], I/O, corruption);
/// [`Error::ExportGap`] when records are missing on the target before others that landed;
/// [`Error::CopyTargetMismatch`] when the target holds something other than this source's
/// copy where the export would continue; [`Error::Kafka`] / [`Error::Timeout`] from the
/// cluster (what was acknowledged stays: run the export again to resume).
pub fn export(
    data_dir: impl AsRef<Path>,
    broker: &KafkaBroker,
    mut options: ExportConfig<'_>,
) -> Result<CopyReport> {
    if !broker.config().idempotent() {
        return Err(Error::InvalidConfig {
            name: "enable.idempotence",
            value: broker
                .config()
                .get("enable.idempotence")
                .map_or_else(|| "unset, with acks other than all".into(), str::to_owned),
            valid: "true: an export resumes after what reached each partition, which needs a \
                    producer that neither duplicates nor reorders"
                .into(),
        });
    }
    let dir = data_dir.as_ref();
    let described = crate::persist::describe_data_dir(dir)?;
    // Directories formatted before markers existed have no id: they share the empty one,
    // and the content check still tells their records apart.
    let source_id = crate::persist::read_dir_marker(dir)?
        .map(|m| m.directory_id)
        .unwrap_or_default();
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
    let producer = SharedProducer::new(&export_producer_config(broker.config()), None)?;
    let group_consumer = broker.consumer::<Bytes, Option<Bytes>>(
        ConsumerConfig::new()
            .group_id(options.group.clone())
            .enable_auto_commit(false),
    )?;
    let mut reader = broker.consumer::<Bytes, Option<Bytes>>(ConsumerConfig::new())?;
    let mut report = CopyReport {
        partitions: Vec::new(),
        stopped: false,
    };
    let mut copied_total = 0;
    let group = options.group.clone();
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
            let mut ctx = PartitionExport {
                broker,
                producer: &producer,
                tp: &tp,
                source_id: &source_id,
                group: &group,
            };
            let (mapping, stopped) = ctx.run(
                dir,
                &group_consumer,
                &mut reader,
                &mut options,
                &mut copied_total,
            )?;
            report.partitions.push(mapping);
            if stopped {
                report.stopped = true;
                return Ok(report);
            }
        }
    }
    Ok(report)
}

/// The settings of the export's own producer: `config` with, unless it sets them,
/// `enable.gapless.guarantee=true` (librdkafka stops the producer at a refusal that would
/// leave a gap, where it would otherwise renumber and send the records after it) and
/// `max.in.flight.requests.per.connection=1`. A producer of its own, too, because
/// withdrawing the queue after a failure (see `send_raw`) must not touch records other
/// users of the broker have queued.
fn export_producer_config(config: &super::KafkaConfig) -> super::KafkaConfig {
    let mut config = config.clone();
    for (key, value) in [
        ("enable.gapless.guarantee", "true"),
        ("max.in.flight.requests.per.connection", "1"),
    ] {
        if config.get(key).is_none() {
            config = config.set(key, value);
        }
    }
    config
}

/// A source partition's records in offset order, read a chunk at a time.
struct SourceCursor<'a> {
    set: &'a SegmentSet,
    from: u64,
    end: u64,
    buf: VecDeque<(u64, crate::storage::BatchRecord)>,
}

impl<'a> SourceCursor<'a> {
    fn new(set: &'a SegmentSet) -> Self {
        Self {
            set,
            from: set.log_start_offset(),
            end: set.log_end_offset(),
            buf: VecDeque::new(),
        }
    }

    fn peek(&mut self) -> Result<Option<&(u64, crate::storage::BatchRecord)>> {
        if self.buf.is_empty() && self.from < self.end {
            let records = self.set.read_records(self.from, 1 << 20)?;
            match records.last() {
                Some(last) => self.from = last.0 + 1,
                None => self.from = self.end,
            }
            self.buf.extend(records);
        }
        Ok(self.buf.front())
    }

    fn next(&mut self) -> Result<Option<(u64, crate::storage::BatchRecord)>> {
        self.peek()?;
        Ok(self.buf.pop_front())
    }

    fn first_offset(&self) -> u64 {
        self.set.log_start_offset()
    }
}

/// The export marker of a target record's headers (the last [`SOURCE_HEADER`]):
/// `(source id, source offset)`, or `None` when it has none or one that does not parse.
fn marker(headers: &Headers) -> Option<(&str, u64)> {
    let (_, value) = headers.iter().rev().find(|(k, _)| k == SOURCE_HEADER)?;
    let text = std::str::from_utf8(value.as_deref()?).ok()?;
    let (id, offset) = text.rsplit_once('/')?;
    Some((id, offset.parse().ok()?))
}

/// `headers` without the export marker (the last header, when it is one).
fn without_marker(headers: &Headers) -> &[(String, Option<Bytes>)] {
    match headers.last() {
        Some((k, _)) if k == SOURCE_HEADER => &headers[..headers.len() - 1],
        _ => headers,
    }
}

fn same_headers(a: &[Header], b: &[(String, Option<Bytes>)]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, (k, v))| x.key == *k && x.value.as_deref() == v.as_deref())
}

/// Whether `target` is a copy of `source` (key, value, headers but the marker; a
/// topic may stamp its own timestamps; a null value stays null).
fn same_content(
    source: &crate::storage::BatchRecord,
    target: &ConsumerRecord<Bytes, Option<Bytes>>,
) -> bool {
    source.key.as_deref() == target.key.as_deref()
        && source.value.as_deref() == target.value.as_deref()
        && same_headers(&source.headers, without_marker(&target.headers))
}

/// Reads `tp` on the cluster from `from` up to `high`, handing each record to `f`.
fn read_target(
    reader: &mut KafkaConsumer<Bytes, Option<Bytes>>,
    tp: &TopicPartition,
    from: u64,
    high: u64,
    mut f: impl FnMut(ConsumerRecord<Bytes, Option<Bytes>>) -> Result<()>,
) -> Result<()> {
    if from >= high {
        return Ok(());
    }
    reader.assign(std::slice::from_ref(tp))?;
    reader.seek(tp, from)?;
    while reader.position(tp)? < high {
        for r in reader.poll(Duration::from_millis(100))? {
            if r.offset < high {
                f(r)?;
            }
        }
    }
    Ok(())
}

/// One partition's export.
struct PartitionExport<'a> {
    broker: &'a KafkaBroker,
    producer: &'a SharedProducer,
    tp: &'a TopicPartition,
    source_id: &'a str,
    group: &'a str,
}

impl PartitionExport<'_> {
    fn mismatch(
        &self,
        target_offset: u64,
        found: String,
        expected: String,
        how: &'static str,
    ) -> Error {
        Error::CopyTargetMismatch {
            operation: "export",
            topic: self.tp.topic.clone(),
            partition: self.tp.partition,
            target_offset,
            found: format!("{found}, where {expected}"),
            how,
        }
    }

    /// What a target record is, in words.
    fn describe(&self, r: &ConsumerRecord<Bytes, Option<Bytes>>) -> String {
        match marker(&r.headers) {
            Some((id, m)) if id == self.source_id => format!("a copy of source offset {m}"),
            Some((id, m)) => format!(
                "a record exported from another source (data directory `{id}`, its offset {m})"
            ),
            None => format!("a record without the `{SOURCE_HEADER}` header"),
        }
    }

    /// Copies the partition; returns its mapping and whether the callback stopped the copy.
    fn run(
        &mut self,
        dir: &Path,
        group: &KafkaConsumer<Bytes, Option<Bytes>>,
        reader: &mut KafkaConsumer<Bytes, Option<Bytes>>,
        options: &mut ExportConfig<'_>,
        copied_total: &mut u64,
    ) -> Result<(OffsetMapping, bool)> {
        let tp = self.tp;
        let (set, _) = SegmentSet::open(
            dir.join(format!("{}-{}", tp.topic, tp.partition)),
            LogSetup {
                // `describe_data_dir` just closed the directory cleanly: nothing to revalidate.
                checkpoints: Checkpoints {
                    recovery_point: u64::MAX,
                    log_start_offset: 0,
                    clean_shutdown: true,
                },
                ..LogSetup::default()
            },
        )?;
        let result = self.copy(&set, group, reader, options, copied_total);
        let closed = set.close();
        let out = result?;
        closed?;
        Ok(out)
    }

    fn copy(
        &mut self,
        set: &SegmentSet,
        group: &KafkaConsumer<Bytes, Option<Bytes>>,
        reader: &mut KafkaConsumer<Bytes, Option<Bytes>>,
        options: &mut ExportConfig<'_>,
        copied_total: &mut u64,
    ) -> Result<(OffsetMapping, bool)> {
        let tp = self.tp;
        let (low, high) = self.broker.watermarks(tp)?;
        let mut source = SourceCursor::new(set);
        let mut mapping = OffsetMapping::new(&tp.topic, tp.partition);
        match group.committed(tp)? {
            // A base past the end: the topic was recreated since; start over at its end.
            Some(base) if base <= high => {
                self.verify(reader, base, low, high, &mut source, &mut mapping)?;
            }
            _ => {
                self.refuse_own_copy(reader, low, high)?;
                group.commit_list(&[(tp.clone(), high)])?;
            }
        }
        let total = count_records(set)?;
        let mut next_target = high;
        let mut done = mapping.already_copied;
        let mut pending: Vec<(u64, crate::storage::BatchRecord)> = Vec::new();
        let mut stopped = false;
        while let Some(record) = source.next()? {
            pending.push(record);
            done += 1;
            let last = source.peek()?.is_none();
            if pending.len() >= options.batch || last {
                *copied_total += self.flush(&mut pending, &mut mapping, &mut next_target)?;
                let progress = Progress {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    done,
                    total,
                    copied_total: *copied_total,
                };
                if options.report(&progress).is_break() {
                    stopped = true;
                    break;
                }
            }
        }
        Ok((mapping, stopped))
    }

    /// A first export with this group: refuses when the target's last record is this
    /// source's (a copy made with another group, or one whose group was deleted).
    fn refuse_own_copy(
        &self,
        reader: &mut KafkaConsumer<Bytes, Option<Bytes>>,
        low: u64,
        high: u64,
    ) -> Result<()> {
        let mut last = None;
        read_target(
            reader,
            self.tp,
            high.saturating_sub(1).max(low),
            high,
            |r| {
                last = Some(r);
                Ok(())
            },
        )?;
        match last {
            Some(r) if matches!(marker(&r.headers), Some((id, _)) if id == self.source_id) => {
                Err(self.mismatch(
                    r.offset,
                    self.describe(&r),
                    format!(
                        "group `{}` has no export of this source on record (a first export)",
                        self.group
                    ),
                    "this source was already exported there with another group (or its \
                     group's offsets were deleted): run the export with the group that made \
                     that copy to resume it, or export to another topic",
                ))
            }
            _ => Ok(()),
        }
    }

    /// Matches the target's records from `base` to `high` to the source's, in order, moving
    /// `source` past them and mapping them.
    fn verify(
        &self,
        reader: &mut KafkaConsumer<Bytes, Option<Bytes>>,
        base: u64,
        low: u64,
        high: u64,
        source: &mut SourceCursor<'_>,
        mapping: &mut OffsetMapping,
    ) -> Result<()> {
        // Retention may have removed the target's first records: what it still holds
        // starts wherever the first one left says.
        let mut trimmed = low > base;
        let mut missing: Vec<(u64, u64)> = Vec::new();
        let mut landed_from = None;
        let other = "the target partition holds records this export did not write where it \
                     would continue: export with another group (`ExportConfig::group`, \
                     `--group`) to append a whole copy after them, or to another topic";
        let expected = |source: &mut SourceCursor<'_>| -> Result<String> {
            Ok(match source.peek()? {
                Some((s, _)) => format!("the export expected a copy of source offset {s}"),
                None => "the source has no more records".into(),
            })
        };
        read_target(reader, self.tp, base.max(low), high, |r| {
            let at = r.offset;
            let m = match marker(&r.headers) {
                Some((id, m)) if id == self.source_id => Some(m),
                Some(_) => {
                    let expected = expected(source)?;
                    return Err(self.mismatch(at, self.describe(&r), expected, other));
                }
                None => None,
            };
            if let Some(m) = m {
                let next = source.peek()?.map(|(s, _)| *s);
                match next {
                    Some(s) if m > s => {
                        if !trimmed {
                            missing.push((s, m));
                            landed_from.get_or_insert(at);
                        }
                        while source.peek()?.is_some_and(|(s, _)| *s < m) {
                            source.next()?;
                        }
                    }
                    // Copied earlier from records the source's retention has removed
                    // since: nothing to match them with, nothing to send again.
                    Some(_) if m < source.first_offset() && mapping.runs.is_empty() => {
                        return Ok(());
                    }
                    Some(s) if m < s => {
                        let expected = expected(source)?;
                        return Err(self.mismatch(
                            at,
                            format!("a second copy of source offset {m}"),
                            expected,
                            "the target holds a duplicate: recreate the target topic and \
                             export again",
                        ));
                    }
                    _ => {}
                }
            }
            trimmed = false;
            let fits = match (source.peek()?, m) {
                (Some((s, record)), Some(m)) => *s == m && same_content(record, &r),
                (Some((_, record)), None) => same_content(record, &r),
                (None, _) => false,
            };
            if !fits {
                let found = match (m, source.peek()?) {
                    (Some(m), Some((s, _))) if *s == m => {
                        format!("a copy of source offset {m} whose content differs from it")
                    }
                    (Some(m), Some(_)) => {
                        format!("a copy of source offset {m}, which the source does not have")
                    }
                    (Some(m), None) => {
                        format!("a copy of source offset {m}, past the source's last record")
                    }
                    (None, _) => self.describe(&r),
                };
                let expected = expected(source)?;
                let how = match m {
                    Some(_) => {
                        "the source or the target changed since the earlier export: recreate \
                         the target topic (or export to another one) and export again"
                    }
                    None => other,
                };
                return Err(self.mismatch(at, found, expected, how));
            }
            if let Some((s, _)) = source.next()? {
                mapping.push(s, at);
                mapping.already_copied += 1;
            }
            Ok(())
        })?;
        if let Some(landed_from) = landed_from {
            return Err(Error::ExportGap {
                topic: self.tp.topic.clone(),
                partition: self.tp.partition,
                missing,
                landed_from,
                cause: None,
            });
        }
        Ok(())
    }

    /// Sends `pending`, checks where each record landed and maps it; returns how many
    /// records it copied.
    fn flush(
        &self,
        pending: &mut Vec<(u64, crate::storage::BatchRecord)>,
        mapping: &mut OffsetMapping,
        next_target: &mut u64,
    ) -> Result<u64> {
        let tp = self.tp;
        let markers: Vec<[Header; 1]> = pending
            .iter()
            .map(|(offset, _)| {
                [Header {
                    key: SOURCE_HEADER.into(),
                    value: Some(format!("{}/{offset}", self.source_id).into_bytes()),
                }]
            })
            .collect();
        let headers: Vec<Vec<Header>> = pending
            .iter()
            .zip(&markers)
            .map(|((_, r), m)| r.headers.iter().chain(m).cloned().collect())
            .collect();
        let raw: Vec<RawRecord<'_>> = pending
            .iter()
            .zip(&headers)
            .map(|((_, r), headers)| RawRecord {
                topic: &tp.topic,
                partition: tp.partition,
                timestamp: r.timestamp,
                key: r.key.as_deref(),
                value: r.value.as_deref(),
                headers,
            })
            .collect();
        let outcomes = send_raw(self.producer, &raw);
        let mut failure: Option<Error> = None;
        // Source offsets not acknowledged, as ranges, and the first target offset acked
        // after one of them.
        let mut unacked: Vec<(u64, u64)> = Vec::new();
        let mut landed_from = None;
        for ((source, _), outcome) in pending.iter().zip(outcomes) {
            match outcome {
                RawOutcome::Acked(target) => {
                    if target != *next_target {
                        return Err(self.mismatch(
                            target,
                            format!("this export's copy of source offset {source}"),
                            format!("the export expected it at target offset {next_target}"),
                            "another producer wrote to the target partition during the \
                             export: check the target, then recreate it or export with \
                             another group",
                        ));
                    }
                    if !unacked.is_empty() {
                        landed_from.get_or_insert(target);
                    }
                    mapping.push(*source, target);
                    mapping.copied += 1;
                    *next_target = target + 1;
                }
                RawOutcome::Failed(e) => {
                    failure.get_or_insert(e);
                    push_offset(&mut unacked, *source);
                }
                RawOutcome::NotSent => push_offset(&mut unacked, *source),
            }
        }
        let sent = pending.len() as u64;
        pending.clear();
        match (failure, landed_from) {
            (None, _) if unacked.is_empty() => Ok(sent),
            (cause, Some(landed_from)) => {
                // Only the offsets before the last acknowledged one are a gap; the rest are
                // simply not copied yet.
                let last_acked = mapping.runs.last().map_or(0, |r| r.source + r.count);
                let missing = unacked
                    .into_iter()
                    .filter(|(from, _)| *from < last_acked)
                    .map(|(from, to)| (from, to.min(last_acked)))
                    .collect();
                Err(Error::ExportGap {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    missing,
                    landed_from,
                    cause: cause.map(Box::new),
                })
            }
            (Some(mut e), None) => {
                if let (Error::Kafka { reason, .. }, Some((from, _))) = (&mut e, unacked.first()) {
                    reason.push_str(&format!(
                        "; source offsets from {from} on were not copied (what the target holds \
                         is a prefix of the source: run the export again to resume)"
                    ));
                }
                Err(e)
            }
            (None, None) => Err(Error::Kafka {
                operation: "export",
                topic: Some(tp.topic.clone()),
                partition: Some(tp.partition),
                code: -1,
                name: "NOT_SENT".into(),
                retriable: true,
                reason: "the client withdrew records it had not sent".into(),
            }),
        }
    }
}

/// Adds source offset `offset` to half-open ranges kept in order.
fn push_offset(ranges: &mut Vec<(u64, u64)>, offset: u64) {
    match ranges.last_mut() {
        Some((_, to)) if *to == offset => *to = offset + 1,
        _ => ranges.push((offset, offset + 1)),
    }
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
/// (opened, formatted first when missing or empty, and closed at the end) as persisted topics
/// of raw bytes (`topic::<Bytes, Option<Bytes>>`, `None` being a null value; decode with the
/// codecs the producers used), with the same partition counts. Each record keeps its
/// partition, key, value (a null value stays null), timestamp and headers (but an export's [`SOURCE_HEADER`]); offsets are
/// dense from 0 in the target (Kafka's may have gaps: see the mapping).
///
/// A topic the directory already has must be one an earlier import of the same Kafka topic
/// made: the import then resumes (see the [module docs](self)), copying what the earlier
/// one did not.
///
/// # Errors
///
/// [`Error::TopicExists`] when the directory has one of the topics with other types than an
/// import makes; [`Error::InvalidConfig`] when it has it with another partition count;
/// [`Error::CopyTargetMismatch`] when its records are not the cluster's, from the start of
/// each partition; [`Error::UnknownTopic`]; the data directory's errors; [`Error::Kafka`] /
/// [`Error::Timeout`].
pub fn import(
    data_dir: impl Into<PathBuf>,
    broker: &KafkaBroker,
    mut options: ExportConfig<'_>,
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

/// Whether `local` is the import of `kafka` (the marker aside).
fn same_import(
    local: &ConsumerRecord<Bytes, Option<Bytes>>,
    kafka: &ConsumerRecord<Bytes, Option<Bytes>>,
) -> bool {
    local.key == kafka.key
        && local.value == kafka.value
        && local.timestamp == kafka.timestamp.max(0)
        && local.headers[..] == *without_marker(&kafka.headers)
}

/// One Kafka partition's records from its low watermark to `high`, a poll at a time.
struct KafkaCursor<'a> {
    reader: &'a mut KafkaConsumer<Bytes, Option<Bytes>>,
    tp: &'a TopicPartition,
    high: u64,
    buf: VecDeque<ConsumerRecord<Bytes, Option<Bytes>>>,
}

impl KafkaCursor<'_> {
    fn next(&mut self) -> Result<Option<ConsumerRecord<Bytes, Option<Bytes>>>> {
        while self.buf.is_empty() && self.reader.position(self.tp)? < self.high {
            let high = self.high;
            let records = self.reader.poll(Duration::from_millis(100))?;
            self.buf
                .extend(records.into_iter().filter(|r| r.offset < high));
        }
        Ok(self.buf.pop_front())
    }

    fn is_done(&mut self) -> Result<bool> {
        Ok(self.buf.is_empty() && self.reader.position(self.tp)? >= self.high)
    }
}

fn import_into(
    target: &Broker,
    broker: &KafkaBroker,
    topics: &[String],
    options: &mut ExportConfig<'_>,
) -> Result<CopyReport> {
    let mut report = CopyReport {
        partitions: Vec::new(),
        stopped: false,
    };
    let mut copied_total = 0;
    for topic in topics {
        let partitions = broker.partition_count(topic)?;
        let resuming = match target.topic::<Bytes, Option<Bytes>>(topic) {
            Ok(t) if t.partition_count() != partitions => {
                return Err(Error::InvalidConfig {
                    name: "import target partitions",
                    value: format!(
                        "topic `{topic}` has {} partitions in the data directory",
                        t.partition_count()
                    ),
                    valid: format!(
                        "{partitions}, the cluster's count: an import resumes only into the \
                         topic an earlier import of the same topic made"
                    ),
                })
            }
            Ok(_) => true,
            Err(Error::UnknownTopic { .. }) => {
                target.create_topic::<Bytes, Option<Bytes>>(
                    topic,
                    TopicConfig::new(partitions).persist(PersistConfig::default()),
                )?;
                false
            }
            Err(Error::TypeMismatch { .. }) => {
                return Err(Error::TopicExists {
                    topic: topic.clone(),
                })
            }
            Err(e) => return Err(e),
        };
        let producer = target.producer::<Bytes, Option<Bytes>>();
        let mut reader = broker.consumer::<Bytes, Option<Bytes>>(
            ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest),
        )?;
        let mut local = target.consumer::<Bytes, Option<Bytes>>(
            ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest),
        )?;
        for p in 0..partitions {
            let tp = TopicPartition::new(topic.clone(), p);
            let (low, high) = broker.watermarks(&tp)?;
            let mut mapping = OffsetMapping::new(topic, p);
            reader.assign(std::slice::from_ref(&tp))?;
            reader.seek(&tp, low)?;
            let mut kafka = KafkaCursor {
                reader: &mut reader,
                tp: &tp,
                high,
                buf: VecDeque::new(),
            };
            if resuming {
                verify_import(&mut local, &tp, &mut kafka, &mut mapping)?;
            }
            let mut done = mapping.already_copied;
            let mut in_batch = 0;
            while let Some(r) = kafka.next()? {
                let mut record = Record::new(topic.clone(), r.value)
                    .partition(p)
                    .timestamp(r.timestamp.max(0));
                record.key = r.key;
                record.headers = without_marker(&r.headers).to_vec();
                let meta = producer.send(record)?;
                mapping.push(r.offset, meta.offset);
                mapping.copied += 1;
                done += 1;
                copied_total += 1;
                in_batch += 1;
                if in_batch >= options.batch || kafka.is_done()? {
                    in_batch = 0;
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
                        target.fsync_and_checkpoint()?;
                        return Ok(report);
                    }
                }
            }
            report.partitions.push(mapping);
        }
        target.fsync_and_checkpoint()?;
    }
    Ok(report)
}

/// Matches the records an earlier import left in `tp` of the data directory to the
/// cluster's, in order from the start, moving `kafka` past them and mapping them.
fn verify_import(
    local: &mut crate::Consumer<Bytes, Option<Bytes>>,
    tp: &TopicPartition,
    kafka: &mut KafkaCursor<'_>,
    mapping: &mut OffsetMapping,
) -> Result<()> {
    let parts = std::slice::from_ref(tp);
    let start = local.beginning_offsets(parts)?[tp];
    let end = local.end_offsets(parts)?[tp];
    if start >= end {
        return Ok(());
    }
    local.assign(parts)?;
    local.seek(tp, start)?;
    let how = "the data directory's topic is not an import of this Kafka topic, or one of \
               them changed since (records removed by retention on the cluster, records \
               sent to the directory): import into another data directory, or delete the \
               topic there first";
    let mismatch = |offset: u64, found: String, expected: String| Error::CopyTargetMismatch {
        operation: "import",
        topic: tp.topic.clone(),
        partition: tp.partition,
        target_offset: offset,
        found: format!("{found}, where {expected}"),
        how,
    };
    while local.position(tp)? < end {
        for l in local.poll(Duration::from_millis(50))? {
            if l.offset >= end {
                continue;
            }
            match kafka.next()? {
                Some(k) if same_import(&l, &k) => {
                    mapping.push(k.offset, l.offset);
                    mapping.already_copied += 1;
                }
                Some(k) => {
                    return Err(mismatch(
                        l.offset,
                        format!(
                            "a record that differs from the cluster's at offset {}",
                            k.offset
                        ),
                        format!(
                            "the import expected a copy of the cluster's offset {}",
                            k.offset
                        ),
                    ))
                }
                None => {
                    return Err(mismatch(
                        l.offset,
                        "a record the cluster does not have".into(),
                        format!("the cluster's partition ends at offset {}", kafka.high),
                    ))
                }
            }
        }
    }
    Ok(())
}
