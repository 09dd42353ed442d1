"""The fault matrix (docs/fault-matrix.md): faults no other test drives at the product level.

Each test here goes through the ``noderole`` command (in process with :class:`CliRunner`, or as
a real OS process) against real processes under a scratch node root, and fails if the promise of
its row is lost. Rows already proven elsewhere (the supervisor, certificate and parser unit tests)
are referenced from docs/fault-matrix.md, not repeated.

Every process a test starts is ended by pid in teardown, even when it fails: the CLI processes a
test spawns by :func:`Spawned.cli`, and, through the ``node`` fixture of tests/test_engine.py, the
supervisor daemon and every process that carries the root's ``NODEROLE_ROOT`` marker.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import os
import re
import signal
import stat
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import noderole
from noderole.cli import cli
from noderole.cli._app import App
from noderole.envfile import EnvFile, read_env_file
from noderole.errors import EnvFileError, ExitCode
from noderole.root import NodeRoot
from noderole.supervisor import Supervisor
from noderole.supervisor._proc import is_alive
from noderole.testing import process_environ, process_parent, supervisor_processes
from tests.test_engine import Node, node, sleeper, wait_until

__all__ = ["node"]  # the fixture, imported for pytest

RUN_DIR = "run/noderole"


def _argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except OSError:
        return []


def _install(root: Path, name: str, text: str) -> Path:
    """An executable script at ``/usr/local/bin/NAME`` under ``root``."""
    path = root / "usr/local/bin" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def _instances(node: Node, name: str) -> list[int]:
    """Pids of the sleeper processes running with ``name`` as their argument.

    The sleeper forks a child each second that briefly, before its exec, has the same command
    line: a process whose parent is itself an instance is that child, not a second instance.
    """
    found = [
        pid
        for pid in node.processes()
        if (argv := _argv(pid))[1:2] and argv[1].endswith("/usr/local/bin/sleeper")
        if argv[2:3] == [name]
    ]
    return [pid for pid in found if _ppid(pid) not in found]


_ppid = process_parent


class Spawned:
    """CLI processes a test starts; teardown SIGKILLs any still running, by pid."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen[str]] = []

    def cli(self, code: str, *, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """Run ``python -c CODE`` with output captured."""
        process = subprocess.Popen(
            [sys.executable, "-c", code],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.processes.append(process)
        return process

    def run(self, args: list[str], *, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        """Run ``python -m noderole ARGS`` to its end (bounded)."""
        process = subprocess.Popen(
            [sys.executable, "-m", "noderole", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.processes.append(process)
        out, err = process.communicate(timeout=60)
        return subprocess.CompletedProcess(process.args, process.returncode, out, err)


@pytest.fixture
def spawned() -> Iterator[Spawned]:
    """A :class:`Spawned`; teardown kills (by pid) and reaps what is still running."""
    s = Spawned()
    yield s
    for process in s.processes:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.communicate(timeout=10)
    assert all(p.returncode is not None for p in s.processes)


# ---------------------------------------------------------------------------- supervision


CRASHER = """#!/bin/sh
echo run >> "$NODEROLE_ROOT/run/crash-runs"
exit 3
"""

STUBBORN = """#!/bin/sh
# Ignores SIGTERM, and so do its children (an ignored signal stays ignored across fork and exec).
trap '' TERM
(trap '' TERM; exec sleep 1000) &
echo $! >> "$NODEROLE_ROOT/run/kids"
sleep 1000 &
echo $! >> "$NODEROLE_ROOT/run/kids"
touch "$NODEROLE_ROOT/run/stubborn-ready"
wait
"""


FAMILY = """#!/bin/sh
# A long-lived grandchild, then the leader itself: both ``sleep``, told apart by the files.
sleep 1000 &
echo $! >> "$NODEROLE_ROOT/run/family-kids"
exec sleep 1000
"""


def _pids(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


class TestSupervisorFaults:
    def test_sigterm_to_supervisor_during_respawn_delay(self, node: Node) -> None:
        """SIGTERM during a respawn delay: nothing restarts, the daemon exits, status: stopped."""
        node.services.append(
            sleeper("a", supervision=noderole.Supervision(respawn_delay=60, stop_timeout=2))
        )
        assert node.run("apply", "demo").exit_code == 0
        supervisor = Supervisor(node.root / RUN_DIR)
        daemon = supervisor.daemon_pid()
        assert daemon is not None
        os.kill(node.pid("a"), signal.SIGKILL)
        wait_until(lambda: supervisor.status(["a"])[0].state == "backoff", "the respawn delay")
        os.kill(daemon, signal.SIGTERM)
        # Far below the 60 s delay: a daemon that waited for the respawn would fail here.
        wait_until(lambda: not is_alive(daemon), "the supervisor to exit on SIGTERM")
        # Only the daemon starts children; it is gone, so the count below is final.
        starts = (node.root / "var/log/a.log").read_text().count(" up ")
        assert starts == 1
        assert node.processes() == []
        status = node.run("status", "--json")
        assert status.exit_code == ExitCode.FAILED
        (row,) = json.loads(status.stdout)["services"]
        assert (row["state"], row["pid"]) == ("stopped", None)

    def test_supervisor_kill9_then_apply_leaves_exactly_one_family(self, node: Node) -> None:
        """kill -9 of the supervisor, apply again: a fresh start, the old group gone, one copy."""
        _install(node.root, "family", FAMILY)
        node.services.append(
            noderole.Service(
                name="family",
                roles=["demo"],
                command=["/usr/local/bin/family"],
                pidfile="/run/family.pid",
                supervision=noderole.Supervision(respawn_delay=0.05, stop_timeout=2),
            )
        )
        (node.root / "run").mkdir(exist_ok=True)
        kids = node.root / "run/family-kids"
        assert node.run("apply", "demo").exit_code == 0
        old_leader = node.pid("family")
        (old_kid,) = wait_until(lambda: _pids(kids), "the grandchild")
        supervisor = Supervisor(node.root / RUN_DIR)
        old_daemon = supervisor.daemon_pid()
        assert old_daemon is not None
        os.kill(old_daemon, signal.SIGKILL)
        wait_until(lambda: not is_alive(old_daemon), "the supervisor to die")
        again = node.run("apply", "demo", "--json")
        assert again.exit_code == 0, again.output
        (row,) = [s for s in json.loads(again.stdout)["services"] if s["name"] == "family"]
        assert row["status"] == "started"
        assert row["pid"] != old_leader
        new_kid = wait_until(lambda: len(_pids(kids)) == 2 and _pids(kids)[1], "a new grandchild")
        assert not is_alive(old_leader)
        assert not is_alive(old_kid)
        daemons, watchdogs = supervisor_processes(node.root)
        assert daemons == [supervisor.daemon_pid()]
        assert len(watchdogs) == 1
        expected = sorted([*daemons, *watchdogs, row["pid"], new_kid])
        # A look during the leader's exec can miss it: look until it settles (bounded).
        wait_until(lambda: sorted(node.processes()) == expected, "exactly one family")

    def test_crash_loop_past_respawn_max_is_reported_crashed(self, node: Node) -> None:
        """A service that always exits runs 1 + respawn_max times; status says crashed, exit 1."""
        _install(node.root, "crasher", CRASHER)
        node.services.append(
            noderole.Service(
                name="crasher",
                roles=["demo"],
                command=["/usr/local/bin/crasher"],
                supervision=noderole.Supervision(
                    respawn_delay=0.01, respawn_max=2, respawn_period=3600
                ),
            )
        )
        node.run("apply", "demo")  # exit 0 or 1: the first exit may race the start's answer
        supervisor = Supervisor(node.root / RUN_DIR)
        wait_until(lambda: supervisor.status(["crasher"])[0].state == "crashed", "give up")
        status = node.run("status", "--json")
        assert status.exit_code == ExitCode.FAILED
        (row,) = json.loads(status.stdout)["services"]
        assert row["state"] == "crashed"
        assert row["restarts"] == 2
        assert row["last_exit"] == "exit 3"
        assert "gave up after 2 respawns" in row["reason"]
        assert (node.root / "run/crash-runs").read_text().splitlines() == ["run"] * 3
        wait_until(lambda: not node.processes(), "the idle supervisor to exit")

    def test_stop_kills_a_sigterm_ignoring_child_and_its_grandchildren(self, node: Node) -> None:
        """`noderole stop` escalates to SIGKILL and returns only when the whole group is gone."""
        _install(node.root, "stubborn", STUBBORN)
        node.services.append(
            noderole.Service(
                name="stubborn",
                roles=["demo"],
                command=["/usr/local/bin/stubborn"],
                pidfile="/run/stubborn.pid",
                supervision=noderole.Supervision(respawn_delay=0.05, stop_timeout=0.3),
            )
        )
        (node.root / "run").mkdir(exist_ok=True)
        assert node.run("apply", "demo").exit_code == 0
        wait_until((node.root / "run/stubborn-ready").exists, "the traps to be set")
        leader = node.pid("stubborn")
        kids = _pids(node.root / "run/kids")
        assert len(kids) == 2
        result = node.run("stop")
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines() == [" * Stopped stubborn"]
        assert [p for p in [leader, *kids] if is_alive(p)] == []
        status = json.loads(node.run("status", "--json").stdout)
        (row,) = status["services"]
        assert (row["state"], row["last_exit"]) == ("stopped", "signal SIGKILL")


# ---------------------------------------------------------------------------- concurrency

CONCURRENT_PLUGIN = """\
import os

import noderole


@noderole.hookimpl
def noderole_services(node):
    # Marks that this process has its plan (the node lock is taken after planning).
    marker = node.resolve(f"/run/planned-{os.getpid()}")
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    supervision = noderole.Supervision(respawn_delay=0.05, stop_timeout=2)

    def service(name, **fields):
        return noderole.Service(
            name=name,
            roles=["demo"],
            command=["/usr/local/bin/sleeper", name],
            pidfile=f"/run/{name}.pid",
            output_log=f"/var/log/{name}.log",
            supervision=supervision,
            **fields,
        )

    # The lock holder blocks on the gate, inside the lock, until the test opens it.
    gate = noderole.WaitForPaths(paths=["/run/gate"], timeout=60)
    return [service("a", pre_start=[gate]), service("b", after=["a"])]
"""


def _apply_code(plugin_dir: Path, root: Path) -> str:
    return (
        f"import sys; sys.path.insert(0, {str(plugin_dir)!r}); import fm_concurrent\n"
        "from noderole.cli import cli; from noderole.cli._app import App\n"
        "from noderole.root import NodeRoot\n"
        f"cli.main(['apply', 'demo', '--json'], obj=App(root=NodeRoot({str(root)!r}), "
        "plugin_objects=(('fm', fm_concurrent),), autoload=False))\n"
    )


def _holds_open(pid: int, path: Path) -> bool:
    fds = Path(f"/proc/{pid}/fd")
    with contextlib.suppress(OSError):
        for fd in fds.iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd) == str(path):
                    return True
    return False


class TestALateNetwork:
    def test_k3s_starts_under_the_native_supervisor_when_net_fails(
        self, node: Node, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """`[noderole] net_check` on and no network within `net_timeout` (a network up late,
        `unshare -n`): `net` fails and k3s starts under the native supervisor all the same, as
        k3s's own unit and runscript only order it after the network. Before: "cannot start k3s:
        it needs net, which failed", and nothing started k3s again."""
        import noderole.builtin
        from noderole.testing import ScratchRoot, stage_standins
        from noderole_k3s import plugin as k3s_plugin

        monkeypatch.setattr(noderole.builtin, "network_up", lambda: False)
        config = "[noderole]\nnet_check = true\nnet_timeout = 0.2\n"
        scratch = ScratchRoot(node.root)
        stage_standins(("k3s", k3s_plugin), node_root=scratch, config_text=config)
        scratch.write_config(config)
        app = App(root=NodeRoot(node.root), plugin_objects=(("k3s", k3s_plugin),), autoload=False)
        result = CliRunner().invoke(
            cli, ["apply", "server", "--backend", "native", "--json"], obj=app,
            catch_exceptions=False,
        )  # fmt: skip
        services = {s["name"]: s for s in json.loads(result.stdout)["services"]}
        assert services["net"]["status"] == "failed", result.stdout
        assert services["k3s"]["status"] == "started", services["k3s"]
        assert result.exit_code == 1  # net failed: the apply says so
        k3s = int((node.root / "run/k3s.pid").read_text())
        assert is_alive(k3s)


class TestConcurrentApplies:
    def test_two_applies_as_processes_serialise_on_the_node_lock(
        self, node: Node, spawned: Spawned, tmp_path_factory: pytest.TempPathFactory
    ) -> None:
        """Two `apply` processes at once: both exit 0, the second waits; one instance each."""
        plugin_dir = tmp_path_factory.mktemp("plugin")
        (plugin_dir / "fm_concurrent.py").write_text(CONCURRENT_PLUGIN)
        code = _apply_code(plugin_dir, node.root)
        first, second = spawned.cli(code), spawned.cli(code)
        lock = node.root / RUN_DIR / "apply.lock"

        def holder() -> int | None:
            if not all(_holds_open(p.pid, lock) for p in (first, second)):
                return None
            text = lock.read_text() if lock.exists() else ""
            match = re.match(r"pid (\d+): apply demo", text)
            return int(match.group(1)) if match else None

        # Both have opened the lock file and one holds it (blocked at the gate): the other is
        # in the lock's wait loop, so the two runs truly overlap.
        holder_pid = wait_until(holder, "one apply to hold the lock while the other waits")
        assert (node.root / f"run/planned-{first.pid}").exists()
        assert (node.root / f"run/planned-{second.pid}").exists()
        (node.root / "run/gate").touch()
        outcomes = {p.pid: (p.communicate(timeout=60), p.returncode) for p in (first, second)}
        for (_, err), code_ in outcomes.values():
            assert code_ == 0, err
        (holder_out, _), _ = outcomes[holder_pid]
        waiter_pid = next(pid for pid in outcomes if pid != holder_pid)
        (waiter_out, _), _ = outcomes[waiter_pid]
        held = {s["name"]: s for s in json.loads(holder_out)["services"]}
        waited = {s["name"]: s for s in json.loads(waiter_out)["services"]}
        assert (held["a"]["status"], held["b"]["status"]) == ("started", "started")
        assert (waited["a"]["status"], waited["b"]["status"]) == ("running", "running")
        assert [waited[n]["pid"] for n in "ab"] == [held[n]["pid"] for n in "ab"]
        assert _instances(node, "a") == [held["a"]["pid"]]
        assert _instances(node, "b") == [held["b"]["pid"]]
        daemons, watchdogs = supervisor_processes(node.root)
        assert len(daemons) == 1
        assert len(watchdogs) == 1


# ---------------------------------------------------------------------------- plugins

BAD_HOOKS = {
    "hang": "import time\n\ndef noderole_services(node):\n    time.sleep(3600)\n",
    "raise": "def noderole_services(node):\n    raise RuntimeError('disk on fire')\n",
    "garbage": "def noderole_services(node):\n    return [42]\n",
}
BAD_MESSAGES = {
    "hang": "hook noderole_services did not return within 0.2s",
    "raise": "hook noderole_services raised RuntimeError: disk on fire",
    "garbage": "hook noderole_services returned 42 (int)",
}


def _plan_with_only(
    tmp_path: Path, spawned: Spawned, plugins: set[str], *, hook_timeout: str
) -> tuple[str, Any]:
    """``noderole plan demo`` in a fresh process with only ``plugins`` of the installed entry
    points (the others disabled before import) and the distributions installed under
    ``tmp_path/site``; it must exit 3. Its stderr on one line, and the finished process."""
    others = {ep.name for ep in importlib.metadata.entry_points(group="noderole")} - plugins
    disable = [arg for name in sorted(others) for arg in ("--disable-plugin", name)]
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path / "site"),
        "NODEROLE_HOOK_TIMEOUT": hook_timeout,
    }
    env.pop("NODEROLE_DISABLE_PLUGIN_AUTOLOAD", None)
    root = tmp_path / "root"
    root.mkdir()
    done = spawned.run(["--root", str(root), *disable, "plan", "demo"], env=env)
    assert done.returncode == ExitCode.PLUGIN, done.stderr
    return " ".join(done.stderr.split()), done


class TestPluginFaults:
    @pytest.mark.parametrize("fault", sorted(BAD_HOOKS))
    def test_bad_plugin_through_the_cli(
        self,
        tmp_path: Path,
        spawned: Spawned,
        install_dist: Callable[..., Path],
        fault: str,
    ) -> None:
        """A plugin that hangs, raises or returns garbage: exit 3 naming plugin, origin and hook."""
        source = "import noderole\n\n" + BAD_HOOKS[fault].replace(
            "def noderole_services", "@noderole.hookimpl\ndef noderole_services"
        )
        install_dist("fm-bad-plugin", "1.0", {"fmbad": "fm_bad_plugin"}, {"fm_bad_plugin": source})
        message, done = _plan_with_only(tmp_path, spawned, {"fmbad"}, hook_timeout="0.2")
        assert message.startswith("noderole: error: plugin 'fmbad'")
        assert "from distribution 'fm-bad-plugin' 1.0" in message
        assert BAD_MESSAGES[fault] in message
        if fault != "garbage":  # that message tells the plugin's author what to return instead
            assert "--disable-plugin fmbad" in message
        assert "Traceback" not in done.stderr

    def test_a_hang_inside_another_plugins_hook_names_the_plugin_that_hangs(
        self,
        tmp_path: Path,
        spawned: Spawned,
        install_dist: Callable[..., Path],
    ) -> None:
        """A plugin collecting a hook of its own from other plugins (as k3s collects
        konnectivity's): when a contributor's hook hangs, exit 3 names the contributor and says
        to disable it, not the plugin whose hook was waiting."""
        caller = """
            import sys
            import noderole

            class Specs:
                @noderole.hookspec
                def fmcaller_contribution(node):
                    \"\"\"Contributions to collect.\"\"\"

            @noderole.hookimpl
            def noderole_addhooks(pluginmanager):
                pluginmanager.add_hookspecs(Specs)

            @noderole.hookimpl
            def noderole_services(node):
                node.collect("fmcaller_contribution", object)
        """
        stuck = """
            import threading
            import noderole

            @noderole.hookimpl(optionalhook=True)
            def fmcaller_contribution(node):
                threading.Event().wait(30)
        """
        install_dist("fm-caller", "1.0", {"fmcaller": "fm_caller"}, {"fm_caller": caller})
        install_dist("fm-stuck", "2.0", {"fmstuck": "fm_stuck"}, {"fm_stuck": stuck})
        ours = {"fmcaller", "fmstuck"}
        message, done = _plan_with_only(tmp_path, spawned, ours, hook_timeout="1")
        assert message.startswith("noderole: error: plugin 'fmcaller'"), message
        assert "hook noderole_services did not return within 1s: it was waiting on" in message
        assert "plugin 'fmstuck' (entry point 'fmstuck = fm_stuck' from distribution" in message
        assert "'fm-stuck' 2.0) hook fmcaller_contribution, which it called" in message
        assert message.endswith("or disable it with --disable-plugin fmstuck")
        assert "Traceback" not in done.stderr


# ---------------------------------------------------------------------------- env-file fuzz


def _fragments(marker: Path) -> list[str]:
    """Pieces env files are made of, dangerous ones included, touching ``marker`` if executed."""
    return [
        "A",
        "K3S_TOKEN",
        "export ",
        "=",
        "==",
        "'",
        '"',
        "\\",
        '\\"',
        "#",
        " #",
        " ",
        "\t",
        "\n",
        "\r\n",
        "\r",
        "\0",
        "\ufeff",
        "$",
        "${X}",
        "$X",
        f"$(touch {marker})",
        f"`touch {marker}`",
        f"; touch {marker}",
        f"&& touch {marker}",
        f"| touch {marker}",
        f"$(printf x > {marker})",
        "é",
        "\u2028",
        "\x0c",
    ]


@st.composite
def _env_documents(draw: st.DrawFn, marker: Path) -> str:
    """Text made of fragments and arbitrary characters, in any order."""
    pieces = st.one_of(st.sampled_from(_fragments(marker)), st.text(max_size=8))
    return "".join(draw(st.lists(pieces, max_size=40)))


_NO_PROCESSES = (
    "subprocess.Popen",
    "os.system",
    "os.popen",
    "os.fork",
    "os.posix_spawn",
    "os.posix_spawnp",
    "os.execv",
    "os.execve",
)


@contextlib.contextmanager
def _nothing_may_run() -> Iterator[None]:
    """Any attempt to start a process inside the block fails the test."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"the env-file parser tried to start a process: {args!r}")

    with contextlib.ExitStack() as stack:
        for target in _NO_PROCESSES:
            stack.enter_context(mock.patch(target, side_effect=refuse))
        yield


_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _check_read(path: Path, data: bytes, marker: Path) -> EnvFile | None:
    """Read ``data`` from ``path``: an EnvFile of strings, or EnvFileError; nothing executed."""
    path.write_bytes(data)
    refusal: EnvFileError | None = None
    parsed: EnvFile | None = None
    with _nothing_may_run():
        try:
            parsed = read_env_file(path, display_path="/etc/fuzz.env")
        except EnvFileError as error:
            refusal = error
    assert not marker.exists(), "something in the env file was executed"
    if refusal is not None:
        assert "/etc/fuzz.env" in str(refusal)
        # Only binary (NUL) or undecodable content may be refused.
        assert b"\0" in data or not _is_utf8(data), str(refusal)
        return None
    assert isinstance(parsed, EnvFile)
    assert parsed.exists
    for key, value in parsed.values.items():
        assert _KEY.match(key), key
        assert isinstance(value, str)
    assert all(w.startswith("/etc/fuzz.env:") for w in parsed.warnings)
    return parsed


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


_FUZZ = settings(
    max_examples=200,
    deadline=None,  # a hang is caught by pytest-timeout; per-example deadlines flake on CI
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the env file, the marker a command in it would create), shared by all examples."""
    base = tmp_path_factory.mktemp("envfuzz")
    return base / "fuzz.env", base / "pwned"


class TestEnvFileFuzz:
    @_FUZZ
    @given(data=st.data())
    def test_fragments_parse_or_raise_and_run_nothing(
        self, place: tuple[Path, Path], data: st.DataObject
    ) -> None:
        """Generated files of $(…), backticks, ${X}, CRLF, NUL...: EnvFile or EnvFileError only."""
        path, marker = place
        text = data.draw(_env_documents(marker))
        _check_read(path, text.encode("utf-8", errors="surrogatepass"), marker)

    @_FUZZ
    @given(text=st.text())
    def test_any_text_parses_or_raises(self, place: tuple[Path, Path], text: str) -> None:
        """Arbitrary Unicode text: an EnvFile (or EnvFileError only when it holds NUL)."""
        path, marker = place
        _check_read(path, text.encode("utf-8", errors="surrogatepass"), marker)

    @_FUZZ
    @given(data=st.binary(max_size=512))
    def test_any_bytes_parse_or_raise(self, place: tuple[Path, Path], data: bytes) -> None:
        """Arbitrary bytes: an EnvFile, or EnvFileError for NUL or non-UTF-8 content."""
        path, marker = place
        _check_read(path, data, marker)

    @_FUZZ
    @given(data=st.data())
    def test_single_quoted_values_come_back_verbatim(
        self, place: tuple[Path, Path], data: st.DataObject
    ) -> None:
        """KEY='v' gives v exactly, whatever shell syntax v holds: nothing expanded or run."""
        path, marker = place
        # Everything but what ends a single-quoted value or a line, or makes the file binary.
        fragments = [f for f in _fragments(marker) if not set(f) & {"'", "\n", "\r", "\0"}]
        value = "".join(data.draw(st.lists(st.sampled_from(fragments), max_size=6)))
        line_end = data.draw(st.sampled_from(["\n", "\r\n", ""]))
        parsed = _check_read(path, f"K3S_TOKEN='{value}'{line_end}".encode(), marker)
        assert parsed is not None
        assert parsed.values == {"K3S_TOKEN": value}
        assert parsed.warnings == ()


# ---------------------------------------------------------------------------- secrets

TOKEN = "K10f4u1tm4tr1x5ecr3t0001::server:0ddba11"
NEW_TOKEN = "K10f4u1tm4tr1x5ecr3t0002::server:0ddba11"
SECRET_CORE = b"f4u1tm4tr1x5ecr3t"
"""The part of both tokens no other text contains: finding it anywhere is a leak."""
DEMO_ENV = "/etc/demo/token.env"


def _token_plugin() -> types.ModuleType:
    """A plugin whose service reads K3S_TOKEN from an env file, as the k3s plugin does."""
    module = types.ModuleType("fm_tokens")

    def noderole_services(node: Any) -> list[noderole.Service]:
        token = node.read_env(DEMO_ENV).values["K3S_TOKEN"]
        return [
            sleeper(
                "tokened",
                environment={"K3S_TOKEN": noderole.Secret(token), "MODE": "demo"},
                pre_start=[noderole.MakeDirectories(paths=["/run/tokened"])],
            )
        ]

    module.noderole_services = noderole.hookimpl(noderole_services)  # type: ignore[attr-defined]
    return module


class SecretScene:
    """A node root with a token in an env file, and the role and service that use it."""

    def __init__(
        self,
        root: Path,
        role: str,
        service: str,
        env_file: str,
        make_app: Callable[[], App],
        *,
        other_lines: str = "",
    ) -> None:
        self.root = root
        self.other_lines = other_lines
        self.role = role
        self.service = service
        self.env_file = env_file
        self.make_app = make_app
        self.outputs: list[tuple[str, str]] = []

    def write_token(self, token: str) -> None:
        """Write the env file the service reads its token from (mode 0600)."""
        path = self.root / self.env_file.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{self.other_lines}K3S_TOKEN={token}\n")
        path.chmod(0o600)

    def run(self, *args: str, expect: int = 0) -> Result:
        """Run one command with a fresh App; keep its output for the leak check."""
        result = CliRunner().invoke(cli, list(args), obj=self.make_app(), catch_exceptions=False)
        self.outputs.append((" ".join(args), result.stdout + result.stderr))
        assert result.exit_code == expect, (args, result.output)
        return result


def _written_files(root: Path, exclude: set[Path]) -> Iterator[Path]:
    for directory, _, files in os.walk(root):
        for name in files:
            path = Path(directory) / name
            if path not in exclude and stat.S_ISREG(path.lstat().st_mode):
                yield path


@pytest.fixture(params=["plugin", "k3s-agent"])
def scene(request: pytest.FixtureRequest, node: Node) -> SecretScene:
    """A token-bearing service: a test plugin's, or the real k3s plugin's agent role."""
    if request.param == "plugin":
        module = _token_plugin()
        scene = SecretScene(
            node.root,
            "demo",
            "tokened",
            DEMO_ENV,
            lambda: App(root=NodeRoot(node.root), plugin_objects=(("fm", module),), autoload=False),
        )
        scene.write_token(TOKEN)
        return scene
    if importlib.util.find_spec("noderole_k3s") is None:
        pytest.skip("the k3s plugin is not installed")
    from noderole.rehearsal import stage_rehearsal
    from noderole_k3s import plugin as k3s_plugin

    def make_app() -> App:
        return App(root=NodeRoot(node.root), plugin_objects=(("k3s", k3s_plugin),), autoload=False)

    # The stand-ins `noderole rehearse` writes: a k3s that stays up, config, agent.env.
    staging = make_app()
    stage_rehearsal(staging.root, staging.plugins, staging.node)
    scene = SecretScene(
        node.root,
        "agent",
        "k3s-agent",
        "/etc/spinifex-eks/agent.env",
        make_app,
        other_lines="K3S_URL=https://127.0.0.1:6443\n",
    )
    scene.write_token(TOKEN)
    return scene


class TestSecretsNeverWritten:
    def test_token_appears_only_in_the_childs_environment(
        self, scene: SecretScene, node: Node
    ) -> None:
        """K3S_TOKEN reaches the child's environment and no output, log, state or rendered file."""
        r, s, env_file = scene.role, scene.service, scene.env_file
        for args in (
            ["list"],
            ["list", "--json"],
            ["config", "show"],
            ["config", "show", "--json"],
            ["plan", r],
            ["plan", r, "--json"],
            ["graph", r],
            ["env", "show", env_file],
            ["env", "show", env_file, "--json"],
            ["apply", r, "--dry-run"],
            ["apply", r, "--dry-run", "--json"],
            ["hook", s, "start-pre"],
            ["render", r, "--backend", "openrc"],
            ["render", r, "--backend", "systemd"],
            ["apply", r],
            ["status"],
            ["status", "--json"],
            ["apply", r, "--json"],
            ["restart", s],
            ["status", r, "--json"],
        ):
            scene.run(*args)
        pid = _running_pid(scene)
        assert pid is not None
        assert f"K3S_TOKEN={TOKEN}".encode() in _environ(pid).split(b"\0")

        # A changed token restarts the service and says so, without either value.
        scene.write_token(NEW_TOKEN)
        changed = {
            x["name"]: x for x in json.loads(scene.run("apply", r, "--json").stdout)["services"]
        }[s]
        assert changed["status"] == "restarted"
        assert "environment K3S_TOKEN changed (secret, not shown)" in changed["reason"]
        new_pid = wait_until(
            lambda: (p := _running_pid(scene)) != pid and p, "the restarted service's pid"
        )
        assert f"K3S_TOKEN={NEW_TOKEN}".encode() in _environ(new_pid).split(b"\0")

        # No process of this root (the supervisor, the child) carries it in its command line.
        for process in node.processes():
            assert SECRET_CORE not in "\0".join(_argv(process)).encode(), _argv(process)
        scene.run("stop")
        wait_until(lambda: not node.processes(), "the supervisor to exit")

        leaks = [what for what, text in scene.outputs if SECRET_CORE.decode() in text]
        assert leaks == []
        run_dir = scene.root / RUN_DIR
        supervisor_log = scene.root / "var/log/noderole/supervisor.log"
        assert supervisor_log.stat().st_size > 0
        assert (run_dir / "state.json").exists()
        input_file = scene.root / env_file.lstrip("/")
        checked = list(_written_files(scene.root, exclude={input_file}))
        assert supervisor_log in checked
        assert run_dir / "state.json" in checked
        assert scene.root / "var/lib/noderole/applied.json" in checked
        assert scene.root / f"etc/init.d/{s}" in checked
        assert scene.root / f"etc/systemd/system/{s}.service" in checked
        leaked_files = [str(p) for p in checked if SECRET_CORE in p.read_bytes()]
        assert leaked_files == []


_environ = process_environ


def _running_pid(scene: SecretScene) -> int | None:
    rows = json.loads(scene.run("status", "--json").stdout)["services"]
    row = next(x for x in rows if x["name"] == scene.service)
    return int(row["pid"]) if row["pid"] and row["state"] == "running" else None


def _defined_tests(path: Path) -> set[str]:
    """``Class``, ``Class::test`` and ``test`` names a test file defines (by its syntax, not
    collected)."""
    import ast

    names: set[str] = set()
    for statement in ast.parse(path.read_text()).body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(statement.name)
        elif isinstance(statement, ast.ClassDef):
            names.add(statement.name)
            names.update(
                f"{statement.name}::{item.name}"
                for item in statement.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            )
    return names


def test_every_test_a_row_names_exists() -> None:
    """Each row's tests column names tests that exist: a row whose test was renamed or moved
    promised what nothing checked any more."""
    repo = Path(__file__).resolve().parent.parent
    text = (repo / "docs/fault-matrix.md").read_text()
    named = re.findall(
        r"`((?:tests|plugins/[\w-]+/tests)/[\w/]+\.py)::([\w:]+)(?:\[[^\]]*\])?`", text
    )
    assert len(named) > 100, "the fault matrix names no tests"
    defined: dict[str, set[str]] = {}
    missing = []
    for path, test in named:
        if path not in defined:
            file = repo / path
            defined[path] = _defined_tests(file) if file.is_file() else set()
        if test not in defined[path]:
            missing.append(f"{path}::{test}")
    assert missing == [], f"the fault matrix names tests that do not exist: {missing}"
