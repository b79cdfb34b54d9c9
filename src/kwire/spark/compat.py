"""Which Spark the installed PySpark is, and which of the Spark features
kwire uses it has (:data:`FEATURES`, logged by :mod:`kwire.spark` at
import).

``kwire[spark]`` supports PySpark 3.5 to 4.3 (:data:`SUPPORTED`):

==================  =====  ===================================================
feature             since  what kwire does with it / without it
==================  =====  ===================================================
data_source         4.0    ``format("kwire")`` (the Python Data Source API;
                           readers yield Arrow batches, batch writes take
                           them). Without it (3.5) only
                           ``kwire.spark.read`` / ``kwire.spark.write``.
filter_pushdown     4.1    batch reads fetch only what ``partition``,
                           ``offset`` and ``timestamp`` predicates allow;
                           without it every planned range is read (Spark
                           still filters the rows).
stream_arrow_writer 4.1    streaming writes get Arrow batches; without it
                           (4.0) Spark hands rows, which kwire turns back
                           into Arrow batches for ``Producer.send_arrow``.
admission_control   4.2    read limits (``maxOffsetsPerTrigger``,
                           ``minOffsetsPerTrigger``, ``maxTriggerDelay``)
                           and kwire's own ``Trigger.AvailableNow``;
                           without it those options are refused and Spark
                           runs ``Trigger.AvailableNow`` through its
                           wrapper (one batch up to the offsets of the
                           query's start).
==================  =====  ===================================================

Detection probes what kwire imports, not the version number: a feature is
there when the classes kwire subclasses or takes from Spark can be
imported (``pyspark.sql.datasource``'s ``DataSource``,
``DataSourceReader.pushFilters`` and the filter classes,
``DataSourceStreamArrowWriter``; ``pyspark.sql.streaming.datasource``'s
read limits and ``SupportsTriggerAvailableNow``). That is exactly what
decides whether kwire's modules import and which classes it hands Spark,
whatever the version string says (a vendor build with a backport, a
``.dev`` build); a pip-installed PySpark's JVM side is the same release as
its Python side. The version is parsed only to name releases in messages
and to warn about one outside :data:`SUPPORTED`.
"""

from __future__ import annotations

import importlib
import logging
import re
from dataclasses import dataclass, fields
from typing import Tuple

from kwire.spark.errors import SparkOptionError

__all__ = ["SparkFeatures", "FEATURES", "SINCE", "SUPPORTED", "detect", "require"]

log = logging.getLogger(__name__)

#: The PySpark releases ``kwire[spark]`` declares: from 3.5 up to (not including) 4.4.
SUPPORTED: Tuple[Tuple[int, int], Tuple[int, int]] = ((3, 5), (4, 4))

#: The first Spark release with each feature.
SINCE = {"data_source": "4.0", "filter_pushdown": "4.1", "stream_arrow_writer": "4.1", "admission_control": "4.2"}

_WHAT = {
    "data_source": 'format("kwire") (the Python Data Source API)',
    "filter_pushdown": "filter pushdown to Python data sources",
    "stream_arrow_writer": "Arrow batches in streaming writes",
    "admission_control": "read limits and Trigger.AvailableNow for Python stream readers",
}


@dataclass(frozen=True)
class SparkFeatures:
    """The installed PySpark's version and what it has (see the module doc)."""

    version: str
    data_source: bool
    filter_pushdown: bool
    stream_arrow_writer: bool
    admission_control: bool

    def has(self) -> Tuple[str, ...]:
        """The names of the features this Spark release has."""
        return tuple(f.name for f in fields(self) if f.name != "version" and getattr(self, f.name))

    def lacks(self) -> Tuple[str, ...]:
        """The names of the features this Spark release lacks."""
        return tuple(f.name for f in fields(self) if f.name != "version" and not getattr(self, f.name))

    def describe(self) -> str:
        """``PySpark 4.0.4: has data_source (4.0); lacks filter_pushdown (4.1+), ...``"""
        has = ", ".join(f"{n} ({SINCE[n]})" for n in self.has()) or "none"
        lacks = ", ".join(f"{n} ({SINCE[n]}+)" for n in self.lacks()) or "none"
        return f"PySpark {self.version}: has {has}; lacks {lacks}"


def _has(module: str, *names: str) -> bool:
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return False
    return all(hasattr(mod, n) for n in names)


def release(version: str) -> Tuple[int, int]:
    """``"4.0.4"`` -> ``(4, 0)``; ``(0, 0)`` if unreadable."""
    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def detect() -> SparkFeatures:
    """Probe the installed PySpark (see the module doc)."""
    import pyspark

    ds = "pyspark.sql.datasource"
    data_source = _has(ds, "DataSource", "DataSourceReader", "DataSourceStreamReader", "DataSourceArrowWriter",
                       "DataSourceStreamWriter")
    pushdown = data_source and _has(ds, "Filter", "EqualTo", "In") and hasattr(
        importlib.import_module(ds).DataSourceReader, "pushFilters")
    return SparkFeatures(
        version=pyspark.__version__,
        data_source=data_source,
        filter_pushdown=pushdown,
        stream_arrow_writer=data_source and _has(ds, "DataSourceStreamArrowWriter"),
        admission_control=data_source and _has("pyspark.sql.streaming.datasource", "ReadLimit", "ReadMaxRows",
                                               "ReadMinRows", "ReadAllAvailable", "SupportsTriggerAvailableNow"),
    )


def in_supported_range(version: str) -> bool:
    return SUPPORTED[0] <= release(version) < SUPPORTED[1]


def require(feature: str, what: str, features: "SparkFeatures") -> None:
    """Raise :class:`SparkOptionError` if ``features`` lacks ``feature``,
    naming ``what`` (an option, a call) and the Spark release that has it."""
    if not getattr(features, feature):
        raise SparkOptionError(f"{what} needs Spark {SINCE[feature]} or later ({_WHAT[feature]}); "
                               f"this is PySpark {features.version}")


#: The installed PySpark's features, probed once at import.
FEATURES = detect()
