"""Avro values into Arrow: kwire's compiled decoder (``AvroFormat.decode``)
against fastavro (``schemaless_reader`` per value) + ``pyarrow.Table.from_pylist``,
on the same values, one thread: rows/s and the ratio, per shape.

Shapes (values written by fastavro from seeded random data):

- ``event12``: the issue's 12-field record: five strings, four longs, a
  nullable double, a nested record (string, int), an array of strings, a
  timestamp-millis, a boolean (about 90 bytes a value);
- ``narrow4``: four columns (long, int, double, string of ~10 bytes), the
  shape arrow-avro (Rust) publishes its figure for;
- ``wide40``: 40 fields, longs, doubles, strings and nullable strings;
- ``evolved``: ``event12`` values read as a newer schema (a field removed,
  one renamed through an alias, int promoted to long, two fields added
  with defaults): Avro's schema resolution in the decode.

Values are decoded in columns of ``--batch-rows`` (what a fetch of one
partition gives ``poll_columnar``); the rounds take turns (``--repeat``), each
way's best round counts. fastavro decodes ``--peer-records`` rows (it is ~100x
slower; its rate is per row, so the ratio stands).

    python -m benchmarks.compare_avro [--records 400000] [--batch-rows 10000] [--repeat 3]
                                      [--peer-records 40000] [--shape event12 ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import sys
import time
from typing import Any, Callable, Dict, List, Optional

import fastavro
import pyarrow as pa

from benchmarks.avro_workload import SHAPES, rows
from kwire.formats.avro import AvroFormat

def make_values(shape: str, n: int) -> List[bytes]:
    writer = SHAPES[shape][0]
    parsed = fastavro.parse_schema(copy.deepcopy(writer))
    out = []
    for row in rows(shape, n):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, row)
        out.append(buf.getvalue())
    return out


def run_kwire(shape: str, columns: List[pa.Array], offsets: List[pa.Array]) -> int:
    """The columns as poll_columnar's batches hand them over (offsets
    included, made before the clock starts)."""
    writer, reader, _ = SHAPES[shape]
    fmt = AvroFormat(reader, writer_schema=writer)
    rows = 0
    for col, offs in zip(columns, offsets):
        rows += len(fmt.decode(col, topic="bench", partition=0, offsets=offs))
    return rows


def run_fastavro(shape: str, values: List[bytes], batch_rows: int) -> int:
    writer, reader, _ = SHAPES[shape]
    w = fastavro.parse_schema(copy.deepcopy(writer))
    r = fastavro.parse_schema(copy.deepcopy(reader)) if reader is not writer else None
    rows = 0
    for start in range(0, len(values), batch_rows):
        records = [fastavro.schemaless_reader(io.BytesIO(v), w, r) for v in values[start:start + batch_rows]]
        rows += pa.Table.from_pylist(records).num_rows
    return rows


def _timed(fn: Callable[[], int]) -> float:
    t = time.perf_counter()
    rows = fn()
    return rows / (time.perf_counter() - t)


def bench(shape: str, records: int, batch_rows: int, peer_records: int, repeat: int) -> Dict[str, Any]:
    values = make_values(shape, records)
    columns = [pa.array(values[i:i + batch_rows], pa.binary()) for i in range(0, len(values), batch_rows)]
    offsets = [pa.array(range(len(c)), pa.int64()) for c in columns]
    peer_values = values[:peer_records]
    run_kwire(shape, columns[:1], offsets[:1])    # programs compiled, memory warm
    best = {"kwire": 0.0, "fastavro+from_pylist": 0.0}
    for _ in range(repeat):
        best["kwire"] = max(best["kwire"], _timed(lambda: run_kwire(shape, columns, offsets)))
        best["fastavro+from_pylist"] = max(best["fastavro+from_pylist"],
                                           _timed(lambda: run_fastavro(shape, peer_values, batch_rows)))
    return {"shape": shape, "bytes_per_value": sum(map(len, values)) / len(values), **best,
            "ratio": best["kwire"] / best["fastavro+from_pylist"]}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--batch-rows", type=int, default=10_000)
    ap.add_argument("--peer-records", type=int, default=40_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--shape", action="append", choices=sorted(SHAPES))
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)
    results = []
    print(f"{'shape':<10} {'B/value':>8} {'kwire rows/s':>14} {'fastavro+from_pylist':>22} {'ratio':>8}")
    for shape in args.shape or list(SHAPES):
        r = bench(shape, args.records, args.batch_rows, min(args.peer_records, args.records), args.repeat)
        results.append(r)
        print(f"{shape:<10} {r['bytes_per_value']:>8.0f} {r['kwire']:>14,.0f} {r['fastavro+from_pylist']:>22,.0f} "
              f"{r['ratio']:>7.1f}x", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
