# Sourced by scripts/demo and scripts/test: creates the virtualenv (.venv, or
# $KWIRE_VENV) and installs kwire into it with the extras named in
# $KWIRE_EXTRAS, compiling the Cython core. Safe to run again: pip only
# rebuilds what changed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${KWIRE_VENV:-$ROOT/.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating virtualenv $VENV" >&2
  "${PYTHON:-python3}" -m venv "$VENV"
fi
PY="$VENV/bin/python"
echo "[setup] installing kwire[${KWIRE_EXTRAS}] (compiles the Cython core)" >&2
"$PY" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$PY" -m pip install --quiet --disable-pip-version-check -e ".[${KWIRE_EXTRAS}]"
