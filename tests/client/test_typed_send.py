"""send_arrow with key and value formats, on both live brokers, both kinds
of client (``kw``) and the real schema registry (Apicurio): a struct column
written as registry-framed Avro (the schema registered as confluent-kafka's
serializer registers it), read back by confluent-kafka's AvroDeserializer
and by kwire's typed poll_columnar."""

from __future__ import annotations

import json
import time
import uuid

import pyarrow as pa
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kwire.admin import Admin, NewTopic

SCHEMA = {"type": "record", "name": "Reading", "namespace": "iot", "fields": [
    {"name": "sensor", "type": "string"}, {"name": "value", "type": "double"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "tags", "type": {"type": "array", "items": "string"}}]}


def test_send_arrow_writes_registry_framed_avro_that_confluent_kafka_and_kwire_read(kw, broker, apicurio):
    topic = f"typed-send-{uuid.uuid4().hex[:10]}"
    with Admin(bootstrap_servers=broker.bootstrap) as a:
        a.create_topics([NewTopic(topic, 1)])
    rows = [{"sensor": f"s{i}", "value": i / 4, "at": 1_700_000_000_000 + i, "tags": ["a"] * (i % 3)} for i in range(50)]
    struct = pa.array(rows, pa.struct([("sensor", pa.string()), ("value", pa.float64()),
                                       ("at", pa.timestamp("ms", tz="UTC")), ("tags", pa.list_(pa.string()))]))
    data = pa.table({"key": pa.array([f"k{i}" for i in range(50)]), "value": struct})
    options = {"schema.registry.url": apicurio.url, "schema": json.dumps(SCHEMA), "auto.register.schemas": True}
    with kw.Producer(bootstrap_servers=broker.bootstrap, linger_ms=1) as p:
        p.send_arrow(topic, data, value_format=("avro", options))
        p.flush(30)
    with kw.Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([(topic, 0)])
        raw, typed = [], []
        deadline = time.monotonic() + 20
        while len(raw) < 50 and time.monotonic() < deadline:
            for batch in c.poll_columnar(200).values():
                raw += batch.column("value").to_pylist()
        c.seek((topic, 0), 0)
        deadline = time.monotonic() + 20
        while len(typed) < 50 and time.monotonic() < deadline:
            for batch in c.poll_columnar(200, value_format=("avro", {"schema.registry.url": apicurio.url})).values():
                typed += batch.column("value").to_pylist()
    de = AvroDeserializer(apicurio.confluent_client())
    ctx = SerializationContext(topic, MessageField.VALUE)
    assert [de(v, ctx) for v in raw] == [_as_confluent(r) for r in rows]
    assert [{**t, "at": int(t["at"].timestamp() * 1000)} for t in typed] == rows


def _as_confluent(row: dict) -> dict:
    """confluent-kafka's reading of a row: timestamp-millis as an aware datetime."""
    import datetime
    return {**row, "at": datetime.datetime.fromtimestamp(row["at"] / 1000, tz=datetime.timezone.utc)}
