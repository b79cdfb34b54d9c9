"""The partition assignors as pure functions: Kafka's documented examples,
KIP-429's incremental rules for cooperative-sticky, and properties over
random groups (hypothesis)."""

from __future__ import annotations

import collections
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kwire.assignors import (CooperativeStickyAssignor, MemberSubscription, RangeAssignor, RoundRobinAssignor,
                             assignors_from_config)
from kwire.consumer import TopicPartition as TP
from kwire.errors import KwireError


def members(**subs):
    return {m: MemberSubscription(m, tuple(topics)) for m, topics in subs.items()}


def names(assignment):
    return {m: [f"{tp.topic}p{tp.partition}" for tp in sorted(tps)] for m, tps in assignment.items()}


# ------------------------------------------------------------------ range
def test_range_gives_the_extra_partitions_to_the_first_consumers():
    got = RangeAssignor().assign({"t": 7}, members(c2=["t"], c0=["t"], c1=["t"]))
    assert names(got) == {"c0": ["tp0", "tp1", "tp2"], "c1": ["tp3", "tp4"], "c2": ["tp5", "tp6"]}


def test_range_is_per_topic_as_kafka_documents():
    # RangeAssignor javadoc: two consumers, two topics of three partitions each
    got = RangeAssignor().assign({"t0": 3, "t1": 3}, members(C0=["t0", "t1"], C1=["t0", "t1"]))
    assert names(got) == {"C0": ["t0p0", "t0p1", "t1p0", "t1p1"], "C1": ["t0p2", "t1p2"]}


def test_range_orders_static_members_first_by_instance_id():
    ms = {
        "a": MemberSubscription("a", ("t",)),
        "z": MemberSubscription("z", ("t",), group_instance_id="i1"),
        "m": MemberSubscription("m", ("t",), group_instance_id="i0"),
    }
    got = RangeAssignor().assign({"t": 4}, ms)
    assert names(got) == {"m": ["tp0", "tp1"], "z": ["tp2"], "a": ["tp3"]}


def test_range_skips_missing_topics_and_more_consumers_than_partitions():
    got = RangeAssignor().assign({"t": 2}, members(a=["t", "gone"], b=["t"], c=["t"]))
    assert names(got) == {"a": ["tp0"], "b": ["tp1"], "c": []}


# ------------------------------------------------------------- roundrobin
def test_roundrobin_same_subscriptions():
    got = RoundRobinAssignor().assign({"t0": 3, "t1": 3}, members(C0=["t0", "t1"], C1=["t0", "t1"]))
    assert names(got) == {"C0": ["t0p0", "t0p2", "t1p1"], "C1": ["t0p1", "t1p0", "t1p2"]}


def test_roundrobin_different_subscriptions_as_kafka_documents():
    got = RoundRobinAssignor().assign(
        {"t0": 1, "t1": 2, "t2": 3}, members(C0=["t0"], C1=["t0", "t1"], C2=["t0", "t1", "t2"]))
    assert names(got) == {"C0": ["t0p0"], "C1": ["t1p0"], "C2": ["t1p1", "t2p0", "t2p1", "t2p2"]}


# ---------------------------------------------------- cooperative-sticky
CS = CooperativeStickyAssignor()


def owned_members(owned, generation=1, topics=("t",)):
    return {m: MemberSubscription(m, tuple(topics), tuple(tps), generation) for m, tps in owned.items()}


def counts(assignment):
    return sorted(len(v) for v in assignment.values())


def test_cooperative_sticky_fresh_group_is_balanced():
    got = CS.assign({"t": 10}, members(a=["t"], b=["t"], c=["t"]))
    assert counts(got) == [3, 3, 4]
    assert sorted(tp for tps in got.values() for tp in tps) == [TP("t", p) for p in range(10)]


def test_cooperative_sticky_new_member_waits_for_revocation_then_gets_its_share():
    parts = {"t": 6}
    before = {"a": [TP("t", p) for p in range(3)], "b": [TP("t", p) for p in range(3, 6)]}
    # round 1: c joins owning nothing; nothing may move straight from a/b to c
    r1 = CS.assign(parts, {**owned_members(before), "c": MemberSubscription("c", ("t",), (), -1)})
    assert r1["c"] == []
    assert set(r1["a"]) <= set(before["a"]) and set(r1["b"]) <= set(before["b"])
    assert len(r1["a"]) == 2 and len(r1["b"]) == 2          # one each revoked for c
    # round 2: a and b rejoin owning what they kept; c gets the revoked ones
    r2 = CS.assign(parts, {**owned_members(r1, generation=2), "c": MemberSubscription("c", ("t",), (), 2)})
    assert r2["a"] == r1["a"] and r2["b"] == r1["b"]
    assert sorted(r2["c"]) == sorted(set(TP("t", p) for p in range(6)) - set(r1["a"]) - set(r1["b"]))


def test_cooperative_sticky_member_leaving_hands_its_partitions_over_in_one_round():
    before = {"a": [TP("t", 0), TP("t", 1)], "b": [TP("t", 2), TP("t", 3)], "c": [TP("t", 4), TP("t", 5)]}
    survivors = {m: before[m] for m in ("a", "b")}
    got = CS.assign({"t": 6}, owned_members(survivors))
    assert set(before["a"]) <= set(got["a"]) and set(before["b"]) <= set(got["b"])
    assert counts(got) == [3, 3]


def test_cooperative_sticky_highest_generation_claim_wins_and_ties_void_both():
    ms = {
        "old": MemberSubscription("old", ("t",), (TP("t", 0), TP("t", 1)), 3),
        "new": MemberSubscription("new", ("t",), (TP("t", 0),), 4),
        "x": MemberSubscription("x", ("t",), (TP("t", 2),), 4),
        "y": MemberSubscription("y", ("t",), (TP("t", 2),), 4),
    }
    owners = CS._valid_owners({"t": 3}, ms)
    assert owners == {TP("t", 0): "new", TP("t", 1): "old"}


def test_cooperative_sticky_reads_the_generation_from_java_user_data():
    m = MemberSubscription("m", ("t",), (TP("t", 0),), -1, user_data=struct.pack(">i", 7))
    assert CS.member_generation(m) == 7
    assert CS.subscription_user_data(["t"], [], 9) == struct.pack(">i", 9)


def test_cooperative_sticky_drops_claims_outside_subscription_or_partitions():
    ms = {"a": MemberSubscription("a", ("t",), (TP("t", 5), TP("u", 0)), 1)}
    assert CS._valid_owners({"t": 2, "u": 1}, ms) == {}


def test_cooperative_sticky_mixed_subscriptions_respected():
    got = CS.assign({"t": 4, "u": 2}, members(a=["t"], b=["t", "u"]))
    assert all(tp.topic == "t" for tp in got["a"])
    assert {tp for tps in got.values() for tp in tps} == {TP("t", p) for p in range(4)} | {TP("u", 0), TP("u", 1)}
    assert counts(got) == [3, 3]


@st.composite
def groups(draw):
    topics = {f"t{i}": draw(st.integers(1, 8)) for i in range(draw(st.integers(1, 3)))}
    n = draw(st.integers(1, 6))
    same = draw(st.booleans())
    all_parts = [TP(t, p) for t, c in topics.items() for p in range(c)]
    ms = {}
    for i in range(n):
        subs = tuple(topics) if same else tuple(sorted(draw(st.sets(st.sampled_from(sorted(topics)), min_size=1))))
        owned = tuple(draw(st.lists(st.sampled_from(all_parts), max_size=6, unique=True)))
        ms[f"m{i}"] = MemberSubscription(f"m{i}", subs, owned, draw(st.integers(-1, 3)))
    return topics, ms, same


@settings(max_examples=1000, deadline=None)
@given(groups())
def test_cooperative_sticky_properties(group):
    topics, ms, same = group
    got = CS.assign(topics, ms)
    owners = CS._valid_owners(topics, ms)
    seen = collections.Counter(tp for tps in got.values() for tp in tps)
    assert all(c == 1 for c in seen.values()), "a partition given to two members"
    for m, tps in got.items():
        for tp in tps:
            assert tp.topic in ms[m].topics
            assert owners.get(tp, m) == m, "a partition moved between owners in one round (KIP-429)"
    # later rounds: every member owns what it got; the group settles with every partition out
    rounds, current = [got], got
    for generation in range(10, 16):
        again = {m: MemberSubscription(m, ms[m].topics, tuple(current[m]), generation) for m in ms}
        nxt = CS.assign(topics, again)
        for m in ms:
            if same:
                # with one subscription for all, the first round's plan stands: nobody loses a partition later
                # (with mixed subscriptions a later round may still improve the balance, as Java's may)
                assert set(current[m]) <= set(nxt[m]), "a member lost a partition with nothing to gain"
        rounds.append(nxt)
        if nxt == current:
            break
        current = nxt
    assert rounds[-1] == rounds[-2], "the assignment did not settle"
    subscribed = {TP(t, p) for m in ms.values() for t in m.topics for p in range(topics[t])}
    assert {tp for tps in current.values() for tp in tps} == subscribed
    if same:
        assert len(rounds) <= 3          # one round to revoke, one to hand over
        sizes = [len(v) for v in current.values()]
        assert max(sizes) - min(sizes) <= 1


# ----------------------------------------------------------------- config
def test_assignors_from_config():
    assert [a.name for a in assignors_from_config(None)] == ["range", "cooperative-sticky"]
    assert [a.name for a in assignors_from_config("roundrobin, range")] == ["roundrobin", "range"]
    assert [a.name for a in assignors_from_config(
        ["org.apache.kafka.clients.consumer.CooperativeStickyAssignor"])] == ["cooperative-sticky"]
    assert [a.name for a in assignors_from_config([RangeAssignor, RoundRobinAssignor()])] == ["range", "roundrobin"]
    with pytest.raises(KwireError, match="unknown partition assignment strategy"):
        assignors_from_config("sticky-ish")
    with pytest.raises(KwireError, match="twice"):
        assignors_from_config("range,range")
