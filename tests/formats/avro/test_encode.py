"""kwire's Avro encoder: the bytes fastavro (and so confluent-kafka's
AvroSerializer) writes for the same values, from kwire's own Arrow columns
and from the Arrow types other tools hold (Spark's microsecond timestamps,
strings for enums, large types, slices); rows that cannot be written are
named."""

from __future__ import annotations

import copy
import datetime
import decimal

import fastavro
import pyarrow as pa
import pytest

from kwire.formats.avro import AvroFormat

from .gen import DataGen, SchemaGen, encode

UTC = datetime.timezone.utc


def _decoded(fmt: AvroFormat, values: list) -> pa.Array:
    return fmt.decode(pa.array(values, pa.binary()), topic="t", partition=0,
                      offsets=pa.array(range(len(values)), pa.int64()))


@pytest.mark.parametrize("seed", range(40))
def test_kwire_writes_the_bytes_fastavro_wrote(seed):
    schema = SchemaGen(seed).record(fields=6)
    parsed = fastavro.parse_schema(copy.deepcopy(schema))
    data = DataGen(seed + 1000)
    values = [encode(parsed, data.value(parsed)) for _ in range(40)]
    fmt = AvroFormat(schema)
    column = _decoded(fmt, values)
    assert fmt.encode(column, topic="t").to_pylist() == values
    assert fmt.encode(column.slice(7, 20), topic="t").to_pylist() == values[7:27]      # an offset into the arrays


def test_other_tools_arrow_types_are_written_in_the_schemas_units():
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "d", "type": {"type": "int", "logicalType": "date"}},
        {"name": "t", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "color", "type": {"type": "enum", "name": "C", "symbols": ["RED", "GREEN"]}},
        {"name": "n", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "s", "type": "string"},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "opt", "type": ["null", "int"], "default": None},
        {"name": "added", "type": "string", "default": "x"},        # not in the Arrow struct: its default
    ]}
    ts = datetime.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    rows = [{"ts": ts, "d": datetime.date(2024, 1, 2), "t": datetime.time(1, 2, 3, 4000), "color": "GREEN",
             "n": 5, "f": 1.25, "s": "é", "amount": decimal.Decimal("-12.34"), "tags": ["a", "b"], "opt": None},
            {"ts": ts, "d": datetime.date(1960, 1, 2), "t": datetime.time(0), "color": "RED", "n": -1, "f": 0.5,
             "s": "", "amount": decimal.Decimal("0.00"), "tags": [], "opt": 3}]
    spark_like = pa.StructArray.from_arrays([
        pa.array([r["ts"] for r in rows], pa.timestamp("us", tz="UTC")),
        pa.array([r["d"] for r in rows], pa.date32()),
        pa.array([r["t"] for r in rows], pa.time64("us")),
        pa.array([r["color"] for r in rows], pa.large_string()),
        pa.array([r["n"] for r in rows], pa.int32()),
        pa.array([r["f"] for r in rows], pa.float64()),
        pa.array([r["s"] for r in rows], pa.string()),
        pa.array([r["amount"] for r in rows], pa.decimal128(10, 2)),
        pa.array([r["tags"] for r in rows], pa.large_list(pa.string())),
        pa.array([r["opt"] for r in rows], pa.int64()),
    ], names=["ts", "d", "t", "color", "n", "f", "s", "amount", "tags", "opt"])
    parsed = fastavro.parse_schema(copy.deepcopy(schema))
    want = [encode(parsed, {**r, "added": "x"}) for r in rows]
    assert AvroFormat(schema).encode(spark_like, topic="t").to_pylist() == want


def test_null_rows_are_null_values_and_bad_rows_are_named():
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "i", "type": "int"}, {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A"]}}]}
    fmt = AvroFormat(schema)
    ok = pa.array([{"i": 1, "e": "A"}, None], pa.struct([("i", pa.int64()), ("e", pa.string())]))
    assert fmt.encode(ok, topic="t").to_pylist() == [b"\x02\x00", None]
    for bad, reason in ((pa.array([{"i": 2**40, "e": "A"}], ok.type), "out of the range"),
                        (pa.array([{"i": None, "e": "A"}], ok.type), "a null where"),
                        (pa.array([{"i": 1, "e": "B"}], ok.type), "not one of the enum")):
        with pytest.raises(ValueError, match=f"row 0 cannot be written: .*{reason}"):
            fmt.encode(bad, topic="t")
    with pytest.raises(ValueError, match="cannot be written as Avro"):
        fmt.encode(pa.array([{"i": "x", "e": "A"}], pa.struct([("i", pa.string()), ("e", pa.string())])), topic="t")


def test_decimals_take_fastavros_lengths_and_precision_is_checked():
    schema = {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 1}
    fmt = AvroFormat(schema)
    parsed = fastavro.parse_schema(copy.deepcopy(schema))
    values = [decimal.Decimal(v) for v in ("0.0", "12.8", "-12.8", "-12.7", "9999.9", "-9999.9", "0.1")]
    assert fmt.encode(pa.array(values, pa.decimal128(5, 1)), topic="t").to_pylist() == [encode(parsed, v) for v in values]
    with pytest.raises(ValueError, match="more digits"):
        fmt.encode(pa.array([decimal.Decimal("10000.0")], pa.decimal128(6, 1)), topic="t")
