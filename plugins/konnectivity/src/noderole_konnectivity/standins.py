"""The rehearsal stand-in for ``konnectivity-server``.

It checks what the real server checks at start (``--server-port=0`` whenever ``--uds-name`` is
set; the cluster certificate, key and kubeconfig exist), records its argv as JSON in
``$NODEROLE_ROOT/run/konnectivity-server.argv``, binds the UDS when the path fits in a socket
address, answers ``/healthz`` with 200 ``ok`` (and ``/readyz`` with 500, as the real one does
until an agent connects) on ``--health-port`` on 127.0.0.1, logs a line, and stays up until
SIGTERM. It writes only under ``$NODEROLE_ROOT`` (default ``/``).
"""

from __future__ import annotations

__all__ = ["KONNECTIVITY_STANDIN"]

KONNECTIVITY_STANDIN = r'''#!/usr/bin/env python3
"""Rehearsal stand-in for konnectivity-server (from the noderole-konnectivity plugin)."""
import http.server
import json
import os
import signal
import socket
import sys
import tempfile

ROOT = os.environ.get("NODEROLE_ROOT") or "/"


def node(path):
    return os.path.join(ROOT, path.lstrip("/"))


def record_argv(argv):
    target = node("/run/konnectivity-server.argv")
    os.makedirs(os.path.dirname(target), exist_ok=True)
    fd, scratch = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".standin-")
    with os.fdopen(fd, "w") as handle:
        json.dump(argv, handle)
    os.replace(scratch, target)


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/healthz":
            status, body = 200, b"ok"
        elif self.path == "/readyz":
            status, body = 500, b"no agent connected"
        else:
            status, body = 404, b"not found"
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    argv = sys.argv[1:]
    record_argv([sys.argv[0], *argv])
    flags = {a[2:].split("=", 1)[0]: a.split("=", 1)[1] for a in argv if "=" in a}
    if "uds-name" in flags and flags.get("server-port") != "0":
        print("konnectivity-server: --server-port must be 0 with --uds-name", file=sys.stderr)
        return 1
    for flag in ("cluster-cert", "cluster-key", "kubeconfig"):
        if flag in flags and not os.path.exists(node(flags[flag])):
            print("konnectivity-server: --%s %s: no such file" % (flag, flags[flag]),
                  file=sys.stderr)
            return 1
    if "uds-name" in flags:
        path = node(flags["uds-name"])
        if "--delete-existing-uds-file" in argv and os.path.exists(path):
            os.unlink(path)
        uds = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            uds.bind(path)
            uds.listen(8)
        except OSError:
            pass  # a scratch root can make the path longer than a socket address allows
    port = int(flags.get("health-port", "8092"))
    server = http.server.HTTPServer(("127.0.0.1", port), Health)
    print("konnectivity-server stand-in: serving /healthz on 127.0.0.1:%d" % port, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
'''
"""The stand-in program's text (``/usr/local/bin/konnectivity-server`` in a rehearsal root)."""
