"""Files noderole reads back, damaged: a FIFO in their place, or JSON nested too deeply.

Every state file, record and cache noderole wrote and reads again (the recorded plan, the
applied fingerprints, the last apply's record, the supervisor's state, the manifest `reset`
removes by, the configuration's cache, the certificate stamp, the entry-point cache) may be
found damaged: a disk fault, an editor, someone who made a FIFO there. A FIFO must not hang a
command (opening one for reading waits for a writer), nor a link to /dev/zero exhaust memory,
nor JSON nested thousands deep end in a traceback (Python's parser recurses): each is taken for
a damaged file, as every reader already does with JSON of another shape. Above all `status`
and `stop` keep working on the running services.

Each command runs in a child process, bounded, so that a hang fails the test instead of hanging
it; the service runs under the native supervisor and is stopped (and killed, by the harness's
teardown) whatever happens.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from noderole.reading import read_json
from tests.supervisor_fixtures import Harness, harness

__all__ = ["harness"]  # the fixture, used by name

NESTED = b"[" * 5000 + b"]" * 5000
"""Valid JSON, nested deeper than Python's parser can go."""

CHILD = textwrap.dedent(
    """
    import sys
    from click.testing import CliRunner
    import noderole
    from noderole.cli import cli
    from noderole.cli._app import App
    from noderole.root import NodeRoot

    root, mark, args = sys.argv[1], sys.argv[2], sys.argv[3:]

    class Plugin:
        @noderole.hookimpl
        def noderole_services(self, node):
            return noderole.Service(
                name="a", roles=["demo"], command=["/bin/sleep", "1000"],
                environment={"NODEROLE_SUPERVISOR_TEST": mark},
                supervision=noderole.Supervision(respawn_delay=0.05, stop_timeout=2),
            )

    app = App(root=NodeRoot(root), plugin_objects=(("t", Plugin()),), autoload=False)
    result = CliRunner().invoke(cli, args, obj=app)
    sys.stdout.write(result.output)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback
        traceback.print_exception(result.exception)
    sys.exit(result.exit_code)
    """
)

FILES = [
    "var/lib/noderole/plan.json",
    "var/lib/noderole/applied.json",
    "var/lib/noderole/last-apply.json",
    "var/lib/noderole/written.jsonl",
    "var/cache/noderole/config.json",
    "run/noderole/state.json",
]


def _cli(harness: Harness, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(harness.root), harness.mark, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def applied(harness: Harness) -> Harness:
    """A node root whose service "a" runs, applied through the CLI (with a config.toml, so
    that the configuration's cache is written too)."""
    (harness.root / "bin").mkdir()
    shutil.copy("/bin/sleep", harness.root / "bin/sleep")
    (harness.root / "etc/noderole").mkdir(parents=True)
    (harness.root / "etc/noderole/config.toml").write_text("[noderole]\n")
    done = _cli(harness, "apply", "demo")
    assert done.returncode == 0, done.stdout + done.stderr
    for name in FILES:
        assert (harness.root / name).is_file(), f"{name} was not written by apply"
    return harness


@pytest.mark.parametrize("damage", ["fifo", "nested"])
@pytest.mark.parametrize("name", FILES)
def test_commands_go_on_past_a_damaged_file(applied: Harness, name: str, damage: str) -> None:
    path = applied.root / name
    path.unlink()
    if damage == "fifo":
        os.mkfifo(path)
    else:
        path.write_bytes(NESTED)
    for args in (["status"], ["apply", "demo"], ["status"], ["stop"]):
        try:
            done = _cli(applied, *args)
        except subprocess.TimeoutExpired:
            pytest.fail(f"`noderole {' '.join(args)}` hung on a {damage} at {name}")
        output = done.stdout + done.stderr
        assert "Traceback" not in output, f"`noderole {' '.join(args)}`:\n{output}"
        assert done.returncode in (0, 1), f"`noderole {' '.join(args)}`:\n{output}"
    assert applied.supervisor.status(["a"])[0].state == "stopped"


def test_reset_names_a_manifest_it_cannot_read(applied: Harness) -> None:
    """reset removes by the manifest: one it cannot read (a FIFO) is named, with the fix,
    instead of a hang (before) or of removing nothing and saying all is well."""
    path = applied.root / "var/lib/noderole/written.jsonl"
    path.unlink()
    os.mkfifo(path)
    done = _cli(applied, "reset", "--dry-run")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "cannot read the record of what noderole wrote" in done.stdout + done.stderr
    assert "not a regular file (a FIFO); move it aside" in done.stdout + done.stderr
    assert _cli(applied, "stop").returncode == 0


class TestReadJson:
    def test_a_fifo_is_refused_at_once(self, tmp_path: Path) -> None:
        os.mkfifo(tmp_path / "f.json")
        with pytest.raises(OSError, match=r"not a regular file \(a FIFO\)"):
            read_json(tmp_path / "f.json")

    def test_nesting_too_deep_is_a_value_error(self, tmp_path: Path) -> None:
        (tmp_path / "f.json").write_bytes(NESTED)
        with pytest.raises(ValueError, match="nested too deeply"):
            read_json(tmp_path / "f.json")

    def test_a_link_to_an_endless_device_is_refused(self, tmp_path: Path) -> None:
        (tmp_path / "f.json").symlink_to("/dev/zero")
        with pytest.raises(OSError, match="character device"):
            read_json(tmp_path / "f.json")

    def test_json_is_read(self, tmp_path: Path) -> None:
        (tmp_path / "f.json").write_text('{"a": [1, 2]}')
        assert read_json(tmp_path / "f.json") == {"a": [1, 2]}


def test_an_apply_that_cannot_record_its_outcome_reports_its_services(applied: Harness) -> None:
    """The last apply's record only feeds `status` and the fleet metrics. One that cannot be
    written (a directory in its way here; a /var/lib made read-only after the first boot, in
    the field) made an apply whose every service runs exit 1, with no summary: the boot looked
    failed. It is now a warning naming the file and the fix, and the apply's own outcome."""
    path = applied.root / "var/lib/noderole/last-apply.json"
    path.unlink()
    path.mkdir()
    done = _cli(applied, "apply", "demo")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "role demo: 1 service, 0 started, 1 already running, 0 failed" in output
    assert "noderole: warning: cannot record /var/lib/noderole/last-apply.json" in output
    assert "`status` shows the outcome of the apply before this one" in output
    assert _cli(applied, "stop").returncode == 0
