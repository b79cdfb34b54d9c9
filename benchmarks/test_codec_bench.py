"""pytest-benchmark suite for kwire's codec on the shared workload (smaller:
200 batches x 500 records per codec). Run from the repository root:

    python -m pytest benchmarks --benchmark-only [--benchmark-json=out.json]

(pyproject's addopts carry --benchmark-skip for the normal test run;
--benchmark-only overrides it.) The peers are compared by compare_codecs.py.
"""

from __future__ import annotations

import pytest

from benchmarks import workload

BATCHES = 200
N = workload.n_records(BATCHES)
DECODERS = ("kwire", "kwire-columnar")


@pytest.mark.parametrize("codec", workload.CODECS)
@pytest.mark.parametrize("adapter", DECODERS)
def test_decode(benchmark, adapter, codec):
    run = workload.DECODERS[adapter]([workload.buffer(codec, BATCHES)])
    benchmark.group = f"decode-{codec}"
    benchmark.extra_info["records"] = N
    assert benchmark(run) == N


@pytest.mark.parametrize("codec", workload.CODECS)
def test_encode(benchmark, codec):
    batches = workload.records(BATCHES)
    run = workload.ENCODERS["kwire"](batches, codec)
    benchmark.group = f"encode-{codec}"
    benchmark.extra_info["records"] = N
    workload.check_encoded(benchmark(run), batches)
