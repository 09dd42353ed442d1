"""What is at tls.crt, tls.key and the CA's paths when it is not what a mint wrote.

A FIFO (opening one for reading waits for a writer: ``apply``, ``renew`` and ``cert check``
hung for good, holding the node lock) or a directory (a traceback from the stamp's check, a
descriptor number for a path) is refused at once, naming the file, what it is and the fix,
wherever the pair is read: the mint, the stamp of its last check, and the checks that write
nothing (``renew``, ``cert check --role``, ``apply --dry-run``), which judge the pair by the
mint's own rules (the key's mode, owner and links, symbolic links refused).

A read that would block is bounded: after a deadline every FIFO of the test is opened for
writing, which lets the blocked reader go, and the test fails; no thread is left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from noderole.certstamp import STAMP_DIR, file_parts
from noderole.cli import cli
from noderole.errors import CertificateError
from noderole.testing import ScratchRoot
from noderole_k3s.testing import K3S_CA_KEY
from tests.test_certs import CA_CERT, CA_KEY, KONN_DIR, Node
from tests.test_certs import node as node  # the fixture, used by name
from tests.test_renew import CERT, _App
from tests.test_renew import app as app  # the fixtures: role r applied once (a stamp recorded)
from tests.test_renew import sans as sans

KEY = "/var/lib/proxy/tls.key"
DEADLINE = 30.0
"""Seconds a call may take before it counts as blocked: a guard against a hang, not a measure."""


def bounded(call: Callable[[], Any], fifos: list[Path]) -> Any:
    """``call()``'s result or the exception it raised. When it has not returned by
    :data:`DEADLINE`, each of ``fifos`` is opened for writing (a reader blocked on it returns),
    the thread is joined, and the test fails."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:  # handed to the test below
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(DEADLINE)
    if thread.is_alive():
        while thread.is_alive():
            for fifo in fifos:
                with contextlib.suppress(OSError):  # no reader on it (yet): look again
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            thread.join(0.1)
        pytest.fail(f"blocked on a FIFO among {fifos}: a reader waited for a writer")
    return outcome[0]


def plant(path: Path, kind: str) -> list[Path]:
    """Replace ``path`` with a FIFO or a directory; the FIFOs to release if a read blocks."""
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
        return [path]
    path.mkdir()
    return []


KINDS = {"fifo": "a FIFO", "directory": "a directory"}


class TestTheMint:
    @pytest.mark.parametrize("kind", sorted(KINDS))
    @pytest.mark.parametrize("name", ["tls.crt", "tls.key"])
    def test_is_refused_at_once_naming_the_file(self, node: Node, name: str, kind: str) -> None:
        """A mint over a FIFO waited for a writer for ever; over a directory it ended in
        ``IsADirectoryError: ... 4``. Both are a CertificateError naming the file and the fix,
        and nothing is written."""
        node.ensure()
        path = node.dir / name
        fifos = plant(path, kind)
        error = bounded(node.ensure, fifos)
        assert isinstance(error, CertificateError), error
        assert str(error) == (
            f"refusing to use {path}: not a regular file ({KINDS[kind]}); remove it and run again"
        )

    @pytest.mark.parametrize("kind", sorted(KINDS))
    def test_cli_mint_exits_7(self, node: Node, kind: str) -> None:
        """``cert mint`` (a process of its own, bounded by a timeout) exits 7 with the message,
        not a hang (exit 124 under timeout) or a traceback (exit 1)."""
        node.ensure()
        fifos = plant(node.cert_file, kind)
        command = [
            sys.executable, "-m", "noderole", "--root", str(node.path), "cert", "mint",
            "--dir", KONN_DIR, "--ca-cert", CA_CERT, "--ca-key", CA_KEY,
            "--cn", "konnectivity-server", "--sans", "a.example",
        ]  # fmt: skip
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            _, err = process.communicate(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            pytest.fail(f"cert mint blocked on {fifos}")
        assert process.returncode == 7, err
        assert f"refusing to use {node.cert_file}: not a regular file" in err.decode()
        assert b"Traceback" not in err


class TestTheStamp:
    @pytest.mark.parametrize("kind", sorted(KINDS))
    @pytest.mark.parametrize("which", ["tls.crt", "tls.key", "CA key"])
    def test_is_no_shortcut_and_never_waits(self, node: Node, which: str, kind: str) -> None:
        """The stamp's file check answers None (a full check) for a FIFO or a directory, at
        once, never raising (a directory raised IsADirectoryError out of the warm-up)."""
        node.ensure()
        paths = [
            node.cert_file,
            node.key_file,
            node.root.resolve(CA_CERT),
            node.root.resolve(CA_KEY),
        ]
        target = {"tls.crt": paths[0], "tls.key": paths[1], "CA key": paths[3]}[which]
        assert file_parts(paths) is not None
        fifos = plant(target, kind)
        assert bounded(lambda: file_parts(paths), fifos) is None


class TestTheNode:
    """Role ``r`` applied once (its stamp recorded); then tls.crt, tls.key (or the CA key,
    which the stamp's check reads too) is replaced."""

    @pytest.mark.parametrize("kind", sorted(KINDS))
    @pytest.mark.parametrize("path", [CERT, KEY, K3S_CA_KEY])
    def test_apply_fails_that_service_and_starts_the_others(
        self, app: _App, node_root: ScratchRoot, path: str, kind: str
    ) -> None:
        """apply hung with nothing printed and no service started (a FIFO), or ended in a
        traceback (a directory). Now the service's step fails naming the file and the fix, and
        the other services start."""
        assert list(node_root.resolve(STAMP_DIR).iterdir())
        app.recorder.stop(["proxy", "db"])
        fifos = plant(node_root.resolve(path), kind)
        report = bounded(lambda: app.apply(app.plan("r"), app.recorder), fifos)
        assert not isinstance(report, BaseException), report
        services = {s.name: s for s in report.services}
        assert services["db"].status == "started", services["db"]
        assert services["proxy"].status == "failed"
        local = node_root.resolve(path)
        wrong = f"{local}: not a regular file ({KINDS[kind]})"
        if path == K3S_CA_KEY:  # read by the stamp's check without waiting, then by the CA's
            assert f"cannot read CA key {wrong}" in services["proxy"].reason
        else:
            assert f"refusing to use {wrong}; remove it" in services["proxy"].reason

    @pytest.mark.parametrize("kind", sorted(KINDS))
    @pytest.mark.parametrize("path", [CERT, KEY])
    def test_renew_and_check_say_what_is_wrong(
        self, app: _App, node_root: ScratchRoot, path: str, kind: str
    ) -> None:
        """renew and cert check --role hung on a FIFO; on a directory they called the pair
        "due: no existing certificate". Both fail naming the file, exit 1."""
        fifos = plant(node_root.resolve(path), kind)
        renewed = bounded(lambda: CliRunner().invoke(cli, ["renew"], obj=app), fifos)
        assert renewed.exit_code == 1, renewed.output
        assert "proxy: failed: cannot renew" in renewed.stdout
        assert "not a regular file" in renewed.stdout
        checked = bounded(
            lambda: CliRunner().invoke(cli, ["cert", "check", "--role", "r", "--json"], obj=app),
            fifos,
        )
        assert checked.exit_code == 1, checked.output
        (check,) = json.loads(checked.stdout)
        local = node_root.resolve(path)
        assert check["error"] == (
            f"refusing to use {local}: not a regular file ({KINDS[kind]}); remove it and run again"
        )
        assert len(app.recorder.started) == 2  # nothing restarted


def _give_away(local: Path) -> None:
    os.chown(local, 999, -1)


def _loosen(local: Path) -> None:
    os.chmod(local, 0o644)


def _link_twice(local: Path) -> None:
    os.link(local, local.parent.parent / "copy.key")


def _symlink(local: Path) -> None:
    copy = local.parent.parent / "elsewhere.crt"
    copy.write_bytes(local.read_bytes())
    local.unlink()
    local.symlink_to(copy)


CHANGES: dict[str, tuple[Callable[[Path], None], str, str]] = {
    "key readable by others": (_loosen, KEY, "the existing key is readable by others (mode 0644)"),
    "key of another user": (
        _give_away,
        KEY,
        f"the existing key belongs to uid 999, not to uid {os.geteuid()} that mints it",
    ),
    "key with two links": (
        _link_twice,
        KEY,
        "the existing key has 2 hard links (another name may be read by others)",
    ),
}


class TestTheChecksJudgeAsTheMint:
    """renew, cert check --role and apply --dry-run judge the pair on disk by the mint's own
    rules: before, they read the key's bytes alone (called good a key readable by others, or
    another user's) and followed a symbolic link the mint refuses."""

    @pytest.mark.parametrize("change", sorted(CHANGES))
    def test_what_apply_replaces_is_due(
        self, app: _App, node_root: ScratchRoot, change: str
    ) -> None:
        alter, path, reason = CHANGES[change]
        alter(node_root.resolve(path))
        checked = CliRunner().invoke(cli, ["cert", "check", "--role", "r", "--json"], obj=app)
        assert checked.exit_code == 1, checked.output
        (check,) = json.loads(checked.stdout)
        assert (check["due"], check["reason"], check["error"]) == (True, reason, "")
        rows = {row["name"]: row for row in app.dry_run(app.plan("r"), app.recorder)}
        assert rows["proxy"]["certificates"] == [{"path": CERT, "verdict": f"mint: {reason}"}]
        proxy = {s.name: s for s in app.renew(app.plan("r"), app.recorder).services}["proxy"]
        assert proxy.status == "restarted", proxy
        assert f"re-minted ({reason})" in proxy.reason
        key = node_root.resolve(KEY).stat()
        assert (key.st_uid, key.st_mode & 0o077, key.st_nlink) == (os.geteuid(), 0, 1)

    def test_a_symbolic_link_at_the_certificate_is_an_error(
        self, app: _App, node_root: ScratchRoot
    ) -> None:
        """apply fails the step over a link at tls.crt; the checks called the pair good."""
        local = node_root.resolve(CERT)
        _symlink(local)
        refused = f"refusing to use {local}: it is a symbolic link"
        checked = CliRunner().invoke(cli, ["cert", "check", "--role", "r", "--json"], obj=app)
        assert checked.exit_code == 1, checked.output
        (check,) = json.loads(checked.stdout)
        assert check["error"].startswith(refused)
        renewed = CliRunner().invoke(cli, ["renew"], obj=app)
        assert renewed.exit_code == 1, renewed.output
        assert refused in renewed.stdout
        applied = {s.name: s for s in app.apply(app.plan("r"), app.recorder).services}
        assert refused in applied["proxy"].reason
        assert local.is_symlink()

    def test_the_checks_remove_no_temporary_file(self, app: _App, node_root: ScratchRoot) -> None:
        """The checks write nothing: a killed writer's temporary file is left to the mint."""
        temp = node_root.resolve(CERT).parent / ".tls.crt.abcdef.tmp"
        temp.write_bytes(b"half")
        checked = CliRunner().invoke(cli, ["cert", "check", "--role", "r"], obj=app)
        assert checked.exit_code == 0, checked.output
        assert temp.exists()


class TestTheStampOnTheNode:
    def test_apply_replaces_a_key_given_to_another_user(
        self, app: _App, node_root: ScratchRoot
    ) -> None:
        """A re-apply answered from the stamp kept a key chown-ed to another user (only a full
        check, once the stamp was deleted, replaced it). The owner is in the stamp: apply
        re-mints at once."""
        assert app.apply(app.plan("r"), app.recorder).ok  # stamped, and reused from the stamp
        _give_away(node_root.resolve(KEY))
        proxy = {s.name: s for s in app.apply(app.plan("r"), app.recorder).services}["proxy"]
        assert proxy.status == "restarted", proxy
        assert "the existing key belongs to uid 999" in proxy.reason
        assert node_root.resolve(KEY).stat().st_uid == os.geteuid()
