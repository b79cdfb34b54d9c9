"""Arrow values as JSON values: what the ``kwire`` command prints for a
typed column, and what the JSON format encodes.

How each type is written (docs/guide/cli.md, "The kwire command: typed values"):

* timestamps: RFC 3339 text in UTC with the unit's digits
  (``2024-05-01T12:00:00.000000Z``; without a time zone, no ``Z``);
  dates ``2024-05-01``; times ``12:00:00.000000``;
* decimals: their exact text (``"12.30"``) for display, a JSON number when
  encoding (JSON Schema's ``number``);
* binary and fixed-size binary: base64 text; uuids: canonical text;
* enums (dictionaries): their symbol; maps with string keys: an object,
  others a list of ``[key, value]`` pairs; JSON text (``arrow.json``): the
  JSON value itself;
* durations: ISO 8601 (``PT1.5S``); Avro's duration (month/day/nanosecond
  interval): ``{"months": m, "days": d, "nanoseconds": n}``;
* floats that JSON cannot hold (NaN, infinities): ``"NaN"``, ``"Infinity"``,
  ``"-Infinity"`` for display; encoded as Python's :mod:`json` writes them
  (as confluent-kafka's serializer does).
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import math
import uuid
from functools import partial
from typing import Any, List

from kwire.formats.base import pa  # first: without pyarrow, its ImportError names kwire[arrow]

import pyarrow.compute as pc  # noqa: E402

from kwire.formats.arrays import children, nested, rebuild

__all__ = ["json_values", "dumps"]

_UNIT_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


def json_values(arr: "pa.Array", *, display: bool = False) -> List[Any]:
    """One JSON-ready Python value per row of ``arr`` (None for a null);
    ``display``: as the command prints them (see the module's doc)."""
    typ = arr.type
    text = rebuild(arr, typ, partial(_leaf, display=display))
    return [_fix(v, typ, display) for v in text.to_pylist()]


def dumps(value: Any) -> str:
    """``value`` as compact JSON text, non-ASCII as itself (the bytes
    confluent-kafka's JSON serializer writes for the same value)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_default)


def _leaf(arr: "pa.Array", typ: "pa.DataType", display: bool) -> "pa.Array":
    """Leaves written as text (or numbers) by Arrow, vectorized."""
    if isinstance(typ, pa.BaseExtensionType):
        return arr.storage
    if pa.types.is_dictionary(typ):
        return rebuild(arr.dictionary_decode(), typ.value_type, partial(_leaf, display=display))
    if pa.types.is_timestamp(typ):
        if typ.tz is not None:
            arr = arr.cast(pa.timestamp(typ.unit, "UTC"))
        return pc.replace_substring(arr.cast(pa.string()), " ", "T", max_replacements=1)
    if pa.types.is_date(typ) or pa.types.is_time(typ):
        return arr.cast(pa.string())
    if pa.types.is_decimal(typ):
        return arr.cast(pa.string() if display else pa.float64())
    if pa.types.is_duration(typ):
        return arr.cast(pa.int64())
    return arr


def _fix(value: Any, typ: "pa.DataType", display: bool) -> Any:
    """What Python's values of the text columns still need, by type."""
    if value is None:
        return None
    if nested(typ):
        fields = children(typ)
        if pa.types.is_struct(typ):
            return {f.name: _fix(value[f.name], f.type, display) for f in fields}
        if pa.types.is_map(typ):
            pairs = [(_fix(k, fields[0].type, display), _fix(v, fields[1].type, display)) for k, v in value]
            return dict(pairs) if pa.types.is_string(fields[0].type) else [list(p) for p in pairs]
        return [_fix(v, fields[0].type, display) for v in value]
    if pa.types.is_dictionary(typ):
        return _fix(value, typ.value_type, display)
    if isinstance(typ, pa.BaseExtensionType):
        if typ.extension_name == "arrow.json":
            return json.loads(value)
        if typ.extension_name == "arrow.uuid":
            return str(uuid.UUID(bytes=value))
        return _fix(value, typ.storage_type, display)
    if pa.types.is_duration(typ):
        seconds = decimal.Decimal(value) / _UNIT_PER_SECOND[typ.unit]
        return f"PT{seconds.normalize():f}S"
    if isinstance(value, float) and display and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if pa.types.is_interval(typ):
        return {"months": value.months, "days": value.days, "nanoseconds": value.nanoseconds}
    return value


def _default(value: Any) -> Any:
    """What is left inside unions (whose branches the walk does not see)."""
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} has no JSON form")
