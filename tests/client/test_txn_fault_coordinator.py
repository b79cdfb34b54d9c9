"""A transaction coordinator that does not answer, scripted on the hostile
broker (what tests/cluster/test_transaction_faults.py found on a real
cluster, where a killed, hung or partitioned coordinator leaves the
commit's EndTxn unanswered): the commit sends EndTxn again, to the
coordinator looked up again, and commits; a commit that ran out of time
raises a timeout naming the transactional id and may be called again; a
fencing error names the transactional id (which producer was fenced), a
fenced producer's send raises the fencing error as its other calls do, and
a commit refused after an abortable error carries that error as its cause."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from kwire.errors import InvalidProducerEpochError, ProducerFencedError
from kwire.future import KafkaTimeoutError
from kwire.producer import Producer
from kwire.protocol import messages as m
from kwire.protocol.api_keys import ApiKey, ErrorCode
from kwire.transactions import TransactionStateError
from support.hostile_broker import CLOSE, DEFAULT_VERSIONS, NEVER, HostileBroker, batch_header

TID = "txn-fault-tid"
VERSIONS = {**DEFAULT_VERSIONS, ApiKey.FIND_COORDINATOR: (1, 3), ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
            ApiKey.END_TXN: (0, 3)}


class Coordinator:
    """The hostile broker as its own transaction coordinator: FindCoordinator
    names it, AddPartitionsToTxn adds, EndTxn answers with ``end_txn`` (a
    list: one reply a request, the last one repeated)."""

    def __init__(self, broker: HostileBroker, end_txn) -> None:
        self.end_txn = list(end_txn)
        self.lock = threading.Lock()
        broker.on("FindCoordinator", lambda req: m.FindCoordinatorResponse(
            error_code=0, node_id=broker.node_id, host=broker.host, port=broker.port, error_message=None))
        broker.on("AddPartitionsToTxn", self._add)
        broker.on("EndTxn", self._end)

    @staticmethod
    def _add(req):
        r = m.AddPartitionsToTxnResponse
        return r(error_code=0, results_by_topic_v3_and_below=[r.AddPartitionsToTxnTopicResult(
            name=t.name, results_by_partition=[r.AddPartitionsToTxnPartitionResult(partition_index=p)
                                               for p in t.partitions]) for t in req.body.v3_and_below_topics])

    def _end(self, req):
        with self.lock:
            reply = self.end_txn.pop(0) if len(self.end_txn) > 1 else self.end_txn[0]
        return reply


def _ok():
    return m.EndTxnResponse(error_code=0)


def _producer(broker) -> Producer:
    p = Producer(bootstrap_servers=broker.bootstrap, transactional_id=TID, request_timeout_ms=500,
                 retry_backoff_ms=50)
    p.init_transactions(5)
    p.begin_transaction()
    assert p.send("t", b"v", partition=0).get(5).offset == 0
    return p


def test_an_unanswered_end_txn_is_sent_again_to_the_coordinator_looked_up_again(caplog):
    with HostileBroker({"t": 1}, versions=VERSIONS) as broker:
        Coordinator(broker, [NEVER, NEVER, _ok()])
        p = _producer(broker)
        finds = len(broker.received("FindCoordinator"))
        with caplog.at_level(logging.INFO, logger="kwire"):
            t0 = time.monotonic()
            p.commit_transaction(10)
        assert time.monotonic() - t0 < 5
        assert len(broker.received("EndTxn")) == 3
        assert len(broker.received("FindCoordinator")) > finds        # looked up again after each silence
        lost = [r for r in caplog.records if "unavailable; looking it up again" in r.getMessage()]
        assert len(lost) == 1, [r.getMessage() for r in lost]         # said once, not at every retry
        p.begin_transaction()                                         # the producer goes on
        p.send("t", b"w", partition=0)
        p.commit_transaction(10)
        p.close(5)


def test_a_commit_out_of_time_names_the_id_and_may_be_called_again():
    with HostileBroker({"t": 1}, versions=VERSIONS) as broker:
        coordinator = Coordinator(broker, [NEVER])
        p = _producer(broker)
        t0 = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match=TID):
            p.commit_transaction(1.5)
        assert time.monotonic() - t0 < 1.5 + 1.0                      # within its timeout
        with pytest.raises(TransactionStateError):
            p.send("t", b"not now", partition=0)                      # the transaction is being committed
        with coordinator.lock:
            coordinator.end_txn = [_ok()]
        p.commit_transaction(10)                                      # goes on where it stopped
        p.begin_transaction()
        p.close(5)


def test_fencing_errors_name_the_transactional_id():
    with HostileBroker({"t": 1}, versions=VERSIONS) as broker:
        Coordinator(broker, [m.EndTxnResponse(error_code=ErrorCode.PRODUCER_FENCED)])
        p = _producer(broker)
        with pytest.raises(ProducerFencedError, match=repr(TID)):
            p.commit_transaction(5)
        with pytest.raises(ProducerFencedError):
            p.begin_transaction()
        with pytest.raises(ProducerFencedError):         # a fenced producer's send says so too
            p.send("t", b"zombie", partition=0)
        p.close(5)
    with HostileBroker({"t": 1}, versions=VERSIONS) as broker:
        Coordinator(broker, [_ok()])
        p = _producer(broker)

        def produce(req):
            r = req.default()
            for t in r.responses:
                for part in t.partition_responses:
                    part.error_code = ErrorCode.INVALID_PRODUCER_EPOCH
            return r
        broker.on("Produce", produce)
        with pytest.raises(InvalidProducerEpochError, match=repr(TID)):
            p.send("t", b"late", partition=0).get(5)
        with pytest.raises(TransactionStateError, match="aborted first") as info:
            p.commit_transaction(5)
        assert isinstance(info.value.__cause__, InvalidProducerEpochError)   # why, for the caller to see
        p.close(5)


def test_add_partitions_failing_again_and_again_is_said_once(caplog):
    """A coordinator being restarted fails every AddPartitionsToTxn for seconds (one each
    retry_backoff_ms): said once, and once more when partitions are added again."""
    with HostileBroker({"t": 1}, versions=VERSIONS) as broker:
        coordinator = Coordinator(broker, [_ok()])
        closes = [CLOSE] * 5
        broker.on("AddPartitionsToTxn", lambda req: closes.pop() if closes else coordinator._add(req))
        p = Producer(bootstrap_servers=broker.bootstrap, transactional_id=TID, request_timeout_ms=500,
                     retry_backoff_ms=20, reconnect_backoff_ms=10, reconnect_backoff_max_ms=20)
        p.init_transactions(5)
        p.begin_transaction()
        with caplog.at_level(logging.INFO, logger="kwire.transactions"):
            assert p.send("t", b"v", partition=0).get(10).offset == 0
        p.commit_transaction(5)
        p.close(5)
    said = [r.getMessage() for r in caplog.records if "AddPartitionsToTxn" in r.getMessage()]
    assert len(broker.received("AddPartitionsToTxn")) == 6
    assert len(said) == 2 and "failed" in said[0] and "after 5 failed attempts" in said[1], said


def _features(broker, level: int):
    """ApiVersions with the cluster's finalized transaction.version at ``level``."""
    def answer(req):
        r = req.default()
        r.finalized_features_epoch = 7
        r.finalized_features = [m.ApiVersionsResponse.FinalizedFeatureKey(
            name="transaction.version", min_version_level=level, max_version_level=level)]
        return r
    broker.on("ApiVersions", answer)


def test_protocol_v2_adopts_a_new_producer_id_when_the_epoch_would_overflow():
    """Transaction protocol v2 at the end of epoch space: a producer at epoch 32766
    (Short.MAX_VALUE - 1) commits, and EndTxn v5 answers a new producer id at epoch
    0 (KIP-890: the coordinator's way out of an overflowing epoch), which the next
    transaction's batches carry, their sequence from 0. (Scripted: Apache Kafka
    reaches that epoch only after 32,766 transactions of one id.)"""
    versions = {**VERSIONS, ApiKey.PRODUCE: (3, 12), ApiKey.END_TXN: (0, 5)}
    with HostileBroker({"t": 1}, versions=versions) as broker:
        _features(broker, 2)
        Coordinator(broker, [m.EndTxnResponse(error_code=0, producer_id=4242, producer_epoch=0)])
        broker.on("InitProducerId", m.InitProducerIdResponse(error_code=0, producer_id=17, producer_epoch=32766))
        p = Producer(bootstrap_servers=broker.bootstrap, transactional_id=TID, request_timeout_ms=500)
        p.init_transactions(5)
        assert p.transaction_version == 2
        p.begin_transaction()
        assert p.send("t", b"last of 17", partition=0).get(5).offset == 0
        p.commit_transaction(5)
        assert (p._producer_id, p._producer_epoch) == (4242, 0)
        p.begin_transaction()
        p.send("t", b"first of 4242", partition=0).get(5)
        p.commit_transaction(5)
        p.close(5)
        assert not broker.received("AddPartitionsToTxn")
        assert [r.version for r in broker.received("EndTxn")] == [5, 5]
        stamps = [(h["producer_id"], h["producer_epoch"], h["base_sequence"])
                  for r in broker.received("Produce") for t in r.body.topic_data for part in t.partition_data
                  for h in [batch_header(part.records)]]
        assert stamps == [(17, 32766, 0), (4242, 0, 0)]
