"""A Protobuf message's Arrow type, and the plan the compiled decoder
(:mod:`kwire._core.protobuf`) and encoder follow for it.

The mapping (:func:`arrow_type`):

========================================  ============================================================
Protobuf                                  Arrow
========================================  ============================================================
message, group                            struct of its fields, in declaration order
``repeated T``                            ``list<T>`` (never null: absent is empty)
``map<K, V>``                             ``map<K, V>`` (never null; an entry repeated in the bytes
                                          stays: Protobuf's readers keep the last)
oneof                                     each member a nullable field; all but the member set null
enum                                      ``dictionary<int32, string>`` of its value names (a number
                                          the enum does not declare: null in an open enum, as if
                                          absent in a closed one, as Protobuf's readers drop it)
``string`` / ``bytes``                    ``string`` (valid UTF-8, or the value is refused) / ``binary``
``int32``, ``sint32``, ``sfixed32``       ``int32``
``uint32``, ``fixed32``                   ``uint32``
``int64``, ``sint64``, ``sfixed64``       ``int64``
``uint64``, ``fixed64``                   ``uint64``
``float`` / ``double`` / ``bool``         ``float32`` / ``float64`` / ``bool``
``google.protobuf.Timestamp``             ``timestamp('us', tz='UTC')`` (as Spark's ``from_protobuf``:
                                          microseconds, nanoseconds truncated toward zero; covers
                                          the type's whole range, years 1 to 9999)
``google.protobuf.Duration``              ``duration('us')`` (Spark's day-time interval, likewise)
``google.protobuf.*Value`` (wrappers)     the wrapped scalar, null when the field is absent
========================================  ============================================================

Absent fields: a field with presence (a message, a oneof member, proto3
``optional``, any proto2 singular field) is null, but for a proto2 field
that declares a ``[default = ...]``, which gets it; a proto3 scalar without
presence gets its type's default (0, "", false, the enum's zero value), never
null. A map entry without its value gets the value's default (an empty
message for a message value), as Protobuf's readers do.

Refused (:class:`~kwire.formats.protobuf.schema.ProtobufSchemaError`):
recursive messages (no Arrow type is infinite), among them
``google.protobuf.Struct``, ``Value`` and ``ListValue``.

Every Arrow field is nullable (as Spark's ``from_protobuf`` declares its
fields), but map keys.

The plan: one :class:`Node` per place a message takes in the type (a message
used by two fields is two nodes), each with its fields' column numbers in the
pre-order numbering of :class:`kwire._core.typedcols.Columns`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from kwire.formats.protobuf.schema import ProtobufSchemaError  # first: without the extra, its ImportError says so

try:
    import pyarrow as pa
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("kwire's Protobuf format needs pyarrow: pip install 'kwire[protobuf]'") from e
from google.protobuf.descriptor import Descriptor, FieldDescriptor

__all__ = ["Plan", "Node", "Field", "arrow_type"]

F = FieldDescriptor

# Node kinds (kwire/_core/protobuf.pyx has the same numbers).
NK_MESSAGE = 0       # a struct row of its fields
NK_WRAPPER = 1       # google.protobuf.*Value: field 1's value, in the node's own column
NK_TIMESTAMP = 2     # google.protobuf.Timestamp: seconds and nanos as microseconds
NK_DURATION = 3      # google.protobuf.Duration: likewise

# Field flags (likewise).
FL_REPEATED = 1
FL_PRESENCE = 2      # null when absent (else the default)
FL_DEFAULT = 4       # a declared default (proto2): that, not null, when absent
FL_CLOSED_ENUM = 8   # an undeclared number is dropped (as if absent), not null
FL_EMPTY = 16        # a message that is absent decodes as an empty one (a map entry's value)
FL_PACKED = 32       # encoded packed (a repeated scalar)
FL_MAP = 64          # a map (repeated entries)

WRAPPERS = {f"google.protobuf.{n}Value" for n in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool",
                                                   "String", "Bytes")}
LEAVES = {**{name: NK_WRAPPER for name in WRAPPERS}, "google.protobuf.Timestamp": NK_TIMESTAMP,
          "google.protobuf.Duration": NK_DURATION}

SCALARS = {
    F.TYPE_DOUBLE: pa.float64(), F.TYPE_FLOAT: pa.float32(),
    F.TYPE_INT64: pa.int64(), F.TYPE_SINT64: pa.int64(), F.TYPE_SFIXED64: pa.int64(),
    F.TYPE_UINT64: pa.uint64(), F.TYPE_FIXED64: pa.uint64(),
    F.TYPE_INT32: pa.int32(), F.TYPE_SINT32: pa.int32(), F.TYPE_SFIXED32: pa.int32(),
    F.TYPE_UINT32: pa.uint32(), F.TYPE_FIXED32: pa.uint32(),
    F.TYPE_BOOL: pa.bool_(), F.TYPE_STRING: pa.string(), F.TYPE_BYTES: pa.binary(),
}
ENUM_TYPE = pa.dictionary(pa.int32(), pa.string())


class Field:
    """One field of a node, as the compiled core takes it (:meth:`as_tuple`)."""

    __slots__ = ("number", "type", "flags", "oneof", "child", "col", "item", "default", "enum", "path")

    def __init__(self, number: int, type: int, flags: int, path: str) -> None:
        self.number = number
        self.type = type            # FieldDescriptor.TYPE_*
        self.flags = flags
        self.oneof = -1             # index among its node's oneofs
        self.child = -1             # a message field's node
        self.col = -1               # its column (a repeated field's: the list or map)
        self.item = -1              # a repeated field's items' column
        self.default: Any = None    # int, float or bytes: what an absent field gets (FL_DEFAULT, or proto3's zero)
        self.enum: List[Tuple[int, int]] = []   # (number, dictionary index), sorted by number
        self.path = path            # dotted, for errors

    def as_tuple(self) -> tuple:
        return (self.number, self.type, self.flags, self.oneof, self.child, self.col, self.item, self.default,
                tuple(self.enum))


class Node:
    """A message in one place of the type."""

    __slots__ = ("kind", "col", "fields", "noneofs", "name")

    def __init__(self, kind: int, name: str) -> None:
        self.kind = kind
        self.col = -1
        self.fields: List[Field] = []
        self.noneofs = 0
        self.name = name

    def as_tuple(self) -> tuple:
        return (self.kind, self.col, self.noneofs, tuple(f.as_tuple() for f in self.fields))


class Plan:
    """A message's Arrow type (``arrow_type``), its enums' dictionaries in
    column order (``dictionaries``; ``enum_numbers``: each enum column's
    names' numbers) and its nodes (``nodes[0]`` is the root).
    Raises :class:`ProtobufSchemaError` for a recursive message."""

    def __init__(self, message: Descriptor) -> None:
        self.message = message
        self.nodes: List[Node] = []
        self.dictionaries: List[pa.Array] = []
        self.enum_numbers: Dict[int, Dict[str, int]] = {}   # an enum column's names' numbers
        self._ncols = 0
        self.arrow_type: pa.DataType = self._struct_node(message, message.full_name, ())

    def as_tuples(self) -> tuple:
        """The nodes as the compiled core takes them."""
        return tuple(n.as_tuple() for n in self.nodes)

    def field_path(self, node: int, field: int) -> str:
        """The dotted path of a node's field (for errors)."""
        return self.nodes[node].fields[field].path

    # The walk numbers columns in pre-order, as typedcols does: each call
    # numbers the columns of the value it returns the type of, from the next.
    def _col(self) -> int:
        self._ncols += 1
        return self._ncols - 1

    def _node(self, kind: int, msg: Descriptor) -> Node:
        node = Node(kind, msg.full_name)
        self.nodes.append(node)
        node.col = self._col()
        return node

    def _struct_node(self, msg: Descriptor, path: str, seen: Tuple[str, ...]) -> pa.DataType:
        if msg.full_name in seen:
            cycle = " -> ".join(seen[seen.index(msg.full_name):] + (msg.full_name,))
            raise ProtobufSchemaError(f"{path}: a recursive message ({cycle}) has no Arrow type")
        seen = seen + (msg.full_name,)
        node = self._node(NK_MESSAGE, msg)
        oneofs: Dict[str, int] = {}
        arrow_fields = []
        for fd in msg.fields:
            f, t = self._field(fd, f"{path}.{fd.name}", seen)
            if fd.containing_oneof is not None:
                f.oneof = oneofs.setdefault(fd.containing_oneof.full_name, len(oneofs))
            node.fields.append(f)
            arrow_fields.append(pa.field(fd.name, t))
        node.noneofs = len(oneofs)
        return pa.struct(arrow_fields)

    def _field(self, fd: FieldDescriptor, path: str, seen: Tuple[str, ...]) -> Tuple[Field, pa.DataType]:
        flags = 0
        if fd.is_repeated:
            flags |= FL_REPEATED | (FL_PACKED if fd.is_packed else 0)
        elif fd.has_presence:
            flags |= FL_PRESENCE
            if fd.has_default_value and fd.type not in (F.TYPE_MESSAGE, F.TYPE_GROUP) and fd.containing_oneof is None:
                flags |= FL_DEFAULT
        if fd.type == F.TYPE_ENUM and fd.enum_type.is_closed:
            flags |= FL_CLOSED_ENUM
        f = Field(fd.number, fd.type, flags, path)
        if not fd.is_repeated:
            f.col = self._ncols
            return f, self._value(fd, f, path, seen)
        f.col = self._col()
        f.item = self._ncols
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            f.flags |= FL_MAP
            f.child = len(self.nodes)
            return f, self._map_entry(fd.message_type, path, seen)
        return f, pa.list_(self._value(fd, f, path, seen))

    def _map_entry(self, entry: Descriptor, path: str, seen: Tuple[str, ...]) -> pa.DataType:
        """A map's entries: a node of two fields (key 1, value 2); an absent
        one gets its default (an empty message for a message value)."""
        node = self._node(NK_MESSAGE, entry)
        types = []
        for fd in (entry.fields_by_number[1], entry.fields_by_number[2]):
            ef = Field(fd.number, fd.type, 0, f"{path}.{fd.name}")
            if fd.type == F.TYPE_ENUM and fd.enum_type.is_closed:
                ef.flags |= FL_CLOSED_ENUM
            if fd.type in (F.TYPE_MESSAGE, F.TYPE_GROUP):
                ef.flags |= FL_EMPTY
            ef.col = self._ncols
            types.append(self._value(fd, ef, ef.path, seen))
            node.fields.append(ef)
        return pa.map_(types[0], pa.field("value", types[1]))

    def _value(self, fd: FieldDescriptor, f: Field, path: str, seen: Tuple[str, ...]) -> pa.DataType:
        """The Arrow type of one value of ``fd``; sets ``f``'s child node,
        default and enum table."""
        if fd.type in (F.TYPE_MESSAGE, F.TYPE_GROUP):
            msg = fd.message_type
            f.child = len(self.nodes)
            kind = LEAVES.get(msg.full_name)
            if kind is not None:
                return self._leaf_node(msg, kind, path)
            return self._struct_node(msg, path, seen)
        col = self._col()
        if fd.type == F.TYPE_ENUM:
            values = list(fd.enum_type.values)
            self.enum_numbers[col] = {v.name: v.number for v in values}
            index: Dict[int, int] = {}
            for i, v in enumerate(values):
                index.setdefault(v.number, i)
            f.enum = sorted(index.items())
            self.dictionaries.append(pa.array([v.name for v in values], pa.string()))
            if not fd.is_repeated:
                f.default = index.get(fd.default_value, 0)
            return ENUM_TYPE
        if not fd.is_repeated:
            f.default = _default(fd)
        return SCALARS[fd.type]

    def _leaf_node(self, msg: Descriptor, kind: int, path: str) -> pa.DataType:
        """A well-known type's node: its fields have no column of their own
        (a wrapper's value field writes the node's)."""
        node = self._node(kind, msg)
        for fd in msg.fields:
            wf = Field(fd.number, fd.type, 0, f"{path}.{fd.name}")
            wf.col = node.col if kind == NK_WRAPPER else -1
            wf.default = _default(fd)
            node.fields.append(wf)
        if kind == NK_TIMESTAMP:
            return pa.timestamp("us", tz="UTC")
        if kind == NK_DURATION:
            return pa.duration("us")
        return SCALARS[msg.fields_by_number[1].type]


def _default(fd: FieldDescriptor) -> Any:
    """What an absent scalar gets: its declared default, or its type's zero."""
    v = fd.default_value
    if fd.type == F.TYPE_STRING:
        return v.encode("utf-8")
    if fd.type == F.TYPE_BYTES:
        return bytes(v)
    if fd.type in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        return float(v)
    return int(v)


def arrow_type(message: Descriptor) -> pa.DataType:
    """The Arrow type kwire decodes ``message`` into (a struct)."""
    return Plan(message).arrow_type
