"""kwire's demo job (``scripts/demo``, ``kwire demo``): start the bundled
Tansu broker on loopback, produce a few million records with kwire's
producer, and on ``local[2]``:

1. read them into a Spark DataFrame through ``format("kwire")``, twice:
   the session's first query includes starting Spark's Python workers,
   the second shows the steady rate;
2. read them again as a stream (``Trigger.AvailableNow`` with
   ``maxOffsetsPerTrigger``, so in several micro-batches);
3. write one partition's records back to Kafka through ``format("kwire")``
   (Spark's Arrow batches encoded by the compiled core), twice (a session's
   first write also starts its Python workers; the second shows the steady
   rate), and read the new topics' counts;

print a summary and a few rows, and stop everything.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Mapping, Optional, Sequence, TextIO

KEY_SIZE = 16
VALUE_SIZE = 100
DEFAULT_RECORDS = 3_000_000
DEFAULT_PARTITIONS = 4


def value_for(i: int) -> bytes:
    """A 100-byte JSON-like value for record ``i``."""
    return (b'{"id": %d, "user": "user-%d", "event": "click", "amount": %d.%02d}'
            % (i, i % 9973, i % 1000, i % 100)).ljust(VALUE_SIZE, b" ")


def produce(bootstrap: str, topic: str, records: int, partitions: int, progress: Optional[TextIO] = None,
            compression: str = "none") -> float:
    """``records`` records (16-byte key, 100-byte value) spread evenly over
    ``partitions`` with kwire's producer (``compression``: a codec name);
    returns the seconds it took."""
    from kwire.producer import Producer

    step = max(1, records // 10)
    t = time.perf_counter()
    with Producer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=1 << 20, enable_idempotence=False,
                  acks=1, compression_type=compression) as producer:
        send = producer.send
        for i in range(records):
            send(topic, value_for(i), key=b"%016d" % i, partition=i % partitions)
            if progress is not None and (i + 1) % step == 0:
                progress.write(f"[demo] produced {i + 1:,} / {records:,} records "
                               f"({(i + 1) / (time.perf_counter() - t):,.0f}/s)\n")
                progress.flush()
        producer.flush()
    return time.perf_counter() - t


def spark_session(app: str = "kwire-demo", jars: Sequence[str] = (), master: str = "local[2]",
                  conf: Optional[Mapping[str, str]] = None):
    """A ``local[2]`` session (or ``master``'s) whose Python workers run this
    interpreter, with ``format("kwire")`` registered (and ``jars`` on its
    class path: the tests and benchmarks add Spark's own Kafka connector;
    ``conf``, more settings)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import kwire.spark

    builder = SparkSession.builder.master(master).appName(app)
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = (builder
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    kwire.spark.register(spark)
    return spark


def _count_by_partition(df) -> "tuple[float, list]":
    """The seconds a count by partition takes, and the counts."""
    t = time.perf_counter()
    counts = sorted((r["partition"], r["count"]) for r in df.groupBy("partition").count().collect())
    return time.perf_counter() - t, counts


def _stream(spark, bootstrap: str, topic: str, limit: int) -> "tuple[float, list]":
    """Read ``topic`` from the start as a stream, ``limit`` offsets per
    micro-batch, until what was there when it started is read; the seconds
    and the rows of each micro-batch."""
    import tempfile

    rows: list = []
    with tempfile.TemporaryDirectory(prefix="kwire-demo-") as checkpoint:
        t = time.perf_counter()
        query = (spark.readStream.format("kwire").option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", topic).option("startingOffsets", "earliest")
                 .option("maxOffsetsPerTrigger", str(limit)).load()
                 .writeStream.foreachBatch(lambda batch, _id: rows.append(batch.count()))
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination()
        return time.perf_counter() - t, [n for n in rows if n]


def _write_back(spark, df, bootstrap: str, topics: "tuple[str, ...]") -> "list[tuple[float, int, int]]":
    """Write partition 0's records to each of ``topics`` in turn (the
    first write of a session also starts its Python workers; the next
    shows the steady rate) and count what landed there: per topic the
    seconds, the rows written, the rows read back."""
    from kwire.admin import Admin, NewTopic

    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(topic, num_partitions=1) for topic in topics])
    part = df.where("partition = 0").select("key", "value").cache()
    written = part.count()
    out = []
    for topic in topics:
        t = time.perf_counter()
        (part.write.mode("append").format("kwire").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", topic).save())
        seconds = time.perf_counter() - t
        landed = (spark.read.format("kwire").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
                  .load().count())
        out.append((seconds, written, landed))
    part.unpersist()
    return out


def run(records: int = DEFAULT_RECORDS, partitions: int = DEFAULT_PARTITIONS, out: TextIO = sys.stdout,
        progress: TextIO = sys.stderr) -> bool:
    """Run the demo; returns False if Spark did not read back every record."""
    from kwire.admin import Admin, NewTopic
    from kwire.devbroker import start_tansu

    progress.write("[demo] starting the bundled Tansu broker on loopback (in-memory storage)...\n")
    broker = start_tansu()
    spark = None
    try:
        topic = "kwire-demo"
        with Admin(bootstrap_servers=broker.bootstrap) as admin:
            admin.create_topics([NewTopic(topic, num_partitions=partitions)])
        progress.write(f"[demo] Tansu {broker.bootstrap}: producing {records:,} records "
                       f"({KEY_SIZE}-byte key, {VALUE_SIZE}-byte value) to {partitions} partitions...\n")
        produce_s = produce(broker.bootstrap, topic, records, partitions, progress)
        progress.write("[demo] starting Spark (local[2])...\n")
        spark = spark_session()
        df = (spark.read.format("kwire")
              .option("kafka.bootstrap.servers", broker.bootstrap)
              .option("subscribe", topic)
              .load())
        progress.write('[demo] reading with spark.read.format("kwire") ...\n')
        first_s, per_partition = _count_by_partition(df)
        second_s, _ = _count_by_partition(df)
        total = sum(n for _, n in per_partition)
        out.write(f"\nkwire: {records:,} records produced in {produce_s:.1f} s ({records / produce_s:,.0f}/s); "
                  f"Spark read them through format(\"kwire\") on local[2]\n\n")
        out.write(f"records    {total:,}\n")
        out.write(f"partitions {len(per_partition)}  (" + ", ".join(f"{p}: {n:,}" for p, n in per_partition) + ")\n")
        out.write(f"read 1     {first_s:.2f} s, {total / first_s:,.0f} rows/s  (the session's first query: "
                  "includes starting Spark's Python workers)\n")
        out.write(f"read 2     {second_s:.2f} s, {total / second_s:,.0f} rows/s  (the same query again: "
                  "the steady rate)\n")
        out.flush()
        progress.write('[demo] streaming with spark.readStream.format("kwire"), Trigger.AvailableNow ...\n')
        limit = max(1, records // 4)
        stream_s, batches = _stream(spark, broker.bootstrap, topic, limit)
        streamed = sum(batches)
        out.write(f"stream     {streamed:,} rows in {len(batches)} micro-batches of at most {limit:,} "
                  f"(maxOffsetsPerTrigger), {stream_s:.2f} s\n")
        out.flush()
        progress.write('[demo] writing partition 0 back to Kafka with df.write.format("kwire") ...\n')
        (write_s, written, landed), (again_s, _, landed_again) = _write_back(
            spark, df, broker.bootstrap, (f"{topic}-out", f"{topic}-out-2"))
        out.write(f"write      {written:,} rows of partition 0 to {topic}-out in {write_s:.2f} s "
                  f"({written / write_s:,.0f} rows/s; the session's first write: includes starting its Python "
                  f"workers); read back: {landed:,}\n")
        out.write(f"write 2    the same rows to {topic}-out-2 in {again_s:.2f} s ({written / again_s:,.0f} rows/s: "
                  f"the steady rate); read back: {landed_again:,}\n\n")
        out.flush()
        first_two = json.dumps({topic: {str(p): 2 for p in range(partitions)}})
        head = (spark.read.format("kwire").option("kafka.bootstrap.servers", broker.bootstrap)
                .option("subscribe", topic).option("endingOffsets", first_two).load())
        rows = (head.selectExpr("CAST(key AS STRING) AS key", "partition", "offset", "timestamp",
                                "substring(CAST(value AS STRING), 1, 48) AS value")
                .orderBy("partition", "offset").limit(5).collect())
        out.write("key               partition  offset  timestamp                   value\n")
        for r in rows:
            out.write(f"{r['key']:<17} {r['partition']:>9} {r['offset']:>7}  {r['timestamp']!s:<26}  {r['value']}\n")
        out.flush()
        return total == records and streamed == records and landed == written
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        progress.write("[demo] stopped Spark and the broker\n")
