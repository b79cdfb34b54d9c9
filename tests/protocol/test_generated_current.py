"""The checked-in generated code is what the generator makes now, from a
vendored copy of the definitions that matches the shared one."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENDORED = os.path.join(ROOT, "scripts", "kafka-protocol", "message")
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "kafka-protocol", "message")


def test_generated_module_is_current():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen_protocol.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _from_kafka_clients():
    """The artifact named in FROM_KAFKA_CLIENTS and the definitions taken from it."""
    with open(os.path.join(os.path.dirname(VENDORED), "FROM_KAFKA_CLIENTS")) as f:
        lines = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    return lines[0], lines[1:]


@pytest.mark.skipif(not os.path.isdir(SHARED), reason="no ../shared/kafka-protocol beside the project")
def test_vendored_definitions_match_the_shared_ones():
    _, taken = _from_kafka_clients()
    names = sorted(set(os.listdir(VENDORED)) - set(taken))
    assert names, "no vendored definitions"
    match, mismatch, errors = filecmp.cmpfiles(VENDORED, SHARED, names, shallow=False)
    assert not mismatch and not errors, (mismatch, errors)
    for name in set(taken) & set(os.listdir(SHARED)):      # taken anyway: only for versions 4.4 adds
        assert _max_version(os.path.join(VENDORED, name)) > _max_version(os.path.join(SHARED, name)), name


def _max_version(path: str) -> int:
    """The highest of ``validVersions`` in a definition (its ``//`` comments skipped)."""
    import re

    with open(path) as f:
        return int(re.search(r'"validVersions":\s*"[^"]*?(\d+)"', f.read()).group(1))


def test_definitions_from_kafka_clients_match_its_jar():
    """The definitions the shared copy lacks are the Maven artifact's own
    (compared when the jar is in the local Maven repository, as the Apache
    Kafka test broker's assembly leaves it)."""
    import zipfile

    artifact, taken = _from_kafka_clients()
    group, name, version = artifact.split(":")
    jar = os.path.join(os.path.expanduser("~"), ".m2", "repository", *group.split("."), name, version,
                       f"{name}-{version}.jar")
    assert sorted(taken) == sorted(set(taken)) and all(os.path.exists(os.path.join(VENDORED, t)) for t in taken)
    if not os.path.exists(jar):
        pytest.skip(f"{artifact} is not in the local Maven repository")
    with zipfile.ZipFile(jar) as z:
        for t in taken:
            with open(os.path.join(VENDORED, t), "rb") as f:
                assert f.read() == z.read(f"common/message/{t}"), t
