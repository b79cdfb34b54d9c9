"""Admin calls whose API Tansu 0.6.0 lacks (CreatePartitions): against
Tansu they refuse clearly; their requests and response handling are tested
offline, with responses built by the generated classes and sent through the
same encode/decode a broker's bytes go through."""

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
