"""Admin calls' requests and response handling offline, with responses
built by the generated classes and sent through the same encode/decode a
broker's bytes go through: every version of CreatePartitions and
DeleteRecords, and answers no live broker gives (a refusal per topic or
partition among successes). Their live behaviour (a producer and a group
taking new partitions, the log start moving under a consumer) is tested on
Apache Kafka in tests/kafka/test_live_admin.py, which also checks that
Tansu 0.6.0, lacking CreatePartitions and dropping the connection on
DeleteRecords, fails clearly."""

from __future__ import annotations

import pytest

from kwire.admin import Admin
from kwire.errors import InvalidPartitionsError
from kwire.protocol import messages as m


def _wire(obj, version):
    cls = type(obj)
    return cls.decode(cls.encode_bytes(obj, version), version)


class _Answering:
    """A client without a network: each request is kept in ``sent`` as
    (node, request) and answered with ``answer(node)``, both through the
    encode/decode of ``version``."""

    def __init__(self, version, answer):
        self.version, self.answer, self.sent = version, answer, []

    def send(self, node, req):
        from kwire.future import Future

        self.sent.append((node, _wire(req, self.version)))
        fut = Future()
        fut.set_result(_wire(self.answer(node), self.version))
        return fut

    def wait_steps(self, fut, timeout):
        return fut.result(timeout)
        yield                   # steps (kwire.client.Client.run): none to take here

    def run(self, steps):
        from kwire.client import run_blocking

        return run_blocking(steps)


def _admin(client):
    admin = Admin.__new__(Admin)
    admin.cfg = {"request_timeout_ms": 30000}
    admin._client = client
    return admin


@pytest.mark.parametrize("version", range(m.CreatePartitionsRequest.MIN_VERSION, m.CreatePartitionsRequest.MAX_VERSION + 1))
def test_create_partitions_request_and_responses(version, monkeypatch):
    admin = _admin(_Answering(version, None))
    admin._client.request_metadata_update = lambda: None
    sent = []
    answer = {}

    def to_controller(make, timeout):
        req = make({37: version})
        sent.append(_wire(req, version))
        return _wire(answer["resp"], version)
        yield

    monkeypatch.setattr(admin, "_to_controller", to_controller)
    r = m.CreatePartitionsResponse
    answer["resp"] = r(results=[r.CreatePartitionsTopicResult(name="a", error_code=0)])
    admin.create_partitions({"a": 6})
    req = sent[-1]
    assert [(t.name, t.count, t.assignments) for t in req.topics] == [("a", 6, None)]
    assert req.timeout_ms == 30000 and req.validate_only is False
    answer["resp"] = r(results=[r.CreatePartitionsTopicResult(name="a", error_code=0),
                                r.CreatePartitionsTopicResult(name="b", error_code=37, error_message="only 2")])
    with pytest.raises(InvalidPartitionsError) as e:
        admin.create_partitions({"a": 6, "b": 1})
    assert e.value.topic == "b" and "only 2" in str(e.value)


@pytest.mark.parametrize("version", range(m.DeleteRecordsRequest.MIN_VERSION, m.DeleteRecordsRequest.MAX_VERSION + 1))
def test_delete_records_request_and_responses(version, monkeypatch):
    from kwire.client import ClusterMetadata, PartitionInfo
    from kwire.consumer import TopicPartition
    from kwire.errors import OffsetOutOfRangeError

    answer = {}

    class NoNetwork(_Answering):
        cluster = ClusterMetadata(partitions={
            "a": {p: PartitionInfo("a", p, p % 2, 0, (), (), (), 0) for p in range(3)}})

        def add_topics(self, topics):
            pass

        def refresh_metadata_steps(self, timeout):
            yield from ()

        def wait_ready_steps(self, node, deadline):
            yield from ()

    client = NoNetwork(version, lambda node: answer["resp"](node))
    sent = client.sent
    admin = _admin(client)
    r = m.DeleteRecordsResponse

    def ok(node):
        return r(topics=[r.DeleteRecordsTopicResult(name="a", partitions=[
            r.DeleteRecordsPartitionResult(partition_index=p, low_watermark=100 + p, error_code=0)
            for p in range(3) if p % 2 == node])])

    answer["resp"] = ok
    assert admin.delete_records({("a", 0): 100, ("a", 1): 101, ("a", 2): 102}) == {
        TopicPartition("a", 0): 100, TopicPartition("a", 1): 101, TopicPartition("a", 2): 102}
    # one request per leader, each naming its partitions and offsets
    by_node = {node: [(t.name, p.partition_index, p.offset) for t in req.topics for p in t.partitions]
               for node, req in sent}
    assert by_node == {0: [("a", 0, 100), ("a", 2, 102)], 1: [("a", 1, 101)]}
    assert all(req.timeout_ms == 30000 for _, req in sent)

    def refused(node):
        return r(topics=[r.DeleteRecordsTopicResult(name="a", partitions=[
            r.DeleteRecordsPartitionResult(partition_index=1, low_watermark=-1, error_code=1)])])

    answer["resp"] = refused
    with pytest.raises(OffsetOutOfRangeError) as e:
        admin.delete_records({("a", 1): 5000})
    assert (e.value.topic, e.value.partition) == ("a", 1)


@pytest.mark.parametrize("version", [4, 5])
def test_list_groups_types_filter(version):
    """ListGroups v5 sends the types filter and reads each group's type; a
    broker before v5 has classic groups only: listed as such, left out when
    the filter does not name "classic"."""
    req_cls, resp_cls = m.ListGroupsRequest, m.ListGroupsResponse

    class Conn:
        versions = {16: version}

    def answer(node):
        groups = [resp_cls.ListedGroup(group_id="c", protocol_type="consumer", group_state="Stable",
                                       group_type="classic"),
                  resp_cls.ListedGroup(group_id="k", protocol_type="consumer", group_state="Stable",
                                       group_type="consumer")]
        return resp_cls(groups=groups if version >= 5 else groups[:1])

    class NoNetwork(_Answering):
        def refresh_metadata_steps(self, timeout):
            return type("Md", (), {"brokers": {0: None}})()
            yield

        def wait_ready_steps(self, node, deadline):
            return Conn()
            yield

    client = NoNetwork(version, answer)
    sent = [req for _, req in client.sent]
    admin = _admin(client)
    every = admin.list_groups()
    assert [(g.group_id, g.group_type) for g in every] == [("c", "classic"), ("k", "consumer")][:2 if version >= 5 else 1]
    consumer_only = admin.list_groups(types=["Consumer"])
    if version >= 5:
        assert client.sent[-1][1].types_filter == ["consumer"]
        assert consumer_only        # the broker filters (this one answers the same list)
    else:
        assert consumer_only == []
        assert [g.group_id for g in admin.list_groups(types=["classic"])] == ["c"]
    sent = [req for _, req in client.sent]
    assert type(sent[0]) is req_cls
