"""Sphinx configuration of kwire's documentation site (scripts/docs builds it).

Sphinx with MyST Markdown and the Furo theme: the guides are Markdown (the
README's sections moved here), the API reference is autodoc over the
installed package (docstrings and type hints, the compiled modules too).
Two things are made at build time: the options' table from kwire.config
(_ext/kwire_config) and the performance page's plots from the benchmark
history (_ext/kwire_plots).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

import kwire  # noqa: E402  (the installed package: what users get)

project = "kwire"
author = "kwire's developers"
copyright = "2026, kwire's developers"
release = version = getattr(kwire, "__version__", "")

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "kwire_config",
    "kwire_plots",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
# _generated: drawn at build time (kwire_plots), included by the pages that show it
exclude_patterns = ["_build", "_generated", "Thumbs.db", ".DS_Store"]
root_doc = "index"

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": False}
# the API reference documents what kwire exports; names in signatures that are not (typing's, the
# standard library's, pyarrow's) are not cross-referenced
nitpicky = False
suppress_warnings = ["myst.header"]

intersphinx_mapping = {}

html_theme = "furo"
html_title = "kwire"
html_static_path = []
