"""Build of kwire's compiled core. Metadata lives in pyproject.toml."""

import os
import sys

from Cython.Build import cythonize
from setuptools import Extension, setup

extra_compile_args = ["-O3"] if sys.platform != "win32" else ["/O2"]
if os.environ.get("KWIRE_DEBUG"):
    extra_compile_args = ["-O0", "-g"]

extensions = [
    Extension(
        "kwire._codec",
        ["src/kwire/_codec.pyx"],
        libraries=["z"],  # zlib: CRC32 of legacy messages
        extra_compile_args=extra_compile_args,
    )
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives={"language_level": "3"},
        annotate=bool(os.environ.get("KWIRE_ANNOTATE")),
    ),
)
