"""``commitOffsetsToGroup`` on ``format("kwire")``'s streaming source
(kwire.spark.lag): each finished micro-batch's end offsets committed to a
consumer group, which Kafka's Java AdminClient reads back and kwire's
``groups describe`` shows as lag; the checkpoint stays the truth."""

from __future__ import annotations

import logging

import pytest

from kwire.admin import Admin
from kwire.spark.lag import LagCommitter, derived_group
from kwire.spark.options import parse_source_options
from kwire.types import TopicPartition

from .conftest import new_topic, produce
from .test_stream import run_available_now, stream

pytestmark = pytest.mark.kafka


def test_the_group_is_given_or_derived():
    base = {"kafka.bootstrap.servers": "h:1", "subscribe": "a,b", "commitOffsetsToGroup": "true"}
    assert parse_source_options({**base, "kafka.group.id": "g"}, streaming=True).lag_group == "g"
    derived = parse_source_options(base, streaming=True).lag_group
    assert derived == derived_group(None, "h:1", "subscribe=a,b") and derived.startswith("kwire-spark-")
    assert parse_source_options({**base, "groupIdPrefix": "orders"}, streaming=True).lag_group.startswith("orders-")
    assert parse_source_options({**base, "subscribe": "c"}, streaming=True).lag_group != derived
    assert parse_source_options({k: v for k, v in base.items() if k != "commitOffsetsToGroup"},
                                streaming=True).lag_group is None
    assert parse_source_options(base, streaming=False).lag_group is None      # a batch read commits nothing


def test_each_batch_end_is_committed_and_java_reads_it(spark, kafka, tmp_path):
    from support.java_peer import java_group_offsets

    bootstrap = kafka.bootstrap("plaintext")
    topic = new_topic(bootstrap, 2, prefix="lag")
    group = f"lag-group-{topic}"
    produce(bootstrap, topic, 100, 2)
    df = stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest", commitOffsetsToGroup="true",
                **{"kafka.group.id": group})
    run_available_now(df, str(tmp_path / "out"), str(tmp_path / "ckpt"))
    java = java_group_offsets({"bootstrap.servers": bootstrap}, group)
    assert {tp: off for tp, (off, _) in java.items()} == {(topic, 0): 50, (topic, 1): 50}
    assert {meta for _, meta in java.values()} == {"kwire spark query"}
    produce(bootstrap, topic, 10, 2, start=100)         # written while the query is stopped: its lag
    with Admin(bootstrap_servers=bootstrap) as admin:
        assert sum(lag for _, _, lag in admin.group_lag(group, timeout=30).values()) == 10
    run_available_now(df, str(tmp_path / "out"), str(tmp_path / "ckpt"))       # restarted from the checkpoint
    with Admin(bootstrap_servers=bootstrap) as admin:
        assert {tp: c for tp, (c, _, _) in admin.group_lag(group, timeout=30).items()} == {
            TopicPartition(topic, 0): 55, TopicPartition(topic, 1): 55}


def test_a_failing_commit_is_logged_once_and_the_query_goes_on(kafka, caplog):
    """A group with an active member refuses an admin's commit: the
    failure is logged once, not at every batch, and so is the recovery."""
    from kwire.consumer import Consumer

    bootstrap = kafka.bootstrap("plaintext")
    topic = new_topic(bootstrap, 1, prefix="lag-busy")
    group = f"lag-busy-{topic}"
    lag = LagCommitter(group, retry_backoff=0.0)
    backing_off = LagCommitter(group)                   # the default: no commit tried for a while after a failure
    end = {TopicPartition(topic, 0): 0}
    with Admin(bootstrap_servers=bootstrap) as admin, caplog.at_level(logging.WARNING, "kwire.spark.lag"):
        with Consumer(bootstrap_servers=bootstrap, group_id=group) as member:
            member.subscribe([topic])
            for _ in range(40):
                member.poll(250)
                if member.assignment():
                    break
            assert member.assignment()
            assert not lag.commit(admin, end) and not lag.commit(admin, end)
            before = len(caplog.records)
            assert not backing_off.commit(admin, end) and not backing_off.commit(admin, end)
            del caplog.records[before:]                  # its own warning: not this test's count below
            assert backing_off.skipped == 1 and lag.skipped == 0
        assert lag.commit(admin, end)
    said = [r.getMessage() for r in caplog.records]
    assert len([m for m in said if "failed" in m]) == 1 and len([m for m in said if "works again" in m]) == 1
