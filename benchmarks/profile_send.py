"""The producer's compiled send path alone (no broker, no sender thread):
``N`` keyed records through :class:`kwire._codec.Accumulator` into four
open batches, sealed at 256 KiB. For instruction counts, run it twice under
callgrind, with and without the sends, and divide the difference by N:

    valgrind --tool=callgrind python -m benchmarks.profile_send --records 100000 --no-send
    valgrind --tool=callgrind python -m benchmarks.profile_send --records 100000

Without valgrind it prints the wall time per send.
"""

from __future__ import annotations

import argparse
import time

from kwire._codec import Accumulator, Generation, ProducerBatch, RecordBatchBuilder, SendLock


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--no-send", action="store_true", help="only build the records (the baseline)")
    args = ap.parse_args(argv)
    records = [(b"%016d" % i, (b"%d-" % i).ljust(100, b"v")) for i in range(args.records)]

    def full(tp, batch):             # as the producer does: a new batch with room for as many records
        acc.take(tp)
        fresh = ProducerBatch(tp[0], tp[1], RecordBatchBuilder(None))
        fresh.reserve(batch.record_count)
        acc.put(tp, fresh)

    acc = Accumulator(lock=SendLock(), generation=Generation(), slow=None, on_full=full, batch_size=262144)
    acc.set_partitions("t", 0, [0, 1, 2, 3])
    for p in range(4):
        acc.put(("t", p), ProducerBatch("t", p, RecordBatchBuilder(None)))
    if args.no_send:
        return 0
    send = acc.send
    t = time.perf_counter()
    for key, value in records:
        send("t", value, key=key)
    print(f"{(time.perf_counter() - t) / args.records * 1e6:.3f} us per send")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
