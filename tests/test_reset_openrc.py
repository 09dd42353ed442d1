"""`noderole reset --backend openrc` against Debian's real OpenRC, in a private namespace.

The namespace and the demo plugin are those of tests/test_apply_openrc.py: apply renders and
starts two runscripts through rc-service; reset stops them through OpenRC and removes what
noderole wrote there, and nothing else.
"""

from __future__ import annotations

import json

from tests.harness.openrc_ns import OpenRCNamespace
from tests.test_apply_openrc import namespace  # noqa: F401  (the fixture)


class TestResetThroughOpenRC:
    def test_reset_stops_and_removes_runscripts(
        self,
        namespace: OpenRCNamespace,  # noqa: F811
    ) -> None:
        """reset stops the services through OpenRC, removes their runscripts and links, keeps a
        planted runscript, and a second reset removes nothing."""
        noderole = namespace.wrapper  # type: ignore[attr-defined]
        applied = namespace.sh(f"{noderole} apply demo --backend openrc", timeout=120)
        assert applied.rc == 0, applied.stderr + applied.stdout
        assert namespace.sh("printf '#!/bin/sh\\n' > /etc/init.d/mine").rc == 0

        dry = namespace.sh(f"{noderole} reset --backend openrc --dry-run --json", timeout=120)
        assert dry.rc == 0, dry.stderr
        listed = set(json.loads(dry.stdout)["removed"])
        assert {
            "/etc/init.d/base",
            "/etc/init.d/top",
            "/etc/runlevels/default/base",
            "/etc/runlevels/default/top",
            "/var/lib/noderole/role",
        } <= listed
        assert namespace.sh("rc-service top status").rc == 0  # a dry run stops nothing

        done = namespace.sh(f"{noderole} reset --backend openrc --json", timeout=120)
        assert done.rc == 0, done.stderr + done.stdout
        assert json.loads(done.stdout)["stopped"] == ["top", "base"]
        assert namespace.sh("pgrep -x -f '/bin/sleep [12]000'").rc == 1
        assert namespace.sh("test -e /etc/init.d/base || test -e /etc/init.d/top").rc == 1
        assert namespace.sh("test -L /etc/runlevels/default/top").rc == 1
        assert namespace.sh("test -f /etc/init.d/mine").rc == 0
        assert namespace.sh("test -e /var/lib/noderole/role").rc == 1

        again = namespace.sh(f"{noderole} reset --backend openrc --json", timeout=120)
        assert again.rc == 0, again.stderr
        assert json.loads(again.stdout)["removed"] == []
