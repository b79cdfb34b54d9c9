"""The Arrow type of a JSON Schema (and back: a JSON Schema of an Arrow type).

The mapping (docs/guide/typed-records.md, "JSON"):

* ``object`` with ``properties`` -> struct of them, in their order; a
  property is non-null when ``required`` lists it, its schema does not
  allow null and its object cannot be null itself (the root value is
  nullable when its schema allows null; an optional object's fields are
  all nullable); other keys of a value are ignored. An object with
  ``additionalProperties`` (or one ``patternProperties``) and no
  ``properties`` -> map<string, that schema's type>;
* ``array`` with ``items`` -> list (items non-null when their schema does
  not allow null);
* ``string`` -> string, but ``format`` ``date`` -> date32, ``date-time`` ->
  timestamp[us, UTC], ``time`` -> time64[us] (UTC), ``uuid`` -> the
  canonical ``arrow.uuid`` extension; ``integer`` -> int64, ``number`` ->
  float64, ``boolean`` -> bool, ``null`` -> null;
* ``enum`` of strings -> dictionary<int32, string>; of integers -> int64;
  ``const`` -> its value's type;
* ``"type": [T, "null"]``, ``oneOf``/``anyOf`` with a null branch ->
  nullable; branches of one Arrow type -> that type; integer and number
  branches -> float64; ``allOf`` of objects -> their properties merged;
* ``$ref`` (``#``, JSON pointers into ``$defs``/``definitions``, an
  ``$anchor``, another document by its name or ``$id``: a registry's
  references) resolved;
* anything else (free-form objects ``{}``, ``true``, mixed-type unions,
  tuples, recursive references, empty objects) -> the canonical
  ``arrow.json`` extension: the value's JSON text (compact).

The value itself (the root) is always nullable: a null record is a null row.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional, Tuple
from urllib.parse import unquote

from kwire.formats.base import pa  # first: without pyarrow, its ImportError names kwire[arrow]

__all__ = ["JsonSchemaError", "JSON_TEXT", "UUID", "ENUM", "arrow_type", "json_schema", "parse_schema"]

#: Where a JSON value has no Arrow type: its JSON text.
JSON_TEXT = pa.json_()
UUID = pa.uuid()
ENUM = pa.dictionary(pa.int32(), pa.string())

_STRING_FORMATS = {"date": pa.date32(), "date-time": pa.timestamp("us", "UTC"), "time": pa.time64("us"), "uuid": UUID}
_SCALARS = {"string": pa.string(), "integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_(),
            "null": pa.null()}
#: Nesting past this many levels is refused (a schema is data from a registry too).
MAX_DEPTH = 64


class JsonSchemaError(ValueError):
    """A JSON Schema that is not one (not JSON, a ``$ref`` to nowhere)."""


def parse_schema(schema: Any) -> Any:
    """A JSON Schema given as text (or bytes) or as its parsed value."""
    if isinstance(schema, (bytes, bytearray)):
        schema = bytes(schema).decode("utf-8")
    if isinstance(schema, str):
        try:
            return json.loads(schema)
        except ValueError as e:
            raise JsonSchemaError(f"the JSON Schema is not JSON: {e}") from None
    if not isinstance(schema, (dict, bool)):
        raise JsonSchemaError(f"a JSON Schema is an object or a boolean, not {type(schema).__name__}")
    return schema


def arrow_type(schema: Any, documents: Optional[Mapping[str, Any]] = None) -> "pa.DataType":
    """The Arrow type of ``schema`` (text or parsed); ``documents`` are the
    other schemas its ``$ref``s may name ({name or $id: schema}: a
    registry's references)."""
    root = parse_schema(schema)
    docs = {name: parse_schema(doc) for name, doc in (documents or {}).items()}
    typ, nullable = _Mapper(root, docs).type_of(root, root, 0)
    return _relax(typ, nullable)


def _relax(typ: "pa.DataType", nullable: bool) -> "pa.DataType":
    """``typ`` with the fields of a struct that may be null made nullable
    (a required field is non-null only where its struct is): a field's
    nullability is what its value may be whenever its parent is absent."""
    if pa.types.is_struct(typ):
        fields = [typ.field(i) for i in range(typ.num_fields)]
        return pa.struct([f.with_nullable(f.nullable or nullable).with_type(_relax(f.type, f.nullable or nullable))
                          for f in fields])
    if pa.types.is_list(typ):
        item = typ.value_field
        return pa.list_(item.with_type(_relax(item.type, item.nullable)))
    if pa.types.is_map(typ):
        item = typ.item_field
        return pa.map_(typ.key_field, item.with_type(_relax(item.type, item.nullable)))
    return typ


class _Mapper:
    def __init__(self, root: Any, documents: Dict[str, Any]) -> None:
        self.root = root
        self.documents = dict(documents)
        for doc in [root, *documents.values()]:
            self._index_ids(doc)
        self.expanding: List[str] = [str(id(root))]   # the $refs being mapped (the root's "#" first): one met
        #                                              again is recursive

    def _index_ids(self, doc: Any) -> None:
        stack = [doc]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                if isinstance(node.get("$id"), str):
                    self.documents.setdefault(node["$id"].rstrip("#"), node)
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)

    # ------------------------------------------------------------ $ref
    def resolve(self, ref: str, doc: Any) -> Tuple[Any, Any]:
        """(the schema ``ref`` names, the document it is in)."""
        where, _, fragment = ref.partition("#")
        if where:
            target = self._document(where)
            if target is None:
                raise JsonSchemaError(f"$ref {ref!r}: no schema {where!r} (not a reference of this schema)")
            doc = target
        if not fragment:
            return doc, doc
        if not fragment.startswith("/"):
            return self._anchor(ref, fragment, doc), doc
        node = doc
        for part in fragment[1:].split("/"):
            part = unquote(part).replace("~1", "/").replace("~0", "~")
            if isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            elif isinstance(node, dict) and part in node:
                node = node[part]
            else:
                raise JsonSchemaError(f"$ref {ref!r}: nothing at {part!r}")
        return node, doc

    def _document(self, where: str) -> Any:
        if where in self.documents:
            return self.documents[where]
        tail = where.rsplit("/", 1)[-1]
        matches = [doc for name, doc in self.documents.items() if name.rsplit("/", 1)[-1] == tail]
        return matches[0] if len(matches) == 1 else None

    @staticmethod
    def _anchor(ref: str, name: str, doc: Any) -> Any:
        stack = [doc]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                if node.get("$anchor") == name:
                    return node
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
        raise JsonSchemaError(f"$ref {ref!r}: no $anchor {name!r}")

    # ------------------------------------------------------------ types
    def type_of(self, s: Any, doc: Any, depth: int) -> Tuple["pa.DataType", bool]:
        """(Arrow type, whether null is allowed) of subschema ``s``."""
        if depth > MAX_DEPTH:
            raise JsonSchemaError(f"the JSON Schema nests deeper than {MAX_DEPTH} levels")
        if not isinstance(s, dict):
            return JSON_TEXT, True                      # true, false: anything (or nothing)
        if isinstance(s.get("$ref"), str):
            return self._ref(s["$ref"], doc, depth)
        for word in ("oneOf", "anyOf"):
            if isinstance(s.get(word), list) and s[word]:
                return self._union([{**_without(s, word), **b} if isinstance(b, dict) else b for b in s[word]],
                                   doc, depth)
        if isinstance(s.get("allOf"), list) and s["allOf"]:
            return self._all_of(s, doc, depth)
        if "const" in s:
            return _value_type(s["const"])
        if isinstance(s.get("enum"), list) and s["enum"]:
            return _enum_type(s["enum"])
        kinds = s.get("type")
        if kinds is None:
            kinds = "object" if "properties" in s or "additionalProperties" in s else "array" if "items" in s else None
        if kinds is None:
            return JSON_TEXT, True
        if isinstance(kinds, list):
            named = [k for k in kinds if k != "null"]
            nullable = len(named) < len(kinds)
            if len(named) != 1:
                typ = _common([_SCALARS.get(k) for k in named]) if named else pa.null()
                return (typ, nullable) if typ is not None else (JSON_TEXT, True)
            return self._single(named[0], s, doc, depth)[0], nullable
        return self._single(kinds, s, doc, depth)

    def _ref(self, ref: str, doc: Any, depth: int) -> Tuple["pa.DataType", bool]:
        target, target_doc = self.resolve(ref, doc)
        key = f"{id(target_doc)}{ref.partition('#')[2]}"
        if key in self.expanding:
            return JSON_TEXT, True                      # recursive: no finite Arrow type
        self.expanding.append(key)
        try:
            return self.type_of(target, target_doc, depth + 1)
        finally:
            self.expanding.pop()

    def _union(self, branches: List[Any], doc: Any, depth: int) -> Tuple["pa.DataType", bool]:
        typed = [self.type_of(b, doc, depth + 1) for b in branches]
        nullable = any(t == pa.null() or n for t, n in typed)
        named = [t for t, _ in typed if t != pa.null()]
        if not named:
            return pa.null(), True
        return _common(named) or JSON_TEXT, nullable or _common(named) is None

    def _all_of(self, s: Dict[str, Any], doc: Any, depth: int) -> Tuple["pa.DataType", bool]:
        merged: Dict[str, Any] = _without(s, "allOf")
        for part in s["allOf"]:
            while isinstance(part, dict) and isinstance(part.get("$ref"), str):
                part, doc = self.resolve(part["$ref"], doc)
            if not isinstance(part, dict):
                return JSON_TEXT, True
            for word, value in part.items():
                if word == "properties":
                    merged["properties"] = {**merged.get("properties", {}), **value}
                elif word == "required":
                    merged["required"] = [*merged.get("required", []), *value]
                else:
                    merged.setdefault(word, value)
        return self.type_of(merged, doc, depth + 1)

    def _single(self, kind: Any, s: Dict[str, Any], doc: Any, depth: int) -> Tuple["pa.DataType", bool]:
        if kind == "object":
            return self._object(s, doc, depth), False
        if kind == "array":
            items = s.get("items")
            if isinstance(items, list) or "prefixItems" in s:
                return JSON_TEXT, False                 # a tuple: its positions' types differ
            typ, nullable = self.type_of(items if items is not None else True, doc, depth + 1)
            return pa.list_(pa.field("item", typ, nullable=nullable)), False
        if kind == "string" and s.get("format") in _STRING_FORMATS:
            return _STRING_FORMATS[s["format"]], False
        if kind in _SCALARS:
            return _SCALARS[kind], kind == "null"
        return JSON_TEXT, True

    def _object(self, s: Dict[str, Any], doc: Any, depth: int) -> "pa.DataType":
        props = s.get("properties")
        if isinstance(props, dict) and props:
            required = set(s.get("required") or ())
            fields = []
            for name, sub in props.items():
                typ, nullable = self.type_of(sub, doc, depth + 1)
                fields.append(pa.field(name, typ, nullable=nullable or name not in required or typ == pa.null()))
            return pa.struct(fields)
        values = s.get("additionalProperties")
        patterns = s.get("patternProperties")
        if not isinstance(values, dict) and isinstance(patterns, dict) and len(patterns) == 1:
            values = next(iter(patterns.values()))
        if isinstance(values, dict):
            typ, nullable = self.type_of(values, doc, depth + 1)
            return pa.map_(pa.string(), pa.field("value", typ, nullable=nullable))
        return JSON_TEXT


def _without(s: Dict[str, Any], word: str) -> Dict[str, Any]:
    return {k: v for k, v in s.items() if k != word}


def _common(types: List[Optional["pa.DataType"]]) -> Optional["pa.DataType"]:
    """The one Arrow type of union branches: all alike, or integers and
    numbers (float64); None when they differ."""
    if any(t is None for t in types):
        return None
    kinds = set(types)
    if len(kinds) == 1:
        return types[0]
    if kinds == {pa.int64(), pa.float64()}:
        return pa.float64()
    return None


def _value_type(value: Any) -> Tuple["pa.DataType", bool]:
    if value is None:
        return pa.null(), True
    for py, typ in ((bool, pa.bool_()), (int, pa.int64()), (float, pa.float64()), (str, pa.string())):
        if isinstance(value, py):
            return typ, False
    return JSON_TEXT, False


def _enum_type(values: List[Any]) -> Tuple["pa.DataType", bool]:
    named = [v for v in values if v is not None]
    nullable = len(named) < len(values)
    if named and all(isinstance(v, str) for v in named):
        return ENUM, nullable
    if named and all(isinstance(v, int) and not isinstance(v, bool) for v in named):
        return pa.int64(), nullable
    return JSON_TEXT, True


# ----------------------------------------------------------- and back
_TO_SCHEMA = {pa.string(): "string", pa.large_string(): "string", pa.bool_(): "boolean", pa.null(): "null"}


def json_schema(typ: "pa.DataType", title: Optional[str] = None) -> Dict[str, Any]:
    """A JSON Schema (draft 7) whose values :func:`arrow_type` reads back
    as ``typ``: what kwire registers for a format given an Arrow type."""
    out = _schema_of(typ)
    if title:
        out = {"title": title, **out}
    return {"$schema": "http://json-schema.org/draft-07/schema#", **out}


def _schema_of(typ: "pa.DataType") -> Dict[str, Any]:
    if pa.types.is_struct(typ):
        fields = [typ.field(i) for i in range(typ.num_fields)]
        out: Dict[str, Any] = {"type": "object", "properties": {f.name: _nullable(f) for f in fields}}
        required = [f.name for f in fields if not f.nullable]
        if required:
            out["required"] = required
        return out
    if pa.types.is_map(typ):
        return {"type": "object", "additionalProperties": _nullable(typ.item_field)}
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        return {"type": "array", "items": _nullable(typ.value_field)}
    if typ == JSON_TEXT:
        return {}
    if typ == UUID:
        return {"type": "string", "format": "uuid"}
    if pa.types.is_dictionary(typ):
        return _schema_of(typ.value_type)
    if pa.types.is_integer(typ):
        return {"type": "integer"}
    if pa.types.is_floating(typ) or pa.types.is_decimal(typ):
        return {"type": "number"}
    if pa.types.is_timestamp(typ):
        return {"type": "string", "format": "date-time"}
    if pa.types.is_date(typ):
        return {"type": "string", "format": "date"}
    if pa.types.is_time(typ):
        return {"type": "string", "format": "time"}
    if typ in _TO_SCHEMA:
        return {"type": _TO_SCHEMA[typ]}
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ) or pa.types.is_fixed_size_binary(typ):
        return {"type": "string", "contentEncoding": "base64"}
    raise JsonSchemaError(f"no JSON Schema for Arrow type {typ}")


def _nullable(field: "pa.Field") -> Dict[str, Any]:
    inner = _schema_of(field.type)
    if not field.nullable or not inner or field.type == pa.null():
        return inner
    return {"oneOf": [{"type": "null"}, inner]}
