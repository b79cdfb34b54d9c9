#!/usr/bin/env bash
# Proves kwire's packaging locally, the way users and cibuildwheel get it:
#
#  1. copies the source tree (tracked and untracked files, less what .gitignore
#     ignores, so no in-place build output) to a temporary directory; nothing
#     is written to the repo;
#  2. builds an sdist, then a wheel FROM that sdist (`python -m build`), so a
#     file missing from the sdist fails the build;
#  3. checks the contents against the files of src/kwire (tests/support/dist.py):
#     the sdist ships every file of src/ (the .pyx and .pxd files included) and
#     no generated .c or compiled .so; the wheel ships every module, stub and
#     py.typed and one extension per .pyx (and no .pyx, .pxd or .c);
#  4. replays cibuildwheel's test step for this machine: a clean virtualenv
#     (no system site-packages) gets the wheel, then `test-requires` with
#     `test-environment` set, and `test-command` runs in an empty directory that
#     holds only a copy of `test-sources` (tests/), all read from pyproject.toml's
#     [tool.cibuildwheel]. Before that it prints kwire.__file__,
#     kwire._codec.__file__ and the file of each extension of kwire._core, and
#     fails unless all are in the venv's site-packages.
#
# Usage: scripts/check_wheel.sh [pytest args...]   e.g. scripts/check_wheel.sh -x
#   PYTHON=python3.13 scripts/check_wheel.sh   build and test with another Python
#   KEEP=1 scripts/check_wheel.sh              keep the temporary directory
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/kwire-check-wheel.XXXXXX")"
cleanup() {
  if [ "${KEEP:-0}" = 1 ]; then
    echo "[check_wheel] kept $WORK" >&2
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT

say() { echo "[check_wheel] $*" >&2; }
fail() { echo "[check_wheel] FAIL: $*" >&2; exit 1; }
PIP_QUIET=(--quiet --disable-pip-version-check)

# 1. A copy of the source tree, outside the repo.
SRC="$WORK/src-tree"
mkdir -p "$SRC"
say "copying the source tree to $SRC"
if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard \
     | while IFS= read -r -d '' f; do if [ -e "$f" ]; then printf '%s\0' "$f"; fi; done \
     | tar --null -T - -cf - | tar -C "$SRC" -xf -)
else
  tar -C "$ROOT" --exclude=.git --exclude=.venv --exclude=build --exclude=dist \
      --exclude='*.so' --exclude='*.c' --exclude='*.egg-info' -cf - . | tar -C "$SRC" -xf -
fi
if [ ! -f "$SRC/README.md" ]; then
  say "README.md is missing from the repo: writing a placeholder in the copy only"
  printf '# kwire\n\nPlaceholder README written by scripts/check_wheel.sh.\n' > "$SRC/README.md"
fi

# 2. sdist, then a wheel built from the sdist.
say "creating a build venv ($("$PYTHON" -V 2>&1))"
"$PYTHON" -m venv "$WORK/build-venv"
BPY="$WORK/build-venv/bin/python"
"$BPY" -m pip install "${PIP_QUIET[@]}" build
if ! "$BPY" -c "import tomllib" 2>/dev/null; then
  "$BPY" -m pip install "${PIP_QUIET[@]}" tomli
fi
say "python -m build (sdist, then wheel from the sdist)"
if ! "$BPY" -m build --outdir "$WORK/dist" "$SRC" >"$WORK/build.log" 2>&1; then
  tail -n 40 "$WORK/build.log" >&2
  fail "python -m build failed (log above)"
fi
shopt -s nullglob
SDISTS=("$WORK"/dist/*.tar.gz)
WHEELS=("$WORK"/dist/*.whl)
shopt -u nullglob
[ "${#SDISTS[@]}" = 1 ] || fail "expected one sdist, got: ${SDISTS[*]-none}"
[ "${#WHEELS[@]}" = 1 ] || fail "expected one wheel, got: ${WHEELS[*]-none}"
SDIST="${SDISTS[0]}"
WHEEL="${WHEELS[0]}"
say "built $(basename "$SDIST") and $(basename "$WHEEL")"

# 3. Contents, derived from the files of src/kwire (tests/support/dist.py, which
#    tests/installed also runs): every module, stub, py.typed and one extension
#    per .pyx in the wheel; everything under src/ and the build files in the sdist;
#    no generated or compiled file in the sdist, no Cython source in the wheel.
"$BPY" "$ROOT/tests/support/dist.py" check "$SDIST" "$WHEEL" "$ROOT" || fail "the sdist or the wheel is incomplete (above)"
say "sdist and wheel contents match src/kwire"

# 4. cibuildwheel's test step, as configured in pyproject.toml.
CFG="$WORK/cibw-test"
mkdir -p "$CFG"
"$BPY" - "$SRC/pyproject.toml" "$CFG" <<'EOF'
import os
import shlex
import sys

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

pyproject, out = sys.argv[1:]
cfg = tomllib.load(open(pyproject, "rb"))["tool"]["cibuildwheel"]


def as_list(v):
    return [v] if isinstance(v, str) else list(v or [])


cmd = cfg.get("test-command", "")
cmd = " && ".join(as_list(cmd))
if not cmd or "{project}" in cmd or "{package}" in cmd:
    sys.exit(f"[check_wheel] FAIL: test-command must run from test-sources, not the project: {cmd!r}")
with open(os.path.join(out, "requires"), "w") as f:
    f.write("".join(r + "\n" for r in as_list(cfg.get("test-requires"))))
with open(os.path.join(out, "sources"), "w") as f:
    f.write("".join(s + "\n" for s in as_list(cfg.get("test-sources"))))
with open(os.path.join(out, "environment"), "w") as f:
    f.write("".join(f"export {k}={shlex.quote(str(v))}\n"
                    for k, v in (cfg.get("test-environment") or {}).items()))
with open(os.path.join(out, "command"), "w") as f:
    f.write(cmd)
EOF
TEST_REQUIRES=()
while IFS= read -r line; do TEST_REQUIRES+=("$line"); done < "$CFG/requires"
TEST_COMMAND="$(cat "$CFG/command")"
for a in "$@"; do TEST_COMMAND+=" $(printf '%q' "$a")"; done

VENV="$WORK/test-venv"
say "creating a clean test venv; installing the wheel, then: ${TEST_REQUIRES[*]-nothing}"
"$PYTHON" -m venv "$VENV"
VPY="$VENV/bin/python"
(
  # shellcheck disable=SC1091
  source "$CFG/environment"
  "$VPY" -m pip install "${PIP_QUIET[@]}" --upgrade pip
  "$VPY" -m pip install "${PIP_QUIET[@]}" "$WHEEL"
  if [ "${#TEST_REQUIRES[@]}" -gt 0 ]; then
    "$VPY" -m pip install "${PIP_QUIET[@]}" "${TEST_REQUIRES[@]}"
  fi
)

RUN="$WORK/test-cwd"     # the tests run from here: nothing but copies of test-sources
mkdir -p "$RUN"
while IFS= read -r s; do
  [ -n "$s" ] || continue
  mkdir -p "$RUN/$(dirname "$s")"
  cp -R "$SRC/$s" "$RUN/$s"
done < "$CFG/sources"

cd "$RUN"
"$VPY" - "$VENV" <<'EOF'
import os
import sys

import importlib
import pkgutil

import kwire
import kwire._codec
import kwire._core

venv = os.path.realpath(sys.argv[1])
import importlib.machinery

core = [importlib.import_module(f"kwire._core.{m.name}") for m in pkgutil.iter_modules(kwire._core.__path__)]
for mod in (kwire._codec, *core):
    if not mod.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
        sys.exit(f"[check_wheel] FAIL: {mod.__name__} is not a compiled extension: {mod.__file__}")
for mod in (kwire, kwire._codec, *core):
    path = os.path.realpath(mod.__file__)
    print(f"[check_wheel] {mod.__name__}.__file__ = {mod.__file__}")
    if not path.startswith(venv + os.sep) or "site-packages" not in path:
        sys.exit(f"[check_wheel] FAIL: {mod.__name__} imported from {path}, not the venv's site-packages")
EOF

shopt -s nullglob
TEST_FILES=("$RUN"/tests/codec/test_*.py)
shopt -u nullglob
if [ "${#TEST_FILES[@]}" = 0 ]; then
  say "SKIPPED the test run: tests/codec has no test_*.py files yet"
  say "OK: packaging checked; no codec tests to run"
  exit 0
fi
say "running cibuildwheel's test-command from $RUN (tests/codec: ${#TEST_FILES[@]} test files):"
say "  $TEST_COMMAND"
(
  # shellcheck disable=SC1091
  source "$CFG/environment"
  PATH="$VENV/bin:$PATH" VIRTUAL_ENV="$VENV" sh -c "$TEST_COMMAND"
)
say "OK: $(basename "$WHEEL") passes tests/codec from a clean venv"
