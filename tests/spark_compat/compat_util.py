"""Helpers of the compatibility subset (see conftest.py): topics, records
and rows, with kwire's own clients (from the release's virtualenv)."""

from __future__ import annotations

import itertools
import os
import time
from typing import Any, Callable, List, Optional, Tuple

from kwire.admin import Admin, NewTopic
from kwire.producer import Producer

_names = itertools.count()

#: topic, partition, offset, key, value, timestamp (ms), timestampType, headers
Row = Tuple[Any, ...]


def new_topic(bootstrap: str, partitions: int, prefix: str = "compat") -> str:
    name = f"{prefix}-{os.getpid()}-{next(_names)}"
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(name, num_partitions=partitions)])
    return name


def produce(bootstrap: str, topic: str, count: int, partitions: int, start: int = 0) -> None:
    """``count`` records over the partitions: every 5th without key, every
    3rd with two headers (one empty)."""
    with Producer(bootstrap_servers=bootstrap, linger_ms=2) as p:
        for i in range(start, start + count):
            key = None if i % 5 == 0 else b"key-%06d" % i
            headers = [("n", b"%d" % i), ("empty", b"")] if i % 3 == 0 else None
            p.send(topic, b"value-%d-" % i + bytes(i % 50), key=key, headers=headers, partition=i % partitions)
        p.flush()


def _bytes(v: Optional[Any]) -> Optional[bytes]:
    return None if v is None else bytes(v)


def wait_until(ready: Callable[[], bool], timeout: float = 30.0) -> None:
    """Wait for ``ready()`` (Spark's listener bus delivers events a moment after the query's)."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.1)


def rows(df) -> List[Row]:
    """A Kafka-schema DataFrame's rows, sorted, as plain values."""
    from pyspark.sql import functions as F

    out = []
    for r in df.withColumn("ms", F.expr("CAST(UNIX_MILLIS(timestamp) AS BIGINT)")).collect():
        d = r.asDict()
        headers = d.get("headers")
        out.append((d["topic"], d["partition"], d["offset"], _bytes(d["key"]), _bytes(d["value"]), d["ms"],
                    d["timestampType"], None if headers is None else tuple((h["key"], _bytes(h["value"]))
                                                                          for h in headers)))
    return sorted(out, key=lambda r: r[:3])


def read(spark, fmt: str, bootstrap: str, **options: str):
    reader = spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def read_stream(spark, fmt: str, bootstrap: str, **options: str):
    reader = spark.readStream.format(fmt).option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def available_now(df, checkpoint: str, fmt: str = "memory", name: Optional[str] = None, **options: str):
    """``df`` written under ``Trigger.AvailableNow``, waited for: it must end without error."""
    writer = df.writeStream.format(fmt).option("checkpointLocation", checkpoint)
    if name is not None:
        writer = writer.queryName(name)
    for k, v in options.items():
        writer = writer.option(k, v)
    q = writer.trigger(availableNow=True).start()
    q.awaitTermination(120)
    assert not q.isActive and q.exception() is None, q.exception()
    return q


def start_foreach_batch(writer: Any) -> Any:
    """``writer.start()``, tried up to three times while Spark Connect's
    server gives up on the foreachBatch Python worker it forked: it waits a
    hard-coded 10 s (PythonWorkerFactory.createSimpleWorker) for that worker
    to import pyspark.sql.connect and connect back, which a loaded 2-core CI
    machine has missed. No query has started then: retrying loses nothing."""
    for attempt in range(3):
        try:
            return writer.start()
        except Exception as e:  # noqa: BLE001 - only Spark's worker start-up timeout is retried
            if "waiting for the Python worker to connect back" not in str(e) or attempt == 2:
                raise
    raise AssertionError("unreachable")


def committed_values(bootstrap: str, topic: str, partitions: int, settle: float = 30.0) -> List[bytes]:
    """Every value of ``topic`` a read_committed reader sees, sorted, once
    the last stable offsets reached the logs' ends (up to ``settle`` s:
    EndTxn is answered before its coordinator has written the markers)."""
    import time

    from kwire.consumer import Consumer

    tps = [(topic, p) for p in range(partitions)]
    with Consumer(bootstrap_servers=bootstrap, group_id=None) as raw:
        log_ends = raw.end_offsets(tps)
    with Consumer(bootstrap_servers=bootstrap, isolation_level="read_committed", group_id=None) as c:
        c.assign(tps)
        c.seek_to_beginning(*tps)
        ends, out, deadline = c.end_offsets(tps), [], time.monotonic() + settle
        while ends != log_ends and time.monotonic() < deadline:
            time.sleep(0.2)
            ends = c.end_offsets(tps)
        while any(c.position(tp) < ends[tp] for tp in tps):
            out.extend(r.value for rs in c.poll(1.0).values() for r in rs)
        return sorted(out)
