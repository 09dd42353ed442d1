"""``noderole apply server`` against ``openrc-run`` doing the same boot, with the same stand-ins.

Both sides start the same two services, ``k3s`` then ``konnectivity-server``, whose programs are
the plugins' rehearsal stand-ins (``noderole_standins``: python3 scripts) installed at the same
node paths (``/usr/local/bin/k3s``, ``/usr/local/bin/konnectivity-server``). The inputs are
present before every timed run (k3s's server CA + key and ``/etc/rancher/k3s/k3s.yaml``, made once
by running the k3s stand-in), and the konnectivity certificate directory is emptied before every
fresh run, so each fresh run mints a serving certificate before konnectivity may start (its
stand-in refuses to start without one). Only the orchestration differs:

- **noderole**: a scratch root staged once with :func:`noderole.cli._rehearse.stage_rehearsal`.
  Timed: ``noderole --root R --disable-plugin node-exporter apply server`` as a fresh process
  (what a boot does), from the host, ``time.time_ns()`` before ``subprocess.run`` to its return.
  The native supervisor daemon is started by that apply (it exits after ``stop``).
- **peer**: Debian's OpenRC 0.45 in a private mount + pid namespace
  (:class:`tests.harness.openrc_ns.OpenRCNamespace`) with two seed-style runscripts: ``k3s``
  and ``konnectivity-server``, the latter the seed's text (docs/seed/konnectivity-server.initd)
  with ``need net`` left out and the Go certificate tool replaced by an openssl-CLI shell function
  (see :data:`KONNECTIVITY_INITD`). Timed: ``rc-service k3s start && rc-service
  konnectivity-server start``, measured *inside* the namespace with ``date +%s%N`` before and
  after, so the harness's request pipe and its 5 ms reaping poll are not counted.

Rows (milliseconds, lower is better; the issue states no target):

1. fresh apply: the command returns with both services started (cert minted in this run);
2. the same runs, until konnectivity's ``/healthz`` answers: a host thread polls the health port
   every millisecond from the start stamp (the namespace shares the host's network; both stamps
   are CLOCK_REALTIME, so inside and outside times compare);
3. re-apply, nothing changed: the same command again while both run (noderole checks the
   certificate and definitions; OpenRC only sees that both are started).

Runs alternate between the two sides (one untimed warm-up each: page cache, OpenRC's dependency
cache); ``stop`` is outside the timed region. Both sides use one free loopback port as the health
port (the seed's 8092 may be taken by a parallel run), set in noderole's config and in the
runscript.

Where the comparison is not like for like: noderole's time includes a Python interpreter, its
imports and plugin loading, and building the plan (a fresh ``noderole plan server`` alone is about
a quarter of a second here), rewriting the k3s drop-ins and manifests on every apply (the peer
finds them in /etc, as an image would ship them), and its supervisor daemon's start; OpenRC's
includes its C tools, ``awk`` twice and three ``openssl`` processes for the certificate. On
re-apply OpenRC does nothing at all (the services are started), while noderole re-reads every
input and re-checks the certificate and definitions: it would notice a changed input, OpenRC
would not.

    python -m bench.bench_apply [--quick]
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import attrs

from bench._common import Row, paired_ratio, summarize

if TYPE_CHECKING:
    from tests.harness.openrc_ns import OpenRCNamespace

__all__ = ["K3S_INITD", "KONNECTIVITY_INITD", "run"]

_REPO = Path(__file__).resolve().parent.parent
FRESH = "apply server -> both services started (fresh process, cert minted each run)"
HEALTHY = "apply server -> konnectivity /healthz answers (cert minted each run)"
REAPPLY = "re-apply server while both run, nothing changed"
PEER = "openrc-run (OpenRC 0.45, seed-style runscripts)"
TARGET = ""  # the issue gives none; lower is better
DISABLED = ("node-exporter",)
CERT_DIR = "/var/lib/spinifex-eks/konnectivity"
K3S_TLS = "/var/lib/rancher/k3s/server/tls"
KUBECONFIG = "/etc/rancher/k3s/k3s.yaml"
MANIFESTS = "/var/lib/rancher/k3s/server/manifests"

K3S_INITD = """\
#!/sbin/openrc-run
# k3s server, seed style, for the benchmark. The image's script would also say `need net`; the
# benchmark's namespace has no `net` provider, so it is left out (here and in
# konnectivity-server). The configuration drop-ins noderole's k3s plugin writes on every apply
# are copied into this namespace's /etc beforehand, as an image would ship them.

description="k3s server (Kubernetes control plane)"

command="/usr/local/bin/k3s"
command_args="server --config /etc/rancher/k3s/config.yaml"
pidfile="/run/k3s.pid"

supervisor="supervise-daemon"
respawn_delay=5
respawn_max=0
output_log="/var/log/k3s.log"
error_log="/var/log/k3s.log"

depend() {
    after firewall
}

start_pre() {
    # First boot: derive the configuration from the image's skeleton, as noderole's k3s does.
    [ -f /etc/rancher/k3s/config.yaml ] ||
        cp /etc/rancher/k3s/config.yaml.skel /etc/rancher/k3s/config.yaml
}
"""
"""The peer's ``/etc/init.d/k3s``."""

KONNECTIVITY_INITD = """\
#!/sbin/openrc-run
# Konnectivity server (apiserver-network-proxy) — the apiserver egress proxy for
# the Mulga EKS control plane. The kube-apiserver's `cluster` egress selector
# (egress-selector-config.yaml) routes pod/kubelet/webhook traffic to this
# server's UDS; konnectivity-agents on the workers dial in over :8132 and the
# egress rides back down the agent-initiated reverse tunnel. Server-role only;
# enabled by eks-node-role. Runs as root to bind the UDS the apiserver reads.
#
# BENCHMARK COPY of docs/seed/konnectivity-server.initd. Changes, and only these:
# - `need net` is left out: the benchmark's namespace has no `net` provider.
# - --health-port is the benchmark's free loopback port (noderole is given the same one).
# - eks-konnectivity-cert (a Go binary we do not have) is stood in for by the shell function
#   eks_konnectivity_cert below, which mints the same pair with the openssl CLI.

description="Konnectivity server (Mulga EKS apiserver egress proxy)"

KONN_DIR=/var/lib/spinifex-eks/konnectivity
KONN_UDS=/run/konnectivity/konnectivity-server.socket
ENVFILE=/etc/spinifex-eks/first-boot.env
K3S_CA=/var/lib/rancher/k3s/server/tls/server-ca.crt
K3S_CA_KEY=/var/lib/rancher/k3s/server/tls/server-ca.key
KUBECONFIG_FILE=/etc/rancher/k3s/k3s.yaml

# server-count is the apiserver replica count: each agent holds a tunnel to every
# replica, so egress from any apiserver always resolves (the HA-correct fan-out).
# Seeded by the launcher in first-boot.env; default 1 for a single control plane.
_server_count=1
if [ -f "${ENVFILE}" ]; then
    _sc=$(awk -F= '/^EKS_KONNECTIVITY_SERVER_COUNT=/{print $2}' "${ENVFILE}")
    [ -n "${_sc}" ] && _server_count="${_sc}"
fi

command="/usr/local/bin/konnectivity-server"
command_args="--logtostderr=true
 --uds-name=${KONN_UDS}
 --delete-existing-uds-file
 --cluster-cert=${KONN_DIR}/tls.crt
 --cluster-key=${KONN_DIR}/tls.key
 --server-count=${_server_count}
 --mode=grpc
 --server-port=0
 --agent-port=8132
 --admin-port=8093
 --health-port=@HEALTH_PORT@
 --kubeconfig=${KUBECONFIG_FILE}
 --authentication-audience=system:konnectivity-server
 --agent-namespace=kube-system
 --agent-service-account=konnectivity-agent
 --proxy-strategies=destHost,default"
pidfile="/run/konnectivity-server.pid"

# Supervise: a transient exit must self-heal, or apiserver egress (webhooks,
# exec, logs) stays broken until the next boot and the cluster wedges.
supervisor="supervise-daemon"
respawn_delay=5
respawn_max=0
output_log="/var/log/konnectivity-server.log"
error_log="/var/log/konnectivity-server.log"

depend() {
    after k3s
}

# Stands in for the Go tool `eks-konnectivity-cert -dir D -ca-cert C -ca-key K -cn CN -sans L`:
# reuse D/tls.crt + D/tls.key while the certificate verifies against the CA and has more than
# 90 days left, else mint an ECDSA P-256 key and a 365-day serverAuth certificate with those SANs
# (IP entries as IP:, others as DNS:), signed by the CA (random serial: openssl 3 picks one when
# neither -CAserial nor -CAcreateserial is given, so nothing is written next to the CA).
eks_konnectivity_cert() {
    _dir= _ca= _cakey= _cn= _sans=
    while [ $# -gt 1 ]; do
        case "$1" in
            -dir) _dir=$2 ;;
            -ca-cert) _ca=$2 ;;
            -ca-key) _cakey=$2 ;;
            -cn) _cn=$2 ;;
            -sans) _sans=$2 ;;
            *) echo "eks_konnectivity_cert: unknown option $1" >&2; return 2 ;;
        esac
        shift 2
    done
    if [ -s "${_dir}/tls.crt" ] && [ -s "${_dir}/tls.key" ] &&
        openssl x509 -in "${_dir}/tls.crt" -noout -checkend 7776000 >/dev/null 2>&1 &&
        openssl verify -CAfile "${_ca}" "${_dir}/tls.crt" >/dev/null 2>&1; then
        return 0
    fi
    _alt=
    _ifs=$IFS; IFS=,
    for _s in ${_sans}; do
        case "${_s}" in
            *[!0-9.]*) case "${_s}" in *:*) _s="IP:${_s}" ;; *) _s="DNS:${_s}" ;; esac ;;
            *) _s="IP:${_s}" ;;
        esac
        _alt="${_alt:+${_alt},}${_s}"
    done
    IFS=$_ifs
    mkdir -p "${_dir}" || return 1
    _tmp=$(mktemp -d "${_dir}/.mint.XXXXXX") || return 1
    printf '%s\\n' \\
        "basicConstraints=critical,CA:FALSE" \\
        "keyUsage=critical,digitalSignature" \\
        "extendedKeyUsage=serverAuth" \\
        "subjectKeyIdentifier=hash" \\
        "authorityKeyIdentifier=keyid" \\
        "subjectAltName=${_alt}" > "${_tmp}/ext"
    if openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 \\
            -out "${_tmp}/tls.key" 2>/dev/null &&
        openssl req -new -key "${_tmp}/tls.key" -subj "/CN=${_cn}" \\
            -out "${_tmp}/tls.csr" 2>/dev/null &&
        openssl x509 -req -in "${_tmp}/tls.csr" -CA "${_ca}" -CAkey "${_cakey}" \\
            -days 365 -extfile "${_tmp}/ext" -out "${_tmp}/tls.crt" 2>/dev/null &&
        chmod 600 "${_tmp}/tls.key" &&
        mv "${_tmp}/tls.key" "${_dir}/tls.key" && mv "${_tmp}/tls.crt" "${_dir}/tls.crt"; then
        rm -rf "${_tmp}"
        echo "minted ${_dir}/tls.crt"
        return 0
    fi
    rm -rf "${_tmp}"
    return 1
}

start_pre() {
    mkdir -p /run/konnectivity "${KONN_DIR}"

    # Wait for k3s to write the server CA (+ key) and admin kubeconfig: the CA
    # signs the serving cert agents validate, the kubeconfig is the TokenReview
    # client for agent SA-token auth. Bounded; without them konnectivity is inert.
    i=0
    while [ "${i}" -lt 120 ]; do
        if [ -r "${K3S_CA}" ] && [ -r "${K3S_CA_KEY}" ] && [ -r "${KUBECONFIG_FILE}" ]; then
            break
        fi
        i=$((i + 2))
        sleep 2
    done
    if [ ! -r "${K3S_CA}" ] || [ ! -r "${K3S_CA_KEY}" ] || [ ! -r "${KUBECONFIG_FILE}" ]; then
        eerror "k3s server CA / admin kubeconfig not present after ${i}s"
        return 1
    fi

    # Mint (or reuse) the serving cert from the k3s server CA, SANed to the NLB
    # endpoints agents dial. That CA is the in-pod ca.crt the agent already trusts,
    # so no separate CA distribution is needed.
    sans=""
    if [ -f "${ENVFILE}" ]; then
        sans=$(awk -F= '/^EKS_KONNECTIVITY_SANS=/{print $2}' "${ENVFILE}")
    fi
    if [ -z "${sans}" ]; then
        eerror "EKS_KONNECTIVITY_SANS empty; agents would fail server cert validation"
        return 1
    fi
    if ! eks_konnectivity_cert -dir "${KONN_DIR}" -ca-cert "${K3S_CA}" \\
            -ca-key "${K3S_CA_KEY}" -cn konnectivity-server -sans "${sans}" >/dev/null; then
        eerror "failed to mint konnectivity serving cert"
        return 1
    fi
}
"""
"""The peer's ``/etc/init.d/konnectivity-server`` (``@HEALTH_PORT@`` filled in)."""

PEER_START = "rc-service k3s start && rc-service konnectivity-server start"
PEER_STOP = "rc-service konnectivity-server stop; rc-service k3s stop"


@attrs.define
class Samples:
    """One side's samples, in milliseconds."""

    fresh: list[float] = attrs.Factory(list)
    healthy: list[float] = attrs.Factory(list)
    reapply: list[float] = attrs.Factory(list)


# --------------------------------------------------------------------------- shared helpers


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_port_free(port: int, timeout: float = 15.0) -> None:
    """Return once nothing listens on ``port`` (a stopped server has really gone)."""
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
                return
            except OSError:
                pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"port {port} is still in use {timeout:g}s after stop")
        time.sleep(0.01)


class HealthWatch:
    """Polls ``http://127.0.0.1:PORT/healthz`` every millisecond; notes when it first says 200."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.ok_ns: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="healthz", daemon=True)

    def __enter__(self) -> HealthWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _healthy(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as conn:
                conn.sendall(b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
                first = conn.recv(64)
        except OSError:
            return False
        return first.split(b"\r\n", 1)[0].split(b" ")[1:2] == [b"200"]

    def _poll(self) -> None:
        while not self._stop.is_set():
            if self._healthy():
                self.ok_ns = time.time_ns()
                return
            time.sleep(0.001)

    def wait(self, timeout: float = 15.0) -> int:
        """When /healthz first answered 200 (``time.time_ns()``)."""
        self._thread.join(timeout)
        if self.ok_ns is None:
            raise RuntimeError(f"/healthz on port {self.port} did not answer within {timeout:g}s")
        return self.ok_ns


def _empty(directory: Path) -> None:
    if directory.is_dir():
        for entry in directory.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()


# --------------------------------------------------------------------------- noderole


def _noderole_argv() -> list[str]:
    script = Path(sys.executable).parent / "noderole"
    return [str(script)] if script.exists() else [sys.executable, "-m", "noderole"]


def _stage(root: Path, port: int) -> None:
    """The scratch root: stand-ins, first-boot.env, k3s skeleton, and k3s's CA + kubeconfig."""
    from noderole.cli._app import App
    from noderole.rehearsal import stage_rehearsal
    from noderole.root import NodeRoot

    app = App(root=NodeRoot(root), disabled_plugins=DISABLED)
    # The rehearsal's free port is this one: both sides here share it.
    stage_rehearsal(app.root, app.plugins, app.node, pick_port=lambda: port)
    # The inputs, made by the k3s stand-in itself (as k3s would have on an earlier boot).
    env = {**os.environ, "NODEROLE_ROOT": str(root), "NODEROLE_K3S_STANDIN_DELAY": "0"}
    k3s = subprocess.Popen(
        [str(root / "usr/local/bin/k3s"), "server"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not (root / KUBECONFIG.lstrip("/")).exists():
            if time.monotonic() > deadline or k3s.poll() is not None:
                raise RuntimeError("the k3s stand-in did not write its CA and kubeconfig")
            time.sleep(0.01)
    finally:
        k3s.kill()
        k3s.wait()


def _run_noderole(root: Path, *args: str) -> None:
    argv = [*_noderole_argv(), "--root", str(root), *args]
    # Bytecode caching on, as on a node: otherwise every edited module is compiled on each run.
    env = {
        k: v for k, v in os.environ.items() if k not in ("NODEROLE_ROOT", "PYTHONDONTWRITEBYTECODE")
    }
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} failed ({done.returncode}): {(done.stderr or done.stdout).strip()}"
        )


def _end_node(root: Path) -> None:
    """Shut the node's supervisor down, then SIGKILL whatever of ``root`` still runs."""
    from noderole.supervisor import Supervisor

    try:
        Supervisor(root / "run/noderole", timeout=30).shutdown()
    except Exception as exc:
        print(f"# supervisor shutdown failed ({exc}); killing leftovers", file=sys.stderr)
    _kill_leftovers(root)


def _kill_leftovers(root: Path) -> None:
    """SIGKILL whatever still runs for ``root``: its children carry NODEROLE_ROOT=root in their
    environment, its supervisor daemon has root's run directory on its command line."""
    marker = f"NODEROLE_ROOT={root}".encode()
    needle = str(root).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read().split(b"\0")
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if marker in environ or needle in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry), signal.SIGKILL)


class NoderoleSide:
    """``noderole apply server`` in a scratch root, the native backend supervising."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _apply(self) -> None:
        disable = [o for name in DISABLED for o in ("--disable-plugin", name)]
        _run_noderole(self.root, *disable, "apply", "server")

    def reset(self) -> None:
        """Empty the certificate directory: the next apply mints."""
        _empty(self.root / CERT_DIR.lstrip("/"))

    def fresh(self) -> tuple[int, int]:
        """Start and end stamps (``time.time_ns()``) of a fresh apply, taken on the host."""
        start = time.time_ns()
        self._apply()
        return start, time.time_ns()

    def reapply(self) -> float:
        """Milliseconds of an apply while everything runs and nothing changed."""
        start = time.time_ns()
        self._apply()
        return (time.time_ns() - start) / 1e6

    def stop(self) -> None:
        _run_noderole(self.root, "stop")


@contextlib.contextmanager
def _noderole_side(base: Path, port: int) -> Iterator[NoderoleSide]:
    root = base / "node"
    root.mkdir()
    try:
        _stage(root, port)
        yield NoderoleSide(root)
    finally:
        _end_node(root)


# --------------------------------------------------------------------------- OpenRC


class PeerSide:
    """The same boot through OpenRC's ``rc-service`` in a private namespace."""

    def __init__(self, ns: OpenRCNamespace) -> None:
        self.ns = ns

    def _sh(self, command: str) -> str:
        done = self.ns.sh(command, timeout=120)
        if done.rc != 0:
            raise RuntimeError(
                f"{command!r} failed in the namespace ({done.rc}): "
                f"{(done.stderr + done.stdout).strip()[-800:]}"
            )
        return done.stdout

    def _stamped(self) -> tuple[int, int]:
        out = self._sh(
            "t0=$(date +%s%N); "
            f"{{ {PEER_START}; }} >/dev/null 2>/run/start.err; rc=$?; "
            't1=$(date +%s%N); [ "$rc" = 0 ] || { cat /run/start.err >&2; exit "$rc"; }; '
            'echo "$t0 $t1"'
        )
        t0, t1 = out.split()
        return int(t0), int(t1)

    def reset(self) -> None:
        self._sh(f"mkdir -p {CERT_DIR} && find {CERT_DIR} -mindepth 1 -delete")

    def fresh(self) -> tuple[int, int]:
        """Start and end stamps (``date +%s%N``) taken inside the namespace."""
        return self._stamped()

    def reapply(self) -> float:
        """Milliseconds of the same two starts while both run (OpenRC: already started)."""
        t0, t1 = self._stamped()
        return (t1 - t0) / 1e6

    def stop(self) -> None:
        self._sh(
            f"{{ {PEER_STOP}; }} >/dev/null 2>&1; rc-service konnectivity-server status "
            ">/dev/null 2>&1 && exit 1; rc-service k3s status >/dev/null 2>&1 && exit 1; "
            "exit 0"
        )


def _peer_etc(node: Path, peer: Path, port: int) -> None:
    """The namespace's /etc additions: runscripts, first-boot.env, k3s's files as noderole left
    them (its drop-ins, as an image would ship them; the admin kubeconfig)."""
    init_d = peer / "etc/init.d"
    init_d.mkdir(parents=True)
    (init_d / "k3s").write_text(K3S_INITD)
    (init_d / "konnectivity-server").write_text(
        KONNECTIVITY_INITD.replace("@HEALTH_PORT@", str(port))
    )
    for script in init_d.iterdir():
        script.chmod(0o755)
    shutil.copytree(node / "etc/spinifex-eks", peer / "etc/spinifex-eks")
    shutil.copytree(node / "etc/rancher", peer / "etc/rancher")
    # noderole's k3s derives config.yaml on its first apply; the peer's runscript does it itself.
    (peer / "etc/rancher/k3s/config.yaml").unlink(missing_ok=True)


def _peer_problem() -> str | None:
    if os.geteuid() != 0:
        return "needs root (mount and pid namespaces)"
    if str(_REPO) not in sys.path:
        sys.path.insert(0, str(_REPO))  # tests.harness, when run from elsewhere
    try:
        from tests.harness.openrc import unshare_problem
    except ImportError as exc:
        return f"tests/harness/openrc.py not importable: {exc}"
    return unshare_problem()


@contextlib.contextmanager
def _peer_side(base: Path, node: Path, port: int) -> Iterator[PeerSide]:
    from tests.harness.openrc import openrc
    from tests.harness.openrc_ns import OpenRCNamespace

    orc = openrc()
    peer = base / "peer"
    _peer_etc(node, peer, port)
    ns = OpenRCNamespace(orc.root, peer)
    ns.start()
    try:
        side = PeerSide(ns)
        # Keep state, logs and the stand-ins off the host; the stand-ins at the same node paths.
        # k3s's CA + key and manifests: the very files the noderole side has.
        tls = K3S_TLS
        side._sh(
            "mount -t tmpfs tmpfs /var/lib && mount -t tmpfs tmpfs /var/log && "
            "mount -t tmpfs tmpfs /usr/local/bin && "
            f"cp {node}/usr/local/bin/k3s {node}/usr/local/bin/konnectivity-server "
            "/usr/local/bin/ && "
            f"mkdir -p {tls} && "
            f"cp -p {node}{tls}/server-ca.crt {node}{tls}/server-ca.key {tls}/ && "
            f"cp -rp {node}{MANIFESTS} {MANIFESTS}"
        )
        yield side
    finally:
        ns.close()


# --------------------------------------------------------------------------- the runs


class Side(Protocol):
    """What one orchestrator does for the benchmark."""

    def reset(self) -> None: ...
    def fresh(self) -> tuple[int, int]: ...
    def reapply(self) -> float: ...
    def stop(self) -> None: ...


def _once(side: Side, port: int, into: Samples | None) -> None:
    """One fresh boot (timed, with /healthz watched), one re-apply (timed), one stop."""
    side.reset()
    _wait_port_free(port)
    with HealthWatch(port) as health:
        start, end = side.fresh()
        healthy = health.wait()
    reapply = side.reapply()
    side.stop()
    if into is not None:
        into.fresh.append((end - start) / 1e6)
        into.healthy.append((healthy - start) / 1e6)
        into.reapply.append(reapply)


def _rows(ours: Samples, theirs: Samples | None) -> list[Row]:
    rows = []
    for name, mine, peer in (
        (FRESH, ours.fresh, theirs.fresh if theirs else []),
        (HEALTHY, ours.healthy, theirs.healthy if theirs else []),
        (REAPPLY, ours.reapply, theirs.reapply if theirs else []),
    ):
        median, spread, _ = summarize(mine)
        peer_median, peer_spread = summarize(peer)[:2] if peer else (None, None)
        rows.append(
            Row(
                benchmark=name,
                unit="ms",
                median=median,
                spread=spread,
                samples=len(mine),
                peer=PEER if peer else None,
                peer_median=peer_median,
                peer_spread=peer_spread,
                target=TARGET,
                paired=paired_ratio(mine, peer) if peer and len(peer) == len(mine) else None,
            )
        )
    return rows


def run(quick: bool) -> list[Row]:
    """Alternate noderole and OpenRC runs (one untimed warm-up each); rows in milliseconds."""
    runs = 2 if quick else 10
    port = _free_port()
    ours = Samples()
    theirs: Samples | None = None
    with contextlib.ExitStack() as stack:
        base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-apply-")))
        mine = stack.enter_context(_noderole_side(base, port))
        # noderole's warm-up first: the peer's /etc gets the k3s drop-ins it wrote.
        _once(mine, port, None)
        peer: PeerSide | None = None
        problem = _peer_problem()
        if problem is None:
            try:
                peer = stack.enter_context(_peer_side(base, mine.root, port))
                _once(peer, port, None)
                theirs = Samples()
            except RuntimeError as exc:
                problem = str(exc)
        if problem is not None:
            print(f"skipped {PEER}: {problem}")
        for _ in range(runs):
            _once(mine, port, ours)
            if peer is not None and theirs is not None:
                try:
                    _once(peer, port, theirs)
                except RuntimeError as exc:
                    print(f"dropped {PEER}: a run failed: {exc}")
                    peer, theirs = None, None
    return _rows(ours, theirs)


def _print(rows: list[Row]) -> None:
    for row in rows:
        peer = (
            f"  vs {row.peer}: {row.peer_median:.1f} (spread {row.peer_spread:.1f}), "
            f"ratio {row.ratio:.2f}x"
            if row.peer and row.peer_median is not None and row.ratio is not None
            else ""
        )
        print(
            f"{row.benchmark}: noderole {row.median:.1f} {row.unit} "
            f"(spread {row.spread:.1f}, n={row.samples}){peer}"
        )
    print("lower is better; the issue states no target")


if __name__ == "__main__":
    _print(run(quick="--quick" in sys.argv[1:]))
