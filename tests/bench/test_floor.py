"""benchmarks/compare_floor.py and its C floor (benchmarks/floor/floor.c):
the program builds, reads the same bytes as kwire's ColumnarDecoder and
agrees with it (records, null keys, key and value bytes, offsets, and a
CRC32C of the key and value columns' data and offsets; for the "columns"
mode, a CRC32C of the offset, timestamp, timestamp type and header columns
and the nulls of values, header lists and header values), refuses a corrupt
batch, and the script's --json is a results file the history reads. Small
inputs and short timings: a few seconds."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import compare_floor, history, workload  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CC", "gcc")) is None,
                                reason="no C compiler (gcc, or $CC) to build benchmarks/floor/floor.c")


@pytest.fixture(scope="module")
def floor_exe(tmp_path_factory):
    return compare_floor.build_floor(str(tmp_path_factory.mktemp("floor")))


@pytest.mark.parametrize("shape", ["held-back", "mixed"])
def test_the_floor_agrees_with_kwire(floor_exe, tmp_path, shape):
    buf = compare_floor.held_back_mix(200_000) if shape == "held-back" else workload.buffer("none", 3, "mixed")
    path = tmp_path / "in.bin"
    path.write_bytes(buf)
    got = compare_floor.run_floor(floor_exe, str(path), 65536, 0.001)
    mine = compare_floor.kwire_summary(buf)
    assert {k: got[k] for k in mine} == mine
    assert mine["records"] > 0 and (shape != "held-back" or 0 < mine["null_keys"] < mine["records"])
    assert got["chunks"] == len(workload.fetches(buf, 65536))
    assert set(got["results"]) == set(compare_floor.MODES)
    assert all(got["results"][m][c] > 0 for m in compare_floor.MODES for c in compare_floor.CASES)


def test_the_held_back_mix_is_what_the_issue_describes():
    import kwire

    rb = kwire.ColumnarDecoder().decode(compare_floor.held_back_mix(300_000)).record_batch
    keys = [k for k in rb.column("key").to_pylist() if k is not None]
    assert set(map(len, keys)) == {8, 16, 36}
    assert 0.05 < 1 - len(keys) / rb.num_rows < 0.15                      # about a tenth null
    assert all(40 <= len(v) <= 200 for v in rb.column("value").to_pylist())
    with_headers = sum(1 for h in rb.column("headers").to_pylist() if h)
    assert 0.4 < with_headers / rb.num_rows < 0.6                          # about half
    assert rb.column("offset").to_pylist() == list(range(rb.num_rows))     # a broker's offsets


def test_the_floor_refuses_a_corrupt_batch(floor_exe, tmp_path):
    buf = bytearray(compare_floor.held_back_mix(50_000))
    buf[100] ^= 0xFF                                                       # inside the first batch's records
    path = tmp_path / "bad.bin"
    path.write_bytes(bytes(buf))
    proc = subprocess.run([floor_exe, str(path), "65536", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=60)
    assert proc.returncode == 1 and "not well-formed" in proc.stderr


def test_compare_floor_writes_its_ratios(tmp_path, monkeypatch):
    monkeypatch.setattr(compare_floor, "CACHE", str(tmp_path / "cache"))
    out = tmp_path / "floor.json"
    assert compare_floor.main(["--shapes", "held-back", "--mb", "0.3", "--chunk", "65536", "--rounds", "1",
                               "--seconds", "0.01", "--json", str(out)]) == 0
    script, ratios, env = history.read_results(str(out))
    assert script == "compare_floor"
    assert set(ratios) == {f"held-back/{c}/kwire vs {f}" for c in compare_floor.CASES
                           for f in ("floor", "columns floor")}
    assert all(r > 0 for r in ratios.values())
    assert set(env) == set(history.ENV_KEYS)
