"""Hypothesis properties over hostile bytes. Not collected directly:
test_corruption.py runs this file in a child interpreter, so a crash (a
segfault, an abort) fails that test instead of killing the test run.

Properties:
* any bytes, or any valid buffer with bytes overwritten, cut or inserted,
  either decode or raise a KwireError, in every decoder;
* with CRC checks on, overwriting bytes that a v2 batch's CRC covers never
  changes what is returned: the result is the records of the batches before
  the damaged one, or an error; never a silently altered or skipped record.
"""

from __future__ import annotations

import sys
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import kwire  # noqa: E402
from kwire import KwireError  # noqa: E402

from codec.helpers import CODECS, LEGACY_CODECS, as_tuples, build_legacy, build_v2, sample_records  # noqa: E402

EXAMPLES = int(os.environ.get("KWIRE_FUZZ_EXAMPLES", "400"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))


def _buffers():
    recs = sample_records(5)
    v2 = [build_v2(recs, c, base_offset=5 * i) for i, c in enumerate(CODECS)]
    legacy = [build_legacy(recs, m, c, base_offset=100 + 5 * i) for i, (m, c) in
              enumerate((m, c) for m in (0, 1) for c in LEGACY_CODECS)]
    return v2, legacy


V2, LEGACY = _buffers()
ALL = b"".join(V2 + LEGACY)
V2_BUF = b"".join(V2)
V07 = kwire.encode_v07([b"a" * 30, b"b"]) + kwire.encode_v07([b"c" * 10, b"d"], "gzip") + kwire.encode_v07([b"e"], "snappy")


def decode_all(buf: bytes) -> None:
    for crcs in (True, False):
        for call in (
            lambda: kwire.decode(buf, check_crcs=crcs, include_control=True),
            lambda: kwire.decode_columnar(buf, check_crcs=crcs),
            lambda: kwire.decode_columnar(buf, check_crcs=crcs, timestamp_unit="us"),
            lambda: kwire.decode_v07(buf, 0, check_crcs=crcs),
        ):
            try:
                call()
            except KwireError:
                pass
    try:
        for view in kwire.split_batches(buf).batches:
            try:
                kwire.decode(view)
            except KwireError:
                pass
    except KwireError:
        pass


edits = st.lists(st.tuples(st.integers(0, 2**20), st.integers(0, 255)), min_size=1, max_size=8)


def mutate(base: bytes, data) -> bytes:
    b = bytearray(base)
    for pos, val in data.draw(edits):
        b[pos % len(b)] = val
    kind = data.draw(st.sampled_from(["none", "cut", "insert", "splice"]))
    if kind == "cut":
        b = b[: data.draw(st.integers(0, len(b)))]
    elif kind == "insert":
        at = data.draw(st.integers(0, len(b)))
        b[at:at] = data.draw(st.binary(min_size=1, max_size=16))
    elif kind == "splice":
        a = data.draw(st.integers(0, len(b)))
        b = b[:a] + ALL[data.draw(st.integers(0, len(ALL))):][: data.draw(st.integers(0, 200))]
    return bytes(b)


@SETTINGS
@given(st.binary(max_size=400))
def test_random_bytes(buf):
    decode_all(buf)


@SETTINGS
@given(st.sampled_from([ALL, V2_BUF, V07] + V2 + LEGACY), st.data())
def test_mutated_buffers(base, data):
    decode_all(mutate(base, data))


@SETTINGS
@given(st.integers(0, len(V2) - 1), st.lists(st.tuples(st.integers(0, 2**20), st.integers(0, 255)), min_size=1, max_size=6))
def test_crc_guards_every_covered_byte(which, edits_):
    start = sum(len(b) for b in V2[:which])
    target = bytearray(V2[which])
    for pos, val in edits_:
        target[21 + pos % (len(target) - 21)] = val   # bytes 21.. are under the CRC32C
    if bytes(target) == V2[which]:
        return
    buf = b"".join(V2[:which]) + bytes(target) + b"".join(V2[which + 1:])
    before = as_tuples(kwire.decode(buf[:start]).records)
    for dec in (kwire.decode, kwire.decode_columnar):
        try:
            res = dec(buf)
        except KwireError:
            continue
        assert res.consumed == start, "a damaged batch was consumed"
        if dec is kwire.decode:
            assert as_tuples(res.records) == before
