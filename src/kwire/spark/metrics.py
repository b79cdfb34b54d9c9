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
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, Dict, Mapping, Union

__all__ = ["offsets_behind_latest"]

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
