"""Running pre-start steps: order, what each did, and every way a step fails."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from noderole.clock import FakeClock
from noderole.errors import StepError
from noderole.records import Call, Fail, MakeDirectories, Step, WaitForPaths, Warn, WriteFile
from noderole.root import NodeRoot
from noderole.stepcontext import StepContext
from noderole.steps import run_steps


def _ctx(tmp_path: Path) -> StepContext:
    return StepContext(service="demo", root=NodeRoot(tmp_path), clock=FakeClock())


class TestRunSteps:
    def test_steps_run_in_order_under_the_root(self, tmp_path: Path) -> None:
        """Directories and files land under the root; details say what happened."""
        steps: list[Step] = [
            MakeDirectories(paths=["/run/demo"]),
            WriteFile(path="/etc/demo.conf", content="x=1\n", mode=0o600),
        ]
        results = run_steps(steps, _ctx(tmp_path))
        assert [r.kind for r in results] == ["directories", "file"]
        assert results[0].detail == "created /run/demo"
        assert (tmp_path / "etc/demo.conf").read_text() == "x=1\n"
        assert (tmp_path / "etc/demo.conf").stat().st_mode & 0o777 == 0o600
        again = run_steps(steps, _ctx(tmp_path))
        assert [r.detail for r in again] == ["already present", "unchanged"]

    def test_fail_stops_and_keeps_earlier_results(self, tmp_path: Path) -> None:
        """A Fail step fails with its message; earlier results are kept, later steps never run."""
        later = tmp_path / "never"
        steps: list[Step] = [
            MakeDirectories(paths=["/run/demo"]),
            Fail(message="EKS_KONNECTIVITY_SANS empty"),
            MakeDirectories(paths=["/never"]),
        ]
        with pytest.raises(StepError, match="EKS_KONNECTIVITY_SANS empty") as excinfo:
            run_steps(steps, _ctx(tmp_path))
        assert [r.kind for r in excinfo.value.results] == ["directories"]  # type: ignore[attr-defined]
        assert not later.exists()

    def test_wait_timeout_uses_the_records_message(self, tmp_path: Path) -> None:
        """A wait that times out fails with its own message, on the fake clock (no real sleep)."""
        wait = WaitForPaths(
            paths=["/etc/ca.crt"], timeout=120, message="CA not present after {elapsed}s"
        )
        with pytest.raises(StepError, match="CA not present after 120s"):
            run_steps([wait], _ctx(tmp_path))


class TestWriteFileTarget:
    """What a ``WriteFile`` finds at its path before it compares and writes."""

    def _run(self, tmp_path: Path, step: WriteFile) -> object:
        """The step's result or its StepError; fails (rather than hanging) if the step blocks."""
        outcome: list[object] = []

        def run() -> None:
            try:
                outcome.append(run_steps([step], _ctx(tmp_path))[0])
            except StepError as exc:
                outcome.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join(30)  # a guard against a hang, not a measure of speed
        if not outcome:
            target = tmp_path / step.path.lstrip("/")
            os.close(os.open(target, os.O_WRONLY | os.O_NONBLOCK))  # a writer releases it
            thread.join(30)
            pytest.fail("the step blocked opening a FIFO at its path")
        return outcome[0]

    def test_a_fifo_at_the_path_fails_the_step_at_once(self, tmp_path: Path) -> None:
        """A FIFO where the file goes (a plugin's path set in config.toml, mistyped): the step
        fails naming it, instead of waiting for a writer for ever; the FIFO is left alone."""
        (tmp_path / "etc").mkdir()
        os.mkfifo(tmp_path / "etc/demo.conf")
        failed = self._run(tmp_path, WriteFile(path="/etc/demo.conf", content="x=1\n"))
        assert isinstance(failed, StepError)
        assert "/etc/demo.conf" in str(failed)
        assert "not a regular file (a FIFO)" in str(failed)
        assert stat.S_ISFIFO(os.lstat(tmp_path / "etc/demo.conf").st_mode)

    def test_a_link_to_a_device_fails_the_step(self, tmp_path: Path) -> None:
        """A link to /dev/zero where the file goes is not read until memory runs out."""
        (tmp_path / "etc").mkdir()
        (tmp_path / "etc/demo.conf").symlink_to("/dev/zero")
        failed = self._run(tmp_path, WriteFile(path="/etc/demo.conf", content="x=1\n"))
        assert isinstance(failed, StepError)
        assert "not a regular file (a character device)" in str(failed)

    def test_a_larger_file_is_replaced(self, tmp_path: Path) -> None:
        """A file longer than the content (an older, longer version) is rewritten, not compared
        byte for byte to the end."""
        (tmp_path / "etc").mkdir()
        (tmp_path / "etc/demo.conf").write_text("x=1\n" + "# old\n" * 100_000)
        result = self._run(tmp_path, WriteFile(path="/etc/demo.conf", content="x=1\n"))
        assert getattr(result, "detail", None) == "written"
        assert (tmp_path / "etc/demo.conf").read_text() == "x=1\n"


class TestWarn:
    def test_warning_is_reported_and_does_not_fail(self, tmp_path: Path) -> None:
        """A Warn step reports through progress, is kept in the results, and the steps go on."""
        seen: list[str] = []
        ctx = StepContext(
            service="demo", root=NodeRoot(tmp_path), clock=FakeClock(), progress=seen.append
        )
        steps: list[Step] = [Warn(message="no agent host"), MakeDirectories(paths=["/run/x"])]
        results = run_steps(steps, ctx)
        assert seen == ["warning: no agent host"]
        assert [(r.kind, r.detail) for r in results] == [
            ("warning", "no agent host"),
            ("directories", "created /run/x"),
        ]
        assert (tmp_path / "run/x").is_dir()


class TestCall:
    def test_call_gets_the_context(self, tmp_path: Path) -> None:
        """A plugin function receives the step context (service name, root)."""
        seen: list[str] = []

        def record(ctx: StepContext) -> None:
            assert isinstance(ctx.resolve("/x"), Path)  # a Path, though the module imports none
            seen.append(f"{ctx.service}:{ctx.resolve('/x')}")

        run_steps([Call(function=record, description="record")], _ctx(tmp_path))
        assert seen == [f"demo:{tmp_path / 'x'}"]

    def test_call_raising_step_error_fails_with_its_reason(self, tmp_path: Path) -> None:
        """A StepError raised by the function is the service's reason."""

        def refuse(ctx: StepContext) -> None:
            raise StepError("neither config.yaml nor config.yaml.skel exists")

        with pytest.raises(StepError, match=r"neither config\.yaml"):
            run_steps([Call(function=refuse, description="derive config")], _ctx(tmp_path))

    def test_hung_call_fails_after_its_timeout(self, tmp_path: Path) -> None:
        """A function that never returns fails the step after its timeout, naming the step."""
        release = threading.Event()

        def hang(ctx: StepContext) -> None:
            release.wait(30)

        try:
            with pytest.raises(StepError, match=r"stage manifests: did not finish within 0.05s"):
                run_steps(
                    [Call(function=hang, description="stage manifests", timeout=0.05)],
                    _ctx(tmp_path),
                )
        finally:
            release.set()
