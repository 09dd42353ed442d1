"""config.toml is parsed once: later commands take the document an apply kept beside the exact
text."""

from __future__ import annotations

import json
import math
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from noderole.config import load_config
from noderole.errors import ConfigError
from noderole.records import Setting, SettingsTable
from noderole.root import NodeRoot
from noderole.tomlcache import CONFIG_CACHE, parse_config_text, store_parsed
from tests.test_engine import Node, node, sleeper
from tests.test_roles import run

__all__ = ["node"]  # the fixture, imported for pytest

TABLES = [
    SettingsTable(
        table="demo",
        settings=[
            Setting(name="port", type=int, default=8080),
            Setting(name="ratio", type=float, default=1.0),
        ],
    )
]

TEXT = (
    '[demo]\nport = 9000\nratio = inf\nname = "x"\nlist = [1, 2.5, true, "a"]\n'
    "[demo.sub]\nz = -0.0\n"
)

PROBE = """
import sys
from pathlib import Path
from noderole.tomlcache import parse_config_text, store_parsed
text, cache = sys.argv[1], Path(sys.argv[2])
document = parse_config_text(text, cache)
store_parsed(cache)
print(repr(document))
print("tomllib" in sys.modules)
"""


def _parse_in_a_fresh_process(text: str, cache: Path) -> tuple[str, bool]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, text, str(cache)], capture_output=True, text=True, check=True
    )
    shown, imported = done.stdout.splitlines()
    return shown, imported == "True"


def _parsed_and_stored(text: str, cache: Path) -> dict[str, object]:
    document = parse_config_text(text, cache)
    store_parsed(cache)
    return document


class TestParseConfigText:
    def test_second_read_of_the_same_text_parses_nothing(self, tmp_path: Path) -> None:
        """The first process parses and stores; the next gets the same document without
        importing tomllib."""
        cache = tmp_path / "cache/config.json"
        first, parsed = _parse_in_a_fresh_process(TEXT, cache)
        assert parsed
        assert first == repr(tomllib.loads(TEXT))
        again, parsed = _parse_in_a_fresh_process(TEXT, cache)
        assert not parsed
        assert again == first

    def test_document_types_come_back_as_toml_gave_them(self, tmp_path: Path) -> None:
        """Integers stay integers, floats floats (inf and -0.0 too), booleans booleans."""
        cache = tmp_path / "config.json"
        _parsed_and_stored(TEXT, cache)
        document = parse_config_text(TEXT, cache)
        demo = document["demo"]
        assert type(demo["port"]) is int
        assert math.isinf(demo["ratio"])
        assert demo["list"] == [1, 2.5, True, "a"]
        assert [type(v) for v in demo["list"]] == [int, float, bool, str]
        assert math.copysign(1.0, demo["sub"]["z"]) == -1.0

    def test_an_edit_is_seen_even_with_the_same_size_and_time(self, tmp_path: Path) -> None:
        """The key is the text itself: an edit that keeps the file's size and time is parsed."""
        cache = tmp_path / "config.json"
        assert _parsed_and_stored("[demo]\nport = 1\n", cache) == {"demo": {"port": 1}}
        assert _parsed_and_stored("[demo]\nport = 2\n", cache) == {"demo": {"port": 2}}
        assert json.loads(cache.read_text())["document"] == {"demo": {"port": 2}}

    def test_cache_is_private(self, tmp_path: Path) -> None:
        """Settings can be secrets: the cache is readable by its owner only."""
        cache = tmp_path / "config.json"
        _parsed_and_stored('[demo]\ntoken = "s3cret"\n', cache)
        assert stat.S_IMODE(cache.stat().st_mode) == 0o600
        assert [p.name for p in tmp_path.iterdir()] == ["config.json"]  # no temporary left

    def test_dates_are_parsed_and_never_stored(self, tmp_path: Path) -> None:
        """JSON has no date type: a document holding one is parsed every time, not stored."""
        cache = tmp_path / "config.json"
        document = _parsed_and_stored("[demo]\nwhen = 1979-05-27\n", cache)
        assert str(document["demo"]["when"]) == "1979-05-27"  # type: ignore[index]
        assert not cache.exists()

    def test_invalid_toml_raises_and_is_not_stored(self, tmp_path: Path) -> None:
        cache = tmp_path / "config.json"
        with pytest.raises(tomllib.TOMLDecodeError):
            parse_config_text("[demo\n", cache)
        assert not store_parsed(cache)
        assert not cache.exists()

    def test_parsing_writes_nothing_until_stored(self, tmp_path: Path) -> None:
        """plan and status only read: the parse is stored when (and where) it is asked for."""
        cache = tmp_path / "config.json"
        other = tmp_path / "other.json"
        assert parse_config_text("a = 1\n", cache) == {"a": 1}
        assert list(tmp_path.iterdir()) == []
        assert not store_parsed(other)
        assert store_parsed(cache)
        assert not store_parsed(cache)  # once
        assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]

    @pytest.mark.parametrize(
        "damage",
        [
            b"",
            b"not json",
            b"[]",
            b'{"format": 99, "text": "[demo]\\nport = 1\\n", "document": {"demo": {}}}',
            b'{"format": 1, "text": "[demo]\\nport = 1\\n", "document": []}',
        ],
    )
    def test_damaged_cache_is_ignored_and_replaced(self, tmp_path: Path, damage: bytes) -> None:
        cache = tmp_path / "config.json"
        cache.write_bytes(damage)
        assert _parsed_and_stored("[demo]\nport = 1\n", cache) == {"demo": {"port": 1}}
        assert json.loads(cache.read_text())["document"] == {"demo": {"port": 1}}

    def test_cache_that_is_a_directory_is_ignored(self, tmp_path: Path) -> None:
        """A cache path that cannot be read or replaced changes nothing and leaves nothing."""
        cache = tmp_path / "config.json"
        cache.mkdir()
        assert _parsed_and_stored("a = 1\n", cache) == {"a": 1}
        assert not store_parsed(cache)
        assert _parsed_and_stored("a = 2\n", cache) == {"a": 2}
        assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


class TestLoadConfigThroughTheCache:
    def test_loaded_values_and_errors_are_unchanged(self, tmp_path: Path) -> None:
        """load_config gives the same configuration from the cache and still names a type error
        found in a cached document."""
        config = tmp_path / "etc/noderole/config.toml"
        config.parent.mkdir(parents=True)
        root = NodeRoot(tmp_path)
        cache = tmp_path / CONFIG_CACHE.lstrip("/")
        config.write_text("[demo]\nport = 9000\n")
        first = load_config(root, TABLES).table("demo")["port"]
        assert not cache.exists()  # loading only reads
        assert store_parsed(cache)
        assert load_config(root, TABLES).table("demo")["port"] == first == 9000
        config.write_text('[demo]\nport = "9000"\n')
        with pytest.raises(ConfigError, match="port"):
            load_config(root, TABLES)
        assert store_parsed(cache)
        with pytest.raises(ConfigError, match="port"):
            load_config(root, TABLES)  # now from the cache: the same error


class TestApplyStoresAndResetRemoves:
    def test_apply_keeps_the_parse_and_reset_removes_it(self, node: Node) -> None:
        """A real apply (native supervisor, real processes) stores the parsed config.toml and
        records it, so reset removes it; plan, before that, wrote nothing."""
        node.services.append(sleeper("a"))
        config = node.root / "etc/noderole/config.toml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text("[noderole]\nreadiness_timeout = 30.0\n")
        cache = node.root / CONFIG_CACHE.lstrip("/")
        planned = run(node, "plan", "demo")
        assert planned.exit_code == 0, planned.output
        assert not cache.exists()
        applied = run(node, "apply", "demo", "--json")
        assert applied.exit_code == 0, applied.output
        assert json.loads(cache.read_text())["text"] == config.read_text()
        reset = run(node, "reset", "demo")
        assert reset.exit_code == 0, reset.output
        assert not cache.exists()
        assert config.exists()  # the operator's file stays


class TestConfigCheckReadsTheFile:
    def test_a_cache_that_disagrees_with_the_file_is_not_what_config_check_checks(
        self, tmp_path: Path
    ) -> None:
        """`noderole config check` is the operator's way to validate the file: it parses the
        file itself. Before, a cache whose document disagreed with its text (a hand edit, a
        fault) was checked instead: an error the file does not have."""
        from noderole.config import CONFIG_PATH, check_config

        root = NodeRoot(tmp_path)
        config = tmp_path / CONFIG_PATH.lstrip("/")
        config.parent.mkdir(parents=True)
        config.write_text("")
        cache = tmp_path / CONFIG_CACHE.lstrip("/")
        cache.parent.mkdir(parents=True)
        cache.write_text(json.dumps({"format": 1, "text": "", "document": {"bogus": {"x": 1}}}))
        _, problems = check_config(root, [], cached=False)
        assert problems == []
