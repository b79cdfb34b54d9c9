"""The protocol layer against both live brokers (Tansu and Apache Kafka, the
``broker`` fixture), through kwire's own connection layer: version
negotiation, metadata, topic admin, offsets, configs, cluster description."""

from __future__ import annotations

import uuid

import pytest

from kwire.admin import Admin, NewTopic
from kwire.client import Client
from kwire.config import ADMIN, resolve
from kwire.consumer import Consumer
from kwire.errors import TopicAlreadyExistsError
from kwire.protocol import client_ranges, messages as m
from support.wire import exchange


def _name(prefix="p"):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_api_versions_every_version_and_negotiation(broker):
    ranges = None
    for v in range(m.ApiVersionsRequest.MIN_VERSION, m.ApiVersionsRequest.MAX_VERSION + 1):
        frame = exchange(broker.host, broker.port, m.ApiVersionsRequest(client_software_name="kwire",
                                                                      client_software_version="1"), v)
        from kwire.protocol import decode_response

        corr, resp = decode_response(frame, m.ApiVersionsResponse, v)
        assert corr == 1
        if resp.error_code == 0:
            ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        else:
            assert resp.error_code == 35          # a version it does not know: v0 body, its range
    client = Client(resolve(ADMIN, {"bootstrap.servers": broker.bootstrap}))
    try:
        client.refresh_metadata()
        node = next(iter(client.cluster.brokers))
        conn = client.wait_ready(node, __import__("time").monotonic() + 10)
        ours = client_ranges()
        for key, version in conn.versions.items():
            assert max(ours[key][0], ranges[key][0]) <= version == min(ours[key][1], ranges[key][1])
    finally:
        client.close()


def test_topics_metadata_configs_cluster(broker):
    name = _name()
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        ids = admin.create_topics([NewTopic(name, 3)])
        assert name in ids
        with pytest.raises(TopicAlreadyExistsError) as e:
            admin.create_topics([NewTopic(name, 3)])
        assert e.value.topic == name and not e.value.retriable
        desc = admin.describe_topics([name])[name]
        assert [p.partition for p in desc.partitions] == [0, 1, 2]
        assert name in admin.list_topics()
        configs = admin.describe_configs(topics=[name])
        assert ("topic", name) in configs
        cluster = admin.describe_cluster()
        assert cluster.cluster_id == broker.cluster_id and cluster.brokers[0].port == broker.port
        admin.delete_topics([name])
        assert name not in admin.list_topics()


def test_list_offsets(broker):
    from kwire.producer import Producer

    name = _name()
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic(name, 1)])
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=0) as p:
        for i in range(3):
            # one batch each: Tansu 0.6.0's "latest" is only right then (Kafka's is in any case)
            p.send(name, b"x", partition=0).get(10)
    with Consumer(bootstrap_servers=broker.bootstrap) as c:
        tp = (name, 0)
        assert c.beginning_offsets([tp])[tp] == 0
        assert c.end_offsets([tp])[tp] == 3
    if broker.is_kafka:
        # Apache Kafka's "latest" is the log end whatever the batches: five records in one batch more
        with Producer(bootstrap_servers=broker.bootstrap, linger_ms=100) as p:
            sent = [p.send(name, b"y", partition=0) for _ in range(5)]
            p.flush(10)
        assert {f.get(0).offset for f in sent} == set(range(3, 8))
        with Consumer(bootstrap_servers=broker.bootstrap) as c:
            assert c.end_offsets([tp])[tp] == 8
            assert c.offsets_for_times({tp: 0})[tp].offset == 0
            assert c.offsets_for_times({tp: 2**62})[tp] is None       # no record that late
