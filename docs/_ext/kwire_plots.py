"""Sphinx extension: the benchmark history's plots on the performance page.

At ``builder-inited`` it draws, with ``benchmarks.history.plot`` (the same
code as ``python -m benchmarks.history plot``), every plot the committed
history ``benchmarks/results/icount-history.jsonl`` holds: one per hot
path's instruction count, the overview, the companions' and the peers'
ratios when the file has such lines. They go to ``docs/_generated/plots``,
with ``docs/_generated/plots.md`` listing them under headings (all but the
overview, which the page shows where its text discusses it); the
performance page includes that file. So the page shows whatever the
history holds, drawn by the build; nothing drawn is committed twice.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List

DOCS = Path(__file__).resolve().parent.parent
ROOT = DOCS.parent
HISTORY = ROOT / "benchmarks" / "results" / "icount-history.jsonl"
OUT = DOCS / "_generated"

#: a plot's heading and sentence on the page, by the start of its file name
KINDS = [
    ("icount-overview", "", ""),          # drawn, shown where the page discusses it, not listed
    ("icount-", "One path", "Instructions per record on one hot path, one point per commit."),
    ("memstat-", "Companions", "The gate's companion figure on every path."),
    ("ratios-", "Against the peers", "A compare script's wall-clock ratios over each peer."),
]


def _history():
    """benchmarks.history, from the checkout (benchmarks/ is not in the wheel)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks import history
    return history


def _kind(name: str):
    return next(k for k in KINDS if name.startswith(k[0]))


def _page(files: List[str]) -> str:
    """The MyST text listing ``files`` (PNG names), grouped as KINDS orders them."""
    out = [f"<!-- drawn by docs/_ext/kwire_plots.py from {HISTORY.relative_to(ROOT)}; not edited by hand -->", ""]
    for prefix, heading, sentence in KINDS:
        mine = [f for f in files if _kind(f)[0] == prefix]
        if not mine or not heading:
            continue
        out += [f"#### {heading}", "", sentence, ""]
        for f in mine:
            label = f[:-4].replace(prefix, "", 1) or f[:-4]
            out += [f"![{label}](plots/{f})", ""]
    return "\n".join(out)


def draw(app=None) -> List[str]:
    """Draws the plots into ``_generated/plots`` and writes ``_generated/plots.md``."""
    history = _history()
    plots = OUT / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    for old in plots.glob("*.png"):
        old.unlink()
    written = history.plot(history.load(str(HISTORY)), str(plots))
    names = sorted((os.path.basename(p) for p in written), key=lambda n: (KINDS.index(_kind(n)), n))
    (OUT / "plots.md").write_text(_page(names), encoding="utf-8")
    return names


def setup(app):
    app.connect("builder-inited", draw)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
