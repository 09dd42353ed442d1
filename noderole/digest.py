"""SHA-256 from the interpreter's own implementation, not OpenSSL's.

``hashlib`` loads OpenSSL's libcrypto when imported: a dynamic library mapped and initialised on
every command that fingerprints a definition or a file (``apply``, ``enable``, ``reset``), for a
few digests of a few kilobytes each. CPython's built-in module computes the same digest without it.
The native supervisor has its own copy of this fallback (``noderole.supervisor._protocol``): the
daemon imports nothing outside its package.
"""

from __future__ import annotations

__all__ = ["sha256"]

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hashlib import sha256  # the same constructor, as type checkers know it
else:
    try:
        from _sha256 import sha256
    except ImportError:  # pragma: no cover - Python 3.12 renamed the module
        try:
            from _sha2 import sha256
        except ImportError:
            from hashlib import sha256
