"""The Spark write benchmark's shaped rows (benchmarks/spark_rows.py): the
shapes they claim, the same rows for the same seed, and the Parquet file
every sink reads."""

from __future__ import annotations

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
np = pytest.importorskip("numpy")

from benchmarks import spark_rows  # noqa: E402


@pytest.mark.parametrize("name", sorted(spark_rows.SHAPES))
def test_a_chunk_has_its_shape(name):
    shape = spark_rows.SHAPES[name]
    pool = spark_rows._pool(np.random.default_rng(32))
    batch = spark_rows.chunk(shape, 700, 5000, 32, pool)
    batch.validate(full=True)
    rows = batch.to_pylist()
    keys = [r["key"] for r in rows]
    assert 0.07 < keys.count(None) / len(keys) < 0.13
    assert {len(k) for k in keys if k is not None} == {8, 16, 36}
    sizes = [len(r["value"]) for r in rows]
    assert shape.value_min <= min(sizes) and max(sizes) <= shape.value_max
    assert max(sizes) - min(sizes) > (shape.value_max - shape.value_min) * 0.9
    counts = [len(r["headers"]) for r in rows]
    assert set(counts) == {0, 1, 2, 3}
    for i, r in enumerate(rows, start=700):
        for j, h in enumerate(r["headers"]):
            assert h["key"] == spark_rows.HEADER_KEYS[j]
            assert h["value"] == (None if j == 1 and i % 7 == 0 else b"v-%d-%d" % (i, j))
    assert spark_rows.chunk(shape, 700, 5000, 32, pool).equals(batch)


def test_the_parquet_file_is_made_once(tmp_path, monkeypatch):
    path = str(tmp_path / "mixed.parquet")
    monkeypatch.setattr(spark_rows, "CHUNK", 1000)
    rows, value_bytes = spark_rows.write_parquet(path, "mixed", 2500)
    table = pq.read_table(path)
    assert rows == table.num_rows == 2500 and table.schema == spark_rows.SCHEMA
    assert value_bytes > 0 and pq.ParquetFile(path).metadata.num_row_groups == 3
    stamp = (tmp_path / "mixed.parquet").stat().st_mtime_ns
    assert spark_rows.write_parquet(path, "mixed", 2500)[0] == 2500
    assert (tmp_path / "mixed.parquet").stat().st_mtime_ns == stamp
