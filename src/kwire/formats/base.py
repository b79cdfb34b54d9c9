"""What every typed format of keys and values is to the rest of kwire.

A :class:`Format` turns one column of record bytes (a batch's ``key`` or
``value``, ``pyarrow.binary()``) into a typed Arrow column, and back. The
consumer's ``poll_columnar``, :func:`kwire.scan`, the ``kwire`` command and
the Spark source and sink see formats only through this interface (and
:func:`decode_batch` / :func:`encode_column`), never a format's module.

Formats: ``avro`` (:mod:`kwire.formats.avro`), ``protobuf``
(:mod:`kwire.formats.protobuf`), ``json`` (:mod:`kwire.formats.json_schema`),
each with or without a schema registry (:mod:`kwire.registry`): with one,
values are framed (Confluent's magic byte 0 and a 4-byte schema id;
:mod:`kwire.registry.framing`) and each record's writer schema is fetched by
its id; without one, the caller gives the schema and values are bare.
"""

from __future__ import annotations

import abc
from typing import Any, Optional

try:
    import pyarrow as pa
except ImportError as e:  # pragma: no cover - exercised only without pyarrow
    raise ImportError("kwire's typed formats need pyarrow: pip install 'kwire[arrow]'") from e

from kwire.errors import CorruptRecordError

__all__ = ["Format", "UndecodableValueError", "decode_batch", "encode_columns"]


class UndecodableValueError(CorruptRecordError):
    """A key or value its format cannot decode. Besides the topic, partition
    and offset of :class:`kwire.CorruptRecordError`, ``row`` is its index in
    the column given to :meth:`Format.decode`, so a caller that must not lose
    records can keep the rows before it (``column[:row]`` decodes) and raise
    after them."""

    def __init__(self, reason: str, topic: Optional[str] = None, partition: Optional[int] = None,
                 offset: Optional[int] = None, *, row: int = 0) -> None:
        self.row = row
        super().__init__(reason, topic, partition, offset)


class Format(abc.ABC):
    """One column's format. Thread-safe once made; decode and encode may be
    called from several threads (schemas are fetched and compiled once)."""

    #: "avro", "protobuf" or "json"
    kind: str = ""
    #: whether :meth:`decode` takes the records' ``headers`` column too (a
    #: registry's id in a header, as Apicurio's serdes can write it)
    uses_headers: bool = False

    @abc.abstractmethod
    def arrow_type(self, topic: Optional[str] = None) -> "pa.DataType":
        """The Arrow type :meth:`decode` returns for ``topic``: the reader
        schema's (the one the caller named, or the subject's latest, whose
        name may depend on the topic)."""

    @abc.abstractmethod
    def decode(self, column: "pa.Array", *, topic: str, partition: int, offsets: "pa.Array") -> "pa.Array":
        """``column`` (binary, nulls allowed: a null stays null) as an array
        of :meth:`arrow_type`, one row per row. ``offsets`` (int64, same
        length) are the records' offsets: a value that cannot be decoded
        raises :class:`UndecodableValueError` naming ``topic``,
        ``partition``, that record's offset and its row."""

    def encode(self, column: "pa.Array", *, topic: str, is_key: bool = False) -> "pa.Array":
        """``column`` (of a type :meth:`arrow_type` accepts) as binary values,
        framed as the format's deserializers expect (a registry's schema id
        first). Formats that cannot encode raise ``NotImplementedError``."""
        raise NotImplementedError(f"the {self.kind} format does not encode")


def decode_batch(batch: "pa.RecordBatch", *, topic: str, partition: int,
                 key_format: Optional[Format] = None, value_format: Optional[Format] = None) -> "pa.RecordBatch":
    """A record batch of kwire's columnar schema with its ``key`` and/or
    ``value`` column replaced by its format's typed column."""
    if key_format is None and value_format is None:
        return batch
    offsets = batch.column("offset")
    arrays, fields = list(batch.columns), list(batch.schema)
    for name, fmt in (("key", key_format), ("value", value_format)):
        if fmt is None:
            continue
        i = batch.schema.get_field_index(name)
        extra = {"headers": batch.column("headers")} if getattr(fmt, "uses_headers", False) else {}
        arrays[i] = fmt.decode(batch.column(i), topic=topic, partition=partition, offsets=offsets, **extra)
        fields[i] = pa.field(name, arrays[i].type, nullable=True)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def encode_columns(data: Any, *, topic: str, key: Optional[str] = "key", value: str = "value",
                   key_format: Optional[Format] = None, value_format: Optional[Format] = None) -> Any:
    """``data`` (a ``pyarrow.RecordBatch`` or ``Table``) with its ``key`` and/or
    ``value`` column (by those names) replaced by its format's encoding of
    it: binary, framed as the format's serializer frames it."""
    for name, fmt, is_key in ((key, key_format, True), (value, value_format, False)):
        if fmt is None or name is None:
            continue
        i = data.schema.get_field_index(name)
        if i < 0:
            raise KeyError(f"no column {name!r} to encode as {fmt.kind}")
        column = data.column(i)
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        data = data.set_column(i, pa.field(name, pa.binary()), fmt.encode(column, topic=topic, is_key=is_key))
    return data
