"""Topic auto-creation as Kafka's clients do it, on Apache Kafka: the
producer asks for it (the session broker creates the topic, its
``auto.create.topics.enable`` being on), the consumer as its
``allow_auto_create_topics`` says, the Admin never. On a broker with
auto-creation off (``no_auto_kafka``), a send to a missing topic fails with
a clear error at ``max_block_ms``, not after a silent minute."""

from __future__ import annotations

import logging
import time
import uuid

import pytest

from kwire.admin import Admin
from kwire.consumer import Consumer
from kwire.errors import KwireError, UnknownTopicOrPartitionError
from kwire.future import KafkaTimeoutError
from kwire.producer import Producer
from support.kafka import start_kafka

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def no_auto_kafka():
    broker = start_kafka(overrides={"auto.create.topics.enable": "false"})
    try:
        yield broker
    finally:
        broker.stop()


def _new():
    return f"auto-{uuid.uuid4().hex[:8]}"


def _exists(cfg, topic):
    with Admin(cfg) as admin:
        return topic in admin.list_topics()


def test_producer_send_to_a_new_topic_creates_it(kafka):
    topic = _new()
    cfg = kafka.client_config()
    with Producer(cfg) as p:
        meta = p.send(topic, b"first", key=b"k").get(30)
    assert meta.topic == topic and meta.offset == 0
    assert _exists(cfg, topic)


@pytest.mark.parametrize("allow", [True, False])
def test_consumer_allow_auto_create_topics(kafka, allow, caplog):
    caplog.set_level(logging.INFO, "kwire")        # shown if it fails: metadata and group steps
    topic = _new()
    cfg = kafka.client_config()
    with Consumer(cfg, group_id=f"g-{topic}", allow_auto_create_topics=allow, auto_offset_reset="earliest") as c:
        c.subscribe([topic])
        deadline = time.monotonic() + (30 if allow else 3)
        while time.monotonic() < deadline and not (allow and c.assignment()):
            c.poll(200)
        assert bool(c.assignment()) is allow
    assert _exists(cfg, topic) is allow


def test_admin_never_creates(kafka):
    topic = _new()
    cfg = kafka.client_config()
    with Admin(cfg) as admin:
        with pytest.raises(UnknownTopicOrPartitionError, match=topic):
            admin.describe_topics([topic], timeout=10)
        with pytest.raises(KwireError):           # its consumer does not ask for creation either
            admin.list_offsets({(topic, 0): "latest"}, timeout=2)
    assert not _exists(cfg, topic)


def test_send_to_a_missing_topic_fails_at_max_block_ms(no_auto_kafka):
    topic = _new()
    cfg = no_auto_kafka.client_config()
    with Producer(cfg, max_block_ms=1500) as p:
        t0 = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match=f"topic '{topic}' does not exist.*max_block_ms.*1500 ms.*"
                                                    "auto.create.topics.enable"):
            p.send(topic, b"x")
        took = time.monotonic() - t0
        assert 1.4 <= took < 4, took
    assert not _exists(cfg, topic)
    with Consumer(cfg, group_id=f"g-{topic}", auto_offset_reset="earliest") as c:    # asks, is not heard
        c.subscribe([topic])
        for _ in range(10):
            c.poll(200)
        assert not c.assignment()
    assert not _exists(cfg, topic)
