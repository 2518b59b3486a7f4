//! Positions: `seek`, `seek_to_beginning`/`end`, `offsets_for_times`, the log's bounds.

use std::collections::HashMap;
use std::time::Instant;

use rdkafka::consumer::{BaseConsumer, Consumer as _, RebalanceProtocol};
use rdkafka::error::RDKafkaErrorCode as Code;
use rdkafka::message::Message as _;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::{private_group, KafkaConsumer};
use crate::codec::Codec;
use crate::consumer::{IsolationLevel, OffsetAndTimestamp};
use crate::error::{Error, Result};
use crate::kafka::error::{from_code, from_kafka, At};
use crate::TopicPartition;

impl<K, V> KafkaConsumer<K, V>
where
    K: Codec + Clone + Send + Sync + 'static,
    V: Codec + Clone + Send + Sync + 'static,
{
    /// Moves the position in `tp` to `offset`; the next poll reads from there (an offset
    /// out of range is handled by the cluster per `auto_offset_reset`).
    ///
    /// # Errors
    ///
    /// [`Error::NotAssigned`]; [`Error::OffsetOutOfRange`] for an offset above
    /// `i64::MAX` (Kafka's offsets are signed: librdkafka would read such an offset as one
    /// of its markers, "end" or "beginning"); [`Error::Kafka`].
    pub fn seek(&mut self, tp: &TopicPartition, offset: u64) -> Result<()> {
        let i = self.index(tp)?;
        if i64::try_from(offset).is_err() {
            let (start, end) = self.broker.watermarks(tp)?;
            return Err(Error::OffsetOutOfRange {
                topic: Some(tp.topic.clone()),
                partition: Some(tp.partition),
                requested: offset,
                start,
                end,
            });
        }
        self.assigned[i].position = Some(offset);
        self.reposition(&[i])
    }

    /// Tells the client the positions of `indices` (it drops what it fetched from before).
    pub(super) fn reposition(&mut self, indices: &[usize]) -> Result<()> {
        let mut l = TopicPartitionList::new();
        for &i in indices {
            let a = &self.assigned[i];
            if let Some(p) = a.position {
                let _ = l.add_partition_offset(
                    &a.tp.topic,
                    a.tp.partition as i32,
                    Offset::Offset(p as i64),
                );
            }
        }
        if l.count() == 0 {
            return Ok(());
        }
        // A seek on a partition whose fetcher is not started yet is refused; assigning
        // again at the positions wants no fetcher.
        match self.client.seek_partitions(l, self.timeout()) {
            Ok(result) if result.elements().iter().all(|e| e.error().is_ok()) => Ok(()),
            _ => self.reassign(),
        }
    }

    /// Hands the client the whole assignment again, at this consumer's positions.
    fn reassign(&mut self) -> Result<()> {
        let list = Self::client_list(self.assigned.iter());
        let tps: Vec<TopicPartition> = self.assigned.iter().map(|a| a.tp.clone()).collect();
        self.forward(tps.iter());
        let done = if matches!(
            self.client.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        ) {
            self.client
                .incremental_unassign(&list)
                .and_then(|()| self.client.incremental_assign(&list))
        } else {
            self.client.assign(&list)
        };
        done.map_err(|e| from_kafka(e, At::op("seek")))?;
        self.repause()
    }

    fn indices(&self, partitions: &[TopicPartition]) -> Result<Vec<usize>> {
        if partitions.is_empty() {
            return Ok((0..self.assigned.len()).collect());
        }
        partitions.iter().map(|tp| self.index(tp)).collect()
    }

    /// Moves the positions in `partitions` (every assigned partition if empty) to their
    /// log start.
    ///
    /// # Errors
    ///
    /// [`Error::NotAssigned`] (nothing moves); [`Error::Kafka`].
    pub fn seek_to_beginning(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        self.seek_to(partitions, true)
    }

    /// Moves the positions in `partitions` (every assigned partition if empty) to their
    /// log end (the high watermark).
    ///
    /// # Errors
    ///
    /// [`Error::NotAssigned`] (nothing moves); [`Error::Kafka`].
    pub fn seek_to_end(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        self.seek_to(partitions, false)
    }

    fn seek_to(&mut self, partitions: &[TopicPartition], beginning: bool) -> Result<()> {
        let indices = self.indices(partitions)?;
        let mut targets = Vec::with_capacity(indices.len());
        for &i in &indices {
            let (low, end) = self.readable_watermarks(&self.assigned[i].tp)?;
            targets.push(if beginning { low } else { end });
        }
        for (&i, t) in indices.iter().zip(targets) {
            self.assigned[i].position = Some(t);
        }
        self.reposition(&indices)
    }

    /// For each `(partition, timestamp)`, the first offset whose record's timestamp is at
    /// or after `timestamp`, with that timestamp (`None` when no record is). Partitions
    /// need not be assigned. (Kafka answers with the offset only; the timestamp is read
    /// from the record.)
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTimestamp`] (outside `0..=`[`MAX_TIMESTAMP`](crate::MAX_TIMESTAMP)), [`Error::UnknownTopic`],
    /// [`Error::PartitionOutOfRange`], [`Error::Kafka`] / [`Error::Timeout`].
    pub fn offsets_for_times(
        &mut self,
        query: &[(TopicPartition, i64)],
    ) -> Result<HashMap<TopicPartition, Option<OffsetAndTimestamp>>> {
        let mut l = TopicPartitionList::with_capacity(query.len());
        for (tp, ts) in query {
            if !crate::partition::valid_timestamp(*ts) {
                return Err(Error::InvalidTimestamp {
                    timestamp: *ts,
                    offset: None,
                });
            }
            self.check_partition(tp)?;
            let _ = l.add_partition_offset(&tp.topic, tp.partition as i32, Offset::Offset(*ts));
        }
        let timeout = self.timeout();
        let found = self
            .client
            .offsets_for_times(l, timeout)
            .map_err(|e| from_kafka(e, At::op("offsets_for_times").timeout(timeout)))?;
        let mut out = HashMap::with_capacity(query.len());
        for (tp, ts) in query {
            let offset = match found
                .find_partition(&tp.topic, tp.partition as i32)
                .map(|e| (e.offset(), e.error()))
            {
                Some((_, Err(e))) => return Err(from_kafka(e, self.at("offsets_for_times", tp))),
                Some((Offset::Offset(o), _)) => Some(o as u64),
                _ => None,
            };
            let at = match offset {
                Some(o) => {
                    let high = self.broker.watermarks(tp)?.1;
                    self.scan(tp, o, high, |_| true)?
                }
                // librdkafka's mock cluster answers no timestamp lookup (every one is
                // "none"): on it, read the partition instead.
                None if self.broker.inner.mock.is_some() => {
                    let (low, high) = self.broker.watermarks(tp)?;
                    self.scan(tp, low, high, |t| t >= *ts)?
                }
                None => None,
            };
            out.insert(
                tp.clone(),
                at.map(|(offset, timestamp)| OffsetAndTimestamp { offset, timestamp }),
            );
        }
        Ok(out)
    }

    /// The first record of `tp` in offsets `[from, until)` whose timestamp passes `wanted`:
    /// its offset and timestamp.
    fn scan(
        &mut self,
        tp: &TopicPartition,
        from: u64,
        until: u64,
        wanted: impl Fn(i64) -> bool,
    ) -> Result<Option<(u64, i64)>> {
        if from >= until {
            return Ok(None);
        }
        let timeout = self.timeout();
        if self.probe.is_none() {
            let mut c = self.broker.inner.config.client(false);
            c.set("group.id", private_group());
            c.set("enable.auto.commit", "false");
            self.probe = Some(
                c.create::<BaseConsumer>()
                    .map_err(|e| from_kafka(e, At::op("offsets_for_times")))?,
            );
        }
        let at = self.at("offsets_for_times", tp);
        let probe = self
            .probe
            .as_ref()
            .ok_or_else(|| crate::kafka::error::timed_out(at))?;
        let mut l = TopicPartitionList::new();
        let _ = l.add_partition_offset(&tp.topic, tp.partition as i32, Offset::Offset(from as i64));
        probe.assign(&l).map_err(|e| from_kafka(e, at))?;
        let mut deadline = Instant::now() + timeout;
        let result = loop {
            match probe.poll(deadline.saturating_duration_since(Instant::now())) {
                Some(Ok(m)) => {
                    let offset = m.offset().max(0) as u64;
                    let ts = m.timestamp().to_millis().unwrap_or(0);
                    if offset >= from && wanted(ts) {
                        break Ok(Some((offset, ts)));
                    }
                    if offset + 1 >= until {
                        break Ok(None);
                    }
                    deadline = Instant::now() + timeout;
                }
                Some(Err(e)) => break Err(from_kafka(e, at)),
                None if Instant::now() >= deadline => {
                    break Err(from_code(Code::OperationTimedOut, String::new(), at))
                }
                None => continue,
            }
        };
        let _ = probe.unassign();
        result
    }

    /// The log start offset of each partition. Partitions need not be assigned.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`], [`Error::PartitionOutOfRange`], [`Error::Kafka`].
    pub fn beginning_offsets(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, u64>> {
        partitions
            .iter()
            .map(|tp| Ok((tp.clone(), self.broker.watermarks(tp)?.0)))
            .collect()
    }

    /// The end offset of each partition, as far as this consumer can read: the high
    /// watermark, or with `ReadCommitted` the last stable offset, as in process (and Kafka's
    /// `endOffsets`). Partitions need not be assigned.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`], [`Error::PartitionOutOfRange`], [`Error::Kafka`].
    pub fn end_offsets(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, u64>> {
        partitions
            .iter()
            .map(|tp| Ok((tp.clone(), self.readable_watermarks(tp)?.1)))
            .collect()
    }

    /// The log start and the end of what this consumer reads (the high watermark, or read
    /// committed the last stable offset: asked through its own client, which asks with its
    /// isolation level).
    pub(super) fn readable_watermarks(&self, tp: &TopicPartition) -> Result<(u64, u64)> {
        match self.config.isolation_level {
            IsolationLevel::ReadCommitted => self.broker.watermarks_by(&self.client, tp),
            IsolationLevel::ReadUncommitted => self.broker.watermarks(tp),
        }
    }
}
