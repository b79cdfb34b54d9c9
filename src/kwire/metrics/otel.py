"""kwire's metrics as OpenTelemetry instruments (``pip install 'kwire[otel]'``).

``instrument(consumer, producer)`` registers, on the global meter provider
(or ``meter_provider``), one observable instrument per metric of
:mod:`kwire.metrics`, named and attributed as OpenTelemetry's bridge of
Java's client (``OpenTelemetryMetricsReporter``) names them: the
instrument ``<group>.<name>`` (``consumer-fetch-manager-metrics.records-lag``),
``-total`` metrics as observable counters and the others as observable
gauges, with the attributes ``client-id`` and the metric's tags
(``node-id``, ``topic``, ``partition``), at the finest granularity only.
Each collection reads every client once. Only ``opentelemetry-api`` is
needed; the SDK (or any implementation of the API) exports them.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Iterable, List, Optional

try:
    from opentelemetry import metrics as otel_metrics
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("kwire.metrics.otel needs opentelemetry-api: pip install 'kwire[otel]'") from e

from kwire.metrics.export import Sources

__all__ = ["instrument", "Instruments"]


class Instruments:
    """What :func:`instrument` registered (``names``); ``close()`` stops reporting."""

    def __init__(self, sources: Sources, meter: Any) -> None:
        self._sources = sources
        self.names: List[str] = []
        self._closed = False
        for m in sources.declared():
            name = f"{m.group}.{m.name}"
            make = meter.create_observable_counter if m.kind == "counter" else meter.create_observable_gauge
            make(name, callbacks=[self._observer(m.group, m.name)], description=f"Java's {m.group} {m.name}")
            self.names.append(name)

    def _observer(self, group: str, name: str) -> Callable[[Any], Iterable[Any]]:
        def observe(_options: Any) -> Iterable[Any]:
            if self._closed:
                return []
            out = []
            for client_id, m in self._sources.series(group, name):
                if not math.isnan(m.value):
                    attrs: Dict[str, str] = {"client-id": client_id}
                    attrs.update(m.tags)
                    out.append(otel_metrics.Observation(m.value, attrs))
            return out
        return observe

    def close(self) -> None:
        """Report nothing more (OpenTelemetry's API cannot remove an instrument)."""
        self._closed = True


def instrument(*clients: Any, meter_provider: Optional[Any] = None) -> Instruments:
    """Observable instruments for the metrics of ``clients`` (kwire's Producer,
    Consumer and Admin, or their kwire.aio counterparts)."""
    from kwire import __version__

    provider = meter_provider if meter_provider is not None else otel_metrics.get_meter_provider()
    return Instruments(Sources(clients), provider.get_meter("kwire", __version__))
