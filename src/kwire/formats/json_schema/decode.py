"""JSON values (one per record) into an Arrow column of a given type.

The fast way is pyarrow's JSON reader (``pyarrow.json.read_json``, C++):
each value is wrapped as ``{"v":VALUE}`` and the lot read as
newline-delimited JSON with an explicit schema, so any JSON value (not only
objects) reads as one row, and a record holding two values, or none, shows
as a wrong row count. Values with line breaks between their tokens
(pretty-printed JSON; a raw line break cannot be inside a JSON string) break
their line, so they fail the first read: the values are read again with
``newlines_in_values`` (slower). What the reader cannot make (dates,
times, uuids, enums' dictionaries: it reads those as strings) is converted
after it, column by column (:func:`finish`).

Types with a map or a JSON-text part (:data:`~kwire.formats.json_schema.schema.JSON_TEXT`)
are beyond the reader: those values are parsed with :mod:`json` one by
one (slower), checked against the type as the reader would, and converted
the same way after.

A value that does not decode (not JSON, several values, a type the column
cannot hold, a required field absent or null, a date that is not one) is
found by halving (a prefix of the column decodes while it holds no bad
value) and raised as :class:`BadValue` with its row.
"""

from __future__ import annotations

import decimal
import json
import re
from typing import Any, Callable, List, Optional

from kwire.formats.base import pa  # first: without pyarrow, its ImportError names kwire[arrow]

import pyarrow.compute as pc  # noqa: E402
import pyarrow.json as pj  # noqa: E402

from kwire.formats.arrays import children, nested, rebuild, spread
from kwire.formats.json_schema.schema import ENUM, JSON_TEXT, UUID

__all__ = ["BadValue", "decode_column", "check_type"]

_OPEN, _CLOSE, _EMPTY, _NULL = pa.scalar(b'{"v":'), pa.scalar(b"}\n"), pa.scalar(b""), pa.scalar(b"null")
_BLOCK = 1 << 20
#: What may go wrong with bad data (not kwire's own bugs: ArrowNotImplementedError is not here).
_DATA_ERRORS = (ValueError, TypeError, OverflowError, RecursionError)
_UUID_PATTERN = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
_TIME_PATTERN = (r"^(?P<h>\d{2}):(?P<m>\d{2}):(?P<s>\d{2})(?:\.(?P<f>\d{1,9})\d*)?"
                 r"(?P<z>Z|[+-]\d{2}:\d{2})?$")
_ZONE_PATTERN = r"(Z|[+-]\d{2}:?\d{2})$"
#: What the reader's messages say of the wrapper: the row it counts (of the part read) is not the record's.
_WRAPPER_IN_MESSAGE = re.compile(r" in row \d+")
_DAY_NS = 86_400 * 10**9
_UNIT_NS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
_FRACTION_DIGITS = {"s": 0, "ms": 3, "us": 6, "ns": 9}


class BadValue(ValueError):
    """The value of row ``row`` (of the column given) cannot be decoded."""

    def __init__(self, row: int, reason: str) -> None:
        super().__init__(reason)
        self.row, self.reason = row, reason


# ------------------------------------------------------------- types
def _rebuild(typ: "pa.DataType", fields: List["pa.Field"]) -> "pa.DataType":
    if pa.types.is_struct(typ):
        return pa.struct(fields)
    if pa.types.is_map(typ):
        return pa.map_(fields[0], fields[1])
    return pa.large_list(fields[0]) if pa.types.is_large_list(typ) else pa.list_(fields[0])


def _as_text(typ: "pa.DataType") -> bool:
    """Read as a string, converted after (the reader has no conversion)."""
    return (typ in (UUID, ENUM, JSON_TEXT) or pa.types.is_date(typ) or pa.types.is_time(typ)
            or pa.types.is_timestamp(typ) or pa.types.is_dictionary(typ))


def reader_type(typ: "pa.DataType") -> "pa.DataType":
    """The type the JSON reader (or the :mod:`json` way) reads for ``typ``."""
    if nested(typ):
        return _rebuild(typ, [f.with_type(reader_type(f.type)) for f in children(typ)])
    return pa.string() if _as_text(typ) else typ


def _needs_json_module(typ: "pa.DataType") -> bool:
    if typ == JSON_TEXT or pa.types.is_map(typ):
        return True
    return nested(typ) and any(_needs_json_module(f.type) for f in children(typ))


_LEAVES = (pa.types.is_boolean, pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal, pa.types.is_string,
           pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary, pa.types.is_null)


def check_type(typ: "pa.DataType") -> None:
    """Raise ``ValueError`` for a type JSON values cannot be read into."""
    if nested(typ):
        if pa.types.is_map(typ) and not pa.types.is_string(typ.key_type):
            raise ValueError(f"a JSON object's keys are strings: {typ} cannot hold one")
        for f in children(typ):
            check_type(f.type)
        return
    if pa.types.is_dictionary(typ) and not pa.types.is_string(typ.value_type):
        raise ValueError(f"JSON values read into dictionaries of strings only, not {typ}")
    if not (_as_text(typ) or any(test(typ) for test in _LEAVES)):
        raise ValueError(f"JSON values cannot be read into Arrow type {typ}")


# ----------------------------------------------------------- decoding
def decode_column(column: "pa.Array", typ: "pa.DataType") -> "pa.Array":
    """``column`` (binary JSON values, nulls staying null, as does the JSON
    ``null``) as an array of ``typ``; :class:`BadValue` names the first row that does not decode."""
    valid = column.is_valid()
    literal_null = pc.fill_null(pc.equal(column, _NULL), False)
    if pc.any(literal_null).as_py():          # the JSON null: a null row too, whatever the type
        valid = pc.and_(valid, pc.invert(literal_null))
        column = pc.if_else(valid, column, pa.scalar(None, column.type))
    present = column if column.null_count == 0 else column.filter(valid)
    try:
        out = _decode(present, typ)
    except _DATA_ERRORS as e:
        row = e.row if isinstance(e, BadValue) else _first_bad(present, typ)
        if column.null_count:
            row = pc.indices_nonzero(valid)[row].as_py()
        raise BadValue(row, e.reason if isinstance(e, BadValue) else _reason(e)) from None
    return out if column.null_count == 0 else spread(out, valid)


def _decode(values: "pa.Array", typ: "pa.DataType") -> "pa.Array":
    if len(values) == 0:
        return pa.array([], type=typ)
    if _needs_json_module(typ):
        return finish(_read_json_module(values, typ), typ)
    try:
        read = _read_arrow(values, reader_type(typ), multiline=False)
    except _DATA_ERRORS:       # a value with line breaks splits its line: read again (slower) allowing them
        read = _read_arrow(values, reader_type(typ), multiline=True)
    return finish(read, typ)


def _first_bad(values: "pa.Array", typ: "pa.DataType") -> int:
    """The first row of ``values`` (which fail to decode) that fails: the
    shortest failing prefix, found by halving."""
    good, bad = 0, len(values)          # values[:good] decode; values[:bad] do not
    while bad - good > 1:
        mid = (good + bad) // 2
        try:
            _decode(values.slice(0, mid), typ)
            good = mid
        except _DATA_ERRORS:
            bad = mid
    return bad - 1


def _reason(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    text = _WRAPPER_IN_MESSAGE.sub("", text).replace("Column(/v/", "Column(/").replace("Column(/v)", "Column(/)")
    return f"not a JSON value of the column's type: {text[:300]}"


def _read_arrow(values: "pa.Array", typ: "pa.DataType", multiline: bool) -> "pa.Array":
    """``values`` (no nulls) read by pyarrow's JSON reader as ``typ``;
    ``multiline``: values may hold line breaks (between their tokens)."""
    lines = pc.binary_join_element_wise(_OPEN, values, _CLOSE, _EMPTY)
    lengths = pc.binary_length(lines)
    size, longest = pc.sum(lengths).as_py(), pc.max(lengths).as_py()
    table = pj.read_json(
        pa.BufferReader(lines.buffers()[2].slice(0, size)),
        read_options=pj.ReadOptions(block_size=max(_BLOCK, longest + 2), use_threads=True),
        parse_options=pj.ParseOptions(explicit_schema=pa.schema([pa.field("v", typ)]),
                                      unexpected_field_behavior="ignore", newlines_in_values=multiline))
    if table.num_rows != len(values):
        raise ValueError(f"{table.num_rows} JSON values in {len(values)} records: a record holds one")
    return table.column(0).combine_chunks()


def _read_json_module(values: "pa.Array", typ: "pa.DataType") -> "pa.Array":
    """``values`` (no nulls) parsed with :mod:`json` one by one, checked
    against ``typ``, as an array of its :func:`reader_type`."""
    rows = []
    for i, raw in enumerate(values.to_pylist()):
        try:
            rows.append(_conform(json.loads(raw), typ, True))
        except _DATA_ERRORS as e:
            raise BadValue(i, _reason(e)) from None
    return pa.array(rows, type=reader_type(typ))


def _conform(value: Any, typ: "pa.DataType", nullable: bool) -> Any:
    """``value`` (from :func:`json.loads`) as pyarrow takes it for
    :func:`reader_type` of ``typ``; ``ValueError`` where the reader would
    refuse it."""
    if value is None:
        if not nullable:
            raise ValueError("a required field is absent or null")
        return None
    if typ == JSON_TEXT:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if pa.types.is_struct(typ):
        _expect(value, dict, typ)
        return {f.name: _conform(value.get(f.name), f.type, f.nullable) for f in children(typ)}
    if pa.types.is_map(typ):
        _expect(value, dict, typ)
        item = typ.item_field
        return [(k, _conform(v, item.type, item.nullable)) for k, v in value.items()]
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        _expect(value, list, typ)
        item = typ.value_field
        return [_conform(v, item.type, item.nullable) for v in value]
    return _scalar(value, typ)


def _scalar(value: Any, typ: "pa.DataType") -> Any:
    if pa.types.is_boolean(typ):
        _expect(value, bool, typ)
    elif pa.types.is_integer(typ):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{type(value).__name__} where {typ} is expected")
    elif pa.types.is_floating(typ) or pa.types.is_decimal(typ):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{type(value).__name__} where {typ} is expected")
        return float(value) if pa.types.is_floating(typ) else decimal.Decimal(repr(value))
    elif pa.types.is_null(typ):
        raise ValueError(f"{type(value).__name__} where null is expected")
    else:                               # strings (and what is read as strings), binary
        _expect(value, str, typ)
    return value


def _expect(value: Any, kind: type, typ: "pa.DataType") -> None:
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ValueError(f"{type(value).__name__} where {typ} is expected")


# ---------------------------------------------------------- converting
def finish(arr: "pa.Array", typ: "pa.DataType") -> "pa.Array":
    """``arr`` (of :func:`reader_type` of ``typ``) as ``typ``."""
    return arr if arr.type == typ else rebuild(arr, typ, _convert)


def _convert(arr: "pa.Array", typ: "pa.DataType") -> "pa.Array":
    if arr.type == typ:
        return arr
    convert = _CONVERSIONS.get(typ) or _convert_by_kind(typ)
    return convert(arr, typ)


def _convert_by_kind(typ: "pa.DataType") -> Callable[["pa.Array", "pa.DataType"], "pa.Array"]:
    if pa.types.is_timestamp(typ):
        return _timestamps
    if pa.types.is_time(typ):
        return _times
    if pa.types.is_dictionary(typ):
        return lambda arr, t: pc.dictionary_encode(arr).cast(t)
    return lambda arr, t: arr.cast(t)       # dates (ISO 8601), the rest: same type or a safe cast


def _uuids(arr: "pa.Array", typ: "pa.DataType") -> "pa.Array":
    ok = pc.match_substring_regex(arr, _UUID_PATTERN)
    if pc.any(pc.invert(ok)).as_py():
        raise ValueError("a uuid is not in its canonical form (8-4-4-4-12 hex digits)")
    raw = [None if v is None else bytes.fromhex(v.replace("-", "")) for v in arr.to_pylist()]
    return pa.ExtensionArray.from_storage(UUID, pa.array(raw, pa.binary(16)))


def _json_text(arr: "pa.Array", typ: "pa.DataType") -> "pa.Array":
    return pa.ExtensionArray.from_storage(JSON_TEXT, arr.cast(pa.string()))


_CONVERSIONS = {UUID: _uuids, JSON_TEXT: _json_text}


def _timestamps(arr: "pa.Array", typ: "pa.DataType") -> "pa.Array":
    """RFC 3339 date-times (any case; fractions past the unit's digits cut;
    without an offset, UTC) as ``typ``: most cast as they are."""
    try:
        return arr.cast(typ)
    except pa.ArrowInvalid:
        pass
    digits = _FRACTION_DIGITS[typ.unit]
    text = pc.replace_substring_regex(pc.utf8_upper(arr), pattern=r"(\.\d{%d})\d+" % digits if digits else r"\.\d+",
                                      replacement=r"\1" if digits else "")
    if typ.tz is not None:
        zoned = pc.match_substring_regex(text, _ZONE_PATTERN)
        text = pc.if_else(zoned, text, pc.binary_join_element_wise(text, pa.scalar("Z"), pa.scalar("")))
    return text.cast(typ)


def _times(arr: "pa.Array", typ: "pa.DataType") -> "pa.Array":
    """RFC 3339 times (``HH:MM:SS[.fraction][Z|+HH:MM]``; with an offset,
    as UTC) as ``typ``; a leap second is the second before."""
    parts = pc.extract_regex(pc.utf8_upper(arr), _TIME_PATTERN)
    if parts.null_count > arr.null_count:
        raise ValueError("a time is not HH:MM:SS[.fraction][Z|+HH:MM]")

    def number(name: str, start: int = 0, stop: Optional[int] = None) -> "pa.Array":
        text = parts.field(name)
        if stop is not None:
            text = pc.utf8_slice_codeunits(text, start, stop)
        return pc.cast(pc.if_else(pc.equal(text, ""), "0", text), pa.int64())

    hours, minutes, seconds = number("h"), number("m"), pc.min_element_wise(number("s"), 59)
    if pc.any(pc.or_(pc.greater_equal(hours, 24), pc.greater_equal(minutes, 60))).as_py():
        raise ValueError("a time's hour or minute is out of range")
    fraction = pc.cast(pc.utf8_rpad(parts.field("f"), width=9, padding="0"), pa.int64())
    zone = parts.field("z")
    offset = pc.multiply(pc.add(pc.multiply(number("z", 1, 3), 60), number("z", 4, 6)),
                         pc.if_else(pc.starts_with(zone, "-"), -1, 1))
    minutes_utc = pc.subtract(pc.add(pc.multiply(hours, 60), minutes), offset)
    ns = pc.add(pc.multiply(pc.add(pc.multiply(minutes_utc, 60), seconds), 10**9), fraction)
    ns = pc.if_else(pc.less(ns, 0), pc.add(ns, _DAY_NS), pc.if_else(pc.greater_equal(ns, _DAY_NS),
                                                                   pc.subtract(ns, _DAY_NS), ns))
    ticks = pc.divide(ns, _UNIT_NS[typ.unit])
    storage = pa.int32() if pa.types.is_time32(typ) else pa.int64()
    ticks = pc.if_else(pc.is_valid(arr), ticks, pa.scalar(None, pa.int64()))   # a struct's field keeps no nulls
    return pc.cast(ticks, storage).cast(typ)

