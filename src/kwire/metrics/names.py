"""The figures of :mod:`kwire.metrics.network` and
:mod:`kwire.metrics.clients`, named as Java's client names its metrics.

Each function yields :class:`Metric` values: Java's metric group (the JMX
``type``: ``consumer-metrics``, ``consumer-node-metrics``,
``consumer-fetch-manager-metrics``, ``consumer-coordinator-metrics``,
``producer-metrics``, ``producer-topic-metrics``...), its tags
(``node-id``, ``topic``, ``partition``), Java's metric name and the value.
Latencies and times are in milliseconds, as Java's; an average or maximum
with nothing recorded in its window is NaN, as Java's. ``-total`` metrics
are counters (cumulative), the others gauges.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from kwire.metrics.clients import FetchMetrics, GroupMetrics, PartitionFetched, ProduceMetrics, ShareMetrics
from kwire.metrics.network import NetworkMetrics, NodeMetrics
from kwire.metrics.stats import Sampled
from kwire.protocol.api_keys import ApiKey

__all__ = ["Metric", "network_metrics", "client_network_metrics", "fetch_metrics", "group_metrics", "produce_metrics",
           "share_metrics", "fold", "granular", "catalogue"]


class Metric(NamedTuple):
    group: str
    name: str
    tags: Tuple[Tuple[str, str], ...]
    value: float

    @property
    def kind(self) -> str:
        """``counter`` for a cumulative ``-total``, else ``gauge``."""
        return "counter" if self.name.endswith("-total") else "gauge"


def _ms(x: float) -> float:
    return x * 1000.0


def _rated(group: str, name: str, s: Sampled, now: float, tags: Tuple[Tuple[str, str], ...] = (),
           counted: bool = False) -> Iterator[Metric]:
    """``name-total`` and ``name-rate``: of the values recorded (``counted``: of how many were recorded)."""
    yield Metric(group, f"{name}-total", tags, float(s.count if counted else s.total))
    yield Metric(group, f"{name}-rate", tags, s.count_rate(now) if counted else s.rate(now))


def _stat(group: str, name: str, s: Sampled, now: float, tags: Tuple[Tuple[str, str], ...] = (),
          scale: float = 1.0) -> Iterator[Metric]:
    """``name-avg`` and ``name-max``."""
    yield Metric(group, f"{name}-avg", tags, s.avg(now) * scale)
    yield Metric(group, f"{name}-max", tags, s.max(now) * scale)


def _merged(stats: Iterable[Sampled], now: float) -> Tuple[float, float]:
    """The average and maximum of several Sampled together."""
    n = total = 0.0
    top = -math.inf
    for s in stats:
        c, t, m = s.live_sums(now)
        n += c
        total += t
        top = max(top, m)
    return (total / n if n else math.nan), (top if n else math.nan)


def network_metrics(prefix: str, nets: Sequence[NetworkMetrics], in_flight: Mapping[int, int], connections: int,
                    now: float) -> Iterator[Metric]:
    """``<prefix>-metrics`` (the client's connections together) and
    ``<prefix>-node-metrics`` per broker (``node-id`` ``node-N``, Java's
    tag; bootstrap connections are ``node--1``...). ``nets``: the
    client's (a consumer's group has a client of its own); ``in_flight``:
    requests in flight per node now; ``connections``: connections up now."""
    group = f"{prefix}-metrics"
    yield Metric(group, "connection-count", (), float(connections))
    for name, attr in (("connection-creation", "connects"), ("connection-close", "disconnects")):
        yield Metric(group, f"{name}-total", (), float(sum(getattr(n, attr).count for n in nets)))
        yield Metric(group, f"{name}-rate", (), sum(getattr(n, attr).count_rate(now) for n in nets))
    for name, attr, counted in (("request", "requests", True), ("response", "responses", True),
                                ("outgoing-byte", "requests", False), ("incoming-byte", "responses", False)):
        yield Metric(group, f"{name}-total", (),
                     float(sum(getattr(n, attr).count if counted else getattr(n, attr).total for n in nets)))
        yield Metric(group, f"{name}-rate", (),
                     sum(getattr(n, attr).count_rate(now) if counted else getattr(n, attr).rate(now) for n in nets))
    avg, top = _merged((n.latency for n in nets), now)
    yield Metric(group, "request-latency-avg", (), _ms(avg))
    yield Metric(group, "request-latency-max", (), _ms(top))
    avg, top = _merged((n.requests for n in nets), now)
    yield Metric(group, "request-size-avg", (), avg)
    yield Metric(group, "request-size-max", (), top)
    waited = sum(n.io_wait for n in nets)
    lived = sum(max(1e-9, now - n.started) for n in nets)
    yield Metric(group, "io-wait-time-ns-total", (), waited * 1e9)
    yield Metric(group, "io-wait-ratio", (), waited / lived)
    yield Metric(group, "select-total", (), float(sum(n.selects for n in nets)))
    yield Metric(group, "requests-in-flight", (), float(sum(in_flight.values())))
    nodes: Dict[int, List[NodeMetrics]] = {}
    for net in nets:
        for node_id, m in net.nodes.items():
            nodes.setdefault(node_id, []).append(m)
    for node_id, ms in sorted(nodes.items()):
        yield from _node(f"{prefix}-node-metrics", (("node-id", f"node-{node_id}"),), ms, in_flight.get(node_id, 0),
                         now)


def client_network_metrics(prefix: str, clients: Sequence[Any], now: float) -> List[Metric]:
    """:func:`network_metrics` of ``clients`` (kwire.client.Client: a consumer's own and its
    group's): their figures, and their connections now (``connection_states()``)."""
    in_flight: Dict[int, int] = {}
    up = 0
    for c in clients:
        for node, (_, state, n) in c.connection_states().items():
            in_flight[node] = in_flight.get(node, 0) + n
            up += state == "ready"
    return list(network_metrics(prefix, [c.metrics for c in clients], in_flight, up, now))


def _node(group: str, tags: Tuple[Tuple[str, str], ...], ms: List[NodeMetrics], in_flight: int,
          now: float) -> Iterator[Metric]:
    yield Metric(group, "request-total", tags, float(sum(m.requests for m in ms)))
    yield Metric(group, "request-rate", tags, sum(m.request_size.count_rate(now) for m in ms))
    yield Metric(group, "response-total", tags, float(sum(m.responses for m in ms)))
    yield Metric(group, "response-rate", tags, sum(m.latency.count_rate(now) for m in ms))
    yield Metric(group, "outgoing-byte-total", tags, float(sum(m.bytes_out for m in ms)))
    yield Metric(group, "outgoing-byte-rate", tags, sum(m.request_size.rate(now) for m in ms))
    yield Metric(group, "incoming-byte-total", tags, float(sum(m.bytes_in for m in ms)))
    avg, top = _merged((m.latency for m in ms), now)
    yield Metric(group, "request-latency-avg", tags, _ms(avg))
    yield Metric(group, "request-latency-max", tags, _ms(top))
    avg, top = _merged((m.request_size for m in ms), now)
    yield Metric(group, "request-size-avg", tags, avg)
    yield Metric(group, "request-size-max", tags, top)
    avg, top = _merged((m.throttle for m in ms), now)
    yield Metric(group, "throttle-time-avg", tags, avg)
    yield Metric(group, "throttle-time-max", tags, top)
    yield Metric(group, "requests-in-flight", tags, float(in_flight))
    yield Metric(group, "connection-creation-total", tags, float(sum(m.connects for m in ms)))
    yield Metric(group, "connection-close-total", tags, float(sum(m.disconnects for m in ms)))


def fetch_metrics(fm: FetchMetrics, net: NetworkMetrics, partitions: Iterable[Tuple[Tuple[str, int], Optional[int],
                                                                                        Optional[int]]],
                  now: float) -> Iterator[Metric]:
    """``consumer-fetch-manager-metrics``: the client's, per ``topic`` and
    per ``topic`` and ``partition``. ``partitions``: each assigned
    partition with its lag (the end a read may reach, the high watermark or
    the last stable offset, minus the position) and its lead (the position
    minus the log start offset), None where unknown yet."""
    group = "consumer-fetch-manager-metrics"
    yield from _rated(group, "records-consumed", fm.records, now)
    yield from _rated(group, "bytes-consumed", fm.bytes, now)
    fetch = net.apis.get(ApiKey.FETCH)
    yield from _fetches(group, net, ApiKey.FETCH, now)
    if fetch is not None:
        per = fm.records.total / fetch.latency.count if fetch.latency.count else math.nan
        yield Metric(group, "records-per-request-avg", (), per)
    compressed = sum(p.compressed for p in fm.parts.values())
    plain = sum(p.decompressed for p in fm.parts.values())
    yield Metric(group, "compression-rate-avg", (), compressed / plain if plain else math.nan)
    polls = "consumer-metrics"             # Java's group for the poll figures
    yield Metric(polls, "time-between-poll-avg", (), fm.between_polls.avg(now))
    yield Metric(polls, "time-between-poll-max", (), fm.between_polls.max(now))
    yield Metric(polls, "last-poll-seconds-ago", (),
                 float(int(now - fm.last_poll)) if fm.last_poll is not None else -1.0)
    for topic, (records, nbytes) in sorted(fm.topics.items()):
        tags = (("topic", topic),)
        yield from _rated(group, "records-consumed", records, now, tags)
        yield from _rated(group, "bytes-consumed", nbytes, now, tags)
    lags, leads = [], []
    for (topic, partition), lag, lead in partitions:
        tags = (("topic", topic), ("partition", str(partition)))
        yield Metric(group, "records-lag", tags, math.nan if lag is None else float(lag))
        yield Metric(group, "records-lead", tags, math.nan if lead is None else float(lead))
        if lag is not None:
            lags.append(lag)
        if lead is not None:
            leads.append(lead)
        p = fm.parts.get((topic, partition))
        if p is not None:
            yield Metric(group, "records-consumed-total", tags, float(p.records))
            yield Metric(group, "bytes-consumed-total", tags, float(p.bytes))
            yield Metric(group, "batches-consumed-total", tags, float(p.batches))
            yield Metric(group, "batch-size-avg", tags, p.bytes / p.batches if p.batches else math.nan)
            yield Metric(group, "compression-rate", tags, p.compressed / p.decompressed if p.decompressed else math.nan)
    yield Metric(group, "records-lag-max", (), float(max(lags)) if lags else math.nan)
    yield Metric(group, "records-lead-min", (), float(min(leads)) if leads else math.nan)


def share_metrics(sm: ShareMetrics, net: NetworkMetrics, now: float) -> Iterator[Metric]:
    """``consumer-share-fetch-manager-metrics`` (Java's KafkaShareConsumer's names)."""
    group = "consumer-share-fetch-manager-metrics"
    yield from _rated(group, "records-consumed", sm.records, now)
    yield from _rated(group, "bytes-consumed", sm.bytes, now)
    yield from _rated(group, "acknowledgements-send", sm.acks, now)
    yield from _rated(group, "acknowledgements-error", sm.ack_errors, now)
    yield Metric(group, "records-per-request-avg", (), sm.per_request.avg(now))
    yield Metric(group, "records-per-request-max", (), sm.per_request.max(now))
    yield from _fetches(group, net, ApiKey.SHARE_FETCH, now)


def _fetches(group: str, net: NetworkMetrics, api: int, now: float) -> Iterator[Metric]:
    """The requests of ``api`` (Fetch, ShareFetch) as ``fetch-*`` figures, and the brokers' throttling."""
    fetch = net.apis.get(api)
    if fetch is not None:
        yield Metric(group, "fetch-total", (), float(fetch.latency.count))
        yield Metric(group, "fetch-rate", (), fetch.latency.count_rate(now))
        yield from _stat(group, "fetch-latency", fetch.latency, now, scale=1000.0)
        yield from _stat(group, "fetch-size", fetch.size, now)
    avg, top = _merged((m.throttle for m in net.nodes.values()), now)
    yield Metric(group, "fetch-throttle-time-avg", (), avg)
    yield Metric(group, "fetch-throttle-time-max", (), top)


def group_metrics(prefix: str, gm: GroupMetrics, net: NetworkMetrics, assigned: int, now: float) -> Iterator[Metric]:
    """``<prefix>-coordinator-metrics``: rebalances, commits, joins, syncs, heartbeats."""
    group = f"{prefix}-coordinator-metrics"
    yield Metric(group, "assigned-partitions", (), float(assigned))
    yield Metric(group, "rebalance-total", (), float(gm.rebalance.count))
    yield Metric(group, "rebalance-rate-per-hour", (), gm.rebalance.count_rate(now) * 3600.0)
    yield Metric(group, "rebalance-latency-total", (), gm.rebalance.total)
    yield from _stat(group, "rebalance-latency", gm.rebalance, now)
    yield Metric(group, "failed-rebalance-total", (), float(gm.failed.count))
    yield Metric(group, "last-rebalance-seconds-ago", (),
                 float(int(now - gm.last)) if gm.last is not None else -1.0)
    for name, keys in (("commit", (ApiKey.OFFSET_COMMIT,)), ("join", (ApiKey.JOIN_GROUP,)),
                       ("sync", (ApiKey.SYNC_GROUP,)),
                       ("heartbeat", (ApiKey.HEARTBEAT, ApiKey.CONSUMER_GROUP_HEARTBEAT))):
        apis = [net.apis[k] for k in keys if k in net.apis]
        lat = [a.latency for a in apis]
        avg, top = _merged(lat, now)
        if name in ("commit", "heartbeat"):
            yield Metric(group, f"{name}-total", (), float(sum(s.count for s in lat)))
            yield Metric(group, f"{name}-rate", (), sum(s.count_rate(now) for s in lat))
        if name == "heartbeat":
            yield Metric(group, "heartbeat-response-time-max", (), _ms(top))
        else:
            label = "latency" if name == "commit" else "time"
            yield Metric(group, f"{name}-{label}-avg", (), _ms(avg))
            yield Metric(group, f"{name}-{label}-max", (), _ms(top))


def produce_metrics(pm: ProduceMetrics, net: NetworkMetrics, buffer_total: int, buffer_available: int,
                    now: float) -> Iterator[Metric]:
    """``producer-metrics`` (beyond the connections'), ``producer-topic-metrics``
    per ``topic`` and ``producer-partition-metrics`` per ``topic`` and ``partition``."""
    group = "producer-metrics"
    yield from _rated(group, "record-send", pm.records, now)
    yield from _rated(group, "record-retry", pm.retries, now)
    yield from _rated(group, "record-error", pm.errors, now)
    yield from _stat(group, "batch-size", pm.batch_size, now)
    yield Metric(group, "compression-rate-avg", (), pm.compression.avg(now))
    yield from _stat(group, "record-queue-time", pm.queue_time, now)
    produce = net.apis.get(ApiKey.PRODUCE)
    sent = produce.latency.count if produce is not None else 0
    yield Metric(group, "records-per-request-avg", (), pm.records.total / sent if sent else math.nan)
    yield Metric(group, "record-size-avg", (), pm.encoded / pm.records.total if pm.records.total else math.nan)
    if produce is not None:
        yield from _stat(group, "produce-latency", produce.latency, now, scale=1000.0)
    avg, top = _merged((m.throttle for m in net.nodes.values()), now)
    yield Metric(group, "produce-throttle-time-avg", (), avg)
    yield Metric(group, "produce-throttle-time-max", (), top)
    yield Metric(group, "buffer-total-bytes", (), float(buffer_total))
    yield Metric(group, "buffer-available-bytes", (), float(buffer_available))
    for topic, t in sorted(pm.topics.items()):
        tags = (("topic", topic),)
        yield from _rated("producer-topic-metrics", "record-send", t.records, now, tags)
        yield from _rated("producer-topic-metrics", "byte", t.bytes, now, tags)
        yield from _rated("producer-topic-metrics", "record-retry", t.retries, now, tags)
        yield from _rated("producer-topic-metrics", "record-error", t.errors, now, tags)
        yield Metric("producer-topic-metrics", "compression-rate", tags,
                     t.bytes.total / t.encoded if t.encoded else math.nan)
    for (topic, partition), p in sorted(pm.parts.items()):
        tags = (("topic", topic), ("partition", str(partition)))
        yield Metric("producer-partition-metrics", "record-send-total", tags, float(p.records))
        yield from _stat("producer-partition-metrics", "batch-size", p.batch_size, now, tags)


def fold(metrics: Iterable[Metric]) -> Dict[str, Dict[str, float]]:
    """``{group[,tag=value...]: {name: value}}``, the shape of ``client.metrics()``:
    ``"consumer-fetch-manager-metrics,topic=t,partition=0"`` as Java's JMX names read."""
    out: Dict[str, Dict[str, float]] = {}
    for m in metrics:
        key = m.group + "".join(f",{k}={v}" for k, v in m.tags)
        out.setdefault(key, {})[m.name] = m.value
    return out


def granular(metrics: Iterable[Metric]) -> List[Metric]:
    """Of a metric reported with several tag sets (``records-consumed-total``
    of the client and of each topic), the most granular only, as Java's
    OpenTelemetry bridge (``OpenTelemetryMetricsReporter``) keeps them, so
    that a sum over the series counts nothing twice; every series of an
    instrument then has the same tag keys."""
    metrics = list(metrics)
    widest: Dict[Tuple[str, str], int] = {}
    for m in metrics:
        key = (m.group, m.name)
        widest[key] = max(widest.get(key, 0), len(m.tags))
    return [m for m in metrics if len(m.tags) == widest[(m.group, m.name)]]


def catalogue(kind: str) -> List[Metric]:
    """Every metric a ``kind`` client ("consumer", "producer" or "admin")
    can report, with placeholder tags and values: the names the exporters
    declare and the docs list."""
    net = NetworkMetrics()
    net.node(1)
    for key in (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.OFFSET_COMMIT, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP,
                ApiKey.HEARTBEAT):
        net.api(key)
    if kind == "admin":
        return list(network_metrics("admin-client", [net], {}, 0, 0.0))
    if kind == "producer":
        pm = ProduceMetrics()
        pm.built("topic", 0, 1, 1, 1, 0.0)
        return list(network_metrics("producer", [net], {}, 0, 0.0)) + list(produce_metrics(pm, net, 1, 1, 0.0))
    if kind == "consumer":
        fm = FetchMetrics()
        fm.parts[("topic", 0)] = PartitionFetched()
        fm.topics["topic"] = (Sampled(), Sampled())
        return (list(network_metrics("consumer", [net], {}, 0, 0.0))
                + list(fetch_metrics(fm, net, [(("topic", 0), 0, 0)], 0.0))
                + list(group_metrics("consumer", GroupMetrics(), net, 0, 0.0)))
    raise ValueError(f"no metrics for {kind!r}: consumer, producer or admin")
