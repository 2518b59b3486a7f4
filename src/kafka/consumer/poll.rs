//! Reading: `poll`, `poll_into` and `poll_with`, and when a poll has caught up.

use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer as _;
use rdkafka::message::Message as _;
use rdkafka::types::RDKafkaRespErr;

use super::KafkaConsumer;
use crate::codec::Codec;
use crate::consumer::{ConsumerRecord, ConsumerRecords, RecordRef};
use crate::error::{Error, Result};
use crate::kafka::error::{from_kafka, At};
use crate::kafka::producer::from_headers;
use crate::TopicPartition;

impl<K, V> KafkaConsumer<K, V>
where
    K: Codec + Clone + Send + Sync + 'static,
    V: Codec + Clone + Send + Sync + 'static,
{
    /// Up to `max_poll_records` records from the assigned, unpaused partitions, waiting up
    /// to `timeout` for the first. Rebalances (and the listener) run here.
    ///
    /// Unlike in process, records can be on the cluster and not yet fetched. `poll` returns
    /// when it has read everything its partitions held at their last fetch (the high
    /// watermarks the fetch responses carry; the cluster is asked for a partition not
    /// fetched yet), or `max_poll_records`, or — with nothing read — when the timeout passed
    /// and nothing is left to fetch; it keeps waiting past the timeout (up to
    /// [`KafkaConfig::poll_catch_up`]) while records it has not fetched are known to be
    /// there. So, as in process, a poll returns what is there, and an empty poll means
    /// "caught up". (A subscribed consumer still joining its group waits only the timeout.)
    ///
    /// # Errors
    ///
    /// [`Error::PollInListener`], [`Error::NoOffsetForPartition`] (no position under
    /// `OffsetReset::None`), [`Error::Decode`], [`Error::Kafka`]. Records read before the
    /// problem are returned first; the error comes with the next poll.
    ///
    /// [`KafkaConfig::poll_catch_up`]: crate::kafka::KafkaConfig::poll_catch_up
    pub fn poll(&mut self, timeout: Duration) -> Result<ConsumerRecords<K, V>> {
        let mut out = Vec::new();
        let max = self.config.poll_records();
        self.poll_into(&mut out, max, timeout)?;
        Ok(ConsumerRecords::from_vec(out))
    }

    /// Like [`poll`](Self::poll), appending at most `max` records to `out`.
    ///
    /// # Errors
    ///
    /// As [`poll`](Self::poll).
    pub fn poll_into(
        &mut self,
        out: &mut Vec<ConsumerRecord<K, V>>,
        max: usize,
        timeout: Duration,
    ) -> Result<usize> {
        self.read(max, timeout, |r| out.push(r))
    }

    /// Like [`poll_into`](Self::poll_into), lending each record to `f` instead of
    /// returning it (as [`Consumer::poll_with`](crate::Consumer::poll_with)): at most
    /// `max` records, in the order `poll` returns them; returns how many. Each record is
    /// decoded from librdkafka's buffer, lent, and dropped before the next is read, so a
    /// hot loop keeps no batch of records alive. The position moves past a record before
    /// `f` sees it: if `f` panics, that record is not lent again (seek back to re-read
    /// it).
    ///
    /// # Errors
    ///
    /// As [`poll`](Self::poll); an error met after some records were lent comes with the
    /// next poll.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use logbus::consumer::{ConsumerConfig, OffsetReset};
    /// use logbus::kafka::{KafkaBroker, KafkaConfig};
    /// use logbus::TopicPartition;
    ///
    /// let broker = KafkaBroker::connect(KafkaConfig::new("localhost:9092"))?;
    /// let mut consumer = broker.consumer::<String, u64>(
    ///     ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest),
    /// )?;
    /// consumer.assign(&[TopicPartition::new("orders", 0)])?;
    /// let mut sum = 0;
    /// let n = consumer.poll_with(1024, Duration::from_secs(1), |r| sum += *r.value)?;
    /// println!("{n} records, sum {sum}");
    /// # Ok::<(), logbus::Error>(())
    /// ```
    pub fn poll_with(
        &mut self,
        max: usize,
        timeout: Duration,
        mut f: impl FnMut(RecordRef<'_, K, V>),
    ) -> Result<usize> {
        self.read(max, timeout, |r| {
            f(RecordRef {
                topic: r.topic,
                partition: r.partition,
                offset: r.offset,
                timestamp: r.timestamp,
                key: r.key.as_ref(),
                value: &r.value,
                headers: &r.headers,
            });
        })
    }

    /// The poll loop: hands each record read (at most `max`) to `sink`; returns how many.
    fn read(
        &mut self,
        max: usize,
        timeout: Duration,
        mut sink: impl FnMut(ConsumerRecord<K, V>),
    ) -> Result<usize> {
        if self.in_listener {
            return Err(Error::PollInListener);
        }
        if let Some(e) = self.pending.take() {
            return Err(e);
        }
        self.rebalance()?;
        if max == 0 || (self.assigned.is_empty() && self.subscription.is_empty()) {
            return Ok(0);
        }
        if let Some(a) = self.assigned.iter().find(|a| a.position.is_none()) {
            return Err(Error::NoOffsetForPartition {
                topic: a.tp.topic.clone(),
                partition: a.tp.partition,
            });
        }
        let mut n = 0usize;
        let deadline = Instant::now().checked_add(timeout);
        let mut catch_up: Option<Instant> = None;
        // The assigned partition and interned topic name of the last record.
        let mut last: Option<(usize, &'static str)> = None;
        // Whether the last poll returned a message: the next one then does not wait.
        let mut flowing = false;
        loop {
            // No clock read per record (a clock read costs about as much as a record here).
            let wait = match (catch_up, deadline) {
                _ if flowing => Duration::ZERO,
                // Waiting for records the cluster has and this consumer has not fetched.
                (Some(c), _) => c
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(50)),
                _ if n > 0 => Duration::ZERO,
                (None, Some(d)) => d.saturating_duration_since(Instant::now()),
                (None, None) => Duration::from_secs(1),
            };
            let message = self.client.poll(wait);
            flowing = message.is_some();
            match message {
                Some(Ok(m)) => {
                    let topic = m.topic();
                    let partition = m.partition() as u32;
                    // Records come in runs of one partition: try the last one first.
                    let i = match last {
                        Some((i, name))
                            if self
                                .assigned
                                .get(i)
                                .is_some_and(|a| a.tp.partition == partition && name == topic) =>
                        {
                            Some(i)
                        }
                        _ => self
                            .assigned
                            .iter()
                            .position(|a| a.tp.partition == partition && a.tp.topic == topic),
                    };
                    let Some(i) = i.filter(|&i| !self.assigned[i].paused) else {
                        // Fetched before a pause or a revocation: read again from the
                        // position on resume.
                        continue;
                    };
                    let name = match last {
                        Some((_, name)) if name == topic => name,
                        _ => crate::sync::intern(topic),
                    };
                    last = Some((i, name));
                    let decoded = decode::<K, V>(&m, name);
                    match decoded {
                        Ok(record) => {
                            self.assigned[i].position = Some(record.offset + 1);
                            n += 1;
                            sink(record);
                        }
                        Err(e) => {
                            // Skip the record that cannot be decoded, as the position says.
                            self.assigned[i].position = Some(m.offset().max(0) as u64 + 1);
                            if n == 0 {
                                return Err(e);
                            }
                            self.pending = Some(e);
                            break;
                        }
                    }
                    if n >= max {
                        break;
                    }
                }
                Some(Err(e)) => {
                    let e = from_kafka(e, At::op("poll"));
                    if n == 0 {
                        return Err(e);
                    }
                    self.pending = Some(e);
                    break;
                }
                None => {
                    let checked = self.rebalance().and_then(|()| {
                        let now = Instant::now();
                        if n > 0 || deadline.is_some_and(|d| now >= d) {
                            self.fetched().map(|done| Some((done, now)))
                        } else {
                            Ok(None)
                        }
                    });
                    match checked {
                        Err(e) if n == 0 => return Err(e),
                        // The records read are returned first (their positions moved past
                        // them already: an error now would drop them); the error comes
                        // with the next poll.
                        Err(e) => {
                            self.pending = Some(e);
                            break;
                        }
                        Ok(Some((true, _))) => break,
                        Ok(Some((false, now))) => {
                            let limit =
                                *catch_up.get_or_insert(now + self.broker.inner.config.catch_up());
                            if now >= limit {
                                break;
                            }
                        }
                        Ok(None) => {}
                    }
                }
            }
        }
        self.metrics.add_consumed(n as u64);
        Ok(n)
    }

    /// Whether this consumer read everything the cluster holds in its assigned, unpaused
    /// partitions: by the high watermarks the last fetch responses carried (kept by
    /// librdkafka, no request), or, for a partition not fetched yet, by asking the cluster.
    fn fetched(&self) -> Result<bool> {
        let mut unknown = false;
        for a in self.assigned.iter().filter(|a| !a.paused) {
            match self.cached_high(&a.tp) {
                Some(high) if a.position.is_some_and(|p| p < high) => return Ok(false),
                Some(_) => {}
                None => unknown = true,
            }
        }
        if unknown {
            self.caught_up()
        } else {
            Ok(true)
        }
    }

    /// The high watermark of `tp` in the last fetch response, if one came.
    fn cached_high(&self, tp: &TopicPartition) -> Option<u64> {
        let topic = std::ffi::CString::new(tp.topic.as_str()).ok()?;
        let (mut low, mut high) = (-1i64, -1i64);
        // SAFETY: the handle is this consumer's client, alive for the whole call; `topic` is
        // a NUL-terminated string that outlives it; `low` and `high` are valid for writes.
        // librdkafka reads its cached offsets under its own partition lock (thread-safe).
        let err = unsafe {
            rdkafka::bindings::rd_kafka_get_watermark_offsets(
                self.client.client().native_ptr(),
                topic.as_ptr(),
                tp.partition as i32,
                &mut low,
                &mut high,
            )
        };
        (err == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0).then_some(high as u64)
    }

    /// Whether every assigned, unpaused partition's position is at its high watermark,
    /// asking the cluster.
    fn caught_up(&self) -> Result<bool> {
        for a in self.assigned.iter().filter(|a| !a.paused) {
            let (_, high) = self.broker.watermarks(&a.tp)?;
            if a.position.is_some_and(|p| p < high) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// A fetched message as a logbus record.
fn decode<K: Codec, V: Codec>(
    m: &rdkafka::message::BorrowedMessage<'_>,
    topic: &'static str,
) -> Result<ConsumerRecord<K, V>> {
    let key = match m.key() {
        Some(k) => Some(K::decode(k)?),
        None => None,
    };
    let value = V::decode(m.payload().unwrap_or(&[]))?;
    Ok(ConsumerRecord {
        topic,
        partition: m.partition().max(0) as u32,
        offset: m.offset().max(0) as u64,
        timestamp: m.timestamp().to_millis().unwrap_or(0),
        key,
        value,
        headers: from_headers(m.headers()),
    })
}
