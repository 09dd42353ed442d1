"""Run every benchmark, print one table, write it as JSON.

    python -m bench            # full sizes (several minutes)
    python -m bench --quick    # tiny sizes: a smoke run, what the test suite does
    python -m bench --only certs,waits

Each row is measured side by side with its peer in the same run. Figures are printed, never
asserted: a timing target belongs in this table, not in a unit test.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import attrs

from bench._common import Row

__all__ = ["BENCHMARKS", "main", "machine", "table"]

BENCHMARKS = ("startup", "commands", "plan", "waits", "certs", "supervisor", "scale", "apply")
"""Modules ``bench.bench_<name>``, in the order the table shows them."""


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "date": dt.date.today().isoformat(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"{value:.3g} {unit}" if abs(value) < 1000 else f"{value:,.0f} {unit}"


def table(rows: list[Row]) -> str:
    """A Markdown table of the rows (what the README shows)."""
    lines = [
        "| benchmark | noderole median (spread) | peer | peer median | ratio | target |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        ours = f"{_fmt(row.median, row.unit)} (±{_fmt(row.spread / 2, row.unit)})"
        if row.p95 is not None:
            ours += f", p95 {_fmt(row.p95, row.unit)}"
        ratio = f"{row.ratio:.2f}x" if row.ratio is not None else "-"
        if row.paired is not None:
            ratio += f" (paired {row.paired:.2f}x)"
        lines.append(
            f"| {row.benchmark} | {ours} | {row.peer or '-'} | "
            f"{_fmt(row.peer_median, row.unit)} | {ratio} | {row.target or '-'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke run)")
    parser.add_argument(
        "--only", default="", help="comma-separated subset of " + ",".join(BENCHMARKS)
    )
    parser.add_argument("--json", default="bench/results.json", help="where to write the results")
    args = parser.parse_args(argv)
    chosen = [b for b in BENCHMARKS if not args.only or b in args.only.split(",")]
    rows: list[Row] = []
    for name in chosen:
        try:
            module = importlib.import_module(f"bench.bench_{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"bench.bench_{name}":
                raise
            print(f"# {name}: no such benchmark module yet, skipped", file=sys.stderr)
            continue
        start = time.perf_counter()
        found = module.run(args.quick)
        rows.extend(found)
        print(f"# {name}: {len(found)} rows in {time.perf_counter() - start:.1f}s", file=sys.stderr)
    about = machine()
    print(
        f"Measured {about['date']} on {about['cpu']} ({about['cores']} cores), "
        f"Linux {about['kernel']}, Python {about['python']}"
    )
    print()
    print(table(rows))
    document = {
        "machine": about,
        "quick": args.quick,
        "rows": [attrs.asdict(row) | {"ratio": row.ratio} for row in rows],
    }
    Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
