"""Share groups' admin calls on Kafka 4.4, with kwire's blocking admin and
kwire.aio's (``kw``): listed by type, described (members, assignments),
their start offsets and lag listed, altered and deleted while the group is
empty (refused while it has members), the group deleted."""

from __future__ import annotations

import time

import pytest

from kwire.errors import KwireError

from .test_share_consumer import _drain, _group, _member, _topic

pytestmark = pytest.mark.kafka


def _wait(predicate, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got:
            return got
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.3)


def test_share_groups_listed_described_and_their_offsets_managed(kafka, kw):
    bootstrap = kafka.bootstrap("plaintext")
    topic, group = _topic(bootstrap, 2, 30), _group(bootstrap)
    member = _member(bootstrap, group, topic)
    with kw.Admin(bootstrap_servers=bootstrap) as admin:
        try:
            _drain([member], lambda s: len(s) == 30)
            member.commit_sync(10)
            listed = {g.group_id: g for g in admin.list_groups(types=["share"])}
            assert listed[group].group_type == "share"
            assert group not in {g.group_id for g in admin.list_groups(types=["consumer", "classic"])}
            desc = admin.describe_share_groups([group])[group]
            assert desc.state == "Stable" and len(desc.members) == 1
            m = desc.members[0]
            assert m.subscribed_topics == (topic,) and {tp.partition for tp in m.assignment} == {0, 1}
            # every record accepted: no lag (the start offset itself moves when the coordinator writes its state)
            offsets = _wait(lambda: (lambda o: o if len(o) == 2 and all(v.lag == 0 and v.start_offset is not None
                                                                        for v in o.values()) else None)(
                admin.list_share_group_offsets(group)))
            assert sorted(tp.partition for tp in offsets) == [0, 1]
            with pytest.raises(KwireError):
                admin.alter_share_group_offsets(group, {(topic, 0): 5})       # the group has a member
        finally:
            member.close()
        _wait(lambda: admin.describe_share_groups([group])[group].state == "Empty")
        admin.alter_share_group_offsets(group, {(topic, 0): 5})
        assert admin.list_share_group_offsets(group, [(topic, 0)])[(topic, 0)].start_offset == 5
        again = _member(bootstrap, group, topic)
        try:
            seen = _drain([again], lambda s: len(s) == 10)
            assert sorted(seen) == [(0, o) for o in range(5, 15)]
        finally:
            again.close()
        _wait(lambda: admin.describe_share_groups([group])[group].state == "Empty")
        admin.delete_share_group_offsets(group, [topic])
        assert admin.list_share_group_offsets(group) == {}
        admin.delete_groups([group])
        assert group not in {g.group_id for g in admin.list_groups(types=["share"])}
