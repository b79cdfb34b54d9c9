"""OTLP metrics (OpenTelemetry's ``MetricsData`` protobuf), encoded by hand
for KIP-714's PushTelemetry: kwire's metrics as Java's client pushes them.

A metric's OTLP name is ``org.apache.kafka.`` + its group without
``-metrics`` + ``.`` + its name, dashes as dots
(``consumer-fetch-manager-metrics`` ``records-lag`` ->
``org.apache.kafka.consumer.fetch.manager.records.lag``); its tags but
``client-id`` are the data point's attributes, dashes as underscores
(``node_id``, ``topic``, ``partition``). ``-total`` metrics are monotonic
sums, as deltas since the last push when the broker asks for delta
temporality (its default) and cumulative otherwise; the others gauges.
NaN is sent as NaN, as Java sends it.

Only the fields used are written (field numbers of
opentelemetry/proto/metrics/v1/metrics.proto and common/v1/common.proto).
"""

from __future__ import annotations

import struct
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

from kwire.metrics.names import Metric

__all__ = ["otlp_name", "attributes_of", "encode_metrics", "Point", "DELTA", "CUMULATIVE"]

PREFIX = "org.apache.kafka."
DELTA, CUMULATIVE = 1, 2          # AggregationTemporality
_DOUBLE = struct.Struct("<d")
_FIXED64 = struct.Struct("<Q")


def otlp_name(m: Metric) -> str:
    group = m.group[:-len("-metrics")] if m.group.endswith("-metrics") else m.group
    return PREFIX + group.replace("-", ".") + "." + m.name.replace("-", ".")


def attributes_of(m: Metric) -> Tuple[Tuple[str, str], ...]:
    return tuple((k.replace("-", "_"), v) for k, v in m.tags if k != "client-id")


# ------------------------------------------------------------ protobuf writing
def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _bytes(field: int, data: bytes) -> bytes:
    return _key(field, 2) + _varint(len(data)) + data


def _str(field: int, text: str) -> bytes:
    return _bytes(field, text.encode("utf-8"))


def _fixed64(field: int, n: int) -> bytes:
    return _key(field, 1) + _FIXED64.pack(n & 0xFFFFFFFFFFFFFFFF)


def _double(field: int, x: float) -> bytes:
    return _key(field, 1) + _DOUBLE.pack(x)


def _uint(field: int, n: int) -> bytes:
    return _key(field, 0) + _varint(n)


def _key_value(key: str, value: str) -> bytes:
    return _str(1, key) + _bytes(2, _str(1, value))          # KeyValue{key, AnyValue{string_value}}


class Point:
    """One data point: its attributes, value and times (Unix nanoseconds)."""

    __slots__ = ("attributes", "value", "start", "time")

    def __init__(self, attributes: Tuple[Tuple[str, str], ...], value: float, start: int, time: int) -> None:
        self.attributes, self.value, self.start, self.time = attributes, value, start, time

    def encode(self) -> bytes:
        out = b"".join(_bytes(7, _key_value(k, v)) for k, v in self.attributes)
        return out + _fixed64(2, self.start) + _fixed64(3, self.time) + _double(4, float(self.value))


def encode_metrics(gauges: Mapping[str, List[Point]], sums: Mapping[str, List[Point]], temporality: int,
                   resource: Mapping[str, str], scope: Tuple[str, str]) -> bytes:
    """``MetricsData`` of one resource and scope: ``gauges`` and monotonic ``sums`` by OTLP name."""
    metrics: List[bytes] = []
    for name, points in gauges.items():
        gauge = b"".join(_bytes(1, p.encode()) for p in points)
        metrics.append(_str(1, name) + _bytes(5, gauge))
    for name, points in sums.items():
        body = b"".join(_bytes(1, p.encode()) for p in points) + _uint(2, temporality) + _uint(3, 1)
        metrics.append(_str(1, name) + _bytes(7, body))
    scope_metrics = _bytes(1, _str(1, scope[0]) + _str(2, scope[1])) + b"".join(_bytes(2, m) for m in metrics)
    res = b"".join(_bytes(1, _key_value(k, v)) for k, v in resource.items())
    resource_metrics = _bytes(1, res) + _bytes(2, scope_metrics)
    return _bytes(1, resource_metrics)


def matches(name: str, requested: Optional[Iterable[str]]) -> bool:
    """Whether the subscription's ``requested`` prefixes take ``name`` (``[""]``: every metric)."""
    return any(name.startswith(p) for p in (requested or ()))


def split(metrics: Iterable[Metric], requested: Iterable[str]) -> Dict[str, List[Metric]]:
    """The requested metrics by OTLP name."""
    out: Dict[str, List[Metric]] = {}
    req = list(requested)
    for m in metrics:
        name = otlp_name(m)
        if matches(name, req):
            out.setdefault(name, []).append(m)
    return out
