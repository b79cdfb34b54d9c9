"""Partition assignors of the classic consumer-group protocol.

The group leader runs one assignor over every member's subscription and the
partitions of the subscribed topics; each assignor here is a pure function of
those inputs, so kwire leaders assign exactly as Java, librdkafka,
kafka-python and aiokafka leaders that use the same name do:

* ``range`` (:class:`RangeAssignor`): per topic, the members subscribed to it
  in sorted order each take a contiguous run of partitions; when the
  partitions do not split evenly the first members take one extra each.
* ``roundrobin`` (:class:`RoundRobinAssignor`): all subscribed partitions,
  sorted by topic and partition, dealt one at a time to the sorted members,
  skipping members not subscribed to a partition's topic.
* ``cooperative-sticky`` (:class:`CooperativeStickyAssignor`): balanced
  (partition counts differ by at most one where subscriptions allow it) while
  keeping as many partitions as possible where they already are, with the
  incremental protocol of KIP-429: a partition moving from one member to
  another is left unassigned in the round that takes it away, so its owner
  revokes it first and a follow-up rebalance gives it to the new owner. No
  partition is ever owned by two members at once.

Members are ordered as Java orders them: members with a ``group_instance_id``
(static members) first, by instance id, then the others by member id.

Rack-aware assignment (KIP-881): members send their ``client_rack`` in their
subscription and the leader passes every partition's replica racks (from
Metadata) to :meth:`Assignor.assign_partitions`. ``range`` and
``cooperative-sticky`` then prefer giving a member partitions with a replica
in its rack, with Java's rules: only when some member has a rack, some
partition replica is on a member's rack, and not every partition has
replicas on every rack; balance (and for ``range`` co-partitioning of topics
with the same members and partition count) comes first, rack alignment
second. Otherwise they assign exactly as without racks.
"""

from __future__ import annotations

import abc
import collections
import logging
import struct
from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from kwire.errors import KwireError
from kwire.types import TopicPartition

__all__ = [
    "EAGER",
    "COOPERATIVE",
    "MemberSubscription",
    "Assignor",
    "RangeAssignor",
    "RoundRobinAssignor",
    "CooperativeStickyAssignor",
    "ASSIGNORS",
    "assignors_from_config",
    "member_sort_key",
    "PartitionRacks",
    "use_rack_aware",
]

log = logging.getLogger(__name__)

EAGER = "eager"
COOPERATIVE = "cooperative"

Assignment = Dict[str, List[TopicPartition]]
PartitionRacks = Mapping[TopicPartition, FrozenSet[str]]
"""The racks of each partition's replicas (all replicas, offline ones too, as Java counts them)."""


@dataclass(frozen=True)
class MemberSubscription:
    """What one member told the group in its JoinGroup: the topics it wants,
    the partitions it owns now and the generation it owned them in."""

    member_id: str
    topics: Tuple[str, ...]
    owned_partitions: Tuple[TopicPartition, ...] = ()
    generation: int = -1
    group_instance_id: Optional[str] = None
    rack_id: Optional[str] = None
    user_data: Optional[bytes] = field(default=None, compare=False)


def member_sort_key(m: MemberSubscription) -> Tuple[int, str]:
    """Java's MemberInfo order: static members (by instance id) before
    dynamic ones (by member id)."""
    return (0, m.group_instance_id) if m.group_instance_id else (1, m.member_id)


def _sorted_members(members: Mapping[str, MemberSubscription]) -> List[MemberSubscription]:
    return sorted(members.values(), key=member_sort_key)


def _member_racks(members: Iterable[MemberSubscription]) -> Dict[str, str]:
    """{member id: rack} of the members that named a (non-empty) rack."""
    return {m.member_id: m.rack_id for m in members if m.rack_id}


def use_rack_aware(member_racks: Iterable[str], partition_racks: PartitionRacks) -> bool:
    """Java's test for rack-aware assignment: some member has a rack, some
    partition has a replica on a member's rack, and the partitions' racks
    are not all the same (when every partition is on every rack, any
    assignment is in-rack)."""
    racks = set(member_racks)
    every = frozenset().union(*partition_racks.values()) if partition_racks else frozenset()
    if not racks or racks.isdisjoint(every):
        return False
    return any(r != every for r in partition_racks.values())


class Assignor(abc.ABC):
    """One assignment strategy. ``name`` goes on the wire (JoinGroup
    protocol name); ``protocols`` are the rebalance protocols it supports."""

    name: str = ""
    protocols: Tuple[str, ...] = (EAGER,)

    def subscription_user_data(self, topics: Sequence[str], owned: Sequence[TopicPartition],
                               generation: int) -> Optional[bytes]:
        """Bytes for the ``user_data`` of this member's subscription."""
        return None

    @abc.abstractmethod
    def assign(self, partitions_per_topic: Mapping[str, int],
               members: Mapping[str, MemberSubscription]) -> Assignment:
        """{member id: partitions} for every member. ``partitions_per_topic``
        holds the partition count of each subscribed topic that exists."""

    def assign_partitions(self, partitions_per_topic: Mapping[str, int],
                          members: Mapping[str, MemberSubscription],
                          partition_racks: PartitionRacks) -> Assignment:
        """:meth:`assign` knowing the racks of each partition's replicas
        (what the group leader calls). Assignors that ignore racks need not
        override it."""
        return self.assign(partitions_per_topic, members)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def _empty(members: Mapping[str, MemberSubscription]) -> Assignment:
    return {m: [] for m in members}


class _TopicRanges:
    """One topic's state in a range assignment: its members (sorted), the
    partitions left and how many more each member may take, so that the
    per-topic balance of plain ``range`` holds whatever order they go in."""

    def __init__(self, topic: str, count: int, consumers: List[MemberSubscription],
                 racks: Mapping[str, str], partition_racks: PartitionRacks) -> None:
        self.topic = topic
        self.racks = {m.member_id: racks.get(m.member_id) for m in consumers}
        self.consumers = list(self.racks)
        self.unassigned = [TopicPartition(topic, p) for p in range(count)]
        self.taken = dict.fromkeys(self.consumers, 0)
        self.per, self.extra = divmod(count, len(consumers)) if consumers else (0, 0)
        member_racks = {r for r in self.racks.values() if r}
        self.partition_racks = {tp: partition_racks.get(tp, frozenset()) for tp in self.unassigned} \
            if member_racks else {}
        self.rack_aware = use_rack_aware(member_racks, self.partition_racks)

    def racks_match(self, member: str, tp: TopicPartition) -> bool:
        rack = self.racks[member]
        return rack is None or rack in self.partition_racks.get(tp, ())

    def room(self, member: str) -> int:
        return max(0, self.per + (1 if self.extra > 0 else 0) - self.taken[member])

    def give(self, member: str, tps: List[TopicPartition], out: Assignment) -> None:
        out[member].extend(tps)
        self.taken[member] += len(tps)
        if self.taken[member] > self.per:
            self.extra -= 1
        gone = set(tps)
        self.unassigned = [tp for tp in self.unassigned if tp not in gone]

    def give_ranges(self, may: Callable[[str, TopicPartition], bool], out: Assignment) -> None:
        """Each member in turn takes the first partitions left that ``may``
        allows, up to its room."""
        for member in self.consumers:
            if not self.unassigned:
                return
            tps = [tp for tp in self.unassigned if may(member, tp)][:self.room(member)]
            if tps:
                self.give(member, tps, out)


class RangeAssignor(Assignor):
    """Kafka's ``range``: per topic, contiguous runs; the first
    ``partitions % members`` members (sorted) take one extra partition.
    Rack-aware (KIP-881) as Java's: first the partitions that can go to a
    member of their replicas' racks within each topic's balance (topics with
    the same members and partition count together, partition by partition,
    to keep them co-partitioned), then plain ranges for the rest."""

    name = "range"

    def assign(self, partitions_per_topic: Mapping[str, int],
               members: Mapping[str, MemberSubscription]) -> Assignment:
        return self.assign_partitions(partitions_per_topic, members, {})

    def assign_partitions(self, partitions_per_topic: Mapping[str, int],
                          members: Mapping[str, MemberSubscription],
                          partition_racks: PartitionRacks) -> Assignment:
        out = _empty(members)
        by_topic: Dict[str, List[MemberSubscription]] = collections.defaultdict(list)
        for m in _sorted_members(members):
            for t in set(m.topics):
                by_topic[t].append(m)
        racks = _member_racks(members.values())
        states = [_TopicRanges(t, n, by_topic.get(t, []), racks, partition_racks)
                  for t, n in sorted(partitions_per_topic.items()) if n]
        if any(s.rack_aware for s in states):
            self._rack_matching(states, out)
        for s in states:
            s.give_ranges(lambda member, tp: True, out)
        return {m: sorted(tps) for m, tps in out.items()}

    @staticmethod
    def _rack_matching(states: List[_TopicRanges], out: Assignment) -> None:
        groups: Dict[Tuple[Tuple[str, ...], int], List[_TopicRanges]] = collections.defaultdict(list)
        for s in states:
            groups[(tuple(s.consumers), len(s.partition_racks))].append(s)
        for (consumers, count), group in groups.items():
            if len(group) > 1:
                RangeAssignor._co_partitioned(consumers, count, group, out)
            elif group[0].rack_aware:
                group[0].give_ranges(group[0].racks_match, out)

    @staticmethod
    def _co_partitioned(consumers: Tuple[str, ...], count: int, group: List[_TopicRanges], out: Assignment) -> None:
        """Partition p of every topic of ``group`` goes to the first member
        left that matches the racks of all of them and has room in each."""
        left = list(consumers)
        for p in range(count):
            member = next((c for c in left if all(s.racks_match(c, TopicPartition(s.topic, p)) and s.room(c) > 0
                                                  for s in group)), None)
            if member is None:
                continue
            for s in group:
                s.give(member, [TopicPartition(s.topic, p)], out)
            if not any(s.room(member) > 0 for s in group):
                left.remove(member)
                if not left:
                    return


class RoundRobinAssignor(Assignor):
    """Kafka's ``roundrobin``: partitions sorted by topic and partition,
    dealt in turn to the sorted members subscribed to their topic."""

    name = "roundrobin"

    def assign(self, partitions_per_topic: Mapping[str, int],
               members: Mapping[str, MemberSubscription]) -> Assignment:
        out = _empty(members)
        ordered = _sorted_members(members)
        if not ordered:
            return out
        topics = sorted({t for m in ordered for t in m.topics if partitions_per_topic.get(t)})
        subscribed = {m.member_id: set(m.topics) for m in ordered}
        turn = 0
        for topic in topics:
            for p in range(partitions_per_topic[topic]):
                for _ in range(len(ordered)):
                    m = ordered[turn % len(ordered)]
                    turn += 1
                    if topic in subscribed[m.member_id]:
                        out[m.member_id].append(TopicPartition(topic, p))
                        break
        return out


class _RackInfo:
    """The racks of the sticky assignors (Java's RackInfo): empty unless
    :func:`use_rack_aware` holds for all subscribed partitions."""

    def __init__(self, members: Mapping[str, MemberSubscription], partition_racks: PartitionRacks,
                 partitions_per_topic: Mapping[str, int]) -> None:
        racks = _member_racks(members.values())
        every = {TopicPartition(t, p): partition_racks.get(TopicPartition(t, p), frozenset())
                 for t, n in partitions_per_topic.items() for p in range(n)} if racks else {}
        aware = use_rack_aware(racks.values(), every)
        self.member_racks: Dict[str, str] = racks if aware else {}
        self.partition_racks: Dict[TopicPartition, FrozenSet[str]] = every if aware else {}
        per_rack = collections.Counter(racks.values())
        self._members_in_racks = {tp: sum(per_rack[r] for r in rs) for tp, rs in every.items()}

    def mismatch(self, member: str, tp: TopicPartition) -> bool:
        """The member has a rack and the partition has no replica there."""
        rack = self.member_racks.get(member)
        return rack is not None and rack not in self.partition_racks.get(tp, ())

    def in_rack(self, member: str, tp: TopicPartition) -> bool:
        """The member has a rack and the partition a replica there."""
        rack = self.member_racks.get(member)
        return rack is not None and rack in self.partition_racks.get(tp, ())

    def members_in_racks(self, tp: TopicPartition) -> int:
        """How many members are in the racks of ``tp``'s replicas."""
        return self._members_in_racks.get(tp, 0)

    def next_in_rack(self, tp: TopicPartition, members: Sequence[str], first: int) -> int:
        """The index of the first of ``members`` from ``first`` on (round
        the end) in a rack of ``tp``'s replicas; -1 if none."""
        racks = self.partition_racks.get(tp)
        if not racks:
            return -1
        for i in range(len(members)):
            index = (first + i) % len(members)
            if self.in_rack(members[index], tp):
                return index
        return -1


class _ConstrainedRackAware:
    """Java's sticky assignment when every member subscribes to the same
    topics, rack-aware: each member keeps its in-rack owned partitions up to
    its quota (``floor`` or ``ceil`` of partitions / members, as many
    ``ceil`` as the remainder allows); the rest go round-robin first to
    members in their replicas' racks within the quotas (partitions with the
    fewest members in their racks first), then round-robin to whoever is
    under quota. (Java takes the owners in its hash map's order; kwire in
    member order.)"""

    def __init__(self, partitions_per_topic: Mapping[str, int], members: Mapping[str, MemberSubscription],
                 owners: Mapping[TopicPartition, str], racks: _RackInfo) -> None:
        self.partitions_per_topic = partitions_per_topic
        self.members = members
        self.owners = owners
        self.racks = racks
        total = sum(partitions_per_topic.values())
        self.min_quota, self.expected_over = divmod(total, len(members))
        self.max_quota = self.min_quota + (1 if self.expected_over else 0)
        self.over = 0
        self.assignment: Assignment = _empty(members)
        self.under_min: List[str] = []
        self.exactly_min: List[str] = []

    def build(self) -> Assignment:
        self._keep_owned()
        taken = {tp for tps in self.assignment.values() for tp in tps}
        unassigned = [TopicPartition(t, p) for t in sorted(self.partitions_per_topic)
                      for p in range(self.partitions_per_topic[t]) if TopicPartition(t, p) not in taken]
        self.under_min.sort()
        self.exactly_min.sort()
        unassigned.sort(key=self.racks.members_in_racks)
        unassigned = self._in_rack_round_robin(unassigned)
        self._round_robin(unassigned)
        return self.assignment

    def _reach_over(self) -> None:
        self.over += 1
        if self.over == self.expected_over:
            self.exactly_min.clear()

    def _keep_owned(self) -> None:
        owned: Dict[str, List[TopicPartition]] = collections.defaultdict(list)
        for tp, member in self.owners.items():
            if not self.racks.mismatch(member, tp):
                owned[member].append(tp)
        for m in _sorted_members(self.members):
            mine = sorted(owned.get(m.member_id, ()), key=lambda tp: (tp.partition, tp.topic))
            keep = self.assignment[m.member_id]
            if len(mine) < self.min_quota:
                keep.extend(mine)
                self.under_min.append(m.member_id)
            elif len(mine) >= self.max_quota and self.over < self.expected_over:
                self._reach_over()
                keep.extend(mine[:self.max_quota])
            else:
                keep.extend(mine[:self.min_quota])
                if self.over < self.expected_over:
                    self.exactly_min.append(m.member_id)

    def _in_rack_round_robin(self, unassigned: List[TopicPartition]) -> List[TopicPartition]:
        """Give what can go in-rack within the quotas; the partitions left."""
        left: List[TopicPartition] = []
        turn = 0
        for tp in unassigned:
            member = None
            index = self.racks.next_in_rack(tp, self.under_min, turn)
            if index >= 0:
                member = self.under_min[index]
                count = len(self.assignment[member]) + 1
                if count >= self.min_quota:
                    self.under_min.remove(member)
                    if count < self.max_quota and self.over < self.expected_over:
                        self.exactly_min.append(member)
                else:
                    index += 1
                turn = index % len(self.under_min) if self.under_min else 0
            elif self.exactly_min:
                index = self.racks.next_in_rack(tp, self.exactly_min, 0)
                if index >= 0:
                    member = self.exactly_min[index]
                    if len(self.assignment[member]) + 1 == self.max_quota:
                        del self.exactly_min[index]
                        self._reach_over()
            if member is None:
                left.append(tp)
            else:
                self.assignment[member].append(tp)
        return left

    def _round_robin(self, unassigned: List[TopicPartition]) -> None:
        pos = 0
        for tp in unassigned:
            if pos < len(self.under_min):
                member = self.under_min[pos]
                pos += 1
            elif self.under_min:
                member, pos = self.under_min[0], 1
            elif self.exactly_min:
                member = self.exactly_min.pop(0)
            else:
                raise KwireError(f"sticky assignment: no member left under quota for {tp.topic}[{tp.partition}]")
            self.assignment[member].append(tp)
            count = len(self.assignment[member])
            if count == self.min_quota and pos and self.under_min[pos - 1] == member:
                pos -= 1
                del self.under_min[pos]
                self.exactly_min.append(member)
            elif count == self.max_quota:
                self.over += 1


class _Movements:
    """The partition moves of one sticky assignment, by topic and (from,
    to) pair (Java's PartitionMovements): a move that reverses an earlier
    one of the same topic moves that earlier partition back instead, so a
    rebalance does not swap partitions of a topic between two members."""

    def __init__(self) -> None:
        self.by_topic: Dict[str, Dict[Tuple[str, str], Set[TopicPartition]]] = {}
        self.moved: Dict[TopicPartition, Tuple[str, str]] = {}

    def _drop(self, tp: TopicPartition) -> Tuple[str, str]:
        pair = self.moved.pop(tp)
        pairs = self.by_topic[tp.topic]
        pairs[pair].discard(tp)
        if not pairs[pair]:
            del pairs[pair]
        if not pairs:
            del self.by_topic[tp.topic]
        return pair

    def _add(self, tp: TopicPartition, pair: Tuple[str, str]) -> None:
        self.moved[tp] = pair
        self.by_topic.setdefault(tp.topic, {}).setdefault(pair, set()).add(tp)

    def move(self, tp: TopicPartition, old: str, new: str) -> None:
        if tp in self.moved:
            src = self._drop(tp)[0]
            if src != new:
                self._add(tp, (src, new))
        else:
            self._add(tp, (old, new))

    def actual(self, tp: TopicPartition, old: str, new: str) -> TopicPartition:
        """The partition to move for moving ``tp`` from ``old`` to ``new``
        (where Java takes any of a set, kwire takes the lowest)."""
        pairs = self.by_topic.get(tp.topic)
        if pairs is None:
            return tp
        if tp in self.moved:
            old = self.moved[tp][0]
        back = pairs.get((new, old))
        return min(back) if back else tp


class _GeneralRackAware:
    """Java's sticky assignment for members with different subscriptions,
    rack-aware: owned partitions are kept where their owner is subscribed
    and in their racks; the rest go, topics with the fewest members first,
    each to the least loaded member not in another rack, then to the least
    loaded member; then partitions move towards balance (a partition back
    to its previous owner when that helps, else to the least loaded member
    when some member is lighter by two or more), kept only if the balance
    got better (or the group started empty)."""

    def __init__(self, partitions_per_topic: Mapping[str, int], members: Mapping[str, MemberSubscription],
                 owners: Mapping[TopicPartition, str], racks: _RackInfo,
                 generation: Callable[[MemberSubscription], int]) -> None:
        self.counts = dict(partitions_per_topic)
        self.members = members
        self.racks = racks
        self.generation = generation
        self.topic_members: Dict[str, List[str]] = {t: [] for t in self.counts}
        self.member_topics: Dict[str, List[str]] = {}
        for mid, m in members.items():
            mine = [t for t in m.topics if t in self.counts]
            self.member_topics[mid] = mine
            for t in mine:
                self.topic_members[t].append(mid)
        self.current: Assignment = _empty(members)
        for tp in sorted(owners):
            self.current[owners[tp]].append(tp)
        self.owner: Dict[TopicPartition, str] = dict(owners)
        topics = sorted(self.counts, key=lambda t: (len(self.topic_members[t]), t))
        self.all_partitions = [TopicPartition(t, p) for t in topics for p in range(self.counts[t])]
        self.total = sum(self.counts.values())
        self.moves = _Movements()
        self.revocation_required = False

    def _load(self, member: str) -> Tuple[int, str]:
        return len(self.current[member]), member

    def _lightest(self, topic: str, fits: Callable[[str], bool] = lambda m: True) -> Optional[str]:
        takers = [m for m in self.current if topic in self.member_topics[m] and fits(m)]
        return min(takers, key=self._load) if takers else None

    def build(self) -> Assignment:
        previous = self._previous()
        kept = self._keep_owned()
        unassigned = [tp for tp in self.all_partitions if tp not in kept]
        initializing = max(len(tps) for tps in self.current.values()) == 0
        left = []
        for tp in unassigned:
            if not self._give(tp, lambda m, tp=tp: not self.racks.mismatch(m, tp)):
                left.append(tp)
        for tp in left:
            self._give(tp)
        self._balance(previous, unassigned, initializing)
        return self.current

    def _previous(self) -> Dict[TopicPartition, Tuple[str, int]]:
        """Each partition's owner in an older generation than the newest (and that generation)."""
        newest = max((self.generation(m) for m in self.members.values()), default=-1)
        previous: Dict[TopicPartition, Tuple[str, int]] = {}
        for m in self.members.values():
            gen = self.generation(m)
            if gen < newest:
                for tp in m.owned_partitions:
                    if tp not in previous or gen > previous[tp][1]:
                        previous[tp] = (m.member_id, gen)
        return previous

    def _keep_owned(self) -> Set[TopicPartition]:
        """Owned partitions the owner may keep; the others (out of its rack,
        or of a topic it no longer subscribes to) mean a revocation."""
        kept: Set[TopicPartition] = set()
        self.revocation_required = any(tp.topic in self.counts and tp.topic not in self.member_topics[m.member_id]
                                       for m in self.members.values() for tp in m.owned_partitions)
        for member, tps in self.current.items():
            for tp in list(tps):
                if self.racks.mismatch(member, tp):
                    tps.remove(tp)
                    self.revocation_required = True
                else:
                    kept.add(tp)
        return kept

    def _give(self, tp: TopicPartition, fits: Callable[[str], bool] = lambda m: True) -> bool:
        member = self._lightest(tp.topic, fits)
        if member is None:
            return False
        self.current[member].append(tp)
        self.owner[tp] = member
        return True

    def _max_size(self, member: str) -> int:
        topics = self.member_topics[member]
        return self.total if len(topics) == len(self.counts) else sum(self.counts[t] for t in topics)

    def _balance(self, previous: Dict[TopicPartition, Tuple[str, int]], unassigned: List[TopicPartition],
                 initializing: bool) -> None:
        movable = {t for t, ms in self.topic_members.items() if len(ms) >= 2}
        partitions = [tp for tp in self.all_partitions if tp.topic in movable]
        unassigned = [tp for tp in unassigned if tp.topic in movable]
        fixed = {m: self.current.pop(m) for m in list(self.current)
                 if len(self.current[m]) >= self._max_size(m) and not any(tp.topic in movable for tp in self.current[m])}
        before = {m: list(tps) for m, tps in self.current.items()}
        owners_before = dict(self.owner)
        if not self.revocation_required:
            self._reassign(unassigned, previous)
        moved = self._reassign(partitions, previous)
        if not initializing and moved and _spread_score(self.current) >= _spread_score(before):
            self.current, self.owner = before, owners_before
        self.current.update(fixed)

    def _balanced(self) -> bool:
        if not self.current:
            return True
        sizes = [len(tps) for tps in self.current.values()]
        if min(sizes) >= max(sizes) - 1:
            return True
        for member in sorted(self.current, key=self._load):
            size = len(self.current[member])
            if size == self._max_size(member):
                continue
            mine = set(self.current[member])
            for t in self.member_topics[member]:
                for p in range(self.counts[t]):
                    tp = TopicPartition(t, p)
                    other = self.owner.get(tp)
                    if tp not in mine and other in self.current and size + 1 < len(self.current[other]):
                        return False
        return True

    def _reassign(self, partitions: List[TopicPartition], previous: Dict[TopicPartition, Tuple[str, int]]) -> bool:
        performed = False
        modified = True
        while modified:
            modified = False
            for tp in partitions:
                if self._balanced():
                    break
                member = self.owner[tp]
                size = len(self.current[member])
                prev = previous.get(tp)
                if prev is not None and prev[0] in self.current and size > len(self.current[prev[0]]) + 1:
                    self._move(tp, prev[0])
                    performed = modified = True
                    continue
                # Java looks for a lighter member in the partition's rack first, then any:
                # either way the partition goes to the lightest member
                if any(o in self.current and size > len(self.current[o]) + 1 for o in self.topic_members[tp.topic]):
                    self._move(tp, self._lightest(tp.topic))        # type: ignore[arg-type]
                    performed = modified = True
        return performed

    def _move(self, tp: TopicPartition, new: str) -> None:
        tp = self.moves.actual(tp, self.owner[tp], new)
        old = self.owner[tp]
        self.moves.move(tp, old, new)
        self.current[old].remove(tp)
        self.current[new].append(tp)
        self.owner[tp] = new


def _spread_score(assignment: Assignment) -> int:
    """Java's balance score: the sum of the load differences of every pair of members."""
    sizes = [len(tps) for tps in assignment.values()]
    return sum(abs(a - b) for i, a in enumerate(sizes) for b in sizes[i + 1:])


_GENERATION = struct.Struct(">i")


class CooperativeStickyAssignor(Assignor):
    """Kafka's ``cooperative-sticky`` (KIP-429): balanced, sticky, and
    incremental. Its subscription user data is the member's generation as an
    int32, as Java's writes it (for peers reading subscriptions older than
    version 2, which carry no generation field)."""

    name = "cooperative-sticky"
    protocols = (COOPERATIVE, EAGER)

    def subscription_user_data(self, topics: Sequence[str], owned: Sequence[TopicPartition],
                               generation: int) -> Optional[bytes]:
        return _GENERATION.pack(generation)

    @staticmethod
    def member_generation(m: MemberSubscription) -> int:
        """The generation a member's owned partitions are from: the
        subscription's field (v2+), else Java's user data."""
        if m.generation >= 0:
            return m.generation
        if m.user_data is not None and len(m.user_data) == 4:
            return _GENERATION.unpack(bytes(m.user_data))[0]
        return -1

    def assign(self, partitions_per_topic: Mapping[str, int],
               members: Mapping[str, MemberSubscription]) -> Assignment:
        return self.assign_partitions(partitions_per_topic, members, {})

    def assign_partitions(self, partitions_per_topic: Mapping[str, int],
                          members: Mapping[str, MemberSubscription],
                          partition_racks: PartitionRacks) -> Assignment:
        subscribed = {t for m in members.values() for t in m.topics}
        partitions_per_topic = {t: n for t, n in partitions_per_topic.items() if t in subscribed and n > 0}
        owners = self._valid_owners(partitions_per_topic, members)
        racks = _RackInfo(members, partition_racks, partitions_per_topic)
        if not racks.member_racks:
            current = self._general(partitions_per_topic, members, owners)
        elif len({frozenset(m.topics) for m in members.values()}) == 1:
            current = _ConstrainedRackAware(partitions_per_topic, members, owners, racks).build()
        else:
            current = _GeneralRackAware(partitions_per_topic, members, owners, racks, self.member_generation).build()
        # KIP-429: a partition changing owner is not given away in the round that revokes it
        out = _empty(members)
        for member, tps in current.items():
            out[member] = sorted(tp for tp in tps if owners.get(tp, member) == member)
        return out

    def _general(self, partitions_per_topic: Mapping[str, int], members: Mapping[str, MemberSubscription],
                 owners: Mapping[TopicPartition, str]) -> Assignment:
        """Keep owned partitions, place the rest where load is lowest, then balance."""
        current: Dict[str, List[TopicPartition]] = _empty(members)
        for tp in sorted(owners):
            current[owners[tp]].append(tp)
        eligible = self._eligible(partitions_per_topic, members)
        order = {m.member_id: i for i, m in enumerate(_sorted_members(members))}
        taken = {tp for tps in current.values() for tp in tps}
        # partitions with the fewest possible consumers first, as Java does
        unassigned = sorted((tp for tp in eligible if tp not in taken), key=lambda tp: (len(eligible[tp]), tp))
        for tp in unassigned:
            if eligible[tp]:
                best = min(eligible[tp], key=lambda m: (len(current[m]), order[m]))
                current[best].append(tp)
        self._balance(current, eligible, order)
        return current

    def _valid_owners(self, partitions_per_topic: Mapping[str, int],
                      members: Mapping[str, MemberSubscription]) -> Dict[TopicPartition, str]:
        """Each partition's owner as the members claim it: the claim of the
        highest generation wins; two claims in one generation void both;
        claims of partitions that no longer exist or that the member no
        longer subscribes to are dropped."""
        claims: Dict[TopicPartition, List[Tuple[int, str]]] = collections.defaultdict(list)
        for m in members.values():
            gen = self.member_generation(m)
            topics = set(m.topics)
            for tp in set(m.owned_partitions):
                if tp.topic in topics and 0 <= tp.partition < partitions_per_topic.get(tp.topic, 0):
                    claims[tp].append((gen, m.member_id))
        owners = {}
        for tp, cs in claims.items():
            top = max(g for g, _ in cs)
            best = [mid for g, mid in cs if g == top]
            if len(best) == 1:
                owners[tp] = best[0]
            else:
                log.warning("%s[%s] is claimed by %d members in generation %d; reassigning it",
                            tp.topic, tp.partition, len(best), top)
        return owners

    @staticmethod
    def _eligible(partitions_per_topic: Mapping[str, int],
                  members: Mapping[str, MemberSubscription]) -> Dict[TopicPartition, List[str]]:
        by_topic: Dict[str, List[str]] = collections.defaultdict(list)
        for m in members.values():
            for t in set(m.topics):
                by_topic[t].append(m.member_id)
        return {TopicPartition(t, p): ms for t, ms in by_topic.items()
                for p in range(partitions_per_topic.get(t, 0))}

    @staticmethod
    def _balance(current: Dict[str, List[TopicPartition]], eligible: Mapping[TopicPartition, List[str]],
                 order: Mapping[str, int]) -> None:
        """Move partitions from the most to the least loaded member that can
        take them until no move narrows the spread; each move lowers the sum
        of squared loads, so this ends."""
        while True:
            loads = sorted(current, key=lambda m: (-len(current[m]), order[m]))
            moved = False
            for giver in loads:
                for tp in sorted(current[giver], reverse=True):
                    takers = [m for m in eligible.get(tp, ()) if len(current[m]) + 1 < len(current[giver])]
                    if takers:
                        taker = min(takers, key=lambda m: (len(current[m]), order[m]))
                        current[giver].remove(tp)
                        current[taker].append(tp)
                        moved = True
                        break
                if moved:
                    break
            if not moved:
                return


ASSIGNORS = {a.name: a for a in (RangeAssignor, RoundRobinAssignor, CooperativeStickyAssignor)}
DEFAULT = ("range", "cooperative-sticky")      # Java's default since Kafka 3.0

# the class names Java and librdkafka configurations use
_ALIASES = {
    "org.apache.kafka.clients.consumer.rangeassignor": "range",
    "org.apache.kafka.clients.consumer.roundrobinassignor": "roundrobin",
    "org.apache.kafka.clients.consumer.cooperativestickyassignor": "cooperative-sticky",
}


def assignors_from_config(value: object) -> List[Assignor]:
    """``partition_assignment_strategy``: None (Java's default: range then
    cooperative-sticky), a comma-separated string of names, or a list of
    names, :class:`Assignor` classes or instances; in preference order."""
    if value is None:
        items: Iterable[object] = DEFAULT
    elif isinstance(value, str):
        items = [s.strip() for s in value.split(",") if s.strip()]
    elif isinstance(value, (Assignor, type)):
        items = [value]
    else:
        items = list(value)  # type: ignore[call-overload]
    out: List[Assignor] = []
    for item in items:
        if isinstance(item, Assignor):
            out.append(item)
        elif isinstance(item, type) and issubclass(item, Assignor):
            out.append(item())
        elif isinstance(item, str):
            key = item.strip().lower()
            cls = ASSIGNORS.get(_ALIASES.get(key, key))
            if cls is None:
                raise KwireError(f"unknown partition assignment strategy {item!r} "
                                 f"(kwire has {', '.join(sorted(ASSIGNORS))})")
            out.append(cls())
        else:
            raise KwireError(f"partition_assignment_strategy: {item!r} is not an assignor name or Assignor")
    if not out:
        raise KwireError("partition_assignment_strategy names no assignor")
    names: Set[str] = set()
    for a in out:
        if a.name in names:
            raise KwireError(f"assignor {a.name!r} given twice")
        names.add(a.name)
    return out
