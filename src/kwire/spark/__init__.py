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

try:
    import pyspark  # noqa: F401
    import pyarrow  # noqa: F401  (both needed by the data source)
except ImportError as _e:  # pragma: no cover - only without the extra
    raise ImportError(f"kwire.spark needs PySpark 4 and pyarrow: pip install 'kwire[spark]' ({_e})") from _e

from kwire.spark.errors import DataLossError, OffsetRangeError, SparkOptionError
from kwire.spark.schema import spark_schema
from kwire.spark.source import KwireDataSource

__all__ = ["register", "KwireDataSource", "spark_schema", "DataLossError", "OffsetRangeError", "SparkOptionError"]


def register(spark: "pyspark.sql.SparkSession") -> None:
    """Make ``format("kwire")`` available in ``spark`` (once per session)."""
    spark.dataSource.register(KwireDataSource)
