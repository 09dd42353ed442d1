"""Each name check without a regular expression accepts exactly what its expression accepts.

The expressions are the ones the checks replaced (written here only). Text is drawn from the
characters that matter at each position (the allowed ones, their neighbours in ASCII, other
scripts' letters and digits, whitespace and a trailing newline, which ``$`` would have let
through), so the generated strings hit every boundary.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from noderole import envfile
from noderole.names import is_dns_label, is_lower_name, is_service_name, is_variable_name
from noderole.records import _is_http_url

_EDGES = "aAzZ09_-.@+:/#[] \t\n\r\x0b\x0c\x00é٣ßİ\u0131\uff21\u3000\u00a0\u2028"
_TEXT = st.text(alphabet=st.sampled_from(_EDGES) | st.characters(), max_size=12)

CHECKS: list[tuple[str, Callable[[str], bool], str]] = [
    ("service", is_service_name, r"[A-Za-z0-9][A-Za-z0-9_.@+-]*\Z"),
    ("variable", is_variable_name, r"[A-Za-z_][A-Za-z0-9_]*\Z"),
    ("lower", is_lower_name, r"[a-z][a-z0-9_]*\Z"),
    ("table", lambda text: is_lower_name(text, hyphen=True), r"[a-z][a-z0-9_-]*\Z"),
    ("label", is_dns_label, r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\Z"),
    ("url", _is_http_url, r"https?://[^/\s]+"),
]


@pytest.mark.parametrize(("name", "check", "pattern"), CHECKS, ids=[c[0] for c in CHECKS])
@settings(max_examples=600)
@given(text=_TEXT)
@example(text="")
@example(text="k3s\n")
@example(text="a-")
@example(text="http:// x")
@example(text="https://h")
def test_the_check_accepts_what_its_expression_accepts(
    name: str, check: Callable[[str], bool], pattern: str, text: str
) -> None:
    assert check(text) == bool(re.match(pattern, text))


def _with_regex(line: str) -> tuple[str, str] | None:
    """The envfile line parser's answer when it still used its three expressions."""
    stripped = line.lstrip(" \t")
    if not stripped.strip() or stripped.startswith("#"):
        return None
    export = re.match(r"export[ \t]+", stripped)
    body = stripped[export.end() :] if export else stripped
    key, sep, rest = body.partition("=")
    if not sep or not re.match(r"[A-Za-z_][A-Za-z0-9_]*\Z", key):
        return ("malformed", "")
    text = rest.lstrip(" \t")
    if text[:1] in ("'", '"'):
        return ("quoted", "")
    comment = re.search(r"[ \t]#", rest)
    return key, (rest[: comment.start()] if comment else rest).strip(" \t")


@settings(max_examples=600)
@given(
    line=st.text(alphabet=st.sampled_from("export AB_1=x #\t'\"-"), max_size=24)
    | st.builds(lambda k, v: f"{k}={v}", _TEXT, _TEXT)
)
@example(line="export\tKEY=a #b")
@example(line="exportKEY=1")
@example(line="KEY=a#b\t#c")
def test_env_lines_split_as_with_the_expressions(line: str) -> None:
    expected = _with_regex(line)
    got: tuple[str, str] | None
    try:
        got = envfile._parse_line(line)
    except envfile._Malformed:
        got = ("malformed", "")
    if expected == ("quoted", ""):
        return  # a quoted value is parsed by code that did not change
    assert got == expected


@settings(max_examples=600)
@given(
    text=_TEXT | st.builds(lambda s, x: s + x, _TEXT, st.sampled_from([".yaml", ".yml", "yaml"]))
)
@example(text=".yaml")
@example(text="a-.yml")
@example(text="a.yml.yaml")
def test_manifest_names_as_the_expression_said(text: str) -> None:
    from noderole_k3s.records import _is_manifest_name

    assert _is_manifest_name(text) == bool(
        re.match(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?\.ya?ml\Z", text)
    )


@given(text=_TEXT)
@example(text="0")
@example(text="٣")
@example(text="²")
def test_a_server_count_is_ascii_digits(text: str) -> None:
    from noderole_konnectivity.plugin import server_count

    valid = bool(re.fullmatch(r"[0-9]+", text.strip())) and int(text.strip()) > 0
    count, problem = server_count(text, source="first-boot.env")
    assert (problem is None) == (valid or not text.strip())
    if valid:
        assert count == int(text.strip())
