"""A share group's acknowledgements and sessions without a broker
(kwire.share.acks, kwire.share.session) and the compiled sorting of a
ShareFetch answer's records by the acquired ranges
(kwire._core.acquired.take_acquired): records built by kwire's own batch
builder."""

from __future__ import annotations

import uuid

import pytest

from kwire._codec import RecordBatchBuilder, decode
from kwire._core.acquired import ShareRecord, take_acquired
from kwire.protocol.api_keys import ErrorCode
from kwire.share.acks import GAP, MAX_SAME, AcknowledgeType, ack_batches, merge_ranges
from kwire.share.session import FINAL_EPOCH, ShareSession, next_epoch

A, R, J, N = (int(t) for t in (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT,
                               AcknowledgeType.RENEW))


def test_batches_follow_runs_and_collapse_uniform_types():
    assert ack_batches({}) == []
    assert ack_batches({5: A}) == [(5, 5, [A])]
    assert ack_batches({0: A, 1: A, 2: R, 5: A, 6: A}) == [(0, 2, [A, A, R]), (5, 6, [A])]
    assert ack_batches({i: A for i in range(1000)}) == [(0, 999, [A])]


def test_a_long_stretch_inside_a_mixed_run_is_its_own_batch():
    acks = {0: R, 1: GAP, **{i: A for i in range(2, 2 + MAX_SAME + 1)}, 13: J, 14: A}
    assert ack_batches(acks) == [(0, 1, [R, GAP]), (2, 12, [A]), (13, 14, [J, A])]
    short = {0: R, **{i: A for i in range(1, 1 + MAX_SAME)}}         # ten equal: stays per offset
    assert ack_batches(short) == [(0, MAX_SAME, [R] + [A] * MAX_SAME)]


def test_ranges_merge_in_order_without_overlap():
    assert merge_ranges([(10, 20, 1), (0, 5, 2), (15, 25, 3), (3, 4, 9), (30, 29, 1)]) == [
        (0, 5, 2), (10, 20, 1), (21, 25, 3)]


def _records(offsets):
    """Decoded records at ``offsets`` (a batch each; the others absent, as compaction leaves them)."""
    data = b""
    for o in offsets:
        b = RecordBatchBuilder(base_offset=o)
        b.append(b"v%d" % o, key=b"k%d" % o, timestamp=1000 + o)
        data += b.build()
    return decode(data).records


def test_take_acquired_delivers_the_acquired_records_and_reports_gaps():
    records = _records([0, 1, 2, 4, 5, 8, 9])
    taken, gaps = take_acquired(records, [(1, 5, 2), (7, 11, 1)], "t", 3)
    assert [(r.offset, r.delivery_count, r.value) for r in taken] == [
        (1, 2, b"v1"), (2, 2, b"v2"), (4, 2, b"v4"), (5, 2, b"v5"), (8, 1, b"v8"), (9, 1, b"v9")]
    assert gaps == [(3, 3), (7, 7), (10, 11)]
    assert all(isinstance(r, ShareRecord) and (r.topic, r.partition) == ("t", 3) and r.timestamp == 1000 + r.offset and r.key == b"k%d" % r.offset
               for r in taken)
    assert taken[0].batch is records[1].batch and taken[0].timestamp_type == records[1].timestamp_type
    assert take_acquired([], [(3, 4, 1)]) == ([], [(3, 4)])
    assert take_acquired(records, []) == ([], [])
    with pytest.raises(ValueError):
        take_acquired(records, [(5, 4, 1)])
    with pytest.raises(TypeError):
        take_acquired(None, [])


def test_acquired_rows_pick_the_columnar_rows_and_agree_with_take_acquired():
    import array
    import struct

    from kwire._core.acquired import acquired_rows

    offsets = [0, 1, 2, 4, 5, 8, 9]
    ranges = [(1, 5, 2), (7, 11, 1)]
    rows, counts, gaps = acquired_rows(memoryview(array.array("q", offsets)), ranges)
    taken, want_gaps = take_acquired(_records(offsets), ranges)
    assert [offsets[i] for i in struct.unpack(f"{len(rows) // 4}i", rows)] == [r.offset for r in taken]
    assert list(struct.unpack(f"{len(counts) // 2}h", counts)) == [r.delivery_count for r in taken]
    assert gaps == want_gaps
    whole = acquired_rows(memoryview(array.array("q", [3, 4, 5])), [(3, 5, 4)])
    assert whole == (None, struct.pack("3h", 4, 4, 4), [])                  # every row: the batch taken whole
    assert acquired_rows(memoryview(array.array("q")), [(3, 4, 1)]) == (None, b"", [(3, 4)])
    with pytest.raises(ValueError):
        acquired_rows(memoryview(array.array("q", offsets)), [(5, 4, 1)])
    with pytest.raises(TypeError):
        acquired_rows(None, [])


T1, T2 = uuid.uuid4(), uuid.uuid4()


def test_a_session_opens_with_everything_then_names_changes_only():
    s = ShareSession(1)
    acks = {(T1, 0): [(0, 4, [A])]}
    plan = s.plan({(T1, 0), (T1, 1)}, acks)
    assert plan.epoch == 0 and set(plan.named) == {(T1, 0), (T1, 1)} and not any(plan.named.values())
    s.sent(plan)
    s.answered(0)
    assert s.epoch == 1 and s.partitions == {(T1, 0), (T1, 1)}
    plan = s.plan({(T1, 1), (T2, 0)}, acks)                 # (T1, 0) dropped, carrying its last acks
    assert plan.epoch == 1 and plan.named == {(T2, 0): [], (T1, 0): [(0, 4, [A])]}
    assert plan.forgotten == [(T1, 0)] and not plan.renew
    s.sent(plan)
    s.answered(0)
    assert s.epoch == 2 and s.partitions == {(T1, 1), (T2, 0)}
    plan = s.plan({(T1, 1), (T2, 0)}, {(T2, 0): [(3, 3, [N])], (T1, 5): [(1, 1, [A])]})
    assert plan.renew and plan.forgotten == [(T1, 5)] and set(plan.named) == {(T2, 0), (T1, 5)}


@pytest.mark.parametrize("error", [ErrorCode.SHARE_SESSION_NOT_FOUND, ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                                   ErrorCode.SHARE_SESSION_LIMIT_REACHED])
def test_session_errors_and_failures_start_again(error):
    s = ShareSession(1)
    s.sent(s.plan({(T1, 0)}, {}))
    s.answered(0)
    s.sent(s.plan({(T1, 0)}, {}))
    s.answered(error)
    assert s.is_new and s.partitions == set()
    s.sent(s.plan({(T1, 0)}, {}))
    s.answered(ErrorCode.GROUP_AUTHORIZATION_FAILED)        # not a session error: the epoch advances
    assert s.epoch == 1
    s.sent(s.plan({(T1, 0)}, {}))
    s.failed()
    assert s.is_new


def test_closing_carries_the_last_acks_and_forgets_the_session():
    s = ShareSession(1)
    s.sent(s.plan({(T1, 0)}, {}))
    s.answered(0)
    plan = s.plan({(T1, 0)}, {(T1, 0): [(0, 1, [A, R])]}, close=True)
    assert plan.epoch == FINAL_EPOCH and plan.named == {(T1, 0): [(0, 1, [A, R])]} and plan.forgotten == []
    s.sent(plan)
    s.answered(0)
    assert s.is_new and s.partitions == set()
    assert (next_epoch(5), next_epoch(2 ** 31 - 1), next_epoch(-1)) == (6, 1, -1)


def test_a_v1_broker_is_refused_renew_and_record_limit_by_name():
    from kwire.errors import UnsupportedVersionError
    from kwire.protocol.api_keys import ApiKey
    from kwire.share.consumer import version_refusal

    v1, v2 = {ApiKey.SHARE_FETCH: 1}, {ApiKey.SHARE_FETCH: 2}
    assert version_refusal({}, 1, "record_limit", True) is None               # not connected yet: not known
    assert version_refusal(v2, 1, "record_limit", True) is None
    assert version_refusal(v1, 1, "batch_optimized", False) is None
    renew = version_refusal(v1, 3, "batch_optimized", True)
    assert isinstance(renew, UnsupportedVersionError) and "RENEW needs ShareFetch v2 (Kafka 4.2+); node 3" in str(renew)
    limit = version_refusal(v1, 3, "record_limit", False)
    assert isinstance(limit, UnsupportedVersionError) and "use 'batch_optimized'" in str(limit)
