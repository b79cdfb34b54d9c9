"""Schema registries: the client of Confluent's REST API, the wire framing
of registry-encoded records, and subject naming.

===========================  ============================================================
module                       what it holds
===========================  ============================================================
:mod:`.client`               :class:`SchemaRegistryClient`: schemas by id, subjects and
                             versions, registering, compatibility, references; basic and
                             bearer (static or OAuth) auth, TLS, bounded caches, retries,
                             every call within its ``timeout`` (httpx: ``kwire[registry]``)
:mod:`.aio`                  :class:`AsyncSchemaRegistryClient`: the same calls, awaited
                             (also ``kwire.aio.AsyncSchemaRegistryClient``)
:mod:`.options`              the clients' options, with Confluent's names (``url``,
                             ``basic.auth.user.info``, ``bearer.auth.token``, ...)
:mod:`.schema`               :class:`Schema`, :class:`SchemaReference`,
                             :class:`RegisteredSchema`
:mod:`.errors`               :class:`SchemaRegistryError` (``status``, ``error_code``,
                             ``retriable``)
:mod:`.framing`              Confluent's frame (magic 0, a 4-byte id; Protobuf's message
                             indexes) and Apicurio's (an 8-byte id, or the id in a header),
                             for one value or a whole Arrow column (pyarrow)
:mod:`.naming`               subject name strategies: TopicName, RecordName,
                             TopicRecordName
:mod:`.steps`                the calls as steps (one implementation, two drivers)
:mod:`.auth`                 the authentication headers
:mod:`.cache`                the caches
===========================  ============================================================

It speaks Confluent Schema Registry's API, which other registries serve
too (the tests run it against Apicurio Registry's ``/apis/ccompat/v7``).
The names below are imported on first use, so ``kwire.registry.framing``
and ``.naming`` need neither httpx nor the client.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any, Dict, List

if TYPE_CHECKING:
    from kwire.registry.aio import AsyncSchemaRegistryClient
    from kwire.registry.client import SchemaRegistryClient
    from kwire.registry.errors import SchemaRegistryError
    from kwire.registry.naming import (
        SerializationContext,
        record_subject_name_strategy,
        topic_record_subject_name_strategy,
        topic_subject_name_strategy,
    )
    from kwire.registry.schema import RegisteredSchema, Schema, SchemaReference

_LAZY: Dict[str, str] = {
    "AsyncSchemaRegistryClient": "kwire.registry.aio",
    "SchemaRegistryClient": "kwire.registry.client",
    "SchemaRegistryError": "kwire.registry.errors",
    "SerializationContext": "kwire.registry.naming",
    "record_subject_name_strategy": "kwire.registry.naming",
    "topic_record_subject_name_strategy": "kwire.registry.naming",
    "topic_subject_name_strategy": "kwire.registry.naming",
    "RegisteredSchema": "kwire.registry.schema",
    "Schema": "kwire.registry.schema",
    "SchemaReference": "kwire.registry.schema",
}

__all__: List[str] = list(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kwire.registry' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_LAZY))
