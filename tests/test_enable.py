"""`noderole enable ROLE` / `noderole disable`: noderole's boot entry, under --root and for real.

Under --root: what is written, idempotency, refusal of foreign files, disable removing only
what enable wrote. For real: inside the OpenRC namespace the suite already uses (Debian's
openrc-run) and inside a booted private systemd, enable installs the entry and starting it
brings the role's services up, with no hand-written file.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import types
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import noderole
from noderole.bootentry import LEGACY_RECORD, boot_entry
from noderole.cli import cli
from noderole.cli._app import App
from noderole.manifest import MANIFEST, entries
from noderole.paths import ROLE_FILE
from noderole.root import NodeRoot
from tests.harness.openrc_ns import OpenRCNamespace
from tests.harness.systemd_ns import SystemdNamespace, systemd_problem
from tests.test_apply_openrc import EVENTUALLY
from tests.test_apply_openrc import namespace as namespace  # the OpenRC fixture
from tests.test_systemd_real import CHECKOUT, NODEROLE, VENV, Node, eventually, stage_server

OPENRC_FILES = ("etc/init.d/noderole", "etc/runlevels/default/noderole")
SYSTEMD_FILES = (
    "etc/systemd/system/noderole.service",
    "etc/systemd/system/multi-user.target.wants/noderole.service",
)


def _plugin() -> types.ModuleType:
    module = types.ModuleType("enable_plugin")

    @noderole.hookimpl
    def noderole_services(node: object) -> list[noderole.Service]:
        return [noderole.Service(name="prep", roles=["demo", "other"])]

    module.noderole_services = noderole_services  # type: ignore[attr-defined]
    return module


def run(root: Path, *args: str) -> Result:
    app = App(root=NodeRoot(root), plugin_objects=(("enable", _plugin()),), autoload=False)
    return CliRunner().invoke(cli, list(args), obj=app)


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir()}


class TestUnderRoot:
    def test_openrc_entry(self, tmp_path: Path) -> None:
        """enable --backend openrc writes the runscript, its runlevel link and the role."""
        result = run(tmp_path, "enable", "demo", "--backend", "openrc")
        assert result.exit_code == 0, result.output
        script = tmp_path / "etc/init.d/noderole"
        assert script.stat().st_mode & 0o777 == 0o755
        text = script.read_text()
        assert text.startswith("#!/sbin/openrc-run\n")
        assert "after net cloud-config cloud-final" in text
        assert "apply --backend openrc" in text
        link = tmp_path / "etc/runlevels/default/noderole"
        assert str(link.readlink()) == "/etc/init.d/noderole"
        assert (tmp_path / ROLE_FILE.lstrip("/")).read_text() == "demo\n"

    @pytest.mark.parametrize("backend", ["openrc", "systemd"])
    def test_a_write_that_fails_midway_leaves_no_half_entry(
        self, tmp_path: Path, backend: str
    ) -> None:
        """The last directory of the entry cannot be made (a full /etc, or a file in the way):
        enable fails naming the path, and what it had written of the entry is gone again.
        Before: a traceback, and the runscript or unit and its runlevel link or wants link left
        installed, which disable ("no boot entry enabled") and reset did not know of: the node
        applied the role at every boot."""
        blocker = (
            "etc/periodic" if backend == "openrc" else "etc/systemd/system/timers.target.wants"
        )
        (tmp_path / blocker).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / blocker).write_text("in the way\n")
        result = run(tmp_path, "enable", "demo", "--backend", backend)
        assert result.exit_code == 10, result.output
        assert "Traceback" not in result.output
        assert f"cannot write /{blocker}" in result.output
        assert {p for p in tree(tmp_path) if p.startswith("etc/")} == {blocker}
        assert run(tmp_path, "disable").exit_code == 0

    def test_systemd_entry(self, tmp_path: Path) -> None:
        """enable --backend systemd writes a oneshot unit after cloud-final, wanted by
        multi-user.target."""
        result = run(tmp_path, "enable", "demo", "--backend", "systemd")
        assert result.exit_code == 0, result.output
        unit = (tmp_path / SYSTEMD_FILES[0]).read_text()
        assert "Type=oneshot" in unit
        assert "After=network-online.target multi-user.target cloud-final.service" in unit
        assert "Wants=network-online.target" in unit
        assert "WantedBy=multi-user.target" in unit
        # No role in the unit: apply takes the recorded one, or resolves it at first boot.
        exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
        assert exec_start.endswith(" apply --backend systemd")
        link = tmp_path / SYSTEMD_FILES[1]
        assert str(link.readlink()) == "../noderole.service"

    def test_without_a_role_nothing_is_recorded(self, tmp_path: Path) -> None:
        """enable with no ROLE installs the entry and leaves the role to the first boot."""
        result = run(tmp_path, "enable", "--backend", "openrc")
        assert result.exit_code == 0, result.output
        assert "first boot" in result.output
        assert (tmp_path / "etc/init.d/noderole").exists()
        assert not (tmp_path / ROLE_FILE.lstrip("/")).exists()

    def test_idempotent_and_switching_backend(self, tmp_path: Path) -> None:
        """enable twice changes nothing; enable with the other backend replaces the entry."""
        assert run(tmp_path, "enable", "demo", "--backend", "openrc").exit_code == 0
        first = tree(tmp_path)
        assert run(tmp_path, "enable", "demo", "--backend", "openrc").exit_code == 0
        assert tree(tmp_path) == first
        assert run(tmp_path, "enable", "other", "--backend", "systemd").exit_code == 0
        now = tree(tmp_path)
        assert not any(f in now for f in OPENRC_FILES)
        assert all(f in now for f in SYSTEMD_FILES)
        assert (tmp_path / ROLE_FILE.lstrip("/")).read_text() == "other\n"

    def test_disable_removes_only_what_enable_wrote(self, tmp_path: Path) -> None:
        """disable removes the entry and forgets it; the role and other files stay."""
        (tmp_path / "etc/runlevels/default").mkdir(parents=True)
        (tmp_path / "etc/runlevels/default/sshd").symlink_to("/etc/init.d/sshd")
        assert run(tmp_path, "enable", "demo", "--backend", "openrc").exit_code == 0
        result = run(tmp_path, "disable")
        assert result.exit_code == 0, result.output
        left = tree(tmp_path)
        assert not any(f in left for f in OPENRC_FILES)
        assert not any(e.kind == "boot" for e in entries(NodeRoot(tmp_path)).values())
        assert "etc/runlevels/default/sshd" in left
        assert ROLE_FILE.lstrip("/") in left
        again = run(tmp_path, "disable")
        assert again.exit_code == 0
        assert "nothing to remove" in again.output

    def test_disable_keeps_a_changed_file(self, tmp_path: Path) -> None:
        """A runscript edited after enable is kept and named; disable exits 1."""
        assert run(tmp_path, "enable", "demo", "--backend", "openrc").exit_code == 0
        script = tmp_path / "etc/init.d/noderole"
        script.write_text("#!/sbin/openrc-run\n# edited by hand\n")
        result = run(tmp_path, "disable")
        assert result.exit_code == 1
        assert "/etc/init.d/noderole changed" in result.output
        assert script.read_text().endswith("# edited by hand\n")
        assert not (tmp_path / "etc/runlevels/default/noderole").exists()

    def test_refuses_a_foreign_file_writing_nothing(self, tmp_path: Path) -> None:
        """A noderole.service enable did not write is refused, naming it; nothing is written."""
        unit = tmp_path / "etc/systemd/system/noderole.service"
        unit.parent.mkdir(parents=True)
        unit.write_text("[Unit]\nDescription=someone else's\n")
        result = run(tmp_path, "enable", "demo", "--backend", "systemd")
        assert result.exit_code != 0
        assert "/etc/systemd/system/noderole.service exists" in result.output
        assert tree(tmp_path) == {"etc/systemd/system/noderole.service"}

    def test_bad_input_writes_nothing(self, tmp_path: Path) -> None:
        """An unknown role, or --root without --backend, is refused before anything is written."""
        unknown = run(tmp_path, "enable", "nosuch", "--backend", "openrc")
        assert unknown.exit_code != 0
        assert "nosuch" in unknown.output
        auto = run(tmp_path, "enable", "demo")
        assert auto.exit_code == 2
        assert "--backend openrc or --backend systemd" in auto.output
        assert tree(tmp_path) == set()

    def test_one_record_of_what_was_written(self, tmp_path: Path) -> None:
        """enable records its paths in the one manifest (kind boot), no record of its own;
        reset removes the entry like everything else noderole wrote."""
        assert run(tmp_path, "enable", "demo", "--backend", "systemd").exit_code == 0
        assert not (tmp_path / LEGACY_RECORD.lstrip("/")).exists()
        boot = {p for p, e in entries(NodeRoot(tmp_path)).items() if e.kind == "boot"}
        assert boot == {"/" + f for f in SYSTEMD_FILES} | {
            "/etc/systemd/system/noderole-renew.service",
            "/etc/systemd/system/noderole-renew.timer",
            "/etc/systemd/system/timers.target.wants/noderole-renew.timer",
        }
        result = run(tmp_path, "reset")
        assert result.exit_code == 0, result.output
        assert not any(f in tree(tmp_path) for f in SYSTEMD_FILES)

    def test_disable_a_node_enabled_by_the_previous_version(self, tmp_path: Path) -> None:
        """A boot-entry.json left by the previous version is folded into the manifest once:
        disable removes that entry, keeps a file changed since, and the old record is gone."""
        assert run(tmp_path, "enable", "demo", "--backend", "openrc").exit_code == 0
        # What the previous version left: its own record, nothing in the manifest for the entry.
        root = NodeRoot(tmp_path)
        script = tmp_path / "etc/init.d/noderole"
        old = {
            "backend": "openrc",
            "paths": {
                "/etc/init.d/noderole": "file:" + hashlib.sha256(script.read_bytes()).hexdigest(),
                "/etc/runlevels/default/noderole": "link:/etc/init.d/noderole",
                "/etc/periodic/daily/noderole-renew": "file:" + "0" * 64,
            },
        }
        (tmp_path / MANIFEST.lstrip("/")).unlink()
        legacy = tmp_path / LEGACY_RECORD.lstrip("/")
        legacy.write_text(json.dumps(old))
        assert entries(root) == {}
        result = run(tmp_path, "disable")
        assert result.exit_code == 1, result.output  # the periodic job's digest differs: kept
        assert " * removed /etc/init.d/noderole" in result.output
        assert "/etc/periodic/daily/noderole-renew changed" in result.output
        left = tree(tmp_path)
        assert not any(f in left for f in OPENRC_FILES)
        assert "etc/periodic/daily/noderole-renew" in left
        assert not legacy.exists()
        assert {p for p, e in entries(root).items() if e.kind == "boot"} == {
            "/etc/periodic/daily/noderole-renew"
        }

    def test_unknown_kind(self) -> None:
        """boot_entry names the backends it knows."""
        with pytest.raises(noderole.errors.BackendError, match="openrc or systemd"):
            boot_entry("native", noderole_path="/usr/bin/noderole")


def enabled_image(tmp_path: Path) -> Path:
    """An image with the server role's stand-ins, built with `noderole --root IMAGE enable
    server --backend systemd`."""
    image = tmp_path / "image"
    stage_server(image)
    built = subprocess.run(
        [NODEROLE, "--root", str(image), "enable", "server", "--backend", "systemd"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr + built.stdout
    return image


CLOUD_INIT_UNITS = ("cloud-final.service", "cloud-init.target")


def stage_cloud_init(image: Path) -> None:
    """cloud-init's own systemd units from Debian's package (unpacked, never installed),
    enabled as its generator enables them at boot, with ``/usr/bin/cloud-init`` a stand-in
    that succeeds: the ordering is the package's, the work is none."""
    from tests.harness.node_exporter import debian_binary

    units = debian_binary("cloud-init", "lib/systemd/system/cloud-final.service").parent
    system = image / "etc/systemd/system"
    for name in CLOUD_INIT_UNITS:
        (system / name).write_bytes((units / name).read_bytes())
    for wants, name in (("multi-user", "cloud-init.target"), ("cloud-init", "cloud-final.service")):
        (system / f"{wants}.target.wants").mkdir(exist_ok=True)
        (system / f"{wants}.target.wants" / name).symlink_to(f"../{name}")
    stand_in = image / "usr/bin/cloud-init"
    stand_in.parent.mkdir(parents=True, exist_ok=True)
    stand_in.write_text("#!/bin/sh\nexit 0\n")
    stand_in.chmod(0o755)


class TestRealInitSystems:
    def test_openrc_boot_entry_brings_the_role_up(self, namespace: OpenRCNamespace) -> None:
        """Inside the OpenRC namespace: enable, start the default runlevel, the role runs."""
        noderole_cmd = namespace.wrapper  # type: ignore[attr-defined]
        enabled = namespace.sh(f"{noderole_cmd} enable demo")
        assert enabled.rc == 0, enabled.stderr + enabled.stdout
        assert "openrc boot entry" in enabled.stdout
        booted = namespace.sh("openrc default", timeout=120)
        assert booted.rc == 0, booted.stderr + booted.stdout
        assert namespace.sh("rc-service noderole status").rc == 0
        running = namespace.sh(EVENTUALLY.format(check="pgrep -x -f '/bin/sleep 2000'"))
        assert running.rc == 0, namespace.sh("ps -eo pid,args").stdout

    def test_systemd_image_boots_the_role(self, tmp_path: Path) -> None:
        """An image built with `noderole --root IMAGE enable server --backend systemd` boots
        into multi-user.target and the role's services come up, nobody calling systemctl;
        after `disable` on the image the next boot runs none of it."""
        problem = systemd_problem()
        if problem:
            pytest.skip(problem)
        image = enabled_image(tmp_path)

        def boot() -> SystemdNamespace:
            return SystemdNamespace(binds=[CHECKOUT, VENV], seed=image, unit="multi-user.target")

        with boot() as ns:
            node = Node(ns)
            assert node.active("noderole.service") == "active"
            result = ns.show("noderole.service", "Result", "ExecMainStatus")
            assert result == {"Result": "success", "ExecMainStatus": "0"}, node.journal(
                "noderole.service"
            )
            eventually(
                lambda: node.active("konnectivity-server.service") == "active", "konnectivity up"
            )
            assert node.active("k3s.service") == "active"
            code, status = node.status("--wait", "--timeout", "60")
            assert code == 0, status
            assert node.active("noderole-renew.timer") == "active"
        disabled = subprocess.run(
            [NODEROLE, "--root", str(image), "disable"], capture_output=True, text=True, check=False
        )
        assert disabled.returncode == 0, disabled.stderr + disabled.stdout
        with boot() as ns:
            node = Node(ns)
            assert node.show_load("noderole.service") == "not-found"
            assert node.show_load("noderole-renew.timer") == "not-found"
            assert node.active("k3s.service") == "inactive"
            assert node.active("konnectivity-server.service") == "inactive"

    def test_systemd_image_with_cloud_init_boots_the_role(self, tmp_path: Path) -> None:
        """On an image with cloud-init, whose cloud-final.service is ordered after
        multi-user.target (Debian's package, its own unit files), the boot applies the role.
        Before, noderole.service (after cloud-final, wanted by multi-user.target, which a
        target orders after what it wants) closed an ordering cycle, and systemd deleted its
        start job to break it: "Job noderole.service/start deleted to break ordering cycle"
        and nothing of the role ran."""
        problem = systemd_problem()
        if problem:
            pytest.skip(problem)
        image = enabled_image(tmp_path)
        stage_cloud_init(image)
        with SystemdNamespace(binds=[CHECKOUT, VENV], seed=image, unit="multi-user.target") as ns:
            node = Node(ns)
            verify = ns.run("systemd-analyze", "verify", "multi-user.target", check=False)
            assert "ordering cycle" not in verify.stdout + verify.stderr, verify.stderr
            eventually(lambda: node.active("cloud-final.service") == "active", "cloud-final")
            eventually(lambda: node.active("noderole.service") == "active", "noderole.service")
            found = ns.show("noderole.service", "Result", "ExecMainStatus")
            assert found == {"Result": "success", "ExecMainStatus": "0"}, node.journal(
                "noderole.service"
            )
            started = ns.show("noderole.service", "ExecMainStartTimestampMonotonic")
            final = ns.show("cloud-final.service", "ExecMainExitTimestampMonotonic")
            # after cloud-final: the first-boot inputs cloud-init writes are there
            assert int(started["ExecMainStartTimestampMonotonic"]) >= int(
                final["ExecMainExitTimestampMonotonic"]
            )
            eventually(
                lambda: node.active("konnectivity-server.service") == "active", "konnectivity up"
            )


class TestRenderFailsMidway:
    def test_what_was_written_before_the_failure_is_recorded(self, tmp_path: Path) -> None:
        """render writes the runscript, then cannot make the runlevel link (a full /etc, a file
        in the way): the runscript it wrote is recorded, so reset removes it. Before, nothing
        was recorded and reset said "nothing to reset", leaving what render wrote (an enabled
        unit, under systemd) for good."""
        (tmp_path / "etc").mkdir()
        (tmp_path / "etc/runlevels").write_text("in the way\n")
        result = run(tmp_path, "render", "demo", "--backend", "openrc")
        assert result.exit_code == 10, result.output
        assert "cannot write /etc/runlevels/default/prep" in result.output
        assert (tmp_path / "etc/init.d/prep").exists()
        (tmp_path / "etc/runlevels").unlink()
        reset = run(tmp_path, "reset")
        assert reset.exit_code == 0, reset.output
        assert not (tmp_path / "etc/init.d/prep").exists(), reset.output


class TestTheListOfRenderedFiles:
    def test_a_file_noderole_did_not_write_is_never_removed(self, tmp_path: Path) -> None:
        """render removes what it rendered earlier for a service no longer in the role, by its
        list of rendered files; a path listed there that holds a file noderole did not write
        (a hand edit of the list, a fault) is left alone, and a damaged entry (a list in a
        list) is skipped. Before, the operator's file was removed ("removed
        /etc/rancher/k3s/config.yaml"), and a damaged entry ended render in a TypeError."""
        assert run(tmp_path, "render", "demo", "--backend", "openrc").exit_code == 0
        mine = tmp_path / "etc/operators.conf"
        mine.write_text("the operator's\n")
        listed = tmp_path / "var/lib/noderole/rendered-openrc.json"
        listed.write_text(json.dumps(["/etc/operators.conf", ["x"], "/../y", "/etc/init.d/prep"]))
        again = run(tmp_path, "render", "demo", "--backend", "openrc")
        assert again.exit_code == 0, again.output
        assert mine.read_text() == "the operator's\n"
        assert "removed" not in again.output
