"""The compatibility subset: tests that run INSIDE a PySpark release's
virtualenv (``support.spark_releases``), started by
``tests/spark/test_releases.py`` with ``python -m pytest`` on this
directory, the source tree off ``sys.path`` (kwire comes from the
virtualenv's site-packages, the wheel of the tree).

The main pytest process passes, in the environment:

* ``KWIRE_COMPAT_BROKERS``: JSON ``[{"name": "tansu"|"kafka", "bootstrap": "host:port"}, ...]``,
  the brokers it passes (``broker`` runs a test on each; ``kafka_bootstrap`` is Apache Kafka's; the
  releases' subsets get Apache Kafka only: Tansu is covered with the suite's own release, 4.2);
* ``KWIRE_COMPAT_RELEASE``: JSON ``{"line": "4.0", "pyspark": "4.0.4", "jars": [...], "no_connector": why|null}``:
  the release, and Spark's own Kafka connector's jars for it (none where Maven
  Central has no connector of that release: then ``no_connector`` says so);
* ``KWIRE_COMPAT_SOURCE_TREE``: the repository, which kwire must not come from.

Without ``KWIRE_COMPAT_BROKERS`` (the main suite collecting ``tests/``)
nothing here is collected: these tests need a release's virtualenv.

Fixtures: ``release`` (the JSON above), ``spark`` (ONE local[2] session for
the whole run, Spark's connector on ``spark.jars`` where there is one,
``format("kwire")`` registered where the release has the Python Data
Source API), ``broker`` / ``kafka_bootstrap``; helpers in ``compat_util``.
Files named ``*jobs*`` here are the tests of ``kwire.spark.jobs`` (3.5 on).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict

import pytest

if "KWIRE_COMPAT_BROKERS" not in os.environ:
    collect_ignore_glob = ["*.py"]


@pytest.fixture(scope="session")
def release() -> Dict[str, Any]:
    return json.loads(os.environ["KWIRE_COMPAT_RELEASE"])


@pytest.fixture(scope="session")
def brokers() -> Dict[str, str]:
    """{name: bootstrap} of the brokers the main process started."""
    return {b["name"]: b["bootstrap"] for b in json.loads(os.environ["KWIRE_COMPAT_BROKERS"])}


def _broker_names() -> list:
    return [b["name"] for b in json.loads(os.environ.get("KWIRE_COMPAT_BROKERS", "[]"))]


@pytest.fixture(scope="session", params=_broker_names())
def broker(request, brokers) -> str:
    """The bootstrap of each broker the main process passed, in turn."""
    return brokers[request.param]


@pytest.fixture(scope="session")
def kafka_bootstrap(brokers) -> str:
    return brokers["kafka"]


@pytest.fixture(scope="session")
def spark(release):
    """The run's one local[2] session (Python workers on this interpreter)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import kwire.spark

    builder = SparkSession.builder.master("local[2]").appName(f"kwire-compat-{release['line']}")
    if release["jars"]:
        builder = builder.config("spark.jars", ",".join(release["jars"]))
    session = (builder.config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    if kwire.spark.FEATURES.data_source:
        kwire.spark.register(session)
    try:
        yield session
    finally:
        session.stop()
