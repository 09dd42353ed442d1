"""Reading a file a configuration names (noderole.reading): a regular file, bounded in size.

A mistyped path lands on a FIFO (opening it for reading waits for a writer: a boot that hangs),
a device (``/dev/zero`` never ends: memory until the OOM killer) or something huge. Each is
refused at once, naming what it is; the environment file and the CA say so in their own words.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from noderole.config import load_config
from noderole.envfile import read_env_file
from noderole.errors import CertificateError, ConfigError, EnvFileError
from noderole.operations import Operations
from noderole.reading import LIMIT, read_regular
from noderole.root import NodeRoot
from tests.test_certs import CA_CERT, CA_KEY, Node, make_ca


def finishing(call: Callable[[], Any]) -> Any:
    """``call()``'s result or exception; fails (rather than hanging the suite) if it blocks."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:  # handed to the test below
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(30)  # a guard against a hang, not a measure of speed
    assert outcome, "the read blocked (a FIFO opened for reading waits for a writer)"
    return outcome[0]


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


class TestReadRegular:
    def test_a_regular_file_is_read_whole(self, tmp_path: Path) -> None:
        path = tmp_path / "f"
        path.write_bytes(b"A=1\n" * 1000)
        assert read_regular(path) == b"A=1\n" * 1000

    def test_a_file_of_exactly_the_limit_is_read(self, tmp_path: Path) -> None:
        path = tmp_path / "f"
        path.write_bytes(b"x" * 64)
        assert read_regular(path, limit=64) == b"x" * 64

    def test_a_link_to_a_regular_file_is_followed(self, tmp_path: Path) -> None:
        (tmp_path / "real").write_bytes(b"A=1\n")
        (tmp_path / "link").symlink_to("real")
        assert read_regular(tmp_path / "link") == b"A=1\n"

    def test_a_fifo_is_refused_without_waiting_for_a_writer(self, fifo: Path) -> None:
        error = finishing(lambda: read_regular(fifo))
        assert isinstance(error, OSError)
        assert error.strerror == "not a regular file (a FIFO)"
        assert error.filename == str(fifo)

    @pytest.mark.parametrize(("path", "kind"), [("/dev/zero", "a character device")])
    def test_a_device_is_refused(self, path: str, kind: str) -> None:
        with pytest.raises(OSError, match=rf"not a regular file \({kind}\)"):
            read_regular(path)

    def test_a_directory_is_refused_as_open_refuses_it(self, tmp_path: Path) -> None:
        with pytest.raises(IsADirectoryError, match=r"not a regular file \(a directory\)"):
            read_regular(tmp_path)

    def test_a_file_over_the_limit_is_refused_unread(self, tmp_path: Path) -> None:
        path = tmp_path / "image"
        with path.open("wb") as file:
            file.truncate(LIMIT + 1)  # sparse: nothing to read, only its size
        with pytest.raises(OSError, match=rf"{LIMIT + 1} bytes, more than the 1 MiB"):
            read_regular(path)

    def test_a_missing_file_is_file_not_found(self, tmp_path: Path) -> None:
        with pytest.raises(FileNotFoundError):
            read_regular(tmp_path / "absent")


class TestEnvironmentFile:
    def test_a_fifo_is_an_env_file_error_at_once(self, fifo: Path) -> None:
        """Before, the read waited for a writer: at apply, the plugin that reads first-boot.env
        was blamed for a hang after NODEROLE_HOOK_TIMEOUT (60 s)."""
        error = finishing(lambda: read_env_file(fifo, display_path="/etc/first-boot.env"))
        assert isinstance(error, EnvFileError)
        assert str(error) == (
            "cannot read environment file /etc/first-boot.env: not a regular file (a FIFO); "
            "make it a readable regular file, or remove it"
        )

    def test_a_device_is_an_env_file_error(self) -> None:
        """Before, /dev/zero was read until memory ran out."""
        with pytest.raises(EnvFileError, match=r"/dev/zero: not a regular file \(a character"):
            read_env_file("/dev/zero")

    def test_a_huge_file_is_an_env_file_error(self, tmp_path: Path) -> None:
        path = tmp_path / "disk.img"
        with path.open("wb") as file:
            file.truncate(4 * LIMIT)
        with pytest.raises(EnvFileError, match=r"disk\.img: 4194304 bytes, more than the 1 MiB"):
            read_env_file(path)


class TestCertificateAuthority:
    @pytest.mark.parametrize(("which", "named"), [(CA_CERT, "CA certificate"), (CA_KEY, "CA key")])
    def test_a_fifo_at_the_ca_is_a_certificate_error(
        self, tmp_path: Path, which: str, named: str
    ) -> None:
        """``ca_key = ...`` mistyped onto a FIFO: refused at once, naming the file."""
        node = Node(tmp_path)
        node.install_ca(*make_ca(now=node.clock.time()))
        path = node.root.resolve(which)
        path.unlink()
        os.mkfifo(path)
        error = finishing(node.ensure)
        assert isinstance(error, CertificateError)
        assert str(error) == f"cannot read {named} {path}: not a regular file (a FIFO)"


class TestConfigFile:
    """``/etc/noderole/config.toml`` is read like every file a configuration names: a FIFO, a
    device or a directory in its place is refused at once, naming what it is (a FIFO hung
    ``apply``, ``plan`` and ``config check``; a link to /dev/zero read until memory ran out)."""

    def _place(self, tmp_path: Path, make: Callable[[Path], None]) -> NodeRoot:
        path = tmp_path / "etc/noderole/config.toml"
        path.parent.mkdir(parents=True)
        make(path)
        return NodeRoot(tmp_path)

    @pytest.mark.parametrize(
        ("make", "what"),
        [
            (os.mkfifo, "not a regular file (a FIFO)"),
            (lambda p: p.symlink_to("/dev/zero"), "not a regular file (a character device)"),
            (lambda p: p.mkdir(), "not a regular file (a directory)"),
            (
                lambda p: p.write_bytes(b"#" * (LIMIT + 1)),
                "more than the 1 MiB such a file may hold",
            ),
        ],
        ids=["fifo", "dev-zero", "directory", "huge"],
    )
    def test_refused_at_once_naming_what_it_is(
        self, tmp_path: Path, make: Callable[[Path], None], what: str
    ) -> None:
        root = self._place(tmp_path, make)
        error = finishing(lambda: load_config(root, []))
        assert isinstance(error, ConfigError)
        assert str(error).startswith("/etc/noderole/config.toml: cannot read it: ")
        assert what in str(error)
        assert str(error).endswith(
            "; config.toml must be a regular file of TOML text (at most 1 MiB): fix it, then "
            "check it with noderole config check"
        )

    def test_status_warns_without_blocking_and_without_calling_it_toml(
        self, tmp_path: Path
    ) -> None:
        """``status`` and ``stop`` glance at config.toml to warn that the next apply will refuse
        it: a FIFO there gets the reason, not a hang, and is not called invalid TOML."""
        root = self._place(tmp_path, os.mkfifo)
        operations = Operations(root=root)
        warning = finishing(operations.config_syntax_warning)
        assert warning.startswith("/etc/noderole/config.toml: cannot read it: not a regular file")
        assert "not valid TOML" not in warning
        assert "the next apply will refuse it" in warning
        assert finishing(operations._textfile_dir) == ""  # metrics stay off, nothing blocks
