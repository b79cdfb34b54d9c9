"""Authorization on Apache Kafka (StandardAuthorizer): ACLs made live with
Admin.create_acls, and a user without them refused at once with the
matching ``...AuthorizationFailedError`` naming the resource, without a
retry loop against the broker, while the rest of the same client goes on.

The broker allows everyone on a resource without ACLs
(``allow.everyone.if.no.acl.found``), so each refused resource here has an
ACL allowing alice only (and, for the "describe only" topic, DESCRIBE for
bob): bob is refused."""

from __future__ import annotations

import collections
import logging
import time
import uuid

import pytest

from kwire.acl import AclBinding
from kwire.admin import Admin, NewTopic
from kwire.consumer import Consumer
from kwire.errors import (GroupAuthorizationFailedError, TopicAuthorizationFailedError,
                          TransactionalIdAuthorizationFailedError)
from kwire.channel import Channel
from kwire.producer import Producer

pytestmark = pytest.mark.kafka

FAST = 5.0          # seconds: a refusal comes well within this
LISTENER = "sasl_plaintext"


class Names:
    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:8]
        self.denied = f"authz-denied-{tag}"          # alice only: bob cannot even describe it
        self.describe_only = f"authz-desc-{tag}"     # alice; bob may describe, not read or write
        self.open = f"authz-open-{tag}"              # no ACL: everyone
        self.group = f"authz-group-{tag}"
        self.txn = f"authz-txn-{tag}"


@pytest.fixture(scope="module")
def names(kafka):
    n = Names()
    acls = [AclBinding("topic", n.denied, principal="User:alice"),
            AclBinding("topic", n.describe_only, principal="User:alice"),
            AclBinding("topic", n.describe_only, principal="User:bob", operation="describe"),
            AclBinding("group", n.group, principal="User:alice"),
            AclBinding("transactional_id", n.txn, principal="User:alice")]
    with Admin(kafka.client_config(LISTENER)) as admin:
        admin.create_topics([NewTopic(t, 2) for t in (n.denied, n.describe_only, n.open)])
        admin.create_acls(acls)
        deadline = time.monotonic() + 10        # ACLs reach the authorizer through the metadata log
        while len(admin.describe_acls(AclBinding("any", None, "any", None, None, "any", "any"))) < len(acls):
            assert time.monotonic() < deadline
            time.sleep(0.1)
    time.sleep(0.5)
    yield n
    with Admin(kafka.client_config(LISTENER)) as admin:
        deleted = admin.delete_acls([AclBinding(a.resource_type, a.resource_name, principal=None, host=None,
                                                operation="any", permission_type="any") for a in acls])
        assert {(a.resource_type, a.resource_name) for a in deleted} == {(a.resource_type, a.resource_name)
                                                                         for a in acls}


def _as(kafka, user, **extra):
    return {**kafka.client_config(LISTENER, user=(user, kafka.users[user])), **extra}


@pytest.fixture
def requests_sent(monkeypatch):
    """Requests sent, by API name, across every connection of the test."""
    sent: collections.Counter = collections.Counter()
    real = Channel._send_now

    def counting(self, request, *args, **kwargs):
        sent[type(request).__name__.replace("Request", "")] += 1
        return real(self, request, *args, **kwargs)

    monkeypatch.setattr(Channel, "_send_now", counting)
    return sent


def _fast(t0: float) -> None:
    took = time.monotonic() - t0
    assert took < FAST, f"took {took:.1f} s"


def test_acls_described_and_alice_allowed(kafka, names):
    with Admin(kafka.client_config(LISTENER)) as admin:
        mine = admin.describe_acls(AclBinding("topic", names.describe_only, "literal", None, None, "any", "any"))
    assert {(a.principal, a.operation, a.permission_type) for a in mine} == {
        ("User:alice", "all", "allow"), ("User:bob", "describe", "allow")}
    with Producer(_as(kafka, "alice")) as p:
        assert p.send(names.denied, b"from alice", partition=0).get(20).offset >= 0


def test_acl_binding_checks_its_names():
    assert AclBinding("TOPIC", "t", "PREFIXED", "User:a", "*", "Read", "Deny").codes() == {
        "resource_type": 2, "pattern_type": 4, "operation": 3, "permission_type": 2}
    with pytest.raises(ValueError, match="operation 'reed'"):
        AclBinding("topic", "t", operation="reed")


@pytest.mark.parametrize("which", ["denied", "describe_only"])
def test_producer_refused_topic_fails_fast_and_other_topics_work(kafka, names, which, requests_sent, caplog):
    topic = getattr(names, which)
    caplog.set_level(logging.WARNING, logger="kwire")
    with Producer(_as(kafka, "bob", max_block_ms=30000, delivery_timeout_ms=30000)) as p:
        assert p.send(names.open, b"before", partition=0).get(20).offset >= 0
        t0 = time.monotonic()
        with pytest.raises(TopicAuthorizationFailedError) as info:
            p.send(topic, b"nope", partition=0).get(20)       # send() (no DESCRIBE) or its future (no WRITE)
        _fast(t0)
        assert topic in str(info.value) and info.value.retriable is False
        assert p.send(names.open, b"after", partition=1).get(20).offset >= 0
        time.sleep(1.0)           # nothing goes on against the refused topic meanwhile
        assert requests_sent["Produce"] <= 3 and requests_sent["Metadata"] <= 10, requests_sent
    if which == "denied":         # the refusal logged once
        assert caplog.text.count(f"topic {topic!r}") == 1, caplog.text


@pytest.mark.parametrize("which", ["denied", "describe_only"])
def test_consumer_refused_topic_fails_fast_and_other_partitions_work(kafka, names, which, requests_sent):
    topic = getattr(names, which)
    with Producer(_as(kafka, "alice")) as p:
        p.send(names.open, b"readable", partition=0).get(20)
    with Consumer(_as(kafka, "bob", auto_offset_reset="earliest", retry_backoff_ms=200,
                      retry_backoff_max_ms=1000)) as c:
        c.assign([(topic, 0), (names.open, 0)])
        t0 = time.monotonic()
        got = []
        with pytest.raises(TopicAuthorizationFailedError) as info:
            while time.monotonic() - t0 < FAST:
                got += c.poll(200).get((names.open, 0), [])
        _fast(t0)
        assert topic in str(info.value) and info.value.retriable is False
        while b"readable" not in [r.value for r in got] and time.monotonic() - t0 < 10:
            got += c.poll(200).get((names.open, 0), [])         # the allowed partition is read on
        assert b"readable" in [r.value for r in got]
        fetches = requests_sent["Fetch"] + requests_sent["ListOffsets"] + requests_sent["Metadata"]
        assert fetches < 60, requests_sent          # no tight loop against the refused partition


def test_group_refused_on_subscribe_and_commit(kafka, names, requests_sent):
    cfg = _as(kafka, "bob", group_id=names.group, auto_offset_reset="earliest", enable_auto_commit=False)
    with Consumer(cfg) as c:
        c.subscribe([names.open])
        t0 = time.monotonic()
        with pytest.raises(GroupAuthorizationFailedError) as info:
            while time.monotonic() - t0 < FAST:
                c.poll(200)
        _fast(t0)
        assert names.group in str(info.value)
    with Consumer(cfg) as c:
        c.assign([(names.open, 0)])
        t0 = time.monotonic()
        with pytest.raises(GroupAuthorizationFailedError) as info:
            c.commit({(names.open, 0): 0})
        _fast(t0)
        assert names.group in str(info.value)
    assert requests_sent["FindCoordinator"] <= 6, requests_sent


def test_transactional_id_refused_on_init_transactions(kafka, names, requests_sent):
    with Producer(_as(kafka, "bob", transactional_id=names.txn, max_block_ms=30000)) as p:
        t0 = time.monotonic()
        with pytest.raises(TransactionalIdAuthorizationFailedError) as info:
            p.init_transactions()
        _fast(t0)
        assert names.txn in str(info.value)
    assert requests_sent["FindCoordinator"] + requests_sent["InitProducerId"] <= 4, requests_sent
    with Producer(_as(kafka, "alice", transactional_id=names.txn)) as p:
        p.init_transactions()
