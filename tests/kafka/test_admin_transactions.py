"""Producers and transactions inspected and ended by the admin (KIP-664) on
Apache Kafka, with both drivers (``kw``): a kwire transactional producer
leaves a transaction open; ListTransactions (with each of Java's
filters), DescribeTransactions and DescribeProducers show it;
abort_transaction (WriteTxnMarkers) aborts it on its partition, so the
last stable offset moves past it; fence_producers bumps the epoch and the
old producer's commit is refused."""

from __future__ import annotations

import json
import uuid

import pytest

from kwire.admin import AbortTransactionSpec
from kwire.errors import KwireError, TransactionalIdNotFoundError
from kwire.producer import Producer
from kwire.types import TopicPartition

pytestmark = pytest.mark.kafka


@pytest.fixture
def open_transaction(kafka):
    """(topic partition, transactional id, producer) with 3 records in an open transaction."""
    topic, tid = f"txn-admin-{uuid.uuid4().hex[:8]}", f"tid-{uuid.uuid4().hex[:8]}"
    p = Producer(bootstrap_servers=kafka.bootstrap(), transactional_id=tid, linger_ms=0)
    try:
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(3):
            p.send(topic, b"v%d" % i, partition=0)
        p.flush(30)
        yield TopicPartition(topic, 0), tid, p
    finally:
        p.close(5)


def test_inspect_abort_and_fence(kw, kafka, open_transaction):
    tp, tid, producer = open_transaction
    with kw.Admin(bootstrap_servers=kafka.bootstrap()) as a:
        listed = {t.transactional_id: t for t in a.list_transactions()}
        assert listed[tid].state == "Ongoing"
        pid = listed[tid].producer_id
        assert [t.transactional_id for t in a.list_transactions(filter_producer_ids=[pid])] == [tid]
        assert tid in {t.transactional_id for t in a.list_transactions(filter_states=["Ongoing"])}
        assert tid not in {t.transactional_id for t in a.list_transactions(filter_states=["CompleteCommit"])}
        assert [t.transactional_id for t in a.list_transactions(filter_on_transactional_id_pattern=f"^{tid}$")] == [tid]
        assert tid in {t.transactional_id for t in a.list_transactions(filter_on_duration_ms=0)}

        d = a.describe_transactions([tid])[tid]
        assert (d.state, d.producer_id, d.topic_partitions) == ("Ongoing", pid, frozenset([tp]))
        assert d.transaction_start_time_ms is not None and d.coordinator_id >= 0
        with pytest.raises(TransactionalIdNotFoundError):
            a.describe_transactions([f"none-{uuid.uuid4().hex[:8]}"])

        (state,) = a.describe_producers([tp])[tp]
        assert (state.producer_id, state.producer_epoch) == (pid, d.producer_epoch)
        assert state.current_transaction_start_offset == 0 and state.last_sequence == 2
        assert a.list_offsets({tp: "latest"}, isolation_level="read_committed")[tp][0] == 0

        # no marker written yet: the partition knows no coordinator epoch (0 then, as kafka-transactions.sh takes it)
        assert state.coordinator_epoch is None
        a.abort_transaction(AbortTransactionSpec(tp, pid, state.producer_epoch, state.coordinator_epoch or 0))
        (after,) = a.describe_producers([tp])[tp]
        assert after.current_transaction_start_offset is None
        assert a.list_offsets({tp: "latest"}, isolation_level="read_committed")[tp][0] == 4   # 3 records, a marker

        fenced = a.fence_producers([tid])
        assert fenced[tid][0] == pid and fenced[tid][1] > d.producer_epoch
    with pytest.raises(KwireError):
        producer.commit_transaction(10)


def test_cli_transactions(kafka, open_transaction, capsys):
    """``kwire transactions`` list, describe, describe-producers (--json),
    abort by --start-offset (as kafka-transactions.sh) and fence."""
    from support.cli_run import cli_runner

    tp, tid, producer = open_transaction
    run = cli_runner(capsys, kafka.bootstrap())

    _, out, _ = run("transactions", "list", "--state", "Ongoing", "--json")
    listed = {r["transactional_id"]: r for r in map(json.loads, out.splitlines())}
    assert listed[tid]["state"] == "Ongoing"
    _, out, _ = run("transactions", "describe", "--transactional-id", tid)
    header, row = out.splitlines()
    assert header.startswith("transactional_id\tcoordinator_id\tstate") and f"\tOngoing\t" in row
    assert row.endswith(f"{tp.topic}-0")
    _, out, _ = run("transactions", "describe-producers", "--topic", tp.topic, "--partition", "0", "--json")
    (state,) = map(json.loads, out.splitlines())
    assert state["current_transaction_start_offset"] == 0 and state["producer_id"] == listed[tid]["producer_id"]
    _, _, err = run("transactions", "abort", "--topic", tp.topic, "--partition", "0", "--start-offset", "0")
    assert "aborted the transaction" in err
    _, out, _ = run("transactions", "describe-producers", "--topic", tp.topic, "--partition", "0", "--json")
    assert json.loads(out)["current_transaction_start_offset"] is None
    _, out, _ = run("transactions", "fence", "--transactional-id", tid, "--json")
    assert json.loads(out)["producer_epoch"] > state["producer_epoch"]
