"""A three-broker Apache Kafka cluster (KRaft) on loopback, with real faults.

Built from the same jars as the single node of :mod:`support.kafka`
(:func:`support.kafka.ensure_kafka`), one JVM per node, each with its own
directory (configuration, ``data/`` log dir, ``logs/``), ``broker.rack``
``rack-a``/``rack-b``/``rack-c`` and three listeners:

==============  ==========================================================
``INTERNAL``    PLAINTEXT, inter-broker replication (never proxied)
``EXTERNAL``    PLAINTEXT for clients; advertised as the node's
                :class:`support.proxies.FaultProxy` when ``proxies=True``
                (the fixture), so a test can partition one broker from the
                client while replication keeps flowing on ``INTERNAL``
``CONTROLLER``  KRaft's quorum listener
==============  ==========================================================

Cluster-wide settings: ``default.replication.factor=3``,
``min.insync.replicas=2``, the offsets, transaction and share-state topics
with replication factor 3 and min ISR 2, ``unclean.leader.election.enable``
false (a test's topic may set it), and
``replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector``
(KIP-392: a consumer with ``client.rack`` is sent to its rack's replica).
Failure detection is shortened for tests, not disabled:
``broker.session.timeout.ms=6000`` (heartbeat every 1 s) and
``replica.lag.time.max.ms=10000``; the fault figures the tests report
depend on these.

The shape: three combined nodes (``process.roles=broker,controller``, a
three-voter quorum), not one controller and three brokers. Measured on the
2-core test machine (``python -m support.kafka_cluster measure``: both
shapes, 512 MiB heap each, -XX:+UseSerialGC; start is from the first
format to three registered brokers, RSS after a 3x3 topic and 5 s):

===========================  =========  ==================================
shape                        start (s)  RSS (MiB), all nodes (per node)
===========================  =========  ==================================
3 combined nodes             5.1        1037 (352, 342, 344)
1 controller + 3 brokers     5.4        1206 (329, 353, 327; ctrl 196)
===========================  =========  ==================================

One JVM fewer saves memory and start time on 2 cores, and a quorum of three
survives the loss of any one node, so every single-node fault a test makes
(SIGKILL, SIGSTOP, SIGTERM, partition) keeps a quorum; killing the node that
is also the active controller adds a controller election to the fault, which
is what a production cluster of combined nodes sees too. The separate
controller shape stays available (``controllers=1``) for the measurement
and for a test that must keep the controller out of the fault.

Faults, per node (:class:`ClusterNode`), each bounded in time and aimed at
the node's PID: :meth:`~ClusterNode.kill` (SIGKILL), :meth:`~ClusterNode.pause`
/ :meth:`~ClusterNode.resume` (SIGSTOP / SIGCONT), :meth:`~ClusterNode.stop`
(SIGTERM: a controlled shutdown, waited for; SIGKILL after a bound),
:meth:`~ClusterNode.restart` (the same directory, configuration and ports),
and on its proxy :meth:`~ClusterNode.black_hole` / :meth:`~ClusterNode.heal`
/ :meth:`~ClusterNode.cut_all`. :meth:`KafkaCluster.restore` undoes all of
them (and removes a broker a test added) and :meth:`KafkaCluster.check_healthy` proves the cluster whole again
(three registered brokers, every partition's ISR full); the fixture calls
both before each test. :meth:`KafkaCluster.stop` stops every node by PID and
deletes the directories (also at interpreter exit, and each node dies with
the thread that started it, on Linux).

Membership: :meth:`KafkaCluster.add_broker` starts a broker-only node (id 4,
rack ``rack-d`` by default; ``process.roles=broker``, the same quorum and
cluster id, its own FaultProxy) on the running cluster and returns once it is
registered; :meth:`KafkaCluster.create_topic` places partitions on given
nodes (CreateTopics with a replica assignment). :meth:`KafkaCluster.retire_broker`
takes it out again: its replicas moved to the other brokers
(``Admin.alter_partition_reassignments``), a controlled shutdown, KRaft's
UnregisterBroker (``Admin.unregister_broker``); its
proxy keeps listening so that a test can count the connections clients still
try (``proxy.connections``). :meth:`KafkaCluster.remove_broker` also stops
the proxy and deletes the node's directory; ``restore`` does that to any
broker a test added or retired, and ``stop`` stops it with the rest.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from kwire.devbroker import free_ports
from support.kafka import (_LOG4J2, BIND_RETRIES, KAFKA_VERSION, LOG_TAIL, STOP_TIMEOUT, KafkaStartError, Progress,
                           _cli_start, _cluster_id, _is_our_broker, _java, _launch, _log_tail, _require, _rss, _say,
                           _stop_pid, ensure_kafka, lost_a_port)
from support.proxies import FaultProxy

HOST = "127.0.0.1"
HEAP = "512m"
READY_TIMEOUT = 180.0     # seconds for the whole cluster to answer (three JVMs on two cores)
NODE_TIMEOUT = 120.0      # seconds for one restarted node to rejoin
FAULT_TIMEOUT = 30.0      # seconds any one fault may take (a kill, a pause, a controlled shutdown)
RACKS = ("rack-a", "rack-b", "rack-c")
EXTRA_RACK = "rack-d"     # the rack of a broker added to a running cluster (add_broker)
CONTROLLER_ID = 100       # node id of the separate controller (controllers=1)
SHARE_KEY = 2             # FindCoordinator's key type for a share-partition's state (KIP-932)

def _cluster_properties(node_id: int, roles: str, workdir: Path, ports: Dict[str, int], voters: str,
                        rack: Optional[str], advertised_external: Optional[str]) -> Dict[str, str]:
    listeners = []
    if "broker" in roles:
        listeners += [f"INTERNAL://{HOST}:{ports['internal']}", f"EXTERNAL://{HOST}:{ports['external']}"]
    if "controller" in roles:
        listeners.append(f"CONTROLLER://{HOST}:{ports['controller']}")
    props = {
        "process.roles": roles,
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "controller.listener.names": "CONTROLLER",
        "listeners": ",".join(listeners),
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(workdir / "data"),
        # shortened failure detection (see the module doc)
        "broker.session.timeout.ms": "6000",
        "broker.heartbeat.interval.ms": "1000",
    }
    if "broker" in roles:
        external = advertised_external or f"{HOST}:{ports['external']}"
        props.update({
            "advertised.listeners": f"INTERNAL://{HOST}:{ports['internal']},EXTERNAL://{external}",
            "inter.broker.listener.name": "INTERNAL",
            "broker.rack": rack or "",
            "num.partitions": "3",
            "default.replication.factor": "3",
            "min.insync.replicas": "2",
            "unclean.leader.election.enable": "false",
            "offsets.topic.replication.factor": "3",
            "offsets.topic.num.partitions": "6",
            "transaction.state.log.replication.factor": "3",
            "transaction.state.log.min.isr": "2",
            "transaction.state.log.num.partitions": "6",
            "share.coordinator.state.topic.replication.factor": "3",
            "share.coordinator.state.topic.min.isr": "2",
            # share groups' bounds lowered so a test group may fail over within seconds (the defaults stay)
            "group.share.min.session.timeout.ms": "6000",
            "group.share.min.heartbeat.interval.ms": "1000",
            "group.share.min.record.lock.duration.ms": "5000",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
            "replica.lag.time.max.ms": "10000",
            "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
        })
    return props


def _proc_state(pid: int) -> Optional[str]:
    """The state letter of /proc/<pid>/status ("R", "S", "T" stopped, "Z"...), None when gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("State:"):
                    return line.split()[1]
    except OSError:
        return None
    return None


def _reap(proc: Optional[subprocess.Popen], timeout: float) -> None:
    if proc is not None:
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass


@dataclass
class ClusterNode:
    """One KRaft node of a :class:`KafkaCluster` (a broker unless ``node_id`` is
    :data:`CONTROLLER_ID`). ``address`` is what clients use (the proxy's, when
    there is one), ``direct`` the broker's own EXTERNAL listener."""

    node_id: int
    roles: str
    workdir: Path
    ports: Dict[str, int]
    rack: Optional[str]
    launch_args: tuple = field(repr=False, default=())
    proxy: Optional[FaultProxy] = field(default=None, repr=False)
    process: Optional[subprocess.Popen] = field(default=None, repr=False)
    added: bool = False       # joined the running cluster (KafkaCluster.add_broker): restore() removes it
    retired: bool = False     # moved off, stopped and unregistered (KafkaCluster.retire_broker); its proxy listens on

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def pid(self) -> int:
        return self.process.pid if self.process is not None else -1

    @property
    def direct(self) -> str:
        return f"{HOST}:{self.ports['external']}"

    @property
    def address(self) -> str:
        return self.proxy.address if self.proxy is not None else self.direct

    @property
    def running(self) -> bool:
        """The process exists and is not stopped (SIGSTOP)."""
        return self.process is not None and self.process.poll() is None and _proc_state(self.pid) not in (None, "T", "Z")

    @property
    def paused(self) -> bool:
        return self.process is not None and self.process.poll() is None and _proc_state(self.pid) == "T"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def rss_bytes(self) -> int:
        return _rss(self.pid) if self.alive else 0

    def log_tail(self, limit: int = LOG_TAIL) -> str:
        return _log_tail(self.workdir, limit, f"node {self.node_id} ")

    # ---- faults: each bounded in time, each aimed at this node's PID ----

    def _signal(self, sig: int) -> bool:
        if not self.alive:
            return False
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def kill(self, timeout: float = FAULT_TIMEOUT) -> None:
        """SIGKILL, returning once the process is gone (reaped)."""
        if self._signal(signal.SIGKILL):
            self.process.wait(timeout)

    def pause(self, timeout: float = FAULT_TIMEOUT) -> None:
        """SIGSTOP (a hung node: its sockets stay open, nothing answers), returning once it is stopped."""
        if self._signal(signal.SIGSTOP):
            deadline = time.monotonic() + timeout
            while _proc_state(self.pid) != "T":
                if time.monotonic() > deadline:
                    raise TimeoutError(f"node {self.node_id} (pid {self.pid}) not stopped after {timeout:g} s")
                time.sleep(0.01)

    def resume(self) -> None:
        """SIGCONT (the node goes on where it stopped)."""
        self._signal(signal.SIGCONT)

    def stop(self, timeout: float = FAULT_TIMEOUT) -> float:
        """SIGTERM (a controlled shutdown: leadership moves away first), waited
        for; SIGKILL after ``timeout`` s. Returns the seconds it took."""
        t0 = time.monotonic()
        if self.alive:
            self.resume()                    # a paused JVM cannot shut down
            _stop_pid(self.pid, timeout)
            _reap(self.process, 1)
        return time.monotonic() - t0

    def start(self) -> None:
        """Run the node on its directory (after kill/stop); returns at once (see :meth:`restart`)."""
        if self.alive:
            raise RuntimeError(f"node {self.node_id} is running (pid {self.pid})")
        self.process = _launch(*self.launch_args)

    def restart(self, cluster: "KafkaCluster", timeout: float = NODE_TIMEOUT, *, kill: bool = False) -> float:
        """Stop the node (controlled shutdown, or SIGKILL with ``kill``) if it runs, start it again
        on the same data, configuration and ports, and return once it is a registered broker
        again (seconds it took)."""
        t0 = time.monotonic()
        if self.alive:
            self.kill() if kill else self.stop()
        self.start()
        cluster.wait_for_node(self, timeout)
        return time.monotonic() - t0

    def black_hole(self) -> None:
        """The client's side of a network partition: its connections to this broker stay
        open and new ones are accepted, but no byte gets through either way until :meth:`heal`
        (then the held bytes flow, as TCP would retransmit them). Replication is untouched."""
        self._need_proxy().black_hole()

    def heal(self) -> None:
        if self.proxy is not None:
            self.proxy.heal()

    def cut_all(self) -> None:
        """Close every client connection to this broker now (they may reconnect)."""
        self._need_proxy().cut_all()

    def _need_proxy(self) -> FaultProxy:
        if self.proxy is None:
            raise RuntimeError("this cluster was started without proxies (proxies=True)")
        return self.proxy

    def state(self) -> dict:
        return {"node_id": self.node_id, "roles": self.roles, "pid": self.pid, "workdir": str(self.workdir),
                "rack": self.rack, "address": self.address if self.is_broker else None,
                "log": str(self.workdir / "logs" / "server.log")}


def _write_node(n: ClusterNode, voters: str, libs: Path, heap: str, tie_to_parent: bool, proxies: bool,
                overrides: Optional[Dict[str, str]], cluster_id: str) -> subprocess.Popen:
    """The node's directory, proxy, properties and log4j file; returns its StorageTool format process."""
    (n.workdir / "logs").mkdir(parents=True)
    if n.is_broker and proxies:
        n.proxy = FaultProxy((HOST, n.ports["external"]))
    props = _cluster_properties(n.node_id, n.roles, n.workdir, n.ports, voters, n.rack,
                                n.proxy.address if n.proxy is not None else None)
    props.update(overrides or {})
    (n.workdir / "server.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    (n.workdir / "log4j2.properties").write_text(_LOG4J2.format(log=n.workdir / "logs" / "server.log"))
    n.launch_args = (libs, n.workdir, heap, tie_to_parent)
    return subprocess.Popen(
        _java(libs, "kafka.tools.StorageTool",
              ["format", f"--cluster-id={cluster_id}", "-c", str(n.workdir / "server.properties")],
              heap="256m", log4j=n.workdir / "log4j2.properties"),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _formatted(n: ClusterNode, fmt: subprocess.Popen, timeout: float) -> None:
    out, _ = fmt.communicate(timeout=timeout)
    if fmt.returncode != 0:
        raise KafkaStartError(f"StorageTool format of node {n.node_id} failed (exit {fmt.returncode}):\n"
                              f"{out[-LOG_TAIL:]}")


def _stop_all(nodes: List[ClusterNode], root: str) -> None:
    """The end of a cluster whose directories go with it: SIGKILL by PID. A
    controlled shutdown of every node at once waits out STOP_TIMEOUT for the
    nodes that lose the quorum first (20 s each), and nothing is kept."""
    try:
        for n in nodes:
            if n.alive:
                try:
                    os.kill(n.pid, signal.SIGKILL)    # (a SIGSTOPped node dies too)
                except ProcessLookupError:
                    pass
        for n in nodes:
            _reap(n.process, STOP_TIMEOUT)
        for n in nodes:
            if n.proxy is not None:
                n.heal()
                n.proxy.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class KafkaCluster:
    """A running cluster; ``nodes`` every node, ``brokers`` those with the broker role
    (by node id 1..3), ``bootstrap`` the brokers' client addresses joined by commas."""

    root: str
    cluster_id: str
    nodes: List[ClusterNode]
    version: str = KAFKA_VERSION
    startup_seconds: float = 0.0
    _setup: dict = field(default_factory=dict, repr=False)     # what add_broker needs of start_cluster's arguments

    def __post_init__(self) -> None:
        self._finalizer = weakref.finalize(self, _stop_all, self.nodes, self.root)

    @property
    def brokers(self) -> List[ClusterNode]:
        return [n for n in self.nodes if n.is_broker and not n.retired]

    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.brokers)

    def broker(self, node_id: int) -> ClusterNode:
        for n in self.brokers:
            if n.node_id == node_id:
                return n
        raise KeyError(node_id)

    def rss_bytes(self) -> int:
        return sum(n.rss_bytes() for n in self.nodes)

    def log_tail(self, limit: int = LOG_TAIL // 2) -> str:
        return "\n".join(n.log_tail(limit) for n in self.nodes)

    @property
    def internal_bootstrap(self) -> str:
        """The brokers' INTERNAL listeners: a client bootstrapped there is sent the INTERNAL
        addresses in metadata, so it never goes through the proxies (the harness's view)."""
        running = [n for n in self.brokers if n.running]          # the running first
        return ",".join(f"{HOST}:{n.ports['internal']}" for n in running + [n for n in self.brokers if n not in running])

    def admin(self, **extra):
        """A kwire Admin on the INTERNAL listeners (see :attr:`internal_bootstrap`): what
        the harness asks the cluster is not disturbed by a partition made at a proxy."""
        from kwire.admin import Admin

        return Admin({"bootstrap.servers": self.internal_bootstrap, "request.timeout.ms": 3000,
                      "reconnect.backoff.max.ms": 500, **extra})

    # ---- questions ----

    def registered_brokers(self, admin=None) -> List[int]:
        """The node ids the cluster answers DescribeCluster with (fenced ones are left out)."""
        if admin is None:
            with self.admin() as a:
                return self.registered_brokers(a)
        return sorted(b.node_id for b in admin.describe_cluster(timeout=5).brokers)

    def partitions(self, topic: str, admin=None):
        if admin is None:
            with self.admin() as a:
                return self.partitions(topic, a)
        return {p.partition: p for p in admin.describe_topics([topic], timeout=5)[topic].partitions}

    def leader_of(self, topic: str, partition: int, admin=None) -> int:
        """The node id of the partition's leader as the cluster's metadata says now (-1: none)."""
        return self.partitions(topic, admin)[partition].leader

    def wait_until(self, what: str, check, timeout: float) -> object:
        """Calls ``check()`` until it returns something true (or ``timeout`` s: TimeoutError naming ``what``);
        a :class:`KafkaStartError` it raises (a node exited) is raised at once."""
        deadline = time.monotonic() + timeout
        last: object = None
        while True:
            try:
                got = check()
                if got:
                    return got
                last = got
            except KafkaStartError:
                raise                # a node exited: waiting longer cannot help (it waited out the whole bound)
            except Exception as e:  # noqa: BLE001 - a cluster in flux: anything may fail, retried until the deadline
                last = e
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not within {timeout:g} s (last: {last!r})")
            time.sleep(0.2)

    def transaction_coordinator(self, tid: str, timeout: float = 60.0) -> int:
        """The node the cluster names as the transactional id ``tid``'s transaction coordinator now
        (FindCoordinator, key type TRANSACTION, through the INTERNAL listeners: a proxy's fault
        does not hide it), retried while the cluster has none to name."""
        from kwire.coordinator import TRANSACTION_KEY

        return self.coordinator(tid, TRANSACTION_KEY, timeout)

    def share_coordinator(self, group: str, topic_id: object, partition: int, timeout: float = 60.0) -> int:
        """The node holding the share-partition state of ``group`` for the partition (KIP-932's share
        coordinator: FindCoordinator key type SHARE, key ``group:topic id:partition``)."""
        return self.coordinator(f"{group}:{topic_id}:{partition}", SHARE_KEY, timeout)

    def coordinator(self, key: str, key_type: int, timeout: float = 60.0) -> int:
        """The node the cluster names as ``key``'s coordinator of ``key_type`` now (through the INTERNAL
        listeners), retried while the cluster has none to name."""
        from kwire.coordinator import coordinator_from_response, find_coordinator_request

        def ask():
            with self.admin() as a:
                resp = a._client.request_any(lambda v: find_coordinator_request(v, key, key_type), 5)
                return coordinator_from_response(resp, key, key_type).node_id + 1     # (node 0 would be false)
        return self.wait_until(f"the coordinator of {key!r}", ask, timeout) - 1

    def replicated_topics(self, *prefixes: str, partitions: int = 3) -> List[str]:
        """A new topic per prefix (its name the prefix and a random suffix; replication factor 3,
        min ISR 2), returned once every replica is in sync."""
        import uuid

        from kwire.admin import NewTopic

        names = [f"{prefix}-{uuid.uuid4().hex[:8]}" for prefix in prefixes]
        with self.admin() as a:
            a.create_topics([NewTopic(name, partitions, 3, {"min.insync.replicas": "2"}) for name in names])
        for name, p in ((name, p) for name in names for p in range(partitions)):
            self.wait_until_isr(name, p, 3, timeout=30)
        return names

    def wait_until_isr(self, topic: str, partition: int, n: int = 3, timeout: float = 60.0) -> tuple:
        """Returns the partition's ISR once it has at least ``n`` replicas and a leader."""
        with self.admin() as a:
            def check():
                p = self.partitions(topic, a)[partition]
                return p.isr if len(p.isr) >= n and p.leader >= 0 else None
            return self.wait_until(f"ISR of {topic}-{partition} >= {n}", check, timeout)

    def wait_for_node(self, node: ClusterNode, timeout: float = NODE_TIMEOUT) -> None:
        """Returns once ``node`` runs and (a broker) is registered again."""
        deadline = time.monotonic() + timeout
        if node.is_broker:
            with self.admin() as a:
                def check():
                    if not node.alive:
                        raise KafkaStartError(f"node {node.node_id} exited with {node.process.returncode}; "
                                              f"log tail:\n{node.log_tail()}")
                    return node.node_id in self.registered_brokers(a)
                self.wait_until(f"node {node.node_id} registered", check, max(1.0, deadline - time.monotonic()))

    def full_isr(self, admin) -> List[str]:
        """Partitions of every topic (internal ones too) whose ISR is not all their replicas, or that have no leader."""
        short = []
        for name in admin.list_topics(include_internal=True, timeout=5):
            for p in self.partitions(name, admin).values():
                if p.leader < 0 or set(p.isr) != set(p.replicas):
                    short.append(f"{name}-{p.partition} leader {p.leader} isr {sorted(p.isr)} of {sorted(p.replicas)}")
        return short

    # ---- membership: a broker joins the running cluster, and leaves it ----

    def add_broker(self, node_id: int = 4, rack: str = EXTRA_RACK, timeout: float = NODE_TIMEOUT) -> ClusterNode:
        """A broker-only node (``process.roles=broker``) joining the running cluster: the same
        quorum (``controller.quorum.voters``), cluster id and settings as the others, its own
        directory, ports and (with proxies) FaultProxy. Returns once it is registered.
        :meth:`remove_broker` takes it out again; :meth:`restore` and :meth:`stop` do too."""
        if any(n.node_id == node_id for n in self.nodes):
            raise ValueError(f"node {node_id} is already in the cluster")
        for attempt in range(BIND_RETRIES + 1):
            try:
                return self._add_broker(node_id, rack, timeout)
            except KafkaStartError as e:
                if not lost_a_port(e) or attempt == BIND_RETRIES:
                    raise
        raise AssertionError("unreachable")

    def _add_broker(self, node_id: int, rack: str, timeout: float) -> ClusterNode:
        st = self._setup
        ports = dict(zip(("internal", "external", "controller"), free_ports(3, HOST)))
        node = ClusterNode(node_id, "broker", Path(self.root) / f"node-{node_id}", ports, rack, added=True)
        shutil.rmtree(node.workdir, ignore_errors=True)
        fmt = _write_node(node, st["voters"], st["libs"], st["heap"], st["tie_to_parent"], st["proxies"],
                          st["overrides"], self.cluster_id)
        self.nodes.append(node)          # from here stop() (the finalizer's list) stops it and its proxy
        try:
            _formatted(node, fmt, timeout)
            node.start()
            self.wait_for_node(node, timeout)
        except BaseException:
            self._drop(node)
            raise
        return node

    def create_topic(self, name: str, assignment: List[List[int]], configs: Optional[Dict[str, str]] = None) -> None:
        """A topic whose partition ``i`` has the replicas ``assignment[i]`` (the first leads), as
        CreateTopics with a replica assignment; returns once every partition has its full ISR."""
        from kwire.admin import NewTopic

        with self.admin() as a:
            a.create_topics([NewTopic(name, replica_assignment=dict(enumerate(assignment)), configs=configs)], 15)
        for i, r in enumerate(assignment):
            self.wait_until_isr(name, i, len(r), timeout=60)

    def replicas_on(self, node_id: int, admin) -> Dict[Tuple[str, int], tuple]:
        """Every partition (internal topics too) with a replica on ``node_id``: its replicas."""
        out = {}
        for name in admin.list_topics(include_internal=True, timeout=5):
            for p in self.partitions(name, admin).values():
                if node_id in p.replicas:
                    out[(name, p.partition)] = tuple(p.replicas)
        return out

    def remove_broker(self, node: ClusterNode, timeout: float = NODE_TIMEOUT) -> Dict[str, float]:
        """Take ``node`` out of the cluster for good (:meth:`retire_broker`), then stop its proxy
        and delete its directory. Returns the seconds each step took."""
        took = {} if node.retired else self.retire_broker(node, timeout)
        self._drop(node)
        return took

    def retire_broker(self, node: ClusterNode, timeout: float = NODE_TIMEOUT) -> Dict[str, float]:
        """Take ``node`` out of the cluster: its partitions' replicas moved to other brokers
        (AlterPartitionReassignments, waited for), a controlled shutdown (SIGTERM), KRaft's
        UnregisterBroker. Its proxy still listens (refusing nothing, relaying to nobody), so a test
        can count the connections clients still try (``node.proxy.connections``);
        :meth:`remove_broker` (or :meth:`restore`) ends it. Returns the seconds each step took
        ("moved", "stopped", "unregistered")."""
        took: Dict[str, float] = {}
        node.heal()
        node.resume()
        others = [n for n in self.brokers if n is not node]
        t0 = time.monotonic()
        with self.admin() as a:
            moves = {}
            for tp, replicas in self.replicas_on(node.node_id, a).items():
                spare = [n.node_id for n in others if n.node_id not in replicas]
                moves[tp] = [spare[0] if r == node.node_id else r for r in replicas]
            if moves:
                self.wait_until(f"reassignment of {sorted(moves)}",
                                lambda: a.alter_partition_reassignments(moves, timeout=10) or True, FAULT_TIMEOUT)
                self.wait_until(f"node {node.node_id}'s replicas moved away",
                                lambda: not self.replicas_on(node.node_id, a), timeout)
        took["moved"] = time.monotonic() - t0
        took["stopped"] = node.stop()
        t0 = time.monotonic()
        with self.admin() as a:
            self.wait_until(f"node {node.node_id} unregistered",
                            lambda: a.unregister_broker(node.node_id, timeout=10) or True, FAULT_TIMEOUT)
        took["unregistered"] = time.monotonic() - t0
        node.retired = True
        return took

    def _drop(self, node: ClusterNode) -> None:
        """Stop ``node`` by PID and its proxy, forget it, delete its directory."""
        if node.alive:
            node.resume()
            _stop_pid(node.pid, STOP_TIMEOUT)
        _reap(node.process, 1)
        if node.proxy is not None:
            node.proxy.stop()
        if node in self.nodes:
            self.nodes.remove(node)      # in place: the finalizer holds this list
        shutil.rmtree(node.workdir, ignore_errors=True)

    def restore(self, timeout: float = NODE_TIMEOUT) -> List[str]:
        """Undo every fault: heal the proxies, resume paused nodes, start stopped ones;
        then remove the brokers :meth:`add_broker` added (their partitions moved back
        to the others). Returns what it had to undo (for the caller's report)."""
        undone = []
        for n in [n for n in self.nodes if n.retired]:
            self._drop(n)
            undone.append(f"dropped the retired node {n.node_id}")
        for n in self.nodes:
            if n.proxy is not None and n.proxy.holing:
                n.heal()
                undone.append(f"healed node {n.node_id}'s proxy")
            if n.paused:
                n.resume()
                undone.append(f"resumed node {n.node_id}")
            if not n.alive:
                n.start()
                undone.append(f"started node {n.node_id}")
        for n in self.nodes:
            self.wait_for_node(n, timeout)
        for n in [n for n in self.nodes if n.added]:
            self.remove_broker(n, timeout)
            undone.append(f"removed the added node {n.node_id}")
        return undone

    def check_healthy(self, timeout: float = 90.0) -> None:
        """Every node runs, every broker is registered, every partition has a leader and its full ISR
        (waited for, up to ``timeout`` s; TimeoutError with the log tails otherwise)."""
        for n in self.nodes:
            if not n.running and not n.retired:
                raise RuntimeError(f"node {n.node_id} is not running (pid {n.pid}, state {_proc_state(n.pid)})")
        want = [n.node_id for n in self.brokers]
        try:
            with self.admin() as a:
                self.wait_until(f"brokers {want} registered", lambda: self.registered_brokers(a) == want, timeout)
                self.wait_until("every partition's ISR full", lambda: not self.full_isr(a) or None, timeout)
        except TimeoutError as e:
            raise TimeoutError(f"{e}; log tails:\n{self.log_tail()}") from None

    # ---- the end ----

    def detach(self) -> None:
        """Leave the nodes running past this process (the CLI's ``start``)."""
        self._finalizer.detach()

    def stop(self) -> None:
        """Stop every node by PID (SIGTERM together, SIGKILL after a bound) and its proxy,
        and delete the directories. Idempotent."""
        if self._finalizer.alive:
            self._finalizer()

    def state(self) -> dict:
        return {"cluster_id": self.cluster_id, "root": self.root, "version": self.version,
                "bootstrap": self.bootstrap, "nodes": [n.state() for n in self.nodes]}

    def __enter__(self) -> "KafkaCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_cluster(*, brokers: int = 3, controllers: int = 0, version: str = KAFKA_VERSION, heap: str = HEAP,
                  proxies: bool = True, timeout: float = READY_TIMEOUT, tie_to_parent: bool = True,
                  overrides: Optional[Dict[str, str]] = None, progress: Progress = None) -> KafkaCluster:
    """Format and start ``brokers`` nodes (see the module doc): combined broker+controller
    nodes forming the quorum with ``controllers=0``, or with ``controllers=1`` one
    controller-only node (id :data:`CONTROLLER_ID`) and broker-only nodes. With ``proxies``
    each broker advertises a :class:`FaultProxy` of this process. Returns once every
    broker is registered; ``overrides`` are extra properties of every node. A node that
    could not bind a port it was given (another process took it after ``free_ports``: other
    clusters and proxies run on the same machine) starts the cluster again on fresh
    ports, up to :data:`BIND_RETRIES` times."""
    for attempt in range(BIND_RETRIES + 1):
        try:
            return _start_cluster(brokers, controllers, version, heap, proxies, timeout, tie_to_parent, overrides,
                                  progress)
        except KafkaStartError as e:
            if not lost_a_port(e) or attempt == BIND_RETRIES:
                raise
            _say(progress, "a node lost a port to another process; starting again on fresh ports")
    raise AssertionError("unreachable")


def _start_cluster(brokers: int, controllers: int, version: str, heap: str, proxies: bool, timeout: float,
                   tie_to_parent: bool, overrides: Optional[Dict[str, str]], progress: Progress) -> KafkaCluster:
    if controllers not in (0, 1):
        raise ValueError("controllers: 0 (combined nodes) or 1 (a separate controller)")
    libs = ensure_kafka(version, progress)
    _require("java")
    t0 = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="kwire-kafka-cluster-"))
    nodes: List[ClusterNode] = []
    try:
        specs = [(i, "broker,controller" if not controllers else "broker", RACKS[(i - 1) % len(RACKS)])
                 for i in range(1, brokers + 1)]
        if controllers:
            specs.append((CONTROLLER_ID, "controller", None))
        fresh = iter(free_ports(3 * len(specs), HOST))     # distinct across the whole cluster
        for node_id, roles, rack in specs:
            ports = {k: next(fresh) for k in ("internal", "external", "controller")}
            nodes.append(ClusterNode(node_id, roles, root / f"node-{node_id}", ports, rack))
        voters = ",".join(f"{n.node_id}@{HOST}:{n.ports['controller']}" for n in nodes if "controller" in n.roles)
        cluster_id = _cluster_id()
        formats = [_write_node(n, voters, libs, heap, tie_to_parent, proxies, overrides, cluster_id) for n in nodes]
        _say(progress, f"formatting {len(nodes)} nodes in {root}")
        for n, fmt in zip(nodes, formats):
            _formatted(n, fmt, timeout)
        _say(progress, f"starting {len(nodes)} nodes")
        for n in nodes:
            n.start()                 # from this thread: each dies with the thread that started it
    except BaseException:
        _stop_all(nodes, str(root))
        raise
    cluster = KafkaCluster(str(root), cluster_id, nodes, version)
    cluster._setup = dict(voters=voters, libs=libs, heap=heap, tie_to_parent=tie_to_parent, proxies=proxies,
                          overrides=overrides)
    try:
        want = [n.node_id for n in cluster.brokers]

        def check():
            for n in nodes:
                if not n.alive:
                    raise KafkaStartError(f"node {n.node_id} exited with {n.process.returncode} before the cluster "
                                          f"answered; log tail:\n{n.log_tail()}")
            with cluster.admin() as a:
                return cluster.registered_brokers(a) == want
        try:
            cluster.wait_until(f"brokers {want} registered", check, timeout)
        except TimeoutError as e:
            raise KafkaStartError(f"{e}; log tails:\n{cluster.log_tail()}") from None
    except BaseException:
        cluster.stop()
        raise
    cluster.startup_seconds = time.monotonic() - t0
    _say(progress, f"Apache Kafka {version} cluster of {len(nodes)} nodes up in {cluster.startup_seconds:.1f} s, "
                   f"RSS {cluster.rss_bytes() / 2**20:.0f} MiB "
                   f"({', '.join(f'{n.node_id}: {n.rss_bytes() / 2**20:.0f}' for n in nodes)})")
    return cluster


# ---- scripts/kafka-broker --brokers 3: start and stop a cluster by hand ----

def _state_path(given: Optional[str]) -> Path:
    return Path(given or os.environ.get("KWIRE_KAFKA_CLUSTER_STATE")
                or Path.home() / ".cache" / "kwire" / "kafka-cluster.json")


def _measure(progress: Progress) -> dict:
    """Start and stop each shape once; its start time and RSS (after a short settle)."""
    out = {}
    for shape, controllers in (("combined", 0), ("split", 1)):
        cluster = start_cluster(controllers=controllers, proxies=False, progress=progress)
        try:
            with cluster.admin() as a:
                from kwire.admin import NewTopic
                a.create_topics([NewTopic("measure", 3, 3)])
            time.sleep(5)
            out[shape] = {"start_s": round(cluster.startup_seconds, 1), "rss_mib": round(cluster.rss_bytes() / 2**20),
                          "per_node_mib": {n.node_id: round(n.rss_bytes() / 2**20) for n in cluster.nodes}}
        finally:
            cluster.stop()
    return out


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="scripts/kafka-broker --brokers N", description=(
        "Run an Apache Kafka cluster (N KRaft nodes, combined broker+controller, racks rack-a/b/c) in the "
        "background. start prints the nodes, their PIDs and the bootstrap list as JSON; stop stops them."))
    ap.add_argument("command", choices=("start", "stop", "status", "measure"))
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--controllers", type=int, default=0, choices=(0, 1))
    ap.add_argument("--state", help="where start records the cluster (default $KWIRE_KAFKA_CLUSTER_STATE or "
                                    "~/.cache/kwire/kafka-cluster.json)")
    ap.add_argument("--version", default=KAFKA_VERSION)
    ap.add_argument("--heap", default=HEAP)
    args = ap.parse_args(argv)
    if args.brokers < 3:
        ap.error("--brokers: at least 3 (the topics' replication factor); for one node leave --brokers out")
    path = _state_path(args.state)

    def say(msg: str) -> None:
        sys.stderr.write(f"[kafka-cluster] {msg}\n")

    if args.command == "measure":
        print(json.dumps(_measure(say), indent=2))
        return 0
    old = json.loads(path.read_text()) if path.is_file() else None
    running = [n for n in (old or {}).get("nodes", []) if _is_our_broker(n["pid"], n["workdir"])]
    if args.command == "status":
        if not running:
            say("no cluster running")
            return 1
        print(json.dumps(old, indent=2))
        return 0 if len(running) == len(old["nodes"]) else 1
    if args.command == "stop":
        for n in running:
            try:
                os.kill(n["pid"], signal.SIGCONT)
                os.kill(n["pid"], signal.SIGTERM)
            except ProcessLookupError:
                pass
        for n in running:
            say(f"stopping node {n['node_id']} pid {n['pid']} (SIGTERM, SIGKILL after {STOP_TIMEOUT:g} s)")
            _stop_pid(n["pid"], STOP_TIMEOUT)
        if old is not None:
            shutil.rmtree(old["root"], ignore_errors=True)
            say("stopped")
        else:
            say("no cluster running")
        path.unlink(missing_ok=True)
        return 0
    if running:
        say(f"already running (pids {[n['pid'] for n in running]}); stop it first")
        print(json.dumps(old, indent=2))
        return 1
    return _cli_start(lambda: start_cluster(brokers=args.brokers, controllers=args.controllers, version=args.version,
                                            heap=args.heap, proxies=False, tie_to_parent=False, progress=say),
                      path, say, f"scripts/kafka-broker stop --brokers {args.brokers}")

if __name__ == "__main__":
    sys.exit(main())
