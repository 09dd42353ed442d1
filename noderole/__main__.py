"""``python -m noderole``: the same as the ``noderole`` command."""

from noderole._start import run

if __name__ == "__main__":
    run()
