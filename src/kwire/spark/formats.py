"""A query's typed keys and values (``valueFormat`` / ``keyFormat``): the
reader schema fixed on the driver, decoded and converted on the
executors, and the sink's encoding.

Reads: :func:`pin` (driver, when Spark plans the query) fixes each side's
reader schema for the whole query: the schema given (``valueSchema``), the
schema id given (``valueSchemaId``), or else the latest version of the
subject (``valueSubject``, or TopicNameStrategy's ``<topic>-value`` /
``<topic>-key`` for every topic the query names, whose latest versions
must all have the same Spark type) pinned as its id, so every task of the
query, and every micro-batch of a stream, decodes into the type Spark was
told, whatever is registered meanwhile (a stream picks up a newer version
when it is started again). Values written with other versions are resolved
into it (Avro's rules; Protobuf's by field number; JSON by name).
:class:`TypedColumns` (pickled to the executors) decodes each batch's key
and value with the format (:mod:`kwire.formats`, the compiled decoders)
and converts them to Spark's layout (:mod:`kwire.spark.typed`).

An undecodable value, or one Spark's type cannot hold, is from_avro's
``mode``: ``FAILFAST`` (the default) fails the task with the
:class:`kwire.CorruptRecordError` naming its topic, partition and offset;
``PERMISSIVE`` makes it null (its row is kept, with its offset).

Writes: :func:`encode_batch` replaces the ``key`` / ``value`` columns of a
batch by their encoding (registry-framed, the schema id found, looked up
or registered as the format's options say: ``auto.register.schemas``,
``use.latest.version``, ``valueSchemaId``, the subject name strategy).

Each Python worker keeps its formats (one per spec, topic and side, each
with its own schema registry client and caches) across tasks and queries,
as it keeps its consumers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pyarrow as pa
from pyspark.sql.types import DataType, StructType

from kwire.formats import make_format
from kwire.formats.base import UndecodableValueError
from kwire.errors import KwireError
from kwire.formats.common import row_offset
from kwire.spark._cache import ClientCache
from kwire.spark.errors import SparkOptionError
from kwire.spark.options import FormatSpec, SinkOptions, SourceOptions, Subscription
from kwire.spark.schema import spark_schema
from kwire.spark.typed import Conv, conversion

__all__ = ["TypedColumns", "pin", "pin_source", "check_typed_schema", "encode_batch", "columns"]

log = logging.getLogger(__name__)


class _Column:
    """One side's format for one topic, its registry client and its
    conversion to (or from) Spark's layout."""

    def __init__(self, config: Dict[str, Any]) -> None:
        spec = FormatSpec(config["kind"], config["options"], config["registry"])
        self.kind, self.is_key = spec.kind, config["is_key"]
        self.registry = _registry(spec)
        try:
            self.format = _make(spec, self.registry, config["topic"], self.is_key)
            self.conv: Conv = conversion(self.format, config["topic"], writing=config["writing"])
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.registry is not None:
            self.registry.close()

    def decode(self, column: "pa.Array", topic: str, partition: int, offsets: "pa.Array") -> "pa.Array":
        """``column``'s values decoded and in Spark's layout; raises
        :class:`UndecodableValueError` at the first that cannot be."""
        decoded = self.format.decode(column, topic=topic, partition=partition, offsets=offsets)
        try:
            return self.conv.to_spark(decoded)
        except (pa.ArrowInvalid, ValueError, OverflowError) as e:
            row = self._first_failing(decoded)
            raise UndecodableValueError(f"{self.kind}: a value Spark's type cannot hold: {e}", topic, partition,
                                        row_offset(offsets, row), row=row) from None

    def _first_failing(self, decoded: "pa.Array") -> int:
        for row in range(len(decoded)):
            try:
                self.conv.to_spark(decoded.slice(row, 1))
            except (pa.ArrowInvalid, ValueError, OverflowError):
                return row
        return 0

    def encode(self, column: "pa.Array", topic: str) -> "pa.Array":
        return self.format.encode(self.conv.to_format(column), topic=topic, is_key=self.is_key)


#: This worker's formats (see the module's docstring).
columns: ClientCache[_Column] = ClientCache(_Column, _Column.close, capacity=64)


def _registry(spec: FormatSpec) -> Any:
    """A schema registry client of ``spec``'s registry options, or None without a URL."""
    if not str(spec.registry.get("schema.registry.url") or "").strip():
        return None
    from kwire.registry import SchemaRegistryClient

    return SchemaRegistryClient(dict(spec.registry))


def _make(spec: FormatSpec, registry: Any, topic: Optional[str], is_key: bool) -> Any:
    return make_format(spec.kind, {**spec.options, "registry": registry}, topic=topic, is_key=is_key)


def _config(spec: FormatSpec, topic: Optional[str], is_key: bool, writing: bool = False) -> Dict[str, Any]:
    return {"kind": spec.kind, "options": spec.options, "registry": spec.registry, "topic": topic,
            "is_key": is_key, "writing": writing}


# ---------------------------------------------------------------- reading
@dataclass(frozen=True)
class TypedColumns:
    """A query's typed key and value, fixed by :func:`pin` (None: that side
    is bytes), their Spark types, and ``mode``."""

    key: Optional[FormatSpec]
    value: Optional[FormatSpec]
    key_type: Optional[DataType]
    value_type: Optional[DataType]
    mode: str = "FAILFAST"

    def spark_schema(self, include_headers: bool) -> StructType:
        return spark_schema(include_headers, self.key_type, self.value_type)

    def columns(self, rb: "pa.RecordBatch", topic: str, partition: int) -> Tuple[Optional["pa.Array"],
                                                                                  Optional["pa.Array"]]:
        """The typed key and value of a :class:`kwire.ColumnarDecoder`
        batch (``offset, timestamp, timestamp_type, key, value, ...``) in
        Spark's layout (None for a side that is bytes)."""
        offsets = rb.column(0)
        return (self._side(self.key, True, rb.column(3), topic, partition, offsets),
                self._side(self.value, False, rb.column(4), topic, partition, offsets))

    def _side(self, spec: Optional[FormatSpec], is_key: bool, column: "pa.Array", topic: str, partition: int,
              offsets: "pa.Array") -> Optional["pa.Array"]:
        if spec is None:
            return None
        col = columns.get(_config(spec, topic, is_key))
        if self.mode == "FAILFAST":
            return col.decode(column, topic, partition, offsets)
        return _permissive(col, column, topic, partition, offsets)


def _permissive(col: _Column, column: "pa.Array", topic: str, partition: int, offsets: "pa.Array") -> "pa.Array":
    """from_avro's PERMISSIVE: each value that cannot be decoded is null."""
    pieces: List["pa.Array"] = []
    start = 0
    while start < len(column):
        try:
            pieces.append(col.decode(column.slice(start), topic, partition, offsets.slice(start)))
            break
        except UndecodableValueError as e:
            if e.row:
                pieces.append(col.decode(column.slice(start, e.row), topic, partition, offsets.slice(start, e.row)))
            pieces.append(pa.nulls(1, col.conv.arrow))
            log.debug("mode PERMISSIVE: %s is null", e)
            start += e.row + 1
    return pa.concat_arrays(pieces) if len(pieces) != 1 else pieces[0]


def pin(sub: Subscription, key_format: Optional[FormatSpec], value_format: Optional[FormatSpec],
        mode: str) -> Optional[TypedColumns]:
    """The query's :class:`TypedColumns` (None when key and value are bytes),
    fixed on the driver (see the module's docstring); a schema that cannot
    be had raises :class:`SparkOptionError` naming the option."""
    if key_format is None and value_format is None:
        return None
    topics = _topics(sub)
    key, key_type = _pin_side(key_format, topics, True)
    value, value_type = _pin_side(value_format, topics, False)
    return TypedColumns(key, value, key_type, value_type, mode)


def pin_source(opts: SourceOptions) -> Optional[TypedColumns]:
    """:func:`pin` of a parsed read's options."""
    return pin(opts.subscription, opts.key_format, opts.value_format, opts.mode)


def _topics(sub: Subscription) -> Sequence[str]:
    """The topics a subscription names (none for a pattern)."""
    if sub.kind == "subscribe":
        return sub.topics
    if sub.kind == "assign":
        return sorted({t for t, _ in sub.partitions})
    return ()


def _pin_side(spec: Optional[FormatSpec], topics: Sequence[str], is_key: bool) -> Tuple[Optional[FormatSpec],
                                                                                      Optional[DataType]]:
    if spec is None:
        return None, None
    side = "key" if is_key else "value"
    registry = _registry(spec)
    try:
        if "schema" in spec.options or "use.schema.id" in spec.options:
            return _pinned(spec, registry, topics[0] if topics else None, is_key)
        subjects = ([spec.options["subject"]] if spec.options.get("subject")
                    else [f"{t}-{side}" for t in topics])
        if not subjects:
            raise SparkOptionError(f"option '{side}Format'={spec.kind} with subscribePattern needs the schema named: "
                                   f"'{side}Subject', '{side}SchemaId' or '{side}Schema'")
        found = [_pinned(spec.with_options(use_schema_id=str(_latest_id(registry, s, side))), registry, None,
                         is_key) for s in subjects]
    except SparkOptionError:
        raise
    except (ValueError, LookupError, OSError, KwireError) as e:
        raise SparkOptionError(f"option '{side}Format'={spec.kind}: the {side}s' schema cannot be had: {e}") from None
    finally:
        if registry is not None:
            registry.close()
    differ = [f"{s}: {t.simpleString()}" for s, (_, t) in zip(subjects, found) if t != found[0][1]]
    if differ:
        raise SparkOptionError(f"the {side}s of subjects {subjects[0]} ({found[0][1].simpleString()}) and "
                               f"{', '.join(differ)} have different types: name one schema for the query "
                               f"('{side}Subject', '{side}SchemaId' or '{side}Schema')")
    return found[0]


def _latest_id(registry: Any, subject: str, side: str) -> int:
    if registry is None:
        raise SparkOptionError(f"option '{side}Format' needs '{side}Schema' or a schema registry "
                               f"('schema.registry.url')")
    from kwire.registry import SchemaRegistryError

    try:
        return registry.get_latest_version(subject).schema_id
    except SchemaRegistryError as e:
        raise SparkOptionError(f"the latest version of subject {subject!r} ({side}s' schema) cannot be had from "
                               f"the schema registry: {e}") from None


def _pinned(spec: FormatSpec, registry: Any, topic: Optional[str], is_key: bool) -> Tuple[FormatSpec, DataType]:
    """``spec`` with its reader fixed (a Protobuf format's message named)
    and the Spark type it decodes into."""
    fmt = _make(spec, registry, topic, is_key)
    if spec.kind == "protobuf" and "message.name" not in spec.options:
        spec = spec.with_options(message_name=fmt.reader_message(topic).full_name)
    return spec, conversion(fmt, topic).spark


def check_typed_schema(schema: StructType, typed: Optional[TypedColumns], include_headers: bool) -> None:
    """A schema Spark hands a reader must be the query's (a user-given one,
    or a registry's latest version that changed since the query was planned,
    is refused)."""
    expected = typed.spark_schema(include_headers) if typed is not None else spark_schema(include_headers)
    if schema != expected:
        raise SparkOptionError("Kafka source has a fixed schema and cannot be set with a custom one "
                               f"(expected {expected.simpleString()}, got {schema.simpleString()}; with a schema "
                               "registry, the subject's latest version may have changed since the query was "
                               "planned: plan it again)")


# ---------------------------------------------------------------- writing
def encode_batch(batch: "pa.RecordBatch", topic: str, sink: SinkOptions) -> "pa.RecordBatch":
    """``batch`` with its ``key`` / ``value`` column encoded by the sink's
    format for ``topic`` (binary, framed with a registry's schema id); a
    side without a format is left as it is."""
    arrays, names = list(batch.columns), batch.schema.names
    for name, spec in (("key", sink.key_format), ("value", sink.value_format)):
        if spec is None or name not in names:
            continue
        i = names.index(name)
        arrays[i] = columns.get(_config(spec, topic, name == "key", writing=True)).encode(arrays[i], topic)
    return pa.RecordBatch.from_arrays(arrays, names=names)
