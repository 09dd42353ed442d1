"""``noderole rehearse ROLE``: the main job, end to end, on any machine, without privileges.

Makes a scratch root, writes the stand-ins plugins supply (``noderole_standins``: small programs
that behave like the real ones where the boot cares, and the input files a boot would find),
runs ``apply`` with its normal progress output, shows ``status``, then stops everything and
removes the scratch root (unless ``--keep``). Useful in an image's CI and as a first look.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import attrs
import click

from noderole.cli._app import App
from noderole.cli._options import role_argument
from noderole.cli._output import echo_status
from noderole.config import CONFIG_PATH
from noderole.errors import ExitCode, PluginError, UsageError
from noderole.records import StandIn
from noderole.root import NodeRoot

__all__ = ["rehearse_command"]

REHEARSAL_CONFIG = """\
# Written by `noderole rehearse`: the scratch root has no network of its own to wait for.
[noderole]
net_check = false
"""


def stage_rehearsal(app: App, scratch: Path) -> App:
    """Write the config and every stand-in under ``scratch``; return an App rooted there.

    Plugins may add their own table to the rehearsal's config.toml with a stand-in at that path
    (the konnectivity plugin picks a free health port, so a rehearsal never collides with a
    real server or another rehearsal): input files are joined, the core's part first.
    """

    def rooted() -> App:
        return app.at_root(NodeRoot(scratch))

    config = scratch / CONFIG_PATH.lstrip("/")
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(REHEARSAL_CONFIG)
    staging = rooted()
    core = attrs.evolve(
        StandIn(path=CONFIG_PATH, content=REHEARSAL_CONFIG, mode=0o644), origin="builtin"
    )
    standins = [core, *staging.standins()]
    for path, (content, mode) in merge_standins(standins).items():
        target = staging.root.resolve(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        target.chmod(mode)
    return rooted()  # a fresh App: it reads the config.toml the plugins added to


def merge_standins(standins: Sequence[StandIn]) -> dict[str, tuple[str, int]]:
    """Content and mode per path.

    Input files (no execute bit) that several plugins supply are joined in plugin-name order,
    noderole's own part first, with the strictest mode: two plugins each add their keys to
    first-boot.env, or their table to config.toml. Two programs at one path are an error naming
    both plugins."""
    by_path: dict[str, list[StandIn]] = {}
    for standin in standins:
        by_path.setdefault(standin.path, []).append(standin)
    merged: dict[str, tuple[str, int]] = {}
    for path, group in sorted(by_path.items()):
        group.sort(key=lambda s: (s.origin != "builtin", s.origin))  # noderole's own part first
        if len(group) > 1 and any(s.mode & 0o111 for s in group):
            owners = " and ".join(f"plugin {s.origin!r}" for s in group)
            raise PluginError(
                f"{owners} both supply the stand-in program {path}; disable one with "
                "--disable-plugin NAME"
            )
        content = "".join(
            s.content if s.content.endswith("\n") else s.content + "\n" for s in group
        )
        mode = group[0].mode
        for other in group[1:]:
            mode &= other.mode
        merged[path] = (content if len(group) > 1 else group[0].content, mode)
    return merged


@click.command("rehearse")
@role_argument
@click.option("--keep", is_flag=True, help="Keep the scratch root (and leave nothing running).")
@click.pass_obj
def rehearse_command(app: App, role: str, keep: bool) -> None:
    """Rehearse `apply ROLE` in a scratch root with the plugins' stand-in executables."""
    from noderole.backends.native import NativeBackend
    from noderole.console import ConsoleProgress

    if not app.root.is_real:
        raise UsageError("rehearse makes its own scratch root; do not combine it with --root")
    scratch = Path(tempfile.mkdtemp(prefix=f"noderole-rehearse-{role}-"))
    click.echo(f"rehearsing role {role} in {scratch}")
    ok = False
    backend = None
    try:
        rehearsal = stage_rehearsal(app, scratch)
        plan = rehearsal.plan(role)
        backend = NativeBackend(rehearsal.root)
        report = rehearsal.apply(plan, backend, progress=ConsoleProgress(), lock_timeout=30)
        ok = report.ok
        click.echo("")
        rows, verdict = rehearsal.status(plan, backend, wait=True, timeout=30.0)
        echo_status(plan.role, rows, verdict, as_json=False)
    finally:
        if backend is not None:
            backend.supervisor.shutdown()
            click.echo("\nstopped every service of the rehearsal")
        if keep:
            click.echo(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    if not ok:
        raise SystemExit(int(ExitCode.FAILED))
