"""Leader hints (KIP-951), live on the three-node cluster
(tests/support/kafka_cluster.py): a Produce or Fetch the old leader refuses
(NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH) names the new leader and its
endpoint, and kwire goes to it at once, with no Metadata request between
the refusal and the retry (counted from kwire's own requests: every request
its client sends, and the refusals in the Produce and Fetch answers, by
:class:`RequestLog`). With the hints turned off (``Client.leader_hints``,
for this comparison only: Java has no option for it either) a Metadata
request comes between them, as before.

The leader moves while the old one keeps running (its replicas reordered,
then a preferred election), so the old leader is there to refuse: the
producer's next batch and the consumer's next fetch meet the refusal. Both
drivers (``kw``).

The measurement (opt-in: ``KWIRE_LEADER_HINT_ROUNDS=N``, printed with
``-s``; ``KWIRE_LEADER_HINT_FAULTS`` picks the faults): an idempotent
producer (acks=all: with acks=1 the old leader may still acknowledge a
write after the election, one the new leader's log never has) sending a
record every 5 ms to one partition (replication factor 3) whose leader is
faulted (moved, shut down with SIGTERM, killed with SIGKILL), with and
without hints, which one first alternating (2N rounds of each fault, 4N
of a move: it is cheap, and its figures vary most); per fault, the time
from the fault (for a move: the controller's answer to the election) to
the first Produce sent to the new leader, and to the first
acknowledgement of a record sent after the fault.
Figures in docs/guide/failures.md.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

from kwire.consumer import Consumer, TopicPartition
from kwire.producer import Producer

pytestmark = [pytest.mark.kafka, pytest.mark.cluster]

ROUNDS = int(os.environ.get("KWIRE_LEADER_HINT_ROUNDS", "0"))
FAULTS = os.environ.get("KWIRE_LEADER_HINT_FAULTS", "moved,shut down,killed").split(",")
REFUSALS = {6, 74}                # NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH
PACE = 0.005                      # seconds between the measurement's records


def _kwire_client(c: Any) -> Any:
    """The kwire Client under a blocking client or a bridged kwire.aio one."""
    inner = getattr(c, "aio", c)
    return getattr(inner, "_p", inner)._client


class RequestLog:
    """Every request a kwire client sends: (monotonic time, "sent", node,
    API name, None); and for each Produce or Fetch answer with refused
    partitions: (time, "refused", node, API name, [(partition, error code,
    (hinted leader, epoch))])."""

    def __init__(self, client: Any) -> None:
        self.events: List[Tuple[float, str, int, str, Any]] = []
        send = client.send

        def logged(node: int, request: Any, *args: Any, **kwargs: Any) -> Any:
            api = type(request).__name__[:-len("Request")]
            self.events.append((time.monotonic(), "sent", node, api, None))
            fut = send(node, request, *args, **kwargs)
            if api in ("Produce", "Fetch"):
                fut.add_done_callback(lambda f: self._answered(node, api, f))
            return fut

        client.send = logged

    def _answered(self, node: int, api: str, fut: Any) -> None:
        if fut.failed() or fut.value is None:
            return
        refused = []
        for t in fut.value.responses:
            for p in getattr(t, "partition_responses", None) or getattr(t, "partitions", None) or ():
                if p.error_code:
                    index = getattr(p, "index", getattr(p, "partition_index", -1))
                    hint = (p.current_leader.leader_id, p.current_leader.leader_epoch)
                    refused.append((index, p.error_code, hint))
        if refused:
            self.events.append((time.monotonic(), "refused", node, api, refused))

    def after_refusal(self, old: int, new: int, apis: Tuple[str, ...]) -> Tuple[Any, List[str]]:
        """The first refusal by ``old`` naming ``new``, and the APIs of the
        requests sent from it up to the first of ``apis`` sent to ``new``
        (that one last)."""
        events = list(self.events)
        for i, (_, kind, node, _, detail) in enumerate(events):
            if kind == "refused" and node == old and any(code in REFUSALS and hint[0] == new
                                                         for _, code, hint in detail):
                between = []
                for _, kind2, node2, api2, _ in events[i + 1:]:
                    if kind2 != "sent":
                        continue
                    between.append(api2)
                    if node2 == new and api2 in apis:
                        return detail, between
                raise AssertionError(f"nothing sent to node {new} after the refusal: {between}")
        t0 = events[0][0] if events else 0.0
        raise AssertionError(f"no refusal by node {old} naming node {new}: "
                             f"{[(round(e[0] - t0, 3),) + e[1:] for e in events]}")


def _move_leader(cluster: Any, topic: str, partition: int = 0) -> Tuple[int, int, float]:
    """Move the partition's leadership to another in-sync replica while the
    old leader keeps running (its replicas reordered, a preferred
    election); returns (old, new, when the controller answered the
    election) once the cluster names the new one."""
    with cluster.admin() as a:
        p = cluster.partitions(topic, a)[partition]
        old = p.leader
        new = next(r for r in p.replicas if r != old and r in p.isr)
        order = [new] + [r for r in p.replicas if r != new]
        a.alter_partition_reassignments({(topic, partition): order}, timeout=10)
        cluster.wait_until("replicas reordered",
                           lambda: list(cluster.partitions(topic, a)[partition].replicas) == order, 30)
        a.elect_leaders([(topic, partition)], "preferred", timeout=10)
        elected = time.monotonic()
        cluster.wait_until(f"node {new} leads", lambda: cluster.leader_of(topic, partition, a) == new, 30)
    return old, new, elected


def _topic(cluster: Any) -> str:
    topic = f"hints-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, [[1, 2, 3]])
    return topic


@pytest.mark.parametrize("hints", [True, False], ids=["hints", "no-hints"])
def test_the_producer_retries_at_the_hinted_leader(kafka_cluster, kw, hints):
    topic = _topic(kafka_cluster)
    with kw.Producer(bootstrap_servers=kafka_cluster.bootstrap, acks="all", linger_ms=0) as p:
        client = _kwire_client(p)
        client.leader_hints = hints
        p.send(topic, b"before", partition=0).get(30)
        log = RequestLog(client)
        old, new, _ = _move_leader(kafka_cluster, topic)
        md = p.send(topic, b"after", partition=0).get(30)
        assert md.offset == 1
        refused, between = log.after_refusal(old, new, ("Produce",))
        assert [(i, code) for i, code, _ in refused] == [(0, 6)]
        hint = client.cluster.partitions[topic][0]
        if hints:
            assert between == ["Produce"], between           # straight to the new leader: no Metadata first
            assert refused[0][2] == (new, hint.leader_epoch)
        else:
            assert "Metadata" in between, between
        assert hint.leader == new


@pytest.mark.parametrize("hints", [True, False], ids=["hints", "no-hints"])
def test_the_consumer_fetches_from_the_hinted_leader(kafka_cluster, kw, hints):
    topic = _topic(kafka_cluster)
    tp = TopicPartition(topic, 0)
    with Producer(bootstrap_servers=kafka_cluster.bootstrap, acks="all") as p, \
            kw.Consumer(bootstrap_servers=kafka_cluster.bootstrap, fetch_max_wait_ms=200) as c:
        client = _kwire_client(c)
        client.leader_hints = hints
        for i in range(10):
            p.send(topic, b"%d" % i, partition=0)
        p.flush(30)
        c.assign([tp])
        c.seek(tp, 0)
        log = RequestLog(client)          # from the start: the refusal may answer a fetch sent before the move
        got = _read(c, tp, 10)
        moved: List[Tuple[int, int, float]] = []
        mover = threading.Thread(target=lambda: moved.append(_move_leader(kafka_cluster, topic)), daemon=True)
        mover.start()
        while mover.is_alive():            # polling on meanwhile: a fetch unread for a second would look stalled
            got += _read(c, tp, 1, 0.2)
        (old, new, _), = moved
        for i in range(10, 20):
            p.send(topic, b"%d" % i, partition=0)
        p.flush(30)
        got += _read(c, tp, 10)
        assert got == list(range(20)) and c.position(tp) == 20
        refused, between = log.after_refusal(old, new, ("Fetch", "OffsetForLeaderEpoch"))
        assert {code for _, code, _ in refused} <= REFUSALS
        if hints:
            assert "Metadata" not in between, between
        else:
            assert "Metadata" in between, between


def _read(c: Consumer, tp: TopicPartition, n: int, timeout: float = 30.0) -> List[int]:
    got: List[int] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got += [r.offset for r in c.poll(200).get(tp, [])]
    return got


# ---- the measurement (opt-in) ----

class Paced:
    """A producer sending one record every :data:`PACE` s to partition 0 of
    ``topic`` from a thread of its own; ``sent`` and ``acked`` hold each
    record's times."""

    def __init__(self, cluster: Any, topic: str, hints: bool) -> None:
        self.p = Producer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=0, request_timeout_ms=10000)
        _kwire_client(self.p).leader_hints = hints
        self.log = RequestLog(_kwire_client(self.p))
        self.topic = topic
        self.sent: List[float] = []
        self.acked: Dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            seq = len(self.sent)
            self.sent.append(time.monotonic())
            fut = self.p.send(self.topic, b"%d" % seq, partition=0)
            fut.add_callback(lambda md, err, seq=seq: self._done(seq, err))
            time.sleep(PACE)

    def _done(self, seq: int, err: Optional[BaseException]) -> None:
        if err is None:
            self.acked[seq] = time.monotonic()

    def first_ack_after(self, t0: float, timeout: float = 60.0) -> float:
        """Seconds from ``t0`` to the first acknowledgement of a record sent after it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            after = [at for seq, at in list(self.acked.items()) if self.sent[seq] >= t0]
            if after:
                return min(after) - t0
            time.sleep(0.01)
        raise AssertionError(f"no record sent after the fault acknowledged within {timeout:g} s")

    def first_sent_to(self, node: int, t0: float) -> float:
        """Seconds from ``t0`` to the first Produce sent to ``node`` after it."""
        return min(t for t, kind, to, api, _ in list(self.log.events)
                   if t >= t0 and kind == "sent" and to == node and api == "Produce") - t0

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.p.close(10)


def _fault(cluster: Any, topic: str, kind: str) -> Tuple[float, Callable[[], None]]:
    """Fault partition 0's leader; returns when the fault happened and how to undo it."""
    if kind == "moved":
        return _move_leader(cluster, topic)[2], lambda: None
    node = cluster.broker(cluster.leader_of(topic, 0))
    stopper = threading.Thread(target=node.kill if kind == "killed" else node.stop, daemon=True)
    t0 = time.monotonic()
    stopper.start()              # SIGKILL, or SIGTERM (a controlled shutdown: the producer goes on meanwhile)

    def undo() -> None:
        stopper.join(60)
        node.start()
        cluster.wait_for_node(node)
        cluster.wait_until_isr(topic, 0)

    return t0, undo


@pytest.mark.skipif(not ROUNDS, reason="the measurement: KWIRE_LEADER_HINT_ROUNDS=N")
def test_measure_first_ack_after_a_leader_fault(kafka_cluster):
    topic = _topic(kafka_cluster)
    figures: Dict[Tuple[str, bool], List[Tuple[float, float]]] = {}
    for kind in FAULTS:
        for i in range(ROUNDS * (4 if kind == "moved" else 2)):      # a move is cheap, and its figures vary most
            # each round faults the leader the last one left: which of the two goes first alternates, or with
            # hints on a move would always go from one node to the other, and off back
            for hints in ((True, False) if i % 2 == 0 else (False, True)):
                paced = Paced(kafka_cluster, topic, hints)
                try:
                    paced.first_ack_after(time.monotonic())        # the leader known, records flowing
                    time.sleep(0.5)
                    t0, undo = _fault(kafka_cluster, topic, kind)
                    ack = paced.first_ack_after(t0)
                    new = kafka_cluster.leader_of(topic, 0)
                    figures.setdefault((kind, hints), []).append((paced.first_sent_to(new, t0), ack))
                finally:
                    paced.close()
                undo()
    rows = ["| leader | hints | rounds | to the new leader, p50 / max | first ack, p50 / max |", "|---|---|---|---|---|"]
    for (kind, hints), xs in figures.items():
        sent, acked = [x[0] * 1000 for x in xs], [x[1] * 1000 for x in xs]
        rows.append(f"| {kind} | {'on' if hints else 'off'} | {len(xs)} | {statistics.median(sent):.0f} / "
                    f"{max(sent):.0f} ms | {statistics.median(acked):.0f} / {max(acked):.0f} ms |")
    sys.stdout.write("\nleader hints (KIP-951): a record every 5 ms, acks=all; from the fault\n" + "\n".join(rows) + "\n")
