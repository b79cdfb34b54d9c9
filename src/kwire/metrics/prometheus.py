"""A Prometheus collector of kwire's metrics (``pip install 'kwire[prometheus]'``).

``REGISTRY.register(KwireCollector(consumer, producer))``, then serve the
registry as usual (``prometheus_client.start_http_server``). Each metric
of :mod:`kwire.metrics` becomes a family named as the JMX exporter names
Java's client's: ``kafka_<group>_<name>`` with every ``-`` and ``.`` an
``_`` (``kafka_consumer_fetch_manager_metrics_records_lag``,
``kafka_producer_metrics_record_send_total``); ``-total`` metrics are
counters, the others gauges; the labels are ``client_id`` and the
metric's tags (``node_id``, ``topic``, ``partition``). A metric reported
at several granularities is exported at the finest only
(:func:`kwire.metrics.names.granular`). NaN (nothing recorded in the
window) is exported as NaN, as the JMX exporter does.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Iterator

try:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("kwire.metrics.prometheus needs prometheus_client: pip install 'kwire[prometheus]'") from e

from kwire.metrics.export import Sources
from kwire.metrics.names import Metric

__all__ = ["KwireCollector"]

_UNSAFE = re.compile(r"[^a-zA-Z0-9_]")


def family_name(m: Metric, namespace: str = "kafka") -> str:
    """``kafka_<group>_<name>``; a counter's without its ``_total`` (the family adds it)."""
    name = m.name[:-len("-total")] if m.kind == "counter" else m.name
    return _UNSAFE.sub("_", f"{namespace}_{m.group}_{name}")


def _label(key: str) -> str:
    return _UNSAFE.sub("_", key)


class KwireCollector:
    """Collects the metrics of ``clients`` (kwire's Producer, Consumer and Admin, or their kwire.aio
    counterparts) at each scrape."""

    def __init__(self, *clients: Any, namespace: str = "kafka") -> None:
        self._sources = Sources(clients)
        self._namespace = namespace

    def describe(self) -> Iterator[Any]:
        """The families these clients can report (no client is read at registration)."""
        seen = set()
        for m in self._sources.declared():
            name = family_name(m, self._namespace)
            if name not in seen:
                seen.add(name)
                yield self._family(m, name)

    def _family(self, m: Metric, name: str) -> Any:
        labels = ["client_id"] + [_label(k) for k, _ in m.tags]
        doc = f"{m.name} of Java's {m.group} (kwire.metrics)"
        cls = CounterMetricFamily if m.kind == "counter" else GaugeMetricFamily
        return cls(name, doc, labels=labels)

    def collect(self) -> Iterator[Any]:
        families: Dict[str, Any] = {}
        for client_id, m in self._sources.snapshot():     # one tag set per metric (granular): fixed labels
            name = family_name(m, self._namespace)
            fam = families.get(name)
            if fam is None:
                fam = families[name] = self._family(m, name)
            fam.add_metric([client_id] + [v for _, v in m.tags], m.value)
        yield from families.values()
