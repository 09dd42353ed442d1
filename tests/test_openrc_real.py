"""Rendered runscripts under Debian's real OpenRC: dependency, hook, supervision, respawn, stop.

Everything runs in a private mount + pid namespace (tests/harness/openrc_ns.py): the host's
/etc, /lib, /sbin and /run are untouched, and every process dies with the namespace.
``noderole`` itself is played by a small script that records each call (``hook``) and, for
``exec``, runs the test's child program, which records its argv and environment and then
becomes ``sleep``.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shlex
import textwrap
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from noderole.records import Secret, Service, Supervision
from noderole.render import render_openrc, write_rendered
from noderole.root import NodeRoot
from tests.harness.capabilities import CAP_SYS_RESOURCE, capable
from tests.harness.openrc import openrc, unshare_problem
from tests.harness.openrc_ns import OpenRCNamespace

from .test_render_openrc import TRICKY

pytestmark = [pytest.mark.openrc, pytest.mark.slow]

SECRET = "s3cr3t 'quoted' $HOME"
# Every bounded wait below polls the namespace this many times, 50 ms apart (10 s at most).
POLLS = 200


@attrs.frozen
class Scenario:
    ns: OpenRCNamespace
    calls: Path
    out: Path


def _script(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).lstrip())
    path.chmod(0o755)
    return path


def _openrc_root() -> Path:
    """Where Debian's OpenRC is unpacked; the test is skipped on a machine that cannot run it."""
    problem = unshare_problem()
    if problem:
        pytest.skip(f"needs a private mount namespace: {problem}")
    try:
        return openrc().root
    except RuntimeError as error:
        pytest.skip(str(error))


@contextlib.contextmanager
def _namespace(root: NodeRoot) -> Iterator[OpenRCNamespace]:
    """A fresh OpenRC namespace over ``root``; afterwards, every process of it is gone."""
    ns = OpenRCNamespace(_openrc_root(), root.path)
    ns.start()
    pid_ns = ns.sh("readlink /proc/self/ns/pid").stdout.strip()
    try:
        yield ns
    finally:
        ns.close()
        # The kernel ends every process of a pid namespace with its init; check, by namespace.
        left = [p for p in _host_pids() if _pid_ns(p) == pid_ns]
        assert not left, f"processes outlived the OpenRC namespace: {left}"


@pytest.fixture
def scenario(tmp_path: Path) -> Iterator[Scenario]:
    """Three rendered services in a fresh OpenRC namespace; the namespace is gone afterwards."""
    _openrc_root()
    out = tmp_path / "out"
    out.mkdir()
    calls = tmp_path / "calls"
    child = _script(
        tmp_path / "child",
        f"""
        #!/bin/sh
        # Records what it was started with, then becomes a long sleep (same pid).
        printf '%s\\0' "$@" > {out}/$$.argv
        env -0 > {out}/$$.env
        [ "$1" = stubborn ] && trap '' TERM
        exec sleep 1000
        """,
    )
    fake = _script(
        tmp_path / "noderole",
        f"""
        #!/bin/sh
        # Stands in for noderole: records every call; `exec NAME` runs the test child.
        echo "$*" >> {calls}
        case "$1" in
            hook) exit 0 ;;
            exec) exec {child} from-exec "$2" ;;
        esac
        exit 2
        """,
    )
    fast = Supervision(respawn_delay=1, respawn_max=0, stop_timeout=1)
    dep = Service(name="nr-dep", command=[str(child)], pidfile="/run/nr-dep.pid", supervision=fast)
    demo = Service(
        name="nr-demo",
        need=["nr-dep"],
        command=[str(child), *TRICKY],
        environment={"PLAIN": "a  b $HOME", "TOKEN": Secret(SECRET)},
        pidfile="/run/nr-demo.pid",
        output_log="/run/nr-demo.log",
        error_log="/run/nr-demo.log",
        supervision=fast,
    )
    stubborn = Service(
        name="nr-stubborn", command=[str(child), "stubborn"], pidfile="/run/s.pid", supervision=fast
    )
    root = NodeRoot(tmp_path / "node")
    # nr-dep in exec mode (`noderole exec`), the others static: both forms run under OpenRC.
    write_rendered(render_openrc([dep], noderole_path=str(fake)), root=root)
    write_rendered(
        render_openrc([demo, stubborn], noderole_path=str(fake), exec_mode=False), root=root
    )
    with _namespace(root) as ns:
        yield Scenario(ns=ns, calls=calls, out=out)


def _host_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _pid_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def wait_in(ns: OpenRCNamespace, condition: str) -> None:
    """Poll a shell condition in the namespace (bounded); fail with the condition if never true."""
    done = ns.sh(
        f"i=0; until {condition}; do i=$((i+1)); [ $i -ge {POLLS} ] && exit 1; sleep 0.05; done"
    )
    assert done.rc == 0, f"never became true: {condition}"


def child_pid(ns: OpenRCNamespace, name: str) -> int:
    return int(ns.sh(f"cat /run/openrc/options/{name}/child_pid").stdout)


def alive(ns: OpenRCNamespace, pid: int) -> bool:
    """True when the pid is a live (non-zombie) process in the namespace."""
    check = f"[ -e /proc/{pid} ] && ! grep -q '^State:.*Z' /proc/{pid}/status"
    return ns.sh(check).rc == 0


def read_nul(path: Path) -> list[str]:
    return path.read_bytes().decode().split("\0")[:-1]


class TestRealOpenRC:
    """A rendered service under openrc-run and supervise-daemon from Debian's packages."""

    def test_start_runs_need_and_hooks_first(self, scenario: Scenario) -> None:
        """Starting nr-demo starts nr-dep first; each start_pre calls `noderole hook`."""
        ns = scenario.ns
        started = ns.sh("openrc-run /etc/init.d/nr-demo start")
        assert started.rc == 0, started.stderr
        assert started.stdout.index("Starting nr-dep") < started.stdout.index("Starting nr-demo")
        assert ns.sh("ls /run/openrc/started").stdout.split() == ["nr-demo", "nr-dep"]
        wait_in(ns, f"grep -q '^exec nr-dep$' {scenario.calls}")
        calls = scenario.calls.read_text().splitlines()
        assert calls.index("hook nr-dep start-pre") < calls.index("hook nr-demo start-pre")
        for name in ("nr-dep", "nr-demo"):
            status = ns.sh(f"openrc-run /etc/init.d/{name} status")
            assert (status.rc, status.stdout.strip()) == (0, "* status: started")

    def test_child_gets_exact_argv_and_environment(self, scenario: Scenario) -> None:
        """The supervised child sees the record's argv and environment, secret included."""
        ns = scenario.ns
        assert ns.sh("openrc-run /etc/init.d/nr-demo start").rc == 0
        demo = child_pid(ns, "nr-demo")
        dep = child_pid(ns, "nr-dep")
        wait_in(ns, f"[ -s {scenario.out}/{demo}.env ] && [ -s {scenario.out}/{dep}.env ]")
        assert read_nul(scenario.out / f"{demo}.argv") == list(TRICKY)
        assert read_nul(scenario.out / f"{dep}.argv") == ["from-exec", "nr-dep"]
        env = dict(item.split("=", 1) for item in read_nul(scenario.out / f"{demo}.env"))
        assert env["TOKEN"] == SECRET
        assert env["PLAIN"] == "a  b $HOME"

    def test_killed_child_is_respawned_then_stop_leaves_nothing(self, scenario: Scenario) -> None:
        """supervise-daemon restarts a killed child (new pid); stop ends supervisor and child."""
        ns = scenario.ns
        assert ns.sh("openrc-run /etc/init.d/nr-demo start").rc == 0
        first = child_pid(ns, "nr-demo")
        supervisor = int(ns.sh("cat /run/nr-demo.pid").stdout)
        assert alive(ns, first)
        assert ns.sh(f"kill -KILL {first}").rc == 0
        wait_in(
            ns,
            f'p=$(cat /run/openrc/options/nr-demo/child_pid) && [ "$p" != {first} ] '
            "&& [ -e /proc/$p ]",
        )
        second = child_pid(ns, "nr-demo")
        assert second != first
        assert alive(ns, second)
        assert not alive(ns, first)
        assert alive(ns, supervisor)

        stopped = ns.sh("openrc-run /etc/init.d/nr-demo stop")
        assert stopped.rc == 0, stopped.stderr
        assert ns.sh("openrc-run /etc/init.d/nr-demo status").rc == 3  # stopped
        assert not alive(ns, second)
        assert not alive(ns, supervisor)
        assert ns.sh("openrc-run /etc/init.d/nr-dep stop").rc == 0
        left = ns.sh("ps -e -o comm= | grep -E '^(sleep|supervise-daem)' || true").stdout
        assert left == ""

    def test_stop_kills_a_child_that_ignores_sigterm(self, scenario: Scenario) -> None:
        """The rendered retry schedule escalates to SIGKILL (OpenRC's default never does)."""
        ns = scenario.ns
        assert ns.sh("openrc-run /etc/init.d/nr-stubborn start").rc == 0
        pid = child_pid(ns, "nr-stubborn")
        wait_in(ns, f"[ -s {scenario.out}/{pid}.env ]")  # the TERM trap is in place
        stopped = ns.sh("openrc-run /etc/init.d/nr-stubborn stop")
        assert stopped.rc == 0, stopped.stderr
        assert not alive(ns, pid)

    def test_failing_hook_fails_the_start(self, scenario: Scenario, tmp_path: Path) -> None:
        """A non-zero `noderole hook` stops the start: no supervisor, service not started."""
        ns = scenario.ns
        fake = tmp_path / "noderole"
        fake.write_text(fake.read_text().replace("hook) exit 0", "hook) exit 4"))
        failed = ns.sh("openrc-run /etc/init.d/nr-dep start")
        assert failed.rc != 0
        assert ns.sh("ls /run/openrc/started").stdout == ""
        assert ns.sh("[ -e /run/nr-dep.pid ]").rc != 0
        assert shlex.split(scenario.calls.read_text()) == ["hook", "nr-dep", "start-pre"]


@contextlib.contextmanager
def one_service(tmp_path: Path, service: Service) -> Iterator[OpenRCNamespace]:
    """``service`` rendered (static) into a fresh OpenRC namespace; gone afterwards."""
    _openrc_root()
    root = NodeRoot(tmp_path / "node")
    rendered = render_openrc([service], noderole_path="/bin/true", exec_mode=False)
    write_rendered(rendered, root=root)
    with _namespace(root) as ns:
        yield ns


class TestStopScope:
    def test_a_process_scope_stop_leaves_what_the_service_started(self, tmp_path: Path) -> None:
        """stop_scope="process" (k3s's) holds under OpenRC: supervise-daemon signals the
        service's process alone, and what it started runs on after a stop, as k3s's containers
        must."""
        child = _script(
            tmp_path / "child",
            f"""
            #!/bin/sh
            sleep 1000 &
            echo $! > {tmp_path}/started
            exec sleep 999
            """,
        )
        service = Service(
            name="nr-scope",
            command=[str(child)],
            pidfile="/run/nr-scope.pid",
            supervision=Supervision(respawn_delay=1, stop_timeout=1, stop_scope="process"),
        )
        with one_service(tmp_path, service) as ns:
            assert ns.sh("openrc-run /etc/init.d/nr-scope start").rc == 0
            wait_in(ns, f"[ -s {tmp_path}/started ]")
            main = child_pid(ns, "nr-scope")
            started = int((tmp_path / "started").read_text())
            assert ns.sh("openrc-run /etc/init.d/nr-scope stop").rc == 0
            assert not alive(ns, main)
            assert alive(ns, started)

    def test_a_group_scope_stop_ends_what_the_service_started(self, tmp_path: Path) -> None:
        """stop_scope="group" (the default) under OpenRC: supervise-daemon signals the process
        alone, and the runscript's stop_post ends what it left in its process group, SIGKILL
        after stop_timeout for what ignores the stop signal, as the native supervisor does.
        Before, both grandchildren ran on after the stop, orphans of init."""
        child = _script(
            tmp_path / "child",
            f"""
            #!/bin/sh
            sleep 1000 &
            echo $! >> {tmp_path}/started
            sh -c "trap '' TERM; exec sleep 1001" &
            echo $! >> {tmp_path}/started
            exec sleep 999
            """,
        )
        service = Service(
            name="nr-group",
            command=[str(child)],
            pidfile="/run/nr-group.pid",
            supervision=Supervision(respawn_delay=1, stop_timeout=1),
        )
        with one_service(tmp_path, service) as ns:
            assert ns.sh("openrc-run /etc/init.d/nr-group start").rc == 0
            wait_in(ns, f"[ $(wc -l < {tmp_path}/started) -eq 2 ]")
            main = child_pid(ns, "nr-group")
            started = [int(line) for line in (tmp_path / "started").read_text().split()]
            assert all(alive(ns, pid) for pid in started)
            stopped = ns.sh("openrc-run /etc/init.d/nr-group stop")
            assert stopped.rc == 0, stopped.stderr
            assert not alive(ns, main)
            assert [pid for pid in started if alive(ns, pid)] == []


class TestOpenFiles:
    @pytest.mark.parametrize("asked", [1000, 1048576])
    def test_the_service_starts_with_its_limit_of_open_files(
        self, tmp_path: Path, asked: int
    ) -> None:
        """Supervision(open_files=N) is rc_ulimit="-n N": openrc-run's shell sets it, soft and
        hard, before supervise-daemon starts the service, which inherits it. Above the hard
        limit, on a machine whose root may not raise it (no CAP_SYS_RESOURCE, as in an
        unprivileged container), openrc-run says it could not and the service still starts,
        with the limit it was given (k3s's 1,048,576 there)."""
        out = tmp_path / "limits"
        child = _script(
            tmp_path / "child",
            f"""
            #!/bin/sh
            echo $(ulimit -Sn) $(ulimit -Hn) > {out}.tmp; mv {out}.tmp {out}
            exec sleep 999
            """,
        )
        service = Service(
            name="nr-files",
            command=[str(child)],
            pidfile="/run/nr-files.pid",
            supervision=Supervision(respawn_delay=1, stop_timeout=1, open_files=asked),
        )
        given = resource.getrlimit(resource.RLIMIT_NOFILE)
        raises = asked <= given[1] or capable(CAP_SYS_RESOURCE)
        with one_service(tmp_path, service) as ns:
            started = ns.sh("openrc-run /etc/init.d/nr-files start")
            assert started.rc == 0, started.stderr
            wait_in(ns, f"[ -s {out} ]")
            seen = [int(word) for word in out.read_text().split()]
            assert seen == ([asked, asked] if raises else list(given))
            if not raises:
                assert "nr-files: unable to apply RC_ULIMIT settings" in started.stderr
            assert ns.sh("openrc-run /etc/init.d/nr-files stop").rc == 0
