"""kwire.scan on both live brokers: offset and time ranges, per-partition
bounds, empty ranges and ranges past the end, typed values, streaming in
bounded batches, the consumer closed when the reader is done, fails or is released,
and the topic queried with DuckDB, Polars and pandas."""

from __future__ import annotations

import datetime
import gc
import json
import time
import uuid

import pyarrow as pa
import pytest

import kwire
from kwire.admin import Admin, NewTopic
from kwire.formats.base import UndecodableValueError
from kwire.producer import Producer
from kwire.scanning import reader as scan_reader

UTC = datetime.timezone.utc
BASE_MS = 1_700_000_000_000            # the records' timestamps: BASE_MS + i seconds
PARTITIONS = 3
N = 300                                # records, i on partition i % 3
SCHEMA = {"type": "object", "required": ["i"], "properties": {
    "i": {"type": "integer"}, "city": {"enum": ["Paris", "Lima", "Oslo"]}, "amount": {"type": "number"}}}
CITIES = ["Paris", "Lima", "Oslo"]


def _value(i: int) -> bytes:
    return json.dumps({"i": i, "city": CITIES[i % 7 % 3], "amount": i / 4}).encode()


@pytest.fixture(scope="module")
def topic(broker):
    """N JSON records over three partitions (record i: partition i % 3,
    offset i // 3, timestamp BASE_MS + i s), and a key per record."""
    name = f"scan-{uuid.uuid4().hex[:10]}"
    with Admin(bootstrap_servers=broker.bootstrap) as a:
        a.create_topics([NewTopic(name, PARTITIONS)])
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=5) as p:
        for i in range(N):
            p.send(name, _value(i), key=b"k%d" % i, partition=i % PARTITIONS, timestamp_ms=BASE_MS + i * 1000)
        p.flush(30)
    return name


def _scan(broker, topic, **kwargs):
    return kwire.scan(topic, bootstrap_servers=broker.bootstrap, **kwargs)


def _rows(reader):
    table = reader.read_all()
    return sorted(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist()))


def test_the_whole_topic_typed(broker, topic):
    reader = _scan(broker, topic, value_format=("json", {"schema": SCHEMA}))
    assert isinstance(reader, pa.RecordBatchReader)
    schema = reader.schema
    assert schema.names == ["topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers"]
    assert schema.field("value").type == pa.struct([pa.field("i", pa.int64(), nullable=False),
                                                    pa.field("city", pa.dictionary(pa.int32(), pa.string())),
                                                    pa.field("amount", pa.float64())])
    assert schema.field("key").type == pa.binary()
    table = reader.read_all()
    assert table.num_rows == N and set(table.column("topic").to_pylist()) == {topic}
    for row in table.to_pylist():
        i = row["value"]["i"]
        assert (row["partition"], row["offset"], row["key"]) == (i % 3, i // 3, b"k%d" % i)
        assert row["timestamp"] == datetime.datetime.fromtimestamp(BASE_MS / 1000 + i, UTC)
        assert row["value"]["city"] == CITIES[i % 7 % 3] and row["value"]["amount"] == i / 4


def test_offsets_per_partition_and_partitions(broker, topic):
    assert _rows(_scan(broker, topic, start=10, end=20)) == [(p, o) for p in range(3) for o in range(10, 20)]
    got = _rows(_scan(broker, topic, start={0: 5, 2: 98}, end={0: 7}))
    assert got == [(0, 5), (0, 6), (2, 98), (2, 99)]              # the mapping's partitions; 2 to its end
    assert _rows(_scan(broker, topic, start="latest")) == []
    assert _rows(_scan(broker, topic, partitions=[1], start=99)) == [(1, 99)]
    assert _rows(_scan(broker, topic, partitions=[1], end={1: 2})) == [(1, 0), (1, 1)]


def test_times_are_looked_up_by_timestamp(broker, topic):
    start = datetime.datetime.fromtimestamp(BASE_MS / 1000 + 30, UTC)       # record 30: offset 10 of partition 0
    end = datetime.datetime.fromtimestamp(BASE_MS / 1000 + 45.5, UTC)       # first at or after: record 46
    got = _rows(_scan(broker, topic, start=start, end=end))
    assert got == sorted((i % 3, i // 3) for i in range(30, 46))
    future = datetime.datetime(2100, 1, 1, tzinfo=UTC)
    assert _rows(_scan(broker, topic, start=future)) == []
    assert len(_rows(_scan(broker, topic, end=future))) == N                # past the last: the end
    with pytest.raises(ValueError, match="time zone"):
        _scan(broker, topic, start=datetime.datetime(2024, 1, 1))


def test_empty_ranges_and_a_range_past_the_end(broker, topic):
    assert _rows(_scan(broker, topic, start=50, end=50)) == []
    assert _rows(_scan(broker, topic, start=60, end=10)) == []
    began = time.monotonic()
    got = _rows(_scan(broker, topic, start=95, end=10_000, timeout=20))
    assert got == [(p, o) for p in range(3) for o in range(95, 100)]
    assert time.monotonic() - began < 10                                   # what exists, at once
    name = f"scan-empty-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap_servers=broker.bootstrap) as a:
        a.create_topics([NewTopic(name, 2)])
    reader = _scan(broker, name, value_format=("json", {"schema": SCHEMA}))
    assert reader.read_all().num_rows == 0


def test_streams_in_bounded_batches_and_closes_its_consumer(broker, topic, monkeypatch):
    made = []

    class Recording(kwire.Consumer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.closes = 0
            made.append(self)

        def close(self, timeout=None):
            self.closes += 1
            super().close(timeout)

    monkeypatch.setattr(scan_reader, "Consumer", Recording)
    monkeypatch.setattr(kwire.scanning, "Consumer", Recording)
    # small polls and fetches: the first batch comes before the range is read
    reader = _scan(broker, topic, max_poll_bytes=2000, max_partition_fetch_bytes=1000, fetch_max_bytes=3000)
    first = reader.read_next_batch()
    consumer = made[-1]
    assert 0 < first.num_rows < N
    assert sum(consumer.position((topic, p)) for p in range(3)) < N
    del reader, first                                                      # released: closed
    assert consumer.closes == 1 and consumer._closed
    reader = _scan(broker, topic, end=3)
    assert reader.read_all().num_rows == 9
    assert made[-1]._closed                                                # exhausted: closed
    reader = _scan(broker, topic, start={0: 0}, end={0: 1}, value_format=("json", {"schema": {"type": "string"}}))
    with pytest.raises(UndecodableValueError):
        reader.read_all()
    assert made[-1]._closed                                                # failed: closed
    gc.collect()
    assert all(c.closes == 1 for c in made)


def test_duckdb_sql_over_a_topic(broker, topic):
    duckdb = pytest.importorskip("duckdb")
    reader = _scan(broker, topic, value_format=("json", {"schema": SCHEMA}))
    rel = duckdb.from_arrow(reader)
    got = duckdb.sql("SELECT value.city AS city, count(*) AS n, sum(value.amount) AS total FROM rel "
                     "GROUP BY ALL ORDER BY city").fetchall()
    expected = {}
    for i in range(N):
        n, total = expected.get(CITIES[i % 7 % 3], (0, 0.0))
        expected[CITIES[i % 7 % 3]] = (n + 1, total + i / 4)
    assert got == [(city, n, total) for city, (n, total) in sorted(expected.items())]
    reader = _scan(broker, topic, start=10, end=12)
    assert duckdb.sql('SELECT partition, max("offset") FROM reader GROUP BY ALL ORDER BY 1').fetchall() == [
        (0, 11), (1, 11), (2, 11)]


def test_polars_and_pandas(broker, topic):
    pl = pytest.importorskip("polars")
    frame = pl.from_arrow(_scan(broker, topic, value_format=("json", {"schema": SCHEMA})))
    assert frame.height == N
    assert frame.select(pl.col("value").struct.field("i").sum()).item() == N * (N - 1) // 2
    pandas_frame = _scan(broker, topic, start=0, end=1, value_format=("json", {"schema": SCHEMA})).read_pandas()
    assert sorted(pandas_frame["partition"].tolist()) == [0, 1, 2]
    assert sorted(v["i"] for v in pandas_frame["value"]) == [0, 1, 2]


def test_an_undecodable_value_ends_the_scan_after_the_rows_before_it(broker):
    name = f"scan-bad-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap_servers=broker.bootstrap) as a:
        a.create_topics([NewTopic(name, 1)])
    with Producer(bootstrap_servers=broker.bootstrap) as p:
        for v in [b'{"i": 0}', b'{"i": 1}', b'{"i": "two"}', b'{"i": 3}']:
            p.send(name, v)
        p.flush(30)
    reader = _scan(broker, name, value_format=("json", {"schema": SCHEMA}))
    rows = []
    with pytest.raises(UndecodableValueError) as err:
        for batch in reader:
            rows += batch.column("value").to_pylist()
    assert [r["i"] for r in rows] == [0, 1] and (err.value.topic, err.value.offset) == (name, 2)


def test_what_is_refused(broker, topic):
    with pytest.raises(ValueError, match="'earliest', 'latest'"):
        _scan(broker, topic, start="first")
    with pytest.raises(ValueError, match="not negative"):
        _scan(broker, topic, end=-1)
    with pytest.raises(TypeError):
        _scan(broker, topic, start=1.5)
    with pytest.raises(ValueError, match="no partition 7"):
        _scan(broker, topic, partitions=[0, 7])
    with pytest.raises(ValueError, match="consumer group"):
        _scan(broker, topic, group_id="g")
    with pytest.raises(ValueError, match="unknown format"):
        _scan(broker, topic, value_format="csv")
    with pytest.raises(kwire.KwireError):
        _scan(broker, f"absent-{uuid.uuid4().hex[:8]}", timeout=5)
