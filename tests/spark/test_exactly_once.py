"""``deliveryGuarantee=exactly-once`` (kwire.spark.exactly_once) in the
suite's Spark session, on Apache Kafka: batch writes visible whole or not
at all, the options refused, and the driver's commit and abort against a
real coordinator. The streaming fault tests (a task failing, the driver
killed mid-commit) run queries in child processes: test_exactly_once_faults.py."""

from __future__ import annotations

import pytest
from pyspark.errors import PySparkException

from kwire.admin import Admin
from kwire.consumer import Consumer
from kwire.spark.exactly_once import Prepared, TaskIdentity, commit, marker_batch
from kwire.spark.options import parse_sink_options

from .conftest import kwire_write, new_topic


def read_values(bootstrap: str, topic: str, partitions: int, committed: bool = True, settle: float = 30.0) -> list:
    """Every value of ``topic``, read_committed (or read_uncommitted), to its
    end. read_committed waits up to ``settle`` s for the last stable offsets
    to reach the logs' ends: EndTxn is answered before its coordinator has
    written the markers, so a transaction just committed (or aborted) can
    still hold them back for a moment (0: read what is stable now, as with
    transactions left open on purpose)."""
    c = Consumer(bootstrap_servers=bootstrap, isolation_level="read_committed" if committed else "read_uncommitted",
                 enable_auto_commit=False, group_id=None)
    try:
        tps = [(topic, p) for p in range(partitions)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        ends = c.end_offsets(tps)
        if committed and settle:
            ends = _settled(bootstrap, c, tps, ends, settle)
        out = []
        while any(c.position(tp) < ends[tp] for tp in tps):
            out.extend(r.value for rs in c.poll(1.0).values() for r in rs)
        return sorted(out)
    finally:
        c.close()


def _settled(bootstrap: str, c: Consumer, tps: list, ends: dict, settle: float) -> dict:
    """The read_committed ends once they equal the logs' ends (or after ``settle`` s)."""
    import time

    with Consumer(bootstrap_servers=bootstrap, group_id=None) as raw:
        log_ends = raw.end_offsets(tps)
    deadline = time.monotonic() + settle
    while ends != log_ends and time.monotonic() < deadline:
        time.sleep(0.2)
        ends = c.end_offsets(tps)
    return ends


def test_options_refused_and_checked():
    base = {"kafka.bootstrap.servers": "localhost:1", "topic": "t"}
    assert not parse_sink_options(base).exactly_once
    sink = parse_sink_options(dict(base, deliveryGuarantee="Exactly-Once", transactionalIdPrefix="etl.orders"))
    assert sink.exactly_once and sink.transactional_id_prefix == "etl.orders"
    assert sink.producer_config()["transaction.timeout.ms"] == 900_000
    for bad, match in [({"deliveryGuarantee": "twice"}, "must be at-least-once or exactly-once"),
                       ({"transactionalIdPrefix": "p"}, "needs deliveryGuarantee=exactly-once"),
                       ({"deliveryGuarantee": "exactly-once", "kafka.transactional.id": "x"}, "derives one per"),
                       ({"deliveryGuarantee": "exactly-once", "kafka.acks": "1"}, "acks=all"),
                       ({"deliveryGuarantee": "exactly-once", "transactionalIdPrefix": "a b"}, "must be 1 to 200")]:
        with pytest.raises(Exception, match=match):
            parse_sink_options(dict(base, **bad))
    ok = parse_sink_options(dict(base, deliveryGuarantee="exactly-once", **{"kafka.acks": "all"}))
    assert ok.exactly_once


def test_batch_write_is_visible_whole(spark, broker):
    if broker.is_tansu:
        pytest.skip("Apache Kafka only, for CI's time: Tansu runs the same sink in the streaming test")
    topic = new_topic(broker.bootstrap, 3)
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(600)], "key string, value string").repartition(4)
    kwire_write(df, broker.bootstrap, topic=topic, deliveryGuarantee="exactly-once").save()
    assert read_values(broker.bootstrap, topic, 3) == sorted(f"v{i}".encode() for i in range(600))


def test_a_failed_batch_write_leaves_nothing_visible(spark, broker):
    """One of four tasks fails after the other three wrote their rows in
    open transactions: the job fails, Spark's abort() aborts those, and a
    read_committed reader sees nothing (a read_uncommitted one sees the
    rows were written)."""
    from pyspark.sql import functions as F

    if broker.is_tansu:
        pytest.skip("Tansu 0.6.0 sends no aborted-transactions list: read_committed readers return aborted records")
    topic = new_topic(broker.bootstrap, 2)
    boom = F.udf(lambda v: v if v != "v599" else 1 // 0, "string")
    df = spark.createDataFrame([(f"v{i}",) for i in range(600)], "value string").repartition(4, "value")
    with pytest.raises(PySparkException, match="ZeroDivisionError"):
        kwire_write(df.select(boom("value").alias("value")), broker.bootstrap, topic=topic,
                    deliveryGuarantee="exactly-once").save()
    assert read_values(broker.bootstrap, topic, 2) == []
    assert len(read_values(broker.bootstrap, topic, 2, committed=False)) > 0


def test_commit_and_marker_against_the_coordinator(broker):
    """The task's and the driver's halves outside Spark: prepared in one
    client, committed by another (which never had the producer id),
    committed again (idempotent), and the marker read back."""
    from kwire.spark.exactly_once import prepare
    import pyarrow as pa

    topic = new_topic(broker.bootstrap, 1)
    sink = parse_sink_options({"kafka.bootstrap.servers": broker.bootstrap, "topic": topic,
                               "deliveryGuarantee": "exactly-once"})
    ident = TaskIdentity(f"kwire-test-{topic}", 0, 7)
    rows = pa.record_batch([pa.array([b"a", b"b", b"c"])], names=["value"])
    prepared = prepare(iter([rows]), sink, ident)
    assert prepared.producer_id >= 0 and prepared.records == 3
    assert read_values(broker.bootstrap, topic, 1, settle=0) == []            # not committed yet
    msg = Prepared(**vars(prepared))
    assert commit([msg], sink, 7) == 3
    assert commit([msg], sink, 7) == 3                   # a repeated EndTxn is answered as the first
    assert read_values(broker.bootstrap, topic, 1) == [b"a", b"b", b"c"]
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        assert marker_batch(admin, ident.transactional_id, 30.0) == 7
    again = prepare(iter([rows]), sink, ident)           # batch 7 run again: nothing written
    assert again.already_committed and again.producer_id == -1
    with pytest.raises(Exception, match="batch 8: the tasks wrote batch 7"):
        commit([again], sink, 8)


def test_cli_aborts_and_forgets_a_stopped_querys_leftovers(kafka, capsys):
    """``kwire transactions abort --query`` aborts the transactions a query
    left open (the partitions' read_committed readers move on), and
    ``forget`` deletes its marker groups too; the sink's names are the ones
    the command's pattern matches."""
    import json
    import re
    import uuid

    import pyarrow as pa

    from kwire.admin_ops.leftovers import id_pattern, query_prefix
    from kwire.spark.exactly_once import job_prefix, prepare
    from support.cli_run import cli_runner

    bootstrap = kafka.bootstrap("plaintext")
    query = str(uuid.uuid4())
    assert re.fullmatch(id_pattern(query_prefix(query)), TaskIdentity(query_prefix(query), 12, 3).transactional_id)
    sink = parse_sink_options({"kafka.bootstrap.servers": bootstrap, "topic": new_topic(bootstrap, 2),
                               "deliveryGuarantee": "exactly-once"})
    assert re.fullmatch(id_pattern("kwire-write"), TaskIdentity(job_prefix(sink), 0, None).transactional_id)
    rows = pa.record_batch([pa.array([b"x", b"y"])], names=["value"])
    done = prepare(iter([rows]), sink, TaskIdentity(query_prefix(query), 0, 0))
    commit([Prepared(**vars(done))], sink, 0)                                  # partition 0: a marker
    for p in (0, 1):                                                            # batch 1 left open
        prepare(iter([rows]), sink, TaskIdentity(query_prefix(query), p, 1))
    assert read_values(bootstrap, sink.topic, 2, settle=0) == [b"x", b"y"]    # batch 1 still open
    run = cli_runner(capsys, bootstrap)
    _, out, err = run("transactions", "abort", "--query", query, "--json")
    assert {r["transactional_id"]: r["action"] for r in map(json.loads, out.splitlines())} == {
        f"kwire-{query}-0": "aborted", f"kwire-{query}-1": "aborted"}
    assert "2 open transactions aborted" in err
    assert read_values(bootstrap, sink.topic, 2) == [b"x", b"y"]               # the aborted rows never show
    assert len(read_values(bootstrap, sink.topic, 2, committed=False)) == 6
    _, out, err = run("transactions", "forget", "--query", query)
    # partition 1's group exists too, though its only offsets were aborted with batch 1
    assert "0 open transactions aborted, 2 marker groups deleted" in err
    with Admin(bootstrap_servers=bootstrap) as admin:
        assert marker_batch(admin, f"kwire-{query}-0", 30.0) is None
    with pytest.raises(SystemExit, match="give --query"):
        run("transactions", "forget")


def test_streaming_query_writes_each_row_once(spark, broker, tmp_path):
    """A streaming query (kwire's source to the exactly-once sink), run in
    two parts from one checkpoint: every row once, and each Spark
    partition's marker at the last batch."""
    from .conftest import produce

    src, dst = new_topic(broker.bootstrap, 3), new_topic(broker.bootstrap, 2)
    produce(broker.bootstrap, src, 300, 3)

    def run_once():
        q = (spark.readStream.format("kwire").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("subscribe", src).option("startingOffsets", "earliest").load()
             .select("value").writeStream.format("kwire").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("topic", dst).option("deliveryGuarantee", "exactly-once")
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
        q.awaitTermination(120)
        return q

    q = run_once()
    first = read_values(broker.bootstrap, dst, 2)
    assert len(first) == 300 and len(set(first)) == 300
    produce(broker.bootstrap, src, 150, 3, start=300)
    q = run_once()
    got = read_values(broker.bootstrap, dst, 2)
    assert len(got) == 450 and len(set(got)) == 450
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        marks = {p: marker_batch(admin, f"kwire-{q.id}-{p}", 30.0) for p in range(3)}
    assert max(m for m in marks.values() if m is not None) == q.lastProgress["batchId"]


def test_kwire_spark_write_jobs_exactly_once(spark, kafka):
    """``kwire.spark.write`` (Spark 3.5's way, and foreachBatch's): a job
    visible whole; a failed job leaves nothing visible and nothing open (its
    transactions aborted at once, so read_committed readers are not held
    back); a micro-batch written twice with one batch_id is written once."""
    from pyspark.sql import functions as F

    import kwire.spark
    from kwire.admin_ops.leftovers import find

    bootstrap = kafka.bootstrap("plaintext")
    topic = new_topic(bootstrap, 2)
    opts = {"kafka.bootstrap.servers": bootstrap, "topic": topic, "deliveryGuarantee": "exactly-once"}
    df = spark.createDataFrame([(f"v{i}",) for i in range(400)], "value string").repartition(3)
    assert kwire.spark.write(df, **opts) == 400
    boom = F.udf(lambda v: v if v != "v7" else 1 // 0, "string")
    with pytest.raises(Exception, match="ZeroDivisionError"):
        kwire.spark.write(df.select(boom("value").alias("value")), **opts, transactionalIdPrefix="failing")
    with Admin(bootstrap_servers=bootstrap) as admin:
        assert find(admin, "failing").open == []        # whatever tasks ran before the failure: nothing left open
    # the same clean-up, deterministic: a task's transaction left open (as by a task the job's failure
    # cut off after its write), then the failed job's abort_job
    from kwire.spark.exactly_once import abort_job, job_prefix, prepare
    import pyarrow as pa

    sink = parse_sink_options(opts)
    prefix = job_prefix(sink)
    prepare(iter([pa.record_batch([pa.array([b"lost"])], names=["value"])]), sink, TaskIdentity(prefix, 1, None))
    with Admin(bootstrap_servers=bootstrap) as admin:
        assert find(admin, prefix).open == [f"{prefix}-1"]
        abort_job(sink, prefix)
        assert find(admin, prefix).open == []
    batch = spark.createDataFrame([(f"b{i}",) for i in range(90)], "value string").repartition(3)
    each = dict(opts, transactionalIdPrefix=f"fb-{topic}")
    assert kwire.spark.write(batch, batch_id=5, **each) == 90
    assert kwire.spark.write(batch, batch_id=5, **each) == 0              # the markers say batch 5 committed
    got = read_values(bootstrap, topic, 2)
    assert len(got) == 490 and len(set(got)) == 490
    with pytest.raises(Exception, match="needs transactionalIdPrefix"):
        kwire.spark.write(batch, batch_id=6, **opts)


def test_a_failed_jobs_stragglers_leave_nothing_open(kafka):
    """A failed batch write's clean-up (close_job) against the tasks Spark
    lets run on after the job failed (CI once caught one: its transaction,
    begun after the old clean-up, held a partition's read_committed readers
    back): a straggler that had its epoch is fenced, one that begins after
    the clean-up reads the job's abort marker and writes nothing, and
    nothing of the job is left open."""
    import pyarrow as pa

    from kwire.admin_ops.leftovers import find
    from kwire.errors import KwireError
    from kwire.producer import Producer
    from kwire.spark.exactly_once import close_job, job_prefix, prepare

    bootstrap = kafka.bootstrap("plaintext")
    sink = parse_sink_options({"kafka.bootstrap.servers": bootstrap, "topic": new_topic(bootstrap, 2),
                               "deliveryGuarantee": "exactly-once"})
    prefix = job_prefix(sink)
    rows = pa.record_batch([pa.array([b"late"])], names=["value"])
    early = Producer(dict(sink.producer_config(), **{"transactional.id": f"{prefix}-0"}))
    try:
        early.init_transactions()                          # its epoch taken before the clean-up
        with Admin(bootstrap_servers=bootstrap) as admin:
            assert close_job(admin, sink, prefix) == [f"{prefix}-0"]
            early.begin_transaction()
            early.send(sink.topic, b"early")
            with pytest.raises(KwireError, match="(?i)fenced|epoch"):
                early.flush(30.0)
                early.commit_transaction(30.0)
        late = prepare(iter([rows]), sink, TaskIdentity(prefix, 1, None))   # began after the clean-up
        assert (late.records, late.producer_id) == (0, -1)
        with Admin(bootstrap_servers=bootstrap) as admin:
            assert find(admin, prefix).open == []
    finally:
        early.close(5.0)
    assert read_values(bootstrap, sink.topic, 2, committed=False, settle=0) == []


def test_a_timeout_above_the_brokers_maximum_is_refused_on_the_driver(spark, kafka):
    """kafka.transaction.timeout.ms above transaction.max.timeout.ms (15
    minutes by default) is refused before any task runs, naming both."""
    bootstrap = kafka.bootstrap("plaintext")
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(PySparkException, match="transaction.timeout.ms=3600000 is above the brokers' "
                                               "transaction.max.timeout.ms=900000"):
        kwire_write(df, bootstrap, topic=new_topic(bootstrap, 1), deliveryGuarantee="exactly-once",
                    **{"kafka.transaction.timeout.ms": "3600000"}).save()
