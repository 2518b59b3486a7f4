//! Model-based test of the group coordinator: random joins, closes, polls, commits and
//! clock advances against a reference model of members, generations and ownership (eager
//! protocol, range assignor, one topic). After every step the real group must agree with
//! the model on the generation, the state, the member ids, every consumer's generation and
//! partitions, and every commit's outcome (accepted, or refused with both generations);
//! and no partition may be held by two consumers that are both still members.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use logbus::broker::{Broker, TopicConfig, TopicPartition};
use logbus::consumer::{Consumer, ConsumerConfig};
use logbus::group::{GroupState, MemberSubscription, PartitionAssignor, RangeAssignor};
use logbus::{Error, ManualClock};
use proptest::prelude::*;

const PARTITIONS: u32 = 5;
const MAX_POLL_MS: u64 = 1_000;

#[derive(Debug, Clone)]
enum Op {
    Join(u8),
    Close(usize),
    Poll(usize),
    Commit(usize),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0u8..4).prop_map(Op::Join),
        1 => (0usize..8).prop_map(Op::Close),
        6 => (0usize..8).prop_map(Op::Poll),
        2 => (0usize..8).prop_map(Op::Commit),
        2 => prop_oneof![
            Just(MAX_POLL_MS),
            Just(MAX_POLL_MS + 1),
            Just(MAX_POLL_MS / 2),
            0..=MAX_POLL_MS * 3 / 2
        ]
        .prop_map(Op::Advance),
    ]
}

/// One member as the coordinator sees it.
#[derive(Debug, Clone)]
struct MMember {
    last_seen: u64,
    joined: bool,
    synced: bool,
    target: Vec<TopicPartition>,
    target_generation: i32,
}

/// One consumer as its owner sees it.
#[derive(Debug, Clone)]
struct MConsumer {
    id: String,
    client: String,
    generation: i32,
    held: Vec<TopicPartition>,
}

#[derive(Debug, Default)]
struct Model {
    now: u64,
    generation: i32,
    preparing: bool,
    seq: u64,
    members: BTreeMap<String, MMember>,
    consumers: Vec<Option<MConsumer>>,
}

impl Model {
    fn expire(&mut self) {
        let now = self.now;
        let before = self.members.len();
        self.members
            .retain(|_, m| now.saturating_sub(m.last_seen) <= MAX_POLL_MS);
        if self.members.len() != before {
            self.start();
            self.try_complete();
        }
    }

    fn start(&mut self) {
        if !self.preparing {
            self.preparing = true;
            for m in self.members.values_mut() {
                m.joined = false;
            }
        }
    }

    fn try_complete(&mut self) {
        if !self.preparing || self.members.values().any(|m| !m.joined || !m.synced) {
            return;
        }
        self.preparing = false;
        self.generation += 1;
        let subs: BTreeMap<String, MemberSubscription> = self
            .members
            .keys()
            .map(|id| (id.clone(), MemberSubscription::new(["t"])))
            .collect();
        let result = if subs.is_empty() {
            BTreeMap::new()
        } else {
            RangeAssignor.assign(&BTreeMap::from([("t".to_string(), PARTITIONS)]), &subs)
        };
        for (id, m) in self.members.iter_mut() {
            m.target = result.get(id).cloned().unwrap_or_default();
            m.target_generation = self.generation;
            m.synced = false;
            m.joined = false;
        }
    }

    fn join_new(&mut self, client: &str) -> String {
        self.expire();
        let id = format!("{client}-{:06}", self.seq);
        self.seq += 1;
        self.start();
        self.members.insert(
            id.clone(),
            MMember {
                last_seen: self.now,
                joined: true,
                synced: true,
                target: Vec::new(),
                target_generation: 0,
            },
        );
        self.try_complete();
        id
    }

    fn poll(&mut self, k: usize) {
        for _ in 0..8 {
            self.expire();
            let Some(mut c) = self.consumers[k].clone() else {
                return;
            };
            let now = self.now;
            let Some(m) = self.members.get_mut(&c.id) else {
                // Fenced: lost, then a new member.
                c.held.clear();
                c.generation = 0;
                c.id = self.join_new(&c.client);
                self.consumers[k] = Some(c);
                continue;
            };
            m.last_seen = now;
            if !m.synced {
                m.synced = true;
                c.generation = m.target_generation;
                c.held = m.target.clone();
                self.consumers[k] = Some(c);
                self.try_complete();
            } else if self.preparing && !m.joined {
                m.joined = true;
                c.held.clear();
                self.consumers[k] = Some(c);
                self.try_complete();
            } else {
                return;
            }
        }
    }

    /// `Ok` or `(member generation, group generation)`.
    fn commit(&mut self, k: usize) -> Result<(), (i32, i32)> {
        self.expire();
        let c = self.consumers[k].as_ref().expect("open");
        if self.members.contains_key(&c.id) && c.generation == self.generation {
            Ok(())
        } else {
            Err((c.generation, self.generation))
        }
    }

    fn close(&mut self, k: usize) {
        if let Some(c) = self.consumers[k].take() {
            if self.members.remove(&c.id).is_some() {
                self.start();
                self.try_complete();
            }
        }
    }

    fn state(&self) -> GroupState {
        if self.members.is_empty() {
            GroupState::Empty
        } else if self.preparing {
            GroupState::PreparingRebalance
        } else if self.members.values().any(|m| !m.synced) {
            GroupState::CompletingRebalance
        } else {
            GroupState::Stable
        }
    }
}

fn sorted(mut v: Vec<TopicPartition>) -> Vec<TopicPartition> {
    v.sort();
    v
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let b = Broker::builder().clock(clock.clone()).build().unwrap();
    b.create_topic::<(), u64>("t", TopicConfig::new(PARTITIONS))
        .unwrap();
    // Makes the group known from the start (it never subscribes).
    let _known = b
        .consumer::<(), u64>(ConsumerConfig::new().group_id("g"))
        .unwrap();
    let mut real: Vec<Option<Consumer<(), u64>>> = Vec::new();
    let mut model = Model::default();
    for op in ops {
        match op {
            Op::Join(client) => {
                let client = format!("c{client}");
                let mut c = b
                    .consumer::<(), u64>(
                        ConsumerConfig::new()
                            .group_id("g")
                            .client_id(client.as_str())
                            .enable_auto_commit(false)
                            .max_poll_interval(Duration::from_millis(MAX_POLL_MS)),
                    )
                    .unwrap();
                c.subscribe(&["t"]).unwrap();
                real.push(Some(c));
                let id = model.join_new(&client);
                model.consumers.push(Some(MConsumer {
                    id,
                    client,
                    generation: 0,
                    held: Vec::new(),
                }));
            }
            Op::Close(i) => {
                if let Some(k) = pick(&real, i) {
                    real[k] = None;
                    model.close(k);
                }
            }
            Op::Poll(i) => {
                if let Some(k) = pick(&real, i) {
                    real[k].as_mut().unwrap().poll(Duration::ZERO).unwrap();
                    model.poll(k);
                }
            }
            Op::Commit(i) => {
                if let Some(k) = pick(&real, i) {
                    let got = real[k].as_mut().unwrap().commit_sync();
                    match (model.commit(k), got) {
                        (Ok(()), Ok(())) => {}
                        (
                            Err((mg, gg)),
                            Err(Error::StaleGeneration {
                                member_generation,
                                group_generation,
                                ..
                            }),
                        ) => prop_assert_eq!((mg, gg), (member_generation, group_generation)),
                        (want, got) => {
                            prop_assert!(false, "commit: model {:?}, real {:?}", want, got)
                        }
                    }
                }
            }
            Op::Advance(ms) => {
                clock.advance(Duration::from_millis(ms));
                model.now += ms;
            }
        }
        // Agree on everything visible.
        let d = b.describe_group("g").unwrap();
        // describe_group evicts too (as every group operation does).
        model.expire();
        prop_assert_eq!(d.generation, model.generation);
        prop_assert_eq!(d.state, model.state());
        let ids: BTreeSet<String> = d.members.iter().map(|m| m.member_id.clone()).collect();
        prop_assert_eq!(
            &ids,
            &model.members.keys().cloned().collect::<BTreeSet<_>>()
        );
        let mut held_by_members: BTreeMap<TopicPartition, String> = BTreeMap::new();
        for (k, c) in real.iter().enumerate() {
            let (Some(c), Some(m)) = (c, &model.consumers[k]) else {
                prop_assert!(real[k].is_none() && model.consumers[k].is_none());
                continue;
            };
            prop_assert_eq!(c.member_id(), Some(m.id.as_str()));
            prop_assert_eq!(c.generation(), Some(m.generation));
            prop_assert_eq!(sorted(c.assignment()), sorted(m.held.clone()));
            if model.members.contains_key(&m.id) {
                for tp in c.assignment() {
                    let other = held_by_members.insert(tp.clone(), m.id.clone());
                    prop_assert!(other.is_none(), "{:?} held by {:?} and {}", tp, other, m.id);
                }
            }
        }
    }
    Ok(())
}

/// The `i`-th open consumer (modulo their count), if any.
fn pick<T>(v: &[Option<T>], i: usize) -> Option<usize> {
    let open: Vec<usize> = (0..v.len()).filter(|k| v[*k].is_some()).collect();
    (!open.is_empty()).then(|| open[i % open.len()])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn coordinator_matches_the_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops)?;
    }
}
