"""The JSON format: a column of JSON values (bare, or framed by a schema
registry) as an Arrow column of the schema's type, and back.

The reader type (what :meth:`JsonFormat.arrow_type` gives; every record
decodes with it whatever schema it was written with, since JSON carries
its own field names: fields it lacks are null, others ignored):

* the ``schema`` the caller gives: a JSON Schema (text or parsed), or an
  Arrow type (a ``pyarrow.DataType``, or a ``pyarrow.Schema`` for a struct
  of its fields);
* else, with a registry, the schema of ``use.schema.id``, or the subject's
  latest version (the subject: the one named, else the subject name
  strategy's for the topic's keys or values);
* else anything: the value's JSON text (``arrow.json``).

Framing (``framing``): "confluent" (magic byte 0 and a 4-byte big-endian
schema id, then the JSON: the default with a registry), "id8" (Apicurio's
8-byte id), "none" (bare JSON). With a registry every non-null value must
carry its frame, as confluent-kafka's deserializer has it, and each schema
id met is looked up once (an id the registry does not have, or that is not
a JSON Schema, is a corrupt record). Without one, a value beginning with
byte 0 (which no JSON text does) is taken as Confluent-framed, others as
bare.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Dict, Mapping, Optional, Tuple

from kwire.formats.base import pa  # first: without pyarrow, its ImportError names kwire[arrow]

import pyarrow.compute as pc  # noqa: E402

from kwire.formats.base import Format, UndecodableValueError
from kwire.formats.common import binary_column, flag, frame_header, registry_client, row_offset, writer_id
from kwire.formats.json_schema.decode import BadValue, check_type, decode_column
from kwire.formats.json_schema.schema import JSON_TEXT, arrow_type, json_schema, parse_schema
from kwire.formats.jsonvalues import dumps, json_values

__all__ = ["JsonFormat", "make", "FRAMINGS"]

_MAGIC = pa.scalar(b"\x00")
#: Bytes before the JSON text, by framing.
FRAMINGS = {"confluent": 5, "id8": 9, "none": 0}
_MAX_SLICE = 2**31 - 1


class JsonFormat(Format):
    """JSON keys or values (see the module's doc). ``registry``: a
    :class:`kwire.registry.SchemaRegistryClient` (or its options);
    ``subject``: the subject to look schemas up and register them under
    (default: ``subject_name_strategy``'s for ``topic``, TopicNameStrategy:
    ``<topic>-key`` / ``<topic>-value``; RecordName strategies take the
    schema's ``title``); ``schema_id``: the schema whose id is written, and
    read with; ``auto_register``: register the schema (the caller's, or one
    made of the Arrow type) under the subject when encoding; ``use_latest``:
    encode with the subject's latest version's id."""

    kind = "json"

    def __init__(self, schema: Any = None, *, registry: Any = None, topic: Optional[str] = None,
                 is_key: bool = False, subject: Optional[str] = None, schema_id: Optional[int] = None,
                 auto_register: bool = False, use_latest: bool = False, normalize: bool = False,
                 subject_name_strategy: str = "TopicNameStrategy", framing: Optional[str] = None) -> None:
        self._registry = registry_client(registry)
        if auto_register and use_latest:
            raise ValueError("auto.register.schemas and use.latest.version exclude each other")
        if self._registry is None and (subject or schema_id is not None or auto_register or use_latest):
            raise ValueError("a subject, use.schema.id, auto.register.schemas and use.latest.version need a schema "
                             "registry (schema.registry.url)")
        self._framing = framing or ("confluent" if self._registry is not None else "none")
        if self._framing not in FRAMINGS or (self._framing == "id8" and self._registry is None):
            raise ValueError(f"framing must be 'confluent', 'id8' (with a registry) or 'none', not {self._framing!r}")
        self._topic, self._is_key, self._subject, self._strategy = topic, is_key, subject, subject_name_strategy
        self._schema_id, self._auto_register, self._use_latest, self._normalize = (schema_id, auto_register,
                                                                                 use_latest, normalize)
        self._given: Optional[Tuple["pa.DataType", Optional[str]]] = None     # (type, JSON Schema text)
        if schema is not None:
            self._given = _given(schema)
        elif self._registry is None:
            self._given = (JSON_TEXT, None)
        self._lock = threading.Lock()
        self._readers: Dict[str, Tuple["pa.DataType", Optional[str]]] = {}   # topic -> the registry's
        self._known_ids: Dict[int, Optional[str]] = {}     # schema id -> why it cannot be read (None: it can)
        self._writing: Dict[str, bytes] = {}               # topic -> the frame written before each value

    # ------------------------------------------------------------ schemas
    def subject(self, topic: Optional[str] = None, record_name: Optional[str] = None) -> str:
        """The registry subject of ``topic``'s (default: the format's)
        schemas: the one named, or the subject name strategy's."""
        from kwire.registry.naming import SerializationContext, strategy

        if self._subject:
            return self._subject
        topic = topic or self._topic
        if not topic:
            raise ValueError("the json format's subject: name a subject or the topic")
        return strategy(self._strategy)(SerializationContext(topic, "key" if self._is_key else "value"), record_name)

    def arrow_type(self, topic: Optional[str] = None) -> "pa.DataType":
        return self._reader(topic)[0]

    def _reader(self, topic: Optional[str]) -> Tuple["pa.DataType", Optional[str]]:
        """(reader type, its JSON Schema text) for ``topic``'s values."""
        if self._given is not None:
            return self._given
        key = topic or self._topic or ""
        with self._lock:
            found = self._readers.get(key)
        if found is None:
            registered = (self._registry.get_schema(self._schema_id) if self._schema_id is not None
                          else self._registry.get_latest_version(self.subject(topic)).schema)
            if registered.schema_type != "JSON":
                raise ValueError(f"the registry's schema for {self.subject(topic)} is {registered.schema_type}, "
                                 "not JSON")
            found = (arrow_type(registered.schema_str, self._registry.resolve_references(registered)),
                     registered.schema_str)
            with self._lock:
                found = self._readers.setdefault(key, found)
        return found

    # ------------------------------------------------------------ decoding
    def decode(self, column: "pa.Array", *, topic: str, partition: int, offsets: "pa.Array") -> "pa.Array":
        typ = self.arrow_type(topic)
        try:
            return decode_column(self._unframe(binary_column(column)), typ)
        except BadValue as e:
            raise UndecodableValueError(f"JSON: {e.reason}", topic, partition, row_offset(offsets, e.row),
                                        row=e.row) from None

    def _unframe(self, column: "pa.Array") -> "pa.Array":
        """The JSON text of each value: after its frame, where it has one."""
        if self._registry is not None and self._framing == "none":
            return column
        framed = pc.fill_null(pc.starts_with(column, pattern=_MAGIC.as_py()), False)
        if self._registry is not None:
            bare = pc.and_(column.is_valid(), pc.invert(framed))
            if pc.any(bare).as_py():
                raise BadValue(_first(bare), "no schema registry framing (magic byte 0 and a schema id)")
        if not pc.any(framed).as_py():
            return column
        head = FRAMINGS[self._framing] or FRAMINGS["confluent"]
        short = pc.and_(framed, pc.less(pc.binary_length(column), head))
        if pc.any(short).as_py():
            raise BadValue(_first(short), f"a framed value shorter than its {head}-byte header")
        if self._registry is not None:
            self._check_ids(column, head)
        return pc.if_else(framed, pc.binary_slice(column, head, _MAX_SLICE), column)

    def _check_ids(self, column: "pa.Array", head: int) -> None:
        ids = pc.binary_slice(column, 1, head)
        for raw in pc.unique(ids.drop_null()).to_pylist():
            reason = self._id_problem(int.from_bytes(raw, "big"))
            if reason is not None:
                raise BadValue(_first(pc.fill_null(pc.equal(ids, pa.scalar(raw, pa.binary())), False)), reason)

    def _id_problem(self, schema_id: int) -> Optional[str]:
        """Why values of ``schema_id`` cannot be read (None: they can), asked of the registry once."""
        if schema_id not in self._known_ids:
            try:
                schema = self._registry.get_schema(schema_id)
                problem = None if schema.schema_type == "JSON" else f"schema id {schema_id} is {schema.schema_type}"
            except Exception as e:
                if getattr(e, "status", None) != 404:
                    raise
                problem = f"schema id {schema_id} is not in the schema registry"
            self._known_ids[schema_id] = problem
        return self._known_ids[schema_id]

    # ------------------------------------------------------------ encoding
    def encode(self, column: "pa.Array", *, topic: str, is_key: bool = False) -> "pa.Array":
        """Each row as compact JSON text (as confluent-kafka's JSON
        serializer writes it), after the schema id's frame with a registry;
        null rows stay null."""
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        frame = self._frame(topic, column.type)
        return pa.array([None if v is None else frame + dumps(v).encode("utf-8") for v in json_values(column)],
                        type=pa.binary())

    def _frame(self, topic: str, typ: "pa.DataType") -> bytes:
        """What goes before each value of ``topic``: nothing without a
        registry, else the writer schema id's frame, found once per topic
        as confluent-kafka's serializer finds it (:func:`writer_id`)."""
        if self._registry is None or self._framing == "none":
            return b""
        with self._lock:
            found = self._writing.get(topic)
        if found is None:
            from kwire.registry import Schema

            text = self._given[1] if self._given is not None else None
            if text is None and self._given is not None:
                text = json.dumps(json_schema(self._given[0]))
            title = parse_schema(text).get("title") if text is not None else None
            subject = self.subject(topic, title if isinstance(title, str) else None)
            if text is None and self._schema_id is None and not self._use_latest:
                raise ValueError(f"encoding JSON for {subject!r}: give a schema, use.schema.id or use.latest.version")
            schema_id = writer_id(self._registry, subject, None if text is None else Schema(text, "JSON"),
                                  schema_id=self._schema_id, use_latest=self._use_latest,
                                  auto_register=self._auto_register, normalize=self._normalize)
            found = frame_header(schema_id)
            with self._lock:
                self._writing[topic] = found
        return found


def _first(mask: "pa.Array") -> int:
    return pc.indices_nonzero(mask)[0].as_py()


def _given(schema: Any) -> Tuple["pa.DataType", Optional[str]]:
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
    and the registry client's options, or ``registry`` (a client already
    made); ``subject`` (``key.subject``/``value.subject``),
    ``subject.name.strategy`` (``key.``/``value.subject.name.strategy``),
    ``use.schema.id``, ``auto.register.schemas``, ``use.latest.version``,
    ``normalize.schemas``; ``framing``."""
    client_options = {k: v for k, v in options.items() if k.startswith(("schema.registry.", "basic.auth.",
                                                                         "bearer.auth."))}
    side = "key" if is_key else "value"
    schema_id = options.get("use.schema.id")
    return JsonFormat(options.get("schema"), registry=options.get("registry") or client_options or None, topic=topic,
                      is_key=is_key, subject=options.get(f"{side}.subject") or options.get("subject"),
                      schema_id=None if schema_id in (None, "") else int(schema_id),
                      auto_register=flag(options.get("auto.register.schemas")),
                      use_latest=flag(options.get("use.latest.version")),
                      normalize=flag(options.get("normalize.schemas")),
                      subject_name_strategy=options.get(f"{side}.subject.name.strategy")
                      or options.get("subject.name.strategy") or "TopicNameStrategy",
                      framing=options.get("framing") or None)
