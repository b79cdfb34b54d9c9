"""Protocol layer: kwire's generated messages against kafka-python's
protocol classes on the same input, in one run.

* decode of a Fetch response with many partitions (1 MiB of records in all;
  the record bytes themselves are not decoded here, only the frame);
* encode of a Produce request of the same shape (already encoded batches).

The clients take turns each round; each one's best round counts.

    python -m benchmarks.compare_protocol [--partitions 100] [--repeat 7] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import warnings
from typing import Callable, Dict, List, Tuple

import kwire
from benchmarks import history
from kwire.protocol import messages as m

FETCH_V, PRODUCE_V = 12, 9      # flexible versions both libraries speak


def batches(partitions: int, total_bytes: int) -> List[bytes]:
    per = max(1, total_bytes // partitions)
    out = []
    for p in range(partitions):
        b = kwire.RecordBatchBuilder()
        while b.size_in_bytes < per:
            b.append(b"v" * 100, key=b"k" * 16)
        out.append(b.build())
    return out


def kwire_fetch_response(recs: List[bytes]) -> bytes:
    r = m.FetchResponse
    resp = r(responses=[r.FetchableTopicResponse(topic=f"topic-{t}", partitions=[
        r.PartitionData(partition_index=p, high_watermark=1000, last_stable_offset=1000, log_start_offset=0,
                        records=recs[t * 10 + p]) for p in range(10)]) for t in range(len(recs) // 10)])
    return r.encode_bytes(resp, FETCH_V)


def kwire_produce_request(recs: List[bytes]):
    r = m.ProduceRequest
    return r(acks=-1, timeout_ms=30000, topic_data=[r.TopicProduceData(name=f"topic-{t}", partition_data=[
        r.PartitionProduceData(index=p, records=recs[t * 10 + p]) for p in range(10)]) for t in range(len(recs) // 10)])


def setup(partitions: int) -> Dict[str, Tuple[Callable[[], object], Callable[[], object]]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.protocol.consumer import FetchResponse as KFetchResponse
        from kafka.protocol.producer import ProduceRequest as KProduceRequest
    recs = batches(partitions, 1 << 20)
    wire = kwire_fetch_response(recs)
    produce = kwire_produce_request(recs)
    produce_wire = m.ProduceRequest.encode_bytes(produce, PRODUCE_V)
    kp_produce = KProduceRequest.decode(produce_wire, version=PRODUCE_V)
    assert bytes(kp_produce.encode()) == produce_wire
    assert bytes(KFetchResponse.decode(wire, version=FETCH_V).encode()) == wire

    def kw_decode():
        return m.FetchResponse.decode(wire, FETCH_V)

    def kp_decode():
        return KFetchResponse.decode(wire, version=FETCH_V)

    def kw_encode():
        return m.ProduceRequest.encode(produce, PRODUCE_V)       # chunks: batches not copied

    def kp_encode():
        return kp_produce.encode()

    return {"decode Fetch response": (kw_decode, kp_decode), "encode Produce request": (kw_encode, kp_encode)}


def measure(fn: Callable[[], object], inner: int) -> float:
    gc.collect()
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) / inner


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--partitions", type=int, default=100, help="partitions in the response (a multiple of 10)")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--inner", type=int, default=20, help="calls per timed round")
    p.add_argument("--quick", action="store_true", help="one short round (a smoke run)")
    p.add_argument("--json", metavar="PATH", help="also write the results and ratios as JSON (benchmarks/history.py)")
    args = p.parse_args(argv)
    if args.quick:
        args.repeat, args.inner = 1, 2
    ops = setup(args.partitions)
    rows = []
    for i, (op, (kw, kp)) in enumerate(ops.items(), 1):
        best = {"kwire": float("inf"), "kafka-python": float("inf")}
        for _ in range(args.repeat):
            best["kwire"] = min(best["kwire"], measure(kw, args.inner))
            best["kafka-python"] = min(best["kafka-python"], measure(kp, args.inner))
        print(f"[{i}/{len(ops)}] {op}: kwire {best['kwire'] * 1e6:.0f} us, kafka-python "
              f"{best['kafka-python'] * 1e6:.0f} us", file=sys.stderr, flush=True)
        rows.append((op, best["kwire"], best["kafka-python"]))
    print(f"{args.partitions} partitions, 1 MiB of record batches; best of {args.repeat} rounds of {args.inner} calls\n")
    print("| operation | kwire us | kafka-python us | kwire speed-up |")
    print("|---|---:|---:|---:|")
    for op, a, b in rows:
        print(f"| {op} | {a * 1e6:.0f} | {b * 1e6:.0f} | {b / a:.1f}x |")
    if args.json:
        env = dict(partitions=args.partitions, repeat=args.repeat, inner=args.inner)
        results = [{"op": op, "kwire_s": a, "kafka-python_s": b} for op, a, b in rows]
        history.write_results(args.json, "compare_protocol", env, results,
                              {f"{op} vs kafka-python": b / a for op, a, b in rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
