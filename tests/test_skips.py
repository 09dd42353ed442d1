"""tests/skips.py: with NODEROLE_TEST_FORBID_SKIPS set a skip fails the run; without, it skips.

A separate pytest run (a subprocess) on a throwaway test file, with the hook module loaded.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.skips import FORBID

CHECKOUT = Path(__file__).resolve().parent.parent

SAMPLE = """
import pytest

def test_skipped_in_the_body():
    pytest.skip("the widget is not installed")

@pytest.mark.skipif(True, reason="no gadget")
def test_skipped_by_a_mark():
    pass

@pytest.mark.xfail(reason="known")
def test_expected_failure():
    assert False

def test_passes():
    pass
"""


def _run(tmp_path: Path, forbid: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    env = {k: v for k, v in os.environ.items() if k != FORBID}
    if forbid is not None:
        env[FORBID] = forbid
    env["PYTHONPATH"] = str(CHECKOUT)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.skips",
         "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path / "test_sample.py")],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip


class TestForbidSkips:
    @pytest.mark.parametrize("forbid", [None, "0"])
    def test_skips_skip_by_default(self, tmp_path: Path, forbid: str | None) -> None:
        """Unset (or 0): skips are skips, the run passes."""
        done = _run(tmp_path, forbid)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "1 passed, 2 skipped, 1 xfailed" in done.stdout

    def test_skips_fail_when_forbidden(self, tmp_path: Path) -> None:
        """Set: both skips fail the run, naming their reason and the variable; xfail stays xfail."""
        done = _run(tmp_path, "1")
        assert done.returncode == 1, done.stdout + done.stderr
        # A skip in the body fails it; one at setup (a skipif mark, a fixture) is an error.
        assert "1 failed, 1 passed, 1 xfailed, 1 error" in done.stdout
        assert "the widget is not installed" in done.stdout
        assert "no gadget" in done.stdout
        assert FORBID in done.stdout
