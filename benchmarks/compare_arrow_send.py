"""Producing Arrow rows with kwire: ``Producer.send_arrow`` against
``send()`` in a Python loop over the same rows, to the local Tansu broker:
rows/s, the process's CPU seconds, and the ratios.

Workload: N rows (default 1,000,000) in RecordBatches of 10,000 rows
(``key``, ``value``, ``headers``): a quarter of the keys null, the others
12 bytes; a header (``trace``, 16 bytes) on every fifth row; values of
10 to 1,000 bytes (uniform, fixed seed: ~505 bytes on average), into a
4-partition topic (keyed rows by murmur2, the others sticky). Three ways:

- ``send-prepared``: ``send()`` over Python tuples made before the clock
  starts (what a writer that already has Python objects pays);
- ``send-to_pylist``: per RecordBatch, its columns' ``to_pylist()`` and the
  headers made into (key, value) pairs, then ``send()`` for each row (what a
  writer holding Arrow data pays without send_arrow);
- ``send_arrow``: one ``send_arrow()`` per RecordBatch.

Each way produces to a topic of its own and flushes; the rounds take turns
(``--repeat``) so noise on a shared machine hits each alike, and each way's
best round counts. CPU seconds are the process's (the sender thread's
too; the broker's are not counted).

``--icount N`` also counts the instructions per row of the compiled send
path alone, with callgrind (no broker, no sender thread: an Accumulator
whose batches are kept; see benchmarks/icount.py for the method): ``send()``
over prepared tuples against ``send_arrow`` over the same N rows.

    python -m benchmarks.compare_arrow_send [--records 1000000] [--repeat 3] [--codec none]
                                            [--batch-rows 10000] [--icount 20000] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

from benchmarks import history

PARTITIONS = 4
BATCH_ROWS = 10_000
SEED = 7
Row = Tuple[Optional[bytes], bytes, Optional[List[Tuple[str, bytes]]]]


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def make_rows(n: int) -> List[Row]:
    """The workload's rows as Python objects (key, value, headers)."""
    rng = random.Random(SEED)
    filler = bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz0123456789 ") for _ in range(2048))
    out: List[Row] = []
    for i in range(n):
        key = None if i % 4 == 0 else b"user-%07d" % (i % 1_000_000)
        start, size = rng.randrange(1024), rng.randint(10, 1000)
        value = (b"%d:" % i + filler[start:start + size])[:size]
        headers = [("trace", b"%016x" % rng.getrandbits(64))] if i % 5 == 0 else None
        out.append((key, value, headers))
    return out


def to_batches(rows: List[Row], batch_rows: int = BATCH_ROWS) -> List[Any]:
    """The rows as RecordBatches of ``batch_rows`` rows (Spark's Kafka schema
    for the headers: list<struct<key: string, value: binary>>)."""
    import pyarrow as pa

    from kwire._arrow import HEADERS_TYPE

    out = []
    for s in range(0, len(rows), batch_rows):
        chunk = rows[s:s + batch_rows]
        out.append(pa.RecordBatch.from_arrays([
            pa.array([r[0] for r in chunk], pa.binary()),
            pa.array([r[1] for r in chunk], pa.binary()),
            pa.array([None if r[2] is None else [{"key": k, "value": v} for k, v in r[2]] for r in chunk],
                     HEADERS_TYPE),
        ], names=["key", "value", "headers"]))
    return out


# ------------------------------------------------------------------ the ways
def _producer(bootstrap: str, codec: str) -> Any:
    from kwire.producer import Producer

    return Producer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=5, batch_size=262144,
                    buffer_memory=256 << 20)


def produce_prepared(bootstrap: str, topic: str, rows: List[Row], batches: List[Any], codec: str) -> None:
    with _producer(bootstrap, codec) as p:
        send = p.send
        for key, value, headers in rows:
            send(topic, value, key=key, headers=headers)
        p.flush()


def produce_to_pylist(bootstrap: str, topic: str, rows: List[Row], batches: List[Any], codec: str) -> None:
    with _producer(bootstrap, codec) as p:
        send = p.send
        for rb in batches:
            keys = rb.column(0).to_pylist()
            values = rb.column(1).to_pylist()
            for key, value, hs in zip(keys, values, rb.column(2).to_pylist()):
                send(topic, value, key=key, headers=None if hs is None else [(h["key"], h["value"]) for h in hs])
        p.flush()


def produce_arrow(bootstrap: str, topic: str, rows: List[Row], batches: List[Any], codec: str) -> None:
    with _producer(bootstrap, codec) as p:
        futures = [p.send_arrow(topic, rb) for rb in batches]
        p.flush()
        sent = sum(f.result(0) for f in futures)
        assert sent == len(rows), (sent, len(rows))


WAYS: Dict[str, Callable[..., None]] = {"send-prepared": produce_prepared, "send-to_pylist": produce_to_pylist,
                                        "send_arrow": produce_arrow}
BASE = "send-prepared"


# ------------------------------------------------------ instruction counts
def _accumulator() -> Tuple[Any, List[Any]]:
    """An Accumulator of a 4-partition topic "t" with no broker and no
    sender, and the list its sealed batches go to (the producer would send
    them)."""
    from kwire._codec import Accumulator, Generation, ProducerBatch, RecordBatchBuilder, SendLock

    def new_batch(topic: str, partition: int, encoded: bool = False) -> Any:
        return ProducerBatch(topic, partition, RecordBatchBuilder(None))

    kept: List[Any] = []
    acc = Accumulator(lock=SendLock(), generation=Generation(), check=None, wait_partitions=None, wait_room=None,
                      new_batch=new_batch, sealed=lambda tp, batch: kept.append(batch), batch_size=262144,
                      buffer_memory=1 << 40)
    acc.set_partitions("t", 0, list(range(PARTITIONS)))
    return acc, kept


def icount_child(way: str, n: int) -> None:
    """The callgrind child: inputs, marker, the work, marker (see
    benchmarks/icount.py). The work: the rows queued, then every batch
    sealed and built as the sender thread builds them (``send()`` leaves
    the encoding to that step; ``send_arrow`` encodes as it queues)."""
    from benchmarks.icount import _producer_shell
    from kwire._arrow import send_columns
    from kwire._codec import build_batches

    rows = make_rows(n)
    batches = to_batches(rows)
    acc, kept = _accumulator()
    producer = _producer_shell(acc)
    queued: List[Any] = []
    os.getppid()
    if way == "send":
        for key, value, headers in rows:
            producer.send("t", value, key=key, headers=headers)
    else:
        for rb in batches:
            acc.send_arrow("t", *send_columns(rb, "key", "value", "headers", None, None), queued)
    acc.seal_all()
    assert sum(len(b) for b in build_batches(kept, [None] * len(kept))) > n * 10
    os.getppid()


def copy_instructions(path: str) -> int:
    """The instructions a callgrind profile counts in memcpy/memmove
    themselves (their self cost): glibc copies large blocks with ``rep
    movsb``, which callgrind counts once per byte moved, so a copy of a
    256 KiB batch weighs as much there as ~250k instructions of code, ~30
    times what it costs in time. Reported apart so that the copies do not
    hide the rest."""
    total, fn, call_cost = 0, "", False
    with open(path) as f:
        for line in f:
            if line.startswith("fn="):
                fn = line[3:].strip()
            elif line.startswith("calls="):
                call_cost = True           # the next cost line is the call's inclusive cost
            elif line[:1].isdigit() or line[:1] in "+-*":
                if call_cost:
                    call_cost = False
                elif "memcpy" in fn or "memmove" in fn:
                    parts = line.split()
                    total += int(parts[1]) if len(parts) > 1 else 0
    return total


def icount(way: str, n: int) -> Tuple[float, float]:
    """Instructions per row of one way's work under callgrind: in all, and
    outside memcpy/memmove (see :func:`copy_instructions`)."""
    from benchmarks.icount import HERE_ROOT, MARKER, _totals, callgrind_env

    import kwire

    src = os.path.dirname(os.path.dirname(os.path.abspath(kwire.__file__)))
    with tempfile.TemporaryDirectory(prefix="kwire-arrow-icount-") as tmp:
        out = os.path.join(tmp, "cg.out")
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", f"--dump-before={MARKER}",
               "--dump-line=no", "--compress-strings=no", sys.executable, "-m", "benchmarks.compare_arrow_send",
               "--icount-child", way, "--records", str(n)]
        proc = subprocess.run(cmd, env=callgrind_env(src), cwd=HERE_ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0 or not os.path.exists(out + ".2"):
            raise RuntimeError(f"callgrind run of {way} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        total = _totals(out + ".2")
        return total / n, (total - copy_instructions(out + ".2")) / n


# ---------------------------------------------------------------------- main
def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=3, help="rounds per way, taking turns; the best counts")
    p.add_argument("--codec", default="none")
    p.add_argument("--batch-rows", type=int, default=BATCH_ROWS, help="rows per RecordBatch (one send_arrow call)")
    p.add_argument("--icount", type=int, default=0, metavar="N",
                   help="also count instructions per row of the compiled path alone (callgrind), over N rows")
    p.add_argument("--json", metavar="PATH", help="also write the results and ratios as JSON (benchmarks/history.py)")
    p.add_argument("--icount-child", choices=["send", "send_arrow"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.icount_child:
        icount_child(args.icount_child, args.records)
        return 0
    from kwire.admin import Admin, NewTopic
    from kwire.devbroker import start_tansu

    best: Dict[str, Tuple[float, float]] = {}
    with start_tansu() as broker:
        # made after the broker's fork (see compare_clients.py: copy-on-write pages)
        rows = make_rows(args.records)
        batches = to_batches(rows, args.batch_rows)
        mean = sum(len(v) for _, v, _ in rows) / len(rows)
        print(f"{args.records:,} rows, mean value {mean:.0f} bytes, {len(batches)} RecordBatches", file=sys.stderr)
        for _ in range(args.repeat):
            for name, fn in WAYS.items():
                topic = f"arrow-bench-{name}-{uuid.uuid4().hex[:6]}"
                with Admin(bootstrap_servers=broker.bootstrap) as a:
                    a.create_topics([NewTopic(topic, PARTITIONS)])
                c0, t0 = _cpu(), time.perf_counter()
                fn(broker.bootstrap, topic, rows, batches, args.codec)
                wall, cpu = time.perf_counter() - t0, _cpu() - c0
                if name not in best or wall < best[name][0]:
                    best[name] = (wall, cpu)
                print(f"{name:15} {args.records / wall:12,.0f} rows/s  cpu {cpu:6.2f} s", file=sys.stderr,
                      flush=True)
                with Admin(bootstrap_servers=broker.bootstrap) as a:
                    a.delete_topics([topic])          # keep the in-memory broker small
    base_wall, base_cpu = best[BASE]
    print(f"\n{args.records:,} rows (mean value {mean:.0f} bytes, a quarter of the keys null, headers on a fifth), "
          f"RecordBatches of {args.batch_rows:,} rows, {PARTITIONS} partitions, codec {args.codec}, local Tansu, "
          f"best of {args.repeat}\n")
    print(f"| way | rows/s | process CPU s | speed vs {BASE} | CPU vs {BASE} |")
    print("|---|---:|---:|---:|---:|")
    for name, (wall, cpu) in best.items():
        print(f"| {name} | {args.records / wall:,.0f} | {cpu:.2f} | {base_wall / wall:.2f}x | {base_cpu / cpu:.2f}x |")
    counts: Dict[str, Tuple[float, float]] = {}
    if args.icount:
        counts = {way: icount(way, args.icount) for way in ("send", "send_arrow")}
        print(f"\nThe compiled path alone (callgrind, {args.icount:,} rows queued, then sealed and built as the "
              "sender builds them; no broker):\n")
        print("| way | instructions/row | outside memcpy/memmove |")
        print("|---|---:|---:|")
        for way, (total, outside) in counts.items():
            print(f"| {way} | {total:,.0f} | {outside:,.0f} |")
        (st, so), (at, ao) = counts["send"], counts["send_arrow"]
        print(f"\nsend_arrow / send: {at / st:.2f}x in all, {ao / so:.2f}x outside the copies "
              "(callgrind counts a large copy once per byte: see copy_instructions)")
    if args.json:
        env = dict(records=args.records, repeat=args.repeat, codec=args.codec, batch_rows=args.batch_rows)
        results: Any = {"ways": [{"way": n, "seconds": w, "cpu_s": c} for n, (w, c) in best.items()],
                        "instructions_per_row": {w: {"all": t, "outside_copies": o} for w, (t, o) in counts.items()}}
        ratios = {f"{n} vs {BASE}": base_wall / w for n, (w, _) in best.items() if n != BASE}
        history.write_results(args.json, "compare_arrow_send", env, results, ratios)
    return 0


if __name__ == "__main__":
    sys.exit(main())
