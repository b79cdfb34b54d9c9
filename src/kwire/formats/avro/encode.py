"""Arrow columns written as Avro: which Arrow array each part of the writer
schema reads, and how (:class:`EncSpec`, the plan the compiled encoder
``kwire._core.avroenc`` runs, made anew for each call's arrays).

What Arrow type each Avro type is written from (the reverse of the
decoder's mapping, and a little more):

* record <- struct (fields by name or alias; a field the struct lacks is
  written as its default); array <- list; map <- map or list of
  struct<key, value>;
* a union of null and one type <- that type, nullable; any other union <-
  a struct of members (``member0``...: the first one set is the value), or
  an array of one branch's type;
* enum <- dictionary of strings, or strings; fixed <- fixed_size_binary or
  binary of its size;
* int, long <- any integer, date, time or timestamp (in the Avro logical
  type's unit: finer units floored, as fastavro does); float, double <-
  any float or integer; bytes, string <- binary or string;
* decimal <- decimal128/256 of the same scale; uuid <- ``arrow.uuid`` (or,
  for a string uuid, strings); duration <- month_day_nano_interval.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional

from kwire.formats.base import pa
import pyarrow.compute as pc

from kwire.formats.avro.program import encode_default
from kwire.formats.avro.schema import NO_DEFAULT, AvroSchemaError, Node

__all__ = ["EncSpec", "plan"]

_PER_SECOND = {"s": 1, "ms": 1000, "us": 1_000_000, "ns": 1_000_000_000}
_LOGICAL_UNIT = {"timestamp-millis": "ms", "timestamp-micros": "us", "timestamp-nanos": "ns",
                 "local-timestamp-millis": "ms", "local-timestamp-micros": "us", "local-timestamp-nanos": "ns",
                 "time-millis": "ms", "time-micros": "us"}


@dataclass(eq=False)
class EncSpec:
    code: str
    src: str = "none"
    path: str = ""
    width: int = 0
    size: int = 0
    validity: Any = None
    data: Any = None
    offsets: Any = None
    base: int = 0
    mul: int = 1
    div: int = 1
    null_branch: int = -1
    value_branch: int = -1
    kids: List["EncSpec"] = field(default_factory=list)
    map: Optional[bytes] = None
    default: Optional[bytes] = None
    limit: Optional[bytes] = None


def plan(node: Node, arr: "pa.Array", path: str = "") -> EncSpec:
    """How to write ``arr``'s rows as ``node``; ``AvroSchemaError`` when its
    type cannot be written as that Avro type."""
    arr = _plain(arr)
    if node.type == "union":
        return _union(node, arr, path)
    spec = EncSpec(node.type, path=path, base=arr.offset)
    spec.validity = arr.buffers()[0] if arr.null_count else None
    t = arr.type
    if node.type == "null":
        return spec
    if node.type == "record":
        return _record(spec, node, arr, path)
    if node.type in ("array", "map"):
        return _items(spec, node, arr, path)
    if node.type == "enum":
        return _enum(spec, node, arr, path)
    if node.logical == "decimal":
        return _decimal(spec, node, arr, path)
    if node.logical == "uuid" and node.type == "string" and pa.types.is_fixed_size_binary(t) and t.byte_width == 16:
        spec.code, spec.src, spec.width, spec.data = "uuid_string", "fixed", 16, arr.buffers()[1]
        return spec
    if node.logical == "duration":
        _need(t == pa.month_day_nano_interval(), node, t, path)
        spec.code, spec.src, spec.width, spec.data = "duration", "interval", 16, arr.buffers()[1]
        return spec
    if node.type in ("bytes", "string", "fixed"):
        return _bytes(spec, node, arr, path)
    return _number(spec, node, arr, path)


def _plain(arr: Any) -> "pa.Array":
    """``arr`` as one array of a layout the encoder reads (extension types as
    their storage, views and large strings as their plain kind)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    t = arr.type
    if pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        arr = arr.cast(pa.binary())
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        arr = arr.view(pa.binary() if pa.types.is_string(t) else pa.large_binary())
    return arr


def _need(ok: bool, node: Node, t: Any, path: str) -> None:
    if not ok:
        raise AvroSchemaError(f"{path or 'the value'}: Arrow {t} cannot be written as Avro {node!r}")


def _union(node: Node, arr: "pa.Array", path: str) -> EncSpec:
    null = next((i for i, b in enumerate(node.branches) if b.type == "null"), -1)
    others = [(i, b) for i, b in enumerate(node.branches) if b.type != "null"]
    if not others:
        return EncSpec("null", path=path, null_branch=null, value_branch=null)
    if len(others) > 1 and pa.types.is_struct(arr.type) and \
            [arr.type.field(k).name for k in range(arr.type.num_fields)] == [f"member{k}" for k in range(len(others))]:
        spec = EncSpec("members", path=path, base=arr.offset, null_branch=null,
                       validity=arr.buffers()[0] if arr.null_count else None)
        spec.kids = [plan(b, arr.field(k), f"{path}.member{k}".lstrip(".")) for k, (_, b) in enumerate(others)]
        spec.map = pa.array([i for i, _ in others], pa.int32()).buffers()[1].to_pybytes()
        return spec
    for i, b in others:
        try:
            spec = plan(b, arr, path)
        except AvroSchemaError:
            continue
        spec.null_branch, spec.value_branch = null, i
        return spec
    raise AvroSchemaError(f"{path or 'the value'}: Arrow {arr.type} matches no branch of Avro {node.branches!r}")


def _record(spec: EncSpec, node: Node, arr: "pa.Array", path: str) -> EncSpec:
    _need(pa.types.is_struct(arr.type), node, arr.type, path)
    names = {arr.type.field(k).name: k for k in range(arr.type.num_fields)}
    for f in node.fields:
        where = f"{path}.{f.name}".lstrip(".")
        k = next((names[n] for n in [f.name] + f.aliases if n in names), None)
        if k is not None:
            spec.kids.append(plan(f.type, arr.field(k), where))
        elif f.default is not NO_DEFAULT:
            spec.kids.append(EncSpec("default", path=where, default=encode_default(f.type, f.default, where)))
        else:
            raise AvroSchemaError(f"{where}: the Arrow struct has no such field, and the schema no default")
    return spec


def _items(spec: EncSpec, node: Node, arr: "pa.Array", path: str) -> EncSpec:
    t = arr.type
    if node.type == "map" and pa.types.is_map(t):
        entries = arr.values
        keys, values = entries.field(0), entries.field(1)
    elif node.type == "map" and (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_struct(t.value_type):
        entries = arr.values
        keys, values = entries.field("key"), entries.field("value")
    else:
        _need(node.type == "array" and (pa.types.is_list(t) or pa.types.is_large_list(t)), node, t, path)
        keys, values = None, arr.values
    spec.src = "large_list" if pa.types.is_large_list(t) else "list"
    spec.offsets = arr.buffers()[1]
    if keys is not None:
        spec.kids = [plan(Node("string"), keys, path + "{key}"), plan(node.values, values, path + "{}")]
    else:
        spec.kids = [plan(node.items, values, path + "[]")]
    return spec


def _enum(spec: EncSpec, node: Node, arr: "pa.Array", path: str) -> EncSpec:
    if not pa.types.is_dictionary(arr.type):
        _need(pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type), node, arr.type, path)
        arr = pc.dictionary_encode(arr.cast(pa.string()))
        spec.base = arr.offset
        spec.validity = arr.buffers()[0] if arr.null_count else None
    symbols = {s: i for i, s in enumerate(node.symbols)}
    dictionary = arr.dictionary.cast(pa.string()).to_pylist()
    spec.map = pa.array([symbols.get(s, -1) for s in dictionary], pa.int32()).buffers()[1].to_pybytes() \
        if dictionary else b""
    spec.src = "uint" if pa.types.is_unsigned_integer(arr.type.index_type) else "int"
    spec.width = arr.type.index_type.bit_width // 8
    spec.data = arr.indices.buffers()[1]
    return spec


def _decimal(spec: EncSpec, node: Node, arr: "pa.Array", path: str) -> EncSpec:
    t = arr.type
    _need(pa.types.is_decimal(t) and t.scale == node.scale, node, t, path)
    spec.code = "dec_bytes" if node.type == "bytes" else "dec_fixed"
    spec.src, spec.width, spec.size, spec.data = "decimal", t.byte_width, node.size, arr.buffers()[1]
    limit = 10 ** node.precision
    spec.limit = limit.to_bytes(t.byte_width, "little") if limit.bit_length() <= 8 * t.byte_width \
        else b"\xff" * t.byte_width       # more digits than the column holds: none is too many
    return spec


def _bytes(spec: EncSpec, node: Node, arr: "pa.Array", path: str) -> EncSpec:
    t = arr.type
    ok = pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
    _need(ok, node, t, path)
    spec.code = "fixed" if node.type == "fixed" else "bytes"
    spec.size = node.size
    if pa.types.is_fixed_size_binary(t):
        spec.src, spec.width, spec.data = "fixed", t.byte_width, arr.buffers()[1]
    else:
        spec.src = "large_binary" if pa.types.is_large_binary(t) else "binary"
        spec.offsets, spec.data = arr.buffers()[1], arr.buffers()[2]
    return spec


def _number(spec: EncSpec, node: Node, arr: "pa.Array", path: str) -> EncSpec:
    t = arr.type
    if node.type == "boolean":
        _need(pa.types.is_boolean(t), node, t, path)
        spec.src, spec.data = "bool", arr.buffers()[1]
        return spec
    floating = node.type in ("float", "double")
    ok = pa.types.is_integer(t) or (floating and pa.types.is_floating(t) and t.bit_width in (32, 64)) \
        or (not floating and pa.types.is_temporal(t) and not pa.types.is_interval(t))
    _need(ok, node, t, path)
    spec.src = "float" if pa.types.is_floating(t) else ("uint" if pa.types.is_unsigned_integer(t) else "int")
    spec.width, spec.data = t.bit_width // 8, arr.buffers()[1]
    spec.mul, spec.div = _scale(node, t, path)
    return spec


def _scale(node: Node, t: Any, path: str) -> tuple:
    """(mul, div) taking an Arrow temporal value to the Avro logical type's unit."""
    if not pa.types.is_temporal(t):
        return 1, 1
    if pa.types.is_date32(t):
        return 1, 1
    if pa.types.is_date64(t):
        return 1, 86_400_000
    unit = _LOGICAL_UNIT.get(node.logical or "")
    if unit is None:
        return 1, 1                        # a plain int or long: the value as Arrow holds it
    src, dst = _PER_SECOND[t.unit], _PER_SECOND[unit]
    return (dst // src, 1) if dst >= src else (1, src // dst)
