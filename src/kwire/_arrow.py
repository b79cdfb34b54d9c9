"""Arrow types of kwire's columnar output, the import of the column buffers
the compiled decoder fills as a ``pyarrow.RecordBatch`` (no copy),
and the other way: the columns ``Producer.send_arrow`` hands to the compiled
core as their buffers (:func:`send_columns`)."""

from __future__ import annotations

from typing import Any, Optional, Tuple, Union

try:
    import pyarrow as pa
except ImportError as e:  # pragma: no cover - exercised only without pyarrow
    raise ImportError("kwire's columnar decoding needs pyarrow: pip install 'kwire[arrow]'") from e

__all__ = ["HEADERS_TYPE", "record_schema", "record_batch_from_c", "send_columns", "SendColumns"]

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


def record_batch_from_c(address: int, timestamp_unit: str) -> "pa.RecordBatch":
    """The ``pyarrow.RecordBatch`` of a ColumnarDecoder result exported
    through the Arrow C Data Interface: the ``struct ArrowArray`` at
    ``address`` (a struct array of :func:`record_schema`'s columns, which
    pyarrow takes over, no copy), in one call."""
    return pa.RecordBatch._import_from_c(address, _SCHEMAS[timestamp_unit])


# ------------------------------------------------------------ send_arrow
#: The columns of one ``send_arrow`` call as the compiled core takes them
#: (``Accumulator.send_arrow``): rows, key, value, headers, partition, timestamp.
SendColumns = Tuple[int, Optional[tuple], Optional[tuple], Optional[tuple], Optional[tuple], Optional[tuple]]
ArrowData = Union["pa.RecordBatch", "pa.Table"]


def _one_chunk(col: Any) -> "pa.Array":
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col


def _binary(arr: "pa.Array", what: str) -> tuple:
    """(validity, offsets, data, offset) of a binary or string column (a
    string column as its UTF-8 bytes, viewed without a copy; large types
    cast down)."""
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    if pa.types.is_fixed_size_binary(t):
        arr = arr.cast(pa.binary())
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        arr = arr.cast(pa.string() if pa.types.is_large_string(t) else pa.binary())
    elif pa.types.is_binary_view(t) or pa.types.is_string_view(t):
        arr = arr.cast(pa.binary())
    if pa.types.is_string(arr.type):
        arr = arr.view(pa.binary())
    if pa.types.is_null(arr.type):
        arr = pa.nulls(len(arr), pa.binary())
    if not pa.types.is_binary(arr.type):
        raise TypeError(f"send_arrow: column {what} must be binary or string, not {t}")
    validity, offsets, data = arr.buffers()
    return (validity if arr.null_count else None, offsets, data, arr.offset)


def _integers(arr: "pa.Array", what: str) -> tuple:
    """(validity, data, offset, 64-bit?) of an integer column."""
    if pa.types.is_int32(arr.type) or pa.types.is_int64(arr.type):
        wide = pa.types.is_int64(arr.type)
    elif pa.types.is_integer(arr.type) or pa.types.is_null(arr.type):
        arr, wide = arr.cast(pa.int64()), True
    else:
        raise TypeError(f"send_arrow: column {what} must be integers, not {arr.type}")
    validity, data = arr.buffers()
    return (validity if arr.null_count else None, data, arr.offset, wide)


def _timestamps(arr: "pa.Array", what: str) -> tuple:
    """(validity, int64 milliseconds, offset) of a timestamp (any unit) or integer (ms) column."""
    if pa.types.is_timestamp(arr.type):
        arr = arr.cast(pa.timestamp("ms", tz=arr.type.tz), safe=False).view(pa.int64())
    elif pa.types.is_integer(arr.type):
        arr = arr.cast(pa.int64())
    else:
        raise TypeError(f"send_arrow: column {what} must be timestamps or integers (ms), not {arr.type}")
    validity, data = arr.buffers()
    return (validity if arr.null_count else None, data, arr.offset)


def _headers(arr: "pa.Array", what: str) -> tuple:
    """A ``list<struct<key: string, value: binary>>`` column: (list
    validity, list offsets, list offset, entries, struct validity, struct
    offset, key column, value column)."""
    t = arr.type
    if pa.types.is_large_list(t):
        arr = arr.cast(pa.list_(t.value_type))
    if not (pa.types.is_list(arr.type) and pa.types.is_struct(arr.type.value_type)
            and [f.name for f in arr.type.value_type] == ["key", "value"]):
        raise TypeError(f"send_arrow: column {what} must be list<struct<key: string, value: binary>>, not {t}")
    entries = arr.values
    validity, offsets = arr.buffers()[:2]
    struct_validity = entries.buffers()[0] if entries.null_count else None
    return (validity if arr.null_count else None, offsets, arr.offset, len(entries), struct_validity,
            entries.offset, _binary(entries.field(0), f"{what}.key"), _binary(entries.field(1), f"{what}.value"))


def send_columns(data: ArrowData, key: Optional[str], value: str, headers: Optional[str],
                 partition: Optional[str], timestamp: Optional[str]) -> SendColumns:
    """The named columns of ``data`` (a ``RecordBatch`` or ``Table``; None
    or a name it lacks: no such column) as their buffers."""
    names = set(data.schema.names)
    if value not in names:
        raise ValueError(f"send_arrow: no value column {value!r} (columns: {', '.join(data.schema.names)})")

    def col(name: Optional[str]) -> Optional["pa.Array"]:
        return _one_chunk(data.column(name)) if name is not None and name in names else None

    k, h, p, ts = col(key), col(headers), col(partition), col(timestamp)
    if h is not None and pa.types.is_null(h.type):        # all null: no headers on any row
        h = None
    return (data.num_rows,
            None if k is None else _binary(k, key or ""),
            _binary(_one_chunk(data.column(value)), value),
            None if h is None else _headers(h, headers or ""),
            None if p is None else _integers(p, partition or ""),
            None if ts is None else _timestamps(ts, timestamp or ""))
