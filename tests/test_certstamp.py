"""The stamp of the last full certificate check: trusted only while nothing it covers changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from noderole import recordclass
from noderole.certstamp import STAMP_DIR, CertOutcome, stamped_outcome
from noderole.clock import FakeClock
from tests.test_certs import CA_CERT, CA_KEY, DAY, Node, make_ca
from tests.test_certs import node as node  # the fixture, used by name

FILES = {
    "certificate": lambda node: node.cert_file,
    "key": lambda node: node.key_file,
    "CA certificate": lambda node: node.root.resolve(CA_CERT),
    "CA key": lambda node: node.root.resolve(CA_KEY),
}


def _stamped(node: Node, **overrides: object) -> object:
    return stamped_outcome(node.request(**overrides), root=node.root, now=node.clock.time())


class TestStamp:
    def test_full_check_records_a_stamp_that_answers_reused(self, node: Node) -> None:
        """After a mint, the stamp answers "reused" with the same fingerprint and expiry."""
        minted = node.ensure()
        assert minted.action == "minted"
        assert list(node.root.resolve(STAMP_DIR).iterdir())
        stamped = _stamped(node)
        assert stamped is not None
        assert stamped.action == "reused"  # type: ignore[attr-defined]
        assert stamped.fingerprint == minted.fingerprint  # type: ignore[attr-defined]
        assert stamped.not_after == minted.not_after  # type: ignore[attr-defined]
        assert stamped.cert_path == minted.cert_path  # type: ignore[attr-defined]

    def test_outcome_paths_are_paths_whether_given_as_paths_or_strings(self, node: Node) -> None:
        """CertOutcome hands out Paths for cert_path and key_path, from the stamp as from a full
        check; one built from strings equals (and hashes as) one built from Paths."""
        minted = node.ensure()
        stamped = _stamped(node)
        assert isinstance(stamped, CertOutcome)
        for outcome in (minted, stamped):
            assert isinstance(outcome.cert_path, Path)
            assert (outcome.cert_path, outcome.key_path) == (node.cert_file, node.key_file)
        as_strings = recordclass.evolve(
            minted, cert_path=str(minted.cert_path), key_path=str(minted.key_path)
        )
        assert as_strings == minted
        assert hash(as_strings) == hash(minted)
        assert recordclass.evolve(minted, cert_path="/elsewhere").cert_path == Path("/elsewhere")

    def test_no_stamp_before_any_check(self, node: Node) -> None:
        """With no stamp recorded there is no shortcut."""
        assert _stamped(node) is None

    @pytest.mark.parametrize("which", sorted(FILES))
    def test_changed_content_forces_full_check(self, node: Node, which: str) -> None:
        """Any byte of the certificate, key, CA certificate or CA key changed: full check."""
        node.ensure()
        path = FILES[which](node)
        data = path.read_bytes()
        stat = path.stat()
        path.write_bytes(data[:-2] + (b"A" if data[-2:-1] != b"A" else b"B") + data[-1:])
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # even with the time put back
        assert _stamped(node) is None

    @pytest.mark.parametrize("which", sorted(FILES))
    def test_touched_file_forces_full_check(self, node: Node, which: str) -> None:
        """Same content, new modification time: full check."""
        node.ensure()
        path = FILES[which](node)
        stat = path.stat()
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
        assert _stamped(node) is None

    @pytest.mark.parametrize("which", sorted(FILES))
    def test_replaced_file_forces_full_check(self, node: Node, which: str) -> None:
        """Same content and time under a new inode (a rename over it): full check."""
        node.ensure()
        path = FILES[which](node)
        stat = path.stat()
        copy = path.with_name(path.name + ".new")
        copy.write_bytes(path.read_bytes())
        os.chmod(copy, stat.st_mode & 0o7777)
        os.utime(copy, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        os.replace(copy, path)
        assert _stamped(node) is None

    def test_key_mode_change_forces_full_check(self, node: Node) -> None:
        """A key made readable by others is seen by the full check, not hidden by the stamp."""
        node.ensure()
        os.chmod(node.key_file, 0o644)
        assert _stamped(node) is None
        assert node.ensure().action == "minted"

    def test_key_owner_change_forces_full_check(self, node: Node) -> None:
        """A key given to another user (chown) keeps its bytes, inode, mode and mtime: the
        stamp answered "reused" and the key stayed another user's, while the full check
        replaces it. The owner is part of the stamp."""
        node.ensure()
        os.chown(node.key_file, 999, -1)
        assert _stamped(node) is None
        minted = node.ensure()
        assert minted.action == "minted"
        assert minted.reason.startswith("the existing key belongs to uid 999")
        assert node.key_file.stat().st_uid == os.geteuid()

    def test_second_link_to_the_key_forces_full_check(self, node: Node) -> None:
        """A second hard link to the key (another name others may read) is what the full check
        replaces a key for; the stamp records the link count."""
        node.ensure()
        os.link(node.key_file, node.dir.parent / "copy.key")
        assert _stamped(node) is None
        minted = node.ensure()
        assert (minted.action, minted.reason) == (
            "minted",
            "the existing key has 2 hard links (another name may be read by others)",
        )

    def test_a_stamp_of_the_previous_format_is_a_full_check(self, node: Node) -> None:
        """A stamp written before owners and links were recorded (format 1, each file's inode,
        size, mtime and mode) never answers: it vouches for less than the full check judges."""
        node.ensure()
        (stamp,) = node.root.resolve(STAMP_DIR).iterdir()
        document = json.loads(stamp.read_text())
        paths = [FILES[which](node) for which in ("certificate", "key", "CA certificate", "CA key")]
        infos = [path.stat() for path in paths]
        document["format"] = 1
        document["files"] = [
            *([i.st_ino, i.st_size, i.st_mtime_ns, i.st_mode] for i in infos),
            document["files"][-1],
        ]
        del document["uid"]
        stamp.write_text(json.dumps(document))
        assert _stamped(node) is None
        assert node.ensure().action == "reused"
        assert _stamped(node) is not None  # and the full check wrote one of today's format

    def test_a_stamp_of_another_user_is_a_full_check(
        self, node: Node, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The full check judged the key's owner against the user who checked: under another
        user the stamp is no shortcut."""
        node.ensure()
        monkeypatch.setattr(os, "geteuid", lambda: 4321)
        assert _stamped(node) is None

    def test_new_ca_is_examined(self, node: Node) -> None:
        """A rotated CA (new files) is caught and the pair is re-minted by the full check."""
        node.ensure()
        cert, key = make_ca(now=node.clock.time())
        node.install_ca(cert, key)
        assert _stamped(node) is None
        assert node.ensure().action == "minted"

    def test_changed_request_forces_full_check(self, node: Node) -> None:
        """Other SANs or another common name: full check."""
        node.ensure()
        assert _stamped(node, sans=("other.example",)) is None
        assert _stamped(node, common_name="someone-else") is None
        assert _stamped(node, renew_before_days=30) is None

    def test_renewal_window_forces_full_check(self, node: Node) -> None:
        """Once the renewal window opens, the stamp no longer answers; the full check renews."""
        node.ensure()
        node.clock.advance(365 * DAY - 90 * DAY)
        assert _stamped(node) is None
        assert node.ensure().action == "minted"

    def test_clock_before_the_check_forces_full_check(self, node: Node) -> None:
        """A clock set back before the recorded check: full check."""
        node.ensure()
        node.clock = FakeClock(wall=node.clock.time() - DAY)
        assert _stamped(node) is None

    def test_damaged_stamp_is_ignored(self, node: Node) -> None:
        """A stamp that is not JSON, or lacks a field, is no shortcut."""
        node.ensure()
        (stamp,) = node.root.resolve(STAMP_DIR).iterdir()
        document = json.loads(stamp.read_text())
        del document["fingerprint"]
        stamp.write_text(json.dumps(document))
        assert _stamped(node) is None
        stamp.write_text("{")
        assert _stamped(node) is None

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("not_after", 1e300),  # OverflowError from datetime, not a ValueError
            ("not_after", -1e300),
            ("not_after", float("nan")),
            ("not_after", "soon"),
            ("valid_from", None),
            ("reuse_until", [1]),
            ("fingerprint", {"a": 1}),
        ],
    )
    def test_stamp_with_a_value_of_another_kind_is_ignored(
        self, node: Node, field: str, value: object
    ) -> None:
        """A stamp whose field holds what no check wrote (a disk fault, an editor) is no
        shortcut, and never an error: the full check runs (it raised OverflowError for a time
        past what datetime holds, failing every apply of the node)."""
        node.ensure()
        (stamp,) = node.root.resolve(STAMP_DIR).iterdir()
        document = json.loads(stamp.read_text())
        document[field] = value
        stamp.write_text(json.dumps(document))
        assert _stamped(node) is None
        assert node.ensure().action == "reused"

    def test_reuse_by_full_check_records_a_stamp(self, node: Node) -> None:
        """A full check that reuses (stamp removed) records a new stamp."""
        node.ensure()
        (stamp,) = node.root.resolve(STAMP_DIR).iterdir()
        stamp.unlink()
        assert node.ensure().action == "reused"
        assert _stamped(node) is not None


PROBE = """
import json, sys, time
from noderole.clock import SystemClock
from noderole.records import MintCertificate
from noderole.root import NodeRoot
from noderole.stepcontext import StepContext
from noderole.steps import run_step, warm_certificates

root, request = NodeRoot(sys.argv[1]), MintCertificate(**json.loads(sys.argv[2]))
thread = warm_certificates([request], root=root, now=time.time())
warmed = thread is not None
if thread is not None:
    thread.join()
signing = "cryptography.hazmat.backends.openssl.backend" in sys.modules
result = run_step(request, StepContext(service="s", root=root, clock=SystemClock()))
pathlib = "pathlib" in sys.modules
print(json.dumps({
    "warmed": warmed,
    "action": result.certificate.action,
    "x509": "cryptography.x509" in sys.modules,
    "signing warmed": signing,
    "pathlib": pathlib,
    "paths": [type(result.certificate.cert_path).__name__, str(result.certificate.key_path)],
}))
"""


def _probe(node: Node) -> dict[str, object]:
    request = node.request()
    fields = {
        "directory": request.directory,
        "ca_cert": request.ca_cert,
        "ca_key": request.ca_key,
        "common_name": request.common_name,
        "sans": list(request.sans),
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(node.path), json.dumps(fields)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


class TestCertificateStep:
    def test_unchanged_pair_is_reused_without_importing_x509(self, node: Node) -> None:
        """A certificate step on an unchanged, stamped pair neither warms nor imports x509,
        nor pathlib; its outcome's paths are still Paths, made when asked for."""
        node.clock = FakeClock(wall=node.clock.time() - 60)  # the check happened a minute ago
        node.ensure()
        assert _probe(node) == {
            "warmed": False,
            "action": "reused",
            "x509": False,
            "signing warmed": False,
            "pathlib": False,
            "paths": ["PosixPath", str(node.key_file)],
        }

    def test_missing_pair_warms_the_import_and_mints(self, node: Node) -> None:
        """Nothing stamped: the x509 import, and what signing imports on first use
        (cryptography's OpenSSL backend), are done early; then the step mints, reading and
        writing through strings: a fresh apply does not import pathlib for it (6M
        instructions on the main thread while the x509 import competes for it)."""
        assert _probe(node) == {
            "warmed": True,
            "action": "minted",
            "x509": True,
            "signing warmed": True,
            "pathlib": False,
            "paths": ["PosixPath", str(node.key_file)],
        }

    def test_changed_pair_is_checked_in_full(self, node: Node) -> None:
        """A stamped pair whose certificate changed: warmed, fully checked (here: re-minted)."""
        node.clock = FakeClock(wall=node.clock.time() - 60)
        node.ensure()
        node.cert_file.write_bytes(node.cert_file.read_bytes().replace(b"\n", b"\r\n", 1))
        result = _probe(node)
        assert result["warmed"] is True
        assert result["x509"] is True


def test_stamp_directory_is_private(node: Node) -> None:
    """Stamps live in a directory only root can read (they describe the key file)."""
    node.ensure()
    assert (Path(node.root.resolve(STAMP_DIR)).stat().st_mode & 0o077) == 0
