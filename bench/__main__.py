"""``python -m bench``: run every benchmark (see bench/run.py)."""

from bench.run import main

raise SystemExit(main())
