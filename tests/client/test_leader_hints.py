"""Leader hints (KIP-951): what the metadata cache takes in from a Produce or
Fetch answer that names the partition's new leader, and what it keeps when
an older Metadata answer comes after it.

The hints themselves come from Apache Kafka's answers: a live leader move
and a killed leader on the three-node cluster are
tests/cluster/test_leader_hints.py. Here the cache's rules, on answers built
by the generated classes and passed through the wire encoding a broker's
bytes go through."""

from __future__ import annotations

import uuid

from kwire.client import Broker, ClusterMetadata, leader_hint
from kwire.protocol import messages as m
from kwire.protocol.api_keys import ErrorCode

TOPIC_ID = uuid.uuid4()
ZERO = uuid.UUID(int=0)


def _wire(obj, version):
    cls = type(obj)
    return cls.decode(cls.encode_bytes(obj, version), version)


def _metadata(leader: int, epoch: int, brokers=(1, 2, 3)):
    r = m.MetadataResponse
    return _wire(r(brokers=[r.MetadataResponseBroker(node_id=n, host="h%d" % n, port=9000 + n) for n in brokers],
                   topics=[r.MetadataResponseTopic(name="t", topic_id=TOPIC_ID, partitions=[
                       r.MetadataResponsePartition(partition_index=0, leader_id=leader, leader_epoch=epoch,
                                                   replica_nodes=[1, 2, 3], isr_nodes=[1, 2, 3]),
                       r.MetadataResponsePartition(partition_index=1, leader_id=2, leader_epoch=4,
                                                   replica_nodes=[2, 3, 1], isr_nodes=[2, 3, 1])])]), 12)


def _cluster(leader: int = 1, epoch: int = 5) -> ClusterMetadata:
    c = ClusterMetadata()
    c.update(_metadata(leader, epoch), None)
    return c


def _produce_answer(version: int, code: int, leader: int, epoch: int, endpoints=()):
    r = m.ProduceResponse
    p = r.PartitionProduceResponse(index=0, error_code=code)
    if version >= 10:
        p.current_leader = r.LeaderIdAndEpoch(leader_id=leader, leader_epoch=epoch)
    resp = r(responses=[r.TopicProduceResponse(name="t", topic_id=TOPIC_ID if version >= 13 else ZERO,
                                               partition_responses=[p])],
             node_endpoints=[r.NodeEndpoint(node_id=n, host=h, port=port, rack=k) for n, h, port, k in endpoints])
    return _wire(resp, version)


def test_a_newer_hint_moves_the_leader_and_keeps_the_replicas():
    c = _cluster()
    before = c.partitions["t"]
    generation = c.generation.value
    assert c.take_leader_hints({("t", 0): (2, 6)}, []) == {("t", 0)}
    info = c.partitions["t"][0]
    assert (info.leader, info.leader_epoch, info.replicas, info.isr) == (2, 6, (1, 2, 3), (1, 2, 3))
    assert c.partitions["t"][1] is before[1] and before[0].leader == 1     # the old dict left as it was
    assert c.generation.value == generation                               # the partitions are the same


def test_a_stale_or_unknown_hint_changes_nothing():
    c = _cluster()
    assert c.take_leader_hints({("t", 0): (2, 5)}, []) == set()          # the same epoch
    assert c.take_leader_hints({("t", 0): (2, 4)}, []) == set()          # older
    assert c.take_leader_hints({("t", 7): (2, 9)}, []) == set()          # a partition not cached
    assert c.take_leader_hints({("u", 0): (2, 9)}, []) == set()          # a topic not cached
    assert c.take_leader_hints({("t", 0): (9, 9)}, []) == set()          # a node neither known nor named
    assert c.leader_for("t", 0) == 1 and c.partitions["t"][0].leader_epoch == 5


def test_a_hinted_leader_new_to_the_client_is_added_from_the_endpoints():
    c = _cluster()
    resp = _produce_answer(11, ErrorCode.NOT_LEADER_OR_FOLLOWER, 4, 6, [(4, "h4", 9004, "rack-d")])
    p = resp.responses[0].partition_responses[0]
    assert leader_hint(p.error_code, p) == (4, 6)
    assert c.take_leader_hints({("t", 0): leader_hint(p.error_code, p)}, resp.node_endpoints) == {("t", 0)}
    assert c.leader_for("t", 0) == 4
    assert c.brokers[4] == Broker(4, "h4", 9004, "rack-d") and set(c.brokers) == {1, 2, 3, 4}


def test_only_not_leader_and_fenced_epoch_answers_carry_a_hint():
    for code, version, hint in [(ErrorCode.NOT_LEADER_OR_FOLLOWER, 10, (2, 6)),
                                (ErrorCode.FENCED_LEADER_EPOCH, 13, (2, 6)),
                                (ErrorCode.NOT_LEADER_OR_FOLLOWER, 9, None),     # before KIP-951: no field
                                (ErrorCode.NOT_ENOUGH_REPLICAS, 11, None),
                                (ErrorCode.NONE, 11, None)]:
        p = _produce_answer(version, code, 2, 6).responses[0].partition_responses[0]
        assert leader_hint(p.error_code, p) == hint, (code, version)
    p = _produce_answer(11, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1).responses[0].partition_responses[0]
    assert leader_hint(p.error_code, p) is None                            # the broker knows no leader either
    r = m.FetchResponse
    fetch = _wire(r(responses=[r.FetchableTopicResponse(topic_id=TOPIC_ID, partitions=[r.PartitionData(
        partition_index=0, error_code=ErrorCode.FENCED_LEADER_EPOCH,
        current_leader=r.LeaderIdAndEpoch(leader_id=3, leader_epoch=7))])]), 16)
    p = fetch.responses[0].partitions[0]
    assert leader_hint(p.error_code, p) == (3, 7)


def test_an_older_metadata_answer_does_not_undo_a_hint():
    c = _cluster()
    c.take_leader_hints({("t", 0): (2, 6)}, [])
    c.update(_metadata(1, 5), None)           # a broker that has not heard of the election yet
    assert (c.leader_for("t", 0), c.partitions["t"][0].leader_epoch) == (2, 6)
    c.update(_metadata(3, 7), None)           # a newer answer is taken in
    assert (c.leader_for("t", 0), c.partitions["t"][0].leader_epoch) == (3, 7)
    c.update(_metadata(1, 8, brokers=(1, 2)), None)
    assert c.leader_for("t", 0) == 1


def test_a_recreated_topic_takes_its_new_epochs():
    c = _cluster(epoch=9)
    global TOPIC_ID
    old, TOPIC_ID = TOPIC_ID, uuid.uuid4()     # the same name, another topic: its epochs start again
    try:
        c.update(_metadata(2, 0), None)
    finally:
        TOPIC_ID = old
    assert (c.leader_for("t", 0), c.partitions["t"][0].leader_epoch) == (2, 0)


def _refused(leader: int, epoch: int):
    return _produce_answer(11, ErrorCode.NOT_LEADER_OR_FOLLOWER, leader, epoch).responses[0].partition_responses[0]


def test_refusals_after_the_hint_was_taken_go_to_the_new_leader_too():
    from kwire.client import Client
    from kwire.config import PRODUCER, resolve

    client = Client(resolve(PRODUCER, {"bootstrap_servers": "127.0.0.1:1"}, {}, what="producer"))
    try:
        client.cluster.update(_metadata(1, 5), None)
        # the first refusal of a request sent under epoch 5 moves the leader
        assert client.follow_leader_hints([(("t", 0), _refused(2, 6), 5)], [], "Produce") == {("t", 0)}
        # the next ones (in flight meanwhile) name the same leader: not newer, yet their partition has moved
        assert client.follow_leader_hints([(("t", 0), _refused(2, 6), 5)], [], "Produce") == {("t", 0)}
        # a request sent to the new leader and refused by it with a hint no newer than what is known: a refresh
        assert client.follow_leader_hints([(("t", 0), _refused(2, 6), 6)], [], "Produce") == set()
        # no hint, or hints off: a refresh, as before
        p = _produce_answer(9, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1).responses[0].partition_responses[0]
        assert client.follow_leader_hints([(("t", 1), p, 4)], [], "Produce") == set()
        client.leader_hints = False
        assert client.follow_leader_hints([(("t", 1), _refused(3, 9), 4)], [], "Produce") == set()
        assert client.cluster.leader_for("t", 1) == 2
    finally:
        client.close()
