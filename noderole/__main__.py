"""``python -m noderole``: the same as the ``noderole`` command."""

from noderole.cli import main

if __name__ == "__main__":
    main()
