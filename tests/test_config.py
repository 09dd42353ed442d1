"""config.toml: typed settings per plugin; typos and wrong types name file, table and key."""

from __future__ import annotations

import math
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from noderole.config import check_config, load_config
from noderole.errors import ConfigError, DefinitionError, PluginError
from noderole.records import Setting, SettingsTable
from noderole.root import KERNEL_PREFIXES, NodeRoot, climbs_out

TABLES = [
    SettingsTable(
        table="demo",
        settings=[
            Setting(name="port", type=int, default=8132),
            Setting(name="timeout", type=float, default=120),
            Setting(name="token", type=str, default="", secret=True),
            Setting(name="enabled", type=bool, default=True),
            Setting(name="delay", type=float, default=5, min=0, max=3600),
            Setting(name="mode", type=str, default="auto", choices=["auto", "native"]),
        ],
    )
]


def _write(root: Path, text: str) -> None:
    path = root / "etc/noderole/config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


class TestLoadConfig:
    def test_missing_file_gives_defaults(self, tmp_path: Path) -> None:
        """Without a file every value is its default, and says so."""
        config = load_config(NodeRoot(tmp_path), TABLES)
        assert dict(config.table("demo")) == {
            "port": 8132,
            "timeout": 120,
            "token": "",
            "enabled": True,
            "delay": 5,
            "mode": "auto",
        }
        assert {e.source for e in config.entries()} == {"default"}
        assert not config.file_found

    def test_file_overrides_and_records_source(self, tmp_path: Path) -> None:
        """A value from the file wins and its source is the file; ints are accepted for floats."""
        _write(tmp_path, "[demo]\nport = 9000\ntimeout = 5\n")
        config = load_config(NodeRoot(tmp_path), TABLES)
        assert config.table("demo")["port"] == 9000
        assert config.table("demo")["timeout"] == 5.0
        sources = {e.setting.name: e.source for e in config.entries()}
        assert sources["port"] == "/etc/noderole/config.toml"
        assert sources["enabled"] == "default"

    def test_unknown_key_names_file_table_and_key(self, tmp_path: Path) -> None:
        """A misspelled key is an error naming the file, the table and the key."""
        _write(tmp_path, "[demo]\nprot = 1\n")
        with pytest.raises(ConfigError) as excinfo:
            load_config(NodeRoot(tmp_path), TABLES)
        assert str(excinfo.value).startswith(
            "/etc/noderole/config.toml:demo.prot: unknown key (did you mean 'port'?)"
        )

    def test_unknown_table_is_an_error(self, tmp_path: Path) -> None:
        """A table no plugin declares is an error listing the known tables."""
        _write(tmp_path, "[dmeo]\nport = 1\n")
        with pytest.raises(ConfigError, match=r"table \[dmeo\].*known tables: \[demo\]"):
            load_config(NodeRoot(tmp_path), TABLES)

    @pytest.mark.parametrize(
        ("line", "key"),
        [('port = "8132"', "port"), ("enabled = 1", "enabled"), ("timeout = true", "timeout")],
    )
    def test_wrong_type_names_key_and_type(self, tmp_path: Path, line: str, key: str) -> None:
        """A value of the wrong type is an error naming the key and the expected type."""
        _write(tmp_path, f"[demo]\n{line}\n")
        with pytest.raises(ConfigError, match=rf"config.toml:demo\.{key}: .* is not (a|an|true)"):
            load_config(NodeRoot(tmp_path), TABLES)

    def test_invalid_toml(self, tmp_path: Path) -> None:
        """Broken TOML is an error naming the file."""
        _write(tmp_path, "[demo\n")
        with pytest.raises(ConfigError, match="not valid TOML"):
            load_config(NodeRoot(tmp_path), TABLES)

    def test_a_byte_order_mark_is_not_part_of_the_first_line(self, tmp_path: Path) -> None:
        """A config.toml saved by an editor that writes a UTF-8 byte-order mark (Notepad) reads
        as without it, as an environment file does; before, every command refused it with "not
        valid TOML: Invalid statement (at line 1, column 1)", naming nothing visible."""
        path = tmp_path / "etc/noderole/config.toml"
        path.parent.mkdir(parents=True)
        path.write_bytes(b"\xef\xbb\xbf[demo]\nport = 6443\n")
        assert load_config(NodeRoot(tmp_path), TABLES).table("demo")["port"] == 6443

    def test_a_byte_order_mark_later_is_still_an_error(self, tmp_path: Path) -> None:
        """Only a leading mark is the editor's: one inside the text stays the user's."""
        _write(tmp_path, "[demo]\n\ufeffport = 6443\n")
        with pytest.raises(ConfigError, match="not valid TOML"):
            load_config(NodeRoot(tmp_path), TABLES)

    @pytest.mark.parametrize(
        "number", ["9" * 5000, "1_" + "0_" * 4500 + "0"], ids=["plain", "1_000"]
    )
    def test_an_integer_of_thousands_of_digits_is_named_with_its_line(
        self, tmp_path: Path, number: str
    ) -> None:
        """A number longer than Python converts (4,300 digits): the line and the size, where
        Python's words were all the operator got ("Exceeds the limit (4300 digits) for integer
        string conversion...; use sys.set_int_max_str_digits() to increase the limit")."""
        _write(tmp_path, f"[demo]\nenabled = true\nport = {number}\n")
        digits = number.count("9") + number.count("1") + number.count("0")
        with pytest.raises(ConfigError) as raised:
            load_config(NodeRoot(tmp_path), TABLES)
        assert str(raised.value) == (
            f"/etc/noderole/config.toml: not valid TOML: an integer of {digits} digits, more "
            "than Python reads (4300) (at line 3)"
        )

    def test_secret_is_shown_masked(self, tmp_path: Path) -> None:
        """A secret setting shows as *** in config show output."""
        _write(tmp_path, '[demo]\ntoken = "abc"\n')
        entry = next(
            e
            for e in load_config(NodeRoot(tmp_path), TABLES).entries()
            if e.setting.name == "token"
        )
        assert entry.value == "abc"
        assert entry.shown() == "***"

    def test_undeclared_table_lookup(self, tmp_path: Path) -> None:
        """Asking for a table nobody declared is an error listing the declared ones; a plugin
        error, since only the code that asked can fix the name (config.toml cannot)."""
        with pytest.raises(PluginError, match="declared tables: demo"):
            load_config(NodeRoot(tmp_path), TABLES).table("nope")

    def test_undeclared_table_lookup_suggests_the_close_one(self, tmp_path: Path) -> None:
        with pytest.raises(PluginError, match=r"\[dmeo\] \(did you mean 'demo'\?\)"):
            load_config(NodeRoot(tmp_path), TABLES).table("dmeo")


class TestRoot:
    def test_paths_resolve_under_root(self, tmp_path: Path) -> None:
        """Node paths resolve under the root; kernel interfaces never do."""
        root = NodeRoot(tmp_path)
        assert root.resolve("/etc/x") == tmp_path / "etc/x"
        assert root.resolve("/proc/self/mounts") == Path("/proc/self/mounts")
        assert root.resolve("/sys/class/net") == Path("/sys/class/net")
        assert root.resolve("/devices") == tmp_path / "devices"
        assert root.to_node(tmp_path / "etc/x") == "/etc/x"
        assert root.environment() == {"NODEROLE_ROOT": str(tmp_path)}

    def test_real_root_is_identity(self) -> None:
        """With / as root, paths are used as they are and children get no NODEROLE_ROOT."""
        root = NodeRoot("/")
        assert root.resolve("/etc/x") == Path("/etc/x")
        assert root.environment() == {}

    def test_relative_node_path_refused(self, tmp_path: Path) -> None:
        """A relative node path is a programming error, refused loudly."""
        with pytest.raises(ValueError, match="absolute"):
            NodeRoot(tmp_path).resolve("etc/x")
        with pytest.raises(ValueError, match="absolute"):
            NodeRoot(tmp_path).local("etc/x")

    @given(
        parts=st.lists(st.sampled_from(["", ".", "..", "proc", "sys", "dev", "devices", "a"])),
        base=st.sampled_from(["/", "//", "/scratch/node", "/scratch/node/", "//scratch"]),
    )
    def test_local_is_resolve_without_pathlib(self, parts: list[str], base: str) -> None:
        """``local`` (status's way, no pathlib) names the path pathlib's own parts would:
        empty and "." components dropped, "..", "//" and the kernel interfaces as before."""
        root = NodeRoot(base)
        node_path = "/" + "/".join(parts)
        if climbs_out(node_path):
            with pytest.raises(ValueError, match="climbs above"):
                root.local(node_path)
            return
        pure = PurePosixPath(node_path)
        kernel = any(p == pure or p in pure.parents for p in map(PurePosixPath, KERNEL_PREFIXES))
        expected = pure if root.is_real or kernel else Path(base).joinpath(*pure.parts[1:])
        assert root.local(node_path) == str(expected)
        assert root.resolve(node_path) == Path(expected)
        assert root.path == Path(base)


class TestBoundsAndChoices:
    @pytest.mark.parametrize(
        ("line", "message"),
        [
            ("delay = -5", "demo.delay: -5 is below the minimum 0; expected a number, 0 to 3600"),
            ("delay = 7200", "demo.delay: 7200 is above the maximum 3600"),
            ("delay = nan", "demo.delay: nan is not a finite number"),
            ("delay = inf", "demo.delay: inf is not a finite number"),
            ("timeout = -inf", "demo.timeout: -inf is not a finite number"),
            (
                'mode = "sysvinit"',
                "demo.mode: 'sysvinit' is not one of 'auto', 'native'; expected a string, one of",
            ),
        ],
    )
    def test_values_outside_the_declaration_are_refused(
        self, tmp_path: Path, line: str, message: str
    ) -> None:
        """Ranges, choices and finiteness are checked, naming file:table.key and the bounds."""
        _write(tmp_path, f"[demo]\n{line}\n")
        with pytest.raises(ConfigError) as excinfo:
            load_config(NodeRoot(tmp_path), TABLES)
        assert f"/etc/noderole/config.toml:{message}" in str(excinfo.value)

    def test_every_problem_is_listed_once(self, tmp_path: Path) -> None:
        """check_config reports all problems, one line each, not only the first."""
        _write(tmp_path, '[demo]\ndelay = -5\nmode = "x"\nprot = 1\n[dmeo]\n')
        config, problems = check_config(NodeRoot(tmp_path), TABLES)
        assert config is not None
        assert [p.split(":")[1] for p in problems] == [
            "dmeo",
            "demo.prot",
            "demo.delay",
            "demo.mode",
        ]
        assert "(did you mean 'demo'?)" in problems[0]

    def test_a_toml_date_is_shown_as_written(self, tmp_path: Path) -> None:
        """A TOML date or time where a number belongs is quoted as the file has it, not as
        Python's repr of it."""
        _write(tmp_path, "[demo]\ndelay = 1979-05-27T07:32:00Z\n")
        _, problems = check_config(NodeRoot(tmp_path), TABLES)
        assert problems == [
            "/etc/noderole/config.toml:demo.delay: 1979-05-27T07:32:00+00:00 is not a number; "
            "expected a number, 0 to 3600 (default: 5)"
        ]

    def test_secret_values_are_not_echoed(self, tmp_path: Path) -> None:
        """A refused secret is named but its value is not printed."""
        _write(tmp_path, "[demo]\ntoken = 5\n")
        _, problems = check_config(NodeRoot(tmp_path), TABLES)
        assert problems == [
            "/etc/noderole/config.toml:demo.token: *** is not a string; expected a string "
            "(default: ***)"
        ]


class TestBlame:
    def test_a_file_value_a_record_refuses_is_a_config_error(self, tmp_path: Path) -> None:
        """A record refusing a value that came from the file blames file, table and key."""
        _write(tmp_path, "[demo]\ndelay = 0\n")
        config = load_config(NodeRoot(tmp_path), TABLES)
        from noderole.records import WaitForPaths

        with pytest.raises(DefinitionError) as excinfo:
            WaitForPaths(paths=["/x"], timeout=config.table("demo")["delay"])
        blamed = config.blame(excinfo.value)
        assert blamed is not None
        assert str(blamed).startswith(
            "/etc/noderole/config.toml:demo.delay: 0.0 is refused by the plugin that uses it: "
            "WaitForPaths: field 'timeout' must be"
        )

    def test_a_default_value_is_not_blamed_on_the_file(self, tmp_path: Path) -> None:
        """Defaults are the plugin's own: its definition error stays a definition error."""
        config = load_config(NodeRoot(tmp_path), TABLES)
        error = DefinitionError("X: field 'timeout' bad", field="timeout", value=math.nan)
        assert config.blame(error) is None
