"""Open the audit report in headless Chromium: every image renders, the console stays silent.

Needs Debian's `chromium` (installed by `.ci/run`); skipped with the reason where it is absent.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from privbench.report import render_html

from .test_render import _results

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed "
                                "(apt-get install chromium); .ci/run installs it")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000"]
# Appended to a copy of the page (the report itself has no script): counts images that failed.
PROBE = ("<script>window.addEventListener('load', () => { const i = [...document.images];"
         "document.body.setAttribute('data-images', i.length);"
         "document.body.setAttribute('data-broken', i.filter(x => !x.complete ||"
         " x.naturalWidth === 0).length); });</script>")


def _open(page: Path, tmp: Path) -> tuple[int, int, list[str]]:
    """(images, broken images, console lines) of `page` in headless Chromium."""
    probe = tmp / f"probe-{page.name}"
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp / 'profile'}", "--dump-dom",
                           probe.as_uri()], capture_output=True, text=True, timeout=120)
    body = re.search(r'<body[^>]*data-images="(\d+)"[^>]*data-broken="(\d+)"', proc.stdout)
    assert body, f"page did not load: {proc.stderr[-500:]}"
    console = [ln for ln in proc.stderr.splitlines() if ":CONSOLE" in ln]
    return int(body.group(1)), int(body.group(2)), console


def test_report_renders_every_image_without_console_errors(tmp_path):
    page = tmp_path / "index.html"
    page.write_text(render_html(_results()))
    images, broken, console = _open(page, tmp_path)
    assert images >= 4 and broken == 0
    assert console == []
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                    f"--screenshot={shot}", "--window-size=1280,2400", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    assert shot.stat().st_size > 20_000


def test_the_harness_detects_broken_images_and_console_output(tmp_path):
    page = tmp_path / "bad.html"
    page.write_text('<html><body><img src="data:image/png;base64,AAAA">'
                    '<script>console.error("boom")</script></body></html>')
    images, broken, console = _open(page, tmp_path)
    assert images == 1 and broken == 1 and any("boom" in c for c in console)
