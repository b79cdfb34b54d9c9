"""kwire for PySpark: ``format("kwire")``, a Kafka source and sink with the
schema and options of Spark's own (``format("kafka")``) that needs no JVM
package, only ``pip install 'kwire[spark]'`` (PySpark 3.5 to 4.3).

::

    import kwire.spark
    kwire.spark.register(spark)
    df = (spark.read.format("kwire")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .option("subscribe", "events")
          .load())

Typed keys and values (every release): ``valueFormat`` / ``keyFormat``
(``avro``, ``protobuf``, ``json``) with ``schema.registry.url`` or
``valueSchema`` make ``value`` / ``key`` the record itself, with the Spark
type ``from_avro`` / ``from_protobuf`` give (:mod:`kwire.spark.formats`,
:mod:`kwire.spark.typed`); the sink encodes it.

What each Spark release allows (:data:`FEATURES`, logged at import on the
``kwire.spark`` logger; :mod:`kwire.spark.compat`):

* 3.5: no Python Data Source API, so no ``format("kwire")``
  (:func:`register` raises): batch reads and writes through
  :func:`read` and :func:`write` (``kwire.spark.jobs``, plain Spark jobs);
* 4.0: ``format("kwire")`` batch and streaming reads and writes, without
  filter pushdown or read limits (``maxOffsetsPerTrigger``,
  ``minOffsetsPerTrigger``, ``maxTriggerDelay`` are refused, naming 4.2);
  streaming writes get rows from Spark, turned into Arrow batches;
* 4.1: adds filter pushdown and Arrow batches in streaming writes;
* 4.2, 4.3: adds read limits and kwire's own ``Trigger.AvailableNow``.
"""

from __future__ import annotations

import logging
from typing import Optional

try:
    import pyspark
    import pyarrow  # noqa: F401  (needed by every module here)
except ImportError as _e:  # pragma: no cover - only without the extra
    raise ImportError(f"kwire.spark needs PySpark (3.5 to 4.3) and pyarrow: pip install 'kwire[spark]' ({_e})") from _e

from kwire.spark.compat import FEATURES, SparkFeatures, in_supported_range, require
from kwire.spark.errors import DataLossError, OffsetRangeError, SparkOptionError
from kwire.spark.listener import MetricsListener, observe
from kwire.spark.metrics import offsets_behind_latest, source_metrics
from kwire.spark.schema import spark_schema

from kwire.spark.jobs import read, write

if FEATURES.data_source:            # Spark 4.0+: format("kwire")
    from kwire.spark.source import KwireDataSource, KwireDataSourceWithoutPushdown

log = logging.getLogger(__name__)

__all__ = ["register", "read", "write", "FEATURES", "SparkFeatures", "spark_schema", "offsets_behind_latest",
           "source_metrics", "observe", "MetricsListener",
           "DataLossError", "OffsetRangeError", "SparkOptionError"] + (["KwireDataSource"] if FEATURES.data_source
                                                                      else [])

log.info("kwire.spark: %s", FEATURES.describe())
if not in_supported_range(FEATURES.version):
    log.warning("kwire.spark: PySpark %s is outside the range kwire[spark] supports (3.5 to 4.3)", FEATURES.version)

#: The session option without which Spark gives a Python data source no filters (Spark 4.1+).
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"

_told_no_pushdown = False


def _pushdown(asked: Optional[bool]) -> bool:
    """Whether to register with filter pushdown: as ``asked``, or where
    Spark has it when None (told once, at INFO, where it has not)."""
    global _told_no_pushdown
    if asked:
        require("filter_pushdown", "kwire.spark.register(spark, pushdown=True)", FEATURES)
    if asked is None and not FEATURES.filter_pushdown and not _told_no_pushdown:
        _told_no_pushdown = True
        log.info("kwire.spark.register: PySpark %s has no filter pushdown (Spark 4.1+): batch reads read every "
                 "planned offset range and Spark filters the rows", FEATURES.version)
    return FEATURES.filter_pushdown if asked is None else asked


def register(spark: "pyspark.sql.SparkSession", pushdown: Optional[bool] = None) -> None:
    """Make ``format("kwire")`` available in ``spark`` (once per session;
    Spark 4.0 and later: on 3.5 this raises :class:`SparkOptionError`,
    pointing to :func:`read` and :func:`write`).

    ``pushdown``: batch reads take predicates on ``partition``, ``offset``
    and ``timestamp`` as the ranges to fetch (:mod:`kwire.spark.pushdown`).
    The default (None) is on where Spark has filter pushdown (4.1+), off
    elsewhere (logged once); ``pushdown=True`` on a Spark without it raises
    :class:`SparkOptionError` naming 4.1. Spark passes filters to a Python
    data source only with ``spark.sql.python.filterPushdown.enabled`` (off
    by default), so pushdown turns it on (which changes nothing for sources
    that take no filters; it is logged). ``pushdown=False`` leaves the
    session as it is and registers a source that takes no filters. A
    session that turns the option off after this call gets Spark's
    DATA_SOURCE_PUSHDOWN_DISABLED error from kwire's batch reads: register
    again with ``pushdown=False``."""
    if not FEATURES.data_source:
        raise SparkOptionError(f'format("kwire") needs Spark 4.0 or later (the Python Data Source API); this is '
                               f"PySpark {FEATURES.version}: read and write Kafka with kwire.spark.read(spark, "
                               f"**options) and kwire.spark.write(df, **options) instead")
    if _pushdown(pushdown):
        if str(spark.conf.get(PUSHDOWN_CONF)).strip().lower() != "true":
            spark.conf.set(PUSHDOWN_CONF, "true")
            log.info("kwire.spark.register: set %s=true (kwire's batch reads take pushed filters)", PUSHDOWN_CONF)
        spark.dataSource.register(KwireDataSource)
    else:
        spark.dataSource.register(KwireDataSourceWithoutPushdown)
