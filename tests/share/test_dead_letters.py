"""Past ``share.delivery.count.limit`` a share group's record is archived
(never delivered again), and with the group's dead-letter topic
(KIP-1191, Kafka 4.4: ``errors.deadletterqueue.topic.name``, a topic
created with ``errors.deadletterqueue.group.enable=true``) the broker
writes it there, as it does a rejected record: kwire's acknowledgements
drive it, ``kwire share dead-letters`` sets the topic up, and
kwire.share.dead_letters reads the context headers the broker adds."""

from __future__ import annotations

import time
import uuid

import pytest

from kwire.__main__ import main
from kwire.admin import Admin
from kwire.admin_ops.configs import AlterConfigOp
from kwire.consumer import Consumer
from kwire.errors import UnsupportedVersionError
from kwire.share import AcknowledgeType
from kwire.share.dead_letters import dead_letter, set_dead_letter_topic

from .test_share_consumer import _drain, _member, _topic

pytestmark = pytest.mark.kafka


def _dead_letters(bootstrap: str, topic: str, want: int, timeout: float = 30.0) -> list:
    got = []
    with Consumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest") as c:
        c.assign([(topic, 0)])
        deadline = time.monotonic() + timeout
        while len(got) < want and time.monotonic() < deadline:
            got += [r for rs in c.poll(500).values() for r in rs]
    return got


def test_rejected_and_exhausted_records_go_to_the_dead_letter_topic(kafka, capsys):
    bootstrap = kafka.bootstrap("plaintext")
    topic = _topic(bootstrap, 1, 10)
    dlq, group = f"dlq.{topic}", f"sg-{uuid.uuid4().hex[:10]}"
    with Admin(bootstrap_servers=bootstrap) as a:
        a.incremental_alter_configs({("group", group): [
            AlterConfigOp("share.auto.offset.reset", "earliest"), AlterConfigOp("share.delivery.count.limit", "2")]})
    assert main(["share", "dead-letters", dlq, "-G", group, "-b", bootstrap]) == 0
    assert f"dead letters go to {dlq} (created topic; records copied)" in capsys.readouterr().err
    with Admin(bootstrap_servers=bootstrap) as a:           # the second time: the topic is there
        assert not set_dead_letter_topic(a, group, dlq)
        configs = a.describe_configs(topics=[dlq])[("topic", dlq)]
        assert configs["errors.deadletterqueue.group.enable"].value == "true"
        assert a.describe_configs(resources=[("group", group)])[("group", group)][
            "errors.deadletterqueue.topic.name"].value == dlq
    deliveries = []

    def judge(consumer, r):
        deliveries.append((r.offset, r.delivery_count))
        kind = {0: AcknowledgeType.REJECT, 1: AcknowledgeType.REJECT, 2: AcknowledgeType.RELEASE,
                3: AcknowledgeType.RELEASE}.get(r.offset, AcknowledgeType.ACCEPT)
        consumer.acknowledge(r, kind)

    with _member(bootstrap, group, topic, share_acknowledgement_mode="explicit") as c:
        _drain([c], lambda s: sum(s.values()) >= 12, each=judge)
        for _ in range(6):                           # the exhausted ones are not delivered a third time
            for rs in c.poll(300).values():
                for r in rs:
                    judge(c, r)
        c.commit_sync(10)
    assert sorted(deliveries) == sorted([(o, 1) for o in range(10)] + [(2, 2), (3, 2)])
    letters = {}
    for r in _dead_letters(bootstrap, dlq, 4):
        d = dead_letter(r)
        assert (d.topic, d.partition, d.group) == (topic, 0, group)
        assert r.value == b"v%d" % d.offset and r.key == b"k%d" % d.offset        # copied (copy.record.enable)
        letters[d.offset] = d
    assert sorted(letters) == [0, 1, 2, 3]
    assert [(letters[o].delivery_count, letters[o].message) for o in (0, 2)] == [
        (1, "Offset rejected by client."), (2, "Offset delivery count exceeded the threshold.")]
    assert dead_letter(r) is not None and all(dead_letter(x) is None for x in _dead_letters(bootstrap, topic, 1))


def test_a_cluster_without_share_version_2_is_refused_by_name(tansu):
    """Tansu 0.6.0 finalizes no share.version: the dead-letter set-up says
    what the cluster lacks before it changes anything."""
    with Admin(bootstrap_servers=tansu.bootstrap) as a:
        with pytest.raises(UnsupportedVersionError, match="need share.version 2 .* finalizes 0"):
            set_dead_letter_topic(a, "g", "dlq.t")
        assert "dlq.t" not in a.list_topics()
