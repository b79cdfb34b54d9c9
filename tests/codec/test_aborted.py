"""read_committed in the compiled decoders: an :class:`kwire.Aborter` made
from a Fetch response's aborted-transaction list drops the aborted
transactions' batches and every control batch as Decoder and
ColumnarDecoder walk the batches, decided once per batch at its header.

Checked against a Python model of the rules (:func:`model`), over chosen
and random interleavings of producers, chunks, calls stopping inside
batches, both decoders taking turns, a call that raises (its aborter
changes undone) and hostile aborted lists."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence, Set, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kwire
from kwire import Aborter, ColumnarDecoder, CorruptRecordError, Decoder

from .helpers import fix_v2_crc

ABORT, COMMIT = 0, 1


# ------------------------------------------------------------- the log
@dataclass
class B:
    """One v2 batch of the log: ``n`` records of producer ``pid`` from
    ``base`` on, or (``marker`` 0/1) its ABORT/COMMIT control batch."""
    base: int
    pid: int
    n: int = 1
    txn: bool = True
    marker: Optional[int] = None
    codec: Optional[str] = None

    @property
    def last(self) -> int:
        return self.base + self.n - 1

    def build(self) -> bytes:
        b = kwire.RecordBatchBuilder(self.codec, base_offset=self.base, producer_id=self.pid, producer_epoch=0,
                                     base_sequence=-1 if self.marker is not None else 0, transactional=self.txn,
                                     is_control=self.marker is not None)
        if self.marker is not None:
            b.append(struct.pack(">hi", 0, 7), key=struct.pack(">hh", 0, self.marker), timestamp=1)
        else:
            for i in range(self.n):
                b.append(b"p%d-%d" % (self.pid, self.base + i), key=b"k", timestamp=1_000 + i)
        return b.build()


def data(batches: Iterable[B]) -> bytes:
    return b"".join(b.build() for b in batches)


def model(chunks: Sequence[Tuple[Sequence[Tuple[int, int]], Sequence[B]]],
          aborting: Iterable[int] = ()) -> Tuple[List[int], Set[int]]:
    """The offsets read_committed returns from ``chunks`` (each the aborted
    list its Fetch response gave and its batches) and the producers still
    aborting after them."""
    pending: List[Tuple[int, int]] = []
    now = set(aborting)
    out: List[int] = []
    for aborted, batches in chunks:
        pending = sorted(pending + list(aborted), key=lambda e: e[1])
        for b in batches:
            while pending and pending[0][1] <= b.last:
                now.add(pending.pop(0)[0])
            if b.marker is not None:
                if b.pid in now and b.marker == ABORT:
                    now.discard(b.pid)
            elif not (b.txn and b.pid in now):
                out.extend(range(b.base, b.last + 1))
    return out, now


def offsets(res) -> List[int]:
    if isinstance(res, kwire.DecodeResult):
        return [r.offset for r in res.records]
    return res.record_batch.column("offset").to_pylist()


DECODERS = [Decoder, ColumnarDecoder]


def stepped(buf: bytes, aborter: Aborter, kinds: Iterable[int], *, min_offset: int = -1,
            max_records: int = -1, max_bytes: int = -1) -> Tuple[List[int], int]:
    """Decode ``buf`` through bounded calls, the decoder of each call taken
    from ``kinds`` (0 objects, 1 columns), as the consumer's fetcher does:
    a batch begun by the other kind is decoded again from its start. Returns
    the offsets and the next offset."""
    decoders = [Decoder(), ColumnarDecoder()]
    out: List[int] = []
    pos, resume, resume_kind, resume_at = 0, None, -1, 0
    kinds = iter(kinds)
    for _ in range(10_000):
        if pos >= len(buf) and resume is None:
            break
        kind = next(kinds)
        if resume is not None and resume_kind != kind:
            pos, resume = resume_at, None
        res = decoders[kind].decode(buf[pos:], min_offset=min_offset, max_records=max_records,
                                    max_bytes=max_bytes, resume=resume, aborter=aborter)
        out += offsets(res)
        if res.resume is not None and resume is None:
            resume_at = pos + res.consumed - res.resume.batch_bytes
        resume, resume_kind = res.resume, kind
        pos += res.consumed
        if res.next_offset is not None:
            min_offset = res.next_offset
    else:
        raise AssertionError("no progress")
    return out, min_offset


def both(buf: bytes, aborted: Sequence[Tuple[int, int]], **kw) -> List[List[int]]:
    """The offsets each decoder returns from ``buf`` in one call (the same next_offset)."""
    results = [d().decode(buf, aborter=Aborter(aborted), **kw) for d in DECODERS]
    assert results[0].next_offset == results[1].next_offset
    return [offsets(r) for r in results]


# ---------------------------------------------------------- chosen cases
INTERLEAVED = [B(0, 1, 2), B(2, 2, 2), B(4, 1, 3), B(7, 3, 1, txn=False), B(8, 2, 1), B(9, 1, marker=ABORT),
               B(10, 2, 2), B(12, 2, marker=COMMIT), B(13, 1, 2), B(15, 1, marker=COMMIT)]


def test_interleaved_producers_one_aborts_one_commits():
    buf = data(INTERLEAVED)
    want, left = model([([(1, 0)], INTERLEAVED)])
    assert want == [2, 3, 7, 8, 10, 11, 13, 14]
    assert both(buf, [(1, 0)]) == [want, want]
    a = Aborter([(1, 0)])
    res = Decoder(include_control=True).decode(buf, aborter=a)      # an aborter: no control record, ever
    assert offsets(res) == want and res.next_offset == 16
    assert a.aborting == frozenset(left) == frozenset() and a.pending == []


def test_without_aborter_everything_and_with_an_empty_one_no_control_records():
    buf = data(INTERLEAVED)
    everything = [o for b in INTERLEAVED if b.marker is None for o in range(b.base, b.last + 1)]
    assert offsets(Decoder().decode(buf)) == everything
    assert offsets(Decoder(include_control=True).decode(buf)) == list(range(16))
    assert both(buf, []) == [everything, everything]


def test_an_aborted_transaction_spanning_two_chunks_and_two_calls():
    first, second = INTERLEAVED[:4], INTERLEAVED[4:]
    want, _ = model([([(1, 0)], first), ([], second)])
    for kind in (0, 1):
        a = Aborter([(1, 0)])
        got = offsets(DECODERS[kind]().decode(data(first), aborter=a))
        assert a.aborting == {1}                          # carried into the next chunk
        a.extend([])                                      # its response lists nothing (or the same entry again)
        got += offsets(DECODERS[kind]().decode(data(second), aborter=a))
        assert got == want == [2, 3, 7, 8, 10, 11, 13, 14]
        b = Aborter([(1, 0)])
        got, _ = stepped(data(first), b, [kind] * 100, max_records=1)
        b.extend([(1, 0)])                                # listed again: harmless
        more, _ = stepped(data(second), b, [kind] * 100, max_records=1)
        assert got + more == want


def test_the_abort_marker_of_a_producer_not_listed_ends_nothing():
    log = [B(0, 1, 2), B(2, 2, 2), B(4, 2, marker=ABORT), B(5, 1, 2), B(7, 1, marker=ABORT), B(8, 2, 1)]
    want, _ = model([([(1, 0)], log)])
    assert want == [2, 3, 8]                               # producer 2's records: the broker did not list them
    assert both(data(log), [(1, 0)]) == [want, want]


def test_a_pending_entry_whose_first_offset_is_inside_a_batch_drops_that_batch():
    log = [B(0, 1, 5), B(5, 1, 5), B(10, 1, marker=ABORT), B(11, 1, 2)]
    assert both(data(log), [(1, 7)]) == [[0, 1, 2, 3, 4, 11, 12]] * 2
    assert both(data(log), [(1, 4)]) == [[11, 12]] * 2      # first offset 4 is inside the first batch


def test_max_records_1_steps_through_with_either_decoder_and_both_in_turn():
    buf = data(INTERLEAVED)
    want, _ = model([([(1, 0)], INTERLEAVED)])
    for kinds in ([0] * 100, [1] * 100, [0, 1] * 50, [1, 1, 0] * 40):
        got, nxt = stepped(buf, Aborter([(1, 0)]), kinds, max_records=1)
        assert (got, nxt) == (want, 16)
        got, nxt = stepped(buf, Aborter([(1, 0)]), kinds, max_bytes=1)
        assert (got, nxt) == (want, 16)


def test_next_offset_moves_past_dropped_batches_and_trailing_control_batches():
    log = [B(0, 2, 2, codec="gzip"), B(2, 1, 3, codec="lz4"), B(5, 1, 2, codec="zstd"), B(7, 1, marker=ABORT),
           B(8, 2, marker=COMMIT)]
    for d in DECODERS:
        res = d().decode(data(log), aborter=Aborter([(1, 2)]))
        assert offsets(res) == [0, 1] and res.next_offset == 9
        res = d().decode(data(log[1:]), aborter=Aborter([(1, 2)]))
        assert offsets(res) == [] and res.next_offset == 9 and res.consumed == len(data(log[1:]))


def test_a_dropped_batch_is_not_decompressed_but_its_crc_is_checked():
    bad = bytearray(B(0, 1, 3, codec="gzip").build())
    bad[-3:] = b"\xff\xff\xff"                         # no gzip stream, but the CRC fixed: dropped unread
    buf = bytes(fix_v2_crc(bad)) + B(3, 1, marker=ABORT).build() + B(4, 1, 1).build()
    assert both(buf, [(1, 0)]) == [[4], [4]]
    with pytest.raises(CorruptRecordError):             # not aborted: read, and found broken
        Decoder().decode(buf, aborter=Aborter())
    crc_broken = bytearray(buf)
    crc_broken[30] ^= 1                                 # inside the CRC's span of the dropped batch
    for d in DECODERS:
        with pytest.raises(kwire.CrcMismatchError):
            d().decode(bytes(crc_broken), aborter=Aborter([(1, 0)]))


def test_a_compressed_abort_marker_is_read():
    log = [B(0, 1, 2), B(2, 1, marker=ABORT, codec="zstd"), B(3, 1, 2)]
    assert both(data(log), [(1, 0)]) == [[3, 4]] * 2


def test_a_short_control_key_of_an_aborting_producer_is_corrupt_and_undone():
    m = kwire.RecordBatchBuilder(base_offset=2, producer_id=1, transactional=True, is_control=True)
    m.append(b"", key=b"\x00\x00", timestamp=1)
    buf = B(0, 1, 2).build() + m.build() + B(3, 1, 1).build()
    for d in DECODERS:
        a = Aborter([(1, 0)])
        with pytest.raises(CorruptRecordError) as e:
            d().decode(buf, aborter=a, topic="t", partition=3)
        assert e.value.offset == 2
        assert a.pending == [(1, 0)] and a.aborting == frozenset()
    # not aborting: the marker is not read (as control batches are skipped unread)
    assert both(buf, []) == [[0, 1, 3]] * 2


def corrupt_after_abort() -> Tuple[List[B], bytes]:
    log = [B(0, 1, 3), B(3, 2, 2), B(5, 1, marker=ABORT), B(6, 2, marker=COMMIT), B(7, 1, 2)]
    bad = bytearray(B(9, 2, 2).build())
    bad[-2] ^= 0x55                                     # a record byte: the CRC no longer matches
    return log, data(log) + bytes(bad)


@pytest.mark.parametrize("kind", [0, 1])
def test_a_call_that_raises_undoes_its_changes_and_the_narrow_redecode_drops_the_same(kind):
    log, buf = corrupt_after_abort()
    want, _ = model([([(1, 0)], log)])
    assert want == [3, 4, 7, 8]
    a = Aborter([(1, 0)])
    with pytest.raises(CorruptRecordError):
        DECODERS[kind]().decode(buf, aborter=a)
    assert a.pending == [(1, 0)] and a.aborting == frozenset()     # as before the call
    # the fetcher's narrow mode: the same bytes again, a batch (or its first record) per call
    got, pos, min_offset, resume = [], 0, -1, None
    with pytest.raises(CorruptRecordError) as e:
        while True:
            res = DECODERS[kind]().decode(buf[pos:], aborter=a, max_bytes=1, min_offset=min_offset, resume=resume)
            got += offsets(res)
            pos, resume, min_offset = pos + res.consumed, res.resume, res.next_offset
    assert e.value.offset == 9 and got == want and min_offset == 9
    assert a.aborting == frozenset()


def test_a_raise_inside_a_later_chunk_keeps_what_earlier_calls_did():
    a = Aborter([(1, 0)])
    Decoder().decode(data([B(0, 1, 2)]), aborter=a)
    assert a.aborting == {1}
    _, buf = corrupt_after_abort()
    with pytest.raises(CorruptRecordError):
        ColumnarDecoder().decode(buf[len(B(0, 1, 3).build()):], aborter=a)
    assert a.aborting == {1} and a.pending == []


def test_decoding_a_batch_again_from_its_start_is_harmless():
    """The fetcher decodes a batch begun by the other decoder again from its
    start: the aborter already decided it (and the batches before it)."""
    log = [B(0, 1, 2), B(2, 1, marker=ABORT), B(3, 1, 4), B(7, 1, marker=COMMIT), B(8, 2, 2)]
    buf = data(log)
    a = Aborter([(1, 0), (2, 8)])
    first = Decoder().decode(buf, aborter=a, max_records=2)
    assert offsets(first) == [3, 4] and first.resume is not None
    start = first.consumed - first.resume.batch_bytes
    assert buf[start:].startswith(B(3, 1, 4).build())
    state = (a.pending, a.aborting)
    for _ in range(2):                                  # again and again: the same
        again = ColumnarDecoder().decode(buf[start:], aborter=a, min_offset=first.next_offset, max_records=2)
        assert offsets(again) == [5, 6] and (a.pending, a.aborting) == state
    rest = Decoder().decode(buf[first.consumed:], aborter=a, resume=first.resume, min_offset=first.next_offset)
    assert offsets(rest) == [5, 6] and rest.next_offset == 10 and a.aborting == {2}


def test_aborter_api():
    a = Aborter([(5, 9), (3, 2), (5, 2)])
    assert a.pending == [(3, 2), (5, 2), (5, 9)] and a.aborting == frozenset()
    a.extend(iter([(1, 0)]))
    assert a.pending[0] == (1, 0)
    assert "Aborter(" in repr(a)
    with pytest.raises(OverflowError):
        Aborter([(2**63, 0)])
    with pytest.raises(OverflowError):
        Aborter([(0, -2**63 - 1)])
    with pytest.raises((TypeError, ValueError)):
        Aborter([(1,)])
    with pytest.raises(TypeError):
        Aborter([("1", 2)])
    with pytest.raises(TypeError):
        Aborter(None)
    with pytest.raises(TypeError):
        Decoder().decode(b"", aborter=[(1, 0)])
    a = Aborter([(1, 0)])
    a.extend([(2**63 - 1, 2**63 - 1)])                 # a failed extend leaves it whole
    with pytest.raises(TypeError):
        a.extend([(1, 2), None])
    assert a.pending == [(1, 0), (2**63 - 1, 2**63 - 1)]


def test_hostile_aborted_lists_never_crash():
    extremes = [(2**63 - 1, 2**63 - 1), (-1, -2**63), (1, 0), (1, 0), (1, -5), (-2**63, 2**63 - 1), (2, 2**62)]
    log = INTERLEAVED + [B(2**62, 2, 1), B(2**63 - 2, -1, 2)]
    want, left = model([(extremes, log)])
    assert want == [2, 3, 7, 8, 10, 11, 13, 14]
    for d in DECODERS:
        a = Aborter(extremes)
        res = d().decode(data(log), aborter=a)
        assert offsets(res) == want and a.aborting == frozenset(left) == {-1, 2, 2**63 - 1, -2**63}
        assert res.next_offset == -2**63                  # past the last offset there is: wraps (add_wrap)


# ------------------------------------------------------ against the model
@st.composite
def logs(draw):
    """A log of interleaved producers: data batches (transactional or not,
    compressed or not), COMMIT and ABORT markers, offset gaps (compaction);
    the aborted list a broker gives (each aborted transaction's producer and
    first offset), sometimes with junk entries, split over chunks."""
    pids = [1, 2, 3]
    open_at = {}
    aborted = []
    batches = []
    offset = draw(st.integers(0, 3))
    for _ in range(draw(st.integers(1, 14))):
        pid = draw(st.sampled_from(pids))
        what = draw(st.sampled_from(["data", "data", "data", "plain", "commit", "abort"]))
        if what in ("data", "plain"):
            n = draw(st.integers(1, 3))
            batches.append(B(offset, pid, n, txn=what == "data", codec=draw(st.sampled_from([None, None, "lz4", "gzip"]))))
            if what == "data":
                open_at.setdefault(pid, offset)
            offset += n
        else:
            batches.append(B(offset, pid, marker=ABORT if what == "abort" else COMMIT))
            start = open_at.pop(pid, None)
            if what == "abort" and start is not None:
                aborted.append((pid, start))
            offset += 1
        offset += draw(st.integers(0, 1)) * draw(st.integers(1, 3))
    aborted += draw(st.lists(st.tuples(st.sampled_from(pids + [-1, 7]), st.integers(-3, offset + 3)), max_size=2))
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(batches) - 1)), max_size=2))))
    chunks, prev = [], 0
    for cut in cuts + [len(batches)]:
        if cut > prev:
            here = batches[prev:cut]
            listed = [e for e in aborted if e[1] <= here[-1].last] if not chunks else \
                [e for e in aborted if here[0].base <= e[1] <= here[-1].last]
            chunks.append((listed, here))
            prev = cut
    return chunks


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunks=logs(), kinds=st.lists(st.integers(0, 1), min_size=1, max_size=8),
       max_records=st.sampled_from([-1, 1, 2, 5]), max_bytes=st.sampled_from([-1, 1, 60]))
def test_decoders_agree_with_the_model(chunks, kinds, max_records, max_bytes):
    want, left = model(chunks)
    for how in range(3):
        a = Aborter()
        got: List[int] = []
        min_offset = -1
        for aborted, batches in chunks:
            a.extend(aborted)
            buf = data(batches)
            if how < 2:
                res = DECODERS[how]().decode(buf, aborter=a, min_offset=min_offset)
                got += offsets(res)
                min_offset = res.next_offset
            else:
                more, min_offset = stepped(buf, a, kinds * 2000, min_offset=min_offset,
                                           max_records=max_records, max_bytes=max_bytes)
                got += more
            assert min_offset == batches[-1].last + 1
        assert got == want, how
        assert a.aborting == frozenset(left) and a.pending == []
