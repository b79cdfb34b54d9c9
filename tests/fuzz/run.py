"""Runs one fuzz target (targets.py) under atheris, libFuzzer driving.

    python tests/fuzz/run.py <target> [libFuzzer arguments and corpus directories]

``scripts/fuzz`` is the usual way in: it installs atheris, keeps the work
corpus and the crashes out of the repository, bounds the time, and can use a
coverage-instrumented build of the compiled core (``--native``). kwire's
Python modules are instrumented here (atheris.instrument_imports), so
libFuzzer sees Python coverage of the protocol decoders, compression.py and
the targets' oracles; the compiled core adds its own C coverage only when it
was built with ``-fsanitize=fuzzer-no-link`` (else libFuzzer sees its
behaviour only through the Python code around it).
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        raise SystemExit(__doc__)
    name = sys.argv.pop(1)
    import atheris

    # pyarrow is not ours to instrument: import it first, outside the block.
    import pyarrow  # noqa: F401
    import pyarrow.compute  # noqa: F401

    sys.path.insert(0, HERE)
    with atheris.instrument_imports(include=["kwire", "targets"]):
        import kwire  # noqa: F401
        import kwire._arrow  # noqa: F401
        import kwire.classic  # noqa: F401
        import kwire.protocol  # noqa: F401
        import targets
    target = targets.target(name)
    import importlib
    import pkgutil

    import kwire._core
    core = [importlib.import_module(f"kwire._core.{m.name}") for m in pkgutil.iter_modules(kwire._core.__path__)]
    where = {os.path.dirname(os.path.realpath(m.__file__)) for m in core}
    if len(core) < 7 or where != {os.path.realpath(os.path.join(os.path.dirname(kwire.__file__), "_core"))}:
        raise SystemExit(f"[fuzz] the compiled core is not one build beside kwire: {[m.__file__ for m in core]}")
    print(f"[fuzz] target {name}: kwire from {os.path.dirname(kwire.__file__)}, compiled core "
          f"{', '.join(os.path.basename(m.__file__) for m in core)} in {where.pop()}", file=sys.stderr, flush=True)

    def one_input(data: bytes) -> None:
        target(data)

    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
