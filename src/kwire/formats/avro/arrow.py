"""The Arrow type of an Avro reader schema, and where each of its parts is
written (:class:`Slot`: the column of :class:`kwire._core.typedcols.Columns`
that a part fills, numbered as ``Columns`` numbers them: pre-order).

The mapping (docs/guide/typed-records.md):

* record -> struct (a field is nullable when its type is null or a union
  with null); array -> list; map -> map<string, ...>;
* a union of null and one type -> that type, nullable; any other union ->
  a struct with one nullable field per non-null branch, ``member0``,
  ``member1``... (as Spark's ``from_avro`` has it), null when the value is;
  a union of null alone -> null;
* enum -> dictionary<int32, string> of its symbols; fixed ->
  fixed_size_binary;
* logical types: decimal -> decimal128 (decimal256 past 38 digits); uuid ->
  the canonical ``arrow.uuid`` extension (16 bytes) for string and fixed;
  date -> date32; time-millis -> time32[ms]; time-micros -> time64[us];
  timestamp-millis/micros/nanos -> timestamp[ms/us/ns, UTC];
  local-timestamp-* -> timestamp without a time zone; duration ->
  month_day_nano_interval.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from kwire.formats.base import pa

from kwire.formats.avro.schema import AvroSchemaError, Node

__all__ = ["Slot", "layout"]

_TIMESTAMPS = {
    "timestamp-millis": ("ms", "UTC"), "timestamp-micros": ("us", "UTC"), "timestamp-nanos": ("ns", "UTC"),
    "local-timestamp-millis": ("ms", None), "local-timestamp-micros": ("us", None),
    "local-timestamp-nanos": ("ns", None),
}


@dataclass(eq=False)
class Slot:
    """A part of the reader schema and the column it fills. A union's slot
    has ``branches`` (one per branch: the slot a branch fills, None for
    null) and ``members`` (True when it is a struct of members, whose
    column is ``col``)."""

    node: Node
    col: int
    type: "pa.DataType"
    kids: List["Slot"] = field(default_factory=list)
    branches: List[Optional["Slot"]] = field(default_factory=list)
    members: bool = False


def nullable(node: Node) -> bool:
    return node.type == "null" or (node.type == "union" and any(b.type == "null" for b in node.branches))


def layout(reader: Node) -> Tuple[Slot, list]:
    """The reader schema's root slot, and the dictionaries of its enum
    columns in column order (what ``Columns`` takes)."""
    if reader.recursive:
        raise AvroSchemaError(f"{reader!r} is recursive: a recursive Avro schema has no Arrow type")
    builder = _Layout()
    return builder.slot(reader), builder.dictionaries


class _Layout:
    def __init__(self) -> None:
        self.next_col = 0
        self.dictionaries: list = []

    def _col(self) -> int:
        self.next_col += 1
        return self.next_col - 1

    def slot(self, node: Node) -> Slot:
        if node.type == "union":
            return self._union(node)
        col = self._col()
        if node.type == "record":
            kids = [self.slot(f.type) for f in node.fields]
            t = pa.struct([pa.field(f.name, k.type, nullable=nullable(f.type)) for f, k in zip(node.fields, kids)])
            return Slot(node, col, t, kids)
        if node.type == "array":
            item = self.slot(node.items)
            return Slot(node, col, pa.list_(pa.field("item", item.type, nullable=nullable(node.items))), [item])
        if node.type == "map":
            entries_col = self._col()
            key = Slot(Node("string"), self._col(), pa.string())
            value = self.slot(node.values)
            entries = Slot(Node("record"), entries_col,
                           pa.struct([pa.field("key", pa.string(), nullable=False),
                                      pa.field("value", value.type, nullable=nullable(node.values))]), [key, value])
            t = pa.map_(pa.string(), pa.field("value", value.type, nullable=nullable(node.values)))
            return Slot(node, col, t, [entries])
        if node.type == "enum":
            self.dictionaries.append(pa.array(node.symbols, pa.string()))
            return Slot(node, col, pa.dictionary(pa.int32(), pa.string()))
        return Slot(node, col, scalar_type(node))

    def _union(self, node: Node) -> Slot:
        others = [b for b in node.branches if b.type != "null"]
        if not others:
            return Slot(node, self._col(), pa.null(), branches=[None] * len(node.branches))
        if len(others) == 1:
            inner = self.slot(others[0])
            return Slot(node, inner.col, inner.type, [inner],
                        branches=[None if b.type == "null" else inner for b in node.branches])
        col = self._col()
        members = [self.slot(b) for b in others]
        t = pa.struct([pa.field(f"member{i}", m.type, nullable=True) for i, m in enumerate(members)])
        it = iter(members)
        return Slot(node, col, t, members, branches=[None if b.type == "null" else next(it) for b in node.branches],
                    members=True)


def scalar_type(node: Node) -> "pa.DataType":
    """The Arrow type of a primitive, fixed or logical Avro type."""
    lt = node.logical
    if lt == "decimal":
        return (pa.decimal128 if node.precision <= 38 else pa.decimal256)(node.precision, node.scale)
    if lt == "uuid":
        return pa.uuid()
    if lt == "date":
        return pa.date32()
    if lt == "time-millis":
        return pa.time32("ms")
    if lt == "time-micros":
        return pa.time64("us")
    if lt in _TIMESTAMPS:
        unit, tz = _TIMESTAMPS[lt]
        return pa.timestamp(unit, tz=tz)
    if lt == "duration":
        return pa.month_day_nano_interval()
    if node.type == "fixed":
        return pa.binary(node.size)
    return {
        "null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(),
        "float": pa.float32(), "double": pa.float64(), "bytes": pa.binary(), "string": pa.string(),
    }[node.type]
