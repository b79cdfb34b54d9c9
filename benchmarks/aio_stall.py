"""How long kwire.aio keeps the event loop from running anything else: the
loop's longest stalls while an AsyncProducer produces N records (default
1,000,000) and while an AsyncConsumer consumes them, on the local Tansu
broker.

A ticker task sleeps ``--tick`` ms (default 1) in a loop and records how
late each wake-up is (its lateness: the time past the sleep's end at which
the loop ran it again). Whatever runs on the loop between two ticks (kwire's
callbacks and steps, decoding, batching, the benchmark's own loop) shows up
as lateness. Per phase: the longest wake-up delay, its 99th and 99.9th
percentiles, how many exceeded 1 ms and 5 ms, the phase's records/s; and
the longest stall the loop's thread spent on the CPU ("busy": the thread's
CPU time over the sleep, at most its lateness) and how many such exceeded
5 ms. On a shared machine a wake-up can be late because another process had
the CPU; the busy figures count only what the loop itself held it for.

Phases, per codec: ``produce`` (the same records and options as
``compare_clients``' kwire-aio row, ``send_nowait`` with ``await
enqueue`` when it would block, but giving the loop a turn every
``--chunk`` records, as a program that shares its loop must, then ``await
flush()``), ``getmany`` (``await getmany`` until every record the produce
phase wrote is read, touching each value) and ``poll_columnar``. A call
that finds records buffered returns them without giving the loop a turn,
so a program that polls in a loop holds the loop while the buffer lasts;
``--turn`` gives the loop a turn after each call, to tell that apart from
what kwire's own callbacks hold it for. First an
``idle`` phase (the ticker alone, 1 s): the loop's own timer noise, the
floor under every other row (uvloop's timers have a 1 ms resolution).

    python -m benchmarks.aio_stall [--records 1000000] [--codecs none,lz4] [--loop asyncio|uvloop]
                                   [--chunk 200] [--max-poll-records 500] [--turn] [--tick 1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
import warnings
from typing import Any, Awaitable, Callable, Dict, List, Tuple

from benchmarks.compare_clients import LOOPS, PARTITIONS, _records, aio_consume, aio_produce, run_loop

MS = 1000.0


class _Ticker:
    """Sleeps ``period`` s in a loop; ``lates`` holds how late each wake-up
    was, ``busy`` how much of that lateness the loop's thread spent on the
    CPU (its thread time over the sleep, less the sleep's length, at most the
    lateness): a wake-up late while the thread did not run was the machine's
    doing (another process had the CPU), not the loop's."""

    def __init__(self, period: float) -> None:
        self.period = period
        self.lates: List[float] = []
        self.busy: List[float] = []
        self.due = float("inf")        # when the sleep under way should end
        self.cpu0 = 0.0                # the thread's CPU time when it began

    def _woke(self, lates: List[float], busy: List[float]) -> None:
        late = time.perf_counter() - self.due
        lates.append(late)
        busy.append(max(0.0, min(late, time.thread_time() - self.cpu0 - self.period)))

    async def run(self) -> None:
        while True:
            self.due = time.perf_counter() + self.period
            self.cpu0 = time.thread_time()
            await asyncio.sleep(self.period)
            self._woke(self.lates, self.busy)

    def stop(self) -> Tuple[List[float], List[float]]:
        """The lateness and busy figures so far, the wake-up under way
        included when it is overdue already (a stall at the very end would be
        lost otherwise)."""
        lates, busy = list(self.lates), list(self.busy)
        if time.perf_counter() > self.due:
            self._woke(lates, busy)
        return lates, busy


def _stats(lates: List[float], busy: List[float] = ()) -> Dict[str, float]:
    s = sorted(lates) or [0.0]

    def pct(q: float) -> float:
        return s[min(len(s) - 1, int(q * len(s)))]

    return {"ticks": len(lates), "max_ms": s[-1] * MS, "p99_ms": pct(0.99) * MS, "p999_ms": pct(0.999) * MS,
            "over_1ms": sum(x > 0.001 for x in s), "over_5ms": sum(x > 0.005 for x in s),
            "busy_max_ms": max(busy, default=0.0) * MS, "busy_over_5ms": sum(x > 0.005 for x in busy)}


def _rate(name: str, n: int, wall: float) -> str:
    return "-" if name == "idle" else f"{n / wall:,.0f}"


def measure(work: Callable[[], Awaitable[Any]], period: float, loop: str) -> Tuple[Dict[str, float], float, Any]:
    """Run ``work()`` on a new event loop with the ticker beside it: the
    ticker's figures, the wall seconds of ``work``, what it returned."""

    async def main() -> Tuple[Dict[str, float], float, Any]:
        ticker = _Ticker(period)
        task = asyncio.get_running_loop().create_task(ticker.run())
        await asyncio.sleep(period * 3)           # the ticker's first turns before the clock starts
        ticker.lates.clear()
        ticker.busy.clear()
        t0 = time.perf_counter()
        try:
            out = await work()
        finally:
            wall = time.perf_counter() - t0
            lates, busy = ticker.stop()
            task.cancel()
        return _stats(lates, busy), wall, out

    return run_loop(main, loop)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--codecs", default="none,lz4")
    p.add_argument("--loop", choices=LOOPS, default="asyncio")
    p.add_argument("--chunk", type=int, default=200, help="produce: give the loop a turn every this many records")
    p.add_argument("--max-poll-records", type=int, default=500,
                   help="the consumer's max_poll_records (500: kwire's default)")
    p.add_argument("--turn", action="store_true", help="consume: give the loop a turn after each poll")
    p.add_argument("--tick", type=float, default=1.0, help="the ticker's sleep, ms")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore", DeprecationWarning)
    from kwire.admin import Admin, NewTopic
    from kwire.aio import AsyncConsumer, AsyncProducer
    from kwire.devbroker import start_tansu

    period = args.tick / MS
    n = args.records
    rows: List[Tuple[str, str, Dict[str, float], float]] = []

    def phase(codec: str, name: str, work: Callable[[], Awaitable[Any]], expect: Any = None) -> None:
        print(f"{codec:5} {name:14} ...", end="", file=sys.stderr, flush=True)
        stats, wall, got = measure(work, period, args.loop)
        assert expect is None or got == expect, (name, got, expect)
        rows.append((codec, name, stats, wall))
        print(f" {_rate(name, n, wall):>12} rec/s  max {stats['max_ms']:7.2f} ms  p99.9 {stats['p999_ms']:6.2f} ms", file=sys.stderr, flush=True)

    import kwire._arrow  # noqa: F401 - imported (pyarrow too) before any clock: poll_columnar's first call would
    #                                  otherwise stall the loop for the import

    with start_tansu() as broker:
        boot = broker.bootstrap
        recs = _records(n)
        phase("-", "idle", lambda: asyncio.sleep(1.0))
        for codec in [c.strip() for c in args.codecs.split(",") if c.strip()]:
            topic = f"stall-{codec}-{uuid.uuid4().hex[:6]}"
            with Admin(bootstrap_servers=boot) as a:
                a.create_topics([NewTopic(topic, PARTITIONS)])

            async def produce() -> None:
                async with AsyncProducer(bootstrap_servers=boot, compression_type=codec, linger_ms=5,
                                         batch_size=262144, buffer_memory=256 << 20) as prod:
                    await aio_produce(prod, topic, recs, every=args.chunk)
                    await prod.flush()

            def consume(columnar: bool) -> Callable[[], Awaitable[int]]:
                async def run() -> int:
                    async with AsyncConsumer(bootstrap_servers=boot, auto_offset_reset="earliest",
                                             max_poll_records=args.max_poll_records) as c:
                        c.assign([(topic, part) for part in range(PARTITIONS)])
                        return await aio_consume(c, n, columnar, args.turn)
                return run

            phase(codec, "produce", produce)
            phase(codec, "getmany", consume(False), n)
            phase(codec, "poll_columnar", consume(True), n)
            with Admin(bootstrap_servers=boot) as a:
                a.delete_topics([topic])

    print(f"\n{n:,} records (16-byte key, 100-byte value), {PARTITIONS} partitions, local Tansu, loop {args.loop}, "
          f"ticker {args.tick:g} ms, produce yields every {args.chunk} records, "
          f"max_poll_records {args.max_poll_records}{', a loop turn after each poll' if args.turn else ''}\n")
    print("| codec | phase | records/s | ticks | max ms | p99 ms | p99.9 ms | > 1 ms | > 5 ms | busy max ms "
          "| busy > 5 ms |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for codec, name, s, wall in rows:
        print(f"| {codec} | {name} | {_rate(name, n, wall)} | {s['ticks']:,} | {s['max_ms']:.2f} | {s['p99_ms']:.2f} | "
              f"{s['p999_ms']:.2f} | {s['over_1ms']:,} | {s['over_5ms']:,} | {s['busy_max_ms']:.2f} | "
              f"{s['busy_over_5ms']:,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
