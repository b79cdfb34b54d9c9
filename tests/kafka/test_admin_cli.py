"""``kwire features``, ``kwire metadata-quorum`` and ``kwire log-dirs`` on
Apache Kafka (the ``kafka`` fixture), run in-process with their text and
``--json`` output (``kwire configs`` and ``kwire transactions`` are tested
beside their calls)."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from support.cli_run import cli_runner

pytestmark = pytest.mark.kafka


def test_features_quorum_log_dirs(kafka, capsys):
    run = cli_runner(capsys, kafka.bootstrap())
    _, out, _ = run("features", "describe", "--json")
    rows = {r["feature"]: r for r in map(json.loads, out.splitlines())}
    assert rows["metadata.version"]["finalized"] >= 1 and rows["metadata.version"]["supported_max"] >= 1
    level = rows["eligible.leader.replicas.version"]["finalized"] or 0
    _, _, err = run("features", "upgrade" if level == 0 else "downgrade", "--feature",
                 f"eligible.leader.replicas.version={1 - level}", "--dry-run")
    assert "validated eligible.leader.replicas.version" in err
    _, out, err = run("metadata-quorum", "describe")
    header, *voters = out.splitlines()
    assert header.startswith("node_id\trole") and voters[0].split("\t")[1] == "leader" and "leader" in err
    topic = f"cli-dirs-{uuid.uuid4().hex[:8]}"
    run("topics", "create", topic)
    deadline = time.monotonic() + 10         # the broker makes the log when the metadata reaches it
    while True:
        _, out, _ = run("log-dirs", "describe", "--json")
        if any(r["topic"] == topic and r["partition"] == 0 and r["error"] is None
               for r in map(json.loads, out.splitlines())):
            break
        assert time.monotonic() < deadline, out
        time.sleep(0.1)
    run("topics", "delete", topic)
