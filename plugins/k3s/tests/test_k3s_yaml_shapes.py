"""The YAML module's shape checks give exactly the answers of the expressions they replaced.

The expressions are written here only, as the oracle. Text is drawn from the characters that
matter at each position (the word characters and their ASCII neighbours, ``:``, space, the
quotes and ``#``, tab, carriage return and newline, which ``.`` does not match, a letter and a
digit of other scripts, which ``str.isalpha`` and ``str.isdigit`` accept), from pieces that
build near-misses of each shape, and from any text at all.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noderole_k3s import _yaml

_WORD = r"[A-Za-z0-9_./=+,@%$()-]+(?::[A-Za-z0-9_./=+,@%$()-]+)*"
PLAIN = re.compile(
    rf"(?:[A-Za-z_/]|--?[A-Za-z])(?:{_WORD})?(?: {_WORD})*\Z|[0-9]+(?:\.[0-9]+){{2,}}\Z"
)
WORD = re.compile(rf"{_WORD}\Z")
INT = re.compile(r"(?:0|-?[1-9][0-9]*)\Z")
QUOTED_NUMBER = re.compile(r"(?:0|[1-9][0-9]*|0[0-7]+)\Z")
KEY_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]*):(?: +(.*))?\Z")
ITEM_LINE = re.compile(r"( *)- +(.*)\Z")


def _key_line(text: str) -> tuple[str, str | None] | None:
    match = KEY_LINE.match(text)
    return None if match is None else (match.group(1), match.group(2))


def _item_line(text: str) -> tuple[int, str] | None:
    match = ITEM_LINE.match(text)
    return None if match is None else (len(match.group(1)), match.group(2))


SHAPES: list[tuple[str, Callable[[str], Any], Callable[[str], Any]]] = [
    ("word", _yaml._is_word, lambda text: WORD.match(text) is not None),
    ("plain", _yaml._is_plain, lambda text: PLAIN.match(text) is not None),
    ("int", _yaml._is_int, lambda text: INT.match(text) is not None),
    ("quoted-number", _yaml._is_quoted_number, lambda text: QUOTED_NUMBER.match(text) is not None),
    ("key-line", _yaml._key_line, _key_line),
    ("item-line", _yaml._item_line, _item_line),
]
IDS = [shape[0] for shape in SHAPES]

EDGES = "aAzZyn_0123456789./=+,@%$()-: #'\"\t\n\r~!&*?|>[]{}`^\\;<é٣²ß\u212a\x00\u3000"
"""Every character the shapes tell apart, their ASCII neighbours (``/`` and ``:`` around the
digits, ``@ [ ` {`` around the letters), other scripts' letters and digits, the Kelvin sign
(which lower-cases to ``k``) and other whitespace."""
PIECES = [
    *"aZ_/-.:01789 \n\t\ré٣#'",
    "--",
    "  ",
    "::",
    "- ",
    "a:",
    ": ",
    ":b",
    "1.2",
    ".3",
    "key",
    "--flag=",
    "x=$(HOST)",
    "@v",
]
"""Fragments that put together make each shape and its near misses (a doubled space or colon, a
trailing colon, a dash without a letter, a dotted number one part short...)."""
LINE_HEADS = ["a:", "a: ", "Key_1.x-y:", "_:  ", "1a:", "- ", "  -  ", "-", " ", ""]
"""Starts of key and item lines, for the rest of the line to be drawn after."""
_pieces = st.lists(st.sampled_from(PIECES), max_size=8).map("".join)
TEXT = st.one_of(
    st.text(alphabet=st.sampled_from(EDGES), max_size=14),
    _pieces,
    st.builds(str.__add__, st.sampled_from(LINE_HEADS), _pieces),
    # integers, octal-looking and dotted numbers
    st.builds(str.__add__, st.sampled_from(["", "-", "0", "1."]), st.text(alphabet="0123456789.٣")),
    st.text(max_size=14),
)

QUIRKS = [
    "",
    "a",
    "a:b",  # the first character is not in the first word, which cannot start with ":"
    "ab:c",
    "ab:",
    "ab::c",
    "a b",
    "a  b",
    "a b ",
    "a :b",
    "a b:c",
    " a",
    "a ",
    "a\n",  # \Z is the end of the text, not before a final newline
    "a\tb",
    "aé",
    "é",
    "_",
    "/",
    "/x y:z",
    "-",
    "--",
    "-a",
    "--a",
    "---a",
    "-1",
    "-a:b",
    "--a b",
    "0",
    "-0",
    "00",
    "01",
    "07",
    "08",
    "0777",
    "0779",
    "1",
    "-1",
    "+1",
    "10",
    "٣",
    "1٣",
    "-٣",
    "²",
    "1\n",
    "1.2",
    "1.2.3",
    "1.2.3.4",
    "1.2.3.",
    ".1.2",
    "1..2",
    "01.2.3",
    "1.2.٣",
    "1.2.3\n",
    "a:",
    "a: b",
    "a:  b  ",
    "a: ",
    "a:  ",
    "a: \n",
    "a: b\nc",
    "a:\n",
    "a:\tb",
    "a: b\r",
    "a: 'x: y'",
    "a::",
    "a: :",
    "_a.b-c: x",
    "1a: x",
    "a b: x",
    "é: x",
    "a\n: x",
    ":",
    ": x",
    "- a",
    "-a",
    "  - a",
    "-  a  ",
    "- ",
    " -",
    "\t- a",
    "- a\n",
    "- \n",
    "- - a",
    " - a\r",
    "x- a",
    " \n- a",
]
"""Each quirk of the expressions, by hand: the generated text meets most of them, not all."""


@pytest.mark.parametrize(("name", "function", "oracle"), SHAPES, ids=IDS)
class TestSameAnswerAsTheExpression:
    @settings(max_examples=1500, deadline=None)
    @given(text=TEXT)
    def test_on_generated_text(
        self, name: str, function: Callable[[str], Any], oracle: Callable[[str], Any], text: str
    ) -> None:
        """The function answers as the expression on generated text."""
        assert function(text) == oracle(text)

    def test_on_each_quirk(
        self, name: str, function: Callable[[str], Any], oracle: Callable[[str], Any]
    ) -> None:
        """The function answers as the expression on each quirk written out by hand."""
        wrong = [(text, function(text), oracle(text)) for text in QUIRKS]
        assert [answer for answer in wrong if answer[1] != answer[2]] == []


class TestQuirks:
    def test_a_colon_after_the_first_character_is_not_plain(self) -> None:
        """``a:b`` is not plain, ``ab:c`` is: the leading character is not part of a word."""
        assert (_yaml._is_plain("a:b"), _yaml._is_plain("ab:c")) == (False, True)

    def test_other_scripts_digits_are_not_numbers(self) -> None:
        """Arabic-Indic and superscript digits are neither ints nor octal-looking strings."""
        for text in ("٣", "1٣", "²", "1.2.٣"):
            assert not _yaml._is_int(text)
            assert not _yaml._is_quoted_number(text)
            assert not _yaml._is_plain(text)

    def test_key_and_item_groups(self) -> None:
        """A key line gives its key and value, an item line its indent and item."""
        assert _yaml._key_line("node-name:") == ("node-name", None)
        assert _yaml._key_line("node-name:   ") == ("node-name", "")
        assert _yaml._key_line("server:  https://h:6443") == ("server", "https://h:6443")
        assert _yaml._item_line("  -   x y") == (2, "x y")
        assert _yaml._item_line("- a\n") is None
