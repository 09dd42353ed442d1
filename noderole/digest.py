"""SHA-256 without OpenSSL, for the framework: the supervisor's implementation, re-exported.

``hashlib`` loads OpenSSL's libcrypto when imported: a dynamic library mapped and initialised on
every command that fingerprints a definition or a file (``apply``, ``enable``, ``reset``), for a
few digests of a few kilobytes each. :mod:`noderole.supervisor._digest` holds the interpreter's
own implementation (the daemon, which imports nothing outside its package, uses it too).
"""

from __future__ import annotations

from noderole.supervisor._digest import sha256

__all__ = ["sha256"]
