//! Random sequences of create / produce / assign / poll / commit / seek / add_partitions /
//! delete (topics and groups) against a plain reference model: per partition a vector of
//! every record ever appended, a capacity, the groups' committed offsets and gates, and the
//! producer's claim limit (the one piece of the ring's state that decides when a `Block`
//! producer finds a partition full and where a gate can still be placed).
//!
//! Checked after every step: offsets dense from 0, what each poll returns per partition (in
//! order), positions, committed offsets, every error (kind and facts), skip counts, and
//! `describe_topic` for every topic.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use logbus::broker::{Broker, Overflow, TopicConfig, TopicPartition};
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::producer::{partition_for_key, Record};
use logbus::{Consumer, Error, ManualClock, Producer};
use proptest::prelude::*;

const T0: i64 = 1_700_000_000_000;
const TOPICS: [&str; 2] = ["t0", "t1"];
const GROUPS: [&str; 2] = ["a", "b"];
/// The consumer slots: (group, reset).
const SLOTS: [(Option<&str>, OffsetReset); 4] = [
    (Some("a"), OffsetReset::Earliest),
    (Some("a"), OffsetReset::None),
    (Some("b"), OffsetReset::Latest),
    (None, OffsetReset::Earliest),
];

#[derive(Debug, Clone)]
enum Op {
    Create {
        t: usize,
        partitions: u32,
        cap_log2: u32,
        drop_oldest: bool,
    },
    Delete(usize),
    AddPartitions(usize, u32),
    Produce {
        t: usize,
        partition: Option<u32>,
        key: Option<u8>,
        ts: Option<i64>,
        count: usize,
    },
    Open(usize),
    Close(usize),
    Assign(usize, Vec<(usize, u32)>),
    Poll(usize),
    CommitSync(usize),
    /// Commit an offset (as a fraction of the partition's end, 255 = end, 256+ = past it).
    CommitOffset(usize, usize, u32, u16),
    Seek(usize, usize, u64),
    SeekToBeginning(usize),
    SeekToEnd(usize),
    DeleteGroup(usize),
    OffsetsForTimes(usize, u32, i64),
}

fn op() -> impl Strategy<Value = Op> {
    let t = 0..TOPICS.len();
    let c = 0..SLOTS.len();
    prop_oneof![
        2 => (t.clone(), 1u32..4, 1u32..4, any::<bool>()).prop_map(|(t, partitions, cap_log2, drop_oldest)| Op::Create { t, partitions, cap_log2, drop_oldest }),
        1 => t.clone().prop_map(Op::Delete),
        1 => (t.clone(), 1u32..6).prop_map(|(t, n)| Op::AddPartitions(t, n)),
        8 => (t.clone(), proptest::option::of(0u32..4), proptest::option::of(any::<u8>()), proptest::option::of(0i64..100), 1usize..10)
            .prop_map(|(t, partition, key, ts, count)| Op::Produce { t, partition, key, ts, count }),
        2 => c.clone().prop_map(Op::Open),
        1 => c.clone().prop_map(Op::Close),
        5 => (c.clone(), proptest::collection::vec((t.clone(), prop_oneof![12 => 0u32..2, 1 => 2u32..4]), 1..3)).prop_map(|(c, tps)| Op::Assign(c, tps)),
        6 => c.clone().prop_map(Op::Poll),
        3 => c.clone().prop_map(Op::CommitSync),
        1 => (c.clone(), t.clone(), 0u32..4, 0u16..300).prop_map(|(c, t, p, f)| Op::CommitOffset(c, t, p, f)),
        2 => (c.clone(), 0usize..4, 0u64..24).prop_map(|(c, i, o)| Op::Seek(c, i, o)),
        1 => c.clone().prop_map(Op::SeekToBeginning),
        1 => c.clone().prop_map(Op::SeekToEnd),
        1 => (0..GROUPS.len()).prop_map(Op::DeleteGroup),
        1 => (t, 0u32..4, 0i64..120).prop_map(|(t, p, ts)| Op::OffsetsForTimes(t, p, ts)),
    ]
}

/// A group on one partition: its committed offset and (Block) its gate.
#[derive(Debug, Clone, Default)]
struct MGroup {
    committed: Option<u64>,
    gate: Option<u64>,
}

#[derive(Debug, Clone)]
struct MPart {
    /// (value, timestamp) of every record ever appended; the offset is the index.
    records: Vec<(u64, i64)>,
    cap: u64,
    block: bool,
    /// The producer handle's claim limit (0: not yet computed) and the highest limit ever
    /// published to the ring's registry (initially the capacity).
    my_limit: u64,
    published_limit: u64,
    groups: BTreeMap<String, MGroup>,
}

impl MPart {
    fn new(cap: u64, block: bool) -> Self {
        Self {
            records: Vec::new(),
            cap,
            block,
            my_limit: 0,
            published_limit: cap,
            groups: BTreeMap::new(),
        }
    }
    fn end(&self) -> u64 {
        self.records.len() as u64
    }
    fn start(&self) -> u64 {
        self.end().saturating_sub(self.cap)
    }
    /// The ring's `oldest`: where a new reader may start.
    fn oldest(&self) -> u64 {
        self.start()
            .max(self.published_limit.saturating_sub(self.cap))
    }
    fn gate_at(&self, target: u64) -> u64 {
        let oldest = self.oldest();
        let newest = self
            .end()
            .max(self.published_limit.saturating_sub(self.cap));
        if target < oldest {
            oldest
        } else if target > newest {
            newest
        } else {
            target
        }
    }
    fn try_append(&mut self, value: u64, ts: i64) -> Option<u64> {
        let c = self.end();
        if c + 1 > self.my_limit {
            let gate = if self.block {
                self.groups.values().filter_map(|g| g.gate).min()
            } else {
                None
            };
            self.my_limit = gate.map_or(c, |g| g.min(c)) + self.cap;
            self.published_limit = self.published_limit.max(self.my_limit);
            if c + 1 > self.my_limit {
                return None;
            }
        }
        self.records.push((value, ts));
        Some(c)
    }
    fn register(&mut self, group: &str, start: u64) -> Option<u64> {
        if let Some(g) = self.groups.get(group) {
            return g.committed;
        }
        let gate = self.block.then(|| self.gate_at(start));
        self.groups.insert(
            group.to_string(),
            MGroup {
                committed: None,
                gate,
            },
        );
        None
    }
    fn commit(&mut self, group: &str, offset: u64) -> Result<(), (u64, u64)> {
        if offset > self.end() {
            return Err((self.start(), self.end()));
        }
        let at = self.gate_at(offset);
        let block = self.block;
        let g = self.groups.entry(group.to_string()).or_default();
        g.committed = Some(offset);
        if block {
            g.gate = Some(match g.gate {
                Some(old) if old <= offset => offset,
                _ => at,
            });
        }
        Ok(())
    }
}

#[derive(Debug, Clone)]
struct MTopic {
    name: &'static str,
    parts: Vec<MPart>,
    cap: u64,
    block: bool,
    deleted: bool,
}

#[derive(Debug, Clone)]
struct MAssigned {
    inc: usize,
    p: u32,
    pos: Option<u64>,
}

#[derive(Debug, Clone)]
struct MConsumer {
    group: Option<&'static str>,
    reset: OffsetReset,
    assigned: Vec<MAssigned>,
    next: usize,
    /// Keyed by name, as the consumer's metrics (a recreated topic continues the count).
    skipped: HashMap<(&'static str, u32), u64>,
}

/// What an operation is expected to fail with (compared by kind and key facts).
#[derive(Debug, Clone, PartialEq)]
enum MErr {
    UnknownTopic,
    TopicExists,
    PartitionOutOfRange(u32, u32),
    Shrink(u32, u32),
    InvalidConfig,
    Full,
    NoOffset,
    OffsetOutOfRange(u64, u64, u64),
    NoGroupId,
    NotAssigned,
    UnknownGroup,
    GroupNotEmpty(usize),
}

fn kind(e: &Error) -> MErr {
    match e {
        Error::UnknownTopic { .. } => MErr::UnknownTopic,
        Error::TopicExists { .. } => MErr::TopicExists,
        Error::PartitionOutOfRange {
            partition, count, ..
        } => MErr::PartitionOutOfRange(*partition, *count),
        Error::PartitionsCannotShrink {
            current, requested, ..
        } => MErr::Shrink(*current, *requested),
        Error::InvalidConfig { .. } => MErr::InvalidConfig,
        Error::Full { .. } => MErr::Full,
        Error::NoOffsetForPartition { .. } => MErr::NoOffset,
        Error::OffsetOutOfRange {
            requested,
            start,
            end,
            ..
        } => MErr::OffsetOutOfRange(*requested, *start, *end),
        Error::NoGroupId { .. } => MErr::NoGroupId,
        Error::NotAssigned { .. } => MErr::NotAssigned,
        Error::UnknownGroup { .. } => MErr::UnknownGroup,
        Error::GroupNotEmpty { members, .. } => MErr::GroupNotEmpty(*members),
        other => panic!("unexpected error {other:?}"),
    }
}

#[derive(Default)]
struct Model {
    /// Every topic ever created, by incarnation.
    topics: Vec<MTopic>,
    live: HashMap<&'static str, usize>,
    consumers: Vec<Option<MConsumer>>,
    /// Known groups and their open consumers.
    groups: HashMap<&'static str, usize>,
    next_value: u64,
}

impl Model {
    fn reset_target(reset: OffsetReset, part: &MPart) -> Option<u64> {
        match reset {
            OffsetReset::Earliest => Some(part.start()),
            OffsetReset::Latest => Some(part.end()),
            OffsetReset::None => None,
        }
    }

    /// Reads one assigned partition like the consumer's `read_one`.
    fn read_one(&mut self, c: usize, i: usize) -> Result<Vec<(usize, u32, u64, u64)>, MErr> {
        let cons = self.consumers[c].as_mut().unwrap();
        let a = &mut cons.assigned[i];
        let topic = &self.topics[a.inc];
        if topic.deleted {
            return Err(MErr::UnknownTopic);
        }
        let part = &topic.parts[a.p as usize];
        let Some(mut pos) = a.pos else {
            return Err(MErr::NoOffset);
        };
        let (start, end) = (part.start(), part.end());
        if pos < start || pos > end {
            let target = match cons.reset {
                OffsetReset::None => return Err(MErr::OffsetOutOfRange(pos, start, end)),
                OffsetReset::Earliest => start,
                OffsetReset::Latest => end,
            };
            if target > pos {
                *cons.skipped.entry((topic.name, a.p)).or_insert(0) += target - pos;
            }
            pos = target;
        }
        let out = (pos..end)
            .map(|o| (a.inc, a.p, o, part.records[o as usize].0))
            .collect();
        a.pos = Some(end);
        Ok(out)
    }

    fn poll(&mut self, c: usize) -> Result<Vec<(usize, u32, u64, u64)>, MErr> {
        let len = self.consumers[c].as_ref().unwrap().assigned.len();
        if len == 0 {
            return Ok(Vec::new());
        }
        let cons = self.consumers[c].as_mut().unwrap();
        let first = cons.next % len;
        cons.next = (first + 1) % len;
        let mut out = Vec::new();
        for i in 0..len {
            match self.read_one(c, (first + i) % len) {
                Ok(r) => out.extend(r),
                Err(_) if !out.is_empty() => {
                    self.consumers[c].as_mut().unwrap().next = (first + i) % len;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}

struct Real {
    broker: Broker,
    producer: Producer<u8, u64>,
    consumers: Vec<Option<Consumer<u8, u64>>>,
    /// Topic incarnation per name, to map records back.
    inc_of: HashMap<&'static str, usize>,
}

fn check<T: std::fmt::Debug + PartialEq>(
    what: &str,
    real: Result<T, Error>,
    model: Result<T, MErr>,
) {
    match (real, model) {
        (Ok(r), Ok(m)) => assert_eq!(r, m, "{what}"),
        (Err(e), Err(m)) => assert_eq!(kind(&e), m, "{what}: {e}"),
        (r, m) => panic!("{what}: real {r:?}, model {m:?}"),
    }
}

fn run(ops: Vec<Op>) {
    let clock = Arc::new(ManualClock::new(T0));
    let broker = Broker::builder().clock(clock).build().unwrap();
    let mut real = Real {
        producer: broker.producer::<u8, u64>(),
        broker,
        consumers: (0..SLOTS.len()).map(|_| None).collect(),
        inc_of: HashMap::new(),
    };
    let mut m = Model {
        consumers: vec![None; SLOTS.len()],
        ..Model::default()
    };
    for op in ops {
        step(&mut real, &mut m, &op);
        // describe_topic is exact for every live topic.
        for (&name, &inc) in &m.live {
            let d = real.broker.describe_topic(name).unwrap();
            let t = &m.topics[inc];
            assert_eq!(d.partitions.len(), t.parts.len(), "{op:?}");
            for (i, p) in t.parts.iter().enumerate() {
                let info = d.partitions[i];
                assert_eq!(
                    (
                        info.log_start,
                        info.high_watermark,
                        info.log_end,
                        info.records_in_memory
                    ),
                    (p.start(), p.end(), p.end(), p.end() - p.start()),
                    "{op:?}: {name}-{i}"
                );
            }
        }
        assert_eq!(real.broker.topics().len(), m.live.len());
    }
}

fn step(real: &mut Real, m: &mut Model, op: &Op) {
    let what = format!("{op:?}");
    // Consumer operations open their slot's consumer when it is closed.
    match *op {
        Op::Assign(c, _)
        | Op::Poll(c)
        | Op::CommitSync(c)
        | Op::CommitOffset(c, ..)
        | Op::Seek(c, ..)
        | Op::SeekToBeginning(c)
        | Op::SeekToEnd(c) => step(real, m, &Op::Open(c)),
        _ => {}
    }
    match *op {
        Op::Create {
            t,
            partitions,
            cap_log2,
            drop_oldest,
        } => {
            let name = TOPICS[t];
            let cap = 1u64 << cap_log2;
            let overflow = if drop_oldest {
                Overflow::DropOldest
            } else {
                Overflow::Block
            };
            let r = real.broker.create_topic::<u8, u64>(
                name,
                TopicConfig::new(partitions)
                    .records_in_memory(cap as usize)
                    .overflow(overflow),
            );
            let expect = if m.live.contains_key(name) {
                Err(MErr::TopicExists)
            } else {
                m.topics.push(MTopic {
                    name,
                    parts: (0..partitions)
                        .map(|_| MPart::new(cap, !drop_oldest))
                        .collect(),
                    cap,
                    block: !drop_oldest,
                    deleted: false,
                });
                m.live.insert(name, m.topics.len() - 1);
                real.inc_of.insert(name, m.topics.len() - 1);
                Ok(())
            };
            check(&what, r.map(|_| ()), expect);
        }
        Op::Delete(t) => {
            let name = TOPICS[t];
            let expect = match m.live.remove(name) {
                Some(inc) => {
                    m.topics[inc].deleted = true;
                    Ok(())
                }
                None => Err(MErr::UnknownTopic),
            };
            check(&what, real.broker.delete_topic(name), expect);
        }
        Op::AddPartitions(t, total) => {
            let name = TOPICS[t];
            let expect = match m.live.get(name) {
                None => Err(MErr::UnknownTopic),
                Some(&inc) => {
                    let topic = &mut m.topics[inc];
                    let current = topic.parts.len() as u32;
                    if total <= current {
                        Err(MErr::Shrink(current, total))
                    } else {
                        let (cap, block) = (topic.cap, topic.block);
                        topic
                            .parts
                            .resize_with(total as usize, || MPart::new(cap, block));
                        Ok(())
                    }
                }
            };
            check(&what, real.broker.add_partitions(name, total), expect);
        }
        Op::Produce {
            t,
            partition,
            key,
            ts,
            count,
        } => {
            let name = TOPICS[t];
            for _ in 0..count {
                let value = m.next_value;
                m.next_value += 1;
                let mut record = Record::new(name, value);
                if let Some(p) = partition {
                    record = record.partition(p);
                }
                if let Some(k) = key {
                    record = record.key(k);
                }
                if let Some(ts) = ts {
                    record = record.timestamp(ts);
                }
                let r = real.producer.try_send(record).map_err(|e| e.into_error());
                let expect = match m.live.get(name) {
                    None => Err(MErr::UnknownTopic),
                    Some(&inc) => {
                        let topic = &mut m.topics[inc];
                        let n = topic.parts.len() as u32;
                        let chosen = match (partition, key, &r) {
                            (Some(p), _, _) => p,
                            (None, Some(k), _) => partition_for_key(&[k], n),
                            // Sticky: the model takes the producer's choice, checked in range.
                            (None, None, Ok(meta)) => meta.partition,
                            (None, None, Err(e)) => match e {
                                Error::Full { partition, .. } => *partition,
                                other => panic!("{what}: {other}"),
                            },
                        };
                        if chosen >= n {
                            Err(MErr::PartitionOutOfRange(chosen, n))
                        } else {
                            let ts = ts.unwrap_or(T0);
                            match topic.parts[chosen as usize].try_append(value, ts) {
                                Some(offset) => Ok((chosen, offset, ts)),
                                None => Err(MErr::Full),
                            }
                        }
                    }
                };
                check(
                    &what,
                    r.map(|meta| (meta.partition, meta.offset, meta.timestamp)),
                    expect,
                );
            }
        }
        Op::Open(c) => {
            if m.consumers[c].is_none() {
                let (group, reset) = SLOTS[c];
                let mut config = ConsumerConfig::new()
                    .auto_offset_reset(reset)
                    .max_poll_records(1 << 20);
                if let Some(g) = group {
                    config = config.group_id(g);
                    *m.groups.entry(g).or_insert(0) += 1;
                }
                real.consumers[c] = Some(real.broker.consumer(config).unwrap());
                m.consumers[c] = Some(MConsumer {
                    group,
                    reset,
                    assigned: Vec::new(),
                    next: 0,
                    skipped: HashMap::new(),
                });
            }
        }
        Op::Close(c) => {
            if let Some(cons) = real.consumers[c].take() {
                cons.close();
                let mc = m.consumers[c].take().unwrap();
                if let Some(g) = mc.group {
                    *m.groups.get_mut(g).unwrap() -= 1;
                }
            }
        }
        Op::Assign(c, ref tps) => {
            let Some(cons) = real.consumers[c].as_mut() else {
                return;
            };
            let list: Vec<_> = tps
                .iter()
                .map(|&(t, p)| TopicPartition::new(TOPICS[t], p))
                .collect();
            let r = cons.assign(&list);
            // The model: validate all, then assign.
            let mut resolved: Vec<(usize, u32)> = Vec::new();
            let mut err = None;
            for &(t, p) in tps {
                let name = TOPICS[t];
                match m.live.get(name) {
                    None => {
                        err = Some(MErr::UnknownTopic);
                        break;
                    }
                    Some(&inc) => {
                        let n = m.topics[inc].parts.len() as u32;
                        if p >= n {
                            err = Some(MErr::PartitionOutOfRange(p, n));
                            break;
                        }
                        if !resolved.contains(&(inc, p)) {
                            resolved.push((inc, p));
                        }
                    }
                }
            }
            let expect = match err {
                Some(e) => Err(e),
                None => {
                    let mc = m.consumers[c].as_mut().unwrap();
                    let mut old = std::mem::take(&mut mc.assigned);
                    for (inc, p) in resolved {
                        if let Some(i) = old.iter().position(|a| a.inc == inc && a.p == p) {
                            mc.assigned.push(old.swap_remove(i));
                            continue;
                        }
                        let name = m.topics[inc].name;
                        let part = &mut m.topics[inc].parts[p as usize];
                        let (pos, fresh) = match mc.group {
                            Some(g) => {
                                let committed = part.groups.get(g).and_then(|x| x.committed);
                                let pos = committed.or(Model::reset_target(mc.reset, part));
                                let start = pos.unwrap_or(part.start());
                                part.register(g, start);
                                (pos, committed.is_none())
                            }
                            None => (Model::reset_target(mc.reset, part), true),
                        };
                        // Starting `Earliest` on a Block topic: what the ring overwrote
                        // before is skipped, and counted.
                        let gone = part.start().min(pos.unwrap_or(u64::MAX));
                        if fresh && mc.reset == OffsetReset::Earliest && part.block && gone > 0 {
                            *mc.skipped.entry((name, p)).or_insert(0) += gone;
                        }
                        mc.assigned.push(MAssigned { inc, p, pos });
                    }
                    mc.next = 0;
                    Ok(())
                }
            };
            check(&what, r, expect);
        }
        Op::Poll(c) => {
            let Some(cons) = real.consumers[c].as_mut() else {
                return;
            };
            let r = cons.poll(Duration::ZERO).map(|recs| {
                recs.iter()
                    .map(|r| (real.inc_of[r.topic], r.partition, r.offset, r.value))
                    .collect::<Vec<_>>()
            });
            let expect = m.poll(c);
            // Per partition, in order (interleaving across partitions is not specified).
            let group = |v: Vec<(usize, u32, u64, u64)>| {
                let mut by: BTreeMap<(usize, u32), Vec<(u64, u64)>> = BTreeMap::new();
                for (inc, p, o, val) in v {
                    by.entry((inc, p)).or_default().push((o, val));
                }
                by
            };
            // Records of a deleted-and-recreated topic map by name to the newest incarnation;
            // the model never reads deleted topics (they fail), so this is unambiguous.
            check(&what, r.map(group), expect.map(group));
            let mc = m.consumers[c].as_ref().unwrap();
            let cons = real.consumers[c].as_ref().unwrap();
            for a in &mc.assigned {
                let tp = TopicPartition::new(m.topics[a.inc].name, a.p);
                let skipped = mc.skipped.get(&(m.topics[a.inc].name, a.p)).copied();
                assert_eq!(cons.metrics().skipped(&tp), skipped.unwrap_or(0), "{what}");
            }
        }
        Op::CommitSync(c) => {
            let Some(cons) = real.consumers[c].as_mut() else {
                return;
            };
            let r = cons.commit_sync();
            let mc = m.consumers[c].as_ref().unwrap();
            let expect = match mc.group {
                None => Err(MErr::NoGroupId),
                // As Kafka's OffsetCommit: every partition that can be committed is; the
                // first refusal is reported.
                Some(g) => {
                    let mut res = Ok(());
                    for a in &mc.assigned {
                        if let Some(pos) = a.pos {
                            let topic = &mut m.topics[a.inc];
                            if topic.deleted {
                                if res.is_ok() {
                                    res = Err(MErr::UnknownTopic);
                                }
                                continue;
                            }
                            if let Err((s, e)) = topic.parts[a.p as usize].commit(g, pos) {
                                if res.is_ok() {
                                    res = Err(MErr::OffsetOutOfRange(pos, s, e));
                                }
                            }
                        }
                    }
                    res
                }
            };
            check(&what, r, expect);
        }
        Op::CommitOffset(c, t, p, frac) => {
            let Some(cons) = real.consumers[c].as_mut() else {
                return;
            };
            let name = TOPICS[t];
            let mc = m.consumers[c].as_ref().unwrap();
            let end = m
                .live
                .get(name)
                .and_then(|&inc| m.topics[inc].parts.get(p as usize))
                .map_or(0, |part| part.end());
            let offset = u64::from(frac) * end / 255 + u64::from(frac.saturating_sub(255));
            let r = cons.commit_offsets(&[(TopicPartition::new(name, p), offset)]);
            let expect = match (mc.group, m.live.get(name)) {
                (None, _) => Err(MErr::NoGroupId),
                (_, None) => Err(MErr::UnknownTopic),
                (Some(g), Some(&inc)) => {
                    let n = m.topics[inc].parts.len() as u32;
                    if p >= n {
                        Err(MErr::PartitionOutOfRange(p, n))
                    } else {
                        m.topics[inc].parts[p as usize]
                            .commit(g, offset)
                            .map_err(|(s, e)| MErr::OffsetOutOfRange(offset, s, e))
                    }
                }
            };
            check(&what, r, expect);
            if let (Some(g), Some(&inc)) = (mc.group, m.live.get(name)) {
                if let Some(part) = m.topics[inc].parts.get(p as usize) {
                    let committed = part.groups.get(g).and_then(|x| x.committed);
                    let cons = real.consumers[c].as_ref().unwrap();
                    assert_eq!(
                        cons.committed(&TopicPartition::new(name, p)).unwrap(),
                        committed,
                        "{what}"
                    );
                }
            }
        }
        Op::Seek(c, i, offset) => {
            let Some(cons) = real.consumers[c].as_mut() else {
                return;
            };
            let mc = m.consumers[c].as_mut().unwrap();
            let Some(a) = mc.assigned.get_mut(i) else {
                let tp = TopicPartition::new("unassigned", 0);
                check(&what, cons.seek(&tp, offset), Err(MErr::NotAssigned));
                return;
            };
            let tp = TopicPartition::new(m.topics[a.inc].name, a.p);
            a.pos = Some(offset);
            check(&what, cons.seek(&tp, offset), Ok(()));
            assert_eq!(cons.position(&tp).unwrap(), offset);
        }
        Op::SeekToBeginning(c) | Op::SeekToEnd(c) => {
            let Some(cons) = real.consumers[c].as_mut() else {
                return;
            };
            let to_end = matches!(op, Op::SeekToEnd(_));
            let r = if to_end {
                cons.seek_to_end(&[])
            } else {
                cons.seek_to_beginning(&[])
            };
            check(&what, r, Ok(()));
            let mc = m.consumers[c].as_mut().unwrap();
            for a in &mut mc.assigned {
                let part = &m.topics[a.inc].parts[a.p as usize];
                a.pos = Some(if to_end { part.end() } else { part.start() });
                let tp = TopicPartition::new(m.topics[a.inc].name, a.p);
                assert_eq!(cons.position(&tp).unwrap(), a.pos.unwrap(), "{what}");
            }
        }
        Op::DeleteGroup(g) => {
            let name = GROUPS[g];
            let expect = match m.groups.get(name) {
                None => Err(MErr::UnknownGroup),
                Some(&open) if open > 0 => Err(MErr::GroupNotEmpty(open)),
                Some(_) => {
                    m.groups.remove(name);
                    for &inc in m.live.values() {
                        for part in &mut m.topics[inc].parts {
                            part.groups.remove(name);
                        }
                    }
                    Ok(())
                }
            };
            check(&what, real.broker.delete_group(name), expect);
        }
        Op::OffsetsForTimes(t, p, ts) => {
            let name = TOPICS[t];
            let probe = real
                .broker
                .consumer::<u8, u64>(ConsumerConfig::new())
                .unwrap();
            let tp = TopicPartition::new(name, p);
            let r = probe
                .offsets_for_times(&[(tp.clone(), ts)])
                .map(|found| found[&tp].map(|x| (x.offset, x.timestamp)));
            let expect = match m.live.get(name) {
                None => Err(MErr::UnknownTopic),
                Some(&inc) => match m.topics[inc].parts.get(p as usize) {
                    None => Err(MErr::PartitionOutOfRange(
                        p,
                        m.topics[inc].parts.len() as u32,
                    )),
                    Some(part) => Ok((part.start()..part.end())
                        .map(|o| (o, part.records[o as usize].1))
                        .find(|&(_, t)| t >= ts)),
                },
            };
            check(&what, r, expect);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(debug_assertions) { 500 } else { 2000 },
        ..ProptestConfig::default()
    })]

    #[test]
    fn topics_match_the_model(
        drop0 in any::<bool>(),
        drop1 in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        // Both topics exist from the start (later ops delete and recreate them).
        let mut all = vec![
            Op::Create { t: 0, partitions: 2, cap_log2: 2, drop_oldest: drop0 },
            Op::Create { t: 1, partitions: 2, cap_log2: 1, drop_oldest: drop1 },
        ];
        all.extend(ops);
        run(all);
    }
}
