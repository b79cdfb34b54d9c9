"""client.metrics() and stats_cb (kwire.metrics) on both live brokers, with
the blocking clients and kwire.aio's (the ``kw`` fixture): the figures are
the records and bytes that went through, in Java's metric names."""

from __future__ import annotations

import json
import logging
import math
import time
import uuid

import pytest

from kwire.admin import Admin
from kwire.consumer import Consumer
from support.topics import fresh_topic

N = 2000


def _topic(bootstrap: str, partitions: int = 2) -> str:
    return fresh_topic(bootstrap, partitions, "m")


def _produce(kw, bootstrap: str, topic: str, n: int = N, **cfg):
    with kw.Producer(bootstrap_servers=bootstrap, compression_type="lz4", linger_ms=5, **cfg) as p:
        futs = [p.send(topic, b'{"n": %d, "pad": "%s"}' % (i, b"x" * 80), key=b"k%d" % (i % 10)) for i in range(n)]
        p.flush(30)
        metas = [f.get(30) for f in futs]
        m = p.metrics()
    return metas, m


def _drain(c, n: int, timeout: float = 30.0) -> int:
    got = 0
    deadline = time.monotonic() + timeout
    while got < n and time.monotonic() < deadline:
        got += sum(len(r) for r in c.poll(200).values())
    return got


def test_producer_metrics(kw, broker):
    topic = _topic(broker.bootstrap)
    metas, m = _produce(kw, broker.bootstrap, topic)
    pm = m["producer-metrics"]
    assert pm["record-send-total"] == N
    assert pm["record-error-total"] == 0 and pm["record-retry-total"] == 0
    assert pm["record-send-rate"] > 0
    assert 0 < pm["batch-size-avg"] <= pm["batch-size-max"]
    assert 0 < pm["compression-rate-avg"] < 1            # lz4 on repetitive values
    assert pm["buffer-available-bytes"] == pm["buffer-total-bytes"] == 33554432   # flushed: nothing buffered
    assert pm["records-per-request-avg"] >= 1
    assert pm["produce-latency-avg"] > 0
    assert pm["record-queue-time-max"] >= 0
    tm = m[f"producer-topic-metrics,topic={topic}"]
    assert tm["record-send-total"] == N
    assert 0 < tm["compression-rate"] < 1
    per_part = {p: sum(1 for x in metas if x.partition == p) for p in (0, 1)}
    for p in (0, 1):
        assert m[f"producer-partition-metrics,topic={topic},partition={p}"]["record-send-total"] == per_part[p]
    client = m["producer-metrics"]
    assert client["connection-count"] >= 1 and client["request-total"] >= 2 and client["outgoing-byte-total"] > 0
    assert client["request-latency-avg"] > 0
    nodes = [k for k in m if k.startswith("producer-node-metrics,node-id=node-")]
    assert nodes and sum(m[k]["request-total"] for k in nodes) == client["request-total"]
    if kw.name == "sync":
        assert 0 <= client["io-wait-ratio"] <= 1


def test_consumer_metrics(kw, broker):
    topic = _topic(broker.bootstrap)
    metas, _ = _produce(kw, broker.bootstrap, topic)
    ends = {p: max(x.offset for x in metas if x.partition == p) + 1 for p in (0, 1)}
    with kw.Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", max_poll_records=50) as c:
        c.assign([(topic, 0), (topic, 1)])
        first = _drain(c, 1)
        m = c.metrics()
        lags = [m[f"consumer-fetch-manager-metrics,topic={topic},partition={p}"]["records-lag"] for p in (0, 1)]
        known = [x for x in lags if not math.isnan(x)]
        assert known and max(known) > 0            # behind: records are still to read
        got = first + _drain(c, N - first)
        assert got == N
        c.poll(200)                                 # the fetch after the last records: the lag is 0
        m = c.metrics()
    fm = m["consumer-fetch-manager-metrics"]
    assert fm["records-consumed-total"] == N
    assert fm["bytes-consumed-total"] > N * 10
    assert fm["fetch-total"] >= 1 and fm["fetch-latency-avg"] >= 0 and fm["fetch-size-avg"] > 0
    assert fm["records-lag-max"] == 0
    assert 0 < fm["compression-rate-avg"] < 1
    assert m["consumer-metrics"]["last-poll-seconds-ago"] >= 0 and m["consumer-metrics"]["time-between-poll-avg"] >= 0
    assert m[f"consumer-fetch-manager-metrics,topic={topic}"]["records-consumed-total"] == N
    for p in (0, 1):
        pm = m[f"consumer-fetch-manager-metrics,topic={topic},partition={p}"]
        assert pm["records-consumed-total"] == sum(1 for x in metas if x.partition == p)
        assert pm["records-lag"] == 0
        assert pm["records-lead"] == ends[p]
        assert pm["batches-consumed-total"] >= 1 and pm["batch-size-avg"] > 0
        assert 0 < pm["compression-rate"] < 1
    assert m["consumer-metrics"]["connection-count"] >= 1
    assert m["consumer-metrics"]["incoming-byte-total"] >= fm["bytes-consumed-total"]


def test_stats_cb(broker, caplog):
    topic = _topic(broker.bootstrap)
    _produce(_Sync, broker.bootstrap, topic, 200)
    docs = []
    with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                  statistics_interval_ms=100, stats_cb=docs.append) as c:
        c.assign([(topic, 0), (topic, 1)])
        assert _drain(c, 200) == 200
        deadline = time.monotonic() + 5
        while len(docs) < 3 and time.monotonic() < deadline:
            c.poll(100)
    assert len(docs) >= 3
    doc = json.loads(docs[-1])
    assert doc["type"] == "consumer" and doc["client_id"] == "kwire" and doc["rxmsgs"] == 200
    parts = doc["topics"][topic]["partitions"]
    assert {parts[p]["consumer_lag"] for p in ("0", "1")} == {0}
    assert sum(parts[p]["rxmsgs"] for p in ("0", "1")) == 200
    assert all(b["rtt"]["cnt"] >= 1 for b in doc["brokers"].values() if b["nodeid"] >= 0)
    assert doc["metrics"]["consumer-fetch-manager-metrics"]["records-consumed-total"] == 200

    def broken(_):
        raise RuntimeError("the callback's bug")

    caplog.set_level(logging.WARNING, logger="kwire.metrics.report")
    with Consumer(bootstrap_servers=broker.bootstrap, statistics_interval_ms=50, stats_cb=broken) as c:
        c.assign([(topic, 0)])
        end = time.monotonic() + 1
        while time.monotonic() < end:
            c.poll(100)
    said = [r for r in caplog.records if "stats_cb raised" in r.getMessage()]
    assert len(said) == 1                           # said once, not every 50 ms


class _Sync:
    from kwire.producer import Producer


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_metrics(kafka, protocol):
    bootstrap = kafka.bootstrap("plaintext")
    topic = _topic(bootstrap)
    _produce(_Sync, bootstrap, topic, 100)
    with Consumer(bootstrap_servers=bootstrap, group_id=f"g-{uuid.uuid4().hex[:8]}", group_protocol=protocol,
                  auto_offset_reset="earliest", enable_auto_commit=False) as c:
        c.subscribe([topic])
        assert _drain(c, 100) == 100
        c.commit()
        deadline = time.monotonic() + 10
        while c.metrics()["consumer-coordinator-metrics"]["heartbeat-total"] < 1 and time.monotonic() < deadline:
            c.poll(100)                                 # (classic: the first heartbeat comes after 3 s)
        m = c.metrics()["consumer-coordinator-metrics"]
    assert m["assigned-partitions"] == 2
    assert m["rebalance-total"] >= 1 and m["rebalance-latency-max"] > 0
    assert m["last-rebalance-seconds-ago"] >= 0 and m["failed-rebalance-total"] == 0
    assert m["commit-total"] >= 1 and m["commit-latency-avg"] > 0
    assert m["heartbeat-total"] >= 1
    if protocol == "classic":
        assert m["join-time-max"] > 0 and m["sync-time-max"] > 0


def test_admin_metrics(broker):
    with Admin(bootstrap_servers=broker.bootstrap) as a:
        a.list_topics()
        m = a.metrics()
    assert m["admin-client-metrics"]["request-total"] >= 1
    assert any(k.startswith("admin-client-node-metrics,node-id=") for k in m)
