"""The k3s plugin's hook implementations: settings, services, stand-ins and its own hookspecs.

Services:

- ``k3s`` (roles ``server``, ``server-join``): ``k3s server --config /etc/rancher/k3s/config.yaml``.
  Its pre-start derives ``config.yaml`` from ``config.yaml.skel`` when absent, and writes the
  files, configuration drop-in and manifests that other plugins contribute through
  :mod:`noderole_k3s.hookspecs`.
- ``k3s-cluster-init`` (role ``server``) and ``k3s-cluster-join`` (role ``server-join``): the
  part that differs between the two roles, as milestones that both provide ``k3s-cluster``, which
  ``k3s`` needs. Each writes the role drop-in (``cluster-init: true``, or the join URL and
  token), and a join without URL or token fails there, so ``k3s`` is never started as a new
  cluster by mistake. They are not folded into one service reading ``node.role``: they share no
  steps, and a renamed service would change every node's plan, status and rendered files
  (docs/plugins/k3s.md says more).
- ``k3s-agent`` (role ``agent``): ``k3s agent`` with ``K3S_URL``, ``K3S_TOKEN`` (a
  :class:`noderole.Secret`) or ``K3S_TOKEN_FILE``, and ``K3S_NODE_NAME`` from ``agent.env`` in
  its environment. Its
  pre-start writes the agent-side files and configuration drop-in other plugins contribute.

``noderole_resolve_role`` answers the node's role from ``first-boot.env`` (``SPINIFEX_K3S_ROLE``),
or ``agent`` when only ``agent.env`` exists. The ``k3s`` server refuses to start while the restore
marker exists (``restore_block``), so a node restoring its datastore never comes up as a fresh
cluster.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import noderole
from noderole import EnvFileError, StepError
from noderole_k3s import hookspecs
from noderole_k3s.contributions import (
    Gathered,
    contributions_for,
    gather_contributions,
    parse_config_text,
    render_yaml,
    with_base_lists,
)

if TYPE_CHECKING:
    import pluggy

    from noderole import NodeContext, Step, StepContext

__all__ = [
    "ROLE_DROPIN",
    "TABLE",
    "ROLES",
    "noderole_addhooks",
    "noderole_resolve_role",
    "noderole_services",
    "noderole_settings",
    "noderole_standins",
]

TABLE = "k3s"
ROLE_DROPIN = "40-noderole-role.yaml"
"""Drop-in the role milestones write (``cluster-init``, or ``server`` and ``token``)."""
CONTRIBUTED_DROPIN = "50-noderole.yaml"
"""Drop-in holding the keys other plugins contribute; rewritten on every apply."""
ROLES = ("server", "server-join", "agent")
"""The roles ``SPINIFEX_K3S_ROLE`` may name."""

_HEADER = (
    "# Written by noderole (plugin k3s) on every apply; edits here are lost.\n"
    "# Put your own settings in /etc/rancher/k3s/config.yaml.\n"
)


def _setting(
    name: str, kind: Any, default: Any, description: str, **bounds: Any
) -> noderole.Setting:
    """A setting; ``bounds`` are Setting's ``min``, ``max`` and ``choices``."""
    return noderole.Setting(
        name=name, type=kind, default=default, description=description, **bounds
    )


MACHINE_ENVIRONMENT = "/etc/environment"
"""The whole machine's environment file, which k3s's OpenRC runscript sources before its own."""


def _upstream_environment_files(name: str) -> tuple[str, ...]:
    """The files k3s's install script has the k3s named ``name`` (``k3s``, ``k3s-agent``) read
    its environment from, in the order this plugin reads them, a later file's value winning.

    Its systemd unit reads ``EnvironmentFile=-/etc/default/%N``, ``-/etc/sysconfig/%N`` and
    ``-/etc/systemd/system/%N.service.env`` (the file the install script writes), in that order;
    its OpenRC runscript sources ``/etc/environment``, then ``/etc/rancher/k3s/%N.env`` (the file
    the install script writes there). noderole reads both sets under every backend, each in its
    own order: ``/etc/environment``, the whole machine's, first, so that it never overrides a
    file of k3s's own; the install script's OpenRC file last, after the systemd unit's (a node
    has one or the other).
    """
    return (
        MACHINE_ENVIRONMENT,
        f"/etc/default/{name}",
        f"/etc/sysconfig/{name}",
        f"/etc/systemd/system/{name}.service.env",
        f"/etc/rancher/k3s/{name}.env",
    )


_SECONDS = {"min": 0.1, "max": 86400}
"""Bounds of a timeout setting: a tenth of a second to a day."""
_DELAY = {"min": 0, "max": 3600}
"""Bounds of a respawn delay: none to an hour."""
_COUNT = {"min": 0}
"""Bounds of a count."""


SETTINGS = noderole.SettingsTable(
    table=TABLE,
    description="The k3s server and agent services.",
    settings=[
        _setting("binary", str, "/usr/local/bin/k3s", "The k3s executable."),
        _setting("config", str, "/etc/rancher/k3s/config.yaml", "k3s server configuration."),
        _setting(
            "config_skel",
            str,
            "/etc/rancher/k3s/config.yaml.skel",
            "Template copied to `config` when that file does not exist.",
        ),
        _setting(
            "config_dropin_dir",
            str,
            "/etc/rancher/k3s/config.yaml.d",
            "Drop-in directory k3s reads after `config` (noderole writes two files there).",
        ),
        _setting(
            "manifests_dir",
            str,
            "/var/lib/rancher/k3s/server/manifests",
            "k3s's auto-deploy directory, where contributed manifests are staged.",
        ),
        _setting(
            "kubeconfig",
            str,
            "/etc/rancher/k3s/k3s.yaml",
            "Admin kubeconfig k3s writes once its apiserver is up (the server's readiness).",
        ),
        _setting(
            "first_boot_env",
            str,
            "/etc/spinifex-eks/first-boot.env",
            "Environment file with the join URL and token of a `server-join` node.",
        ),
        _setting(
            "join_url_key",
            str,
            "K3S_URL",
            "Key of `first_boot_env` holding the URL of an existing server to join.",
        ),
        _setting(
            "join_token_key",
            str,
            "K3S_TOKEN",
            "Key of `first_boot_env` holding the cluster token to join with.",
        ),
        _setting(
            "join_token_file_key",
            str,
            "K3S_TOKEN_FILE",
            "Key of `first_boot_env` naming a file that holds the cluster token, instead of "
            "`join_token_key`'s value.",
        ),
        _setting(
            "agent_env",
            str,
            "/etc/spinifex-eks/agent.env",
            "Environment file with K3S_URL, K3S_TOKEN (or K3S_TOKEN_FILE) and optional "
            "K3S_NODE_NAME for agents.",
        ),
        _setting(
            "environment_files",
            str,
            " ".join(_upstream_environment_files("k3s")),
            "Files of KEY=VALUE lines for the k3s server's environment (HTTP_PROXY...), "
            "separated by blanks and read in this order, a later file's value winning: by "
            "default those k3s's systemd unit and OpenRC runscript read. An absent one gives "
            "nothing; empty: none read.",
        ),
        _setting(
            "agent_environment_files",
            str,
            " ".join(_upstream_environment_files("k3s-agent")),
            "Files of KEY=VALUE lines for the k3s agent's environment, as `environment_files` "
            "for the server; `agent_env`'s keys win.",
        ),
        _setting(
            "environment_file",
            str,
            "",
            'The one file read instead of `environment_files` when set here ("": none), as '
            "before that setting existed; set to a file beside `environment_files`, an error.",
        ),
        _setting(
            "agent_environment_file",
            str,
            "",
            'The one file read instead of `agent_environment_files` when set here ("": '
            "none); set to a file beside `agent_environment_files`, an error.",
        ),
        _setting("pidfile", str, "/run/k3s.pid", "Pidfile of the k3s server."),
        _setting("log", str, "/var/log/k3s.log", "stdout and stderr of the k3s server."),
        _setting("agent_pidfile", str, "/run/k3s-agent.pid", "Pidfile of the k3s agent."),
        _setting("agent_log", str, "/var/log/k3s-agent.log", "stdout and stderr of the agent."),
        _setting(
            "respawn_delay", float, 5.0, "Seconds before a crashed k3s is started again.", **_DELAY
        ),
        _setting(
            "respawn_max", int, 0, "Respawns allowed before giving up; 0: unlimited.", **_COUNT
        ),
        _setting(
            "stop_timeout",
            float,
            90.0,
            "Seconds k3s has to shut down after SIGTERM before SIGKILL (systemd's default, "
            "which k3s's own unit keeps).",
            **_DELAY,
        ),
        _setting(
            "ready_timeout",
            float,
            300.0,
            "Seconds the server may take to write `kubeconfig` before it counts as not ready.",
            **_SECONDS,
        ),
        _setting(
            "role_key",
            str,
            "SPINIFEX_K3S_ROLE",
            "Key of `first_boot_env` naming the node's role (server, server-join or agent).",
        ),
        _setting(
            "restore_block",
            str,
            "/run/spinifex-eks/k3s-restore-block",
            "While this file exists the k3s server is not started (a datastore restore runs).",
        ),
    ],
)


@noderole.hookimpl
def noderole_addhooks(pluginmanager: pluggy.PluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


@noderole.hookimpl
def noderole_settings() -> noderole.SettingsTable:
    return SETTINGS


@noderole.hookimpl
def noderole_services(node: NodeContext) -> list[noderole.Service]:
    cfg = node.settings(TABLE)
    _check_env_keys(cfg)
    # The server's and the agent's k3s both take what other plugins contribute: their hooks are
    # called once, here, and merged for each side.
    gathered = gather_contributions(node)
    return [
        _cluster_init(cfg),
        _cluster_join(node, cfg),
        _server(node, cfg, gathered),
        _agent(node, cfg, gathered),
    ]


ENV_KEYS = ("join_url_key", "join_token_key", "join_token_file_key", "role_key")
"""Settings that name a key of the first-boot environment file."""


def _check_env_keys(cfg: Mapping[str, Any]) -> None:
    """A ConfigError for a setting of :data:`ENV_KEYS` no ``KEY=VALUE`` line can hold (such a
    key is never found, and each use of it says the value is missing)."""
    for name in ENV_KEYS:
        key = cfg[name]
        if not (key.isascii() and key.isidentifier()):  # [A-Za-z_][A-Za-z0-9_]*
            raise noderole.ConfigError(
                f"{noderole.CONFIG_PATH}:{TABLE}.{name}: {key!r} is not a name an environment "
                "file's KEY=VALUE line can hold (letters, digits and '_', not starting with a "
                "digit): set the key the first-boot file uses"
            )


@noderole.hookimpl
def noderole_resolve_role(node: NodeContext) -> str | None:
    """The role from first-boot.env's role key; ``agent`` when only agent.env exists."""
    cfg = node.settings(TABLE)
    _check_env_keys(cfg)
    env_path, key = cfg["first_boot_env"], cfg["role_key"]
    if node.exists(env_path):
        role = node.read_env(env_path).values.get(key, "").strip()
        if role in ROLES:
            return role
        if role:
            raise EnvFileError(
                f"{key}={role!r} in {env_path} is not a role: set it to one of {', '.join(ROLES)}"
            )
        if not node.exists(cfg["agent_env"]):
            raise EnvFileError(
                f"{key} missing from {env_path}: set it to one of {', '.join(ROLES)}, or pass "
                "the role to apply"
            )
    if node.exists(cfg["agent_env"]):
        return "agent"
    return None


@noderole.hookimpl
def noderole_standins(node: NodeContext) -> list[noderole.StandIn | noderole.RehearsalFile]:
    from noderole_k3s.standins import K3S_STANDIN  # rehearsals only

    cfg = node.settings(TABLE)
    return [
        noderole.StandIn(
            path=cfg["binary"],
            content=K3S_STANDIN,
            description=(
                "server: writes a k3s-like CA and admin kubeconfig after 0.5 s, then stays up; "
                "agent: stays up"
            ),
        ),
        # Inputs a rehearsal needs and that k3s's own files are: a configuration skeleton, and
        # the agent's join values (first-boot.env belongs to the launcher, not to k3s).
        noderole.RehearsalFile(
            path=cfg["config_skel"],
            content="# noderole rehearsal\nwrite-kubeconfig-mode: '0600'\n",
            description="a minimal k3s configuration skeleton",
            mode=0o600,
        ),
        noderole.RehearsalFile(
            path=cfg["first_boot_env"],
            content=(
                f"{cfg['join_url_key']}=https://127.0.0.1:6443\n"
                f"{cfg['join_token_key']}=rehearsal-token\n"
            ),
            description="server-join values for a rehearsal (other plugins add their own keys)",
            mode=0o600,
        ),
        noderole.RehearsalFile(
            path=cfg["agent_env"],
            content="K3S_URL=https://127.0.0.1:6443\nK3S_TOKEN=rehearsal-token\n",
            description="agent join values for a rehearsal",
            mode=0o600,
        ),
    ]


# --------------------------------------------------------------------------- helpers


OPEN_FILES = 1048576
"""k3s's limit of open files, which its containers inherit (k3s's install script's figure)."""


def _supervision(cfg: Mapping[str, Any]) -> noderole.Supervision:
    # As k3s's install script renders its systemd unit (KillMode=process, Delegate=yes,
    # LimitNOFILE=1048576, TasksMax=infinity, systemd's 90 s to stop): a stop or restart of k3s
    # ends k3s alone, so the node's containers run on through an upgrade or a config change,
    # and gives it time to shut its datastore down before a SIGKILL; k3s manages the control
    # groups its pods are limited by; its containers inherit its limit of open files, and its
    # shims' threads are not capped by systemd's default task limit. Type=notify, as the unit
    # has it too: k3s sends READY=1 once it is up, so what is ordered after it starts then.
    return noderole.Supervision(
        respawn_delay=cfg["respawn_delay"],
        respawn_max=cfg["respawn_max"],
        stop_timeout=cfg["stop_timeout"],
        stop_scope="process",
        delegate=True,
        open_files=OPEN_FILES,
        tasks="infinity",
        notify=True,
    )


def _dropin(cfg: Mapping[str, Any], name: str) -> str:
    return f"{cfg['config_dropin_dir'].rstrip('/')}/{name}"


def _read_env(node: NodeContext, path: str) -> tuple[Mapping[str, str], str | None]:
    """The file's values, or the reason it cannot be read (a Fail step, not a crash)."""
    try:
        return node.read_env(path).values, None
    except noderole.EnvFileError as exc:
        return {}, str(exc)


# --------------------------------------------------------------------------- role milestones


def _cluster_init(cfg: Mapping[str, Any]) -> noderole.Service:
    return noderole.Service(
        name="k3s-cluster-init",
        description="k3s role server: this node initialises the cluster (cluster-init)",
        roles=["server"],
        provide=["k3s-cluster"],
        before=["k3s"],
        pre_start=[
            noderole.WriteFile(
                path=_dropin(cfg, ROLE_DROPIN),
                content=_HEADER + "cluster-init: true\n",
                mode=0o600,
            )
        ],
    )


def _cluster_join(node: NodeContext, cfg: Mapping[str, Any]) -> noderole.Service:
    env_path = cfg["first_boot_env"]
    values, unreadable = _read_env(node, env_path)
    url_key, token_key = cfg["join_url_key"], cfg["join_token_key"]
    file_key = cfg["join_token_file_key"]
    url, token = values.get(url_key, "").strip(), values.get(token_key, "").strip()
    token_file = values.get(file_key, "").strip()
    steps: list[Step]
    if unreadable:
        steps = [noderole.Fail(message=unreadable)]
    elif not url or not (token or token_file):
        missing = " and ".join(
            key for key, value in ((url_key, url), (token_key, token or token_file)) if not value
        )
        steps = [
            noderole.Fail(
                message=(
                    f"{missing} missing from {env_path}: a server-join node needs the URL of an "
                    f"existing server ({url_key}=https://HOST:6443) and the cluster token "
                    f"({token_key}=..., or {file_key}=PATH of a file holding it); add them, or "
                    "apply role server to start a new cluster"
                )
            )
        ]
    elif _not_https(url):
        steps = [noderole.Fail(message=_url_problem(url_key, url, env_path))]
    elif token_file and (
        problem := _token_file_problem(node, token_file, env_path, file_key, token_key)
    ):
        steps = [noderole.Fail(message=problem)]
    else:
        # The token goes to a private drop-in, never to the command line: a WriteFile step shows
        # only its size in `plan`. k3s reads a token file itself (it wins over a token).
        keys = {"server": url, "token": token, "token-file": token_file}
        text = render_yaml([{key: value for key, value in keys.items() if value}], header=_HEADER)
        steps = [noderole.WriteFile(path=_dropin(cfg, ROLE_DROPIN), content=text, mode=0o600)]
    return noderole.Service(
        name="k3s-cluster-join",
        description="k3s role server-join: this node joins an existing cluster",
        roles=["server-join"],
        provide=["k3s-cluster"],
        before=["k3s"],
        pre_start=steps,
    )


def _not_https(url: str) -> bool:
    """True unless ``url`` is ``https://`` and more: what k3s's install script takes as K3S_URL."""
    return not (url.startswith("https://") and len(url) > len("https://"))


def _url_problem(key: str, url: str, env_path: str) -> str:
    """k3s's install script's refusal of a K3S_URL that is not https, with the file and the fix."""
    return (
        f"Only https:// URLs are supported for {key} (have {url}) in {env_path}: set it to the "
        f"address of an existing server, as in {key}=https://HOST:6443"
    )


def _token_file_problem(
    node: NodeContext,
    path: str,
    env_path: str,
    key: str = "K3S_TOKEN_FILE",
    token_key: str = "K3S_TOKEN",
) -> str | None:
    """Why k3s could not read its token from ``path`` (``key``'s value), or None.

    Looked at as the service starts (the pre-start defines it anew): a file written at first
    boot, before noderole runs, is there."""
    where = f"{key}={path} in {env_path}"
    if not path.startswith("/"):
        return (
            f"{where} is not an absolute path (k3s would look for it from its working "
            "directory): write the file's path in full"
        )
    try:
        text = node.read_text(path)
    except FileNotFoundError:
        return (
            f"{where} names no file: write the token there (or set {token_key} instead) and "
            "apply again"
        )
    except (OSError, UnicodeDecodeError) as exc:
        return f"{where}: {_unreadable(path, exc)}; k3s could not read its token from it either"
    if not text.strip():
        return f"{where} is empty: write the token there and apply again"
    return None


_LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")


def _is_node_name(name: str) -> bool:
    """True when ``name`` is a Kubernetes node name (a DNS-1123 subdomain) once lowered, as
    k3s lowers it: dot-separated labels of letters, digits and '-', each starting and ending
    with a letter or digit, at most 253 characters in all."""
    name = name.lower()
    if not 0 < len(name) <= 253:
        return False
    return all(
        label and set(label) <= _LABEL_CHARS and label[0] != "-" and label[-1] != "-"
        for label in name.split(".")
    )


def _node_name_problem(name: str, env_path: str) -> str:
    """Why K3S_NODE_NAME cannot name a node, with the file and the fix."""
    shown = name if len(name) <= 80 else f"{name[:40]}...{name[-20:]} ({len(name)} characters)"
    suggestion = "".join(c if c in _LABEL_CHARS or c == "." else "-" for c in name.lower())
    suggestion = ".".join(label.strip("-") for label in suggestion.split(".") if label.strip("-"))
    hint = (
        f", as in K3S_NODE_NAME={suggestion}"
        if suggestion and _is_node_name(suggestion) and len(name) <= 80
        else ""
    )
    return (
        f"K3S_NODE_NAME={shown} in {env_path} cannot name a Kubernetes node, and k3s would "
        "fail to register it: a node name is letters, digits, '-' and '.', each dot-separated "
        "part starting and ending with a letter or digit, at most 253 characters (k3s lowers "
        f"the case itself); set it to such a name{hint}, or remove it to use the host name"
    )


# --------------------------------------------------------------------------- server


def _unreadable(path: str, exc: OSError | UnicodeDecodeError) -> str:
    """Why a k3s configuration file could not be read, said as noderole says it of an
    environment file (not Python's codec message)."""
    if isinstance(exc, UnicodeDecodeError):
        return (
            f"{path} is not UTF-8 text (invalid byte at {exc.start}); k3s reads it as UTF-8: "
            "convert it (e.g. iconv -f LATIN1 -t UTF-8) or rewrite it"
        )
    return f"cannot read {path}: {exc}"


def _base_config(
    node: NodeContext, cfg: Mapping[str, Any]
) -> tuple[Mapping[str, Any], list[Step], list[str]]:
    """config.yaml's keys, the step deriving it from the skeleton if needed, and problems."""
    config, skel = cfg["config"], cfg["config_skel"]
    source = config
    steps: list[Step] = []
    try:
        text = node.read_text(config)
    except FileNotFoundError:
        source = skel
        try:
            text = node.read_text(skel)
        except FileNotFoundError:
            return (
                {},
                [],
                [
                    f"neither {config} nor {skel} exists, so k3s has no configuration: write "
                    f"{config} (or the image's {skel}) and apply again"
                ],
            )
        except (OSError, UnicodeDecodeError) as exc:
            return {}, [], [_unreadable(skel, exc)]
        steps.append(noderole.WriteFile(path=config, content=text, mode=0o600))
    except (OSError, UnicodeDecodeError) as exc:
        return {}, [], [_unreadable(config, exc)]
    try:
        return parse_config_text(text, source=source), steps, []
    except ValueError as exc:
        return {}, [], [str(exc)]


def _contributed(
    gathered: Gathered, cfg: Mapping[str, Any], side: str, base: Mapping[str, Any]
) -> tuple[list[Step], list[str]]:
    """The steps writing what other plugins contribute to the ``side`` k3s, and problems."""
    contributed = contributions_for(gathered, side)
    steps: list[Step] = []
    for extra in contributed.files:
        steps.append(
            noderole.WriteFile(
                path=extra.path, content=render_yaml(extra.documents), mode=extra.mode
            )
        )
    merged = with_base_lists(contributed.config, base)
    steps.append(
        noderole.WriteFile(
            path=_dropin(cfg, CONTRIBUTED_DROPIN),
            content=render_yaml([merged], header=_HEADER),
            mode=0o600,
        )
    )
    manifests_dir = cfg["manifests_dir"].rstrip("/")
    for manifest in contributed.manifests:
        header = f"# Staged by noderole from plugin {manifest.origin}.\n"
        steps.append(
            noderole.WriteFile(
                path=f"{manifests_dir}/{manifest.name}",
                content=render_yaml(manifest.documents, header=header),
                mode=0o600,
            )
        )
    return steps, list(contributed.problems)


def _restore_guard(marker: str) -> noderole.Call:
    """A step failing k3s's start while ``marker`` exists (checked when k3s is about to start)."""

    def check(ctx: StepContext) -> None:
        if os.path.lexists(ctx.root.local(marker)):  # a string: an apply imports no pathlib
            raise StepError(
                f"refusing to start k3s on an empty datastore: {marker} exists, so a restore of "
                "the datastore from a snapshot is in progress; let the restore finish (it "
                "removes the marker) and apply again, or remove the marker if no restore is "
                "running"
            )

    return noderole.Call(
        function=check, description=f"refuse to start while {marker} exists", key=marker
    )


_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD")
"""A variable whose name holds one of these is a :class:`noderole.Secret` (``***`` in plan,
status and logs): K3S_TOKEN, K3S_AGENT_TOKEN, a registry password."""


def _environment_paths(
    node: NodeContext, cfg: Mapping[str, Any], files_key: str, file_key: str
) -> tuple[str, list[str]]:
    """The setting that names the files of a k3s's environment, and the files, in order.

    ``files_key`` (``environment_files``) lists them, separated by blanks. ``file_key``
    (``environment_file``), which named the one file read before the list existed, still does
    when config.toml sets it (``""``: none), so that a configuration written then keeps its
    meaning. config.toml setting both is a ConfigError, which file it means cannot be told;
    but ``file_key = ""`` beside ``files_key`` is its default written out (the configuration
    reference lists every default), and the list is read.
    """
    entries = node.config.values[TABLE]
    from_file = {key: entries[key].source != "default" for key in (files_key, file_key)}
    if from_file[files_key] and from_file[file_key] and cfg[file_key]:
        raise noderole.ConfigError(
            f"{noderole.CONFIG_PATH}:{TABLE}.{file_key} and {TABLE}.{files_key} are both set: "
            f"{files_key} replaces {file_key}, the one file read before it existed; list that "
            f"file in {files_key} and remove {file_key}"
        )
    if from_file[file_key] and not from_file[files_key]:
        return file_key, [cfg[file_key]] if cfg[file_key] else []
    paths = cfg[files_key].split()
    for path in paths:
        if not path.startswith("/"):
            raise noderole.ConfigError(
                f"{noderole.CONFIG_PATH}:{TABLE}.{files_key}: {path!r} is not an absolute path; "
                "list the files by their absolute paths, separated by blanks"
            )
    return files_key, paths


def _environment_files(
    node: NodeContext, cfg: Mapping[str, Any], name: str, prefix: str = ""
) -> tuple[dict[str, str | noderole.Secret], list[Step], str | None]:
    """The variables of the files k3s's own unit and runscript read for the k3s named
    ``name``, for its environment (see :func:`_upstream_environment_files`), or those
    ``[k3s] {prefix}environment_files`` names: what k3s and its containerd read from their
    environment, chiefly HTTP_PROXY, HTTPS_PROXY and NO_PROXY, without which a node behind a
    proxy pulls no image. The files are read in order and a later file's value wins, as systemd
    reads ``EnvironmentFile=`` lines and a shell sources files.

    An absent file gives none, as ``EnvironmentFile=-`` lets it (a warning when it is none of
    k3s's own files, which config.toml named: a typo would otherwise leave the node without its
    proxy in silence). Also a warning step per malformed line, or why a file cannot be read
    (for a failing step)."""
    key, paths = _environment_paths(
        node, cfg, f"{prefix}environment_files", f"{prefix}environment_file"
    )
    upstream = _upstream_environment_files(name)
    merged: dict[str, str] = {}
    warnings: list[Step] = []
    unreadable: list[str] = []
    for path in paths:
        try:
            env = node.read_env(path)
        except noderole.EnvFileError as exc:
            if path == MACHINE_ENVIRONMENT:
                # The whole machine's, which k3s's systemd unit never reads: a file there that
                # does not parse (Latin-1 text, say) must not keep k3s from starting.
                warnings.append(
                    noderole.Warn(
                        message=f"{exc}: k3s starts without its variables; fix it, or leave it "
                        f"out of {noderole.CONFIG_PATH}:{TABLE}.{key}"
                    )
                )
            else:
                unreadable.append(str(exc))
            continue
        if not env.exists:
            if path not in upstream:
                fix = 'set it to ""' if key.endswith("_file") else "remove it from the list"
                absent = (
                    f"{noderole.CONFIG_PATH}:{TABLE}.{key} names {path}, which does not exist: "
                    "k3s starts without the variables it would hold (a proxy, say); fix the "
                    f"path, or {fix} if there is no such file"
                )
                warnings.append(noderole.Warn(message=absent))
            continue
        merged.update(env.values)
        warnings += [
            noderole.Warn(message=f"{warning}: the line is not passed to k3s")
            for warning in env.warnings
        ]
    if unreadable:
        return {}, [], "; ".join(unreadable)
    values: dict[str, str | noderole.Secret] = {}
    for variable, value in merged.items():
        upper = variable.upper()
        secret = any(word in upper for word in _SECRET_WORDS) or (
            upper.endswith("_PROXY") and "@" in value  # http://user:password@proxy:3128
        )
        values[variable] = noderole.Secret(value) if secret else value
    return values, warnings, None


_ORDERED_AFTER = ["net", "cgroups"]
"""What k3s starts after without needing it, as k3s's install script has it: its systemd unit
``Wants=`` and ``After=network-online.target``, its OpenRC runscript ``after network-online``
and ``want cgroups``. ``want`` pulls both into the plan and orders k3s after them, and k3s
starts when they fail (a network up late), as the stock k3s does, retrying its connections
itself; ``need`` failed k3s then, and nothing started it again. Rendered: OpenRC ``want net
cgroups``, systemd ``Wants=`` and ``After=network-online.target``."""


def _server(node: NodeContext, cfg: Mapping[str, Any], gathered: Gathered) -> noderole.Service:
    # The restore marker is looked for when k3s starts; read through the node context now, so
    # that a path it cannot use (a relative one) is config.toml's error at plan time, not the
    # guard's at every start.
    node.exists(cfg["restore_block"])
    base, steps, problems = _base_config(node, cfg)
    contributed, found = _contributed(gathered, cfg, "server", base)
    problems += found
    environment, warnings, unreadable = _environment_files(node, cfg, "k3s")
    if unreadable:
        problems.append(unreadable)
    if problems:
        steps = [noderole.Fail(message="; ".join(problems))]
        environment = {}
    else:
        steps = [
            *warnings,
            _restore_guard(cfg["restore_block"]),
            *steps,
            *contributed,
        ]
    return noderole.Service(
        name="k3s",
        environment=environment,
        description="k3s server (Kubernetes control plane)",
        roles=["server", "server-join"],
        need=["k3s-cluster"],
        want=_ORDERED_AFTER,
        after=["firewall"],
        command=[cfg["binary"], "server", "--config", cfg["config"]],
        pidfile=cfg["pidfile"],
        output_log=cfg["log"],
        error_log=cfg["log"],
        supervision=_supervision(cfg),
        pre_start=steps,
        readiness=noderole.WaitForPaths(
            paths=[cfg["kubeconfig"]],
            timeout=cfg["ready_timeout"],
            message=f"k3s did not write {cfg['kubeconfig']} within {{elapsed}}s",
        ),
    )


# --------------------------------------------------------------------------- agent


def _agent_base(node: NodeContext, cfg: Mapping[str, Any]) -> tuple[Mapping[str, Any], list[str]]:
    """config.yaml's keys when an agent has one (k3s agent reads it too; no skeleton here)."""
    config = cfg["config"]
    try:
        text = node.read_text(config)
    except FileNotFoundError:
        return {}, []
    except (OSError, UnicodeDecodeError) as exc:
        return {}, [_unreadable(config, exc)]
    try:
        return parse_config_text(text, source=config), []
    except ValueError as exc:
        return {}, [str(exc)]


def _agent(node: NodeContext, cfg: Mapping[str, Any], gathered: Gathered) -> noderole.Service:
    env_path = cfg["agent_env"]
    values, unreadable = _read_env(node, env_path)
    url, token = values.get("K3S_URL", "").strip(), values.get("K3S_TOKEN", "").strip()
    token_file = values.get("K3S_TOKEN_FILE", "").strip()
    name = values.get("K3S_NODE_NAME", "").strip()
    environment: dict[str, str | noderole.Secret] = {}
    steps: list[Step] = []
    base, problems = _agent_base(node, cfg)
    extra, warnings, unreadable_extra = _environment_files(node, cfg, "k3s-agent", "agent_")
    if unreadable_extra:
        problems.append(unreadable_extra)
    contributed, found = _contributed(gathered, cfg, "agent", base)
    problems += found
    if unreadable:
        steps.append(noderole.Fail(message=unreadable))
    elif not url or not (token or token_file):
        missing = " and ".join(
            k for k, v in (("K3S_URL", url), ("K3S_TOKEN", token or token_file)) if not v
        )
        steps.append(
            noderole.Fail(
                message=(
                    f"{missing} missing from {env_path}: an agent needs the server URL "
                    "(K3S_URL=https://HOST:6443) and the node token (K3S_TOKEN=..., or "
                    "K3S_TOKEN_FILE=PATH of a file holding it); add them and apply again"
                )
            )
        )
    elif _not_https(url):
        steps.append(noderole.Fail(message=_url_problem("K3S_URL", url, env_path)))
    elif token_file and (problem := _token_file_problem(node, token_file, env_path)):
        steps.append(noderole.Fail(message=problem))
    elif name and not _is_node_name(name):
        steps.append(noderole.Fail(message=_node_name_problem(name, env_path)))
    elif problems:
        steps.append(noderole.Fail(message="; ".join(problems)))
    else:
        # Environment, never argv: a command line is world-readable in /proc. Secret keeps the
        # token out of plan, status and logs.
        # The files' first, as the unit's EnvironmentFile= lines come before the keys k3s's
        # install script writes: agent.env's win.
        environment = {**extra, "K3S_URL": url}
        if token:
            environment["K3S_TOKEN"] = noderole.Secret(token)
        if token_file:  # k3s reads it, as k3s's install script lets it (it wins over K3S_TOKEN)
            environment["K3S_TOKEN_FILE"] = token_file
        if name:
            environment["K3S_NODE_NAME"] = name
        steps += [*warnings, *contributed]
    return noderole.Service(
        name="k3s-agent",
        description="k3s agent (Kubernetes worker: kubelet and container runtime)",
        roles=["agent"],
        want=_ORDERED_AFTER,
        after=["firewall"],
        command=[cfg["binary"], "agent"],
        environment=environment,
        pidfile=cfg["agent_pidfile"],
        output_log=cfg["agent_log"],
        error_log=cfg["agent_log"],
        supervision=_supervision(cfg),
        pre_start=steps,
    )
