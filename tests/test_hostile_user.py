"""A service's own user against root: what he plants where root reads, writes, signs or enters.

A real unprivileged user (made with ``useradd`` for the test and removed after, see
:mod:`tests.hostile_fixtures`) owns a directory a service of his uses. Root (the supervisor,
``apply``'s pre-start steps, ``status``) must not be turned by what he plants there: a FIFO in
place of his program, a link in the path of a file or directory a step writes, a key of his own
in the certificate directory, a link at his working directory, escape sequences in the text root
prints, a directory swapped for a link while a pidfile is removed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import noderole
from noderole.cli import cli
from noderole.cli._app import App
from noderole.records import MakeDirectories, MintCertificate, Service, Step, WriteFile
from noderole.root import NodeRoot
from noderole.supervisor import _safeopen
from noderole.supervisor._record import replace
from noderole.testing import PrestartOutcome, make_cluster_ca, run_prestart
from tests.hostile_fixtures import Scene, scene, user
from tests.supervisor_fixtures import MARK, wait_for

__all__ = ["scene", "user"]  # the fixtures, used by name (with mine, below)


@pytest.fixture
def mine(scene: Scene) -> Path:
    """/var/lib/hunt under the node root: a directory of the scene's user, where a plugin's
    steps write for his service."""
    mine = scene.harness.root / "var/lib/hunt"
    mine.mkdir(parents=True)
    os.chown(mine, scene.user.uid, scene.user.gid)
    return mine


def _mint(scene: Scene, directory: str) -> PrestartOutcome:
    """A serving certificate minted into ``directory`` (a node path) from a fresh cluster CA,
    as a plugin's pre-start would."""
    make_cluster_ca(scene.harness.root, cert_path="/ca/ca.crt", key_path="/ca/ca.key")
    step = MintCertificate(
        directory=directory,
        ca_cert="/ca/ca.crt",
        ca_key="/ca/ca.key",
        common_name="hunt-server",
        sans=["hunt.example"],
    )
    return run_prestart(Service(name="hunt", roles=["r"], pre_start=[step]), scene.harness.root)


def _status_of(scene: Scene, name: str = "a") -> tuple[str, str]:
    status = scene.harness.supervisor.status([name])[0]
    return status.state, status.last_exit or status.reason


class TestAProgramTheUserOwns:
    """The service runs a program from the user's directory (a user-installed binary)."""

    def _start(self, scene: Scene) -> tuple[Path, int]:
        program = scene.svc / "app"
        scene.plant(
            "sh", "-c", f"printf '#!/bin/sh\\nexec sleep 1000\\n' > {program}; chmod 755 {program}"
        )
        spec = replace(scene.spec("a", ""), argv=(str(program),))
        status = scene.harness.supervisor.start(spec)
        assert status.state == "running"
        assert status.pid
        return program, status.pid

    def test_a_fifo_in_place_of_the_program_does_not_hang_the_daemon(self, scene: Scene) -> None:
        """The respawn cannot run a FIFO; finding out why must not open it and wait for a
        writer that never comes: the daemon (every service's respawns, stop, status) would
        hang for good."""
        program, pid = self._start(scene)
        scene.plant("sh", "-c", f"rm {program} && mkfifo -m 755 {program}")
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: "FIFO" in _status_of(scene)[1], "the respawn's failure, explained")
        _, why = _status_of(scene)
        assert f"cannot execute {program}" in why
        assert "it is a FIFO, not a program file" in why
        assert scene.daemon_alive()

    def test_escape_sequences_in_its_interpreter_line_reach_no_terminal(self, scene: Scene) -> None:
        """The user's #! line is quoted in the respawn's failure, which `status` and `apply`
        print on root's terminal: its control characters are written out (``\\x1b``), never
        sent raw (an OSC sequence retitles the window, a CSI one clears the screen)."""
        mine = scene.harness.root / "opt/hunt"
        mine.mkdir(parents=True)
        os.chown(mine, scene.user.uid, scene.user.gid)
        program = mine / "app"
        scene.plant(
            "sh", "-c", f"printf '#!/bin/sh\\nexec sleep 1000\\n' > {program}; chmod 755 {program}"
        )
        node = _Node(scene, "/opt/hunt/app")
        started = node.cli("apply", "demo")
        assert started.exit_code == 0, started.output
        pid = scene.harness.supervisor.status(["a"])[0].pid
        assert pid
        scene.plant(
            "sh",
            "-c",
            f"printf '#!/nonexistent/\\033]0;PWNED\\007\\033[2J\\n' > {program}",
        )
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: "interpreter" in _status_of(scene)[1], "the respawn's failure")
        status = node.cli("status")
        assert node.cli("stop").exit_code == 0
        again = node.cli("apply", "demo")  # the first start fails, and says why
        assert again.exit_code == 1, again.output
        for shown in (status, again):
            assert "PWNED" in shown.output, shown.output
            assert "\x1b" not in shown.output, shown.output
            assert "\x07" not in shown.output, shown.output
            assert "\\x1b]0;PWNED\\x07" in shown.output


class TestTheWorkingDirectory:
    def test_a_link_the_user_planted_does_not_take_his_service_where_he_cannot_go(
        self, scene: Scene
    ) -> None:
        """The service's working directory is in its user's directory; he makes it a link to
        a directory inside one of root's (0700), where he cannot go. The supervisor changes
        directory before it takes the user's identity (as systemd would not: it enters the
        directory as the user): his service must not start in there."""
        secret = scene.base / "secret"
        (secret / "inner").mkdir(parents=True)
        secret.chmod(0o700)
        (secret / "inner/file").write_text("root's secret\n")
        assert scene.user.run("cat", str(secret / "inner/file")).returncode != 0
        scene.plant("ln", "-s", str(secret / "inner"), str(scene.svc / "work"))
        out = scene.svc / "out"
        spec = replace(
            scene.spec("a", f"cat ./file > {out} 2>&1; exec sleep 1000"),
            cwd=str(scene.svc / "work"),
        )
        status = scene.harness.supervisor.start(spec)
        assert status.state != "running", status
        assert "refusing to follow the symbolic link" in (status.reason or status.last_exit or "")
        assert not out.exists() or "secret" not in out.read_text()

    def test_his_own_working_directory_is_entered(self, scene: Scene) -> None:
        """The control: a real directory of his is the service's working directory."""
        (scene.svc / "work").mkdir()
        os.chown(scene.svc / "work", scene.user.uid, scene.user.gid)
        out = scene.svc / "out"
        spec = replace(
            scene.spec("a", f"pwd > {out}; exec sleep 1000"), cwd=str(scene.svc / "work")
        )
        assert scene.harness.supervisor.start(spec).state == "running"
        wait_for(lambda: out.exists() and out.read_text().strip(), "the service's pwd")
        assert out.read_text().strip() == str(scene.svc / "work")


_EXEC_PLUGIN = """\
import noderole


@noderole.hookimpl
def noderole_services(node):
    return [
        noderole.Service(
            name="a",
            roles=["demo"],
            command=["/bin/hunt"],
            user="{user}",
            working_directory="/var/lib/hunt/work",
        )
    ]
"""


class TestNoderoleExecEntersTheWorkingDirectory:
    """``noderole exec``, what a rendered unit or runscript runs, enters the service's working
    directory itself: systemd enters ``WorkingDirectory=`` as root under ``ExecStart=+`` and
    supervise-daemon (``directory=``) as root too, each before it takes the user, through a
    link he planted there. The service is the scene's user's, its working directory
    /var/lib/hunt/work in his directory on the node root."""

    def _exec(self, scene: Scene, *, as_user: bool) -> subprocess.CompletedProcess[str]:
        """Run ``noderole exec a`` from ``/`` (where the init system starts it): as root with
        ``--logs-and-user`` (the systemd unit's ``ExecStart=+``), or as the user (OpenRC's
        ``command_user``). The plugin is installed as a distribution is, under the base."""
        plugins = scene.base / "plugins"
        (plugins / "hunt_plugin").mkdir(parents=True)
        code = _EXEC_PLUGIN.format(user=scene.user.name)
        program = scene.harness.root / "bin/hunt"  # the service's program: where it runs, what
        program.parent.mkdir(exist_ok=True)  # it reads there
        out = scene.svc / "out"
        program.write_text(f"#!/bin/sh\npwd > {out}; cat ./file >> {out} 2>&1\n")
        program.chmod(0o755)
        (plugins / "hunt_plugin/__init__.py").write_text(code)
        info = plugins / "hunt_plugin-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hunt-plugin\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text("[noderole]\nhunt = hunt_plugin\n")
        argv = [sys.executable, "-m", "noderole", "--root", str(scene.harness.root), "exec"]
        if as_user:
            argv = ["setpriv", f"--reuid={scene.user.uid}", f"--regid={scene.user.gid}",
                    "--clear-groups", *argv, "a"]  # fmt: skip
        else:
            argv += ["--logs-and-user", "a"]
        environment = {"PATH": os.environ["PATH"], "PYTHONPATH": str(plugins)}
        return subprocess.run(
            argv, cwd="/", env=environment, capture_output=True, text=True, timeout=120
        )

    def _plant_link(self, scene: Scene, mine: Path) -> None:
        secret = scene.base / "secret"
        (secret / "inner").mkdir(parents=True)
        secret.chmod(0o700)
        (secret / "inner/file").write_text("root's secret\n")
        assert scene.user.run("cat", str(secret / "inner/file")).returncode != 0
        scene.plant("ln", "-s", str(secret / "inner"), str(mine / "work"))

    @pytest.mark.parametrize("as_user", [False, True], ids=["systemd-as-root", "openrc-as-user"])
    def test_a_link_the_user_planted_does_not_take_his_service_where_he_cannot_go(
        self, scene: Scene, mine: Path, as_user: bool
    ) -> None:
        """He makes his service's working directory a link to a directory inside one of
        root's (0700). As root (systemd), noderole exec refuses the link, as the native
        supervisor does; as the user (OpenRC), the walk has his rights and cannot go in. The
        service never runs: nothing of root's directory is read."""
        self._plant_link(scene, mine)
        done = self._exec(scene, as_user=as_user)
        assert done.returncode != 0, done.stdout + done.stderr
        where = f"working directory {scene.harness.root}/var/lib/hunt/work"
        assert where in done.stderr
        if as_user:
            assert "Permission denied" in done.stderr
        else:
            assert "refusing to follow the symbolic link" in done.stderr
        assert not (scene.svc / "out").exists()

    @pytest.mark.parametrize("as_user", [False, True], ids=["systemd-as-root", "openrc-as-user"])
    def test_his_own_working_directory_is_entered(
        self, scene: Scene, mine: Path, as_user: bool
    ) -> None:
        """The control: a real directory of his is where the service runs (neither unit nor
        runscript names it any more)."""
        work = mine / "work"
        work.mkdir()
        os.chown(work, scene.user.uid, scene.user.gid)
        (work / "file").write_text("his own\n")
        done = self._exec(scene, as_user=as_user)
        assert done.returncode == 0, done.stdout + done.stderr
        assert (scene.svc / "out").read_text() == f"{work}\nhis own\n"
        assert (scene.svc / "out").stat().st_uid == scene.user.uid


class _Node:
    """The CLI on the scene's node root, with one service "a" of role "demo" that runs
    ``program`` (a node path) as the scene's user."""

    def __init__(self, scene: Scene, program: str) -> None:
        self.scene = scene
        self.program = program

    @noderole.hookimpl
    def noderole_services(self, node: noderole.NodeContext) -> noderole.Service:
        return noderole.Service(
            name="a",
            roles=["demo"],
            command=[self.program],
            user=self.scene.user.name,
            environment={MARK: self.scene.harness.mark},
            supervision=noderole.Supervision(respawn_delay=0.05, stop_timeout=2),
        )

    def cli(self, *args: str) -> Result:
        app = App(
            root=NodeRoot(self.scene.harness.root),
            plugin_objects=(("hostile", self),),
            autoload=False,
        )
        return CliRunner().invoke(cli, list(args), obj=app, catch_exceptions=False)


class TestTheCertificateDirectory:
    """A plugin mints its service's serving certificate into a directory under the service's
    own (a layout a service user can write)."""

    def test_a_key_the_user_planted_is_never_signed(self, scene: Scene, mine: Path) -> None:
        """The user puts a key of his own (P-256, 0600) and a certificate for it in the
        directory: a re-mint that kept "the existing key" would have root sign, with the
        cluster CA, a serving certificate whose key the user holds. A key root did not write
        is never kept: a new one is made, root's."""
        tls = mine / "tls"
        scene.plant(
            "sh",
            "-c",
            f"umask 077; mkdir {tls} && cd {tls} && "
            "openssl ecparam -name prime256v1 -genkey -noout -out tls.key && "
            "openssl req -x509 -new -key tls.key -subj /CN=x -days 1 -out tls.crt",
        )
        planted = _public_key(tls / "tls.key")
        outcome = _mint(scene, "/var/lib/hunt/tls")
        assert outcome.error is None, outcome.error
        assert "belongs to uid" in outcome.certificates[0].reason
        assert _public_key(tls / "tls.key") != planted
        assert (tls / "tls.key").stat().st_uid == 0
        signed = subprocess.run(
            ["openssl", "x509", "-in", str(tls / "tls.crt"), "-noout", "-pubkey"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert signed != planted

    def test_no_pair_is_written_through_a_linked_directory_on_the_way(
        self, scene: Scene, mine: Path
    ) -> None:
        """The certificate directory's parent, in the user's directory, turned into a link to
        a directory of root's: the key and certificate are not written there."""
        (scene.base / "rootdir").mkdir(mode=0o700)
        scene.plant("ln", "-s", str(scene.base / "rootdir"), str(mine / "certs"))
        outcome = _mint(scene, "/var/lib/hunt/certs/tls")
        assert outcome.error is not None
        assert "refusing to follow the symbolic link" in str(outcome.error)
        assert list((scene.base / "rootdir").iterdir()) == []


def _public_key(key: Path) -> str:
    return subprocess.run(
        ["openssl", "ec", "-in", str(key), "-pubout"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


class TestStepsWriteInTheUsersDirectory:
    """A plugin's `WriteFile` and `MakeDirectories` steps write under the service's own
    directory; its user turns a directory on the way into a link to one of root's."""

    def _run(self, scene: Scene, step: Step) -> str:
        outcome = run_prestart(
            Service(name="hunt", roles=["r"], pre_start=[step]), scene.harness.root
        )
        assert outcome.error is not None, "the step wrote through the user's link"
        return str(outcome.error)

    def test_a_file_is_not_written_through_a_linked_directory(
        self, scene: Scene, mine: Path
    ) -> None:
        (scene.base / "rootdir").mkdir(mode=0o700)
        scene.victim("rootdir/app.conf", mode=0o600)
        scene.plant("ln", "-s", str(scene.base / "rootdir"), str(mine / "conf"))
        why = self._run(scene, WriteFile(path="/var/lib/hunt/conf/app.conf", content="x=1\n"))
        assert "refusing to follow the symbolic link" in why
        assert scene.intact()
        assert (scene.base / "rootdir/app.conf").stat().st_mode & 0o777 == 0o600

    def test_a_directory_is_not_made_through_a_linked_directory(
        self, scene: Scene, mine: Path
    ) -> None:
        (scene.base / "rootdir").mkdir(mode=0o700)
        scene.plant("ln", "-s", str(scene.base / "rootdir"), str(mine / "data"))
        why = self._run(scene, MakeDirectories(paths=["/var/lib/hunt/data/cache"]))
        assert "refusing to follow the symbolic link" in why
        assert list((scene.base / "rootdir").iterdir()) == []

    def test_the_users_real_directories_are_written(self, scene: Scene, mine: Path) -> None:
        """The control: without a link, both steps do their work (as root, in his directory)."""
        steps = [
            MakeDirectories(paths=["/var/lib/hunt/data/cache"], mode=0o750),
            WriteFile(path="/var/lib/hunt/conf/app.conf", content="x=1\n"),
        ]
        outcome = run_prestart(
            Service(name="hunt", roles=["r"], pre_start=steps), scene.harness.root
        )
        assert outcome.error is None, outcome.error
        assert (mine / "data/cache").stat().st_mode & 0o777 == 0o750
        assert (mine / "conf/app.conf").read_text() == "x=1\n"


class TestThePidfileRemoved:
    def test_a_directory_swapped_after_the_check_does_not_redirect_the_removal(
        self, scene: Scene, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The pidfile's directory is the user's; he swaps it for a link to a directory of
        root's between the check that the pidfile still names the service's pid and its
        removal (a race he can win in a loop). The removal must take place where the check did:
        root's file of the same name stays. The swap is made here at that very moment."""
        from noderole.supervisor import _pidfile

        mine = scene.svc / "run"
        mine.mkdir()
        os.chown(mine, scene.user.uid, scene.user.gid)
        (mine / "app.pid").write_text("4242\n")
        rootdir = scene.base / "rootdir"
        rootdir.mkdir(mode=0o700)
        victim = scene.victim("rootdir/app.pid")
        opened = _safeopen.open_dir

        def open_then_swap(path: str, **kwargs: Any) -> int:
            fd = opened(path, **kwargs)
            if path == str(mine):
                os.rename(mine, scene.svc / "run.old")  # as the user would, in his directory
                os.symlink(rootdir, mine)
            return fd

        monkeypatch.setattr(_safeopen, "open_dir", open_then_swap)
        _pidfile.remove(str(mine / "app.pid"), 4242)
        assert victim.exists()
        assert scene.intact()
        assert not (scene.svc / "run.old/app.pid").exists()
