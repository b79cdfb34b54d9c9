"""Spark read throughput: ``format("kwire")`` from a local Tansu broker
against Spark without Kafka and against the ceiling of a Python data source.

    python -m benchmarks.compare_spark                  # 10,000,000 records
    python -m benchmarks.compare_spark --records 2000000 [--json out.json]

Workload: ``--records`` records (16-byte key, 100-byte value) in 4
partitions, produced with kwire's producer to the bundled Tansu broker
(in-memory, loopback). Each read runs on ``local[2]`` into ``count()`` and
into a parquet write (to a temporary directory), best of ``--repeat``
rounds taken in turns:

* ``kwire``: ``spark.read.format("kwire")`` over the topic;
* ``spark-native``: the same columns made by Spark itself from
  ``spark.range`` (no Kafka, no Python): what Spark does without a source;
* ``python-ceiling``: a Python data source whose tasks yield
  pre-built Arrow batches of the same schema from memory, as many rows as
  kwire reads: the most any Python data source can deliver here.

Ratios are against the ceiling (kwire's target: within 1.25x of it). The
broker, Spark and the Python workers share this machine's cores; the
broker's CPU seconds in each timed run are printed, since on a 2-core
machine they come out of the same budget as Spark's, and so are the
machine's busy CPU seconds (all processes, all cores): a run that keeps
every core busy can only get faster by doing less work.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import Callable, Dict, Iterator, List, Tuple

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from benchmarks import history
from kwire.demo import DEFAULT_PARTITIONS, produce, spark_session, value_for
from kwire.spark.schema import arrow_schema, spark_schema

BATCH_ROWS = 65_536


class CeilingSource(DataSource):
    """``format("kwire_ceiling")``: option ``rows`` rows in ``partitions``
    tasks, each yielding one pre-built Arrow batch (Spark's Kafka schema,
    16-byte keys, 100-byte values) again and again."""

    @classmethod
    def name(cls) -> str:
        return "kwire_ceiling"

    def schema(self):
        return spark_schema(False)

    def reader(self, schema):
        return CeilingReader(int(self.options["rows"]), int(self.options["partitions"]))


class CeilingReader(DataSourceReader):
    def __init__(self, rows: int, partitions: int) -> None:
        self.rows, self.parts = rows, partitions

    def partitions(self) -> List[InputPartition]:
        return [InputPartition(p) for p in range(self.parts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        p = partition.value
        share = self.rows // self.parts + (1 if p < self.rows % self.parts else 0)
        n = min(BATCH_ROWS, share)
        ts = 1_700_000_000_000_000
        batch = pa.RecordBatch.from_arrays([
            pa.array([b"%016d" % i for i in range(n)], pa.binary()),
            pa.array([value_for(i) for i in range(n)], pa.binary()),
            pa.array(["bench"] * n, pa.string()),
            pa.array([p] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([ts + i for i in range(n)], pa.timestamp("us", tz="UTC")),
            pa.array([0] * n, pa.int32()),
        ], schema=arrow_schema(False))
        left = share
        while left > 0:
            yield batch if left >= n else batch.slice(0, left)
            left -= n


def native_df(spark, rows: int, partitions: int):
    return spark.range(0, rows, 1, partitions).selectExpr(
        "CAST(lpad(CAST(id AS STRING), 16, '0') AS BINARY) AS key",
        "CAST(rpad(concat('{\"id\": ', CAST(id AS STRING), ', \"event\": \"click\"}'), 100, ' ') AS BINARY) AS value",
        "'bench' AS topic", f"CAST(id % {partitions} AS INT) AS partition", "id AS offset",
        "timestamp_millis(1700000000000 + id) AS timestamp", "0 AS timestampType")


def process_cpu(pid: int) -> float:
    """CPU seconds process ``pid`` has used (Linux /proc; 0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy() -> float:
    """CPU seconds every core of the machine has been busy (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)        # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")      # up to steal; guest time is in user


def timed(fn: Callable[[], object], broker_pid: int) -> Tuple[float, float, float]:
    """Wall time of one run, with the broker's CPU seconds and the whole
    machine's busy CPU seconds in it."""
    c, m = process_cpu(broker_pid), machine_busy()
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t, process_cpu(broker_pid) - c, machine_busy() - m


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--only", default="kwire,spark-native,python-ceiling")
    ap.add_argument("--ops", default="count,parquet")
    ap.add_argument("--codec", default="none", help="compression of the produced records")
    ap.add_argument("--json", metavar="PATH", help="also write the results and ratios as JSON (benchmarks/history.py)")
    args = ap.parse_args(argv)
    from kwire.admin import Admin, NewTopic
    from kwire.devbroker import start_tansu

    wanted = args.only.split(",")
    broker = start_tansu()
    spark = None
    out_dir = tempfile.mkdtemp(prefix="kwire-bench-")
    try:
        with Admin(bootstrap_servers=broker.bootstrap) as admin:
            admin.create_topics([NewTopic("bench", num_partitions=args.partitions)])
        sys.stderr.write(f"[bench] producing {args.records:,} records to Tansu...\n")
        produce_s = produce(broker.bootstrap, "bench", args.records, args.partitions, sys.stderr, args.codec)
        spark = spark_session("kwire-bench")
        spark.dataSource.register(CeilingSource)
        frames = {
            "kwire": lambda: spark.read.format("kwire").option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", "bench").load(),
            "spark-native": lambda: native_df(spark, args.records, args.partitions),
            "python-ceiling": lambda: spark.read.format("kwire_ceiling").option("rows", str(args.records))
            .option("partitions", str(args.partitions)).load(),
        }
        results: Dict[str, Dict[str, Tuple[float, float, float]]] = {name: {} for name in wanted}
        runs: Dict[str, Dict[str, Callable[[], object]]] = {}
        for name in wanted:
            make = frames[name]
            assert make().count() == args.records, name        # warm-up, and every record is there
            path = f"{out_dir}/{name}"
            runs[name] = {"count": lambda make=make: make().count(),
                          "parquet": lambda make=make, path=path: make().write.mode("overwrite").parquet(path)}
        # rounds taken in turns, so that no source gets a JVM warmed up by the others' runs alone
        for round_ in range(args.repeat):
            for name in wanted:
                for op in args.ops.split(","):
                    sys.stderr.write(f"[bench] round {round_ + 1}: {name} {op}...\n")
                    got = timed(runs[name][op], broker.pid)
                    if op not in results[name] or got < results[name][op]:
                        results[name][op] = got
        n = args.records
        print(f"\n{n:,} records ({args.partitions} partitions, 16-byte key, 100-byte value, codec {args.codec}), local[2], "
              f"best of {args.repeat}; produced with kwire in {produce_s:.1f} s ({n / produce_s:,.0f}/s)\n")
        ops = args.ops.split(",")
        print("| source | " + " | ".join(f"{op} s | {op} rows/s | {op} time vs ceiling | broker CPU s | "
                                         f"machine CPU s" for op in ops) + " |")
        print("|---|" + "---:|---:|---:|---:|---:|" * len(ops))
        ceiling = results.get("python-ceiling")
        for name, r in results.items():
            cells = [f"{r[op][0]:.2f} | {n / r[op][0]:,.0f} | "
                     + (f"{r[op][0] / ceiling[op][0]:.2f}x" if ceiling else "-") + f" | {r[op][1]:.2f} | {r[op][2]:.2f}"
                     for op in ops]
            print(f"| {name} | " + " | ".join(cells) + " |")
        if args.json:
                env = dict(records=n, partitions=args.partitions, repeat=args.repeat,
                       codec=args.codec)
            rows = [{"source": name, "op": op, "seconds": t[0], "broker_cpu_s": t[1], "machine_cpu_s": t[2]}
                    for name, r in results.items() for op, t in r.items()]
            # the ceiling's time over kwire's: 1 would be the ceiling itself (kwire's target: >= 0.8)
            ratios = {f"{op}/kwire vs python-ceiling": ceiling[op][0] / results["kwire"][op][0]
                      for op in ops if ceiling and "kwire" in results and op in results["kwire"]}
            history.write_results(args.json, "compare_spark", env, rows, ratios)
        return 0
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
