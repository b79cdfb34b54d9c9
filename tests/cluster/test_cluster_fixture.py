"""The three-node cluster of tests/support/kafka_cluster.py and its fault
primitives, on their own: what the fault tests build on.

- the shape: three registered brokers on racks rack-a/b/c behind their
  proxies, the cluster-wide settings (min ISR 2, the rack-aware replica
  selector), a topic replicated three times with its full ISR;
- SIGKILL of a partition's leader: another replica leads, the ISR shrinks
  to two, a new client whose first bootstrap address is the dead broker
  connects through the others at once; the restarted node (same directory
  and ports) rejoins the ISR;
- SIGTERM (controlled shutdown) moves leadership away before the node exits;
- SIGSTOP: the hung leader is fenced and replaced; SIGCONT brings it back;
- a black-holed proxy: the client gets no answer through it (bounded), while
  replication goes on; healed, it answers again;
- a bootstrap list of a closed port, then a black-holed broker (its proxy
  takes the connection and answers nothing), then a live broker: a new
  producer, consumer and admin each get through within their timeouts;
- ``restore`` undoes every fault at once (what the fixture does after each test).
"""

from __future__ import annotations

import time
import uuid

import pytest

from kwire.admin import Admin, NewTopic
from kwire.consumer import Consumer
from kwire.devbroker import free_port
from kwire.producer import Producer

pytestmark = [pytest.mark.kafka, pytest.mark.cluster]


def _topic(cluster, partitions: int = 1) -> str:
    name = f"fixture-{uuid.uuid4().hex[:8]}"
    with cluster.admin() as a:
        a.create_topics([NewTopic(name, partitions, 3)])
    cluster.wait_until_isr(name, 0, 3, timeout=30)
    return name


def _new_leader(cluster, topic: str, old: int, timeout: float = 30) -> int:
    return cluster.wait_until(f"{topic}-0 led by another node than {old}",
                              lambda: (lambda ldr: ldr if ldr not in (-1, old) else None)(cluster.leader_of(topic, 0)),
                              timeout)


def test_shape(kafka_cluster):
    with Admin({"bootstrap.servers": kafka_cluster.bootstrap}) as a:         # as a client sees it
        c = a.describe_cluster(timeout=10)
        assert c.cluster_id == kafka_cluster.cluster_id
        assert sorted((b.node_id, b.rack) for b in c.brokers) == [(1, "rack-a"), (2, "rack-b"), (3, "rack-c")]
        advertised = {f"{b.host}:{b.port}" for b in c.brokers}
        assert advertised == {n.proxy.address for n in kafka_cluster.brokers}     # clients go through the proxies
    with Admin({"bootstrap.servers": kafka_cluster.broker(1).address}) as a:     # a broker's own configs: ask it
        entries = a.describe_configs(brokers=[1], timeout=10)[("broker", "1")]
    assert entries["min.insync.replicas"].value == "2"
    assert entries["replica.selector.class"].value == "org.apache.kafka.common.replica.RackAwareReplicaSelector"
    assert entries["broker.rack"].value == "rack-a"
    topic = _topic(kafka_cluster)
    p = kafka_cluster.partitions(topic)[0]
    assert sorted(p.replicas) == [1, 2, 3] and sorted(p.isr) == [1, 2, 3]


def test_kill_and_restart(kafka_cluster):
    topic = _topic(kafka_cluster)
    leader = kafka_cluster.leader_of(topic, 0)
    node = kafka_cluster.broker(leader)
    old_pid = node.pid
    node.kill()
    assert not node.alive
    new = _new_leader(kafka_cluster, topic, leader)
    assert new != leader
    isr = kafka_cluster.wait_until(f"{topic}-0 ISR without {leader}",
                                   lambda: (lambda i: i if leader not in i else None)(kafka_cluster.partitions(topic)[0].isr),
                                   30)
    assert len(isr) == 2
    # a new client whose first bootstrap address is the dead broker connects through the others at once
    first_dead = ",".join([node.address] + [n.address for n in kafka_cluster.brokers if n is not node])
    t0 = time.monotonic()
    with Admin({"bootstrap.servers": first_dead, "request.timeout.ms": 10000}) as a:
        assert sorted(b.node_id for b in a.describe_cluster(timeout=10).brokers) == sorted(
            n.node_id for n in kafka_cluster.brokers if n is not node)
    assert time.monotonic() - t0 < 5
    took = node.restart(kafka_cluster)
    assert node.pid != old_pid and took < 120
    assert sorted(kafka_cluster.wait_until_isr(topic, 0, 3, timeout=60)) == [1, 2, 3]


def test_controlled_shutdown(kafka_cluster):
    topic = _topic(kafka_cluster)
    leader = kafka_cluster.leader_of(topic, 0)
    node = kafka_cluster.broker(leader)
    took = node.stop()
    assert not node.alive and took < 30
    assert kafka_cluster.leader_of(topic, 0) not in (-1, leader)      # moved before the node exited
    node.restart(kafka_cluster)
    kafka_cluster.wait_until_isr(topic, 0, 3, timeout=60)


def test_pause_and_resume(kafka_cluster):
    topic = _topic(kafka_cluster)
    leader = kafka_cluster.leader_of(topic, 0)
    node = kafka_cluster.broker(leader)
    node.pause()
    try:
        assert node.paused and not node.running
        _new_leader(kafka_cluster, topic, leader)      # fenced once its heartbeats stop (broker.session.timeout.ms)
    finally:
        node.resume()
    kafka_cluster.wait_for_node(node)
    kafka_cluster.wait_until_isr(topic, 0, 3, timeout=60)


def test_black_hole_and_heal(kafka_cluster):
    node = kafka_cluster.brokers[0]
    node.black_hole()
    try:
        t0 = time.monotonic()
        with Admin({"bootstrap.servers": node.address, "request.timeout.ms": 1000,
                    "socket.connection.setup.timeout.ms": 1000}) as a:
            with pytest.raises(Exception):
                a.describe_cluster(timeout=2)
        assert time.monotonic() - t0 < 15
        # replication (and the harness, on the INTERNAL listeners) does not go through the proxy
        assert kafka_cluster.registered_brokers() == [1, 2, 3]
    finally:
        node.heal()
    with Admin({"bootstrap.servers": node.address}) as a:
        assert len(a.describe_cluster(timeout=10).brokers) == 3


def test_bootstrap_past_a_closed_port_and_a_black_holed_broker(kafka_cluster):
    """Each dead address costs at most one connection attempt: refused at once, or
    ``socket_connection_setup_timeout_ms`` (2 s) without an answer; then the live one."""
    hole, live, other = kafka_cluster.brokers
    topic = f"fixture-boot-{uuid.uuid4().hex[:8]}"
    kafka_cluster.create_topic(topic, [[live.node_id, other.node_id, hole.node_id]])    # led by the live one
    hole.black_hole()
    bootstrap = f"127.0.0.1:{free_port()},{hole.address},{live.address}"
    cfg = {"bootstrap_servers": bootstrap, "socket_connection_setup_timeout_ms": 2000, "request_timeout_ms": 10000}
    took, tried = {}, {}
    t0, n0 = time.monotonic(), hole.proxy.connections
    with Admin(**cfg) as a:
        assert sorted(b.node_id for b in a.describe_cluster(timeout=10).brokers) == [1, 2, 3]
    took["admin"], tried["admin"] = time.monotonic() - t0, hole.proxy.connections - n0
    t0, n0 = time.monotonic(), hole.proxy.connections
    with Producer(linger_ms=0, **cfg) as p:
        assert p.send(topic, b"through", partition=0).get(15).offset == 0
    took["producer"], tried["producer"] = time.monotonic() - t0, hole.proxy.connections - n0
    t0, n0 = time.monotonic(), hole.proxy.connections
    with Consumer(auto_offset_reset="earliest", **cfg) as c:
        c.assign([(topic, 0)])
        got = []
        while not got and time.monotonic() - t0 < 15:
            got = [r.value for recs in c.poll(200).values() for r in recs]
        assert got == [b"through"]
    took["consumer"], tried["consumer"] = time.monotonic() - t0, hole.proxy.connections - n0
    assert max(took.values()) < 10, took
    assert sum(tried.values()) >= 1, "no client went through the black-holed address (least_loaded_node's rotation)"
    print("\nbootstrap past a closed port and a black-holed broker: "
          + ", ".join(f"{k} {v:.1f} s ({tried[k]} attempts at the black hole)" for k, v in took.items()))


def test_restore_undoes_every_fault(kafka_cluster):
    a, b, c = kafka_cluster.brokers
    a.kill()
    b.black_hole()
    c.pause()
    undone = kafka_cluster.restore()
    assert len(undone) == 3, undone
    kafka_cluster.check_healthy()
    assert all(n.running for n in kafka_cluster.nodes) and not any(n.proxy.holing for n in kafka_cluster.brokers)
