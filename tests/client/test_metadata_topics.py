"""A topic asked for while a metadata refresh is being sent gets its own
refresh (on both live brokers, Tansu and Apache Kafka). Before, the
client read its topics, sent the request, then cleared its "refresh
wanted" flags: a topic another thread
added in between (a producer's first send() while its sender thread made
the first request) was dropped until metadata_max_age_ms, and the send
timed out waiting for its metadata. Seen under load in the full suite as
"no metadata for topic ... within max_block_ms"."""

from __future__ import annotations

import time
import uuid

from kwire.admin import Admin, NewTopic
from kwire.client import Client
from kwire.config import CONSUMER, resolve


def test_a_topic_added_while_a_refresh_is_sent_is_refreshed(broker):
    first, second = (f"meta-{uuid.uuid4().hex[:8]}-{i}" for i in range(2))
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic(first, 1), NewTopic(second, 1)])
    client = Client(resolve(CONSUMER, {"bootstrap_servers": broker.bootstrap, "metadata_max_age_ms": 600000}))
    send = client._send_metadata
    added = []

    def send_then_add(*args):
        fut = send(*args)
        if not added:                   # the other thread's add_topics, right after the request is read
            added.append(second)
            client.add_topics([second])
        return fut

    client._send_metadata = send_then_add
    try:
        client.add_topics([first])
        deadline = time.monotonic() + 15
        while not ({first, second} <= set(client.cluster.partitions)) and time.monotonic() < deadline:
            client.poll(0.1)
        assert added == [second]
        assert {first, second} <= set(client.cluster.partitions), client.cluster.topics()
    finally:
        client.close()
