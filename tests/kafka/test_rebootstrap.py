"""Rebootstrap (KIP-899, KIP-1102, KIP-1242) on Apache Kafka: a cluster whose
brokers are all replaced by another's.

The old cluster is a private Kafka node (node 7, started once for the
module) that advertises a relay (``advertised``) in front of it, so the
clients learn node 7 at an address the test controls; the new cluster is
the session's Kafka (node 1, its own cluster id and port). The clients
bootstrap through a second relay (``bootstrap``): the name a DNS change or a
load balancer would move. Replacing the cluster moves the bootstrap relay to
the new cluster and takes the old one away: the advertised relay answers no
more (its target a dead port), or, the last test, the old node is stopped
by its PID and the relay closed (connections refused).

- ``metadata_recovery_strategy="rebootstrap"`` (the default): producer,
  consumer and admin, blocking and kwire.aio, find the new cluster through
  the bootstrap address and carry on (the topic created there);
- a real Kafka 4.4 broker of the new cluster at the address of old node 7
  answers the cluster check of ApiVersions v5 with REBOOTSTRAP_REQUIRED
  (KIP-1242): the client rebootstraps at once;
- ``metadata_recovery_rebootstrap_trigger_ms``: the old node's address takes
  connections and answers nothing (black-holed), so the node never counts
  as unreachable; the client rebootstraps once no metadata came for the
  trigger;
- ``"none"``: the client keeps to node 7 and never asks the bootstrap
  address again (its sends time out).

REBOOTSTRAP_REQUIRED as a Metadata response's top-level error (KIP-1102)
cannot be had from a real broker (Kafka 4.4 sends it only to ApiVersions):
that answer comes from the hostile broker, the one fake allowed, standing
for the old cluster.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass

import pytest

from kwire.admin import Admin, NewTopic
from kwire.consumer import Consumer, TopicPartition
from kwire.future import KafkaTimeoutError
from kwire.producer import Producer
from kwire.protocol.api_keys import ErrorCode
from support.aio_bridge import BridgedConsumer
from support.hostile_broker import DEFAULT_VERSIONS, METADATA, HostileBroker
from support.kafka import HOST, start_kafka
from support.proxies import FaultProxy
from support.tansu import free_port

pytestmark = pytest.mark.kafka

OLD_NODE = 7
FAST = {"reconnect_backoff_ms": 50, "reconnect_backoff_max_ms": 200, "retry_backoff_ms": 50,
        "retry_backoff_max_ms": 200, "socket_connection_setup_timeout_ms": 3000}


@dataclass
class Old:
    """The old cluster: its node, the relay it advertises, its real address."""

    broker: object
    advertised: FaultProxy
    address: tuple


@pytest.fixture(scope="module")
def old():
    """A private Kafka node 7 advertising a relay in front of it (stopped by the last test, else here)."""
    port = free_port()
    relay = FaultProxy((HOST, port))
    broker = start_kafka(node_id=OLD_NODE, ports={"plaintext": port}, advertised={"plaintext": relay.address},
                         listeners={"plaintext": ("PLAINTEXT", HOST)})
    try:
        yield Old(broker, relay, (HOST, port))
    finally:
        broker.stop()             # by its PID (SIGTERM, then SIGKILL); its directory deleted
        relay.stop()


@pytest.fixture
def cluster(old, kafka):
    """Per test: the bootstrap relay (to the old cluster), the new cluster's address; the
    advertised relay led back to the old node afterwards."""
    bootstrap = FaultProxy(old.address)
    try:
        yield bootstrap, _address(kafka.bootstrap("plaintext"))
    finally:
        bootstrap.stop()
        old.advertised.heal()
        old.advertised.target = old.address


def _address(hostport: str) -> tuple:
    host, port = hostport.rsplit(":", 1)
    return host, int(port)


def _topic(*addresses: tuple) -> str:
    """A new topic of one partition on each cluster."""
    name = f"reboot-{uuid.uuid4().hex[:8]}"
    for host, port in addresses:
        with Admin(bootstrap_servers=f"{host}:{port}") as a:
            a.create_topics([NewTopic(name, 1)])
    return name


def _replace(old: Old, bootstrap: FaultProxy, new: tuple) -> None:
    """The old cluster goes (its address answers no more), the bootstrap name leads to the new one."""
    bootstrap.target = new
    old.advertised.target = (HOST, free_port())       # nothing listens there: each connection closed at once
    old.advertised.cut_all()
    bootstrap.cut_all()


def _send(p, topic: str, values, timeout: float = 20) -> list:
    futures = [p.send(topic, v, partition=0) for v in values]
    return [f.get(timeout).offset for f in futures]


def _inner(client):
    """The network client of ``client`` (a producer or consumer, either driver)."""
    inner = getattr(client, "aio", client)
    return getattr(inner, "_p", inner)._client          # AsyncProducer: its loop's Producer


def _learned(client) -> list:
    """The brokers ``client`` knows now."""
    return sorted(_inner(client).cluster.brokers)


def _poll_values(c, want: int, timeout: float = 20) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for records in c.poll(timeout_ms=200).values():
            got += [r.value for r in records]
    return got


def test_clients_rebootstrap_to_a_new_cluster(old, cluster, kafka, kw, caplog):
    """Producer, consumer and admin learned node 7; every broker of the cluster is replaced:
    they find the new cluster (node 1) through the bootstrap address and carry on there."""
    caplog.set_level(logging.WARNING, logger="kwire.client")
    bootstrap, new = cluster
    topic = _topic(old.address, new)
    tp = TopicPartition(topic, 0)
    cfg = dict(bootstrap_servers=bootstrap.address, **FAST)
    with kw.Producer(linger_ms=0, **cfg) as p, kw.Consumer(auto_offset_reset="earliest", **cfg) as c, \
            kw.Admin(**cfg) as a:
        assert _send(p, topic, [b"old-0", b"old-1", b"old-2"]) == [0, 1, 2]
        c.assign([tp])
        assert _poll_values(c, 3) == [b"old-0", b"old-1", b"old-2"]
        assert a.describe_cluster(timeout=10).cluster_id == old.broker.cluster_id
        assert _learned(p) == _learned(c) == [OLD_NODE]
        t0 = time.monotonic()
        _replace(old, bootstrap, new)
        assert _send(p, topic, [f"new-{i}".encode() for i in range(6)]) == list(range(6))
        took = time.monotonic() - t0
        print(f"\nall brokers replaced ({kw.name}): 6 records acknowledged by the new cluster {took:.2f} s "
              "after the replacement")
        # the consumer keeps its position (3): the new cluster's records from there
        assert _poll_values(c, 3) == [b"new-3", b"new-4", b"new-5"]
        assert a.describe_cluster(timeout=10).cluster_id == kafka.cluster_id
        assert _learned(p) == _learned(c) == [1]
    assert took < 10, f"{took:.1f} s to produce to the new cluster"
    said = [r for r in caplog.records if "going back to the bootstrap servers" in r.getMessage()]
    assert said and all("no broker the client learned can be reached" in r.getMessage() for r in said)
    assert len(said) <= 4, [r.getMessage() for r in said]   # once per client (the consumer's group has none)


def test_group_member_rebootstraps(old, cluster, kafka):
    """A group member's coordinator goes with the old cluster: its group's client
    rebootstraps too, finds the new cluster's coordinator, joins there and reads the new
    cluster's records (no commit there: from where its position or the reset says)."""
    bootstrap, new = cluster
    topic = _topic(old.address, new)
    cfg = dict(bootstrap_servers=bootstrap.address, **FAST)
    with Producer(linger_ms=0, **cfg) as p, \
            Consumer(group_id=f"g-{topic}", auto_offset_reset="earliest", session_timeout_ms=6000, **cfg) as c:
        assert _send(p, topic, [b"old-0", b"old-1"]) == [0, 1]
        c.subscribe([topic])
        assert _poll_values(c, 2) == [b"old-0", b"old-1"]
        c.commit()
        member = c.group_metadata().member_id
        _replace(old, bootstrap, new)
        assert _send(p, topic, [b"new-0", b"new-1", b"new-2"]) == [0, 1, 2]
        got: list = []
        deadline = time.monotonic() + 25

        def joined_anew() -> bool:
            now = c.group_metadata()
            return now.member_id not in ("", member) and now.generation_id >= 1

        while (b"new-2" not in got or not joined_anew()) and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=200).values():
                got += [r.value for r in records]
        assert joined_anew(), c.group_metadata()
        assert got and set(got) <= {b"new-0", b"new-1", b"new-2"} and got[-1] == b"new-2", got
        assert _learned(c) == [1]


def test_rebootstrap_required_by_a_real_broker(old, cluster, kafka, kw, caplog):
    """KIP-1242: an idle producer's connections were closed (connections.max.idle.ms); the
    new cluster's broker now answers at old node 7's address (an address reused). The next
    send connects to node 7 with its cluster id and node id (ApiVersions v5) and the real
    Kafka 4.4 broker answers REBOOTSTRAP_REQUIRED: the producer rebootstraps at once, rather
    than producing to a broker of another cluster."""
    caplog.set_level(logging.INFO, logger="kwire")
    bootstrap, new = cluster
    topic = _topic(old.address, new)
    with kw.Producer(bootstrap_servers=bootstrap.address, linger_ms=0, connections_max_idle_ms=200, **FAST) as p:
        assert _send(p, topic, [b"old"]) == [0]
        deadline = time.monotonic() + 10
        while OLD_NODE in _inner(p)._conns and time.monotonic() < deadline:
            time.sleep(0.05)                 # the producer's connection to node 7 closed, idle
        assert OLD_NODE not in _inner(p)._conns
        bootstrap.target = new
        old.advertised.target = new          # the new cluster's node 1 behind the old node's address
        t0 = time.monotonic()
        assert _send(p, topic, [b"new"]) == [0]
        took = time.monotonic() - t0
        print(f"\nREBOOTSTRAP_REQUIRED to the cluster check ({kw.name}): a record acknowledged by the new cluster "
              f"{took:.2f} s after the replacement")
        assert _learned(p) == [1]
    text = caplog.text
    assert "REBOOTSTRAP_REQUIRED (KIP-1242)" in text and "going back to the bootstrap servers" in text, text
    assert "no broker the client learned can be reached" not in text
    assert took < 5, f"{took:.1f} s"


def test_rebootstrap_trigger(old, cluster, kw, caplog):
    """The old node's address takes connections and answers nothing: node 7 is never
    unreachable (connecting, or a request in flight), so only
    metadata.recovery.rebootstrap.trigger.ms ends the wait for metadata."""
    caplog.set_level(logging.WARNING, logger="kwire.client")
    bootstrap, new = cluster
    topic = _topic(new)
    with kw.Producer(bootstrap_servers=bootstrap.address, linger_ms=0, metadata_recovery_rebootstrap_trigger_ms=1500,
                     request_timeout_ms=30000, socket_connection_setup_timeout_ms=30000, max_block_ms=20000) as p:
        p.partitions_for(_topic(old.address))        # node 7 learned, and connected to
        bootstrap.target = new
        old.advertised.black_hole()
        t0 = time.monotonic()
        assert _send(p, topic, [b"v"]) == [0]
        took = time.monotonic() - t0
        print(f"\ntrigger 1500 ms ({kw.name}): a record acknowledged by the new cluster {took:.2f} s after the replacement")
        assert _learned(p) == [1]
    assert 1.5 <= took < 8, f"{took:.1f} s"
    assert "no metadata for metadata.recovery.rebootstrap.trigger.ms (1500 ms)" in caplog.text, caplog.text


def test_none_keeps_to_the_learned_brokers(old, cluster):
    """metadata.recovery.strategy=none: the replaced cluster's node 7 is all the producer
    knows; it never asks the bootstrap address again, and its send times out."""
    bootstrap, new = cluster
    topic = _topic(old.address, new)
    with Producer(bootstrap_servers=bootstrap.address, linger_ms=0, metadata_recovery_strategy="none",
                  delivery_timeout_ms=4000, request_timeout_ms=3000, **FAST) as p:
        assert _send(p, topic, [b"old"]) == [0]
        _replace(old, bootstrap, new)
        asked = bootstrap.connections
        with pytest.raises(KafkaTimeoutError):
            _send(p, topic, [b"lost"], timeout=6)
        assert bootstrap.connections == asked
        assert _learned(p) == [OLD_NODE]


@pytest.mark.parametrize("strategy", ["rebootstrap", "none"])
def test_metadata_rebootstrap_required(cluster, strategy, caplog):
    """KIP-1102: a Metadata answer whose top-level error is REBOOTSTRAP_REQUIRED (from the
    hostile broker standing for the old cluster: a real one sends it only to ApiVersions)
    sends the producer back to the bootstrap address, now the new cluster; with "none" it is
    a failed refresh, and the producer stays."""
    caplog.set_level(logging.WARNING, logger="kwire.client")
    bootstrap, new = cluster
    topic = _topic(new)
    with HostileBroker({topic: 1}, versions={**DEFAULT_VERSIONS, METADATA: (0, 13)}) as hostile:
        bootstrap.target = (hostile.host, hostile.port)
        with Producer(bootstrap_servers=bootstrap.address, linger_ms=0, metadata_max_age_ms=300,
                      metadata_recovery_strategy=strategy, **FAST) as p:
            assert _send(p, topic, [b"old"]) == [0]
            bootstrap.target = new
            refused = hostile.metadata_response()
            refused.error_code = ErrorCode.REBOOTSTRAP_REQUIRED
            hostile.on("Metadata", refused)
            answered = len(hostile.received("Metadata"))
            deadline = time.monotonic() + 10
            while len(hostile.received("Metadata")) == answered and time.monotonic() < deadline:
                time.sleep(0.05)      # metadata_max_age_ms: the next refresh gets the error
            time.sleep(0.3)
            _send(p, topic, [b"after"])
            produced = len(hostile.received("Produce"))
    if strategy == "rebootstrap":
        assert produced == 1, "the record after the error went to the new cluster"
        assert "a broker answered Metadata with REBOOTSTRAP_REQUIRED" in caplog.text
    else:
        assert produced == 2 and "going back to the bootstrap servers" not in caplog.text


def test_old_cluster_stopped(old, cluster):
    """The old node stopped by its PID and its address closed: the clients' learned broker
    refuses connections; they rebootstrap to the new cluster. A blocking producer and an
    asyncio consumer (the old node can be stopped once). Last: the old node is gone."""
    bootstrap, new = cluster
    topic = _topic(old.address, new)
    cfg = dict(bootstrap_servers=bootstrap.address, **FAST)
    with Producer(linger_ms=0, **cfg) as p, BridgedConsumer(auto_offset_reset="earliest", **cfg) as c:
        assert _send(p, topic, [b"old"]) == [0]
        c.assign([TopicPartition(topic, 0)])
        assert _poll_values(c, 1) == [b"old"]
        bootstrap.target = new
        old.broker.stop()
        old.advertised.stop()               # the address refuses, as a stopped broker's does
        bootstrap.cut_all()
        assert _send(p, topic, [b"new-0", b"new-1"]) == [0, 1]
        assert _poll_values(c, 1) == [b"new-1"]
        assert _learned(p) == _learned(c) == [1]


def test_spark_options_take_the_recovery_options():
    from kwire.spark.options import parse_sink_options

    opts = parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": "t",
                               "kafka.metadata.recovery.strategy": "none",
                               "kafka.metadata.recovery.rebootstrap.trigger.ms": "60000"})
    cfg = opts.producer_config()
    assert cfg["metadata.recovery.strategy"] == "none" and cfg["metadata.recovery.rebootstrap.trigger.ms"] == "60000"
    from kwire.config import PRODUCER, resolve

    got = resolve(PRODUCER, cfg)
    assert got["metadata_recovery_strategy"] == "none" and got["metadata_recovery_rebootstrap_trigger_ms"] == 60000
