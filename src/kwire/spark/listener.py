"""A streaming query's Kafka figures in its progress and in Spark's metrics
system.

- :func:`observe` counts a stream's records and key and value bytes as
  Spark's observed metrics, so that every progress of the query carries them
  (``progress["observedMetrics"]["kwire"]``): a Python data source cannot
  report source metrics (see :mod:`kwire.spark.metrics`), and an
  observation is how a figure counted in the executors reaches the driver,
  with the batch, on every Spark release.
- :class:`MetricsListener`, a ``StreamingQueryListener``, turns each
  progress into :func:`kwire.spark.metrics.source_metrics` and sets them as
  gauges of Spark's metrics system (Dropwizard, the driver's), one source
  per query named ``kwire.streaming.<query name or id>`` as Spark names its
  own (``spark.streaming.<query name or id>``, with
  ``spark.sql.streaming.metricsEnabled``). Every sink the application
  configures (``spark.metrics.conf.*``: JMX, Prometheus servlet, Graphite,
  CSV, ...) then reports them beside Spark's. The source is registered at
  the query's first progress with a Kafka source and removed when the query
  ends.

The gauges are JVM objects (``DefaultSettableGauge``) the listener sets,
so the metrics system's reporters never call into Python. The source itself
is a Python object implementing Spark's ``Source`` through py4j's callback
server (which PySpark starts for the listener): Spark asks it for its name
and registry when it is registered and removed. This needs a classic
session; a Spark Connect client has no JVM to reach, and runs listeners on
the server, so :class:`MetricsListener` refuses it (read
``source_metrics(query.lastProgress)`` there). PySpark 4.3.0's driver
cannot be reflected on by py4j where the metrics system is (its
``SparkEnv`` names protobuf classes its jars lack): the listener checks as
it is made, from the caller's thread, and refuses, naming the remedy
(protobuf-java on ``spark.driver.extraClassPath``), rather than fail in the
listener bus's thread, which would stop the SparkContext.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from functools import reduce
from typing import Any, Dict, Optional

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.types import BinaryType

from kwire.errors import KwireError
from kwire.spark.compat import FEATURES, release
from kwire.spark.metrics import GAUGES, OBSERVED_BYTES, OBSERVED_RECORDS, source_metrics

__all__ = ["observe", "MetricsListener", "SOURCE_PREFIX"]

log = logging.getLogger(__name__)

#: The metrics system's source of a query: ``<prefix>.<query name or id>``.
SOURCE_PREFIX = "kwire.streaming"


def observe(df: DataFrame, name: str = "kwire") -> DataFrame:
    """``df`` observed as ``name``: each batch's records (``kwire_records``)
    and the bytes of its binary ``key`` and ``value`` (``kwire_bytes``, null
    counted as 0). Apply it to the stream as ``format("kwire")`` (or
    ``format("kafka")``) loads it, before any filter; a typed ``key`` or
    ``value`` (``keyFormat``, ``valueFormat``) is decoded already and not
    counted. Give each source of a query its own ``name``:
    :func:`~kwire.spark.metrics.source_metrics` adds them up."""
    types = {f.name: f.dataType for f in df.schema.fields}
    sizes = [F.coalesce(F.octet_length(F.col(c)), F.lit(0)) for c in ("key", "value")
             if isinstance(types.get(c), BinaryType)]
    figures = [F.count(F.lit(1)).alias(OBSERVED_RECORDS)]
    if sizes:
        figures.append(F.sum(reduce(lambda a, b: a + b, sizes)).cast("long").alias(OBSERVED_BYTES))
    return df.observe(name, *figures)


class _QuerySource:
    """One query's gauges, as a Spark metrics ``Source`` (through py4j)."""

    def __init__(self, jvm: Any, name: str) -> None:
        self._jvm = jvm
        self._name = name
        self._registry = jvm.com.codahale.metrics.MetricRegistry()
        nan = jvm.java.lang.Double.valueOf("NaN")
        self._gauges = {gauge: self._registry.register(gauge, jvm.com.codahale.metrics.DefaultSettableGauge(nan))
                        for gauge, _ in GAUGES}
        self._counts = {gauge for gauge, count in GAUGES if count}

    # Spark's Source (org.apache.spark.metrics.source.Source)
    def sourceName(self) -> str:
        return self._name

    def metricRegistry(self) -> Any:
        return self._registry

    # java.lang.Object's, which py4j asks Python for too: removeSource finds the source with equals, handing
    # it the JVM's proxy of this object (a JavaObject, whose toString is this one's)
    def equals(self, other: Any) -> bool:
        return other is self or str(other) == self.toString()

    def hashCode(self) -> int:
        return id(self) & 0x7FFFFFFF

    def toString(self) -> str:
        return f"kwire source {self._name} ({id(self):x})"

    class Java:
        implements = ["org.apache.spark.metrics.source.Source"]

    def update(self, figures: Dict[str, float]) -> None:
        lang = self._jvm.java.lang
        for gauge, value in figures.items():
            if gauge in self._counts and not math.isnan(value):
                self._gauges[gauge].setValue(lang.Long.valueOf(str(int(value))))
            else:
                self._gauges[gauge].setValue(float(value))


class MetricsListener(StreamingQueryListener):
    """Sets each query's Kafka figures (:func:`~kwire.spark.metrics.source_metrics`)
    as gauges of Spark's metrics system at every progress::

        spark.streams.addListener(kwire.spark.MetricsListener(spark))

    Queries without a Kafka source are left alone. A failure to set the
    gauges is logged once per query; it never touches the query."""

    def __init__(self, spark: Any, prefix: str = SOURCE_PREFIX) -> None:
        jvm = getattr(spark, "_jvm", None)
        if jvm is None:
            raise KwireError("kwire.spark.MetricsListener needs a classic SparkSession (its driver's JVM); on Spark "
                             "Connect read kwire.spark.source_metrics(query.lastProgress) instead")
        self._jvm = jvm
        self._prefix = prefix
        self._probe()
        self._sources: Dict[str, _QuerySource] = {}     # by run id
        self._failed: set = set()
        self._lock = threading.Lock()

    def _metrics_system(self) -> Any:
        return self._jvm.org.apache.spark.SparkEnv.get().metricsSystem()

    def _probe(self) -> None:
        """Refuse, from the caller's thread, a driver where py4j cannot reflect on ``SparkEnv`` (PySpark
        4.3.0's names protobuf classes its jars lack): the same reach from the listener bus's thread would kill
        that thread, and with it the SparkContext; and even a failed reach from here leaves the JVM unable to
        find Python data sources afterwards. So it is not tried: the protobuf class is looked for instead."""
        if release(FEATURES.version) < (4, 3):
            return
        try:
            self._jvm.java.lang.Class.forName("com.google.protobuf.MessageOrBuilder")
        except Exception:
            raise KwireError(
                f"kwire.spark.MetricsListener cannot reach Spark's metrics system from Python on PySpark "
                f"{FEATURES.version}: py4j cannot reflect on its SparkEnv, which names protobuf classes its jars "
                "lack. Put protobuf-java on the driver's class path (spark.driver.extraClassPath=<protobuf-java "
                "jar>, com.google.protobuf:protobuf-java on Maven Central), or read "
                "kwire.spark.source_metrics(query.lastProgress)") from None

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = json.loads(event.progress.json)
        figures = source_metrics(progress)
        if not figures:
            return
        run = str(progress["runId"])
        try:
            self._source(run, progress).update(figures)
        except Exception as e:        # py4j's errors, a stopped JVM: the query goes on
            self._failure(run, e)

    def _source(self, run: str, progress: Dict[str, Any]) -> _QuerySource:
        with self._lock:
            source = self._sources.get(run)
            if source is None:
                name = f"{self._prefix}.{progress.get('name') or progress['id']}"
                source = self._sources[run] = _QuerySource(self._jvm, name)
                self._metrics_system().registerSource(source)
                log.info("kwire.spark: query %s's Kafka figures are gauges of Spark's metrics system, source %s",
                         progress.get("name") or progress["id"], name)
            return source

    def _failure(self, run: str, e: BaseException) -> None:
        if run not in self._failed:
            self._failed.add(run)
            log.warning("kwire.spark: setting query run %s's gauges failed (%s: %s); further failures of this run "
                        "are not logged", run, type(e).__name__, e)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        run = str(event.runId)
        with self._lock:
            source: Optional[_QuerySource] = self._sources.pop(run, None)
            self._failed.discard(run)
        if source is not None:
            try:
                self._metrics_system().removeSource(source)
            except Exception as e:
                log.warning("kwire.spark: removing %s from Spark's metrics system failed (%s: %s)",
                            source.sourceName(), type(e).__name__, e)
