"""Open the audit report in headless Chromium: every image renders, the console stays silent.

Needs Debian's `chromium` (installed by `.ci/run`); skipped with the reason where it is absent.
"""

from __future__ import annotations

import gzip
import os
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


DEFAULT_AUDIT = Path(__file__).parents[2] / "reports" / "default-audit"
# Appended to a copy of the page: how far the page is wider than the window; the tables wider
# than the window without a horizontally scrolling container; the elements (not scrolling
# containers) whose content is wider than their box; the scrolling containers whose table
# does not fit them; the ROC panels' sizes; the page's height.
LAYOUT = ("<script>window.addEventListener('load', () => { const w = window.innerWidth;"
          "const clipped = [...document.querySelectorAll('table')].filter(t => {"
          " const box = t.closest('.scroll'); const r = t.getBoundingClientRect();"
          " return box ? getComputedStyle(box).overflowX !== 'auto' : r.right > w + 1; });"
          "const wide = [...document.querySelectorAll('body *')].filter(e => {"
          " const cs = getComputedStyle(e); return cs.display !== 'inline'"
          " && !['auto', 'scroll'].includes(cs.overflowX) && e.clientWidth > 0"
          " && e.scrollWidth > e.clientWidth + 1; });"
          "const scrolled = [...document.querySelectorAll('.scroll')].filter("
          " b => b.scrollWidth > b.clientWidth + 1);"
          "const roc = [...document.querySelectorAll('.roc img')];"
          "document.body.setAttribute('data-layout', JSON.stringify({"
          " over: document.documentElement.scrollWidth - w, clipped: clipped.length,"
          " wide: wide.map(e => e.tagName + '.' + e.className), scrolled: scrolled.map("
          " b => b.closest('section').id), roc: roc.map(i => [i.width, i.height]),"
          " height: document.documentElement.scrollHeight})); });</script>")
# The page's height budget, in px: about eight screens of a 1,400 x 1,200 desktop and fifteen of
# a 390 x 1,200 phone. The summary, the results table and the plots stay open; the long reference
# sections (every attack's detail, every privacy reading, the configuration, the galleries past
# the first four) are collapsed, one click away.
HEIGHT_BUDGET = {390: 18_000, 1400: 12_000}


def _default_audit_page(tmp: Path) -> Path:
    """The default audit's report (`privbench attack`, results.json kept gzipped beside the
    screenshots), rendered by this code."""
    from privbench.results.store import read_results

    raw = tmp / "results.json"
    raw.write_bytes(gzip.decompress((DEFAULT_AUDIT / "results.json.gz").read_bytes()))
    page = tmp / "index.html"
    page.write_text(render_html(read_results(raw), "default audit"))
    return page


def _layout(page: Path, tmp: Path, width: int) -> dict:
    """What `LAYOUT` measured of `page` in a window `width` wide."""
    import json

    probe = tmp / f"layout-{width}.html"
    probe.write_text(page.read_text().replace("</body>", LAYOUT + "</body>"))
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp / 'profile'}",
                           f"--window-size={width},2000", "--dump-dom", probe.as_uri()],
                          capture_output=True, text=True, timeout=120)
    found = re.search(r'data-layout="([^"]*)"', proc.stdout)
    assert found, f"page did not load: {proc.stderr[-500:]}"
    return json.loads(found.group(1).replace("&quot;", '"'))


@pytest.mark.parametrize("width", [390, 1400])
def test_the_default_audits_report_reads_on_a_phone_and_uses_a_wide_screen(tmp_path, width):
    """No table is clipped, no element is wider than its box and the page is no wider than the
    window, at a phone's 390 px and a desktop's 1,400 px; there every table fits without
    scrolling and the ROC panels take the width (two side by side, each > 600 px), all the same
    size; the page stays within its height budget. With PRIVBENCH_SCREENSHOTS=1 the screenshots
    in reports/default-audit/ are regenerated."""
    page = _default_audit_page(tmp_path)
    layout = _layout(page, tmp_path, width)
    assert layout["over"] <= 0 and layout["clipped"] == 0 and layout["wide"] == []
    assert layout["height"] <= HEIGHT_BUDGET[width], layout["height"]
    assert len({tuple(r) for r in layout["roc"]}) == 1  # every panel the same size
    if width == 1400:
        assert layout["scrolled"] == [] and layout["roc"][0][0] > 600
    shot = tmp_path / f"report-{width}px.png"
    subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                    "--hide-scrollbars", f"--screenshot={shot}",
                    f"--window-size={width},{2400 if width < 1000 else 1800}", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    small = tmp_path / f"small-{width}.png"
    from PIL import Image

    Image.open(shot).convert("RGB").quantize(colors=64).save(small, optimize=True)
    assert 20_000 < small.stat().st_size < 300_000
    if os.environ.get("PRIVBENCH_SCREENSHOTS") == "1":
        shutil.copyfile(small, DEFAULT_AUDIT / f"report-{width}px.png")
