"""systemd units rendered from Service records, checked by systemd's own parser.

Two real tools read the units: ``systemd-analyze verify --root`` (syntax, dependencies,
executables) and ``systemd --test`` (systemd's unit loader, run unprivileged, which dumps each
``ExecStart=`` as the argv it parsed). The dump shows the argv before systemd's exec-time
``$``-expansion, so the round trip applies that last documented rule (``$$`` -> ``$``) itself.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from noderole.errors import BackendError
from noderole.records import Fail, Secret, Service, Supervision, WaitForPaths
from noderole.render import (
    RenderedFile,
    RenderedLink,
    render_systemd,
    render_unit,
    write_rendered,
)
from noderole.render._quote import envfile_assignment
from noderole.root import NodeRoot

from .test_render_openrc import TRICKY, konnectivity_service

SYSTEMD = Path("/lib/systemd/systemd")
DIST_UNITS = Path("/lib/systemd/system")
# The distribution units a rendered set reaches: the default target's chain and the targets the
# mapping of built-in names uses.
NEEDED_UNITS = (
    "basic.target",
    "default.target",
    "local-fs.target",
    "multi-user.target",
    "network-online.target",
    "network.target",
    "paths.target",
    "shutdown.target",
    "slices.target",
    "sockets.target",
    "swap.target",
    "sysinit.target",
    "timers.target",
)
NODEROLE = "/usr/local/bin/noderole"

pytestmark = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None or not SYSTEMD.exists(),
    reason="systemd-analyze and /lib/systemd/systemd are needed to check units",
)


UINT64_MAX = 2**64 - 1


def tricky_services() -> list[Service]:
    """A set that uses every mapping: kinds, built-ins, provide, milestone, limits, secrets."""
    return [
        konnectivity_service(),
        Service(
            name="k3s",
            command=["/usr/local/bin/k3s", "server"],
            need=["net", "cgroups"],
            provide=["kube-api"],
            pre_start=[WaitForPaths(paths=["/etc/rancher/k3s/config.yaml"], timeout=120)],
            supervision=Supervision(
                respawn_max=3,
                stop_scope="process",
                delegate=True,
                open_files=1048576,
                tasks="infinity",
            ),
        ),
        Service(
            name="tricky",
            description="Tricky 100% $HOME",
            command=["/usr/bin/tricky", *TRICKY],
            need=["k3s"],
            want=["kube-api", "absent"],
            use=["chrony"],
            before=["late"],
            user="kube",
            group="kube",
            working_directory="/var/lib/tricky",
            output_log="/var/log/tricky.log",
            environment={"PLAIN": 'x y %h $HOME \\ "q"', "TOKEN": Secret("s3cr3t")},
            supervision=Supervision(
                respawn_delay=0.5, respawn_max=2, respawn_period=60, stop_timeout=0, notify=True
            ),
        ),
        Service(name="ready", need=["tricky"]),
    ]


@pytest.fixture
def node_dir() -> Iterator[Path]:
    """A node root world-readable by the unprivileged `systemd --test` (tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="noderole-units-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def install(node: Path, services: list[Service], *, exec_mode: bool) -> list[str]:
    """Render into ``node`` with the distribution units and stand-in executables; unit names."""
    rendered = render_systemd(services, exec_mode=exec_mode)
    write_rendered(rendered, root=NodeRoot(node))
    lib = node / "lib/systemd/system"
    lib.mkdir(parents=True, exist_ok=True)
    for unit in NEEDED_UNITS:
        shutil.copy(DIST_UNITS / unit, lib / unit)
    executables = {NODEROLE} | {s.command[0] for s in services if s.command}
    for exe in executables:
        local = node / exe.lstrip("/")
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text("#!/bin/sh\n")
        local.chmod(0o755)
    for directory, _, files in os.walk(node):
        os.chmod(directory, 0o755)
        for name in files:
            path = Path(directory, name)
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | 0o444)
    return [
        f.path.rsplit("/", 1)[1]
        for f in rendered
        if isinstance(f, RenderedFile) and f.path.endswith(".service")
    ]


def verify(node: Path, unit: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemd-analyze", "verify", f"--root={node}", str(node / "etc/systemd/system" / unit)],
        capture_output=True,
        text=True,
    )


def systemd_dump(node: Path) -> str:
    """systemd's own view of every unit under ``node``, from its unit loader in test mode."""
    # systemd refuses test mode as root; nobody reads the world-readable node root.
    prefix = (
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
        if os.geteuid() == 0
        else []
    )
    done = subprocess.run(
        [*prefix, str(SYSTEMD), "--test", "--system", "--unit=multi-user.target"],
        capture_output=True,
        text=True,
        env={
            "SYSTEMD_UNIT_PATH": f"{node}/etc/systemd/system:{node}/lib/systemd/system",
            "HOME": "/",
            "PATH": os.environ["PATH"],
        },
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def unit_section(dump: str, unit: str) -> str:
    start = dump.index(f"-> Unit {unit}:")
    end = dump.find("-> Unit ", start + 1)
    return dump[start : end if end > 0 else None]


_DUMP_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}


def parse_dump_command(line: str) -> list[str]:
    """Split systemd's dumped ``Command Line:`` (shell-style quoting with C escapes)."""
    words: list[str] = []
    i = 0
    while i < len(line):
        if line[i] == " ":
            i += 1
            continue
        word: list[str] = []
        if line[i] == '"':
            i += 1
            while line[i] != '"':
                if line[i] == "\\":
                    nxt = line[i + 1]
                    if nxt in "01234567":
                        word.append(chr(int(line[i + 1 : i + 4], 8)))
                        i += 4
                        continue
                    word.append(_DUMP_ESCAPES.get(nxt, nxt))
                    i += 2
                else:
                    word.append(line[i])
                    i += 1
            i += 1
        else:
            while i < len(line) and line[i] != " ":
                word.append(line[i])
                i += 1
        words.append("".join(word))
    return words


def exec_time_expansion(word: str) -> str:
    """systemd's exec-time rule for a word with no variables: ``$$`` is ``$``; a lone ``$`` would
    start a variable reference, which a rendered unit must never contain."""
    out: list[str] = []
    i = 0
    while i < len(word):
        if word[i] == "$":
            assert word[i + 1 : i + 2] == "$", f"unescaped $ in {word!r}"
            out.append("$")
            i += 2
        else:
            out.append(word[i])
            i += 1
    return "".join(out)


def exec_start(dump: str, unit: str, kind: str = "ExecStart") -> list[str]:
    section = unit_section(dump, unit)
    match = re.search(rf"-> {kind}:\n\t+Command Line: (.*)\n", section)
    assert match, section
    return [exec_time_expansion(w) for w in parse_dump_command(match.group(1))]


@pytest.fixture(scope="module")
def dump() -> Iterator[str]:
    """systemd's dump of the tricky set, rendered statically (one systemd run for the module)."""
    node = Path(tempfile.mkdtemp(prefix="noderole-units-"))
    try:
        node.chmod(0o755)
        install(node, tricky_services(), exec_mode=False)
        yield systemd_dump(node)
    finally:
        shutil.rmtree(node)


class TestVerify:
    """Every rendered unit passes `systemd-analyze verify` against the distribution's units."""

    @pytest.mark.parametrize("exec_mode", [True, False], ids=["exec", "static"])
    def test_all_units_verify(self, node_dir: Path, exec_mode: bool) -> None:
        """Units with every dependency kind, limits, users and quoting are valid systemd units."""
        units = install(node_dir, tricky_services(), exec_mode=exec_mode)
        assert units == [
            "k3s.service",
            "konnectivity-server.service",
            "ready.service",
            "tricky.service",
        ]
        for unit in units:
            done = verify(node_dir, unit)
            assert done.returncode == 0, f"{unit}: {done.stderr}"

    def test_verify_catches_a_missing_executable(self, node_dir: Path) -> None:
        """The check is real: a unit whose command does not exist fails verify."""
        install(node_dir, [konnectivity_service()], exec_mode=False)
        (node_dir / "usr/local/bin/konnectivity-server").unlink()
        done = verify(node_dir, "konnectivity-server.service")
        assert done.returncode != 0
        assert "konnectivity-server" in done.stderr


class TestSystemdReadsWhatWeMeant:
    """systemd's unit loader turns the rendered text back into the record's values."""

    def test_tricky_argv_round_trips(self, dump: str) -> None:
        """$HOME, 100%, spaces, quotes, backslashes, empty, unicode, ';' reach argv unchanged."""
        assert exec_start(dump, "tricky.service") == ["/usr/bin/tricky", *TRICKY]

    def test_seed_argv_round_trips(self, dump: str) -> None:
        """The konnectivity-server command is exactly the record's argv."""
        assert exec_start(dump, "konnectivity-server.service") == list(
            konnectivity_service().command or ()
        )

    def test_pre_start_hook(self, dump: str) -> None:
        """ExecStartPre runs `noderole hook NAME start-pre`."""
        assert exec_start(dump, "tricky.service", "ExecStartPre") == [
            NODEROLE,
            "hook",
            "tricky",
            "start-pre",
        ]

    def test_environment_and_description_are_literal(self, dump: str) -> None:
        """Environment= and Description= keep %, $, quotes and backslashes as written."""
        section = unit_section(dump, "tricky.service")
        assert '\tEnvironment: PLAIN=x y %h $HOME \\ "q"\n' in section
        assert "Description: Tricky 100% $HOME" in section
        assert "EnvironmentFile: /etc/noderole/env/tricky.env" in section
        assert "s3cr3t" not in dump

    def test_dependencies(self, dump: str) -> None:
        """need -> Requires+After, want -> Wants+After, net -> network-online.target, alias."""
        tricky = unit_section(dump, "tricky.service")
        assert "Requires: k3s.service (origin-file)" in tricky
        assert "Wants: absent.service (origin-file)" in tricky
        assert "After: chrony.service (origin-file)" in tricky
        assert "Before: late.service (origin-file)" in tricky
        # want kube-api resolves through k3s's alias link to k3s.service itself.
        assert "Wants: k3s.service (origin-file)" in tricky
        k3s = unit_section(dump, "k3s.service")
        assert "Wants: network-online.target (origin-file)" in k3s
        assert "After: network-online.target (origin-file)" in k3s
        assert "cgroups" not in k3s

    def test_supervision(self, dump: str) -> None:
        """Restart, delays, kill settings and logs are what the record says."""
        tricky = unit_section(dump, "tricky.service")
        for line in (
            "Restart: always",
            "RestartSec: 500ms",
            "KillMode: control-group",
            "KillSignal: SIGTERM",
            "StandardOutputFileToAppend: /var/log/tricky.log",
            "User: kube",
            "WorkingDirectory: /var/lib/tricky",
        ):
            assert line in tricky
        assert "TimeoutStartSec: 3min 30s" in unit_section(dump, "k3s.service")
        assert "Delegate: no" in tricky

    def test_a_process_scope_is_killmode_process_and_delegate_yes(self, dump: str) -> None:
        """stop_scope="process" and delegate, as k3s's install script renders k3s: systemd
        signals the main process alone (its containers outlive a restart) and hands the
        service its control group's subtree."""
        k3s = unit_section(dump, "k3s.service")
        assert "KillMode: process" in k3s
        assert "Delegate: yes" in k3s

    def test_notify_is_type_notify_without_a_start_timeout(self, dump: str) -> None:
        """A service that says when it is ready (sd_notify, as k3s does) is Type=notify, the
        notification accepted from its main process (the program ``noderole exec`` became), and
        its start is not bounded by systemd (k3s's unit: TimeoutStartSec=0): a first boot's
        start-up may take minutes. The others stay Type=simple."""
        tricky = unit_section(dump, "tricky.service")
        assert "Type: notify\n" in tricky
        assert "NotifyAccess: main\n" in tricky
        assert "TimeoutStartSec: infinity\n" in tricky
        k3s = unit_section(dump, "k3s.service")
        assert "Type: simple\n" in k3s
        assert "NotifyAccess: none\n" in k3s

    def test_open_files_and_tasks(self, dump: str) -> None:
        """open_files is LimitNOFILE (soft and hard), tasks TasksMax; unset, systemd's own."""
        k3s = unit_section(dump, "k3s.service")
        assert "LimitNOFILE: 1048576\n" in k3s
        assert "LimitNOFILESoft: 1048576\n" in k3s
        assert f"TasksMax: {UINT64_MAX}\n" in k3s  # how systemd dumps infinity
        tricky = unit_section(dump, "tricky.service")
        assert "LimitNOFILE: 1048576" not in tricky
        assert f"TasksMax: {UINT64_MAX}" not in tricky


class TestMapping:
    """The text of a unit for each supervision and dependency setting."""

    def test_unlimited_respawn(self) -> None:
        """respawn_max=0 is StartLimitIntervalSec=0 (never give up)."""
        text = render_unit(konnectivity_service())
        assert "StartLimitIntervalSec=0\n" in text
        assert "StartLimitBurst" not in text
        assert "Restart=always\nRestartSec=5\n" in text

    def test_limited_respawn_counts_the_first_start(self) -> None:
        """respawn_max=N allows N restarts: a burst of N+1 starts in the period (or forever)."""
        limited = Service(name="s", command=["/bin/true"], supervision=Supervision(respawn_max=3))
        assert "StartLimitIntervalSec=infinity\nStartLimitBurst=4\n" in render_unit(limited)
        windowed = Service(
            name="s",
            command=["/bin/true"],
            supervision=Supervision(respawn_max=3, respawn_period=30),
        )
        assert "StartLimitIntervalSec=30\nStartLimitBurst=4\n" in render_unit(windowed)

    def test_hook_runs_privileged_even_with_a_user(self) -> None:
        """ExecStartPre has '+', so pre-start steps run as root like OpenRC's start_pre."""
        text = render_unit(Service(name="s", command=["/bin/true"], user="kube"))
        assert f"ExecStartPre=+{NODEROLE} hook s start-pre\n" in text

    def test_exec_mode_is_the_default(self) -> None:
        """ExecStart is `noderole exec NAME` unless static rendering is asked for; privileged
        ('+') only where noderole exec has logs to open or a user to take."""
        text = render_unit(Service(name="s", command=["/bin/true"]))
        assert f"ExecStart={NODEROLE} exec s\n" in text
        assert "PIDFile" not in text
        user = render_unit(Service(name="s", command=["/bin/true"], user="kube"))
        assert f"ExecStart=+{NODEROLE} exec --logs-and-user s\n" in user
        assert "User=kube\n" in user

    def test_logs_are_opened_by_noderole_exec_not_by_systemd(self) -> None:
        """With logs, ExecStart runs `noderole exec` privileged ('+'): it opens the logs as the
        native supervisor does (no link a user planted is followed; in a directory others can
        write, with the service's rights), then takes the service's user. No
        StandardOutput=append:, with which systemd, as root, appended the service's output to
        whatever file a link planted at the log named."""
        service = Service(
            name="s", command=["/bin/true"], user="kube", output_log="/var/log/s/out.log"
        )
        text = render_unit(service)
        assert f"ExecStart=+{NODEROLE} exec --logs-and-user s\n" in text
        assert "StandardOutput" not in text
        assert "StandardError" not in text
        assert "User=kube\n" in text
        konnectivity = render_unit(konnectivity_service())
        assert f"ExecStart=+{NODEROLE} exec --logs-and-user konnectivity-server\n" in konnectivity
        assert "append:" not in konnectivity

    def test_the_working_directory_is_entered_by_noderole_exec(self) -> None:
        """With ExecStart=+, systemd enters WorkingDirectory= as root, through a link the
        service's user planted there, before noderole exec takes the user: his service
        started inside a directory of root's he may not enter. In exec mode the unit has no
        WorkingDirectory=: noderole exec enters it, as the native supervisor does (also
        without a user, where ExecStart= has no '+'). Static mode keeps it: its ExecStart= has
        no '+', and systemd enters the directory once it has taken User=."""
        service = Service(
            name="s", command=["/bin/true"], user="kube", working_directory="/var/lib/s/work"
        )
        text = render_unit(service)
        assert f"ExecStart=+{NODEROLE} exec --logs-and-user s\n" in text
        assert "WorkingDirectory" not in text
        rootly = Service(name="s", command=["/bin/true"], working_directory="/var/lib/s/work")
        assert "WorkingDirectory" not in render_unit(rootly)
        static = render_unit(service, exec_mode=False)
        assert "ExecStart=/bin/true\n" in static
        assert "User=kube\nWorkingDirectory=/var/lib/s/work\n" in static

    def test_notify_with_pre_start_waits_has_no_start_timeout_either(self) -> None:
        """The waits' total bounds a Type=simple start; a notified one waits for the program's
        word, however long its start-up takes (the waits are bounded by noderole itself)."""
        waits = [WaitForPaths(paths=["/x"], timeout=120)]
        notified = Service(
            name="s",
            command=["/bin/true"],
            pre_start=waits,
            supervision=Supervision(notify=True),
        )
        text = render_unit(notified)
        assert "Type=notify\nNotifyAccess=main\n" in text
        assert "TimeoutStartSec=infinity\n" in text
        assert text.count("TimeoutStartSec") == 1
        plain = render_unit(Service(name="s", command=["/bin/true"], pre_start=waits))
        assert "Type=simple\n" in plain
        assert "TimeoutStartSec=210\n" in plain
        assert "NotifyAccess" not in plain

    def test_a_pre_start_that_fails_at_render_leaves_the_start_unbounded(self) -> None:
        """An image rendered before the launcher writes first-boot.env: konnectivity's
        pre-start is a Fail step then, and its unit had no TimeoutStartSec, so systemd's
        90 s killed the boot's 120 s wait for k3s's CA. The waits the boot brings are unknown
        at render: infinity (noderole bounds them itself)."""
        failing = Service(
            name="s", command=["/bin/true"], pre_start=[Fail(message="first-boot.env missing")]
        )
        assert "TimeoutStartSec=infinity\n" in render_unit(failing)

    def test_milestone_is_oneshot(self) -> None:
        """A service without a command is a oneshot that stays active after its hook."""
        text = render_unit(Service(name="ready", need=["k3s"]))
        assert "Type=oneshot\nRemainAfterExit=yes\nExecStart=+" in text
        assert "Restart=" not in text

    @pytest.mark.parametrize("name", ["a+b", "inst@x"])
    def test_names_systemd_cannot_hold(self, name: str) -> None:
        """'+' and '@' in a service name are refused with the fix."""
        with pytest.raises(BackendError, match="rename the service"):
            render_unit(Service(name=name, command=["/bin/true"]))

    def test_two_providers_are_refused(self) -> None:
        """A virtual name with two providers cannot be one alias: the error names both."""
        services = [
            Service(name="a", command=["/bin/true"], provide=["v"]),
            Service(name="b", command=["/bin/true"], provide=["v"]),
        ]
        with pytest.raises(BackendError, match="'a' and 'b'"):
            render_systemd(services)

    def test_description_with_newline_is_refused(self) -> None:
        """A unit setting is one line: a newline in the description is a BackendError."""
        with pytest.raises(BackendError, match="description"):
            render_unit(Service(name="s", description="two\nlines", command=["/bin/true"]))


class TestRenderSystemd:
    """render_systemd + write_rendered: files, links, modes, determinism."""

    def test_files_and_links(self) -> None:
        """Units (0644), wants links, alias links and a 0600 secrets file in static mode."""
        rendered = render_systemd(tricky_services(), exec_mode=False)
        by_path = {f.path: f for f in rendered}
        wants = by_path["/etc/systemd/system/multi-user.target.wants/k3s.service"]
        alias = by_path["/etc/systemd/system/kube-api.service"]
        secrets = by_path["/etc/noderole/env/tricky.env"]
        assert isinstance(wants, RenderedLink)
        assert wants.target == "../k3s.service"
        assert isinstance(alias, RenderedLink)
        assert alias.target == "k3s.service"
        assert isinstance(secrets, RenderedFile)
        assert secrets.mode == 0o600
        assert envfile_assignment("TOKEN", "s3cr3t") in secrets.content
        unit = by_path["/etc/systemd/system/tricky.service"]
        assert isinstance(unit, RenderedFile)
        assert unit.mode == 0o644
        assert "s3cr3t" not in unit.content

    def test_same_input_same_bytes(self, tmp_path: Path) -> None:
        """Rendering twice gives byte-identical files; the second write touches nothing."""
        root = NodeRoot(tmp_path)
        written = write_rendered(render_systemd(tricky_services(), exec_mode=False), root=root)
        snapshot = {
            p: (p.read_bytes(), p.stat().st_mtime_ns) for p in written if not p.is_symlink()
        }
        assert write_rendered(render_systemd(tricky_services(), exec_mode=False), root=root) == []
        assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in snapshot} == snapshot

    def test_output_names_node_paths_only(self, tmp_path: Path) -> None:
        """Nothing rendered or linked mentions the --root directory."""
        written = write_rendered(render_systemd(tricky_services()), root=NodeRoot(tmp_path))
        assert written
        for path in written:
            text = os.readlink(path) if path.is_symlink() else path.read_text()
            assert str(tmp_path) not in text


class TestPackagedUnits:
    @pytest.mark.parametrize("where", ["/lib/systemd/system", "/usr/lib/systemd/system"])
    def test_a_unit_a_package_installed_is_not_taken_over(self, tmp_path: Path, where: str) -> None:
        """A service named like a unit a package installed (ssh.service) is refused: a unit in
        /etc/systemd/system takes the place of the package's, and systemd would start
        noderole's command as ssh. Nothing is written."""
        root = NodeRoot(tmp_path)
        packaged = tmp_path / where.lstrip("/") / "ssh.service"
        packaged.parent.mkdir(parents=True)
        packaged.write_text("[Service]\nExecStart=/usr/sbin/sshd -D\n")
        ssh = Service(name="ssh", roles=["r"], command=["/bin/sleep", "1"])
        with pytest.raises(BackendError) as refused:
            write_rendered(render_systemd([ssh], noderole_path="/usr/bin/noderole"), root=root)
        assert str(refused.value) == (
            f"refusing to write /etc/systemd/system/ssh.service: {where}/ssh.service is "
            "installed (not by noderole) and /etc/systemd/system/ssh.service would take its "
            "place; rename the service (the file is named after it)"
        )
        assert not (tmp_path / "etc").exists()

    def test_an_alias_over_a_packaged_unit_is_refused(self, tmp_path: Path) -> None:
        """``provide`` makes an alias link in /etc/systemd/system: over a packaged unit's name
        it would take that unit's place too."""
        root = NodeRoot(tmp_path)
        packaged = tmp_path / "lib/systemd/system/cron.service"
        packaged.parent.mkdir(parents=True)
        packaged.write_text("[Service]\nExecStart=/usr/sbin/cron -f\n")
        web = Service(name="web", roles=["r"], command=["/bin/sleep", "1"], provide=["cron"])
        with pytest.raises(BackendError, match=r"lib/systemd/system/cron\.service is installed"):
            write_rendered(render_systemd([web], noderole_path="/usr/bin/noderole"), root=root)
        assert not (tmp_path / "etc").exists()
