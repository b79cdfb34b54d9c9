"""kwire's metrics: what every client counts, named as Java's client names it.

Each client keeps counters and gauges (Java's ``records-consumed-rate``,
``records-lag-max``, ``request-latency-avg``, ``io-wait-ratio``,
``batch-size-avg``, ``record-error-rate``, ``buffer-available-bytes``...)
per client, per broker connection, per topic and partition, and per group.
Read them with ``client.metrics()``, a dict keyed as Java's JMX names read
(``"consumer-fetch-manager-metrics,topic=t,partition=0"``), or every
``statistics_interval_ms`` through ``stats_cb`` (librdkafka's names) as a
JSON document (:mod:`kwire.metrics.report`).

Where they are counted: a consumer's records, bytes, batches and
compression by the compiled decoder itself (cumulative C counters it
keeps per batch and per call), read per decode call; requests, responses,
latencies and throttling by each connection's channel, per request; a
producer's batches per batch; a group's rebalances per rebalance. Nothing
is counted per record in Python.

Modules: :mod:`~kwire.metrics.stats` (the sampled measure),
:mod:`~kwire.metrics.network`, :mod:`~kwire.metrics.clients` (the
figures), :mod:`~kwire.metrics.names` (Java's names),
:mod:`~kwire.metrics.report` (``stats_cb``).
"""

from kwire.metrics.names import Metric, fold
from kwire.metrics.report import StatsReporter, to_json
from kwire.metrics.stats import Sampled

__all__ = ["Metric", "fold", "Sampled", "StatsReporter", "to_json"]
