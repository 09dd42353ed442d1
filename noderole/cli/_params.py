"""Command-line value types shared by several commands: a bounded number of seconds.

``click.FloatRange(min=0)`` accepts ``nan`` (every comparison with nan is false) and ``inf``: a
``--timeout nan`` then never ends. :class:`Seconds` refuses both, and anything longer than the
longest duration records accept, naming the option.
"""

from __future__ import annotations

import math
from typing import Any

import click

__all__ = ["MAX_SECONDS", "Seconds", "seconds_text"]

MAX_SECONDS = 366 * 24 * 3600.0
"""Same bound as ``noderole.records.MAX_SECONDS`` (repeated: ``noderole --help``
must not build the record classes)."""


class Seconds(click.ParamType[float]):
    """A finite number of seconds, > 0 (or >= 0 with ``zero=True``), at most a year."""

    name = "seconds"

    def __init__(self, *, zero: bool = False) -> None:
        self.zero = zero

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float) and self._ok(value):
            return value
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not self._ok(number):
            low = ">= 0" if self.zero else "> 0"
            self.fail(
                f"{value!r} is not a finite number of seconds {low} and <= {MAX_SECONDS:g} "
                f"(a year)",
                param,
                ctx,
            )
        return number

    def _ok(self, number: float) -> bool:
        return (
            math.isfinite(number)
            and (number > 0 or (self.zero and number == 0))
            and number <= MAX_SECONDS
        )


def seconds_text(seconds: float) -> str:
    """Seconds as the user most likely wrote them: ``1.5``, ``120``, ``0.25``."""
    text = repr(float(seconds))
    return text.removesuffix(".0")
