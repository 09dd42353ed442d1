"""A re-apply that changes nothing imports neither cryptography's x509 nor importlib.metadata.

Structural, not timed: a fresh ``noderole apply`` process reports the modules it imported. The
plugin is a real installed distribution (``.dist-info`` with an entry point, on PYTHONPATH) whose
service mints a serving certificate from a CA before it starts.
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
)
"""What this re-apply must not import: attrs (records are built by noderole.recordclass), OpenSSL
through hashlib (definitions and files are digested by the interpreter's own SHA-256), and, as
its service has no wait, neither inotify's ctypes nor the probes; the supervisor runs, so nothing
is spawned (no subprocess); the node has no metrics directory, the output is no terminal (shutil
sizes one), temporary file names come from os.urandom (no secrets, hmac, random), and its
unchanged config.toml was parsed by the first apply (the parsed document is cached with its text:
no TOML parser)."""

STATUS_FORBIDDEN = (
    "attr",
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
the recorded plan as it is), no plugin or plugin machinery, no engine, no process spec or
readiness probes (it sends none), nothing to name temporary files (it writes none) or to
spawn a supervisor (one runs), no socket module (its one request needs only the interpreter's
``_socket``, not ``socket``'s enums and selectors), no pathlib (its files are named by
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
