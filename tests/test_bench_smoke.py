"""The benchmark script runs end to end with tiny sizes, so it cannot rot.

Nothing here asserts a timing: the figures belong to `python -m bench`, not to the test suite.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
class TestBenchSmoke:
    def test_quick_run_prints_a_table_and_writes_json(self, tmp_path: Path) -> None:
        """`python -m bench --quick` prints one row per figure and writes the same rows as JSON,
        and leaves nothing in the temporary directory (supervisord's programs' logs were left
        in /tmp, four files a run)."""
        out = tmp_path / "results.json"
        scratch = tmp_path / "tmp"
        scratch.mkdir()
        done = subprocess.run(
            [sys.executable, "-m", "bench", "--quick", "--json", str(out)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "TMPDIR": str(scratch)},
        )
        assert done.returncode == 0, done.stderr
        assert sorted(path.name for path in scratch.iterdir()) == []
        document = json.loads(out.read_text())
        names = [row["benchmark"] for row in document["rows"]]
        assert any(name.startswith("noderole --help") for name in names)
        assert any(name.startswith("plan ") for name in names)
        for name in names:
            assert f"| {name} |" in done.stdout
        assert document["machine"]["cores"] >= 1

    @pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
    def test_instruction_count_runs_under_valgrind(self) -> None:
        """`python -m bench.bench_plan --instructions --quick` counts both sides at two sizes
        and prints their growth; the counts are real callgrind figures, so planning ten times
        the services must count several times the instructions."""
        lines = _bench_plan("--instructions", "--quick")
        assert len(lines) == 3, lines
        growth = lines[2]
        assert growth.startswith("plan instruction growth 100 -> 1,000 services: ")
        ours = float(growth.split(": ", 1)[1].split(" x", 1)[0])
        assert 5 < ours < 20, growth


def test_timed_phases_build_the_plan_build_plan_builds() -> None:
    """`--phases` times build_plan's own steps: the plan they build is build_plan's, service for
    service, so the phases cannot drift from what the whole row times."""
    from bench.bench_plan import PHASES, ROLE, synthetic_services, timed_phases
    from noderole.plan import build_plan

    services = synthetic_services(400)
    times, plan = timed_phases(services, ROLE)
    whole = build_plan(services, ROLE)
    assert len(times) == len(PHASES)
    assert all(t >= 0 for t in times)
    assert plan.waves == whole.waves
    assert plan.to_dict() == whole.to_dict()


@pytest.mark.slow
def test_phases_quick_prints_each_phase_and_its_growth() -> None:
    """`python -m bench.bench_plan --phases --quick` prints, per phase, its time at both sizes
    and its growth."""
    from bench.bench_plan import PHASES

    lines = _bench_plan("--phases", "--quick")
    assert len(lines) == 3 * len(PHASES), lines
    for phase in PHASES:
        assert any(
            line.startswith(f"plan phase {phase}, growth 100 -> 1,000 services: ") for line in lines
        )


def _bench_plan(*args: str) -> list[str]:
    """The lines ``python -m bench.bench_plan ARGS`` prints, after checking it succeeded."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_plan", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()
