"""kwire.aio's producer under backpressure, one build against another:
``send_nowait`` falling back to ``await enqueue()`` (docs/guide/asyncio.md's pattern)
and ``await enqueue()`` per record, on ``compare_clients``' mixed shape (a
16-byte key, values of 50 to 1,000 bytes) through the producer's default
``buffer_memory`` (32 MiB) and ``batch_size`` (16 KiB), into the local
Tansu. Every run is a process of its own whose ``PYTHONPATH`` picks the
build (``--build NAME=SRC``, a source tree built in place); builds, codecs
and patterns take turns in every round, so noise on a shared machine hits
them alike, and each one's best round counts.

    python -m benchmarks.aio_backpressure --build before=/tmp/kwire-base/src --build after=src
                                          [--records 1000000] [--codecs lz4,none] [--repeat 3]

A base build: ``git worktree add /tmp/kwire-base REV && (cd /tmp/kwire-base
&& python setup.py build_ext --inplace)``. Per run: messages/s, the client
process's CPU seconds, and how many ``send_nowait`` calls were refused
(``WouldBlockError``) on the way.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from typing import Dict, List, Tuple

from benchmarks import compare_clients
from benchmarks.compare_clients import PARTITIONS, _cpu, _records, aio_enqueue, produce_kwire_aio

PATTERNS = ("send_nowait", "enqueue")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_one(bootstrap: str, topic: str, pattern: str, records: int, codec: str) -> Dict[str, float]:
    """One producer run in this process: its rate, CPU and refusals."""
    from kwire.aio import WouldBlockError

    refused = 0

    async def fallback(p, topic, recs) -> None:
        nonlocal refused
        send, enqueue = p.send_nowait, p.enqueue
        for k, v in recs:
            try:
                send(topic, v, key=k)
            except WouldBlockError:
                refused += 1
                await enqueue(topic, v, key=k)

    compare_clients._aio_producer = compare_clients.AIO_PRODUCER["mixed"]     # the producer's defaults
    recs = _records(records, "mixed")
    c0, t0 = _cpu(), time.perf_counter()
    produce_kwire_aio(bootstrap, topic, recs, codec, fallback if pattern == "send_nowait" else aio_enqueue)
    wall = time.perf_counter() - t0
    return {"rate": records / wall, "cpu": _cpu() - c0, "refused": refused}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", action="append", default=[], metavar="NAME=SRC",
                    help="a build to measure: its name and source directory (repeat)")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--codecs", default="lz4,none")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--one", nargs=4, metavar=("BOOTSTRAP", "TOPIC", "PATTERN", "CODEC"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.one[0], args.one[1], args.one[2], args.records, args.one[3])))
        return 0
    if not args.build:
        ap.error("--build NAME=SRC, at least once")
    from kwire.admin import Admin, NewTopic
    from kwire.devbroker import start_tansu

    builds = dict(b.split("=", 1) for b in args.build)
    codecs = [c.strip() for c in args.codecs.split(",") if c.strip()]
    best: Dict[Tuple[str, str, str], Dict[str, float]] = {}
    with start_tansu() as broker:
        for _ in range(args.repeat):
            for codec in codecs:
                for pattern in PATTERNS:
                    for name, src in builds.items():
                        topic = f"backpressure-{uuid.uuid4().hex[:8]}"
                        with Admin(bootstrap_servers=broker.bootstrap) as a:
                            a.create_topics([NewTopic(topic, PARTITIONS)])
                        env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.abspath(src), ROOT]))
                        out = subprocess.run([sys.executable, "-m", "benchmarks.aio_backpressure", "--records", str(args.records), "--one", broker.bootstrap, topic,
                                              pattern, codec], env=env, cwd=ROOT, capture_output=True, text=True)
                        if out.returncode:
                            raise SystemExit(f"{name} {pattern} {codec} failed:\n{out.stderr}")
                        got = json.loads(out.stdout.splitlines()[-1])
                        print(f"{codec:5} {pattern:12} {name:10} {got['rate']:12,.0f} msg/s  cpu {got['cpu']:6.2f} s"
                              f"  refused {got['refused']}", file=sys.stderr, flush=True)
                        key = (codec, pattern, name)
                        if key not in best or got["rate"] > best[key]["rate"]:
                            best[key] = got
                        with Admin(bootstrap_servers=broker.bootstrap) as a:
                            a.delete_topics([topic])
    print(f"\n{args.records:,} records (16-byte key, 50-1,000-byte value), {PARTITIONS} partitions, local Tansu, "
          f"kwire.aio's default buffer_memory and batch_size, best of {args.repeat}\n")
    rows: List[str] = ["| codec | pattern | build | msg/s | client CPU s | refused |", "|---|---|---|---:|---:|---:|"]
    for (codec, pattern, name), got in best.items():
        rows.append(f"| {codec} | {pattern} | {name} | {got['rate']:,.0f} | {got['cpu']:.2f} | {got['refused']:,} |")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
