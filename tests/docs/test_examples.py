"""Every Python code block of the README and the docs runs, against Apache
Kafka 4.4 (the ``kafka`` fixture; the bundled Tansu holds a new group's
first JoinGroup about 20 s, and three of the examples join a group), unless the page marks it
``<!-- skip: next "why" -->`` (a fragment, or something the bundled broker
cannot serve: a Spark session, a schema registry, share groups), which
the test reports as skipped with that reason.

The blocks are read and run by Sybil (MyST's code blocks and skip
comments), one document's blocks in order in one namespace, as a reader
would paste them. Each document runs with the broker's address in place of
``localhost:9092`` and with its topic names made its own (``"events"``
becomes ``"events-<document>-<run>"``), so a document runs again on the
same broker and two documents never share a topic."""

from __future__ import annotations

import re
import unittest
import uuid
from pathlib import Path
from typing import List, Tuple

import pytest

pytestmark = pytest.mark.kafka

sybil = pytest.importorskip("sybil", reason="the test extra's sybil")
from sybil.evaluators.python import PythonEvaluator, pad  # noqa: E402
from sybil.parsers.myst import PythonCodeBlockParser, SkipParser  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
DOCUMENTS = [p for p in DOCUMENTS if "_build" not in p.parts and "```python" in p.read_text()]
#: the topics the examples name
TOPICS = ("events", "out", "orders", "jobs")


class _Swapped(PythonEvaluator):
    """Python's evaluator, the example's source rewritten first."""

    def __init__(self, swaps: List[Tuple[str, str]]) -> None:
        super().__init__()
        self.swaps = swaps

    def __call__(self, example) -> None:
        __tracebackhide__ = True
        text = str(example.parsed)
        for old, new in self.swaps:
            text = text.replace(old, new)
        code = compile(pad(text, example.line + example.parsed.line_offset), example.path, "exec",
                       flags=self.flags, dont_inherit=True)
        exec(code, example.namespace)
        example.namespace.pop("__builtins__", None)


def _swaps(bootstrap: str, doc: Path) -> List[Tuple[str, str]]:
    tag = f"{re.sub(r'[^a-z0-9]+', '-', doc.stem.lower())}-{uuid.uuid4().hex[:6]}"
    return [("localhost:9092", bootstrap)] + [(f'"{t}"', f'"{t}-{tag}"') for t in TOPICS]


@pytest.mark.parametrize("doc", DOCUMENTS, ids=[str(p.relative_to(ROOT)) for p in DOCUMENTS])
def test_the_documents_examples_run(doc, kafka):
    parsers = [PythonCodeBlockParser(), SkipParser()]
    document = sybil.Sybil(parsers=parsers, path=str(ROOT)).parse(doc)
    evaluator = _Swapped(_swaps(kafka.bootstrap("plaintext"), doc))
    ran, skipped = 0, []
    for example in document:
        if isinstance(example.region.evaluator, PythonEvaluator):
            example.region.evaluator = evaluator
        try:
            example.evaluate()
        except unittest.SkipTest as e:
            skipped.append(f"line {example.line}: {e}")
            continue
        ran += example.region.evaluator is evaluator
    if not ran:
        pytest.skip(f"{doc.name}: every example is marked skip: " + "; ".join(skipped))
