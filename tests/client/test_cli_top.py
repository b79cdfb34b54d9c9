"""``kwire top`` (kwire.cli.top) on Apache Kafka (Tansu 0.6.0's log end is its last batch's base
offset + 1, see docs/guide/cli.md, so a lag there is not the lag): a group's
lag and rates, and a running client's metrics (its StatsFile), as text
(``--once``) and live in a terminal, driven and read through tmux."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from kwire.cli.top import GroupSnapshot, group_frame, stats_frame
from kwire.consumer import Consumer
from kwire.metrics.report import StatsFile
from kwire.producer import Producer
from support.cli_run import cli_runner
from support.topics import fresh_topic

N = 100


def _group_behind(bootstrap: str, read: int) -> tuple:
    """A topic of two partitions with N records, and a group that committed after ``read`` of them."""
    topic = fresh_topic(bootstrap, 2, "top")
    with Producer(bootstrap_servers=bootstrap) as p:
        for f in [p.send(topic, b"v%d" % i, partition=i % 2) for i in range(N)]:
            f.get(30)
    group = f"g-{topic}"
    with Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                  enable_auto_commit=False) as c:
        c.assign([(topic, 0), (topic, 1)])
        got = 0
        deadline = time.monotonic() + 30
        while got < read and time.monotonic() < deadline:
            got += sum(len(r) for r in c.poll(200, max_records=read - got).values())
        c.commit()
    return topic, group


def test_group_frame_rates_and_catch_up():
    prev = GroupSnapshot(10.0, "g", "Empty", 0, {("t", 0): (100, 1000, 900, "-"), ("t", 1): (0, 9, 9, "-")})
    snap = GroupSnapshot(12.0, "g", "Stable", 1, {("t", 0): (300, 1100, 800, "c1"), ("t", 1): (8, 9, 1, "c1")})
    lines = group_frame(snap, prev, width=140)
    assert lines[0].startswith("group g  state Stable  members 1  partitions 2  lag 801 (max 800)")
    row = lines[2].split()
    assert row[:5] == ["t", "0", "300", "1,100", "800"]
    assert row[5:9] == ["100.0", "50.0", "16", "s"]        # 200 in 2 s consumed, 100 produced: 800 / 50 s
    assert row[-1] == "c1"
    assert lines[3].split()[7:9] == ["0.2", "s"]          # 1 left at 4 a second


def test_once_shows_a_groups_lag(kafka, capsys):
    bootstrap = kafka.bootstrap("plaintext")
    topic, group = _group_behind(bootstrap, 40)
    run = cli_runner(capsys, bootstrap)
    _, out, _ = run("top", "--group", group, "--once", "--interval", "0.2", "--width", "140")
    lines = out.splitlines()
    head = next(line for line in lines if line.startswith(f"group {group}"))
    assert "partitions 2  lag 60 (max" in head
    rows = {int(line.split()[1]): line.split() for line in lines if line.startswith(topic)}
    assert set(rows) == {0, 1}
    assert sum(int(r[2]) for r in rows.values()) == 40 and sum(int(r[4]) for r in rows.values()) == 60


def test_once_shows_a_clients_stats_file(kafka, tmp_path, capsys):
    bootstrap = kafka.bootstrap("plaintext")
    topic, _ = _group_behind(bootstrap, 0)
    path = str(tmp_path / "stats.json")
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", client_id="watched",
                  statistics_interval_ms=100, stats_cb=StatsFile(path)) as c:
        c.assign([(topic, 0), (topic, 1)])
        got, deadline = 0, time.monotonic() + 30
        while (got < N or not os.path.exists(path)) and time.monotonic() < deadline:
            got += sum(len(r) for r in c.poll(200).values())
        time.sleep(0.3)
        c.poll(100)
    doc = json.loads(open(path).read())
    lines = stats_frame(doc, 140)
    assert lines[0].startswith("watched#consumer  type consumer")
    run = cli_runner(capsys, bootstrap)
    _, out, _ = run("top", "--stats", path, "--once", "--width", "140")
    assert "watched#consumer" in out and "records/s" in out
    rows = [line.split() for line in out.splitlines() if line.startswith(topic)]
    assert sorted(int(r[1]) for r in rows) == [0, 1] and all(r[2] == "0" for r in rows)     # lag 0: all read


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (scripts/_setup.sh installs it)")
def test_live_in_a_terminal(kafka, tmp_path):
    bootstrap = kafka.bootstrap("plaintext")
    topic, group = _group_behind(bootstrap, 10)
    session = f"kwire-top-{uuid.uuid4().hex[:8]}"
    cmd = f"{sys.executable} -m kwire top --group {group} -b {bootstrap} --interval 0.5"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "130", "-y", "20", cmd], check=True, env=env)
    try:
        screen = _screen_with(session, lambda s: f"group {group}" in s and "lag 90" in s)
        assert f"{topic}" in screen and "committed" in screen
        (tmp_path / "screen.txt").write_text(screen)
        with Producer(bootstrap_servers=bootstrap) as p:        # the partition grows: the view follows
            for f in [p.send(topic, b"more", partition=0) for _ in range(50)]:
                f.get(30)
        _screen_with(session, lambda s: "lag 140" in s)
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        deadline = time.monotonic() + 10
        while _alive(session) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(session), "q did not end kwire top"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def _alive(session: str) -> bool:
    return subprocess.run(["tmux", "has-session", "-t", session], capture_output=True).returncode == 0


def _screen_with(session: str, ok, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True,
                                text=True).stdout
        if ok(screen):
            return screen
        time.sleep(0.2)
    raise AssertionError(f"kwire top's screen never showed what was expected:\n{screen}")
