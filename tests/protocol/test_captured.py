"""Responses captured from the real Tansu broker (capture_tansu.py) decode
offline, down to the records inside the Fetch responses."""

from __future__ import annotations

import json
import os

import pytest

import kwire
from kwire.protocol import MESSAGES, decode_response

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "captured")
INDEX = json.load(open(os.path.join(HERE, "index.json")))


def _decode(name):
    meta = INDEX[name]
    with open(os.path.join(HERE, name + ".bin"), "rb") as f:
        frame = f.read()
    corr, resp = decode_response(frame, MESSAGES[meta["response"]], meta["version"])
    assert corr == 1
    return resp


@pytest.mark.parametrize("name", sorted(INDEX))
def test_every_capture_decodes(name):
    _decode(name)


def test_api_versions_uses_header_v0_even_when_flexible():
    resp = _decode("api_versions_v3")           # v3 is flexible; a v1 header would misparse
    keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert resp.error_code == 0 and 18 in keys and 1 in keys


def test_fetch_records_are_views_into_the_frame_and_decode():
    for name in ("fetch_v4", "fetch_v12"):
        part = _decode(name).responses[0].partitions[0]
        assert isinstance(part.records, memoryview)
        recs = kwire.decode(part.records, topic="cap", partition=0).records
        assert [(r.offset, r.key, r.value) for r in recs] == [(i, b"k%d" % i, b"value-%d" % i) for i in range(5)]
        assert part.high_watermark == 5


def test_metadata_and_produce():
    md = _decode("metadata_v12")
    assert md.topics[0].name == "cap" and len(md.topics[0].partitions) == 2
    assert _decode("metadata_v1").brokers[0].port > 0
    pr = _decode("produce_v9").responses[0].partition_responses[0]
    assert (pr.error_code, pr.base_offset) == (0, 0)
