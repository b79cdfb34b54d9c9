"""The JSON format without a registry: the JSON Schema -> Arrow mapping,
decoding through pyarrow's JSON reader (and the json module for maps and
JSON text), corrupt values located by row and offset, framing, encoding."""

from __future__ import annotations

import datetime
import json
import random
import uuid

import pyarrow as pa
import pytest

from kwire.errors import CorruptRecordError
from kwire.formats import FormatCache, check_spec, make_format, split_options
from kwire.formats.base import UndecodableValueError, decode_batch
from kwire.formats.json_schema import JsonSchemaError, arrow_type, json_schema
from kwire.formats.json_schema.schema import ENUM, JSON_TEXT, UUID
from kwire.formats.jsonvalues import dumps, json_values

UTC = datetime.timezone.utc

PERSON = {
    "title": "Person", "type": "object", "required": ["id", "name"],
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": "string"},
        "score": {"type": "number"},
        "active": {"type": "boolean"},
        "born": {"type": "string", "format": "date"},
        "seen": {"type": "string", "format": "date-time"},
        "wakes": {"type": "string", "format": "time"},
        "key": {"type": "string", "format": "uuid"},
        "color": {"enum": ["red", "green", "blue"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "address": {"$ref": "#/$defs/Address"},
        "nick": {"oneOf": [{"type": "null"}, {"type": "string"}]},
        "attrs": {"type": "object", "additionalProperties": {"type": "integer"}},
        "extra": {},
    },
    "$defs": {"Address": {"type": "object", "required": ["city"],
                          "properties": {"city": {"type": "string"}, "zip": {"type": ["string", "null"]}}}},
}


def _decode(fmt, values, first_offset=100):
    col = pa.array(values, pa.binary())
    return fmt.decode(col, topic="t", partition=3, offsets=pa.array(range(first_offset, first_offset + len(values)),
                                                                       pa.int64()))


# ---------------------------------------------------------------- mapping
def test_the_mapping_of_every_kind():
    t = arrow_type(PERSON)
    f = {t.field(i).name: t.field(i) for i in range(t.num_fields)}
    assert f["id"].type == pa.int64() and not f["id"].nullable            # required, root not nullable
    assert f["name"].type == pa.string() and not f["name"].nullable
    assert f["score"].type == pa.float64() and f["score"].nullable
    assert f["active"].type == pa.bool_()
    assert f["born"].type == pa.date32()
    assert f["seen"].type == pa.timestamp("us", "UTC")
    assert f["wakes"].type == pa.time64("us")
    assert f["key"].type == UUID
    assert f["color"].type == ENUM == pa.dictionary(pa.int32(), pa.string())
    assert f["tags"].type == pa.list_(pa.field("item", pa.string(), nullable=False))
    # an optional object: its required field is nullable (absent whenever the object is)
    assert f["address"].type == pa.struct([pa.field("city", pa.string()), pa.field("zip", pa.string())])
    assert f["nick"].type == pa.string() and f["nick"].nullable
    assert f["attrs"].type == pa.map_(pa.string(), pa.field("value", pa.int64(), nullable=False))
    assert f["extra"].type == JSON_TEXT


@pytest.mark.parametrize("schema, expected", [
    (True, JSON_TEXT),
    ({}, JSON_TEXT),
    ({"type": "object"}, JSON_TEXT),                                   # free-form object
    ({"type": ["string", "integer"]}, JSON_TEXT),                      # mixed union
    ({"type": ["integer", "number"]}, pa.float64()),
    ({"anyOf": [{"type": "integer"}, {"type": "number"}, {"type": "null"}]}, pa.float64()),
    ({"oneOf": [{"type": "string"}, {"type": "object", "properties": {"a": {"type": "string"}}}]}, JSON_TEXT),
    ({"type": "array", "items": [{"type": "string"}, {"type": "integer"}]}, JSON_TEXT),   # a tuple
    ({"type": "array", "prefixItems": [{"type": "string"}]}, JSON_TEXT),
    ({"enum": [1, 2, 3]}, pa.int64()),
    ({"enum": ["a", 1]}, JSON_TEXT),
    ({"const": "x"}, pa.string()),
    ({"type": "string", "format": "email"}, pa.string()),
    ({"type": "object", "patternProperties": {"^x": {"type": "boolean"}}},
     pa.map_(pa.string(), pa.field("value", pa.bool_(), nullable=False))),
    ({"type": "null"}, pa.null()),
])
def test_mapping_choices(schema, expected):
    assert arrow_type(schema) == expected


def test_refs_definitions_anchors_all_of_and_other_documents():
    schema = {
        "definitions": {"A": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}},
        "$defs": {"B": {"$anchor": "bee", "type": "string", "format": "date"}},
        "type": "object", "required": ["x", "y"],
        "properties": {
            "x": {"$ref": "#/definitions/A"},
            "y": {"allOf": [{"$ref": "#/definitions/A"},
                            {"type": "object", "properties": {"b": {"type": "boolean"}}}]},
            "z": {"$ref": "#bee"},
            "o": {"$ref": "other.json#/$defs/O"},
            "p": {"$ref": "https://example.com/schemas/p.json"},
        },
    }
    documents = {"other.json": {"$defs": {"O": {"type": "number"}}},
                 "p.json": {"$id": "https://example.com/schemas/p.json", "type": "boolean"}}
    t = arrow_type(json.dumps(schema), documents)
    assert t.field("x").type == pa.struct([pa.field("a", pa.int64(), nullable=False)])
    assert t.field("y").type == pa.struct([pa.field("a", pa.int64(), nullable=False), pa.field("b", pa.bool_())])
    assert t.field("z").type == pa.date32()
    assert t.field("o").type == pa.float64()
    assert t.field("p").type == pa.bool_()


def test_recursive_refs_become_json_text():
    tree = {"type": "object", "properties": {"name": {"type": "string"},
                                             "children": {"type": "array", "items": {"$ref": "#"}}}}
    t = arrow_type(tree)
    assert t.field("children").type.value_type == JSON_TEXT
    fmt = make_format("json", schema=tree)
    got = _decode(fmt, [b'{"name":"a","children":[{"name":"b","children":[]}]}'])
    assert got.to_pylist() == [{"name": "a", "children": ['{"name":"b","children":[]}']}]


@pytest.mark.parametrize("schema, message", [
    ("{not json", "not JSON"),
    ({"$ref": "#/$defs/missing"}, "nothing at"),
    ({"$ref": "elsewhere.json"}, "no schema"),
    (42, "object or a boolean"),
])
def test_schemas_that_are_not(schema, message):
    with pytest.raises(JsonSchemaError, match=message):
        arrow_type(schema)


def test_deep_schemas_are_refused():
    deep = {"type": "string"}
    for _ in range(100):
        deep = {"type": "array", "items": deep}
    with pytest.raises(JsonSchemaError, match="deeper"):
        arrow_type(deep)


def test_json_schema_of_an_arrow_type_reads_back_as_it():
    t = arrow_type(PERSON)
    # an enum's symbols are not in its Arrow type: it comes back a string
    as_string = pa.struct([f.with_type(pa.string()) if f.name == "color" else f for f in t])
    assert arrow_type(json_schema(t)) == as_string
    assert json_schema(t, title="Person")["title"] == "Person"


# ---------------------------------------------------------------- decoding
def test_decodes_every_kind_and_keeps_nulls():
    fmt = make_format("json", schema=PERSON)
    values = [
        json.dumps({"id": 1, "name": "Ann", "score": 2, "active": True, "born": "1990-05-01",
                    "seen": "2024-01-01T10:00:00.1234567+01:00", "wakes": "07:30:00.5Z", "key": str(uuid.UUID(int=7)),
                    "color": "green", "tags": ["a", "b"], "address": {"city": "Paris", "zip": None},
                    "nick": "annie", "attrs": {"x": 1}, "extra": {"any": [1, "two"]}, "ignored": 5}).encode(),
        None,                                                   # a null record: a null row
        b"null",                                                # the JSON null: a null row too
        b'{"id": 2,\n  "name": "Bob",\r\n  "seen": "2024-01-01t00:00:00z"}',   # pretty-printed, lower case
    ]
    rows = _decode(fmt, values).to_pylist()
    assert rows[1] is None and rows[2] is None
    ann = rows[0]
    assert ann["id"] == 1 and ann["name"] == "Ann" and ann["score"] == 2.0 and ann["active"] is True
    assert ann["born"] == datetime.date(1990, 5, 1)
    assert ann["seen"] == datetime.datetime(2024, 1, 1, 9, 0, 0, 123456, tzinfo=UTC)
    assert ann["wakes"] == datetime.time(7, 30, 0, 500000)
    assert ann["key"] == uuid.UUID(int=7)
    assert ann["color"] == "green" and ann["tags"] == ["a", "b"]
    assert ann["address"] == {"city": "Paris", "zip": None} and ann["nick"] == "annie"
    assert ann["attrs"] == [("x", 1)] and json.loads(ann["extra"]) == {"any": [1, "two"]}
    assert rows[3]["name"] == "Bob" and rows[3]["seen"] == datetime.datetime(2024, 1, 1, tzinfo=UTC)
    assert rows[3]["tags"] is None and rows[3]["address"] is None


def test_times_with_offsets_are_utc_and_zoneless_date_times_are_utc():
    fmt = make_format("json", schema={"type": "object", "properties": {
        "t": {"type": "string", "format": "time"}, "d": {"type": "string", "format": "date-time"}}})
    rows = _decode(fmt, [b'{"t":"01:00:00+02:00","d":"2024-03-01T12:00:00"}', b'{"t":"23:59:60"}']).to_pylist()
    assert rows[0] == {"t": datetime.time(23, 0), "d": datetime.datetime(2024, 3, 1, 12, tzinfo=UTC)}
    assert rows[1]["t"] == datetime.time(23, 59, 59)                # a leap second: the second before


def test_an_arrow_type_given_instead_of_a_json_schema():
    schema = pa.schema([pa.field("n", pa.int32()), pa.field("when", pa.timestamp("ms", "UTC")),
                        pa.field("price", pa.decimal128(10, 2)), pa.field("m", pa.map_(pa.string(), pa.string()))])
    fmt = make_format("json", schema=schema)
    assert fmt.arrow_type() == pa.struct(list(schema))
    rows = _decode(fmt, [b'{"n":5,"when":"2024-01-01T00:00:00.123456Z","price":12.5,"m":{"a":"b"}}']).to_pylist()
    assert rows == [{"n": 5, "when": datetime.datetime(2024, 1, 1, 0, 0, 0, 123000, tzinfo=UTC),
                     "price": pytest.approx(12.5), "m": [("a", "b")]}]
    with pytest.raises(ValueError, match="cannot be read into"):
        make_format("json", schema=pa.struct([pa.field("d", pa.duration("s"))]))


def test_without_a_schema_a_value_is_its_json_text():
    fmt = make_format("json")
    assert fmt.arrow_type() == JSON_TEXT
    got = _decode(fmt, [b'{"a": [1, 2]}', b'"text"', b"3", None]).to_pylist()
    assert got == ['{"a":[1,2]}', '"text"', "3", None]          # compact JSON text
    with pytest.raises(UndecodableValueError):
        _decode(fmt, [b"{", b"1"])


#: PERSON without its map and JSON text: read by pyarrow's reader, not the json module
PERSON_FLAT = {**PERSON, "properties": {k: v for k, v in PERSON["properties"].items() if k not in ("attrs", "extra")}}


@pytest.mark.parametrize("schema", [PERSON_FLAT, PERSON], ids=["reader", "json-module"])
@pytest.mark.parametrize("bad", [
    b'{"id": "x", "name": "n"}',
    b'{"name": "no id"}',
    b'{"id": 1, "name": null}',
    b'{"id": 1, "name": "a"} {"id": 2, "name": "b"}',
    b'{"id": 1, "name": "a"}\n{"id": 2, "name": "b"}',
    b"",
    b"\xff\xfe",
    b'{"id": 1, "name": "a", "born": "2024-02-30"}',
    b'{"id": 1, "name": "a", "key": "not-a-uuid"}',
    b'{"id": 1, "name": "a", "wakes": "25:00:00"}',
    b'{"id": 1, "name": "a", "tags": [null]}',
    b'{"id": 1.5, "name": "a"}',
    b'{"id": 99999999999999999999, "name": "a"}',
    b'{"id": true, "name": "a"}',
    b"[" * 100_000,
], ids=lambda b: repr(b[:30]))
def test_a_bad_value_is_a_corrupt_record_at_its_offset(bad, schema):
    fmt = make_format("json", schema=schema)
    good = b'{"id": 1, "name": "ok"}'
    values = [good, None, good, good, None, bad, good]
    with pytest.raises(UndecodableValueError, match="^JSON: ") as err:
        _decode(fmt, values, first_offset=1000)
    assert isinstance(err.value, CorruptRecordError)
    assert (err.value.topic, err.value.partition, err.value.offset, err.value.row) == ("t", 3, 1005, 5)
    assert str(err.value).endswith("(topic 't', partition 3, offset 1005)") and len(str(err.value)) < 500
    assert _decode(fmt, values[:5]).to_pylist()[0]["name"] == "ok"        # the rows before it decode


def test_what_a_bad_value_is_said_to_be():
    fmt = make_format("json", schema=PERSON_FLAT)
    for bad, why in [(b'{"id": "x", "name": "n"}', r"Column\(/id\) changed from number to string"),
                     (b'{"name": "no id"}', "required field was absent"),
                     (b'{"id": 1, "name": "a"}} {"v": {"id": 2, "name": "b"}', "2 JSON values in 1 records"),      # past the reader's wrapper
                     (b'{"id": 1, "name": "a", "born": "2024-02-30"}', "2024-02-30")]:
        with pytest.raises(UndecodableValueError, match=why):
            _decode(fmt, [bad])
    with pytest.raises(UndecodableValueError, match="str where int64 is expected"):
        _decode(make_format("json", schema=PERSON), [b'{"id": 1, "name": "a", "attrs": {"k": "v"}}'])


def test_the_first_bad_row_of_a_large_batch_is_found():
    fmt = make_format("json", schema={"type": "object", "properties": {"n": {"type": "integer"}}})
    values = [b'{"n": %d}' % i for i in range(20_000)]
    values[13_579] = b'{"n": "x"}'
    values[17_000] = b"{"
    with pytest.raises(UndecodableValueError) as err:
        _decode(fmt, values, first_offset=0)
    assert err.value.row == 13_579 and err.value.offset == 13_579


def test_framed_values_are_read_after_their_header():
    fmt = make_format("json", schema={"type": "object", "properties": {"n": {"type": "integer"}}})
    framed = b"\x00\x00\x00\x00\x2a" + b'{"n": 1}'
    assert _decode(fmt, [framed, b'{"n": 2}', None]).to_pylist() == [{"n": 1}, {"n": 2}, None]
    with pytest.raises(UndecodableValueError, match="shorter than its 5-byte header") as err:
        _decode(fmt, [b'{"n": 2}', b"\x00\x00\x01"])
    assert err.value.row == 1


def test_random_values_decode_as_the_json_module_reads_them():
    """A seeded generator of values for a schema of scalars, arrays and
    nested objects: every decoded row equals json.loads of its value."""
    schema = {"type": "object", "properties": {
        "i": {"type": "integer"}, "f": {"type": "number"}, "s": {"type": "string"}, "b": {"type": "boolean"},
        "l": {"type": "array", "items": {"type": ["integer", "null"]}},
        "o": {"type": "object", "properties": {"x": {"type": "string"}, "y": {"type": "number"}}}}}
    rng = random.Random(31)
    fmt = make_format("json", schema=schema)
    for json_module in (False, True):
        if json_module:       # the same values through the json module's way (a map forces it)
            schema["properties"]["m"] = {"type": "object", "additionalProperties": {"type": "string"}}
            fmt = make_format("json", schema=schema)
        expected, values = [], []
        for _ in range(500):
            row = {}
            for name, gen in (("i", lambda: rng.randint(-2**63, 2**63 - 1)), ("f", lambda: rng.uniform(-1e9, 1e9)),
                              ("s", lambda: "".join(rng.choice("aé€😀\"\\\n\t") for _ in range(rng.randint(0, 8)))),
                              ("b", lambda: rng.random() < 0.5),
                              ("l", lambda: [rng.choice([None, rng.randint(-9, 9)]) for _ in range(rng.randint(0, 4))]),
                              ("o", lambda: {"x": str(rng.random()), "y": rng.random()})):
                if rng.random() < 0.8:
                    row[name] = gen()
            expected.append(row)
            values.append(json.dumps(row, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 2])).encode())
        got = _decode(fmt, values).to_pylist()
        for want, have in zip(expected, got):
            have.pop("m", None)
            assert have == {k: want.get(k) for k in ("i", "f", "s", "b", "l", "o")}


def test_decode_batch_replaces_the_value_column():
    fmt = make_format("json", schema={"type": "object", "properties": {"n": {"type": "integer"}}})
    batch = pa.record_batch({"offset": pa.array([5, 6], pa.int64()), "key": pa.array([b"k", None]),
                             "value": pa.array([b'{"n":1}', None])})
    out = decode_batch(batch, topic="t", partition=0, value_format=fmt)
    assert out.schema.field("value").type == fmt.arrow_type()
    assert out.column("value").to_pylist() == [{"n": 1}, None] and out.column("key") == batch.column("key")


# ---------------------------------------------------------------- encoding
def test_encode_writes_compact_json_and_decodes_back():
    fmt = make_format("json", schema=PERSON)
    values = [json.dumps({"id": 1, "name": "Zoë", "born": "1990-05-01", "seen": "2024-01-01T10:00:00.000001Z",
                          "key": str(uuid.UUID(int=9)), "color": "red", "tags": [], "attrs": {"a": 1},
                          "extra": [1, {"b": None}]}).encode(), None]
    decoded = _decode(fmt, values)
    encoded = fmt.encode(decoded, topic="t")
    assert encoded[1].as_py() is None
    text = encoded[0].as_py().decode("utf-8")
    assert text.startswith('{"id":1,"name":"Zoë","score":null,') and " " not in text
    assert json.loads(text)["seen"] == "2024-01-01T10:00:00.000001Z" and json.loads(text)["attrs"] == {"a": 1}
    assert json.loads(text)["extra"] == [1, {"b": None}]
    assert _decode(fmt, encoded.to_pylist()).to_pylist() == decoded.to_pylist()


def test_json_values_for_display():
    typ = pa.struct([("d", pa.decimal128(6, 2)), ("f", pa.float64()), ("b", pa.binary()),
                     ("m", pa.map_(pa.int32(), pa.string())), ("ns", pa.timestamp("ns")),
                     ("dur", pa.duration("ms"))])
    arr = pa.array([{"d": 1, "f": float("inf"), "b": b"\x00\xff", "m": [(1, "a")], "ns": 1_000_000_001,
                     "dur": 1500}], typ)
    assert dumps(json_values(arr, display=True)[0]) == (
        '{"d":"1.00","f":"Infinity","b":"AP8=","m":[[1,"a"]],"ns":"1970-01-01T00:00:01.000000001",'
        '"dur":"PT1.5S"}')
    assert json_values(arr)[0]["d"] == 1.0


# ---------------------------------------------------------------- the factory
def test_the_factory_and_specs():
    with pytest.raises(ValueError, match="unknown format 'xml'"):
        make_format("xml")
    with pytest.raises(TypeError):
        check_spec(42)
    check_spec(None), check_spec("raw"), check_spec("JSON"), check_spec(("json", {"schema": {}}))
    cache = FormatCache(capacity=2)
    a = cache.get(("json", {"schema": {"type": "string"}}), topic="t", is_key=False)
    assert cache.get(("json", {"schema": {"type": "string"}}), topic="t", is_key=False) is a
    assert cache.get(("json", {"schema": {"type": "string"}}), topic="u", is_key=False) is not a
    assert cache.get("raw", topic="t", is_key=True) is None
    assert cache.get(a, topic="x", is_key=True) is a
    fmt, rest = split_options({"schema_registry_url": "http://r", "basic.auth.user.info": "u:p",
                               "auto.register.schemas": "true", "fetch_max_bytes": 5, "security.protocol": "SSL"})
    assert fmt == {"schema.registry.url": "http://r", "basic.auth.user.info": "u:p", "auto.register.schemas": "true"}
    assert rest == {"fetch_max_bytes": 5, "security.protocol": "SSL"}
    with pytest.raises(ValueError, match="need a schema registry"):
        make_format("json", auto_register_schemas=True)
