"""Transactions for the producer: the transaction manager behind
``Producer.init_transactions`` / ``begin_transaction`` /
``send_offsets_to_transaction`` / ``commit_transaction`` /
``abort_transaction``.

A producer with a ``transactional_id`` has one :class:`TransactionManager`.
Its requests go through the producer's own :class:`kwire.client.Client`,
sent by the producer's sender thread (the only thread doing that client's
I/O), so they are ordered with the Produce requests as Kafka requires.

Two transaction protocols, chosen as Kafka's Java client chooses them: by
the cluster's finalized ``transaction.version`` feature (from the
ApiVersions answers, the one of the highest features epoch), read when
``init_transactions()`` has its producer id and again as each transaction
ends (:attr:`TransactionManager.transaction_version`):

* v1 (``transaction.version`` below 2, or a cluster without features):
  a partition's first batch of a transaction is held back until
  AddPartitionsToTxn has added the partition; offsets are added with
  AddOffsetsToTxn before TxnOffsetCommit (v4 at most); EndTxn v4 at most
  and Produce v11 at most (their newer versions are protocol v2's);
* v2 (KIP-890 part 2, ``transaction.version`` 2): Produce v12+ adds a
  partition to the transaction itself (nothing held back, no
  AddPartitionsToTxn), TxnOffsetCommit v5 adds the group (no
  AddOffsetsToTxn), and EndTxn v5 bumps the producer's epoch at the end of
  every transaction, commit or abort, answering the new epoch, or a new
  producer id with epoch 0 when the epoch would overflow, which the
  producer adopts (its sequences start again at 0). A late write of an
  ended transaction carries an old epoch and is refused by the partition
  leader, so it cannot open a transaction nobody ends (the hanging
  transactions KIP-890 defends against). An abortable error needs no
  InitProducerId epoch bump of the client's: the abort's EndTxn bumps it.
  A producer that sees the cluster move from v1 to v2 bumps its epoch
  (InitProducerId) once after the transaction that ends on v1, as Java's.

States (Kafka's): uninitialized -> ready -> in transaction -> committing
or aborting -> ready; errors put the manager in one of two states, as in
Kafka's clients:

* abortable error: a record of the transaction failed, or the broker said
  TRANSACTION_ABORTABLE, or the group fenced the offsets' member: the
  transaction cannot commit; ``abort_transaction()`` cleans up and the
  producer goes on (with a new epoch when the broker lost the producer's
  sequence state, KIP-360);
* INVALID_PRODUCER_EPOCH answered to a Produce: the coordinator bumped the
  epoch, either because the transaction timed out there (and it aborted
  it) or because a newer instance took the transactional id; a partition
  leader cannot tell which. As in Kafka's clients (KIP-588) the error is
  abortable: ``abort_transaction()`` sends no EndTxn (the coordinator
  would say PRODUCER_FENCED to the old epoch) but InitProducerId with the
  old epoch, which the coordinator answers with the epoch it bumped to
  after a timeout (the producer goes on), or PRODUCER_FENCED (fatal);
* fatal error: the producer was fenced by a newer instance with the same
  transactional id (PRODUCER_FENCED; INVALID_PRODUCER_EPOCH from the
  coordinator), or it is not authorized, or the transaction state is
  invalid: every call raises the error; only ``close()`` is left.

Two-phase commit (KIP-939, ``transaction_two_phase_commit_enable``, as
Java's producer names it): InitProducerId v6 with ``Enable2Pc``, so that
the coordinator never aborts the producer's transactions for their age; an
external coordinator (kwire.spark.exactly_once's driver) ends each one.
Kafka 4.4's definitions mark v6 unstable, and kwire sends no unstable
version, so the option fails there with the reason, until a Kafka release
marks v6 stable (and the brokers enable ``transaction.two.phase.commit.enable``).

Unsent batches of a transaction that is aborted, or of a producer in an
error state, fail with :class:`TransactionAbortedError` (or the fatal error).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple, Union

from kwire import protocol
from kwire.client import Steps, Wait, run_blocking
from kwire.commit import CommitFailedError, as_offsets, commit_errors, grouped_partitions
from kwire.coordinator import COORDINATOR_ERRORS, GROUP_KEY, TRANSACTION_KEY, CoordinatorLink, RequestPump
from kwire.errors import KwireError, error_for_code
from kwire.future import Future, KafkaTimeoutError
from kwire.protocol.api_keys import ApiKey, ErrorCode
from kwire.protocol.versions import MAX_VERSIONS, TRANSACTION_V2_MAX_VERSIONS, capped_version
from kwire.types import ConsumerGroupMetadata, OffsetAndMetadata

__all__ = ["TransactionManager", "TransactionAbortedError", "TransactionStateError"]

log = logging.getLogger(__name__)

FENCING = (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED)
FATAL = FENCING + (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ErrorCode.INVALID_TXN_STATE)
# the producer's sequence state is gone: abort, then bump the epoch (KIP-360)
NEEDS_EPOCH_BUMP = (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID,
                    ErrorCode.INVALID_PRODUCER_ID_MAPPING)
RETRY = (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS) + COORDINATOR_ERRORS
#: the finalized feature naming the cluster's transaction protocol, and the level of protocol v2 (KIP-890)
TRANSACTION_VERSION_FEATURE = "transaction.version"
TRANSACTION_V2 = 2

UNINITIALIZED = "uninitialized"
INITIALIZING = "initializing"
READY = "ready"
IN_TRANSACTION = "in transaction"
COMMITTING = "committing"
ABORTING = "aborting"
ABORTABLE_ERROR = "abortable error"
FATAL_ERROR = "fatal error"


class TransactionAbortedError(KwireError):
    """The record's transaction was aborted before the record was sent."""


class TransactionStateError(KwireError):
    """A transactional call in the wrong state (``send`` outside a
    transaction, ``commit_transaction`` after an error, ...)."""


#: InitProducerId's first version with ``Enable2Pc`` (KIP-939's two-phase commit).
TWO_PHASE_VERSION = 6


class TransactionManager:
    """The transactions of one producer (see the module docstring)."""

    def __init__(self, producer: Any) -> None:
        cfg = producer.cfg
        self.transactional_id: str = cfg["transactional_id"]
        if not cfg["enable_idempotence"]:
            raise KwireError("a transactional producer is idempotent: enable_idempotence must stay true "
                             "(and acks=all)")
        self._producer = producer
        self._client = producer._client
        self._pump = RequestPump(self._client)
        self._backoff_ms = cfg["retry_backoff_ms"]
        self._link = CoordinatorLink(self._pump, self._client, self.transactional_id, TRANSACTION_KEY,
                                     self._backoff_ms)
        self._group_links: Dict[str, CoordinatorLink] = {}
        self._timeout_ms = cfg["transaction_timeout_ms"]
        self._two_phase: bool = cfg["transaction_two_phase_commit_enable"]
        self._lock = threading.Lock()
        self.state = UNINITIALIZED
        self._error: Optional[BaseException] = None
        self._bump_epoch = False
        self._epoch_gone = False                  # Produce said INVALID_PRODUCER_EPOCH: no EndTxn to abort
        self._added: Set[Tuple[str, int]] = set()
        self._pending: Set[Tuple[str, int]] = set()
        self._adding = False
        self._add_retry_at = 0.0
        self._add_failures = 0                    # AddPartitionsToTxn requests failed in a row (sender thread)
        self._started = False                     # partitions or offsets in this transaction
        self._batches: List[Future] = []          # futures of this transaction's batches
        self.transaction_version = 1              # the protocol spoken: 1, or 2 (KIP-890; see the module doc)
        self._features_epoch = -1                 # the finalized features' epoch it was read from

    # ------------------------------------------------ protocol version
    @property
    def _caps(self) -> Mapping[int, int]:
        """The version caps of this manager's requests (and Produce)."""
        return TRANSACTION_V2_MAX_VERSIONS if self.transaction_version >= TRANSACTION_V2 else MAX_VERSIONS

    def _read_transaction_version(self, on_init: bool) -> bool:
        """Take the protocol from the cluster's finalized ``transaction.version``
        (when its features epoch is newer than the one last read); True when
        it moved from v1 to v2 after ``init_transactions()``: the epoch is
        then bumped once (InitProducerId), as Java's client does."""
        client = self._client
        epoch, features = client.finalized_features_epoch, client.finalized_features
        if epoch <= self._features_epoch and not on_init:
            return False
        self._features_epoch = max(epoch, self._features_epoch)
        was = self.transaction_version
        level = features.get(TRANSACTION_VERSION_FEATURE, 0)
        self.transaction_version = TRANSACTION_V2 if level >= TRANSACTION_V2 else 1
        if self.transaction_version != was or on_init:
            log.info("transactional producer %s: transaction protocol v%d (%s %s, features epoch %d)",
                     self.transactional_id, self.transaction_version, TRANSACTION_VERSION_FEATURE,
                     level if level else "not finalized", epoch)
        return not on_init and was < TRANSACTION_V2 <= self.transaction_version

    # ------------------------------------------------- sender thread
    def run(self) -> None:
        """The sender thread's turn: send queued requests, add partitions,
        fail unsent batches in an error state."""
        self._pump.pump()
        with self._lock:
            state, error = self.state, self._error
        if state in (ABORTABLE_ERROR, FATAL_ERROR) and error is not None:
            self.fail_unsent(error)
            return
        self._maybe_add_partitions()

    def partition_ready(self, tp: Tuple[str, int]) -> bool:
        """May a batch of ``tp`` be sent now? (Producer lock held.) v1: a
        partition not yet in the transaction is queued to be added; v2: its
        Produce adds it."""
        with self._lock:
            if tp in self._added:
                return True
            if self.state in (IN_TRANSACTION, COMMITTING):
                if self.transaction_version >= TRANSACTION_V2:
                    self._added.add(tp)
                    self._started = True
                    return True
                self._pending.add(tp)
            return False

    def produce_version(self, version: int) -> int:
        """The Produce version a transactional producer sends: v11 at most
        in protocol v1, the negotiated one in v2."""
        return capped_version({ApiKey.PRODUCE: version}, ApiKey.PRODUCE, self._caps) or 0

    def track(self, future: Future) -> None:
        """A batch of the transaction leaves the producer's buffer (sent and
        answered, failed or expired); its outcome is checked before the
        commit."""
        with self._lock:
            self._batches.append(future)

    def produce_error(self, code: int, error: BaseException) -> bool:
        """A Produce error of a transactional batch: True when it ends the
        batch and puts the transaction in an error state (the producer fails
        the batch), False for the producer's usual retry handling."""
        if code == ErrorCode.PRODUCER_FENCED:
            self._to_fatal(error)
            return True
        if code == ErrorCode.INVALID_PRODUCER_EPOCH:
            # timed out or fenced, the coordinator knows which: the abort asks it (module doc, KIP-588)
            with self._lock:
                self._bump_epoch = self._epoch_gone = True
            self._to_abortable(error)
            return True
        if code in NEEDS_EPOCH_BUMP or code == ErrorCode.TRANSACTION_ABORTABLE:
            with self._lock:
                self._bump_epoch = self._bump_epoch or code in NEEDS_EPOCH_BUMP
            self._to_abortable(error)
            return True
        return False

    def sequence_unknown(self, error: BaseException) -> None:
        """A batch given a sequence number expired (``delivery_timeout_ms``):
        it may or may not be in the log, or leave a gap in the sequence, so
        the transaction cannot commit and the abort bumps the epoch, as
        Kafka's client does."""
        with self._lock:
            self._bump_epoch = True
        self._to_abortable(error)

    def _maybe_add_partitions(self) -> None:
        with self._lock:
            if self._adding or not self._pending or time.monotonic() < self._add_retry_at:
                return
            node = self._link.node
            if node is None:
                self._adding = True
            else:
                tps = sorted(self._pending)
                self._adding = True
        if node is None:
            def found(f: Future) -> None:
                with self._lock:
                    self._adding = False
                    if f.failed():
                        self._add_retry_at = time.monotonic() + self._backoff_ms / 1000.0

            self._link.lookup().add_done_callback(found)
            return
        pid, epoch = self._producer._producer_id, self._producer._producer_epoch
        cls = protocol.message("AddPartitionsToTxnRequest")
        req = cls(v3_and_below_transactional_id=self.transactional_id, v3_and_below_producer_id=pid,
                  v3_and_below_producer_epoch=epoch,
                  v3_and_below_topics=[cls.AddPartitionsToTxnTopic(name=t, partitions=ps)
                                       for t, ps in grouped_partitions(tps).items()])
        self._pump.submit(node, lambda v: req).add_done_callback(lambda f: self._on_added(node, tps, f))
        self._client.wakeup()

    def _on_added(self, node: int, tps: List[Tuple[str, int]], fut: Future) -> None:
        retry = False
        with self._lock:
            self._adding = False
        if fut.failed():
            # said once until partitions are added again (a coordinator being restarted fails every
            # retry_backoff_ms for seconds)
            self._add_failures += 1
            log.log(logging.INFO if self._add_failures == 1 else logging.DEBUG,
                    "%s: AddPartitionsToTxn failed: %s; retrying", self.transactional_id, fut.exception())
            self._link.forget(node)
            retry = True
        else:
            resp = fut.value
            errors: Dict[Tuple[str, int], int] = {}
            for t in resp.results_by_topic_v3_and_below or ():
                for p in t.results_by_partition:
                    errors[(t.name, p.partition_index)] = p.partition_error_code
            added = [tp for tp in tps if errors.get(tp, ErrorCode.NONE) == ErrorCode.NONE]
            with self._lock:
                self._added.update(added)
                self._pending.difference_update(added)
                if added:
                    self._started = True
            for tp, code in errors.items():
                if not code:
                    continue
                if code in RETRY or code == ErrorCode.OPERATION_NOT_ATTEMPTED or protocol.error_for(code).retriable:
                    if code in COORDINATOR_ERRORS:
                        self._link.forget(node)
                    retry = True
                else:
                    self._error_code(code, "AddPartitionsToTxn", topic=tp[0], partition=tp[1])
                    return
            if added:
                if self._add_failures > 1:
                    log.info("%s: AddPartitionsToTxn succeeded after %d failed attempts", self.transactional_id,
                             self._add_failures)
                self._add_failures = 0
                log.debug("%s: added %s to the transaction", self.transactional_id, added)
        if retry:
            with self._lock:
                self._add_retry_at = time.monotonic() + self._backoff_ms / 1000.0
        self._client.wakeup()

    # ---------------------------------------------------------- errors
    def _to_fatal(self, error: BaseException) -> None:
        with self._lock:
            if self.state != FATAL_ERROR:
                log.error("transactional producer %s: fatal: %s", self.transactional_id, error)
            self.state, self._error = FATAL_ERROR, error
        self._client.wakeup()

    def _to_abortable(self, error: BaseException) -> None:
        with self._lock:
            if self.state == FATAL_ERROR:
                return
            if self.state != ABORTABLE_ERROR:
                log.warning("transactional producer %s: the transaction must be aborted: %s",
                            self.transactional_id, error)
            self.state, self._error = ABORTABLE_ERROR, error
        self._client.wakeup()

    def _error_code(self, code: int, api: str, **where: Any) -> BaseException:
        """Put an error answer's code into the state it calls for; return it."""
        err = error_for_code(code)(None, api=api, transactional_id=self.transactional_id, **where)
        with self._lock:
            aborting = self.state == ABORTING
        # an abort refused as abortable cannot be aborted again (Java 4.4: "Failed to abort transaction")
        if code in FATAL or (aborting and code == ErrorCode.TRANSACTION_ABORTABLE):
            self._to_fatal(err)
        else:
            if code in NEEDS_EPOCH_BUMP:
                with self._lock:
                    self._bump_epoch = True
            self._to_abortable(err)
        return err

    def _check(self, *allowed: str, what: str) -> None:
        with self._lock:
            state, error = self.state, self._error
        if state == FATAL_ERROR:
            assert error is not None
            raise error
        if state not in allowed:
            if state == ABORTABLE_ERROR:
                raise TransactionStateError(f"cannot {what}: the transaction must be aborted first ({error})") \
                    from error
            raise TransactionStateError(f"cannot {what} in state {state!r}")

    def check_send(self) -> None:
        """``send()`` of a transactional producer: only inside a transaction
        (v2: the transaction has begun on the broker's side, as Java's
        client counts it: its end is sent even if the record never is)."""
        with self._lock:
            state, error = self.state, self._error
            if state == IN_TRANSACTION and self.transaction_version >= TRANSACTION_V2:
                self._started = True
        if state == IN_TRANSACTION:
            return
        if state == FATAL_ERROR and error is not None:
            raise error               # fenced (or not authorized...): as every other call says
        if error is not None:
            raise TransactionStateError(f"cannot send: an earlier transactional request failed ({error})") from error
        raise TransactionStateError(f"cannot send in state {state!r}: call begin_transaction() first"
                                    if state == READY else f"cannot send in state {state!r}: call "
                                    "init_transactions() first")

    # ------------------------------------------------ blocking requests
    def _deadline(self, timeout: Optional[float]) -> float:
        return time.monotonic() + (timeout if timeout is not None else
                                   self._producer.cfg["max_block_ms"] / 1000.0)

    def _call(self, link: CoordinatorLink, make: Any, api: str, deadline: float,
              code_of: Any = lambda r: r.error_code, caps: Mapping[int, int] = MAX_VERSIONS) -> Steps:
        """Send to ``link``'s coordinator until an answer other than a
        retriable error comes; that answer's error, if any, raised (after
        putting it into the manager's state). A request the coordinator
        does not answer in time (dead, hung or cut off) is sent again to the
        coordinator looked up again, until the deadline
        (:meth:`CoordinatorLink.request`): each of these requests may be
        repeated (the coordinator answers a repeated EndTxn as the first,
        once that one is done)."""
        while True:
            try:
                resp = yield from link.request_steps(make, deadline, caps)
            except KafkaTimeoutError as e:      # the deadline passed without an answer
                raise KafkaTimeoutError(f"{api} of transactional producer {self.transactional_id!r}: "
                                        f"no answer from its coordinator until the timeout ({e})") from e
            code = code_of(resp)
            if not code:
                return resp
            if code in RETRY:
                if code in COORDINATOR_ERRORS:
                    link.forget(link.node)
                if time.monotonic() >= deadline:
                    raise KafkaTimeoutError(f"{api} of transactional producer {self.transactional_id!r}: "
                                            f"{protocol.error_for(code, api=api)} until the timeout")
                yield link.backoff(deadline)
                continue
            raise self._error_code(code, api)

    def _init_producer_id(self, deadline: float, bump: bool) -> Steps:
        p = self._producer
        pid, epoch = (p._producer_id, p._producer_epoch) if bump else (-1, -1)

        def make(v: Mapping[int, int]) -> Any:
            version = v.get(ApiKey.INIT_PRODUCER_ID, 0)
            if bump and version < 3:
                raise KwireError("the broker cannot bump a transactional producer's epoch (InitProducerId v3+); "
                                 "create a new producer")
            if self._two_phase and version < TWO_PHASE_VERSION:
                raise KwireError(f"transaction_two_phase_commit_enable needs InitProducerId v{TWO_PHASE_VERSION} "
                                 f"(KIP-939); kwire and the broker share v{version} at most (Kafka 4.4's definitions "
                                 f"mark v6 unstable: kwire sends it to brokers that offer it once they mark it "
                                 f"stable)")
            return protocol.message("InitProducerIdRequest")(
                transactional_id=self.transactional_id, transaction_timeout_ms=self._timeout_ms,
                producer_id=pid, producer_epoch=epoch, enable2_pc=self._two_phase)

        resp = yield from self._call(self._link, make, "InitProducerId", deadline)
        with p._lock:
            p._producer_id, p._producer_epoch = resp.producer_id, resp.producer_epoch
        log.info("transactional producer %s: producer id %s epoch %s", self.transactional_id,
                 resp.producer_id, resp.producer_epoch)

    # ---------------------------------------------------------- public
    def init_transactions(self, timeout: Optional[float] = None) -> None:
        """Register the transactional id (fencing older producers with it,
        and completing or aborting their open transaction)."""
        run_blocking(self.init_transactions_steps(timeout))

    def init_transactions_steps(self, timeout: Optional[float] = None) -> Steps:
        self._check(UNINITIALIZED, what="init_transactions()")
        with self._lock:
            self.state = INITIALIZING
        try:
            yield from self._init_producer_id(self._deadline(timeout), bump=False)
            self._read_transaction_version(on_init=True)
        except BaseException:
            with self._lock:
                if self.state == INITIALIZING:
                    self.state = UNINITIALIZED     # may be called again
            raise
        with self._lock:
            self.state = READY

    def begin_transaction(self) -> None:
        self._check(READY, what="begin_transaction()")
        with self._lock:
            self.state = IN_TRANSACTION
            self._started = False
            self._batches = []

    def send_offsets_to_transaction(self, offsets: Mapping[Tuple[str, int], Union[int, OffsetAndMetadata]],
                                    group: Union[str, ConsumerGroupMetadata],
                                    timeout: Optional[float] = None) -> None:
        """Commit ``offsets`` for the consumer group with the transaction
        (AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator).
        ``group``: ``consumer.group_metadata()`` (so a member fenced by a
        rebalance cannot commit) or a group id."""
        run_blocking(self.send_offsets_to_transaction_steps(offsets, group, timeout))

    def send_offsets_to_transaction_steps(self, offsets: Mapping[Tuple[str, int], Union[int, OffsetAndMetadata]],
                                          group: Union[str, ConsumerGroupMetadata],
                                          timeout: Optional[float] = None) -> Steps:
        self._check(IN_TRANSACTION, what="send_offsets_to_transaction()")
        meta = group if isinstance(group, ConsumerGroupMetadata) else ConsumerGroupMetadata(str(group))
        todo = as_offsets(offsets)
        deadline = self._deadline(timeout)
        p = self._producer
        pid, epoch = p._producer_id, p._producer_epoch
        caps = self._caps
        if caps is MAX_VERSIONS:       # v1: the group joins the transaction first (v2: TxnOffsetCommit v5 adds it)
            yield from self._call(self._link, lambda v: protocol.message("AddOffsetsToTxnRequest")(
                transactional_id=self.transactional_id, producer_id=pid, producer_epoch=epoch,
                group_id=meta.group_id), "AddOffsetsToTxn", deadline)
        with self._lock:
            self._started = True
        link = self._group_links.get(meta.group_id)
        if link is None:
            link = self._group_links[meta.group_id] = CoordinatorLink(
                self._pump, self._client, meta.group_id, GROUP_KEY, self._backoff_ms)
        cls = protocol.message("TxnOffsetCommitRequest")

        def make(v: Mapping[int, int]) -> Any:
            version = capped_version(v, ApiKey.TXN_OFFSET_COMMIT, caps) or 0
            member = version >= 3
            return cls(transactional_id=self.transactional_id, group_id=meta.group_id, producer_id=pid,
                       producer_epoch=epoch, generation_id=meta.generation_id if member else -1,
                       member_id=meta.member_id if member else "",
                       group_instance_id=meta.group_instance_id if member else None,
                       topics=[cls.TxnOffsetCommitRequestTopic(name=t, partitions=[
                           cls.TxnOffsetCommitRequestPartition(
                               partition_index=i, committed_offset=todo[(t, i)].offset,
                               committed_leader_epoch=todo[(t, i)].leader_epoch if version >= 2 else -1,
                               committed_metadata=todo[(t, i)].metadata)
                           for i in ps]) for t, ps in grouped_partitions(todo).items()])

        def first_code(resp: Any) -> int:
            errors = commit_errors(resp, "TxnOffsetCommit")
            return next((e.code for e in errors.values()), 0)   # type: ignore[attr-defined]

        try:
            yield from self._call(link, make, "TxnOffsetCommit", deadline, first_code, caps)
        except KwireError as e:
            code = getattr(e, "code", None)
            if code in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
                err = CommitFailedError(f"the group fenced the consumer these offsets are from: {e}")
                self._to_abortable(err)
                raise err from e
            raise

    def commit_transaction(self, timeout: Optional[float] = None) -> None:
        """Flush the transaction's records; if every one was written, commit
        the transaction (EndTxn). If one failed, raise its error: the
        transaction must be aborted. A commit that timed out (the records
        not all answered, or the coordinator not answering) may be called
        again: it goes on where it stopped (the coordinator takes a repeated
        EndTxn as the first)."""
        run_blocking(self.commit_transaction_steps(timeout))

    def commit_transaction_steps(self, timeout: Optional[float] = None) -> Steps:
        self._check(IN_TRANSACTION, COMMITTING, what="commit_transaction()")
        deadline = self._deadline(timeout)
        with self._lock:
            self.state = COMMITTING
        try:
            yield from self._producer._flush_steps(max(0.0, deadline - time.monotonic()))
            unflushed: Optional[KafkaTimeoutError] = None
        except KafkaTimeoutError as e:     # the wait, or a record that expired: told apart below
            unflushed = e
        with self._lock:
            failed = next((f.exception() for f in self._batches if f.failed()), None)
            state, error = self.state, self._error
        if failed is None and unflushed is not None:
            with self._lock:
                if self.state == COMMITTING:
                    self.state = IN_TRANSACTION       # commit_transaction() may be called again
            raise unflushed
        if failed is not None and state not in (ABORTABLE_ERROR, FATAL_ERROR):
            self._to_abortable(failed)
            state, error = ABORTABLE_ERROR, failed
        if state in (ABORTABLE_ERROR, FATAL_ERROR):
            assert error is not None
            if state == FATAL_ERROR:
                raise error
            raise TransactionStateError(f"the transaction cannot commit: {error}; abort it") from error
        yield from self._end(True, deadline)

    def abort_transaction(self, timeout: Optional[float] = None) -> None:
        """Abort: unsent records fail with :class:`TransactionAbortedError`,
        records in flight are waited for, then EndTxn(abort); after an error
        that lost the producer's sequence state, the epoch is bumped."""
        run_blocking(self.abort_transaction_steps(timeout))

    def abort_transaction_steps(self, timeout: Optional[float] = None) -> Steps:
        self._check(IN_TRANSACTION, ABORTABLE_ERROR, COMMITTING, what="abort_transaction()")
        deadline = self._deadline(timeout)
        with self._lock:
            self.state = ABORTING
        self.fail_unsent(TransactionAbortedError(f"transaction of {self.transactional_id!r} aborted"))
        p = self._producer
        with p._lock:
            in_flight = [b.future for bs in p._unacked.values() for b in bs]
        for f in in_flight:
            yield Wait(f, max(0.0, deadline - time.monotonic()))
            if not f.done():        # the wait ended, not the batch (a batch's own timeout is its own)
                raise KafkaTimeoutError("abort_transaction(): batches in flight not answered in time")
        with self._lock:
            # v1 only: in v2 the abort's EndTxn is what finds out (and bumps the epoch)
            epoch_gone = self._epoch_gone and self.transaction_version < TRANSACTION_V2
            self._epoch_gone = False
        yield from self._end(False, deadline, send=not epoch_gone)

    def _end(self, commit: bool, deadline: float, send: bool = True) -> Steps:
        """EndTxn (when the transaction has partitions or offsets; v2: the
        epoch it answers adopted), the manager ready again, then the epoch
        bump the transaction needs (v1 after lost sequence state, or the
        cluster moved to v2 meanwhile)."""
        with self._lock:
            started = self._started
        caps = self._caps
        if started and send:
            p = self._producer
            pid, epoch = p._producer_id, p._producer_epoch
            resp = yield from self._call(self._link, lambda v: protocol.message("EndTxnRequest")(
                transactional_id=self.transactional_id, producer_id=pid, producer_epoch=epoch, committed=commit),
                "EndTxn", deadline, caps=caps)
            self._adopt(resp, pid, epoch)
        log.debug("%s: transaction %s", self.transactional_id, "committed" if commit else "aborted")
        upgraded = self._read_transaction_version(on_init=False)
        with self._lock:
            self.state = READY
            self._error = None
            self._added.clear()
            self._pending.clear()
            self._started = False
            self._batches = []
            bump = upgraded or (self._bump_epoch and caps is MAX_VERSIONS)
            self._bump_epoch = False
        if bump:
            yield from self._init_producer_id(deadline, bump=True)

    def _adopt(self, resp: Any, pid: int, epoch: int) -> None:
        """EndTxn v5's producer id and epoch (the epoch bumped, or a new id
        at epoch 0 when it would overflow) become the producer's; an older
        EndTxn says -1."""
        new_pid, new_epoch = getattr(resp, "producer_id", -1), getattr(resp, "producer_epoch", -1)
        if new_pid < 0:
            return
        p = self._producer
        with p._lock:
            p._producer_id, p._producer_epoch = new_pid, new_epoch
        log.debug("%s: the coordinator ended the transaction of producer id %s epoch %s; now producer id %s "
                  "epoch %s", self.transactional_id, pid, epoch, new_pid, new_epoch)

    def fail_unsent(self, error: BaseException) -> None:
        """Fail every batch never sent (open, or waiting to be sent): the
        transaction they belong to will not commit. Batches sent at least
        once are left to finish, so their sequence numbers stay in order."""
        p = self._producer
        failed = []
        with p._lock:
            failed.extend(p._acc.clear())      # the open batches
            for q in p._ready.values():
                keep = [b for b in q if b.payload is not None]
                failed.extend(b for b in q if b.payload is None)
                q.clear()
                q.extend(keep)
        for b in failed:
            p._fail(b, error)
