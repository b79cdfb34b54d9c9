"""The JSON format with a schema registry (the session's Apicurio Registry,
``apicurio``): confluent-kafka's JSONSerializer against the same registry
writes bytes kwire decodes exactly, and kwire's encoder writes the bytes it
writes; the reader type from the subject's latest version or a schema id;
references; subject name strategies; ids that cannot be read."""

from __future__ import annotations

import datetime
import json
import uuid

import pyarrow as pa
import pytest

from kwire.formats import make_format
from kwire.formats.base import UndecodableValueError
from kwire.registry import Schema, SchemaRegistryClient

ck = pytest.importorskip("confluent_kafka.schema_registry")
from confluent_kafka.schema_registry.json_schema import JSONSerializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

ORDER = {       # optional fields allow null: confluent-kafka validates what it writes, and kwire writes nulls
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
    "required": ["id", "customer"],
    "properties": {
        "id": {"type": "integer"}, "customer": {"type": "string"}, "total": {"type": ["number", "null"]},
        "paid": {"type": ["boolean", "null"]}, "at": {"type": ["string", "null"], "format": "date-time"},
        "day": {"type": ["string", "null"], "format": "date"}, "ref": {"type": ["string", "null"], "format": "uuid"},
        "status": {"enum": ["new", "paid", "shipped", None]},
        "lines": {"type": ["array", "null"], "items": {"type": "object", "properties": {
            "sku": {"type": "string"}, "qty": {"type": ["integer", "null"]}}, "required": ["sku"]}},
        "note": {"oneOf": [{"type": "null"}, {"type": "string"}]},
        "tags": {"type": ["object", "null"], "additionalProperties": {"type": "string"}},
    },
}
ORDER_TEXT = json.dumps(ORDER)

ORDERS = [
    {"id": 1, "customer": "Zoë", "total": 12.5, "paid": True, "at": "2024-05-01T10:00:00.000000Z",
     "day": "2024-05-01", "ref": "123e4567-e89b-12d3-a456-426614174000", "status": "paid",
     "lines": [{"sku": "a-1", "qty": 2}, {"sku": "b-2", "qty": None}], "note": None, "tags": {"gift": "yes"}},
    {"id": 2, "customer": "Łukasz", "total": -0.25, "paid": False, "at": "1999-12-31T23:59:59.999999Z",
     "day": "1999-12-31", "ref": "00000000-0000-0000-0000-000000000000", "status": "new", "lines": [],
     "note": "ring twice \"please\"", "tags": {}},
    {"id": 3, "customer": "😀", "total": 1e20, "paid": None, "at": None, "day": None, "ref": None, "status": None,
     "lines": None, "note": None, "tags": None},
]


@pytest.fixture
def topic() -> str:
    return f"orders-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def confluent(apicurio):
    return apicurio.confluent_client()


@pytest.fixture(scope="module")
def registry(apicurio):
    with SchemaRegistryClient({"url": apicurio.url}) as client:
        yield client


def _their_bytes(confluent, topic, rows, **conf):
    serializer = JSONSerializer(ORDER_TEXT, confluent, conf={"auto.register.schemas": True, **conf})
    ctx = SerializationContext(topic, MessageField.VALUE)
    return [serializer(row, ctx) for row in rows]


def _offsets(n):
    return pa.array(range(n), pa.int64())


def test_their_bytes_decode_and_ours_are_the_same(apicurio, confluent, topic):
    theirs = _their_bytes(confluent, topic, ORDERS)
    fmt = make_format("json", topic=topic, schema_registry_url=apicurio.url)     # the subject's latest
    decoded = fmt.decode(pa.array(theirs + [None], pa.binary()), topic=topic, partition=0, offsets=_offsets(4))
    rows = decoded.to_pylist()
    assert rows[3] is None
    assert rows[0]["customer"] == "Zoë" and rows[0]["lines"] == [{"sku": "a-1", "qty": 2}, {"sku": "b-2", "qty": None}]
    assert rows[0]["at"] == datetime.datetime(2024, 5, 1, 10, tzinfo=datetime.timezone.utc)
    assert rows[0]["ref"] == uuid.UUID("123e4567-e89b-12d3-a456-426614174000") and rows[0]["status"] == "paid"
    assert rows[0]["tags"] == [("gift", "yes")] and rows[1]["note"] == 'ring twice "please"'
    assert rows[2]["total"] == 1e20 and rows[2]["customer"] == "😀"
    ours = make_format("json", schema=ORDER_TEXT, schema_registry_url=apicurio.url, auto_register_schemas=True)
    assert ours.encode(decoded, topic=topic).to_pylist() == theirs + [None]


def test_use_latest_version_and_a_schema_id(apicurio, confluent, registry, topic):
    theirs = _their_bytes(confluent, topic, ORDERS[:1])
    schema_id = int.from_bytes(theirs[0][1:5], "big")
    by_id = make_format("json", schema_registry_url=apicurio.url, use_schema_id=schema_id)
    decoded = by_id.decode(pa.array(theirs), topic="anything", partition=0, offsets=_offsets(1))
    assert decoded.to_pylist()[0]["id"] == 1
    assert by_id.encode(decoded, topic="anything").to_pylist() == theirs
    latest = make_format("json", schema=ORDER, schema_registry_url=apicurio.url, use_latest_version=True, topic=topic)
    assert latest.encode(decoded, topic=topic).to_pylist() == theirs
    # neither: the schema must be registered under the subject already (looked up, as confluent-kafka does)
    looked_up = make_format("json", schema=ORDER_TEXT, schema_registry_url=apicurio.url)
    assert looked_up.encode(decoded, topic=topic).to_pylist() == theirs
    with pytest.raises(Exception):
        looked_up.encode(decoded, topic=f"unregistered-{uuid.uuid4().hex[:6]}")


def test_an_arrow_type_registers_the_json_schema_made_of_it(apicurio, registry, topic):
    typ = pa.struct([pa.field("n", pa.int64(), nullable=False), pa.field("at", pa.timestamp("us", "UTC"))])
    fmt = make_format("json", schema=typ, schema_registry_url=apicurio.url, auto_register_schemas=True)
    rows = pa.array([{"n": 1, "at": datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)}], typ)
    encoded = fmt.encode(rows, topic=topic)
    registered = registry.get_latest_version(f"{topic}-value")
    assert registered.schema.schema_type == "JSON"
    assert int.from_bytes(encoded[0].as_py()[1:5], "big") == registered.schema_id
    reader = make_format("json", topic=topic, schema_registry_url=apicurio.url)
    assert reader.arrow_type() == typ
    assert reader.decode(encoded, topic=topic, partition=0, offsets=_offsets(1)).to_pylist() == rows.to_pylist()


def test_record_name_strategies_take_the_title(apicurio, confluent, registry, topic):
    from confluent_kafka.schema_registry import topic_record_subject_name_strategy

    theirs = _their_bytes(confluent, topic, ORDERS[:1], **{"subject.name.strategy": topic_record_subject_name_strategy})
    ours = make_format("json", schema=ORDER_TEXT, schema_registry_url=apicurio.url, auto_register_schemas=True,
                       value_subject_name_strategy="TopicRecordNameStrategy")
    decoded = make_format("json", schema=ORDER).decode(pa.array(theirs), topic=topic, partition=0,
                                                       offsets=_offsets(1))
    assert ours.encode(decoded, topic=topic).to_pylist() == theirs
    assert registry.get_latest_version(f"{topic}-Order").schema.schema_type == "JSON"


def test_references_resolve(apicurio, registry, topic):
    address = {"$id": "address.json", "type": "object", "required": ["city"],
               "properties": {"city": {"type": "string"}, "zip": {"type": "string"}}}
    registry.register_schema(f"{topic}-address", Schema(json.dumps(address), "JSON"))
    from kwire.registry import SchemaReference

    person = {"type": "object", "properties": {"name": {"type": "string"}, "home": {"$ref": "address.json"}},
              "required": ["home"]}
    registry.register_schema(f"{topic}-value", Schema(json.dumps(person), "JSON",
                                                      [SchemaReference("address.json", f"{topic}-address", 1)]))
    fmt = make_format("json", topic=topic, schema_registry_url=apicurio.url)
    assert fmt.arrow_type() == pa.struct([pa.field("name", pa.string()), pa.field("home", pa.struct([
        pa.field("city", pa.string(), nullable=False), pa.field("zip", pa.string())]), nullable=False)])


def test_values_the_registry_cannot_account_for(apicurio, confluent, registry, topic):
    theirs = _their_bytes(confluent, topic, ORDERS[:1])
    avro_id = registry.register_schema(f"{topic}-other", Schema('{"type": "string"}'))
    fmt = make_format("json", topic=topic, schema_registry_url=apicurio.url)
    cases = [
        (b'{"id": 1, "customer": "bare"}', "no schema registry framing"),
        (b"\x00\x7f\xff\xff\xf0" + b'{"id": 1, "customer": "x"}', "is not in the schema registry"),
        (b"\x00" + avro_id.to_bytes(4, "big") + b'{"id": 1, "customer": "x"}', "is AVRO"),
        (b"\x00\x00\x01", "shorter than its 5-byte header"),
    ]
    for bad, why in cases:
        with pytest.raises(UndecodableValueError, match=why) as err:
            fmt.decode(pa.array([theirs[0], None, bad]), topic=topic, partition=4, offsets=pa.array([7, 8, 9]))
        assert (err.value.partition, err.value.offset, err.value.row) == (4, 9, 2)
    # without a registry, a framed value is read after its frame, a bare one as it is
    plain = make_format("json", schema=ORDER)
    got = plain.decode(pa.array([theirs[0], b'{"id": 5, "customer": "bare"}']), topic=topic, partition=0,
                       offsets=_offsets(2))
    assert [r["id"] for r in got.to_pylist()] == [1, 5]
