"""The seam between the group coordinator and its membership protocol
(:mod:`kwire.membership`), without a broker: the classic membership
implements every method of :class:`Membership` and the coordinator every
member of :class:`MembershipHost`, with the signatures they write down;
and the classic membership's rebalance steps (eager and cooperative) are
what the coordinator hands over."""

from __future__ import annotations

import inspect
import threading
import time
from typing import Any, Optional, Set

import pytest

from kwire.classic import ClassicMembership
from kwire.config import CONSUMER, resolve
from kwire.consumer import TopicPartition as TP
from kwire.errors import KwireError
from kwire.future import Future
from kwire.group import GroupCoordinator
from kwire.membership import JOINING, STABLE, UNJOINED, AssignmentChange, Membership, MembershipHost
from kwire.protocol.api_keys import ApiKey


def _members(proto: type) -> Set[str]:
    own = {n for n in vars(proto) if not n.startswith("_")}
    return own | set(getattr(proto, "__annotations__", {}))


def _check_implements(proto: type, cls: type) -> None:
    for name in sorted(_members(proto)):
        assert hasattr(cls, name) or name in getattr(proto, "__annotations__", {}), f"{cls.__name__}.{name}"
        want = vars(proto).get(name)
        if not inspect.isfunction(want):
            continue
        got = getattr(cls, name)
        assert inspect.isfunction(got), f"{cls.__name__}.{name} is not a method"
        wanted, have = inspect.signature(want).parameters, inspect.signature(got).parameters
        assert list(have)[:len(wanted)] == list(wanted), f"{cls.__name__}.{name}{inspect.signature(got)}"
        for extra in list(have)[len(wanted):]:
            assert have[extra].default is not inspect.Parameter.empty, f"{cls.__name__}.{name}: {extra}"


def test_classic_membership_implements_the_membership_protocol():
    _check_implements(Membership, ClassicMembership)


def test_group_coordinator_is_a_membership_host():
    _check_implements(MembershipHost, GroupCoordinator)
    for name in ("cfg", "group_id", "group_instance_id"):
        assert name in MembershipHost.__annotations__


class _Host:
    """A coordinator as the membership sees it, with nothing sent."""

    def __init__(self, **cfg: Any) -> None:
        self.cfg = resolve(CONSUMER, {"bootstrap_servers": "localhost:9092", "group_id": "g"}, cfg)
        self.group_id = "g"
        self.group_instance_id: Optional[str] = None
        self.coordinator: Optional[int] = None
        self.owned: Set[TP] = set()
        self.pattern = None
        self.topics = {"t"}
        self.lost = 0
        self.fatal: Optional[BaseException] = None
        self.sent: list = []

    def subscription(self) -> Set[str]:
        return set(self.topics)

    def match_topics(self, topics: Any) -> bool:
        return False

    def submit(self, node: Any, make: Any, timeout: Any = None, response_timeout: Any = None) -> Future:
        self.sent.append((node, make))
        return Future()

    def metadata(self, topics: Any) -> Future:
        return self.submit(None, topics)

    def lookup_coordinator(self) -> Future:
        return Future()

    def coordinator_dead(self, node: Any) -> None:
        self.coordinator = None

    def lose_partitions(self) -> None:
        if self.owned:
            self.lost += 1

    def set_fatal(self, error: BaseException) -> None:
        self.fatal = error

    def wake_consumer(self, _done: Any = None) -> None:
        pass


def _membership(strategy: str) -> tuple:
    host = _Host(partition_assignment_strategy=strategy)
    return host, ClassicMembership(host, threading.RLock())


def test_classic_checks_its_options_when_made():
    with pytest.raises(KwireError, match="heartbeat_interval_ms"):
        ClassicMembership(_Host(heartbeat_interval_ms=3000, session_timeout_ms=3000), threading.RLock())


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_classic_rebalance_steps(strategy):
    host, m = _membership(strategy)
    cooperative = strategy == "cooperative-sticky"
    assert m.state == UNJOINED and m.next_change() is None
    a, b, c = TP("t", 0), TP("t", 1), TP("t", 2)
    # subscribing: a rejoin, prepared by a revocation (nothing owned yet), then joining
    m.subscription_changed()
    change = m.next_change()
    assert change == AssignmentChange(set(), None)
    assert m.next_change() == change     # until it is handed back
    m.handed_back(change)
    assert m.state == JOINING and m.next_change() is None
    # a SyncGroup's assignment: taken in
    m.generation, m.member_id, m.state, m._pending_assignment = 1, "m", STABLE, (1, [a, b])
    change = m.next_change()
    assert change == AssignmentChange(set(), {a, b})
    m.handed_back(change)
    host.owned = {a, b}
    assert m.next_change() is None
    # the group rebalances: eager members revoke everything before joining, cooperative ones nothing
    m.rejoin("the group is rebalancing")
    change = m.next_change()
    assert change == AssignmentChange(set() if cooperative else {a, b}, None)
    m.handed_back(change)
    host.owned -= change.revoked
    assert m.state == JOINING and m.next_change() is None
    # the next assignment moves b away and adds c: cooperative members revoke b, take c, rejoin once more
    m.generation, m.state, m._pending_assignment = 2, STABLE, (2, [a, c])
    change = m.next_change()
    assert change == (AssignmentChange({b}, {c}) if cooperative else AssignmentChange(set(), {a, c}))
    m.handed_back(change)
    follow_up = m.next_change()
    assert (follow_up is not None) == cooperative
    # fenced: the partitions are lost, the generation is void, and the member rejoins
    host.owned = {a, c}
    m.reset("heartbeat: UNKNOWN_MEMBER_ID", member_unknown=True)
    assert (host.lost, m.generation, m.member_id, m.state) == (1, -1, "", UNJOINED)
    # leaving: nothing lost (the coordinator handed the partitions back), no rejoin, no LeaveGroup without a coordinator
    m.leave("the consumer is closing", 0.0)
    assert (host.lost, m.state, m.next_change(), host.sent) == (1, UNJOINED, None, [])


@pytest.mark.parametrize("given, sent", [({}, 300000), ({"max_poll_interval_ms": 45000}, 45000),
                                         ({"rebalance_timeout_ms": 12000}, 12000)])
def test_the_rebalance_timeout_a_member_sends(given, sent):
    """Java's consumer sends max_poll_interval_ms; aiokafka's
    rebalance_timeout_ms, when given, replaces it."""
    host = _Host(**given)
    host.coordinator = 1
    m = ClassicMembership(host, threading.RLock())
    m.subscription_changed()
    m.handed_back(m.next_change())
    m.drive(time.monotonic())
    joins = [make({ApiKey.JOIN_GROUP: 9}) for _, make in host.sent]
    assert [j.rebalance_timeout_ms for j in joins if hasattr(j, "rebalance_timeout_ms")] == [sent]
