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
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from noderole.engine import ServiceReport

__all__ = ["ConsoleProgress", "QuietProgress", "inert"]

# C0 controls but the tab, DEL and the C1 controls: a terminal acts on them (ESC starts a
# sequence that can retitle the window or clear the screen, U+009B is a one-character CSI).
_CONTROLS: dict[int, str] = {
    code: f"\\x{code:02x}" for code in (*range(0x09), *range(0x0A, 0x20), 0x7F, *range(0x80, 0xA0))
}
# The bidirectional controls: a service's text would be shown in another order than it is
# written (U+202E, right-to-left override: what "Trojan Source" hides code with).
_CONTROLS.update(
    (code, f"\\u{code:04x}")
    for code in (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
)


def inert(text: str) -> str:
    """``text`` with its control characters written out (``\\x1b``): what a service wrote (its
    log, its program's first line, a check's output), shown on root's terminal by ``status`` and
    ``apply``, is read, never acted on by the terminal."""
    return text.translate(_CONTROLS)


_GREEN, _YELLOW, _RED, _RESET = "\033[1;32m", "\033[1;33m", "\033[1;31m", "\033[0m"


class ConsoleProgress:
    """Prints `` * Starting NAME ...`` lines and a bracketed result per service."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        color: bool | None = None,
        failed: str = "ERROR: failed to start",
    ) -> None:
        # The stream under the one plugin code's prints are steered away from (bounded): the
        # progress lines are noderole's, even when a step reports one from a plugin's thread.
        chosen = stream or sys.stdout
        self.stream: TextIO = getattr(chosen, "__wrapped__", chosen)
        self.failed = failed
        """The words of a failure (``renew``'s is not a start: its process runs on)."""
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
        self._line(f" {self._paint(_YELLOW, '*')} {name}: {inert(what)}")

    def finished(self, report: ServiceReport) -> None:
        words = {
            "started": ("Started", "ok", _GREEN),
            "restarted": ("Restarted", "ok", _GREEN),
            "running": ("", "ok", _GREEN),
            "done": ("Done", "ok", _GREEN),
            "failed": (self.failed, "!!", _RED),
            "skipped": ("ERROR: did not start", "!!", _RED),
        }
        verb, mark, code = words[report.status]
        star = self._paint(code if report.ok else _RED, "*")
        if report.status == "running":
            text = f" {star} {report.name}: already running"
        else:
            text = f" {star} {verb} {report.name}"
            # The verb is said once: a restart's reason begins "restarted: " (as --json has it).
            reason = report.reason.removeprefix(f"{report.status}: ")
            if reason:
                # A reason may quote what a service wrote (its #! line, a check's output).
                text += f": {inert(reason)}"
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
