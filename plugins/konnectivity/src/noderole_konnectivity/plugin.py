"""The konnectivity plugin's hook implementations: the ``konnectivity-server`` service, its
settings and stand-in, and (when the k3s plugin is loaded) its contributions to k3s.

The service reproduces the OpenRC script it replaces (``konnectivity-server.initd``): the same
dependencies, first-boot inputs, bounded wait for the k3s CA and kubeconfig, certificate, command
line, pidfile, supervision and log, with its error messages. Bad inputs become a
:class:`noderole.Fail` step at the point the script checked them, so only this service fails, and
``noderole plan`` shows why.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import noderole
from noderole_k3s import ConfigFile, ConfigKeys, Manifest
from noderole_konnectivity.wiring import (
    AGENT_NAMESPACE,
    AGENT_SERVICE_ACCOUNT,
    AUDIENCE,
    agent_image,
    agent_manifest,
    egress_selector_configuration,
    is_image_reference,
    k3s_config,
    version_mismatch,
)

if TYPE_CHECKING:
    from noderole import NodeContext, Step

__all__ = [
    "COUNT_KEY",
    "HOST_KEY",
    "SANS_KEY",
    "SETTINGS",
    "TABLE",
    "noderole_k3s_config",
    "noderole_k3s_files",
    "noderole_k3s_manifests",
    "noderole_services",
    "noderole_settings",
    "noderole_standins",
]

TABLE = "konnectivity"
COUNT_KEY = "EKS_KONNECTIVITY_SERVER_COUNT"
SANS_KEY = "EKS_KONNECTIVITY_SANS"
HOST_KEY = "EKS_KONNECTIVITY_HOST"
COMMON_NAME = "konnectivity-server"


def _setting(
    name: str, kind: Any, default: Any, description: str, **bounds: Any
) -> noderole.Setting:
    """A setting; ``bounds`` are Setting's ``min``, ``max`` and ``choices``."""
    return noderole.Setting(
        name=name, type=kind, default=default, description=description, **bounds
    )


_SECONDS = {"min": 0.1, "max": 86400}
"""Bounds of a timeout setting: a tenth of a second to a day."""
_DELAY = {"min": 0, "max": 3600}
"""Bounds of a respawn delay: none to an hour."""
_COUNT = {"min": 0}
"""Bounds of a count."""
_PORT = {"min": 1, "max": 65535}
"""Bounds of a TCP port."""


SETTINGS = noderole.SettingsTable(
    table=TABLE,
    description="konnectivity-server, the apiserver egress proxy, and its k3s wiring.",
    settings=[
        _setting("binary", str, "/usr/local/bin/konnectivity-server", "The server executable."),
        _setting(
            "cert_dir",
            str,
            "/var/lib/spinifex-eks/konnectivity",
            "Directory of the serving pair tls.crt + tls.key.",
        ),
        _setting(
            "uds_name",
            str,
            "/run/konnectivity/konnectivity-server.socket",
            "Unix socket the apiserver's egress selector dials (--uds-name).",
        ),
        _setting(
            "first_boot_env",
            str,
            "/etc/spinifex-eks/first-boot.env",
            f"Environment file with {COUNT_KEY}, {SANS_KEY} and {HOST_KEY}.",
        ),
        _setting(
            "ca_cert",
            str,
            "/var/lib/rancher/k3s/server/tls/server-ca.crt",
            "k3s server CA: signs the serving certificate (the agents' in-pod ca.crt).",
        ),
        _setting(
            "ca_key", str, "/var/lib/rancher/k3s/server/tls/server-ca.key", "Key of `ca_cert`."
        ),
        _setting(
            "kubeconfig",
            str,
            "/etc/rancher/k3s/k3s.yaml",
            "Admin kubeconfig: the TokenReview client for agent token authentication.",
        ),
        _setting(
            "wait_timeout",
            float,
            120.0,
            "Seconds to wait for `ca_cert`, `ca_key` and `kubeconfig` before failing.",
            **_SECONDS,
        ),
        _setting(
            "renew_before_days",
            int,
            90,
            "Re-mint the serving certificate when fewer days than this remain.",
            min=0,
            max=364,
        ),
        _setting("agent_port", int, 8132, "Port agents dial (--agent-port).", **_PORT),
        _setting("admin_port", int, 8093, "Server admin port (--admin-port).", **_PORT),
        _setting(
            "health_port", int, 8092, "Server health port; /healthz is its readiness.", **_PORT
        ),
        _setting("pidfile", str, "/run/konnectivity-server.pid", "Pidfile of the server."),
        _setting(
            "log", str, "/var/log/konnectivity-server.log", "stdout and stderr of the server."
        ),
        _setting(
            "respawn_delay",
            float,
            5.0,
            "Seconds before a crashed server is started again.",
            **_DELAY,
        ),
        _setting(
            "respawn_max", int, 0, "Respawns allowed before giving up; 0: unlimited.", **_COUNT
        ),
        _setting(
            "ready_timeout",
            float,
            60.0,
            "Seconds /healthz may take to answer after start before the server counts as not "
            "ready.",
            **_SECONDS,
        ),
        _setting(
            "egress_config",
            str,
            "/etc/rancher/k3s/egress-selector-config.yaml",
            "Where the apiserver's EgressSelectorConfiguration is written (k3s plugin).",
        ),
        _setting(
            "agent_manifest",
            str,
            "konnectivity-agent.yaml",
            "File name of the agent manifest in k3s's manifests directory (k3s plugin).",
        ),
        _setting(
            "server_version",
            str,
            "v0.30.3",
            "apiserver-network-proxy release of the konnectivity-server binary; the agent image "
            "follows it.",
        ),
        _setting(
            "agent_image",
            str,
            "",
            "konnectivity-agent image; empty: proxy-agent at `server_version`. A different "
            "version is warned about at plan time.",
        ),
        _setting("agent_admin_port", int, 8133, "Agent admin port (in the agent pod).", **_PORT),
        _setting(
            "agent_health_port", int, 8134, "Agent health port (its liveness probe).", **_PORT
        ),
    ],
)


@noderole.hookimpl
def noderole_settings() -> noderole.SettingsTable:
    return SETTINGS


# --------------------------------------------------------------------------- inputs


def _first_boot(node: NodeContext, cfg: Mapping[str, Any]) -> tuple[Mapping[str, str], str | None]:
    """The first-boot values, and why they cannot be used: the file missing, unreadable, or
    the SAN list absent with the parser's warnings (an unterminated quote) as the likely cause."""
    source = cfg["first_boot_env"]
    try:
        env = node.read_env(source)
    except noderole.EnvFileError as exc:
        return {}, str(exc)
    if not env.exists:
        return {}, (
            f"{source} is missing: konnectivity-server reads {SANS_KEY} (the serving "
            f"certificate's comma-separated SANs), {HOST_KEY} and {COUNT_KEY} from it. Write it "
            f"(one KEY=VALUE per line, e.g. {SANS_KEY}=10.0.0.1,api.example) or point "
            f"[{TABLE}] first_boot_env at the file"
        )
    if env.warnings and not split_sans(env.get(SANS_KEY)):
        return env.values, (
            f"{SANS_KEY} empty in {source}, and lines of it could not be parsed: "
            + "; ".join(env.warnings)
        )
    return env.values, None


MAX_SERVER_COUNT = 2**32 - 1
"""The largest ``--server-count`` konnectivity-server takes on all its builds (an unsigned int,
32 bits on some); past it the server refuses the flag at every start."""


def server_count(raw: str | None, *, source: str) -> tuple[int, str | None]:
    """``EKS_KONNECTIVITY_SERVER_COUNT`` as a number: absent or empty is 1 (one control plane);
    anything but a positive integer konnectivity-server takes gives 1 and the reason it is
    wrong."""
    text = (raw or "").strip()
    if not text:
        return 1, None
    fix = "set it to the number of apiserver replicas (each agent holds a tunnel to every one)"
    # [0-9]+ (no regex to compile). Leading zeros aside, more digits than the limit has is past
    # it: int() is never asked for thousands of digits (past 4,300 it raises).
    digits = (text.lstrip("0") or "0") if text.isascii() and text.isdigit() else ""
    if len(digits) > len(str(MAX_SERVER_COUNT)) or (digits and int(digits) > MAX_SERVER_COUNT):
        return 1, (
            f"{COUNT_KEY}={_shown(text)} in {source} is more than konnectivity-server's "
            f"--server-count takes (at most {MAX_SERVER_COUNT}): {fix}"
        )
    if not digits or digits == "0":
        return 1, (
            f"{COUNT_KEY}={_shown(text)} in {source} is not a positive integer: {fix}, or "
            "remove it for 1"
        )
    return int(digits), None


def _shown(text: str) -> str:
    """``text`` quoted, cut to its ends when it is too long to read in a message."""
    if len(text) <= 40:
        return repr(text)
    return f"{text[:16]!r}...{text[-8:]!r} ({len(text)} characters)"


def agent_host(raw: str | None, sans: Sequence[str], *, source: str) -> tuple[str, str | None]:
    """``EKS_KONNECTIVITY_HOST`` as konnectivity-agent's ``--proxy-server-host`` takes it ("" when
    absent or empty), and, when agents could not use it, why.

    Every agent dials the host and checks the server's certificate against it (``--ca-cert``),
    so it must be one DNS name or IP address, and a name the certificate's SANs (``sans``, as
    given) cover. An IPv6 address is given in brackets: the agent joins host and port as
    ``"%s:%d"``.
    """
    text = (raw or "").strip()
    if not text:
        return "", None
    # noderole's own SAN rules (internal to noderole, shipped with this plugin): the host is
    # read exactly as the certificate's names are.
    from noderole.sans import covers, parse_host, parse_sans

    try:
        host = parse_host(text)
    except noderole.CertificateError as error:
        return text, f"{HOST_KEY} in {source}: {error}"
    dialled = f"[{host.value}]" if ":" in host.value else host.value
    try:
        names = parse_sans(sans)
    except noderole.CertificateError:
        return dialled, None  # the SANs' own failure says what is wrong with them
    if covers(names, host):
        return dialled, None
    return dialled, (
        f"{HOST_KEY}={text} in {source} is not among {SANS_KEY} ({', '.join(sans)}): every "
        "konnectivity-agent dials it and would refuse this server's certificate; add it to "
        f"{SANS_KEY}"
    )


def split_sans(raw: str | None) -> list[str]:
    """The comma-separated SAN list, entries trimmed, empty entries dropped."""
    return [entry.strip() for entry in (raw or "").split(",") if entry.strip()]


# --------------------------------------------------------------------------- the service


def command(cfg: Mapping[str, Any], count: int) -> list[str]:
    """konnectivity-server's argv, flag for flag as the OpenRC script has it."""
    cert_dir = cfg["cert_dir"].rstrip("/")
    return [
        cfg["binary"],
        "--logtostderr=true",
        f"--uds-name={cfg['uds_name']}",
        "--delete-existing-uds-file",
        f"--cluster-cert={cert_dir}/tls.crt",
        f"--cluster-key={cert_dir}/tls.key",
        f"--server-count={count}",
        "--mode=grpc",
        # Not a setting: with --uds-name the server refuses any other value (it would also
        # listen on 8090).
        "--server-port=0",
        f"--agent-port={cfg['agent_port']}",
        f"--admin-port={cfg['admin_port']}",
        f"--health-port={cfg['health_port']}",
        f"--kubeconfig={cfg['kubeconfig']}",
        f"--authentication-audience={AUDIENCE}",
        f"--agent-namespace={AGENT_NAMESPACE}",
        f"--agent-service-account={AGENT_SERVICE_ACCOUNT}",
        "--proxy-strategies=destHost,default",
    ]


def empty_host_message(source: str) -> str:
    """The warning for a first-boot file without EKS_KONNECTIVITY_HOST (as the prior art warns)."""
    return (
        f"{HOST_KEY} empty in {source}: the konnectivity-agent manifest is not staged, so no "
        "agent will connect and apiserver egress to pods and kubelets will fail"
    )


def pre_start(cfg: Mapping[str, Any], env: Mapping[str, str], unreadable: str | None) -> list[Step]:
    """The script's ``start_pre``, step for step, with its checks where it made them."""
    source = cfg["first_boot_env"]
    steps: list[Step] = [
        # A bare name's directory is "": the name itself is then refused, traced to its key.
        noderole.MakeDirectories(paths=[posixpath.dirname(cfg["uds_name"]) or cfg["uds_name"]]),
        # The key lives here: private to root.
        noderole.MakeDirectories(paths=[cfg["cert_dir"]], mode=0o700),
    ]
    if unreadable:
        return [*steps, noderole.Fail(message=unreadable)]
    _, count_problem = server_count(env.get(COUNT_KEY), source=source)
    if count_problem:
        steps.append(noderole.Fail(message=count_problem))
    host, host_problem = agent_host(env.get(HOST_KEY), split_sans(env.get(SANS_KEY)), source=source)
    if host_problem:
        steps.append(noderole.Fail(message=host_problem))
    elif not host:
        steps.append(noderole.Warn(message=empty_host_message(source)))
    mismatch = version_mismatch(cfg)
    if mismatch:
        steps.append(noderole.Warn(message=mismatch))
    steps.append(
        noderole.WaitForPaths(
            paths=[cfg["ca_cert"], cfg["ca_key"], cfg["kubeconfig"]],
            timeout=cfg["wait_timeout"],
            message="k3s server CA / admin kubeconfig not present after {elapsed}s",
        )
    )
    sans = split_sans(env.get(SANS_KEY))
    if not sans:
        steps.append(
            noderole.Fail(message=f"{SANS_KEY} empty; agents would fail server cert validation")
        )
        return steps
    failure = "failed to mint konnectivity serving cert: {reason}"
    try:
        mint = noderole.MintCertificate(
            directory=cfg["cert_dir"],
            ca_cert=cfg["ca_cert"],
            ca_key=cfg["ca_key"],
            common_name=COMMON_NAME,
            sans=sans,
            renew_before_days=cfg["renew_before_days"],
            failure_message=failure,
        )
    except noderole.DefinitionError as error:
        if error.field != "sans":
            raise
        # The record checks SANs when built; a bad one in the first-boot file fails this
        # service where the seed's mint failed (shown by `plan`), not the whole role.
        return [*steps, noderole.Fail(message=failure.format(reason=f"{SANS_KEY}: {error}"))]
    steps.append(mint)
    return steps


def service(
    cfg: Mapping[str, Any], env: Mapping[str, str], unreadable: str | None = None
) -> noderole.Service:
    """The ``konnectivity-server`` service for these settings and first-boot values."""
    count, _ = server_count(env.get(COUNT_KEY), source=cfg["first_boot_env"])
    return noderole.Service(
        name="konnectivity-server",
        description="Konnectivity server (Mulga EKS apiserver egress proxy)",
        roles=["server", "server-join"],
        need=["net"],
        after=["k3s"],
        command=command(cfg, count),
        pidfile=cfg["pidfile"],
        output_log=cfg["log"],
        error_log=cfg["log"],
        # A transient exit must self-heal, or apiserver egress (webhooks, exec, logs) stays
        # broken until the next boot.
        supervision=noderole.Supervision(
            respawn_delay=cfg["respawn_delay"], respawn_max=cfg["respawn_max"]
        ),
        pre_start=pre_start(cfg, env, unreadable),
        # /healthz, never /readyz: that stays 500 until the first agent connects, and agents
        # arrive only after the cluster is up.
        readiness=noderole.WaitForHttp(
            url=f"http://127.0.0.1:{cfg['health_port']}/healthz", timeout=cfg["ready_timeout"]
        ),
    )


@noderole.hookimpl
def noderole_services(node: NodeContext) -> noderole.Service:
    cfg = node.settings(TABLE)
    check_ports(cfg)
    check_agent_image(cfg)
    env, unreadable = _first_boot(node, cfg)
    return service(cfg, env, unreadable)


def check_agent_image(cfg: Mapping[str, Any]) -> None:
    """A ConfigError naming the key behind it when the agent image is no image reference: the
    DaemonSet would be staged with it, and every agent pod fail to pull (InvalidImageName)."""
    image = agent_image(cfg)
    if not is_image_reference(image):
        key = "agent_image" if cfg["agent_image"].strip() else "server_version"
        raise noderole.ConfigError(
            f"{noderole.CONFIG_PATH}:{TABLE}.{key}: the konnectivity-agent image {image!r} is not "
            "an image reference (REGISTRY/PATH:TAG or @DIGEST, the path in lower case): every "
            "agent pod would fail to pull it; set a release tag such as v0.30.3 as "
            "server_version, or a full reference as agent_image"
        )


PORTS = ("agent_port", "admin_port", "health_port", "agent_admin_port", "agent_health_port")
"""The ports konnectivity-server binds, then those each agent binds on its node's network."""


K3S_PORTS = {
    2379: "etcd's client port (a server with embedded etcd)",
    2380: "etcd's peer port",
    2381: "etcd's metrics port",
    6443: "the Kubernetes API (k3s's supervisor)",
    6444: "the API server behind k3s's supervisor, and every agent's load balancer to it",
    10010: "containerd's streaming server",
    10248: "the kubelet's health port",
    10249: "kube-proxy's metrics port",
    10250: "the kubelet's API",
    10256: "kube-proxy's health port",
    10257: "kube-controller-manager's port",
    10258: "the cloud controller manager's port",
    10259: "kube-scheduler's port",
}
"""TCP ports k3s binds on a node by default, server or agent, and what binds each there. A
konnectivity port set to one of them failed to bind at every start, or took it from k3s."""


def check_ports(cfg: Mapping[str, Any]) -> None:
    """A ConfigError naming both keys when two of :data:`PORTS` are one port: the server binds
    each apart, and the agents (host network, on servers too) bind theirs beside it, so the
    second bind would fail at every start. The same, naming what binds it, for a port k3s binds
    by default (:data:`K3S_PORTS`)."""
    for key in PORTS:
        taken = K3S_PORTS.get(cfg[key])
        if taken is not None:
            raise noderole.ConfigError(
                f"{noderole.CONFIG_PATH}:{TABLE}.{key}: {cfg[key]} is {taken}, which k3s binds "
                "on every node it runs: konnectivity would fail to bind it at every start (or "
                "take it from k3s); choose a port k3s does not use"
            )
    seen: dict[int, str] = {}
    for key in PORTS:
        first = seen.setdefault(cfg[key], key)
        if first != key:
            raise noderole.ConfigError(
                f"{noderole.CONFIG_PATH}:{TABLE}.{key}: {cfg[key]} is also [{TABLE}] {first}: "
                "konnectivity-server and its agents (on the host network of every node) bind "
                "each of these ports apart; give each its own"
            )


@noderole.hookimpl
def noderole_standins(node: NodeContext) -> list[Any]:
    from noderole_konnectivity.standins import KONNECTIVITY_STANDIN  # rehearsals only

    cfg = node.settings(TABLE)
    return [
        noderole.StandIn(
            path=cfg["binary"],
            content=KONNECTIVITY_STANDIN,
            description="records its argv, answers /healthz on --health-port, stays up",
        ),
        noderole.RehearsalFile(
            path=cfg["first_boot_env"],
            content=(
                "# noderole rehearsal\n"
                f"{SANS_KEY}=localhost,127.0.0.1\n{HOST_KEY}=127.0.0.1\n{COUNT_KEY}=1\n"
            ),
            description="first-boot values konnectivity reads",
        ),
        # A free health port, chosen once by the rehearsal, so a rehearsal never collides with
        # a real konnectivity-server (8092) or another rehearsal on the same machine.
        noderole.FreePort(table=TABLE, key="health_port"),
    ]


# --------------------------------------------------------------------------- k3s wiring
# optionalhook: these hooks exist only when the k3s plugin is loaded, so konnectivity still loads
# with `--disable-plugin k3s`. The records are noderole_k3s's public ones: this distribution
# depends on noderole-k3s (konnectivity-server waits for k3s's CA and kubeconfig anyway).


@noderole.hookimpl(optionalhook=True)
def noderole_k3s_config(node: NodeContext) -> ConfigKeys:
    return ConfigKeys(keys=k3s_config(node.settings(TABLE)["egress_config"]))


@noderole.hookimpl(optionalhook=True)
def noderole_k3s_files(node: NodeContext) -> ConfigFile:
    cfg = node.settings(TABLE)
    return ConfigFile(
        path=cfg["egress_config"], documents=[egress_selector_configuration(cfg["uds_name"])]
    )


@noderole.hookimpl(optionalhook=True)
def noderole_k3s_manifests(node: NodeContext) -> Manifest | None:
    cfg = node.settings(TABLE)
    env, _ = _first_boot(node, cfg)
    host, problem = agent_host(
        env.get(HOST_KEY), split_sans(env.get(SANS_KEY)), source=cfg["first_boot_env"]
    )
    if not host or problem:
        # konnectivity-server's own steps say why (a Warn, or a Fail), where it matters
        return None
    return Manifest(name=cfg["agent_manifest"], documents=agent_manifest(cfg, host))
