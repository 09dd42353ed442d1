"""The documentation is generated from the code where it can drift: check the generator."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "noderole_docs", REPO / "docs/hooks/noderole_docs.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SHIPPED = [("k3s", "noderole_k3s.plugin"), ("konnectivity", "noderole_konnectivity.plugin")]


class TestSettingsReference:
    @pytest.mark.parametrize(("table", "module"), SHIPPED)
    def test_plugin_page_generates_its_table(self, table: str, module: str) -> None:
        """A shipped plugin's page has no hand-kept settings table: it asks the generator."""
        page = (REPO / f"docs/plugins/{table}.md").read_text()
        assert f"<!-- noderole:settings {table} -->" in page
        assert "| `respawn_delay` |" not in page

    @pytest.mark.parametrize(("table", "module"), SHIPPED)
    def test_generated_table_lists_every_setting_with_its_default(
        self, table: str, module: str
    ) -> None:
        """Every declared setting appears with its type and default in the generated table."""
        plugin = pytest.importorskip(module)
        rendered = _hook().render_settings(table)
        settings = plugin.noderole_settings().settings
        for setting in settings:
            assert f"| `{setting.name}` | {setting.type.__name__} |" in rendered
        assert rendered.count("\n| `") == len(settings)

    def test_unknown_table_is_an_error(self) -> None:
        """A table no plugin declares fails the docs build instead of printing nothing."""
        with pytest.raises(ValueError, match=r"no installed plugin declares \[nope\]"):
            _hook().render_settings("nope")
