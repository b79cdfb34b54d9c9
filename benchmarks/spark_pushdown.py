"""Filter pushdown in Spark batch reads: what a selective query fetches
and how long it takes, with kwire's pushdown, without it, and with Spark's
own connector (which reads every planned range and filters afterwards).

    python -m benchmarks.spark_pushdown                      # 2,000,000 records on Apache Kafka
    python -m benchmarks.spark_pushdown --records 500000 --repeat 3 [--json out.json]

Workload: ``--records`` records (16-byte key, 100-byte value) over 4
partitions of one Apache Kafka 4.4 broker (tests/support/kafka.py; Tansu
0.6.0's timestamp lookup is wrong, so its timestamp bounds would not be
pushed), record i at T0 + i ms (T0 a day ago: Kafka's retention keeps it). Each query runs ``count()`` on ``local[2]``:

* ``last 10% by time``: ``timestamp >= T0 + 0.9 N ms``;
* ``one partition``: ``partition = 2``;
* ``last 1% by offset``: ``offset >= 0.99 N / 4``.

Sources: ``kwire`` (pushdown on), ``kwire-full`` (the same source without
pushdown) and ``connector`` (``format("kafka")``), rounds taken in turns,
median of ``--repeat``, after one warm-up query per source. **Fetched** is what the broker process wrote while
the query ran (``/proc/<pid>/io`` wchar: its responses, sendfile
included), so it counts the bytes the query made the broker send.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Dict, List, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

PARTITIONS = 4
#: Record 0's timestamp: a day ago, so that Kafka's retention (7 days) keeps every record.
T0 = (int(time.time()) - 86400) * 1000


def wchar(pid: int) -> int:
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    raise RuntimeError("no wchar in /proc/<pid>/io")


def produce(bootstrap: str, topic: str, records: int) -> None:
    from kwire.admin import Admin, NewTopic
    from kwire.producer import Producer

    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])
    value = b"v" * 100
    with Producer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=256 * 1024, compression_type="lz4") as p:
        for i in range(records):
            p.send(topic, value, key=b"%016d" % i, partition=i % PARTITIONS, timestamp_ms=T0 + i)
        p.flush()


def queries(records: int) -> List[Tuple[str, str]]:
    return [
        ("last 10% by time", f"timestamp >= timestamp_millis({T0 + int(records * 0.9)})"),
        ("one partition", "partition = 2"),
        ("last 1% by offset", f"offset >= {int(records / PARTITIONS * 0.99)}"),
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)

    from pyspark.sql.datasource import DataSource

    from kwire.demo import spark_session
    from kwire.spark.source import KwireDataSourceWithoutPushdown
    from support.kafka import start_kafka
    from support.spark_connector import connector_jars

    class FullRead(KwireDataSourceWithoutPushdown):
        """``format("kwire_full")``: kwire without pushdown."""

        @classmethod
        def name(cls) -> str:
            return "kwire_full"

    print(f"[pushdown] starting Apache Kafka; producing {args.records:,} records...", file=sys.stderr)
    broker = start_kafka(heap="1g")
    spark = None
    try:
        bootstrap = broker.bootstrap("plaintext")
        produce(bootstrap, "pushdown", args.records)
        spark = spark_session("kwire-pushdown-bench", connector_jars())
        spark.dataSource.register(FullRead)
        assert issubclass(FullRead, DataSource)
        formats = {"kwire": "kwire", "kwire-full": "kwire_full", "connector": "kafka"}
        for fmt in formats.values():       # warm-up: Spark's Python workers and JVM classes, outside the timings
            (spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("subscribe", "pushdown")
             .load().where("partition = 0 and offset < 10").count())
        results: Dict[str, Dict[str, Dict[str, float]]] = {}
        for label, where in queries(args.records):
            runs: Dict[str, List[Tuple[float, int, int]]] = {s: [] for s in formats}
            for _ in range(args.repeat):
                for source, fmt in formats.items():
                    df = (spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap)
                          .option("subscribe", "pushdown").load().where(where))
                    before, t0 = wchar(broker.pid), time.perf_counter()
                    rows = df.count()
                    runs[source].append((time.perf_counter() - t0, wchar(broker.pid) - before, rows))
            counts = {r[2] for rs in runs.values() for r in rs}
            assert len(counts) == 1, f"{label}: the sources disagree on the row count: {runs}"
            results[label] = {s: {"seconds": statistics.median(r[0] for r in rs),
                                  "fetched_mb": statistics.median(r[1] for r in rs) / 1e6,
                                  "rows": rs[0][2]} for s, rs in runs.items()}
        print(f"\n{args.records:,} records, {PARTITIONS} partitions, Apache Kafka; median of {args.repeat}")
        print(f"{'query':<20} {'source':<11} {'rows':>10} {'seconds':>8} {'fetched MB':>11} {'vs kwire-full':>14}")
        for label, per in results.items():
            full = per["kwire-full"]
            for source, r in per.items():
                print(f"{label:<20} {source:<11} {r['rows']:>10,} {r['seconds']:>8.2f} {r['fetched_mb']:>11.1f} "
                      f"{full['seconds'] / r['seconds']:>13.2f}x")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"records": args.records, "repeat": args.repeat, "results": results}, f, indent=2)
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
