"""Spark typed reads: ``format("kwire")`` with ``valueFormat=avro`` (kwire's
compiled Avro decoder, the registry's reader schema) against Spark's own way,
``format("kafka")`` + the registry header stripped (``substring(value, 6)``)
+ ``from_avro`` (spark-avro), on the same topic of registry-framed Avro
values, rows/s and the ratio (target: kwire at least 2x).

    python -m benchmarks.spark_typed                         # 2,000,000 records on Apache Kafka
    python -m benchmarks.spark_typed --records 300000 --repeat 1 --broker tansu
    python -m benchmarks.spark_typed --json out.json

Workload: the issue's 12-field record (``benchmarks/avro_workload.py``'s
``event12``: five strings, four longs, a nullable double, a nested record,
an array of strings, a timestamp-millis, a boolean; about 90 bytes a
value), ``--records`` seeded values registered and framed by kwire's
encoder against Apicurio Registry (``tests/support/apicurio.py``: the
tests' registry, its Confluent-compatible API), produced with kwire's
producer over ``--partitions`` (default 4) partitions (``--codec``, default
none). One Spark session (``local[2]``) with Spark's Kafka connector and
spark-avro jars (``tests/support/spark_connector.py``).

Each run reads the whole topic into Spark's ``noop`` sink, selecting the
typed ``value`` (so neither side's decoding can be pruned away):

* ``kwire``: ``spark.read.format("kwire").option("valueFormat", "avro")
  .option("schema.registry.url", ...)...load().select("value")``;
* ``kafka+from_avro``: ``spark.read.format("kafka")...load()
  .select(from_avro(expr("substring(value, 6)"), schema).alias("value"))``.

Before timing, both read the first 2,000 offsets of partition 0 and must
give the same rows (and kwire's value type must be from_avro's). The rounds
take turns (``--repeat``, default 3: kwire, then Spark's, round after
round); each side's best round counts. Each run's figures: wall seconds,
rows/s, and the whole machine's busy CPU seconds (broker, Spark and the
Python workers share its two cores).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from typing import Any, Dict, List

import pyarrow as pa

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _path in (ROOT, os.path.join(ROOT, "tests")):          # benchmarks.*, and support.* (the test servers)
    if _path not in sys.path:
        sys.path.insert(0, _path)

from benchmarks.avro_workload import EVENT12, rows  # noqa: E402
from benchmarks.compare_spark import create_topic, machine_busy, say, start_broker  # noqa: E402

KWIRE, SPARK = "kwire", "kafka+from_avro"
TARGET = 2.0            # kwire's rows/s at least this times Spark's
CHECK_ROWS = 2_000      # offsets of partition 0 both must read alike before the clock starts
PRODUCE_CHUNK = 50_000  # rows encoded and sent at a time


def produce(bootstrap: str, registry_url: str, topic: str, records: int, partitions: int, codec: str) -> int:
    """``records`` event12 values, framed by kwire's Avro encoder with the
    schema registered under ``<topic>-value``, spread over the partitions;
    returns the schema id."""
    from kwire.formats import make_format
    from kwire.producer import Producer

    fmt = make_format("avro", {"schema": json.dumps(EVENT12), "schema.registry.url": registry_url,
                               "auto.register.schemas": "true"}, topic=topic)
    with Producer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=20) as p:
        for start in range(0, records, PRODUCE_CHUNK):
            chunk = rows("event12", min(PRODUCE_CHUNK, records - start), seed=start)
            values = fmt.encode(pa.Table.from_pylist(chunk).to_struct_array().combine_chunks(), topic=topic)
            parts = pa.array([(start + i) % partitions for i in range(len(values))], pa.int32())
            p.send_arrow(topic, pa.record_batch([values, parts], names=["value", "partition"]), timestamp=None)
        p.flush()
    return int.from_bytes(bytes(values[0].as_py()[1:5]), "big")


def frames(spark, bootstrap: str, registry_url: str, topic: str) -> Dict[str, Any]:
    """Each side's DataFrame of the typed values (a fresh one per call)."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    def options(extra: Dict[str, str]) -> Dict[str, str]:
        return {"kafka.bootstrap.servers": bootstrap, "startingOffsets": "earliest",
                **({} if "assign" in extra else {"subscribe": topic}), **extra}

    def kwire(**extra: str):
        return (spark.read.format("kwire").options(**options(extra)).option("valueFormat", "avro")
                .option("schema.registry.url", registry_url).load())

    def theirs(**extra: str):
        df = spark.read.format("kafka").options(**options(extra)).load()
        return df.select("partition", "offset",
                         from_avro(F.expr("substring(value, 6)"), json.dumps(EVENT12)).alias("value"))

    return {KWIRE: kwire, SPARK: theirs}


def check(make: Dict[str, Any], topic: str) -> None:
    """Both sides give the same type and the same first rows of partition 0."""
    ending = json.dumps({topic: {"0": CHECK_ROWS}})
    got = {}
    for side, fn in make.items():
        df = fn(assign=json.dumps({topic: [0]}), endingOffsets=ending).select("offset", "value")
        got[side] = (df.schema["value"].dataType, df.orderBy("offset").collect())
    assert got[KWIRE][0] == got[SPARK][0], f"value types differ: {got[KWIRE][0]} vs {got[SPARK][0]}"
    assert got[KWIRE][1] == got[SPARK][1], "the first rows differ"
    say(f"checked: the same type and the first {len(got[KWIRE][1]):,} rows of partition 0")


def run(make: Dict[str, Any], side: str) -> Dict[str, float]:
    df = make[side]().select("value")
    m = machine_busy()
    t = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    seconds = time.perf_counter() - t
    return {"seconds": seconds, "machine_cpu_s": machine_busy() - m}


def main(argv: List[str] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--broker", choices=("kafka", "tansu"), default="kafka")
    ap.add_argument("--codec", choices=("none", "lz4"), default="none")
    ap.add_argument("--kafka-heap", default="1g")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)

    from kwire.demo import spark_session
    from support.apicurio import start_apicurio
    from support.spark_connector import avro_jars, connector_jars

    broker = start_broker(args.broker, args.kafka_heap)
    registry = start_apicurio(progress=lambda msg: say(f"apicurio: {msg}"))
    spark = None
    try:
        topic = f"typed-bench-{uuid.uuid4().hex[:8]}"
        create_topic(broker.bootstrap, topic, args.partitions)
        t = time.perf_counter()
        schema_id = produce(broker.bootstrap, registry.url, topic, args.records, args.partitions, args.codec)
        say(f"produced {args.records:,} event12 values (schema id {schema_id}) in {time.perf_counter() - t:.1f} s")
        spark = spark_session("kwire-typed-bench", connector_jars() + avro_jars())
        make = frames(spark, broker.bootstrap, registry.url, topic)
        check(make, topic)
        for side in make:                          # warm: Python workers, JIT, connections
            run(make, side)
        runs: Dict[str, List[Dict[str, float]]] = {KWIRE: [], SPARK: []}
        for r in range(args.repeat):
            for side in make:
                runs[side].append(run(make, side))
                say(f"round {r + 1}: {side} {args.records / runs[side][-1]['seconds']:,.0f} rows/s")
        best = {side: min(rs, key=lambda x: x["seconds"]) for side, rs in runs.items()}
        rate = {side: args.records / b["seconds"] for side, b in best.items()}
        ratio = rate[KWIRE] / rate[SPARK]
        print(f"Spark typed read, event12 Avro values with a schema registry: {args.records:,} records, "
              f"{args.partitions} partitions, {args.broker}, codec {args.codec}, PySpark {spark.version}, "
              f"best of {args.repeat} rounds")
        print(f"{'source':<18} {'seconds':>8} {'rows/s':>12} {'machine CPU s':>14}")
        for side in (KWIRE, SPARK):
            b = best[side]
            print(f"{side:<18} {b['seconds']:>8.2f} {rate[side]:>12,.0f} {b['machine_cpu_s']:>14.1f}")
        print(f"ratio kwire / kafka+from_avro: {ratio:.2f}x (target {TARGET:.0f}x: "
              f"{'met' if ratio >= TARGET else 'NOT met'})")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"records": args.records, "partitions": args.partitions, "broker": args.broker,
                           "codec": args.codec, "pyspark": spark.version, "runs": runs, "rows_per_s": rate,
                           "ratio": ratio}, f, indent=2)
    finally:
        if spark is not None:
            spark.stop()
        registry.stop()
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
