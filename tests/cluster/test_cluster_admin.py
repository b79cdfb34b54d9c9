"""Issue 33's admin calls where one node cannot show them, on the
three-node cluster (``kafka_cluster``), with both drivers (``kw``): a
broker's configs are asked of and changed at that broker (each answers
for itself only), whichever broker the client bootstrapped from; the
metadata quorum's three voters; every broker's log dirs; a follower's
view of a partition's producers (``broker_id``)."""

from __future__ import annotations

import time
import uuid

import pytest

from kwire.admin import AlterConfigOp, NewTopic
from kwire.types import TopicPartition

pytestmark = [pytest.mark.kafka, pytest.mark.cluster]


def test_admin_calls_reach_the_broker_they_name(kw, kafka_cluster):
    topic = f"cl-admin-{uuid.uuid4().hex[:8]}"
    with kw.Admin(bootstrap_servers=kafka_cluster.broker(1).address) as a:
        got = a.describe_configs(brokers=[1, 2, 3])
        assert [got[("broker", str(n))]["broker.rack"].value for n in (1, 2, 3)] == ["rack-a", "rack-b", "rack-c"]
        a.incremental_alter_configs({("broker", "3"): [AlterConfigOp("log.cleaner.backoff.ms", "17000")]})
        try:
            deadline = time.monotonic() + 10
            while a.describe_configs(brokers=[3])[("broker", "3")]["log.cleaner.backoff.ms"].value != "17000":
                assert time.monotonic() < deadline, "broker 3 did not take its config"
                time.sleep(0.05)
            assert a.describe_configs(brokers=[2])[("broker", "2")]["log.cleaner.backoff.ms"].value == "15000"
        finally:
            a.incremental_alter_configs({("broker", "3"): [AlterConfigOp("log.cleaner.backoff.ms", op_type="delete")]})

        q = a.describe_metadata_quorum()
        assert sorted(v.replica_id for v in q.voters) == [1, 2, 3] and q.leader_id in (1, 2, 3)

        a.create_topics([NewTopic(topic, 1, 3)])
        kafka_cluster.wait_until_isr(topic, 0, 3, timeout=30)
        # a new partition's ISR is every replica at once (KRaft): each broker makes its log when the
        # metadata reaches it, a moment later
        tp = TopicPartition(topic, 0)
        deadline = time.monotonic() + 10
        while True:
            dirs = a.describe_log_dirs([1, 2, 3])
            held = [n for n in (1, 2, 3) if any(tp in d.replica_infos for d in dirs[n].values())]
            if held == [1, 2, 3]:
                break
            assert time.monotonic() < deadline, f"only brokers {held} hold {tp}"
            time.sleep(0.1)

    with kw.Producer(bootstrap_servers=kafka_cluster.bootstrap, acks="all") as p:
        p.send(topic, b"x", partition=0).get(20)
    with kw.Admin(bootstrap_servers=kafka_cluster.bootstrap) as a:
        leader = kafka_cluster.leader_of(topic, 0)
        follower = next(n for n in (1, 2, 3) if n != leader)
        deadline = time.monotonic() + 10
        while not a.describe_producers([tp], broker_id=follower)[tp]:
            assert time.monotonic() < deadline, "the follower has no producer state"
            time.sleep(0.1)
        (state,) = a.describe_producers([tp], broker_id=follower)[tp]
        assert a.describe_producers([tp])[tp][0].producer_id == state.producer_id
