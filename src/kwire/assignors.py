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
"""

from __future__ import annotations

import abc
import collections
import logging
import struct
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

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
]

log = logging.getLogger(__name__)

EAGER = "eager"
COOPERATIVE = "cooperative"

Assignment = Dict[str, List[TopicPartition]]


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

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def _empty(members: Mapping[str, MemberSubscription]) -> Assignment:
    return {m: [] for m in members}


class RangeAssignor(Assignor):
    """Kafka's ``range``: per topic, contiguous runs; the first
    ``partitions % members`` members (sorted) take one extra partition."""

    name = "range"

    def assign(self, partitions_per_topic: Mapping[str, int],
               members: Mapping[str, MemberSubscription]) -> Assignment:
        out = _empty(members)
        by_topic: Dict[str, List[MemberSubscription]] = collections.defaultdict(list)
        for m in _sorted_members(members):
            for t in set(m.topics):
                by_topic[t].append(m)
        for topic in sorted(by_topic):
            n = partitions_per_topic.get(topic)
            if not n:
                continue
            consumers = by_topic[topic]
            per, extra = divmod(n, len(consumers))
            start = 0
            for i, m in enumerate(consumers):
                count = per + (1 if i < extra else 0)
                out[m.member_id].extend(TopicPartition(topic, p) for p in range(start, start + count))
                start += count
        return out


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
        owners = self._valid_owners(partitions_per_topic, members)
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
        # KIP-429: a partition changing owner is not given away in the round that revokes it
        out = _empty(members)
        for member, tps in current.items():
            out[member] = sorted(tp for tp in tps if owners.get(tp, member) == member)
        return out

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
