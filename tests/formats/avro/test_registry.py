"""Avro with a real schema registry (Apicurio Registry's Confluent-compatible
API, the session's ``apicurio``) and confluent-kafka's AvroSerializer and
AvroDeserializer: kwire decodes their bytes, writes the same bytes, reads
values of several schema versions into the latest, resolves references."""

from __future__ import annotations

import copy
import json
import uuid

import fastavro
import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import Schema as ConfluentSchema
from confluent_kafka.schema_registry import SchemaReference as ConfluentReference
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kwire.formats import make_format
from kwire.formats.avro import AvroFormat
from kwire.formats.base import UndecodableValueError
from kwire.registry import Schema, SchemaRegistryClient

from .gen import DataGen, SchemaGen, expected, read

V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "item", "type": "string"},
    {"name": "qty", "type": "int"}, {"name": "note", "type": ["null", "string"], "default": None}]}
V2 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "item", "type": "string"},
    {"name": "qty", "type": "long"}, {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "channel", "type": "string", "default": "web"}]}


@pytest.fixture(scope="module")
def confluent(apicurio):
    return apicurio.confluent_client()


@pytest.fixture
def client(apicurio):
    with SchemaRegistryClient({"url": apicurio.url, "timeout": 10}) as c:
        yield c


@pytest.fixture
def topic():
    return f"avro-{uuid.uuid4().hex[:10]}"


def _serialize(confluent, schema: dict, topic: str, rows: list, **conf) -> list:
    ser = AvroSerializer(confluent, json.dumps(schema), conf=conf or None)
    ctx = SerializationContext(topic, MessageField.VALUE)
    return [ser(r, ctx) for r in rows]


def _decode(fmt, values, topic):
    return fmt.decode(pa.array(values, pa.binary()), topic=topic, partition=0,
                      offsets=pa.array(range(len(values)), pa.int64()))


def test_kwire_decodes_what_confluent_kafka_writes_and_writes_the_same_bytes(confluent, client, topic):
    schema = SchemaGen(5).record(fields=6)
    data = DataGen(5)
    parsed = fastavro.parse_schema(copy.deepcopy(schema))
    rows = [data.value(parsed) for _ in range(30)]
    values = _serialize(confluent, schema, topic, rows)
    fmt = make_format("avro", {"registry": client}, topic=topic)
    out = _decode(fmt, values + [None], topic)
    assert out.to_pylist() == [expected(schema, read(parsed, v[5:])) for v in values] + [None]
    writer = make_format("avro", {"registry": client, "schema": json.dumps(schema)}, topic=topic)
    assert writer.encode(out, topic=topic).to_pylist() == values + [None]


def test_confluent_kafka_reads_what_kwire_registers_and_writes(confluent, client, topic):
    fmt = AvroFormat(V1, registry=client, auto_register=True)
    rows = [{"id": 1, "item": "tea", "qty": 2, "note": None}, {"id": 2, "item": "café", "qty": -1, "note": "x"}]
    values = fmt.encode(pa.array(rows, fmt.arrow_type()), topic=topic).to_pylist()
    assert [client.get_latest_version(f"{topic}-value").schema_id] == list({int.from_bytes(v[1:5], "big") for v in values})
    de = AvroDeserializer(confluent)
    assert [de(v, SerializationContext(topic, MessageField.VALUE)) for v in values] == rows


def test_values_of_two_versions_decode_into_the_latest(confluent, client, topic):
    old = _serialize(confluent, V1, topic, [{"id": 1, "item": "a", "qty": 5, "note": None}])
    new = _serialize(confluent, V2, topic, [{"id": 2, "item": "b", "qty": 2**40, "note": "n", "channel": "app"}])
    fmt = AvroFormat(registry=client)                      # the reader: the subject's latest, V2
    assert fmt.arrow_type(topic).field("qty").type == pa.int64()
    assert _decode(fmt, old + new, topic).to_pylist() == [
        {"id": 1, "item": "a", "qty": 5, "note": None, "channel": "web"},
        {"id": 2, "item": "b", "qty": 2**40, "note": "n", "channel": "app"}]
    first = AvroFormat(registry=client, version=1)         # or a version named: V2's values do not fit V1's int
    with pytest.raises(UndecodableValueError) as e:
        _decode(first, old + new, topic)
    assert e.value.row == 1


def test_references_are_resolved(confluent, client, topic):
    address = {"type": "record", "name": "Address", "namespace": "shop",
               "fields": [{"name": "city", "type": "string"}]}
    confluent.register_schema(f"{topic}-address", ConfluentSchema(json.dumps(address), "AVRO"))
    customer = {"type": "record", "name": "Customer", "namespace": "shop",
                "fields": [{"name": "name", "type": "string"}, {"name": "home", "type": "shop.Address"}]}
    ref = ConfluentReference("shop.Address", f"{topic}-address", 1)
    sid = confluent.register_schema(f"{topic}-value", ConfluentSchema(json.dumps(customer), "AVRO", [ref]))
    value = b"\x00" + sid.to_bytes(4, "big") + b"\x06ann\x08Oslo"
    assert _decode(AvroFormat(registry=client), [value], topic).to_pylist() == [{"name": "ann", "home": {"city": "Oslo"}}]


def test_a_schema_id_the_registry_lacks_is_an_undecodable_value_at_its_row(client, topic):
    client.register_schema(f"{topic}-value", Schema(json.dumps(V1)))
    with pytest.raises(UndecodableValueError, match="not in the schema registry") as e:
        _decode(AvroFormat(registry=client), [b"\x00\x7f\xff\xff\xf0\x02"], topic)
    assert (e.value.row, e.value.offset) == (0, 0)


def test_apicurio_framings_an_8_byte_id_or_the_id_in_a_header(client, topic):
    """Apicurio's serdes frame with an 8-byte id, or put the (content) id in
    the record's ``apicurio.value.contentId`` header and leave the value bare."""
    from kwire.formats.base import decode_batch

    sid = client.register_schema(f"{topic}-value", Schema(json.dumps(V1)))
    body = b"\x02\x06tea\x04\x00"
    rows = [{"id": 1, "item": "tea", "qty": 2, "note": None}]
    id8 = AvroFormat(V1, registry=client, framing="id8")         # the schema to write with, found registered
    assert _decode(id8, [b"\x00" + sid.to_bytes(8, "big") + body], topic).to_pylist() == rows
    assert id8.encode(pa.array(rows, id8.arrow_type(topic)), topic=topic).to_pylist() == [
        b"\x00" + sid.to_bytes(8, "big") + body]
    headers_type = pa.list_(pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())]))
    batch = pa.RecordBatch.from_pydict({
        "offset": pa.array([7, 8], pa.int64()), "value": pa.array([body, None], pa.binary()),
        "headers": pa.array([[{"key": "apicurio.value.contentId", "value": sid.to_bytes(8, "big")}], None],
                            headers_type)})
    typed = decode_batch(batch, topic=topic, partition=0, value_format=AvroFormat(registry=client, framing="headers"))
    assert typed.column("value").to_pylist() == rows + [None]
