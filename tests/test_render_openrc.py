"""OpenRC runscripts rendered from Service records, read back by a real POSIX shell."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noderole.errors import BackendError
from noderole.manifest import MANIFEST
from noderole.records import Secret, Service, Supervision
from noderole.render import (
    RenderedFile,
    RenderedLink,
    render_openrc,
    render_runscript,
    write_rendered,
)
from noderole.root import NodeRoot
from noderole.supervisor._proc import group_members, kill_group
from noderole.testing import eventually
from tests.harness.openrc import busybox

# The seed runscript, as the repository keeps it for the docs' migration page.
SEED = Path(__file__).resolve().parent.parent / "docs" / "seed" / "konnectivity-server.initd"
TRICKY = (
    "a  b",
    "$HOME",
    "${HOME}",
    "100%",
    "%h %n",
    "",
    "it's",
    'say "hi"',
    "back\\slash",
    "*",
    "[ab]",
    "é ünïcødé ✓",
    "semi;colon",
    "new\nline",
    "tab\there",
    "`uname`",
    "$(uname)",
    "--flag=a b",
    " lead",
    "trail ",
)

# Defines every depend() keyword as a function that records its arguments, sources the script,
# then prints each field NUL-separated. command_args is expanded exactly as supervise-daemon.sh
# does it: unquoted (split, globbed) and then eval-ed.
_READER = r"""
for kind in need use want after before provide; do
    eval "$kind() { for n; do printf '%s\0%s\0' $kind \"\$n\"; done; }"
done
. "$1"
for field in description command pidfile supervisor respawn_delay respawn_max respawn_period \
        output_log error_log command_user directory retry rc_ulimit; do
    eval "printf '%s\0%s\0' $field \"\${$field-<unset>}\""
done
_args() { for a; do printf 'arg\0%s\0' "$a"; done; }
eval _args $command_args
if command -v depend >/dev/null; then depend; fi
"""


def read_script(script: Path, *, cwd: Path) -> dict[str, list[str]]:
    """Source a runscript in ``sh`` (as openrc-run does) and return its fields, lists kept."""
    done = subprocess.run(
        ["sh", "-c", _READER, "reader", str(script)],
        capture_output=True,
        cwd=cwd,
        env={"PATH": os.environ["PATH"], "HOME": "/home/expanded-by-mistake"},
        check=True,
    )
    parts = done.stdout.decode().split("\0")[:-1]
    fields: dict[str, list[str]] = {}
    for key, value in zip(parts[::2], parts[1::2], strict=True):
        fields.setdefault(key, []).append(value)
    return fields


def konnectivity_service(**overrides: object) -> Service:
    """The konnectivity-server service exactly as the seed describes it (no first-boot env)."""
    konn_dir = "/var/lib/spinifex-eks/konnectivity"
    fields: dict[str, object] = {
        "name": "konnectivity-server",
        "description": "Konnectivity server (Mulga EKS apiserver egress proxy)",
        "need": ["net"],
        "after": ["k3s"],
        "command": [
            "/usr/local/bin/konnectivity-server",
            "--logtostderr=true",
            "--uds-name=/run/konnectivity/konnectivity-server.socket",
            "--delete-existing-uds-file",
            f"--cluster-cert={konn_dir}/tls.crt",
            f"--cluster-key={konn_dir}/tls.key",
            "--server-count=1",
            "--mode=grpc",
            "--server-port=0",
            "--agent-port=8132",
            "--admin-port=8093",
            "--health-port=8092",
            "--kubeconfig=/etc/rancher/k3s/k3s.yaml",
            "--authentication-audience=system:konnectivity-server",
            "--agent-namespace=kube-system",
            "--agent-service-account=konnectivity-agent",
            "--proxy-strategies=destHost,default",
        ],
        "pidfile": "/run/konnectivity-server.pid",
        "output_log": "/var/log/konnectivity-server.log",
        "error_log": "/var/log/konnectivity-server.log",
        "supervision": Supervision(respawn_delay=5, respawn_max=0),
        "origin": "konnectivity",
    }
    fields.update(overrides)
    return Service(**fields)  # type: ignore[arg-type]


def write_script(tmp_path: Path, text: str, name: str = "script") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


class TestSeedParity:
    """The rendered konnectivity-server runscript says what the seed says, field by field."""

    FIELDS = (
        "description",
        "command",
        "arg",
        "pidfile",
        "supervisor",
        "respawn_delay",
        "respawn_max",
        "output_log",
        "error_log",
        "need",
        "after",
    )

    @pytest.fixture(params=["as-described", "from-the-plugin"])
    def both(
        self, request: pytest.FixtureRequest, tmp_path: Path
    ) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        if request.param == "from-the-plugin":
            # The shipped konnectivity plugin's own definition, not a copy of it.
            plugin = pytest.importorskip("noderole_konnectivity.plugin")
            from noderole.testing import services_from_plugins

            (service,) = [
                s
                for s in services_from_plugins(("konnectivity", plugin))
                if s.name == "konnectivity-server"
            ]
        else:
            service = konnectivity_service()
        rendered = render_runscript(service, exec_mode=False)
        ours = read_script(write_script(tmp_path, rendered, "ours"), cwd=tmp_path)
        seed = read_script(SEED, cwd=tmp_path)
        return ours, seed

    @pytest.mark.parametrize("field", FIELDS)
    def test_field_matches_seed(
        self, both: tuple[dict[str, list[str]], dict[str, list[str]]], field: str
    ) -> None:
        """Each supervision field, the argv and the dependencies equal the seed's."""
        ours, seed = both
        assert field in seed
        assert ours[field] == seed[field]

    def test_argv_is_the_seeds_split_list(
        self, both: tuple[dict[str, list[str]], dict[str, list[str]]]
    ) -> None:
        """The seed's 16 arguments come back in order, none merged or split."""
        ours, seed = both
        assert len(seed["arg"]) == 16
        assert ours["arg"] == seed["arg"]
        assert "--server-count=1" in ours["arg"]

    def test_header_names_the_plugin(self) -> None:
        """The runscript says it is generated and by which plugin."""
        text = render_runscript(konnectivity_service(), exec_mode=False)
        assert text.startswith(
            "#!/sbin/openrc-run\n# Generated by noderole from plugin konnectivity"
        )

    def test_start_pre_calls_the_hook(self, tmp_path: Path) -> None:
        """start_pre runs `noderole hook NAME start-pre` and returns its status."""
        fake = write_script(tmp_path, '#!/bin/sh\necho "$@" > "$0.called"\nexit 7\n', "nr")
        fake.chmod(0o755)
        script = write_script(tmp_path, render_runscript(konnectivity_service()))
        done = subprocess.run(
            ["sh", "-c", '. "$1"; start_pre', "x", str(script)],
            env={"PATH": os.environ["PATH"], "NODEROLE": str(fake)},
        )
        assert done.returncode == 7
        assert Path(f"{fake}.called").read_text() == "hook konnectivity-server start-pre\n"


class TestArguments:
    """Arguments are data: what openrc-run passes on is exactly the argv of the record."""

    def test_tricky_arguments_survive_supervise_daemon_eval(self, tmp_path: Path) -> None:
        """Spaces, quotes, $, %, globs, newlines, unicode and empty strings come back unchanged."""
        (tmp_path / "a").touch()  # something for a stray glob to match
        service = Service(name="tricky", command=["/bin/echo", *TRICKY])
        script = write_script(tmp_path, render_runscript(service, exec_mode=False))
        fields = read_script(script, cwd=tmp_path)
        assert fields["command"] == ["/bin/echo"]
        assert fields["arg"] == list(TRICKY)

    def test_an_argument_ending_in_a_newline_is_quoted(self, tmp_path: Path) -> None:
        """`0\\n` is not a plain word (a `$` anchor matched before the newline; found by the
        property test below): the newline survives the runscript."""
        service = Service(name="any", command=["/bin/true", "0\n"])
        fields = read_script(
            write_script(tmp_path, render_runscript(service, exec_mode=False)), cwd=tmp_path
        )
        assert fields["arg"] == ["0\n"]

    @settings(max_examples=40, deadline=None)
    # NUL cannot be in an argv; lone surrogates are not text (Service refuses them).
    @given(
        args=st.lists(
            st.text(st.characters(exclude_characters="\0", exclude_categories=["Cs"])),
            max_size=4,
        )
    )
    def test_any_argument_round_trips(
        self, tmp_path_factory: pytest.TempPathFactory, args: list[str]
    ) -> None:
        """Any text without NUL (argv cannot hold one) is passed on exactly."""
        tmp = tmp_path_factory.mktemp("args")
        service = Service(name="any", command=["/bin/true", *args])
        fields = read_script(write_script(tmp, render_runscript(service, exec_mode=False)), cwd=tmp)
        assert fields.get("arg", []) == args

    def test_exec_mode_runs_noderole_exec(self, tmp_path: Path) -> None:
        """Exec mode's command is `noderole exec NAME`, overridable with $NODEROLE."""
        service = konnectivity_service()
        text = render_runscript(service, noderole_path="/opt/nr/bin/noderole")
        fields = read_script(write_script(tmp_path, text), cwd=tmp_path)
        assert fields["command"] == ["/opt/nr/bin/noderole"]
        assert fields["arg"] == ["exec", "konnectivity-server"]
        assert "--server-count" not in text

    @pytest.mark.parametrize(
        ("field", "value"),
        [("pidfile", "/run/my pid"), ("output_log", "/var/log/$x.log"), ("user", "a b")],
    )
    def test_values_openrc_would_split_are_refused(self, field: str, value: str) -> None:
        """A value supervise-daemon.sh would word-split is a BackendError naming the field."""
        service = Service(name="svc", command=["/bin/true"], **{field: value})  # type: ignore[arg-type]
        with pytest.raises(BackendError, match=rf"'svc'.*{value.split()[0][:4]}"):
            render_runscript(service, exec_mode=False)

    def test_command_path_with_space_is_refused(self) -> None:
        """An executable path with a space cannot be a runscript command."""
        service = Service(name="svc", command=["/opt/my app/run"])
        with pytest.raises(BackendError, match=r"command\[0\]"):
            render_runscript(service, exec_mode=False)


class TestSupervisionAndDepend:
    """Supervision settings and dependency kinds map one to one."""

    def test_every_dependency_kind(self, tmp_path: Path) -> None:
        """need/use/want/after/before/provide each become their own depend() line."""
        service = Service(
            name="svc",
            command=["/bin/true"],
            need=["a", "b"],
            use=["c"],
            want=["d"],
            after=["e"],
            before=["f"],
            provide=["g"],
        )
        fields = read_script(write_script(tmp_path, render_runscript(service)), cwd=tmp_path)
        assert {k: fields[k] for k in ("need", "use", "want", "after", "before", "provide")} == {
            "need": ["a", "b"],
            "use": ["c"],
            "want": ["d"],
            "after": ["e"],
            "before": ["f"],
            "provide": ["g"],
        }

    def test_supervision_fields(self, tmp_path: Path) -> None:
        """Respawn, stop schedule, user and group reach supervise-daemon's variables."""
        service = Service(
            name="svc",
            command=["/bin/true"],
            user="kube",
            group="kube",
            working_directory="/var/lib/svc",
            supervision=Supervision(
                respawn_delay=2.5,
                respawn_max=3,
                respawn_period=60,
                stop_signal="SIGINT",
                stop_timeout=9,
                open_files=65536,
            ),
        )
        fields = read_script(write_script(tmp_path, render_runscript(service)), cwd=tmp_path)
        assert fields["rc_ulimit"] == ["-n 65536"]
        assert fields["respawn_delay"] == ["3"]  # whole seconds, never shorter
        assert fields["respawn_max"] == ["3"]
        assert fields["respawn_period"] == ["60"]
        assert fields["retry"] == ["SIGINT/9/SIGKILL/5"]
        assert fields["command_user"] == ["kube:kube"]

    def test_the_working_directory_is_entered_by_noderole_exec(self, tmp_path: Path) -> None:
        """supervise-daemon --chdir (``directory=``) changes directory as root, through a link
        the service's user planted there, before it takes command_user: his service started
        inside a directory of root's he may not enter. In exec mode the runscript has no
        ``directory=``: ``noderole exec`` enters it, as the native supervisor does. The static
        mode, which has no such process, still writes it."""
        service = Service(
            name="svc", command=["/bin/true"], user="kube", working_directory="/var/lib/svc"
        )
        script = render_runscript(service)
        assert "directory" not in script
        fields = read_script(write_script(tmp_path, script), cwd=tmp_path)
        assert fields["directory"] == ["<unset>"]
        assert fields["arg"] == ["exec", "svc"]
        assert fields["command_user"] == ["kube"]
        static = render_runscript(service, exec_mode=False)
        fields = read_script(write_script(tmp_path, static, "static"), cwd=tmp_path)
        assert fields["directory"] == ["/var/lib/svc"]

    @pytest.mark.parametrize("supervised", [True, False], ids=["supervised", "stale"])
    @pytest.mark.parametrize("shell", ["dash", "busybox"])
    def test_stop_post_ends_the_group_in_dash_and_busybox(
        self, tmp_path: Path, shell: str, supervised: bool
    ) -> None:
        """A group-scope runscript's stop_pre/stop_post, run by the shells that run OpenRC's
        runscripts (Debian's dash, Alpine's busybox ash, unpacked from Debian's package): the
        group of supervise-daemon's child gets the stop signal, then SIGKILL after stop_timeout
        for what ignores it. Before, `kill -s SIG -- -PGID` was an error in busybox (the group
        got no SIGKILL), as `kill -0 -- -PGID` is in dash. A recorded pid that is no child of
        supervise-daemon (a supervisor that gave up left it; it may be anyone's by now) is left
        alone."""
        sh = [str(busybox()), "sh"] if shell == "busybox" else ["dash"]
        service = Service(
            name="svc", command=["/bin/true"], supervision=Supervision(stop_timeout=0.3)
        )
        script = write_script(tmp_path, render_runscript(service))
        # A group whose every member ignores SIGTERM (sleep inherits the ignored signal), led by
        # a child of a process named as supervise-daemon is (comm, cut to 15 characters), or of
        # this test.
        parent = tmp_path / ("supervise-daemon" if supervised else "someone-else")
        parent.symlink_to(shutil.which("dash") or "/bin/dash")
        leader_file = tmp_path / "leader"
        group = "trap '' TERM; sleep 1000 & sleep 1000 & wait"
        holder = subprocess.Popen(
            [str(parent), "-c", f'setsid sh -c "{group}" & echo $! > {leader_file}; wait'],
            start_new_session=True,
        )
        leader = 0
        try:
            leader = int(
                eventually(
                    lambda: leader_file.exists() and leader_file.read_text(), "the group's leader"
                )
            )
            eventually(lambda: len(group_members(leader)) == 3, "the group's three members")
            driver = f"service_get_value() {{ echo {leader}; }}\n. {script}\nstop_pre\nstop_post\n"
            done = subprocess.run([*sh, "-c", driver], capture_output=True, text=True, timeout=30)
            assert (done.returncode, done.stderr) == (0, "")
            if supervised:
                eventually(lambda: not group_members(leader), "the group to be gone")
            else:
                assert len(group_members(leader)) == 3
        finally:
            if leader:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(leader, signal.SIGKILL)
            kill_group(holder.pid, signal.SIGKILL)
            holder.wait()

    def test_zero_delay_leaves_respawn_delay_unset(self, tmp_path: Path) -> None:
        """supervise-daemon refuses --respawn-delay 0, so a zero delay is left out."""
        service = Service(
            name="svc", command=["/bin/true"], supervision=Supervision(respawn_delay=0)
        )
        fields = read_script(write_script(tmp_path, render_runscript(service)), cwd=tmp_path)
        assert fields["respawn_delay"] == ["<unset>"]
        assert fields["rc_ulimit"] == ["<unset>"]  # no open_files: the limit OpenRC gives

    def test_milestone_has_no_process(self, tmp_path: Path) -> None:
        """A service without a command gets start() that runs the hook, and no supervisor."""
        text = render_runscript(Service(name="ready", need=["k3s"]))
        fields = read_script(write_script(tmp_path, text), cwd=tmp_path)
        assert fields["supervisor"] == ["<unset>"]
        assert fields["command"] == ["<unset>"]
        assert "start() {" in text
        assert "hook ready start-pre" in text


class TestSecrets:
    """Secret values never reach the world-readable runscript."""

    VALUE = "s3cr3t 'quoted' \"double\" $HOME `x` back\\slash\nline2"

    def service(self) -> Service:
        return Service(
            name="svc",
            command=["/bin/true"],
            environment={"PLAIN": "visible $HOME", "TOKEN": Secret(self.VALUE)},
        )

    def test_static_mode_puts_secrets_in_a_0600_file(self) -> None:
        """The secret goes to /etc/noderole/env/NAME.env (0600), the plain value stays inline."""
        rendered = render_openrc([self.service()], exec_mode=False)
        script = next(f for f in rendered if f.path == "/etc/init.d/svc")
        env = next(f for f in rendered if f.path == "/etc/noderole/env/svc.env")
        assert isinstance(script, RenderedFile)
        assert isinstance(env, RenderedFile)
        assert "s3cr3t" not in script.content
        assert env.mode == 0o600
        assert "export PLAIN='visible $HOME'" in script.content

    def test_start_pre_exports_the_secret_exactly(self, tmp_path: Path) -> None:
        """start_pre sources the secrets file and exports each value byte for byte."""
        root = NodeRoot(tmp_path / "root")
        write_rendered(render_openrc([self.service()], exec_mode=False), root=root)
        script = root.resolve("/etc/init.d/svc")
        env_file = root.resolve("/etc/noderole/env/svc.env")
        text = script.read_text().replace("/etc/noderole/env/svc.env", str(env_file))
        script.write_text(text)
        done = subprocess.run(
            ["sh", "-c", '. "$1"; start_pre; env -0', "x", str(script)],
            capture_output=True,
            env={"PATH": os.environ["PATH"], "NODEROLE": "/bin/true", "HOME": "/nowhere"},
            check=True,
        )
        variables = dict(item.split("=", 1) for item in done.stdout.decode().split("\0") if item)
        assert variables["TOKEN"] == self.VALUE
        assert variables["PLAIN"] == "visible $HOME"

    def test_exec_mode_writes_no_environment(self) -> None:
        """In exec mode `noderole exec` sets the environment: nothing is rendered for it."""
        rendered = render_openrc([self.service()])
        assert [f.path for f in rendered] == ["/etc/init.d/svc", "/etc/runlevels/default/svc"]
        script = rendered[0]
        assert isinstance(script, RenderedFile)
        assert "PLAIN" not in script.content
        assert "TOKEN" not in script.content


class TestRenderOpenRC:
    """render_openrc + write_rendered produce a deterministic, enabled set of files."""

    def services(self) -> list[Service]:
        return [
            konnectivity_service(),
            Service(name="net", description="built in"),
            Service(name="cgroups", description="built in"),
            Service(name="k3s", command=["/usr/local/bin/k3s", "server"], need=["net", "cgroups"]),
        ]

    def test_runscripts_and_runlevel_links(self) -> None:
        """Each service gets a 0755 runscript and a runlevel link; net and cgroups are OpenRC's."""
        rendered = render_openrc(self.services(), runlevel="boot")
        assert [(type(f).__name__, f.path) for f in rendered] == [
            ("RenderedFile", "/etc/init.d/k3s"),
            ("RenderedFile", "/etc/init.d/konnectivity-server"),
            ("RenderedLink", "/etc/runlevels/boot/k3s"),
            ("RenderedLink", "/etc/runlevels/boot/konnectivity-server"),
        ]
        link = rendered[2]
        assert isinstance(link, RenderedLink)
        assert link.target == "/etc/init.d/k3s"
        assert all(f.mode == 0o755 for f in rendered if isinstance(f, RenderedFile))

    def test_same_input_same_bytes(self, tmp_path: Path) -> None:
        """Rendering twice gives identical files, and the second write changes nothing."""
        root = NodeRoot(tmp_path)
        first = write_rendered(render_openrc(self.services()), root=root)
        before = {p: p.read_bytes() for p in first if not p.is_symlink()}
        assert write_rendered(render_openrc(self.services()), root=root) == []
        assert {p: p.read_bytes() for p in before} == before

    def test_output_names_node_paths_only(self, tmp_path: Path) -> None:
        """Nothing rendered mentions the --root directory."""
        root = NodeRoot(tmp_path)
        written = write_rendered(render_openrc(self.services()), root=root)
        for path in written:
            text = os.readlink(path) if path.is_symlink() else path.read_text()
            assert str(tmp_path) not in text
        assert (tmp_path / "etc/runlevels/default/k3s").readlink() == Path("/etc/init.d/k3s")

    def test_bad_runlevel_is_refused(self) -> None:
        """A runlevel that is not a plain name is a BackendError."""
        with pytest.raises(BackendError, match="runlevel"):
            render_openrc(self.services(), runlevel="../x")

    def test_sh_reads_every_rendered_runscript(self, tmp_path: Path) -> None:
        """`sh -n` accepts every runscript (dash is Debian's /bin/sh, as under openrc-run)."""
        assert shutil.which("sh")
        for item in render_openrc(self.services(), exec_mode=False):
            if isinstance(item, RenderedFile):
                path = write_script(tmp_path, item.content, item.path.rsplit("/", 1)[1])
                subprocess.run(["sh", "-n", str(path)], check=True)


class TestWriteRendered:
    """write_rendered replaces files and links whole, and only when they changed."""

    def test_changed_content_is_replaced_without_leftovers(self, tmp_path: Path) -> None:
        """A new content replaces the old file; no temporary file is left in the directory."""
        root = NodeRoot(tmp_path)
        write_rendered([RenderedFile(path="/etc/init.d/x", content="old\n", mode=0o755)], root=root)
        changed = write_rendered(
            [RenderedFile(path="/etc/init.d/x", content="new\n", mode=0o755)], root=root
        )
        assert changed == [tmp_path / "etc/init.d/x"]
        assert (tmp_path / "etc/init.d/x").read_text() == "new\n"
        assert os.listdir(tmp_path / "etc/init.d") == ["x"]

    def test_a_runscript_noderole_did_not_write_is_never_replaced(self, tmp_path: Path) -> None:
        """A service named like a runscript the node already has (the distribution's sshd, an
        administrator's own konnectivity-server) is refused, naming the file and the fix;
        nothing is written, the runlevel link neither. Before, the file was replaced: the
        distribution's service gone, the administrator's script lost."""
        root = NodeRoot(tmp_path)
        theirs = tmp_path / "etc/init.d/sshd"
        theirs.parent.mkdir(parents=True)
        theirs.write_text("#!/sbin/openrc-run\ncommand=/usr/sbin/sshd\n")
        theirs.chmod(0o755)
        sshd = Service(name="sshd", roles=["r"], command=["/bin/sleep", "1"])
        with pytest.raises(BackendError) as refused:
            write_rendered(render_openrc([sshd]), root=root)
        assert str(refused.value) == (
            "refusing to replace /etc/init.d/sshd: noderole did not write it (no 'by noderole' "
            "line at its top, and not in noderole's record of what it wrote); move it away, "
            "keeping what you need of it, then run again"
        )
        assert theirs.read_text() == "#!/sbin/openrc-run\ncommand=/usr/sbin/sshd\n"
        assert not (tmp_path / "etc/runlevels").exists()
        assert not (tmp_path / MANIFEST.lstrip("/")).exists()

    @pytest.mark.parametrize("why", ["its own header", "recorded"])
    def test_noderoles_own_runscript_is_replaced(self, tmp_path: Path, why: str) -> None:
        """A runscript noderole wrote is replaced, found by its header (a record lost) or by
        noderole's record of what it wrote (a header edited away)."""
        root = NodeRoot(tmp_path)
        service = Service(name="web", roles=["r"], command=["/bin/sleep", "1"])
        write_rendered(render_openrc([service]), root=root)
        script = tmp_path / "etc/init.d/web"
        if why == "recorded":
            script.write_text("#!/sbin/openrc-run\n# edited by hand\n")
        else:
            (tmp_path / MANIFEST.lstrip("/")).unlink()
            script.write_text(script.read_text() + "# a line added by hand\n")
        write_rendered(render_openrc([service]), root=root)
        assert script.read_text() == render_openrc([service])[0].content  # type: ignore[union-attr]

    def test_a_killed_renders_temporaries_are_swept(self, tmp_path: Path) -> None:
        """A render killed between creating its temporary file and renaming it (a power cut, a
        kill -9) left an executable ``.x.<hex>.tmp`` in /etc/init.d for good, a link's too in
        the runlevel; the next render removes those of its own names once they are older than
        a writer at work could leave them, and leaves a fresh one and other files alone."""
        from noderole.atomic import STALE_TEMP_AGE

        root = NodeRoot(tmp_path)
        initd = tmp_path / "etc/init.d"
        runlevel = tmp_path / "etc/runlevels/default"
        initd.mkdir(parents=True)
        runlevel.mkdir(parents=True)
        stale = initd / ".x.0123456789ab.tmp"
        stale.write_text("#!/sbin/openrc-run\n")
        stale_link = runlevel / ".x.ba9876543210.tmp"
        stale_link.symlink_to("/etc/init.d/x")
        fresh = initd / ".x.aaaaaaaaaaaa.tmp"
        fresh.write_text("being written\n")
        other = initd / ".y.0123456789ab.tmp"
        other.write_text("not a name rendered here\n")
        long_ago = time.time() - STALE_TEMP_AGE - 5
        for path in (stale, other):
            os.utime(path, (long_ago, long_ago))
        os.utime(stale_link, (long_ago, long_ago), follow_symlinks=False)
        write_rendered(
            [
                RenderedFile(path="/etc/init.d/x", content="new\n", mode=0o755),
                RenderedLink(path="/etc/runlevels/default/x", target="/etc/init.d/x"),
            ],
            root=root,
        )
        assert sorted(os.listdir(initd)) == [".x.aaaaaaaaaaaa.tmp", ".y.0123456789ab.tmp", "x"]
        assert os.listdir(runlevel) == ["x"]

    def test_mode_only_change_is_fixed(self, tmp_path: Path) -> None:
        """Same content with a wrong mode gets the rendered mode back."""
        root = NodeRoot(tmp_path)
        item = RenderedFile(path="/etc/noderole/env/x.env", content='A="1"\n', mode=0o600)
        write_rendered([item], root=root)
        (tmp_path / "etc/noderole/env/x.env").chmod(0o644)
        assert write_rendered([item], root=root) == [tmp_path / "etc/noderole/env/x.env"]
        assert (tmp_path / "etc/noderole/env/x.env").stat().st_mode & 0o777 == 0o600

    def test_link_is_retargeted(self, tmp_path: Path) -> None:
        """A link with another target is replaced by rename; the same link is left alone."""
        root = NodeRoot(tmp_path)
        link = tmp_path / "etc/runlevels/default/x"
        write_rendered([RenderedLink(path="/etc/runlevels/default/x", target="/old")], root=root)
        new = RenderedLink(path="/etc/runlevels/default/x", target="/etc/init.d/x")
        assert write_rendered([new], root=root) == [link]
        assert os.readlink(link) == "/etc/init.d/x"
        assert write_rendered([new], root=root) == []
        assert os.listdir(link.parent) == ["x"]

    def test_refusal_names_the_path(self, tmp_path: Path) -> None:
        """A directory where a link belongs is a BackendError naming the node path."""
        (tmp_path / "etc/runlevels/default/x").mkdir(parents=True)
        with pytest.raises(BackendError, match="/etc/runlevels/default/x"):
            write_rendered(
                [RenderedLink(path="/etc/runlevels/default/x", target="/etc/init.d/x")],
                root=NodeRoot(tmp_path),
            )

    def test_relative_node_path_is_rejected(self) -> None:
        """A rendered path must be an absolute, normalised node path."""
        with pytest.raises(ValueError, match="node path"):
            RenderedFile(path="etc/../x", content="", mode=0o644)
