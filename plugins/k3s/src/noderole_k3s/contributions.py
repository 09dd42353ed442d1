"""What other plugins contribute to k3s, collected one plugin at a time and merged.

The k3s hooks are called plugin by plugin (not through pluggy's combined call) so every problem
names the plugin that caused it: a conflicting key names both plugins, a hook that raises or
returns the wrong type names its plugin and hook. Problems are returned, not raised: the k3s
plugin turns them into a ``noderole.Fail`` step, so only k3s fails (and ``plan`` shows why), never
the whole definition of the node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import yaml

from noderole_k3s.records import ConfigFile, Manifest

if TYPE_CHECKING:
    from noderole.context import NodeContext

__all__ = [
    "Contributions",
    "collect_contributions",
    "merge_config",
    "parse_config_text",
    "render_yaml",
    "with_base_lists",
]

_SCALARS = (str, int, float, bool, type(None))


@attrs.frozen(kw_only=True)
class Contributions:
    """Everything the other plugins contribute, merged, plus the problems found on the way."""

    config: Mapping[str, Any]
    """Merged configuration keys (lists concatenated, duplicates dropped; no base applied)."""
    files: tuple[ConfigFile, ...]
    """Files to write before k3s starts, sorted by path."""
    manifests: tuple[Manifest, ...]
    """Manifests to stage, sorted by name."""
    problems: tuple[str, ...]
    """One sentence per problem; any problem keeps k3s from starting."""


def _results(node: NodeContext, hook_name: str) -> tuple[list[tuple[str, Any]], list[str]]:
    """``(plugin, result)`` for every implementation of ``hook_name``, sorted by plugin name."""
    caller = getattr(node.hook, hook_name)
    results: list[tuple[str, Any]] = []
    problems: list[str] = []
    impls = sorted(caller.get_hookimpls(), key=lambda impl: impl.plugin_name)
    for impl in impls:
        if impl.hookwrapper or impl.wrapper:
            continue
        kwargs = {"node": node}
        try:
            result = impl.function(*[kwargs[name] for name in impl.argnames])
        except Exception as exc:
            problems.append(
                f"plugin {impl.plugin_name!r} hook {hook_name} raised {type(exc).__name__}: {exc}"
            )
            continue
        if result is not None:
            results.append((impl.plugin_name, result))
    return results, problems


def _records(
    results: Iterable[tuple[str, Any]], kind: type[Any], hook_name: str, problems: list[str]
) -> list[Any]:
    records = []
    for plugin, result in results:
        items = [result] if isinstance(result, kind) else result
        if not isinstance(items, Iterable) or isinstance(items, str | bytes | Mapping):
            items = [items]
        for item in items:
            if not isinstance(item, kind):
                problems.append(
                    f"plugin {plugin!r} hook {hook_name} returned {item!r}; it must return "
                    f"{kind.__name__} records (one, a list, or None)"
                )
                continue
            records.append(attrs.evolve(item, origin=plugin))
    return records


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


def collect_contributions(node: NodeContext) -> Contributions:
    """Call every plugin's k3s hooks and merge what they return."""
    problems: list[str] = []
    config_results, found = _results(node, "noderole_k3s_config")
    problems += found
    mappings: list[tuple[str, Mapping[str, Any]]] = []
    for plugin, result in config_results:
        if isinstance(result, Mapping):
            mappings.append((plugin, result))
        else:
            problems.append(
                f"plugin {plugin!r} hook noderole_k3s_config returned {result!r}; it must return "
                "a mapping of k3s configuration keys (or None)"
            )
    config, found = merge_config(mappings)
    problems += found
    file_results, found = _results(node, "noderole_k3s_files")
    problems += found
    files = _records(file_results, ConfigFile, "noderole_k3s_files", problems)
    manifest_results, found = _results(node, "noderole_k3s_manifests")
    problems += found
    manifests = _records(manifest_results, Manifest, "noderole_k3s_manifests", problems)
    return Contributions(
        config=config,
        files=tuple(_unique(files, "path", "file", problems)),
        manifests=tuple(_unique(manifests, "name", "manifest", problems)),
        problems=tuple(problems),
    )


def _shown(value: Any) -> str:
    return repr(value)


def merge_config(
    contributions: Sequence[tuple[str, Mapping[str, Any]]],
) -> tuple[dict[str, Any], list[str]]:
    """Merge ``(plugin, keys)`` pairs: equal scalars agree, lists concatenate; else a problem.

    Returns the merged keys (in first-contribution order) and the problems, each naming the key
    and both plugins.
    """
    merged: dict[str, Any] = {}
    owner: dict[str, str] = {}
    problems: list[str] = []
    for plugin, mapping in contributions:
        for key, value in mapping.items():
            if not isinstance(key, str) or not key:
                problems.append(f"plugin {plugin!r} contributes k3s key {key!r}: keys are strings")
                continue
            is_list = isinstance(value, list | tuple)
            items = list(value) if is_list else [value]
            bad = [item for item in items if not isinstance(item, _SCALARS)]
            if bad:
                problems.append(
                    f"plugin {plugin!r} sets k3s key {key!r} to {value!r}: values are strings, "
                    "numbers, booleans or lists of them"
                )
                continue
            if key not in merged:
                merged[key] = items if is_list else value
                owner[key] = plugin
                continue
            previous = merged[key]
            if is_list and isinstance(previous, list):
                previous.extend(item for item in items if item not in previous)
            elif is_list or isinstance(previous, list) or not _same(previous, value):
                problems.append(
                    f"k3s configuration key {key!r} is set to {_shown(previous)} by plugin "
                    f"{owner[key]!r} and to {_shown(value)} by plugin {plugin!r}; the plugins "
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
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" (line {where.line + 1})" if where is not None else ""
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
    plain = [_plain(document) for document in documents]
    body = yaml.safe_dump_all(
        plain, sort_keys=False, default_flow_style=False, explicit_start=False
    )
    return header + body


def _plain(value: Any) -> Any:
    """Read-only mappings and tuples to dict and list: PyYAML's safe dumper knows only those."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value
