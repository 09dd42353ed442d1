"""The public face: docs and the example plugin import only what `noderole` publishes."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import noderole
import noderole.testing

DOCS = Path(__file__).resolve().parent.parent / "docs"
PUBLIC_MODULES = {
    "noderole": set(noderole.__all__),
    "noderole.testing": set(noderole.testing.__all__),
}
FENCE = re.compile(r"^```(?:python|py)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def non_public_imports(source: str) -> list[str]:
    """Each import in ``source`` of a non-public noderole module or name, as written."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top == "noderole" and alias.name not in PUBLIC_MODULES:
                    found.append(f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "noderole":
                continue
            public = PUBLIC_MODULES.get(node.module)
            for alias in node.names:
                if public is None or alias.name not in public:
                    found.append(f"from {node.module} import {alias.name}")
    return found


def _code_blocks() -> list[tuple[str, str]]:
    blocks = []
    for page in sorted(DOCS.rglob("*.md")):
        for number, match in enumerate(FENCE.finditer(page.read_text(encoding="utf-8")), 1):
            blocks.append((f"{page.relative_to(DOCS)} block {number}", match.group(1)))
    for module in sorted((DOCS / "examples").rglob("*.py")):
        blocks.append((str(module.relative_to(DOCS)), module.read_text(encoding="utf-8")))
    return blocks


class TestDocsImportOnlyPublicNames:
    @pytest.mark.parametrize(("where", "source"), _code_blocks(), ids=lambda v: v[:60])
    def test_no_internal_import(self, where: str, source: str) -> None:
        """Every Python block of the docs and every module of the example plugin imports only
        from `noderole` and `noderole.testing`, and only names they publish."""
        assert non_public_imports(source) == [], where

    def test_the_walk_finds_the_example_and_the_pages(self) -> None:
        """The walk really covers the example plugin and several pages' code blocks."""
        names = [where for where, _ in _code_blocks()]
        assert any(n.endswith("node_exporter/plugin.py") for n in names)
        assert sum(" block " in n for n in names) >= 5

    @pytest.mark.parametrize(
        ("source", "offence"),
        [
            ("from noderole.records import Step", "from noderole.records import Step"),
            ("import noderole.clock", "import noderole.clock"),
            ("from noderole import _public", "from noderole import _public"),
            ("from noderole.testing import _ca", "from noderole.testing import _ca"),
            ("def f():\n    from noderole.plan import Plan", "from noderole.plan import Plan"),
        ],
    )
    def test_the_check_catches_internal_imports(self, source: str, offence: str) -> None:
        """The checker flags internal modules, unpublished names and imports inside functions."""
        assert non_public_imports(source) == [offence]

    def test_public_imports_pass(self) -> None:
        """`import noderole`, published names and other packages are fine."""
        source = (
            "import noderole\nimport noderole.testing\nfrom noderole import Step, FakeClock\n"
            "from noderole.testing import ScratchRoot, FakeClock\nimport attrs\n"
        )
        assert non_public_imports(source) == []


class TestPublicNames:
    def test_kit_results_and_plugin_types_are_public(self) -> None:
        """What the kit returns and what a plugin annotates with is reachable from `noderole`."""
        from noderole.engine import ApplyReport, ServiceReport
        from noderole.plan import Plan, PlannedService

        assert (noderole.Plan, noderole.PlannedService) == (Plan, PlannedService)
        assert (noderole.ApplyReport, noderole.ServiceReport) == (ApplyReport, ServiceReport)
        assert noderole.testing.FakeClock is noderole.FakeClock

    def test_star_import_gives_the_public_names(self) -> None:
        """`from noderole import *` binds exactly __all__."""
        namespace: dict[str, object] = {}
        exec("from noderole import *", namespace)
        assert set(namespace) - {"__builtins__"} == set(noderole.__all__)

    def test_unknown_name_is_an_attribute_error(self) -> None:
        """A name that is not public is an AttributeError naming it."""
        with pytest.raises(AttributeError, match="no attribute 'Records'"):
            noderole.Records  # noqa: B018
