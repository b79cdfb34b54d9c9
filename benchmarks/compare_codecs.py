"""Compare kwire's record codec with aiokafka (compiled) and kafka-python.

Every client decodes the same generated buffer (and encodes the same records)
per codec and shape, in one process, best of ``--repeat`` runs. Shapes
(benchmarks/workload.py): ``standard`` (16-byte key, 100-byte value, one
header) and ``mixed`` (a fifth of the keys null, zero/one/three headers,
values of 0-4,000 bytes), the latter on a fifth as many batches by default
(its records are about 7 times larger). Prints a markdown table
of records/s with ratios vs aiokafka and vs kafka-python, and a progress line
per measurement on stderr. Run from the repository root:

    python -m benchmarks.compare_codecs                      # full: 2000 batches x 500
    python -m benchmarks.compare_codecs --quick              # smoke test
    python -m benchmarks.compare_codecs --codecs none lz4 --shapes mixed --skip kafka-python --json out.json
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import sys
import time
from importlib.metadata import version

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import history, workload  # noqa: E402

PEERS = ("aiokafka", "kafka-python")
OPS = {"decode": workload.DECODERS, "encode": workload.ENCODERS}
# The targets, uncompressed (v2, CRC checked): (op, kwire adapter, peer, ratio).
TARGETS = (
    ("decode", "kwire", "aiokafka", 1.5),
    ("decode", "kwire-columnar", "aiokafka", 7.0),
    ("encode", "kwire", "aiokafka", 1.5),
)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--codecs", nargs="+", default=list(workload.CODECS),
                   help="codecs to run (space or comma separated; default: all)")
    p.add_argument("--shapes", nargs="+", default=list(workload.SHAPES),
                   help="record shapes (space or comma separated; default: all)")
    p.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best counts")
    p.add_argument("--batches", type=int, default=None,
                   help="batches of 500 records of the standard shape (default 2000, or 40 with --quick); "
                        "the mixed shape takes a fifth as many (at least 2)")
    p.add_argument("--quick", action="store_true", help="smoke test: 40 batches, 1 run")
    p.add_argument("--fetch-bytes", type=int, default=None, metavar="N",
                   help="decode the buffer as Fetch responses of at most N bytes, cut at batch "
                        "boundaries, one decode call each (default: the whole buffer at once)")
    p.add_argument("--skip", nargs="+", default=[], choices=("kwire",) + PEERS,
                   help="clients not to run (kafka-python is slow)")
    p.add_argument("--json", metavar="PATH", help="also write the results and ratios as JSON (benchmarks/history.py)")
    args = p.parse_args(argv)
    args.codecs = [c for arg in args.codecs for c in arg.split(",") if c]
    bad = set(args.codecs) - set(workload.CODECS)
    if bad:
        p.error(f"unknown codec(s): {', '.join(sorted(bad))}")
    args.shapes = [c for arg in args.shapes for c in arg.split(",") if c]
    bad = set(args.shapes) - set(workload.SHAPES)
    if bad:
        p.error(f"unknown shape(s): {', '.join(sorted(bad))}")
    if args.batches is None:
        args.batches = 40 if args.quick else 2000
    if args.quick:
        args.repeat = 1
    if args.batches < 2 or args.repeat < 1:
        p.error("--batches must be >= 2 and --repeat >= 1")
    return args


def measure(run, repeat, check):
    """Best wall time of ``repeat`` calls; ``check`` validates each result."""
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        out = run()
        best = min(best, time.perf_counter() - t0)
        check(out)
        del out
    return best


def environment(args):
    import kafka.record.util

    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "kwire": version("kwire"),
        "aiokafka": version("aiokafka"),
        "kafka-python": version("kafka-python"),
        "kafka_python_crc32c": kafka.record.util._crc32c.__module__,
        "batches": args.batches,
        "mixed_batches": batches_of("mixed", args),
        "shapes": args.shapes,
        "records_per_batch": workload.RECORDS_PER_BATCH,
        "repeat": args.repeat,
        "fetch_bytes": args.fetch_bytes,
        "kwire_codec_mtime": _codec_mtime(),
    }


def _codec_mtime():
    """When the compiled core was built: its newest extension module's
    mtime (kwire._codec alone before the core was split into kwire._core)."""
    from benchmarks.icount import compiled_core_files

    return max(os.stat(f).st_mtime for _, f in compiled_core_files())


def batches_of(shape, args):
    return args.batches if shape == "standard" else max(2, args.batches // 5)


def _prepare(shape, codec, op, name, args):
    """The timed callable of one client, warmed up, and the check of its result."""
    make, nb = OPS[op][name], batches_of(shape, args)
    if op == "decode":
        make([workload.buffer(codec, 2, shape)])()  # warm-up (imports, first-call costs)
        run = make(workload.fetches(workload.buffer(codec, nb, shape), args.fetch_bytes))
        n = workload.n_records(nb)
        return run, lambda got: _expect(got, n)
    batches = workload.records(nb, shape)
    make(workload.records(2, shape), codec)()
    return make(batches, codec), lambda got: workload.check_encoded(got, batches)


def run_all(args):
    """Per shape, codec and operation, the clients take turns: round r runs
    every client once, so a burst of machine noise lands on all of them
    alike; each client's best round counts."""
    groups = [(shape, codec, op, [name for name in table if workload.client_of(name) not in args.skip])
              for shape in args.shapes for codec in args.codecs for op, table in OPS.items()]
    total = sum(len(names) for *_, names in groups)
    results = []
    for shape, codec, op, names in groups:
        n = workload.n_records(batches_of(shape, args))
        runners = {name: _prepare(shape, codec, op, name, args) for name in names}
        best = {name: float("inf") for name in names}
        for _ in range(args.repeat):
            for name, (run, check) in runners.items():
                best[name] = min(best[name], measure(run, 1, check))
        del runners
        for name in names:
            results.append({"shape": shape, "codec": codec, "op": op, "client": name, "seconds": best[name],
                            "records": n, "records_per_s": n / best[name]})
            print(f"[{len(results)}/{total}] {shape:8} {codec:6} {op} {name:18} best {best[name]:8.3f} s  "
                  f"{n / best[name] / 1e6:7.3f} M rec/s", file=sys.stderr, flush=True)
    return results


def _expect(got, n):
    if got != n:
        raise AssertionError(f"decoded {got} records, expected {n}")


def _rate(results, shape, codec, op, client):
    for r in results:
        if (r["shape"], r["codec"], r["op"], r["client"]) == (shape, codec, op, client):
            return r["records_per_s"]
    return None


def _ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "-"


def ratios(results):
    """The history's figures: each kwire adapter's speed over aiokafka per
    shape, codec and op (kafka-python, often skipped as slow, is left out)."""
    out = {}
    for r in results:
        if workload.client_of(r["client"]) == "kwire":
            peer = _rate(results, r["shape"], r["codec"], r["op"], "aiokafka")
            if peer:
                out[f"{r['shape']}/{r['codec']}/{r['op']}/{r['client']} vs aiokafka"] = r["records_per_s"] / peer
    return out


def markdown(results, env):
    lines = [
        f"standard: {env['batches']} batches x {env['records_per_batch']} records "
        f"({env['batches'] * env['records_per_batch']:,} records), mixed: {env['mixed_batches']} batches "
        f"({env['mixed_batches'] * env['records_per_batch']:,} records), CRC checked, best of {env['repeat']}, "
        f"decoded {'in fetches of <= %d bytes' % env['fetch_bytes'] if env['fetch_bytes'] else 'as one buffer'}; "
        f"Python {env['python']} {env['machine']}, {env['cpus']} CPUs; kwire {env['kwire']} "
        f"(_codec built {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(env['kwire_codec_mtime']))} UTC), "
        f"aiokafka {env['aiokafka']} (compiled), kafka-python {env['kafka-python']} "
        f"(CRC32C from {env['kafka_python_crc32c']})",
        "",
        "| shape | codec | op | client | best s | records/s | vs aiokafka | vs kafka-python |",
        "|---|---|---|---|---:|---:|---:|---:|",
    ]
    for r in results:
        peers = [_ratio(r["records_per_s"], _rate(results, r["shape"], r["codec"], r["op"], p)) for p in PEERS]
        lines.append(f"| {r['shape']} | {r['codec']} | {r['op']} | {r['client']} | {r['seconds']:.3f} | "
                     f"{r['records_per_s']:,.0f} | {peers[0]} | {peers[1]} |")
    lines += ["", "Targets (standard shape, codec none):", ""]
    for op, mine, peer, want in TARGETS:
        a, b = _rate(results, "standard", "none", op, mine), _rate(results, "standard", "none", op, peer)
        if a is None or b is None:
            lines.append(f"- {op} {mine} >= {want}x {peer}: not measured")
            continue
        verdict = "MET" if a / b >= want else "NOT MET"
        lines.append(f"- {op} {mine} >= {want}x {peer}: {a / b:.2f}x -> {verdict}")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    workload.check_peers_compiled()
    env = environment(args)
    results = run_all(args)
    if _codec_mtime() != env["kwire_codec_mtime"]:
        # A rebuild replaces the file (new inode): this process kept the build it loaded.
        print("note: kwire's compiled codec was rebuilt on disk during the run; the numbers are "
              "for the build loaded at start", file=sys.stderr)
    print(markdown(results, env))
    if args.json:
        history.write_results(args.json, "compare_codecs", env, results, ratios(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
