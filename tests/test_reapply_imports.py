"""A re-apply that changes nothing imports neither cryptography's x509 nor importlib.metadata,
nor pathlib (with urllib.parse and ipaddress), nor the readiness probes.

Structural, not timed: a fresh ``noderole apply`` process reports the modules it imported. The
plugin is a real installed distribution (``.dist-info`` with an entry point, on PYTHONPATH) whose
service mints a serving certificate from a CA before it starts; a second case re-applies the
shipped k3s and konnectivity plugins' server role, whose services wait for paths, write files
and mint a certificate.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

from tests.modules_probe import run_and_list_modules
from tests.test_certs import CA_CERT, CA_KEY, Node, make_ca
from tests.test_engine import SLEEPER
from tests.test_engine import node as node  # the fixture: ends the root's processes

PLUGIN = """
import noderole

@noderole.hookimpl
def noderole_services():
    return [
        noderole.Service(
            name="tls",
            roles=["demo"],
            command=["/usr/local/bin/sleeper"],
            pre_start=[
                noderole.MintCertificate(
                    directory="/var/lib/tls",
                    ca_cert=%(ca_cert)r,
                    ca_key=%(ca_key)r,
                    common_name="tls",
                    sans=["tls.example"],
                )
            ],
        )
    ]
"""

PATHLIB = ("pathlib", "urllib", "ipaddress")
"""pathlib and what it imports (urllib.parse, which imports ipaddress): about 17M instructions,
a tenth of ``import click``. A re-apply reads and writes the node through ``NodeRoot.local``'s
strings; a Path is made only when a caller asks for one (``StepContext.resolve``,
``CertOutcome.cert_path``)."""

REAPPLY_FORBIDDEN = (
    "attr",
    "_hashlib",
    "ctypes",
    "noderole.supervisor.probes",
    "noderole.metrics",
    "secrets",
    "shutil",
    "subprocess",
    "tomllib",
    "yaml",
    *PATHLIB,
)
"""What this re-apply must not import: attrs (records are built by noderole.recordclass), OpenSSL
through hashlib (definitions and files are digested by the interpreter's own SHA-256), and, as
its service has no wait, neither inotify's ctypes nor the probes; the supervisor runs, so nothing
is spawned (no subprocess); the node has no metrics directory, the output is no terminal (shutil
sizes one), temporary file names come from os.urandom (no secrets, hmac, random), and its
unchanged config.toml was parsed by the first apply (the parsed document is cached with its text:
no TOML parser); no pathlib (see :data:`PATHLIB`), and no ipaddress for its DNS name SAN."""

SHIPPED_REAPPLY_FORBIDDEN = (
    "cryptography",
    "importlib.metadata",
    "noderole.supervisor.probes",
    "noderole.partial",
    "noderole_k3s.standins",
    "noderole_konnectivity.standins",
    "locale",
    "encodings.utf_8_sig",
    "noderole.backends._protocol",
    "traceback",
    "textwrap",
    "json",
    *PATHLIB,
)
"""What re-applying the shipped server role must not import: no json package (noderole's records
and messages are read and written through the interpreter's C accelerator, _json, by
noderole.supervisor._jsontext: json's import compiles six regular expressions, ~5M
instructions); no x509 (the certificate is unchanged since its stamp), no entry-point scan (the
cache answers), no probes (the paths konnectivity-server waits for are there at the first look;
both services run, so no readiness is awaited and no spec sent), and no pathlib; its SANs
(``localhost``, an IPv4 address) are checked without ipaddress. The plugins' rehearsal stand-ins
are loaded only by a rehearsal, and what an apply does around a broken plugin (noderole.partial)
only when a plugin is broken. No gettext lookup (its first imports locale, 4M instructions):
noderole's commands make their own help and version options; first-boot.env's byte-order mark is
skipped without the utf-8-sig codec's module; the backends' protocol classes, read by type
checkers, are not built; and no traceback module (with textwrap, about 0.9 ms here): the engine
prints a traceback only for a console's bug."""

STATUS_FORBIDDEN = (
    "attr",
    "locale",
    "noderole.atomic",
    "noderole.recordclass",
    "noderole.records",
    "noderole.plan",
    "noderole.config",
    "pluggy",
    "reapply_probe_plugin",
    "importlib.metadata",
    "cryptography",
    "fcntl",
    "noderole.engine",
    "noderole.steps",
    "noderole.supervisor._proc",
    "noderole.supervisor._spec",
    "noderole.supervisor._state",
    "noderole.supervisor.probes",
    "ipaddress",
    "pathlib",
    "secrets",
    "select",
    "shlex",
    "signal",
    "socket",
    "struct",
    "subprocess",
    "tomllib",
    "urllib",
)
"""What ``status`` of the applied role must not import: no attrs, records or planning (it shows
the recorded plan as it is; no record class), no plugin or plugin machinery, no engine, no
process spec or readiness probes (it sends none), nothing to write files atomically or name
temporary ones (it writes none) or to spawn a supervisor (one runs), no socket module (its
one request needs only the interpreter's ``_socket``, not ``socket``'s enums and selectors),
no pathlib (its files are named by
``NodeRoot.local``, as strings; pathlib brings urllib.parse and ipaddress), no TOML parser (no
config file, or one parsed before), no shell quoting (it prints no command line), no signal
module (it kills nothing; signal builds three enums at import), no state file module (its
supervisor answers: the state file is read only when none does), and no extension module it
does not call: no lock taken (fcntl), no descriptor waited on (select, selectors), no C struct
unpacked (struct)."""


def _install(site: Path) -> None:
    info = site / "reapply_probe-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: reapply-probe\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[noderole]\nreapplyprobe = reapply_probe_plugin\n")
    (site / "reapply_probe_plugin.py").write_text(
        textwrap.dedent(PLUGIN % {"ca_cert": CA_CERT, "ca_key": CA_KEY})
    )


def _apply(root: Path, site: Path, command: str = "apply") -> tuple[dict[str, Any], list[str]]:
    """Run ``noderole --root ROOT COMMAND --json`` (``apply demo`` or ``status``) with the
    probe plugin installed; its JSON answer and the modules it imported."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *sys.path])}
    env.pop("NODEROLE_ROOT", None)
    argv = ["--root", str(root), *(["apply", "demo"] if command == "apply" else [command])]
    stdout, modules = run_and_list_modules([*argv, "--json"], env=env)
    return json.loads(stdout), modules


def test_unchanged_reapply_imports_no_x509_and_no_metadata(node: object, tmp_path: Path) -> None:
    """First apply mints (x509 imported); the re-apply reuses from the stamp without x509 and
    finds its plugin through the entry-point cache without importlib.metadata; status then
    imports no plugin, no engine and no process spec."""
    cert_node = Node(tmp_path)
    cert, key = make_ca(now=cert_node.clock.time())
    cert_node.install_ca(cert, key)
    sleeper = tmp_path / "usr/local/bin/sleeper"
    sleeper.parent.mkdir(parents=True, exist_ok=True)
    sleeper.write_text(SLEEPER)
    sleeper.chmod(0o755)
    site = tmp_path.parent / f"{tmp_path.name}-site"
    _install(site)
    # Installed a while ago: the entry-point cache stores only settled installations.
    old = (site / "reapply_probe-1.0.dist-info/entry_points.txt").stat().st_mtime - 60
    os.utime(site / "reapply_probe-1.0.dist-info/entry_points.txt", (old, old))

    first, modules = _apply(tmp_path, site)
    (tls,) = [s for s in first["services"] if s["name"] == "tls"]
    assert tls["status"] == "started"
    assert "cryptography.x509" in modules

    again, modules = _apply(tmp_path, site)
    (tls,) = [s for s in again["services"] if s["name"] == "tls"]
    assert tls["status"] == "running"
    assert "cryptography.x509" not in modules
    assert "importlib.metadata" not in modules
    # Nothing waited for, no metrics directory, no terminal: none of what those need.
    assert [m for m in modules if m.startswith(REAPPLY_FORBIDDEN)] == []

    status, modules = _apply(tmp_path, site, "status")  # config.toml is there, unchanged
    assert [s["state"] for s in status["services"] if s["name"] == "tls"] == ["running"]
    assert [m for m in modules if m.startswith(STATUS_FORBIDDEN)] == []

    (tmp_path / "etc/noderole/config.toml").unlink()  # status reads no settings then
    status, modules = _apply(tmp_path, site, "status")
    assert [s["state"] for s in status["services"] if s["name"] == "tls"] == ["running"]
    assert [m for m in modules if m.startswith(STATUS_FORBIDDEN)] == []


def test_shipped_server_role_reapply_imports_no_pathlib_and_no_probes(tmp_path: Path) -> None:
    """The shipped k3s and konnectivity plugins' server role, staged as a rehearsal stages it:
    the first apply starts both services (konnectivity-server waits for k3s's CA and mints);
    the second changes nothing and imports none of SHIPPED_REAPPLY_FORBIDDEN."""
    from noderole.operations import Operations
    from noderole.rehearsal import stage_rehearsal
    from noderole.root import NodeRoot
    from noderole.testing import end_node_processes

    disabled = ("node-exporter",)  # the docs' example plugin, installed beside the shipped ones
    ops = Operations(root=NodeRoot(tmp_path), disabled_plugins=disabled)
    stage_rehearsal(ops.root, ops.plugins, ops.node_for("server"))
    env = {k: v for k, v in os.environ.items() if k != "NODEROLE_ROOT"}
    env["NODEROLE_K3S_STANDIN_DELAY"] = "0"
    argv = ["--root", str(tmp_path), "--disable-plugin", *disabled, "apply", "server", "--json"]
    try:
        stdout, _ = run_and_list_modules(argv, env=env)
        first = {s["name"]: s["status"] for s in json.loads(stdout)["services"]}
        assert (first["k3s"], first["konnectivity-server"]) == ("started", "started"), first

        stdout, modules = run_and_list_modules(argv, env=env)
        again = json.loads(stdout)["services"]
        assert {s["name"]: s["status"] for s in again if s["name"] != "k3s-cluster-init"} == {
            "net": "done",
            "cgroups": "done",
            "k3s": "running",
            "konnectivity-server": "running",
        }
        konnectivity = next(s for s in again if s["name"] == "konnectivity-server")
        details = [step["detail"] for step in konnectivity["steps"]]
        assert any(d.startswith("waited ") for d in details), details  # its wait did run
        assert any(d.startswith("reused: ") for d in details), details  # from the stamp
        assert [m for m in modules if m.startswith(SHIPPED_REAPPLY_FORBIDDEN)] == []
    finally:
        assert end_node_processes(tmp_path) == []
