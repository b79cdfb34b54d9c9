"""The Avro format: a column of Avro values (registry-framed or bare) as
the reader schema's Arrow column, decoded by the compiled core.

Per topic, the reader schema is the one the caller gave, or else the
registry subject's (TopicNameStrategy: ``<topic>-value``/``-key``, or the
subject named) latest version, or the version named. Each writer schema
id met in the data is fetched once, resolved against the reader schema
(Avro's rules: fields matched by name and alias, defaults filled, numbers
promoted) and compiled once into a program.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from kwire.formats.base import Format, UndecodableValueError, pa

from kwire._core import avro as _avro
from kwire._core import avroenc as _avroenc
from kwire._core.typedcols import Columns
from kwire.formats.avro.arrow import layout
from kwire.formats.avro.encode import plan
from kwire.formats.avro.program import compile_program
from kwire.formats.avro.schema import AvroSchemaError, Node, parse_schema
from kwire.formats.common import (binary_column, flag, frame_header, reference_texts, registry_client, registry_lacks,
                                  row_offset, writer_id)

__all__ = ["AvroFormat", "make"]

SchemaText = Union[str, Mapping, list]
#: framings of a value: Confluent's; magic 0 and an 8-byte id (Apicurio's default
#: serde of 2.x); the id in the record's ``apicurio.value.contentId`` (or
#: ``.key.``) header, the value bare (Apicurio's headers mode); none (bare values)
_FRAMINGS = {"confluent": "confluent", "id8": "id8", "headers": "ids", "none": "none"}
#: decoders (column trees) kept per topic for reuse, at most
_SPARE_DECODERS = 4


class _Decoder:
    """One column tree and the programs bound to it (not thread-safe: one
    decode at a time; the format keeps a few per reader)."""

    def __init__(self, reader: "_Reader") -> None:
        self.cols = Columns(reader.slot.type, reader.dictionaries)
        self.table: List[Tuple[int, Any]] = []

    def add(self, schema_id: int, ops: list) -> None:
        self.table.append((schema_id, _avro.Program(ops, self.cols)))


class _Reader:
    """A reader schema, its layout, and the programs of the writer schemas met."""

    def __init__(self, schema: Node) -> None:
        self.schema = schema
        self.slot, self.dictionaries = layout(schema)
        self._ops: Dict[int, Any] = {}            # writer id -> op list, or the AvroSchemaError
        self._spare: List[_Decoder] = []
        self._lock = threading.Lock()

    def ops(self, schema_id: int, writer: Node) -> list:
        with self._lock:
            if schema_id not in self._ops:
                try:
                    self._ops[schema_id] = compile_program(writer, self.slot)
                except AvroSchemaError as e:
                    self._ops[schema_id] = e
        found = self._ops[schema_id]
        if isinstance(found, AvroSchemaError):
            raise found
        return found

    def known(self, schema_id: int) -> bool:
        return schema_id in self._ops

    def take(self) -> _Decoder:
        with self._lock:
            return self._spare.pop() if self._spare else _Decoder(self)

    def give(self, dec: _Decoder) -> None:
        with self._lock:
            if len(self._spare) < _SPARE_DECODERS:
                self._spare.append(dec)


class AvroFormat(Format):
    """Avro keys or values.

    * ``schema``: the reader schema (Avro JSON text or its parsed form). With
      no registry, values are bare Avro of ``writer_schema`` (default: the
      reader schema).
    * ``registry``: a :class:`kwire.registry.SchemaRegistryClient` (or its
      configuration: ``{"url": ...}``); values are framed (``framing``:
      "confluent", magic byte 0 and a 4-byte id; "id8", magic 0 and an
      8-byte id, as Apicurio's default serde writes them) and each writer
      schema is fetched by its id. The reader schema is ``schema`` if given,
      else ``subject``'s (default: the topic's, TopicNameStrategy)
      ``version`` ("latest" or a number), or ``schema_id``'s.
    """

    kind = "avro"

    def __init__(self, schema: Optional[SchemaText] = None, *, registry: Any = None, framing: Optional[str] = None,
                 writer_schema: Optional[SchemaText] = None, subject: Optional[str] = None,
                 version: Union[str, int] = "latest", schema_id: Optional[int] = None, is_key: bool = False,
                 references: Optional[Mapping[str, str]] = None, auto_register: bool = False,
                 use_latest: bool = False, subject_name_strategy: str = "TopicNameStrategy") -> None:
        if schema is None and registry is None:
            raise ValueError("the avro format needs a schema, or a schema registry (schema.registry.url)")
        self._registry = registry_client(registry)
        self._framing = framing or ("confluent" if self._registry is not None else "none")
        if self._framing not in _FRAMINGS:
            raise ValueError(f"framing must be one of {', '.join(_FRAMINGS)}, not {self._framing!r}")
        self.uses_headers = self._framing == "headers"
        if self._framing != "none" and self._registry is None:
            raise ValueError(f"framing {self._framing!r} needs a schema registry")
        self._given = parse_schema(schema, references) if schema is not None else None
        self._writer = parse_schema(writer_schema, references) if writer_schema is not None else self._given
        self._subject, self._version, self._schema_id, self._is_key = subject, version, schema_id, is_key
        if auto_register and use_latest:
            raise ValueError("auto.register.schemas and use.latest.version exclude each other")
        self._auto_register, self._use_latest = auto_register, use_latest
        self._strategy = subject_name_strategy
        self._given_text = schema if isinstance(schema, str) else (None if schema is None else json.dumps(schema))
        self._writing: Dict[str, Tuple[Node, bytes]] = {}      # topic -> (writer schema, frame)
        self._readers: Dict[str, _Reader] = {}
        self._writers: Dict[int, Node] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------ schemas
    def reader_schema(self, topic: Optional[str] = None) -> Node:
        return self._reader(topic).schema

    def arrow_type(self, topic: Optional[str] = None) -> "pa.DataType":
        return self._reader(topic).slot.type

    def _reader(self, topic: Optional[str]) -> _Reader:
        key = topic or ""
        with self._lock:
            found = self._readers.get(key)
        if found is None:
            found = _Reader(self._given if self._given is not None else self._registry_reader(topic))
            with self._lock:
                found = self._readers.setdefault(key, found)
        return found

    def _registry_reader(self, topic: Optional[str]) -> Node:
        if self._schema_id is not None:
            return self._writer_schema(self._schema_id)
        subject = self._subject or (f"{topic}-{'key' if self._is_key else 'value'}" if topic else None)
        if subject is None:
            raise ValueError("the reader schema: give a schema, a subject, a schema_id, or a topic")
        registered = (self._registry.get_latest_version(subject) if self._version == "latest"
                      else self._registry.get_version(subject, int(self._version)))
        return self._parse_registered(registered.schema)

    def _writer_schema(self, schema_id: int) -> Node:
        with self._lock:
            found = self._writers.get(schema_id)
        if found is None:
            found = self._parse_registered(self._registry.get_schema(schema_id))
            with self._lock:
                self._writers[schema_id] = found
        return found

    def _parse_registered(self, schema: Any) -> Node:
        if getattr(schema, "schema_type", "AVRO") not in ("AVRO", None):
            raise AvroSchemaError(f"the registry's schema is {schema.schema_type}, not AVRO")
        return parse_schema(schema.schema_str, reference_texts(self._registry, schema))

    # ------------------------------------------------------------ decoding
    def decode(self, column: "pa.Array", *, topic: str, partition: int, offsets: "pa.Array",
               headers: Optional["pa.Array"] = None) -> "pa.Array":
        """See :meth:`Format.decode`; with framing "headers", ``headers`` (the
        records' headers column) holds each value's schema id."""
        column = binary_column(column)
        ids = self._header_ids(column, headers, topic, partition, offsets) if self.uses_headers else None
        reader = self._reader(topic)
        dec = reader.take()
        try:
            return self._decode(reader, dec, column, ids, topic, partition, offsets)
        finally:
            reader.give(dec)

    def _header_ids(self, column: "pa.Array", headers: Optional["pa.Array"], topic: str, partition: int,
                    offsets: "pa.Array") -> "pa.Array":
        from kwire.registry.framing import CONTENT_ID, apicurio_header_ids

        if headers is None:
            raise ValueError("framing 'headers' decodes a column with the records' headers column")
        ids = apicurio_header_ids(headers, is_key=self._is_key, id_kind=CONTENT_ID, values=column, topic=topic,
                                  partition=partition, offsets=offsets)
        return ids.fill_null(0)             # rows with a null value (they have no id) are not read

    def _decode(self, reader: _Reader, dec: _Decoder, column: "pa.Array", ids: Optional["pa.Array"], topic: str,
                partition: int, offsets: "pa.Array") -> "pa.Array":
        frame = _avro.FRAMES[_FRAMINGS[self._framing]]
        start = 0
        while True:
            status, row, detail = _avro.decode(dec.cols, dec.table, column, frame, start, ids)
            if status == 0:
                return dec.cols.finish()
            if status == 1:
                self._add_program(reader, dec, detail, topic, partition, offsets, row)
                start = row
                continue
            dec.cols.finish()              # drop the rows taken (and the partial one)
            code, path, message = detail
            reason = _avro.ERRORS.get(code, f"error {code}") + (f" (field {path!r})" if path else "")
            raise UndecodableValueError(f"Avro: {reason}{': ' + message if message else ''}", topic, partition,
                                        row_offset(offsets, row), row=row)

    # ------------------------------------------------------------ encoding
    def encode(self, column: "pa.Array", *, topic: str, is_key: bool = False) -> "pa.Array":
        """The rows of ``column`` (a struct, or whatever Arrow type the writer
        schema takes: :mod:`kwire.formats.avro.encode`) as Avro values of the
        writer schema (the one given, else the registry's, see
        :meth:`writer`), after the schema id's frame with a registry: the
        bytes confluent-kafka's AvroSerializer writes for the same data.
        Null rows stay null. ``ValueError`` names the row and field that
        cannot be written."""
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        column.validate(full=True)          # the compiled encoder reads its offsets and buffers as they say
        schema, header = self.writer(topic)
        spec = plan(schema, column)
        out = Columns(pa.binary())
        failed = _avroenc.encode(spec, len(column), header, out)
        if failed is not None:
            row, code, path = failed
            out.finish()
            where = f" (field {path!r})" if path else ""
            raise ValueError(f"Avro: row {row} cannot be written: {_avroenc.ERRORS.get(code, code)}{where}")
        return out.finish()

    def writer(self, topic: str) -> Tuple[Node, bytes]:
        """The writer schema of ``topic``'s values and the frame before each
        (empty without a registry). With a registry: the schema given
        (registered under the subject with ``auto_register``, else looked up
        there), or the subject's latest (``use_latest``) or ``schema_id``'s."""
        with self._lock:
            found = self._writing.get(topic)
        if found is None:
            found = self._find_writer(topic)
            with self._lock:
                self._writing[topic] = found
        return found

    def _find_writer(self, topic: str) -> Tuple[Node, bytes]:
        if self._registry is None:
            if self._given is None:
                raise ValueError("encoding Avro needs a schema, or a schema registry")
            return self._given, b""
        from kwire.registry import Schema
        from kwire.registry.naming import SerializationContext, strategy

        ctx = SerializationContext(topic, "key" if self._is_key else "value")
        record_name = self._given.name if self._given is not None else None
        subject = self._subject or strategy(self._strategy)(ctx, record_name)
        if self._given is None and self._schema_id is None and not self._use_latest:
            raise ValueError(f"encoding Avro for {subject!r}: give a schema, use.schema.id or use.latest.version")
        given = Schema(self._given_text, "AVRO") if self._given_text is not None else None
        schema_id = writer_id(self._registry, subject, given, schema_id=self._schema_id, use_latest=self._use_latest,
                              auto_register=self._auto_register)
        schema = self._given if self._given is not None and not self._use_latest else self._writer_schema(schema_id)
        return schema, self._frame(schema_id)

    def _frame(self, schema_id: int) -> bytes:
        if self._framing == "id8":
            return b"\x00" + schema_id.to_bytes(8, "big")
        if self._framing == "headers":
            raise ValueError("framing 'headers': encoding writes the id into the value's frame (confluent or id8), "
                             "not into headers")
        return frame_header(schema_id)

    def _add_program(self, reader: _Reader, dec: _Decoder, schema_id: int, topic: str, partition: int,
                     offsets: "pa.Array", row: int) -> None:
        try:
            writer = self._writer if self._framing == "none" else self._writer_schema(schema_id)
            dec.add(schema_id, reader.ops(schema_id, writer))
        except AvroSchemaError as e:
            reason = f"schema id {schema_id} cannot be read as the reader's schema: {e}"
        except Exception as e:
            if not registry_lacks(e):
                raise
            reason = f"schema id {schema_id} is not in the schema registry"
        else:
            return
        dec.cols.finish()
        raise UndecodableValueError(f"Avro: {reason}", topic, partition, row_offset(offsets, row), row=row) from None


def make(options: Mapping[str, Any], *, topic: Optional[str], is_key: bool) -> AvroFormat:
    """An :class:`AvroFormat` from Confluent-named options (see
    :func:`kwire.formats.make_format`): ``schema`` (the reader schema);
    ``schema.registry.url`` and the registry client's options, or
    ``registry`` (a client already made); ``subject``
    (``key.subject``/``value.subject``), ``use.schema.id`` (the reader schema
    by id), ``use.latest.version`` (the reader schema: the subject's latest,
    the default with a registry and no schema); ``framing`` ("confluent",
    "id8", "none")."""
    client_options = {k: v for k, v in options.items() if k.startswith(("schema.registry.", "basic.auth.",
                                                                         "bearer.auth."))}
    registry = registry_client(options.get("registry") or client_options or None)
    schema_id = options.get("use.schema.id")
    strategy = options.get("key.subject.name.strategy" if is_key else "value.subject.name.strategy") \
        or options.get("subject.name.strategy") or "TopicNameStrategy"
    return AvroFormat(options.get("schema"), registry=registry, framing=options.get("framing") or None,
                      subject=options.get("key.subject" if is_key else "value.subject") or options.get("subject"),
                      schema_id=None if schema_id in (None, "") else int(schema_id), is_key=is_key,
                      auto_register=flag(options.get("auto.register.schemas")),
                      use_latest=flag(options.get("use.latest.version")), subject_name_strategy=strategy)
