"""Spark's own Kafka connector (``format("kafka")``, Maven's
``org.apache.spark:spark-sql-kafka-0-10_<scala>``), the peer kwire's Spark
source and sink are compared with in tests and benchmarks.

:func:`connector_jars` has :func:`support.maven.assemble` copy
``tests/support/spark_connector/pom.xml``'s runtime dependencies for a
Spark version (by default the installed PySpark's, Scala 2.13) into
``~/.cache/kwire/spark-kafka-<version>`` (``-<version>_<scala>`` for
another Scala than 2.13; ``$KWIRE_SPARK_CONNECTOR_HOME`` for the installed
PySpark's), once, and returns the jars a Spark session needs beside
PySpark's own: those whose artifact that PySpark (its ``jars`` directory:
the installed one's, or ``pyspark_dir``'s for a release's virtualenv,
:mod:`support.spark_releases`) does not ship already (the connector, its
token provider, kafka-clients, commons-pool2). A second copy of Scala or
Hadoop on the class path would not be the one Spark was built with, so
those are left out.

The PySpark kwire tests with is pinned to a version whose connector Maven
Central serves (``pyproject.toml``'s ``test`` extra): if the installed
version's connector cannot be had, this raises, it does not skip.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import List, Optional

from support.maven import Progress, assemble

POM = Path(__file__).with_name("spark_connector") / "pom.xml"
ARTIFACT = "spark-sql-kafka-0-10_2.13"     # the installed PySpark's (4.x)


def artifact(scala: str = "2.13") -> str:
    return f"spark-sql-kafka-0-10_{scala}"


class ConnectorUnavailable(RuntimeError):
    """Maven is missing, or could not assemble the connector."""


def spark_version() -> str:
    import pyspark

    return pyspark.__version__


def connector_home(version: str, scala: str = "2.13") -> Path:
    env = os.environ.get("KWIRE_SPARK_CONNECTOR_HOME")
    if env and scala == "2.13" and version == spark_version():
        return Path(env).expanduser()
    return Path.home() / ".cache" / "kwire" / (f"spark-kafka-{version}" + ("" if scala == "2.13" else f"_{scala}"))


def _artifact(jar: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``."""
    return re.sub(r"-\d[\w.]*(-[A-Za-z]\w*)?\.jar$", "", jar)


def connector_jars(progress: Progress = None, version: Optional[str] = None, scala: str = "2.13",
                   pyspark_dir: Optional[Path] = None, token_provider: Optional[str] = None) -> List[str]:
    """Absolute paths of the jars to add to a Spark session of ``version``
    (default: the installed PySpark's) for ``format("kafka")`` (see the
    module doc); ``pyspark_dir`` is that PySpark's package directory;
    ``token_provider`` the version of the connector's
    ``spark-token-provider-kafka-0-10`` where Maven Central lacks
    ``version``'s (a patch release of the same line)."""
    if version is None:
        version = spark_version()
    if pyspark_dir is None:
        import pyspark

        pyspark_dir = Path(pyspark.__file__).parent
    props = {"spark.version": version, "scala.binary.version": scala, "token.provider.version": token_provider or version}
    libs = assemble(POM, props, connector_home(version, scala),
                    f"{artifact(scala)}-{version}.jar", f"Spark's Kafka connector {version} (Scala {scala})",
                    ConnectorUnavailable, progress)
    shipped = {_artifact(j) for j in os.listdir(pyspark_dir / "jars")}
    return sorted(str(p) for p in libs.glob("*.jar") if _artifact(p.name) not in shipped)


AVRO_POM = Path(__file__).with_name("spark_avro") / "pom.xml"


def avro_jars(progress: Progress = None, version: Optional[str] = None, scala: str = "2.13",
              pyspark_dir: Optional[Path] = None) -> List[str]:
    """Spark's own Avro functions (``from_avro``, ``to_avro``: Maven's
    ``org.apache.spark:spark-avro_<scala>``) for a session of ``version``
    (default: the installed PySpark's), the peer of kwire's typed columns,
    assembled once into ``~/.cache/kwire/spark-avro-<version>[_<scala>]``;
    the jars PySpark (``pyspark_dir``) ships already are left out, as in
    :func:`connector_jars`."""
    if version is None:
        version = spark_version()
    if pyspark_dir is None:
        import pyspark

        pyspark_dir = Path(pyspark.__file__).parent
    home = Path.home() / ".cache" / "kwire" / (f"spark-avro-{version}" + ("" if scala == "2.13" else f"_{scala}"))
    libs = assemble(AVRO_POM, {"spark.version": version, "scala.binary.version": scala}, home,
                    f"spark-avro_{scala}-{version}.jar", f"Spark's Avro functions {version} (Scala {scala})",
                    ConnectorUnavailable, progress)
    shipped = {_artifact(j) for j in os.listdir(pyspark_dir / "jars")}
    return sorted(str(p) for p in libs.glob("*.jar") if _artifact(p.name) not in shipped)


CONNECT_POM = Path(__file__).with_name("spark_connect") / "pom.xml"


def connect_server_jars(version: str, scala: str, progress: Progress = None) -> List[str]:
    """The Spark Connect server jar of ``version`` (``spark-connect_<scala>``)
    for a PySpark that does not ship it (3.5), assembled once into
    ``~/.cache/kwire/spark-connect-<version>_<scala>``."""
    home = Path.home() / ".cache" / "kwire" / f"spark-connect-{version}_{scala}"
    libs = assemble(CONNECT_POM, {"spark.version": version, "scala.binary.version": scala}, home,
                    f"spark-connect_{scala}-{version}.jar", f"Spark Connect server {version} (Scala {scala})",
                    ConnectorUnavailable, progress)
    return sorted(str(p) for p in libs.glob(f"spark-connect_{scala}-*.jar"))
