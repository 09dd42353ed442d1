"""mkdocs hook: render noderole's reference pages from the code at build time, so they cannot drift.

A page asks for generated content with a marker comment on a line of its own:

- ``<!-- noderole:hooks -->``: every hookspec of :mod:`noderole.hookspecs`, from its docstring.
- ``<!-- noderole:settings [TABLE] -->``: every settings table the installed plugins declare, or
  just TABLE (the tutorial's example plugins under docs/examples are left out: not shipped).
- ``<!-- noderole:exit-codes -->``: :class:`noderole.errors.ExitCode`, from its source.
- ``<!-- noderole:errors -->``: the exception classes and the exit code each one carries.
- ``<!-- noderole:include PATH[:SECTION] LANG -->``: the file at PATH (from the repository root)
  as a code block; with SECTION, only the lines between ``--8<-- [start:SECTION]`` and
  ``--8<-- [end:SECTION]`` (pymdownx.snippets' section markers). A missing file or section fails
  the build. (Not ``--8<--`` inside a fence: ``ruff format`` formats Python blocks in Markdown
  and mangles that line; an HTML comment it leaves alone.)
- ``<!-- noderole:source PATH LANG -->``: like ``include``, but a missing file gives a note instead
  (a page may show a plugin that is not always there).
- ``<!-- noderole:transcript SCENARIO -->``: a real run of ``noderole`` in a scratch root staged
  with the shipped plugins' stand-ins, then broken as SCENARIO says (:data:`SCENARIOS`); each
  command bounded by :data:`TRANSCRIPT_TIMEOUT`, every process it started ended afterwards.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import re
import textwrap
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
_MARKER = re.compile(r"^<!-- noderole:(?P<what>[a-z-]+)(?P<args>(?: [^ >]+)*) -->$", re.MULTILINE)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Replace every marker on the page with what it asks for."""

    def replace(match: re.Match[str]) -> str:
        what, args = match["what"], match["args"].split()
        renderer = _RENDERERS.get(what)
        if renderer is None:
            raise ValueError(f"unknown noderole marker {what!r} (known: {', '.join(_RENDERERS)})")
        return renderer(*args)

    return _MARKER.sub(replace, markdown)


# --------------------------------------------------------------------------- reST to Markdown

_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc):`~?([^`]+)`")


def rst_to_markdown(text: str) -> str:
    """The subset of reST noderole's docstrings use: ``literals``, :roles:, and ``Example::``."""
    text = textwrap.dedent(text).strip("\n")
    lines = text.splitlines()
    # A docstring's first line is not indented like the rest: dedent the rest on its own.
    if len(lines) > 1:
        lines = [lines[0], *textwrap.dedent("\n".join(lines[1:])).splitlines()]
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("::"):
            out.append(_inline(line.rstrip()[:-1]))
            i += 1
            block: list[str] = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith((" ", "\t"))):
                block.append(lines[i])
                i += 1
            out += ["", "```python", *textwrap.dedent("\n".join(block)).strip("\n").split("\n")]
            out += ["```", ""]
            continue
        out.append(_inline(line))
        i += 1
    return "\n".join(out).strip() + "\n"


def _inline(line: str) -> str:
    line = _ROLE.sub(lambda m: f"``{m[1].rsplit('.', 1)[-1] if '~' in m[0] else m[1]}``", line)
    return line.replace("``", "`")


# --------------------------------------------------------------------------- hooks


def render_hooks(module_name: str = "noderole.hookspecs", level: str = "2") -> str:
    """One section per hookspec of ``module_name`` (a heading of ``level``): signature, whether
    it is historic, and its documentation."""
    import importlib

    from noderole.hookspecs import PROJECT

    hookspecs = importlib.import_module(module_name)
    heading = "#" * int(level)
    parts = [rst_to_markdown(hookspecs.__doc__ or "")]
    for name, function in _hookspecs(hookspecs):
        options = getattr(function, f"{PROJECT}_spec", {}) or {}
        parts.append(f"{heading} `{name}`\n")
        parts.append(f"```python\n@noderole.hookimpl\ndef {name}{_signature(function)}: ...\n```\n")
        if options.get("historic"):
            parts.append(
                "*Historic*: called for every plugin as it is registered, even plugins "
                "registered after the call was made.\n"
            )
        parts.append(rst_to_markdown(function.__doc__ or ""))
    return "\n".join(parts)


def _hookspecs(module: Any) -> Iterator[tuple[str, Callable[..., Any]]]:
    """Hookspecs in source order."""
    found = [
        (name, function)
        for name, function in inspect.getmembers(module, inspect.isfunction)
        if name.startswith("noderole_") and function.__module__ == module.__name__
    ]
    yield from sorted(found, key=lambda item: item[1].__code__.co_firstlineno)


def _signature(function: Callable[..., Any]) -> str:
    signature = inspect.signature(function)
    params = [
        f"{p.name}: {p.annotation}" if p.annotation is not inspect.Parameter.empty else p.name
        for p in signature.parameters.values()
    ]
    ret = signature.return_annotation
    arrow = f" -> {ret}" if ret is not inspect.Signature.empty else ""
    return f"({', '.join(params)}){arrow}"


# --------------------------------------------------------------------------- settings


def _shipped_entry_points() -> set[str]:
    """Entry-point names of the plugins shipped in this repository (plugins/*)."""
    names: set[str] = set()
    for pyproject in sorted((REPO / "plugins").glob("*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text()).get("project", {})
        names |= set(project.get("entry-points", {}).get("noderole", {}))
    return names


def _not_shipped() -> list[str]:
    """Every installed entry point that is not a shipped plugin (the tutorial's example, a
    developer's own): left out, so the pages do not depend on what this machine has installed."""
    import importlib.metadata

    shipped = _shipped_entry_points()
    installed = {ep.name for ep in importlib.metadata.entry_points(group="noderole")}
    return sorted(installed - shipped)


def render_settings(only: str | None = None) -> str:
    """Every shipped plugin's settings table (or only the table named ``only``): keys, types,
    defaults, descriptions. A plugin's own page uses ``<!-- noderole:settings TABLE -->``."""
    from noderole.plugins import load_plugins

    plugins = load_plugins(disabled=_not_shipped(), autoload=True)
    parts: list[str] = []
    tables = [t for t in plugins.settings_tables() if only is None or t.table == only]
    if only is not None and not tables:
        raise ValueError(f"noderole:settings {only}: no installed plugin declares [{only}]")
    for table in tables:
        info = plugins.info(table.origin)
        where = (
            "noderole itself (the built-in plugin)"
            if info.name == "builtin"
            else f"plugin `{info.name}` (distribution `{info.distribution}`)"
        )
        parts.append(f"## `[{table.table}]`\n")
        parts.append(f"Declared by {where}. {_cell(table.description)}\n")
        parts.append("| Key | Type | Default | Allowed | Description |")
        parts.append("| --- | --- | --- | --- | --- |")
        toml = [f"[{table.table}]"]
        for setting in table.settings:
            default = "***" if setting.secret else _toml_value(setting.default)
            note = " (secret: `config show` prints `***`)" if setting.secret else ""
            parts.append(
                f"| `{setting.name}` | {setting.type.__name__} | `{_cell(default)}` | "
                f"{_cell(setting.bounds()) or _ANY[setting.type is float]} | "
                f"{_cell(setting.description)}{note} |"
            )
            toml.append(f"{setting.name} = {default}")
        parts.append("\nWith every default written out:\n")
        parts.append("```toml\n" + "\n".join(toml) + "\n```\n")
    return "\n".join(parts)


_ANY = {False: "any", True: "any finite"}
"""The Allowed column of a setting without bounds: float settings never take nan or inf."""


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# --------------------------------------------------------------------------- errors


def _exit_code_docs() -> dict[str, str]:
    """ExitCode member -> the docstring written under it (read from the source)."""
    from noderole import errors

    source = inspect.getsource(errors)
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == "ExitCode":
            docs: dict[str, str] = {}
            body = node.body
            for current, following in itertools.pairwise(body):
                if (
                    isinstance(current, ast.Assign)
                    and isinstance(current.targets[0], ast.Name)
                    and isinstance(following, ast.Expr)
                    and isinstance(following.value, ast.Constant)
                ):
                    docs[current.targets[0].id] = str(following.value.value)
            return docs
    raise LookupError("class ExitCode not found in noderole.errors")


def render_exit_codes() -> str:
    """The exit-code table, from :class:`noderole.errors.ExitCode`."""
    from noderole import errors

    docs = _exit_code_docs()
    rows = ["| Code | Name | Meaning | Raised as |", "| --- | --- | --- | --- |"]
    for code in errors.ExitCode:
        raised = [
            f"`{cls.__name__}`"
            for cls in _error_classes()
            if cls.exit_code == code and cls is not errors.NoderoleError
        ]
        rows.append(
            f"| {int(code)} | `{code.name}` | {_cell(_inline(docs.get(code.name, '')))} | "
            f"{', '.join(raised) or '-'} |"
        )
    return "\n".join(rows) + "\n"


def _error_classes() -> list[type[Any]]:
    from noderole import errors

    return [getattr(errors, name) for name in errors.__all__ if name != "ExitCode"]


def render_errors() -> str:
    """The exception hierarchy: each class, what it means, its exit code."""
    from noderole import errors

    rows = ["| Exception | Catch as | Exit code | Meaning |", "| --- | --- | --- | --- |"]
    for cls in _error_classes():
        bases = [b.__name__ for b in cls.__bases__ if b is not errors.NoderoleError]
        builtin = ", ".join(f"`{b}`" for b in bases) or "-"
        summary = rst_to_markdown((cls.__doc__ or "").split("\n\n")[0]).strip()
        rows.append(
            f"| `{cls.__name__}` | {builtin} | {int(cls.exit_code)} `{cls.exit_code.name}` | "
            f"{_cell(summary)} |"
        )
    return "\n".join(rows) + "\n"


# --------------------------------------------------------------------------- source


_SECTION_MARK = re.compile(r"--8<-- \[(start|end):([-_0-9a-z]+)\]")


def _code_block(path: str, text: str, language: str) -> str:
    fence = "````" if "```" in text else "```"
    # An example distribution's files are titled as its own author sees them.
    title = re.sub(r"^docs/examples/[^/]+/", "", path)
    return f'{fence}{language} title="{title}"\n{text.rstrip()}\n{fence}\n'


def _repo_file(path: str) -> Path:
    target = (REPO / path).resolve()
    if REPO not in target.parents:
        raise ValueError(f"{path!r} is outside the repository")
    return target


def _section(text: str, section: str, path: str) -> str:
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if f"[start:{section}]" in line]
    ends = [i for i, line in enumerate(lines) if f"[end:{section}]" in line]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise ValueError(
            f"{path}: no single section {section!r} (--8<-- [start:{section}] ... end)"
        )
    body = [line for line in lines[starts[0] + 1 : ends[0]] if not _SECTION_MARK.search(line)]
    return textwrap.dedent("\n".join(body)).strip("\n")


def render_include(spec: str, language: str = "") -> str:
    """A file (or one section of it) as a code block; a missing file fails the build."""
    path, _, section = spec.partition(":")
    target = _repo_file(path)
    if not target.is_file():
        raise FileNotFoundError(f"noderole:include {path}: no such file")
    text = target.read_text()
    if section:
        text = _section(text, section, path)
    else:
        text = "\n".join(line for line in text.splitlines() if not _SECTION_MARK.search(line))
    return _code_block(path, text, language)


def render_source(path: str, language: str = "") -> str:
    """The file at ``path`` (relative to the repository root) as a code block, or a note."""
    if not _repo_file(path).is_file():
        return (
            f'!!! note "Not in this build"\n    `{path}` was not present when these pages were '
            "built; see it in the repository.\n"
        )
    return render_include(path, language)


# --------------------------------------------------------------------------- transcripts

TRANSCRIPT_TIMEOUT = 60.0
"""Seconds any one command of a transcript may take before the build fails."""

_FIRST_BOOT = "/etc/spinifex-eks/first-boot.env"
_BROKEN_QUOTE = (
    'EKS_KONNECTIVITY_SANS="konnectivity.example.com,10.0.0.7\nEKS_KONNECTIVITY_HOST=10.0.0.7\n'
)

SCENARIOS: dict[str, tuple[str, list[list[str]]]] = {
    # name: (how the staged root is broken, the commands run in order)
    "k3s-no-config": ("no-k3s-config", [["apply", "server"], ["status"]]),
    "first-boot-missing": ("no-first-boot", [["apply", "server", "--dry-run"]]),
    "unterminated-quote": ("broken-quote", [["apply", "server", "--dry-run"]]),
    "broken-config": ("", [["apply", "server"], ["break-config"], ["status"], ["stop"]]),
    "typo": ("", [["aply", "server"]]),
}
"""The failures docs/troubleshooting.md shows, as real runs."""


def render_transcript(name: str) -> str:
    """Run scenario ``name`` and return its commands and output as a console block."""
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    from noderole.operations import Operations
    from noderole.rehearsal import stage_rehearsal
    from noderole.root import NodeRoot
    from noderole.testing import end_node_processes

    if name not in SCENARIOS:
        raise ValueError(f"unknown transcript {name!r} (known: {', '.join(SCENARIOS)})")
    breakage, commands = SCENARIOS[name]
    scratch = Path(tempfile.mkdtemp(prefix="noderole-docs-"))
    out: list[str] = []
    try:
        staging = Operations(root=NodeRoot(scratch))
        stage_rehearsal(staging.root, staging.plugins, staging.node_for("server"))
        _break(scratch, breakage)
        env = {**os.environ, "NODEROLE_ROOT": str(scratch), "COLUMNS": "100"}
        for command in commands:
            if command == ["break-config"]:
                config = scratch / "etc/noderole/config.toml"
                config.write_text(config.read_text() + "\n[noderole]\nnet_check = false\n")
                out.append("$ # a second [noderole] table is added to /etc/noderole/config.toml")
                continue
            done = subprocess.run(
                [sys.executable, "-m", "noderole", *command],
                capture_output=True,
                text=True,
                timeout=TRANSCRIPT_TIMEOUT,
                env=env,
                cwd=scratch,
            )
            out.append(f"$ noderole {' '.join(command)}")
            text = (done.stdout + done.stderr).replace(str(scratch), "").rstrip()
            if text:
                out.append(text)
            if done.returncode:
                out.append(f"$ echo $?\n{done.returncode}")
    finally:
        end_node_processes(NodeRoot(scratch))
        shutil.rmtree(scratch, ignore_errors=True)
    return "```console\n" + "\n".join(out) + "\n```\n"


def _break(root: Path, breakage: str) -> None:
    if breakage == "no-k3s-config":
        for name in ("config.yaml", "config.yaml.skel"):
            (root / "etc/rancher/k3s" / name).unlink(missing_ok=True)
    elif breakage == "no-first-boot":
        (root / _FIRST_BOOT.lstrip("/")).unlink()
    elif breakage == "broken-quote":
        (root / _FIRST_BOOT.lstrip("/")).write_text(_BROKEN_QUOTE)


_RENDERERS: dict[str, Callable[..., str]] = {
    "hooks": render_hooks,
    "settings": render_settings,
    "exit-codes": render_exit_codes,
    "errors": render_errors,
    "include": render_include,
    "source": render_source,
    "transcript": render_transcript,
}


# --------------------------------------------------------------------------- committed pages

TEMPLATES = REPO / "docs" / "hooks" / "reference"
"""The reference pages with their markers; the generated pages go to docs/reference."""
REFERENCE = REPO / "docs" / "reference"
REGENERATE = "python docs/hooks/noderole_docs.py"
"""The command that rewrites the generated pages."""


def reference_pages() -> dict[Path, str]:
    """Each generated reference page (docs/reference/NAME.md) and the text it must hold."""
    pages: dict[Path, str] = {}
    for template in sorted(TEMPLATES.glob("*.md")):
        header = (
            f"<!-- Generated from docs/hooks/reference/{template.name} and the code by "
            f"`{REGENERATE}`: edit those, not this file. -->\n\n"
        )
        pages[REFERENCE / template.name] = header + on_page_markdown(template.read_text())
    return pages


def stale_pages(reference: Path = REFERENCE) -> list[Path]:
    """The generated pages (in ``reference``) whose text differs from what the code gives now."""
    stale = []
    for path, text in reference_pages().items():
        committed = reference / path.name
        if not committed.exists() or committed.read_text() != text:
            stale.append(committed)
    return stale


def main(argv: list[str], reference: Path = REFERENCE) -> int:
    """Write the reference pages; with ``--check``, only say which are out of date (exit 1)."""
    if argv[1:] == ["--check"]:
        stale = stale_pages(reference)
        for path in stale:
            print(f"docs/reference/{path.name} is out of date: run {REGENERATE}")
        return 1 if stale else 0
    if argv[1:]:
        print(f"usage: {REGENERATE} [--check]")
        return 2
    for path, text in reference_pages().items():
        target = reference / path.name
        if not target.exists() or target.read_text() != text:
            target.write_text(text)
            print(f"wrote docs/reference/{path.name}")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv))
