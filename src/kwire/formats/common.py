"""What the typed formats share, beside the :class:`~kwire.formats.base.Format`
interface: a column as binary, a row's offset, a registry client from its
options, a registered schema's references, Confluent's boolean options.

Imports pyarrow (as every format does); :mod:`kwire.registry` only when a
client is made from options.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional

from kwire.formats.base import pa

__all__ = ["binary_column", "row_offset", "registry_client", "reference_texts", "flag", "MAX_REFERENCE_DEPTH"]

#: schema references nested deeper than this are refused (a cycle)
MAX_REFERENCE_DEPTH = 32


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


def reference_texts(registry: Any, schema: Any, error: Callable[[str], Exception]) -> Dict[str, str]:
    """The texts of a registered schema's references, by reference name, each
    after those it references itself (the order they must be parsed in);
    ``error`` makes the exception for references nested too deep."""
    out: Dict[str, str] = {}

    def visit(s: Any, depth: int) -> None:
        if depth > MAX_REFERENCE_DEPTH:
            raise error(f"schema references nest deeper than {MAX_REFERENCE_DEPTH} (a cycle?)")
        for ref in getattr(s, "references", None) or []:
            if ref.name not in out:
                registered = registry.get_version(ref.subject, ref.version)
                visit(registered.schema, depth + 1)
                out[ref.name] = registered.schema.schema_str

    visit(schema, 0)
    return out


def flag(value: Any) -> bool:
    """A boolean option: a bool, or "true"/"false" (any case; "" is false)."""
    if isinstance(value, str):
        if value.strip().lower() not in ("true", "false", ""):
            raise ValueError(f"expected true or false, not {value!r}")
        return value.strip().lower() == "true"
    return bool(value)
