"""noderole's own boot entry: what applies the recorded role at every boot.

``noderole enable ROLE`` records the role (``/var/lib/noderole/role``) and installs one of:

- OpenRC: the runscript ``/etc/init.d/noderole``, linked into the default runlevel, ordered
  ``after`` the cloud-init services (``cloud-config``, ``cloud-final``) so the node's first-boot
  inputs exist when the role is applied;
- systemd: the oneshot ``/etc/systemd/system/noderole.service`` (``After=network-online.target
  multi-user.target cloud-final.service``, ``Wants=network-online.target``), linked into
  ``multi-user.target.wants``. ``After=multi-user.target`` as cloud-final has it: otherwise the
  target, ordered after what it wants, and cloud-final, ordered after the target, close an
  ordering cycle that systemd breaks by deleting noderole's start job at boot.

Either one reads the recorded role at boot and runs ``noderole apply --backend KIND ROLE``, so
``noderole enable agent`` later changes the role without rewriting the entry. ``noderole
disable`` removes what ``enable`` wrote, and only that: each path is kept in noderole's one
record of what it wrote (:mod:`noderole.manifest`, kind ``boot``) with its content digest or link
target, and a file changed since is left in place and named. Everything goes through the node
root, so an image build can enable a role with ``--root``.

Nodes enabled by an earlier version kept a record of their own,
``/var/lib/noderole/boot-entry.json``: it is read once, folded into the manifest and removed
(:func:`_fold_legacy`), so ``disable`` still removes their entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from noderole import manifest, recordclass
from noderole.errors import BackendError
from noderole.paths import ROLE_FILE
from noderole.reading import read_json
from noderole.root import NodeRoot
from noderole.state import write_role
from noderole.supervisor import sha256  # the interpreter's own: no OpenSSL loaded

__all__ = [
    "BOOT_KINDS",
    "ENTRY_NAME",
    "LEGACY_RECORD",
    "BootFile",
    "boot_entry",
    "disable",
    "enable",
    "enabled_kind",
]

ENTRY_NAME = "noderole"
"""The runscript's and the unit's name."""

LEGACY_RECORD = "/var/lib/noderole/boot-entry.json"
"""Where versions before the one manifest kept what ``enable`` wrote (node path): folded into
the manifest the first time it is found."""

BOOT_KINDS = ("openrc", "systemd")


@recordclass.frozen(kw_only=True)
class BootFile:
    """One path the boot entry consists of: a file (``content``) or a link (``target``)."""

    path: str
    """Node path."""
    content: str | None = None
    """The file's text; None for a link."""
    target: str | None = None
    """The link's target; None for a file."""
    mode: int = 0o644
    """A file's permission bits."""


def _openrc(noderole_path: str) -> list[BootFile]:
    from noderole.render._quote import sh_quote

    script = f"""\
#!/sbin/openrc-run
# Written by `noderole enable`; `noderole disable` removes it. Applies the role recorded in
# {ROLE_FILE} at every boot (at the first boot, the one the plugins resolve).

description="Apply the node's noderole role"

depend() {{
\t# The first-boot inputs the role reads are written by cloud-init.
\tafter net cloud-config cloud-final
}}

start() {{
\t# No role on the command line: apply takes the recorded one, else (first boot) the one the
\t# plugins resolve from the first-boot inputs; with neither it fails, saying what to pass.
\tebegin "Applying the noderole role"
\t{sh_quote(noderole_path)} apply --backend openrc
\teend $?
}}
"""
    return [
        BootFile(path=f"/etc/init.d/{ENTRY_NAME}", content=script, mode=0o755),
        BootFile(path=f"/etc/runlevels/default/{ENTRY_NAME}", target=f"/etc/init.d/{ENTRY_NAME}"),
    ]


def _systemd(noderole_path: str) -> list[BootFile]:
    from noderole.render._quote import systemd_command_line

    # No role: apply takes the recorded one, else the one the plugins resolve at first boot.
    command = systemd_command_line([noderole_path, "apply", "--backend", "systemd"])
    unit = f"""\
# Written by `noderole enable`; `noderole disable` removes it.
[Unit]
Description=Apply the node's noderole role (recorded in {ROLE_FILE}, or resolved at first boot)
Wants=network-online.target
# After multi-user.target, as cloud-final.service is: a target is ordered after what it wants
# unless told otherwise, and with cloud-final after multi-user.target that closed a cycle,
# which systemd broke by deleting this unit's start job.
After=network-online.target multi-user.target cloud-final.service

[Service]
Type=oneshot
RemainAfterExit=yes
# apply bounds its own waits and starts units with --no-block: it cannot deadlock the boot.
TimeoutStartSec=infinity
ExecStart={command}

[Install]
WantedBy=multi-user.target
"""
    name = f"{ENTRY_NAME}.service"
    return [
        BootFile(path=f"/etc/systemd/system/{name}", content=unit),
        BootFile(path=f"/etc/systemd/system/multi-user.target.wants/{name}", target=f"../{name}"),
    ]


def boot_entry(
    kind: str,
    *,
    noderole_path: str,
    root: NodeRoot | None = None,
    renew_interval: float = 86400.0,
    renew_jitter: float = 3600.0,
) -> list[BootFile]:
    """The files and links of the boot entry for ``kind`` (``openrc`` or ``systemd``), with the
    periodic job that renews certificates while the node runs (:func:`noderole.schedule.
    periodic_files`, from the ``renew_interval`` and ``renew_jitter`` settings; ``root`` gives
    the node's renewal offset)."""
    if kind == "openrc":
        items = _openrc(noderole_path)
    elif kind == "systemd":
        items = _systemd(noderole_path)
    else:
        raise BackendError(f"no boot entry for backend {kind!r}: use --backend openrc or systemd")
    from noderole.render import RenderedFile
    from noderole.schedule import periodic_files

    periodic = periodic_files(
        kind,
        noderole_path=noderole_path,
        jitter=renew_jitter,
        interval=renew_interval,
        root=root,
    )
    for extra in periodic:
        if isinstance(extra, RenderedFile):
            items.append(BootFile(path=extra.path, content=extra.content, mode=extra.mode))
        else:
            items.append(BootFile(path=extra.path, target=extra.target))
    return items


def _digest(text: str) -> str:
    return "sha256:" + sha256(text.encode()).hexdigest()


def _fold_legacy(root: NodeRoot) -> None:
    """Move an earlier version's ``boot-entry.json`` into the manifest (once), then remove it.

    Its digests (``file:HEX``, ``link:TARGET``) become the manifest's (``sha256:HEX``,
    ``link:TARGET``), so a file changed since that version's ``enable`` is still kept.
    """
    local = root.resolve(LEGACY_RECORD)
    try:
        data = read_json(local)
    except FileNotFoundError:
        return
    except (OSError, ValueError):
        data = {}  # unreadable: nothing is known to be the entry's, so nothing is removed
    paths = data.get("paths", {}) if isinstance(data, dict) else {}
    found = []
    for path, wrote in paths.items() if isinstance(paths, dict) else ():
        digest = str(wrote)
        if digest.startswith("file:"):
            digest = "sha256:" + digest.removeprefix("file:")
        elif digest == "directory":
            digest = "dir"
        found.append(manifest.Entry(path=str(path), kind="boot", digest=digest))
    manifest.remember(root, found)
    local.unlink(missing_ok=True)
    manifest.forget(root, [LEGACY_RECORD])


def _recorded(root: NodeRoot) -> dict[str, str]:
    """path -> digest of what ``enable`` wrote ({} when nothing)."""
    _fold_legacy(root)
    return {p: e.digest for p, e in manifest.entries(root).items() if e.kind == "boot"}


def _current(local: Path) -> str | None:
    """What is at ``local`` now, in manifest form (None: nothing)."""
    return manifest.digest_at(local)


def _wanted(item: BootFile) -> str:
    if item.content is not None:
        return _digest(item.content)
    return f"link:{item.target}"


def enable(
    root: NodeRoot,
    role: str | None,
    kind: str,
    *,
    noderole_path: str,
    renew_interval: float = 86400.0,
    renew_jitter: float = 3600.0,
) -> list[str]:
    """Record ``role`` (None: leave it to the first boot's resolution) and install the boot
    entry; return the node paths written.

    Idempotent. Refuses (before writing anything) a path that holds something ``enable`` did not
    write, naming it. An entry of the other kind that ``enable`` wrote earlier is removed.
    """
    from noderole.atomic import write_atomic

    items = boot_entry(
        kind,
        noderole_path=noderole_path,
        root=root,
        renew_interval=renew_interval,
        renew_jitter=renew_jitter,
    )
    previous = _recorded(root)
    for item in items:
        now = _current(root.resolve(item.path))
        if now is not None and now != _wanted(item) and previous.get(item.path) != now:
            raise BackendError(
                f"{item.path} exists and was not written by noderole enable: remove it (or move "
                "it aside) and run enable again"
            )
    if role is not None:
        write_role(root, role)  # first, as apply does: a full state directory changes nothing
    stale = [p for p in previous if p not in {i.path for i in items}]
    removed, gone, _ = _remove(root, {p: previous[p] for p in stale})
    manifest.forget(root, [*removed, *gone])
    made: dict[str, str] = {}  # what this run put where nothing was: taken back on a failure
    for item in items:
        local = root.resolve(item.path)
        try:
            before = _current(local)
            local.parent.mkdir(parents=True, exist_ok=True)
            if item.content is not None:
                write_atomic(local, item.content.encode(), mode=item.mode)
            elif before != _wanted(item):
                assert item.target is not None
                if local.is_symlink():
                    local.unlink()
                local.symlink_to(item.target)
        except OSError as error:
            _remove(root, made)
            from noderole.atomic import remedy

            raise BackendError(
                f"cannot write {item.path} (at {local}): {error.strerror or error}"
                f"{remedy(error)}; enable took back the part of the boot entry it had written "
                "(nothing new is installed): run it again once fixed"
            ) from None
        if before is None:
            made[item.path] = _wanted(item)
    # One record of what noderole wrote: disable and reset both read it.
    manifest.remember(
        root, [manifest.Entry(path=i.path, kind="boot", digest=_wanted(i)) for i in items]
    )
    return [i.path for i in items]


def _remove(root: NodeRoot, entries: dict[str, str]) -> tuple[list[str], list[str], list[str]]:
    """Unlink each path still holding what was written: (removed, already gone, kept)."""
    removed: list[str] = []
    gone: list[str] = []
    kept: list[str] = []
    for path, wrote in sorted(entries.items()):
        local = root.resolve(path)
        now = _current(local)
        if now is None:
            gone.append(path)
        elif now != wrote:
            kept.append(path)
        else:
            local.unlink()
            removed.append(path)
    return removed, gone, kept


def disable(root: NodeRoot) -> tuple[list[str], list[str]]:
    """Remove the boot entry ``enable`` wrote: (paths removed, paths kept because they changed).

    The recorded role stays (``apply`` records it too); nothing happens when nothing is enabled.
    The kept paths stay in the manifest (``reset`` names them again).
    """
    removed, gone, kept = _remove(root, _recorded(root))
    manifest.forget(root, [*removed, *gone])
    return removed, kept


def enabled_kind(root: NodeRoot) -> str | None:
    """The backend of the installed boot entry, or None."""
    recorded = _recorded(root)
    for kind, name in (
        ("systemd", f"/etc/systemd/system/{ENTRY_NAME}.service"),
        ("openrc", f"/etc/init.d/{ENTRY_NAME}"),
    ):
        if name in recorded:
            return kind
    return None


def describe(paths: Sequence[str]) -> str:
    return ", ".join(paths) or "nothing"
