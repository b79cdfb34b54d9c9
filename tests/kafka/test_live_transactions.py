"""A transaction that times out on Apache Kafka's coordinator
(``transaction_timeout_ms``): the coordinator aborts it and bumps the
producer's epoch, so the producer's next Produce is answered
INVALID_PRODUCER_EPOCH, as a fenced producer's would be. As Kafka's own
producer does (KIP-588), kwire takes it as abortable: the commit refuses,
the abort asks the coordinator for the epoch (InitProducerId with the old
one, no EndTxn) and the producer goes on with the next transaction. (It
took it for fencing: "a newer producer fenced this one", and every later
call failed, with no other producer there.) The zombie that a newer
instance really fenced is told so at its abort
(tests/client/test_transactions.py, on both brokers).

In both transaction protocols (KIP-890). The coordinator aborts a timed
out transaction as its cluster's ``transaction.version`` says (not the
client's): at 2 (Apache Kafka 4.4 as formatted) the abort's EndTxn v5 with
the old epoch is taken as that abort repeated and answered with the epoch
to go on with (and a v1 producer's InitProducerId with the old epoch is
accepted, as above). At 1 (the cluster downgraded for the test, as an
older one) the coordinator fences the old epoch (it keeps no previous
epoch), so the v1 producer's InitProducerId is answered PRODUCER_FENCED:
fatal there, as in Java's client; a new producer with the id goes on.

A private broker: the coordinator looks for timed-out transactions every
500 ms here (every 10 s by default)."""

from __future__ import annotations

import time
import uuid

import pytest

from kwire.admin import Admin, NewTopic
from kwire.consumer import Consumer
from kwire.errors import InvalidProducerEpochError, ProducerFencedError
from kwire.producer import Producer
from kwire.transactions import TransactionStateError
from support.features import transaction_version
from support.kafka import start_kafka

pytestmark = pytest.mark.kafka

TIMEOUT_MS = 1000


@pytest.fixture(scope="module")
def txn_kafka():
    broker = start_kafka(overrides={"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"})
    try:
        yield broker
    finally:
        broker.stop()       # by its PID (SIGTERM, then SIGKILL), and its directory deleted


@pytest.fixture(params=[2, 1], ids=["txv2", "txv1"])
def txn_protocol(request, txn_kafka):
    with transaction_version(txn_kafka.bootstrap(), request.param):
        yield request.param


def _read(bootstrap, topic, isolation, want, seconds=10.0):
    got = []
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", isolation_level=isolation) as c:
        c.assign([(topic, 0)])
        deadline = time.monotonic() + seconds
        while len(got) < want and time.monotonic() < deadline:
            for recs in c.poll(200).values():
                got += [r.value for r in recs]
        got += [r.value for recs in c.poll(500).values() for r in recs]     # nothing more
    return got


def test_a_transaction_the_coordinator_timed_out_is_aborted_and_the_producer_goes_on(txn_kafka, txn_protocol):
    bootstrap = txn_kafka.bootstrap()
    topic = f"tt-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap_servers=bootstrap) as a:
        a.create_topics([NewTopic(topic, 1)])
    p = Producer(bootstrap_servers=bootstrap, transactional_id=f"tid-{topic}", transaction_timeout_ms=TIMEOUT_MS)
    try:
        p.init_transactions(20)
        assert p.transaction_version == txn_protocol
        epoch = p._producer_epoch
        p.begin_transaction()
        assert p.send(topic, b"timed-out", partition=0).get(10).offset == 0
        time.sleep(TIMEOUT_MS / 1000 + 3)             # the coordinator aborts it (and bumps the epoch)
        with pytest.raises(InvalidProducerEpochError):
            p.send(topic, b"refused", partition=0).get(10)
        with pytest.raises(TransactionStateError, match="aborted first"):
            p.commit_transaction(10)
        if txn_protocol == 1:
            with pytest.raises(ProducerFencedError, match="InitProducerId"):
                p.abort_transaction(10)
            p.close(5)
            p = Producer(bootstrap_servers=bootstrap, transactional_id=f"tid-{topic}")
            p.init_transactions(20)
        else:
            p.abort_transaction(10)
        assert p._producer_epoch > epoch
        p.begin_transaction()
        p.send(topic, b"next", partition=0)
        p.commit_transaction(10)
    finally:
        p.close(5)
    assert _read(bootstrap, topic, "read_committed", 1) == [b"next"]
    assert _read(bootstrap, topic, "read_uncommitted", 2) == [b"timed-out", b"next"]
