"""Console progress in OpenRC's manner.

On a terminal::

     * Starting konnectivity-server ...
     * konnectivity-server: waiting for /etc/rancher/k3s/k3s.yaml
     * Started konnectivity-server                                     [ ok ]

Services start concurrently, so each line names its service; nothing is redrawn in place. When
stdout is not a terminal the same lines are printed without colour.
"""

from __future__ import annotations

import sys
import threading
from typing import TextIO

from noderole.engine import ServiceReport

__all__ = ["ConsoleProgress", "QuietProgress"]

_GREEN, _YELLOW, _RED, _RESET = "\033[1;32m", "\033[1;33m", "\033[1;31m", "\033[0m"


class ConsoleProgress:
    """Prints `` * Starting NAME ...`` lines and a bracketed result per service."""

    def __init__(self, stream: TextIO | None = None, *, color: bool | None = None) -> None:
        self.stream = stream or sys.stdout
        self.color = self.stream.isatty() if color is None else color
        self.width = 80
        if self.color:
            import shutil  # only on a terminal: it imports the compression modules with it

            self.width = min(shutil.get_terminal_size((80, 24)).columns, 100)
        self._lock = threading.Lock()

    def _paint(self, code: str, text: str) -> str:
        return f"{code}{text}{_RESET}" if self.color else text

    def _line(self, text: str) -> None:
        with self._lock:
            self.stream.write(text + "\n")
            self.stream.flush()

    def starting(self, name: str, description: str) -> None:
        self._line(f" {self._paint(_GREEN, '*')} Starting {name} ...")

    def waiting(self, name: str, what: str) -> None:
        self._line(f" {self._paint(_YELLOW, '*')} {name}: {what}")

    def finished(self, report: ServiceReport) -> None:
        words = {
            "started": ("Started", "ok", _GREEN),
            "restarted": ("Restarted", "ok", _GREEN),
            "running": ("", "ok", _GREEN),
            "done": ("Done", "ok", _GREEN),
            "failed": ("ERROR: failed to start", "!!", _RED),
            "skipped": ("ERROR: did not start", "!!", _RED),
        }
        verb, mark, code = words[report.status]
        star = self._paint(code if report.ok else _RED, "*")
        if report.status == "running":
            text = f" {star} {report.name}: already running"
        else:
            text = f" {star} {verb} {report.name}"
            if report.reason:
                text += f": {report.reason}"
        bracket = f"[ {self._paint(code, mark)} ]"
        pad = max(1, self.width - len(text) - 6)
        self._line(
            f"{text}{' ' * pad}{bracket}" if len(text) < self.width - 8 else f"{text} {bracket}"
        )


class QuietProgress:
    """Prints nothing (``--json`` and library use)."""

    def starting(self, name: str, description: str) -> None:
        pass

    def waiting(self, name: str, what: str) -> None:
        pass

    def finished(self, report: ServiceReport) -> None:
        pass
