"""What the typed formats share, beside the :class:`~kwire.formats.base.Format`
interface: a column as binary, a row's offset, a registry client from its
options, a registered schema's references, Confluent's boolean options.

Imports pyarrow (as every format does); :mod:`kwire.registry` only when a
client is made from options.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

from kwire.formats.base import pa

__all__ = ["binary_column", "row_offset", "registry_client", "reference_texts", "flag", "writer_id", "frame_header",
           "registry_lacks"]



def binary_column(column: Any) -> "pa.Array":
    """``column`` (an array or chunked array of bytes) as one ``binary`` array."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if not pa.types.is_binary(column.type):
        column = column.cast(pa.binary())
    return column


def row_offset(offsets: Any, row: int) -> Optional[int]:
    """The record offset of ``row`` (None past the offsets given)."""
    if offsets is None or row >= len(offsets):
        return None
    return offsets[row].as_py()


def registry_client(registry: Any) -> Any:
    """A registry client: ``registry`` itself, or one made from its options (a mapping)."""
    if registry is None or not isinstance(registry, Mapping):
        return registry
    from kwire.registry import SchemaRegistryClient
    return SchemaRegistryClient(dict(registry))


def reference_texts(registry: Any, schema: Any) -> Dict[str, str]:
    """The texts of a registered schema's references, by reference name, each
    after those it references itself (the order they must be parsed in):
    the registry client's :meth:`~kwire.registry.SchemaRegistryClient.resolve_references`."""
    if not getattr(schema, "references", None):
        return {}
    return registry.resolve_references(schema)


def flag(value: Any) -> bool:
    """A boolean option: a bool, or "true"/"false" (any case; "" is false)."""
    if isinstance(value, str):
        if value.strip().lower() not in ("true", "false", ""):
            raise ValueError(f"expected true or false, not {value!r}")
        return value.strip().lower() == "true"
    return bool(value)


def writer_id(registry: Any, subject: str, schema: Any, *, schema_id: Optional[int] = None, use_latest: bool = False,
              auto_register: bool = False, normalize: bool = False) -> int:
    """The schema id a serializer frames its values with, as confluent-kafka's
    decide it: ``schema_id`` (``use.schema.id``) if given; the subject's
    latest version's (``use.latest.version``); the id ``schema`` (a
    :class:`kwire.registry.Schema`) gets registered under ``subject``
    (``auto.register.schemas``); or else the id it already has there."""
    if schema_id is not None:
        return schema_id
    if use_latest:
        return registry.get_latest_version(subject).schema_id
    if auto_register:
        return registry.register_schema(subject, schema, normalize_schemas=normalize)
    return registry.lookup_schema(subject, schema).schema_id


def registry_lacks(e: Exception) -> bool:
    """Whether ``e`` is a registry's answer that a schema does not exist (HTTP 404)."""
    return isinstance(e, LookupError) or getattr(e, "status", None) == 404 or getattr(e, "http_status_code", None) == 404


def frame_header(schema_id: int) -> bytes:
    """Confluent's frame before a value: magic byte 0, the 4-byte big-endian id."""
    return b"\x00" + schema_id.to_bytes(4, "big")
