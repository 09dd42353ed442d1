"""Fixtures shared by noderole's own tests."""

from __future__ import annotations

import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.skips import pytest_runtest_makereport

__all__ = [
    "install_dist",
    "pytest_runtest_makereport",
    "refuse_threads",
]  # the hook: CI forbids skips (tests/skips.py)


@pytest.fixture
def install_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Path]]:
    """Install a throwaway distribution with entry points (a real ``.dist-info`` on sys.path)."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    created: list[str] = []

    def install(
        dist: str, version: str, entry_points: dict[str, str], modules: dict[str, str]
    ) -> Path:
        info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        lines = ["[noderole]"] + [f"{name} = {target}" for name, target in entry_points.items()]
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        for module, source in modules.items():
            (site / f"{module}.py").write_text(textwrap.dedent(source))
            created.append(module)
        return info

    yield install
    for module in created:
        sys.modules.pop(module, None)


@pytest.fixture
def refuse_threads(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """``refuse_threads(prefix)``: from now on, starting a thread whose name begins with
    ``prefix`` raises what CPython raises when none can be had (``can't start new thread``)."""

    def refuse(prefix: str) -> None:
        start = threading.Thread.start

        def refused(thread: threading.Thread) -> None:
            if thread.name.startswith(prefix):
                raise RuntimeError("can't start new thread")
            start(thread)

        monkeypatch.setattr(threading.Thread, "start", refused)

    return refuse
