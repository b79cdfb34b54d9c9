"""KIP-714 client telemetry against Apache Kafka 4.4 with a ClientTelemetry
plugin (tests/support/telemetry.py: TelemetrySink, compiled by the fixture
against kafka-clients, decodes each push with OpenTelemetry's protobuf
classes): kwire's clients push the metrics a subscription asks for, named as
Java's client names them, as deltas that add up to the figures, and a last,
terminating push at close; Java's own pushes are the reference."""

from __future__ import annotations

import time

import pytest

from kwire.admin import Admin
from kwire.consumer import Consumer
from kwire.producer import Producer
from support.java_peer import JavaGroupMember
from support.telemetry import start_telemetry_broker
from support.topics import fresh_topic

N = 100


@pytest.fixture(scope="module")
def telemetry(tmp_path_factory):
    tb = start_telemetry_broker(tmp_path_factory.mktemp("telemetry"))
    tb.subscribe("kwire-tests", "org.apache.kafka.producer.,org.apache.kafka.consumer.", interval_ms=500)
    yield tb
    tb.stop()


def _topic(bootstrap: str, partitions: int = 1) -> str:
    return fresh_topic(bootstrap, partitions, "tel")


def _of(pushes, instance):
    return [p for p in pushes if p["client_instance_id"] == instance]


def _total(pushes, name, **attrs):
    """The sum over ``pushes`` of the points of ``name`` whose attributes are exactly ``attrs``."""
    return sum(pt["value"] for p in pushes for m in p.get("metrics", ()) if m["name"] == name
               for pt in m["points"] if pt["attributes"] == attrs)


def _instance(client, turn=lambda: time.sleep(0.1)) -> str:
    """The client's instance id, as the sink writes it; ``turn`` lets its I/O run (a consumer's poll)."""
    deadline = time.monotonic() + 15
    while client.client_instance_id() is None and time.monotonic() < deadline:
        turn()
    assert client.client_instance_id() is not None, "no client instance id assigned"
    return _java_uuid(client.client_instance_id())


def _java_uuid(u) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes, unpadded."""
    import base64

    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def test_a_producer_pushes_what_it_sent(telemetry):
    topic = _topic(telemetry.bootstrap)
    with Producer(bootstrap_servers=telemetry.bootstrap, linger_ms=5) as p:
        instance = _instance(p)
        for f in [p.send(topic, b"v%d" % i) for i in range(N)]:
            f.get(30)
        telemetry.wait_for(lambda ps: [x for x in _of(ps, instance) if x.get("metrics")])     # a push while open
    pushes = telemetry.wait_for(lambda ps: _of(ps, instance) if any(x["terminating"] for x in _of(ps, instance))
                                else None)
    assert not any("error" in x for x in pushes)
    assert pushes[-1]["terminating"] and pushes[-1]["content_type"] == "OTLP"
    # the sums are deltas (Kafka asks for delta temporality): over every push they add up to the figures
    assert _total(pushes, "org.apache.kafka.producer.record.send.total") == N
    assert _total(pushes, "org.apache.kafka.producer.topic.record.send.total", topic=topic) == N
    sums = {m["name"]: m for x in pushes for m in x["metrics"] if m["type"] == "sum"}
    assert all(m["monotonic"] and m["temporality"] == "AGGREGATION_TEMPORALITY_DELTA" for m in sums.values())
    gauges = {m["name"] for x in pushes for m in x["metrics"] if m["type"] == "gauge"}
    assert "org.apache.kafka.producer.request.latency.avg" in gauges
    nodes = {pt["attributes"].get("node_id") for x in pushes for m in x["metrics"]
             if m["name"] == "org.apache.kafka.producer.node.request.total" for pt in m["points"]}
    assert "node-1" in nodes
    assert all(m["name"].startswith("org.apache.kafka.producer.") for x in pushes for m in x["metrics"])


def test_a_consumer_pushes_its_lag_named_as_java_pushes_it(telemetry):
    topic = _topic(telemetry.bootstrap)
    with Producer(bootstrap_servers=telemetry.bootstrap) as p:
        for f in [p.send(topic, b"v%d" % i) for i in range(N)]:
            f.get(30)
    group = f"g-{topic}"
    java = JavaGroupMember({"bootstrap.servers": telemetry.bootstrap, "group.id": f"java-{group}"}, [topic])
    try:
        with Consumer(bootstrap_servers=telemetry.bootstrap, group_id=group, auto_offset_reset="earliest") as c:
            c.subscribe([topic])
            got = 0

            def poll() -> None:
                nonlocal got
                got += sum(len(r) for r in c.poll(100).values())

            instance = _instance(c, poll)       # (a consumer's telemetry runs in its polls, as its I/O does)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not (got >= N and _of(telemetry.pushes(), instance)[1:]):
                got += sum(len(r) for r in c.poll(200).values())
            assert got == N
        java_pushes = telemetry.wait_for(
            lambda ps: [x for x in ps if x.get("resource", {}).get("group_id") == f"java-{group}"])
    finally:
        java.stop()
    ours = telemetry.wait_for(lambda ps: _of(ps, instance) if any(x["terminating"] for x in _of(ps, instance))
                              else None)
    assert ours[0]["resource"]["group_id"] == group and ours[0]["resource"]["group_member_id"]
    assert _total(ours, "org.apache.kafka.consumer.fetch.manager.records.consumed.total", topic=topic) == N
    assert _total(ours, "org.apache.kafka.consumer.fetch.manager.records.consumed.total", topic=topic,
                  partition="0") == N
    lags = [pt for x in ours for m in x["metrics"] if m["name"] == "org.apache.kafka.consumer.fetch.manager.records.lag"
            for pt in m["points"]]
    assert lags and lags[-1]["attributes"] == {"topic": topic, "partition": "0"} and lags[-1]["value"] == 0
    java_names = {m["name"] for x in java_pushes for m in x["metrics"]}
    for name in ("org.apache.kafka.consumer.fetch.manager.records.lag",
                 "org.apache.kafka.consumer.fetch.manager.records.consumed.total",
                 "org.apache.kafka.consumer.coordinator.assigned.partitions",
                 "org.apache.kafka.consumer.coordinator.commit.latency.avg",
                 "org.apache.kafka.consumer.node.request.latency.avg",
                 "org.apache.kafka.consumer.time.between.poll.avg"):
        assert name in java_names, name
        assert any(m["name"] == name for x in ours for m in x["metrics"]), name


def test_only_the_metrics_asked_for_are_pushed(telemetry):
    with Admin(bootstrap_servers=telemetry.bootstrap) as a:        # the subscription names producers, consumers
        instance = _instance(a, a.list_topics)          # (an Admin's I/O runs in its calls)
        end = time.monotonic() + 1.5                               # three intervals
        while time.monotonic() < end:
            a.list_topics()
    pushes = telemetry.wait_for(lambda ps: _of(ps, instance) if any(x["terminating"] for x in _of(ps, instance))
                                else None)
    assert all(x["metrics"] == [] for x in pushes)                 # an admin client's: none of them asked for


def test_off_when_asked(telemetry):
    with Producer(bootstrap_servers=telemetry.bootstrap, enable_metrics_push=False) as p:
        p.send(_topic(telemetry.bootstrap), b"x").get(30)
        time.sleep(1)
        assert p.client_instance_id() is None and p._client.telemetry.state == "disabled"


def test_a_broker_with_no_subscription_gets_no_push(tansu):
    # Tansu 0.6.0 answers GetTelemetrySubscriptions with an instance id and no metrics asked for
    with Producer(bootstrap_servers=tansu.bootstrap) as p:
        p.send(_topic(tansu.bootstrap), b"x").get(30)
        _instance(p)
        telemetry = p._client.telemetry
        assert telemetry.requested == [] and telemetry.state == "subscribe" and telemetry.pushes == 0
