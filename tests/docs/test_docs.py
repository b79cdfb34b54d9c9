"""The documentation site (docs/, built by scripts/docs): Sphinx builds it
with warnings as errors (a broken link between pages, a missing image, a
docstring autodoc cannot read, a toctree naming no page all fail it); the
options' table lists every option of kwire.config; the README stays short
and its links lead to files that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kwire import config

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

pytest.importorskip("sphinx", reason="the docs extra (pip install -e '.[docs]')")
pytest.importorskip("myst_parser", reason="the docs extra (pip install -e '.[docs]')")


def test_the_site_builds_without_warnings_and_has_every_page(site):
    pages = re.findall(r"^(guide|reference|development)/([\w-]+)$", (DOCS / "index.md").read_text(), re.M)
    assert len(pages) >= 20
    for section, name in pages:
        html = site / section / f"{name}.html"
        assert html.is_file(), html
        assert "<h1>" in html.read_text(encoding="utf-8"), html
    assert (site / "index.html").is_file()


def test_the_options_table_lists_every_option(site):
    html = (site / "reference" / "config.html").read_text(encoding="utf-8")
    names = set()
    for table in (config.COMMON, config.SASL, config.PRODUCER, config.CONSUMER, config.SHARE_CONSUMER):
        names |= set(table)
    missing = sorted(n for n in names if f'<span class="pre">{n}</span>' not in html)
    assert not missing, missing
    assert '<span class="pre">fetch.max.bytes</span>' in html            # Java's name
    assert '<span class="pre">share.fetch.max.records</span>' not in html   # kwire's own
    assert "ssl.ca.location" in html                                 # librdkafka's other name (ALIASES)


def test_the_api_reference_documents_the_clients(site):
    html = (site / "reference" / "api.html").read_text(encoding="utf-8")
    for name in ("kwire.producer.Producer", "kwire.consumer.Consumer", "kwire.admin.Admin",
                 "kwire.share.consumer.ShareConsumer", "kwire.aio.AsyncConsumer", "kwire._codec.Decoder"):
        assert f'id="{name}"' in html, name


def test_the_performance_page_shows_every_plot_of_the_history(site, monkeypatch):
    """docs/_ext/kwire_plots draws the committed history's plots at build time: one per gated path."""
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks import history

    lines = history.load(str(ROOT / "benchmarks" / "results" / "icount-history.jsonl"))
    env, mine = history._newest(lines, "icount")
    paths = set(history.series(mine, "icount")[env])
    assert len(paths) >= 10
    html = (site / "guide" / "performance.html").read_text(encoding="utf-8")
    shown = set(re.findall(r'src="\.\./_images/(icount-[^"]+)\.png"', html))
    assert shown == {f"icount-{history._slug(p)}" for p in paths} | {"icount-overview"}
    for name in shown:
        png = site / "_images" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_the_readme_is_short_and_its_links_lead_somewhere():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    links = re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", readme)
    assert links
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, missing
