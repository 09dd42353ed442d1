"""noderole's JSON text (noderole.supervisor._jsontext) is the standard library's, without
importing it: the same text written, the same value read, the same errors."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noderole.supervisor._jsontext import dumps, loads

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
)
DOCUMENTS = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)
OPTIONS = st.fixed_dictionaries(
    {},
    optional={
        "sort_keys": st.booleans(),
        "indent": st.sampled_from([None, 0, 1, 2]),
        "separators": st.sampled_from([(",", ":"), (", ", ": ")]),
        "allow_nan": st.booleans(),
    },
)


def _outcome(call: Any) -> tuple[str, Any]:
    try:
        return "value", call()
    except (TypeError, ValueError) as error:
        return type(error).__name__, str(error)


@settings(max_examples=300, deadline=None)
@given(DOCUMENTS, OPTIONS)
def test_writes_what_json_writes(document: Any, options: dict[str, Any]) -> None:
    assert _outcome(lambda: dumps(document, **options)) == _outcome(
        lambda: json.dumps(document, **options)
    )


def _same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(type(a) is type(b) and a == b)


@settings(max_examples=300, deadline=None)
@given(DOCUMENTS, st.sampled_from([None, 1]), st.sampled_from(["", " ", "\n\t "]))
def test_reads_what_json_reads(document: Any, indent: int | None, blank: str) -> None:
    text = blank + json.dumps(document, indent=indent) + blank
    assert _same(loads(text), json.loads(text))
    assert _same(loads(text.encode()), json.loads(text.encode()))


@pytest.mark.parametrize(
    "text",
    ["", "  ", "{", "[1,]", "1 2", "nul", '{"a":1} x', "\ufeff1", '{"a" 1}', '"\\x"', "[" * 5],
)
def test_refuses_what_json_refuses_in_its_words(text: str) -> None:
    with pytest.raises(json.JSONDecodeError) as ours:
        loads(text)
    with pytest.raises(json.JSONDecodeError) as theirs:
        json.loads(text)
    assert str(ours.value) == str(theirs.value)


def test_a_constant_can_be_refused() -> None:
    """``parse_constant`` as json's: the state file refuses NaN and the infinities with it."""

    def refuse(name: str) -> object:
        raise LookupError(name)

    with pytest.raises(LookupError, match="NaN"):
        loads('{"a": NaN}', parse_constant=refuse)
    assert math.isnan(loads('{"a": NaN}')["a"])


def test_too_deep_is_a_recursion_error_as_json_s() -> None:
    text = "[" * 100_000 + "]" * 100_000
    with pytest.raises(RecursionError):
        json.loads(text)
    with pytest.raises(RecursionError):
        loads(text)


def test_bytes_are_utf8_with_or_without_a_bom() -> None:
    assert (
        loads(b'\xef\xbb\xbf{"a": "\xc3\xa9"}')
        == {"a": "é"}
        == json.loads(b'\xef\xbb\xbf{"a": "\xc3\xa9"}')
    )
    with pytest.raises(UnicodeDecodeError):
        loads(b'"\xff"')


def test_circular_documents_are_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    for indent in (None, 1):
        with pytest.raises(ValueError, match="Circular reference detected"):
            dumps(loop, indent=indent)
