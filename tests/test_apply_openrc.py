"""`noderole apply --backend openrc` against Debian's real OpenRC, in a private namespace.

The namespace (tests/harness/openrc_ns.py) puts OpenRC at its hard-coded paths with a private
/run, an overlay /etc and, here, a tmpfs over /var/lib and /var/log, so nothing reaches the host.
Inside it, noderole renders the runscripts, and `rc-service` starts them: OpenRC runs
`noderole hook NAME start-pre` and supervise-daemon supervises `noderole exec NAME`.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.openrc import openrc, unshare_problem
from tests.harness.openrc_ns import OpenRCNamespace

PLUGIN = """
import noderole

@noderole.hookimpl
def noderole_services(node):
    return [
        noderole.Service(
            name="base", roles=["demo"], command=["/bin/sleep", "1000"],
            supervision=noderole.Supervision(respawn_delay=1),
            pre_start=[noderole.MakeDirectories(paths=["/run/base-ready"])],
        ),
        noderole.Service(
            name="top", roles=["demo"], need=["base"], command=["/bin/sleep", "2000"],
            supervision=noderole.Supervision(respawn_delay=1),
            pre_start=[noderole.WaitForPaths(paths=["/run/base-ready"], timeout=10)],
        ),
        noderole.Service(
            name="gate-one", roles=["one"], provide=["gate"],
            pre_start=[noderole.MakeDirectories(paths=["/run/gate-one"])],
        ),
        noderole.Service(name="gate-two", roles=["two"], provide=["gate"]),
        noderole.Service(
            name="old", roles=["one"], command=["/bin/sleep", "4001"],
            supervision=noderole.Supervision(respawn_delay=1),
        ),
        noderole.Service(
            name="worker", roles=["one", "two"], need=["gate"], command=["/bin/sleep", "4002"],
            supervision=noderole.Supervision(respawn_delay=1),
        ),
        noderole.Service(
            name="new", roles=["two"], command=["/bin/sleep", "4003"],
            supervision=noderole.Supervision(respawn_delay=1),
        ),
        noderole.Service(
            name="flaky", roles=["flaky"],
            command=["/bin/sh", "-c", "test -e /run/ok && exec sleep 3000; exit 3"],
            supervision=noderole.Supervision(respawn_delay=1, respawn_max=1),
        ),
    ]
"""

RUNNER = """
import sys
sys.path.insert(0, {plugin_dir!r})
import demo_plugin
from noderole.cli import cli
from noderole.cli._app import App
from noderole.root import NodeRoot
cli.main(sys.argv[1:], prog_name="noderole",
         obj=App(root=NodeRoot("/"), plugin_objects=(("demo", demo_plugin),), autoload=False))
"""


EVENTUALLY = "for i in $(seq 300); do {check} && exit 0; sleep 0.05; done; exit 1"
"""Shell loop: succeed as soon as CHECK does (bounded at 15 s; no timing is asserted)."""


@pytest.fixture
def namespace(tmp_path: Path) -> Iterator[OpenRCNamespace]:
    problem = unshare_problem()
    if problem:
        pytest.skip(problem)
    try:
        orc = openrc()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    plugin_dir = tmp_path / "plugin"
    plugin_dir.mkdir()
    (plugin_dir / "demo_plugin.py").write_text(PLUGIN)
    runner = plugin_dir / "run_cli.py"
    runner.write_text(RUNNER.format(plugin_dir=str(plugin_dir)))
    wrapper = plugin_dir / "noderole"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {runner} "$@"\n')
    wrapper.chmod(0o755)
    node_root = tmp_path / "node"
    (node_root / "etc/noderole").mkdir(parents=True)
    (node_root / "etc/noderole/config.toml").write_text(
        textwrap.dedent(
            f"""\
            [noderole]
            net_check = false
            noderole_path = "{wrapper}"
            """
        )
    )
    ns = OpenRCNamespace(orc.root, node_root)
    ns.start()
    try:
        # Keep noderole's state and the logs off the host.
        setup = ns.sh("mount -t tmpfs tmpfs /var/lib && mount -t tmpfs tmpfs /var/log")
        assert setup.rc == 0, setup.stderr
        ns.wrapper = str(wrapper)  # type: ignore[attr-defined]
        yield ns
    finally:
        ns.close()


class TestApplyThroughOpenRC:
    def test_apply_renders_starts_and_is_idempotent(self, namespace: OpenRCNamespace) -> None:
        """apply --backend openrc renders runscripts and starts them through rc-service."""
        noderole = namespace.wrapper  # type: ignore[attr-defined]
        first = namespace.sh(f"{noderole} apply demo --backend openrc --json", timeout=120)
        assert first.rc == 0, first.stderr + first.stdout
        report = {s["name"]: s for s in json.loads(first.stdout)["services"]}
        assert report["base"]["status"] == "started"
        assert report["top"]["status"] == "started"
        assert namespace.sh("test -x /etc/init.d/base && test -x /etc/init.d/top").rc == 0
        assert namespace.sh("rc-service top status").rc == 0
        # supervise-daemon runs `noderole exec top`, which takes a moment to become the command
        running = namespace.sh(EVENTUALLY.format(check="pgrep -x -f '/bin/sleep 2000'"))
        assert running.rc == 0, namespace.sh("ps -eo pid,args").stdout
        assert len(running.stdout.split()) == 1
        second = namespace.sh(f"{noderole} apply demo --backend openrc --json", timeout=120)
        again = {s["name"]: s for s in json.loads(second.stdout)["services"]}
        assert again["top"]["status"] == "running"
        assert namespace.sh("pgrep -x -f '/bin/sleep 2000'").stdout == running.stdout

    def test_stop_goes_through_openrc(self, namespace: OpenRCNamespace) -> None:
        """stop --backend openrc stops every service, leaving no command running."""
        noderole = namespace.wrapper  # type: ignore[attr-defined]
        assert namespace.sh(f"{noderole} apply demo --backend openrc", timeout=120).rc == 0
        stopped = namespace.sh(f"{noderole} stop demo --backend openrc", timeout=120)
        assert stopped.rc == 0, stopped.stderr
        assert namespace.sh("pgrep -x -f '/bin/sleep [12]000'").rc == 1
        assert namespace.sh("rc-service base status").rc != 0

    def test_stop_and_restart_of_what_top_needs_say_and_restart_top(
        self, namespace: OpenRCNamespace
    ) -> None:
        """`stop base`, which top needs: OpenRC's `rc-service base stop` stops top too, and
        noderole now stops it first itself and says so, as under the native supervisor (OpenRC
        then finds it stopped: nothing is stopped twice). `restart base` starts top again after
        base. Before, top was stopped by OpenRC without a word, and a restart left it stopped."""
        noderole = namespace.wrapper  # type: ignore[attr-defined]
        assert namespace.sh(f"{noderole} apply demo --backend openrc", timeout=120).rc == 0
        top = namespace.sh(EVENTUALLY.format(check="pgrep -x -f '/bin/sleep 2000'"))
        assert top.rc == 0, namespace.sh("ps -eo pid,args").stdout
        stopped = namespace.sh(f"{noderole} stop base --backend openrc", timeout=120)
        assert stopped.rc == 0, stopped.stderr
        assert stopped.stdout.splitlines() == [
            " * Stopping top (it needs base)",
            " * Stopped top",
            " * Stopped base",
        ]
        assert namespace.sh("rc-service top status").rc != 0
        assert namespace.sh("pgrep -x -f '/bin/sleep [12]000'").rc == 1
        assert namespace.sh(f"{noderole} apply demo --backend openrc", timeout=120).rc == 0
        before = namespace.sh(EVENTUALLY.format(check="pgrep -x -f '/bin/sleep 2000'"))
        assert before.rc == 0, namespace.sh("ps -eo pid,args").stdout
        restarted = namespace.sh(f"{noderole} restart base --backend openrc", timeout=120)
        assert restarted.rc == 0, restarted.stderr + restarted.stdout
        assert restarted.stdout.splitlines()[0] == " * Stopping top (it needs base)"
        assert namespace.sh("rc-service top status").rc == 0
        after = namespace.sh(EVENTUALLY.format(check="pgrep -x -f '/bin/sleep 2000'"))
        assert after.rc == 0, namespace.sh("ps -eo pid,args").stdout
        assert after.stdout != before.stdout

    def test_apply_starts_a_service_that_gave_up_respawning(
        self, namespace: OpenRCNamespace
    ) -> None:
        """A service supervise-daemon gave up on (crashed past respawn_max) is started again by
        the next apply once its cause is fixed, as under the native supervisor (and, since
        this round, systemd)."""
        noderole = namespace.wrapper  # type: ignore[attr-defined]
        namespace.sh(f"{noderole} apply flaky --backend openrc", timeout=120)
        # supervise-daemon exits once it gives up; OpenRC then calls the service stopped.
        gave_up = namespace.sh(EVENTUALLY.format(check="! rc-service flaky status >/dev/null"))
        assert gave_up.rc == 0, namespace.sh("rc-service flaky status").stdout
        assert namespace.sh("touch /run/ok").rc == 0  # the cause fixed
        again = namespace.sh(f"{noderole} apply flaky --backend openrc --json", timeout=120)
        assert again.rc == 0, again.stderr + again.stdout
        (flaky,) = json.loads(again.stdout)["services"]
        assert flaky["status"] == "started", flaky
        running = namespace.sh(EVENTUALLY.format(check="pgrep -x -f 'sleep 3000'"))
        assert running.rc == 0, namespace.sh("ps -eo pid,args").stdout

    def test_status_says_a_service_openrc_marks_failed_crashed_and_stop_clears_it(
        self, namespace: OpenRCNamespace
    ) -> None:
        """Once supervise-daemon gives up, `rc-service NAME status` says stopped, but OpenRC
        marks the service failed (/run/openrc/failed/NAME): `status` reads that mark and says
        `crashed`, as the native supervisor and systemd do; `stop` clears it (`rc-service NAME
        zap`), so stopped means stopped. Before, `status` said `stopped`, as if someone had
        stopped it."""
        noderole = namespace.wrapper  # type: ignore[attr-defined]
        namespace.sh(f"{noderole} apply flaky --backend openrc", timeout=120)
        gave_up = namespace.sh(EVENTUALLY.format(check="test -e /run/openrc/failed/flaky"))
        assert gave_up.rc == 0, namespace.sh("ls -R /run/openrc").stdout

        def status() -> tuple[int, dict[str, object]]:
            done = namespace.sh(f"{noderole} status flaky --backend openrc --json")
            (row,) = json.loads(done.stdout)["services"]
            return done.rc, row

        code, row = status()
        assert (code, row["state"]) == (1, "crashed"), row
        assert row["reason"] == (
            "OpenRC marks it failed: its supervisor gave up respawning it, or its start failed"
        )
        stopped = namespace.sh(f"{noderole} stop flaky --backend openrc", timeout=120)
        assert stopped.rc == 0, stopped.stderr + stopped.stdout
        assert namespace.sh("test -e /run/openrc/failed/flaky").rc == 1
        assert status()[1]["state"] == "stopped"


class TestMilestonesAndRoleChange:
    """Roles ``one`` and ``two`` are as k3s's server and server-join: each has a milestone of its
    own that provides ``gate``, which ``worker`` (in both) needs; ``old`` is only in ``one``,
    ``new`` only in ``two``."""

    def test_apply_writes_the_milestone_a_service_needs(self, namespace: OpenRCNamespace) -> None:
        """apply writes the runscript of a milestone too, so OpenRC finds the provider of what
        `worker` needs and starts it. Before, only the systemd backend wrote milestones, and on
        a node where `render` never ran OpenRC refused: "Service 'worker' needs non existent
        service 'gate'" (k3s: 'k3s-cluster')."""
        noderole = namespace.wrapper  # type: ignore[attr-defined]
        done = namespace.sh(f"{noderole} apply one --backend openrc --json", timeout=120)
        assert done.rc == 0, done.stderr + done.stdout
        report = {s["name"]: s for s in json.loads(done.stdout)["services"]}
        assert report["worker"]["status"] == "started", report["worker"]
        assert (
            namespace.sh("test -x /etc/init.d/gate-one -a -L /etc/runlevels/default/gate-one").rc
            == 0
        )
        assert namespace.sh("rc-service worker status").rc == 0
        running = namespace.sh(EVENTUALLY.format(check="pgrep -x -f '/bin/sleep 4002'"))
        assert running.rc == 0, namespace.sh("ps -eo pid,args").stdout

    def test_a_role_change_removes_the_runscripts_of_what_left_the_plan(
        self, namespace: OpenRCNamespace
    ) -> None:
        """`apply two` after `apply one` stops what role two lacks and removes its runscripts
        and runlevel links, the milestone's too: the next boot starts role two alone. Before,
        they stayed in /etc/runlevels/default, and a boot started `old` beside `new` (k3s
        server beside k3s agent)."""
        noderole = namespace.wrapper  # type: ignore[attr-defined]
        first = namespace.sh(f"{noderole} apply one --backend openrc", timeout=120)
        assert first.rc == 0, first.stderr + first.stdout
        assert namespace.sh("test -L /etc/runlevels/default/old").rc == 0
        second = namespace.sh(f"{noderole} apply two --backend openrc --json", timeout=120)
        assert second.rc == 0, second.stderr + second.stdout
        assert "stopped old" in second.stderr
        for gone in ("old", "gate-one"):
            assert namespace.sh(f"test -e /etc/init.d/{gone}").rc == 1, gone
            assert namespace.sh(f"test -L /etc/runlevels/default/{gone}").rc == 1, gone
        listed = namespace.sh("ls /etc/runlevels/default")
        assert listed.stdout.split() == ["gate-two", "new", "worker"], listed.stdout
        assert namespace.sh("pgrep -x -f '/bin/sleep 4001'").rc == 1
        assert namespace.sh("rc-service worker status").rc == 0
        assert namespace.sh("rc-service new status").rc == 0

    def test_stop_of_a_provider_stops_what_needs_its_virtual_name(
        self, namespace: OpenRCNamespace
    ) -> None:
        """`stop gate-one`, which provides `gate`, which worker needs: OpenRC stops worker with
        its provider, and noderole stops it first and says why, as under the native
        supervisor. Before, OpenRC stopped worker without a word from noderole."""
        noderole = namespace.wrapper  # type: ignore[attr-defined]
        done = namespace.sh(f"{noderole} apply one --backend openrc", timeout=120)
        assert done.rc == 0, done.stderr + done.stdout
        stopped = namespace.sh(f"{noderole} stop gate-one --backend openrc", timeout=120)
        assert stopped.rc == 0, stopped.stderr
        assert stopped.stdout.splitlines() == [
            " * Stopping worker (it needs gate, which gate-one provides)",
            " * Stopped worker",
        ]
        assert namespace.sh("rc-service worker status").rc != 0
        assert namespace.sh("pgrep -x -f '/bin/sleep 4002'").rc == 1
        assert namespace.sh("rc-service old status").rc == 0  # needs nothing of gate-one's
