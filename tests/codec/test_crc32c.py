"""The core's CRC32C: kwire's own three-stream SSE4.2 loop where the CPU
has SSE4.2 (src/kwire/_core/crc32c.h), google-crc32c's elsewhere; equal to
google-crc32c on every length, start and running CRC."""

from __future__ import annotations

import platform

import google_crc32c
from hypothesis import given, settings, strategies as st

from kwire import _codec as native


def test_the_implementation_is_kwires_own_on_x86_64_with_sse42():
    flags = open("/proc/cpuinfo").read() if platform.system() == "Linux" else ""
    if platform.machine() in ("x86_64", "AMD64") and " sse4_2" in flags:
        assert native.CRC32C_IMPLEMENTATION.startswith("kwire")
    else:
        assert native.CRC32C_IMPLEMENTATION == "google-crc32c"
    assert native.crc32c_extend(0, b"123456789") == 0xE3069283


def test_every_loop_and_tail_agrees_with_google_crc32c():
    data = bytes((i * 7919 + (i >> 5)) & 0xFF for i in range(3 * 5440 * 2 + 4000))
    for n in list(range(0, 64)) + [335, 336, 1007, 1008, 1009, 4079, 4080, 4081, 16319, 16320, 16321, 36000]:
        for start in (0, 3):
            chunk = data[start:start + n]
            assert native.crc32c_extend(0x9E3779B9, chunk) == google_crc32c.extend(0x9E3779B9, chunk), (n, start)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40_000), st.integers(0, 2**32 - 1), st.integers(0, 16))
def test_random_inputs_agree_with_google_crc32c(data, crc, cut):
    view = memoryview(data)[min(cut, len(data)):]
    assert native.crc32c_extend(crc, view) == google_crc32c.extend(crc, bytes(view))
