"""kwire.metrics' exporters with the real libraries: OpenTelemetry's SDK
(its in-memory reader) and prometheus_client (a scrape of its HTTP
endpoint, parsed by its own parser)."""

from __future__ import annotations

import time
import urllib.request
import uuid

import pytest

from kwire.admin import Admin, NewTopic
from kwire.consumer import Consumer
from kwire.devbroker import free_port
from kwire.producer import Producer

N = 300


@pytest.fixture()
def clients(tansu):
    bootstrap = tansu.bootstrap
    topic = f"x-{uuid.uuid4().hex[:10]}"
    with Admin(bootstrap_servers=bootstrap) as a:
        a.create_topics([NewTopic(topic, 2)])
    p = Producer(bootstrap_servers=bootstrap, client_id="exp-producer", linger_ms=5)
    c = Consumer(bootstrap_servers=bootstrap, client_id="exp-consumer", auto_offset_reset="earliest")
    try:
        for i in range(N):
            p.send(topic, b"v%d" % i, partition=i % 2)
        p.flush(30)
        c.assign([(topic, 0), (topic, 1)])
        got, deadline = 0, time.monotonic() + 30
        while got < N and time.monotonic() < deadline:
            got += sum(len(r) for r in c.poll(200).values())
        assert got == N
        c.poll(100)
        yield topic, p, c
    finally:
        p.close()
        c.close()


def test_opentelemetry(clients):
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from kwire.metrics.otel import instrument

    topic, p, c = clients
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    inst = instrument(p, c, meter_provider=provider)
    assert "consumer-fetch-manager-metrics.records-lag" in inst.names
    data = reader.get_metrics_data()
    points = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            assert sm.scope.name == "kwire"
            for metric in sm.metrics:
                for pt in metric.data.data_points:
                    points[(metric.name, tuple(sorted(pt.attributes.items())))] = pt.value
    # the most granular series only: per partition, not the topic's nor the client's
    consumed = {k[1]: v for k, v in points.items() if k[0] == "consumer-fetch-manager-metrics.records-consumed-total"}
    assert set(consumed) == {(("client-id", "exp-consumer"), ("partition", str(part)), ("topic", topic))
                             for part in (0, 1)}
    assert sum(consumed.values()) == N
    for part in (0, 1):
        key = ("consumer-fetch-manager-metrics.records-lag",
               (("client-id", "exp-consumer"), ("partition", str(part)), ("topic", topic)))
        assert points[key] == 0
    sent = points[("producer-topic-metrics.record-send-total", (("client-id", "exp-producer"), ("topic", topic)))]
    assert sent == N
    assert any(k[0] == "producer-node-metrics.request-latency-avg" and v > 0 for k, v in points.items())
    inst.close()
    provider.shutdown()


def test_prometheus_scrape(clients):
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.parser import text_string_to_metric_families

    from kwire.metrics.prometheus import KwireCollector

    topic, p, c = clients
    registry = CollectorRegistry()
    registry.register(KwireCollector(p, c))
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        server.shutdown()
        thread.join(5)
    samples = {}
    types = {}
    for fam in text_string_to_metric_families(text):
        types[fam.name] = fam.type
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    assert types["kafka_consumer_fetch_manager_metrics_records_consumed"] == "counter"
    assert types["kafka_consumer_fetch_manager_metrics_records_lag"] == "gauge"
    assert sum(samples[("kafka_consumer_fetch_manager_metrics_records_consumed_total",
                        (("client_id", "exp-consumer"), ("partition", str(part)), ("topic", topic)))]
               for part in (0, 1)) == N
    for part in (0, 1):
        assert samples[("kafka_consumer_fetch_manager_metrics_records_lag",
                        (("client_id", "exp-consumer"), ("partition", str(part)), ("topic", topic)))] == 0
    assert samples[("kafka_producer_topic_metrics_record_send_total",
                    (("client_id", "exp-producer"), ("topic", topic)))] == N
    assert samples[("kafka_producer_metrics_buffer_available_bytes", (("client_id", "exp-producer"),))] == 33554432
    assert any(name == "kafka_consumer_node_metrics_request_total" and v > 0 for (name, _), v in samples.items())


def test_exporters_take_only_kwire_clients():
    from kwire.metrics.export import Sources

    with pytest.raises(TypeError, match="no kwire metrics"):
        Sources([object()])
