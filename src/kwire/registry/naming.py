"""Subject name strategies: under which subject a topic's keys or values
register their schema, with Confluent's semantics and names.

=====================================  ============================  ========================
strategy                               subject                       Java class (``...subject.``)
=====================================  ============================  ========================
:func:`topic_subject_name_strategy`    ``<topic>-key`` / ``-value``  ``TopicNameStrategy``
:func:`record_subject_name_strategy`   ``<record full name>``        ``RecordNameStrategy``
:func:`topic_record_subject_name_      ``<topic>-<record name>``     ``TopicRecordNameStrategy``
strategy`
=====================================  ============================  ========================

Each takes ``(ctx, record_name)`` as confluent-kafka's do: ``ctx`` anything
with ``topic`` and ``field`` (``"key"`` or ``"value"``: a
:class:`SerializationContext`, or confluent-kafka's own), ``record_name``
the record's (Avro) or message's (Protobuf) full name. :func:`strategy`
finds one by any of its names: the function's, the Java class's short or
full name (``io.confluent.kafka.serializers.subject.TopicNameStrategy``), as
a serializer's ``key.subject.name.strategy`` / ``value.subject.name.strategy``
names it.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, NamedTuple, Optional

__all__ = ["SerializationContext", "topic_subject_name_strategy", "record_subject_name_strategy",
           "topic_record_subject_name_strategy", "strategy", "STRATEGIES", "JAVA_PACKAGE"]

#: The package of Confluent's strategy classes.
JAVA_PACKAGE = "io.confluent.kafka.serializers.subject"
FIELDS = ("key", "value")

SubjectNameStrategy = Callable[[Any, Optional[str]], str]


class SerializationContext(NamedTuple):
    """Where a serialized key or value goes: ``topic``, and ``field`` (``"key"`` or ``"value"``)."""

    topic: str
    field: str = "value"


def _field(ctx: Any) -> str:
    field = getattr(ctx, "field", "")
    field = str(getattr(field, "value", field)).lower()         # confluent-kafka's MessageField is an Enum
    if field not in FIELDS:
        raise ValueError(f"a subject is a topic's key or value, not {field!r}")
    return field


def _record(record_name: Optional[str], strategy_name: str) -> str:
    if not record_name:
        raise ValueError(f"{strategy_name} needs the record's full name (the schema has none)")
    return record_name


def topic_subject_name_strategy(ctx: Any, record_name: Optional[str] = None) -> str:
    """``<topic>-key`` or ``<topic>-value`` (Confluent's default)."""
    return f"{ctx.topic}-{_field(ctx)}"


def record_subject_name_strategy(ctx: Any, record_name: Optional[str]) -> str:
    """The record's full name: one subject per record type, across topics."""
    return _record(record_name, "RecordNameStrategy")


def topic_record_subject_name_strategy(ctx: Any, record_name: Optional[str]) -> str:
    """``<topic>-<record full name>``: several record types in one topic."""
    return f"{ctx.topic}-{_record(record_name, 'TopicRecordNameStrategy')}"


_JAVA = {"TopicNameStrategy": topic_subject_name_strategy, "RecordNameStrategy": record_subject_name_strategy,
         "TopicRecordNameStrategy": topic_record_subject_name_strategy}
#: Every name a strategy goes by: the function's, the Java class's, its full name.
STRATEGIES: Dict[str, SubjectNameStrategy] = {
    **{fn.__name__: fn for fn in _JAVA.values()},
    **_JAVA,
    **{f"{JAVA_PACKAGE}.{name}": fn for name, fn in _JAVA.items()},
}


def strategy(name: str) -> SubjectNameStrategy:
    """The strategy called ``name`` (any name of :data:`STRATEGIES`)."""
    try:
        return STRATEGIES[name.strip()]
    except (KeyError, AttributeError):
        raise ValueError(f"unknown subject name strategy {name!r}: one of TopicNameStrategy, RecordNameStrategy, "
                         f"TopicRecordNameStrategy (or {JAVA_PACKAGE}.<name>, or the function's name)") from None
