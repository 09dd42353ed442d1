"""The running supervisor as a process: what it imports, how ``ps`` names it, where it logs.

Issue 14's guard, in the manner of tests/test_imports.py: the real daemon is started and asked
for its ``sys.modules``; its ``/proc/PID/maps`` (and its watchdog's) must map no shared object
from outside the standard library.
"""

from __future__ import annotations

import os
import signal
import sys
import sysconfig
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from noderole.supervisor import Supervisor
from noderole.supervisor._client import _posix, default_log_path
from noderole.supervisor._title import root_of
from noderole.testing import process_cmdline
from tests.supervisor_fixtures import Harness, harness, wait_for

__all__ = ["harness"]

SLEEP = "exec sleep 1000"

ALLOWED_NODEROLE = ("noderole", "noderole.__about__")
"""Loaded on the way to ``noderole.supervisor`` (noderole/__init__.py is lazy)."""


def _is_allowed(module: str) -> bool:
    top = module.split(".")[0]
    if module in ALLOWED_NODEROLE or module == "noderole.supervisor":
        return True
    if module.startswith("noderole.supervisor."):
        return True
    return top in sys.stdlib_module_names or top in ("__main__", "builtins")


def _mapped_files(pid: int) -> set[str]:
    with open(f"/proc/{pid}/maps") as f:
        return {line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6}


class TestImports:
    def test_daemon_loads_only_the_standard_library_and_itself(self, harness: Harness) -> None:
        """The real daemon's sys.modules: stdlib and noderole.supervisor, nothing else."""
        harness.supervisor.start(harness.spec("a", SLEEP))
        answer = harness.supervisor._request({"op": "modules"}, start=False)
        assert answer is not None
        modules: list[str] = answer["modules"]
        assert "noderole.supervisor._daemon" in modules
        assert [m for m in modules if not _is_allowed(m)] == []
        for heavy in ("attrs", "attr", "pluggy", "click", "noderole.records", "noderole.errors"):
            assert heavy not in modules

    def test_daemon_imports_neither_typing_nor_the_public_api(self, harness: Harness) -> None:
        """typing (~4 ms, ~0.4 MB) and noderole/__init__.py are left out of the daemon's start."""
        harness.supervisor.start(harness.spec("a", SLEEP))
        answer = harness.supervisor._request({"op": "modules"}, start=False)
        assert answer is not None
        loaded = set(answer["modules"])
        assert loaded.isdisjoint({"typing", "importlib.metadata", "noderole.__about__"})

    def test_daemon_imports_neither_dataclasses_nor_inspect(self, harness: Harness) -> None:
        """Records are built without dataclasses, whose inspect (ast, dis, tokenize) cost ~12 ms."""
        harness.supervisor.start(harness.spec("a", SLEEP))
        answer = harness.supervisor._request({"op": "modules"}, start=False)
        assert answer is not None
        loaded = set(answer["modules"])
        assert loaded.isdisjoint({"dataclasses", "inspect", "ast", "dis", "tokenize"})

    def test_daemon_and_watchdog_map_no_site_packages(self, harness: Harness) -> None:
        """No shared object of the daemon or the watchdog comes from site-packages."""
        harness.supervisor.start(harness.spec("a", SLEEP))
        daemon = harness.supervisor.daemon_pid()
        [watchdog] = wait_for(harness.watchdogs, "the watchdog")
        assert daemon is not None
        purelib = sysconfig.get_paths()["purelib"]
        for pid in (daemon, watchdog):
            outside = [
                p for p in _mapped_files(pid) if "site-packages" in p or p.startswith(purelib)
            ]
            assert outside == []

    def test_daemon_and_watchdog_do_not_load_openssl(self, harness: Harness) -> None:
        """Neither hashlib's OpenSSL nor secrets' hmac: libcrypto would add ~3 MB to each."""
        harness.supervisor.start(harness.spec("a", SLEEP))
        answer = harness.supervisor._request({"op": "modules"}, start=False)
        assert answer is not None
        loaded = set(answer["modules"])
        assert loaded.isdisjoint({"_hashlib", "hashlib", "hmac", "secrets"})
        daemon = harness.supervisor.daemon_pid()
        [watchdog] = wait_for(harness.watchdogs, "the watchdog")
        assert daemon is not None
        for pid in (daemon, watchdog):
            assert [p for p in _mapped_files(pid) if "libcrypto" in p] == []


class TestProcessTitle:
    def test_ps_names_the_supervisor_and_its_root(self, harness: Harness) -> None:
        """ps shows 'noderole-supervisor --root ROOT --run-dir RUN', not a python one-liner."""
        harness.supervisor.start(harness.spec("a", SLEEP))
        daemon = harness.supervisor.daemon_pid()
        assert daemon is not None
        words = [w.decode() for w in process_cmdline(daemon).split(b"\0") if w]
        run_dir = str(harness.run_dir)
        assert words == ["noderole-supervisor", "--root", str(harness.root), "--run-dir", run_dir]

    def test_ps_names_the_watchdog(self, harness: Harness) -> None:
        """The watchdog is 'noderole-supervisor-watchdog' with the same root."""
        harness.supervisor.start(harness.spec("a", SLEEP))
        [watchdog] = wait_for(harness.watchdogs, "the watchdog")
        words = [w.decode() for w in process_cmdline(watchdog).split(b"\0") if w]
        assert words[:3] == ["noderole-supervisor-watchdog", "--root", str(harness.root)]

    def test_watchdog_holds_no_descriptor_of_the_daemon(self, harness: Harness) -> None:
        """A forked watchdog keeps only its log: the daemon's lock dies with the daemon."""
        harness.supervisor.start(harness.spec("a", SLEEP))
        [watchdog] = wait_for(harness.watchdogs, "the watchdog")
        fds = sorted(int(fd) for fd in os.listdir(f"/proc/{watchdog}/fd"))
        assert fds[:3] == [0, 1, 2]
        targets = [os.readlink(f"/proc/{watchdog}/fd/{fd}") for fd in fds[3:]]
        # At most the pidfd it waits on and the state file it is reading at that instant.
        assert all("supervisor.lock" not in t and "supervisor.sock" not in t for t in targets)
        assert len(targets) <= 2, targets


class TestOwnLog:
    def test_log_is_under_var_log_of_the_root(self, harness: Harness) -> None:
        """The daemon's log is ROOT/var/log/noderole/supervisor.log, on disk, not under /run."""
        assert harness.supervisor.log_path == harness.root / "var/log/noderole/supervisor.log"
        harness.supervisor.start(harness.spec("a", SLEEP))
        log = harness.root / "var/log/noderole/supervisor.log"
        text = wait_for(lambda: "supervising from" in log.read_text() and log.read_text(), "log")
        assert f"supervising from {harness.run_dir}" in text

    def test_log_survives_a_reboot(self, harness: Harness) -> None:
        """Emptying the run dir (a tmpfs at boot) leaves the log and its history."""
        harness.supervisor.start(harness.spec("a", SLEEP))
        harness.supervisor.shutdown()
        for path in harness.run_dir.iterdir():
            path.unlink()
        harness.supervisor.start(harness.spec("a", SLEEP))
        log = harness.root / "var/log/noderole/supervisor.log"
        wait_for(lambda: log.read_text().count("supervising from") == 2, "two daemons' lines")

    def test_watchdog_logs_what_it_killed(self, harness: Harness) -> None:
        """After the daemon's kill -9, the watchdog names what it killed in the same log."""
        status = harness.supervisor.start(harness.spec("a", SLEEP))
        daemon = harness.supervisor.daemon_pid()
        assert daemon is not None
        wait_for(harness.watchdogs, "the watchdog")
        os.kill(daemon, signal.SIGKILL)
        log = harness.root / "var/log/noderole/supervisor.log"
        line = wait_for(
            lambda: [
                ln for ln in log.read_text().splitlines() if "watchdog" in ln and "killed" in ln
            ],
            "the watchdog's line",
        )[0]
        assert f"killed a: {status.pid}" in line
        assert "noderole-supervisor-watchdog[" in line

    def test_run_dir_elsewhere_logs_in_the_run_dir(self, tmp_path: Path) -> None:
        """A run dir not of the form ROOT/run/noderole keeps its log beside it."""
        assert default_log_path(tmp_path / "x") == tmp_path / "x" / "supervisor.log"
        assert Supervisor(tmp_path / "x").log_path == tmp_path / "x" / "supervisor.log"

    @given(
        st.lists(st.sampled_from(["", ".", "..", "run", "noderole", "x"])),
        st.sampled_from(["", "/", "//", "///"]),
    )
    def test_paths_are_spelled_as_pathlib_spells_them(self, parts: list[str], lead: str) -> None:
        """The client keeps its run directory and log as strings (no pathlib for ``status``),
        spelled as pathlib spells them: the same socket, state file and log."""
        given_path = lead + "/".join(parts)
        run_dir = Path(given_path)
        root = root_of(str(run_dir))
        log = run_dir / "supervisor.log" if root == str(run_dir) else Path(root, LOG_TAIL)
        supervisor = Supervisor(given_path)
        assert _posix(given_path) == str(run_dir)
        assert (supervisor.run_dir, supervisor.log_path) == (run_dir, log)
        assert default_log_path(run_dir) == log


LOG_TAIL = "var/log/noderole/supervisor.log"


class TestPackageBoundary:
    def test_every_module_imports_only_the_standard_library_and_itself(self) -> None:
        """No module of noderole/supervisor/ (client included) imports outside stdlib + itself."""
        import ast

        import noderole.supervisor

        package = Path(noderole.supervisor.__file__).parent
        offenders = []
        for source in sorted(package.glob("*.py")):
            for node in ast.walk(ast.parse(source.read_text())):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for name in names:
                    top = name.split(".")[0]
                    if name == "noderole.supervisor" or name.startswith("noderole.supervisor."):
                        continue
                    # _sha2: the standard library's SHA-2 module from Python 3.12 on (_digest
                    # tries it where this interpreter's list does not name it yet).
                    if top in ("__future__", "_sha2") or top in sys.stdlib_module_names:
                        continue
                    offenders.append(f"{source.name}: {name}")
        assert offenders == []
