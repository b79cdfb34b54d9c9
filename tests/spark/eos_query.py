"""The streaming queries of tests/spark/test_exactly_once_faults.py, run in
a child process so that the test can kill a driver (the Python process,
its JVM and every Python worker) and so that tasks may be retried: the
suite's own session allows no task retry (local[2], maxFailures 1), this
one runs on ``local[2,3]``.

The process starts one session, prints :data:`READY`, then runs one query
for each JSON line on stdin (:data:`QUERY_KEYS`), to its end, and prints
:data:`ANSWER` and its result as JSON (the query id, its failure, the rows
of each micro-batch); it stops at the end of stdin. The test keeps one
such process for the runs that are not killed (a session's start and its
Python workers' first batch take tens of seconds on a loaded machine) and
starts one per run it kills.

A query: a kwire source (``subscribe`` the source topic from the earliest
offset, ``maxOffsetsPerTrigger``, ``Trigger.AvailableNow``, which ends
once what was there at the start is written) -> a deterministic
projection (:func:`projected`, through a Python UDF that can inject a
fault) -> kwire's sink with ``deliveryGuarantee=exactly-once``, or
Spark's own Kafka sink (``"sink": "kafka"``, at least once; the process
then needs the connector's jars, ``--jars``), with the checkpoint given.

Faults, in the UDF (``"<batch>:<Spark partition>:..."``):

* ``fail``, ``B:P:ROWS``: the first attempt of batch B's task P raises
  after it has projected ROWS rows, once its first row is in the target
  topic's log (:func:`sent`: the sink has sent rows of the attempt, in an
  open transaction for kwire's); Spark runs the task again, and that
  attempt succeeds.
* ``block``, ``B:P:FILE``: the first attempt of batch B's task P writes FILE
  and waits to be killed (the test kills the driver once the batch's other
  tasks are written: the driver killed mid-batch, for Spark's sink, which
  has no commit of its own to stop in; kwire's is stopped by
  ``KWIRE_TEST_EXACTLY_ONCE_HOOK``).
* ``pace``, seconds: every row of every attempt waits that long, so that
  the writes last (a broker killed mid-write).

Run: ``python tests/spark/eos_query.py [--jars a.jar,b.jar]`` with ``src``
and ``tests`` on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Dict, Optional, Tuple

#: The fault's batch, Spark partition and argument (rows, or a file).
Fault = Optional[Tuple[int, int, str]]
#: The lines this process prints on stdout for the test: the session is up; a query's result follows.
READY, ANSWER = "eos_query ready", "eos_query result: "
#: A query's keys, one JSON object a line on stdin (fail, block and pace optional; partitions: the target's).
QUERY_KEYS = ("bootstrap", "source", "target", "partitions", "checkpoint", "sink", "max_offsets", "fail", "block",
              "pace")


#: Bytes each projected value carries beyond its source value: the UDF's worker writes its results
#: back in 64 KiB chunks, so a failing attempt's earlier rows reach the sink before it fails.
PAD = 1000


def projected(value: str) -> str:
    """The projection: what the target topic gets for a source value."""
    return f"out:{value}:" + "." * PAD


def _fault(spec: Optional[str]) -> Fault:
    if not spec:
        return None
    batch, partition, arg = spec.split(":", 2)
    return int(batch), int(partition), arg


def sent(bootstrap: str, topic: str, partitions: int, value: bytes, timeout: float = 30.0) -> bool:
    """Whether ``value`` reaches ``topic``'s log (read_uncommitted: in a
    transaction still open too) within ``timeout``: a failing attempt waits
    for its first row there, so that it fails with rows sent."""
    from kwire.consumer import Consumer

    c = Consumer(bootstrap_servers=bootstrap, isolation_level="read_uncommitted", enable_auto_commit=False,
                 group_id=None)
    try:
        tps = [(topic, p) for p in range(partitions)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(r.value == value for rs in c.poll(500).values() for r in rs):
                return True
        return False
    finally:
        c.close()


def projector(q: dict):
    """The projection's function (:func:`projected`), and ``q``'s faults,
    which only a first attempt of the chosen batch and partition meets."""
    fail, block, pace = _fault(q.get("fail")), _fault(q.get("block")), float(q.get("pace") or 0)
    first: Dict[int, str] = {}
    seen: Dict[int, int] = {}

    def project(value: str) -> str:
        from pyspark import TaskContext

        tc = TaskContext.get()
        if tc.attemptNumber() == 0:
            here = (int(tc.getLocalProperty("streaming.sql.batchId")), tc.partitionId())
            first.setdefault(tc.taskAttemptId(), projected(value))
            seen[tc.taskAttemptId()] = n = seen.get(tc.taskAttemptId(), 0) + 1
            if fail and here == fail[:2] and n > int(fail[2]):
                went = sent(q["bootstrap"], q["target"], q["partitions"], first[tc.taskAttemptId()].encode())
                raise RuntimeError(f"eos_query: injected failure in batch {here[0]}, partition {here[1]}, "
                                   f"after {n - 1} rows (the first {'sent' if went else 'not seen sent'})")
            if block and here == block[:2]:
                with open(block[2], "w") as f:
                    json.dump({"batch": here[0], "partition": here[1], "pid": os.getpid()}, f)
                while True:
                    time.sleep(60)
        if pace:
            time.sleep(pace)
        return projected(value)

    return project


def start(spark, q: dict):
    """The query ``q`` (the keys of :data:`QUERY_KEYS`), started."""
    from pyspark.sql import functions as F

    project = F.udf(projector(q), "string", useArrow=False)
    source = (spark.readStream.format("kwire").option("kafka.bootstrap.servers", q["bootstrap"])
              .option("subscribe", q["source"]).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(q["max_offsets"])).load())
    out = source.select(F.col("key"), project(F.col("value").cast("string")).alias("value"))
    writer = (out.writeStream.format(q["sink"]).option("kafka.bootstrap.servers", q["bootstrap"])
              .option("topic", q["target"]).option("checkpointLocation", q["checkpoint"]))
    if q["sink"] == "kwire":
        writer = writer.option("deliveryGuarantee", "exactly-once")
    return writer.trigger(availableNow=True).start()


def run(spark, q: dict) -> dict:
    """The query run to its end: its id, its failure (None) and each batch's rows."""
    query = start(spark, q)
    try:
        query.awaitTermination()
        failed = None
    except Exception as e:  # noqa: BLE001 - reported to the test, which fails on it
        failed = str(e)[:4000]
    return {"id": query.id, "failed": failed,
            "batches": [(p["batchId"], p["numInputRows"]) for p in query.recentProgress]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jars", default="", help="comma-separated jars for the session (Spark's Kafka connector)")
    args = p.parse_args()

    from kwire.demo import spark_session

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = spark_session("kwire-eos-faults", [j for j in args.jars.split(",") if j], master="local[2,3]")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")   # the sink sends while the task runs
    print(READY, flush=True)
    for line in sys.stdin:
        print(ANSWER + json.dumps(run(spark, json.loads(line))), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
