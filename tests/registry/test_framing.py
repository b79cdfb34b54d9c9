"""Registry framing: confluent-kafka's Avro, Protobuf and JSON Schema
serializers (against the real Apicurio) frame values that kwire parses,
one at a time and as Arrow columns, and kwire frames them byte for byte as
they do; Apicurio's own framings; hostile frames (bytes made here: no
serializer writes them) raise CorruptRecordError naming the record."""

from __future__ import annotations

import io
import json
import random
import struct

import fastavro
import pyarrow as pa
import pytest
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from hypothesis import given, settings
from hypothesis import strategies as st

from kwire._arrow import HEADERS_TYPE
from kwire.errors import CorruptRecordError
from kwire.registry import framing as f

from .conftest import USER_V1

_F = descriptor_pb2.FieldDescriptorProto


def _protobuf_classes():
    """``First`` (message indexes [0]), ``Second`` ([1]) and ``Second.Inner``
    ([1, 0]) of a .proto made here (no protoc needed)."""
    fdp = descriptor_pb2.FileDescriptorProto(name="kwire/framing_test.proto", package="kwire.framing", syntax="proto3")
    first = fdp.message_type.add(name="First")
    first.field.add(name="id", number=1, type=_F.TYPE_INT64, label=_F.LABEL_OPTIONAL)
    second = fdp.message_type.add(name="Second")
    second.field.add(name="s", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    inner = second.nested_type.add(name="Inner")
    inner.field.add(name="n", number=1, type=_F.TYPE_INT32, label=_F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"kwire.framing.{name}"))
            for name in ("First", "Second", "Second.Inner")}


@pytest.fixture(scope="module")
def confluent(apicurio):
    return apicurio.confluent_client()


def _ctx(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


def test_avro_values_of_confluents_serializer(confluent, client, subject):
    topic = subject[:-len("-value")]
    serialize = AvroSerializer(confluent, USER_V1.schema_str)
    records = [{"id": i, "name": f"user-{i}"} for i in range(50)]
    values = [serialize(r, _ctx(topic)) for r in records]
    schema_id = client.get_latest_version(subject).schema_id
    parsed = fastavro.parse_schema(json.loads(client.get_schema(schema_id).schema_str))
    for record, value in zip(records, values):
        frame = f.parse_frame(value)
        assert (frame.schema_id, frame.payload_start) == (schema_id, 5)
        assert fastavro.schemaless_reader(io.BytesIO(value[5:]), parsed) == record
        assert f.encode_frame(schema_id, value[5:]) == value                       # byte for byte
    column = pa.array(values[:10] + [None] + values[10:], pa.binary())
    framed = f.parse_column(column)
    assert framed.schema_ids.to_pylist() == [schema_id] * 10 + [None] + [schema_id] * 40
    payloads = f.payloads(framed).to_pylist()
    assert payloads[10] is None and [p for p in payloads if p is not None] == [v[5:] for v in values]
    assert f.frame_column(pa.array([v[5:] for v in values]), schema_id).to_pylist() == values


def test_protobuf_values_and_message_indexes(confluent, client, subject):
    topic = subject[:-len("-value")]
    classes = _protobuf_classes()
    made = {"First": classes["First"](id=7), "Second": classes["Second"](s="x"),
            "Second.Inner": classes["Second.Inner"](n=-3)}
    expected = {"First": [0], "Second": [1], "Second.Inner": [1, 0]}
    values, rows = [], []
    for name, message in made.items():
        serialize = ProtobufSerializer(type(message), confluent, {"use.deprecated.format": False})
        value = serialize(message, _ctx(f"{topic}-{name.replace('.', '-').lower()}"))
        frame = f.parse_frame(value, message_indexes=True)
        assert frame.message_indexes == expected[name], name
        back = type(message)()
        back.ParseFromString(value[frame.payload_start:])
        assert back == message
        assert client.get_schema(frame.schema_id).schema_type == "PROTOBUF"
        assert f.encode_frame(frame.schema_id, value[frame.payload_start:], expected[name]) == value
        values.append(value)
        rows.append((frame.schema_id, expected[name], value[frame.payload_start:]))
    column = pa.array(values + [None], pa.binary())
    framed = f.parse_column(column, message_indexes=True)
    assert framed.schema_ids.to_pylist() == [r[0] for r in rows] + [None]
    assert framed.message_indexes.to_pylist() == [r[1] for r in rows] + [None]
    assert f.payloads(framed).to_pylist() == [r[2] for r in rows] + [None]
    data, end = framed.column.buffers()[2].to_pybytes(), 0
    for start, row, value in zip(framed.payload_starts.to_pylist(), rows, values):
        end += len(value)
        assert data[start:end] == row[2]                  # a payload runs from its start to its value's end


def test_json_schema_values(confluent, client, subject):
    topic = subject[:-len("-value")]
    schema = json.dumps({"type": "object", "title": "Thing", "properties": {"id": {"type": "integer"}}})
    serialize = JSONSerializer(schema, confluent)
    value = serialize({"id": 5}, _ctx(topic))
    frame = f.parse_frame(value)
    assert json.loads(value[frame.payload_start:]) == {"id": 5}
    assert client.get_schema(frame.schema_id).schema_type == "JSON"


def test_message_index_encoding_matches_confluents():
    from confluent_kafka.schema_registry.common.serde import SchemaId

    for indexes in ([0], [1], [1, 0], [3, 2, 1], [70, 300, 0], [2**20]):
        ours = f.encode_message_indexes(indexes)
        theirs = SchemaId("PROTOBUF", 9, message_indexes=indexes).id_to_bytes()[5:]
        assert ours == theirs, indexes
        assert f.parse_message_indexes(ours) == (indexes, len(ours))
    assert f.encode_message_indexes([]) == b"\x00"
    with pytest.raises(ValueError):
        f.encode_message_indexes([-1])


def test_apicurio_framings():
    value = b"\x00" + struct.pack(">q", 2**33 + 7) + b"payload"
    assert f.parse_frame(value, id_size=f.APICURIO_ID_SIZE) == f.Frame(2**33 + 7, None, 9)
    framed = f.parse_column(pa.array([value, None], pa.large_binary()), id_size=f.APICURIO_ID_SIZE)
    assert framed.schema_ids.type == pa.int64() and framed.schema_ids.to_pylist() == [2**33 + 7, None]
    assert f.payloads(framed).to_pylist() == [b"payload", None]

    assert f.apicurio_header() == "apicurio.value.globalId"
    assert f.apicurio_header(is_key=True, id_kind=f.CONTENT_ID) == "apicurio.key.contentId"
    with pytest.raises(ValueError):
        f.apicurio_header(id_kind="artifactId")
    long_ = lambda n: struct.pack(">q", n)  # noqa: E731
    headers = [[("apicurio.value.globalId", long_(11))], None, [],
               [("other", b"x"), ("apicurio.value.globalId", long_(1)), ("apicurio.value.globalId", long_(12))],
               [("apicurio.key.globalId", long_(5)), ("apicurio.value.contentId", long_(6))]]
    column = pa.array(headers, HEADERS_TYPE)
    assert f.apicurio_header_ids(column).to_pylist() == [11, None, None, 12, None]
    assert f.apicurio_header_ids(column, is_key=True).to_pylist() == [None, None, None, None, 5]
    assert f.apicurio_header_ids(column, id_kind=f.CONTENT_ID).to_pylist() == [None, None, None, None, 6]
    assert [f.apicurio_id_from_headers(row or []) for row in headers] == [11, None, None, 12, None]
    assert f.apicurio_id_from_headers(headers[4], is_key=True) == 5
    with pytest.raises(CorruptRecordError) as e:
        f.apicurio_header_ids(column, values=pa.array([b"v", None, b"v", b"v", b"v"]), topic="t", partition=1,
                              offsets=[40, 41, 42, 43, 44])
    assert (e.value.topic, e.value.partition, e.value.offset) == ("t", 1, 42)
    bad = pa.array([[("apicurio.value.globalId", b"\x00\x01")]], HEADERS_TYPE)
    with pytest.raises(CorruptRecordError, match="2 bytes"):
        f.apicurio_header_ids(bad, offsets=[9])


HOSTILE = [
    (b"", "0 bytes"), (b"\x00\x00\x00", "3 bytes"), (b"\x01\x00\x00\x00\x01payload", "magic byte 1"),
    (b"\xff" * 9, "magic byte 255"), (b"\x00\x80\x00\x00\x00", "negative schema id"),
]


@pytest.mark.parametrize("value,reason", HOSTILE)
def test_hostile_frames_name_the_record(value, reason):
    good = f.encode_frame(3, b"ok")
    with pytest.raises(CorruptRecordError, match=reason):
        f.parse_frame(value)
    column = pa.array([good, None, good, value, value], pa.binary())
    with pytest.raises(CorruptRecordError, match=reason) as e:
        f.parse_column(column, topic="orders", partition=4, offsets=pa.array([10, 11, 12, 13, 14], pa.int64()))
    assert (e.value.topic, e.value.partition, e.value.offset) == ("orders", 4, 13)


@pytest.mark.parametrize("tail,reason", [
    (b"", "ends before its message indexes"), (b"\x02", "inside a varint"), (b"\x80", "inside a varint"),
    (b"\xff" * 11, "longer than 10 bytes"), (b"\x01", "-1 message indexes"),
    (f.encode_message_indexes([1])[:1] + b"\x01", "negative message index"),
    (b"\xfe\x7f", "8191 message indexes"),
])
def test_hostile_message_indexes(tail, reason):
    value = f.encode_frame(3, b"") + tail
    with pytest.raises(CorruptRecordError, match=reason):
        f.parse_frame(value, message_indexes=True)
    column = pa.array([f.encode_frame(3, b"p", [0]), f.encode_frame(3, b"q", [2, 1]), value])
    with pytest.raises(CorruptRecordError, match=reason) as e:
        f.parse_column(column, message_indexes=True, topic="t", partition=0, offsets=[5, 6, 7])
    assert e.value.offset == 7


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=24)), min_size=1, max_size=20), st.booleans())
def test_a_column_parses_as_its_values_do(values, indexes):
    """Whatever the bytes: the column's answer is each value's (or the first bad row's error)."""
    singles = []
    for i, v in enumerate(values):
        if v is None:
            singles.append(None)
            continue
        try:
            singles.append(f.parse_frame(v, message_indexes=indexes))
        except CorruptRecordError as e:
            singles.append(e)
    first_bad = next((i for i, s in enumerate(singles) if isinstance(s, CorruptRecordError)), None)
    try:
        framed = f.parse_column(pa.array(values, pa.binary()), message_indexes=indexes,
                                offsets=list(range(100, 100 + len(values))))
    except CorruptRecordError as e:
        assert first_bad is not None and e.offset == 100 + first_bad and e.reason == singles[first_bad].reason
        return
    assert first_bad is None
    assert framed.schema_ids.to_pylist() == [s and s.schema_id for s in singles]
    if indexes:
        assert framed.message_indexes.to_pylist() == [s and s.message_indexes for s in singles]
    payloads = f.payloads(framed).to_pylist()
    assert payloads == [v if v is None else v[s.payload_start:] for v, s in zip(values, singles)]


def test_a_million_rows_take_no_python_per_row():
    """The vectorised path: a 1M-row column parses in well under a second (one Python step per kernel)."""
    import time

    rng = random.Random(5)
    column = pa.array([f.encode_frame(rng.randrange(1, 50), b"v" * rng.randrange(0, 40)) for _ in range(1_000_000)],
                      pa.binary())
    t0 = time.perf_counter()
    framed = f.parse_column(column)
    took = time.perf_counter() - t0
    assert len(framed.schema_ids) == 1_000_000 and framed.schema_ids.null_count == 0
    assert took < 1.0, took
