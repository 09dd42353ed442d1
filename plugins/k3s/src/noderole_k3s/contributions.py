"""What other plugins contribute to k3s, collected through noderole's front door and merged.

The k3s hooks are called with :meth:`noderole.context.NodeContext.collect`, as noderole calls its
own hooks: one plugin at a time, bounded by the hook timeout, every item type-checked and stamped
with its plugin. Problems are returned, not raised: the k3s plugin turns them into a
``noderole.Fail`` step, so only the k3s service concerned fails (and ``plan`` shows why), never
the whole definition of the node. A conflicting key names both plugins. The exception is a
value of ``config.toml`` a contributing plugin's record refuses (a relative ``[konnectivity]
egress_config``): that is the node's configuration, not a plugin's problem, and it is raised as
every such value is, so that ``config check`` finds it and ``plan`` names the key (exit 4).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from noderole import ConfigError, NoderoleError, recordclass
from noderole_k3s import _yaml
from noderole_k3s.records import ConfigFile, ConfigKeys, Manifest

if TYPE_CHECKING:
    from noderole import NodeContext

__all__ = [
    "Contributions",
    "Gathered",
    "collect_contributions",
    "contributions_for",
    "gather_contributions",
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


def _collect(node: NodeContext, hook_name: str, kind: type[R]) -> tuple[list[R], list[str]]:
    """The hook's records, sorted by plugin (stable); or none and the problem."""
    try:
        records = node.collect(hook_name, kind)
    except ConfigError:
        raise
    except NoderoleError as exc:
        return [], [str(exc)]
    return sorted(records, key=lambda record: str(getattr(record, "origin", ""))), []


@recordclass.frozen(kw_only=True)
class Gathered:
    """What the k3s hooks returned, each called once, before it is merged for a side: the k3s
    plugin builds the server's and the agent's k3s from one gathering, so another plugin's hook
    runs once per apply, not once per k3s."""

    keys: tuple[ConfigKeys, ...]
    files: tuple[ConfigFile, ...]
    manifests: tuple[Manifest, ...]
    problems: Mapping[str, tuple[str, ...]]
    """Hook name -> the problems calling it raised (a side hears only of the hooks it uses)."""


def gather_contributions(node: NodeContext) -> Gathered:
    """Call every plugin's k3s hooks once: what :func:`contributions_for` merges for a side."""
    keys, keys_problems = _collect(node, "noderole_k3s_config", ConfigKeys)
    files, files_problems = _collect(node, "noderole_k3s_files", ConfigFile)
    manifests, manifests_problems = _collect(node, "noderole_k3s_manifests", Manifest)
    return Gathered(
        keys=tuple(keys),
        files=tuple(files),
        manifests=tuple(manifests),
        problems={
            "noderole_k3s_config": tuple(keys_problems),
            "noderole_k3s_files": tuple(files_problems),
            "noderole_k3s_manifests": tuple(manifests_problems),
        },
    )


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
    return contributions_for(gather_contributions(node), side)


def contributions_for(gathered: Gathered, side: str) -> Contributions:
    """Merge what the hooks returned (:func:`gather_contributions`) for ``side`` (server or
    agent): keys and files meant for that side or for all, manifests for the server only."""
    problems: list[str] = [*gathered.problems["noderole_k3s_config"]]

    def for_side(records: Sequence[Any]) -> list[Any]:
        return [r for r in records if r.applies_to in (side, "all")]

    config, found = merge_config(for_side(gathered.keys))
    problems += found
    problems += gathered.problems["noderole_k3s_files"]
    files = for_side(gathered.files)
    manifests: Sequence[Manifest] = ()
    if side == "server":  # agents have no auto-deploy directory
        problems += gathered.problems["noderole_k3s_manifests"]
        manifests = gathered.manifests
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
        at = f" ({exc.where})" if exc.where else ""
        raise ValueError(
            f"{source} is not valid YAML{at}: {exc.problem}; fix or remove it"
        ) from exc
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
