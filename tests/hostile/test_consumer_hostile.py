"""Issue 13, defects 3, 6 and 11: a consumer fed hostile record data by a
broker. Each test bounds the wall time, the peak RSS and the log volume of a
child interpreter running the real :class:`kwire.consumer.Consumer`, and
checks the records returned: none skipped, none repeated."""

from __future__ import annotations

import pytest

import kwire
from support.hostile_broker import records_batch, set_magic, v2_batch, v2_record

from ._scenario import offsets, poll_for


def consume(params):
    """Assign ``params["partitions"]`` of ``params["topic"]`` from the start
    and poll for ``params["seconds"]`` (or until ``params["want"]`` records)."""
    from kwire.consumer import Consumer

    c = Consumer(bootstrap_servers=params["bootstrap"], auto_offset_reset="earliest", **params.get("options", {}))
    try:
        c.assign([(params["topic"], p) for p in params["partitions"]])
        want = params.get("want")
        return poll_for(c, params["seconds"], timeout_ms=params.get("timeout_ms", 100),
                        columnar=params.get("columnar", False),
                        until=None if want is None else (lambda counts: sum(counts.values()) >= want))
    finally:
        c.close()


# ----------------------------------------------------------------- defect 3
def test_corrupt_batch_header_is_located_and_isolated(broker, run_scenario):
    """Partition 0: five good records, then a batch whose magic byte is 7
    (the CRC does not cover it), then good ones. Partition 1: five batches
    of ten good records, one per fetch (max_partition_fetch_bytes is tiny),
    so most of them arrive while partition 0's error is pending. Polling for
    2 s returns records 0-4 of partition 0 and all of partition 1, each once
    and in order; the polls raise CorruptRecordError located at partition 0,
    offset 5, and nothing else; the consumer neither floods the log nor the
    broker with fetches."""
    b = broker({"t": 2})
    b.log("t", 0).append(records_batch([b"good%d" % i for i in range(5)]))
    b.log("t", 0).append(set_magic(records_batch([b"bad%d" % i for i in range(5)]), 7))
    b.log("t", 0).append(records_batch([b"after%d" % i for i in range(5)]))
    for i in range(5):
        b.log("t", 1).append(records_batch([b"p1-%d" % (10 * i + j) for j in range(10)]))
    run = run_scenario(consume, {"bootstrap": b.bootstrap, "topic": "t", "partitions": [0, 1], "seconds": 2.0,
                                 "options": {"max_partition_fetch_bytes": 1}}, timeout=30)
    res = run.check().result
    fetches = len(b.received("Fetch"))
    run.figure = {"records": res["counts"], "errors": len(res["errors"]), "fetches": fetches}
    assert offsets(res, 0) == [0, 1, 2, 3, 4], "the good records before the corrupt batch"
    assert offsets(res, 1) == list(range(50)), "the healthy partition must keep flowing"
    assert res["errors"], "no poll raised the corrupt batch"
    assert {(e["topic"], e["partition"], e["offset"]) for e in res["errors"]} == {("t", 0, 5)}, res["errors"][:3]
    assert all("CorruptRecordError" in e["types"] for e in res["errors"])
    assert res["logs"] <= 5 and not run.report["logs_with_traceback"], run.describe()
    assert fetches <= 150, f"{fetches} fetches in 2 s"
    assert res["slowest_poll"] < 1.0, run.describe()
    assert not b.errors


# ----------------------------------------------------------------- defect 6
TINY_RECORDS = 5_000_000


def test_many_tiny_records_bound_one_poll(broker, run_scenario):
    """One zstd batch of 5 million minimal records (4 MB on the wire, 35 MB
    decompressed). Every poll returns at most max_poll_records (500) and
    takes well under a second; the peak RSS grows by less than 160 MiB (not
    the 5 million Record objects at once); the offsets returned are
    consecutive from 0."""
    b = broker({"tiny": 1})
    builder = kwire.RecordBatchBuilder("zstd")
    for _ in range(TINY_RECORDS):
        builder.append(None)
    b.log("tiny", 0).append(builder.build())
    del builder
    run = run_scenario(consume, {"bootstrap": b.bootstrap, "topic": "tiny", "partitions": [0], "seconds": 2.0,
                                 "options": {"max_poll_records": 500}}, timeout=40)
    res = run.check().result
    got = res["counts"].get("0", 0)
    run.figure = {"records": got, "slowest_poll": round(res["slowest_poll"], 3), "biggest_poll": res["biggest_poll"]}
    assert res["runs"].get("0") == [[0, got - 1]], "records skipped or repeated"
    assert got >= 5000, f"only {got} records in 2 s"
    assert res["biggest_poll"] <= 500
    assert res["slowest_poll"] < 0.5, run.describe()
    assert run.rss_growth_mib < 160, run.describe()
    assert res["logs"] <= 2, run.describe()


# ---------------------------------------------------------------- defect 11
@pytest.mark.parametrize("columnar", [False, True], ids=["objects", "columnar"])
def test_offsets_going_backwards_are_returned_once(broker, run_scenario, columnar):
    """A batch whose records' offset deltas go 0, 1, 2, 1, 0, then a good
    batch at offsets 5-9: the consumer returns offsets 0, 1, 2, 5, ..., 9,
    strictly increasing, and logs the skipped records once (not per record,
    not per poll)."""
    b = broker({"t": 1})
    bad = b"".join(v2_record(d, b"v%d" % i) for i, d in enumerate([0, 1, 2, 1, 0]))
    b.log("t", 0).append(v2_batch(bad, 5))
    b.log("t", 0).append(records_batch([b"w%d" % i for i in range(5)]))
    run = run_scenario(consume, {"bootstrap": b.bootstrap, "topic": "t", "partitions": [0], "seconds": 1.0,
                                 "columnar": columnar}, timeout=30)
    res = run.check().result
    run.figure = {"offsets": offsets(res, 0)}
    assert offsets(res, 0) == [0, 1, 2, 5, 6, 7, 8, 9]
    assert not res["errors"], res["errors"][:3]
    assert 1 <= res["logs"] <= 2, f"the skipped records are counted and logged once: {res['log_messages']}"
