"""Arrow types of kwire's columnar output, and the assembly of the column
buffers the compiled decoder fills into a ``pyarrow.RecordBatch`` (no copy)."""

from __future__ import annotations

from typing import Dict

try:
    import pyarrow as pa
except ImportError as e:  # pragma: no cover - exercised only without pyarrow
    raise ImportError("kwire's columnar decoding needs pyarrow: pip install 'kwire[arrow]'") from e

__all__ = ["HEADERS_TYPE", "record_schema", "record_batch_from_columns"]

HEADER_STRUCT = pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())])
#: ``headers`` column type: null for a record without headers, as Spark's Kafka source has it.
HEADERS_TYPE = pa.list_(HEADER_STRUCT)


def record_schema(timestamp_unit: str = "ms") -> "pa.Schema":
    """The schema of :class:`kwire.ColumnarDecoder` results."""
    return pa.schema(
        [
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("timestamp", pa.timestamp(timestamp_unit, tz="UTC"), nullable=False),
            pa.field("timestamp_type", pa.int32(), nullable=False),
            pa.field("key", pa.binary()),
            pa.field("value", pa.binary()),
            pa.field("headers", HEADERS_TYPE),
        ]
    )


_SCHEMAS = {unit: record_schema(unit) for unit in ("ms", "us")}


def record_batch_from_columns(
    rows: int,
    header_rows: int,
    cols: Dict[str, object],
    key_nulls: int,
    value_nulls: int,
    header_nulls: int,
    header_value_nulls: int,
    timestamp_unit: str,
) -> "pa.RecordBatch":
    b = {name: pa.py_buffer(mem) for name, mem in cols.items()}   # zero copy

    def binary(prefix: str, n: int, nulls: int, typ=pa.binary()) -> "pa.Array":
        validity = b[prefix + "_validity"] if nulls else None
        return pa.Array.from_buffers(typ, n, [validity, b[prefix + "_offsets"], b[prefix + "_data"]], null_count=nulls)

    schema = _SCHEMAS[timestamp_unit]
    entries = pa.StructArray.from_arrays(
        [
            pa.Array.from_buffers(pa.string(), header_rows, [None, b["header_key_offsets"], b["header_key_data"]], null_count=0),
            binary("header_value", header_rows, header_value_nulls),
        ],
        fields=list(HEADER_STRUCT),
    )
    headers = pa.Array.from_buffers(
        HEADERS_TYPE,
        rows,
        [b["header_validity"] if header_nulls else None, b["header_offsets"]],
        null_count=header_nulls,
        children=[entries],
    )
    arrays = [
        pa.Array.from_buffers(pa.int64(), rows, [None, b["offset"]], null_count=0),
        pa.Array.from_buffers(schema.field("timestamp").type, rows, [None, b["timestamp"]], null_count=0),
        pa.Array.from_buffers(pa.int32(), rows, [None, b["timestamp_type"]], null_count=0),
        binary("key", rows, key_nulls),
        binary("value", rows, value_nulls),
        headers,
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
