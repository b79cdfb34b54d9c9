"""Every Python code block of the README and the docs runs, against Apache
Kafka 4.4 (the ``kafka`` fixture; the bundled Tansu holds a new group's
first JoinGroup about 20 s, and three of the examples join a group), unless
the page marks it ``<!-- skip: next "why" -->`` (a fragment, or something
no broker alone can serve: a schema registry, share groups on Tansu),
which the test reports as skipped with that reason. The Spark page's run in
the Spark unit, with its session (tests/spark/test_doc_examples.py).

How a document runs: tests/support/doc_examples.py (Sybil; the broker's
address and the document's own topic names put in)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.kafka

pytest.importorskip("sybil", reason="the test extra's sybil")
from support.doc_examples import ROOT, documents, run_examples  # noqa: E402

DOCUMENTS = [p for p in documents() if p.name != "spark.md"]


@pytest.mark.parametrize("doc", DOCUMENTS, ids=[str(p.relative_to(ROOT)) for p in DOCUMENTS])
def test_the_documents_examples_run(doc, kafka):
    ran, skipped = run_examples(doc, kafka.bootstrap("plaintext"))
    if not ran:
        pytest.skip(f"{doc.name}: every example is marked skip: " + "; ".join(skipped))
