"""The Protobuf format: a column of Protobuf values (registry-framed or bare)
as the reader message's Arrow column, decoded by the compiled core; and
Arrow struct columns encoded back, framed as confluent-kafka's
``ProtobufSerializer`` frames them.

The reader message (its Arrow type: :mod:`kwire.formats.protobuf.plan`) is
the one the caller gave (a ``.proto`` text, a serialized
``FileDescriptorProto``, a descriptor or a generated message class), or else
the registry subject's (TopicNameStrategy: ``<topic>-value``/``-key``, or
the subject named) latest version, or the version or schema id named.
Values written with other versions decode into the reader's columns by field
number, the Protobuf way: fields the reader lacks are skipped, fields the
writer lacked get their defaults. Each frame's (schema id, message indexes)
is checked once: its message must have the reader message's full name
(a topic mixing message types needs one format per type).
"""

from __future__ import annotations

import base64
import threading
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from kwire.formats.protobuf.plan import Plan  # first: without the extra, its ImportError says so
from kwire.registry.framing import encode_message_indexes, parse_message_indexes  # noqa: E402
from kwire.registry.naming import SerializationContext, strategy  # noqa: E402
from kwire.formats.protobuf.schema import (WELL_KNOWN, ProtobufSchemaError, Schema, message_at, message_indexes,
                                          parse_schema)

import pyarrow as pa  # noqa: E402
from google.protobuf.descriptor import Descriptor, FileDescriptor  # noqa: E402

from kwire._core import protobuf as _pb  # noqa: E402
from kwire._core.typedcols import Columns  # noqa: E402
from kwire.errors import CorruptRecordError  # noqa: E402
from kwire.formats.base import Format, UndecodableValueError  # noqa: E402
from kwire.formats.common import (binary_column, flag, frame_header, reference_texts, registry_client,  # noqa: E402
                                  registry_lacks, row_offset, writer_id)

__all__ = ["ProtobufFormat", "make"]

SchemaSource = Union[str, Descriptor, FileDescriptor, type, Schema]
#: decoders (column trees) kept per reader for reuse, at most
_SPARE_DECODERS = 4
#: frames (schema id, message indexes) remembered per reader, at most
_KEYS = 256


class _Reader:
    """A reader message: its plan, the frames found to be of it, and a few
    decoders (a column tree and the program bound to it; one decode at a
    time each)."""

    def __init__(self, message: Descriptor) -> None:
        self.message = message
        self.plan = Plan(message)
        self.tuples = self.plan.as_tuples()
        self._keys: "OrderedDict[Tuple[int, bytes], bool]" = OrderedDict()
        self._spare: List[_pb.Program] = []
        self._lock = threading.Lock()

    def keys(self) -> list:
        with self._lock:
            return [k for k, ok in self._keys.items() if ok]

    def known(self, key: Tuple[int, bytes]) -> Optional[bool]:
        with self._lock:
            return self._keys.get(key)

    def learn(self, key: Tuple[int, bytes], ok: bool) -> None:
        with self._lock:
            self._keys[key] = ok
            while len(self._keys) > _KEYS:
                self._keys.popitem(last=False)

    def take(self) -> "_pb.Program":
        with self._lock:
            if self._spare:
                return self._spare.pop()
        return _pb.Program(self.tuples, Columns(self.plan.arrow_type, self.plan.dictionaries))

    def give(self, program: "_pb.Program") -> None:
        with self._lock:
            if len(self._spare) < _SPARE_DECODERS:
                self._spare.append(program)


class ProtobufFormat(Format):
    """Protobuf keys or values.

    * ``schema``: the reader's schema: ``.proto`` text or a base64 serialized
      ``FileDescriptorProto`` (with ``references``: import name -> text), a
      message descriptor or generated message class, or a parsed
      :class:`~kwire.formats.protobuf.schema.Schema`; ``message``: the full
      name of the message among the file's (default: its first).
    * ``registry``: a :class:`kwire.registry.SchemaRegistryClient` (or its
      configuration: ``{"url": ...}``); values are framed as Confluent's
      serializers frame them (magic byte 0, a 4-byte schema id, the
      message-index array) and each frame's writer schema is fetched by its
      id. The reader is ``schema`` if given, else ``subject``'s (default:
      the topic's, TopicNameStrategy) ``version`` ("latest" or a number),
      or ``schema_id``'s. Without a registry values are bare, unless
      ``framed`` (then every frame is read as the given message).
    * encoding (:meth:`encode`): ``auto_register`` registers the schema
      under the subject (``subject_name_strategy``: TopicNameStrategy,
      RecordNameStrategy, TopicRecordNameStrategy, by any name
      :mod:`kwire.registry.naming` knows, or a function); ``use_latest`` frames with the subject's latest
      version's id; else the schema must already be registered there
      (``schema_id``: that id, without asking).
    """

    kind = "protobuf"

    def __init__(self, schema: Optional[SchemaSource] = None, *, message: Optional[str] = None,
                 references: Optional[Mapping[str, str]] = None, registry: Any = None,
                 framed: Optional[bool] = None, subject: Optional[str] = None, version: Union[str, int] = "latest",
                 schema_id: Optional[int] = None, is_key: bool = False, auto_register: bool = False,
                 use_latest: bool = False, subject_name_strategy: Union[str, Callable] = "TopicNameStrategy") -> None:
        if schema is None and registry is None:
            raise ValueError("the protobuf format needs a schema, or a schema registry (schema.registry.url)")
        if auto_register and use_latest:
            raise ValueError("auto.register.schemas and use.latest.version exclude each other")
        self._registry = registry_client(registry)
        self._framed = bool(self._registry is not None if framed is None else framed)
        self._given = _given_message(schema, message, references) if schema is not None else None
        self._message_name = message
        self._subject, self._version, self._schema_id, self._is_key = subject, version, schema_id, is_key
        self._auto_register, self._use_latest = auto_register, use_latest
        self._strategy = strategy(subject_name_strategy) if isinstance(subject_name_strategy, str) \
            else subject_name_strategy
        self._readers: Dict[str, _Reader] = {}
        self._writers: Dict[int, Schema] = {}
        self._ids: Dict[str, int] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------ schemas
    def reader_message(self, topic: Optional[str] = None) -> Descriptor:
        """The message descriptor values decode as."""
        return self._reader(topic).message

    def arrow_type(self, topic: Optional[str] = None) -> "pa.DataType":
        return self._reader(topic).plan.arrow_type

    def _reader(self, topic: Optional[str]) -> _Reader:
        key = topic or ""
        with self._lock:
            found = self._readers.get(key)
        if found is None:
            found = _Reader(self._given if self._given is not None else self._registry_reader(topic))
            with self._lock:
                found = self._readers.setdefault(key, found)
        return found

    def _subject_of(self, topic: Optional[str], message: Optional[Descriptor] = None) -> str:
        """The registry subject: the one named, else the strategy's (a
        reader found by subject takes TopicNameStrategy's: the message is
        what it is looked up for)."""
        if self._subject:
            return self._subject
        if not topic and (message is None or self._strategy is not strategy("RecordNameStrategy")):
            raise ValueError("the registry subject: give a schema, a subject, a schema_id, or a topic")
        ctx = SerializationContext(topic or "", "key" if self._is_key else "value")
        if message is None:
            return strategy("TopicNameStrategy")(ctx, None)
        return self._strategy(ctx, message.full_name)

    def _registry_reader(self, topic: Optional[str]) -> Descriptor:
        if self._schema_id is not None:
            schema = self._writer_schema(self._schema_id)
        else:
            subject = self._subject_of(topic)
            registered = (self._registry.get_latest_version(subject) if self._version == "latest"
                          else self._registry.get_version(subject, int(self._version)))
            schema = self._parse_registered(registered.schema)
        return schema.find_message(self._message_name) if self._message_name else schema.message([0])

    def _writer_schema(self, schema_id: int) -> Schema:
        with self._lock:
            found = self._writers.get(schema_id)
        if found is None:
            found = self._parse_registered(self._registry.get_schema(schema_id))
            with self._lock:
                self._writers[schema_id] = found
        return found

    def _parse_registered(self, schema: Any) -> Schema:
        if getattr(schema, "schema_type", "PROTOBUF") != "PROTOBUF":
            raise ProtobufSchemaError(f"the registry's schema is {schema.schema_type}, not PROTOBUF")
        return parse_schema(schema.schema_str, reference_texts(self._registry, schema))

    # ------------------------------------------------------------ decoding
    def decode(self, column: "pa.Array", *, topic: str, partition: int, offsets: "pa.Array") -> "pa.Array":
        column = binary_column(column)
        reader = self._reader(topic)
        program = reader.take()
        try:
            return self._decode(reader, program, column, topic, partition, offsets)
        finally:
            reader.give(program)

    def _decode(self, reader: _Reader, program: "_pb.Program", column: "pa.Array", topic: str, partition: int,
                offsets: "pa.Array") -> "pa.Array":
        frame = _pb.FRAMES["confluent" if self._framed else "none"]
        keys = reader.keys()
        start = 0
        while True:
            status, row, detail = _pb.decode(program, column, frame, keys, start)
            if status == 0:
                return program.cols.finish()
            if status == 1:
                try:
                    self._check_frame(reader, detail)
                except Exception as e:
                    if not isinstance(e, (ProtobufSchemaError, ValueError, CorruptRecordError)) \
                            and not registry_lacks(e):
                        raise
                    program.cols.finish()
                    reason = f"schema id {detail[0]} is not in the schema registry" if registry_lacks(e) else e
                    raise UndecodableValueError(f"Protobuf: {reason}", topic, partition, row_offset(offsets, row),
                                                row=row) from None
                keys.append(detail)
                start = row
                continue
            program.cols.finish()              # drop the rows taken (and the partial one)
            code, node, field = detail
            reason = _pb.ERRORS.get(code, f"error {code}")
            if field >= 0:
                reason += f" (field {reader.plan.field_path(node, field)})"
            elif node > 0:
                reason += f" (in {reader.plan.nodes[node].name})"
            raise UndecodableValueError(f"Protobuf: {reason}", topic, partition, row_offset(offsets, row), row=row)

    def _check_frame(self, reader: _Reader, key: Tuple[int, bytes]) -> None:
        """A frame's message must be the reader's (raises ValueError)."""
        known = reader.known(key)
        if known is None:
            schema_id, raw = key
            indexes, _ = parse_message_indexes(raw)
            if self._registry is None:
                known = True          # framed without a registry: the given message for every frame
            else:
                writer = message_at(self._writer_schema(schema_id).file, indexes)
                known = writer.full_name == reader.message.full_name
                if not known:
                    reader.learn(key, False)
                    raise ValueError(f"schema id {schema_id} message {indexes} is {writer.full_name}, "
                                     f"not the reader's {reader.message.full_name}")
            reader.learn(key, True)
        elif not known:
            raise ValueError(f"schema id {key[0]} message {parse_message_indexes(key[1])[0]} is not the reader's "
                             f"{reader.message.full_name}")


    # ------------------------------------------------------------ encoding
    def encode(self, column: "pa.Array", *, topic: str, is_key: bool = False) -> "pa.Array":
        """Rows of the reader message's Arrow type (a struct column: its
        fields by name, a missing one null; an enum as names, in any
        dictionary or as strings) as Protobuf values, written as the
        protobuf package's ``SerializeToString`` writes them (map entries in
        the column's order), framed with the schema id and message indexes
        when the format has a registry or is ``framed``. A null row stays
        null."""
        reader = self._reader(topic)
        prefix = self._frame(reader, topic) if self._framed else b""
        column = conform(column, reader.plan.arrow_type)
        column.validate(full=True)          # the compiled encoder reads its offsets and buffers as they say
        views, keep = _views(column, reader.plan)
        program = reader.take()
        out = Columns(pa.binary())
        try:
            status, row, detail = _pb.encode(program, views, prefix, len(column), out)
        finally:
            reader.give(program)
            del keep
        if status == 0:
            return out.finish()
        out.finish()
        code, node, field = detail
        reason = _pb.ERRORS.get(code, f"error {code}")
        if field >= 0:
            reason += f" (field {reader.plan.field_path(node, field)})"
        raise ValueError(f"Protobuf: row {row} cannot be encoded: {reason}")

    def _frame(self, reader: _Reader, topic: str) -> bytes:
        """Magic byte 0, the schema id (as confluent-kafka's serializer
        decides it: :func:`kwire.formats.common.writer_id`), the message indexes."""
        if self._registry is None and self._schema_id is None:
            raise ValueError("framed Protobuf values without a registry need the schema id (use.schema.id)")
        key = topic or ""
        with self._lock:
            schema_id = self._ids.get(key)
        if schema_id is None:
            needed = self._schema_id is None and not self._use_latest
            schema_id = writer_id(self._registry, self._subject_of(topic, reader.message),
                                  self._registrable(reader.message.file) if needed else None,
                                  schema_id=self._schema_id, use_latest=self._use_latest,
                                  auto_register=self._auto_register)
            with self._lock:
                self._ids[key] = schema_id
        return frame_header(schema_id) + encode_message_indexes(message_indexes(reader.message))

    def _registrable(self, file: FileDescriptor) -> Any:
        """``file`` as confluent-kafka's ProtobufSerializer registers it: its
        serialized descriptor in base64, each import but the well-known types
        registered (when auto-registering) under its own name as subject."""
        from kwire.registry.schema import Schema as RegistrySchema, SchemaReference

        refs = []
        for dep in file.dependencies:
            if dep.name.startswith(WELL_KNOWN):
                continue
            dep_schema = self._registrable(dep)
            if self._auto_register:
                self._registry.register_schema(dep.name, dep_schema)
            found = self._registry.lookup_schema(dep.name, dep_schema)
            refs.append(SchemaReference(dep.name, dep.name, found.version))
        return RegistrySchema(base64.standard_b64encode(file.serialized_pb).decode("ascii"), "PROTOBUF", refs)



def conform(column: Any, target: "pa.DataType") -> "pa.Array":
    """``column`` (a struct array or chunked array) as an array of ``target``:
    its fields taken by name (a missing one all null), each cast to its type."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if isinstance(column, pa.RecordBatch):
        column = pa.StructArray.from_arrays(column.columns, fields=list(column.schema))
    if column.type == target:
        return column
    if not pa.types.is_struct(column.type):
        raise TypeError(f"Protobuf encodes a struct column, not {column.type}")
    names = {column.type.field(i).name for i in range(column.type.num_fields)}
    unknown = names - {f.name for f in target}
    if unknown:
        raise ValueError(f"fields the message lacks: {', '.join(sorted(unknown))}")
    children = []
    for f in target:
        child = column.field(f.name) if f.name in names else pa.nulls(len(column), f.type)
        children.append(conform(child, f.type) if pa.types.is_struct(f.type) else child.cast(f.type))
    return pa.StructArray.from_arrays(children, fields=list(target), mask=column.is_null() if column.null_count else None)


def _views(column: "pa.Array", plan: Plan) -> Tuple[list, list]:
    """The compiled encoder's view of each column of ``column`` (of the
    plan's type), in the plan's pre-order numbering; and what keeps them alive."""
    views: list = []
    keep: list = []

    def address(buf: Any) -> int:
        return 0 if buf is None else buf.address

    def walk(arr: Any) -> None:
        t = arr.type
        col = len(views)
        if pa.types.is_dictionary(t):
            names = plan.enum_numbers[col]
            numbers = pa.array([names.get(n, _pb.ENUM_UNKNOWN) for n in arr.dictionary.to_pylist()], pa.int64())
            indices = arr.indices.cast(pa.int32())
            keep.extend((numbers, indices))
            b = indices.buffers()
            views.append((address(b[0]), indices.offset, address(b[1]), 0, address(numbers.buffers()[1]),
                          len(numbers)))
            return
        b = arr.buffers()
        if pa.types.is_struct(t):
            views.append((address(b[0]), arr.offset, 0, 0, 0, 0))
            for i in range(t.num_fields):
                walk(arr.field(i))
        elif pa.types.is_list(t) or pa.types.is_map(t):
            views.append((address(b[0]), arr.offset, 0, address(b[1]), 0, 0))
            walk(arr.values)
        elif pa.types.is_binary(t) or pa.types.is_string(t):
            views.append((address(b[0]), arr.offset, address(b[2]), address(b[1]), 0, 0))
        else:
            views.append((address(b[0]), arr.offset, address(b[1]), 0, 0, 0))
        keep.append(arr)

    walk(column)
    return views, keep


def _given_message(schema: SchemaSource, message: Optional[str], references: Optional[Mapping[str, str]]
                   ) -> Descriptor:
    if isinstance(schema, str):
        schema = parse_schema(schema, references)
    if isinstance(schema, Schema):
        return schema.find_message(message) if message else schema.message([0])
    desc = getattr(schema, "DESCRIPTOR", schema)
    if isinstance(desc, FileDescriptor):
        return desc.pool.FindMessageTypeByName(message) if message else message_at(desc, [0])
    if isinstance(desc, Descriptor):
        return desc
    raise TypeError(f"a protobuf schema is .proto text, a serialized FileDescriptorProto, a descriptor or a "
                    f"message class, not {type(schema).__name__}")


def make(options: Mapping[str, Any], *, topic: Optional[str], is_key: bool) -> ProtobufFormat:
    """A :class:`ProtobufFormat` from Confluent-named options (see
    :func:`kwire.formats.make_format`): ``schema`` (and ``references``,
    ``message.name``: the message's full name); ``schema.registry.url`` and
    the registry client's options, or ``registry``: a client already made;
    ``subject`` (``key.subject``/``value.subject``), ``use.schema.id``,
    ``auto.register.schemas``, ``use.latest.version``,
    ``subject.name.strategy`` (or ``key.``/``value.`` prefixed: Confluent's
    class names)."""
    registry = options.get("registry")
    client_options = {k: v for k, v in options.items() if k.startswith(("schema.registry.", "basic.auth.",
                                                                         "bearer.auth."))}
    if registry is None and client_options:
        registry = client_options
    side = "key." if is_key else "value."
    schema_id = options.get("use.schema.id")
    name_strategy = options.get(side + "subject.name.strategy") or options.get("subject.name.strategy") \
        or "TopicNameStrategy"
    return ProtobufFormat(options.get("schema"), message=options.get("message.name"),
                          references=options.get("references"), registry=registry,
                          subject=options.get(side + "subject") or options.get("subject"),
                          schema_id=None if schema_id in (None, "") else int(schema_id), is_key=is_key,
                          auto_register=flag(options.get("auto.register.schemas")),
                          use_latest=flag(options.get("use.latest.version")),
                          subject_name_strategy=name_strategy)
