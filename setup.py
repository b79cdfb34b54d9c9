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
* ``KWIRE_ANNOTATE=1``: Cython's HTML annotation of each ``.pyx``.
* ``KWIRE_BENCH_SLOWDOWN=1``: defines the C macro ``KWIRE_BENCH_SLOWDOWN``,
  which makes the record decode loop burn a few hundred instructions per
  record: the deliberately slowed build the benchmark gate's self-test
  (``scripts/bench --self-test``) must fail. Never for a real build; the
  generated C is the same either way, only the compiler sees the macro.
* ``KWIRE_BENCH_NO_RECYCLE=1``: defines ``KWIRE_BENCH_NO_RECYCLE``, which
  makes the columnar decoder free its column blocks instead of keeping them
  for its next call (so every call maps fresh memory): the memory regression
  the same self-test must see fail on page faults. Never for a real build.
"""

import os
import re
import sys

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

extra_compile_args = ["-O3"] if sys.platform != "win32" else ["/O2"]
extra_link_args = []
define_macros = [(m, "1") for m in ("KWIRE_BENCH_SLOWDOWN", "KWIRE_BENCH_NO_RECYCLE") if os.environ.get(m)]
if os.environ.get("KWIRE_DEBUG"):
    extra_compile_args = ["-O0", "-g"]
sanitize = os.environ.get("KWIRE_SANITIZE", "").strip()
if sanitize:
    if sys.platform == "win32" or not re.fullmatch(r"[a-z0-9-]+(,[a-z0-9-]+)*", sanitize):
        raise SystemExit(f"KWIRE_SANITIZE={sanitize!r}: expected a comma-separated list of "
                         "-fsanitize= names (e.g. address), with gcc or clang")
    extra_compile_args = [f"-fsanitize={sanitize}", "-fno-omit-frame-pointer", "-g", "-O1"]
    extra_link_args = [f"-fsanitize={sanitize}"]

# The compiled core: one extension per module of the kwire._core package
# (cimports between them go through their .pxd files). Every one gets the
# same switches.
CORE_MODULES = ["buffers", "native", "records", "columnar", "legacy", "build", "send", "typedcols", "avro", "avroenc", "protobuf",
                "meter", "acquired"]
ZLIB_USERS = {"records", "legacy"}      # CRC32 of legacy messages

extensions = [
    Extension(
        f"kwire._core.{name}",
        [f"src/kwire/_core/{name}.pyx"],
        libraries=["z"] if name in ZLIB_USERS else [],
        extra_compile_args=extra_compile_args,
        extra_link_args=extra_link_args,
        define_macros=define_macros,
    )
    for name in CORE_MODULES
]
# kwire._codec: the public face of the core, itself compiled (a thin module
# that re-exports the core's public names; its stub is _codec.pyi).
extensions.append(Extension("kwire._codec", ["src/kwire/_codec.pyx"], extra_compile_args=extra_compile_args,
                            extra_link_args=extra_link_args, define_macros=define_macros))

# The typed decoders run a program op by op: the `cdef inline` helpers they
# call for each field (read a varint, append to a column) are worth inlining
# into the op loops past gcc's default size limit (kept as calls, they cost a
# ninth of the Avro decoder's instructions). The columnar decoder's row and
# header appends likewise go into its record loop (past the unit's growth
# limit too: 600 -> 553 instructions a record on the held-back mix of
# benchmarks/compare_floor.py). gcc only: other compilers keep their defaults.
INLINE_MORE_GCC = {
    "kwire._core.avro": ["--param=max-inline-insns-single=1200"],
    "kwire._core.columnar": ["--param=max-inline-insns-single=1200", "--param=inline-unit-growth=200"],
}


class BuildExt(build_ext):
    def finalize_options(self):
        # the extensions compile side by side, one per CPU, unless -j/--parallel says otherwise
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1
        super().finalize_options()

    def build_extensions(self):
        cc = os.path.basename(str((getattr(self.compiler, "compiler_so", None) or [""])[0]))
        if "gcc" in cc and not sanitize and not os.environ.get("KWIRE_DEBUG"):
            for ext in self.extensions:
                if ext.name in INLINE_MORE_GCC:
                    ext.extra_compile_args = list(ext.extra_compile_args) + INLINE_MORE_GCC[ext.name]
        super().build_extensions()


setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=cythonize(
        extensions,
        # The modules' own headers say the same; set here too so that the
        # inline functions of the .pxd files compile alike in every module.
        # freethreading_compatible stays False (the default): the core relies
        # on the GIL (SendLock, the decoders' busy flag, the column memory
        # spare lists), so a free-threaded Python keeps its GIL while it runs.
        compiler_directives={"language_level": "3", "boundscheck": False, "wraparound": False,
                             "cdivision": True, "initializedcheck": False},
        annotate=bool(os.environ.get("KWIRE_ANNOTATE")),
    ),
)
