"""Admin calls whose API Tansu 0.6.0 lacks (CreatePartitions) or breaks
(DeleteRecords: it closes the connection): against Tansu they fail clearly;
their requests and response handling are tested offline, with responses
built by the generated classes and sent through the same encode/decode a
broker's bytes go through."""

from __future__ import annotations

import pytest

from kwire.admin import Admin, NewTopic
from kwire.errors import InvalidPartitionsError
from kwire.protocol import messages as m
from kwire.protocol.versions import NoCommonVersionError


def _wire(obj, version):
    cls = type(obj)
    return cls.decode(cls.encode_bytes(obj, version), version)


@pytest.mark.broker
def test_create_partitions_refused_clearly_by_tansu(tansu):
    with Admin(bootstrap_servers=tansu.bootstrap, request_timeout_ms=5000) as a:
        a.create_topics([NewTopic("grow", 1)])
        with pytest.raises(NoCommonVersionError, match="CreatePartitions .*the broker does not offer it"):
            a.create_partitions({"grow": 3})


@pytest.mark.parametrize("version", range(m.CreatePartitionsRequest.MIN_VERSION, m.CreatePartitionsRequest.MAX_VERSION + 1))
def test_create_partitions_request_and_responses(version, monkeypatch):
    admin = Admin.__new__(Admin)
    admin.cfg = {"request_timeout_ms": 30000}
    admin._client = type("NoNetwork", (), {"request_metadata_update": lambda self: None})()
    sent = []
    answer = {}

    def to_controller(make, timeout):
        req = make({37: version})
        sent.append(_wire(req, version))
        return _wire(answer["resp"], version)

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


@pytest.mark.broker
def test_delete_records_fails_clearly_when_tansu_drops_the_connection(tansu):
    """Tansu 0.6.0 answers DeleteRecords by closing the connection: the call
    fails promptly with a located error instead of hanging."""
    import time

    from kwire.errors import KwireError

    with Admin(bootstrap_servers=tansu.bootstrap, request_timeout_ms=5000) as a:
        a.create_topics([NewTopic("trim", 1)])
        t = time.monotonic()
        with pytest.raises(KwireError):
            a.delete_records({("trim", 0): 0}, timeout=5)
        assert time.monotonic() - t < 10


@pytest.mark.parametrize("version", range(m.DeleteRecordsRequest.MIN_VERSION, m.DeleteRecordsRequest.MAX_VERSION + 1))
def test_delete_records_request_and_responses(version, monkeypatch):
    from kwire.client import ClusterMetadata, PartitionInfo
    from kwire.consumer import TopicPartition
    from kwire.errors import OffsetOutOfRangeError
    from kwire.future import Future

    sent = []
    answer = {}

    class NoNetwork:
        cluster = ClusterMetadata(partitions={
            "a": {p: PartitionInfo("a", p, p % 2, 0, (), (), (), 0) for p in range(3)}})

        def add_topics(self, topics):
            pass

        def refresh_metadata(self, timeout):
            pass

        def wait_ready(self, node, deadline):
            pass

        def send(self, node, req):
            sent.append((node, _wire(req, version)))
            fut = Future()
            fut.set_result(_wire(answer["resp"](node), version))
            return fut

        def wait(self, fut, timeout):
            return fut.result(timeout)

    admin = Admin.__new__(Admin)
    admin.cfg = {"request_timeout_ms": 30000}
    admin._client = NoNetwork()
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
