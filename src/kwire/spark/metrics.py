"""The connector's source metrics ``minOffsetsBehindLatest``,
``maxOffsetsBehindLatest`` and ``avgOffsetsBehindLatest``, computed from a
streaming query's progress.

Spark's connector reports them in ``progress["sources"][i]["metrics"]``
through ``ReportsSourceMetrics.metrics(latestConsumedOffset)``. A Python data
source cannot: PySpark 4.2's JVM wrappers of a Python stream reader
(``PythonMicroBatchStream``, ``...WithAdmissionControl``,
``...WithTriggerAvailableNow``) implement ``MicroBatchStream``,
``SupportsAdmissionControl``, ``SupportsTriggerAvailableNow`` and
``AcceptsLatestSeenOffset``, not ``ReportsSourceMetrics``, and the Python
runner (``python_streaming_source_runner``) has no call for metrics; so a
kwire query's progress has an empty ``metrics`` map. What the progress does
carry is all the connector's figures come from: ``endOffset`` (the offsets
the batch read up to, the connector's ``latestConsumedOffset``) and
``latestOffset`` (from ``reportLatestOffset``: the latest offsets the source
saw, the connector's ``latestPartitionOffsets``). :func:`offsets_behind_latest`
computes the three figures from them as the connector does, as the same
strings.

:func:`source_metrics` gives every figure a query's Kafka sources (kwire's,
and the connector's too) have in one progress, as numbers: the offsets
behind latest (their sum as well), the records and their rates, and the
bytes and their rates when the stream was passed through
:func:`kwire.spark.listener.observe` (Spark's observed metrics: the one way
a figure counted on the executors reaches a query's progress).
:class:`kwire.spark.listener.MetricsListener` sets them as gauges of Spark's
metrics system.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any, Dict, List, Mapping, Union

__all__ = ["offsets_behind_latest", "source_metrics", "kafka_sources", "OBSERVED_RECORDS", "OBSERVED_BYTES",
           "GAUGES"]

#: The columns of :func:`kwire.spark.listener.observe`'s observed metrics.
OBSERVED_RECORDS = "kwire_records"
OBSERVED_BYTES = "kwire_bytes"

#: Every figure :func:`source_metrics` gives, in order: name, and whether it is a count (else a double).
GAUGES = (("numInputRows", True), ("inputRowsPerSecond", False), ("processedRowsPerSecond", False),
          ("numInputBytes", True), ("inputBytesPerSecond", False), ("processedBytesPerSecond", False),
          ("offsetsBehindLatest", True), ("minOffsetsBehindLatest", True), ("maxOffsetsBehindLatest", True),
          ("avgOffsetsBehindLatest", False))

#: How a query's progress describes a Kafka source: kwire's (a Python stream reader; the offsets tell it
#: apart from other Python sources) and Spark's connector (v2 and v1).
_PYTHON_STREAM = "org.apache.spark.sql.execution.datasources.v2.python.PythonMicroBatchStream"
_CONNECTOR = ("KafkaV2[", "KafkaSourceV1[")

OffsetJson = Union[str, Mapping[str, Mapping[str, int]], None]


def _offsets(value: OffsetJson) -> Dict[tuple, int]:
    if value is None:
        return {}
    obj = json.loads(value) if isinstance(value, str) else value
    if not isinstance(obj, Mapping):
        return {}
    return {(t, int(p)): int(o) for t, parts in obj.items() for p, o in parts.items()}


def java_double(d: float) -> str:
    """``Double.toString(d)`` as Java writes it: plain decimals with at
    least one digit after the point for 1e-3 <= |d| < 1e7, else
    ``d.dddE<n>``; the shortest digits that read back to ``d``."""
    if d == 0:
        return "0.0"
    if 1e-3 <= abs(d) < 1e7:
        s = repr(float(d))
        return s if "." in s else s + ".0"
    sign, digits, exp = Decimal(repr(float(d))).normalize().as_tuple()
    text = "".join(map(str, digits))
    exponent = len(text) - 1 + int(exp)
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{exponent}"


def offsets_behind_latest(progress: Mapping[str, Any], source: int = 0) -> Dict[str, str]:
    """The connector's ``{min,max,avg}OffsetsBehindLatest`` of one source of
    a progress (``query.lastProgress`` or one of ``recentProgress``, or a
    source's own progress): for each partition of ``latestOffset``, that
    offset minus the partition's ``endOffset``; their minimum, maximum
    (integers) and mean (Java's ``Double.toString``). Empty, as the
    connector's map is, when the progress has no latest or end offsets.
    A partition missing from ``endOffset`` (the connector would fail on it)
    is left out."""
    src = progress["sources"][source] if "sources" in progress else progress
    latest = _offsets(src.get("latestOffset"))
    end = _offsets(src.get("endOffset"))
    behind = [off - end[tp] for tp, off in latest.items() if tp in end]
    if not behind:
        return {}
    return {"minOffsetsBehindLatest": str(min(behind)), "maxOffsetsBehindLatest": str(max(behind)),
            "avgOffsetsBehindLatest": java_double(sum(behind) / len(behind))}


def _kafka_offsets(value: Any) -> bool:
    """Whether ``value`` reads as Kafka offsets JSON (``{"t": {"0": 23}}``)."""
    try:
        obj = json.loads(value) if isinstance(value, str) else value
        return isinstance(obj, Mapping) and bool(obj) and all(
            isinstance(parts, Mapping) and all(str(p).isdigit() and isinstance(o, int) for p, o in parts.items())
            for parts in obj.values())
    except ValueError:
        return False


def kafka_sources(progress: Mapping[str, Any]) -> List[int]:
    """The indexes of a progress' sources that read Kafka: Spark's connector,
    and Python stream readers whose offsets are Kafka's JSON (kwire's)."""
    out = []
    for i, src in enumerate(progress.get("sources") or ()):
        desc = str(src.get("description") or "")
        if desc.startswith(_CONNECTOR) or (desc.startswith(_PYTHON_STREAM) and _kafka_offsets(src.get("endOffset"))):
            out.append(i)
    return out


def _number(value: Any) -> float:
    """A progress figure; NaN where Spark left it out (it writes no NaN)."""
    return float(value) if value is not None else math.nan


def _observed(progress: Mapping[str, Any]) -> Dict[str, int]:
    """The sum of every observed metric with observe()'s columns; an
    observation of a batch without rows has nulls (0 records, 0 bytes)."""
    total: Dict[str, int] = {}
    for row in (progress.get("observedMetrics") or {}).values():
        if isinstance(row, Mapping) and OBSERVED_RECORDS in row:
            for col in (OBSERVED_RECORDS, OBSERVED_BYTES):
                if col in row:
                    total[col] = total.get(col, 0) + int(row[col] or 0)
    return total


def _as_dict(progress: Any) -> Mapping[str, Any]:
    """A progress as a dict: ``query.lastProgress`` is one; a listener's
    ``event.progress`` has its JSON; a JSON string is read."""
    if isinstance(progress, str):
        return json.loads(progress)
    if type(progress) is dict or not hasattr(progress, "json"):
        return progress
    return json.loads(progress.json)        # PySpark's StreamingQueryProgress: its rows are Row objects


def source_metrics(progress: Any) -> Dict[str, float]:
    """The figures of one progress over all of the query's Kafka sources
    (:func:`kafka_sources`), named as :data:`GAUGES`; empty when it has none.

    - ``numInputRows``, ``inputRowsPerSecond``, ``processedRowsPerSecond``:
      the sources' own, summed (NaN where Spark left a rate out);
    - ``numInputBytes``, ``inputBytesPerSecond``, ``processedBytesPerSecond``:
      the key and value bytes :func:`kwire.spark.listener.observe` counted,
      over the same time as Spark's row rates (the input rate over the time
      since the trigger before, the processed rate over this trigger); NaN
      for records without an observation;
    - ``offsetsBehindLatest`` (the query's lag: every partition's latest
      offset minus the batch's end), and the connector's
      ``{min,max,avg}OffsetsBehindLatest``; NaN without latest offsets.

    ``progress`` is ``query.lastProgress`` (or one of ``recentProgress``),
    a listener event's ``progress``, or its JSON."""
    p = _as_dict(progress)
    srcs = [p["sources"][i] for i in kafka_sources(p)]
    if not srcs:
        return {}
    rows = sum(int(s.get("numInputRows") or 0) for s in srcs)
    in_rate = sum(_number(s.get("inputRowsPerSecond")) for s in srcs)
    done_rate = sum(_number(s.get("processedRowsPerSecond")) for s in srcs)
    out: Dict[str, float] = {"numInputRows": rows, "inputRowsPerSecond": in_rate, "processedRowsPerSecond": done_rate}
    seen = _observed(p)
    size = seen.get(OBSERVED_BYTES)
    if size is None and rows == 0:
        size = 0                      # a trigger without a batch has no observation, and no bytes
    if size is None:
        out.update(numInputBytes=math.nan, inputBytesPerSecond=math.nan, processedBytesPerSecond=math.nan)
    else:
        per_row = size / rows if rows else 0.0
        out.update(numInputBytes=size, inputBytesPerSecond=per_row * in_rate, processedBytesPerSecond=per_row * done_rate)
    behind = []
    for s in srcs:
        latest, end = _offsets(s.get("latestOffset")), _offsets(s.get("endOffset"))
        behind += [off - end[tp] for tp, off in latest.items() if tp in end]
    if behind:
        out.update(offsetsBehindLatest=sum(behind), minOffsetsBehindLatest=min(behind),
                   maxOffsetsBehindLatest=max(behind), avgOffsetsBehindLatest=sum(behind) / len(behind))
    else:
        out.update(offsetsBehindLatest=math.nan, minOffsetsBehindLatest=math.nan, maxOffsetsBehindLatest=math.nan,
                   avgOffsetsBehindLatest=math.nan)
    return out
