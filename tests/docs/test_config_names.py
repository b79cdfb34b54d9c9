"""docs/_ext/java_config_names.json (the Java client's configuration names, which the docs' options table
checks kwire's names against) is what scripts/gen_config_names.py writes from the kafka-clients jar the
tests assemble."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.kafka


def test_the_java_config_names_are_current(kafka):
    spec = importlib.util.spec_from_file_location("gen_config_names", ROOT / "scripts" / "gen_config_names.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    current = gen.render(gen.java_config_names())
    assert gen.OUT.read_text() == current, "run: python scripts/gen_config_names.py"
    names = json.loads(current)
    assert "bootstrap.servers" in names["admin"] and "max.poll.records" in names["consumer"]
