"""The konnectivity plugin's documentation page lists every setting with its default."""

from __future__ import annotations

from pathlib import Path

import pytest

from noderole_konnectivity.plugin import SETTINGS

PAGE = Path(__file__).resolve().parents[3] / "docs/plugins/konnectivity.md"


class TestDocs:
    @pytest.mark.parametrize("setting", SETTINGS.settings, ids=lambda s: s.name)
    def test_setting_documented(self, setting: object) -> None:
        """Each setting has a table row with its name, type and default."""
        from noderole.records import Setting

        assert isinstance(setting, Setting)
        default = f'"{setting.default}"' if isinstance(setting.default, str) else setting.default
        row = f"| `{setting.name}` | {setting.type.__name__} | `{default}` |"
        assert row in PAGE.read_text()
