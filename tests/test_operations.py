"""The operations core: the role hooks see, Plan.subset and restart, backends, and the layout."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import noderole
from noderole.backends.detect import backend_named, detect_init
from noderole.backends.openrc import OpenRCBackend
from noderole.backends.systemd import InitStatus, SystemdBackend
from noderole.cli import cli
from noderole.cli._app import App
from noderole.errors import BackendError, ExitCode, UsageError
from noderole.operations import Operations, status_verdict
from noderole.plan import build_plan
from noderole.root import NodeRoot
from noderole.state import read_role
from noderole.testing import RecordingBackend, new_fake_clock, plan_from_plugins

PACKAGE = Path(noderole.__file__).parent


def _role_plugin(seen: list[str | None]) -> types.ModuleType:
    """Defines ``web`` for role front, with a flag that depends on ``node.role``; records roles."""
    module = types.ModuleType("roleplugin")

    def noderole_services(node: Any) -> list[noderole.Service]:
        seen.append(node.role)
        flag = f"--as={node.role}" if node.role else "--as=nothing"
        return [
            noderole.Service(name="web", roles=["front", "back"], command=["/bin/true", flag]),
        ]

    module.noderole_services = noderole.hookimpl(noderole_services)  # type: ignore[attr-defined]
    return module


def _ops(root: Path, *plugins: tuple[str, object]) -> Operations:
    return Operations(
        root=NodeRoot(root), plugin_objects=plugins, clock=new_fake_clock(), autoload=False
    )


def _chain_plugin() -> types.ModuleType:
    """a <- b <- c (c needs b, b needs a), and a separate d, all in role r."""
    module = types.ModuleType("chain")

    def noderole_services() -> list[noderole.Service]:
        return [
            noderole.Service(name="a", roles=["r"], command=["/bin/a"]),
            noderole.Service(name="b", roles=["r"], need=["a"], command=["/bin/b"]),
            noderole.Service(name="c", roles=["r"], need=["b"], command=["/bin/c"]),
            noderole.Service(name="d", roles=["r"], command=["/bin/d"]),
        ]

    module.noderole_services = noderole.hookimpl(noderole_services)  # type: ignore[attr-defined]
    return module


class TestRole:
    def test_plan_gives_hooks_the_role(self, tmp_path: Path) -> None:
        """Planning a role asks the hooks with node.role set to it."""
        seen: list[str | None] = []
        plan = _ops(tmp_path, ("r", _role_plugin(seen))).plan("back")
        assert seen == ["back"]
        assert plan["web"].service.command == ("/bin/true", "--as=back")

    def test_list_asks_without_a_role(self, tmp_path: Path) -> None:
        """`noderole list` is about no role: node.role is None."""
        seen: list[str | None] = []
        app = App(root=NodeRoot(tmp_path), plugin_objects=(("r", _role_plugin(seen)),))
        result = CliRunner().invoke(cli, ["list"], obj=app)
        assert result.exit_code == 0, result.output
        assert seen == [None]

    def test_kit_plan_and_services_pass_the_role(self, tmp_path: Path) -> None:
        """plan_from_plugins and services_from_plugins(role=...) give hooks the role."""
        from noderole.testing import services_from_plugins

        seen: list[str | None] = []
        plan_from_plugins("front", ("r", _role_plugin(seen)), node_root=tmp_path)
        services_from_plugins(("r", _role_plugin(seen)), node_root=tmp_path, role="back")
        services_from_plugins(("r", _role_plugin(seen)), node_root=tmp_path)
        assert seen == ["front", "back", None]

    def test_render_records_the_role_and_hook_sees_it(self, tmp_path: Path) -> None:
        """render writes the role, so the boot-time `noderole hook` defines services as it."""
        seen: list[str | None] = []
        app = App(root=NodeRoot(tmp_path), plugin_objects=(("r", _role_plugin(seen)),))
        result = CliRunner().invoke(cli, ["render", "front", "--backend", "systemd"], obj=app)
        assert result.exit_code == 0, result.output
        assert read_role(NodeRoot(tmp_path)) == "front"
        assert (tmp_path / "etc/systemd/system/web.service").is_file()
        seen.clear()
        result = CliRunner().invoke(cli, ["hook", "web", "start-pre"], obj=app)
        assert result.exit_code == 0, result.output
        assert seen == ["front"]

    def test_service_lookup_without_a_recorded_role(self, tmp_path: Path) -> None:
        """Before any apply or render, hook/exec ask with node.role None."""
        seen: list[str | None] = []
        service = _ops(tmp_path, ("r", _role_plugin(seen))).service("web")
        assert seen == [None]
        assert service.command == ("/bin/true", "--as=nothing")

    def test_apply_records_the_role_hooks_saw(self, tmp_path: Path) -> None:
        """apply plans with the role, starts what that role defines and records the role."""
        seen: list[str | None] = []
        ops = _ops(tmp_path, ("r", _role_plugin(seen)))
        backend = RecordingBackend(tmp_path)
        report = ops.apply(ops.plan("back"), backend)
        assert report.ok
        assert backend.argv("web")[1] == "--as=back"
        assert read_role(ops.root) == "back"


class TestPlanSubset:
    def test_subset_keeps_inner_edges_and_recomputes_waves(self) -> None:
        """Edges to services outside the subset go; waves start again at 0."""
        from noderole.testing import services_from_plugins

        plan = build_plan(services_from_plugins(("chain", _chain_plugin())), "r")
        assert plan["c"].wave == 2
        sub = plan.subset(["c", "b"])
        assert sub.role == "r"
        assert sub.names() == ("b", "c")
        assert sub.waves == (("b",), ("c",))
        assert (sub["b"].after, sub["b"].wave) == ((), 0)
        assert (sub["c"].after, sub["c"].wave) == (("b",), 1)
        assert sub["b"].needs == ("a",)  # still what it declared

    def test_independent_services_share_a_wave(self) -> None:
        """Services with no edge between them start together."""
        from noderole.testing import services_from_plugins

        plan = build_plan(services_from_plugins(("chain", _chain_plugin())), "r")
        assert plan.subset(["d", "c"]).waves == (("c", "d"),)

    def test_unknown_name_is_a_key_error(self) -> None:
        """A name outside the plan is refused, naming it and the role."""
        from noderole.testing import services_from_plugins

        plan = build_plan(services_from_plugins(("chain", _chain_plugin())), "r")
        with pytest.raises(KeyError, match="'zz' is not in the plan for role 'r'"):
            plan.subset(["a", "zz"])


class TestRestart:
    def test_restart_stops_dependents_first_and_starts_in_order(self, tmp_path: Path) -> None:
        """restart b c: c stops before b, b starts before c, a and d are left alone."""
        ops = _ops(tmp_path, ("chain", _chain_plugin()))
        backend = RecordingBackend(tmp_path)
        assert ops.apply(ops.plan("r"), backend).ok
        backend.started.clear()
        plan, targets = ops.targets(["b", "c"])
        assert targets == ["c", "b"]
        report = ops.restart(plan, targets, backend)
        assert report.ok
        assert backend.stopped == ["c", "b"]
        assert backend.names() == ["b", "c"]
        assert [r.name for r in report.services] == ["b", "c"]

    def test_targets_of_a_role_name(self, tmp_path: Path) -> None:
        """One name that is a role means the whole role, in stop order."""
        ops = _ops(tmp_path, ("chain", _chain_plugin()))
        plan, targets = ops.targets(["r"])
        assert plan.role == "r"
        assert targets == list(plan.stop_order())

    def test_targets_without_a_recorded_role_is_a_usage_error(self, tmp_path: Path) -> None:
        """Service names need a recorded role; the error says how to get one."""
        ops = _ops(tmp_path, ("chain", _chain_plugin()))
        with pytest.raises(UsageError, match="apply a role first"):
            ops.targets(["b"])


class TestStatusVerdict:
    def test_verdicts(self) -> None:
        """Failed beats starting; ready, or running without a readiness check, is up."""
        up = {"state": "running", "needs_ready": False}
        ready = {"state": "ready", "needs_ready": True}
        starting = {"state": "running", "needs_ready": True}
        crashed = {"state": "crashed", "needs_ready": False}
        assert status_verdict([up, ready]) == ExitCode.OK
        assert status_verdict([up, starting]) == ExitCode.STARTING
        assert status_verdict([starting, crashed]) == ExitCode.FAILED


def _stand_in_tool(bin_dir: Path, name: str, log: Path, script: str = "") -> None:
    """A program called ``name`` that appends its arguments to ``log``, then runs ``script``."""
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\n{script}\n')
    path.chmod(0o755)


def _timed_systemd_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str
) -> tuple[SystemdBackend, InitStatus, float]:
    """Start ``web`` through a stand-in ``systemctl`` running ``script``, on a fake clock:
    the backend, the status the start returned, and the seconds it took."""
    _stand_in_tool(tmp_path / "bin", "systemctl", tmp_path / "calls", script)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    clock = new_fake_clock()
    backend = SystemdBackend(
        NodeRoot(tmp_path / "node"), noderole_path="/usr/bin/noderole", clock=clock
    )
    began = clock.monotonic()
    status = backend.start(
        noderole.Service(name="web", roles=["r"], command=["/bin/web"]), fingerprint="f1"
    )
    return backend, status, clock.monotonic() - began


class TestInitSystemBackends:
    def test_detect_is_native_under_a_root(self, tmp_path: Path) -> None:
        """A scratch root never drives the machine's init system."""
        assert detect_init(NodeRoot(tmp_path)) == "native"
        assert backend_named("auto", NodeRoot(tmp_path), noderole_path="/x").name == "native"

    def test_unknown_backend_names_the_choices(self, tmp_path: Path) -> None:
        """An unknown name is a BackendError listing the valid ones."""
        with pytest.raises(BackendError, match=r"'upstart'.*native, openrc, systemd"):
            backend_named("upstart", NodeRoot(tmp_path), noderole_path="/x")

    def test_backend_name_is_the_name_backend_builds(self, tmp_path: Path) -> None:
        """backend_name (what plan shows) names the backend backend() builds, without it."""
        ops = _ops(tmp_path)
        assert ops.backend_name("auto") == ops.backend("auto").name == "native"
        assert ops.backend_name("native") == "native"
        with pytest.raises(BackendError, match=r"'upstart'.*native, openrc, systemd"):
            ops.backend_name("upstart")

    def test_backend_name_of_an_init_system_checks_it_as_backend_does(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Under a root, naming openrc warns as backend() does; a missing tool is refused."""
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
        ops = _ops(tmp_path)
        with pytest.raises(BackendError, match="needs rc-service, which is not on PATH"):
            ops.backend_name("openrc")
        assert [w for w in ops.warnings if "--backend openrc under --root" in w] != []
        assert len(ops.warnings) == 1

    @pytest.mark.parametrize(
        ("cls", "tool"), [(OpenRCBackend, "rc-service"), (SystemdBackend, "systemctl")]
    )
    def test_missing_tool_is_refused(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cls: type[OpenRCBackend], tool: str
    ) -> None:
        """Without the init system's tool on PATH the backend refuses, naming the tool."""
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
        with pytest.raises(BackendError, match=f"needs {tool}, which is not on PATH"):
            cls(NodeRoot(tmp_path), noderole_path="/usr/bin/noderole")

    def test_openrc_renders_then_starts_and_stops(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """OpenRC: runscript written, `rc-service NAME start`, stop by rc-service too."""
        log = tmp_path / "calls"
        # status: stopped (3) until started, then running (0)
        _stand_in_tool(
            tmp_path / "bin",
            "rc-service",
            log,
            f'case "$2" in status) grep -q "rc-service $1 start" {log} && exit 0; exit 3;; esac',
        )
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
        root = NodeRoot(tmp_path / "node")
        backend = OpenRCBackend(root, noderole_path="/usr/bin/noderole")
        service = noderole.Service(name="web", roles=["r"], command=["/bin/web"])
        status = backend.start(service, fingerprint="f1")
        assert (status.state, status.fingerprint) == ("running", "f1")
        assert (tmp_path / "node/etc/init.d/web").is_file()
        backend.stop(["web"])
        calls = log.read_text().splitlines()
        assert [c for c in calls if "status" not in c] == [
            "rc-service web start",
            "rc-service web stop",
        ]
        remembered = json.loads(
            (tmp_path / "node/var/lib/noderole/init-fingerprints.json").read_text()
        )
        assert remembered == {"web": "f1"}

    def test_a_tool_error_of_several_lines_is_one_line(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The init-system tool's lines are joined with "; " (stripped, empty ones dropped):
        apply's progress lines, its summary and status's "last apply" show the message as it
        is. Before, its newlines were kept, and the console wrote each out as `\\x0a`."""
        from noderole.console import inert

        said = (
            "printf ' * ERROR: web needs non existent service gate\\n\\n"
            " * ERROR: cannot start web\\n' >&2"
        )
        _stand_in_tool(
            tmp_path / "bin",
            "rc-service",
            tmp_path / "calls",
            f'case "$2" in status) exit 3;; start) {said}; exit 1;; esac',
        )
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
        backend = OpenRCBackend(NodeRoot(tmp_path / "node"), noderole_path="/usr/bin/noderole")
        service = noderole.Service(name="web", roles=["r"], command=["/bin/web"])
        with pytest.raises(BackendError) as raised:
            backend.start(service, fingerprint="f1")
        message = str(raised.value)
        assert message == (
            "rc-service web start failed (exit 1): * ERROR: web needs non existent service "
            "gate; * ERROR: cannot start web"
        )
        assert inert(message) == message

    @pytest.mark.parametrize(
        ("stale", "reloads"), [("no", []), ("yes", ["systemctl daemon-reload"])], ids=str
    )
    def test_systemd_reloads_when_stale_and_starts_without_blocking(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stale: str, reloads: list[str]
    ) -> None:
        """systemd: unit written, daemon-reload only when systemd holds an older version
        (NeedDaemonReload), `start --no-block`; pid from MainPID."""
        log = tmp_path / "calls"
        _stand_in_tool(
            tmp_path / "bin",
            "systemctl",
            log,
            f'case "$*" in show*) printf "ActiveState=active\\nMainPID=42\\n'
            f'NeedDaemonReload={stale}\\n";; esac',
        )
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
        root = NodeRoot(tmp_path / "node")
        backend = SystemdBackend(root, noderole_path="/usr/bin/noderole")
        service = noderole.Service(name="web", roles=["r"], command=["/bin/web"])
        status = backend.start(service, fingerprint="f1")
        assert (status.state, status.pid) == ("running", 42)
        assert (tmp_path / "node/etc/systemd/system/web.service").is_file()
        calls = [c for c in log.read_text().splitlines() if not c.startswith("systemctl show")]
        # already active: the backend restarts rather than starts
        assert calls == [*reloads, "systemctl restart --no-block web.service"]

    @pytest.mark.parametrize(
        ("main_pid", "waited"),
        [("0", 0.0), ("4194304", 0.2)],  # no pid told; a pid no process has (above pid_max)
        ids=["no-pid", "no-such-process"],
    )
    def test_a_start_whose_process_cannot_be_looked_at_is_not_waited_for(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, main_pid: str, waited: float
    ) -> None:
        """The wait for ``noderole exec`` to become the program looks at the main process; an
        init system that names none, or one no longer there that it still calls running, ends
        the wait at once or after a short grace (the first made every OpenRC start wait out the
        10 s bound)."""
        _, status, took = _timed_systemd_start(
            tmp_path,
            monkeypatch,
            f'case "$*" in show*) printf "ActiveState=active\\nMainPID={main_pid}\\n";; esac',
        )
        assert status.state == "running"
        assert waited <= took <= waited + 0.05

    def test_a_start_job_still_queued_is_starting_and_names_what_it_waits_for(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A start job systemd keeps queued past the bound (its ``After=`` units not done) is
        a start under way, said with the jobs ahead of it. Before, the unit read after the
        bound (``inactive``, never started) was taken for one that had ended: every service
        of an apply "exited at start: crashed", with no word of why."""
        backend, status, took = _timed_systemd_start(
            tmp_path,
            monkeypatch,
            'case "$*" in\n'
            'show*) printf "ActiveState=inactive\\nSubState=dead\\nResult=success\\nJob=6\\n";;\n'
            "list-jobs*) cat <<'EOF'\n"
            "6  web.service               start waiting\n"
            "\u2514\u2500 \twaiting for job 9 (sysinit.target/start) -     -\n"
            "9  sysinit.target            start waiting\n"
            "\u2514\u2500 \tblocking job 6 (web.service/start)     -     -\n"
            "\u2514\u2500 \twaiting for job 27 (systemd-journald.service/start) -     -\n"
            "27 systemd-journald.service  start running\n"
            "\u2514\u2500 \tblocking job 9 (sysinit.target/start)  -     -\n"
            "EOF\n"
            ";;\nesac",
        )
        assert status.state == "starting"
        assert status.reason == (
            "start job still queued after 30s, waiting for sysinit.target (start, waiting); "
            "first in line: systemd-journald.service (start, running)"
        )
        assert 30 <= took < 31  # no wait for an exec that has not begun
        # Every look is a request to PID 1, whose job queue runs only when none is waiting:
        # the looks thin out to one each 0.5 s (before: two each 20 ms, 3,000 in the 30 s).
        shows = (tmp_path / "calls").read_text().count("systemctl show")
        assert shows <= 75, shows
        # systemd will run it: the fingerprint is kept, and status says the same
        assert backend._fingerprints() == {"web": "f1"}
        queued = backend.status(["web"])["web"]
        assert (queued.state, queued.reason) == (
            "starting",
            "start job queued, waiting for sysinit.target (start, waiting); "
            "first in line: systemd-journald.service (start, running)",
        )

    def test_a_start_under_way_is_looked_at_less_and_less(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A unit still ``activating`` (its pre-start hook waiting, bounded, for k3s) is looked
        at ever less often while the start waits for its program: a few times in the first
        tenth of a second, then four times a second, up to the 10 s bound. Before, every
        10 ms: a thousand ``systemctl show`` requests to PID 1 per start, two dozen starts at
        once slowing systemd's own job queue."""
        _, status, took = _timed_systemd_start(
            tmp_path,
            monkeypatch,
            'case "$*" in show*) printf "ActiveState=activating\\nSubState=start-pre\\n";; esac',
        )
        assert status.state == "starting"
        assert 10 <= took < 10.3
        shows = (tmp_path / "calls").read_text().count("systemctl show")
        assert shows <= 60, shows

    def test_systemd_reloads_and_tries_again_when_the_unit_is_not_found(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A systemd older than 246 does not load a new unit on start: "not found" gets one
        reload and a second try."""
        log = tmp_path / "calls"
        _stand_in_tool(
            tmp_path / "bin",
            "systemctl",
            log,
            'case "$*" in show*) printf "ActiveState=inactive\\n";; '
            f"start*) grep -q daemon-reload {log} && exit 0; "
            'echo "Failed to start web.service: Unit web.service not found." >&2; exit 5;; esac',
        )
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
        backend = SystemdBackend(NodeRoot(tmp_path / "node"), noderole_path="/usr/bin/noderole")
        backend.launch("web", "start")
        calls = [c for c in log.read_text().splitlines() if not c.startswith("systemctl show")]
        assert calls == [
            "systemctl start --no-block web.service",
            "systemctl daemon-reload",
            "systemctl start --no-block web.service",
        ]

    def test_systemd_start_refused_is_reported_once(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A start systemd refuses for another reason raises, naming the command and systemd's
        words, after one try (not a second start only to read the error)."""
        log = tmp_path / "calls"
        _stand_in_tool(
            tmp_path / "bin",
            "systemctl",
            log,
            'case "$*" in start*) echo "Job for web.service failed." >&2; exit 1;; esac',
        )
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
        backend = SystemdBackend(NodeRoot(tmp_path / "node"), noderole_path="/usr/bin/noderole")
        with pytest.raises(BackendError, match=r"start --no-block web.service failed \(exit 1\)"):
            backend.launch("web", "start")
        starts = [c for c in log.read_text().splitlines() if c.startswith("systemctl start")]
        assert starts == ["systemctl start --no-block web.service"]

    def test_concurrent_starts_keep_every_fingerprint(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The engine starts independent services in threads of their own. Each start records
        its fingerprint; before, two at once read the same file and the last write dropped the
        other's entry (28 of 200 lost under a real systemd), and the next apply restarted those
        services for nothing."""
        import threading

        _stand_in_tool(tmp_path / "bin", "systemctl", tmp_path / "calls")
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
        backend = SystemdBackend(NodeRoot(tmp_path / "node"), noderole_path="/usr/bin/noderole")
        names = [f"s{i}" for i in range(48)]
        together = threading.Barrier(len(names))

        def remember(name: str) -> None:
            together.wait()
            backend._remember(name, f"fp-{name}")

        threads = [threading.Thread(target=remember, args=(n,)) for n in names]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert backend._fingerprints() == {n: f"fp-{n}" for n in names}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


class TestLayout:
    def test_nothing_outside_the_cli_imports_it(self) -> None:
        """noderole.cli is the outermost layer: no other module of the package imports it but
        the two ways in (``python -m noderole`` and the console script's ``_start``)."""
        offenders = [
            str(path.relative_to(PACKAGE))
            for path in PACKAGE.rglob("*.py")
            if PACKAGE / "cli" not in path.parents
            and path.relative_to(PACKAGE).as_posix() not in ("__main__.py", "_start.py")
            and any(name.startswith("noderole.cli") for name in _imports(path))
        ]
        assert offenders == []

    def test_command_modules_do_not_import_each_other(self) -> None:
        """Commands share only the app, options, parameter types and output modules."""
        shared = {
            "noderole.cli._app",
            "noderole.cli._options",
            "noderole.cli._output",
            "noderole.cli._params",
        }
        offenders = {}
        for path in (PACKAGE / "cli").glob("_*.py"):
            used = {
                name
                for name in _imports(path)
                if name.startswith("noderole.cli._") and name.count(".") == 2
            }
            if used - shared - {f"noderole.cli.{path.stem}"}:
                offenders[path.name] = sorted(used - shared)
        assert offenders == {}

    def test_operations_import_is_cheap(self) -> None:
        """Importing the operations loads no plugin machinery, attrs or cryptography."""
        probe = "import json, sys, noderole.operations; print(json.dumps(sorted(sys.modules)))"
        done = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True
        )
        loaded = json.loads(done.stdout)
        heavy = ("cryptography", "pluggy", "attr", "noderole.plugins", "noderole.records")
        assert [m for m in loaded if m.startswith(heavy)] == []


class _SteppedClockBackend:
    """Reports a real process running since ``started_at`` on the wall clock, with the start
    each backend also reports on a clock no step moves: the native supervisor's ``start_ticks``
    (from /proc/PID/stat), systemd's fork on the monotonic clock. What a backend says of a
    service started before the wall clock was stepped (NTP at boot, a board without a clock of
    its own that starts in 1970)."""

    name = "native"

    def __init__(self, pid: int, started_at: float, kind: str) -> None:
        import time

        from noderole.backends._initsystem import InitStatus
        from noderole.supervisor import ServiceStatus
        from noderole.supervisor._proc import proc_stat

        self._status: Any
        if kind == "native":
            found = proc_stat(pid)
            ticks = found.start_ticks if found is not None else None
            self._status = ServiceStatus(
                name="a", state="running", pid=pid, start_ticks=ticks, started_at=started_at
            )
        elif kind == "systemd":
            # Forked a moment ago, as ExecMainStartTimestampMonotonic says it.
            since = time.monotonic() - 0.2
            self._status = InitStatus(
                name="a", state="running", pid=pid, started_at=started_at, started_monotonic=since
            )
        else:  # an init system that knows the wall-clock start only
            self._status = InitStatus(name="a", state="running", pid=pid, started_at=started_at)

    def status(self, names: Any) -> dict[str, Any]:
        return {"a": self._status} if "a" in names else {}


class TestStatusUptime:
    @pytest.mark.parametrize("kind", ["native", "systemd"])
    @pytest.mark.parametrize("step", [365 * 86400.0, -86400.0], ids=["forward", "backward"])
    def test_uptime_outlives_a_step_of_the_wall_clock(
        self, tmp_path: Path, step: float, kind: str
    ) -> None:
        """A service started a moment ago shows a moment of uptime, whichever way the wall
        clock was stepped since (before: a year of uptime, or a negative one)."""
        import time

        plan = build_plan([noderole.Service(name="a", command=["/bin/sleep"], roles=["r"])], "r")
        sleeper = subprocess.Popen(["sleep", "60"])
        try:
            time.sleep(0.2)
            backend = _SteppedClockBackend(sleeper.pid, time.time() - step, kind)
            [row] = Operations(root=NodeRoot(tmp_path)).status_rows(plan, backend)  # type: ignore[arg-type]
        finally:
            sleeper.kill()
            sleeper.wait()
        assert row["state"] == "running"
        assert 0.0 <= row["uptime"] < 30.0

    def test_with_the_wall_clock_start_alone_it_is_never_negative(self, tmp_path: Path) -> None:
        """An init system that records the wall-clock start only: that start stands, and a
        wall clock stepped back shows no negative uptime."""
        import time

        plan = build_plan([noderole.Service(name="a", command=["/bin/sleep"], roles=["r"])], "r")
        ops = Operations(root=NodeRoot(tmp_path))
        [row] = ops.status_rows(plan, _SteppedClockBackend(4242, time.time() - 42, "wall"))  # type: ignore[arg-type]
        assert 41.0 <= row["uptime"] < 72.0
        [row] = ops.status_rows(plan, _SteppedClockBackend(4242, time.time() + 86400, "wall"))  # type: ignore[arg-type]
        assert row["uptime"] == 0.0
