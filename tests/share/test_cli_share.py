"""``kwire share consume`` and ``kwire groups list|describe`` for share
groups, on Kafka 4.4 (in-process, through kwire.__main__.main)."""

from __future__ import annotations

import json

import pytest

from kwire.__main__ import main

from .test_share_consumer import _group, _topic

pytestmark = pytest.mark.kafka


def _run(argv, capsys):
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_share_consume_prints_acknowledges_and_the_group_is_described(kafka, capsys):
    bootstrap = kafka.bootstrap("plaintext")
    topic, group = _topic(bootstrap, 2, 20), _group(bootstrap)
    rc, out, _ = _run(["share", "consume", topic, "-G", group, "-b", bootstrap, "-c", "12", "--timeout", "30",
                       "--release-below", "2"], capsys)
    first = [json.loads(line) for line in out.splitlines()]
    assert rc == 0 and len(first) == 12 and {r["delivery_count"] for r in first} == {1}
    assert all(r["topic"] == topic and r["value"] == f"v{r['partition'] + 2 * r['offset']}" for r in first)
    rc, out, _ = _run(["share", "consume", topic, "-G", group, "-b", bootstrap, "--timeout", "8"], capsys)
    second = [json.loads(line) for line in out.splitlines()]
    # everything comes (once): the 12 printed and released counted 2; the others for the first time, or
    # counted 2 when the first run got them past its -c and gave them back unprinted
    again = {(r["partition"], r["offset"]): r["delivery_count"] for r in second}
    assert len(second) == 20 and sorted(again) == [(p, o) for p in (0, 1) for o in range(10)]
    assert all(again[(r["partition"], r["offset"])] == 2 for r in first) and set(again.values()) <= {1, 2}
    rc, out, _ = _run(["groups", "list", "--type", "share", "-b", bootstrap], capsys)
    assert any(line.split("\t")[0] == group and line.split("\t")[-1] == "share" for line in out.splitlines())
    rc, out, _ = _run(["groups", "describe", group, "-b", bootstrap], capsys)
    assert rc == 0 and f"group {group}  type=share" in out
    rows = [line.split("\t") for line in out.splitlines() if line.startswith(f"  {topic}\t")]
    assert sorted((int(p), lag) for _, p, _, lag, _ in rows) == [(0, "0"), (1, "0")]
