"""A share group's dead-letter topic (KIP-1191; Kafka 4.4 with
``share.version`` 2).

The broker, not the client, writes a dead letter: a record a member
rejected (``AcknowledgeType.REJECT``), or one delivered
``share.delivery.count.limit`` times without being accepted, goes to the
group's ``errors.deadletterqueue.topic.name`` instead of being only
archived. The record is copied (``errors.deadletterqueue.copy.record.enable``,
else only the context is written) with headers naming where it came from
(:data:`HEADERS`). The topic must say it may be one
(``errors.deadletterqueue.group.enable=true``) and, unless the brokers'
``errors.deadletterqueue.topic.name.prefix`` is empty, start with that
prefix (``dlq.`` by default).

- :func:`set_dead_letter_topic`: the topic made (or its config set) and the
  group's configs, with the admin client; ``kwire share dead-letters``.
- :func:`group_configs`, :data:`TOPIC_CONFIGS`: the same settings, for an
  :class:`kwire.aio.AsyncAdmin` or a deployment tool.
- :func:`dead_letter`: a dead letter's context, from its headers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional

from kwire.admin_ops.configs import AlterConfigOp
from kwire.errors import TopicAlreadyExistsError, UnsupportedVersionError

__all__ = ["HEADERS", "TOPIC_CONFIGS", "DeadLetter", "dead_letter", "group_configs", "set_dead_letter_topic"]

#: The headers the broker adds to a dead letter, by :class:`DeadLetter` field.
HEADERS = {"topic": "__dlq.errors.topic", "partition": "__dlq.errors.partition", "offset": "__dlq.errors.offset",
           "group": "__dlq.errors.group", "delivery_count": "__dlq.errors.delivery.count",
           "message": "__dlq.errors.message"}

#: The topic config a dead-letter topic needs.
TOPIC_CONFIGS = {"errors.deadletterqueue.group.enable": "true"}

#: The lowest ``share.version`` with dead-letter topics.
SHARE_VERSION = 2


@dataclass(frozen=True)
class DeadLetter:
    """Where a dead letter came from, and why (``message``: the broker's,
    such as "Offset rejected by client.")."""

    topic: str
    partition: int
    offset: int
    group: str
    delivery_count: int
    message: str


def dead_letter(record: Any) -> Optional[DeadLetter]:
    """The context of ``record`` (any kwire record: ``headers`` of
    ``(key, value)``), read from a dead-letter topic; None when it has no
    such headers."""
    got = {k: v for k, v in (record.headers or ())}
    if HEADERS["offset"] not in got:
        return None

    def text(field: str) -> str:
        v = got.get(HEADERS[field])
        return "" if v is None else bytes(v).decode("utf-8", "replace")

    return DeadLetter(text("topic"), int(text("partition") or -1), int(text("offset")), text("group"),
                      int(text("delivery_count") or 0), text("message"))


def group_configs(topic: str, copy_records: bool = True) -> List[AlterConfigOp]:
    """The group configs that send its dead letters to ``topic`` ("": none)."""
    return [AlterConfigOp("errors.deadletterqueue.topic.name", topic),
            AlterConfigOp("errors.deadletterqueue.copy.record.enable", "true" if copy_records else "false")]


def set_dead_letter_topic(admin: Any, group: str, topic: str, *, copy_records: bool = True, partitions: int = 1,
                          replication_factor: int = -1, timeout: Optional[float] = None) -> bool:
    """Send ``group``'s dead letters to ``topic`` (a blocking
    :class:`kwire.admin.Admin`): the cluster's ``share.version`` checked
    (2 or above, else :class:`~kwire.errors.UnsupportedVersionError`),
    the topic created with :data:`TOPIC_CONFIGS` or, when it exists, given
    them, then the group's configs set. Returns whether the topic was
    created."""
    from kwire.admin import NewTopic

    level = admin.describe_features(timeout=timeout).finalized_features.get("share.version", (0, 0))[1]
    if level < SHARE_VERSION:
        raise UnsupportedVersionError(f"dead-letter topics need share.version {SHARE_VERSION} (KIP-1191, Kafka "
                                      f"4.4); this cluster finalizes {level}: kafka-features.sh upgrade "
                                      f"--feature share.version={SHARE_VERSION}")
    created = True
    try:
        admin.create_topics([NewTopic(topic, partitions, replication_factor, configs=TOPIC_CONFIGS)], timeout=timeout)
    except TopicAlreadyExistsError:
        created = False
        admin.incremental_alter_configs({("topic", topic): [AlterConfigOp(k, v) for k, v in TOPIC_CONFIGS.items()]},
                                        timeout=timeout)
    admin.incremental_alter_configs({("group", group): group_configs(topic, copy_records)}, timeout=timeout)
    return created

