"""tests/support/kafka.py's assembly step: what is missing is named, a
half-finished copy is never taken for a finished one. (No broker needed.)"""

from __future__ import annotations

import pytest

from support import kafka as k

pytestmark = pytest.mark.kafka


@pytest.fixture
def empty_path(tmp_path, monkeypatch):
    bare = tmp_path / "bin"
    bare.mkdir()
    monkeypatch.setenv("PATH", str(bare))
    monkeypatch.setenv("KWIRE_KAFKA_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_missing_maven_is_named(empty_path):
    with pytest.raises(k.KafkaUnavailable, match=r"needs mvn on PATH \(mvn not found\)"):
        k.ensure_kafka()


def test_a_half_finished_copy_is_not_taken_for_a_finished_one(empty_path):
    libs = empty_path / "libs"
    libs.mkdir(parents=True)
    (libs / f"kafka_2.13-{k.KAFKA_VERSION}.jar").write_bytes(b"")      # jars, but no marker
    with pytest.raises(k.KafkaUnavailable, match="mvn"):
        k.ensure_kafka()
    (empty_path / "COMPLETE").write_text('{"version": "4.4.0", "pom_sha256": "another pom"}')
    with pytest.raises(k.KafkaUnavailable, match="mvn"):                # a marker from another pom
        k.ensure_kafka()
    (empty_path / "COMPLETE").write_text(k._stamp(k.KAFKA_VERSION))
    assert k.ensure_kafka() == libs                                    # finished: reused, no Maven needed


def test_missing_java_is_named(empty_path):
    (empty_path / "libs").mkdir(parents=True)
    (empty_path / "COMPLETE").write_text(k._stamp(k.KAFKA_VERSION))
    with pytest.raises(k.KafkaUnavailable, match=r"needs java on PATH"):
        k.start_kafka()
