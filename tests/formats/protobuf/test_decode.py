"""kwire's Protobuf decoder against the protobuf package on the same bytes:
every type, nesting, maps, oneofs, well-known types, proto2 defaults and
groups, evolution, random values from a seeded generator; and bytes no
writer makes (the protobuf package is the judge of what is malformed)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from kwire.formats.base import UndecodableValueError
from kwire.formats.protobuf import ProtobufFormat, ProtobufSchemaError, arrow_type, parse_schema

from . import schemas as S

TOPIC, PARTITION = "pb", 3


def T(number: int, wire: int) -> bytes:
    """A field's tag."""
    v, out = number << 3 | wire, bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    return bytes(out + bytes([v]))


def decode(fmt: ProtobufFormat, values, first_offset: int = 100) -> pa.Array:
    col = pa.array(values, pa.binary())
    out = fmt.decode(col, topic=TOPIC, partition=PARTITION,
                     offsets=pa.array(range(first_offset, first_offset + len(values)), pa.int64()))
    out.validate(full=True)
    return out


def assert_same(fmt: ProtobufFormat, cls: type, values) -> None:
    out = decode(fmt, values)
    t = fmt.arrow_type(TOPIC)
    assert out.type == t
    for i, (got, raw) in enumerate(zip(out.to_pylist(), values)):
        want = None if raw is None else S.expected(cls.FromString(raw))
        assert S.normalize(got, t) == S.normalize(want, t), f"row {i}"


@pytest.fixture(scope="module")
def scalars():
    desc = S.schema(S.SCALARS).message([0])
    return ProtobufFormat(desc), S.message_class(desc)


@pytest.fixture(scope="module")
def order():
    desc = S.schema(S.NESTED).message([0])
    return ProtobufFormat(desc), S.message_class(desc)


@pytest.fixture(scope="module")
def legacy():
    desc = S.schema(S.PROTO2).message([0])
    return ProtobufFormat(desc), S.message_class(desc)


# ------------------------------------------------------------------ the mapping
def test_arrow_types_of_every_scalar(scalars):
    t = scalars[0].arrow_type()
    want = {"f_double": pa.float64(), "f_float": pa.float32(), "f_int32": pa.int32(), "f_int64": pa.int64(),
            "f_uint32": pa.uint32(), "f_uint64": pa.uint64(), "f_sint32": pa.int32(), "f_sint64": pa.int64(),
            "f_fixed32": pa.uint32(), "f_fixed64": pa.uint64(), "f_sfixed32": pa.int32(), "f_sfixed64": pa.int64(),
            "f_bool": pa.bool_(), "f_string": pa.string(), "f_bytes": pa.binary(),
            "f_enum": pa.dictionary(pa.int32(), pa.string())}
    for name, typ in want.items():
        assert t.field(name).type == typ
        assert t.field("o" + name[1:]).type == typ
        assert t.field("r" + name[1:]).type == pa.list_(typ)


def test_arrow_types_of_messages_maps_and_well_known_types(order):
    t = order[0].arrow_type()
    assert t.field("created").type == pa.timestamp("us", tz="UTC")
    assert t.field("ttl").type == pa.duration("us")
    assert t.field("history").type == pa.list_(pa.timestamp("us", tz="UTC"))
    assert t.field("w_string").type == pa.string() and t.field("w_uint32").type == pa.uint32()
    assert t.field("places").type == pa.map_(pa.string(), pa.struct([pa.field("x", pa.int32()),
                                                                      pa.field("y", pa.int32()),
                                                                      pa.field("label", pa.string())]))
    assert t.field("colors").type == pa.map_(pa.int64(), pa.dictionary(pa.int32(), pa.string()))
    assert t.field("counts").type == pa.map_(pa.uint64(), pa.int64())
    assert t.field("cash").type == pa.struct([])
    assert [f.name for f in t] == [f.name for f in order[1].DESCRIPTOR.fields]
    assert all(f.nullable for f in t)


def test_recursive_messages_are_refused_by_name():
    s = parse_schema('syntax = "proto3"; package r; message Tree { string v = 1; repeated Tree kids = 2; }')
    with pytest.raises(ProtobufSchemaError, match=r"r\.Tree\.kids: a recursive message \(r\.Tree -> r\.Tree\)"):
        arrow_type(s.message([0]))
    s = parse_schema('syntax = "proto3"; import "google/protobuf/struct.proto"; message J { google.protobuf.Struct s = 1; }')
    with pytest.raises(ProtobufSchemaError, match="google.protobuf.Value"):
        arrow_type(s.message([0]))


# ------------------------------------------------------------------ values
def test_every_scalar_at_its_limits(scalars):
    fmt, cls = scalars
    values = []
    for lo_hi in (0, 1):
        m = cls()
        for fd in m.DESCRIPTOR.fields:
            if fd.type in S.INT_RANGES:
                v = S.INT_RANGES[fd.type][lo_hi]
            elif fd.type == S.F.TYPE_ENUM:
                v = [v.number for v in fd.enum_type.values][-1]
            else:
                v = {S.F.TYPE_DOUBLE: -1.5e300, S.F.TYPE_FLOAT: 3.25, S.F.TYPE_BOOL: True,
                     S.F.TYPE_STRING: "ünï😀", S.F.TYPE_BYTES: b"\x00\xff"}[fd.type]
            if fd.is_repeated:
                getattr(m, fd.name).extend([v, v])
            else:
                setattr(m, fd.name, v)
        values.append(m.SerializeToString())
    values += [cls().SerializeToString(), None]
    assert_same(fmt, cls, values)
    row = decode(fmt, [cls().SerializeToString()]).to_pylist()[0]
    assert row["f_int32"] == 0 and row["f_string"] == "" and row["f_enum"] == "COLOR_UNSPECIFIED"
    assert row["o_int32"] is None and row["o_string"] is None and row["r_int32"] == []


@pytest.mark.parametrize("seed", range(4))
def test_random_values_of_every_scalar(scalars, seed):
    fmt, cls = scalars
    assert_same(fmt, cls, S.random_values(cls, 300, seed))


@pytest.mark.parametrize("seed", range(4))
def test_random_nested_values(order, seed):
    fmt, cls = order
    assert_same(fmt, cls, S.random_values(cls, 200, seed))


@pytest.mark.parametrize("seed", range(3))
def test_random_proto2_values(legacy, seed):
    fmt, cls = legacy
    assert_same(fmt, cls, S.random_values(cls, 200, seed))


def test_proto2_declared_defaults(legacy):
    fmt, cls = legacy
    row = decode(fmt, [cls(key=1).SerializeToString()]).to_pylist()[0]
    assert row == {"plain": None, "seven": 7, "hello": "hello", "half": 0.5, "yes": True, "level": "MID",
                   "any_level": None, "key": 1, "numbers": [], "packed_numbers": [], "levels": [], "extra": None,
                   "item": [], "blob": b"\x01\x02", "ratio": -1.25, "big": 2**64 - 1, "neg": -20}


def test_groups(legacy):
    fmt, cls = legacy
    m = cls(key=2)
    m.extra.note = "n"
    m.extra.marks.extend([1, 2])
    m.item.add(weight=3)
    m.item.add()
    row = decode(fmt, [m.SerializeToString()]).to_pylist()[0]
    assert row["extra"] == {"note": "n", "marks": [1, 2]} and row["item"] == [{"weight": 3}, {"weight": None}]


def test_closed_enum_drops_unknown_numbers_open_enum_nulls_them(legacy, scalars):
    fmt, cls = legacy
    raw = cls(key=1, level="HIGH").SerializeToString() + T(6, 0) + bytes([2]) + T(11, 0) + bytes([9]) + T(11, 0) + bytes([3])
    row = decode(fmt, [raw]).to_pylist()[0]
    assert row["level"] == "HIGH" and row["levels"] == ["HIGH"]       # 2 and 3 are no Level: dropped
    assert cls.FromString(raw).level == 9 and list(cls.FromString(raw).levels) == [9]
    fmt, cls = scalars
    raw = T(16, 0) + bytes([7]) + T(56, 2) + bytes([2, 1, 9])
    row = decode(fmt, [raw]).to_pylist()[0]
    assert row["f_enum"] is None and row["r_enum"] == ["RED", None]


def test_the_last_scalar_wins_messages_merge_and_oneofs_switch(order):
    fmt, cls = order
    a = cls(id=1, customer="a", card="c")
    a.origin.x = 5
    a.origin.label = "first"
    a.lines.add(sku="one")
    b = cls(id=2, account=9)
    b.origin.y = 6
    b.lines.add(sku="two")
    c = cls(card="again")
    raw = a.SerializeToString() + b.SerializeToString()
    assert_same(fmt, cls, [raw, raw + c.SerializeToString(), b.SerializeToString() + a.SerializeToString()])
    row = decode(fmt, [raw]).to_pylist()[0]
    assert row["id"] == 2 and row["origin"] == {"x": 5, "y": 6, "label": "first"}
    assert row["card"] is None and row["account"] == 9 and [x["sku"] for x in row["lines"]] == ["one", "two"]
    p1, p2 = cls(), cls()
    p1.pickup.x = 1
    p2.account = 4
    p3 = cls()
    p3.pickup.y = 2
    raw = p1.SerializeToString() + p2.SerializeToString() + p3.SerializeToString()
    row = decode(fmt, [raw]).to_pylist()[0]
    assert row["pickup"] == {"x": 0, "y": 2, "label": ""} and row["account"] is None   # switched away: forgotten


def test_fields_in_any_order_and_unknown_fields_skipped(scalars):
    fmt, cls = scalars
    m = cls(f_int32=5, f_string="s", r_int64=[1, 2])
    fields = [(fd, v) for fd, v in m.ListFields()]
    raw = b"".join(cls(**{fd.name: v}).SerializeToString() for fd, v in reversed(fields))
    unknown = bytes([0xF8, 0x07, 1,                       # field 127 varint
                     0x81, 0x08]) + bytes(8) + bytes([    # field 128 fixed64
                     0x8A, 0x08, 2, 0xAA, 0xBB,           # field 129 bytes
                     0x95, 0x08, 1, 2, 3, 4,              # field 130 fixed32
                     0x9B, 0x08, 0x08, 1, 0x9C, 0x08])    # field 131: a group holding field 1
    assert_same(fmt, cls, [raw, unknown + raw + unknown])
    assert decode(fmt, [unknown + raw]).to_pylist()[0]["f_string"] == "s"


def test_a_known_field_with_another_wire_type_is_unknown(scalars):
    fmt, cls = scalars
    raw = T(3, 2) + bytes([1, 0x41]) + T(14, 0) + bytes([5]) + T(3, 0) + bytes([9])   # f_int32 as bytes, f_string as varint, f_int32 9
    assert_same(fmt, cls, [raw])
    row = decode(fmt, [raw]).to_pylist()[0]
    assert row["f_int32"] == 9 and row["f_string"] == ""


def test_packed_and_unpacked_both_read(scalars):
    fmt, cls = scalars
    unpacked = b"".join(T(43, 0) + bytes([v]) for v in (1, 2, 3))          # r_int32, declared packed
    packed = T(57, 2) + bytes([3, 4, 5, 6])                             # u_int64, declared unpacked
    row = decode(fmt, [unpacked + packed + unpacked]).to_pylist()[0]
    assert row["r_int32"] == [1, 2, 3, 1, 2, 3] and row["u_int64"] == [4, 5, 6]
    assert_same(fmt, cls, [unpacked + packed + unpacked])


def test_evolution_between_versions_by_field_number():
    v1 = S.message_class(parse_schema(S.EVOLUTION_V1).message([0]))
    v2 = S.message_class(parse_schema(S.EVOLUTION_V2).message([0]))
    old = [v1(id=7, name="old", size=3, tags=["a"]).SerializeToString(), v1(id=-1).SerializeToString()]
    new = v2(id=2**64 - 1, name="new", tags=["b"], kind="CLICK")
    new.at.city = "Oslo"
    new = [new.SerializeToString()]
    reader2 = ProtobufFormat(parse_schema(S.EVOLUTION_V2))
    rows = decode(reader2, old + new).to_pylist()
    assert rows[0] == {"id": 7, "name": "old", "tags": ["a"], "kind": "KIND_UNSPECIFIED", "at": None}
    assert rows[1]["id"] == 2**64 - 1        # int64 -1 read as uint64, as the protobuf package does
    assert rows[2] == {"id": 2**64 - 1, "name": "new", "tags": ["b"], "kind": "CLICK", "at": {"city": "Oslo"}}
    assert_same(reader2, v2, old + new)
    reader1 = ProtobufFormat(parse_schema(S.EVOLUTION_V1))
    assert_same(reader1, v1, old + new)
    assert decode(reader1, new).to_pylist()[0] == {"id": -1, "name": "new", "size": 0, "tags": ["b"]}


def test_a_column_with_nulls_and_an_offset(order):
    fmt, cls = order
    values = S.random_values(cls, 20, 9)
    col = pa.array([None] + values + [None], pa.binary()).slice(1, 20)
    out = fmt.decode(col, topic=TOPIC, partition=PARTITION, offsets=pa.array(range(20), pa.int64()))
    assert S.normalize(out.to_pylist(), pa.list_(out.type)) == \
        S.normalize([S.expected(cls.FromString(v)) for v in values], pa.list_(out.type))


def test_large_binary_and_chunked_columns(scalars):
    fmt, cls = scalars
    values = S.random_values(cls, 10, 1)
    for col in (pa.array(values, pa.large_binary()), pa.chunked_array([values[:4], values[4:]], pa.binary())):
        out = fmt.decode(col, topic=TOPIC, partition=PARTITION, offsets=pa.array(range(10), pa.int64()))
        assert len(out) == 10


# ------------------------------------------------------------------ framing
def test_confluent_frames_without_a_registry(order):
    fmt, cls = order
    framed = ProtobufFormat(cls.DESCRIPTOR, framed=True)
    values = S.random_values(cls, 5, 2)
    frames = [b"\x00\x00\x00\x00\x07\x00" + values[0], b"\x00\x00\x00\x01\x00\x02\x00" + values[1],
              b"\x00\x00\x00\x00\x07\x00" + values[2], None]
    out = decode(framed, frames).to_pylist()
    assert S.normalize(out[:3], pa.list_(fmt.arrow_type())) == \
        S.normalize([S.expected(cls.FromString(v)) for v in values[:3]], pa.list_(fmt.arrow_type()))
    assert out[3] is None
    for bad in (b"", b"\x01\x00\x00\x00\x07\x00", b"\x00\x00\x00\x00\x07", b"\x00\x00\x00\x00\x07\x01",
                b"\x00\x00\x00\x00\x07\x04\x00"):
        with pytest.raises(UndecodableValueError, match="frame") as e:
            decode(framed, [frames[0], bad], first_offset=50)
        assert (e.value.topic, e.value.partition, e.value.offset, e.value.row) == (TOPIC, PARTITION, 51, 1)


# ------------------------------------------------------------------ hostile bytes
def _protobuf_refuses(cls: type, raw: bytes) -> bool:
    from google.protobuf.message import DecodeError

    try:
        cls.FromString(raw)
    except DecodeError:
        return True
    return False


def _check_hostile(fmt: ProtobufFormat, cls: type, raw: bytes) -> None:
    """kwire refuses ``raw`` exactly when the protobuf package does, naming
    where; else both read the same values."""
    try:
        out = decode(fmt, [cls().SerializeToString(), raw], first_offset=10)
    except UndecodableValueError as e:
        assert (e.topic, e.partition, e.offset, e.row) == (TOPIC, PARTITION, 11, 1), e
        assert _protobuf_refuses(cls, raw), f"kwire refused {raw.hex()} ({e}); protobuf reads it"
        return
    assert not _protobuf_refuses(cls, raw), f"protobuf refuses {raw.hex()}; kwire read {out[1]}"
    t = fmt.arrow_type()
    assert S.normalize(out.to_pylist()[1], t) == S.normalize(S.expected(cls.FromString(raw)), t), raw.hex()


def test_every_truncation_of_valid_values(order):
    fmt, cls = order
    for raw in S.random_values(cls, 6, 5):
        for cut in range(len(raw)):
            _check_hostile(fmt, cls, raw[:cut])


@pytest.mark.parametrize("raw,reason", [
    (T(3, 6) + bytes([0]), "wire type"),
    (T(3, 7) + bytes([0]), "wire type"),
    (T(0, 0) + bytes([1]), "field number 0"),
    (T(14, 2) + bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x07]), "past the end"),          # a 2 GiB string
    (T(14, 2) + bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x7F]), "varint|past the end"),   # longer than 32 bits
    (T(3, 0) + b"\xff" * 10 + b"\x01", "varint"),                          # an 11-byte varint
    (T(14, 2) + bytes([2, 0xC3, 0x28]), "UTF-8"),
    (T(99, 4), "end-group"),
    (T(99, 3) + T(1, 0) + bytes([2]), "without its end-group"),
    (T(99, 3) + T(98, 4), "end-group"),
    (T(49, 2) + bytes([3, 1, 2, 3]), "packed"),                                  # packed fixed32 of 3 bytes
    (T(43, 2) + bytes([2, 0x80, 0x80]), "past the end|varint"),                  # packed varint cut
])
def test_malformed_values_are_refused_with_their_location(scalars, raw, reason):
    fmt, cls = scalars
    with pytest.raises(UndecodableValueError, match=reason) as e:
        decode(fmt, [b"", raw, b""], first_offset=500)
    assert (e.value.topic, e.value.partition, e.value.offset, e.value.row) == (TOPIC, PARTITION, 501, 1)
    assert _protobuf_refuses(cls, raw)


def test_deep_nesting_is_bounded(scalars, order):
    fmt, cls = scalars
    deep = b""
    for _ in range(150):                      # unknown groups inside unknown groups
        deep = T(99, 3) + deep + T(99, 4)
    with pytest.raises(UndecodableValueError, match="nested more than 100"):
        decode(fmt, [deep])
    assert _protobuf_refuses(cls, deep)
    shallow = b""
    for _ in range(50):
        shallow = T(99, 3) + shallow + T(99, 4)
    _check_hostile(fmt, cls, shallow)
    deep_len = b""
    for _ in range(150):                      # unknown length-delimited fields are not descended into
        deep_len = T(99, 2) + bytes([len(deep_len)]) + deep_len if len(deep_len) < 128 else deep_len
    _check_hostile(fmt, cls, deep_len)


def test_the_field_is_named(order):
    fmt, cls = order
    m = cls()
    m.lines.add().at.label = "x"
    raw = bytearray(m.SerializeToString())
    raw[-1] = 0xFF                            # the label's one byte: invalid UTF-8
    with pytest.raises(UndecodableValueError, match=r"UTF-8 \(field kwire\.test\.Order\.lines\.at\.label\)"):
        decode(fmt, [bytes(raw)])


def test_random_bytes_agree_with_the_protobuf_package(scalars, order, legacy):
    from hypothesis import HealthCheck, given, settings, strategies as st

    cases = [scalars, order]

    @settings(max_examples=300, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.integers(0, 1), st.binary(max_size=64))
    def check(which, raw):
        fmt, cls = cases[which]
        _check_hostile(fmt, cls, raw)

    check()
