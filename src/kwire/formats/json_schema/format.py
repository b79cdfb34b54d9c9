"""The JSON format: a column of JSON values (bare, or framed by a schema
registry) as an Arrow column of the schema's type, and back.

The reader type (what :meth:`JsonFormat.arrow_type` gives, whatever
schema each record was written with: JSON carries its own field names, so
every record decodes with it, missing fields null and others ignored):

* the ``schema`` the caller gives: a JSON Schema (text or parsed), or an
  Arrow type (a ``pyarrow.DataType``, or a ``pyarrow.Schema`` for a struct
  of its fields);
* else, with a registry, the schema of ``use.schema.id``, or the subject's
  latest version (the subject of the topic's keys or values: see
  :meth:`JsonFormat.subject`);
* else anything: the value's JSON text (``arrow.json``).

Framing: a value beginning with byte 0 (which no JSON text does) is
Confluent-framed: magic byte 0 and a 4-byte big-endian schema id, then the
JSON. Such a value decodes with or without a registry; with one, every
value must be framed (as confluent-kafka's deserializer has it) and each
schema id met is looked up once (an id the registry does not have, or
that is not a JSON Schema, is a corrupt record).
"""

from __future__ import annotations

import json
import threading
from typing import Any, Dict, Mapping, Optional

import pyarrow as pa
import pyarrow.compute as pc

from kwire.formats.base import Format, UndecodableValueError
from kwire.formats.common import binary_column, flag, registry_client, row_offset
from kwire.formats.json_schema.decode import BadValue, check_type, decode_column
from kwire.formats.json_schema.schema import JSON_TEXT, arrow_type, json_schema, parse_schema
from kwire.formats.jsonvalues import dumps, json_values

__all__ = ["JsonFormat", "MAGIC", "HEADER_SIZE"]

MAGIC = b"\x00"
HEADER_SIZE = 5
_MAX_SLICE = 2**31 - 1


class JsonFormat(Format):
    """JSON keys or values (see the module's doc). ``registry``: a
    :class:`kwire.registry.SchemaRegistryClient`; ``subject``: the subject
    to look schemas up and register them under (default: TopicNameStrategy,
    ``<topic>-key`` / ``<topic>-value``); ``schema_id``: the schema whose
    id is written, and read with; ``auto_register``: register the schema
    (the caller's, or one made of the Arrow type) under the subject when
    encoding; ``use_latest``: encode with the subject's latest version's id."""

    kind = "json"

    def __init__(self, schema: Any = None, *, registry: Any = None, topic: Optional[str] = None,
                 is_key: bool = False, subject: Optional[str] = None, schema_id: Optional[int] = None,
                 auto_register: bool = False, use_latest: bool = False) -> None:
        if auto_register and use_latest:
            raise ValueError("auto.register.schemas and use.latest.version exclude each other")
        if registry is None and (subject or schema_id is not None or auto_register or use_latest):
            raise ValueError("a subject, use.schema.id, auto.register.schemas and use.latest.version need a schema "
                             "registry (schema.registry.url)")
        self._registry, self._topic, self._is_key = registry, topic, is_key
        self._subject, self._schema_id = subject, schema_id
        self._auto_register, self._use_latest = auto_register, use_latest
        self._schema_text: Optional[str] = None
        self._type: Optional["pa.DataType"] = None
        if schema is not None:
            self._type, self._schema_text = _given(schema)
        elif registry is None:
            self._type = JSON_TEXT
        self._lock = threading.Lock()
        self._known_ids: Dict[int, Optional[str]] = {}     # schema id -> why it cannot be read (None: it can)
        self._writing_id: Optional[int] = None

    # ------------------------------------------------------------ schemas
    def subject(self) -> str:
        """The registry subject of this format's schemas: the one named, or
        TopicNameStrategy's ``<topic>-key`` / ``<topic>-value``."""
        if self._subject:
            return self._subject
        if not self._topic:
            raise ValueError("the json format's subject: name a subject or the topic")
        return f"{self._topic}-{'key' if self._is_key else 'value'}"

    def arrow_type(self) -> "pa.DataType":
        if self._type is None:
            with self._lock:
                if self._type is None:
                    registered = (self._registry.get_schema(self._schema_id) if self._schema_id is not None
                                  else self._registry.get_latest_version(self.subject()).schema)
                    self._type = self._registered_type(registered)
        return self._type

    def _registered_type(self, schema: Any) -> "pa.DataType":
        if schema.schema_type != "JSON":
            raise ValueError(f"the registry's schema for {self.subject()} is {schema.schema_type}, not JSON")
        self._schema_text = schema.schema_str
        return arrow_type(schema.schema_str, self._registry.resolve_references(schema))

    # ------------------------------------------------------------ decoding
    def decode(self, column: "pa.Array", *, topic: str, partition: int, offsets: "pa.Array") -> "pa.Array":
        typ = self.arrow_type()
        try:
            return decode_column(self._unframe(column), typ)
        except BadValue as e:
            raise UndecodableValueError(f"JSON: {e.reason}", topic, partition, row_offset(offsets, e.row),
                                        row=e.row) from None

    def _unframe(self, column: "pa.Array") -> "pa.Array":
        """The JSON text of each value: after its frame, where it has one."""
        column = binary_column(column)
        framed = pc.fill_null(pc.starts_with(column, pattern=MAGIC), False)
        if self._registry is not None:
            bare = pc.and_(column.is_valid(), pc.invert(framed))
            if pc.any(bare).as_py():
                raise BadValue(_first(bare), "no schema registry framing (magic byte 0 and a schema id)")
        if not pc.any(framed).as_py():
            return column
        short = pc.and_(framed, pc.less(pc.binary_length(column), HEADER_SIZE))
        if pc.any(short).as_py():
            raise BadValue(_first(short), f"a framed value shorter than its {HEADER_SIZE}-byte header")
        if self._registry is not None:
            self._check_ids(column)
        return pc.if_else(framed, pc.binary_slice(column, HEADER_SIZE, _MAX_SLICE), column)

    def _check_ids(self, column: "pa.Array") -> None:
        ids = pc.binary_slice(column, 1, HEADER_SIZE)
        for raw in pc.unique(ids.drop_null()).to_pylist():
            schema_id = int.from_bytes(raw, "big")
            reason = self._id_problem(schema_id)
            if reason is not None:
                raise BadValue(_first(pc.fill_null(pc.equal(ids, pa.scalar(raw, pa.binary())), False)), reason)

    def _id_problem(self, schema_id: int) -> Optional[str]:
        """Why values of ``schema_id`` cannot be read (None: they can), asked of the registry once."""
        from kwire.registry import SchemaRegistryError

        if schema_id not in self._known_ids:
            try:
                schema = self._registry.get_schema(schema_id)
                problem = None if schema.schema_type == "JSON" else f"schema id {schema_id} is {schema.schema_type}"
            except SchemaRegistryError as e:
                if e.status != 404:
                    raise
                problem = f"schema id {schema_id} is not in the registry"
            self._known_ids[schema_id] = problem
        return self._known_ids[schema_id]

    # ------------------------------------------------------------ encoding
    def encode(self, column: "pa.Array", *, topic: str, is_key: bool = False) -> "pa.Array":
        """Each row as compact JSON text (as confluent-kafka's JSON
        serializer writes it), after the schema id's frame with a registry;
        null rows stay null."""
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        frame = b"" if self._registry is None else MAGIC + self._id_for_writing(column.type).to_bytes(4, "big")
        return pa.array([None if v is None else frame + dumps(v).encode("utf-8") for v in json_values(column)],
                        type=pa.binary())

    def _id_for_writing(self, typ: "pa.DataType") -> int:
        if self._writing_id is None:
            with self._lock:
                if self._writing_id is None:
                    self._writing_id = self._find_id(typ)
        return self._writing_id

    def _find_id(self, typ: "pa.DataType") -> int:
        from kwire.registry import Schema

        if self._schema_id is not None:
            return self._schema_id
        if self._use_latest:
            return self._registry.get_latest_version(self.subject()).schema_id
        text = self._schema_text or json.dumps(json_schema(typ))
        schema = Schema(text, "JSON")
        if self._auto_register:
            return self._registry.register_schema(self.subject(), schema)
        return self._registry.lookup_schema(self.subject(), schema).schema_id


def _first(mask: "pa.Array") -> int:
    return pc.indices_nonzero(mask)[0].as_py()


def _given(schema: Any) -> "tuple[pa.DataType, Optional[str]]":
    """(Arrow type, JSON Schema text or None) of the caller's ``schema``."""
    if isinstance(schema, pa.Schema):
        schema = pa.struct(list(schema))
    if isinstance(schema, pa.DataType):
        check_type(schema)
        return schema, None
    parsed = parse_schema(schema)
    text = schema if isinstance(schema, str) else json.dumps(parsed)
    return arrow_type(parsed), text


def make(options: Mapping[str, Any], *, topic: Optional[str], is_key: bool) -> JsonFormat:
    """A :class:`JsonFormat` from Confluent-named options (see
    :func:`kwire.formats.make_format`): ``schema``; ``schema.registry.url``
    and the registry client's options; ``subject``
    (``key.subject``/``value.subject``), ``use.schema.id``,
    ``auto.register.schemas``, ``use.latest.version``; ``registry``: a
    client already made."""
    client_options = {k: v for k, v in options.items() if k.startswith(("schema.registry.", "basic.auth.",
                                                                         "bearer.auth."))}
    registry = registry_client(options.get("registry") or client_options or None)
    schema_id = options.get("use.schema.id")
    return JsonFormat(options.get("schema"), registry=registry, topic=topic, is_key=is_key,
                      subject=options.get("key.subject" if is_key else "value.subject") or options.get("subject"),
                      schema_id=None if schema_id in (None, "") else int(schema_id),
                      auto_register=flag(options.get("auto.register.schemas")),
                      use_latest=flag(options.get("use.latest.version")))
