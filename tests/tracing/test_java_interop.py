"""Traces across kwire and Kafka's Java client with OpenTelemetry's
instrumentation (KafkaTelemetry, tests/support/otel_java.py), on Apache
Kafka: records Java produces carry its send spans' context, which kwire's
process spans continue; records kwire produces carry kwire's, which Java's
consumer spans continue (its process spans link to them, as OpenTelemetry's
Java instrumentation links a process span to its record's producer context
when receive telemetry is on)."""

from __future__ import annotations

import time

from kwire.consumer import Consumer
from kwire.producer import Producer
from kwire.tracing import process_span
from support.otel_java import java_traced
from support.topics import fresh_topic

N = 5




def _topic(bootstrap: str, partitions: int = 1) -> str:
    return fresh_topic(bootstrap, partitions, "otel")


def test_java_traces_go_on_in_kwire(kafka, traced):
    provider, exporter = traced
    bootstrap = kafka.bootstrap("plaintext")
    topic = _topic(bootstrap)
    spans = java_traced("produce", {"bootstrap.servers": bootstrap}, topic, N)
    java_sends = {s["span"]: s for s in spans if s["kind"] == "PRODUCER"}
    assert len(java_sends) == N
    got = []
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", tracer_provider=provider) as c:
        c.assign([(topic, 0)])
        deadline = time.monotonic() + 30
        while len(got) < N and time.monotonic() < deadline:
            for tp, recs in c.poll(200).items():
                for r in recs:
                    with process_span(r, provider, topic=tp.topic, partition=tp.partition):
                        got.append(r)
    assert len(got) == N
    processed = [s for s in exporter.get_finished_spans() if s.name == f"process {topic}"]
    assert len(processed) == N
    for s in processed:                      # each a child of one of Java's send spans, in its trace
        parent = java_sends[f"{s.parent.span_id:016x}"]
        assert f"{s.context.trace_id:032x}" == parent["trace"]
    polls = [s for s in exporter.get_finished_spans() if s.name == f"poll {topic}"]
    assert {f"{link.context.span_id:016x}" for p in polls for link in p.links} == set(java_sends)


def test_kwire_traces_go_on_in_java(kafka, traced):
    provider, exporter = traced
    bootstrap = kafka.bootstrap("plaintext")
    topic = _topic(bootstrap)
    with Producer(bootstrap_servers=bootstrap, tracer_provider=provider) as p:
        for f in [p.send(topic, b"kwire-%d" % i, partition=0) for i in range(N)]:
            f.get(30)
    sends = {f"{s.context.span_id:016x}": f"{s.context.trace_id:032x}"
             for s in exporter.get_finished_spans() if s.name == f"send {topic}"}
    assert len(sends) == N
    spans = java_traced("consume", {"bootstrap.servers": bootstrap, "group.id": f"g-{topic}"}, topic, N)
    # Java's process spans (children of its receive span, as its instrumentation makes them with
    # receive telemetry on) each link to the kwire send span of their record, in that span's trace
    processed = [s for s in spans if s["name"] == f"{topic} process"]
    assert len(processed) == N
    links = [(link["span"], link["trace"]) for s in processed for link in s["links"]]
    assert sorted(links) == sorted(sends.items())
    assert {s["attributes"]["messaging.kafka.message.offset"] for s in processed} == {str(i) for i in range(N)}
