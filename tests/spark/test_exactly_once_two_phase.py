"""KIP-939's two-phase commit (``kafka.transaction.two.phase.commit.enable``)
in the exactly-once sink (kwire.spark.exactly_once) and the producer
(``transaction_two_phase_commit_enable``), on an Apache Kafka 4.4 node of
this module's own that allows it: ``transaction.two.phase.commit.enable``
and ``unstable.api.versions.enable`` (Kafka 4.4 marks InitProducerId v6,
the version that carries ``Enable2Pc``, unstable, and offers it only so).

* As shipped, kwire sends no unstable version: the option fails on that
  broker with the reason, before anything is written.
* With kwire's definitions as a Kafka release that marks v6 stable will
  make them (``MAX_STABLE_VERSION`` raised for the test: the generated
  code of such a release), the task's half writes in a transaction whose
  timeout the coordinator holds as never (2147483647 ms), and the driver's
  half commits it: the same code path the sink takes.
* The driver refuses the option against brokers that do not enable it
  (the session's Kafka node) and with a ``transaction.timeout.ms``.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from kwire.admin import Admin
from kwire.errors import KwireError
from kwire.producer import Producer
from kwire.protocol import messages
from kwire.spark.errors import SparkOptionError
from kwire.spark.exactly_once import TaskIdentity, check_transaction_timeout, commit, prepare
from kwire.spark.options import parse_sink_options

from .conftest import new_topic
from .test_exactly_once import read_values

pytestmark = pytest.mark.kafka

TWO_PHASE = {"kafka.transaction.two.phase.commit.enable": "true"}
NEVER = 2147483647                   # the timeout a coordinator gives a two-phase transaction


@pytest.fixture(scope="module")
def two_phase_kafka():
    """A Kafka 4.4 node that allows two-phase commit transactions (and offers InitProducerId v6)."""
    from support.kafka import start_kafka

    broker = start_kafka(overrides={"transaction.two.phase.commit.enable": "true",
                                    "unstable.api.versions.enable": "true"})
    try:
        yield broker.bootstrap("plaintext")
    finally:
        broker.stop()


def _sink(bootstrap: str, topic: str, **extra: str):
    return parse_sink_options({"kafka.bootstrap.servers": bootstrap, "topic": topic,
                               "deliveryGuarantee": "exactly-once", **extra})


def test_options_refused():
    with pytest.raises(SparkOptionError, match="needs deliveryGuarantee=exactly-once"):
        parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": "t", **TWO_PHASE})
    with pytest.raises(SparkOptionError, match="cannot be set with kafka.transaction.two.phase.commit.enable"):
        _sink("h:1", "t", **TWO_PHASE, **{"kafka.transaction.timeout.ms": "60000"})
    sink = _sink("h:1", "t", **TWO_PHASE)
    assert sink.two_phase and "transaction.timeout.ms" not in sink.producer_config()
    with pytest.raises(KwireError, match="needs a transactional_id"):
        Producer(bootstrap_servers="h:1", transaction_two_phase_commit_enable=True)
    with pytest.raises(KwireError, match="transaction_timeout_ms cannot be set"):
        Producer(bootstrap_servers="h:1", transactional_id="x", transaction_two_phase_commit_enable=True,
                 transaction_timeout_ms=1000)


def test_the_driver_refuses_brokers_that_do_not_enable_it(kafka, two_phase_kafka):
    with pytest.raises(SparkOptionError, match="transaction.two.phase.commit.enable is false: enable it"):
        check_transaction_timeout(_sink(kafka.bootstrap("plaintext"), "t", **TWO_PHASE))
    check_transaction_timeout(_sink(two_phase_kafka, "t", **TWO_PHASE))


def test_no_unstable_version_is_sent(two_phase_kafka):
    """Kafka 4.4's definitions mark InitProducerId v6 unstable: kwire does not send it, and says why."""
    assert messages.InitProducerIdRequest.MAX_STABLE_VERSION == 5
    with Producer(bootstrap_servers=two_phase_kafka, transactional_id="kwire-2pc-unstable",
                  transaction_two_phase_commit_enable=True) as p:
        with pytest.raises(KwireError, match=r"needs InitProducerId v6 \(KIP-939\).*share v5 at most"):
            p.init_transactions(timeout=30)


def test_a_prepared_transaction_that_never_times_out_is_committed(two_phase_kafka, monkeypatch):
    """With v6 stable (as a later Kafka release's definitions will say), the
    task's transaction is a two-phase one (its coordinator's timeout: never)
    and the driver's EndTxn commits it."""
    monkeypatch.setattr(messages.InitProducerIdRequest, "MAX_STABLE_VERSION", 6)
    topic = new_topic(two_phase_kafka, 1)
    sink = _sink(two_phase_kafka, topic, **TWO_PHASE)
    ident = TaskIdentity(f"kwire-2pc-{topic}", 0, 3)
    prepared = prepare(iter([pa.record_batch([pa.array([b"a", b"b"])], names=["value"])]), sink, ident)
    assert prepared.records == 2 and prepared.producer_id >= 0
    with Admin(bootstrap_servers=two_phase_kafka) as admin:
        txn = admin.describe_transactions([ident.transactional_id], timeout=30)[ident.transactional_id]
    assert txn.state == "Ongoing" and txn.transaction_timeout_ms == NEVER
    assert read_values(two_phase_kafka, topic, 1, settle=0) == []
    assert commit([prepared], sink, 3) == 2
    assert read_values(two_phase_kafka, topic, 1) == [b"a", b"b"]
