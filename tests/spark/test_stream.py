"""Structured Streaming reads through ``format("kwire")`` on local[2]
against Tansu: read limits, Trigger.AvailableNow, checkpoint restarts,
new partitions, crash replay."""

from __future__ import annotations

import json
import os
import time

import pytest

from .conftest import new_topic, produce

pytestmark = pytest.mark.broker


def stream(spark, bootstrap: str, **options: str):
    reader = spark.readStream.format("kwire").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def run_available_now(df, path: str, checkpoint: str):
    q = (df.selectExpr("topic", "partition", "offset", "value").writeStream.format("parquet")
         .option("path", path).option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert not q.isActive and q.exception() is None
    return q


def written(spark, path: str):
    return sorted((r.topic, r.partition, r.offset) for r in spark.read.parquet(path).collect())


def test_limit_available_now_restart_and_new_partitions(spark, tansu, tmp_path):
    prefix = f"stream{time.monotonic_ns()}"
    first = new_topic(tansu.bootstrap, 2, prefix=prefix)
    produce(tansu.bootstrap, first, 300, 2)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    df = stream(spark, tansu.bootstrap, subscribePattern=f"{prefix}-.*", startingOffsets="earliest",
                maxOffsetsPerTrigger="100")

    q = run_available_now(df, out, ckpt)
    batches = [p for p in q.recentProgress if p["numInputRows"] > 0]
    assert [p["numInputRows"] for p in batches] == [100, 100, 100]       # the limit holds under AvailableNow
    last = q.recentProgress[-1]["sources"][0]
    assert json.loads(last["endOffset"]) == {first: {"0": 150, "1": 150}}
    assert json.loads(last["latestOffset"]) == {first: {"0": 150, "1": 150}}    # reportLatestOffset
    assert written(spark, out) == [(first, p, o) for p in range(2) for o in range(150)]

    # more records, and a new topic the pattern matches (Tansu cannot add partitions to a topic)
    produce(tansu.bootstrap, first, 40, 2, start=300)
    second = new_topic(tansu.bootstrap, 1, prefix=prefix)
    produce(tansu.bootstrap, second, 25, 1)
    run_available_now(df, out, ckpt)                                       # restart from the checkpoint
    expected = [(first, p, o) for p in range(2) for o in range(170)] + [(second, 0, o) for o in range(25)]
    assert written(spark, out) == sorted(expected)                         # nothing lost, nothing twice


def test_starting_latest_reads_only_what_comes_after(spark, tansu, tmp_path):
    topic = new_topic(tansu.bootstrap, 1)
    produce(tansu.bootstrap, topic, 50, 1)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    df = stream(spark, tansu.bootstrap, subscribe=topic)                  # startingOffsets latest by default
    run_available_now(df, out, ckpt)
    produce(tansu.bootstrap, topic, 10, 1, start=50)
    run_available_now(df, out, ckpt)
    assert written(spark, out) == [(topic, 0, o) for o in range(50, 60)]


def test_crash_replays_the_same_offsets(spark, tansu, tmp_path):
    """A batch that fails is run again after the restart over exactly the
    offsets Spark logged for it; the sink then has every record once."""
    topic = new_topic(tansu.bootstrap, 2)
    produce(tansu.bootstrap, topic, 120, 2)
    log_dir, ckpt, flag = tmp_path / "log", str(tmp_path / "ckpt"), tmp_path / "crashed"
    log_dir.mkdir()

    def sink(batch_df, batch_id):
        rows = sorted((r.partition, r.offset) for r in batch_df.select("partition", "offset").collect())
        attempt = "crash" if batch_id == 1 and not flag.exists() else "ok"
        (log_dir / f"{batch_id}-{attempt}.json").write_text(json.dumps(rows))
        if attempt == "crash":
            flag.write_text("1")
            raise RuntimeError("simulated crash in batch 1")

    df = stream(spark, tansu.bootstrap, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="50")
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
