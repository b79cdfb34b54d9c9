"""Nested Arrow arrays rebuilt leaf by leaf: structs, lists and maps keep
their shape and validity, and each leaf array becomes what a function makes
of it (a string column read by a JSON reader made a date column, a
timestamp column made its text...)."""

from __future__ import annotations

from typing import Callable, List

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["nested", "children", "rebuild"]

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
