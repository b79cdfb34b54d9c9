"""kwire's Protobuf encoder: Arrow rows written as the protobuf package's
``SerializeToString`` writes the same message, byte for byte; what it does
with nulls, missing fields, enum names and other Arrow types; framing."""

from __future__ import annotations

import datetime

import pyarrow as pa
import pytest

from kwire.formats.protobuf import ProtobufFormat

from . import schemas as S
from .test_decode import TOPIC, decode, legacy, order, scalars  # noqa: F401  (fixtures)


def roundtrip(fmt: ProtobufFormat, messages) -> list:
    """The messages through kwire: their bytes decoded to Arrow, encoded back."""
    arr = decode(fmt, [m.SerializeToString() for m in messages])
    return fmt.encode(arr, topic=TOPIC).to_pylist()


@pytest.mark.parametrize("seed", range(3))
def test_bytes_equal_the_protobuf_package_for_every_scalar(scalars, seed):
    fmt, cls = scalars
    messages = S.random_messages(cls, 300, seed, exact=True)
    assert roundtrip(fmt, messages) == [m.SerializeToString() for m in messages]


@pytest.mark.parametrize("seed", range(3))
def test_bytes_equal_the_protobuf_package_for_nested_values(order, seed):
    fmt, cls = order
    messages = S.random_messages(cls, 200, seed, exact=True)
    got = roundtrip(fmt, messages)
    for i, (a, m) in enumerate(zip(got, messages)):
        assert a == m.SerializeToString(), f"row {i}: {m}"


def test_maps_of_several_entries_are_written_in_the_columns_order(order):
    fmt, cls = order
    m = cls()
    for k in ("c", "a", "b"):
        m.places[k].x = ord(k)
    m.names.update({3: "three", 1: "one"})
    got = roundtrip(fmt, [m])[0]
    assert cls.FromString(got) == m
    arr = decode(fmt, [got])
    assert [k for k, _ in arr.to_pylist()[0]["places"]] == [k for k, _ in decode(fmt, [m.SerializeToString()])
                                                             .to_pylist()[0]["places"]]


def test_proto2_values_read_back_the_same(legacy):
    fmt, cls = legacy
    messages = S.random_messages(cls, 200, 4, exact=True)
    for m, raw in zip(messages, roundtrip(fmt, messages)):
        # declared defaults are written when absent (Arrow holds the default, not its absence)
        assert S.normalize(S.expected(cls.FromString(raw))) == S.normalize(S.expected(m))


def test_a_struct_column_built_by_hand(order):
    fmt, cls = order
    t = pa.struct([("id", pa.int32()), ("customer", pa.large_string()), ("color", pa.string()),
                   ("palette", pa.list_(pa.string())),
                   ("created", pa.timestamp("ms", tz="UTC")), ("ttl", pa.duration("s")),
                   ("origin", pa.struct([("x", pa.int64()), ("label", pa.string())])),
                   ("names", pa.map_(pa.int32(), pa.string())), ("w_int64", pa.int64())])
    rows = [{"id": 7, "customer": "c", "color": "BLUE", "palette": ["RED", "GREEN"],
             "created": datetime.datetime(2024, 1, 2, 3, 4, 5, 6000, tzinfo=datetime.timezone.utc),
             "ttl": datetime.timedelta(seconds=-90), "origin": {"x": -4, "label": None},
             "names": [(1, "one")], "w_int64": 0},
            None,
            {"id": None, "customer": None, "color": None, "palette": None, "created": None, "ttl": None,
             "origin": None, "names": None, "w_int64": None}]
    got = fmt.encode(pa.array(rows, t), topic=TOPIC).to_pylist()
    assert got[1] is None and got[2] == b""
    m = cls.FromString(got[0])
    want = cls(id=7, customer="c", color="BLUE", palette=["RED", "GREEN"], names={1: "one"})
    want.created.FromDatetime(rows[0]["created"])
    want.ttl.FromTimedelta(rows[0]["ttl"])
    want.origin.x = -4
    want.w_int64.value = 0
    assert m == want and got[0] == want.SerializeToString()


def test_refusals(order, scalars):
    fmt, cls = order
    with pytest.raises(ValueError, match="fields the message lacks: nope"):
        fmt.encode(pa.array([{"nope": 1}]), topic=TOPIC)
    with pytest.raises(TypeError, match="struct column"):
        fmt.encode(pa.array([1]), topic=TOPIC)
    with pytest.raises(ValueError, match=r"row 1 .*enum name the enum does not declare \(field kwire\.test\.Order\.color\)"):
        fmt.encode(pa.array([{"color": "RED"}, {"color": "PURPLE"}]), topic=TOPIC)
    with pytest.raises(ValueError, match=r"row 0 .*null item .*field kwire\.test\.Order\.palette"):
        fmt.encode(pa.array([{"palette": ["RED", None]}]), topic=TOPIC)
    with pytest.raises(ValueError, match="use.schema.id"):
        ProtobufFormat(cls.DESCRIPTOR, framed=True).encode(pa.array([{"id": 1}]), topic=TOPIC)


def test_framed_without_a_registry(order):
    fmt, cls = order
    framed = ProtobufFormat(cls.DESCRIPTOR, framed=True, schema_id=258)
    got = framed.encode(pa.array([{"id": 1}]), topic=TOPIC).to_pylist()[0]
    assert got == b"\x00\x00\x00\x01\x02\x00" + cls(id=1).SerializeToString()
    line = ProtobufFormat(cls.DESCRIPTOR.nested_types_by_name["Line"], framed=True, schema_id=1)
    got = line.encode(pa.array([{"sku": "s"}]), topic=TOPIC).to_pylist()[0]
    assert got[:7] == b"\x00\x00\x00\x00\x01\x04\x00"        # message indexes [0, 0]: count 2, then 0, 0
    assert decode(line, [got]).to_pylist() == [{"sku": "s", "quantity": 0, "at": None, "tags": [],
                                                "attributes": []}]
