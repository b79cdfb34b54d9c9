"""Interceptors (``interceptor_classes``, kwire.interceptors) on Apache
Kafka, with kwire's blocking clients and kwire.aio's: ``on_send`` changes
what is sent, ``on_acknowledgement`` sees every record (acknowledged or
refused), ``on_consume`` / ``on_consume_columnar`` change what a poll
returns, ``on_commit`` sees what a commit stored, ``close`` runs at the
client's close; an interceptor that raises everywhere is logged
(rate-limited) and changes nothing.
"""

from __future__ import annotations

import logging
import uuid

import pytest

from kwire.admin import Admin, NewTopic
from kwire.errors import RecordTooLargeError
from kwire.types import TopicPartition
from support import interceptors as ics

pytestmark = pytest.mark.kafka

RECORDS = 20


def _topic(kafka, prefix: str) -> str:
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with Admin(kafka.client_config("plaintext")) as admin:
        admin.create_topics([NewTopic(topic, 2)])
    return topic


def _warnings(caplog) -> list:
    return [r for r in caplog.records if r.name == "kwire.interceptors" and r.levelno == logging.WARNING]


def _produce(kw, kafka, topic: str, raising: ics.Raising):
    """RECORDS records and one too large, through a name-made ``Stamping``
    and ``raising``; the ``Stamping`` made."""
    ics.MADE.clear()
    with kw.Producer(kafka.client_config("plaintext"), max_request_size=10_000, linger_ms=1,
                     interceptor_classes=["support.interceptors:Stamping", raising]) as p:
        futs = [p.send(topic, b"value-%d" % i, key=b"k%d" % i, headers=[("h", b"x")]) for i in range(RECORDS)]
        with pytest.raises(RecordTooLargeError):
            p.send(topic, b"x" * 20_000, partition=1)
        p.flush(30)
        metas = [f.get(30) for f in futs]
    [stamping] = ics.MADE
    return stamping, metas


def test_producer_interceptors_send_acknowledge_and_close(kw, kafka, caplog):
    topic = _topic(kafka, "icept-p")
    raising = ics.Raising()
    stamping, metas = _produce(kw, kafka, topic, raising)
    assert stamping.options is not None and stamping.options["max_request_size"] == 10_000   # configure()
    assert len(stamping.named("on_send")) == RECORDS + 1
    acks = stamping.named("on_acknowledgement")
    assert len(acks) == RECORDS + 1
    ok = sorted((m.partition, m.offset) for m, e in acks if e is None)
    assert ok == sorted((m.partition, m.offset) for m in metas)
    [(refused, error)] = [(m, e) for m, e in acks if e is not None]
    assert isinstance(error, RecordTooLargeError) and (refused.topic, refused.partition, refused.offset) == (topic, 1, -1)
    assert stamping.closed
    # the interceptor that raised everywhere: each method said once (rate-limited), nothing broken
    assert raising.raised == 2 * (RECORDS + 1) + 1
    said = {r.getMessage().split(" raised in ")[1].split(",")[0] for r in _warnings(caplog)}
    assert said == {"on_send", "on_acknowledgement", "close"} and len(_warnings(caplog)) == 3

    with kw.Consumer(kafka.client_config("plaintext"), auto_offset_reset="earliest") as c:
        c.assign([(topic, 0), (topic, 1)])
        got = []
        while len(got) < RECORDS:
            got += [r for rs in c.poll(5000).values() for r in rs]
    assert sorted(r.value for r in got) == sorted(b"VALUE-%d" % i for i in range(RECORDS))
    assert all(r.headers == (("h", b"x"), ("stamped", b"1")) for r in got)


def test_consumer_interceptors_consume_commit_and_close(kw, kafka, caplog):
    topic = _topic(kafka, "icept-c")
    with kw.Producer(kafka.client_config("plaintext")) as p:
        for i in range(RECORDS):
            p.send(topic, b"v%d" % i, partition=0)
        p.flush(30)
    filtering, raising = ics.Filtering(), ics.Raising()
    group = f"icept-{uuid.uuid4().hex[:8]}"
    with kw.Consumer(kafka.client_config("plaintext"), group_id=group, auto_offset_reset="earliest",
                     enable_auto_commit=False, interceptor_classes=[raising, filtering]) as c:
        c.assign([(topic, 0)])
        got = []
        while sum(filtering.named("on_consume")) < RECORDS:
            got += [r.offset for rs in c.poll(5000).values() for r in rs]
        assert got == list(range(0, RECORDS, 2))          # what the interceptor kept
        c.commit()
        assert filtering.named("on_commit")[-1][TopicPartition(topic, 0)].offset == RECORDS
        c.commit({(topic, 0): 5})
        assert filtering.named("on_commit")[-1][TopicPartition(topic, 0)].offset == 5
        c.commit_async({(topic, 0): 7}).result(30)        # said at the next poll, in the polling thread
        c.poll(0)
        assert filtering.named("on_commit")[-1][TopicPartition(topic, 0)].offset == 7
    assert filtering.closed
    assert raising.raised >= 3
    said = {r.getMessage().split(" raised in ")[1].split(",")[0] for r in _warnings(caplog)}
    assert {"on_consume", "on_commit", "close"} <= said


def test_columnar_polls_go_to_on_consume_columnar(kw, kafka):
    pytest.importorskip("pyarrow")
    topic = _topic(kafka, "icept-a")
    with kw.Producer(kafka.client_config("plaintext")) as p:
        for i in range(RECORDS):
            p.send(topic, b"v%d" % i, partition=0)
        p.flush(30)
    filtering = ics.Filtering()
    with kw.Consumer(kafka.client_config("plaintext"), auto_offset_reset="earliest",
                     interceptor_classes=[filtering]) as c:
        c.assign([(topic, 0)])
        rows = 0
        while sum(filtering.named("on_consume_columnar")) < RECORDS:
            rows += sum(b.num_rows for b in c.poll_columnar(5000).values())
    assert rows == len(filtering.named("on_consume_columnar"))      # one row kept per batch returned
    assert filtering.named("on_consume") == []


def test_option_takes_objects_classes_and_names():
    from kwire.config import PRODUCER, ConfigError, resolve

    one = ics.Raising()
    cfg = resolve(PRODUCER, {"bootstrap.servers": "h:1",
                             "interceptor.classes": "support.interceptors:Stamping, support.interceptors:Filtering"})
    assert cfg["interceptor_classes"] == (ics.Stamping, ics.Filtering)
    cfg = resolve(PRODUCER, None, {"bootstrap_servers": "h:1", "interceptor_classes": [one, ics.Stamping]})
    assert cfg["interceptor_classes"] == (one, ics.Stamping)
    with pytest.raises(ConfigError, match="module:Class"):
        resolve(PRODUCER, {"bootstrap.servers": "h:1",
                           "interceptor.classes": "io.opentelemetry.TracingProducerInterceptor"})
    with pytest.raises(ConfigError, match="has no Nope"):
        resolve(PRODUCER, {"bootstrap.servers": "h:1", "interceptor.classes": "support.interceptors:Nope"})
