"""The rehearsal stand-in for ``k3s``: a small python3 program behaving like k3s where it matters.

``k3s server`` writes, after a short delay, a k3s-like server CA (ECDSA P-256, serial 0, CN
``k3s-server-ca@<unix time>``, key stored as ``EC PRIVATE KEY``, made with ``openssl``) and an
admin kubeconfig, then stays up. Like k3s it keeps an existing CA across restarts, so a restarted
k3s does not force every certificate signed by it to be re-minted. ``k3s agent`` only stays up.
Under a systemd unit of ``Type=notify`` both then tell systemd they are up (``READY=1`` on
``$NOTIFY_SOCKET``), as k3s does.
Both record their argv and the *names* of their ``K3S_*`` variables (never the values) in
``$NODEROLE_ROOT/run/k3s-<mode>.json``, and exit cleanly on SIGTERM. Everything is written under
``$NODEROLE_ROOT`` (default ``/``), atomically, so a waiter never sees half a file.
"""

from __future__ import annotations

__all__ = ["K3S_STANDIN"]

K3S_STANDIN = r'''#!/usr/bin/env python3
"""Rehearsal stand-in for k3s (from the noderole-k3s plugin). Not k3s."""
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.environ.get("NODEROLE_ROOT") or "/"
DELAY = float(os.environ.get("NODEROLE_K3S_STANDIN_DELAY", "0.5"))
TLS = "/var/lib/rancher/k3s/server/tls"
KUBECONFIG = "/etc/rancher/k3s/k3s.yaml"


def node(path):
    return os.path.join(ROOT, path.lstrip("/"))


def write(path, data, mode):
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, scratch = tempfile.mkstemp(dir=directory, prefix=".standin-")
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(scratch, mode)
    os.replace(scratch, path)


def openssl(*args):
    return subprocess.run(["openssl", *args], check=True, capture_output=True).stdout


def make_ca():
    cert, key = node(TLS + "/server-ca.crt"), node(TLS + "/server-ca.key")
    if os.path.exists(cert) and os.path.exists(key):
        return  # k3s keeps its CA across restarts
    with tempfile.TemporaryDirectory() as scratch:
        raw_key, raw_cert = scratch + "/key.pem", scratch + "/ca.crt"
        openssl(
            "req", "-x509", "-set_serial", "0", "-newkey", "ec",
            "-pkeyopt", "ec_paramgen_curve:P-256",
            "-subj", "/CN=k3s-server-ca@%d" % int(time.time()), "-days", "3650", "-nodes",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign",
            "-keyout", raw_key, "-out", raw_cert,
        )
        write(key, openssl("ec", "-in", raw_key), 0o600)
        with open(raw_cert, "rb") as handle:
            write(cert, handle.read(), 0o644)


def make_kubeconfig():
    with open(node(TLS + "/server-ca.crt"), "rb") as handle:
        ca = base64.b64encode(handle.read()).decode()
    text = (
        "apiVersion: v1\n"
        "clusters:\n"
        "- cluster:\n"
        "    certificate-authority-data: %s\n"
        "    server: https://127.0.0.1:6443\n"
        "  name: default\n"
        "contexts:\n"
        "- context:\n"
        "    cluster: default\n"
        "    user: default\n"
        "  name: default\n"
        "current-context: default\n"
        "kind: Config\n"
        "preferences: {}\n"
        "users:\n"
        "- name: default\n"
        "  user:\n"
        "    token: rehearsal-stand-in\n"
    ) % ca
    write(node(KUBECONFIG), text.encode(), 0o600)


def notify_ready():
    """Tell systemd this k3s is up, as k3s does (sd_notify READY=1), when it runs a unit of
    Type=notify: $NOTIFY_SOCKET names the socket ('@' for an abstract one)."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(address)
        sock.sendall(b"READY=1")


def main():
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode not in ("server", "agent"):
        print("k3s stand-in: usage: k3s server|agent [flags]", file=sys.stderr)
        return 2
    record = {"argv": sys.argv, "env": sorted(k for k in os.environ if k.startswith("K3S_"))}
    write(node("/run/k3s-%s.json" % mode), json.dumps(record).encode(), 0o644)
    print("k3s stand-in: %s starting" % mode, flush=True)
    if mode == "server":
        time.sleep(DELAY)
        make_ca()
        make_kubeconfig()
        print("k3s stand-in: wrote the server CA and %s" % KUBECONFIG, flush=True)
    notify_ready()
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
'''
"""The stand-in program's text (``/usr/local/bin/k3s`` in a rehearsal root)."""
