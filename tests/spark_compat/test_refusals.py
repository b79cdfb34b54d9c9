"""What a release lacks is refused, naming the Spark release that has it
(never silently ignored): ``format("kwire")`` on 3.5, filter pushdown on
4.0, read limits on 4.0 and 4.1. Where the release has them, they work."""

from __future__ import annotations

import logging

import pytest

import kwire.spark
from compat_util import available_now, new_topic, produce, read_stream
from kwire.spark import FEATURES, SparkOptionError

LIMITS = {"maxOffsetsPerTrigger": "10", "minOffsetsPerTrigger": "10", "maxTriggerDelay": "5s"}


@pytest.mark.skipif(FEATURES.data_source, reason="the release has the Python Data Source API (4.0+)")
def test_no_data_source_before_4_0(spark):
    assert not hasattr(kwire.spark, "KwireDataSource")
    with pytest.raises(SparkOptionError, match=r'format\("kwire"\) needs Spark 4\.0 or later') as e:
        kwire.spark.register(spark)
    assert "kwire.spark.read(spark, **options)" in str(e.value) and "kwire.spark.write(df, **options)" in str(e.value)
    with pytest.raises(Exception, match="kwire"):
        spark.read.format("kwire").option("subscribe", "t").load()


@pytest.mark.skipif(not FEATURES.data_source or FEATURES.filter_pushdown,
                    reason="only on a release with data sources but no filter pushdown (4.0)")
def test_pushdown_refused_before_4_1(spark, caplog):
    with pytest.raises(SparkOptionError, match=r"pushdown=True\) needs Spark 4\.1 or later"):
        kwire.spark.register(spark, pushdown=True)
    kwire.spark._told_no_pushdown = False
    with caplog.at_level(logging.INFO, logger="kwire.spark"):
        kwire.spark.register(spark)
        kwire.spark.register(spark)
    told = [r for r in caplog.records if "has no filter pushdown" in r.getMessage()]
    assert len(told) == 1 and told[0].levelno == logging.INFO


@pytest.mark.skipif(not FEATURES.data_source or FEATURES.admission_control,
                    reason="only on a release with data sources but no read limits (4.0, 4.1)")
@pytest.mark.parametrize("option", sorted(LIMITS))
def test_read_limits_refused_before_4_2(spark, kafka_bootstrap, option, tmp_path):
    topic = new_topic(kafka_bootstrap, 1, prefix="refuse")
    df = read_stream(spark, "kwire", kafka_bootstrap, subscribe=topic, **{option: LIMITS[option]})
    with pytest.raises(Exception) as e:
        available_now(df, str(tmp_path / "ckpt"), name=f"refused_{option}")
    text = str(e.value)
    assert "SparkOptionError" in text and f"the source option '{option}' needs Spark 4.2 or later" in text, text


@pytest.mark.skipif(not FEATURES.admission_control, reason="read limits need Spark 4.2")
def test_read_limits_work_from_4_2(spark, kafka_bootstrap, tmp_path):
    topic = new_topic(kafka_bootstrap, 2, prefix="limits")
    produce(kafka_bootstrap, topic, 60, 2)
    df = read_stream(spark, "kwire", kafka_bootstrap, subscribe=topic, startingOffsets="earliest",
                     maxOffsetsPerTrigger="20")
    q = available_now(df.select("offset"), str(tmp_path / "ckpt"), name="limited")
    assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]] == [20, 20, 20]
    assert spark.table("limited").count() == 60
