//! Kafka's own assignor tests, ported as data: `RangeAssignorTest`, `RoundRobinAssignorTest`,
//! `AbstractStickyAssignorTest` (run for both sticky assignors, as in Kafka),
//! `StickyAssignorTest` and `CooperativeStickyAssignorTest`. Test names are Kafka's method
//! names in snake case. Range and round robin: Kafka's exact assignments. Sticky: Kafka's
//! exact results where it asserts them, and its checks (`verifyValidityAndBalance`,
//! `isFullyBalanced`, stickiness) everywhere. Then a property test over random inputs.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use logbus::group::{
    CooperativeStickyAssignor, MemberSubscription, PartitionAssignor, RangeAssignor,
    RebalanceProtocol, RoundRobinAssignor, StickyAssignor, TopicPartition,
};

type Assignment = BTreeMap<String, Vec<TopicPartition>>;
type Subs = BTreeMap<String, MemberSubscription>;
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
fn sub(topics: &[&str]) -> MemberSubscription {
    MemberSubscription::new(topics.iter().copied())
}

/// Kafka's `buildSubscriptionV2Above(topics, partitions, generation, i)`.
fn owning(topics: &[&str], owned: &[TopicPartition], generation: i32) -> MemberSubscription {
    sub(topics)
        .with_owned_partitions(owned.iter().cloned())
        .with_generation(generation)
}

fn topics_of(s: &MemberSubscription) -> Vec<&str> {
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

// ---------------------------------------------------------------------------------------
// AbstractStickyAssignorTest: every case runs on both sticky assignors (see `both`).
// ---------------------------------------------------------------------------------------

fn subs_of(list: Vec<(&str, MemberSubscription)>) -> Subs {
    list.into_iter().map(|(m, s)| (m.to_string(), s)).collect()
}

fn exact(list: &[(&str, &str)]) -> Assignment {
    exact_cases::expected(list)
}

#[test]
fn test_sticky_one_consumer_no_topic() {
    let subs = subs_of(vec![("consumer", sub(&[]))]);
    let a = both(&counts(&[]), &subs, Some(&[]));
    assert_eq!(a, exact(&[("consumer", "")]));
    assert!(is_fully_balanced(&a));
}

#[test]
fn test_sticky_one_consumer_nonexistent_topic() {
    let subs = subs_of(vec![("consumer", sub(&["topic"]))]);
    let a = both(&counts(&[("topic", 0)]), &subs, Some(&[]));
    assert_eq!(a, exact(&[("consumer", "")]));
}

#[test]
fn test_sticky_one_consumer_one_topic() {
    let subs = subs_of(vec![("consumer", sub(&["topic"]))]);
    let a = both(&counts(&[("topic", 3)]), &subs, Some(&[]));
    assert_eq!(a, exact(&[("consumer", "topic-0, topic-1, topic-2")]));
}

#[test]
fn test_sticky_only_assigns_partitions_from_subscribed_topics() {
    // The member reports owning partitions of a topic it does not subscribe to.
    let owned = parse("topic-0, topic-1, other-0, other-1");
    let subs = subs_of(vec![("consumer", owning(&["topic"], &owned, GENERATION))]);
    let a = both(&counts(&[("topic", 2)]), &subs, Some(&[]));
    assert_eq!(a, exact(&[("consumer", "topic-0, topic-1")]));
}

#[test]
fn test_sticky_one_consumer_multiple_topics() {
    let subs = subs_of(vec![("consumer", sub(T12))]);
    let a = both(&counts(&[("topic1", 1), ("topic2", 2)]), &subs, Some(&[]));
    assert_eq!(a, exact(&[("consumer", "topic1-0, topic2-0, topic2-1")]));
}

#[test]
fn test_sticky_two_consumers_one_topic_one_partition() {
    let subs = subs_of(vec![
        ("consumer1", sub(&["topic"])),
        ("consumer2", sub(&["topic"])),
    ]);
    let a = both(&counts(&[("topic", 1)]), &subs, Some(&[]));
    assert!(is_fully_balanced(&a));
}

#[test]
fn test_sticky_two_consumers_one_topic_two_partitions() {
    let subs = subs_of(vec![
        ("consumer1", sub(&["topic"])),
        ("consumer2", sub(&["topic"])),
    ]);
    let a = both(&counts(&[("topic", 2)]), &subs, Some(&[]));
    assert_eq!(
        a,
        exact(&[("consumer1", "topic-0"), ("consumer2", "topic-1")])
    );
}

#[test]
fn test_multiple_consumers_mixed_topic_subscriptions() {
    let subs = subs_of(vec![
        ("consumer1", sub(&["topic1"])),
        ("consumer2", sub(T12)),
        ("consumer3", sub(&["topic1"])),
    ]);
    // The general algorithm (Kafka: `partitionsTransferringOwnership` is null).
    let a = both(&counts(&[("topic1", 3), ("topic2", 2)]), &subs, None);
    assert_eq!(
        a,
        exact(&[
            ("consumer1", "topic1-0, topic1-2"),
            ("consumer2", "topic2-0, topic2-1"),
            ("consumer3", "topic1-1"),
        ])
    );
    assert!(is_fully_balanced(&a));
}

#[test]
fn test_sticky_two_consumers_two_topics_six_partitions() {
    let subs = subs_of(vec![("consumer1", sub(T12)), ("consumer2", sub(T12))]);
    let a = both(&counts(&[("topic1", 3), ("topic2", 3)]), &subs, Some(&[]));
    assert_eq!(
        a,
        exact(&[
            ("consumer1", "topic1-0, topic1-2, topic2-1"),
            ("consumer2", "topic1-1, topic2-0, topic2-2"),
        ])
    );
}

#[test]
fn test_consumer_owning_min_quota_expected_max_quota() {
    let subs = subs_of(vec![
        (
            "consumer1",
            owning(T12, &parse("topic1-0, topic2-1"), GENERATION),
        ),
        (
            "consumer2",
            owning(T12, &parse("topic1-1, topic2-2"), GENERATION),
        ),
    ]);
    let a = both(&counts(&[("topic1", 2), ("topic2", 3)]), &subs, Some(&[]));
    assert_eq!(
        a,
        exact(&[
            ("consumer1", "topic1-0, topic2-1, topic2-0"),
            ("consumer2", "topic1-1, topic2-2"),
        ])
    );
    assert!(is_fully_balanced(&a));
}

#[test]
fn test_max_quota_consumer_more_than_num_expected_max_capacity_members() {
    let subs = subs_of(vec![
        (
            "consumer1",
            owning(T12, &parse("topic1-0, topic2-0"), GENERATION),
        ),
        (
            "consumer2",
            owning(T12, &parse("topic1-1, topic2-1"), GENERATION),
        ),
        ("consumer3", owning(T12, &[], GENERATION)),
    ]);
    let a = both(
        &counts(&[("topic1", 2), ("topic2", 2)]),
        &subs,
        Some(&[(tp("topic2", 0), "consumer3")]),
    );
    assert_eq!(
        a,
        exact(&[
            ("consumer1", "topic1-0"),
            ("consumer2", "topic1-1, topic2-1"),
            ("consumer3", "topic2-0"),
        ])
    );
}

#[test]
fn test_all_consumers_are_under_min_quota() {
    let subs = subs_of(vec![
        ("consumer1", owning(T12, &parse("topic1-0"), GENERATION)),
        ("consumer2", owning(T12, &parse("topic1-1"), GENERATION)),
        ("consumer3", owning(T12, &[], GENERATION)),
    ]);
    let a = both(&counts(&[("topic1", 2), ("topic2", 3)]), &subs, Some(&[]));
    assert_eq!(
        a,
        exact(&[
            ("consumer1", "topic1-0, topic2-1"),
            ("consumer2", "topic1-1, topic2-2"),
            ("consumer3", "topic2-0"),
        ])
    );
}

#[test]
fn test_add_remove_consumer_one_topic() {
    let counts = counts(&[("topic", 3)]);
    let mut subs = subs_of(vec![("consumer1", sub(&["topic"]))]);
    let a = both(&counts, &subs, Some(&[]));
    assert_eq!(a, exact(&[("consumer1", "topic-0, topic-1, topic-2")]));

    subs = subs_of(vec![
        ("consumer1", owning(&["topic"], &a["consumer1"], GENERATION)),
        ("consumer2", owning(&["topic"], &[], GENERATION)),
    ]);
    let a = both(&counts, &subs, Some(&[(tp("topic", 2), "consumer2")]));
    assert_eq!(
        a,
        exact(&[("consumer1", "topic-0, topic-1"), ("consumer2", "topic-2")])
    );

    subs = subs_of(vec![(
        "consumer2",
        owning(&["topic"], &a["consumer2"], GENERATION),
    )]);
    let a = both(&counts, &subs, Some(&[]));
    assert_eq!(
        set(&a["consumer2"]),
        set(&parse("topic-2, topic-1, topic-0"))
    );
}

#[test]
fn test_topic_balance_after_reassignment() {
    let counts = counts(&[("topic1", 12), ("topic2", 12)]);
    let per_topic = |a: &Assignment, n: usize| {
        for ps in a.values() {
            for t in T12 {
                assert_eq!(ps.iter().filter(|p| p.topic == *t).count(), n, "{a:?}");
            }
        }
    };
    let subs = subs_of(vec![("consumer1", sub(T12))]);
    let a = both(&counts, &subs, Some(&[]));
    per_topic(&a, 12);

    let subs = subs_of(vec![
        ("consumer1", owning(T12, &a["consumer1"], GENERATION)),
        ("consumer2", owning(T12, &[], GENERATION)),
    ]);
    let a = both(&counts, &subs, None);
    per_topic(&a, 6);

    let subs = subs_of(vec![
        ("consumer1", owning(T12, &a["consumer1"], GENERATION)),
        ("consumer2", owning(T12, &a["consumer2"], GENERATION)),
        ("consumer3", owning(T12, &[], GENERATION)),
        ("consumer4", owning(T12, &[], GENERATION)),
    ]);
    let a = both(&counts, &subs, None);
    per_topic(&a, 3);

    let subs = subs_of(vec![
        ("consumer3", owning(T12, &a["consumer3"], GENERATION)),
        ("consumer4", owning(T12, &a["consumer4"], GENERATION)),
    ]);
    let a = both(&counts, &subs, Some(&[]));
    per_topic(&a, 6);
}

#[test]
fn test_add_remove_two_consumers_two_topics() {
    let counts = counts(&[("topic1", 3), ("topic2", 4)]);
    let subs = subs_of(vec![("consumer1", sub(T12)), ("consumer2", sub(T12))]);
    let a = both(&counts, &subs, Some(&[]));
    assert_eq!(
        a,
        exact(&[
            ("consumer1", "topic1-0, topic1-2, topic2-1, topic2-3"),
            ("consumer2", "topic1-1, topic2-0, topic2-2"),
        ])
    );

    let subs = subs_of(vec![
        ("consumer1", owning(T12, &a["consumer1"], GENERATION)),
        ("consumer2", owning(T12, &a["consumer2"], GENERATION)),
        ("consumer3", owning(T12, &[], GENERATION)),
        ("consumer4", owning(T12, &[], GENERATION)),
    ]);
    let transferring = [
        (tp("topic1", 2), "consumer3"),
        (tp("topic2", 3), "consumer3"),
        (tp("topic2", 2), "consumer4"),
    ];
    let a = both(&counts, &subs, Some(&transferring));
    assert_eq!(
        a,
        exact(&[
            ("consumer1", "topic1-0, topic2-1"),
            ("consumer2", "topic2-0, topic1-1"),
            ("consumer3", "topic1-2, topic2-3"),
            ("consumer4", "topic2-2"),
        ])
    );

    let subs = subs_of(vec![
        ("consumer3", owning(T12, &a["consumer3"], GENERATION)),
        ("consumer4", owning(T12, &a["consumer4"], GENERATION)),
    ]);
    let a = both(&counts, &subs, Some(&[]));
    assert_eq!(
        a,
        exact(&[
            ("consumer3", "topic1-2, topic2-3, topic1-0, topic2-1"),
            ("consumer4", "topic2-2, topic1-1, topic2-0"),
        ])
    );
}

#[test]
fn test_poor_round_robin_assignment_scenario() {
    let counts: Counts = (1..=5).map(|i| (format!("topic{i}"), i % 2 + 1)).collect();
    let all = ["topic1", "topic2", "topic3", "topic4", "topic5"];
    let odd = ["topic1", "topic3", "topic5"];
    let subs = subs_of(vec![
        ("consumer1", sub(&all)),
        ("consumer2", sub(&odd)),
        ("consumer3", sub(&odd)),
        ("consumer4", sub(&all)),
    ]);
    both(&counts, &subs, None);
}

#[test]
fn test_add_remove_topic_two_consumers() {
    let mut counts = counts(&[("topic", 3)]);
    let subs = subs_of(vec![
        ("consumer1", sub(&["topic"])),
        ("consumer2", sub(&["topic"])),
    ]);
    let a1 = both(&counts, &subs, Some(&[]));
    assert!(is_fully_balanced(&a1));

    counts.insert("topic2".into(), 3);
    let both_topics = ["topic", "topic2"];
    let subs = subs_of(vec![
        (
            "consumer1",
            owning(&both_topics, &a1["consumer1"], GENERATION),
        ),
        (
            "consumer2",
            owning(&both_topics, &a1["consumer2"], GENERATION),
        ),
    ]);
    let a2 = both(&counts, &subs, Some(&[]));
    assert_eq!((a2["consumer1"].len(), a2["consumer2"].len()), (3, 3));
    for m in ["consumer1", "consumer2"] {
        assert!(set(&a2[m]).is_superset(&set(&a1[m])), "sticky for {m}");
    }

    counts.remove("topic");
    let subs = subs_of(vec![
        (
            "consumer1",
            owning(&["topic2"], &a2["consumer1"], GENERATION),
        ),
        (
            "consumer2",
            owning(&["topic2"], &a2["consumer2"], GENERATION),
        ),
    ]);
    let a3 = both(&counts, &subs, Some(&[]));
    assert!(is_fully_balanced(&a3));
    for m in ["consumer1", "consumer2"] {
        assert!(set(&a2[m]).is_superset(&set(&a3[m])), "sticky for {m}");
    }
}

#[test]
fn test_reassignment_after_one_consumer_leaves() {
    let counts: Counts = (1..20).map(|i| (name("t", i, 20), i as u32)).collect();
    let topics: Vec<String> = (1..20).map(|i| name("t", i, 20)).collect();
    let mut subs = Subs::new();
    for i in 1..20 {
        let ts: Vec<&str> = topics[..i].iter().map(String::as_str).collect();
        subs.insert(name("c", i, 20), sub(&ts));
    }
    let a = both(&counts, &subs, None);
    let mut subs = with_owned(&subs, &a, GENERATION);
    subs.remove("c10");
    let a = both(&counts, &subs, None);
    assert_sticky(&subs, &a);
}

#[test]
fn test_reassignment_after_one_consumer_added() {
    let counts = counts(&[("topic", 20)]);
    let mut subs: Subs = (1..10)
        .map(|i| (name("c", i, 10), sub(&["topic"])))
        .collect();
    both(&counts, &subs, Some(&[]));
    subs.insert(name("c", 10, 10), sub(&["topic"]));
    both(&counts, &subs, Some(&[]));
}

#[test]
fn test_same_subscriptions() {
    let counts: Counts = (1..15).map(|i| (name("t", i, 15), i as u32)).collect();
    let topics: Vec<&str> = counts.keys().map(String::as_str).collect();
    let subs: Subs = (1..9).map(|i| (name("c", i, 9), sub(&topics))).collect();
    let a = both(&counts, &subs, Some(&[]));
    let mut subs = with_owned(&subs, &a, GENERATION);
    subs.remove(&name("c", 5, 9));
    both(&counts, &subs, Some(&[]));
}

/// Kafka's large-scale cases, scaled down for debug builds; the full size runs in
/// `large_scale_timings` (ignored by default).
fn large(
    topic_count: usize,
    partition_count: u32,
    consumer_count: usize,
    subscribe: impl Fn(usize, &[String]) -> Vec<String>,
) {
    let topics: Vec<String> = (0..topic_count)
        .map(|i| name("t", i, topic_count))
        .collect();
    let counts: Counts = topics
        .iter()
        .map(|t| (t.clone(), partition_count))
        .collect();
    let subs: Subs = (0..consumer_count)
        .map(|i| {
            let ts = subscribe(i, &topics);
            (name("c", i, consumer_count), MemberSubscription::new(ts))
        })
        .collect();
    let a = assign(&StickyAssignor, &counts, &subs);
    assert_complete(&subs, &a, &counts);
    // Kafka feeds back all members but the first (which keeps its empty owned list).
    let mut next = with_owned(&subs, &a, GENERATION);
    next.insert(
        name("c", 0, consumer_count),
        subs[&name("c", 0, consumer_count)].clone(),
    );
    let b = assign(&StickyAssignor, &counts, &next);
    verify_validity_and_balance(&next, &b, &counts);
    let c = assign(&CooperativeStickyAssignor, &counts, &next);
    verify_cooperative(&next, &c, &counts);
}

#[test]
fn test_large_assignment_and_group_with_uniform_subscription() {
    large(50, 200, 200, |_, topics| topics.to_vec());
}

#[test]
fn test_large_assignment_and_group_with_non_equal_subscription() {
    large(50, 200, 200, |i, topics| {
        if i == 199 {
            topics[..1].to_vec()
        } else {
            topics.to_vec()
        }
    });
}

#[test]
fn test_assignment_and_group_with_non_equal_subscription_not_timeout() {
    // Kafka's full size (100 topics x 200 partitions, 500 members) halved in each dimension.
    large(50, 100, 250, |i, topics| {
        let half = topics.len() / 2;
        if i % 4 == 0 {
            topics[..half].to_vec()
        } else {
            topics[half..].to_vec()
        }
    });
}

#[test]
fn test_subscription_not_equal_and_assign_same_partition_with3_generation() {
    let counts = counts(&[("topic", 6), ("topic1", 1)]);
    for g in [
        [1, 2, 3],
        [1, 3, 2],
        [2, 1, 3],
        [2, 3, 1],
        [3, 1, 2],
        [3, 2, 1],
    ] {
        let subs = subs_of(vec![
            (
                "consumer1",
                owning(&["topic"], &parse("topic-0, topic-2"), g[0]),
            ),
            (
                "consumer2",
                owning(&["topic"], &parse("topic-1, topic-2, topic-3"), g[1]),
            ),
            (
                "consumer3",
                owning(&["topic"], &parse("topic-2, topic-4, topic-5"), g[2]),
            ),
            ("consumer4", owning(&["topic1"], &parse("topic1-0"), 2)),
        ]);
        for assignor in [
            &StickyAssignor as &dyn PartitionAssignor,
            &CooperativeStickyAssignor,
        ] {
            let a = assign(assignor, &counts, &subs);
            let all: Vec<_> = a.values().flatten().collect();
            let distinct: HashSet<_> = all.iter().collect();
            assert_eq!(all.len(), distinct.len());
            for list in a.values() {
                // Kafka asserts 1..=2 for its own assign; the cooperative one may hold back
                // a revoked partition, leaving a member empty for one round.
                assert!(list.len() <= 2, "{a:?}");
                if assignor.name() == "sticky" {
                    assert!(!list.is_empty(), "{a:?}");
                }
            }
        }
    }
}

/// Kafka's `getRandomSublist`: removes a random number (below the length) of random items.
fn random_sublist(rng: &mut fastrand::Rng, list: &[String]) -> Vec<String> {
    let mut items = list.to_vec();
    let remove = rng.usize(..list.len());
    for _ in 0..remove {
        let i = rng.usize(..items.len());
        items.remove(i);
    }
    items
}

#[test]
fn test_large_assignment_with_multiple_consumers_leaving_and_random_subscription() {
    let mut rng = fastrand::Rng::with_seed(0x6b61666b61);
    let (topic_count, consumer_count) = (40, 200);
    let counts: Counts = (0..topic_count)
        .map(|i| (name("t", i, topic_count), rng.u32(1..=10)))
        .collect();
    let mut subs = Subs::new();
    for i in 0..consumer_count {
        let n = rng.usize(..20);
        let ts: Vec<String> = (0..n)
            .map(|_| name("t", rng.usize(..topic_count), topic_count))
            .collect();
        subs.insert(name("c", i, consumer_count), MemberSubscription::new(ts));
    }
    let a = both(&counts, &subs, None);
    let mut subs = with_owned(&subs, &a, GENERATION);
    for _ in 0..50 {
        subs.remove(&name("c", rng.usize(..consumer_count), consumer_count));
    }
    let a = both(&counts, &subs, None);
    assert_sticky(&subs, &a);
}

#[test]
fn test_new_subscription() {
    let counts: Counts = (1..5).map(|i| (name("t", i, 5), 1)).collect();
    let mut subs = Subs::new();
    for i in 0..3usize {
        let ts: Vec<String> = (i..=(3 * i).saturating_sub(2))
            .filter(|&j| j >= i && 3 * i >= 2 + j)
            .map(|j| name("t", j, 5))
            .collect();
        subs.insert(name("c", i, 3), MemberSubscription::new(ts));
    }
    let a = both(&counts, &subs, None);
    let mut subs = with_owned(&subs, &a, GENERATION);
    subs.get_mut("c0").unwrap().topics.insert(name("t", 1, 5));
    let b = both(&counts, &subs, None);
    assert_sticky(&subs, &b);
}

#[test]
fn test_move_existing_assignments() {
    let counts: Counts = (1..=6).map(|i| (format!("topic{i}"), 1)).collect();
    let subs = subs_of(vec![
        ("consumer1", owning(T12, &parse("topic1-0"), GENERATION)),
        (
            "consumer2",
            owning(
                &["topic1", "topic2", "topic3", "topic4"],
                &parse("topic2-0, topic3-0"),
                GENERATION,
            ),
        ),
        (
            "consumer3",
            owning(
                &["topic2", "topic3", "topic4", "topic5", "topic6"],
                &parse("topic4-0, topic5-0, topic6-0"),
                GENERATION,
            ),
        ),
    ]);
    both(&counts, &subs, None);
}

#[test]
fn test_stickiness() {
    let counts = counts(&[("topic1", 3)]);
    let subs: Subs = (1..=4)
        .map(|i| (format!("consumer{i}"), sub(&["topic1"])))
        .collect();
    let a = both(&counts, &subs, Some(&[]));
    assert!(a.values().all(|ps| ps.len() <= 1));
    // The potential group leader leaves.
    let mut subs = with_owned(&subs, &a, GENERATION);
    subs.remove("consumer1");
    let b = both(&counts, &subs, Some(&[]));
    for (m, ps) in &b {
        assert_eq!(ps.len(), 1);
        assert!(
            a[m].is_empty() || ps.contains(&a[m][0]),
            "stickiness for {m}"
        );
    }
}

#[test]
fn test_assignment_updated_for_deleted_topic() {
    let counts = counts(&[("topic1", 1), ("topic3", 100)]);
    let subs = subs_of(vec![("consumer", sub(&["topic1", "topic2", "topic3"]))]);
    let a = both(&counts, &subs, Some(&[]));
    assert_eq!(a["consumer"].len(), 101);
}

#[test]
fn test_no_exception_thrown_when_only_subscribed_topic_deleted() {
    let subs = subs_of(vec![("consumer", sub(&["topic"]))]);
    let a = both(&counts(&[("topic", 3)]), &subs, Some(&[]));
    let subs = with_owned(&subs, &a, GENERATION);
    let a = both(&counts(&[]), &subs, Some(&[]));
    assert_eq!(a, exact(&[("consumer", "")]));
}

#[test]
fn test_reassignment_with_random_subscriptions_and_changes() {
    let mut rng = fastrand::Rng::with_seed(42);
    for _round in 1..=100 {
        let topic_count = 10 + rng.usize(..10);
        let topics: Vec<String> = (0..topic_count).map(|i| name("t", i, 20)).collect();
        let counts: Counts = topics
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32 + 1))
            .collect();
        let consumer_count = 20 + rng.usize(..20);
        let subs: Subs = (0..consumer_count)
            .map(|i| {
                (
                    name("c", i, 40),
                    MemberSubscription::new(random_sublist(&mut rng, &topics)),
                )
            })
            .collect();
        let a = both(&counts, &subs, None);
        let subs: Subs = (0..consumer_count)
            .map(|i| {
                let m = name("c", i, 40);
                let ts = random_sublist(&mut rng, &topics);
                let ts: Vec<&str> = ts.iter().map(String::as_str).collect();
                let s = owning(&ts, &a[&m], GENERATION);
                (m, s)
            })
            .collect();
        let b = both(&counts, &subs, None);
        assert_sticky(&subs, &b);
    }
}

#[test]
fn test_all_consumers_reach_expected_quota_and_are_considered_filled() {
    let subs = subs_of(vec![
        (
            "consumer1",
            owning(&["topic"], &parse("topic-0, topic-1"), GENERATION),
        ),
        (
            "consumer2",
            owning(&["topic"], &parse("topic-2"), GENERATION),
        ),
        ("consumer3", owning(&["topic"], &[], GENERATION)),
    ]);
    let a = both(&counts(&[("topic", 4)]), &subs, Some(&[]));
    assert_eq!(
        a,
        exact(&[
            ("consumer1", "topic-0, topic-1"),
            ("consumer2", "topic-2"),
            ("consumer3", "topic-3")
        ])
    );
}

const TT2: &[&str] = &["topic", "topic2"];

#[test]
fn test_owned_partitions_are_invalidated_for_consumer_with_stale_generation() {
    let owned = parse("topic-0, topic-2, topic2-1");
    let subs = subs_of(vec![
        ("consumer1", owning(TT2, &owned, 10)),
        ("consumer2", owning(TT2, &owned, 9)),
    ]);
    let a = both(&counts(&[("topic", 3), ("topic2", 3)]), &subs, Some(&[]));
    assert_eq!(set(&a["consumer1"]), set(&owned));
    assert_eq!(
        set(&a["consumer2"]),
        set(&parse("topic-1, topic2-0, topic2-2"))
    );
}

#[test]
fn test_owned_partitions_are_invalidated_for_consumer_with_no_generation() {
    let owned = parse("topic-0, topic-2, topic2-1");
    let subs = subs_of(vec![
        ("consumer1", owning(TT2, &owned, 10)),
        ("consumer2", sub(TT2).with_owned_partitions(owned.clone())),
    ]);
    let a = both(&counts(&[("topic", 3), ("topic2", 3)]), &subs, Some(&[]));
    assert_eq!(set(&a["consumer1"]), set(&owned));
    assert_eq!(
        set(&a["consumer2"]),
        set(&parse("topic-1, topic2-0, topic2-2"))
    );
}

#[test]
fn test_partitions_transferring_ownership_include_the_partition_claimed_by_multiple_consumers_in_same_generation(
) {
    let subs = subs_of(vec![
        (
            "consumer1",
            owning(&["topic"], &parse("topic-0, topic-1"), GENERATION),
        ),
        (
            "consumer2",
            owning(&["topic"], &parse("topic-0, topic-2"), GENERATION),
        ),
        ("consumer3", owning(&["topic"], &[], GENERATION)),
    ]);
    let a = both(
        &counts(&[("topic", 3)]),
        &subs,
        Some(&[(tp("topic", 0), "consumer3")]),
    );
    assert_eq!(
        a,
        exact(&[
            ("consumer1", "topic-1"),
            ("consumer2", "topic-2"),
            ("consumer3", "topic-0")
        ])
    );
}

#[test]
fn test_ensure_partitions_assigned_to_highest_generation() {
    let all = ["topic", "topic2", "topic3"];
    let subs = subs_of(vec![
        (
            "consumer1",
            owning(&all, &parse("topic-0, topic2-0, topic3-0"), 10),
        ),
        (
            "consumer2",
            owning(&all, &parse("topic-1, topic2-1, topic3-1"), 9),
        ),
        (
            "consumer3",
            owning(&all, &parse("topic2-1, topic3-0, topic3-2"), 8),
        ),
    ]);
    let a = both(
        &counts(&[("topic", 3), ("topic2", 3), ("topic3", 3)]),
        &subs,
        Some(&[]),
    );
    assert_eq!(
        set(&a["consumer1"]),
        set(&parse("topic-0, topic2-0, topic3-0"))
    );
    assert_eq!(
        set(&a["consumer2"]),
        set(&parse("topic-1, topic2-1, topic3-1"))
    );
    assert_eq!(
        set(&a["consumer3"]),
        set(&parse("topic-2, topic2-2, topic3-2"))
    );
}

#[test]
fn test_no_reassignment_on_current_members() {
    let all = ["topic", "topic2", "topic3", "topic1"];
    let subs = subs_of(vec![
        ("consumer1", sub(&all)),
        (
            "consumer2",
            owning(&all, &parse("topic-0, topic2-0, topic1-0"), 9),
        ),
        (
            "consumer3",
            owning(&all, &parse("topic3-2, topic2-2, topic1-1"), 8),
        ),
        (
            "consumer4",
            owning(&all, &parse("topic3-1, topic-1, topic-2"), 7),
        ),
    ]);
    let counts = counts(&[("topic", 3), ("topic1", 3), ("topic2", 3), ("topic3", 3)]);
    let a = both(&counts, &subs, Some(&[]));
    assert_eq!(
        set(&a["consumer1"]),
        set(&parse("topic1-2, topic2-1, topic3-0"))
    );
}

#[test]
fn test_owned_partitions_are_invalidated_for_consumer_with_multiple_generation() {
    let subs = subs_of(vec![
        (
            "consumer1",
            owning(TT2, &parse("topic-0, topic2-1, topic-1"), 10),
        ),
        (
            "consumer2",
            owning(TT2, &parse("topic-0, topic2-1, topic2-2"), 8),
        ),
    ]);
    let a = both(&counts(&[("topic", 3), ("topic2", 3)]), &subs, Some(&[]));
    assert_eq!(
        set(&a["consumer1"]),
        set(&parse("topic-0, topic2-1, topic-1"))
    );
    assert_eq!(
        set(&a["consumer2"]),
        set(&parse("topic-2, topic2-2, topic2-0"))
    );
}

/// The non-rack parts of Kafka's rack tests: members `consumer0..2`, default generation,
/// lists compared sorted (Kafka's `toSortedString`).
fn rack_case(
    assignor: &dyn PartitionAssignor,
    member_topics: &[&[&str]],
    owned: Option<&[&str]>,
    expected: &[&str],
) {
    let counts = counts(&[("t1", 6), ("t2", 7), ("t3", 2)]);
    let subs: Subs = member_topics
        .iter()
        .enumerate()
        .map(|(i, ts)| {
            let own = owned.map(|o| parse(o[i])).unwrap_or_default();
            (format!("consumer{i}"), sub(ts).with_owned_partitions(own))
        })
        .collect();
    let got: Vec<Vec<TopicPartition>> = assign(assignor, &counts, &subs)
        .into_values()
        .map(|mut ps| {
            ps.sort_by_key(|p| p.to_string());
            ps
        })
        .collect();
    let want: Vec<Vec<TopicPartition>> = expected.iter().map(|e| parse(e)).collect();
    assert_eq!(got, want, "{}", assignor.name());
}

const ALL3: &[&str] = &["t1", "t2", "t3"];

#[test]
fn test_rack_aware_assignment_with_uniform_subscription() {
    let expected = [
        "t1-0, t1-3, t2-0, t2-3, t2-6",
        "t1-1, t1-4, t2-1, t2-4, t3-0",
        "t1-2, t1-5, t2-2, t2-5, t3-1",
    ];
    for assignor in [
        &StickyAssignor as &dyn PartitionAssignor,
        &CooperativeStickyAssignor,
    ] {
        rack_case(assignor, &[ALL3, ALL3, ALL3], None, &expected);
        // Stickiness is retained.
        rack_case(assignor, &[ALL3, ALL3, ALL3], Some(&expected), &expected);
    }
}

#[test]
fn test_rack_aware_assignment_with_non_equal_subscription() {
    let members: &[&[&str]] = &[ALL3, ALL3, &["t1", "t3"]];
    let expected = [
        "t1-5, t2-0, t2-2, t2-4, t2-6",
        "t1-3, t2-1, t2-3, t2-5, t3-0",
        "t1-0, t1-1, t1-2, t1-4, t3-1",
    ];
    for assignor in [
        &StickyAssignor as &dyn PartitionAssignor,
        &CooperativeStickyAssignor,
    ] {
        rack_case(assignor, members, None, &expected);
        rack_case(assignor, members, Some(&expected), &expected);
    }
    // From misaligned owned partitions, the cooperative assignor first revokes, then assigns.
    let owned = [
        "t1-0, t1-1, t1-2, t1-3, t1-4",
        "t1-5, t2-0, t2-1, t2-2, t2-3",
        "t2-4, t2-5, t2-6, t3-0, t3-1",
    ];
    let intermediate = ["t1-2, t1-3, t1-4", "t2-0, t2-1, t2-2, t2-3", "t3-0, t3-1"];
    let last = [
        "t1-2, t1-3, t1-4, t2-4, t2-5",
        "t2-0, t2-1, t2-2, t2-3, t2-6",
        "t1-0, t1-1, t1-5, t3-0, t3-1",
    ];
    rack_case(
        &CooperativeStickyAssignor,
        members,
        Some(&owned),
        &intermediate,
    );
    rack_case(
        &CooperativeStickyAssignor,
        members,
        Some(&intermediate),
        &last,
    );
}

// ---------------------------------------------------------------------------------------
// StickyAssignorTest and CooperativeStickyAssignorTest.
// ---------------------------------------------------------------------------------------

fn claimed_by_two(partitions: u32) -> (Counts, Subs) {
    let subs = subs_of(vec![
        (
            "consumer1",
            owning(&["topic"], &parse("topic-0, topic-1"), GENERATION),
        ),
        (
            "consumer2",
            owning(&["topic"], &parse("topic-0, topic-2"), GENERATION),
        ),
        ("consumer3", owning(&["topic"], &[], GENERATION)),
    ]);
    (counts(&[("topic", partitions)]), subs)
}

#[test]
fn test_all_consumers_have_owned_partition_invalidated_when_claimed_by_multiple_consumers_in_same_generation_with_equal_partitions_per_consumer(
) {
    let (counts, subs) = claimed_by_two(3);
    let eager = assign(&StickyAssignor, &counts, &subs);
    assert_eq!(
        eager,
        exact(&[
            ("consumer1", "topic-1"),
            ("consumer2", "topic-2"),
            ("consumer3", "topic-0")
        ])
    );
    verify_validity_and_balance(&subs, &eager, &counts);
    // Cooperative: topic-0 is still owned (twice), so nobody gets it until both revoked it.
    let cooperative = assign(&CooperativeStickyAssignor, &counts, &subs);
    assert_eq!(
        cooperative,
        exact(&[
            ("consumer1", "topic-1"),
            ("consumer2", "topic-2"),
            ("consumer3", "")
        ])
    );
    verify_cooperative(&subs, &cooperative, &counts);
}

#[test]
fn test_all_consumers_have_owned_partition_invalidated_when_claimed_by_multiple_consumers_in_same_generation_with_unequal_partitions_per_consumer(
) {
    let (counts, subs) = claimed_by_two(4);
    let eager = assign(&StickyAssignor, &counts, &subs);
    assert_eq!(
        eager,
        exact(&[
            ("consumer1", "topic-1, topic-3"),
            ("consumer2", "topic-2"),
            ("consumer3", "topic-0")
        ])
    );
    verify_validity_and_balance(&subs, &eager, &counts);
    let cooperative = assign(&CooperativeStickyAssignor, &counts, &subs);
    assert_eq!(
        cooperative,
        exact(&[
            ("consumer1", "topic-1, topic-3"),
            ("consumer2", "topic-2"),
            ("consumer3", "")
        ])
    );
    verify_cooperative(&subs, &cooperative, &counts);
}

fn disjoint(a: &[TopicPartition], b: &[TopicPartition]) -> bool {
    set(a).is_disjoint(&set(b))
}

fn contains_all(a: &[TopicPartition], b: &[TopicPartition]) -> bool {
    set(a).is_superset(&set(b))
}

#[test]
fn test_assignment_with_multiple_generations1() {
    for all_equal in [true, false] {
        let all = ["topic", "topic2"];
        let c2_topics: &[&str] = if all_equal { &all } else { &["topic"] };
        let counts = counts(&[("topic", 6), ("topic2", 6)]);
        let subs = subs_of(vec![
            ("consumer1", sub(&all)),
            ("consumer2", sub(c2_topics)),
            ("consumer3", sub(&all)),
        ]);
        let r1 = both(&counts, &subs, None);
        assert!(r1.values().all(|ps| ps.len() == 4));
        assert!(is_fully_balanced(&r1));

        let subs = subs_of(vec![
            ("consumer1", owning(&all, &r1["consumer1"], GENERATION)),
            ("consumer2", owning(c2_topics, &r1["consumer2"], GENERATION)),
        ]);
        let r2 = both(&counts, &subs, None);
        assert!(r2.values().all(|ps| ps.len() == 6));
        if all_equal {
            assert!(contains_all(&r2["consumer1"], &r1["consumer1"]));
        }
        assert!(contains_all(&r2["consumer2"], &r1["consumer2"]));
        assert!(!disjoint(&r2["consumer2"], &r1["consumer3"]));

        // consumer3 comes back claiming its partitions of generation 1; consumer2 owned some
        // of them in generation 2, which wins.
        let subs = subs_of(vec![
            ("consumer2", owning(c2_topics, &r2["consumer2"], 2)),
            ("consumer3", owning(&all, &r1["consumer3"], 1)),
        ]);
        let r3 = both(&counts, &subs, None);
        assert!(r3.values().all(|ps| ps.len() == 6));
        assert!(disjoint(&r3["consumer2"], &r3["consumer3"]));
    }
}

#[test]
fn test_assignment_with_multiple_generations2() {
    for all_equal in [true, false] {
        let all = ["topic", "topic2", "topic3"];
        let c1_topics: &[&str] = if all_equal { &all } else { &["topic"] };
        let c3_topics: &[&str] = if all_equal {
            &all
        } else {
            &["topic", "topic2"]
        };
        let counts = counts(&[("topic", 4), ("topic2", 4), ("topic3", 4)]);
        let subs = subs_of(vec![
            ("consumer1", sub(c1_topics)),
            ("consumer2", sub(&all)),
            ("consumer3", sub(c3_topics)),
        ]);
        let r1 = both(&counts, &subs, None);
        assert!(r1.values().all(|ps| ps.len() == 4));

        let subs = subs_of(vec![("consumer2", owning(&all, &r1["consumer2"], 1))]);
        let r2 = both(&counts, &subs, None);
        assert_eq!(r2["consumer2"].len(), 12);
        assert!(contains_all(&r2["consumer2"], &r1["consumer2"]));

        let subs = subs_of(vec![
            ("consumer1", owning(c1_topics, &r1["consumer1"], 1)),
            ("consumer2", owning(&all, &r2["consumer2"], 2)),
            ("consumer3", owning(c3_topics, &r1["consumer3"], 1)),
        ]);
        let r3 = both(&counts, &subs, None);
        assert!(r3.values().all(|ps| ps.len() == 4));
    }
}

#[test]
fn test_assignment_with_conflicting_previous_generations() {
    for all_equal in [true, false] {
        let all = ["topic", "topic2", "topic3"];
        let c1_topics: &[&str] = if all_equal { &all } else { &["topic"] };
        let c2_topics: &[&str] = if all_equal {
            &all
        } else {
            &["topic", "topic2"]
        };
        let counts = counts(&[("topic", 4), ("topic2", 4), ("topic3", 4)]);
        let c1_owned = if all_equal {
            parse("topic-0, topic-1, topic-2, topic2-2, topic2-3, topic3-0")
        } else {
            parse("topic-0, topic-1, topic-2, topic-3")
        };
        let c2_owned = parse("topic-0, topic-1, topic2-0, topic2-1, topic2-2, topic2-3");
        let c3_owned = parse("topic-2, topic-3, topic3-0, topic3-1, topic3-2, topic3-3");
        let subs = subs_of(vec![
            ("consumer1", owning(c1_topics, &c1_owned, 1)),
            ("consumer2", owning(c2_topics, &c2_owned, 2)),
            ("consumer3", owning(&all, &c3_owned, 2)),
        ]);
        let a = both(&counts, &subs, None);
        assert!(a.values().all(|ps| ps.len() == 4));
        assert!(contains_all(&c2_owned, &a["consumer2"]));
        assert!(contains_all(&c3_owned, &a["consumer3"]));
    }
}

/// StickyAssignorTest.testSchemaBackwardCompatibility: one member reports its partitions in
/// the old user-data schema, without a generation.
#[test]
fn test_schema_backward_compatibility() {
    let c1_before = parse("topic-0, topic-2");
    let c2_before = parse("topic-1");
    let subs = subs_of(vec![
        ("consumer1", owning(&["topic"], &c1_before, 1)),
        (
            "consumer2",
            sub(&["topic"]).with_owned_partitions(c2_before.clone()),
        ),
        ("consumer3", sub(&["topic"])),
    ]);
    let a = both(&counts(&[("topic", 3)]), &subs, None);
    assert!(a.values().all(|ps| ps.len() == 1));
    assert!(contains_all(&c1_before, &a["consumer1"]));
    assert!(contains_all(&c2_before, &a["consumer2"]));
}

/// StickyAssignorTest and CooperativeStickyAssignorTest `testAssignorWithOldVersionSubscriptions`:
/// members of the older protocol versions report the same owned partitions and generation
/// through user data, which here is the same `MemberSubscription` fields.
#[test]
fn test_assignor_with_old_version_subscriptions() {
    let subs = subs_of(vec![
        (
            "consumer1",
            owning(&["topic1"], &parse("topic1-0"), GENERATION),
        ),
        (
            "consumer2",
            owning(&["topic1"], &parse("topic1-1"), GENERATION),
        ),
        ("consumer3", owning(&["topic1"], &[], GENERATION)),
    ]);
    let a = both(&counts(&[("topic1", 3)]), &subs, Some(&[]));
    assert_eq!(
        a,
        exact(&[
            ("consumer1", "topic1-0"),
            ("consumer2", "topic1-1"),
            ("consumer3", "topic1-2")
        ])
    );
}

// ---------------------------------------------------------------------------------------
// Inputs that do not apply: skipped as Kafka skips them, never a panic.
// ---------------------------------------------------------------------------------------

fn all_assignors() -> [&'static dyn PartitionAssignor; 4] {
    [
        &RangeAssignor,
        &RoundRobinAssignor,
        &StickyAssignor,
        &CooperativeStickyAssignor,
    ]
}

#[test]
fn no_members_gives_an_empty_assignment() {
    for a in all_assignors() {
        assert!(
            a.assign(&counts(&[("t", 3)]), &Subs::new()).is_empty(),
            "{}",
            a.name()
        );
    }
}

#[test]
fn owned_partitions_that_do_not_exist_are_ignored() {
    // Partition numbers beyond the count, unknown topics, topics nobody subscribes to.
    let owned = parse("t-7, t-3, gone-0, other-0, t-0");
    let subs = subs_of(vec![
        ("a", owning(&["t"], &owned, 3)),
        ("b", owning(&["t"], &parse("t-1"), 3)),
    ]);
    let counts = counts(&[("t", 3), ("other", 2)]);
    for a in all_assignors() {
        let got = assign(a, &counts, &subs);
        assert_complete(&subs, &got, &counts);
    }
    assert_eq!(
        assign(&StickyAssignor, &counts, &subs),
        exact(&[("a", "t-0, t-2"), ("b", "t-1")])
    );
}

#[test]
fn a_member_claiming_one_partition_twice_loses_it_as_in_kafka() {
    // Kafka counts the second claim as a conflict in the same generation.
    let subs = subs_of(vec![
        ("a", owning(&["t"], &parse("t-0, t-0, t-1"), 1)),
        ("b", owning(&["t"], &[], 1)),
    ]);
    let counts = counts(&[("t", 2)]);
    assert_eq!(
        assign(&StickyAssignor, &counts, &subs),
        exact(&[("a", "t-1"), ("b", "t-0")])
    );
    // ... and the cooperative assignor holds it back: `a` still claims it.
    assert_eq!(
        assign(&CooperativeStickyAssignor, &counts, &subs),
        exact(&[("a", "t-1"), ("b", "")])
    );
}

#[test]
fn topics_with_zero_partitions_and_subscriptions_to_nothing() {
    let subs = subs_of(vec![
        ("a", sub(&["empty", "t"])),
        ("b", sub(&[])),
        ("c", sub(&["t"])),
    ]);
    let counts = counts(&[("empty", 0), ("t", 4)]);
    for a in all_assignors() {
        let got = assign(a, &counts, &subs);
        assert_complete(&subs, &got, &counts);
        assert!(got["b"].is_empty(), "{}", a.name());
    }
}

#[test]
fn names_compare_as_java_strings() {
    // U+1F600 sorts after U+FF61 in UTF-8 (code point) order but before it in UTF-16 order
    // (a surrogate pair, 0xD83D...), which is Java's and so Kafka's: it comes first.
    let subs = subs_of(vec![("\u{1F600}", sub(&["t"])), ("\u{FF61}", sub(&["t"]))]);
    let got = assign(&RoundRobinAssignor, &counts(&[("t", 1)]), &subs);
    assert_eq!(got["\u{1F600}"], [tp("t", 0)]);
    let got = assign(&RangeAssignor, &counts(&[("t", 1)]), &subs);
    assert_eq!(got["\u{1F600}"], [tp("t", 0)]);
}

// ---------------------------------------------------------------------------------------
// Random inputs: the invariants every assignor keeps.
// ---------------------------------------------------------------------------------------

mod random {
    use super::*;
    use proptest::prelude::*;

    const TOPICS: [&str; 6] = ["a", "b", "c", "t1", "t10", "unknown"];
    const MEMBERS: [&str; 8] = ["m0", "m1", "m2", "consumer-b", "consumer-a", "x", "y", "z"];

    fn input() -> impl Strategy<Value = (Counts, Subs)> {
        input_sized(8, MEMBERS.len())
    }

    /// Partition counts below `max_count`; up to `max_members` members (named from
    /// `MEMBERS`, then `m8`, `m9`...).
    fn input_sized(max_count: u32, max_members: usize) -> impl Strategy<Value = (Counts, Subs)> {
        let counts = proptest::collection::btree_map(
            proptest::sample::select(&TOPICS[..5]).prop_map(String::from),
            0u32..max_count,
            0..5,
        );
        let names: Vec<String> = (0..max_members)
            .map(|i| {
                MEMBERS
                    .get(i)
                    .map_or_else(|| format!("m{i}"), |m| m.to_string())
            })
            .collect();
        let member = (
            proptest::sample::subsequence(&TOPICS[..], 0..=TOPICS.len()),
            proptest::collection::vec(
                (proptest::sample::select(&TOPICS[..]), 0u32..max_count + 1)
                    .prop_map(|(t, p)| tp(t, p)),
                0..7,
            ),
            proptest::option::of(-2i32..4),
            proptest::option::of(proptest::sample::select(&["i1", "i2", "i3"][..])),
        )
            .prop_map(|(topics, owned, generation, instance)| {
                let mut s = sub(&topics).with_owned_partitions(owned);
                s.generation = generation;
                s.group_instance_id = instance.map(String::from);
                s
            });
        let subs = proptest::collection::btree_map(
            proptest::sample::select(names),
            member,
            0..max_members,
        );
        (counts, subs)
    }

    /// Partitions assigned at most once, only to members subscribed to their topic, and
    /// existing.
    fn valid(subs: &Subs, a: &Assignment, counts: &Counts) {
        assert_eq!(
            a.keys().collect::<Vec<_>>(),
            subs.keys().collect::<Vec<_>>()
        );
        let mut seen = HashSet::new();
        for (m, ps) in a {
            for p in ps {
                assert!(
                    subs[m].topics.contains(&p.topic),
                    "{p} to {m}, not subscribed"
                );
                assert!(
                    p.partition < counts.get(&p.topic).copied().unwrap_or(0),
                    "{p} exists"
                );
                assert!(seen.insert(p.clone()), "{p} assigned twice");
            }
        }
    }

    fn check_invariants(counts: &Counts, subs: &Subs) -> Result<(), TestCaseError> {
        for assignor in all_assignors() {
            let a = assignor.assign(counts, subs);
            valid(subs, &a, counts);
            prop_assert_eq!(&a, &assignor.assign(counts, subs), "deterministic");
            if assignor.name() != "cooperative-sticky" {
                assert_complete(subs, &a, counts);
            }
        }

        let sticky = StickyAssignor.assign(counts, subs);
        verify_validity_and_balance(subs, &sticky, counts);
        let first = subs.values().next();
        if subs
            .values()
            .all(|s| Some(&s.topics) == first.map(|f| &f.topics))
        {
            prop_assert!(is_fully_balanced(&sticky), "{:?}", sticky);
        }

        // The cooperative assignment is the sticky one without the partitions that move
        // away from a member still claiming them.
        let cooperative = CooperativeStickyAssignor.assign(counts, subs);
        for (m, ps) in &sticky {
            let kept = set(&cooperative[m]);
            prop_assert!(set(ps).is_superset(&kept));
            for p in ps.iter().filter(|p| !kept.contains(p)) {
                let claimed_elsewhere = subs
                    .iter()
                    .any(|(o, s)| o != m && s.owned_partitions.contains(p));
                let claimed_twice = subs[m].owned_partitions.iter().filter(|x| *x == p).count() > 1;
                prop_assert!(
                    claimed_elsewhere || claimed_twice,
                    "{} held back from {}",
                    p,
                    m
                );
            }
        }
        verify_cooperative(subs, &cooperative, counts);
        Ok(())
    }

    proptest! {
        // 512 cases by default; PROPTEST_CASES overrides.
        #![proptest_config(ProptestConfig {
            cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(512),
            ..ProptestConfig::default()
        })]

        #[test]
        fn every_assignor_keeps_its_invariants((counts, subs) in input()) {
            check_invariants(&counts, &subs)?;
        }

        #[test]
        fn larger_groups_keep_the_invariants((counts, subs) in input_sized(40, 40)) {
            check_invariants(&counts, &subs)?;
        }

        /// A second round from the first round's result: members keep what stays balanced.
        #[test]
        fn sticky_rounds_are_sticky((counts, subs) in input()) {
            let first = StickyAssignor.assign(&counts, &subs);
            let next = with_owned(&subs, &first, 5);
            let second = StickyAssignor.assign(&counts, &next);
            verify_validity_and_balance(&next, &second, &counts);
            assert_sticky(&next, &second);
            // With nothing changed, nothing moves.
            prop_assert_eq!(
                second.values().map(|ps| set(ps)).collect::<Vec<_>>(),
                first.values().map(|ps| set(ps)).collect::<Vec<_>>()
            );
        }
    }
}

/// Timings at scale (no assertion on time; run with
/// `cargo test --release --test groups -- --ignored --nocapture large_scale`).
/// Prints the time of a fresh assignment and of the next round from its result.
#[test]
#[ignore = "timing run; see the command in the doc comment"]
fn large_scale_timings() {
    /// `shape(i, n)`: the indices of the `n` topics member `i` subscribes to.
    fn run<R: IntoIterator<Item = usize>>(
        label: &str,
        topics: usize,
        partitions: u32,
        members: usize,
        shape: impl Fn(usize, usize) -> R,
    ) {
        let names: Vec<String> = (0..topics).map(|i| name("t", i, topics)).collect();
        let counts: Counts = names.iter().map(|t| (t.clone(), partitions)).collect();
        let subs: Subs = (0..members)
            .map(|i| {
                let ts = shape(i, topics).into_iter().map(|t| names[t].clone());
                (name("c", i, members), MemberSubscription::new(ts))
            })
            .collect();
        for assignor in [
            &StickyAssignor as &dyn PartitionAssignor,
            &CooperativeStickyAssignor,
        ] {
            let start = std::time::Instant::now();
            let first = assignor.assign(&counts, &subs);
            let fresh = start.elapsed();
            let next = with_owned(&subs, &first, GENERATION);
            let start = std::time::Instant::now();
            let second = assignor.assign(&counts, &next);
            let again = start.elapsed();
            assert_complete(&next, &second, &counts);
            println!(
                "{label}: {members} members x {} partitions, {}: fresh {fresh:?}, next round {again:?}",
                topics * partitions as usize,
                assignor.name(),
            );
        }
    }
    let all = |_, n| 0..n;
    let last_on_one = |members: usize| move |i, n| if i == members - 1 { 0..1 } else { 0..n };
    // A quarter of the members on the first half of the topics, the rest on the other half.
    let halves = |i: usize, n: usize| if i % 4 == 0 { 0..n / 2 } else { n / 2..n };
    run("uniform", 10, 1_000, 1_000, all);
    run(
        "one member on one topic",
        10,
        1_000,
        1_000,
        last_on_one(1_000),
    );
    run("halves", 10, 1_000, 1_000, halves);
    // Kafka's testLargeAssignmentAndGroupWithUniformSubscription, ...NonEqualSubscription and
    // testAssignmentAndGroupWithNonEqualSubscriptionNotTimeout at full size.
    run("kafka uniform", 500, 2_000, 2_000, all);
    run("kafka non-equal", 500, 2_000, 2_000, last_on_one(2_000));
    run("kafka halves", 100, 200, 500, halves);
    // Each member on a random half of 100 topics of 100 partitions.
    let random_halves = |i: usize, n: usize| {
        let mut rng = fastrand::Rng::with_seed(i as u64);
        (0..n).filter(move |_| rng.bool()).collect::<Vec<_>>()
    };
    run("random halves", 100, 100, 1_000, random_halves);
}

#[test]
fn assignors_are_send_sync_and_pluggable() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<RangeAssignor>();
    send_sync::<RoundRobinAssignor>();
    send_sync::<StickyAssignor>();
    send_sync::<CooperativeStickyAssignor>();
    send_sync::<MemberSubscription>();
    send_sync::<TopicPartition>();
    send_sync::<Box<dyn PartitionAssignor>>();
    // A group holds its assignor as a trait object.
    let chosen: Vec<Box<dyn PartitionAssignor>> = vec![
        Box::new(RangeAssignor),
        Box::new(RoundRobinAssignor),
        Box::new(StickyAssignor),
        Box::new(CooperativeStickyAssignor),
    ];
    let subs = subs_of(vec![("a", sub(&["t"])), ("b", sub(&["t"]))]);
    for a in &chosen {
        assert_complete(
            &subs,
            &a.assign(&counts(&[("t", 5)]), &subs),
            &counts(&[("t", 5)]),
        );
    }
}

/// Kafka's constrained algorithm takes a first-visited member with no topics as subscribed
/// like the others; logbus never assigns a partition to a member not subscribed to it.
#[test]
fn a_member_with_no_topics_gets_nothing_from_the_sticky_assignors() {
    // "consumer3" is visited first in Kafka's HashMap order (see the hash-order tests).
    let subs = subs_of(vec![
        ("consumer1", sub(&["t"])),
        ("consumer2", sub(&["t"])),
        ("consumer3", sub(&[])),
    ]);
    let counts = counts(&[("t", 6)]);
    let a = both(&counts, &subs, None);
    assert!(a["consumer3"].is_empty());
    assert_eq!(a["consumer1"].len(), 3);
}
