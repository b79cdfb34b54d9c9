"""The documentation site as a browser draws it: the built site's landing
page (index.html) and the API reference (reference/api.html), rendered by
headless Chromium (its command line's ``--screenshot``) in a 1280x900 window.
Each picture must be a PNG of that size and not blank: many distinct colours
(anti-aliased text), the theme's stylesheet applied (a quarter of the window
or more off the page's background: Furo's tinted sidebar is 27% of it, where
the same page unstyled has 20%) and text drawn (a share of pixels far from
the background: glyphs, so a font was found).

The pictures are kept in docs/_build/screenshots/ (index.png, api.png; git
ignores docs/_build) and their paths printed, to be looked at.

The browser: Debian's ``chromium`` package (which scripts/_setup.sh installs
with the test extra, as root or through sudo, on Debian when no browser below
is there), else ``chromium-browser`` or Google Chrome on the PATH (GitHub's
Ubuntu runners), else Google Chrome or Chromium in macOS's /Applications
(GitHub's macOS runners have Chrome). Without one the tests fail, saying so; set
``KWIRE_NO_CHROMIUM=1`` to skip them instead."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("sphinx", reason="the docs extra (pip install -e '.[docs]')")
pytest.importorskip("myst_parser", reason="the docs extra (pip install -e '.[docs]')")
Image = pytest.importorskip("PIL.Image", reason="Pillow (the test extra's matplotlib brings it)")

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "docs" / "_build" / "screenshots"
WIDTH, HEIGHT = 1280, 900
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable",
            "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
            "/Applications/Chromium.app/Contents/MacOS/Chromium")


@pytest.fixture(scope="session")        # before `site` (the tests name it first): no build to skip or fail
def chromium() -> str:
    if os.environ.get("KWIRE_NO_CHROMIUM") == "1":
        pytest.skip("KWIRE_NO_CHROMIUM=1: the site's screenshots are not taken")
    for name in BROWSERS:
        found = shutil.which(name) or (name if os.path.isfile(name) and os.access(name, os.X_OK) else None)
        if found:
            return found
    pytest.fail("no Chromium to render the docs site with (looked for: " + ", ".join(BROWSERS) + "). "
                "scripts/_setup.sh installs Debian's chromium package with the test extra "
                "(KWIRE_EXTRAS=test, as root or with sudo; by hand: apt-get install --no-install-recommends "
                "chromium); elsewhere install Chromium or Google Chrome; or set KWIRE_NO_CHROMIUM=1 to skip "
                "these tests", pytrace=False)


def screenshot(browser: str, page: Path, png: Path) -> None:
    """``page`` drawn by headless ``browser`` into ``png`` (WIDTHxHEIGHT), in a
    profile of its own that is removed afterwards (with the XDG directories:
    Chromium's crash reports go to $XDG_CONFIG_HOME/chromium otherwise)."""
    png.parent.mkdir(parents=True, exist_ok=True)
    png.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="kwire-chromium-", ignore_cleanup_errors=True) as profile:
        done = subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--hide-scrollbars", "--force-device-scale-factor=1", "--no-first-run", "--disable-extensions",
             f"--user-data-dir={profile}", f"--window-size={WIDTH},{HEIGHT}", f"--screenshot={png}",
             page.as_uri()],
            capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
            env={**os.environ, "XDG_CONFIG_HOME": profile, "XDG_CACHE_HOME": profile})
    assert done.returncode == 0 and png.is_file(), (
        f"{browser} --headless --screenshot exited {done.returncode}, {png} "
        f"{'written' if png.is_file() else 'not written'}:\n{done.stderr[-4000:]}")


@pytest.mark.parametrize("page, name", [("index.html", "index"), ("reference/api.html", "api")])
def test_the_page_renders_in_chromium(chromium, site, capsys, page, name):
    png = SHOTS / f"{name}.png"
    screenshot(chromium, site / page, png)
    with Image.open(png) as im:
        assert im.format == "PNG", (png, im.format)
        assert im.size == (WIDTH, HEIGHT), (png, im.size)
        rgb = im.convert("RGB")
    colours = rgb.getcolors(maxcolors=WIDTH * HEIGHT)                # [(count, (r, g, b))]
    pixels = WIDTH * HEIGHT
    count, background = max(colours)
    ink = sum(n for n, px in colours if max(abs(a - b) for a, b in zip(px, background)) > 96)
    summary = (f"{png}: {len(colours)} colours, background {background} on {count / pixels:.1%}, "
               f"far from it {ink / pixels:.2%}")
    with capsys.disabled():                                          # shown under -q too
        print(f"\n{page} drawn by {chromium}: {summary}")
    assert len(colours) >= 64, f"hardly any colours (no text drawn?): {summary}"
    assert 1 - count / pixels >= 0.25, f"mostly background (no stylesheet?): {summary}"
    assert ink / pixels >= 0.01, f"hardly any text drawn (no font?): {summary}"
