"""pytest-benchmark suite for kwire's codec on the shared workload's two
shapes (smaller: 200 batches x 500 records per codec and shape). Run from the repository root:

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


@pytest.mark.parametrize("shape", workload.SHAPES)
@pytest.mark.parametrize("codec", workload.CODECS)
@pytest.mark.parametrize("adapter", DECODERS)
def test_decode(benchmark, adapter, codec, shape):
    run = workload.DECODERS[adapter]([workload.buffer(codec, BATCHES, shape)])
    benchmark.group = f"decode-{codec}-{shape}"
    benchmark.extra_info["records"] = N
    assert benchmark(run) == N


@pytest.mark.parametrize("shape", workload.SHAPES)
@pytest.mark.parametrize("codec", workload.CODECS)
def test_encode(benchmark, codec, shape):
    batches = workload.records(BATCHES, shape)
    run = workload.ENCODERS["kwire"](batches, codec)
    benchmark.group = f"encode-{codec}-{shape}"
    benchmark.extra_info["records"] = N
    workload.check_encoded(benchmark(run), batches)
