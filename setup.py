"""Build of kwire's compiled core. Metadata lives in pyproject.toml.

Environment switches (the normal build sets none of them):

* ``KWIRE_DEBUG=1``: ``-O0 -g``.
* ``KWIRE_SANITIZE=<sanitizers>``: compile and link with
  ``-fsanitize=<sanitizers> -fno-omit-frame-pointer -g -O1``, e.g.
  ``address`` (AddressSanitizer, with gcc or clang) or
  ``address,fuzzer-no-link`` (clang only: also libFuzzer's coverage, for the
  fuzz targets in tests/fuzz). Python itself is not sanitized, so the
  sanitizer's runtime must be preloaded when the extension is imported; the
  README's "Fuzzing and sanitizers" section has the commands. Build such an
  extension outside your working copy's ``src/`` (``setup.py build
  --build-base build/asan``), so the normal one stays in place.
* ``KWIRE_ANNOTATE=1``: Cython's HTML annotation of the ``.pyx``.
* ``KWIRE_BENCH_SLOWDOWN=1``: defines the C macro ``KWIRE_BENCH_SLOWDOWN``,
  which makes the record decode loop burn a few hundred instructions per
  record: the deliberately slowed build the benchmark gate's self-test
  (``scripts/bench --self-test``) must fail. Never for a real build; the
  generated C is the same either way, only the compiler sees the macro.
"""

import os
import re
import sys

from Cython.Build import cythonize
from setuptools import Extension, setup

extra_compile_args = ["-O3"] if sys.platform != "win32" else ["/O2"]
extra_link_args = []
define_macros = [("KWIRE_BENCH_SLOWDOWN", "1")] if os.environ.get("KWIRE_BENCH_SLOWDOWN") else []
if os.environ.get("KWIRE_DEBUG"):
    extra_compile_args = ["-O0", "-g"]
sanitize = os.environ.get("KWIRE_SANITIZE", "").strip()
if sanitize:
    if sys.platform == "win32" or not re.fullmatch(r"[a-z0-9-]+(,[a-z0-9-]+)*", sanitize):
        raise SystemExit(f"KWIRE_SANITIZE={sanitize!r}: expected a comma-separated list of "
                         "-fsanitize= names (e.g. address), with gcc or clang")
    extra_compile_args = [f"-fsanitize={sanitize}", "-fno-omit-frame-pointer", "-g", "-O1"]
    extra_link_args = [f"-fsanitize={sanitize}"]

extensions = [
    Extension(
        "kwire._codec",
        ["src/kwire/_codec.pyx"],
        libraries=["z"],  # zlib: CRC32 of legacy messages
        extra_compile_args=extra_compile_args,
        extra_link_args=extra_link_args,
        define_macros=define_macros,
    )
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives={"language_level": "3"},
        annotate=bool(os.environ.get("KWIRE_ANNOTATE")),
    ),
)
