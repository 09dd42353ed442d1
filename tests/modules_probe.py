"""What a ``noderole`` command imports: run it in a fresh interpreter and read ``sys.modules``.

The import guards (``--help``, ``plan``, a re-apply, ``status``) share this one probe, so each
guard states only its command line and what that command must not import.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence

__all__ = ["run_and_list_modules", "run_snippet"]

# The probe imports nothing the command would not (no json: the re-apply guard forbids it).
_PROBE = """
import sys
from noderole.cli import main
accepted = [None if code == "None" else int(code) for code in sys.argv[1].split(",")]
try:
    main(sys.argv[2:])
except SystemExit as exc:
    if exc.code not in accepted:
        raise
print(" ".join(sorted(sys.modules)), file=sys.stderr)
"""


def run_and_list_modules(
    argv: Sequence[str],
    *,
    exit_codes: Sequence[int | None] = (None, 0),
    env: Mapping[str, str] | None = None,
) -> tuple[str, list[str]]:
    """Run ``noderole ARGV`` through :func:`noderole.cli.main` in a new interpreter (without
    ``NODEROLE_ROOT`` unless ``env`` sets it); its standard output and the modules it had
    imported when it ended. Fails the test when it exits with a code not in ``exit_codes``."""
    environment = dict(env if env is not None else os.environ)
    if env is None:
        environment.pop("NODEROLE_ROOT", None)
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, ",".join(map(str, exit_codes)), *argv],
        capture_output=True,
        text=True,
        env=environment,
    )
    assert done.returncode == 0, done.stderr
    modules = done.stderr.strip().splitlines()[-1].split(" ")
    return done.stdout, modules


def run_snippet(code: str) -> list[str]:
    """Run ``code`` in a new interpreter (nothing imported yet, as at a command's start) and
    return the lines it printed; fails the test when it does not exit 0."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()
