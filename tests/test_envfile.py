"""Environment files: parsed as data, never executed; malformed lines reported, not fatal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from noderole import recordclass
from noderole.cli._app import App
from noderole.cli._env import env
from noderole.envfile import EnvFile, parse_env_text, read_env_file
from noderole.errors import EnvFileError, NoderoleError, UsageError
from noderole.root import NodeRoot

SOURCE = "/etc/spinifex-eks/first-boot.env"


def parse(text: str) -> EnvFile:
    return parse_env_text(text, source=SOURCE)


class TestAssignments:
    def test_plain_assignment(self) -> None:
        """KEY=VALUE assigns VALUE to KEY."""
        assert parse("EKS_KONNECTIVITY_SERVER_COUNT=3\n").values == {
            "EKS_KONNECTIVITY_SERVER_COUNT": "3"
        }

    def test_value_containing_equals_is_kept_whole(self) -> None:
        """Only the first '=' splits: the seed's awk -F= would cut 'a=b' to 'a'."""
        assert parse("OPTS=--flag=a=b\n").get("OPTS") == "--flag=a=b"

    def test_repeated_key_last_assignment_wins(self) -> None:
        """A key assigned twice has its last value (awk would print both)."""
        parsed = parse("SANS=a.example\nOTHER=1\nSANS=b.example\n")
        assert parsed.get("SANS") == "b.example"
        assert list(parsed.values) == ["SANS", "OTHER"]

    def test_export_prefix_is_accepted(self) -> None:
        """'export KEY=VALUE' (any blanks after export) assigns like 'KEY=VALUE'."""
        assert parse("export A=1\nexport\tB=2\n").values == {"A": "1", "B": "2"}

    def test_key_named_export_is_a_key(self) -> None:
        """'export=1' assigns the key 'export' (no blank after it, so not the prefix)."""
        assert parse("export=1\n").values == {"export": "1"}

    def test_empty_value(self) -> None:
        """KEY= assigns the empty string, so callers can tell it from an absent key."""
        parsed = parse("EMPTY=\n")
        assert parsed.get("EMPTY") == ""
        assert parsed.get("ABSENT") is None
        assert parsed.get("ABSENT", "dflt") == "dflt"

    def test_unquoted_value_surrounding_whitespace_trimmed(self) -> None:
        """Blanks around an unquoted value are dropped; inner blanks stay."""
        assert parse("A=  hello world \t\n").get("A") == "hello world"

    def test_crlf_line_ends(self) -> None:
        """A file saved with CRLF line ends parses like one with LF; no '\\r' in values."""
        parsed = parse("A=1\r\nB='two'\r\nC=\"three\"\r\n")
        assert parsed.values == {"A": "1", "B": "two", "C": "three"}
        assert parsed.warnings == ()

    def test_no_trailing_newline(self) -> None:
        """The last line counts even without a newline."""
        assert parse("A=1\nB=2").values == {"A": "1", "B": "2"}

    def test_values_are_read_only(self) -> None:
        """EnvFile.values cannot be changed after parsing."""
        parsed = parse("A=1\n")
        with pytest.raises(TypeError):
            parsed.values["A"] = "2"  # type: ignore[index]

    def test_record_is_frozen(self) -> None:
        """EnvFile is an immutable record."""
        with pytest.raises(recordclass.FrozenInstanceError):
            parse("A=1\n").exists = False  # type: ignore[misc]


class TestComments:
    def test_comment_and_blank_lines_skipped(self) -> None:
        """Lines starting with '#' (after blanks) and blank lines assign nothing, warn nothing."""
        parsed = parse("# header\n\n   # indented\n\t\nA=1\n")
        assert parsed.values == {"A": "1"}
        assert parsed.warnings == ()

    def test_comment_after_unquoted_value(self) -> None:
        """' #' after an unquoted value starts a comment."""
        assert parse("A=value # explained\n").get("A") == "value"

    def test_hash_inside_word_is_literal(self) -> None:
        """'#' not preceded by a blank is part of the value, as in the shell."""
        assert parse("A=a#b\nB=#x\n").values == {"A": "a#b", "B": "#x"}

    def test_comment_after_quoted_value(self) -> None:
        """A comment may follow the closing quote."""
        assert parse("A='x y' # c\nB=\"z\"\t# c\n").values == {"A": "x y", "B": "z"}

    def test_hash_inside_quotes_is_literal(self) -> None:
        """' #' inside quotes is part of the value."""
        assert parse("A='x #y'\n").get("A") == "x #y"

    def test_blank_then_comment_is_empty_value(self) -> None:
        """'KEY= # note' assigns the empty string."""
        assert parse("A= # note\n").get("A") == ""


class TestQuotes:
    def test_single_quotes_are_literal(self) -> None:
        """Inside single quotes nothing is special, not even backslash or $."""
        assert parse("A='a\\n $B \"q\"'\n").get("A") == 'a\\n $B "q"'

    def test_double_quote_escapes(self) -> None:
        """Double quotes understand \\", \\\\, \\$ and \\n."""
        assert parse('A="say \\"hi\\" \\\\ \\$HOME\\nnext"\n').get("A") == (
            'say "hi" \\ $HOME\nnext'
        )

    def test_other_backslashes_kept_in_double_quotes(self) -> None:
        """A backslash before any other character stays, as the shell keeps it."""
        assert parse('A="a\\tb"\n').get("A") == "a\\tb"

    def test_quotes_keep_surrounding_blanks(self) -> None:
        """Blanks inside quotes are kept."""
        assert parse("A='  x  '\n").get("A") == "  x  "

    def test_quote_inside_unquoted_value_is_literal(self) -> None:
        """A quote after the first character of an unquoted value is an ordinary character."""
        assert parse("A=it's\n").get("A") == "it's"


class TestNothingExecuted:
    def test_command_substitution_stays_text(self, tmp_path: Path) -> None:
        """$(touch X) in any quoting is the literal text; X is never created."""
        marker = tmp_path / "pwned"
        text = f"A=$(touch {marker})\nB=\"$(touch {marker})\"\nC='$(touch {marker})'\n"
        env_file = tmp_path / "f.env"
        env_file.write_text(text)
        parsed = read_env_file(env_file)
        assert parsed.values == dict.fromkeys("ABC", f"$(touch {marker})")
        assert not marker.exists()

    def test_backticks_stay_text(self, tmp_path: Path) -> None:
        """`touch X` is the literal text; X is never created."""
        marker = tmp_path / "pwned"
        env_file = tmp_path / "f.env"
        env_file.write_text(f'A=`touch {marker}`\nB="`touch {marker}`"\n')
        parsed = read_env_file(env_file)
        assert parsed.values == {"A": f"`touch {marker}`", "B": f"`touch {marker}`"}
        assert not marker.exists()

    def test_variables_not_expanded(self) -> None:
        """$X and ${X} stay as written, even for keys assigned earlier."""
        parsed = parse('X=1\nA=$X\nB="${X}"\nC=${HOME}\n')
        assert parsed.values == {"X": "1", "A": "$X", "B": "${X}", "C": "${HOME}"}


class TestMalformedLines:
    def test_line_without_equals_warns_and_is_skipped(self) -> None:
        """A line with no '=' is reported as PATH:LINE and the others still count."""
        parsed = parse("A=1\njust words\nB=2\n")
        assert parsed.values == {"A": "1", "B": "2"}
        assert parsed.warnings == (f"{SOURCE}:2: no '=' on this line: expected KEY=VALUE",)

    def test_stray_line_is_not_echoed(self) -> None:
        """The warning for a line without '=' does not repeat its text (it may be a secret)."""
        parsed = parse("s3cr3t-token-value\n")
        assert "s3cr3t" not in parsed.warnings[0]

    def test_bad_key_warns(self) -> None:
        """A key starting with a digit or holding a '-' is reported and skipped."""
        parsed = parse("1A=x\nMY-KEY=y\nOK=z\n")
        assert parsed.values == {"OK": "z"}
        assert [w.split(": ")[0] for w in parsed.warnings] == [f"{SOURCE}:1", f"{SOURCE}:2"]
        assert "bad key '1A'" in parsed.warnings[0]

    def test_space_before_equals_warns_with_fix(self) -> None:
        """'KEY = v' (which a shell would run as a command) is reported with the fix."""
        parsed = parse("A = 1\n")
        assert parsed.values == {}
        assert parsed.warnings == (f"{SOURCE}:1: space before '=' after A: write A=VALUE",)

    def test_unterminated_double_quote_warns(self) -> None:
        """An unterminated double quote skips the line, not the rest of the file."""
        parsed = parse('A="open\nB=2\n')
        assert parsed.values == {"B": "2"}
        assert parsed.warnings == (f"{SOURCE}:1: unterminated double quote in the value of A",)

    def test_unterminated_single_quote_warns(self) -> None:
        """An unterminated single quote skips the line."""
        parsed = parse("A='open\n")
        assert parsed.values == {}
        assert "unterminated single quote" in parsed.warnings[0]

    def test_text_after_closing_quote_warns(self) -> None:
        """'KEY='a'b' is reported rather than guessed at."""
        parsed = parse("A='a'b\n")
        assert parsed.values == {}
        assert "text after the closing quote of A" in parsed.warnings[0]

    def test_escaped_quote_at_end_is_unterminated(self) -> None:
        """'A="x\\"' has no closing quote: the last quote is escaped."""
        assert parse('A="x\\"\n').values == {}


class TestReadFile:
    def test_missing_file_reads_empty(self, tmp_path: Path) -> None:
        """A missing file is empty with exists=False, not an error."""
        parsed = read_env_file(tmp_path / "absent.env", display_path=SOURCE)
        assert parsed == EnvFile(path=SOURCE, exists=False, values={}, warnings=())

    def test_display_path_names_the_file_in_warnings(self, tmp_path: Path) -> None:
        """Warnings name the node path, not the path under --root."""
        env_file = tmp_path / "f.env"
        env_file.write_text("oops\n")
        parsed = read_env_file(env_file, display_path=SOURCE)
        assert parsed.exists
        assert parsed.path == SOURCE
        assert parsed.warnings[0].startswith(f"{SOURCE}:1: ")

    def test_binary_garbage_raises(self, tmp_path: Path) -> None:
        """A binary file raises EnvFileError naming the file and saying how to fix it."""
        env_file = tmp_path / "f.env"
        env_file.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\xff\xfe" * 8)
        with pytest.raises(EnvFileError, match=rf"{SOURCE} contains a NUL byte.*rewrite it"):
            read_env_file(env_file, display_path=SOURCE)

    def test_not_utf8_raises(self, tmp_path: Path) -> None:
        """A Latin-1 file raises EnvFileError naming the file and suggesting a conversion."""
        env_file = tmp_path / "f.env"
        env_file.write_bytes("NAME=caf\u00e9\n".encode("latin-1"))
        with pytest.raises(EnvFileError, match=r"f\.env is not UTF-8 text.*convert it"):
            read_env_file(env_file)

    def test_directory_raises(self, tmp_path: Path) -> None:
        """A directory where the file should be raises EnvFileError naming it."""
        with pytest.raises(EnvFileError, match=rf"cannot read environment file {SOURCE}"):
            read_env_file(tmp_path, display_path=SOURCE)

    def test_byte_order_mark_ignored(self, tmp_path: Path) -> None:
        """A UTF-8 byte-order mark does not become part of the first key."""
        env_file = tmp_path / "f.env"
        env_file.write_bytes(b"\xef\xbb\xbfA=1\n")
        assert read_env_file(env_file).values == {"A": "1"}

    def test_byte_order_mark_only_at_the_start(self, tmp_path: Path) -> None:
        """Only a leading mark is skipped (as utf-8-sig does): a later one is part of the text."""
        env_file = tmp_path / "f.env"
        env_file.write_bytes(b"\xef\xbb\xbf\xef\xbb\xbfA=1\n")
        parsed = read_env_file(env_file)
        assert parsed.values == {}
        assert "bad key '\\ufeffA'" in parsed.warnings[0]
        env_file.write_bytes(b"A=\xef\xbb\xbf1\n")
        assert read_env_file(env_file).values == {"A": "\ufeff1"}

    def test_invalid_byte_counted_from_the_file_start(self, tmp_path: Path) -> None:
        """With a byte-order mark, the invalid byte's offset still counts the mark's three bytes."""
        env_file = tmp_path / "f.env"
        env_file.write_bytes(b"\xef\xbb\xbfA=caf\xe9\n")
        with pytest.raises(EnvFileError, match=r"invalid byte at 8\)"):
            read_env_file(env_file)

    def test_utf8_values(self, tmp_path: Path) -> None:
        """Non-ASCII UTF-8 values are read as text."""
        env_file = tmp_path / "f.env"
        env_file.write_text("NAME='caf\u00e9'\n", encoding="utf-8")
        assert read_env_file(env_file).get("NAME") == "caf\u00e9"


@pytest.fixture
def node(tmp_path: Path) -> App:
    env_dir = tmp_path / "etc/spinifex-eks"
    env_dir.mkdir(parents=True)
    (env_dir / "first-boot.env").write_text(
        "EKS_KONNECTIVITY_SANS=a.example,b.example\n"
        "EKS_JOIN_TOKEN=K10abc::server:s3cret\n"
        "MESSAGE='two words'\n"
        "broken line\n"
    )
    return App(root=NodeRoot(tmp_path))


class TestEnvShow:
    def test_prints_shell_quoted_values_and_hides_secrets(self, node: App) -> None:
        """'env show' prints KEY=VALUE lines, shell-quoted, with secret-looking keys as ***."""
        result = CliRunner().invoke(env, ["show", SOURCE], obj=node)
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines() == [
            "EKS_KONNECTIVITY_SANS=a.example,b.example",
            "EKS_JOIN_TOKEN=***",
            "MESSAGE='two words'",
        ]
        assert "s3cret" not in result.output
        assert f"warning: {SOURCE}:4: no '='" in result.stderr

    def test_show_secrets(self, node: App) -> None:
        """--show-secrets prints secret values too."""
        result = CliRunner().invoke(env, ["show", "--show-secrets", SOURCE], obj=node)
        assert "EKS_JOIN_TOKEN=K10abc::server:s3cret" in result.stdout.splitlines()

    def test_json(self, node: App) -> None:
        """--json prints the values (secrets hidden) and the warnings as one object."""
        result = CliRunner().invoke(env, ["show", "--json", SOURCE], obj=node)
        document = json.loads(result.stdout)
        assert document["values"]["EKS_JOIN_TOKEN"] == "***"
        assert document["values"]["MESSAGE"] == "two words"
        assert document["warnings"] == [f"{SOURCE}:4: no '=' on this line: expected KEY=VALUE"]

    def test_missing_file_fails_naming_it(self, node: App) -> None:
        """A missing file fails with a message naming the node path and the root."""
        result = CliRunner().invoke(env, ["show", "/etc/absent.env"], obj=node)
        assert isinstance(result.exception, NoderoleError)
        assert "/etc/absent.env does not exist (looked under --root" in str(result.exception)

    def test_relative_path_is_a_usage_error(self, node: App) -> None:
        """FILE must be an absolute node path."""
        result = CliRunner().invoke(env, ["show", "first-boot.env"], obj=node)
        assert isinstance(result.exception, UsageError)
