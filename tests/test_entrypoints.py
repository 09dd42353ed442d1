"""The entry-point cache: served while nothing installed changed, rebuilt as soon as it did."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from noderole.entrypoints import SETTLE_SECONDS, discover, load_target
from noderole.plugins import load_plugins

GROUP = "noderole"
PLUGIN = """
import noderole

@noderole.hookimpl
def noderole_services(node):
    return []
"""


def _age(info: Path) -> None:
    """Make an installed distribution look settled (installed well before now)."""
    old = os.stat(info / "entry_points.txt").st_mtime - 10 * SETTLE_SECONDS
    os.utime(info / "entry_points.txt", (old, old))


def _names(cache: Path) -> set[str]:
    return {found.name for found in discover(GROUP, cache)}


class TestDiscover:
    def test_cache_is_written_and_then_served(
        self, install_dist: Callable[..., Path], tmp_path: Path
    ) -> None:
        """A settled installation is stored; the next call answers from the file, unscanned."""
        _age(install_dist("ep-one", "1.0", {"epone": "ep_one"}, {"ep_one": PLUGIN}))
        cache = tmp_path / "cache.json"
        assert "epone" in _names(cache)
        document = json.loads(cache.read_text())
        # Proof that the stored answer is what is served: edit it, keep its key.
        document["entries"][0]["groups"][GROUP] = [["only-in-cache", "x:y", "d", "1"]]
        cache.write_text(json.dumps(document))
        assert _names(cache) == {"only-in-cache"}

    def test_installing_a_distribution_invalidates(
        self, install_dist: Callable[..., Path], tmp_path: Path
    ) -> None:
        """A distribution installed after the cache was written is found."""
        _age(install_dist("ep-one", "1.0", {"epone": "ep_one"}, {"ep_one": PLUGIN}))
        cache = tmp_path / "cache.json"
        assert "eptwo" not in _names(cache)
        assert cache.exists()
        install_dist("ep-two", "1.0", {"eptwo": "ep_two"}, {"ep_two": PLUGIN})
        assert {"epone", "eptwo"} <= _names(cache)

    def test_removing_a_distribution_invalidates(
        self, install_dist: Callable[..., Path], tmp_path: Path
    ) -> None:
        """A distribution removed after the cache was written is no longer offered."""
        one = install_dist("ep-one", "1.0", {"epone": "ep_one"}, {"ep_one": PLUGIN})
        _age(install_dist("ep-two", "1.0", {"eptwo": "ep_two"}, {"ep_two": PLUGIN}))
        _age(one)
        cache = tmp_path / "cache.json"
        assert {"epone", "eptwo"} <= _names(cache)
        shutil.rmtree(one)
        names = _names(cache)
        assert "epone" not in names
        assert "eptwo" in names

    def test_rewritten_entry_points_invalidate(
        self, install_dist: Callable[..., Path], tmp_path: Path
    ) -> None:
        """entry_points.txt rewritten in place (same distribution, same version) is read again."""
        info = install_dist("ep-one", "1.0", {"epone": "ep_one"}, {"ep_one": PLUGIN})
        _age(info)
        cache = tmp_path / "cache.json"
        assert _names(cache) >= {"epone"}
        (info / "entry_points.txt").write_text("[noderole]\nrenamed = ep_one\n")
        _age(info)  # even with an old time, the inode/size change is seen
        names = _names(cache)
        assert "renamed" in names
        assert "epone" not in names

    def test_fresh_installation_is_not_stored(
        self, install_dist: Callable[..., Path], tmp_path: Path
    ) -> None:
        """A key younger than the timestamp granularity could hide a change: it is not stored."""
        install_dist("ep-one", "1.0", {"epone": "ep_one"}, {"ep_one": PLUGIN})
        cache = tmp_path / "cache.json"
        assert "epone" in _names(cache)
        assert not cache.exists()

    def test_unwritable_cache_is_ignored(
        self, install_dist: Callable[..., Path], tmp_path: Path
    ) -> None:
        """A cache that cannot be written (its directory is a file) costs a scan, not an error."""
        _age(install_dist("ep-one", "1.0", {"epone": "ep_one"}, {"ep_one": PLUGIN}))
        (tmp_path / "file").write_text("")
        assert "epone" in _names(tmp_path / "file" / "cache.json")

    def test_damaged_cache_is_rebuilt(
        self, install_dist: Callable[..., Path], tmp_path: Path
    ) -> None:
        """A cache file that is not JSON is scanned over and replaced."""
        _age(install_dist("ep-one", "1.0", {"epone": "ep_one"}, {"ep_one": PLUGIN}))
        cache = tmp_path / "cache.json"
        cache.write_text("{not json")
        assert "epone" in _names(cache)
        document = json.loads(cache.read_text())
        assert document["format"] == 5
        # The key is one string (read back without building its lists).
        assert [type(entry["key"]) for entry in document["entries"]] == [str]

    @pytest.mark.parametrize(
        "item",
        [
            [[], "x:y", "d", "1"],  # a name that is no string: unhashable where plugins are kept
            [{}, "x:y", "d", "1"],
            ["epone", "x:y", 1, "1"],  # sorted with the others' names
            ["epone", None, "d", "1"],
            ["epone", "x:y", "d"],
            "epone",
        ],
    )
    def test_stored_entry_point_of_another_shape_is_scanned_over(
        self, install_dist: Callable[..., Path], tmp_path: Path, item: object
    ) -> None:
        """A stored entry point that is not four strings (the last two may be null), under a
        matching key, is no answer: the group is scanned again and stored sound. (It failed
        every command that loads plugins with a TypeError.)"""
        _age(install_dist("ep-one", "1.0", {"epone": "ep_one"}, {"ep_one": PLUGIN}))
        cache = tmp_path / "cache.json"
        assert "epone" in _names(cache)
        document = json.loads(cache.read_text())
        document["entries"][0]["groups"][GROUP] = [item, ["other", "x:y", None, None]]
        cache.write_text(json.dumps(document))
        found = discover(GROUP, cache)
        assert "epone" in {f.name for f in found}
        assert "other" not in {f.name for f in found}
        assert all(isinstance(f.name, str) and isinstance(f.value, str) for f in found)
        assert _names(cache) == {f.name for f in found}  # stored sound, served again

    @pytest.mark.parametrize("old", [2, 3, 4])
    def test_cache_of_a_previous_format_is_replaced(
        self, install_dist: Callable[..., Path], tmp_path: Path, old: int
    ) -> None:
        """A format-2 (full keys), format-3 (no listings) or format-4 (the first distribution
        of a name alone) cache is not read: scanned over and replaced."""
        _age(install_dist("ep-one", "1.0", {"epone": "ep_one"}, {"ep_one": PLUGIN}))
        cache = tmp_path / "cache.json"
        stale = {"format": old, "entries": [{"key": ["x"], "groups": {GROUP: []}}]}
        cache.write_text(json.dumps(stale))
        assert "epone" in _names(cache)
        assert json.loads(cache.read_text())["format"] == 5

    def test_matches_importlib_metadata(self, tmp_path: Path) -> None:
        """The cached answer is what importlib.metadata says, every distribution's."""
        import importlib.metadata

        expected = sorted(ep.name for ep in importlib.metadata.entry_points(group=GROUP))
        cache = tmp_path / "cache.json"
        assert [f.name for f in discover(GROUP, cache)] == expected
        assert [f.name for f in discover(GROUP, cache)] == expected

    def test_several_interpreter_paths_each_keep_their_entry(
        self, install_dist: Callable[..., Path], tmp_path: Path
    ) -> None:
        """`noderole` and `python -m noderole` see different sys.path: both stay cached."""
        _age(install_dist("ep-one", "1.0", {"epone": "ep_one"}, {"ep_one": PLUGIN}))
        cache = tmp_path / "cache.json"
        _names(cache)
        sys.path.insert(0, str(tmp_path / "elsewhere"))
        try:
            _names(cache)
        finally:
            sys.path.pop(0)
        assert len(json.loads(cache.read_text())["entries"]) == 2
        document = json.loads(cache.read_text())
        for entry in document["entries"]:
            entry["groups"][GROUP] = [["only-in-cache", "x:y", "d", "1"]]
        cache.write_text(json.dumps(document))
        assert _names(cache) == {"only-in-cache"}


class TestStoredListings:
    """A directory whose inode and time did not change is not listed again: its stored listing
    stands in, and only a settled directory's listing is trusted."""

    @staticmethod
    def _age_dir(directory: Path) -> int:
        old = os.stat(directory).st_mtime_ns - int(10 * SETTLE_SECONDS * 1e9)
        os.utime(directory, ns=(old, old))
        return old

    def test_new_distribution_in_a_settled_directory_is_found(
        self, install_dist: Callable[..., Path], tmp_path: Path
    ) -> None:
        """Installing sets the directory's time: its stored listing no longer stands in."""
        site = _age_and_site(install_dist("ep-one", "1.0", {"epone": "ep_one"}, {"ep_one": PLUGIN}))
        self._age_dir(site)
        cache = tmp_path / "cache.json"
        assert "epone" in _names(cache)
        assert json.loads(cache.read_text())["entries"][0]["listings"]
        install_dist("ep-two", "1.0", {"eptwo": "ep_two"}, {"ep_two": PLUGIN})
        assert {"epone", "eptwo"} <= _names(cache)

    def test_unchanged_settled_directory_is_served_from_its_listing(
        self, install_dist: Callable[..., Path], tmp_path: Path
    ) -> None:
        """Proof that the stored listing is what is used: a distribution added while the
        directory's time is put back is not seen (a real install always moves the time)."""
        site = _age_and_site(install_dist("ep-one", "1.0", {"epone": "ep_one"}, {"ep_one": PLUGIN}))
        old = self._age_dir(site)
        cache = tmp_path / "cache.json"
        assert "epone" in _names(cache)
        _age(install_dist("ep-two", "1.0", {"eptwo": "ep_two"}, {"ep_two": PLUGIN}))
        os.utime(site, ns=(old, old))
        assert "eptwo" not in _names(cache)
        assert not _keyed(cache, "ep_two-1.0.dist-info")

    def test_rewritten_entry_points_in_an_unchanged_directory_invalidate(
        self, install_dist: Callable[..., Path], tmp_path: Path
    ) -> None:
        """entry_points.txt rewritten in place leaves its directories' times alone: still seen."""
        info = install_dist("ep-one", "1.0", {"epone": "ep_one"}, {"ep_one": PLUGIN})
        site = _age_and_site(info)
        old = self._age_dir(site)
        cache = tmp_path / "cache.json"
        assert "epone" in _names(cache)
        (info / "entry_points.txt").write_text("[noderole]\nrenamed = ep_one\n")
        _age(info)
        os.utime(site, ns=(old, old))
        assert "renamed" in _names(cache)

    def test_young_directory_is_listed_again(
        self, install_dist: Callable[..., Path], tmp_path: Path
    ) -> None:
        """A directory changed within the timestamp granularity keeps no trusted listing: a
        distribution added within the same tick is found."""
        site = _age_and_site(install_dist("ep-one", "1.0", {"epone": "ep_one"}, {"ep_one": PLUGIN}))
        young = os.stat(site).st_mtime_ns
        cache = tmp_path / "cache.json"
        assert "epone" in _names(cache)
        assert "listings" not in json.loads(cache.read_text())["entries"][0]
        _age(install_dist("ep-two", "1.0", {"eptwo": "ep_two"}, {"ep_two": PLUGIN}))
        os.utime(site, ns=(young, young))
        assert _keyed(cache, "ep_two-1.0.dist-info")

    @pytest.mark.parametrize("listings", [None, "x", [["a"]], [[1]], []])
    def test_damaged_listings_are_not_used(
        self, install_dist: Callable[..., Path], tmp_path: Path, listings: object
    ) -> None:
        """Stored listings of the wrong shape or length are ignored: every directory is listed."""
        site = _age_and_site(install_dist("ep-one", "1.0", {"epone": "ep_one"}, {"ep_one": PLUGIN}))
        old = self._age_dir(site)
        cache = tmp_path / "cache.json"
        _names(cache)
        document = json.loads(cache.read_text())
        document["entries"][0]["listings"] = listings
        cache.write_text(json.dumps(document))
        _age(install_dist("ep-two", "1.0", {"eptwo": "ep_two"}, {"ep_two": PLUGIN}))
        os.utime(site, ns=(old, old))
        assert _keyed(cache, "ep_two-1.0.dist-info")


def _keyed(cache: Path, dist_info: str) -> bool:
    """After a lookup, whether the key stored for it lists ``dist_info``: the directory was
    listed again. (The names found cannot tell: importlib.metadata, which scans, trusts a
    directory's time within one process too.)"""
    _names(cache)
    return dist_info in json.loads(cache.read_text())["entries"][0]["key"]


def _age_and_site(info: Path) -> Path:
    """Age a distribution's entry points; the directory it is installed in."""
    _age(info)
    return info.parent


class TestLoadTarget:
    def test_module_and_attribute_path(self) -> None:
        """``module:a.b`` imports the module and follows the attributes."""
        assert load_target("os.path:join") is os.path.join
        assert load_target("json") is json
        assert load_target("os:path.join [extra]") is os.path.join


class TestPluginsUseTheCache:
    def test_load_plugins_through_the_cache_sees_a_new_plugin(
        self, install_dist: Callable[..., Path], tmp_path: Path
    ) -> None:
        """load_plugins with a cache loads a plugin installed after the cache was written."""
        cache = tmp_path / "cache.json"
        before = load_plugins(entry_point_cache=cache).names()
        install_dist("ep-late", "2.0", {"eplate": "ep_late"}, {"ep_late": PLUGIN})
        plugins = load_plugins(entry_point_cache=cache)
        assert "eplate" in plugins.names()
        assert "eplate" not in before
        assert (plugins.info("eplate").distribution, plugins.info("eplate").version) == (
            "ep-late",
            "2.0",
        )

    def test_command_stores_cache_under_the_root_and_imports_no_metadata(
        self, tmp_path: Path
    ) -> None:
        """`noderole list` keeps the cache under the node's /var/cache; the second run does not
        import importlib.metadata at all."""
        probe = (
            "import sys, json\n"
            "from noderole.cli import main\n"
            "try:\n"
            f"    main(['--root', {str(tmp_path)!r}, 'list'])\n"
            "except SystemExit:\n"
            "    pass\n"
            "print(json.dumps('importlib.metadata' in sys.modules), file=sys.stderr)\n"
        )

        def run() -> bool:
            done = subprocess.run(
                [sys.executable, "-c", probe], capture_output=True, text=True, check=True
            )
            loaded: bool = json.loads(done.stderr.strip().splitlines()[-1])
            return loaded

        assert run() is True
        assert (tmp_path / "var/cache/noderole/entry-points.json").is_file()
        assert run() is False
