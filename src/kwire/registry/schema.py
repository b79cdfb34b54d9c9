"""The registry's values: :class:`Schema`, :class:`SchemaReference`,
:class:`RegisteredSchema` (frozen dataclasses, hashable: usable as cache
keys), and how each is written in and read from the REST API's JSON.

A schema's ``references`` name the other schemas it imports (an Avro named
type defined elsewhere, a ``.proto`` import): ``name`` is how the schema
refers to it (the Avro full name, the import path), ``subject`` and
``version`` where it is registered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple

from kwire.registry.errors import MalformedAnswer

__all__ = ["Schema", "SchemaReference", "RegisteredSchema", "SCHEMA_TYPES"]

#: The schema types of Confluent's API (a schema without ``schemaType`` is Avro).
SCHEMA_TYPES = ("AVRO", "PROTOBUF", "JSON")


def _field(d: Mapping[str, Any], key: str, kind: type) -> Any:
    value = d.get(key) if isinstance(d, Mapping) else None
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise MalformedAnswer(f"the registry's answer has no {kind.__name__} {key!r}")
    return value


@dataclass(frozen=True)
class SchemaReference:
    """An imported schema: referred to as ``name``, registered as ``subject`` ``version``."""

    name: str
    subject: str
    version: int

    def to_dict(self) -> Dict[str, Any]:
        """The reference as the registry's REST API writes it."""
        return {"name": self.name, "subject": self.subject, "version": self.version}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SchemaReference":
        return cls(_field(d, "name", str), _field(d, "subject", str), _field(d, "version", int))


@dataclass(frozen=True)
class Schema:
    """A schema's text, its type (``AVRO``, ``PROTOBUF`` or ``JSON``) and
    the schemas it imports. ``references`` may be given as any iterable;
    it is kept as a tuple."""

    schema_str: str
    schema_type: str = "AVRO"
    references: Tuple[SchemaReference, ...] = field(default=())

    def __post_init__(self) -> None:
        if not isinstance(self.schema_str, str):
            raise TypeError(f"schema_str must be a str, not {type(self.schema_str).__name__}")
        object.__setattr__(self, "schema_type", (self.schema_type or "AVRO").upper())
        object.__setattr__(self, "references", tuple(self.references or ()))

    def to_dict(self) -> Dict[str, Any]:
        """The request body that registers, looks up or tests this schema."""
        return {"schema": self.schema_str, "schemaType": self.schema_type,
                "references": [r.to_dict() for r in self.references]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Schema":
        text = _field(d, "schema", str)
        refs: Iterable[Any] = d.get("references") or ()
        if not isinstance(refs, (list, tuple)):
            raise MalformedAnswer("the registry's answer has references that are not a list")
        schema_type = d.get("schemaType") or "AVRO"
        if not isinstance(schema_type, str):
            raise MalformedAnswer("the registry's answer has a schemaType that is not a string")
        return cls(text, schema_type, tuple(SchemaReference.from_dict(r) for r in refs))


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema as registered: its id, and the subject and version it is
    registered as (None where the answer did not say)."""

    schema_id: int
    schema: Schema
    subject: Optional[str] = None
    version: Optional[int] = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], schema: Optional[Schema] = None,
                  subject: Optional[str] = None) -> "RegisteredSchema":
        """From a subject-version answer (``subject``, ``version``, ``id``,
        ``schema``...); ``schema`` and ``subject`` stand in for what it lacks."""
        if schema is None:
            schema = Schema.from_dict(d)
        version = d.get("version")
        named = d.get("subject")
        return cls(_field(d, "id", int), schema, named if isinstance(named, str) else subject,
                   version if isinstance(version, int) and not isinstance(version, bool) else None)
