"""Instruction counts per record of kwire's hot paths: the benchmark gate.

Wall-clock timings on shared CI runners move by 15-30% run to run; the
number of instructions a path executes does not. Each path below runs in
its own ``valgrind --tool=callgrind`` process, started with
``PYTHONHASHSEED=0`` and fixed-seed inputs, so the same binary and input give
the same count every time.

What is counted: the process builds the path's inputs, then calls
``os.getppid()`` (a marker), does the work, and calls the marker again.
Callgrind runs with ``--dump-before=getppid``, so it writes one profile per
stretch between markers; the second one is the work alone (plus one Python
call to the marker, a few thousand instructions, the same in every build).
That is the difference between a run that does the work and one that only
builds its inputs (the method of ``benchmarks/profile_send.py``), taken in one
process instead of two. The count is divided by the path's record count.

Usage:

    python -m benchmarks.icount list
    python -m benchmarks.icount measure [--path P ...] [--jobs 2]   # the kwire on PYTHONPATH
    python -m benchmarks.icount run P            # one workload, no valgrind (a smoke run)

``scripts/bench`` builds two revisions and compares them with
:func:`compare` (and ``benchmarks/memstat.py``'s companions, beside which
``memstat.format_table`` shows the counts); the comparison needs no valgrind.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

DEFAULT_THRESHOLD = 3.0          # percent
SEED = 14
BASE_TIMESTAMP = 1_700_000_000_000
BATCH = 500                      # records per batch in every decode workload
MARKER = "getppid"               # the C function whose entry dumps a profile


# ------------------------------------------------------------ the workloads
# A record: (timestamp, key or None, value, headers list).
def standard_records(n: int) -> List[tuple]:
    """benchmarks/workload.py's shape: 16-byte key, 100-byte JSON-like value,
    one header (built here with a fixed seed, without its peer check)."""
    rng = random.Random(SEED)
    hdr = [("content-type", b"application/json")]
    out = []
    for i in range(n):
        r = rng.getrandbits(32)
        value = (b'{"id": %d, "user": "user_%05d", "amount": %d, "note": "' % (i, r % 100000, r % 1000))
        value = value.ljust(98, b"x") + b'"}'
        out.append((BASE_TIMESTAMP + i, b"k-%014d" % i, value, hdr))
    return out


def encode(recs: Sequence[tuple], codec: Optional[str]) -> List[bytes]:
    """The records as v2 batches of ``BATCH`` records each."""
    from kwire import RecordBatchBuilder

    out = []
    for start in range(0, len(recs), BATCH):
        b = RecordBatchBuilder(codec, base_offset=start)
        for ts, key, value, headers in recs[start:start + BATCH]:
            b.append(value, key, headers, ts)
        out.append(b.build())
    return out


def _touch(records) -> None:
    for r in records:
        (r.offset, r.timestamp, r.key, r.value, r.headers)


def _decode_records(buf: bytes) -> Callable[[], None]:
    import kwire
    dec = kwire.Decoder(check_crcs=True)

    def work():
        _touch(dec.decode(buf).records)
    return work


def _decode_arrow(*bufs: bytes) -> Callable[[], None]:
    """One decoder's calls on each of ``bufs`` in turn."""
    import kwire
    import kwire._arrow  # noqa: F401  (and pyarrow: imported before the marker, once per process, not per record)
    dec = kwire.ColumnarDecoder(check_crcs=True)

    def work():
        for buf in bufs:
            assert dec.decode(buf).record_batch.num_rows > 0
    return work


def _setup_alternating(n: int) -> Callable[[], None]:
    """The mixed records, uncompressed, decoded to Arrow as a consumer whose
    calls alternate in size: the whole buffer in one call, then again in
    calls of at most 1 MB (``n`` records decoded in all, each twice). What
    the columns' memory costs when a decoder's results change size is what
    the gate's companions see here."""
    from benchmarks import workload
    buf = b"".join(encode(workload.mixed_records(n // 2), None))
    return _decode_arrow(buf, *workload.fetches(buf, 1 << 20))


def _setup_decode(kind: str, shape: str, codec: Optional[str], n: int) -> Callable[[], None]:
    from benchmarks import workload
    recs = (standard_records if shape == "standard" else workload.mixed_records)(n)
    buf = b"".join(encode(recs, codec))
    return (_decode_records if kind == "records" else _decode_arrow)(buf)


def _setup_encode(codec: Optional[str], n: int) -> Callable[[], None]:
    from benchmarks import workload
    from kwire import RecordBatchBuilder
    recs = workload.mixed_records(n)
    chunks = [recs[s:s + BATCH] for s in range(0, n, BATCH)]

    def work():
        for i, chunk in enumerate(chunks):
            b = RecordBatchBuilder(codec, base_offset=i * BATCH)
            for ts, key, value, headers in chunk:
                b.append(value, key, headers, ts)
            b.build()
    return work


def send_workload(n: int) -> Callable[[], None]:
    """The compiled send path alone (also benchmarks/profile_send.py's): ``n``
    keyed records sent as ``producer.send(...)`` into four open batches of
    an Accumulator, sealed at 256 KiB, with no broker and no sender
    thread; returns the function that sends them."""
    from kwire._codec import Accumulator, Generation, ProducerBatch, RecordBatchBuilder, SendLock
    # Timestamps given: a record stamped from the clock would make the
    # count depend on how fast the run goes (the varint of each record's
    # timestamp delta grows with the time since its batch's first record,
    # and under valgrind on a busy machine that moves the count by 1%).
    records = [(b"%016d" % i, (b"%d-" % i).ljust(100, b"v"), BASE_TIMESTAMP + i) for i in range(n)]

    sealed_count = {}

    def new_batch(topic, partition):
        fresh = ProducerBatch(topic, partition, RecordBatchBuilder(None))
        fresh.reserve(sealed_count.get((topic, partition), 0))
        return fresh

    def sealed(tp, batch):
        sealed_count[tp] = batch.record_count

    try:
        acc = Accumulator(lock=SendLock(), generation=Generation(), check=None, wait_partitions=None,
                          wait_room=None, new_batch=new_batch, sealed=sealed, batch_size=262144)
    except TypeError:      # before the Accumulator owned sealing (44d0d82 and older)
        def full(tp, batch):
            sealed(tp, acc.take(tp))
            acc.put(tp, new_batch(*tp))

        acc = Accumulator(lock=SendLock(), generation=Generation(), slow=None, on_full=full, batch_size=262144)
    acc.set_partitions("t", 0, [0, 1, 2, 3])
    for p in range(4):
        acc.put(("t", p), ProducerBatch("t", p, RecordBatchBuilder(None)))

    producer = _producer_shell(acc)

    def work():
        for key, value, ts in records:
            producer.send("t", value, key=key, timestamp_ms=ts)
    return work


def _producer_shell(acc):
    """An object whose ``send`` is reached as ``kwire.Producer.send`` is
    (the method lookup is part of the path): the compiled base class's
    method, or (44d0d82 and older) the Accumulator's send set on the
    instance."""
    try:
        from kwire._codec import SendingProducer
    except ImportError:
        shell = type("Producer", (), {})()
        shell.send = acc.send
        return shell

    class Producer(SendingProducer):
        pass

    shell = Producer()
    shell._acc = acc
    return shell


FETCH_VERSION = 12
FETCH_PARTITIONS = 8


def fetch_frame(n: int) -> bytes:
    """A Fetch v12 response frame (correlation id, header, body; no size
    prefix) of one topic whose ``FETCH_PARTITIONS`` partitions carry the
    mixed workload's records, ``n`` in all."""
    from benchmarks import workload
    from kwire.protocol import messages as m
    recs = workload.mixed_records(n)
    per = n // FETCH_PARTITIONS
    cls = m.FetchResponse
    parts = [cls.PartitionData(partition_index=p, high_watermark=n, last_stable_offset=n, log_start_offset=0,
                               records=b"".join(encode(recs[p * per:(p + 1) * per], None)))
             for p in range(FETCH_PARTITIONS)]
    body = cls.encode_bytes(cls(responses=[cls.FetchableTopicResponse(topic="events", partitions=parts)]),
                            FETCH_VERSION)
    return (7).to_bytes(4, "big") + b"\0" + body          # correlation id, no header tags


def _setup_fetch(n: int) -> Callable[[], None]:
    # What the consumer does with a Fetch response: decode the frame, then
    # each partition's record data to records.
    import kwire
    from kwire.protocol import decode_response, messages as m
    frame = fetch_frame(n)
    dec = kwire.Decoder(check_crcs=True)

    def work():
        _, resp = decode_response(frame, m.FetchResponse, FETCH_VERSION)
        for topic in resp.responses:
            for p in topic.partitions:
                _touch(dec.decode(p.records, topic=topic.topic, partition=p.partition_index).records)
    return work


def _setup_fetch_metered(n: int) -> Callable[[], None]:
    # fetch-response with the consumer's metrics on (kwire.metrics): per decode call, the decoder's
    # counters read before and after and added to the partition's and topic's figures, as
    # Fetcher._step does. Its count against fetch-response's is what metrics cost per record.
    import kwire
    from kwire.protocol import decode_response, messages as m
    try:
        from kwire.metrics.clients import FetchMetrics, counters
    except ImportError:          # a revision before kwire.metrics: the same work unmetered
        return _setup_fetch(n)
    frame = fetch_frame(n)
    dec = kwire.Decoder(check_crcs=True)
    fm = FetchMetrics()

    def work():
        _, resp = decode_response(frame, m.FetchResponse, FETCH_VERSION)
        for topic in resp.responses:
            for p in topic.partitions:
                tp = (topic.topic, p.partition_index)
                before = counters(dec)
                _touch(dec.decode(p.records, topic=topic.topic, partition=p.partition_index).records)
                fm.decoded(tp, dec, before)
    return work


def _setup_avro(direction: str, n: int) -> Callable[[], None]:
    # The event12 shape (benchmarks/avro_workload.py), in columns of 10,000
    # values as poll_columnar hands them over: decoded into Arrow, or Arrow
    # encoded back. The values are written with kwire's own encoder.
    import pyarrow as pa

    from benchmarks import avro_workload
    from kwire.formats.avro import AvroFormat

    schema = avro_workload.SHAPES["event12"][0]
    fmt = AvroFormat(schema)
    table = pa.Table.from_pylist(avro_workload.rows("event12", n), schema=pa.schema(list(fmt.arrow_type())))
    structs = [pa.StructArray.from_arrays(b.columns, fields=list(b.schema)) for b in table.to_batches(10_000)]
    values = [fmt.encode(s, topic="t") for s in structs]
    offsets = [pa.array(range(len(v)), pa.int64()) for v in values]
    fmt.decode(values[0], topic="t", partition=0, offsets=offsets[0])        # compiled once, outside the count

    def decode():
        for v, o in zip(values, offsets):
            fmt.decode(v, topic="t", partition=0, offsets=o)

    def encode():
        for s in structs:
            fmt.encode(s, topic="t")
    return decode if direction == "decode" else encode


@dataclass(frozen=True)
class Path:
    name: str
    records: int
    setup: Callable[[int], Callable[[], None]]   # records -> the work


def _paths() -> Dict[str, Path]:
    out = {}
    for kind in ("records", "arrow"):
        for codec in ("none", "lz4"):
            for shape in ("standard", "mixed"):
                name = f"decode-{kind}/{codec}/{shape}"
                c = None if codec == "none" else codec
                out[name] = Path(name, 20_000, lambda n, k=kind, s=shape, c=c: _setup_decode(k, s, c, n))
    out["decode-arrow/none/alternating"] = Path("decode-arrow/none/alternating", 40_000, _setup_alternating)
    out["encode/none/mixed"] = Path("encode/none/mixed", 20_000, lambda n: _setup_encode(None, n))
    out["encode/lz4/mixed"] = Path("encode/lz4/mixed", 20_000, lambda n: _setup_encode("lz4", n))
    out["send"] = Path("send", 50_000, send_workload)
    out["fetch-response"] = Path("fetch-response", 16_000, _setup_fetch)
    out["fetch-response-metered"] = Path("fetch-response-metered", 16_000, _setup_fetch_metered)
    out["decode-avro/event12"] = Path("decode-avro/event12", 20_000, lambda n: _setup_avro("decode", n))
    out["encode-avro/event12"] = Path("encode-avro/event12", 20_000, lambda n: _setup_avro("encode", n))
    return out


PATHS = _paths()


def run_workload(name: str) -> None:
    """The child: inputs, marker, the work, marker."""
    path = PATHS[name]
    work = path.setup(path.records)
    os.getppid()
    work()
    os.getppid()


# ------------------------------------------------------------- measurement
HERE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def harness_id(root: Optional[str] = None) -> str:
    """A fingerprint of the workload code (this module and workload.py under
    ``root``): a count depends a little on the harness too (what it puts on
    the heap before the work), so the history marks where it changed."""
    import hashlib
    h = hashlib.sha256()
    for name in ("icount.py", "workload.py", "avro_workload.py"):
        with open(os.path.join(root or HERE_ROOT, "benchmarks", name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:12]


def callgrind_env(pythonpath: Optional[str], harness: Optional[str] = None) -> Dict[str, str]:
    """The child's environment: kwire from ``pythonpath``, this module from
    ``harness`` (a directory holding ``benchmarks/``; default: this checkout).
    Nothing else of the caller's: the strings a process starts with (its
    environment, its paths) shift its allocations and hashes, and so a few
    instructions of the work; scripts/bench keeps the paths the same too."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8",
           "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, harness or HERE_ROOT) if p)
    return env


def _totals(path: str) -> int:
    with open(path) as f:
        for line in f:
            if line.startswith("totals:") or line.startswith("summary:"):
                return int(line.split()[1])
    raise RuntimeError(f"{path}: no totals line")


def measure_one(name: str, pythonpath: Optional[str] = None, harness: Optional[str] = None,
                python: str = sys.executable, valgrind: str = "valgrind") -> float:
    """Instructions per record of one path, for the kwire ``pythonpath``
    resolves to (checked: the child refuses a kwire from elsewhere)."""
    path = PATHS[name]
    with tempfile.TemporaryDirectory(prefix="kwire-icount-") as tmp:
        out = os.path.join(tmp, "cg.out")
        cmd = [valgrind, "--tool=callgrind", f"--callgrind-out-file={out}", f"--dump-before={MARKER}",
               "--dump-line=no", "--compress-strings=no", python, "-m", "benchmarks.icount", "run", name]
        if pythonpath:
            cmd += ["--expect", pythonpath]
        proc = subprocess.run(cmd, env=callgrind_env(pythonpath, harness), cwd=harness or HERE_ROOT,
                              stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{name}: callgrind run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        # dumps: .1 = start-up and inputs (up to the first marker), .2 = the work
        work = os.path.join(tmp, "cg.out.2")
        if not os.path.exists(work) or os.path.exists(os.path.join(tmp, "cg.out.3")):
            raise RuntimeError(f"{name}: expected exactly two marker dumps, got {sorted(os.listdir(tmp))}")
        return _totals(work) / path.records


def measure(names: Sequence[str], pythonpath: Optional[str] = None, jobs: int = 2,
            label: str = "", log=None, harness: Optional[str] = None,
            tolerate: bool = False) -> Dict[str, float]:
    """Every path of ``names``, ``jobs`` callgrind processes at a time. The
    workloads come from ``harness`` (see :func:`callgrind_env`): scripts/bench
    passes a snapshot, so both builds run the same workload code even if the
    checkout changes during the run. ``tolerate``: a path that fails (an old
    revision without an API the workload uses) is logged and left out
    instead of raising."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))

    def one(name):
        t = time.monotonic()
        try:
            v = measure_one(name, pythonpath, harness)
        except RuntimeError as e:
            if not tolerate:
                raise
            lines = [ln for ln in str(e).strip().splitlines() if ln.strip() and not ln.startswith("==")]
            last = lines[-1] if lines else str(e)
            log(f"  {label}{name}: not measured ({last[:200]})")
            return name, None
        log(f"  {label}{name}: {v:,.1f} instructions/record ({time.monotonic() - t:.1f} s)")
        return name, v

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        return {name: v for name, v in ex.map(one, names) if v is not None}


# -------------------------------------------------------------- comparison
@dataclass(frozen=True)
class Row:
    path: str
    base: Optional[float]
    head: Optional[float]
    change: Optional[float]      # percent, head against base
    verdict: str                 # "ok", "FAIL", "better", "new", "gone"


def compare(base: Dict[str, float], head: Dict[str, float],
            threshold: float = DEFAULT_THRESHOLD) -> Tuple[List[Row], bool]:
    """Rows in path order (head's, then any only in base) and whether the gate
    fails: a path fails when it costs more than ``threshold`` percent more
    instructions per record than in base. A path only in head is new (no
    verdict); one only in base is gone; neither fails the gate."""
    rows, failed = [], False
    for name in list(head) + [n for n in base if n not in head]:
        b, h = base.get(name), head.get(name)
        if b is None:
            rows.append(Row(name, None, h, None, "new"))
            continue
        if h is None:
            rows.append(Row(name, b, None, None, "gone"))
            continue
        change = (h - b) / b * 100.0 if b else (0.0 if h == b else float("inf"))
        if change > threshold:
            verdict, failed = "FAIL", True
        elif change < -threshold:
            verdict = "better"
        else:
            verdict = "ok"
        rows.append(Row(name, b, h, change, verdict))
    return rows, failed


# --------------------------------------------------------------------- CLI
def compiled_core_files():
    """(module, file) of kwire._codec and of each extension of the compiled
    core: kwire._codec alone before the core was split into kwire._core."""
    import importlib
    import pkgutil

    import kwire._codec
    out = [("kwire._codec", kwire._codec.__file__)]
    try:
        import kwire._core
    except ImportError:                  # the single-extension layout
        return out
    for m in pkgutil.iter_modules(kwire._core.__path__):
        mod = importlib.import_module(f"kwire._core.{m.name}")
        out.append((mod.__name__, mod.__file__))
    return out


def check_origin(expect: str) -> None:
    """Exit unless every module of the compiled core comes from under
    ``expect`` (a child measures the build it was given, never another)."""
    for name, where in compiled_core_files():
        if not os.path.realpath(where).startswith(os.path.realpath(expect) + os.sep):
            raise SystemExit(f"{name} is {where}, not under {expect}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="the paths and their record counts")
    r = sub.add_parser("run", help="one workload (the callgrind child)")
    r.add_argument("path", choices=sorted(PATHS))
    r.add_argument("--expect", help="refuse to run unless kwire comes from this directory")
    m = sub.add_parser("measure", help="instructions/record of the kwire on PYTHONPATH, as JSON")
    m.add_argument("--path", action="append", choices=sorted(PATHS))
    m.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    if args.cmd == "list":
        for p in PATHS.values():
            print(f"{p.name}\t{p.records}")
    elif args.cmd == "run":
        if args.expect:
            check_origin(args.expect)
        run_workload(args.path)
    else:
        import kwire._codec
        print(f"kwire._codec: {kwire._codec.__file__}", file=sys.stderr)
        pp = os.path.dirname(os.path.dirname(os.path.abspath(kwire._codec.__file__)))
        res = measure(args.path or list(PATHS), pp, args.jobs)
        print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
