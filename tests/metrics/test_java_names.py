"""kwire's metric names are Java's: every metric kwire reports (the
catalogue of kwire.metrics.names) exists under the same group and name,
with the same tag keys, in what Kafka's Java client 4.4 registers, but the
few kwire adds, listed here so that a new one is a decision, not an accident."""

from __future__ import annotations

import uuid

from kwire.admin import Admin, NewTopic
from kwire.metrics.names import catalogue
from support.java_peer import java_metric_names

#: kwire's figures Java's client does not have (group, name), per client kind
KWIRE_ONLY = {
    "consumer": {
        ("consumer-metrics", "requests-in-flight"),                       # Java: the producer's only
        ("consumer-metrics", "request-latency-avg"),                      # Java: per node only
        ("consumer-metrics", "request-latency-max"),
        ("consumer-fetch-manager-metrics", "compression-rate-avg"),      # Java: the producer's only
        ("consumer-fetch-manager-metrics", "batches-consumed-total"),
        ("consumer-fetch-manager-metrics", "batch-size-avg"),
        ("consumer-fetch-manager-metrics", "compression-rate"),
        ("consumer-node-metrics", "throttle-time-avg"),
        ("consumer-node-metrics", "throttle-time-max"),
        ("consumer-node-metrics", "requests-in-flight"),
        ("consumer-node-metrics", "connection-creation-total"),
        ("consumer-node-metrics", "connection-close-total"),
    },
    "producer": {
        ("producer-metrics", "produce-latency-avg"),
        ("producer-metrics", "produce-latency-max"),
        ("producer-partition-metrics", "record-send-total"),
        ("producer-partition-metrics", "batch-size-avg"),
        ("producer-partition-metrics", "batch-size-max"),
        ("producer-node-metrics", "throttle-time-avg"),
        ("producer-node-metrics", "throttle-time-max"),
        ("producer-node-metrics", "requests-in-flight"),
        ("producer-node-metrics", "connection-creation-total"),
        ("producer-node-metrics", "connection-close-total"),
    },
    "admin": {
        ("admin-client-metrics", "requests-in-flight"),
        ("admin-client-metrics", "request-latency-avg"),                  # Java: per node only
        ("admin-client-metrics", "request-latency-max"),
        ("admin-client-node-metrics", "throttle-time-avg"),
        ("admin-client-node-metrics", "throttle-time-max"),
        ("admin-client-node-metrics", "requests-in-flight"),
        ("admin-client-node-metrics", "connection-creation-total"),
        ("admin-client-node-metrics", "connection-close-total"),
    },
}


def test_metric_names_are_javas(kafka):
    bootstrap = kafka.bootstrap("plaintext")
    topic = f"names-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap_servers=bootstrap) as a:
        a.create_topics([NewTopic(topic, 1)])
    java = java_metric_names({"bootstrap.servers": bootstrap}, topic, f"g-{topic}")
    for kind, only in KWIRE_ONLY.items():
        theirs = java[kind]
        ours = {}
        for m in catalogue(kind):
            # Java tags every metric with client-id; kwire's tags are the rest
            ours.setdefault((m.group, m.name), set()).add(tuple(sorted(["client-id", *(k for k, _ in m.tags)])))
        missing = {k for k in ours if k not in theirs} - only
        assert not missing, f"{kind}: not Java's names: {sorted(missing)}"
        assert not only - set(ours), f"{kind}: listed as kwire's own but not reported: {sorted(only - set(ours))}"
        assert not only & set(theirs), f"{kind}: Java has these now: {sorted(only & set(theirs))}"
        for key, tag_sets in ours.items():
            if key in theirs:         # kwire reports it with (at least) one of the tag sets Java registers
                assert tag_sets & theirs[key], (kind, key, sorted(tag_sets), sorted(theirs[key]))
