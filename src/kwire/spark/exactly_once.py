"""Exactly-once writes to Kafka from Spark (``deliveryGuarantee=exactly-once``),
which Spark's own Kafka sink does not offer.

A two-phase commit over Kafka's transactions, as Flink's Kafka sink makes
one, with Spark's writer protocol as the coordinator:

1. **Each task** (:func:`prepare`) writes its rows in one transaction of
   its own transactional id, ``<prefix>-<Spark partition>``:
   ``InitProducerId`` first (which fences every earlier attempt of the same
   task, zombie or retried, and aborts the transaction it left open), then
   the rows, then, for a streaming write, the batch's marker: a
   ``TxnOffsetCommit`` of offset ``batch id + 1`` to a group named after
   the transactional id, inside the same transaction. It flushes, and
   leaves **without ending the transaction**. Its commit message
   (:class:`Prepared`) carries the transactional id, producer id and epoch,
   and the transaction protocol (1, or 2 where KIP-890's
   ``transaction.version`` is finalized).
2. **The driver**, in Spark's ``commit(messages, batchId)`` (reached only
   when every task succeeded), ends each task's transaction with
   ``EndTxn(commit)`` (:func:`commit`, :meth:`kwire.admin.Admin.end_transaction`),
   then Spark writes its commit log. ``abort`` aborts them.
3. **A batch run again** (the driver died after some ``EndTxn`` but before
   the commit log, and the query restarted from its checkpoint): each
   task, after its ``InitProducerId``, reads its marker (``OffsetFetch``
   with ``require_stable``, which waits for transactions still ending).
   When the marker says this batch committed already, the task writes
   nothing and reports so: what a read_committed consumer sees is each row
   of the batch once.

The prefix is ``transactionalIdPrefix``, by default ``kwire-<query id>``
(Spark's query id, kept across restarts from the checkpoint); a batch
(non-streaming) write adds a fresh id of its own per job (no marker: a
failed batch job is not resumed, it is run again as a new job, and its
transactions are aborted by ``abort``, after an abort marker that tasks
still running then read: :func:`close_job`).

What it needs and what it cannot do (see docs/guide/spark.md, "Exactly-once writes"):

* Deterministic input and partitioning of each micro-batch (Kafka's and
  kwire's source are replayable): a re-run batch's partition ``p`` must
  carry the rows the first run's did.
* ``transaction.timeout.ms`` (15 minutes unless ``kafka.transaction.timeout.ms``
  says otherwise, at most the brokers' ``transaction.max.timeout.ms``)
  must exceed a micro-batch's time from its first task to the driver's
  commit; a transaction the coordinator aborted first fails the commit
  with a :class:`ExactlyOnceCommitError` naming the partition, and the
  query, restarted, writes that partition again (the others are not
  repeated: their markers say they committed). The commit warns when a
  batch took more than half the timeout.
  ``kafka.transaction.two.phase.commit.enable=true`` (KIP-939, Java's
  producer option) lifts the bound: the tasks' ``InitProducerId`` v6 says
  ``Enable2Pc`` and their transactions never time out. It needs brokers
  with ``transaction.two.phase.commit.enable`` (checked by the driver) that
  offer v6, and a Kafka release that marks v6 stable: Kafka 4.4 marks it
  unstable, and kwire sends no unstable version (the tasks fail with that
  reason). Until then the timeout holds.
* A batch is atomic per Spark partition, not as a whole: a driver that dies
  mid-commit leaves some partitions' rows visible before the others (every
  row is still visible once, when the query has run the batch again). Until
  then the transactions it left open hold the last stable offset of the
  partitions they wrote to, so a read_committed reader may not see even the
  committed partitions' rows written after their first ones (up to
  ``transaction.timeout.ms``, if the query is not run again).
* Speculative execution (``spark.speculation``) and Spark's
  ``asyncProgressTrackingEnabled`` break the one-attempt-per-partition
  commit: a speculative attempt fences the attempt Spark then commits,
  whose ``EndTxn`` fails; the query stops and, restarted, repeats nothing.
* Markers are committed offsets: they expire with the brokers'
  ``offsets.retention.minutes`` (7 days) after the query last ran.
* A query deleted for good leaves its marker groups, and possibly open
  transactions that the coordinator aborts after their timeout:
  ``kwire transactions abort --query <id>`` aborts them at once and
  ``kwire transactions forget --query <id>`` deletes the groups too.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence

import pyarrow as pa

from kwire.admin import Admin
from kwire.admin_ops import leftovers
from kwire.config import ADMIN, canonical_name
from kwire.errors import KwireError
from kwire.producer import Producer
from kwire.protocol.api_keys import ErrorCode
from kwire.spark.errors import SparkOptionError
from kwire.spark.options import SinkOptions
from kwire.spark.sink import send_batches
from kwire.types import OffsetAndMetadata

__all__ = ["Prepared", "TaskIdentity", "ExactlyOnceCommitError", "task_identity", "job_prefix", "prepare",
           "commit", "abort", "abort_job", "close_job", "fence", "marker_batch", "check_transaction_timeout", "BATCH_ID_PROPERTY", "QUERY_ID_PROPERTY", "TEST_HOOK_ENV"]

log = logging.getLogger(__name__)

#: The Spark local properties a streaming query's tasks carry (MicroBatchExecution sets them).
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
#: Test-only: ``<file>:<n>``: the driver's commit, after ending ``n`` of a batch's transactions
#: (``all``: every one), writes ``file`` and waits to be killed (the driver-crash tests).
TEST_HOOK_ENV = "KWIRE_TEST_EXACTLY_ONCE_HOOK"
#: Seconds each driver-side ``EndTxn`` may take (retried through coordinator moves meanwhile).
END_TIMEOUT = 120.0
#: Below this ``transaction.timeout.ms`` the driver warns (a micro-batch must end within it).
SHORT_TIMEOUT_MS = 60_000
MAX_TIMEOUT_CONFIG = "transaction.max.timeout.ms"
#: The brokers' config that allows KIP-939's two-phase commit transactions.
TWO_PHASE_CONFIG = "transaction.two.phase.commit.enable"
#: The metadata of a failed batch write's abort marker (:func:`close_job`).
JOB_ABORTED = "kwire exactly-once: job aborted"
_FENCED = (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.INVALID_TXN_STATE)


class ExactlyOnceCommitError(KwireError):
    """The driver could not commit a task's transaction: the batch fails, and
    the query restarted from its checkpoint writes the partitions that did
    not commit (and only those)."""


@dataclass
class Prepared:
    """One task's transaction, flushed and left open for the driver
    (``producer_id`` -1: nothing to end: no rows, or the batch committed
    before)."""

    partition: int
    records: int
    transactional_id: str
    producer_id: int = -1
    producer_epoch: int = -1
    transaction_version: int = 1
    batch_id: Optional[int] = None
    already_committed: bool = False
    started: float = 0.0                 # time.time() when the task began


@dataclass(frozen=True)
class TaskIdentity:
    """Where a task's transaction comes from: its prefix, Spark partition and
    micro-batch (None in a batch write)."""

    prefix: str
    partition: int
    batch_id: Optional[int]

    @property
    def transactional_id(self) -> str:
        return f"{self.prefix}-{self.partition}"


def job_prefix(sink: SinkOptions) -> str:
    """A batch write's prefix, made once on the driver: the option's (or
    ``kwire-write``) and a fresh id, so two jobs never share a transactional id."""
    return f"{sink.transactional_id_prefix or 'kwire-write'}-{uuid.uuid4().hex[:12]}"


def task_identity(sink: SinkOptions, batch_prefix: Optional[str]) -> TaskIdentity:
    """This task's identity, from Spark's task context: a streaming write's
    batch and query ids are local properties of its tasks; a batch write
    (``batch_prefix`` given by the driver) has neither."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:
        raise KwireError("deliveryGuarantee=exactly-once: no Spark task context (the write runs outside a Spark task)")
    if batch_prefix is not None:
        return TaskIdentity(batch_prefix, tc.partitionId(), None)
    batch, query = tc.getLocalProperty(BATCH_ID_PROPERTY), tc.getLocalProperty(QUERY_ID_PROPERTY)
    if batch is None or not (query or sink.transactional_id_prefix):
        raise KwireError(f"deliveryGuarantee=exactly-once: this Spark task has no {BATCH_ID_PROPERTY} / "
                         f"{QUERY_ID_PROPERTY} local property (a streaming write with a continuous trigger?): "
                         f"the batch cannot be recorded with its rows")
    return TaskIdentity(sink.transactional_id_prefix or f"kwire-{query}", tc.partitionId(), int(batch))


def admin_config(sink: SinkOptions) -> Dict[str, Any]:
    """The sink's ``kafka.*`` options an admin client takes (connection and security)."""
    return {k: v for k, v in sink.producer_config().items() if canonical_name(k) in ADMIN}


def check_transaction_timeout(sink: SinkOptions) -> None:
    """On the driver, before any task runs: refuse a ``transaction.timeout.ms``
    above the brokers' ``transaction.max.timeout.ms`` (every task's
    InitProducerId would be refused), and warn below
    :data:`SHORT_TIMEOUT_MS` (a micro-batch, from its first task to the
    driver's commit, must end within it). With two-phase commit (KIP-939)
    there is no timeout: the brokers must enable it instead. A broker that
    cannot describe its configs is not asked again: the tasks' InitProducerId
    then says it."""
    if sink.two_phase:
        _check_broker_setting(sink, TWO_PHASE_CONFIG, lambda v: v.lower() == "true",
                              "kafka.transaction.two.phase.commit.enable=true: the brokers' "
                              f"{TWO_PHASE_CONFIG} is {{}}: enable it, or leave two-phase commit out")
        return
    ms = int(_timeout_s(sink.producer_config()) * 1000)
    if ms < SHORT_TIMEOUT_MS:
        log.warning("kwire exactly-once: kafka.transaction.timeout.ms=%d: a micro-batch whose first task began more "
                    "than %.0f s before the driver's commit fails (its transactions aborted by their coordinators)",
                    ms, ms / 1000)
    _check_broker_setting(sink, MAX_TIMEOUT_CONFIG, lambda v: ms <= int(v),
                          f"deliveryGuarantee=exactly-once: transaction.timeout.ms={ms} is above the brokers' "
                          f"{MAX_TIMEOUT_CONFIG}={{}}: lower kafka.transaction.timeout.ms, or raise "
                          f"{MAX_TIMEOUT_CONFIG} on the brokers (a micro-batch must end within it)")


def _check_broker_setting(sink: SinkOptions, name: str, ok: Any, refusal: str) -> None:
    """Refuse the sink's options (``refusal``, formatted with the value) when
    a broker's config ``name`` fails ``ok``; a broker that cannot describe
    its configs is let be (the tasks' InitProducerId says what is wrong)."""
    try:
        with Admin(admin_config(sink)) as admin:
            broker = admin.describe_cluster(timeout=30.0).brokers[0].node_id
            entry = admin.describe_configs(brokers=[broker], timeout=30.0)[("broker", str(broker))].get(name)
    except KwireError as e:
        log.info("kwire exactly-once: the brokers' %s not read (%s): the tasks' InitProducerId checks it", name, e)
        return
    if entry is not None and entry.value is not None and not ok(entry.value):
        raise SparkOptionError(refusal.format(entry.value))


def marker_batch(admin: Admin, transactional_id: str, timeout: float) -> Optional[int]:
    """The last batch whose rows the transactional id committed, from its
    marker group (offsets held by a transaction still ending waited for);
    None without a marker."""
    offsets = admin.list_group_offsets(transactional_id, timeout=timeout, require_stable=True)
    marks = [om.offset for om in offsets.values() if om is not None]
    return max(marks) - 1 if marks else None


def _timeout_s(cfg: Dict[str, Any]) -> float:
    for k, v in cfg.items():
        if canonical_name(k) == "transaction_timeout_ms":
            return int(v) / 1000.0
    return 60.0


def prepare(batches: Iterator[pa.RecordBatch], sink: SinkOptions, ident: TaskIdentity) -> Prepared:
    """The task's side (see the module doc): the rows of ``batches`` in one
    transaction, flushed and left open; nothing when the marker says the
    batch committed already."""
    started = time.time()
    tid = ident.transactional_id
    cfg = dict(sink.producer_config(), **{"transactional.id": tid})
    cfg["client.id"] = f"{cfg['client.id']}-{ident.partition}"      # the user's (or the sink's default), per task
    producer = Producer(cfg)
    try:
        producer.init_transactions()
        if ident.batch_id is None and _job_aborted(ident, sink):
            _drain(batches)
            return Prepared(ident.partition, 0, tid, started=started)
        if ident.batch_id is not None and _committed_before(ident, sink):
            _drain(batches)
            return Prepared(ident.partition, 0, tid, batch_id=ident.batch_id, already_committed=True, started=started)
        producer.begin_transaction()
        topics: List[str] = []
        count = send_batches(producer, batches, sink, topics)
        if not count:
            producer.abort_transaction()          # nothing was added: no request goes out
            return Prepared(ident.partition, 0, tid, batch_id=ident.batch_id, started=started)
        if ident.batch_id is not None:
            mark = OffsetAndMetadata(ident.batch_id + 1, f"kwire exactly-once batch {ident.batch_id}")
            producer.send_offsets_to_transaction({(topics[0], 0): mark}, tid)
        producer.flush()
        pid, epoch = producer.producer_identity
        log.info("kwire exactly-once: %s wrote %d rows of batch %s in producer id %d epoch %d (not committed yet)",
                 tid, count, ident.batch_id, pid, epoch)
        return Prepared(ident.partition, count, tid, pid, epoch, producer.transaction_version or 1, ident.batch_id,
                        started=started)
    except BaseException:
        _abort_quietly(producer)
        raise
    finally:
        producer.close(30.0)                       # a transaction left open stays open


def _drain(batches: Iterator[pa.RecordBatch]) -> None:
    """Spark's input read to its end, not written."""
    for _ in batches:
        pass


def _committed_before(ident: TaskIdentity, sink: SinkOptions) -> bool:
    with Admin(admin_config(sink)) as admin:
        last = marker_batch(admin, ident.transactional_id, END_TIMEOUT)
    if last is not None and last >= ident.batch_id:  # type: ignore[operator]
        log.warning("kwire exactly-once: %s: batch %s was committed by an earlier run (marker: batch %d); "
                    "its rows are not written again", ident.transactional_id, ident.batch_id, last)
        return True
    return False


def _job_aborted(ident: TaskIdentity, sink: SinkOptions) -> bool:
    """A batch write's task, after its ``InitProducerId``: whether the driver
    aborted the job before (:func:`close_job`'s marker), as it does when
    another task failed while this one was still running: such a
    straggler's transaction, begun after the driver's clean-up, would be
    left open and hold back read_committed readers until it timed out. A
    marker that cannot be read is taken as none."""
    try:
        with Admin(admin_config(sink)) as admin:
            offsets = admin.list_group_offsets(ident.prefix, timeout=END_TIMEOUT)
    except KwireError as e:
        log.info("kwire exactly-once: %s: the job's abort marker not read (%s)", ident.transactional_id, e)
        return False
    if any(om.metadata == JOB_ABORTED for om in offsets.values()):
        log.warning("kwire exactly-once: %s: the job was aborted before this task began its transaction; nothing "
                    "written", ident.transactional_id)
        return True
    return False


def _abort_quietly(producer: Producer) -> None:
    try:
        producer.abort_transaction(10.0)
    except Exception as e:  # noqa: BLE001 - the task's own error is the one raised
        log.debug("kwire exactly-once: abort after a failed write: %s", e)


def _hook(done: int, total: int, batch_id: Optional[int]) -> None:
    """The driver-crash tests' hook (:data:`TEST_HOOK_ENV`)."""
    spec = os.environ.get(TEST_HOOK_ENV)
    if not spec:
        return
    path, _, when = spec.rpartition(":")
    if (when == "all" and done == total) or (when.isdigit() and int(when) == done and done < total):
        with open(path, "w") as f:
            json.dump({"batch": batch_id, "committed": done, "of": total, "pid": os.getpid()}, f)
        log.warning("kwire exactly-once: %s: %d of %d transactions committed; waiting to be killed", TEST_HOOK_ENV,
                    done, total)
        while True:
            time.sleep(60)


def _prepared(messages: Sequence[Any]) -> List[Prepared]:
    return [m for m in messages if isinstance(m, Prepared)]


def commit(messages: Sequence[Any], sink: SinkOptions, batch_id: Optional[int] = None) -> int:
    """The driver's side: every task's transaction committed (EndTxn), in
    Spark partition order; returns the rows made visible. A transaction
    that cannot commit raises :class:`ExactlyOnceCommitError` after the
    others were committed (each is its partition's whole batch)."""
    prepared = sorted(_prepared(messages), key=lambda p: p.partition)
    wrong = [p for p in prepared if p.batch_id != batch_id]
    if wrong:
        raise ExactlyOnceCommitError(f"batch {batch_id}: the tasks wrote batch {wrong[0].batch_id} (Spark partition "
                                     f"{wrong[0].partition}); nothing of this batch is committed")
    todo = [p for p in prepared if p.producer_id >= 0]
    _warn_slow(todo, sink, batch_id)
    errors: List[str] = []
    with Admin(admin_config(sink)) as admin:
        for i, p in enumerate(todo):
            _hook(i, len(todo), batch_id)
            try:
                admin.end_transaction(p.transactional_id, p.producer_id, p.producer_epoch, True,
                                      p.transaction_version, END_TIMEOUT)
            except KwireError as e:
                errors.append(_commit_failure(p, e, sink))
    _hook(len(todo), len(todo), batch_id)
    if errors:
        raise ExactlyOnceCommitError(f"batch {batch_id}: {len(errors)} of {len(todo)} transactions did not commit "
                                     f"(the others did): {'; '.join(errors)}. Restart the query from its checkpoint: "
                                     f"the batch runs again and writes only the partitions that did not commit.")
    rows = sum(p.records for p in prepared)
    log.info("kwire exactly-once: batch %s committed: %d transactions, %d rows (%d partitions had committed before)",
             batch_id, len(todo), rows, sum(p.already_committed for p in prepared))
    return rows


def _commit_failure(p: Prepared, e: KwireError, sink: SinkOptions) -> str:
    why = str(e)
    if getattr(e, "code", None) in _FENCED:
        why = (f"fenced: its transaction was aborted before the commit, because it outlived transaction.timeout.ms "
               f"({_timeout_s(sink.producer_config()):.0f} s) or another attempt of the task took the id "
               f"(speculative execution); {e}")
    return f"Spark partition {p.partition} ({p.transactional_id}, producer id {p.producer_id} epoch " \
           f"{p.producer_epoch}): {why}"


def _warn_slow(todo: Sequence[Prepared], sink: SinkOptions, batch_id: Optional[int]) -> None:
    if not todo or sink.two_phase:
        return
    took, limit = time.time() - min(p.started for p in todo), _timeout_s(sink.producer_config())
    if took > limit / 2:
        log.warning("kwire exactly-once: batch %s reaches its commit %.0f s after its first task began: more than "
                    "half of transaction.timeout.ms (%.0f s); a batch that outlives it fails (raise "
                    "kafka.transaction.timeout.ms, up to the brokers' transaction.max.timeout.ms)",
                    batch_id, took, limit)


def abort(messages: Sequence[Any], sink: SinkOptions, batch_id: Optional[int] = None,
          prefix: Optional[str] = None) -> None:
    """Abort every task's transaction (the job or batch failed): those the
    tasks reported (EndTxn), and those of the tasks that reported nothing
    (Spark's ``None`` in their slot: failed, killed, or lost with their
    executor), whose transactional ids (``prefix``, else the reporting
    tasks') are fenced, which aborts what they left open instead of letting
    it hold back read_committed readers until it times out. A transaction
    already ended or fenced is left as it is."""
    todo = [p for p in _prepared(messages) if p.producer_id >= 0]
    prefix = prefix or next((p.transactional_id.rsplit("-", 1)[0] for p in _prepared(messages)), None)
    silent = [f"{prefix}-{i}" for i, m in enumerate(messages) if not isinstance(m, Prepared)] if prefix else []
    if not todo and not silent:
        return
    with Admin(admin_config(sink)) as admin:
        for p in todo:
            try:
                admin.end_transaction(p.transactional_id, p.producer_id, p.producer_epoch, False,
                                      p.transaction_version, END_TIMEOUT)
            except KwireError as e:
                log.warning("kwire exactly-once: batch %s: abort of %s: %s (a transaction left open is aborted by "
                            "its coordinator after transaction.timeout.ms, or by the partition's next attempt)",
                            batch_id, p.transactional_id, e)
        if batch_id is None and prefix:
            close_job(admin, sink, prefix)
        else:
            fence(admin, silent, batch_id)
    log.warning("kwire exactly-once: batch %s aborted: %d transactions, %d transactional ids of tasks that reported "
                "nothing fenced; none of their rows visible", batch_id, len(todo), len(silent))


def abort_job(sink: SinkOptions, prefix: str, batch_id: Optional[int] = None) -> None:
    """After a failed ``kwire.spark.write`` job, whose tasks' reports never
    reached the driver: every open transaction of ``prefix``'s ids aborted
    (found with ListTransactions: :mod:`kwire.admin_ops.leftovers`); for a
    batch job (no ``batch_id``: its prefix is its own), :func:`close_job`."""
    try:
        with Admin(admin_config(sink)) as admin:
            if batch_id is None:
                fenced = close_job(admin, sink, prefix)
            else:
                fenced = leftovers.abort(admin, prefix, END_TIMEOUT)[1]
    except KwireError as e:
        log.warning("kwire exactly-once: batch %s: the open transactions of %s not aborted: %s (their coordinators "
                    "abort them after transaction.timeout.ms, or the partitions' next attempts do)", batch_id, prefix, e)
        return
    log.warning("kwire exactly-once: batch %s failed: the transactions of %s aborted (%d transactional ids fenced); "
                "none of their rows visible", batch_id, prefix, len(fenced))


def close_job(admin: Admin, sink: SinkOptions, prefix: str) -> List[str]:
    """A failed batch write's clean-up, which its stragglers (tasks Spark
    let run on after the job failed) cannot slip past: first the job's
    abort marker (an offset of the group named ``prefix``, which each task
    reads after its ``InitProducerId`` and then writes nothing), then every
    transactional id of the job the coordinators know, in any state,
    fenced (an open transaction aborted; a task that has its epoch but has
    not begun is fenced too). A task whose ``InitProducerId`` came after
    the listing reads the marker. Returns the ids fenced."""
    _mark_job_aborted(admin, sink, prefix)
    try:
        return leftovers.abort(admin, prefix, END_TIMEOUT, every=True)[1]
    except KwireError as e:
        log.warning("kwire exactly-once: the transactions of %s not aborted: %s (their coordinators abort them after "
                    "transaction.timeout.ms)", prefix, e)
        return []


def _mark_job_aborted(admin: Admin, sink: SinkOptions, prefix: str) -> None:
    """The abort marker: offset 0 of partition 0 of a topic the job writes
    (the brokers keep offsets of existing topics only; the sink's
    ``topic``, else the first the client may see), metadata
    :data:`JOB_ABORTED`. Without it (no topic, or the group refused),
    a straggler's transaction is aborted only by its timeout."""
    try:
        topic = sink.topic or next(iter(admin.list_topics(timeout=END_TIMEOUT)), None)
        if topic is None:
            raise KwireError("no topic to hold the marker")
        admin.alter_group_offsets(prefix, {(topic, 0): OffsetAndMetadata(0, JOB_ABORTED)}, timeout=END_TIMEOUT)
    except KwireError as e:
        log.warning("kwire exactly-once: %s: the job's abort marker not written (%s): a task still running may "
                    "leave a transaction open until transaction.timeout.ms", prefix, e)


def fence(admin: Admin, transactional_ids: Sequence[str], batch_id: Optional[int]) -> None:
    """Fence ``transactional_ids`` (their open transactions aborted), logging a failure."""
    if not transactional_ids:
        return
    try:
        admin.fence_producers(transactional_ids, timeout=END_TIMEOUT)
    except KwireError as e:
        log.warning("kwire exactly-once: batch %s: fencing %s: %s (a transaction left open is aborted by its "
                    "coordinator after transaction.timeout.ms, or by the partition's next attempt)",
                    batch_id, ", ".join(transactional_ids), e)
