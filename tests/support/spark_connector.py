"""Spark's own Kafka connector (``format("kafka")``, Maven's
``org.apache.spark:spark-sql-kafka-0-10_2.13``), the peer kwire's Spark
source and sink are compared with in tests and benchmarks.

:func:`connector_jars` has :func:`support.maven.assemble` copy
``tests/support/spark_connector/pom.xml``'s runtime dependencies for the
installed PySpark's version into ``~/.cache/kwire/spark-kafka-<version>``
(or ``$KWIRE_SPARK_CONNECTOR_HOME``), once, and returns the jars a Spark
session needs beside PySpark's own: those whose artifact PySpark does not
ship already (the connector, its token provider, kafka-clients,
commons-pool2). A second copy of Scala or Hadoop on the class path would
not be the one Spark was built with, so those are left out.

The PySpark kwire tests with is pinned to a version whose connector Maven
Central serves (``pyproject.toml``'s ``test`` extra): if the installed
version's connector cannot be had, this raises, it does not skip.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import List

from support.maven import Progress, assemble

POM = Path(__file__).with_name("spark_connector") / "pom.xml"
ARTIFACT = "spark-sql-kafka-0-10_2.13"


class ConnectorUnavailable(RuntimeError):
    """Maven is missing, or could not assemble the connector."""


def spark_version() -> str:
    import pyspark

    return pyspark.__version__


def connector_home(version: str) -> Path:
    env = os.environ.get("KWIRE_SPARK_CONNECTOR_HOME")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "kwire" / f"spark-kafka-{version}"


def _artifact(jar: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``."""
    return re.sub(r"-\d[\w.]*(-[A-Za-z]\w*)?\.jar$", "", jar)


def connector_jars(progress: Progress = None) -> List[str]:
    """Absolute paths of the jars to add to a Spark session for
    ``format("kafka")`` (see the module doc)."""
    import pyspark

    version = spark_version()
    libs = assemble(POM, {"spark.version": version}, connector_home(version), f"{ARTIFACT}-{version}.jar",
                    f"Spark's Kafka connector {version}", ConnectorUnavailable, progress)
    shipped = {_artifact(j) for j in os.listdir(Path(pyspark.__file__).parent / "jars")}
    return sorted(str(p) for p in libs.glob("*.jar") if _artifact(p.name) not in shipped)
