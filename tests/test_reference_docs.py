"""The hook, configuration and exit-code references are committed, and current."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent
GENERATOR = REPO / "docs/hooks/noderole_docs.py"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("noderole_docs_pages", GENERATOR)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TestCommittedReference:
    def test_pages_match_the_code(self) -> None:
        """Each docs/reference page generated from a template is what the code gives now."""
        docs = _generator()
        pages = docs.reference_pages()
        assert {path.name for path in pages} == {"hooks.md", "configuration.md", "exit-codes.md"}
        stale = [str(path.relative_to(REPO)) for path in docs.stale_pages()]
        if stale:
            pytest.fail(
                f"{', '.join(stale)} out of date with the code: run `{docs.REGENERATE}` and "
                "commit the result"
            )

    def test_pages_are_readable_without_a_site_build(self) -> None:
        """The committed pages hold the content itself, not the markers a build would expand."""
        for name in ("hooks.md", "configuration.md", "exit-codes.md"):
            text = (REPO / "docs/reference" / name).read_text()
            assert "<!-- noderole:" not in text
        hooks = (REPO / "docs/reference/hooks.md").read_text()
        assert "## `noderole_resolve_role`" in hooks
        assert "### `noderole_k3s_config`" in hooks
        assert "`restore_block`" in (REPO / "docs/reference/configuration.md").read_text()

    def test_check_mode_names_the_stale_page_and_the_command(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`--check` fails on a stale page, naming it and the command that regenerates it; the
        generator then makes it current."""
        docs = _generator()
        for path, text in docs.reference_pages().items():
            (tmp_path / path.name).write_text(text)
        (tmp_path / "exit-codes.md").write_text("stale\n")
        assert docs.main(["gen", "--check"], reference=tmp_path) == 1
        out = capsys.readouterr().out
        assert out == (
            "docs/reference/exit-codes.md is out of date: run python docs/hooks/noderole_docs.py\n"
        )
        assert docs.main(["gen"], reference=tmp_path) == 0
        assert docs.main(["gen", "--check"], reference=tmp_path) == 0


class TestTutorialPin:
    def test_pin_matches_the_package_version(self) -> None:
        """The version pin the tutorial shows is this noderole's version."""
        import re

        from noderole.__about__ import __version__

        text = (REPO / "docs/tutorial.md").read_text()
        pins = re.findall(r'"noderole>=([^,"]+),<([^"]+)"', text)
        assert pins, "the tutorial shows no noderole>=X,<Y pin"
        major, minor = __version__.split(".")[:2]
        for low, high in pins:
            assert low == __version__, (
                f"tutorial pins noderole>={low}; the package is {__version__}"
            )
            assert high == f"{major}.{int(minor) + 1}", f"upper bound <{high} for {__version__}"


class TestTutorialRun:
    def test_the_shown_run_counts_the_example_tests(self) -> None:
        """The run the tutorial shows passes as many tests as the example holds: it said
        7 passed for a file of 8."""
        import re
        import subprocess
        import sys

        text = (REPO / "docs/tutorial.md").read_text()
        shown = re.search(r"\n([.]+) +\[100%\]\n(\d+) passed\n", text)
        assert shown, "the tutorial shows no run of the example's tests"
        example = str(REPO / "docs/examples/node-exporter/tests")
        collected = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "--collect-only",
                "-q",
                "-p",
                "no:cacheprovider",
                example,
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        count = re.search(r"(\d+) tests? collected", collected)
        assert count, collected
        assert int(shown.group(2)) == len(shown.group(1)) == int(count.group(1))
