"""What a ``send_nowait`` refused for room costs (kwire.aio, no broker): an
AsyncProducer whose topic's partitions are set straight into its
Accumulator, its ``buffer_memory`` (8 KB) filled with no loop turn (so
nothing is sent or acknowledged), then ``N`` more ``send_nowait`` calls of
a 500-byte record under 64 keys, each raising ``WouldBlockError``. For
instruction counts, run it twice under callgrind, with ``--refusals 0`` and
with N, and divide the difference by N:

    valgrind --tool=callgrind python -m benchmarks.aio_refusal --refusals 0
    valgrind --tool=callgrind python -m benchmarks.aio_refusal --refusals 20000

Without valgrind it prints the wall time per refusal. (A queued record
costs about 1,300 instructions: ``benchmarks/profile_send.py``.)
"""

from __future__ import annotations

import argparse
import asyncio
import time


async def refuse(n: int) -> float:
    """Seconds per refused ``send_nowait``, over ``n`` of them."""
    from kwire.aio import AsyncProducer, WouldBlockError

    p = AsyncProducer(bootstrap_servers="127.0.0.1:9", linger_ms=60000, batch_size=4000, buffer_memory=8000)
    p._p._acc.set_partitions("t", p._p._client.cluster.generation.value, [0, 1, 2, 3])
    send, value, ts = p.send_nowait, bytes(500), 1_700_000_000_000
    queued = 0
    while True:
        try:
            send("t", value, key=b"k%d" % queued, timestamp_ms=ts)
            queued += 1
        except WouldBlockError:
            break
    keys = [b"k%d" % (i % 64) for i in range(n)]
    t0 = time.perf_counter()
    for key in keys:
        try:
            send("t", value, key=key, timestamp_ms=ts)
        except WouldBlockError:
            pass
    took = time.perf_counter() - t0
    await p.close(0)         # the queued records fail: there is no broker
    return took / max(n, 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--refusals", type=int, default=200_000)
    args = ap.parse_args(argv)
    per = asyncio.run(refuse(args.refusals))
    if args.refusals:
        print(f"{per * 1e6:.2f} us per refused send_nowait")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
