"""``format("kwire")`` against Spark's own Kafka connector
(``format("kafka")``, spark-sql-kafka-0-10 of the installed PySpark), on the
same topics of the same broker: the same rows, column for column (key,
value, topic, partition, offset, timestamp, timestampType, headers), the
same Spark partitions where Spark defines the split, the same micro-batch
boundaries, and the same records written by either sink, batch and
streaming (a streaming write also after a restart from its checkpoint).

Each broker gets one data set (:func:`data`, module-scoped), read by every
case: a topic per codec (null and empty keys and values, headers with
empty and null values, a repeated and a non-ASCII header key, explicit
timestamps), a LogAppendTime topic, a transactional topic with aborted
transactions, and two topics for the streaming reads. The sinks' records
are compared in :func:`test_sink_writes_the_same_records` and, streaming,
:func:`test_stream_sinks_write_the_same_records_and_resume`; a transaction
left open in :func:`test_open_transaction`.

A deliberate difference of the sinks: a record without key and without
``partition`` goes to the producer's sticky partition, which both move on
after ``batch.size`` bytes (KIP-794), but each chooses at random and the
connector keeps its producer across micro-batches. Such records are compared as a
multiset per topic; keyed ones per partition, in order.

A deliberate difference on every broker: Spark's batch planner keeps
``earliest`` and ``latest`` unresolved until the executors read, so it
cannot size such ranges: it then ignores ``maxRecordsPerPartition`` and runs
a task for an empty range; kwire resolves every bound on the driver (as
Spark's streaming source does) and splits as Spark's range calculator does
on concrete offsets (the split cases give concrete ends;
:func:`test_spark_partitions_where_spark_plans_with_unresolved_bounds`
records the difference). The rows are the same.

Deliberate differences on Tansu 0.6.0 only:

* ListOffsets ``latest`` trails the log (the last batch's base offset + 1).
  kwire raises ``latest`` to the Fetch high watermark, the connector takes
  the answer as it is and stops early. On Tansu the connector is therefore
  given the partitions' real ends as JSON ``endingOffsets`` wherever the
  case says ``latest`` (or -1), while kwire keeps ``latest``: the rows
  agreeing shows that kwire's ``latest`` is the real end.
  :func:`test_latest_where_list_offsets_trails_the_log`
  records the difference. The streaming topics end with a one-record batch
  per partition, where Tansu's answer is right, so the streaming reads are
  compared on Tansu too.
* Timestamp lookups are broken (Tansu answers offset 0 with timestamp -1):
  the timestamp cases run on Kafka only.
* Fetch responses carry no aborted-transactions list, so a read_committed
  reader returns aborted records (the connector's Java consumer as much as
  kwire): the read_committed cases run on Kafka only.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, functions as F
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from kwire import partition_for_key
from kwire.admin import Admin, NewTopic
from kwire.consumer import Consumer
from kwire.producer import Producer
from kwire.spark.offsets import OffsetRange, split_ranges
from kwire.types import TopicPartition

from .conftest import kwire_write, new_topic

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
#: Records per codec topic, over 2 partitions (100 in each).
CODEC_RECORDS = 200
CODEC_PARTITIONS = 2
#: Records in the LogAppendTime topic (zstd, over 2 partitions).
LOG_APPEND_RECORDS = 60
#: Records per partition of the two streaming topics (uneven, so that
#: maxOffsetsPerTrigger's proportional shares round differently).
STREAM_SIZES = {"a": (50, 120), "b": (7, 300, 23)}
#: Transactions (and plain records) of the transactional topic, in order.
TXN_STEPS = ("commit", "abort", "plain", "commit", "abort", "commit")
TXN_PARTITIONS = 2
TXN_RECORDS = 10           # per transaction (or plain step), over both partitions

TP = Tuple[str, int]
Row = Tuple[Any, ...]
Options = Dict[str, str]

TANSU_NO_TIMESTAMP_LOOKUP = "Tansu 0.6.0's ListOffsets by timestamp is broken (offset 0, timestamp -1)"
TANSU_NO_ABORTED_LIST = ("Tansu 0.6.0 sends no aborted-transactions list: read_committed readers (the connector's "
                         "as much as kwire's) return aborted records")


# --------------------------------------------------------------------- data
@dataclass(frozen=True)
class Dataset:
    """The topics of one broker and the real end of each of their partitions."""

    prefix: str
    t0: int                                   # record i of a codec topic has timestamp t0 + i (ms)
    codec_topics: Tuple[str, ...]
    log_append_topic: str                     # message.timestamp.type=LogAppendTime
    txn_topic: str
    stream_topics: Tuple[str, ...]
    ends: Dict[TP, int]

    def partitions(self, options: Mapping[str, str]) -> List[TP]:
        """The partitions a case's subscription option covers."""
        if "assign" in options:
            return sorted((t, p) for t, ps in json.loads(options["assign"]).items() for p in ps)
        if "subscribe" in options:
            topics = {t.strip() for t in options["subscribe"].split(",")}
            return sorted(tp for tp in self.ends if tp[0] in topics)
        pattern = options["subscribePattern"]
        return sorted(tp for tp in self.ends if re.fullmatch(pattern, tp[0]))

    def with_real_ends(self, options: Mapping[str, str]) -> Options:
        """``options`` with ``latest`` ending offsets (the default, the
        word, or -1 in JSON) replaced by the partitions' real ends: what the
        connector is given on Tansu, whose ListOffsets latest trails the log."""
        out = dict(options)
        if "endingOffsetsByTimestamp" in out or "endingTimestamp" in out:
            return out
        given = out.get("endingOffsets", "latest")
        if given == "latest":
            ends = {tp: self.ends[tp] for tp in self.partitions(options)}
        else:
            ends = {(t, int(p)): (self.ends[(t, int(p))] if o == -1 else o)
                    for t, ps in json.loads(given).items() for p, o in ps.items()}
        out["endingOffsets"] = offsets_json(ends)
        return out


def offsets_json(offsets: Mapping[TP, int]) -> str:
    """Spark's Kafka offset JSON: ``{"topic": {"0": 23}}``."""
    out: Dict[str, Dict[str, int]] = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = o
    return json.dumps(out)


def _record(i: int) -> Tuple[Optional[bytes], Optional[bytes], Optional[List[Tuple[str, Optional[bytes]]]]]:
    """Record ``i``'s key (none every 5th, empty every 13th), value (null
    every 7th, empty every 11th) and headers (every 3rd: one with an empty
    value, one with a null value, a key twice, a key not ASCII)."""
    key = None if i % 5 == 0 else b"" if i % 13 == 1 else b"key-%06d" % i
    value = None if i % 7 == 3 else b"" if i % 11 == 2 else b"value-%d-" % i + bytes(i % 50)
    headers = [("n", b"%d" % i), ("empty", b""), ("null", None), ("n", b"again"), ("ключ", b"\xff")] \
        if i % 3 == 0 else None
    return key, value, headers


def _produce_codec_topic(bootstrap: str, topic: str, codec: str, t0: int, count: int = CODEC_RECORDS) -> None:
    with Producer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=5) as p:
        for i in range(count):
            key, value, headers = _record(i)
            p.send(topic, value, key=key, headers=headers, partition=i % CODEC_PARTITIONS, timestamp_ms=t0 + i)
        p.flush()


def _produce_transactions(bootstrap: str, topic: str) -> Dict[TP, int]:
    """:data:`TXN_STEPS` on ``topic``: transactions committed and aborted
    by a transactional producer, plain records by another producer between
    them. Returns each partition's end (records plus one marker per
    transaction, every transaction touching every partition)."""
    ends = {(topic, p): 0 for p in range(TXN_PARTITIONS)}
    i = 0
    with Producer(bootstrap_servers=bootstrap, transactional_id=f"eqv-{uuid.uuid4().hex[:10]}", linger_ms=2) as txn, \
            Producer(bootstrap_servers=bootstrap, linger_ms=2) as plain:
        txn.init_transactions(20)
        for step in TXN_STEPS:
            p = plain if step == "plain" else txn
            if step != "plain":
                txn.begin_transaction()
            for _ in range(TXN_RECORDS):
                key, value, headers = _record(i)
                p.send(topic, b"%s-%d" % (step.encode(), i), key=key, headers=headers, partition=i % TXN_PARTITIONS)
                ends[(topic, i % TXN_PARTITIONS)] += 1
                i += 1
            if step == "plain":
                plain.flush()
                continue
            txn.flush(10)
            txn.commit_transaction(20) if step == "commit" else txn.abort_transaction(20)
            for tp in ends:
                ends[tp] += 1                   # the transaction's marker
    return ends


def _produce_stream_topic(bootstrap: str, topic: str, sizes: Sequence[int], first: int = 0) -> None:
    """``sizes[p]`` records in partition p (:func:`_record` from ``first``
    on), the last one alone in its batch (where Tansu's ListOffsets latest,
    the last batch's base offset + 1, is the real end)."""
    with Producer(bootstrap_servers=bootstrap, compression_type="lz4", linger_ms=5) as p:
        for part, size in enumerate(sizes):
            for i in range(first, first + size - 1):
                key, value, headers = _record(i)
                p.send(topic, value, key=key, headers=headers, partition=part)
        p.flush()
        for part, size in enumerate(sizes):
            p.send(topic, b"last", partition=part)
            p.flush()


@pytest.fixture(scope="module")
def data(broker) -> Dataset:
    """This broker's data set, produced once and read by every case."""
    prefix = f"eqv{time.monotonic_ns()}"
    t0 = int(time.time()) * 1000 - 3_600_000
    bootstrap = broker.bootstrap
    ends: Dict[TP, int] = {}
    codec_topics = []
    for codec in CODECS:
        topic = new_topic(bootstrap, CODEC_PARTITIONS, prefix=f"{prefix}-c-{codec}")
        _produce_codec_topic(bootstrap, topic, codec, t0)
        codec_topics.append(topic)
        ends.update({(topic, p): len(range(p, CODEC_RECORDS, CODEC_PARTITIONS)) for p in range(CODEC_PARTITIONS)})
    log_append_topic = f"{prefix}-l-{os.getpid()}"
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(log_append_topic, CODEC_PARTITIONS,
                                      configs={"message.timestamp.type": "LogAppendTime"})])
    _produce_codec_topic(bootstrap, log_append_topic, "zstd", t0, LOG_APPEND_RECORDS)
    ends.update({(log_append_topic, p): LOG_APPEND_RECORDS // CODEC_PARTITIONS for p in range(CODEC_PARTITIONS)})
    txn_topic = new_topic(bootstrap, TXN_PARTITIONS, prefix=f"{prefix}-x")
    ends.update(_produce_transactions(bootstrap, txn_topic))
    stream_topics = []
    for name, sizes in STREAM_SIZES.items():
        topic = new_topic(bootstrap, len(sizes), prefix=f"{prefix}-s-{name}")
        _produce_stream_topic(bootstrap, topic, sizes)
        stream_topics.append(topic)
        ends.update({(topic, p): size for p, size in enumerate(sizes)})
    if broker.is_tansu:
        # the streaming comparison on Tansu rests on its ListOffsets latest being right for these topics
        with Consumer(bootstrap_servers=bootstrap) as c:
            tps = [TopicPartition(*tp) for tp in ends if tp[0] in stream_topics]
            listed = {(tp.topic, tp.partition): o for tp, o in c.end_offsets(tps).items()}
        assert listed == {tp: e for tp, e in ends.items() if tp[0] in stream_topics}, listed
    return Dataset(prefix, t0, tuple(codec_topics), log_append_topic, txn_topic, tuple(stream_topics), ends)


# --------------------------------------------------------------- comparing
def read(spark, fmt: str, bootstrap: str, options: Mapping[str, str]) -> DataFrame:
    reader = spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def collect(df: DataFrame, with_task: bool = False) -> Tuple[List[Row], List[Tuple[str, int, int, int, int]]]:
    """``df``'s rows as tuples in the schema's column order, the timestamp
    as microseconds, sorted by topic, partition and offset; with
    ``with_task`` also each Spark partition's (topic, partition, first
    offset, last offset, rows), sorted: how the read was split into tasks
    (from the same scan)."""
    columns = [F.unix_micros("timestamp").alias("timestamp") if c == "timestamp" else F.col(c) for c in df.columns]
    if with_task:
        columns.append(F.spark_partition_id())
    out, tasks = [], {}
    for r in df.select(*columns).collect():
        row = []
        for name, v in zip(df.columns, r):
            if isinstance(v, (bytes, bytearray)):
                v = bytes(v)
            elif name == "headers" and v is not None:
                v = tuple((h["key"], None if h["value"] is None else bytes(h["value"])) for h in v)
            row.append(v)
        out.append(tuple(row))
        if with_task:
            task = tasks.setdefault((r[-1], r["topic"], r["partition"]), [r["offset"], r["offset"], 0])
            task[0], task[1], task[2] = min(task[0], r["offset"]), max(task[1], r["offset"]), task[2] + 1
    i = {c: n for n, c in enumerate(df.columns)}
    out.sort(key=lambda row: (row[i["topic"]], row[i["partition"]], row[i["offset"]]))
    return out, sorted((t, p, *v) for (_, t, p), v in tasks.items())


def rows(df: DataFrame) -> List[Row]:
    """:func:`collect`'s rows."""
    return collect(df)[0]


def assert_same_rows(theirs: List[Row], ours: List[Row], what: str) -> None:
    """Equal lists, or a failure showing the first rows that differ and
    how many rows each side has that the other lacks."""
    if theirs == ours:
        return
    n = next((k for k, (a, b) in enumerate(zip(theirs, ours)) if a != b), min(len(theirs), len(ours)))
    only_theirs = [r for r in theirs if r not in set(ours)]
    only_ours = [r for r in ours if r not in set(theirs)]
    pytest.fail(f"{what}: format('kafka') has {len(theirs)} rows, format('kwire') {len(ours)}; first difference "
                f"at row {n}:\n  kafka: {theirs[n] if n < len(theirs) else '(none)'}\n"
                f"  kwire: {ours[n] if n < len(ours) else '(none)'}\n"
                f"only in kafka: {len(only_theirs)} {only_theirs[:2]}\nonly in kwire: {len(only_ours)} {only_ours[:2]}")


def compare(spark, broker, data: Dataset, options: Mapping[str, str], splits: bool = False,
            tansu_connector_options: Optional[Mapping[str, str]] = None, ours=None) -> List[Row]:
    """Read ``options`` with both sources and require the same schema and
    rows (and, with ``splits``, the same Spark partitions); on Tansu the
    connector gets the real ends for ``latest`` (see the module's doc), or
    ``tansu_connector_options`` where given. ``ours(options)`` makes
    kwire's DataFrame (default: ``format("kwire")``)."""
    theirs_opts = dict(options)
    if broker.is_tansu:
        theirs_opts = dict(tansu_connector_options or data.with_real_ends(options))
    theirs = read(spark, "kafka", broker.bootstrap, theirs_opts)
    ours = read(spark, "kwire", broker.bootstrap, options) if ours is None else ours(options)
    assert ours.schema == theirs.schema
    got, their_tasks = collect(theirs, with_task=splits)
    mine, our_tasks = collect(ours, with_task=splits)
    assert_same_rows(got, mine, f"{options}")
    if splits:
        assert ours.rdd.getNumPartitions() == theirs.rdd.getNumPartitions(), options
        assert our_tasks == their_tasks, options
    return got


# ------------------------------------------------------------- batch cases
def _c(d: Dataset, codec: str) -> str:
    return d.codec_topics[CODECS.index(codec)]


def _assign_json_bounds(d: Dataset) -> Options:
    a, b = _c(d, "gzip"), _c(d, "zstd")
    return {"assign": json.dumps({a: [0, 1], b: [1]}), "includeHeaders": "true",
            "startingOffsets": offsets_json({(a, 0): 5, (a, 1): -2, (b, 1): 17}),
            "endingOffsets": offsets_json({(a, 0): -1, (a, 1): 40, (b, 1): -1})}


def _timestamps(d: Dataset, start: Mapping[int, int], end: Optional[Mapping[int, int]] = None,
                **extra: str) -> Options:
    """startingOffsetsByTimestamp (and endingOffsetsByTimestamp) on the lz4
    topic, each partition's timestamp given as an offset from t0 (record i
    has t0 + i; :data:`FUTURE` is past every record)."""
    t = _c(d, "lz4")
    out = {"subscribe": t, "startingOffsetsByTimestamp": offsets_json({(t, p): d.t0 + s for p, s in start.items()}),
           **extra}
    if end is not None:
        out["endingOffsetsByTimestamp"] = offsets_json({(t, p): d.t0 + e for p, e in end.items()})
    return out


def _two_topics_to_their_ends(d: Dataset, **extra: str) -> Options:
    """The gzip and zstd topics from earliest to their real ends, given as
    JSON: concrete ends, from which Spark's batch planner sizes the ranges
    (see :func:`test_spark_partitions_where_spark_plans_with_unresolved_bounds`)."""
    topics = (_c(d, "gzip"), _c(d, "zstd"))
    ends = {tp: e for tp, e in d.ends.items() if tp[0] in topics}
    return {"subscribe": ",".join(topics), "endingOffsets": offsets_json(ends), **extra}


def _one_empty(d: Dataset) -> Options:
    """Streaming topic b (7, 300 and 23 records) to offset 5, its end and 0:
    one range empty."""
    t = d.stream_topics[1]
    return {"subscribe": t, "startingOffsets": "earliest", "includeHeaders": "true",
            "endingOffsets": offsets_json({(t, 0): 5, (t, 1): -1, (t, 2): 0})}


FUTURE = 10 ** 6
#: name -> (the case's options for a data set, why it runs on Kafka only or None)
BATCH_CASES: Dict[str, Tuple[Callable[[Dataset], Options], Optional[str]]] = {
    "pattern-every-codec-headers": (lambda d: {"subscribePattern": f"{d.prefix}-c-.*", "includeHeaders": "true"}, None),
    "subscribe-list": (lambda d: {"subscribe": f"{_c(d, 'none')},{_c(d, 'snappy')}"}, None),
    "assign-json-offsets": (_assign_json_bounds, None),
    "json-start-latest-end": (lambda d: {"subscribe": _c(d, "lz4"), "endingOffsets": "latest",
                                         "startingOffsets": offsets_json({(_c(d, "lz4"), 0): 3,
                                                                          (_c(d, "lz4"), 1): -2})}, None),
    "earliest-json-end-one-empty": (_one_empty, None),
    "transactions-read-uncommitted": (lambda d: {"subscribe": d.txn_topic, "includeHeaders": "true"}, None),
    "log-append-time": (lambda d: {"subscribe": d.log_append_topic, "includeHeaders": "true"}, None),
    "transactions-read-committed": (lambda d: {"subscribe": d.txn_topic, "includeHeaders": "true",
                                               "kafka.isolation.level": "read_committed"}, TANSU_NO_ABORTED_LIST),
    "transactions-read-committed-json": (lambda d: {
        "assign": json.dumps({d.txn_topic: [0, 1]}), "kafka.isolation.level": "read_committed",
        "startingOffsets": offsets_json({(d.txn_topic, 0): 4, (d.txn_topic, 1): -2}),
        "endingOffsets": offsets_json({(d.txn_topic, 0): 19, (d.txn_topic, 1): -1})}, TANSU_NO_ABORTED_LIST),
    "starting-timestamp": (lambda d: {"subscribe": _c(d, "zstd"), "startingTimestamp": str(d.t0 + 100)},
                           TANSU_NO_TIMESTAMP_LOOKUP),
    "ending-timestamp": (lambda d: {"subscribe": _c(d, "zstd"), "endingTimestamp": str(d.t0 + 151),
                                    "startingOffsets": "earliest"}, TANSU_NO_TIMESTAMP_LOOKUP),
    "offsets-by-timestamp": (lambda d: _timestamps(d, {0: 30, 1: 101}, {0: 152, 1: FUTURE}),
                             TANSU_NO_TIMESTAMP_LOOKUP),
    "by-timestamp-no-match-latest": (lambda d: _timestamps(d, {0: FUTURE, 1: 44},
                                                           startingOffsetsByTimestampStrategy="latest"),
                                     TANSU_NO_TIMESTAMP_LOOKUP),
    "starting-timestamp-no-match-latest": (lambda d: {
        "subscribe": _c(d, "zstd"), "startingTimestamp": str(d.t0 + FUTURE),
        "startingOffsetsByTimestampStrategy": "latest"}, TANSU_NO_TIMESTAMP_LOOKUP),
    "by-timestamp-strategy-error-matched": (lambda d: _timestamps(d, {0: 1, 1: 2},
                                                                  startingOffsetsByTimestampStrategy="error"),
                                            TANSU_NO_TIMESTAMP_LOOKUP),
}

#: Cases whose Spark partitions are compared too: name -> options.
SPLIT_CASES: Dict[str, Callable[[Dataset], Options]] = {
    "min-partitions-below-the-count": lambda d: {"subscribe": f"{_c(d, 'none')},{_c(d, 'snappy')}",
                                                 "minPartitions": "3", "includeHeaders": "true"},
    # 100 offsets in each partition of the codec topic, 35 in each of the transactional topic's
    "min-partitions-uneven": lambda d: {"subscribe": f"{_c(d, 'none')},{d.txn_topic}", "minPartitions": "8"},
    "max-records-per-partition": lambda d: _two_topics_to_their_ends(d, maxRecordsPerPartition="30"),
    # pieces of 33, 33 and 34 offsets: a 33 stays whole, a 34 alone would be cut, and Spark keeps whole
    # every piece of a Kafka partition that has a whole one
    "max-records-and-min-partitions": lambda d: _two_topics_to_their_ends(d, maxRecordsPerPartition="40",
                                                                          minPartitions="18"),
}


@pytest.mark.parametrize("case", sorted(BATCH_CASES))
def test_batch_read_same_rows(spark, broker, data, case):
    make, kafka_only = BATCH_CASES[case]
    if broker.is_tansu and kafka_only:
        pytest.skip(kafka_only)
    got = compare(spark, broker, data, make(data))
    key, value, topic, partition, offset, ts, ts_type, headers = range(8)
    if case == "pattern-every-codec-headers":
        # what the cases rely on: null keys and values, headers with empty and null values, records without
        # headers, each record's own CreateTime timestamp
        assert len(got) == CODEC_RECORDS * len(CODECS)
        assert {None, b""} <= {r[key] for r in got} and {None, b""} <= {r[value] for r in got}
        assert any(r[headers] is None for r in got)
        assert any(r[headers] == (("n", b"0"), ("empty", b""), ("null", None), ("n", b"again"), ("ключ", b"\xff"))
                   for r in got)
        assert {r[ts_type] for r in got} == {0}
        assert all(r[ts] == (data.t0 + r[offset] * CODEC_PARTITIONS + r[partition]) * 1000 for r in got)
    if case == "log-append-time" and broker.is_kafka:
        assert {r[ts_type] for r in got} == {1} and all(r[ts] > data.t0 * 1000 + 600_000_000 for r in got)
    if case == "transactions-read-uncommitted":
        assert sum(r[value].startswith(b"abort") for r in got) == TXN_RECORDS * TXN_STEPS.count("abort")


@pytest.mark.parametrize("case", sorted(SPLIT_CASES))
def test_batch_read_same_rows_and_spark_partitions(spark, broker, data, case):
    compare(spark, broker, data, SPLIT_CASES[case](data), splits=True)


def test_open_transaction(spark, broker, data):
    """A transaction left open while both sources read: read_uncommitted
    reads its records, read_committed (Kafka only: Tansu's last stable
    offset is not checked here, and it has no aborted lists) stops at the
    last stable offset, before them."""
    bootstrap = broker.bootstrap
    topic = new_topic(bootstrap, 1, prefix=f"{data.prefix}-open")
    with Producer(bootstrap_servers=bootstrap, transactional_id=f"eqv-open-{uuid.uuid4().hex[:10]}",
                  linger_ms=2) as txn:
        txn.init_transactions(20)
        for outcome in ("commit", "open"):
            txn.begin_transaction()
            for i in range(5):
                key, value, headers = _record(i)
                txn.send(topic, value, key=key, headers=headers, partition=0)
            txn.flush(10)
            if outcome == "commit":
                txn.commit_transaction(20)
        try:
            options = {"subscribe": topic, "includeHeaders": "true"}
            got = compare(spark, broker, data, options,
                          tansu_connector_options={**options, "endingOffsets": offsets_json({(topic, 0): 11})})
            assert [r[4] for r in got] == [*range(5), *range(6, 11)]       # the commit marker at 5
            if broker.is_kafka:
                got = compare(spark, broker, data, {**options, "kafka.isolation.level": "read_committed"})
                assert [r[4] for r in got] == list(range(5))
        finally:
            txn.abort_transaction(20)


def test_spark_partitions_where_spark_plans_with_unresolved_bounds(spark, broker, data):
    """A difference kept on purpose. Spark's batch planner leaves
    ``earliest`` and ``latest`` (-2 and -1) unresolved until its executors
    read, so it sizes such a range as -1 - -2 = one offset: with those
    bounds it never applies ``maxRecordsPerPartition`` (unless
    ``minPartitions`` calls for a split) and runs one task per Kafka
    partition, an empty one included. kwire resolves every bound on the
    driver, as Spark's streaming source does, and so splits as documented
    (into the pieces Spark makes from concrete bounds: the
    ``max-records-per-partition`` case) and runs no task for an empty range.
    The rows are the same (the batch cases)."""
    topics = f"{_c(data, 'gzip')},{_c(data, 'zstd')}"
    cases = [({"subscribe": topics, "maxRecordsPerPartition": "30"}, 2 * CODEC_PARTITIONS, 2 * CODEC_PARTITIONS * 4),
             (_one_empty(data), 3, 2)]
    for options, spark_tasks, kwire_tasks in cases:
        assert read(spark, "kafka", broker.bootstrap, options).rdd.getNumPartitions() == spark_tasks, options
        assert read(spark, "kwire", broker.bootstrap, options).rdd.getNumPartitions() == kwire_tasks, options


def test_starting_timestamp_without_match_fails_both(spark, broker, data):
    """``startingOffsetsByTimestampStrategy=error`` (the default) and a
    timestamp past every record of one partition: both sources fail the query."""
    if broker.is_tansu:
        pytest.skip(TANSU_NO_TIMESTAMP_LOOKUP)
    options = _timestamps(data, {0: 5, 1: FUTURE})
    for fmt in ("kafka", "kwire"):
        with pytest.raises(PySparkException, match="No offset matched from request of topic-partition"):
            read(spark, fmt, broker.bootstrap, options).count()


def test_latest_where_list_offsets_trails_the_log(spark, broker, data):
    """A difference kept on purpose: where a broker's ListOffsets latest
    trails its log (Tansu 0.6.0), the connector's ``latest`` is that answer
    and kwire's the Fetch high watermark, the real end. On Kafka both are
    the high watermark (the batch cases compare the rows)."""
    topic = _c(data, "none")
    tps = [TopicPartition(topic, p) for p in range(CODEC_PARTITIONS)]
    with Consumer(bootstrap_servers=broker.bootstrap) as c:
        listed = {(tp.topic, tp.partition): o for tp, o in c.end_offsets(tps).items()}
    real = {tp: e for tp, e in data.ends.items() if tp[0] == topic}
    theirs = rows(read(spark, "kafka", broker.bootstrap, {"subscribe": topic}))
    ours = rows(read(spark, "kwire", broker.bootstrap, {"subscribe": topic}))
    last = lambda got: {(r[2], r[3]): r[4] + 1 for r in got}  # noqa: E731  (each partition's last offset + 1)
    assert last(ours) == real
    assert last(theirs) == listed
    if broker.is_tansu:
        assert all(listed[tp] < real[tp] for tp in real), (listed, real)     # the batches hold many records each
    else:
        assert listed == real


def test_split_ranges_keeps_every_piece_of_a_whole_partition_whole():
    """Spark's ``KafkaOffsetRangeCalculator``: after ``maxRecordsPerPartition``
    cut a Kafka partition into pieces, ``minPartitions`` leaves every piece of
    that partition whole once one piece of it is too small to split (its set
    of unsplit ranges is keyed by topic-partition). 67 offsets in pieces of
    22, 22 and 23: the 23 stays whole beside the 22s."""
    ranges = [OffsetRange("t", 0, 0, 67), OffsetRange("t", 1, 0, 200)]
    got = split_ranges(ranges, min_partitions=18, max_records=30)
    assert [(r.partition, r.size) for r in got if r.partition == 0] == [(0, 22), (0, 22), (0, 23)]
    assert sum(r.size for r in got) == 267 and all(r.size > 0 for r in got)


# ------------------------------------------------------------------ streaming
@dataclass
class StreamRun:
    """What one availableNow query read: each micro-batch's rows, and its
    start and end offsets as Spark logged them."""

    batches: Dict[int, List[Row]]
    bounds: Dict[int, Tuple[Any, Any]]


def read_stream(spark, fmt: str, bootstrap: str, options: Mapping[str, str]) -> DataFrame:
    reader = spark.readStream.format(fmt).option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def start_available_now(writer: DataStreamWriter, checkpoint: str) -> StreamingQuery:
    return writer.option("checkpointLocation", checkpoint).trigger(availableNow=True).start()


def finish(q: StreamingQuery, what: str) -> StreamingQuery:
    """``q`` (under ``Trigger.AvailableNow``) waited for: it must end without error."""
    q.awaitTermination(180)
    assert not q.isActive and q.exception() is None, f"{what}: {q.exception()}"
    return q


def run_stream(spark, fmt: str, bootstrap: str, options: Mapping[str, str], checkpoint: str) -> StreamRun:
    batches: Dict[int, List[Row]] = {}

    def each(batch: DataFrame, batch_id: int) -> None:
        batches[batch_id] = rows(batch)

    q = finish(start_available_now(read_stream(spark, fmt, bootstrap, options).writeStream.foreachBatch(each),
                                   checkpoint), fmt)
    bounds = {}
    for p in q.recentProgress:
        if p["batchId"] in batches:
            (source,) = p["sources"]
            start = source["startOffset"]
            bounds[p["batchId"]] = (None if start is None else json.loads(start), json.loads(source["endOffset"]))
    assert sorted(bounds) == sorted(batches), (fmt, sorted(bounds), sorted(batches))
    return StreamRun(batches, bounds)


#: name -> (options for a data set, why Kafka only or None)
STREAM_CASES: Dict[str, Tuple[Callable[[Dataset], Options], Optional[str]]] = {
    "pattern-rate-limited": (lambda d: {"subscribePattern": f"{d.prefix}-s-.*", "startingOffsets": "earliest",
                                        "maxOffsetsPerTrigger": "150", "includeHeaders": "true"}, None),
    "json-start-transactions-read-committed": (lambda d: {
        "subscribe": d.txn_topic, "kafka.isolation.level": "read_committed", "maxOffsetsPerTrigger": "20",
        "startingOffsets": offsets_json({(d.txn_topic, 0): 3, (d.txn_topic, 1): -2})}, TANSU_NO_ABORTED_LIST),
}


@pytest.mark.parametrize("case", sorted(STREAM_CASES))
def test_stream_same_rows_and_batches(spark, broker, data, case, tmp_path):
    make, kafka_only = STREAM_CASES[case]
    if broker.is_tansu and kafka_only:
        pytest.skip(kafka_only)
    options = make(data)
    theirs = run_stream(spark, "kafka", broker.bootstrap, options, str(tmp_path / "kafka"))
    ours = run_stream(spark, "kwire", broker.bootstrap, options, str(tmp_path / "kwire"))
    assert len(theirs.batches) > 2
    assert ours.bounds == theirs.bounds
    for batch_id in sorted(theirs.batches):
        assert_same_rows(theirs.batches[batch_id], ours.batches.get(batch_id, []), f"{case}, batch {batch_id}")


# ----------------------------------------------------------------------- sink
def _sink_frame(spark) -> DataFrame:
    """Rows to write: string keys (some null), binary values, headers on
    some, an explicit partition for every keyless row and for some keyed
    ones (the others left to the partitioner's murmur2 of the key); one Spark
    partition, so each Kafka partition gets them in one order."""
    data = []
    for i in range(120):
        key = None if i % 6 == 0 else f"k{i}"
        part = i % 3 if key is None or i % 4 == 0 else None
        headers = [("h", f"{i}".encode()), ("z", b""), ("null", None)] if i % 2 else None
        data.append((key, f"v{i}".encode() + bytes(i % 9), part, headers))
    df = spark.createDataFrame(data, "key string, value binary, partition int, "
                                     "headers array<struct<key string, value binary>>")
    return df.coalesce(1)


def _written(spark, bootstrap: str, topics: Sequence[str]) -> Dict[str, List[Row]]:
    """Each topic's records, read back with format("kwire"), without the
    topic and the timestamp (the write's own)."""
    got = rows(read(spark, "kwire", bootstrap, {"subscribe": ",".join(topics), "includeHeaders": "true"}))
    out: Dict[str, List[Row]] = {t: [] for t in topics}
    for r in got:
        out[r[2]].append(r[:2] + r[3:5] + r[6:])
    return out


def connector_write(df: DataFrame, bootstrap: str, **options: str) -> None:
    writer = df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.save()


def test_sink_writes_the_same_records(spark, broker):
    """One DataFrame written by each sink to its own topic (``topic``
    option), then one with a ``topic`` column naming two topics per sink:
    the records read back are the same, offsets included, all but the
    timestamp."""
    bootstrap = broker.bootstrap
    theirs, ours = new_topic(bootstrap, 3, prefix="eqv-sink-kafka"), new_topic(bootstrap, 3, prefix="eqv-sink-kwire")
    df = _sink_frame(spark)
    connector_write(df, bootstrap, topic=theirs)
    kwire_write(df, bootstrap, topic=ours).save()
    got = _written(spark, bootstrap, [theirs, ours])
    assert len(got[theirs]) == 120
    assert_same_rows(got[theirs], got[ours], "sink, topic option")

    pairs = [(new_topic(bootstrap, 2, prefix="eqv-sinkcol-kafka"), new_topic(bootstrap, 2, prefix="eqv-sinkcol-kwire"))
             for _ in range(2)]
    base = spark.createDataFrame([(i % 2, f"k{i}", f"value {i}") for i in range(40)],
                                 "which int, key string, value string").coalesce(1)

    def with_topics(side: int) -> DataFrame:
        return base.select(F.when(F.col("which") == 0, pairs[0][side]).otherwise(pairs[1][side]).alias("topic"),
                           "key", "value")

    connector_write(with_topics(0), bootstrap)
    kwire_write(with_topics(1), bootstrap).save()
    got = _written(spark, bootstrap, [t for pair in pairs for t in pair])
    for theirs, ours in pairs:
        assert len(got[theirs]) == 20
        assert_same_rows(got[theirs], got[ours], "sink, topic column")


# ------------------------------------------------------------ streaming sink
#: The streaming sinks' source topic: records per partition before the first
#: run, then those appended before the restart.
SINK_SOURCE_SIZES = ((40, 70, 25), (12, 30, 9))
SINK_PARTITIONS = 3                       # of the source topic and of every output topic
SINK_TRIGGER = "40"                       # maxOffsetsPerTrigger: 135 offsets in 4 micro-batches, then 51 in 2


@dataclass(frozen=True)
class StreamSink:
    """How a streaming write is made of the source's rows (key, value,
    headers): with the source's ``partition`` column (each record back to
    the partition it came from, the micro-batch's Spark tasks in parallel)
    or without (keyed records to their key's murmur2 partition, keyless
    ones where each producer's partitioner puts them; one Spark task per
    micro-batch, so each output partition gets its rows in one order); to
    the ``topic`` option's topic, or to two topics by a ``topic`` column
    (the source partition's parity)."""

    partition_column: bool
    topic_column: bool

    def topics(self, bootstrap: str, fmt: str) -> List[str]:
        return [new_topic(bootstrap, SINK_PARTITIONS, prefix=f"eqv-ssink-{fmt}") for _ in range(1 + self.topic_column)]

    def writer(self, stream: DataFrame, fmt: str, bootstrap: str, topics: Sequence[str]) -> DataStreamWriter:
        columns: List[Any] = ["key", "value", "headers"]
        if self.topic_column:
            columns.append(F.when(F.col("partition") % 2 == 0, topics[0]).otherwise(topics[1]).alias("topic"))
        df = stream.select(*columns, *(["partition"] if self.partition_column else []))
        writer = (df if self.partition_column else df.coalesce(1)).writeStream.format(fmt)
        writer = writer.option("kafka.bootstrap.servers", bootstrap)
        return writer if self.topic_column else writer.option("topic", topics[0])

    def check(self, source: List[Row], theirs: List[List[Row]], ours: List[List[Row]], what: str) -> None:
        """Each output topic of either sink against the other's and against
        the source rows sent to it (rows as :func:`_written` gives them:
        key, value, partition, offset, timestampType, headers)."""
        for n, (t, o) in enumerate(zip(theirs, ours)):
            sent = [r for r in source if not self.topic_column or r[2] % 2 == n]
            if self.partition_column:           # the source's records, offsets included: each exactly once
                assert_same_rows(t, o, f"{what}, topic {n}")
                assert_same_rows(sent, o, f"{what}, topic {n}: the source (as 'kafka') against kwire's sink")
                continue
            keyed = lambda got: [(r[2], r[0], r[1], r[5]) for r in got if r[0] is not None]  # noqa: E731
            assert_same_rows(keyed(t), keyed(o), f"{what}, topic {n}: keyed records per partition")
            assert all(p == partition_for_key(k, SINK_PARTITIONS) for p, k, _, _ in keyed(o)), what
            records = lambda got: Counter((r[0], r[1], r[5]) for r in got)  # noqa: E731
            assert records(t) == records(o) == records(sent), f"{what}, topic {n}: records (exactly once)"


STREAM_SINKS = {"partition-column-topic-option": StreamSink(partition_column=True, topic_column=False),
                "key-partitioner-topic-column": StreamSink(partition_column=False, topic_column=True)}


@pytest.mark.parametrize("case", sorted(STREAM_SINKS))
def test_stream_sinks_write_the_same_records_and_resume(spark, broker, case, tmp_path):
    """One source topic (null and empty keys, null values, headers with
    null values; each partition's last record alone in its batch, for
    Tansu's ListOffsets latest) streamed by the connector's source under
    ``Trigger.AvailableNow`` with ``maxOffsetsPerTrigger`` into
    ``writeStream.format("kafka")`` and ``writeStream.format("kwire")``, each
    to its own topics with its own checkpoint; then rows are appended and
    both queries run again from their checkpoints. After each run both
    sinks hold the same records, every source row exactly once."""
    bootstrap, sink = broker.bootstrap, STREAM_SINKS[case]
    source = new_topic(bootstrap, SINK_PARTITIONS, prefix="eqv-ssink-source")
    outputs = {fmt: sink.topics(bootstrap, fmt) for fmt in ("kafka", "kwire")}
    options = {"subscribe": source, "startingOffsets": "earliest", "maxOffsetsPerTrigger": SINK_TRIGGER,
               "includeHeaders": "true"}
    for run, sizes in enumerate(SINK_SOURCE_SIZES):
        _produce_stream_topic(bootstrap, source, sizes, first=1000 * run)
        queries = {fmt: start_available_now(sink.writer(read_stream(spark, "kafka", bootstrap, options), fmt, bootstrap,
                                                        topics), str(tmp_path / fmt))
                   for fmt, topics in outputs.items()}                  # the two queries run side by side
        batches = {fmt: [p["numInputRows"] for p in finish(q, f"{case}, {fmt} sink, run {run}").recentProgress
                         if p["numInputRows"]] for fmt, q in queries.items()}
        assert batches["kwire"] == batches["kafka"], batches
        assert len(batches["kafka"]) > 1 and sum(batches["kafka"]) == sum(sizes), batches      # the new rows only
        written = _written(spark, bootstrap, [source, *outputs["kafka"], *outputs["kwire"]])
        got = written[source]
        assert {None, b""} <= {r[0] for r in got} and None in {r[1] for r in got}
        assert any(h is not None and ("null", None) in h for h in (r[5] for r in got))
        sink.check(got, [written[t] for t in outputs["kafka"]], [written[t] for t in outputs["kwire"]],
                   f"{case}, run {run}")
