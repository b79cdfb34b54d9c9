"""OffsetDelete on Apache Kafka (the ``kafka`` fixture), with both drivers
(``kw``): a group's committed offsets of some partitions deleted, the
others kept; refused (GROUP_SUBSCRIBED_TO_TOPIC, per partition) while a
member is subscribed to the topic; an unknown group is GROUP_ID_NOT_FOUND."""

from __future__ import annotations

import time
import uuid

import pytest

from kwire.admin import NewTopic
from kwire.errors import GroupIdNotFoundError, GroupSubscribedToTopicError
from kwire.types import TopicPartition

pytestmark = pytest.mark.kafka


def test_delete_consumer_group_offsets(kw, kafka):
    topic, group = f"offdel-{uuid.uuid4().hex[:8]}", f"offdel-{uuid.uuid4().hex[:8]}"
    with kw.Admin(bootstrap_servers=kafka.bootstrap()) as a:
        a.create_topics([NewTopic(topic, 2)])
        a.alter_group_offsets(group, {(topic, 0): 0, (topic, 1): 0})
        a.delete_consumer_group_offsets(group, [(topic, 0)])
        assert list(a.list_group_offsets(group)) == [TopicPartition(topic, 1)]
        with pytest.raises(GroupIdNotFoundError):
            a.delete_consumer_group_offsets(f"none-{uuid.uuid4().hex[:8]}", [(topic, 0)])
        with kw.Consumer(bootstrap_servers=kafka.bootstrap(), group_id=group, session_timeout_ms=6000,
                         heartbeat_interval_ms=300) as c:
            c.subscribe([topic])
            deadline = time.monotonic() + 30
            while not c.assignment():
                assert time.monotonic() < deadline, "no assignment"
                c.poll(100)
            with pytest.raises(GroupSubscribedToTopicError, match=f"{topic}.*1"):
                a.delete_consumer_group_offsets(group, [(topic, 1)])
        a.delete_topics([topic])
