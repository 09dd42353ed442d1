"""What other plugins contribute to k3s, collected through noderole's front door and merged.

The k3s hooks are called with :meth:`noderole.context.NodeContext.collect`, as noderole calls its
own hooks: one plugin at a time, bounded by the hook timeout, every item type-checked and stamped
with its plugin. Problems are returned, not raised: the k3s plugin turns them into a
``noderole.Fail`` step, so only the k3s service concerned fails (and ``plan`` shows why), never
the whole definition of the node. A conflicting key names both plugins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from noderole import NoderoleError, recordclass
from noderole_k3s import _yaml
from noderole_k3s.records import ConfigFile, ConfigKeys, Manifest

if TYPE_CHECKING:
    from noderole import NodeContext

__all__ = [
    "Contributions",
    "collect_contributions",
    "merge_config",
    "parse_config_text",
    "render_yaml",
    "with_base_lists",
]

R = TypeVar("R")


@recordclass.frozen(kw_only=True)
class Contributions:
    """Everything the other plugins contribute to one k3s, merged, plus the problems found."""

    config: Mapping[str, Any]
    """Merged configuration keys (lists concatenated, duplicates dropped; no base applied)."""
    files: tuple[ConfigFile, ...]
    """Files to write before k3s starts, sorted by path."""
    manifests: tuple[Manifest, ...]
    """Manifests to stage, sorted by name (the server only)."""
    problems: tuple[str, ...]
    """One sentence per problem; any problem keeps this k3s from starting."""


def _collect(node: NodeContext, hook_name: str, kind: type[R], problems: list[str]) -> list[R]:
    """The hook's records, sorted by plugin (stable), or none and a problem."""
    try:
        records = node.collect(hook_name, kind)
    except NoderoleError as exc:
        problems.append(str(exc))
        return []
    return sorted(records, key=lambda record: str(getattr(record, "origin", "")))


def _unique(records: Sequence[Any], attribute: str, what: str, problems: list[str]) -> list[Any]:
    seen: dict[str, Any] = {}
    for record in records:
        key = getattr(record, attribute)
        other = seen.get(key)
        if other is None:
            seen[key] = record
        elif other != record:
            problems.append(
                f"{what} {key} is contributed by both plugin {other.origin!r} and plugin "
                f"{record.origin!r} with different content; disable one with --disable-plugin NAME"
            )
    return [seen[key] for key in sorted(seen)]


def collect_contributions(node: NodeContext, side: str = "server") -> Contributions:
    """Call every plugin's k3s hooks and merge what they return for ``side`` (server or agent)."""
    problems: list[str] = []

    def for_side(records: list[Any]) -> list[Any]:
        return [r for r in records if r.applies_to in (side, "all")]

    keys = for_side(_collect(node, "noderole_k3s_config", ConfigKeys, problems))
    config, found = merge_config(keys)
    problems += found
    files = for_side(_collect(node, "noderole_k3s_files", ConfigFile, problems))
    manifests: list[Manifest] = []
    if side == "server":  # agents have no auto-deploy directory
        manifests = _collect(node, "noderole_k3s_manifests", Manifest, problems)
    return Contributions(
        config=config,
        files=tuple(_unique(files, "path", "file", problems)),
        manifests=tuple(_unique(manifests, "name", "manifest", problems)),
        problems=tuple(problems),
    )


def merge_config(contributions: Sequence[ConfigKeys]) -> tuple[dict[str, Any], list[str]]:
    """Merge the records' keys: equal scalars agree, lists concatenate; else a problem.

    Returns the merged keys (in first-contribution order) and the problems, each naming the key
    and both plugins. Value types are checked by :class:`ConfigKeys` itself.
    """
    merged: dict[str, Any] = {}
    owner: dict[str, str] = {}
    problems: list[str] = []
    for record in contributions:
        plugin = record.origin
        for key, value in record.keys.items():
            is_list = isinstance(value, list | tuple)
            items = list(value) if is_list else [value]
            if key not in merged:
                merged[key] = items if is_list else value
                owner[key] = plugin
                continue
            previous = merged[key]
            if is_list and isinstance(previous, list):
                previous.extend(item for item in items if item not in previous)
            elif is_list or isinstance(previous, list) or not _same(previous, value):
                shown = list(value) if is_list else value
                problems.append(
                    f"k3s configuration key {key!r} is set to {previous!r} by plugin "
                    f"{owner[key]!r} and to {shown!r} by plugin {plugin!r}; the plugins "
                    "disagree: change one plugin's settings or disable one with "
                    "--disable-plugin NAME"
                )
    return merged, problems


def _same(a: Any, b: Any) -> bool:
    # True == 1 in Python, but "true" and "1" mean different things to k3s's flag parser.
    return type(a) is type(b) and bool(a == b)


def with_base_lists(merged: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    """``merged`` with each list key prefixed by the items ``config.yaml`` already lists.

    A drop-in replaces a list key of ``config.yaml`` rather than extending it, so the drop-in
    carries the base's items first: the node ends up with both.
    """
    result: dict[str, Any] = {}
    for key, value in merged.items():
        if isinstance(value, list) and key in base and base[key] is not None:
            before = base[key] if isinstance(base[key], list) else [base[key]]
            value = list(before) + [item for item in value if item not in before]
        result[key] = value
    return result


def parse_config_text(text: str, *, source: str) -> Mapping[str, Any]:
    """Parse a k3s ``config.yaml``; raises ValueError naming ``source`` unless it is a mapping."""
    try:
        document = _yaml.load(text)
    except _yaml.YAMLError as exc:
        at = f" (line {exc.line})" if exc.line is not None else ""
        raise ValueError(f"{source} is not valid YAML{at}: fix or remove it") from exc
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise ValueError(
            f"{source} must be a YAML mapping of k3s flags (key: value), got "
            f"{type(document).__name__}"
        )
    return document


def render_yaml(documents: Sequence[Mapping[str, Any]], *, header: str = "") -> str:
    """YAML text of ``documents`` (``---`` between them), keys in the order given."""
    return header + _yaml.dump_all([_plain(document) for document in documents])


def _plain(value: Any) -> Any:
    """Read-only mappings and tuples to dict and list: PyYAML's safe dumper knows only those."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value
