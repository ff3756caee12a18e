"""privbench.plugins: the built-in defenses and attacks load with the modules named in
$PRIVBENCH_PLUGINS (blank names skipped), and a name that cannot be imported is a one-line
ConfigError naming it."""

from __future__ import annotations

import sys

import pytest

from privbench.errors import ConfigError
from privbench.plugins import BUILTIN, PLUGINS_ENV, load_plugins


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    """Two importable modules that count their imports, removed from sys.modules afterwards."""
    for name in ("pb_plugin_one", "pb_plugin_two"):
        (tmp_path / f"{name}.py").write_text("import builtins\n"
                                             "builtins.pb_plugin_imports = getattr(builtins, "
                                             "'pb_plugin_imports', []) + [__name__]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import builtins

    yield tmp_path
    for name in ("pb_plugin_one", "pb_plugin_two"):
        sys.modules.pop(name, None)
    if hasattr(builtins, "pb_plugin_imports"):
        del builtins.pb_plugin_imports


def test_the_named_modules_are_imported_with_the_builtins(plugin_dir, monkeypatch) -> None:
    import builtins

    monkeypatch.setenv(PLUGINS_ENV, " pb_plugin_one, ,pb_plugin_two,")
    load_plugins()
    load_plugins()  # a second call imports nothing again
    assert builtins.pb_plugin_imports == ["pb_plugin_one", "pb_plugin_two"]
    assert all(name in sys.modules for name in BUILTIN)


def test_a_module_that_cannot_be_imported_is_named(plugin_dir, monkeypatch) -> None:
    monkeypatch.setenv(PLUGINS_ENV, "pb_plugin_one,pb_no_such_plugin")
    with pytest.raises(ConfigError) as info:
        load_plugins()
    message = str(info.value)
    assert "'pb_no_such_plugin', which cannot be imported" in message
    assert "accepted: comma-separated module names" in message and "\n" not in message


def test_without_the_variable_only_the_builtins_load(plugin_dir, monkeypatch) -> None:
    monkeypatch.delenv(PLUGINS_ENV, raising=False)
    load_plugins()
    assert "pb_plugin_one" not in sys.modules
