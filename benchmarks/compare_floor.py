"""kwire's ColumnarDecoder against the machine's floor: the same work in C.

The floor is ``benchmarks/floor/floor.c``, built by this script with the
machine's C compiler (``gcc -O2 -march=native``, cached under
``build/floor/``): it walks the same bytes as ColumnarDecoder, checks every
batch and record as it does, checks CRC32C with the CPU's crc32 instructions
where it has them, and gathers keys and values into Arrow-like columns
(offsets and data, reused call after call; fields of up to 32 bytes as two
fixed 16-byte moves, as kwire copies them). It reports records/s for parse
alone, parse+CRC, parse+gather and all three ("all": the issue's floor, the
least any columnar decode can cost on this machine), and "columns": all,
plus every other column ColumnarDecoder returns (offsets, timestamps and
their types, value validity, the headers as a list of UTF-8-checked keys and
nullable values), which is the same work as kwire's. kwire is reported as a
share of both.

Workloads (``--shapes``), each about ``--mb`` MB of uncompressed v2 batches:

- ``held-back``: written by aiokafka's compiled builder in batches of its
  producer's default 16 KiB, seed 32: a tenth of the keys null, the others
  8, 16 or 36 bytes; values of 40-200 bytes; headers (one or two) on half
  the records;
- ``standard`` and ``mixed``: benchmarks/workload.py's shapes (kwire's
  builder, batches of 500 records), as compare_codecs uses them.

Cases, each with the same calls for kwire and the floor: ``single`` (the
whole buffer in one call, again and again), ``chunks`` (the buffer as calls
of at most ``--chunk`` bytes cut at batch boundaries, as a consumer's fetches
bring it), ``alternate`` (a call on the whole buffer, then one chunk, and so
on: column memory sized for one, then the other). Rounds alternate between
the floor (one process runs every mode and case) and kwire (in this
process); each side's best round counts. kwire's minor page faults per 1,000
records are shown too (getrusage, of this process during its timed calls).
Run from the repository root:

    python -m benchmarks.compare_floor                         # all shapes, 5 rounds
    python -m benchmarks.compare_floor --shapes held-back --rounds 9 --json out.json
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from typing import Any, Dict, List, Optional, Tuple

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import history, workload  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "benchmarks", "floor", "floor.c")
#: kwire's CRC32C helpers, which the floor includes (the shift of a CRC past a block)
HEADER = os.path.join(ROOT, "src", "kwire", "_core", "crc32c.h")
CACHE = os.path.join(ROOT, "build", "floor")
CFLAGS = ("-O2", "-march=native")
SHAPES = ("held-back", "standard", "mixed")
CASES = ("single", "chunks", "alternate")
MODES = ("parse", "parse+crc", "parse+gather", "all", "columns")
SEED = 32
AIOKAFKA_BATCH_BYTES = 16384          # aiokafka's producer default (max_batch_size)


# ------------------------------------------------------------ the workload
def held_back_mix(target_bytes: int, seed: int = SEED) -> bytes:
    """The issue's held-back mix, written by aiokafka's compiled builder in
    batches of at most 16 KiB, each batch's base offset set as a broker
    would (consecutive offsets; the base offset is outside the CRC)."""
    from aiokafka.record._crecords import DefaultRecordBatchBuilder as Builder

    rng = random.Random(seed)
    alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789-_ {}:,\""
    text = bytes(rng.choice(alphabet) for _ in range(4096))
    header_keys = ("trace-id", "content-type", "source", "retry")
    out: List[bytes] = []
    size = offset = 0
    ts = workload.BASE_TIMESTAMP
    pending = None
    while size < target_bytes:
        b = Builder(2, 0, 0, -1, -1, -1, AIOKAFKA_BATCH_BYTES)
        n = 0
        while True:
            if pending is None:
                key = None if rng.random() < 0.1 else bytes(rng.choice(alphabet) for _ in range(rng.choice((8, 16, 36))))
                vsize = rng.randint(40, 200)
                pos = rng.randrange(len(text) - vsize)
                headers = [] if rng.random() < 0.5 else [
                    (rng.choice(header_keys), text[p:p + rng.randint(4, 32)])
                    for p in (rng.randrange(2048) for _ in range(rng.choice((1, 2))))]
                ts += rng.randrange(3)
                pending = (ts, key, text[pos:pos + vsize], headers)
            if b.append(n, *pending) is None:
                break
            pending = None
            n += 1
        batch = bytearray(b.build())
        batch[0:8] = offset.to_bytes(8, "big")
        offset += n
        size += len(batch)
        out.append(bytes(batch))
    return b"".join(out)


def shape_buffer(shape: str, mb: float) -> bytes:
    target = int(mb * 1e6)
    if shape == "held-back":
        return held_back_mix(target)
    first = workload.buffer("none", 2, shape)
    per_batch = len(first) / 2
    return workload.buffer("none", max(2, int(target / per_batch)), shape)


# ------------------------------------------------------------ the floor
def cpu_crc_instructions() -> str:
    """What /proc/cpuinfo says of the CPU's CRC32C instructions."""
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return "unknown (no /proc/cpuinfo)"
    flags = set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            flags.update(line.split(":", 1)[1].split())
    if "sse4_2" in flags:
        return "sse4_2 (crc32 instructions)"
    if "crc32" in flags:
        return "crc32 (ARMv8 crc32c instructions)"
    return "none listed"


def build_floor(cache: Optional[str] = None) -> str:
    """The floor's binary, compiled once per source and flags (cached in
    ``cache``, default :data:`CACHE`). Raises RuntimeError if there is no C
    compiler or the build fails."""
    cache = cache or CACHE
    cc = os.environ.get("CC", "gcc")
    if shutil.which(cc) is None:
        raise RuntimeError(f"no C compiler ({cc}) to build the floor")
    h = hashlib.sha256(" ".join((cc,) + CFLAGS).encode())
    for path in (SOURCE, HEADER):
        with open(path, "rb") as f:
            h.update(f.read())
    digest = h.hexdigest()[:12]
    exe = os.path.join(cache, f"floor-{digest}")
    if not os.path.exists(exe):
        os.makedirs(cache, exist_ok=True)
        tmp = f"{exe}.{os.getpid()}"
        proc = subprocess.run([cc, *CFLAGS, "-o", tmp, SOURCE], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"building the floor failed:\n{proc.stdout}")
        os.replace(tmp, exe)
    return exe


def run_floor(exe: str, path: str, chunk: int, seconds: float, clock: str = "wall") -> Dict[str, Any]:
    proc = subprocess.run([exe, path, str(chunk), str(seconds), clock], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"the floor failed: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


# ------------------------------------------------------------ kwire
def _crc(parts) -> str:
    import google_crc32c

    crc = 0
    for part in parts:
        crc = google_crc32c.extend(crc, part)
    return f"{crc:016x}"


def kwire_summary(buf: bytes) -> Dict[str, Any]:
    """What the floor prints of the whole input, from kwire's columns:
    records, null keys, key and value bytes, the sum of offsets, and the
    CRC32C of the key data, value data, key offsets and value offsets; and
    for mode "columns", the CRC32C of the offsets, timestamps, timestamp
    types and the headers' buffers, and the nulls of values, header lists
    and header values."""
    import pyarrow.compute as pc

    rb = workload.kwire.ColumnarDecoder(check_crcs=True).decode(buf).record_batch
    key, value, headers = rb.column("key"), rb.column("value"), rb.column("headers")
    data = [bytes(arr.buffers()[2] or b"") for arr in (key, value)]
    entries = headers.values                    # struct<key: string, value: binary>, one per header
    hkey, hval = entries.field("key"), entries.field("value")
    n = rb.num_rows
    columns = [bytes(rb.column(name).buffers()[1])[:size * n]
               for name, size in (("offset", 8), ("timestamp", 8), ("timestamp_type", 4))]
    columns.append(bytes(headers.buffers()[1])[:4 * (n + 1)])
    for arr in (hkey, hval):
        columns += [bytes(arr.buffers()[2] or b""), bytes(arr.buffers()[1])[:4 * (len(arr) + 1)]]
    return {"records": n, "null_keys": key.null_count, "key_bytes": len(data[0]),
            "value_bytes": len(data[1]), "offset_sum": int(pc.sum(rb.column("offset")).as_py() or 0) % (1 << 64),
            "checksum": _crc(data + [bytes(arr.buffers()[1]) for arr in (key, value)]),
            "header_rows": len(entries), "null_values": value.null_count, "null_header_lists": headers.null_count,
            "null_header_values": hval.null_count, "columns_checksum": _crc(columns)}


def kwire_case(case: str, buf: bytes, chunks: List[bytes], seconds: float, clock: str = "wall"
               ) -> Tuple[float, float]:
    """records/s of one case for at least ``seconds`` of ``clock`` ("wall",
    or "cpu": this thread's CPU time) after two warm-up passes, and minor
    page faults per 1,000 records."""
    now = time.perf_counter if clock == "wall" else time.thread_time
    dec = workload.kwire.ColumnarDecoder(check_crcs=True)
    nchunks = len(chunks)
    state = {"next": 0}

    def one() -> int:
        if case == "single":
            return dec.decode(buf).record_batch.num_rows
        if case == "chunks":
            return sum(dec.decode(c).record_batch.num_rows for c in chunks)
        i = state["next"] % nchunks
        state["next"] += 1
        return dec.decode(buf).record_batch.num_rows + dec.decode(chunks[i]).record_batch.num_rows

    one()
    one()               # the decoder's column memory sized and recycled: its steady state is timed
    gc.collect()
    rows = 0
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t0 = now()
    while True:
        rows += one()
        t = now() - t0
        if t >= seconds:
            break
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
    return rows / t, faults * 1000.0 / rows


# ------------------------------------------------------------ the run
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", nargs="+", default=list(SHAPES), help="workloads (default: all)")
    p.add_argument("--mb", type=float, default=30.0, help="size of each workload's buffer, MB (default 30)")
    p.add_argument("--chunk", type=int, default=1 << 20, help="bytes per call in the chunked cases (default 1 MiB)")
    p.add_argument("--rounds", type=int, default=5, help="rounds, floor and kwire in turn; the best counts")
    p.add_argument("--seconds", type=float, default=0.3, help="time per measurement (each mode and case)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="time measured: wall clock (default), or each side's thread CPU time (steadier on a "
                        "shared machine; blind to time spent waiting for the kernel)")
    p.add_argument("--quick", action="store_true", help="smoke test: 3 MB, 1 round, 0.05 s")
    p.add_argument("--json", metavar="PATH", help="also write the results and ratios as JSON (benchmarks/history.py)")
    args = p.parse_args(argv)
    args.shapes = [s for arg in args.shapes for s in arg.split(",") if s]
    bad = set(args.shapes) - set(SHAPES)
    if bad:
        p.error(f"unknown shape(s): {', '.join(sorted(bad))}")
    if args.quick:
        args.mb, args.rounds, args.seconds = 3.0, 1, 0.05
    if args.rounds < 1 or args.seconds <= 0 or args.mb <= 0 or args.chunk < 1:
        p.error("--rounds, --seconds, --mb and --chunk must be positive")
    return args


def run_shape(shape: str, exe: str, args, tmp: str) -> Dict[str, Any]:
    buf = shape_buffer(shape, args.mb)
    path = os.path.join(tmp, f"{shape}.bin")
    with open(path, "wb") as f:
        f.write(buf)
    chunks = workload.fetches(buf, args.chunk)
    floor_best = {m: {c: 0.0 for c in CASES} for m in MODES}
    kwire_best = {c: 0.0 for c in CASES}
    faults = {c: float("inf") for c in CASES}
    info: Dict[str, Any] = {}
    for r in range(args.rounds):
        info = run_floor(exe, path, args.chunk, args.seconds, args.clock)
        for m in MODES:
            for c in CASES:
                floor_best[m][c] = max(floor_best[m][c], info["results"][m][c])
        for c in CASES:
            rate, per = kwire_case(c, buf, chunks, args.seconds, args.clock)
            kwire_best[c] = max(kwire_best[c], rate)
            faults[c] = min(faults[c], per)
        print(f"[{shape} round {r + 1}/{args.rounds}] floor all/columns "
              + " ".join(f"{c} {info['results']['all'][c] / 1e6:.2f}M/{info['results']['columns'][c] / 1e6:.2f}M"
                         for c in CASES) + " | kwire "
              + " ".join(f"{c} {kwire_best[c] / 1e6:.2f}M" for c in CASES), file=sys.stderr, flush=True)
    mine = kwire_summary(buf)
    theirs = {k: info[k] for k in mine}
    if mine != theirs or info["chunks"] != len(chunks):
        raise AssertionError(f"{shape}: kwire and the floor disagree: {mine} vs {theirs} "
                             f"({len(chunks)} vs {info['chunks']} chunks)")
    return {"shape": shape, "bytes": len(buf), "records": mine["records"], "chunks": len(chunks),
            "crc32c": info["crc32c"], "floor": floor_best, "kwire": kwire_best,
            "kwire_minor_faults_per_1000": faults}


def ratios(results: List[Dict[str, Any]]) -> Dict[str, float]:
    """The history's figures: kwire's records/s as a share of the floor's,
    "all" (parse, CRC and gather: "kwire vs floor") and "columns" (the same
    columns as kwire's: "kwire vs columns floor"), per shape and case."""
    out = {}
    for r in results:
        for c in CASES:
            out[f"{r['shape']}/{c}/kwire vs floor"] = r["kwire"][c] / r["floor"]["all"][c]
            out[f"{r['shape']}/{c}/kwire vs columns floor"] = r["kwire"][c] / r["floor"]["columns"][c]
    return out


def markdown(results: List[Dict[str, Any]], env: Dict[str, Any]) -> str:
    lines = [
        f"ColumnarDecoder (CRC checked) against the C floor; ~{env['mb']:g} MB per shape, calls of "
        f"<= {env['chunk']:,} bytes in the chunked cases, best of {env['rounds']} rounds, {env['seconds']:g} s "
        f"({env['clock']} clock) each; CRC32C: {results[0]['crc32c'] if results else '-'} (CPU: {env['cpu_crc']}); "
        f"{env['cc']} {' '.join(CFLAGS)}; Python {env['python']} {env['machine']}, {env['cpus']} CPUs; "
        f"kwire {env['kwire']}",
        "",
        "| shape | case | floor parse | parse+crc | parse+gather | all | columns | kwire | kwire % of all "
        "| kwire % of columns | kwire faults/1k rec |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        for c in CASES:
            f = r["floor"]
            lines.append(f"| {r['shape']} | {c} | " + " | ".join(f"{f[m][c] / 1e6:.2f}M" for m in MODES)
                         + f" | {r['kwire'][c] / 1e6:.2f}M | {100 * r['kwire'][c] / f['all'][c]:.0f}% "
                         f"| {100 * r['kwire'][c] / f['columns'][c]:.0f}% "
                         f"| {r['kwire_minor_faults_per_1000'][c]:.1f} |")
    return "\n".join(lines)


def environment(args) -> Dict[str, Any]:
    return {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "kwire": version("kwire"), "aiokafka": version("aiokafka"), "mb": args.mb, "chunk": args.chunk,
            "rounds": args.rounds, "seconds": args.seconds, "clock": args.clock, "cpu_crc": cpu_crc_instructions(),
            "cc": history.environment()["cc"], "cflags": list(CFLAGS), "seed": SEED}


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    exe = build_floor()
    env = environment(args)
    with tempfile.TemporaryDirectory(prefix="kwire-floor-") as tmp:
        results = [run_shape(shape, exe, args, tmp) for shape in args.shapes]
    print(markdown(results, env))
    if args.json:
        history.write_results(args.json, "compare_floor", env, results, ratios(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
