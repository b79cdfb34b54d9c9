"""docs/guide/spark.md's Python code blocks run with the Spark unit's session
(``spark``) against the bundled Tansu (``tansu``), as tests/docs/test_examples.py
runs the other pages' (tests/support/doc_examples.py); those the page marks
skip (a streaming query's start, a schema registry) are reported with why."""

from __future__ import annotations

import pytest

pytest.importorskip("sybil", reason="the test extra's sybil")
from support.doc_examples import ROOT, run_examples  # noqa: E402


def test_the_spark_pages_examples_run(spark, tansu):
    def fill(topic):           # the page reads a topic "events" that its reader has: 100 records
        from kwire import Producer

        with Producer(bootstrap_servers=tansu.bootstrap) as p:
            for i in range(100):
                p.send(topic("events"), b"v%d" % i, key=b"k%d" % i, headers=[("h", b"x")])

    ran, skipped = run_examples(ROOT / "docs" / "guide" / "spark.md", tansu.bootstrap, {"spark": spark}, fill)
    assert ran >= 2, skipped
