"""SHA-256 from the interpreter's own implementation: ``hashlib`` would load OpenSSL's libcrypto.

The one place the fallback lives: the daemon names its sockets with it (without the 3 MB of
libcrypto in its and its watchdog's memory), and ``noderole.supervisor.sha256`` gives it to the
rest of noderole (fingerprints, certificate stamps, the manifest), so an apply does not load
OpenSSL for a few digests either. Standard library only.
"""

from __future__ import annotations

__all__ = ["sha256"]

TYPE_CHECKING = False  # typing is not imported at run time: the daemon stays small
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
