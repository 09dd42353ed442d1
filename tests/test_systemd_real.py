"""`noderole apply --backend systemd server` against the machine's own systemd, booted as PID 1.

Each test boots a private systemd (tests/harness/systemd_ns.py, about 0.3 s), writes the k3s and
konnectivity stand-ins at their real paths in the container's overlay root (as `noderole
rehearse` does), and drives noderole inside the container with `nsenter`. Nothing reaches the
machine: the container's root is an overlay whose writes land on a tmpfs.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from noderole.errors import ExitCode
from noderole.operations import Operations
from noderole.rehearsal import stage_rehearsal
from noderole.root import NodeRoot
from tests.harness.capabilities import CAP_SYS_RESOURCE, capable
from tests.harness.systemd_ns import SystemdNamespace, _remove_cgroup, systemd_problem

VENV = Path(sys.prefix)
CHECKOUT = Path(__file__).resolve().parent.parent
"""The source tree the virtualenv's editable installs point into: it must be visible inside the
namespace too (a checkout under /tmp is hidden by the container's fresh /tmp, as in CI)."""
NODEROLE = str(VENV / "bin" / "noderole")
KONNECTIVITY_CERT = "/var/lib/spinifex-eks/konnectivity/tls.crt"


class Node:
    """A booted container with the server role's stand-ins staged, and noderole to drive it."""

    def __init__(self, ns: SystemdNamespace) -> None:
        self.ns = ns

    def noderole(self, *args: str, timeout: float = 120) -> Any:
        return self.ns.run(NODEROLE, *args, check=False, timeout=timeout)

    def apply(self) -> dict[str, Any]:
        done = self.noderole("apply", "server", "--backend", "systemd", "--json")
        assert done.returncode == 0, done.stderr + done.stdout
        report: dict[str, Any] = json.loads(done.stdout)
        return report

    def status(self, *extra: str) -> tuple[int, dict[str, dict[str, Any]]]:
        done = self.noderole("status", "server", "--backend", "systemd", "--json", *extra)
        payload = json.loads(done.stdout)
        return done.returncode, {s["name"]: s for s in payload["services"]}

    def main_pid(self, unit: str) -> int:
        return int(self.ns.show(unit, "MainPID")["MainPID"])

    def active(self, unit: str) -> str:
        return self.ns.show(unit, "ActiveState")["ActiveState"]

    def journal(self, unit: str) -> str:
        done = self.ns.run("journalctl", "--no-pager", "-o", "cat", "-u", unit, check=False)
        return str(done.stdout + done.stderr)

    def show_load(self, unit: str) -> str:
        return self.ns.show(unit, "LoadState")["LoadState"]


def stage_server(root: Path) -> None:
    """The rehearsal's stand-ins and config, with noderole_path set to this virtualenv's."""
    ops = Operations(root=NodeRoot(root))
    stage_rehearsal(ops.root, ops.plugins, ops.node_for("server"))
    config = root / "etc/noderole/config.toml"
    text = config.read_text().replace(
        "[noderole]\n", f'[noderole]\nnoderole_path = "{NODEROLE}"\n', 1
    )
    config.write_text(text)


@pytest.fixture
def node() -> Iterator[Node]:
    problem = systemd_problem()
    if problem:
        pytest.skip(problem)
    with SystemdNamespace(binds=[CHECKOUT, VENV]) as ns:
        stage_server(ns.root)
        yield Node(ns)


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in report["services"]}


def eventually(check: Callable[[], bool], what: str, bound: float = 30) -> None:
    """Poll ``check`` until it holds (bounded; no timing is asserted)."""
    deadline = time.monotonic() + bound
    while not check():
        assert time.monotonic() < deadline, f"{what} did not happen within {bound}s"
        time.sleep(0.02)


class TestApplyThroughSystemd:
    def test_apply_starts_the_role(self, node: Node) -> None:
        """apply writes every unit, command-less ones too, and reports each start as it took."""
        report = node.apply()
        assert report["ok"] is True
        services = by_name(report)
        # k3s Requires=k3s-cluster.service: the alias of the command-less k3s-cluster-init
        assert (node.ns.root / "etc/systemd/system/k3s-cluster-init.service").is_file()
        assert services["k3s"]["status"] == "started"
        assert services["konnectivity-server"]["status"] == "started"
        code, status = node.status("--wait", "--timeout", "60")
        assert code == 0, status
        assert node.active("k3s.service") == "active"
        assert node.active("konnectivity-server.service") == "active"

    def test_k3s_runs_as_its_install_script_runs_it(self, node: Node) -> None:
        """k3s's unit is stopped, delegated and limited as k3s's install script has it: the
        process alone, its control group's subtree handed over, no task limit, and 1,048,576
        open files, or the closest systemd may give (it lowers a limit it may not raise, as
        here, where the machine's hard limit is lower and noderole lacks CAP_SYS_RESOURCE)."""
        node.apply()
        shown = node.ns.show("k3s.service", "KillMode", "Delegate", "TasksMax", "LimitNOFILE")
        assert shown == {
            "KillMode": "process",
            "Delegate": "yes",
            "TasksMax": "infinity",
            "LimitNOFILE": "1048576",
        }
        pid = node.main_pid("k3s.service")
        limits = node.ns.run("cat", f"/proc/{pid}/limits").stdout
        line = next(line for line in limits.splitlines() if line.startswith("Max open files"))
        soft, hard = (int(word) for word in line.split()[3:5])
        may_raise = capable(CAP_SYS_RESOURCE)
        ceiling = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        assert soft == hard == (1048576 if may_raise else min(1048576, ceiling))

    def test_k3s_gets_the_proxy_of_etc_default_k3s(self, node: Node) -> None:
        """/etc/default/k3s's lines reach k3s's process, as k3s's own unit passes them
        (EnvironmentFile=): the unit runs `noderole exec`, which computes the environment at
        boot; the password of a proxy is in the process's environment, not in the unit."""
        (node.ns.root / "etc/default").mkdir(parents=True, exist_ok=True)
        (node.ns.root / "etc/default/k3s").write_text(
            "HTTPS_PROXY=http://me:hunter2@proxy:3128\nNO_PROXY=.svc,.cluster.local\n"
        )
        node.apply()
        pid = node.main_pid("k3s.service")
        environ = node.ns.run("cat", f"/proc/{pid}/environ").stdout.split("\0")
        assert "HTTPS_PROXY=http://me:hunter2@proxy:3128" in environ
        assert "NO_PROXY=.svc,.cluster.local" in environ
        assert "hunter2" not in (node.ns.root / "etc/systemd/system/k3s.service").read_text()

    def test_a_program_that_cannot_run_fails_its_start(self, node: Node) -> None:
        """The unit runs `noderole exec`, which cannot exec a script whose #! interpreter is
        missing: apply waits for the exec and fails the start with the wrapper's words, as the
        native supervisor would (before: "started", then the unit crash-looped unseen)."""
        program = node.ns.root / "usr/local/bin/konnectivity-server"
        program.write_text("#!/nonexistent/python3\nprint('serving')\n")
        program.chmod(0o755)
        done = node.noderole("apply", "server", "--backend", "systemd", "--json")
        services = by_name(json.loads(done.stdout))
        assert done.returncode == 1, (services["konnectivity-server"], done.stderr)
        assert services["k3s"]["status"] == "started"
        konnectivity = services["konnectivity-server"]
        assert konnectivity["status"] == "failed"
        assert konnectivity["reason"].startswith(
            "exited at start: cannot exec /usr/local/bin/konnectivity-server for "
            "konnectivity-server: its interpreter /nonexistent/python3 (its #! line) does not "
            "exist: install it, or correct the #! line (systemd restarts it "
        )
        # Not remembered as started: the next apply tries again, and starts it once it can run.
        program.write_text("#!/bin/sh\nexec sleep 600\n")
        done = node.noderole("apply", "server", "--backend", "systemd", "--json")
        konnectivity = by_name(json.loads(done.stdout))["konnectivity-server"]
        assert konnectivity["status"] in ("started", "restarted"), konnectivity

    def test_status_says_ready_with_pid_and_uptime(self, node: Node) -> None:
        """status maps a passing readiness check to ready and shows pid and uptime."""
        node.apply()
        code, status = node.status("--wait", "--timeout", "60")
        assert code == 0
        konnectivity = status["konnectivity-server"]
        assert konnectivity["state"] == "ready"
        assert konnectivity["pid"] == node.main_pid("konnectivity-server.service")
        assert konnectivity["uptime"] is not None
        assert konnectivity["uptime"] >= 0

    def test_restart_after_kill_counts(self, node: Node) -> None:
        """Restart= brings a SIGKILLed main process back, and status counts the restart."""
        node.apply()
        assert node.status("--wait", "--timeout", "60")[0] == 0
        before = node.main_pid("k3s.service")  # a pid inside the container's pid namespace
        node.ns.run("kill", "-s", "KILL", str(before))
        eventually(
            lambda: (
                node.active("k3s.service") == "active"
                and node.main_pid("k3s.service") not in (0, before)
            ),
            "k3s restarted",
        )
        code, status = node.status("--wait", "--timeout", "60")
        assert code == 0, status
        assert status["k3s"]["restarts"] == 1
        assert status["k3s"]["pid"] == node.main_pid("k3s.service")

    def test_a_service_waiting_to_restart_is_in_backoff(self, node: Node) -> None:
        """While systemd waits RestartSec to restart a killed k3s (auto-restart), status says
        `backoff`, as the native supervisor does between respawns, not `crashed` (which an apply
        takes for a service that gave up, and fails what waits after it). Before: `crashed`."""
        config = node.ns.root / "etc/noderole/config.toml"
        config.write_text(config.read_text() + "\n[k3s]\nrespawn_delay = 120\n")
        node.apply()
        assert node.status("--wait", "--timeout", "60")[0] == 0
        node.ns.run("kill", "-s", "KILL", str(node.main_pid("k3s.service")))
        eventually(
            lambda: node.ns.show("k3s.service", "SubState")["SubState"] == "auto-restart",
            "k3s waiting to restart",
        )
        code, status = node.status()
        assert status["k3s"]["state"] == "backoff", status["k3s"]
        assert status["k3s"]["next_attempt"] == "systemd restarts it 2min after it ended (signal)"
        assert code != 0

    def test_reapply_is_idempotent(self, node: Node) -> None:
        """A second apply with nothing changed restarts nothing."""
        node.apply()
        assert node.status("--wait", "--timeout", "60")[0] == 0
        pids = {u: node.main_pid(f"{u}.service") for u in ("k3s", "konnectivity-server")}
        again = by_name(node.apply())
        assert again["k3s"]["status"] == "running"
        assert again["konnectivity-server"]["status"] == "running"
        assert {u: node.main_pid(f"{u}.service") for u in pids} == pids

    def test_reminted_certificate_restarts_konnectivity(self, node: Node) -> None:
        """A certificate minted again (its file removed) restarts konnectivity-server only."""
        node.apply()
        assert node.status("--wait", "--timeout", "60")[0] == 0
        k3s = node.main_pid("k3s.service")
        konnectivity = node.main_pid("konnectivity-server.service")
        (node.ns.root / KONNECTIVITY_CERT.lstrip("/")).unlink()
        again = by_name(node.apply())
        assert again["konnectivity-server"]["status"] == "restarted"
        assert "re-minted" in again["konnectivity-server"]["reason"]
        assert again["k3s"]["status"] == "running"
        eventually(
            lambda: node.main_pid("konnectivity-server.service") not in (0, konnectivity),
            "konnectivity-server restarted",
        )
        assert node.main_pid("k3s.service") == k3s

    def test_changed_definition_restarts(self, node: Node) -> None:
        """A changed setting (the health port) changes the definition and restarts the service."""
        node.apply()
        assert node.status("--wait", "--timeout", "60")[0] == 0
        before = node.main_pid("konnectivity-server.service")
        config = node.ns.root / "etc/noderole/config.toml"
        text = config.read_text()
        port = int(text.split("health_port = ")[1].split()[0])
        config.write_text(text.replace(f"health_port = {port}", f"health_port = {port + 1}"))
        again = by_name(node.apply())
        assert again["konnectivity-server"]["status"] == "restarted"
        eventually(
            lambda: node.main_pid("konnectivity-server.service") not in (0, before),
            "konnectivity-server restarted",
        )

    def test_stop(self, node: Node) -> None:
        """stop --backend systemd stops every service of the role."""
        node.apply()
        assert node.status("--wait", "--timeout", "60")[0] == 0
        done = node.noderole("stop", "server", "--backend", "systemd")
        assert done.returncode == 0, done.stderr
        assert node.active("k3s.service") == "inactive"
        assert node.active("konnectivity-server.service") == "inactive", node.ns.show(
            "konnectivity-server.service", "Result", "ExecMainStatus", "ExecMainCode", "SubState"
        )
        code, _ = node.status()
        assert code == 1


MANY = 24
"""Services started at once by TestManyServices: enough threads to overlap their starts."""

MANY_PLUGIN = f"""\
import noderole


@noderole.hookimpl
def noderole_services(node):
    return [
        noderole.Service(name=f"many{{i}}", roles=["many"], command=["/bin/sleep", "1000"])
        for i in range({MANY})
    ]
"""


def stage_many(root: Path, plugin: str = MANY_PLUGIN) -> str:
    """A plugin (by default: MANY independent services), installed the way a distribution is
    (a dist-info with its entry point) under /opt/many, and a ``noderole`` that sees it: the
    units' hooks run it too. Returns that command's path."""
    base = root / "opt/many"
    (base / "many_plugin").mkdir(parents=True)
    (base / "many_plugin/__init__.py").write_text(plugin)
    info = base / "many_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: many-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[noderole]\nmany = many_plugin\n")
    command = base / "noderole"
    command.write_text(f'#!/bin/sh\nPYTHONPATH=/opt/many exec {NODEROLE} "$@"\n')
    command.chmod(0o755)
    config = root / "etc/noderole/config.toml"
    config.write_text(config.read_text().replace(NODEROLE, "/opt/many/noderole"))
    return "/opt/many/noderole"


class TestManyServices:
    def test_starts_at_once_reload_nothing_and_lose_no_fingerprint(self, node: Node) -> None:
        """24 services started by threads at once: systemd loads each new unit as it starts it,
        so no `daemon-reload` is made (each one reads every unit again: 5 s at 200 units, one
        per start made an apply quadratic); every start's fingerprint is kept, so a re-apply
        restarts nothing. Before: 24 reloads, and entries lost to concurrent writes, whose
        services the re-apply restarted."""
        command = stage_many(node.ns.root)
        # systemd runs every generator again at each daemon-reload: this one counts them.
        counter = node.ns.root / "etc/systemd/system-generators/count-reloads"
        counter.parent.mkdir(parents=True, exist_ok=True)
        counter.write_text("#!/bin/sh\necho reload >> /run/reloads\n")
        counter.chmod(0o755)
        node.ns.systemctl("daemon-reload")  # the counter itself counts: 1
        apply = ("apply", "many", "--backend", "systemd", "--json")
        first = node.ns.run(command, *apply, check=False, timeout=600)
        assert first.returncode == 0, first.stderr + first.stdout
        services = json.loads(first.stdout)["services"]
        assert {s["status"] for s in services} == {"started"}
        # Each took within the bound: none is left queued (its reason says behind what).
        assert [s["reason"] for s in services] == [""] * MANY, services
        assert (node.ns.root / "run/reloads").read_text().count("reload") == 1
        remembered = json.loads(
            (node.ns.root / "var/lib/noderole/init-fingerprints.json").read_text()
        )
        assert sorted(remembered) == sorted(f"many{i}" for i in range(MANY))
        again = node.ns.run(command, *apply, check=False, timeout=600)
        assert again.returncode == 0, again.stderr + again.stdout
        assert {s["status"] for s in json.loads(again.stdout)["services"]} == {"running"}


GIVES_UP_PLUGIN = """\
import noderole


@noderole.hookimpl
def noderole_services(node):
    return [
        noderole.Service(
            name="flaky",
            roles=["many"],
            command=["/bin/sh", "-c", "test -e /run/ok && exec sleep 1000; exit 3"],
            supervision=noderole.Supervision(respawn_delay=0.1, respawn_max=2),
        )
    ]
"""


class TestAfterGivingUp:
    def test_apply_starts_a_unit_that_gave_up_respawning(self, node: Node) -> None:
        """A service that crashed past its respawn limit (StartLimitBurst, over its whole life)
        is started again by the next apply once its cause is fixed, as under the native
        supervisor and OpenRC. Before, systemd refused every later start (the limit's window
        never ends) and apply said "exited at start: exit-code" until someone ran
        `systemctl reset-failed` by hand."""
        command = stage_many(node.ns.root, GIVES_UP_PLUGIN)
        apply = (command, "apply", "many", "--backend", "systemd", "--json")
        first = node.ns.run(*apply, check=False)
        # The shell exits 3 a millisecond after its exec: the apply reports the start failed
        # when the exit came before it looked, or started when it looked first (a fresh-clone
        # CI run did); either way systemd then gives up on it.
        assert first.returncode in (0, 1), first.stdout + first.stderr
        eventually(lambda: node.active("flaky.service") == "failed", "flaky to give up")
        done = node.ns.run(command, "status", "many", "--backend", "systemd", "--json", check=False)
        (gave_up,) = json.loads(done.stdout)["services"]
        # as the native supervisor says it ("gave up after 2 respawns"); systemd counts the
        # restarts it made, and its limit counts starts, the first one too
        assert (gave_up["state"], gave_up["reason"]) == (
            "crashed",
            "gave up after 3 restarts (exit-code)",
        )
        (node.ns.root / "run/ok").write_text("")  # the cause fixed
        again = node.ns.run(*apply, check=False)
        assert again.returncode == 0, again.stdout + again.stderr
        (flaky,) = json.loads(again.stdout)["services"]
        assert flaky["status"] == "started", flaky
        assert node.active("flaky.service") == "active"

    @pytest.mark.parametrize("command", ["stop", "reset"])
    def test_stop_and_reset_leave_no_failed_unit(self, node: Node, command: str) -> None:
        """`stop` or `reset` of a role with a unit systemd gave up on leaves nothing failed:
        `stop` makes it stopped, as the native supervisor's does, and `reset`, which removes
        the unit, leaves systemd no ghost of it. Before, the unit stayed `failed` (after
        `reset`: `not-found failed`), and `systemctl is-system-running` said `degraded` until
        someone ran `systemctl reset-failed` or the node rebooted."""
        command_path = stage_many(node.ns.root, GIVES_UP_PLUGIN)
        node.ns.run(command_path, "apply", "many", "--backend", "systemd", check=False)
        eventually(lambda: node.active("flaky.service") == "failed", "flaky to give up")
        done = node.ns.run(command_path, command, "many", "--backend", "systemd", check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        failed = node.ns.run("systemctl", "list-units", "--failed", "--no-legend", check=False)
        assert failed.stdout.strip() == "", failed.stdout
        assert node.active("flaky.service") == "inactive"


SCOPES_PLUGIN = """\
import noderole


def service(name, scope):
    script = f"sleep 1000 & echo $! > /run/{name}.child; exec sleep 999"
    return noderole.Service(
        name=name,
        roles=["many"],
        command=["/bin/sh", "-c", script],
        supervision=noderole.Supervision(stop_scope=scope, delegate=scope == "process"),
    )


@noderole.hookimpl
def noderole_services(node):
    return [service("keeps", "process"), service("ends", "group")]
"""


SCOPE_FROM_FILE_PLUGIN = """\
import noderole


@noderole.hookimpl
def noderole_services(node):
    scope = open("/etc/keeps-scope").read().strip()
    return [
        noderole.Service(
            name="keeps",
            roles=["many"],
            command=["/bin/sh", "-c", "sleep 1000 & echo $! > /run/keeps.child; exec sleep 999"],
            supervision=noderole.Supervision(stop_scope=scope),
        )
    ]
"""


class TestStopScope:
    def test_a_process_scope_stop_leaves_what_the_service_started(self, node: Node) -> None:
        """stop_scope="process" (k3s's, as its install script renders it): `noderole stop` and
        a restart end the service's process alone, and what it started runs on in its control
        group (a node's containers through a restart of k3s); the default scope ends the whole
        control group. Before, noderole rendered every unit KillMode=control-group: a stop or
        restart of k3s killed every container of the node."""
        command = stage_many(node.ns.root, SCOPES_PLUGIN)
        first = node.ns.run(command, "apply", "many", "--backend", "systemd", check=False)
        assert first.returncode == 0, first.stdout + first.stderr
        assert node.ns.show("keeps.service", "KillMode", "Delegate") == {
            "KillMode": "process",
            "Delegate": "yes",
        }
        assert node.ns.show("ends.service", "KillMode", "Delegate") == {
            "KillMode": "control-group",
            "Delegate": "no",
        }

        def child(name: str) -> str:
            path = node.ns.root / f"run/{name}.child"
            eventually(path.exists, f"{name}'s child")
            return path.read_text().strip()

        def alive(pid: str) -> bool:
            return node.ns.run("kill", "-0", pid, check=False).returncode == 0

        kept, ended = child("keeps"), child("ends")
        main = node.main_pid("keeps.service")
        stop = node.ns.run(command, "stop", "many", "--backend", "systemd", check=False)
        assert stop.returncode == 0, stop.stdout + stop.stderr
        assert node.active("keeps.service") == node.active("ends.service") == "inactive"
        assert not alive(str(main))
        assert alive(kept)
        assert not alive(ended)
        again = node.ns.run(command, "apply", "many", "--backend", "systemd", check=False)
        assert again.returncode == 0, again.stdout + again.stderr
        assert node.active("keeps.service") == "active"
        assert alive(kept)

    def test_the_restart_that_brings_the_process_scope_already_has_it(self, node: Node) -> None:
        """The first apply of a noderole that renders k3s KillMode=process restarts k3s (its
        definition changed): systemd reads the new unit before that restart's stop, so the
        containers already outlive it."""
        command = stage_many(node.ns.root, SCOPE_FROM_FILE_PLUGIN)
        scope = node.ns.root / "etc/keeps-scope"
        scope.write_text("group\n")
        apply = (command, "apply", "many", "--backend", "systemd", "--json")
        first = node.ns.run(*apply, check=False)
        assert first.returncode == 0, first.stdout + first.stderr
        path = node.ns.root / "run/keeps.child"
        eventually(path.exists, "keeps's child")
        kept = path.read_text().strip()
        scope.write_text("process\n")
        again = node.ns.run(*apply, check=False)
        assert again.returncode == 0, again.stdout + again.stderr
        (keeps,) = json.loads(again.stdout)["services"]
        assert (keeps["status"], keeps["reason"]) == (
            "restarted",
            "restarted: stop_scope: group -> process",
        )
        assert node.ns.run("kill", "-0", kept, check=False).returncode == 0


BEHIND_PLUGIN = """\
import noderole


@noderole.hookimpl
def noderole_services(node):
    return [
        noderole.Service(
            name="late", roles=["many"], after=["blocker"], command=["/bin/sleep", "1000"]
        )
    ]
"""

BLOCKER_UNIT = """\
[Service]
Type=oneshot
ExecStart=/bin/sh -c 'while [ ! -e /run/go ]; do sleep 0.05; done'
"""


PROBE_UNIT = (
    "[Unit]\nAfter=k3s.service\n\n[Service]\nType=oneshot\nExecStart=/bin/sh -c '"
    "if [ -e /etc/rancher/k3s/k3s.yaml ]; then echo up; else echo down; fi > /run/probe'\n"
)
"""A unit ordered after k3s that records whether k3s was up (its kubeconfig written) when
systemd let it start."""


class TestNotify:
    def test_what_is_ordered_after_k3s_starts_once_k3s_is_up(self, node: Node) -> None:
        """k3s's unit is Type=notify, as k3s's install script renders it: systemd counts k3s
        started once k3s sends READY=1 (the stand-in sends it after writing its kubeconfig, as
        k3s does once its apiserver is up), through `noderole exec`, which became k3s. A unit
        ordered after k3s, started with it, starts then. Before: Type=simple, k3s counted
        started at its fork, and the unit ran before k3s had written anything."""
        node.apply()
        eventually(lambda: node.active("k3s.service") == "active", "k3s to be active")
        shown = node.ns.show("k3s.service", "Type", "NotifyAccess", "TimeoutStartUSec")
        assert shown == {"Type": "notify", "NotifyAccess": "main", "TimeoutStartUSec": "infinity"}
        node.ns.systemctl("stop", "konnectivity-server.service", "k3s.service")
        (node.ns.root / "etc/rancher/k3s/k3s.yaml").unlink()
        (node.ns.root / "etc/systemd/system/probe.service").write_text(PROBE_UNIT)
        node.ns.systemctl("daemon-reload")
        node.ns.systemctl("start", "--no-block", "k3s.service", "probe.service")
        probe = node.ns.root / "run/probe"
        eventually(probe.exists, "the unit ordered after k3s to run")
        assert probe.read_text() == "up\n"
        assert node.active("k3s.service") == "active"


class TestQueuedStart:
    def test_status_of_a_start_queued_behind_another_job_names_it(self, node: Node) -> None:
        """A start job systemd holds in its queue (an After= unit still starting) is a start
        under way: `status` says `starting`, with the job ahead of it, read from systemd's own
        job list. Before, it said `stopped`, and an apply that read it past its bound judged
        the service crashed with no word of why."""
        command = stage_many(node.ns.root, BEHIND_PLUGIN)
        apply = node.ns.run(command, "apply", "many", "--backend", "systemd", check=False)
        assert apply.returncode == 0, apply.stderr + apply.stdout
        (node.ns.root / "etc/systemd/system/blocker.service").write_text(BLOCKER_UNIT)
        node.ns.systemctl("stop", "late.service")
        node.ns.systemctl("start", "--no-block", "blocker.service")
        node.ns.systemctl("start", "--no-block", "late.service")

        def status() -> dict[str, Any]:
            done = node.ns.run(
                command, "status", "many", "--backend", "systemd", "--json", check=False
            )
            late: dict[str, Any] = json.loads(done.stdout)["services"][0]
            late["exit"] = done.returncode
            return late

        queued = status()
        assert (queued["state"], queued["reason"], queued["exit"]) == (
            "starting",
            "start job queued, waiting for blocker.service (start, running)",
            ExitCode.STARTING,
        )
        (node.ns.root / "run/go").write_text("")
        eventually(lambda: status()["state"] == "running", "late to start once blocker is done")


PLANTED_PLUGIN = """\
import noderole


@noderole.hookimpl
def noderole_services(node):
    return [
        noderole.Service(
            name="chatty",
            roles=["many"],
            command=["/bin/sh", "-c", "echo OUTPUT OF chatty; exec sleep 1000"],
            user="nobody",
            output_log="/var/log/chatty/out.log",
            error_log="/var/log/chatty/out.log",
        )
    ]
"""


WANDERER_PLUGIN = """\
import noderole


@noderole.hookimpl
def noderole_services(node):
    return [
        noderole.Service(
            name="wanderer",
            roles=["many"],
            command=[
                "/bin/sh", "-c",
                "pwd > /var/lib/wanderer/out; cat ./file >> /var/lib/wanderer/out 2>&1; "
                "exec sleep 1000",
            ],
            user="nobody",
            working_directory="/var/lib/wanderer/work",
        )
    ]
"""


class TestHostileServiceUser:
    def test_a_link_planted_at_the_working_directory_is_not_followed(self, node: Node) -> None:
        """The service's user owns the directory its working directory is in, and makes the
        working directory a link to a directory inside one of root's (0700). Before, the unit
        said WorkingDirectory= with ExecStart=+: systemd changed directory as root, through
        the link, and the service, run as its user after, read root's file there. Now the
        unit names no working directory and noderole exec enters it as the native supervisor
        does: the link is refused, the start fails and says why, nothing is read."""
        command = stage_many(node.ns.root, WANDERER_PLUGIN)
        mine = node.ns.root / "var/lib/wanderer"
        mine.mkdir(parents=True)
        os.chown(mine, 65534, 65534)
        secret = node.ns.root / "root/secret"
        (secret / "inner").mkdir(parents=True)
        secret.chmod(0o700)
        (secret / "inner/file").write_text("root's secret\n")
        os.symlink("/root/secret/inner", mine / "work")
        os.lchown(mine / "work", 65534, 65534)
        done = node.ns.run(
            command, "apply", "many", "--backend", "systemd", "--json", check=False, timeout=600
        )
        out = mine / "out"
        refused = "refusing to follow the symbolic link /var/lib/wanderer/work"
        eventually(
            lambda: refused in node.journal("wanderer.service") or out.exists(),
            "the refusal in the journal, or (before) the service's output",
        )
        assert not out.exists(), out.read_text()
        assert refused in node.journal("wanderer.service")
        assert done.returncode == 1, done.stderr + done.stdout
        wanderer = by_name(json.loads(done.stdout))["wanderer"]
        assert wanderer["status"] == "failed", wanderer

    def test_a_link_planted_at_the_log_is_not_followed(self, node: Node) -> None:
        """The service's user owns its log directory and puts a link to a file of root's where
        the log goes. Before, the unit said StandardOutput=append: and systemd, as root,
        appended the service's output to root's file. Now noderole exec opens the log as the
        native supervisor does: the link is refused, root's file untouched, the output goes
        to the journal, and the service runs as its user."""
        command = stage_many(node.ns.root, PLANTED_PLUGIN)
        logs = node.ns.root / "var/log/chatty"
        logs.mkdir(parents=True)
        os.chown(logs, 65534, 65534)
        target = node.ns.root / "root/precious"
        target.parent.mkdir(exist_ok=True)
        target.write_text("root's own\n")
        os.symlink("/root/precious", logs / "out.log")
        os.lchown(logs / "out.log", 65534, 65534)
        done = node.ns.run(
            command, "apply", "many", "--backend", "systemd", "--json", check=False, timeout=600
        )
        assert done.returncode == 0, done.stderr + done.stdout
        eventually(
            lambda: (
                "OUTPUT OF chatty" in node.journal("chatty.service")
                or target.read_text() != "root's own\n"
            ),
            "the service's output in the journal, or (before) anything in root's file",
        )
        assert target.read_text() == "root's own\n"
        assert "cannot open the log /var/log/chatty/out.log" in node.journal("chatty.service")
        pid = node.main_pid("chatty.service")  # a pid of the container's pid namespace
        owner = node.ns.run("stat", "-c", "%u", f"/proc/{pid}").stdout.strip()
        assert owner == "65534"

    def test_the_log_is_written_with_the_users_rights(self, node: Node) -> None:
        """No link: the log is made in the user's directory, owned by the user, and holds the
        service's output (as StandardOutput=append: did)."""
        command = stage_many(node.ns.root, PLANTED_PLUGIN)
        logs = node.ns.root / "var/log/chatty"
        logs.mkdir(parents=True)
        os.chown(logs, 65534, 65534)
        done = node.ns.run(
            command, "apply", "many", "--backend", "systemd", "--json", check=False, timeout=600
        )
        assert done.returncode == 0, done.stderr + done.stdout
        log = logs / "out.log"
        eventually(lambda: log.exists() and "OUTPUT OF chatty" in log.read_text(), "the log")
        assert log.stat().st_uid == 65534


class TestRemovalReloads:
    def test_reset_unloads_the_units(self, node: Node) -> None:
        """reset removes the units and reloads systemd: k3s.service is no longer loaded."""
        node.apply()
        assert node.show_load("k3s.service") == "loaded"
        done = node.noderole("reset", "--backend", "systemd")
        assert done.returncode == 0, done.stderr + done.stdout
        assert not (node.ns.root / "etc/systemd/system/k3s.service").exists()
        assert node.show_load("k3s.service") == "not-found"
        assert node.show_load("konnectivity-server.service") == "not-found"

    def test_disable_unloads_the_boot_entry(self, node: Node) -> None:
        """disable removes noderole.service and the renew timer and reloads systemd."""
        enabled = node.noderole("enable", "server")
        assert enabled.returncode == 0, enabled.stderr + enabled.stdout
        node.ns.systemctl("daemon-reload")
        assert node.show_load("noderole-renew.timer") == "loaded"
        done = node.noderole("disable")
        assert done.returncode == 0, done.stderr + done.stdout
        assert node.show_load("noderole.service") == "not-found"
        assert node.show_load("noderole-renew.timer") == "not-found"


ROLES_PLUGIN = """\
import noderole


@noderole.hookimpl
def noderole_services(node):
    return [
        noderole.Service(name="gate-one", roles=["one"], provide=["gate"]),
        noderole.Service(name="gate-two", roles=["two"], provide=["gate"]),
        noderole.Service(name="old", roles=["one"], command=["/bin/sleep", "1001"]),
        noderole.Service(
            name="worker", roles=["one", "two"], need=["gate"], command=["/bin/sleep", "1002"]
        ),
        noderole.Service(name="new", roles=["two"], command=["/bin/sleep", "1003"]),
    ]
"""
"""Two roles, as k3s's server and server-join: each has a milestone of its own that provides
``gate``, which ``worker`` (in both) needs; ``old`` is only in the first, ``new`` only in the
second."""


class TestRoleChange:
    def test_a_role_change_removes_the_units_of_what_left_the_plan(self, node: Node) -> None:
        """`apply two` after `apply one` stops what role two lacks and removes its units and
        their `.wants` links, the milestone's too, and reloads systemd: the next boot starts
        role two alone. Before, the units stayed enabled, and a boot started `old` beside
        `new`, and both roles' milestones (k3s-cluster-init and k3s-cluster-join)."""
        command = stage_many(node.ns.root, ROLES_PLUGIN)
        units = node.ns.root / "etc/systemd/system"
        first = node.ns.run(command, "apply", "one", "--backend", "systemd", check=False)
        assert first.returncode == 0, first.stdout + first.stderr
        assert (units / "multi-user.target.wants/old.service").is_symlink()
        assert (units / "gate-one.service").is_file()
        assert node.active("gate-one.service") == "active"
        second = node.ns.run(command, "apply", "two", "--backend", "systemd", check=False)
        assert second.returncode == 0, second.stdout + second.stderr
        assert "stopped old" in second.stderr
        for gone in ("old", "gate-one"):
            assert not (units / f"{gone}.service").exists(), gone
            assert not (units / f"multi-user.target.wants/{gone}.service").is_symlink(), gone
            assert node.active(f"{gone}.service") == "inactive", gone
            assert node.show_load(f"{gone}.service") == "not-found", gone
        # The alias now names the second role's milestone, which runs for worker.
        assert os.readlink(units / "gate.service") == "gate-two.service"
        wants = sorted(p.name for p in (units / "multi-user.target.wants").iterdir())
        assert wants == ["gate-two.service", "new.service", "worker.service"]
        assert node.active("worker.service") == "active"
        assert node.active("new.service") == "active"
        assert node.active("gate-two.service") == "active"
        listed = node.ns.run("systemctl", "list-units", "--all", "--no-legend", check=False)
        assert "old.service" not in listed.stdout, listed.stdout
        assert "gate-one.service" not in listed.stdout, listed.stdout


class TestResetThenApply:
    def test_apply_after_reset_starts_what_needs_a_milestone(self, node: Node) -> None:
        """`reset` stops the milestone units too before it removes them, so systemd holds no
        `not-found active` ghost of one, and the next `apply` starts what needs it. Before,
        every later `apply server` failed k3s ("Unit k3s-cluster-init.service failed to load
        properly") until someone ran `systemctl daemon-reload`."""
        command = stage_many(node.ns.root, ROLES_PLUGIN)
        apply = (command, "apply", "one", "--backend", "systemd", "--json")
        first = node.ns.run(*apply, check=False)
        assert first.returncode == 0, first.stdout + first.stderr
        done = node.ns.run(command, "reset", "--backend", "systemd", check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        listed = node.ns.run("systemctl", "list-units", "--all", "--no-legend", check=False)
        assert "gate-one" not in listed.stdout, listed.stdout
        again = node.ns.run(*apply, check=False)
        assert again.returncode == 0, again.stdout + again.stderr
        assert {s["status"] for s in json.loads(again.stdout)["services"]} <= {"started", "done"}
        assert node.active("worker.service") == "active"

    def test_apply_reloads_for_a_milestone_systemd_cannot_load(self, node: Node) -> None:
        """A node already left with a `not-found active` milestone unit (its file removed
        while it was active, as a reset did before) gets a `daemon-reload` from the apply that
        writes the unit back: its LoadState says systemd cannot load it, where the start's
        error says nothing of "not found"."""
        command = stage_many(node.ns.root, ROLES_PLUGIN)
        apply = (command, "apply", "one", "--backend", "systemd", "--json")
        first = node.ns.run(*apply, check=False)
        assert first.returncode == 0, first.stdout + first.stderr
        stop = node.ns.run(command, "stop", "worker", "--backend", "systemd", check=False)
        assert stop.returncode == 0, stop.stdout + stop.stderr
        (node.ns.root / "etc/systemd/system/gate-one.service").unlink()
        node.ns.systemctl("daemon-reload")
        assert node.show_load("gate-one.service") == "not-found"
        assert node.active("gate-one.service") == "active"
        again = node.ns.run(*apply, check=False)
        assert again.returncode == 0, again.stdout + again.stderr
        assert node.active("worker.service") == "active"
        assert node.show_load("gate-one.service") == "loaded"


NEEDS_PLUGIN = """\
import noderole


@noderole.hookimpl
def noderole_services(node):
    return [
        noderole.Service(name="hdep", roles=["many"], command=["/bin/sleep", "1011"]),
        noderole.Service(
            name="huser", roles=["many"], need=["hdep"], command=["/bin/sleep", "1012"]
        ),
        noderole.Service(
            name="later", roles=["many"], after=["hdep"], command=["/bin/sleep", "1013"]
        ),
    ]
"""
"""``huser`` needs ``hdep`` (``Requires=hdep.service``); ``later`` only starts after it."""


class TestStopWhatNeedsIt:
    def test_stop_and_restart_of_what_huser_needs_say_and_restart_huser(self, node: Node) -> None:
        """`stop hdep`: systemd stops what `Requires=` it, and noderole now stops huser first
        itself and says so, as under the native supervisor and OpenRC (systemd then finds it
        stopped: nothing is stopped twice); `later` runs on. `restart hdep` starts huser
        again after hdep. Before, systemd stopped huser without a word from noderole, and a
        restart left it stopped."""
        command = stage_many(node.ns.root, NEEDS_PLUGIN)
        apply = (command, "apply", "many", "--backend", "systemd")
        first = node.ns.run(*apply, check=False)
        assert first.returncode == 0, first.stdout + first.stderr
        later = node.main_pid("later.service")
        stop = node.ns.run(command, "stop", "hdep", "--backend", "systemd", check=False)
        assert stop.returncode == 0, stop.stdout + stop.stderr
        assert stop.stdout.splitlines() == [
            " * Stopping huser (it needs hdep)",
            " * Stopped huser",
            " * Stopped hdep",
        ]
        assert node.active("huser.service") == "inactive"
        assert node.active("hdep.service") == "inactive"
        assert node.main_pid("later.service") == later
        again = node.ns.run(*apply, check=False)
        assert again.returncode == 0, again.stdout + again.stderr
        huser = node.main_pid("huser.service")
        restart = node.ns.run(command, "restart", "hdep", "--backend", "systemd", check=False)
        assert restart.returncode == 0, restart.stdout + restart.stderr
        assert restart.stdout.splitlines()[0] == " * Stopping huser (it needs hdep)"
        assert node.active("huser.service") == "active"
        assert node.main_pid("huser.service") not in (0, huser)
        assert node.main_pid("later.service") == later


class TestRenewTimer:
    def test_the_timer_runs_renew(self, node: Node) -> None:
        """With renew_interval = 1, enable's noderole-renew.timer elapses under systemd and its
        service runs `noderole renew` to a successful end (ExecMainStatus 0), again and again."""
        config = node.ns.root / "etc/noderole/config.toml"
        config.write_text(
            config.read_text().replace(
                "[noderole]\n", "[noderole]\nrenew_interval = 1\nrenew_jitter = 0\n", 1
            )
        )
        node.apply()
        assert node.status("--wait", "--timeout", "60")[0] == 0
        enabled = node.noderole("enable", "server")
        assert enabled.returncode == 0, enabled.stderr + enabled.stdout
        node.ns.systemctl("daemon-reload")
        node.ns.systemctl("start", "noderole-renew.timer")  # timers.target does at boot

        finished: set[str] = set()

        def runs() -> int:
            found = node.ns.show(
                "noderole-renew.service", "ExecMainExitTimestampMonotonic", "ExecMainStatus"
            )
            if found["ExecMainExitTimestampMonotonic"] not in ("", "0"):
                assert found["ExecMainStatus"] == "0", node.journal("noderole-renew.service")
                finished.add(found["ExecMainExitTimestampMonotonic"])
            return len(finished)

        eventually(lambda: runs() >= 2, "two runs of noderole-renew.service", bound=20)
        journal = node.journal("noderole-renew.service")
        assert journal.count("role server: 0 of 1 services with certificates renewed") >= 2, journal


OWNER = """
import time
from tests.harness.systemd_ns import SystemdNamespace
ns = SystemdNamespace()
ns.start()
print(ns.pid, ns.cgroup, ns._scratch, flush=True)
time.sleep(600)
"""


class TestHarness:
    def test_close_leaves_nothing(self) -> None:
        """Closing halts systemd and removes its cgroups and scratch directory."""
        problem = systemd_problem()
        if problem:
            pytest.skip(problem)
        with SystemdNamespace() as ns:
            pid, cgroup = ns.pid, ns.cgroup
            assert ns.systemctl("is-system-running").stdout.strip() in ("running", "degraded")
            assert (cgroup / "init.scope").is_dir()  # systemd's own tree lives in our cgroup
        assert not cgroup.exists()
        assert not Path(f"/proc/{pid}").exists()

    def test_close_after_systemd_died(self) -> None:
        """A namespace whose systemd was SIGKILLed is still cleaned up."""
        problem = systemd_problem()
        if problem:
            pytest.skip(problem)
        with SystemdNamespace() as ns:
            cgroup = ns.cgroup
            os.kill(ns.pid, signal.SIGKILL)
        assert not cgroup.exists()

    def test_namespace_dies_with_the_test_process(self) -> None:
        """A test process killed before closing takes its systemd down with it."""
        problem = systemd_problem()
        if problem:
            pytest.skip(problem)
        owner = subprocess.Popen(
            [sys.executable, "-c", OWNER],
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parent.parent,
        )
        cgroup: Path | None = None
        try:
            assert owner.stdout is not None
            pid_text, cgroup_text, scratch = owner.stdout.readline().split()
            cgroup = Path(cgroup_text)
            os.kill(owner.pid, signal.SIGKILL)
            owner.wait()
            eventually(lambda: not Path(f"/proc/{pid_text}").exists(), "systemd halted")
            Path(scratch).rmdir()  # the owner's (empty) mount point
        finally:
            if owner.poll() is None:
                owner.kill()
                owner.wait()
            if owner.stdout is not None:
                owner.stdout.close()
            if cgroup is not None:
                _remove_cgroup(cgroup, 20)
