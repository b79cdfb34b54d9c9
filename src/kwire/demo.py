"""kwire's demo job (``scripts/demo``, ``kwire demo``): start the bundled
Tansu broker on loopback, produce a few million records with kwire's
producer, read them into a Spark DataFrame through ``format("kwire")`` on
``local[2]``, print a summary and a few rows, and stop everything.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Optional, Sequence, TextIO

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


def spark_session(app: str = "kwire-demo", jars: Sequence[str] = ()):
    """A ``local[2]`` session whose Python workers run this interpreter,
    with ``format("kwire")`` registered (and ``jars`` on its class path:
    the tests and benchmarks add Spark's own Kafka connector)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import kwire.spark

    builder = SparkSession.builder.master("local[2]").appName(app)
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    spark = (builder
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    kwire.spark.register(spark)
    return spark


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
        t = time.perf_counter()
        per_partition = sorted((r["partition"], r["count"]) for r in df.groupBy("partition").count().collect())
        read_s = time.perf_counter() - t
        total = sum(n for _, n in per_partition)
        out.write(f"\nkwire: {records:,} records produced in {produce_s:.1f} s ({records / produce_s:,.0f}/s); "
                  f"Spark read them through format(\"kwire\") on local[2]\n\n")
        out.write(f"records    {total:,}\n")
        out.write(f"partitions {len(per_partition)}  (" + ", ".join(f"{p}: {n:,}" for p, n in per_partition) + ")\n")
        out.write(f"time       {read_s:.2f} s  (the session's first query: includes starting Spark's Python workers)\n")
        out.write(f"rows/s     {total / read_s:,.0f}\n\n")
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
        return total == records
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        progress.write("[demo] stopped Spark and the broker\n")
