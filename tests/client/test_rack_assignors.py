"""Rack-aware assignment (KIP-881) of ``range`` and ``cooperative-sticky``,
compared with Java's own assignors run on the same inputs
(``support/java/AssignorPeer.java``, one JVM for every case of the module):
racks on every member, uneven racks, members or brokers without racks,
co-partitioned topics, unequal subscriptions, owned partitions."""

from __future__ import annotations

import random
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pytest

from kwire.assignors import (CooperativeStickyAssignor, MemberSubscription, RangeAssignor, RoundRobinAssignor,
                             use_rack_aware)
from kwire.types import TopicPartition as TP

RACKS3 = {1: "a", 2: "b", 3: "c"}
ASSIGNORS = {"range": RangeAssignor(), "cooperative-sticky": CooperativeStickyAssignor(),
             "roundrobin": RoundRobinAssignor()}


def spread(partitions: int, brokers: Sequence[int] = (1, 2, 3), rf: int = 1) -> List[List[int]]:
    """Replica ids as Kafka places them: partition p on brokers p, p+1, ... (round)."""
    return [[brokers[(p + i) % len(brokers)] for i in range(rf)] for p in range(partitions)]


def case(assignor: str, topics: Dict[str, List[List[int]]], members: Dict[str, Dict[str, Any]],
         brokers: Optional[Dict[int, Optional[str]]] = None) -> Dict[str, Any]:
    return {"assignor": assignor, "brokers": RACKS3 if brokers is None else brokers, "topics": topics,
            "members": members}


def member(topics: Sequence[str], rack: Optional[str] = None, owned: Sequence[Tuple[str, int]] = (),
           generation: int = -1, instance_id: Optional[str] = None) -> Dict[str, Any]:
    return {"topics": list(topics), "rack": rack, "owned": [list(tp) for tp in owned], "generation": generation,
            "instance_id": instance_id}


def kwire_assign(c: Dict[str, Any]) -> Dict[str, List[Tuple[str, int]]]:
    racks = {TP(t, p): frozenset(c["brokers"][r] for r in rs if c["brokers"].get(r))
             for t, ps in c["topics"].items() for p, rs in enumerate(ps)}
    subs = {m: MemberSubscription(m, tuple(s["topics"]), tuple(TP(t, p) for t, p in s["owned"]), s["generation"],
                                  s["instance_id"], s["rack"]) for m, s in c["members"].items()}
    got = ASSIGNORS[c["assignor"]].assign_partitions({t: len(ps) for t, ps in c["topics"].items()}, subs, racks)
    return {m: sorted((tp.topic, tp.partition) for tp in tps) for m, tps in got.items()}


def in_rack(c: Dict[str, Any], assignment: Dict[str, List[Tuple[str, int]]]) -> int:
    """How many assigned partitions have a replica in their member's rack."""
    return sum(1 for m, tps in assignment.items() for t, p in tps
               if any(c["brokers"].get(r) == c["members"][m]["rack"] for r in c["topics"][t][p]))


def _same_topics(n: int, rack_of: Sequence[Optional[str]], topics: Sequence[str]) -> Dict[str, Dict[str, Any]]:
    return {f"m{i}": member(topics, rack_of[i % len(rack_of)]) for i in range(n)}


def _cases() -> Dict[str, Dict[str, Any]]:
    out: Dict[str, Dict[str, Any]] = {}
    for a in ("range", "cooperative-sticky"):
        out[f"{a}-one-per-rack"] = case(a, {"t": spread(6)}, _same_topics(3, "cab", ["t"]))
        out[f"{a}-uneven-racks"] = case(a, {"t": spread(7)}, _same_topics(3, "aab", ["t"]))
        out[f"{a}-rf2"] = case(a, {"t": spread(9, rf=2)}, _same_topics(4, "abca", ["t"]))
        out[f"{a}-member-without-rack"] = case(a, {"t": spread(6)}, _same_topics(3, ["a", None, "c"], ["t"]))
        out[f"{a}-rack-without-brokers"] = case(a, {"t": spread(6)}, _same_topics(3, "abd", ["t"]))
        out[f"{a}-co-partitioned"] = case(a, {"t": spread(5), "u": spread(5)}, _same_topics(3, "cba", ["t", "u"]))
        out[f"{a}-all-racks-everywhere"] = case(a, {"t": spread(5, rf=3)}, _same_topics(2, "ab", ["t"]))
        out[f"{a}-disjoint-racks"] = case(a, {"t": spread(4)}, _same_topics(2, "xy", ["t"]))
        out[f"{a}-brokers-without-racks"] = case(a, {"t": spread(4)}, _same_topics(2, "ab", ["t"]),
                                                 {1: None, 2: None, 3: None})
        out[f"{a}-one-broker-rack"] = case(a, {"t": spread(6)}, _same_topics(3, "abc", ["t"]),
                                           {1: "a", 2: None, 3: None})
        out[f"{a}-static"] = case(a, {"t": spread(6)}, {
            "z": member(["t"], "a", instance_id="i1"), "y": member(["t"], "b", instance_id="i0"),
            "x": member(["t"], "c")})
        out[f"{a}-more-members-than-partitions"] = case(a, {"t": spread(2)}, _same_topics(4, "cbaa", ["t"]))
    out["range-unequal-subscriptions"] = case("range", {"t": spread(6), "u": spread(3)}, {
        "m0": member(["t", "u"], "b"), "m1": member(["t"], "a"), "m2": member(["u"], "c")})
    out["sticky-unequal-subscriptions-rf2"] = case("cooperative-sticky", {"t": spread(8, rf=2), "u": spread(4)}, {
        "m0": member(["t", "u"], "a"), "m1": member(["t"], "c"), "m2": member(["t", "u"], None),
        "m3": member(["u"], "b")})
    out["sticky-unequal-subscriptions"] = case("cooperative-sticky", {"t": spread(6), "u": spread(3)}, {
        "m0": member(["t", "u"], "b"), "m1": member(["t"], "a"), "m2": member(["u"], "c")})
    out["range-co-partitioned-and-not"] = case("range", {"t": spread(4), "u": spread(4), "v": spread(3)},
                                               _same_topics(2, "ba", ["t", "u", "v"]))
    # cooperative-sticky with partitions owned from the last generation
    owned = {"m0": [("t", 0), ("t", 1), ("t", 2)], "m1": [("t", 3), ("t", 4), ("t", 5)]}
    out["sticky-owned-move-to-their-rack"] = case("cooperative-sticky", {"t": spread(6)}, {
        "m0": member(["t"], "a", owned["m0"], 1), "m1": member(["t"], "b", owned["m1"], 1), "m2": member(["t"], "c")})
    out["sticky-owned-without-racks-stay"] = case("cooperative-sticky", {"t": spread(6)}, {
        "m0": member(["t"], None, owned["m0"], 1), "m1": member(["t"], None, owned["m1"], 1),
        "m2": member(["t"], None)})
    out["sticky-owned-in-rack-kept"] = case("cooperative-sticky", {"t": spread(6)}, {
        "m0": member(["t"], "a", [("t", 0), ("t", 3)], 1), "m1": member(["t"], "b", [("t", 1), ("t", 4)], 1),
        "m2": member(["t"], "c", [("t", 2), ("t", 5)], 1), "m3": member(["t"], "a")})
    return out


def _random_cases(seed: int, count: int) -> Dict[str, Dict[str, Any]]:
    """Equal subscriptions, random racks and replica placements (no owned
    partitions): cases where Java's result does not depend on its hash maps."""
    rnd = random.Random(seed)
    out = {}
    for i in range(count):
        brokers = {b: rnd.choice(["a", "b", "c", None]) if rnd.random() < 0.2 else "abc"[b % 3] for b in range(1, 5)}
        topics = {t: [rnd.sample(range(1, 5), rnd.randint(1, 2)) for _ in range(rnd.randint(1, 9))]
                  for t in rnd.sample(["t", "u", "v"], rnd.randint(1, 3))}
        n = rnd.randint(1, 6)
        racks = [rnd.choice(["a", "b", "c", "d", None]) for _ in range(n)]
        for a in ("range", "cooperative-sticky"):
            out[f"random{i}-{a}"] = case(a, topics, _same_topics(n, racks, sorted(topics)), brokers)
    return out


def _random_sticky_cases(seed: int, count: int) -> Dict[str, Dict[str, Any]]:
    """cooperative-sticky, random subscriptions (equal or not), racks and
    partitions owned from generations 1 and 2."""
    rnd = random.Random(seed)
    out = {}
    for i in range(count):
        topics = {t: [rnd.sample(range(1, 4), rnd.randint(1, 2)) for _ in range(rnd.randint(1, 7))]
                  for t in ("t", "u", "v")}
        n = rnd.randint(2, 5)
        ms = {f"m{j}": member(sorted(rnd.sample(sorted(topics), rnd.randint(1, 3))), rnd.choice("abc") or None)
              for j in range(n)}
        every = [(t, p) for t, ps in topics.items() for p in range(len(ps))]
        rnd.shuffle(every)
        for j, s in enumerate(ms.values()):
            s["owned"] = [[t, p] for t, p in every[j::n + 1] if t in s["topics"]]
            s["generation"] = rnd.choice([1, 2, 2]) if s["owned"] else -1
        ms[f"m{n - 1}"]["rack"] = None if rnd.random() < 0.3 else ms[f"m{n - 1}"]["rack"]
        out[f"random-sticky{i}"] = case("cooperative-sticky", topics, ms)
    return out


CASES = {**_cases(), **_random_cases(881, 25), **_random_sticky_cases(429, 30)}


@pytest.fixture(scope="module")
def java() -> Dict[str, Dict[str, List[Tuple[str, int]]]]:
    from support.java_peer import java_assign

    return dict(zip(CASES, java_assign(list(CASES.values()))))


@pytest.mark.parametrize("name", sorted(CASES))
def test_kwire_assigns_as_java(java, name):
    """The same assignment as Java's assignor of the same name (members'
    partitions as sets: Java returns them in its own order)."""
    c = CASES[name]
    assert kwire_assign(c) == java[name], (name, c)


def test_in_rack_when_balance_allows():
    """One member a rack, a partition a rack: everything is in-rack, balanced."""
    c = CASES["range-one-per-rack"]
    got = kwire_assign(c)
    assert in_rack(c, got) == 6 and sorted(map(len, got.values())) == [2, 2, 2]
    assert got["m0"] == [("t", 2), ("t", 5)]          # m0 is on rack c, where broker 3 has partitions 2 and 5


def test_balance_before_racks():
    """Two members on rack a, one on b, partitions on a, b, c: every member
    still gets its share (7 = 3 + 2 + 2), the ones in-rack where it can."""
    c = CASES["cooperative-sticky-uneven-racks"]
    got = kwire_assign(c)
    assert sorted(map(len, got.values())) == [2, 2, 3]
    assert in_rack(c, got) == 5        # a has partitions 0, 3, 6 and b has 1, 4: all of them in-rack


def test_without_every_rack_behaviour_is_unchanged():
    """Members without racks, or brokers without racks: the plain assignment."""
    for name in ("range-brokers-without-racks", "cooperative-sticky-brokers-without-racks",
                 "range-disjoint-racks", "range-all-racks-everywhere"):
        c = CASES[name]
        plain = ASSIGNORS[c["assignor"]].assign({t: len(ps) for t, ps in c["topics"].items()},
                                                {m: MemberSubscription(m, tuple(s["topics"]))
                                                 for m, s in c["members"].items()})
        assert kwire_assign(c) == {m: sorted((tp.topic, tp.partition) for tp in tps) for m, tps in plain.items()}


def test_sticky_revokes_out_of_rack_partitions_first():
    """KIP-429 with racks: a partition moving to a member of its rack is
    first taken from its owner (given to nobody in this round)."""
    c = CASES["sticky-owned-move-to-their-rack"]
    got = kwire_assign(c)
    assert got == {"m0": [("t", 0)], "m1": [("t", 4)], "m2": []}


def test_use_rack_aware():
    racks = {TP("t", 0): frozenset("a"), TP("t", 1): frozenset("b")}
    assert use_rack_aware({"a"}, racks)
    assert not use_rack_aware(set(), racks)
    assert not use_rack_aware({"z"}, racks)
    assert not use_rack_aware({"a"}, {TP("t", 0): frozenset("ab"), TP("t", 1): frozenset("ab")})
