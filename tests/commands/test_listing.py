"""`privbench list` from its plain-data table, held to the registries, and the commands that
answer at once (`list`, every `--help`, `check`, `report`) without importing torch."""

from __future__ import annotations

import ast
import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from privbench.cli import _COMMANDS
from privbench.commands.catalog import CATALOG
from privbench.commands.listing import format_entries, registry_entries

ROOT = Path(__file__).resolve().parents[2]
AUDIT = ROOT / "reports" / "default-audit" / "results.json.gz"
POLICY = ROOT / "tests" / "regression" / "policy.toml"


def _loaded(argv: list[str], modules: tuple[str, ...], env: dict[str, str] | None = None
            ) -> tuple[int, list[str], str]:
    """Run `privbench ARGV` in a fresh interpreter: its exit code, which of `modules` it
    imported, and its output."""
    code = textwrap.dedent(f"""
        import sys
        from privbench.cli import main
        try:
            rc = main({argv!r})
        except SystemExit as exc:
            rc = exc.code
        print("LOADED", sorted(m for m in {modules!r} if m in sys.modules), rc)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env=env, check=False)
    assert "LOADED" in proc.stdout, proc.stderr
    out, tail = proc.stdout.rsplit("LOADED", 1)
    loaded, rc = tail.strip().rsplit(" ", 1)
    return int(rc), ast.literal_eval(loaded), out


def test_the_table_is_the_registries():
    assert registry_entries() == CATALOG, (
        "privbench/commands/catalog.py differs from the registries; its table is:\n"
        + repr(registry_entries()))


def test_list_prints_the_table_without_torch():
    rc, loaded, out = _loaded(["list"], ("torch", "numpy", "defenses", "attacks"))
    assert rc == 0 and loaded == []
    assert out.strip() == format_entries(registry_entries())
    assert "  dp_sgp           DP  DP-SGP" in out and "  sgp              -   " in out


def test_list_prints_a_plugins_entries(tmp_path):
    (tmp_path / "my_topology.py").write_text(textwrap.dedent('''
        """A plugin registering one topology."""
        from privbench.registry import TOPOLOGIES

        @TOPOLOGIES.register("my_star")
        def star(n, rng=None):
            """A star around node 0 (a plugin's)."""
            raise NotImplementedError
    '''))
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}",
               PRIVBENCH_PLUGINS="my_topology", OMP_NUM_THREADS="1")
    rc, _, out = _loaded(["list"], (), env)
    assert rc == 0
    assert "topologies: 7" in out and "  my_star      A star around node 0 (a plugin's)." in out
    assert "  dp_sgp           DP  DP-SGP" in out


def test_every_help_answers_without_torch():
    for verb in [c.name for c in _COMMANDS] + ["account"]:
        rc, loaded, out = _loaded([verb, "--help"], ("torch", "numpy", "scipy"))
        assert rc == 0 and loaded == [], (verb, loaded)
        assert f"usage: privbench {verb}" in out


def test_check_and_report_read_the_default_audit_without_torch(tmp_path):
    results = tmp_path / "results.json"
    results.write_bytes(gzip.decompress(AUDIT.read_bytes()))
    rc, loaded, out = _loaded(["check", str(results), "--policy", str(POLICY)],
                              ("torch", "scipy.stats", "sklearn", "matplotlib"))
    assert rc == 0 and loaded == [], loaded
    assert " passed, 0 failed" in out.strip().splitlines()[-1]
    page = tmp_path / "x.html"
    rc, loaded, out = _loaded(["report", str(results), "-o", str(page)],
                              ("torch", "sklearn", "privbench.engine.trainer"))
    assert rc == 0 and loaded == [], loaded
    assert json.loads(results.read_text())["cells"] and page.stat().st_size > 100_000


def test_every_description_is_a_whole_sentence_and_the_listing_fits_100_columns():
    """No description stops mid-sentence (the first sentence of a docstring, not its first
    line), and a long one wraps under itself instead of running past 100 columns."""
    from privbench.commands.catalog import CATALOG
    from privbench.commands.listing import format_entries
    from privbench.registry import describe

    for rows in CATALOG.values():
        for name, _, text in rows:
            assert text.rstrip(")`").endswith("."), (name, text)
    assert max(map(len, format_entries(CATALOG).splitlines())) <= 100

    def wrapped_first_line():
        """Split over two lines. The second sentence is not part of it."""

    assert describe("x", wrapped_first_line) == "Split over two lines."
