"""poll_columnar with key and value formats (here JSON, without a
registry), on both live brokers and with both kinds of client (``kw``):
typed columns, one format per spec and topic, and a value its format
cannot decode raised at its offset after the records before it, again
until a seek moves past it."""

from __future__ import annotations

import json
import time
import uuid

import pyarrow as pa
import pytest

from kwire.admin import Admin, NewTopic
from kwire.formats import make_format
from kwire.formats.base import UndecodableValueError

SCHEMA = {"type": "object", "required": ["n"], "properties": {
    "n": {"type": "integer"}, "name": {"type": "string"}, "at": {"type": "string", "format": "date-time"}}}


def _topic(broker, partitions: int = 2) -> str:
    name = f"typed-{uuid.uuid4().hex[:10]}"
    with Admin(bootstrap_servers=broker.bootstrap) as a:
        a.create_topics([NewTopic(name, partitions)])
    return name


def _produce(kw, broker, topic, records):
    with kw.Producer(bootstrap_servers=broker.bootstrap, linger_ms=1) as p:
        for partition, key, value in records:
            p.send(topic, value, key=key, partition=partition)
        p.flush(30)


def _poll_until(consumer, rows, **kwargs):
    got = {}
    deadline = time.monotonic() + 20
    while sum(b.num_rows for bs in got.values() for b in bs) < rows and time.monotonic() < deadline:
        for tp, batch in consumer.poll_columnar(200, **kwargs).items():
            got.setdefault(tp.partition, []).append(batch)
    return {p: pa.Table.from_batches(bs) for p, bs in got.items()}


def test_typed_keys_and_values(kw, broker):
    topic = _topic(broker)
    records = [(i % 2, json.dumps(f"k{i}").encode(), json.dumps(
        {"n": i, "name": f"v{i}", "at": "2024-01-01T00:00:00Z"}).encode() if i % 5 else None) for i in range(40)]
    _produce(kw, broker, topic, records)
    with kw.Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([(topic, 0), (topic, 1)])
        tables = _poll_until(c, 40, key_format="json", value_format=("json", {"schema": SCHEMA}))
    assert sum(t.num_rows for t in tables.values()) == 40
    for partition, table in tables.items():
        assert table.schema.field("value").type == make_format("json", schema=SCHEMA).arrow_type()
        assert table.schema.field("key").type == pa.json_()
        for offset, key, value in zip(table.column("offset").to_pylist(), table.column("key").to_pylist(),
                                      table.column("value").to_pylist()):
            i = offset * 2 + partition
            assert json.loads(key) == f"k{i}"
            if i % 5:
                assert value["n"] == i and value["name"] == f"v{i}" and value["at"].year == 2024
            else:
                assert value is None


def test_a_format_object_is_used_as_given_and_specs_are_made_once(kw, broker):
    topic = _topic(broker, 1)
    _produce(kw, broker, topic, [(0, None, b'{"n": 1}'), (0, None, b'{"n": 2}')])
    fmt = make_format("json", schema=SCHEMA)
    with kw.Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([(topic, 0)])
        table = _poll_until(c, 2, value_format=fmt)[0]
        assert table.column("value").to_pylist() == [{"n": 1, "name": None, "at": None},
                                                     {"n": 2, "name": None, "at": None}]
        with pytest.raises(ValueError, match="unknown format"):
            c.poll_columnar(0, value_format="yaml")


def test_an_undecodable_value_raises_at_its_offset_until_a_seek(kw, broker):
    topic = _topic(broker, 1)
    values = [b'{"n": 0}', b'{"n": 1}', b'{"n": "two"}', b'{"n": 3}', b'{"n": 4}']
    _produce(kw, broker, topic, [(0, None, v) for v in values])
    spec = ("json", {"schema": SCHEMA})
    with kw.Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest") as c:
        tp = (topic, 0)
        c.assign([tp])
        seen = []
        deadline = time.monotonic() + 20
        with pytest.raises(UndecodableValueError) as err:
            while time.monotonic() < deadline:
                for batch in c.poll_columnar(200, value_format=spec).values():
                    seen += batch.column("value").to_pylist()
        assert [v["n"] for v in seen] == [0, 1]                  # the records before it first
        assert (err.value.topic, err.value.partition, err.value.offset) == (topic, 0, 2)
        assert c.position(tp) == 2
        with pytest.raises(UndecodableValueError) as again:      # again: the position stays at it
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                assert not c.poll_columnar(200, value_format=spec)
        assert again.value.offset == 2
        c.seek(tp, 3)
        rest = _poll_until(c, 2, value_format=spec)[0]
        assert [v["n"] for v in rest.column("value").to_pylist()] == [3, 4]
        # the same bytes read raw are there too
        c.seek(tp, 2)
        raw = _poll_until(c, 3)[0]
        assert raw.column("value").to_pylist()[0] == b'{"n": "two"}'
