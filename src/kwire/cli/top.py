"""``kwire top``: a live terminal view of consumer groups' lag, or of a
running client's metrics, for a person at a terminal.

- ``kwire top --group G [--group H ...]``: each group's state and members,
  and per partition its committed offset, log end, lag, and two rates from
  the last refresh: how fast the group consumes (its committed offsets'
  progress) and how fast the partition grows (its end's), with the time to
  catch up where the group gains on it. The data: kwire's Admin
  (DescribeGroups, OffsetFetch, ListOffsets), every ``--interval`` seconds.
- ``kwire top --stats FILE``: the statistics a running client writes with
  ``stats_cb=kwire.metrics.report.StatsFile(FILE)``: its rates, latencies
  and lag per broker and partition (:mod:`kwire.metrics.report`).

Keys: ``q`` quits, ``p`` pauses the refresh. ``--once`` prints one frame
as text and exits (for scripts and for a screen in the docs). What is
drawn comes from :func:`group_frame` and :func:`stats_frame`, plain
functions of the data, so the view is the same in a terminal and in text.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

__all__ = ["add_top", "cmd_top", "group_frame", "stats_frame", "GroupSnapshot"]


@dataclass
class GroupSnapshot:
    """One look at a group: when, its description, and per partition (committed, end, lag, member)."""

    at: float
    group: str
    state: str = "-"
    members: int = 0
    rows: Dict[Tuple[str, int], Tuple[int, int, int, str]] = field(default_factory=dict)


def take_group(admin: Any, group: str) -> GroupSnapshot:
    desc = admin.describe_groups([group])[group]
    owner: Dict[Tuple[str, int], str] = {}
    for m in desc.members:
        for tp in m.assignment:
            owner[(tp.topic, tp.partition)] = m.client_id or m.member_id
    lag = admin.group_lag(group)
    snap = GroupSnapshot(time.monotonic(), group, desc.state or "-", len(desc.members))
    for tp, (committed, end, behind) in lag.items():
        snap.rows[(tp.topic, tp.partition)] = (committed, end, behind, owner.get((tp.topic, tp.partition), "-"))
    return snap


def _rate(now: int, before: Optional[int], seconds: float) -> Optional[float]:
    if before is None or seconds <= 0:
        return None
    return max(0.0, (now - before) / seconds)


def _fmt_rate(r: Optional[float]) -> str:
    return "-" if r is None else f"{r:,.1f}"


def _eta(lag: int, consumed: Optional[float], produced: Optional[float]) -> str:
    if lag == 0:
        return "caught up"
    if consumed is None or produced is None or consumed <= produced:
        return "-"
    s = lag / (consumed - produced)
    if s < 10:
        return f"{s:.1f} s"
    return f"{s:,.0f} s" if s < 3600 else f"{s / 3600:,.1f} h"


def group_frame(snap: GroupSnapshot, prev: Optional[GroupSnapshot], width: int = 100) -> List[str]:
    """The lines drawn for one group (``prev``: the refresh before, for the rates)."""
    seconds = snap.at - prev.at if prev is not None else 0.0
    total = sum(r[2] for r in snap.rows.values())
    top = max((r[2] for r in snap.rows.values()), default=0)
    lines = [f"group {snap.group}  state {snap.state}  members {snap.members}  partitions {len(snap.rows)}  "
             f"lag {total:,} (max {top:,})"[:width],
             f"{'topic':<24} {'part':>4} {'committed':>12} {'end':>12} {'lag':>10} {'consumed/s':>11} "
             f"{'produced/s':>11} {'catch-up':>10}  member"[:width]]
    for (topic, part), (committed, end, behind, member) in sorted(snap.rows.items()):
        before = prev.rows.get((topic, part)) if prev is not None else None
        consumed = _rate(committed, before[0] if before else None, seconds)
        produced = _rate(end, before[1] if before else None, seconds)
        lines.append(f"{topic[:24]:<24} {part:>4} {committed:>12,} {end:>12,} {behind:>10,} "
                     f"{_fmt_rate(consumed):>11} {_fmt_rate(produced):>11} {_eta(behind, consumed, produced):>10}  "
                     f"{member}"[:width])
    return lines


def _num(x: Any, fmt: str = ",.1f") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, fmt)


def stats_frame(doc: Mapping[str, Any], width: int = 100) -> List[str]:
    """The lines drawn for one statistics document of a client (``stats_cb``'s JSON)."""
    metrics = doc.get("metrics", {})
    kind = doc.get("type", "?")
    client = metrics.get(f"{'admin-client' if kind == 'admin' else kind}-metrics", {})
    lines = [f"{doc.get('name', '?')}  type {kind}  age {doc.get('age', 0) / 1e6:,.0f} s  "
             f"connections {_num(client.get('connection-count'), ',.0f')}  "
             f"requests/s {_num(client.get('request-rate'))}  in {_num(client.get('incoming-byte-rate'), ',.0f')} B/s  "
             f"out {_num(client.get('outgoing-byte-rate'), ',.0f')} B/s"[:width]]
    if kind == "consumer":
        fm = metrics.get("consumer-fetch-manager-metrics", {})
        lines.append(f"records/s {_num(fm.get('records-consumed-rate'))}  bytes/s "
                     f"{_num(fm.get('bytes-consumed-rate'), ',.0f')}  lag max {_num(fm.get('records-lag-max'), ',.0f')}"
                     f"  fetch latency {_num(fm.get('fetch-latency-avg'))} ms"[:width])
    elif kind == "producer":
        pm = metrics.get("producer-metrics", {})
        lines.append(f"records/s {_num(pm.get('record-send-rate'))}  errors/s {_num(pm.get('record-error-rate'))}"
                     f"  retries/s {_num(pm.get('record-retry-rate'))}  batch {_num(pm.get('batch-size-avg'), ',.0f')} B"
                     f"  buffer free {_num(pm.get('buffer-available-bytes'), ',.0f')} B"[:width])
    lines.append(f"{'broker':<28} {'state':<5} {'in flight':>9} {'rtt avg ms':>11} {'rtt max ms':>11} "
                 f"{'throttle ms':>11} {'requests':>9}"[:width])
    for name, b in sorted(doc.get("brokers", {}).items()):
        rtt = b.get("rtt", {})
        lines.append(f"{name[:28]:<28} {b.get('state', '-'):<5} {b.get('waitresp_cnt', 0):>9} "
                     f"{_num(_ms(rtt.get('avg'))):>11} {_num(_ms(rtt.get('max'))):>11} "
                     f"{_num(b.get('throttle', {}).get('max'), ',.0f'):>11} {b.get('tx', 0):>9,}"[:width])
    parts = [(t, p, v) for t, td in sorted(doc.get("topics", {}).items())
             for p, v in sorted(td.get("partitions", {}).items(), key=lambda kv: int(kv[0]))]
    if parts:
        lines.append(f"{'topic':<24} {'part':>4} {'lag':>10} {'position':>12} {'end':>12} {'records':>12}"[:width])
        for topic, part, v in parts:
            lines.append(f"{topic[:24]:<24} {part:>4} {_int(v.get('consumer_lag')):>10} "
                         f"{_int(v.get('app_offset')):>12} {_int(v.get('hi_offset')):>12} "
                         f"{v.get('rxmsgs', v.get('txmsgs', 0)):>12,}"[:width])
    return lines


def _ms(us: Any) -> Optional[float]:
    return None if us is None else us / 1000.0


def _int(x: Any) -> str:
    return "-" if x is None or (isinstance(x, int) and x < 0) else f"{x:,}"


def _read_stats(path: str) -> Optional[Dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class _Frames:
    """What ``kwire top`` shows at each refresh."""

    def __init__(self, args: argparse.Namespace, admin: Any) -> None:
        self.args = args
        self.admin = admin
        self.prev: Dict[str, GroupSnapshot] = {}

    def next(self, width: int) -> List[str]:
        lines = [f"kwire top  {time.strftime('%H:%M:%S')}  every {self.args.interval:g} s  q: quit  p: pause"[:width],
                 ""]
        if self.args.stats:
            doc = _read_stats(self.args.stats)
            return lines + (stats_frame(doc, width) if doc else
                            [f"waiting for {self.args.stats} (stats_cb=kwire.metrics.report.StatsFile(...))"])
        for g in self.args.group:
            snap = take_group(self.admin, g)
            lines += group_frame(snap, self.prev.get(g), width) + [""]
            self.prev[g] = snap
        return lines


def _curses_loop(frames: _Frames, interval: float) -> None:
    import curses

    def loop(screen: Any) -> None:
        curses.curs_set(0)
        screen.timeout(100)
        paused, due, lines = False, 0.0, []
        while True:
            now = time.monotonic()
            height, width = screen.getmaxyx()
            if not paused and now >= due:
                try:
                    lines = frames.next(width - 1)
                except Exception as e:  # noqa: BLE001 - shown, and tried again at the next refresh
                    lines = [f"kwire top: {type(e).__name__}: {e}"[:width - 1]]
                due = now + interval
                screen.erase()
                for y, line in enumerate(lines[:height - 1]):
                    screen.addstr(y, 0, line)
                if paused:
                    screen.addstr(min(len(lines), height - 1), 0, "(paused)")
                screen.refresh()
            key = screen.getch()
            if key in (ord("q"), ord("Q")):
                return
            if key in (ord("p"), ord("P")):
                paused = not paused
                due = 0.0

    curses.wrapper(loop)


def cmd_top(args: argparse.Namespace) -> int:
    if bool(args.group) == bool(args.stats):
        raise SystemExit("kwire top: give --group GROUP (repeatable) or --stats FILE")
    admin = None
    if args.group:
        from kwire.admin import Admin
        from kwire.cli.options import client_config

        admin = Admin(client_config(args))
    try:
        frames = _Frames(args, admin)
        if args.once:
            if args.group:           # two looks, ``interval`` apart, so that the rates are there
                frames.next(args.width)
                time.sleep(args.interval)
            print("\n".join(frames.next(args.width)))
            return 0
        _curses_loop(frames, args.interval)
        return 0
    finally:
        if admin is not None:
            admin.close()


def add_top(p: argparse.ArgumentParser) -> None:
    p.add_argument("--group", action="append", default=[], metavar="GROUP",
                   help="a consumer group's lag and rates (repeatable)")
    p.add_argument("--stats", metavar="FILE", help="a running client's metrics, from the file its "
                                                     "stats_cb=kwire.metrics.report.StatsFile(FILE) writes")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes (default 2)")
    p.add_argument("--once", action="store_true", help="print one frame as text and exit")
    p.add_argument("--width", type=int, default=int(os.environ.get("COLUMNS", "120")),
                   help="--once: the width of the text (default $COLUMNS or 120)")
    p.set_defaults(func=cmd_top)
