"""What a hook reads of the node through ``node``: the same answers with or without pathlib."""

from __future__ import annotations

from pathlib import Path

import pytest

from noderole.testing import node_context


@pytest.fixture
def node(tmp_path: Path):  # type: ignore[no-untyped-def]
    return node_context(node_root=tmp_path)


class TestNodeFiles:
    def test_exists_and_read_text_are_those_of_the_resolved_path(
        self, node: object, tmp_path: Path
    ) -> None:
        """``node.exists``/``node.read_text`` answer as ``node.resolve(p).exists()`` and
        ``.read_text("utf-8")`` do, under the node root, for files, directories, links and
        missing paths."""
        (tmp_path / "etc/x").mkdir(parents=True)
        (tmp_path / "etc/x/conf.yaml").write_text("a: é\n", encoding="utf-8")
        (tmp_path / "etc/x/link").symlink_to("conf.yaml")
        (tmp_path / "etc/x/dangling").symlink_to("nowhere")
        for path in ("/etc/x/conf.yaml", "/etc/x", "/etc/x/link", "/etc/x/dangling", "/etc/no"):
            assert node.exists(path) == node.resolve(path).exists()  # type: ignore[attr-defined]
        assert node.read_text("/etc/x/link") == "a: é\n"  # type: ignore[attr-defined]
        assert node.read_text("/etc/x/conf.yaml") == node.resolve(  # type: ignore[attr-defined]
            "/etc/x/conf.yaml"
        ).read_text(encoding="utf-8")

    def test_read_text_raises_as_pathlib_does(self, node: object, tmp_path: Path) -> None:
        """A missing file, a directory, a file that is not UTF-8: the same exceptions."""
        (tmp_path / "etc").mkdir()
        (tmp_path / "etc/latin1").write_bytes(b"caf\xe9\n")
        for path, error in (
            ("/etc/missing", FileNotFoundError),
            ("/etc", IsADirectoryError),
            ("/etc/latin1", UnicodeDecodeError),
        ):
            with pytest.raises(error):
                node.read_text(path)  # type: ignore[attr-defined]
            with pytest.raises(error):
                node.resolve(path).read_text(encoding="utf-8")  # type: ignore[attr-defined]

    def test_newlines_are_read_as_pathlib_reads_them(self, node: object, tmp_path: Path) -> None:
        """CRLF and lone CR become LF, as text mode does."""
        (tmp_path / "etc").mkdir()
        (tmp_path / "etc/crlf").write_bytes(b"a: 1\r\nb: 2\rc: 3\n")
        assert node.read_text("/etc/crlf") == "a: 1\nb: 2\nc: 3\n"  # type: ignore[attr-defined]
        assert node.read_text("/etc/crlf") == node.resolve(  # type: ignore[attr-defined]
            "/etc/crlf"
        ).read_text(encoding="utf-8")

    def test_a_fifo_or_a_huge_file_is_refused_at_once(self, node: object, tmp_path: Path) -> None:
        """Where pathlib would wait for a FIFO's writer, or read a disk image whole, read_text
        refuses, naming what it found (a config path mistyped onto one at boot)."""
        import os

        (tmp_path / "etc").mkdir()
        os.mkfifo(tmp_path / "etc/fifo")
        with (tmp_path / "etc/huge").open("wb") as file:
            file.truncate(2 << 20)
        with pytest.raises(OSError, match=r"not a regular file \(a FIFO\)"):
            node.read_text("/etc/fifo")  # type: ignore[attr-defined]
        with pytest.raises(OSError, match=r"2097152 bytes, more than the 1 MiB"):
            node.read_text("/etc/huge")  # type: ignore[attr-defined]

    def test_a_path_climbing_out_is_refused_as_resolve_refuses_it(self, node: object) -> None:
        """A node path whose '..' would leave the root is a ValueError, never a host file."""
        for ask in (node.exists, node.read_text, node.resolve):  # type: ignore[attr-defined]
            with pytest.raises(ValueError, match="climbs above /"):
                ask("/../etc/passwd")
