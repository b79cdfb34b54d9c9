"""Defect 5 of issue 13: the decompression cap must bound memory, not only
raise. Every bomb raises :class:`kwire.DecompressionBombError`; the partial
output is freed before the error leaves kwire.compression, a held error
(traceback included) keeps no decompressed buffer alive, and raised errors
form no reference cycles. End to end: a consumer polling a broker that
serves gzip, snappy, lz4 and zstd bombs stays within a few times
``max_decompressed_bytes`` of memory."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

import kwire
from kwire import DecompressionBombError
from kwire import compression as comp
from support.hostile_broker import _compress_stream, bomb_batch, records_batch

from ._scenario import offsets, poll_for

MiB = 1 << 20
CODECS = ["gzip", "snappy", "lz4", "zstd"]
IDS = {"gzip": comp.GZIP, "snappy": comp.SNAPPY, "lz4": comp.LZ4, "zstd": comp.ZSTD}


@pytest.fixture
def no_gc():
    """The cyclic GC off: what a reference cycle holds stays held."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _traced() -> int:
    return tracemalloc.get_traced_memory()[0]


@pytest.mark.parametrize("codec", CODECS)
def test_held_bomb_error_keeps_no_partial_output(codec, no_gc):
    """compression.decompress: a 64 MiB bomb against an 8 MiB cap. While the
    caught error (with its traceback) is held, less than 1 MiB stays
    allocated; the decompression's peak stays near the cap; dropping the
    error leaves no cyclic garbage."""
    limit = 8 * MiB
    payload = _compress_stream(codec, [64 * MiB])
    gc.collect()
    tracemalloc.start()
    try:
        before = _traced()
        tracemalloc.reset_peak()
        held = None
        try:
            comp.decompress(IDS[codec], payload, limit)
        except DecompressionBombError as e:
            held = e
        assert held is not None, f"{codec}: no DecompressionBombError"
        peak = tracemalloc.get_traced_memory()[1] - before
        kept = _traced() - before
        assert kept < MiB, f"{codec}: the held error keeps {kept / MiB:.1f} MiB alive"
        assert peak <= 2 * limit + MiB, f"{codec}: decompression peaked at {peak / MiB:.1f} MiB"
        del held
        assert gc.collect() == 0, f"{codec}: the dropped error left cyclic garbage"
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("codec", CODECS)
def test_held_decoder_bomb_error_is_located_and_small(codec, no_gc):
    """The same through the compiled decoder: the error names topic,
    partition and the batch's offset, holds no buffer, makes no cycle."""
    limit = 4 * MiB
    data = records_batch([b"a", b"b"], compression=codec) + bomb_batch(codec, 32 * MiB, base_offset=2)
    gc.collect()
    tracemalloc.start()
    try:
        before = _traced()
        held = None
        try:
            kwire.decode(data, topic="bombs", partition=3, max_decompressed_bytes=limit)
        except DecompressionBombError as e:
            held = e
        assert held is not None
        assert (held.topic, held.partition, held.offset) == ("bombs", 3, 2)
        kept = _traced() - before
        assert kept < MiB, f"{codec}: the held error keeps {kept / MiB:.1f} MiB alive"
        del held
        assert gc.collect() == 0, f"{codec}: the dropped error left cyclic garbage"
    finally:
        tracemalloc.stop()


def test_bombs_within_the_cap_still_decode():
    """The cap is a bound, not a refusal: 6 MiB of output under an 8 MiB cap
    decodes for every codec."""
    for codec in CODECS:
        assert len(comp.decompress(IDS[codec], _compress_stream(codec, [6 * MiB]), 8 * MiB)) == 6 * MiB


def _rss_mib() -> float:
    """Resident MiB held by live allocations: glibc keeps freed heap memory
    for reuse unless asked to give it back, which is not a leak."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def held_bombs(params):
    """One decoder, a bomb of each codec against a 64 MiB cap, every error
    held: the resident memory after, against before."""
    from support.hostile_broker import bomb_batch as bomb

    decoder = kwire.Decoder(max_decompressed_bytes=params["cap"])
    bombs = [bomb(codec, params["size"]) for codec in CODECS]
    before = _rss_mib()
    held = []
    for data in bombs:
        try:
            decoder.decode(data, topic="bombs", partition=0)
        except DecompressionBombError as e:
            held.append(e)
    return {"errors": len(held), "retained_mib": _rss_mib() - before}


def test_decoder_keeps_no_partial_output_after_bombs(run_scenario):
    """A decoder that met a bomb of each codec, the errors still held,
    keeps less than 8 MiB more resident than before (the compiled lz4 path
    frees the buffer it grew to the cap; the Python codecs' partial output
    goes with the frames)."""
    run = run_scenario(held_bombs, {"cap": 64 * MiB, "size": 256 * MiB}, timeout=60)
    res = run.check().result
    run.figure = {"retained_mib": round(res["retained_mib"], 1)}
    assert res["errors"] == len(CODECS)
    assert res["retained_mib"] < 8, f"{res['retained_mib']:.0f} MiB still resident after the bombs"


# ------------------------------------------------------------ end to end
BOMB_CAP = 16 * MiB          # the consumer's max_decompressed_bytes in this test
BOMB_SIZE = 4 * BOMB_CAP     # what each bomb expands to
RSS_BOUND_MIB = 8 * BOMB_CAP // MiB   # peak RSS growth allowed: a few partial outputs at most


def consume_bombs(params):
    from kwire.consumer import Consumer

    c = Consumer(bootstrap_servers=params["bootstrap"], auto_offset_reset="earliest",
                 max_decompressed_bytes=params["cap"])
    try:
        c.assign([("bombs", p) for p in range(4)])
        return poll_for(c, params["seconds"], timeout_ms=100)
    finally:
        c.close()


def test_consumer_polling_bombs_stays_bounded(broker, run_scenario):
    """Four partitions, one codec each: three good records, then a batch
    that expands to 64 MiB against a 16 MiB cap. Polling for 2 s returns
    the good records once each, raises DecompressionBombError located at
    each bomb (offset 3), keeps the peak RSS growth under 128 MiB and logs
    almost nothing."""
    b = broker({"bombs": 4})
    for p, codec in enumerate(CODECS):
        b.log("bombs", p).append(records_batch([b"ok0", b"ok1", b"ok2"], compression=codec))
        b.log("bombs", p).append(bomb_batch(codec, BOMB_SIZE))
    run = run_scenario(consume_bombs, {"bootstrap": b.bootstrap, "cap": BOMB_CAP, "seconds": 2.0}, timeout=40)
    res = run.check().result
    located = {(e["partition"], e["offset"]) for e in res["errors"] if "DecompressionBombError" in e["types"]}
    run.figure = {"errors": len(res["errors"]), "records": res["counts"], "fetches": len(b.received("Fetch"))}
    assert [offsets(res, p) for p in range(4)] == [[0, 1, 2]] * 4, "good records lost, skipped or repeated"
    assert all(e["topic"] == "bombs" and "DecompressionBombError" in e["types"] for e in res["errors"]), \
        res["errors"][:3]
    assert located == {(p, 3) for p in range(4)}, f"bomb errors located at {sorted(located)}"
    assert run.rss_growth_mib < RSS_BOUND_MIB, run.describe()
    assert res["logs"] <= 5, run.describe()
    assert res["slowest_poll"] < 2.0, run.describe()
    assert not b.errors
