"""Avro schemas, parsed: JSON text (and the named types of its references)
into a tree of :class:`Node`, names resolved with namespaces as the Avro
specification says. A named type used twice is the same :class:`Node`;
a recursive schema parses (``Node.recursive`` says so) but has no Arrow type.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Union

__all__ = ["AvroSchemaError", "Node", "Field", "NO_DEFAULT", "PRIMITIVES", "parse_schema"]

PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
NAMED = ("record", "error", "enum", "fixed")
NO_DEFAULT = object()


class AvroSchemaError(ValueError):
    """An Avro schema that is not valid, or that kwire cannot use as asked."""


@dataclass(eq=False)
class Field:
    name: str
    type: "Node"
    default: Any = NO_DEFAULT
    aliases: List[str] = field(default_factory=list)


@dataclass(eq=False)
class Node:
    """One Avro type. ``type`` is a primitive's name or record, enum, fixed,
    array, map, union; ``logical`` its logical type, if any (kept only when
    valid for the underlying type)."""

    type: str
    name: Optional[str] = None               # named types: the full name
    aliases: List[str] = field(default_factory=list)
    logical: Optional[str] = None
    precision: int = 0
    scale: int = 0
    size: int = 0                             # fixed
    symbols: List[str] = field(default_factory=list)
    enum_default: Optional[str] = None
    fields: List[Field] = field(default_factory=list)
    items: Optional["Node"] = None            # array
    values: Optional["Node"] = None           # map
    branches: List["Node"] = field(default_factory=list)   # union

    @property
    def named(self) -> bool:
        return self.type in ("record", "enum", "fixed")

    def __repr__(self) -> str:
        return f"Node({self.name or self.type}{', ' + self.logical if self.logical else ''})"

    @property
    def recursive(self) -> bool:
        """Whether this type contains itself (a linked list, a tree)."""
        return _recursive(self, [])


def _recursive(node: Node, stack: List[Node]) -> bool:
    if any(node is s for s in stack):
        return True
    stack.append(node)
    try:
        return any(_recursive(k, stack) for k in _kids(node))
    finally:
        stack.pop()


def _kids(node: Node) -> List[Node]:
    if node.type == "record":
        return [f.type for f in node.fields]
    if node.type == "array":
        return [node.items]
    if node.type == "map":
        return [node.values]
    return list(node.branches)


def parse_schema(schema: Union[str, Mapping, list], references: Optional[Mapping[str, str]] = None) -> Node:
    """The schema (JSON text or its parsed form); ``references``: the
    schemas it may name (full name or registry reference name -> JSON text),
    parsed first so their named types are known."""
    names: Dict[str, Node] = {}
    for text in (references or {}).values():
        _Parser(names).parse(_json(text), "")
    return _Parser(names).parse(_json(schema), "")


def _json(schema: Union[str, Mapping, list]) -> Any:
    if not isinstance(schema, str):
        return schema
    try:
        return json.loads(schema)
    except ValueError:
        return schema.strip()          # a bare primitive name ("string") or a named type's name


def _full_name(name: str, namespace: str) -> str:
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


class _Parser:
    def __init__(self, names: Dict[str, Node]) -> None:
        self.names = names

    def parse(self, s: Any, namespace: str) -> Node:
        if isinstance(s, str):
            return self._named_or_primitive(s, namespace)
        if isinstance(s, list):
            return self._union(s, namespace)
        if not isinstance(s, Mapping) or "type" not in s:
            raise AvroSchemaError(f"not an Avro schema: {json.dumps(s)[:200]}")
        t = s["type"]
        if isinstance(t, (list, Mapping)) or (isinstance(t, str) and t not in PRIMITIVES + NAMED + ("array", "map")):
            return self.parse(t, namespace)      # {"type": {...}} or {"type": "SomeName"}
        if t in PRIMITIVES:
            return _logical(Node(t), s)
        if t == "array":
            return Node("array", items=self.parse(_need(s, "items"), namespace))
        if t == "map":
            return Node("map", values=self.parse(_need(s, "values"), namespace))
        return self._named(s, "record" if t == "error" else t, namespace)

    def _named_or_primitive(self, s: str, namespace: str) -> Node:
        if s in PRIMITIVES:
            return Node(s)
        for name in (_full_name(s, namespace), s):
            if name in self.names:
                return self.names[name]
        raise AvroSchemaError(f"unknown type {s!r} (not a primitive, nor a named type defined before it)")

    def _union(self, s: list, namespace: str) -> Node:
        branches = [self.parse(b, namespace) for b in s]
        seen = set()
        for b in branches:
            if b.type == "union":
                raise AvroSchemaError("a union may not hold a union directly")
            key = b.name if b.named else b.type
            if key in seen:
                raise AvroSchemaError(f"union holds {key!r} twice")
            seen.add(key)
        return Node("union", branches=branches)

    def _named(self, s: Mapping, t: str, namespace: str) -> Node:
        name = _need(s, "name")
        ns = s.get("namespace", namespace) if "." not in name else name.rsplit(".", 1)[0]
        full = _full_name(name, ns or "")
        node = Node(t, name=full, aliases=[_full_name(a, ns or "") for a in s.get("aliases", [])])
        if full in self.names and self.names[full] is not node:
            raise AvroSchemaError(f"type {full!r} defined twice")
        self.names[full] = node                # before its fields: a record may name itself
        if t == "record":
            node.fields = [self._field(f, ns or "") for f in _need(s, "fields")]
            names = [f.name for f in node.fields]
            if len(set(names)) != len(names):
                raise AvroSchemaError(f"record {full!r} has a field name twice")
        elif t == "enum":
            node.symbols = list(_need(s, "symbols"))
            if not node.symbols:
                raise AvroSchemaError(f"enum {full!r} has no symbols")
            if len(set(node.symbols)) != len(node.symbols):
                raise AvroSchemaError(f"enum {full!r} has a symbol twice")
            node.enum_default = s.get("default")
            if node.enum_default is not None and node.enum_default not in node.symbols:
                raise AvroSchemaError(f"enum {full!r}: default {node.enum_default!r} is not one of its symbols")
        else:
            node.size = int(_need(s, "size"))
            if node.size < 0:
                raise AvroSchemaError(f"fixed {full!r} has a negative size")
            _logical(node, s)
        return node

    def _field(self, f: Mapping, namespace: str) -> Field:
        return Field(_need(f, "name"), self.parse(_need(f, "type"), namespace),
                     f.get("default", NO_DEFAULT), list(f.get("aliases", [])))


def _need(s: Mapping, key: str) -> Any:
    if key not in s:
        raise AvroSchemaError(f"Avro schema {json.dumps(s)[:200]} lacks {key!r}")
    return s[key]


# Logical types and the underlying types they annotate. Any other pairing (or
# an unknown logical type) is ignored, as the specification says.
_LOGICAL = {
    "decimal": ("bytes", "fixed"),
    "uuid": ("string", "fixed"),
    "date": ("int",),
    "time-millis": ("int",),
    "time-micros": ("long",),
    "timestamp-millis": ("long",),
    "timestamp-micros": ("long",),
    "timestamp-nanos": ("long",),
    "local-timestamp-millis": ("long",),
    "local-timestamp-micros": ("long",),
    "local-timestamp-nanos": ("long",),
    "duration": ("fixed",),
}


def _logical(node: Node, s: Mapping) -> Node:
    lt = s.get("logicalType")
    if lt not in _LOGICAL or node.type not in _LOGICAL[lt]:
        return node
    if lt == "decimal":
        precision, scale = s.get("precision"), s.get("scale", 0)
        if not isinstance(precision, int) or not isinstance(scale, int) or precision <= 0 or not 0 <= scale <= precision:
            return node                      # invalid decimal: the underlying type, as the spec says
        if node.type == "fixed" and precision > _max_precision(node.size):
            return node
        node.precision, node.scale = precision, scale
    elif lt == "uuid" and node.type == "fixed" and node.size != 16:
        return node
    elif lt == "duration" and node.size != 12:
        return node
    node.logical = lt
    return node


def _max_precision(size: int) -> int:
    """The most decimal digits a signed ``size``-byte two's complement holds."""
    return len(str(2 ** (8 * size - 1) - 1)) - 1 if size > 0 else 0
