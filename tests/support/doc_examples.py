"""Running a document's Python code blocks (the README's and docs/'s), as
tests/docs/test_examples.py and tests/spark/test_doc_examples.py do: Sybil
reads MyST's code blocks and ``<!-- skip: next "why" -->`` comments; one
document's blocks run in order in one namespace, with the broker's address
in place of ``localhost:9092`` and the document's topic names made its own
(``"events"`` becomes ``"events-<document>-<run>"``)."""

from __future__ import annotations

import re
import unittest
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import sybil
from sybil.evaluators.python import PythonEvaluator, pad
from sybil.parsers.myst import PythonCodeBlockParser, SkipParser

ROOT = Path(__file__).resolve().parents[2]
#: the topics the examples name
TOPICS = ("events", "out", "orders", "jobs", "copy")


class _Swapped(PythonEvaluator):
    """Python's evaluator, the example's source rewritten first."""

    def __init__(self, swaps: List[Tuple[str, str]]) -> None:
        super().__init__()
        self.swaps = swaps

    def __call__(self, example: Any) -> None:
        __tracebackhide__ = True
        text = str(example.parsed)
        for old, new in self.swaps:
            text = text.replace(old, new)
        code = compile(pad(text, example.line + example.parsed.line_offset), example.path, "exec",
                       flags=self.flags, dont_inherit=True)
        exec(code, example.namespace)
        example.namespace.pop("__builtins__", None)


def documents() -> List[Path]:
    """The README and the docs' pages that hold a Python code block."""
    found = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
    return [p for p in found if "_build" not in p.parts and "```python" in p.read_text()]


def run_examples(doc: Path, bootstrap: str, namespace: Optional[Dict[str, Any]] = None,
                 before: Optional[Callable[[Callable[[str], str]], None]] = None) -> Tuple[int, List[str]]:
    """Run ``doc``'s examples; returns how many ran and why each skipped one was skipped. ``before(topic)``
    runs first, given the function naming a topic of the page as this run names it (to fill it)."""
    tag = f"{re.sub(r'[^a-z0-9]+', '-', doc.stem.lower())}-{uuid.uuid4().hex[:6]}"
    if before is not None:
        before(lambda name: f"{name}-{tag}")
    evaluator = _Swapped([("localhost:9092", bootstrap)] + [(f'"{t}"', f'"{t}-{tag}"') for t in TOPICS])
    document = sybil.Sybil(parsers=[PythonCodeBlockParser(), SkipParser()], path=str(ROOT)).parse(doc)
    document.namespace.update(namespace or {})
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
    return ran, skipped
