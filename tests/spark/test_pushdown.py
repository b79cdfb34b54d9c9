"""Filter pushdown in batch reads (kwire.spark.pushdown): predicates on
partition, offset and timestamp become the ranges fetched, and the rows a
query returns are the same as without pushdown.

The live tests run on both brokers. Timestamp bounds need ListOffsets by
timestamp, which Tansu 0.6.0 answers wrongly (offset 0, timestamp -1 for
every lookup): there kwire does not trust the answer and reads the range
whole, which the Tansu half checks; the Kafka half checks the narrowed
ranges."""

from __future__ import annotations

import datetime as dt
import re
import time

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan, LessThanOrEqual  # noqa: E402

from kwire.producer import Producer  # noqa: E402
from kwire.spark.offsets import OffsetRange  # noqa: E402
from kwire.spark.options import parse_source_options  # noqa: E402
from kwire.spark.pushdown import bounds_from_filters, narrow  # noqa: E402
from kwire.spark.source import KwirePushdownReader  # noqa: E402
from kwire.types import TopicPartition  # noqa: E402

from .conftest import kwire_read, new_topic  # noqa: E402

#: An hour ago, to the second: recent, so that Kafka's retention (7 days) keeps the records.
BASE_MS = (int(time.time()) - 3600) * 1000
RECORDS = 600
PARTITIONS = 3


def ts(ms: int) -> dt.datetime:
    """A timestamp literal as Spark hands it to a Python data source (naive, local time)."""
    return dt.datetime.fromtimestamp(ms / 1000)


# ------------------------------------------------------------------ offline
def test_bounds_from_filters():
    b = bounds_from_filters([EqualTo(("partition",), 1), GreaterThanOrEqual(("offset",), 10),
                             LessThan(("offset",), 20), GreaterThan(("timestamp",), ts(BASE_MS + 500))])
    assert b.partitions == {1} and (b.offset_lo, b.offset_hi) == (10, 19)
    assert b.timestamp_lo_ms == BASE_MS + 501                  # > x ms: from the next millisecond
    assert len(b.used) == 4
    b = bounds_from_filters([In(("partition",), (0, 2)), LessThanOrEqual(("partition",), 1),
                             In(("offset",), (5, 9, 7))])
    assert b.partitions == {0, 2} and b.partition_hi == 1 and (b.offset_lo, b.offset_hi) == (5, 9)
    # not usable: other columns, upper timestamp bounds, non-integer literals; nothing is claimed for them
    b = bounds_from_filters([EqualTo(("key",), b"x"), LessThan(("timestamp",), ts(BASE_MS)),
                             EqualTo(("offset",), "7"), EqualTo(("partition",), True)])
    assert b.empty and b.describe() == "none"
    # a timestamp with microseconds: = needs the record's (whole) millisecond at or after it
    at = dt.datetime.fromtimestamp(BASE_MS / 1000) + dt.timedelta(microseconds=1500)
    assert bounds_from_filters([EqualTo(("timestamp",), at)]).timestamp_lo_ms == BASE_MS + 2


def test_narrow_cuts_ranges_and_drops_empty_ones():
    ranges = [OffsetRange("t", p, 0, 100) for p in range(3)]
    b = bounds_from_filters([GreaterThanOrEqual(("partition",), 1), GreaterThan(("offset",), 49),
                             GreaterThanOrEqual(("timestamp",), ts(BASE_MS))])
    looked_up = {}

    def for_times(query):
        looked_up.update(query)
        # partition 1: found at 70; partition 2: the broker's answer was not trusted (left out)
        return {TopicPartition("t", 1): 70}

    got = narrow(ranges, b, for_times)
    assert got == [OffsetRange("t", 1, 70, 100), OffsetRange("t", 2, 50, 100)]
    assert set(looked_up) == {TopicPartition("t", 1), TopicPartition("t", 2)}   # partition 0 not even asked
    # no record at or after the timestamp: nothing to read there
    since = bounds_from_filters([GreaterThanOrEqual(("timestamp",), ts(BASE_MS))])
    assert narrow(ranges, since, lambda q: {tp: None for tp in q}) == []


# --------------------------------------------------------------------- live
@pytest.fixture(scope="module")
def stamped(broker):
    """A topic of RECORDS records over PARTITIONS partitions, record i at
    BASE_MS + i seconds (so each partition's timestamps rise)."""
    topic = new_topic(broker.bootstrap, PARTITIONS, "pushdown")
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=2) as p:
        for i in range(RECORDS):
            p.send(topic, b"v%d" % i, key=b"k%d" % i, partition=i % PARTITIONS, timestamp_ms=BASE_MS + i * 1000)
        p.flush()
    return broker, topic


def planned(broker, topic, filters, **options):
    reader = KwirePushdownReader(parse_source_options(
        {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic, **options}, streaming=False))
    assert list(reader.pushFilters(filters)) == filters          # every predicate is left for Spark as well
    return sorted((p.range.partition, p.range.start, p.range.end) for p in reader.partitions())


def test_planned_ranges(stamped):
    broker, topic = stamped
    per = RECORDS // PARTITIONS
    assert planned(broker, topic, [EqualTo(("partition",), 1)]) == [(1, 0, per)]
    assert planned(broker, topic, [In(("partition",), (0, 2)), GreaterThanOrEqual(("offset",), 150)]) == [
        (0, 150, per), (2, 150, per)]
    assert planned(broker, topic, [GreaterThan(("offset",), per + 5)]) == []
    # record i is offset i // 3 of partition i % 3, at BASE_MS + i s: from i = 450 on
    since = [GreaterThanOrEqual(("timestamp",), ts(BASE_MS + 450 * 1000))]
    if broker.is_tansu:      # Tansu 0.6.0's timestamp lookup is not trusted: every range read whole
        assert planned(broker, topic, since) == [(p, 0, per) for p in range(PARTITIONS)]
    else:
        assert planned(broker, topic, since) == [(0, 150, per), (1, 150, per), (2, 150, per)]
        assert planned(broker, topic, [GreaterThan(("timestamp",), ts(BASE_MS + (RECORDS - 1) * 1000))]) == []


def test_min_partitions_splits_what_is_read(stamped):
    """minPartitions applies to the narrowed ranges: one partition's 200
    offsets in 4 Spark partitions, not one piece of a split of all three."""
    broker, topic = stamped
    per = RECORDS // PARTITIONS
    got = planned(broker, topic, [EqualTo(("partition",), 1)], minPartitions="4")
    assert got == [(1, 0, 50), (1, 50, 100), (1, 100, 150), (1, 150, per)]
    got = planned(broker, topic, [GreaterThanOrEqual(("offset",), 180)], maxRecordsPerPartition="10")
    assert got == [(p, o, o + 10) for p in range(PARTITIONS) for o in (180, 190)]


@pytest.mark.parametrize("where", [
    "partition = 1 and offset >= 20 and offset < 40",
    "partition in (0, 2) and offset in (3, 70, 199)",
    "offset > 190",
    "timestamp >= timestamp_millis({base+450000})",          # the offsets written in at run time: test ids
    "timestamp > timestamp_millis({base+450000}) and partition <= 1",   # must not depend on the clock (every
    "timestamp in (timestamp_millis({base+3000}), timestamp_millis({base+598000}))",   # xdist worker collects
    "timestamp < timestamp_millis({base+10000})",                        # the same ids)
])
def test_query_rows_are_those_of_a_full_read(spark, stamped, where):
    broker, topic = stamped
    where = re.sub(r"\{base\+(\d+)\}", lambda m: str(BASE_MS + int(m.group(1))), where)
    df = kwire_read(spark, broker.bootstrap, subscribe=topic)
    got = sorted((r.partition, r.offset, bytes(r.value)) for r in df.where(where).collect())
    spark.createDataFrame(df.collect(), df.schema).createOrReplaceTempView("pushdown_all")
    want = sorted((r.partition, r.offset, bytes(r.value))
                  for r in spark.sql(f"select * from pushdown_all where {where}").collect())
    assert got == want and want
