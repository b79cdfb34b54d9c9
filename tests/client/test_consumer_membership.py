"""KIP-848's consumer protocol membership (:mod:`kwire.consumer_membership`)
without a broker: what each heartbeat carries (the full state when joining
and after errors, only what changed otherwise), the reconciliation steps it
hands the coordinator, the errors that fence, refind the coordinator or are
fatal, leaving; and the options each group protocol refuses."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any, List, Optional

import pytest

from kwire import protocol
from kwire.config import ConfigError
from kwire.consumer import Consumer
from kwire.consumer import TopicPartition as TP
from kwire.consumer_membership import ConsumerMembership
from kwire.future import Future
from kwire.group import GroupCoordinator
from kwire.membership import JOINING, STABLE, UNJOINED, AssignmentChange, Membership
from kwire.protocol.api_keys import ApiKey, ErrorCode

from .test_membership import _check_implements, _Host

T_ID, U_ID = uuid.UUID(int=1), uuid.UUID(int=2)
REQ = protocol.message("ConsumerGroupHeartbeatRequest")
RESP = protocol.message("ConsumerGroupHeartbeatResponse")
VERSIONS = {ApiKey.CONSUMER_GROUP_HEARTBEAT: 1}


class Host(_Host):
    """The fake coordinator, keeping each request's future to answer it."""

    def __init__(self, **cfg: Any) -> None:
        super().__init__(group_protocol="consumer", **cfg)
        self.coordinator = 1
        self.futures: List[Future] = []

    def submit(self, node: Any, make: Any, timeout: Any = None, response_timeout: Any = None) -> Future:
        fut = super().submit(node, make, timeout, response_timeout)
        self.futures.append(fut)
        return fut


def _made() -> tuple:
    host = Host(group_remote_assignor="uniform")
    return host, ConsumerMembership(host, threading.RLock())


def _beat(host: Host, m: ConsumerMembership) -> Any:
    """Drive until a heartbeat goes; the request it carries."""
    m._next_heartbeat = 0.0
    n = len(host.sent)
    m.drive(time.monotonic())
    assert len(host.sent) == n + 1, "no heartbeat sent"
    return host.sent[-1][1](VERSIONS)


def _answer(host: Host, epoch: int = 1, assignment: Optional[dict] = None, error: int = 0) -> None:
    a = None if assignment is None else RESP.Assignment(topic_partitions=[
        RESP.TopicPartitions(topic_id=t, partitions=ps) for t, ps in assignment.items()])
    host.futures[-1].set_result(RESP(error_code=error, member_id=None, member_epoch=epoch,
                                     heartbeat_interval_ms=500, assignment=a))


def _metadata(host: Host, m: ConsumerMembership, names: dict) -> None:
    m.drive(time.monotonic())
    node, topics = host.sent[-1]
    assert node is None, "no metadata request for the assignment's topic ids"
    cls = protocol.message("MetadataResponse")
    host.futures[-1].set_result(cls(topics=[cls.MetadataResponseTopic(name=n, topic_id=t, error_code=0)
                                            for t, n in names.items()]))


def _joined(host: Host, m: ConsumerMembership, epoch: int, hand_back: bool = True) -> AssignmentChange:
    """Join, get t-0 with ``epoch``, resolve t; hand the change back (the
    member owns t-0 then) unless told not to."""
    m.subscription_changed()
    _beat(host, m)
    _answer(host, epoch=epoch, assignment={T_ID: [0]})
    _metadata(host, m, {T_ID: "t"})
    change = m.next_change()
    assert change == AssignmentChange(set(), {TP("t", 0)})
    if hand_back:
        m.handed_back(change)
        host.owned = {TP("t", 0)}
    return change


def test_consumer_membership_implements_the_membership_protocol():
    _check_implements(Membership, ConsumerMembership)


def test_join_reconcile_acknowledge_and_send_only_what_changed():
    host, m = _made()
    member = m.member_id
    assert len(member) == 22 and m.state == UNJOINED        # a client-made id, Kafka's base64 UUID
    m.subscription_changed()
    assert m.state == JOINING
    join = _beat(host, m)
    assert (join.member_id, join.member_epoch, join.subscribed_topic_names, join.rebalance_timeout_ms,
            join.server_assignor, join.topic_partitions, join.subscribed_topic_regex) == (
        member, 0, ["t"], 300000, "uniform", [], None)
    _answer(host, epoch=3, assignment={T_ID: [0, 1]})
    assert (m.state, m.generation, m.member_id) == (STABLE, 3, member)
    assert m.next_change() is None                           # the topic id is not resolved yet
    _metadata(host, m, {T_ID: "t"})
    change = m.next_change()
    assert change == AssignmentChange(set(), {TP("t", 0), TP("t", 1)})
    # not acknowledged before it is handed back: nothing changed, so only the epoch goes
    hb = _beat(host, m)
    assert (hb.member_epoch, hb.subscribed_topic_names, hb.rebalance_timeout_ms, hb.server_assignor,
            hb.topic_partitions) == (3, None, -1, None, None)
    _answer(host, epoch=3)
    m.handed_back(change)
    host.owned = {TP("t", 0), TP("t", 1)}
    assert m.next_change() is None
    ack = _beat(host, m)
    assert [(t.topic_id, t.partitions) for t in ack.topic_partitions] == [(T_ID, [0, 1])]
    _answer(host, epoch=3)
    # a partition moves away, another comes: revoked first, in one step with the added one
    assert _beat(host, m).topic_partitions is None
    _answer(host, epoch=4, assignment={T_ID: [0, 2]})
    change = m.next_change()
    assert change == AssignmentChange({TP("t", 1)}, {TP("t", 2)})
    assert m.next_change() == change                         # until handed back
    m.handed_back(change)
    host.owned = {TP("t", 0), TP("t", 2)}
    assert [(t.topic_id, t.partitions) for t in _beat(host, m).topic_partitions] == [(T_ID, [0, 2])]
    # the subscription changes: the new names go alone
    _answer(host, epoch=4)
    host.topics = {"t", "u"}
    m.subscription_changed()
    hb = _beat(host, m)
    assert (hb.subscribed_topic_names, hb.topic_partitions) == (["t", "u"], None)


def test_an_assignment_equal_to_what_is_owned_is_acknowledged_without_the_listener():
    host, m = _made()
    _joined(host, m, 1)
    _beat(host, m)
    _answer(host, epoch=2, assignment={T_ID: [0], U_ID: [0]})      # u's id is unknown to the metadata
    _metadata(host, m, {T_ID: "t"})
    assert m.next_change() is None                           # t unchanged, u waits for its name


def test_fenced_or_unknown_member_loses_its_partitions_and_rejoins_with_epoch_0():
    for code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
        host, m = _made()
        _joined(host, m, 5)
        member = m.member_id
        _beat(host, m)
        _answer(host, epoch=5, error=code)
        assert (host.lost, m.state, m.generation, m.member_id) == (1, JOINING, -1, member)
        join = _beat(host, m)
        assert (join.member_epoch, join.topic_partitions, join.subscribed_topic_names) == (0, [], ["t"])


def test_a_change_handed_back_after_a_fence_is_lost():
    host, m = _made()
    change = _joined(host, m, 1, hand_back=False)
    with m._lock:
        m.reset("heartbeat: FENCED_MEMBER_EPOCH")
    m.handed_back(change)                # the coordinator takes t-0 in right after this
    host.owned = {TP("t", 0)}
    assert m.next_change() is None and host.lost == 1       # and at the next poll it is reported lost


@pytest.mark.parametrize("code,says", [
    (ErrorCode.UNSUPPORTED_ASSIGNOR, "uniform"),
    (ErrorCode.GROUP_MAX_SIZE_REACHED, "maximum size"),
    (ErrorCode.UNRELEASED_INSTANCE_ID, "must leave first"),
    (ErrorCode.FENCED_INSTANCE_ID, "in use"),
    (ErrorCode.INVALID_REQUEST, "invalid"),
    (ErrorCode.GROUP_AUTHORIZATION_FAILED, "uthorization"),
])
def test_fatal_heartbeat_errors(code, says):
    host, m = _made()
    m.subscription_changed()
    _beat(host, m)
    _answer(host, epoch=0, error=code)
    assert m.state == UNJOINED and host.fatal is not None and says in str(host.fatal)
    m._next_heartbeat = 0.0
    n = len(host.sent)
    m.drive(time.monotonic())
    assert len(host.sent) == n                               # no more heartbeats


def test_coordinator_errors_find_it_again_and_send_the_full_state():
    for code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
        host, m = _made()
        m.subscription_changed()
        _beat(host, m)
        _answer(host, epoch=2)
        _beat(host, m)
        _answer(host, epoch=2, error=code)
        assert host.coordinator is None and host.fatal is None and m.state == STABLE
        host.coordinator = 1
        hb = _beat(host, m)
        assert (hb.member_epoch, hb.subscribed_topic_names, hb.rebalance_timeout_ms) == (2, ["t"], 300000)
    host, m = _made()
    m.subscription_changed()
    _beat(host, m)
    _answer(host, epoch=0, error=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)    # retried after the backoff
    assert host.coordinator == 1 and host.fatal is None and m.state == JOINING
    assert m._next_heartbeat > time.monotonic()


@pytest.mark.parametrize("instance,epoch", [(None, -1), ("static-1", -2)])
def test_leaving_sends_epoch_minus_one_or_minus_two_for_a_static_member(instance, epoch):
    host, m = _made()
    m.group_instance_id = host.group_instance_id = instance
    m.subscription_changed()
    _beat(host, m)
    _answer(host, epoch=4)
    m.leave("the consumer is closing", time.monotonic())
    leave = host.sent[-1][1](VERSIONS)
    assert (leave.member_epoch, leave.member_id, leave.instance_id, m.state, m.generation) == (
        epoch, m.member_id, instance, UNJOINED, -1)
    m._next_heartbeat = 0.0
    n = len(host.sent)
    m.drive(time.monotonic())
    assert len(host.sent) == n


def test_no_poll_within_max_poll_interval_leaves_and_the_next_poll_rejoins():
    host, m = _made()
    m.subscription_changed()
    _beat(host, m)
    _answer(host, epoch=4, assignment={T_ID: [0]})
    host.owned = {TP("t", 0)}
    m._last_poll = time.monotonic() - 301
    m.drive(time.monotonic())
    assert host.sent[-1][1](VERSIONS).member_epoch == -1 and host.lost == 1 and m.state == UNJOINED
    m.on_poll()
    assert m.state == JOINING and _beat(host, m).member_epoch == 0


def test_a_pattern_goes_as_a_regex_from_v1():
    import re

    host, m = _made()
    host.pattern = re.compile("t.*")
    m.subscription_changed()
    hb = _beat(host, m)
    assert (hb.subscribed_topic_regex, hb.subscribed_topic_names) == ("t.*", None)
    with pytest.raises(Exception, match="v1"):
        host.sent[-1][1]({ApiKey.CONSUMER_GROUP_HEARTBEAT: 0})


def test_group_protocol_options_refused_as_kafka_does():
    base = {"bootstrap_servers": "localhost:9092", "group_id": "g"}
    for name, value in (("partition_assignment_strategy", "range"), ("session_timeout_ms", 10000),
                        ("heartbeat.interval.ms", 1000)):
        with pytest.raises(ConfigError, match="group_protocol='consumer'"):
            Consumer(base, group_protocol="consumer", **{name.replace(".", "_"): value})
    with pytest.raises(ConfigError, match="group_protocol='classic'"):
        Consumer(base, group_remote_assignor="range")
    with pytest.raises(ConfigError, match="group_protocol"):
        Consumer(base, group_protocol="eager")
    with Consumer({**base, "group.protocol": "consumer", "group.remote.assignor": "range"}) as c:
        assert isinstance(c._group, GroupCoordinator)
        assert isinstance(c._group._membership, ConsumerMembership)
        assert c.cfg["group_remote_assignor"] == "range"
    with Consumer(base) as c:
        assert type(c._group._membership).__name__ == "ClassicMembership"


def test_a_commit_refused_with_stale_member_epoch_is_retried_while_in_the_group():
    from kwire.commit import CommitFailedError

    base = {"bootstrap_servers": "localhost:9092", "group_id": "g", "group_protocol": "consumer"}
    with Consumer(base) as c:
        group = c._group
        group._topics = {"t"}
        stale = {TP("t", 0): protocol.error_for(ErrorCode.STALE_MEMBER_EPOCH, api="OffsetCommit")}
        group._membership.generation = 7       # the member epoch the next try carries
        err = group._commit_error(stale)
        assert err.retriable and err.code == ErrorCode.STALE_MEMBER_EPOCH
        group._membership.generation = -1      # out of the group: nothing to retry with
        stale = {TP("t", 0): protocol.error_for(ErrorCode.STALE_MEMBER_EPOCH, api="OffsetCommit")}
        assert isinstance(group._commit_error(stale), CommitFailedError)


def test_the_rebalance_timeout_given_replaces_max_poll_interval_ms():
    host = Host(group_remote_assignor="uniform", rebalance_timeout_ms=12000)
    m = ConsumerMembership(host, threading.RLock())
    m.subscription_changed()
    assert _beat(host, m).rebalance_timeout_ms == 12000
