"""kwire for PySpark: ``format("kwire")``, a Kafka source and sink with the
schema and options of Spark's own (``format("kafka")``) that needs no JVM
package, only ``pip install 'kwire[spark]'``.

::

    import kwire.spark
    kwire.spark.register(spark)
    df = (spark.read.format("kwire")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .option("subscribe", "events")
          .load())
"""

from __future__ import annotations

import logging

try:
    import pyspark  # noqa: F401
    import pyarrow  # noqa: F401  (both needed by the data source)
except ImportError as _e:  # pragma: no cover - only without the extra
    raise ImportError(f"kwire.spark needs PySpark 4 and pyarrow: pip install 'kwire[spark]' ({_e})") from _e

from kwire.spark.errors import DataLossError, OffsetRangeError, SparkOptionError
from kwire.spark.metrics import offsets_behind_latest
from kwire.spark.schema import spark_schema
from kwire.spark.source import KwireDataSource, KwireDataSourceWithoutPushdown

log = logging.getLogger(__name__)

__all__ = ["register", "KwireDataSource", "spark_schema", "offsets_behind_latest", "DataLossError", "OffsetRangeError",
           "SparkOptionError"]


#: The session option without which Spark gives a Python data source no filters.
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: "pyspark.sql.SparkSession", pushdown: bool = True) -> None:
    """Make ``format("kwire")`` available in ``spark`` (once per session).

    ``pushdown``: batch reads take predicates on ``partition``, ``offset``
    and ``timestamp`` as the ranges to fetch (:mod:`kwire.spark.pushdown`).
    Spark passes filters to a Python data source only with
    ``spark.sql.python.filterPushdown.enabled`` (off by default), so this
    turns it on (which changes nothing for sources that take no filters;
    it is logged). ``pushdown=False`` leaves the session as it is and
    registers a source that takes no filters. A session that turns the
    option off after this call gets Spark's DATA_SOURCE_PUSHDOWN_DISABLED
    error from kwire's batch reads: register again with ``pushdown=False``."""
    if pushdown and str(spark.conf.get(PUSHDOWN_CONF)).strip().lower() != "true":
        spark.conf.set(PUSHDOWN_CONF, "true")
        log.info("kwire.spark.register: set %s=true (kwire's batch reads take pushed filters)", PUSHDOWN_CONF)
    spark.dataSource.register(KwireDataSource if pushdown else KwireDataSourceWithoutPushdown)
