"""The producer against a leader that stops answering and a careless
caller: every record fails on time (``delivery_timeout_ms``, in flight or
not), ``flush()`` and ``close()`` return within their bounds, the sender
thread ends with ``close()``, the idempotent producer recovers (a new epoch)
when the leader comes back, nothing acknowledged is lost or repeated; bad
arguments raise clear errors at once (never a crash, never a wait).

The leader that stops answering is a real broker (a private Tansu, and a
private Apache Kafka) behind :class:`StallProxy`, which holds the bytes of
live connections while stalled (new connections are accepted and then hear
nothing either); the broker advertises the proxy, so every connection goes
through it. The careless callers' tests run on both live brokers
(``broker``)."""

from __future__ import annotations

import logging
import os
import resource
import subprocess
import sys
import threading
import time
import uuid

import pytest

import kwire
from kwire.admin import Admin, NewTopic
from kwire.consumer import Consumer
from kwire.errors import MessageTooLargeError
from kwire.future import KafkaTimeoutError
from kwire.producer import (CLOSE_GRACE, InvalidPartitionError, Producer, ProducerClosedError,
                            RecordTooLargeError)
from support.proxies import _Relay
from support.tansu import TansuUnavailable, free_port, start_tansu

DELIVERY_TIMEOUT = 1.5        # seconds, the producers' delivery_timeout_ms here


class StallProxy(_Relay):
    """Relays; :meth:`stall` makes it hold what arrives in the given
    directions ("up": to the broker, "down": to the client), on live and new
    connections alike, as a leader that stops answering. :meth:`resume`
    relays what it held, or with ``drop_held`` cuts those connections
    instead (the bytes were lost on the way)."""

    def __init__(self, target):
        self._go = threading.Event()
        self._go.set()
        self._stall_id = 0
        self.directions = ("up", "down")
        self.drop_held = False
        super().__init__(target)

    def stall(self, directions=("up", "down"), drop_held=True) -> None:
        self.directions, self.drop_held = tuple(directions), drop_held
        self._stall_id += 1
        self._go.clear()

    def resume(self) -> None:
        self._go.set()

    def on_bytes(self, pair_index: int, direction: str, data: bytes) -> bool:
        if self._go.is_set() or direction not in self.directions:
            return True
        while not self._go.wait(0.05):
            if self._stopped:
                return False
        return not self.drop_held


@pytest.fixture(scope="module", params=[pytest.param("tansu", marks=pytest.mark.broker),
                                        pytest.param("kafka", marks=pytest.mark.kafka)])
def stalling(request):
    """A private broker (Tansu or Apache Kafka) whose clients all go through a :class:`StallProxy`."""
    port = free_port()
    proxy = StallProxy(("127.0.0.1", port))
    try:
        if request.param == "tansu":
            try:
                broker = start_tansu(port=port, advertised=proxy.address)
            except TansuUnavailable as exc:
                pytest.skip(f"no Tansu broker: {exc}")
        else:
            from support.kafka import start_kafka

            broker = start_kafka(ports={"plaintext": port}, advertised={"plaintext": proxy.address})
        try:
            yield proxy
        finally:
            proxy.resume()
            broker.stop()          # Kafka: by its PID (SIGTERM, then SIGKILL)
    finally:
        proxy.stop()


@pytest.fixture
def proxy(stalling):
    yield stalling
    stalling.resume()


def _topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"ph-{uuid.uuid4().hex[:10]}"
    with Admin(bootstrap_servers=bootstrap) as a:
        a.create_topics([NewTopic(name, partitions)])
    return name


def _producer(bootstrap: str, **cfg) -> Producer:
    opts = dict(bootstrap_servers=bootstrap, delivery_timeout_ms=int(DELIVERY_TIMEOUT * 1000),
                request_timeout_ms=1000, linger_ms=0, retry_backoff_ms=50, reconnect_backoff_ms=20,
                reconnect_backoff_max_ms=200, socket_connection_setup_timeout_ms=1000)
    opts.update(cfg)
    return Producer(**opts)


def _read_values(bootstrap: str, topic: str, at_least: int, seconds: float = 10.0):
    """Every value of partition 0 of ``topic``, by offset."""
    got = {}
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([(topic, 0)])
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for records in c.poll(200).values():
                for r in records:
                    assert r.offset not in got, "an offset came twice"
                    got[r.offset] = r.value
            if len(got) >= at_least and not c.poll(300):
                break
    return [got[o] for o in sorted(got)]


def _errors(caplog):
    return [r for r in caplog.records if r.levelno >= logging.ERROR]


def _in_thread(fn, timeout):
    """Run ``fn`` in a thread; (finished, seconds taken, exception)."""
    out = []

    def run():
        try:
            fn()
            out.append(None)
        except BaseException as e:  # noqa: BLE001 - reported to the test
            out.append(e)

    t0 = time.monotonic()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    return not t.is_alive(), time.monotonic() - t0, (out[0] if out else None)


# ------------------------------------------------ a leader that stops answering
@pytest.mark.parametrize("idempotent", [True, False])
def test_records_to_a_silent_leader_fail_on_time_and_later_ones_get_through(proxy, idempotent, caplog):
    """The leader stops answering after the producer has used it: the
    records sent then fail at ``delivery_timeout_ms`` (the idempotent
    producer's, sent and waiting for a retry, never did: flush() without a
    timeout blocked for ever), flush() returns, and once the leader answers
    again new records are acknowledged (after an epoch bump) and written
    once, and the failed ones, which never reached it, not at all."""
    caplog.set_level(logging.WARNING, logger="kwire")
    topic = _topic(proxy.address)
    p = _producer(proxy.address, enable_idempotence=idempotent, acks="all" if idempotent else 1)
    try:
        assert p.send(topic, b"warm").get(10).offset == 0
        stamp = (p._producer_id, p._producer_epoch)
        proxy.stall(drop_held=True)
        t0 = time.monotonic()
        lost = [p.send(topic, b"lost-%d" % i) for i in range(5)]
        finished, took, error = _in_thread(p.flush, DELIVERY_TIMEOUT + 8)
        assert finished, "flush() did not return while the leader was silent"
        assert error is None                     # the records' failures are on their futures
        assert took < DELIVERY_TIMEOUT + 1.5
        for f in lost:
            e = f.exception()
            assert isinstance(e, KafkaTimeoutError) and "delivery_timeout_ms" in str(e), e
        failed_after = time.monotonic() - t0
        assert DELIVERY_TIMEOUT - 0.2 <= failed_after < DELIVERY_TIMEOUT + 1.5
        proxy.resume()
        later = [p.send(topic, b"later-%d" % i) for i in range(5)]
        offsets = [f.get(15).offset for f in later]
        assert len(set(offsets)) == 5 and min(offsets) >= 1
        if idempotent:
            assert (p._producer_id, p._producer_epoch) != stamp      # sequence state reset: a new epoch
    finally:
        p.close(5)
    assert _read_values(proxy.address, topic, 6) == [b"warm"] + [b"later-%d" % i for i in range(5)]
    assert not _errors(caplog)


def test_an_answer_after_the_expiry_changes_nothing(proxy, caplog):
    """The leader writes the batches but its answers are late, later than
    ``delivery_timeout_ms`` (``request_timeout_ms`` is longer): the records
    fail on time, the answers that come after do not complete them again,
    and the next records (after the epoch bump that the unknown sequence
    state calls for) are acknowledged without OUT_OF_ORDER_SEQUENCE_NUMBER.
    Every record is written once."""
    caplog.set_level(logging.WARNING, logger="kwire")
    topic = _topic(proxy.address)
    p = _producer(proxy.address, request_timeout_ms=4000)
    try:
        assert p.send(topic, b"warm").get(10).offset == 0
        proxy.stall(directions=("down",), drop_held=False)
        late = [p.send(topic, b"late-%d" % i) for i in range(3)]
        finished, took, error = _in_thread(p.flush, DELIVERY_TIMEOUT + 8)
        assert finished and error is None and took < DELIVERY_TIMEOUT + 1.5
        errors = [f.exception() for f in late]
        assert all(isinstance(e, KafkaTimeoutError) for e in errors), errors
        proxy.resume()                           # the answers arrive, on the live connection
        later = [p.send(topic, b"later-%d" % i) for i in range(3)]
        assert all(f.get(15).offset > 0 for f in later)
        assert [f.exception() for f in late] == errors           # unchanged
    finally:
        p.close(5)
    values = _read_values(proxy.address, topic, 7)
    assert sorted(values) == sorted([b"warm"] + [b"late-%d" % i for i in range(3)] +
                                    [b"later-%d" % i for i in range(3)])
    assert not _errors(caplog)


def test_close_with_a_timeout_returns_on_time_and_ends_the_sender_thread(proxy, caplog):
    """close(timeout=2) took 7 s and logged a traceback from the sender
    thread, which outlived it: now it returns within its timeout (plus the
    grace the thread has to end its turn), what is left fails with
    ProducerClosedError, the thread is gone, nothing is logged as an error."""
    caplog.set_level(logging.WARNING, logger="kwire")
    topic = _topic(proxy.address)
    p = _producer(proxy.address, delivery_timeout_ms=30000, request_timeout_ms=20000)
    assert p.send(topic, b"warm").get(10).offset == 0
    proxy.stall(drop_held=True)
    pending = [p.send(topic, b"x-%d" % i) for i in range(5)]
    t0 = time.monotonic()
    p.close(timeout=1)
    took = time.monotonic() - t0
    assert took < 1 + CLOSE_GRACE + 0.2
    assert not p._thread.is_alive()
    assert all(isinstance(f.exception(), ProducerClosedError) for f in pending)
    with pytest.raises(ProducerClosedError):
        p.send(topic, b"after")
    p.close()                                    # again: nothing to do
    assert not _errors(caplog)


def test_close_without_a_timeout_waits_at_most_the_delivery_timeout(proxy):
    topic = _topic(proxy.address)
    p = _producer(proxy.address)
    assert p.send(topic, b"warm").get(10).offset == 0
    proxy.stall(drop_held=True)
    pending = [p.send(topic, b"x-%d" % i) for i in range(3)]
    finished, took, error = _in_thread(p.close, DELIVERY_TIMEOUT + 8)
    assert finished and error is None and took < DELIVERY_TIMEOUT + 1.5
    assert not p._thread.is_alive()
    assert all(isinstance(f.exception(), KafkaTimeoutError) for f in pending)


def test_flush_raises_only_for_its_own_deadline(proxy):
    """flush(30) raised one record's own timeout (RequestTimedOutError is a
    KafkaTimeoutError) after 3 s; a record's failure stays on its future,
    and flush raises KafkaTimeoutError only when its own time is up."""
    topic = _topic(proxy.address)
    p = _producer(proxy.address)
    try:
        assert p.send(topic, b"warm").get(10).offset == 0
        proxy.stall(drop_held=True)
        f = p.send(topic, b"x")
        t0 = time.monotonic()
        p.flush(30)                              # returns once the record has failed
        assert time.monotonic() - t0 < DELIVERY_TIMEOUT + 1.5
        assert isinstance(f.exception(), KafkaTimeoutError)
        g = p.send(topic, b"y")
        with pytest.raises(KafkaTimeoutError, match="flush"):
            p.flush(0.2)                         # its own deadline comes first
        assert not g.done()
    finally:
        p.close(0)


# ------------------------------------------------------- careless callers
def test_send_with_a_none_topic_raises_in_a_child_interpreter():
    """send(None, b"v", partition=0) on a fresh producer killed the
    interpreter (SIGSEGV); now a TypeError. In a child: a crash fails the
    test instead of ending the run."""
    code = ("from kwire.producer import Producer\n"
            "p = Producer(bootstrap_servers='127.0.0.1:1', max_block_ms=100)\n"
            "for call in (lambda: p.send(None, b'v', partition=0), lambda: p.send(None, b'v'),\n"
            "             lambda: p.send(b't', b'v', partition=0)):\n"
            "    try:\n"
            "        call()\n"
            "    except TypeError as e:\n"
            "        print('TypeError', e)\n"
            "p.close(0)\n"
            "print('done')\n")
    src = os.path.dirname(os.path.dirname(kwire.__file__))
    env = dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""), PYTHONFAULTHANDLER="1")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, f"child exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.count("TypeError") == 3 and proc.stdout.endswith("done\n")


def test_a_partition_the_topic_does_not_have_is_refused_at_once(broker):
    topic = _topic(broker.bootstrap, partitions=2)
    with Producer(bootstrap_servers=broker.bootstrap) as p:
        t0 = time.monotonic()
        with pytest.raises(InvalidPartitionError, match=r"partition 99 does not exist \(topic .* has 2"):
            p.send(topic, b"v", partition=99)
        assert time.monotonic() - t0 < 5
        with pytest.raises(InvalidPartitionError):
            p.send(topic, b"v", partition=-1)
        with pytest.raises(TypeError):
            p.send(topic, b"v", partition="1")
        with pytest.raises(TypeError):
            p.send(topic, b"v", partition=True)
        with pytest.raises(InvalidPartitionError):
            p.send(topic, b"v", partition=2**70)
        assert p.send(topic, b"v", partition=1).get(10).partition == 1    # the producer goes on


def test_cli_produce_to_a_partition_the_topic_does_not_have(broker, capsys, monkeypatch):
    """``kwire produce -p 99`` on a 2-partition topic waited 120 s and said
    "expired"; now it says the partition does not exist and exits non-zero
    at once."""
    import io

    from kwire.__main__ import main

    topic = _topic(broker.bootstrap, partitions=2)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a\nb\n")))
    t0 = time.monotonic()
    rc = main(["produce", topic, "-p", "99", "-b", broker.bootstrap])
    err = capsys.readouterr().err
    assert rc != 0 and time.monotonic() - t0 < 10
    assert "partition 99 does not exist" in err and "has 2" in err and "expired" not in err


def test_max_request_size_is_applied(broker):
    """A 10 KB record was sent with max_request_size=1024. Now send()
    refuses a record larger than it (or than buffer_memory) at once, no
    batch grows past it and no Produce request carries more than it."""
    topic = _topic(broker.bootstrap, partitions=3)
    with Producer(bootstrap_servers=broker.bootstrap, max_request_size=1024) as p:
        with pytest.raises(RecordTooLargeError, match="larger than 1024, which is the value of the max_request_size"
                           ) as e:
            p.send(topic, b"x" * 10_000, partition=0)
        assert isinstance(e.value, MessageTooLargeError) and e.value.code == 10 and not e.value.retriable
        assert p.send(topic, b"x" * 900, partition=0).get(10).offset >= 0
    with Producer(bootstrap_servers=broker.bootstrap, buffer_memory=4096) as p:
        with pytest.raises(RecordTooLargeError, match="buffer_memory"):
            p.send(topic, b"x" * 10_000, partition=0)
    sizes = []
    with Producer(bootstrap_servers=broker.bootstrap, max_request_size=20_000, batch_size=1 << 20,
                  linger_ms=200) as p:
        send = p._client.send

        def recording(node, req, *args, **kwargs):
            if type(req).__name__ == "ProduceRequest":
                sizes.append(sum(len(pd.records) for td in req.topic_data for pd in td.partition_data))
            return send(node, req, *args, **kwargs)

        p._client.send = recording
        futures = [p.send(topic, b"%04d" % i + b"v" * 300, partition=i % 3) for i in range(600)]
        p.flush(20)
        assert all(f.get(0).offset >= 0 for f in futures)
    assert sizes and max(sizes) <= 20_000 and sum(sizes) > 600 * 300


def test_a_huge_partition_index_in_metadata_allocates_nothing(broker):
    """Metadata naming partition 50,000,000 of a 2-partition topic made a
    keyed send allocate a 50M-slot table (400 MB): the producer keeps
    nothing per partition index it was not given a partition count for."""
    from dataclasses import replace

    topic = _topic(broker.bootstrap, partitions=2)
    with Producer(bootstrap_servers=broker.bootstrap) as p:
        p.partitions_for(topic, 10)
        cluster = p._client.cluster
        info = cluster.partitions[topic][0]
        cluster.partitions[topic][50_000_000] = replace(info, partition=50_000_000)
        cluster.generation.bump()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        refused = 0
        for i in range(200):
            try:
                p.send(topic, b"v", key=b"k%d" % i)
            except InvalidPartitionError:
                refused += 1
        grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        assert 0 < refused < 200 and grown_kib < 50_000
        p.flush(10)


# ------------------------------------------------ sequence state lost: a new epoch
def test_out_of_order_sequence_renumbers_that_partition_under_a_new_epoch():
    """A broker that answers OUT_OF_ORDER_SEQUENCE_NUMBER for partition 0:
    the producer bumps its epoch, re-sends partition 0's batch as sequence
    0 of the new epoch, and partition 1, whose batch was acknowledged under
    the old epoch, starts again at 0 under the new one with its next batch.
    (The hostile broker of tests/support: it can answer what Tansu never
    would.)"""
    from support.hostile_broker import HostileBroker, batch_header

    from kwire.protocol import messages as m

    answered = []

    def produce(req):
        tps = [(t.name, p.index) for t in req.body.topic_data for p in t.partition_data]
        if ("t", 0) in tps and not answered:
            answered.append(req)
            r = m.ProduceResponse
            return r(responses=[r.TopicProduceResponse(name="t", partition_responses=[
                r.PartitionProduceResponse(index=0, error_code=45, base_offset=-1)])])
        return None                       # the default: append, acknowledge

    with HostileBroker({"t": 2}) as broker:
        with Producer(bootstrap_servers=broker.bootstrap, linger_ms=0, retry_backoff_ms=10) as p:
            assert p.send("t", b"one", partition=1).get(10).offset == 0
            broker.on("Produce", produce)
            assert p.send("t", b"zero", partition=0).get(10).offset == 0
            assert p.send("t", b"one-again", partition=1).get(10).offset == 1
            assert p.send("t", b"zero-again", partition=0).get(10).offset == 1
        stamps = {}
        for req in broker.received("Produce"):
            for t in req.body.topic_data:
                for part in t.partition_data:
                    h = batch_header(bytes(part.records))
                    stamps.setdefault(part.index, []).append((h["producer_epoch"], h["base_sequence"]))
        assert stamps[0] == [(0, 0), (1, 0), (1, 1)]     # refused; re-sent as 0 under epoch 1; then 1
        assert stamps[1] == [(0, 0), (1, 0)]             # epoch 0's batch acknowledged: the next starts at 0
        assert [r.body.producer_epoch for r in broker.received("InitProducerId")] == [-1, 0]
        assert not broker.errors
