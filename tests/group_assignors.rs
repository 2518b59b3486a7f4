//! Kafka's own assignor tests, ported as data: `RangeAssignorTest`, `RoundRobinAssignorTest`,
//! `AbstractStickyAssignorTest` (run for both sticky assignors, as in Kafka),
//! `StickyAssignorTest` and `CooperativeStickyAssignorTest`. Test names are Kafka's method
//! names in snake case. Range and round robin: Kafka's exact assignments. Sticky: Kafka's
//! exact results where it asserts them, and its checks (`verifyValidityAndBalance`,
//! `isFullyBalanced`, stickiness) everywhere. Then a property test over random inputs.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use logbus::group::{
    CooperativeStickyAssignor, PartitionAssignor, RangeAssignor, RebalanceProtocol,
    RoundRobinAssignor, StickyAssignor, Subscription, TopicPartition,
};

type Assignment = BTreeMap<String, Vec<TopicPartition>>;
type Subs = BTreeMap<String, Subscription>;
type Counts = BTreeMap<String, u32>;

/// Kafka's `generationId` in the sticky tests.
const GENERATION: i32 = 1;

fn tp(topic: &str, partition: u32) -> TopicPartition {
    TopicPartition::new(topic, partition)
}

fn counts(list: &[(&str, u32)]) -> Counts {
    list.iter().map(|&(t, n)| (t.to_string(), n)).collect()
}

/// Kafka's `subscription(topics, i)`: no owned partitions, default generation.
fn sub(topics: &[&str]) -> Subscription {
    Subscription::new(topics.iter().copied())
}

/// Kafka's `buildSubscriptionV2Above(topics, partitions, generation, i)`.
fn owning(topics: &[&str], owned: &[TopicPartition], generation: i32) -> Subscription {
    sub(topics)
        .with_owned_partitions(owned.iter().cloned())
        .with_generation(generation)
}

fn topics_of(s: &Subscription) -> Vec<&str> {
    s.topics.iter().map(String::as_str).collect()
}

/// Parses Kafka's test notation "t1-0, t1-3" into partitions.
fn parse(list: &str) -> Vec<TopicPartition> {
    list.split(", ")
        .filter(|s| !s.is_empty())
        .map(|s| {
            let (t, p) = s.rsplit_once('-').unwrap();
            tp(t, p.parse().unwrap())
        })
        .collect()
}

fn set(list: &[TopicPartition]) -> HashSet<TopicPartition> {
    list.iter().cloned().collect()
}

/// Kafka's `getCanonicalName`: prefix + `i` zero-padded to the digits of `max`.
fn name(prefix: &str, i: usize, max: usize) -> String {
    format!("{prefix}{i:0width$}", width = max.to_string().len())
}

/// Feeds an assignment back as every member's owned partitions, at `generation`.
fn with_owned(subs: &Subs, assignment: &Assignment, generation: i32) -> Subs {
    subs.iter()
        .map(|(m, s)| {
            let owned = assignment.get(m).cloned().unwrap_or_default();
            (m.clone(), owning(&topics_of(s), &owned, generation))
        })
        .collect()
}

fn assign(assignor: &dyn PartitionAssignor, counts: &Counts, subs: &Subs) -> Assignment {
    let assignment = assignor.assign(counts, subs);
    assert_eq!(
        assignment.keys().collect::<Vec<_>>(),
        subs.keys().collect::<Vec<_>>(),
        "every member, and only members, in the assignment"
    );
    assignment
}

/// Kafka's `isFullyBalanced`: counts within one of each other.
fn is_fully_balanced(assignment: &Assignment) -> bool {
    let sizes = assignment.values().map(Vec::len);
    let (min, max) = (sizes.clone().min().unwrap_or(0), sizes.max().unwrap_or(0));
    max - min <= 1
}

/// Kafka's `verifyValidityAndBalance` (AbstractStickyAssignorTest), plus completeness:
/// every partition of a subscribed topic is assigned.
fn verify_validity_and_balance(subs: &Subs, assignment: &Assignment, counts: &Counts) {
    let members: Vec<&String> = assignment.keys().collect();
    for (i, m) in members.iter().enumerate() {
        let partitions = &assignment[*m];
        for p in partitions {
            assert!(
                subs[*m].topics.contains(&p.topic),
                "{p} is assigned to {m}, which does not subscribe to it\n{assignment:?}"
            );
        }
        for other in &members[i + 1..] {
            let others = &assignment[*other];
            let common: Vec<_> = set(partitions)
                .intersection(&set(others))
                .cloned()
                .collect();
            assert!(common.is_empty(), "{m} and {other} share {common:?}");
            if partitions.len().abs_diff(others.len()) <= 1 {
                continue;
            }
            let (more, less) = if partitions.len() > others.len() {
                (partitions, others)
            } else {
                (others, partitions)
            };
            let less_topics: HashSet<&str> = less.iter().map(|p| p.topic.as_str()).collect();
            for p in more {
                assert!(
                    !less_topics.contains(p.topic.as_str()),
                    "some partitions of {} can move from {m}/{other} for a better balance\n{assignment:?}",
                    p.topic
                );
            }
        }
    }
    assert_complete(subs, assignment, counts);
}

/// Every partition of a subscribed topic is assigned exactly once.
fn assert_complete(subs: &Subs, assignment: &Assignment, counts: &Counts) {
    let subscribed: BTreeSet<&String> = subs.values().flat_map(|s| s.topics.iter()).collect();
    let expected: usize = subscribed
        .iter()
        .map(|t| counts.get(*t).copied().unwrap_or(0) as usize)
        .sum();
    let all: Vec<&TopicPartition> = assignment.values().flatten().collect();
    let distinct: HashSet<&TopicPartition> = all.iter().copied().collect();
    assert_eq!(
        all.len(),
        distinct.len(),
        "a partition assigned twice: {assignment:?}"
    );
    assert_eq!(
        all.len(),
        expected,
        "not every partition assigned: {assignment:?}"
    );
    for p in all {
        assert!(p.partition < counts[&p.topic], "{p} does not exist");
    }
}

/// Kafka's `isSticky`, seen from outside: between the partitions each member reported owning
/// and its new ones, no topic has partitions moving both ways between two members.
fn assert_sticky(before: &Subs, assignment: &Assignment) {
    let mut previous: HashMap<&TopicPartition, &str> = HashMap::new();
    for (m, s) in before {
        for p in &s.owned_partitions {
            previous.insert(p, m);
        }
    }
    let mut moves: HashSet<(&str, &str, &str)> = HashSet::new();
    for (m, partitions) in assignment {
        for p in partitions {
            if let Some(&from) = previous.get(p) {
                if from != m {
                    moves.insert((p.topic.as_str(), from, m.as_str()));
                }
            }
        }
    }
    for &(t, from, to) in &moves {
        assert!(
            !moves.contains(&(t, to, from)),
            "{t} moved both ways between {from} and {to}"
        );
    }
}

/// CooperativeStickyAssignorTest's `verifyValidityAndBalance`: no partition is given to a new
/// owner in the rebalance that revokes it from its old one; while partitions are revoked,
/// follow-up rebalances run (at most 4); the final assignment is valid and balanced.
fn verify_cooperative(subs: &Subs, assignment: &Assignment, counts: &Counts) -> Assignment {
    let assignor = CooperativeStickyAssignor;
    let mut subs = subs.clone();
    let mut assignment = assignment.clone();
    let mut rebalances = 0;
    loop {
        let mut added = HashSet::new();
        let mut revoked = HashSet::new();
        for (m, partitions) in &assignment {
            let owned = set(&subs[m].owned_partitions);
            let now = set(partitions);
            added.extend(now.difference(&owned).cloned());
            revoked.extend(owned.difference(&now).cloned());
        }
        let both: Vec<_> = added.intersection(&revoked).collect();
        assert!(
            both.is_empty(),
            "{both:?} assigned in the rebalance that revokes them"
        );
        if revoked.is_empty() {
            break;
        }
        subs = with_owned(&subs, &assignment, GENERATION);
        assignment = assign(&assignor, counts, &subs);
        rebalances += 1;
        assert!(
            rebalances <= 4,
            "no stable assignment after 4 follow-up rebalances"
        );
    }
    verify_validity_and_balance(&subs, &assignment, counts);
    assignment
}

/// Runs a sticky test case on both sticky assignors, as Kafka runs AbstractStickyAssignorTest
/// for both subclasses. Returns the eager assignor's result (the one Kafka's exact
/// assertions are about). `transferring`: Kafka's `partitionsTransferringOwnership` where the
/// test asserts it; the cooperative result is the eager one without those.
fn both(
    counts: &Counts,
    subs: &Subs,
    transferring: Option<&[(TopicPartition, &str)]>,
) -> Assignment {
    let eager = assign(&StickyAssignor, counts, subs);
    verify_validity_and_balance(subs, &eager, counts);
    let cooperative = assign(&CooperativeStickyAssignor, counts, subs);
    if let Some(transferring) = transferring {
        let mut expected = eager.clone();
        for (p, m) in transferring {
            let list = expected.get_mut(*m).unwrap();
            let i = list
                .iter()
                .position(|x| x == p)
                .expect("transferring partition assigned");
            list.remove(i);
        }
        assert_eq!(
            cooperative, expected,
            "cooperative = eager minus transferring"
        );
    }
    verify_cooperative(subs, &cooperative, counts);
    eager
}

fn protocol_names() -> Vec<(&'static str, bool)> {
    let assignors: [&dyn PartitionAssignor; 4] = [
        &RangeAssignor,
        &RoundRobinAssignor,
        &StickyAssignor,
        &CooperativeStickyAssignor,
    ];
    let mut names: Vec<(&'static str, bool)> = Vec::new();
    for a in assignors {
        let name: &'static str = match a.name() {
            "range" => "range",
            "roundrobin" => "roundrobin",
            "sticky" => "sticky",
            "cooperative-sticky" => "cooperative-sticky",
            other => panic!("unexpected name {other}"),
        };
        names.push((name, a.supports_cooperative()));
    }
    names
}

#[test]
fn names_and_protocols_are_kafkas() {
    assert_eq!(
        protocol_names(),
        [
            ("range", false),
            ("roundrobin", false),
            ("sticky", false),
            ("cooperative-sticky", true)
        ]
    );
    assert_eq!(
        CooperativeStickyAssignor.supported_protocols(),
        [RebalanceProtocol::Cooperative, RebalanceProtocol::Eager]
    );
    assert_eq!(
        StickyAssignor.supported_protocols(),
        [RebalanceProtocol::Eager]
    );
}

#[test]
fn topic_partition_orders_and_prints_like_kafka() {
    assert_eq!(tp("orders", 7).to_string(), "orders-7");
    assert!(tp("a", 10) > tp("a", 9));
    assert!(tp("a", 10) < tp("b", 0));
    assert_eq!(parse("my-topic-3"), [tp("my-topic", 3)]);
}

/// RangeAssignorTest and RoundRobinAssignorTest cases: (name, partitions per topic,
/// members as (id, topics, group instance id), expected range, expected round robin).
/// Members' lists are compared exactly (order included).
mod exact_cases {
    use super::*;

    pub struct Case {
        pub counts: &'static [(&'static str, u32)],
        pub members: &'static [(&'static str, &'static [&'static str], Option<&'static str>)],
        pub range: &'static [(&'static str, &'static str)],
        pub round_robin: &'static [(&'static str, &'static str)],
    }

    pub fn subs(case: &Case) -> Subs {
        case.members
            .iter()
            .map(|&(m, topics, instance)| {
                let s = sub(topics);
                let s = match instance {
                    Some(id) => s.with_group_instance_id(id),
                    None => s,
                };
                (m.to_string(), s)
            })
            .collect()
    }

    pub fn expected(list: &[(&str, &str)]) -> Assignment {
        list.iter()
            .map(|&(m, ps)| (m.to_string(), parse(ps)))
            .collect()
    }

    pub fn check(case: &Case) {
        let counts = counts(case.counts);
        let subs = subs(case);
        assert_eq!(
            assign(&RangeAssignor, &counts, &subs),
            expected(case.range),
            "range"
        );
        assert_eq!(
            assign(&RoundRobinAssignor, &counts, &subs),
            expected(case.round_robin),
            "round robin"
        );
    }
}

macro_rules! exact_case {
    ($name:ident, $case:expr) => {
        #[test]
        fn $name() {
            exact_cases::check(&$case);
        }
    };
}

const T12: &[&str] = &["topic1", "topic2"];

exact_case!(
    test_one_consumer_no_topic,
    exact_cases::Case {
        counts: &[],
        members: &[("consumer", &[], None)],
        range: &[("consumer", "")],
        round_robin: &[("consumer", "")],
    }
);

exact_case!(
    test_one_consumer_nonexistent_topic,
    exact_cases::Case {
        counts: &[],
        members: &[("consumer", &["topic"], None)],
        range: &[("consumer", "")],
        round_robin: &[("consumer", "")],
    }
);

exact_case!(
    test_one_consumer_one_topic,
    exact_cases::Case {
        counts: &[("topic", 3)],
        members: &[("consumer", &["topic"], None)],
        range: &[("consumer", "topic-0, topic-1, topic-2")],
        round_robin: &[("consumer", "topic-0, topic-1, topic-2")],
    }
);

exact_case!(
    test_only_assigns_partitions_from_subscribed_topics,
    exact_cases::Case {
        counts: &[("topic", 3), ("other", 3)],
        members: &[("consumer", &["topic"], None)],
        range: &[("consumer", "topic-0, topic-1, topic-2")],
        round_robin: &[("consumer", "topic-0, topic-1, topic-2")],
    }
);

exact_case!(
    test_one_consumer_multiple_topics,
    exact_cases::Case {
        counts: &[("topic1", 1), ("topic2", 2)],
        members: &[("consumer", T12, None)],
        range: &[("consumer", "topic1-0, topic2-0, topic2-1")],
        round_robin: &[("consumer", "topic1-0, topic2-0, topic2-1")],
    }
);

exact_case!(
    test_two_consumers_one_topic_one_partition,
    exact_cases::Case {
        counts: &[("topic", 1)],
        members: &[
            ("consumer1", &["topic"], None),
            ("consumer2", &["topic"], None)
        ],
        range: &[("consumer1", "topic-0"), ("consumer2", "")],
        round_robin: &[("consumer1", "topic-0"), ("consumer2", "")],
    }
);

exact_case!(
    test_two_consumers_one_topic_two_partitions,
    exact_cases::Case {
        counts: &[("topic", 2)],
        members: &[
            ("consumer1", &["topic"], None),
            ("consumer2", &["topic"], None)
        ],
        range: &[("consumer1", "topic-0"), ("consumer2", "topic-1")],
        round_robin: &[("consumer1", "topic-0"), ("consumer2", "topic-1")],
    }
);

exact_case!(
    test_multiple_consumers_mixed_topics,
    exact_cases::Case {
        counts: &[("topic1", 3), ("topic2", 2)],
        members: &[
            ("consumer1", &["topic1"], None),
            ("consumer2", T12, None),
            ("consumer3", &["topic1"], None)
        ],
        range: &[
            ("consumer1", "topic1-0"),
            ("consumer2", "topic1-1, topic2-0, topic2-1"),
            ("consumer3", "topic1-2")
        ],
        round_robin: &[
            ("consumer1", "topic1-0"),
            ("consumer2", "topic1-1, topic2-0, topic2-1"),
            ("consumer3", "topic1-2")
        ],
    }
);

exact_case!(
    test_two_consumers_two_topics_six_partitions,
    exact_cases::Case {
        counts: &[("topic1", 3), ("topic2", 3)],
        members: &[("consumer1", T12, None), ("consumer2", T12, None)],
        range: &[
            ("consumer1", "topic1-0, topic1-1, topic2-0, topic2-1"),
            ("consumer2", "topic1-2, topic2-2")
        ],
        round_robin: &[
            ("consumer1", "topic1-0, topic1-2, topic2-1"),
            ("consumer2", "topic1-1, topic2-0, topic2-2")
        ],
    }
);

// Although consumer-a sorts before consumer-b, static members compare by instance id.
exact_case!(
    test_two_static_consumers_two_topics_six_partitions,
    exact_cases::Case {
        counts: &[("topic1", 3), ("topic2", 3)],
        members: &[
            ("consumer-b", T12, Some("instance1")),
            ("consumer-a", T12, Some("instance2"))
        ],
        range: &[
            ("consumer-b", "topic1-0, topic1-1, topic2-0, topic2-1"),
            ("consumer-a", "topic1-2, topic2-2")
        ],
        round_robin: &[
            ("consumer-b", "topic1-0, topic1-2, topic2-1"),
            ("consumer-a", "topic1-1, topic2-0, topic2-2")
        ],
    }
);

// A static member sorts before a dynamic one whatever their member ids.
exact_case!(
    test_one_static_consumer_and_one_dynamic_consumer_two_topics_six_partitions,
    exact_cases::Case {
        counts: &[("topic1", 3), ("topic2", 3)],
        members: &[
            ("consumer-b", T12, Some("instance1")),
            ("consumer-a", T12, None)
        ],
        range: &[
            ("consumer-b", "topic1-0, topic1-1, topic2-0, topic2-1"),
            ("consumer-a", "topic1-2, topic2-2")
        ],
        round_robin: &[
            ("consumer-b", "topic1-0, topic1-2, topic2-1"),
            ("consumer-a", "topic1-1, topic2-0, topic2-2")
        ],
    }
);

// The examples in the Javadoc of RangeAssignor and RoundRobinAssignor.
exact_case!(
    kafka_javadoc_examples,
    exact_cases::Case {
        counts: &[("t0", 3), ("t1", 3)],
        members: &[("C0", &["t0", "t1"], None), ("C1", &["t0", "t1"], None)],
        range: &[("C0", "t0-0, t0-1, t1-0, t1-1"), ("C1", "t0-2, t1-2")],
        round_robin: &[("C0", "t0-0, t0-2, t1-1"), ("C1", "t0-1, t1-0, t1-2")],
    }
);

exact_case!(
    kafka_round_robin_javadoc_unequal_subscriptions,
    exact_cases::Case {
        counts: &[("t0", 1), ("t1", 2), ("t2", 3)],
        members: &[
            ("C0", &["t0"], None),
            ("C1", &["t0", "t1"], None),
            ("C2", &["t0", "t1", "t2"], None)
        ],
        range: &[
            ("C0", "t0-0"),
            ("C1", "t1-0"),
            ("C2", "t1-1, t2-0, t2-1, t2-2")
        ],
        round_robin: &[
            ("C0", "t0-0"),
            ("C1", "t1-0"),
            ("C2", "t1-1, t2-0, t2-1, t2-2")
        ],
    }
);

fn static_members(
    counts: &Counts,
    subs: &Subs,
    assignor: &dyn PartitionAssignor,
) -> BTreeMap<String, Vec<TopicPartition>> {
    let by_member = assign(assignor, counts, subs);
    subs.iter()
        .filter_map(|(m, s)| {
            s.group_instance_id
                .clone()
                .map(|id| (id, by_member[m].clone()))
        })
        .collect()
}

fn three_static_and(dynamic: Option<&str>) -> Subs {
    let mut subs: Subs = (1..=3)
        .map(|i| {
            (
                format!("consumer{i}"),
                sub(T12).with_group_instance_id(format!("instance{i}")),
            )
        })
        .collect();
    if let Some(d) = dynamic {
        subs.insert(d.to_string(), sub(T12));
    }
    subs
}

#[test]
fn test_static_member_range_assignment_persistent() {
    let counts = counts(&[("topic1", 5), ("topic2", 4)]);
    let mut expected = exact_cases::expected(&[
        ("consumer1", "topic1-0, topic1-1, topic2-0"),
        ("consumer2", "topic1-2, topic2-1"),
        ("consumer3", "topic1-3, topic2-2"),
        ("consumer4", "topic1-4, topic2-3"),
    ]);
    assert_eq!(
        assign(
            &RangeAssignor,
            &counts,
            &three_static_and(Some("consumer4"))
        ),
        expected
    );
    // The dynamic member is replaced by another.
    let moved = expected.remove("consumer4").unwrap();
    expected.insert("consumer5".into(), moved);
    assert_eq!(
        assign(
            &RangeAssignor,
            &counts,
            &three_static_and(Some("consumer5"))
        ),
        expected
    );
}

#[test]
fn test_static_member_round_robin_assignment_persistent() {
    let counts = counts(&[("topic1", 3), ("topic2", 3)]);
    let mut expected = exact_cases::expected(&[
        ("consumer1", "topic1-0, topic2-1"),
        ("consumer2", "topic1-1, topic2-2"),
        ("consumer3", "topic1-2"),
        ("consumer4", "topic2-0"),
    ]);
    let got = assign(
        &RoundRobinAssignor,
        &counts,
        &three_static_and(Some("consumer4")),
    );
    assert_eq!(got, expected);
    let moved = expected.remove("consumer4").unwrap();
    expected.insert("consumer5".into(), moved);
    let got = assign(
        &RoundRobinAssignor,
        &counts,
        &three_static_and(Some("consumer5")),
    );
    assert_eq!(got, expected);
}

/// Static members keep their assignment when their member ids change.
fn check_persistent_after_member_id_changes(
    assignor: &dyn PartitionAssignor,
    expected: &[(&str, &str)],
) {
    let counts = counts(&[("topic1", 5), ("topic2", 5)]);
    let mut subs = three_static_and(None);
    let by_instance = static_members(&counts, &subs, assignor);
    assert_eq!(by_instance, exact_cases::expected(expected));
    let s3 = subs.remove("consumer3").unwrap();
    subs.insert("consumer4".into(), s3);
    let s2 = subs.remove("consumer2").unwrap();
    subs.insert("consumer5".into(), s2);
    assert_eq!(static_members(&counts, &subs, assignor), by_instance);
}

#[test]
fn test_static_member_range_assignment_persistent_after_member_id_changes() {
    check_persistent_after_member_id_changes(
        &RangeAssignor,
        &[
            ("instance1", "topic1-0, topic1-1, topic2-0, topic2-1"),
            ("instance2", "topic1-2, topic1-3, topic2-2, topic2-3"),
            ("instance3", "topic1-4, topic2-4"),
        ],
    );
}

#[test]
fn test_static_member_round_robin_assignment_persistent_after_member_id_changes() {
    check_persistent_after_member_id_changes(
        &RoundRobinAssignor,
        &[
            ("instance1", "topic1-0, topic1-3, topic2-1, topic2-4"),
            ("instance2", "topic1-1, topic1-4, topic2-2"),
            ("instance3", "topic1-2, topic2-0, topic2-3"),
        ],
    );
}

/// AbstractPartitionAssignorTest's member ordering cases, seen through round robin (which
/// deals partition `i` to the `i`-th member in Kafka's member order).
#[test]
fn test_member_info_sorting() {
    let order = |members: &[(&str, Option<&str>)]| -> Vec<String> {
        let subs: Subs = members
            .iter()
            .map(|&(m, id)| {
                let s = sub(&["t"]);
                (
                    m.to_string(),
                    if let Some(id) = id {
                        s.with_group_instance_id(id)
                    } else {
                        s
                    },
                )
            })
            .collect();
        let a = assign(
            &RoundRobinAssignor,
            &counts(&[("t", members.len() as u32)]),
            &subs,
        );
        let mut by_partition: Vec<(u32, String)> = a
            .iter()
            .map(|(m, ps)| (ps[0].partition, m.clone()))
            .collect();
        by_partition.sort();
        by_partition.into_iter().map(|(_, m)| m).collect()
    };
    // testMemberInfoSortingWithoutGroupInstanceId
    assert_eq!(
        order(&[("a", None), ("b", None), ("c", None)]),
        ["a", "b", "c"]
    );
    // testMemberInfoSortingWithAllGroupInstanceId
    assert_eq!(
        order(&[("a", Some("y")), ("b", Some("z")), ("c", Some("x"))]),
        ["c", "a", "b"]
    );
    // testMemberInfoSortingSomeGroupInstanceId
    assert_eq!(
        order(&[("a", None), ("b", Some("y")), ("c", Some("x"))]),
        ["c", "b", "a"]
    );
}
