"""Nested Arrow arrays rebuilt leaf by leaf (:func:`rebuild`: structs, lists
and maps keep their shape and validity, and each leaf array becomes what a
function makes of it: a string column read by a JSON reader made a date
column, a timestamp column made its text...), and the rows of a column
spread over a column with null rows (:func:`spread`).

Under a null struct, a non-nullable field still holds a value (a
placeholder: zero, empty): Parquet's writer, and Spark, refuse a
non-nullable field with nulls whatever its parent."""

from __future__ import annotations

import decimal
from typing import Callable, List

from kwire.formats.base import pa  # first: without pyarrow, its ImportError names kwire[arrow]

import pyarrow.compute as pc  # noqa: E402

__all__ = ["nested", "children", "rebuild", "spread", "placeholders"]

Leaf = Callable[["pa.Array", "pa.DataType"], "pa.Array"]


def nested(typ: "pa.DataType") -> bool:
    """A struct, list or map: what :func:`rebuild` goes into."""
    return pa.types.is_struct(typ) or pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_map(typ)


def children(typ: "pa.DataType") -> List["pa.Field"]:
    """The child fields of a nested type (a map's: its key and item)."""
    if pa.types.is_struct(typ):
        return [typ.field(i) for i in range(typ.num_fields)]
    if pa.types.is_map(typ):
        return [typ.key_field, typ.item_field]
    return [typ.value_field]


def rebuild(arr: "pa.Array", typ: "pa.DataType", leaf: Leaf) -> "pa.Array":
    """``arr`` with every leaf array ``a`` (at type ``t`` of ``typ``, the
    type ``arr`` is to have: its nested parts name the fields) replaced by
    ``leaf(a, t)``. Nested parts keep their fields where the leaves keep
    their types, and take the leaves' types otherwise."""
    if not nested(typ):
        return leaf(arr, typ)
    mask = pc.is_null(arr) if arr.null_count else None
    fields = children(typ)
    if pa.types.is_struct(typ):
        kids = [rebuild(arr.field(i), f.type, leaf) for i, f in enumerate(fields)]
        made = [f.with_type(k.type) for f, k in zip(fields, kids)]
        return pa.StructArray.from_arrays(kids, fields=made, mask=mask)
    if pa.types.is_map(typ):
        keys, items = rebuild(arr.keys, fields[0].type, leaf), rebuild(arr.items, fields[1].type, leaf)
        made_type = pa.map_(fields[0].with_type(keys.type), fields[1].with_type(items.type))
        return pa.MapArray.from_arrays(arr.offsets, keys, items, type=made_type, mask=mask)
    values = rebuild(arr.values, fields[0].type, leaf)
    large = pa.types.is_large_list(typ)
    item = fields[0].with_type(values.type)
    cls, made_list = (pa.LargeListArray, pa.large_list(item)) if large else (pa.ListArray, pa.list_(item))
    return cls.from_arrays(arr.offsets, values, type=made_list, mask=mask)


def spread(arr: "pa.Array", valid: "pa.Array") -> "pa.Array":
    """``arr`` (one row per true row of the boolean ``valid``) as a column of
    ``len(valid)`` rows, null where ``valid`` is false; a struct's fields hold
    placeholders there, not nulls."""
    index = pc.subtract(pc.cumulative_sum(pc.cast(valid, pa.int64())), 1)
    if not pa.types.is_struct(arr.type):
        return arr.take(pc.if_else(valid, index, pa.scalar(None, pa.int64())))
    filled = arr.take(pc.if_else(valid, index, 0)) if len(arr) else placeholders(arr.type, len(valid))
    return pa.StructArray.from_arrays([filled.field(i) for i in range(arr.type.num_fields)],
                                      fields=children(arr.type), mask=pc.invert(valid))


def placeholders(typ: "pa.DataType", n: int) -> "pa.Array":
    """``n`` valid rows of ``typ``: zeros, empty strings, lists and maps,
    structs of placeholders."""
    if pa.types.is_struct(typ):
        return pa.StructArray.from_arrays([placeholders(f.type, n) for f in children(typ)], fields=children(typ))
    if pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_map(typ):
        return pa.array([[]] * n, typ)
    if isinstance(typ, pa.BaseExtensionType):
        if typ.extension_name == "arrow.json":
            return pa.ExtensionArray.from_storage(typ, pa.array(["null"] * n, typ.storage_type))
        return pa.ExtensionArray.from_storage(typ, placeholders(typ.storage_type, n))
    if pa.types.is_dictionary(typ):
        return pa.DictionaryArray.from_arrays(pa.array([0] * n, typ.index_type), placeholders(typ.value_type, 1))
    if pa.types.is_fixed_size_binary(typ):
        return pa.array([bytes(typ.byte_width)] * n, typ)
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return pa.array([""] * n, typ)
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        return pa.array([b""] * n, typ)
    if pa.types.is_null(typ):
        return pa.nulls(n)
    if pa.types.is_decimal(typ):
        return pa.array([decimal.Decimal(0)] * n, typ)
    if pa.types.is_interval(typ):
        return pa.array([(0, 0, 0)] * n, typ)
    if pa.types.is_date32(typ) or pa.types.is_time32(typ):
        return pa.array([0] * n, pa.int32()).cast(typ)
    return pa.array([0] * n, pa.int64()).cast(typ)
