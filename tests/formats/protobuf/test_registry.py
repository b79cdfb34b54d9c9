"""The Protobuf format with a real schema registry (Apicurio's
Confluent-compatible API, the session's ``apicurio``) and confluent-kafka's
ProtobufSerializer and ProtobufDeserializer as peers: kwire decodes the bytes
they write, its encoder's bytes equal theirs, they read kwire's; references,
nested messages (message indexes), evolution across registered versions."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import topic_subject_name_strategy
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kwire.formats import make_format
from kwire.formats.base import UndecodableValueError
from kwire.formats.protobuf import ProtobufFormat
from kwire.registry import SchemaRegistryClient

from . import schemas as S

PARTITION = 0


@pytest.fixture(scope="module")
def confluent(apicurio):
    return apicurio.confluent_client()


@pytest.fixture
def client(apicurio):
    with SchemaRegistryClient({"url": apicurio.url, "timeout": 10}) as c:
        yield c


@pytest.fixture
def topic() -> str:
    return f"pb-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def order_cls():
    return S.message_class(S.schema(S.NESTED).message([0]))


def serializer(confluent, cls, **conf):
    return ProtobufSerializer(cls, confluent, {"subject.name.strategy": topic_subject_name_strategy,
                                               "use.deprecated.format": False, **conf})


def their_bytes(confluent, cls, topic, messages, **conf):
    ser = serializer(confluent, cls, **conf)
    ctx = SerializationContext(topic, MessageField.VALUE)
    return [ser(m, ctx) for m in messages]


def kwire_decode(fmt, topic, values):
    out = fmt.decode(pa.array(values, pa.binary()), topic=topic, partition=PARTITION,
                     offsets=pa.array(range(len(values)), pa.int64()))
    out.validate(full=True)
    return out


def test_kwire_decodes_what_confluent_kafka_writes(confluent, client, topic, order_cls):
    messages = S.random_messages(order_cls, 150, 11)
    values = their_bytes(confluent, order_cls, topic, messages)
    fmt = ProtobufFormat(registry=client)                        # the reader: the subject's latest
    out = kwire_decode(fmt, topic, values + [None])
    t = fmt.arrow_type(topic)
    want = [S.expected(m) for m in messages] + [None]
    assert S.normalize(out.to_pylist(), pa.list_(t)) == S.normalize(want, pa.list_(t))
    assert fmt.reader_message(topic).full_name == "kwire.test.Order"


def test_kwire_encodes_the_bytes_confluent_kafka_writes(confluent, client, topic, order_cls):
    messages = S.random_messages(order_cls, 150, 12, exact=True)
    values = their_bytes(confluent, order_cls, topic, messages)
    reader = ProtobufFormat(registry=client)
    arr = kwire_decode(reader, topic, values)
    fmt = ProtobufFormat(order_cls, registry=client)             # the schema registered: looked up
    assert fmt.encode(arr, topic=topic).to_pylist() == values
    latest = ProtobufFormat(order_cls, registry=client, use_latest=True)
    assert latest.encode(arr, topic=topic).to_pylist() == values


def test_kwire_registers_as_confluent_kafka_does(confluent, client, topic, order_cls):
    messages = S.random_messages(order_cls, 100, 13, exact=True)
    arr = kwire_decode(ProtobufFormat(order_cls), topic, [m.SerializeToString() for m in messages])
    fmt = make_format("protobuf", {"schema": order_cls, "registry": client, "auto.register.schemas": "true"},
                      topic=topic)
    ours = fmt.encode(arr, topic=topic).to_pylist()
    assert "common.proto" in client.get_subjects()                # the import, registered as confluent-kafka does
    assert ours == their_bytes(confluent, order_cls, topic, messages)   # the same schema: the same id
    assert [order_cls.FromString(v[6:]) for v in ours] == messages


def test_confluent_kafka_reads_what_kwire_writes(confluent, client, topic):
    cls = S.message_class(S.schema(S.EVOLUTION_V2).message([0]))
    messages = [cls(id=i, name=f"n{i}", tags=["a"] * i, kind=i % 2) for i in range(20)]
    messages[3].at.city = "Bergen"
    arr = kwire_decode(ProtobufFormat(cls), topic, [m.SerializeToString() for m in messages])
    ours = ProtobufFormat(cls, registry=client, auto_register=True).encode(arr, topic=topic).to_pylist()
    deser = ProtobufDeserializer(cls, {"use.deprecated.format": False})   # see the deviation below
    ctx = SerializationContext(topic, MessageField.VALUE)
    assert [deser(v, ctx) for v in ours] == messages


def test_apicurio_deviation_the_serialized_form_of_protobuf_schemas(apicurio, client, topic):
    """Confluent's API gives a Protobuf schema as a base64 serialized
    FileDescriptorProto with ``?format=serialized`` (confluent-kafka's
    ProtobufDeserializer asks for it). Apicurio 3.3.3 answers HTTP 500 for
    one registered in that form (it parses the base64 as ``.proto`` text),
    and the raw descriptor bytes, not base64, for one registered as text. So
    confluent-kafka's deserializer is given no registry in these tests; kwire
    asks for schemas as stored and reads both forms."""
    import base64

    import httpx

    cls = S.message_class(S.schema(S.EVOLUTION_V1).message([0]))
    serialized = base64.standard_b64encode(cls.DESCRIPTOR.file.serialized_pb).decode()
    from kwire.registry import Schema

    sid = client.register_schema(f"{topic}-value", Schema(serialized, "PROTOBUF"))
    answer = httpx.get(f"{apicurio.url}/schemas/ids/{sid}", params={"format": "serialized"}, timeout=10)
    assert answer.status_code == 500 and "Syntax error" in answer.text
    assert client.get_schema(sid).schema_str == serialized
    tid = client.register_schema(f"{topic}-key", Schema(S.EVOLUTION_V2, "PROTOBUF"))
    answer = httpx.get(f"{apicurio.url}/schemas/ids/{tid}", params={"format": "serialized"}, timeout=10)
    assert answer.status_code == 200 and answer.json()["schema"].startswith("\n\x05Event")
    for schema_id in (sid, tid):
        fmt = ProtobufFormat(registry=client, schema_id=schema_id)
        assert fmt.reader_message().full_name == "kwire.evo.Event"


def test_nested_messages_and_the_subject_name_strategies(confluent, client, topic, order_cls):
    line_cls = S.message_class(order_cls.DESCRIPTOR.nested_types_by_name["Line"])
    lines = [line_cls(sku=f"s{i}", quantity=i, tags=["t"]) for i in range(5)]
    strategy = "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy"
    from confluent_kafka.schema_registry import topic_record_subject_name_strategy

    values = their_bytes(confluent, line_cls, topic, lines, **{"subject.name.strategy":
                                                                topic_record_subject_name_strategy})
    assert values[0][5:7] == b"\x04\x00"                          # message indexes [0, 0]
    fmt = ProtobufFormat(registry=client, subject=f"{topic}-kwire.test.Order.Line", message="kwire.test.Order.Line")
    out = kwire_decode(fmt, topic, values)
    assert [r["sku"] for r in out.to_pylist()] == [m.sku for m in lines]
    ours = ProtobufFormat(line_cls, registry=client, subject_name_strategy=strategy).encode(out, topic=topic)
    assert ours.to_pylist() == values
    wrong = ProtobufFormat(registry=client, subject=f"{topic}-kwire.test.Order.Line")   # the file's first: Order
    with pytest.raises(UndecodableValueError, match=r"message \[0, 0\] is kwire\.test\.Order\.Line, not the "
                                                    r"reader's kwire\.test\.Order") as e:
        kwire_decode(wrong, topic, [None] + values)
    assert (e.value.topic, e.value.partition, e.value.offset, e.value.row) == (topic, PARTITION, 1, 1)


def test_values_of_older_versions_decode_into_the_latest(confluent, client, topic):
    from kwire.registry import Schema

    subject = f"{topic}-value"
    client.set_compatibility(subject, "NONE")
    v1 = S.message_class(S.schema(S.EVOLUTION_V1).message([0]))
    v2 = S.message_class(S.schema(S.EVOLUTION_V2).message([0]))
    old = their_bytes(confluent, v1, topic, [v1(id=5, name="old", size=9, tags=["x"])])
    client.register_schema(subject, Schema(S.EVOLUTION_V2, "PROTOBUF"))   # the latest, as .proto text
    new_msg = v2(id=6, name="new", kind="CLICK")
    new_msg.at.city = "Turin"
    new = their_bytes(confluent, v2, topic, [new_msg])
    assert old[0][1:5] != new[0][1:5]
    rows = kwire_decode(ProtobufFormat(registry=client), topic, old + new).to_pylist()
    assert rows == [{"id": 5, "name": "old", "tags": ["x"], "kind": "KIND_UNSPECIFIED", "at": None},
                    {"id": 6, "name": "new", "tags": [], "kind": "CLICK", "at": {"city": "Turin"}}]
    first = ProtobufFormat(registry=client, version=1)
    assert kwire_decode(first, topic, old + new).to_pylist()[1] == {"id": 6, "name": "new", "size": 0, "tags": []}


def test_a_schema_id_the_registry_lacks(client, topic, order_cls):
    fmt = ProtobufFormat(order_cls, registry=client)
    with pytest.raises(UndecodableValueError) as e:
        kwire_decode(fmt, topic, [b"\x00\x7f\xff\xff\xf0\x00"])
    assert e.value.row == 0 and e.value.offset == 0
