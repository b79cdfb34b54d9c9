"""kwire.tracing with OpenTelemetry's SDK (its in-memory span exporter):
send spans ended at the acknowledgement, the context carried in each
record's traceparent header, poll spans linking the records, process spans
continuing the producer's trace, rebalance spans; and nothing at all
without a tracer provider."""

from __future__ import annotations

import time

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from kwire._codec import SendingProducer
from kwire.consumer import Consumer
from kwire.errors import RecordTooLargeError
from kwire.producer import Producer
from kwire.tracing import process_span
from support.topics import fresh_topic




def _topic(bootstrap: str, partitions: int = 1) -> str:
    return fresh_topic(bootstrap, partitions, "t")


def _read(bootstrap: str, topic: str, n: int, **cfg):
    got = []
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", **cfg) as c:
        c.assign([(topic, 0)])
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            for recs in c.poll(200).values():
                got += recs
    return got


def _traceparent(record) -> str:
    return dict(record.headers)["traceparent"].decode()


def test_send_poll_and_process_spans(tansu, traced):
    provider, exporter = traced
    topic = _topic(tansu.bootstrap)
    with Producer(bootstrap_servers=tansu.bootstrap, tracer_provider=provider, client_id="tp") as p:
        futs = [p.send(topic, b"v%d" % i, headers=[("h", b"x"), ("traceparent", b"00-stale")]) for i in range(10)]
        metas = [f.get(30) for f in futs]
    sends = [s for s in exporter.get_finished_spans() if s.name == f"send {topic}"]
    assert len(sends) == 10
    by_offset = {s.attributes["messaging.kafka.offset"]: s for s in sends}
    assert set(by_offset) == {m.offset for m in metas}
    s = sends[0]
    assert s.kind == SpanKind.PRODUCER and s.attributes["messaging.system"] == "kafka"
    assert s.attributes["messaging.destination.name"] == topic and s.attributes["messaging.operation.type"] == "send"
    assert s.attributes["messaging.client.id"] == "tp" and s.attributes["messaging.destination.partition.id"] == "0"
    exporter.clear()

    records = _read(tansu.bootstrap, topic, 10, tracer_provider=provider)
    assert len(records) == 10
    for r in records:
        span = by_offset[r.offset]
        tp = _traceparent(r)      # the stale one replaced, the other header kept
        assert tp.startswith(f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}-")
        assert int(tp[-2:], 16) & 1                                    # sampled
        assert [k for k, _ in r.headers].count("traceparent") == 1 and ("h", b"x") in r.headers
    polls = [s for s in exporter.get_finished_spans() if s.name == f"poll {topic}"]
    assert polls and sum(s.attributes["messaging.batch.message_count"] for s in polls) == 10
    linked = {link.context.span_id for s in polls for link in s.links}
    assert linked == {s.context.span_id for s in sends}
    assert all(s.kind == SpanKind.CLIENT and s.attributes["messaging.operation.name"] == "poll" for s in polls)

    r = records[3]
    with process_span(r, provider, topic=topic, partition=0, group_id="g"):
        inner = provider.get_tracer("app").start_span("handler")
        inner.end()
    proc = next(s for s in exporter.get_finished_spans() if s.name == f"process {topic}")
    send = by_offset[r.offset]
    assert proc.kind == SpanKind.CONSUMER and proc.context.trace_id == send.context.trace_id
    assert proc.parent.span_id == send.context.span_id
    assert proc.attributes["messaging.kafka.offset"] == r.offset and proc.attributes["messaging.consumer.group.name"] == "g"
    handler = next(s for s in exporter.get_finished_spans() if s.name == "handler")
    assert handler.parent.span_id == proc.context.span_id


def test_a_failed_send_ends_its_span_with_the_error(tansu, traced):
    provider, exporter = traced
    topic = _topic(tansu.bootstrap)
    with Producer(bootstrap_servers=tansu.bootstrap, tracer_provider=provider, max_request_size=2000) as p:
        with pytest.raises(RecordTooLargeError):
            p.send(topic, b"x" * 5000)
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code == StatusCode.ERROR and span.attributes["error.type"] == "RecordTooLargeError"


def test_process_span_of_a_record_without_context_starts_a_trace(tansu, traced):
    provider, exporter = traced
    topic = _topic(tansu.bootstrap)
    with Producer(bootstrap_servers=tansu.bootstrap) as p:
        p.send(topic, b"plain").get(30)
    (r,) = _read(tansu.bootstrap, topic, 1)
    with pytest.raises(ValueError):
        with process_span(r, provider, topic=topic, partition=0):
            raise ValueError("the handler's bug")
    (span,) = exporter.get_finished_spans()
    assert span.parent is None and span.status.status_code == StatusCode.ERROR


def test_rebalance_spans(kafka, traced):
    provider, exporter = traced
    bootstrap = kafka.bootstrap("plaintext")
    topic = _topic(bootstrap, 2)
    with Consumer(bootstrap_servers=bootstrap, group_id=f"g-{topic}", tracer_provider=provider) as c:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(c.assignment()) < 2 and time.monotonic() < deadline:
            c.poll(100)
    names = [s.name for s in exporter.get_finished_spans()]
    assert "rebalance assign" in names and "rebalance revoke" in names     # joined, then left on close
    span = next(s for s in exporter.get_finished_spans() if s.name == "rebalance assign")
    assert span.attributes["messaging.consumer.group.name"] == f"g-{topic}"
    assert span.attributes["kwire.rebalance.partitions"] == 2


def test_no_tracer_no_tracing(tansu):
    with Producer(bootstrap_servers=tansu.bootstrap) as p:
        assert type(p) is Producer and type(p).send is SendingProducer.send     # the compiled send, untouched
        assert p._tracing is None
    with Consumer(bootstrap_servers=tansu.bootstrap) as c:
        assert c._tracing is None


def test_both_drivers_trace_sends_and_polls(kw, tansu, traced):
    provider, exporter = traced
    topic = _topic(tansu.bootstrap)
    with kw.Producer(bootstrap_servers=tansu.bootstrap, tracer_provider=provider) as p:
        for f in [p.send(topic, b"v%d" % i) for i in range(5)]:
            f.get(30)
    got = []
    with kw.Consumer(bootstrap_servers=tansu.bootstrap, auto_offset_reset="earliest", tracer_provider=provider) as c:
        c.assign([(topic, 0)])
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            for recs in c.poll(200).values():
                got += recs
    spans = exporter.get_finished_spans()
    sends = {s.context.span_id for s in spans if s.name == f"send {topic}"}
    assert len(sends) == 5
    assert {link.context.span_id for s in spans if s.name == f"poll {topic}" for link in s.links} == sends
