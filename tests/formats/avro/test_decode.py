"""kwire's Avro decoder against fastavro on the same bytes: generated schemas
covering every type and logical type, nesting, random data from a seeded
generator; schema evolution (Avro's resolution rules) against fastavro's
reader-schema resolution; framing; hostile values."""

from __future__ import annotations

import copy
import json

import fastavro
import pyarrow as pa
import pytest

from kwire.formats.avro import AvroFormat, AvroSchemaError, parse_schema
from kwire.formats.base import UndecodableValueError

from .gen import DataGen, SchemaGen, encode, expected, read

TOPIC, PARTITION = "avro-topic", 3


def decode(fmt: AvroFormat, values: list, first_offset: int = 100) -> pa.Array:
    column = pa.array(values, pa.binary())
    offsets = pa.array(range(first_offset, first_offset + len(values)), pa.int64())
    out = fmt.decode(column, topic=TOPIC, partition=PARTITION, offsets=offsets)
    out.validate(full=True)
    return out


def check_against_fastavro(schema: dict, rows: int, seed: int) -> None:
    parsed = fastavro.parse_schema(copy.deepcopy(schema))
    data = DataGen(seed)
    values = [encode(parsed, data.value(parsed)) for _ in range(rows)]
    out = decode(AvroFormat(schema), values + [None])
    want = [expected(schema, read(parsed, v)) for v in values] + [None]
    got = out.to_pylist()
    for i, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"row {i} of schema {json.dumps(schema)}"


@pytest.mark.parametrize("seed", range(40))
def test_generated_schemas_decode_as_fastavro_reads_them(seed):
    check_against_fastavro(SchemaGen(seed).record(fields=6), rows=30, seed=seed)


def test_every_logical_type_and_its_arrow_type():
    schema = {"type": "record", "name": "L", "fields": [
        {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "wide", "type": {"type": "bytes", "logicalType": "decimal", "precision": 60, "scale": 5}},
        {"name": "fdec", "type": {"type": "fixed", "name": "FD", "size": 8, "logicalType": "decimal",
                                  "precision": 18, "scale": 0}},
        {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "fu", "type": {"type": "fixed", "name": "FU", "size": 16, "logicalType": "uuid"}},
        {"name": "d", "type": {"type": "int", "logicalType": "date"}},
        {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "tu", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "ts_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "ts_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "ts_ns", "type": {"type": "long", "logicalType": "timestamp-nanos"}},
        {"name": "lts_ms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "lts_us", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "lts_ns", "type": {"type": "long", "logicalType": "local-timestamp-nanos"}},
        {"name": "dur", "type": {"type": "fixed", "name": "DU", "size": 12, "logicalType": "duration"}},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
        {"name": "fx", "type": {"type": "fixed", "name": "FX", "size": 3}},
        {"name": "bad_dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 0}},
        {"name": "unknown", "type": {"type": "long", "logicalType": "no-such-type"}},
    ]}
    types = dict(zip([f["name"] for f in schema["fields"]], AvroFormat(schema).arrow_type()))
    assert {k: f.type for k, f in types.items()} == {
        "dec": pa.decimal128(9, 2), "wide": pa.decimal256(60, 5), "fdec": pa.decimal128(18, 0),
        "u": pa.uuid(), "fu": pa.uuid(), "d": pa.date32(), "tm": pa.time32("ms"), "tu": pa.time64("us"),
        "ts_ms": pa.timestamp("ms", tz="UTC"), "ts_us": pa.timestamp("us", tz="UTC"),
        "ts_ns": pa.timestamp("ns", tz="UTC"), "lts_ms": pa.timestamp("ms"), "lts_us": pa.timestamp("us"),
        "lts_ns": pa.timestamp("ns"), "dur": pa.month_day_nano_interval(),
        "e": pa.dictionary(pa.int32(), pa.string()), "fx": pa.binary(3),
        "bad_dec": pa.binary(), "unknown": pa.int64(),       # invalid or unknown logical types: the underlying type
    }
    schema["fields"] = [f for f in schema["fields"] if f["name"] != "bad_dec"]     # fastavro cannot read it
    check_against_fastavro(schema, rows=50, seed=7)


def test_unions_map_to_nullable_types_or_member_structs():
    schema = {"type": "record", "name": "U", "fields": [
        {"name": "opt", "type": ["null", "string"]},
        {"name": "opt_last", "type": ["long", "null"]},
        {"name": "multi", "type": ["null", "int", "string"]},
        {"name": "no_null", "type": ["double", "string"]},
        {"name": "only_null", "type": ["null"]},
        {"name": "one", "type": ["string"]},
    ]}
    t = AvroFormat(schema).arrow_type()
    assert t.field("opt").type == pa.string() and t.field("opt").nullable
    assert t.field("opt_last").type == pa.int64() and t.field("opt_last").nullable
    assert t.field("multi").type == pa.struct([pa.field("member0", pa.int32()), pa.field("member1", pa.string())])
    assert t.field("multi").nullable and not t.field("no_null").nullable
    assert t.field("only_null").type == pa.null()
    assert t.field("one").type == pa.string() and not t.field("one").nullable
    check_against_fastavro(schema, rows=60, seed=3)


# ------------------------------------------------------------ evolution
V1 = {"type": "record", "name": "User", "namespace": "ex", "fields": [
    {"name": "id", "type": "int"},
    {"name": "name", "type": "string"},
    {"name": "gone", "type": {"type": "array", "items": {"type": "record", "name": "G", "fields": [
        {"name": "x", "type": ["null", "bytes"]}]}}},
    {"name": "score", "type": "float"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "OLD"]}},
    {"name": "either", "type": ["null", "int", "string"]},
    {"name": "blob", "type": "bytes"},
]}
V2 = {"type": "record", "name": "User", "namespace": "ex", "fields": [
    {"name": "id", "type": "long"},                                   # int -> long
    {"name": "full_name", "type": "string", "aliases": ["name"]},     # renamed, by alias
    {"name": "score", "type": "double"},                              # float -> double
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["B", "A", "NEW", "UNKNOWN"],
                              "default": "UNKNOWN"}},                 # reordered, OLD -> the default
    {"name": "either", "type": ["null", "string", "long"]},           # int read as long
    {"name": "blob", "type": "string"},                               # bytes -> string
    {"name": "added", "type": {"type": "map", "values": "int"}, "default": {"a": 1, "b": 2}},
    {"name": "added_opt", "type": ["null", "string"], "default": None},
    {"name": "added_rec", "type": {"type": "record", "name": "Added", "fields": [
        {"name": "n", "type": "int", "default": 7}, {"name": "s", "type": "string", "default": "x"}]},
     "default": {"n": 5, "s": "d"}},
]}


def test_values_of_an_older_schema_read_as_the_newer_one_as_fastavro_resolves_them():
    w = fastavro.parse_schema(copy.deepcopy(V1))
    r = fastavro.parse_schema(copy.deepcopy(V2))
    data = DataGen(11)
    values = []
    for _ in range(80):
        v = data.value(w)
        v["blob"] = v["blob"].decode("latin-1").encode()       # bytes read as string must be UTF-8
        values.append(encode(w, v))
    got = decode(AvroFormat(V2, writer_schema=V1), values).to_pylist()
    want = [expected(V2, read(w, v, r)) for v in values]
    assert got == want


def test_a_reader_field_without_default_that_the_writer_lacks_is_named():
    reader = copy.deepcopy(V1)
    reader["fields"].append({"name": "required", "type": "int"})
    fmt = AvroFormat(reader, writer_schema=V1)
    with pytest.raises(UndecodableValueError, match="required") as e:
        decode(fmt, [b"\x00"])
    assert (e.value.topic, e.value.partition, e.value.offset, e.value.row) == (TOPIC, PARTITION, 100, 0)


def test_a_writer_union_branch_the_reader_cannot_read_fails_only_for_values_that_take_it():
    writer = {"type": "record", "name": "R", "fields": [{"name": "v", "type": ["int", "boolean"]}]}
    reader = {"type": "record", "name": "R", "fields": [{"name": "v", "type": "long"}]}
    fmt = AvroFormat(reader, writer_schema=writer)
    assert decode(fmt, [b"\x00\x04", b"\x00\x01"]).to_pylist() == [{"v": 2}, {"v": -1}]
    with pytest.raises(UndecodableValueError, match="union branch the reader") as e:
        decode(fmt, [b"\x00\x04", b"\x02\x01"])
    assert e.value.row == 1 and e.value.offset == 101


def test_enum_symbol_unknown_to_the_reader_without_default_fails_at_its_row():
    writer = {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}
    reader = {"type": "enum", "name": "E", "symbols": ["A", "B"]}
    fmt = AvroFormat(reader, writer_schema=writer)
    assert decode(fmt, [b"\x02", b"\x00"]).to_pylist() == ["B", "A"]
    with pytest.raises(UndecodableValueError, match="enum symbol") as e:
        decode(fmt, [b"\x02", b"\x04"])
    assert e.value.row == 1


def test_incompatible_schemas_are_refused_naming_the_field():
    writer = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "string"}]}
    reader = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
    with pytest.raises(UndecodableValueError, match="'a'|a: ") as e:
        decode(AvroFormat(reader, writer_schema=writer), [b"\x02x"])
    assert e.value.offset == 100


# ------------------------------------------------------------ hostile values
SIMPLE = {"type": "record", "name": "S", "fields": [
    {"name": "s", "type": "string"}, {"name": "l", "type": {"type": "array", "items": "long"}},
    {"name": "n", "type": {"type": "array", "items": "null"}}, {"name": "u", "type": ["null", "int"]},
    {"name": "b", "type": "boolean"}, {"name": "m", "type": {"type": "map", "values": "string"}}]}
GOOD = b"\x02a" + b"\x02\x04\x00" + b"\x00" + b"\x02\x06" + b"\x01" + b"\x00"


@pytest.mark.parametrize("value, reason", [
    (GOOD[:-1], "ends inside"),
    (GOOD + b"\x00", "bytes left"),
    (b"\x03a" + GOOD[2:], "negative length"),
    (b"\x7ea" + GOOD[2:], "ends inside"),
    (b"\x02\xff" + GOOD[2:], "UTF-8"),
    (b"\x02a" + b"\xfe\xff\xff\xff\x0f" + GOOD[5:], "block count"),          # 2**31 longs in 10 bytes
    (b"\x02a\x00" + b"\xfe\xff\xff\xff\xff\xff\x0f" + GOOD[6:], "block count"),   # too many nulls
    (b"\x02a\x00\x00" + b"\x04\x06" + GOOD[8:], "union branch index"),
    (b"\x02a\x00\x00\x00" + b"\x02" + b"\x00", "boolean"),
    (b"\x02a\x00\x00\x00\x01" + b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", "varint"),
    (b"", "ends inside"),
])
def test_hostile_values_raise_undecodable_naming_where(value, reason):
    fmt = AvroFormat(SIMPLE)
    assert decode(fmt, [GOOD]).to_pylist() == [{"s": "a", "l": [2], "n": [], "u": 3, "b": True, "m": []}]
    with pytest.raises(UndecodableValueError, match=reason) as e:
        decode(fmt, [GOOD, GOOD, value], first_offset=40)
    assert (e.value.topic, e.value.partition, e.value.offset, e.value.row) == (TOPIC, PARTITION, 42, 2)
    assert decode(fmt, [GOOD]).to_pylist()[0]["s"] == "a"      # the format is usable after


def test_recursive_schemas_are_refused_with_a_clear_error():
    linked = {"type": "record", "name": "Node", "fields": [
        {"name": "v", "type": "int"}, {"name": "next", "type": ["null", "Node"]}]}
    assert parse_schema(linked).recursive
    with pytest.raises(AvroSchemaError, match="recursive"):
        AvroFormat(linked).arrow_type()


def test_bad_schemas_are_refused():
    for bad in ({"type": "record", "name": "R"}, {"type": "enum", "name": "E", "symbols": ["A", "A"]},
                ["int", "int"], {"type": "nope"}, {"type": "record", "name": "R", "fields": [{"name": "a", "type": "X"}]}):
        with pytest.raises(AvroSchemaError):
            parse_schema(bad)


def test_decimal_too_wide_for_the_reader_is_refused():
    schema = {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 0}
    fmt = AvroFormat(schema)
    assert decode(fmt, [b"\x04\x00\x7f", b"\x02\xff"]).to_pylist() == [127, -1]
    with pytest.raises(UndecodableValueError, match="decimal too wide"):
        decode(fmt, [b"\x22" + b"\x01" + b"\x00" * 16])
    assert decode(fmt, [b"\x04\x27\x0f", b"\x04\xd8\xf1"]).to_pylist() == [9999, -9999]
    for past in (b"\x04\x27\x10", b"\x04\xd8\xf0"):             # 10000, -10000: five digits
        with pytest.raises(UndecodableValueError, match="more digits than the reader's precision"):
            decode(fmt, [past])


def test_a_null_value_leaves_placeholders_in_fields_that_hold_no_nulls(tmp_path):
    """Parquet (and Spark) refuse nulls in a non-nullable field even under a
    null struct: a tombstone's fields get zero values, nullable ones nulls."""
    import pyarrow.parquet as pq

    schema = {"type": "record", "name": "T", "fields": [
        {"name": "id", "type": "long"}, {"name": "s", "type": {"type": "record", "name": "S", "fields": [
            {"name": "x", "type": "int"}, {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A"]}},
            {"name": "o", "type": ["null", "string"]}]}},
        {"name": "l", "type": {"type": "array", "items": "string"}}]}
    out = decode(AvroFormat(schema), [b"\x02\x04\x00\x02\x02z\x00", None])
    assert out.to_pylist() == [{"id": 1, "s": {"x": 2, "e": "A", "o": "z"}, "l": []}, None]
    assert out.field("id").null_count == 0 and out.field("s").field("o").null_count == 1
    pq.write_table(pa.table({"value": out}), tmp_path / "t.parquet")
    assert pq.read_table(tmp_path / "t.parquet").column("value").to_pylist() == out.to_pylist()
