"""``python -m noderole``: the same as the ``noderole`` command."""

from noderole.cli import run

if __name__ == "__main__":
    run()
