"""Structured Streaming reads through ``format("kwire")`` on local[2], on
Tansu and on Apache Kafka: read limits, Trigger.AvailableNow, checkpoint
restarts, new topics and partitions, crash replay, records deleted under a
query."""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from kwire.admin import Admin

from .conftest import add_partitions, kwire_read, new_topic, offsets_of, produce, spark_rows


def stream(spark, bootstrap: str, **options: str):
    reader = spark.readStream.format("kwire").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def to_parquet(df, path: str, checkpoint: str, **trigger):
    return (df.selectExpr("topic", "partition", "offset", "value").writeStream.format("parquet")
            .option("path", path).option("checkpointLocation", checkpoint).trigger(**trigger).start())


def run_available_now(df, path: str, checkpoint: str):
    q = to_parquet(df, path, checkpoint, availableNow=True)
    q.awaitTermination(180)
    assert not q.isActive and q.exception() is None
    return q


def written(spark, path: str):
    return sorted((r.topic, r.partition, r.offset) for r in spark.read.parquet(path).collect())


def test_limit_available_now_restart_and_new_partitions(spark, broker, tmp_path):
    prefix = f"stream{time.monotonic_ns()}"
    first = new_topic(broker.bootstrap, 2, prefix=prefix)
    produce(broker.bootstrap, first, 300, 2)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    df = stream(spark, broker.bootstrap, subscribePattern=f"{prefix}-.*", startingOffsets="earliest",
                maxOffsetsPerTrigger="100")

    q = run_available_now(df, out, ckpt)
    batches = [p for p in q.recentProgress if p["numInputRows"] > 0]
    assert [p["numInputRows"] for p in batches] == [100, 100, 100]       # the limit holds under AvailableNow
    last = q.recentProgress[-1]["sources"][0]
    assert json.loads(last["endOffset"]) == {first: {"0": 150, "1": 150}}
    assert json.loads(last["latestOffset"]) == {first: {"0": 150, "1": 150}}    # reportLatestOffset
    assert written(spark, out) == [(first, p, o) for p in range(2) for o in range(150)]

    # more records, a new topic the pattern matches and, on Kafka, a partition added to the first topic
    produce(broker.bootstrap, first, 40, 2, start=300)
    second = new_topic(broker.bootstrap, 1, prefix=prefix)
    produce(broker.bootstrap, second, 25, 1)
    expected = [(first, p, o) for p in range(2) for o in range(170)] + [(second, 0, o) for o in range(25)]
    if not broker.is_tansu:                  # Tansu 0.6.0 offers no CreatePartitions
        add_partitions(broker.bootstrap, first, 3)
        produce(broker.bootstrap, first, 30, 3, start=340)        # 10 more in each, the new one's from offset 0
        expected = [(t, p, o) for t, p, o in expected if t != first] + [
            (first, p, o) for p in range(3) for o in range(10 if p == 2 else 180)]
    run_available_now(df, out, ckpt)                                       # restart from the checkpoint
    assert written(spark, out) == sorted(expected)                         # nothing lost, nothing twice


def test_starting_latest_reads_only_what_comes_after(spark, broker, tmp_path):
    topic = new_topic(broker.bootstrap, 1)
    produce(broker.bootstrap, topic, 50, 1)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    df = stream(spark, broker.bootstrap, subscribe=topic)                  # startingOffsets latest by default
    run_available_now(df, out, ckpt)
    produce(broker.bootstrap, topic, 10, 1, start=50)
    run_available_now(df, out, ckpt)
    assert written(spark, out) == [(topic, 0, o) for o in range(50, 60)]


def test_crash_replays_the_same_offsets(spark, broker, tmp_path):
    """A batch that fails is run again after the restart over exactly the
    offsets Spark logged for it; the sink then has every record once."""
    topic = new_topic(broker.bootstrap, 2)
    produce(broker.bootstrap, topic, 120, 2)
    log_dir, ckpt, flag = tmp_path / "log", str(tmp_path / "ckpt"), tmp_path / "crashed"
    log_dir.mkdir()

    def sink(batch_df, batch_id):
        rows = sorted((r.partition, r.offset) for r in batch_df.select("partition", "offset").collect())
        attempt = "crash" if batch_id == 1 and not flag.exists() else "ok"
        (log_dir / f"{batch_id}-{attempt}.json").write_text(json.dumps(rows))
        if attempt == "crash":
            flag.write_text("1")
            raise RuntimeError("simulated crash in batch 1")

    df = stream(spark, broker.bootstrap, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="50")
    q = df.writeStream.foreachBatch(sink).option("checkpointLocation", ckpt).trigger(availableNow=True).start()
    with pytest.raises(Exception, match="simulated crash"):
        q.awaitTermination(180)
    q = df.writeStream.foreachBatch(sink).option("checkpointLocation", ckpt).trigger(availableNow=True).start()
    q.awaitTermination(180)
    assert q.exception() is None
    crashed = json.loads((log_dir / "1-crash.json").read_text())
    assert crashed and json.loads((log_dir / "1-ok.json").read_text()) == crashed
    done = sorted(x for f in os.listdir(log_dir) if f.endswith("-ok.json")
                  for x in map(tuple, json.loads((log_dir / f).read_text())))
    assert done == [(p, o) for p in range(2) for o in range(60)]


def test_partitions_added_while_the_query_runs(spark, broker, tmp_path):
    """CreatePartitions under a running query: the next micro-batch reads
    the new partitions from their earliest offset (as Spark's Kafka source
    does), and a batch read with subscribe sees every partition."""
    if broker.is_tansu:
        pytest.skip("Tansu 0.6.0 cannot add partitions to a topic (it offers no CreatePartitions)")
    topic = new_topic(broker.bootstrap, 2)
    produce(broker.bootstrap, topic, 100, 2)
    out = str(tmp_path / "out")
    q = to_parquet(stream(spark, broker.bootstrap, subscribe=topic, startingOffsets="earliest"), out,
                   str(tmp_path / "ckpt"), processingTime="0 seconds")
    try:
        q.processAllAvailable()
        assert written(spark, out) == [(topic, p, o) for p in range(2) for o in range(50)]
        add_partitions(broker.bootstrap, topic, 4)
        produce(broker.bootstrap, topic, 80, 4, start=100)                  # 20 in each
        expected = [(topic, p, o) for p in range(4) for o in range(70 if p < 2 else 20)]
        deadline = time.monotonic() + 120
        while written(spark, out) != expected and time.monotonic() < deadline:
            q.processAllAvailable()        # returns once a trigger found nothing new: maybe before the new records
        assert q.exception() is None and written(spark, out) == expected
    finally:
        q.stop()
    got = offsets_of(spark_rows(kwire_read(spark, broker.bootstrap, subscribe=topic)))
    assert got == {(topic, p): list(range(70 if p < 2 else 20)) for p in range(4)}


def test_records_deleted_before_the_next_batch(spark, broker, tmp_path):
    """Records deleted (DeleteRecords) past the offsets a query's checkpoint
    holds: with failOnDataLoss=true the next batch fails naming the partition
    and the offsets; with false the query goes on from the log start."""
    from pyspark.errors import StreamingQueryException

    if broker.is_tansu:
        pytest.skip("Tansu 0.6.0 drops the connection on DeleteRecords")
    topic = new_topic(broker.bootstrap, 2)
    produce(broker.bootstrap, topic, 100, 2)
    queries = {}
    for fail in ("true", "false"):           # two queries, each with its checkpoint at offsets 50 and 50
        df = stream(spark, broker.bootstrap, subscribe=topic, startingOffsets="earliest", failOnDataLoss=fail)
        queries[fail] = df, str(tmp_path / f"out-{fail}"), str(tmp_path / f"ckpt-{fail}")
        run_available_now(*queries[fail])
    produce(broker.bootstrap, topic, 100, 2, start=100)
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.delete_records({(topic, 0): 80})

    q = to_parquet(*queries["true"], availableNow=True)
    with pytest.raises(StreamingQueryException,
                       match=rf"Cannot fetch offset 50 of {topic}-0: the partition now starts at 80, offsets 50 to 80"):
        q.awaitTermination(180)
    run_available_now(*queries["false"])
    assert written(spark, queries["false"][1]) == [(topic, 0, o) for o in [*range(50), *range(80, 100)]] + [
        (topic, 1, o) for o in range(100)]


def _query(spark, fmt: str, bootstrap: str, options: dict, **trigger):
    """A streaming read of ``fmt`` ("kwire" or Spark's "kafka") into the noop sink."""
    reader = spark.readStream.format(fmt).option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load().writeStream.format("noop").trigger(**trigger).start()


def _batches(q) -> list:
    """(trigger start in s, rows) of each batch that read rows."""
    from datetime import datetime

    return [(datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp(), p["numInputRows"])
            for p in q.recentProgress if p["numInputRows"] > 0]


def _wait_rows(queries, rows: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while any(sum(n for _, n in _batches(q)) < rows for q in queries):
        assert all(q.exception() is None for q in queries), [q.exception() for q in queries]
        assert time.monotonic() < deadline, {q.name: _batches(q) for q in queries}
        time.sleep(0.1)


def test_min_offsets_per_trigger_and_max_trigger_delay_as_the_connector(spark, broker):
    """minOffsetsPerTrigger=50, maxTriggerDelay=6s, maxOffsetsPerTrigger=60,
    a 100 ms processing-time trigger, kwire and (on Apache Kafka) Spark's
    connector side by side on one topic, empty at the start (the first
    trigger, which always runs, finds nothing): 60 records are read at once
    (60 >= 50); 20 more wait (fewer than 50) until 6 s after the batch
    before. Not the connector on Tansu: it trusts Tansu's ListOffsets latest
    (the last batch's base offset + 1), which kwire raises to the high
    watermark."""
    topic = new_topic(broker.bootstrap, 1)
    opts = {"subscribe": topic, "startingOffsets": "earliest", "minOffsetsPerTrigger": "50",
            "maxTriggerDelay": "6s", "maxOffsetsPerTrigger": "60"}
    queries = [_query(spark, fmt, broker.bootstrap, opts, processingTime="100 milliseconds")
               for fmt in (("kwire",) if broker.is_tansu else ("kwire", "kafka"))]
    try:
        deadline = time.monotonic() + 60
        while not all(q.status["message"].startswith("Waiting for") for q in queries):   # first trigger done
            assert time.monotonic() < deadline and all(q.exception() is None for q in queries)
            time.sleep(0.1)
        produce(broker.bootstrap, topic, 60, 1)
        _wait_rows(queries, 60)
        produce(broker.bootstrap, topic, 20, 1, start=60)
        time.sleep(1.0)
        assert [[n for _, n in _batches(q)] for q in queries] == [[60]] * len(queries)    # 20 < 50: waiting
        _wait_rows(queries, 80, timeout=30)
        for q in queries:
            got = _batches(q)
            assert [n for _, n in got] == [60, 20], got
            assert got[1][0] - got[0][0] >= 5.5, got        # the 20 waited for maxTriggerDelay
    finally:
        for q in queries:
            q.stop()


def test_available_now_min_offsets_and_offsets_behind_latest(spark, broker, tmp_path):
    """Trigger.AvailableNow over partitions of 210 and 150 records,
    maxOffsetsPerTrigger=100, minOffsetsPerTrigger=70.

    kwire reads everything up to the query's start, 99 offsets at a time
    (Spark's proportional split: 58 + 41), then the last 63. Spark's
    connector (4.2) applies the minimum under AvailableNow too: the last 63
    (fewer than 70, within maxTriggerDelay) make it skip the trigger, which
    ends an AvailableNow query with them unread (a deliberate difference).

    The connector's source metrics {min,max,avg}OffsetsBehindLatest are in
    its progress; kwire's progress has none (a Python data source cannot
    report source metrics), and :func:`offsets_behind_latest` gives the same
    figures from the progress' latestOffset and endOffset, for both. The
    connector runs on Apache Kafka only: on Tansu it trusts ListOffsets
    latest, which trails Tansu's log."""
    from kwire.spark.metrics import offsets_behind_latest

    topic = new_topic(broker.bootstrap, 2)
    produce(broker.bootstrap, topic, 300, 2)
    produce(broker.bootstrap, topic, 60, 1, start=300)              # partition 0 only: 210 and 150
    opts = {"subscribe": topic, "startingOffsets": "earliest", "minOffsetsPerTrigger": "70",
            "maxOffsetsPerTrigger": "100"}
    behind = [{"minOffsetsBehindLatest": mn, "maxOffsetsBehindLatest": mx, "avgOffsetsBehindLatest": avg}
              for mn, mx, avg in (("109", "152", "130.5"), ("68", "94", "81.0"), ("27", "36", "31.5"),
                                  ("0", "0", "0.0"))]
    for fmt in (("kwire",) if broker.is_tansu else ("kwire", "kafka")):
        reader = spark.readStream.format(fmt).option("kafka.bootstrap.servers", broker.bootstrap)
        for k, v in opts.items():
            reader = reader.option(k, v)
        q = (reader.load().writeStream.format("noop").option("checkpointLocation", str(tmp_path / fmt))
             .trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert q.exception() is None
        progress = [p for p in q.recentProgress if p["numInputRows"] > 0]
        computed = [offsets_behind_latest(p) for p in progress]
        if fmt == "kwire":
            assert [p["numInputRows"] for p in progress] == [99, 99, 99, 63]
            assert computed == behind and all(p["sources"][0]["metrics"] == {} for p in progress)
        else:
            assert [p["numInputRows"] for p in progress] == [99, 99, 99]
            assert [dict(p["sources"][0]["metrics"]) for p in progress] == computed == behind[:3]


def test_offset_lookups_retried_while_the_broker_is_unreachable(broker, caplog):
    """fetchOffset.numRetries / fetchOffset.retryIntervalMs: a driver
    lookup whose broker is unreachable (its bootstrap address a proxy that
    relays nothing) fails its attempt, is tried again after the interval
    with new clients, and succeeds once the proxy relays again; with too few
    attempts it raises the last failure."""
    import threading

    from kwire.spark.offsets import OffsetReader
    from kwire.spark.options import parse_source_options
    from kwire.types import TopicPartition
    from support.proxies import FaultProxy

    topic = new_topic(broker.bootstrap, 1)
    produce(broker.bootstrap, topic, 10, 1)

    def reader(proxy, retries: str) -> OffsetReader:
        return OffsetReader(parse_source_options({
            "kafka.bootstrap.servers": proxy.address, "subscribe": topic, "kafka.request.timeout.ms": "1000",
            "kafka.socket.connection.setup.timeout.ms": "1000", "fetchOffset.numRetries": retries,
            "fetchOffset.retryIntervalMs": "300"}, streaming=True))

    with FaultProxy((broker.host, broker.port)) as proxy, caplog.at_level("WARNING", logger="kwire.spark.offsets"):
        proxy.black_hole()
        healer = threading.Timer(1.5, proxy.heal)
        healer.start()
        with reader(proxy, "5") as r:
            assert r.latest(r.partitions()) == {TopicPartition(topic, 0): 10}
        healer.join()
        tries = [m.getMessage() for m in caplog.records]
        assert tries and all(re.match(r"Error in attempt \d of 5 getting Kafka offsets \(partitions\)", t) for t in tries)
        caplog.clear()
        proxy.black_hole()
        start = time.monotonic()
        with reader(proxy, "2") as r, pytest.raises(Exception):
            r.partitions()
        assert time.monotonic() - start >= 2 * 0.9 + 0.3             # two attempts and the interval between
        assert [m.getMessage()[:45] for m in caplog.records] == ["Error in attempt 1 of 2 getting Kafka offsets"]
        proxy.heal()
