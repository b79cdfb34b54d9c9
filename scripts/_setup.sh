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
# The test extra's gssapi package builds against MIT Kerberos (libkrb5-dev), and the security
# tests run a KDC (tests/support/kdc.py): install them from the system's packages when krb5kdc
# is absent (Debian/Ubuntu; as root, or through sudo without a password).
# The tests of `kwire top` drive it in a terminal through tmux: installed the same way when absent.
SYSTEM_PACKAGES=""
if ! command -v krb5kdc >/dev/null && [ ! -x /usr/sbin/krb5kdc ]; then
  SYSTEM_PACKAGES="krb5-kdc krb5-admin-server krb5-user libkrb5-dev"
fi
if ! command -v tmux >/dev/null; then
  SYSTEM_PACKAGES="$SYSTEM_PACKAGES tmux"
fi
# The docs' screenshots (tests/docs/test_screenshot.py) are taken by headless Chromium: Debian's package
# when no Chromium or Google Chrome is on the PATH (its dependencies bring a font, fonts-dejavu-core).
# Not on Ubuntu, whose chromium is a snap (its CI runners have Google Chrome), nor without apt-get.
if command -v apt-get >/dev/null && ! grep -qsi ubuntu /etc/os-release \
   && ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null \
   && ! command -v google-chrome >/dev/null && ! command -v google-chrome-stable >/dev/null; then
  SYSTEM_PACKAGES="$SYSTEM_PACKAGES chromium"
fi
if [[ ",${KWIRE_EXTRAS}," == *",test,"* ]] && [ -n "${SYSTEM_PACKAGES// /}" ]; then
  SUDO="none"
  if [ "$(id -u)" = 0 ]; then SUDO=""; elif sudo -n true 2>/dev/null; then SUDO="sudo -n"; fi
  if command -v apt-get >/dev/null && [ "$SUDO" != none ]; then
    echo "[setup] installing $SYSTEM_PACKAGES for the tests (MIT Kerberos: the security tests; tmux: kwire top's; chromium: the docs' screenshots)" >&2
    apt_install() {
      $SUDO env DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends \
        $SYSTEM_PACKAGES >/dev/null
    }
    apt_install || { $SUDO timeout 300 apt-get update -qq >/dev/null && apt_install; }
  else
    echo "[setup] warning: $SYSTEM_PACKAGES cannot be installed here (apt-get as root needed):" \
         "install them; the security tests, the gssapi package, kwire top's tests and the docs' screenshots need them" >&2
  fi
fi
echo "[setup] installing kwire[${KWIRE_EXTRAS}] (compiles the Cython core)" >&2
"$PY" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$PY" -m pip install --quiet --disable-pip-version-check -e ".[${KWIRE_EXTRAS}]"
# Byte code for the tree, written here whatever PYTHONDONTWRITEBYTECODE says: every process that imports kwire
# from the checkout (Spark's Python workers, the CLI's and the tests' subprocesses) would otherwise compile it
# again, the generated protocol module alone 0.6 s of CPU each time. Edited files fall back to their source.
"$PY" -m compileall -q -j 0 src/kwire >/dev/null
