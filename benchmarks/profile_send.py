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

from benchmarks.icount import send_workload


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--no-send", action="store_true", help="only build the records (the baseline)")
    args = ap.parse_args(argv)
    work = send_workload(args.records)
    if args.no_send:
        return 0
    t = time.perf_counter()
    work()
    print(f"{(time.perf_counter() - t) / args.records * 1e6:.3f} us per send")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
