"""build_plan's rules one by one, the Plan's methods, to_dict, and render_graph."""

from __future__ import annotations

import collections
import json
import re
import shutil
import subprocess
import types
from collections.abc import Mapping

import pytest

from noderole import recordclass
from noderole.errors import ExitCode, PlanError
from noderole.plan import Plan, PlannedService, build_plan
from noderole.records import (
    MakeDirectories,
    Secret,
    Service,
    Supervision,
    WaitForPaths,
    WaitForTcp,
)
from noderole.render.graph import edges, render_graph

PLUGINS = ("builtin", "k3s", "konnectivity")


def svc(name: str, *, origin: str = "test", **fields: object) -> Service:
    """A service with the plugin manager's origin stamp (as build_plan receives them)."""
    return Service(name=name, origin=origin, **fields)  # type: ignore[arg-type]


def builtins() -> list[Service]:
    """The built-in ``net`` and ``cgroups`` services: no roles, like the lead's built-in plugin."""
    return [svc("net", origin="builtin"), svc("cgroups", origin="builtin")]


def server_services() -> list[Service]:
    """The seed script's world: k3s and konnectivity-server on the server role."""
    return [
        *builtins(),
        svc("k3s", origin="k3s", roles=["server", "agent"], need=["net", "cgroups"]),
        svc(
            "konnectivity-server",
            origin="konnectivity",
            roles=["server"],
            need=["net"],
            after=["k3s"],
        ),
    ]


def plan_error(services: list[Service], role: str = "r") -> str:
    """The PlanError message build_plan raises for these services."""
    with pytest.raises(PlanError) as caught:
        build_plan(services, role, plugins=PLUGINS)
    return str(caught.value)


class TestSeed:
    def test_role_services_and_what_they_need_are_planned(self) -> None:
        """The role's services are planned with their needs; unrelated services are not."""
        services = [*server_services(), svc("unrelated", roles=["agent"])]
        plan = build_plan(services, "server", plugins=PLUGINS)
        assert set(plan.names()) == {"net", "cgroups", "k3s", "konnectivity-server"}

    def test_seed_script_order(self) -> None:
        """The seed's `need net; after k3s` yields net and cgroups, then k3s, then konnectivity."""
        plan = build_plan(server_services(), "server", plugins=PLUGINS)
        assert plan.waves == (("cgroups", "net"), ("k3s",), ("konnectivity-server",))

    def test_unknown_role_lists_the_known_roles(self) -> None:
        """An unknown role is refused with every known role, sorted."""
        services = [*server_services(), svc("x", roles=["worker", "edge"])]
        message = plan_error(services, "contol-plane")
        assert message.startswith(
            "unknown role 'contol-plane'; known roles: agent, edge, server, worker"
        )
        assert "builtin, k3s, konnectivity" in message

    def test_a_misspelled_role_names_the_closest(self) -> None:
        """A typo of a known role says which one it probably is, before the list."""
        assert plan_error(server_services(), "sever").startswith(
            "unknown role 'sever' (did you mean 'server'?); known roles: "
        )

    def test_unknown_role_with_no_roles_at_all(self) -> None:
        """With no role anywhere the message says so instead of listing nothing."""
        assert "known roles: (none)" in plan_error(builtins(), "server")

    def test_plan_error_exit_code(self) -> None:
        """Plan errors carry the plan exit code."""
        with pytest.raises(PlanError) as caught:
            build_plan(builtins(), "server")
        assert caught.value.exit_code == ExitCode.PLAN


class TestDuplicates:
    def test_same_name_from_two_plugins(self) -> None:
        """A name defined by two plugins is refused naming both and the way out."""
        services = [*server_services(), svc("k3s", origin="k3s-fork", roles=["server"])]
        assert plan_error(services, "server") == (
            "service 'k3s' is defined by both plugin 'k3s' and plugin 'k3s-fork'; "
            "disable one with --disable-plugin NAME"
        )

    def test_duplicate_outside_the_role_is_still_refused(self) -> None:
        """Duplicates are checked over every service, not only the planned ones."""
        services = [*server_services(), svc("x", origin="a"), svc("x", origin="b")]
        assert "service 'x' is defined by both plugin 'a' and plugin 'b'" in plan_error(
            services, "server"
        )

    @pytest.mark.parametrize("name", ["noderole", "noderole-renew"])
    def test_noderoles_own_names_are_refused_to_plugins(self, name: str) -> None:
        """A plugin's service named like noderole's boot entry overwrote its unit or runscript
        at render (disable then no longer knew it); one named like the renew job was dropped
        from render. Only noderole's built-in plugin may use them."""
        services = [*server_services(), svc(name, origin="hunt", roles=["server"])]
        assert plan_error(services, "server") == (
            f"service {name!r} of plugin 'hunt' takes a name reserved for noderole's own boot "
            "entry and renew job (their unit and runscript files are named so): rename the "
            "service in the plugin, or disable it with --disable-plugin NAME"
        )
        builtin = svc("noderole-renew", origin="builtin", roles=["server"])
        assert "noderole-renew" in build_plan([*server_services(), builtin], "server")
        # An alias is a unit link of that name too: render put one over the renew job's unit.
        alias = svc("prov", origin="hunt", roles=["server"], provide=[name])
        assert plan_error([*server_services(), alias], "server").startswith(
            f"service 'prov' of plugin 'hunt' provides {name!r}, a name reserved for "
        )

    def test_same_plugin_twice(self) -> None:
        """One plugin returning a name twice is named once, as the culprit."""
        services = [svc("x", origin="a", roles=["r"]), svc("x", origin="a")]
        assert plan_error(services).startswith("service 'x' is defined twice by plugin 'a'")

    def test_first_duplicate_in_the_plugins_order_is_named(self) -> None:
        """With two names taken twice, the one whose repeat the plugins returned first is named,
        not the one that sorts first."""
        services = [
            svc("x", origin="a", roles=["r"]),
            svc("y", origin="c"),
            svc("y", origin="d"),
            svc("x", origin="b"),
        ]
        assert plan_error(services).startswith(
            "service 'y' is defined by both plugin 'c' and plugin 'd'"
        )

    def test_the_same_record_twice_is_planned_once(self) -> None:
        """A record returned twice is one service, not a duplicate."""
        record = svc("x", roles=["r"])
        plan = build_plan([record, svc("y", roles=["r"], after=["x"]), record], "r")
        assert plan.names() == ("x", "y")


class TestNeed:
    def test_need_pulls_in_a_service_outside_the_role(self) -> None:
        """A needed service joins the plan and records who pulled it in."""
        plan = build_plan(server_services(), "server")
        assert not plan["net"].in_role
        assert plan["net"].pulled_in_by == "k3s"
        assert plan["k3s"].in_role
        assert plan["k3s"].pulled_in_by is None
        assert plan["k3s"].needs == ("net", "cgroups")

    def test_need_is_transitive(self) -> None:
        """A need of a pulled-in service is pulled in too."""
        services = [svc("a", roles=["r"], need=["b"]), svc("b", need=["c"]), svc("c")]
        assert build_plan(services, "r").waves == (("c",), ("b",), ("a",))

    def test_missing_need_names_service_target_and_plugins(self) -> None:
        """A need nothing satisfies is refused with the service, the name and the plugins."""
        message = plan_error([*builtins(), svc("k3s", roles=["r"], need=["net", "containerd"])])
        assert message.startswith(
            "k3s needs containerd, which no installed plugin provides "
            "(installed plugins: builtin, k3s, konnectivity)"
        )
        assert "k3s is in role 'r'" in message

    def test_missing_need_of_a_pulled_in_service_shows_the_chain(self) -> None:
        """When the culprit was pulled in, the message shows which service pulled it."""
        services = [svc("a", roles=["r"], need=["b"]), svc("b", need=["c"]), svc("c", need=["z"])]
        message = plan_error(services)
        assert message.startswith("c needs z, which no installed plugin provides")
        assert "c is in the plan because c ← b ← a" in message

    def test_every_missing_need_is_reported(self) -> None:
        """Several unsatisfied needs are all named, the first in full."""
        message = plan_error([svc("a", roles=["r"], need=["x"]), svc("b", roles=["r"], need=["y"])])
        assert message.startswith("a needs x, which")
        assert "Also unsatisfied: b needs y." in message

    def test_no_plugins_installed(self) -> None:
        """With no plugin names given the message says none are installed."""
        with pytest.raises(PlanError, match=r"\(installed plugins: none\)"):
            build_plan([svc("a", roles=["r"], need=["x"])], "r")

    def test_broken_need_outside_the_plan_is_ignored(self) -> None:
        """A service that is not planned cannot break the plan."""
        services = [*server_services(), svc("other", roles=["agent2"], need=["nothing"])]
        assert "other" not in build_plan(services, "server")

    def test_need_on_self_is_a_cycle(self) -> None:
        """A service needing itself is reported as a one-node cycle."""
        assert "dependency cycle in role 'r': a → a (a needs a)" in plan_error(
            [svc("a", roles=["r"], need=["a"])]
        )


class TestWant:
    def test_want_pulls_in(self) -> None:
        """A wanted service joins the plan and is ordered first."""
        plan = build_plan([svc("a", roles=["r"], want=["b"]), svc("b")], "r")
        assert plan.waves == (("b",), ("a",))
        assert plan["a"].wants == ("b",)
        assert plan["b"].pulled_in_by == "a"

    def test_absent_want_is_ignored_and_recorded(self) -> None:
        """Wanting a name nothing defines changes nothing and shows as unresolved."""
        plan = build_plan([svc("a", roles=["r"], want=["ghost"])], "r")
        assert plan.names() == ("a",)
        assert plan["a"].wants == ()
        assert plan["a"].unresolved["want"] == ("ghost",)
        want = plan.to_dict()["services"][0]["want"]
        assert want == {"declared": ["ghost"], "resolved": [], "unresolved": ["ghost"]}

    def test_want_of_a_virtual_pulls_its_providers(self) -> None:
        """Wanting a virtual name pulls its providers in."""
        services = [svc("a", roles=["r"], want=["dns"]), svc("b", provide=["dns"])]
        plan = build_plan(services, "r")
        assert plan["a"].wants == ("b",)
        assert plan["a"].provided_by == {"dns": ("b",)}


class TestUse:
    def test_use_does_not_pull_in(self) -> None:
        """`use` of a service outside the plan neither adds it nor orders anything."""
        plan = build_plan([svc("a", roles=["r"], use=["b"]), svc("b")], "r")
        assert plan.names() == ("a",)
        assert plan["a"].unresolved["use"] == ("b",)

    def test_use_orders_when_present(self) -> None:
        """`use` of a planned service starts after it."""
        plan = build_plan([svc("a", roles=["r"], use=["b"]), svc("b", roles=["r"])], "r")
        assert plan.waves == (("b",), ("a",))
        assert plan["a"].uses == ("b",)

    def test_use_of_virtual_orders_after_planned_providers_only(self) -> None:
        """`use V` waits for V's providers in the plan and ignores the others."""
        services = [
            svc("a", roles=["r"], use=["log"]),
            svc("b", roles=["r"], provide=["log"]),
            svc("c", provide=["log"]),
        ]
        plan = build_plan(services, "r")
        assert plan.names() == ("b", "a")
        assert plan["a"].provided_by == {"log": ("b",)}

    def test_use_of_pulled_in_service_orders(self) -> None:
        """A service pulled in by someone else's need counts as present for `use`."""
        services = [svc("a", roles=["r"], use=["b"]), svc("c", roles=["r"], need=["b"]), svc("b")]
        assert build_plan(services, "r")["a"].after == ("b",)


class TestAfterBefore:
    def test_after_absent_is_ignored(self) -> None:
        """`after` a service that is not planned orders nothing."""
        plan = build_plan([*server_services()], "agent")
        assert "konnectivity-server" not in plan
        assert plan["k3s"].wave == 1

    def test_after_does_not_pull_in(self) -> None:
        """`after` never adds a service to the plan."""
        plan = build_plan([svc("a", roles=["r"], after=["b"]), svc("b")], "r")
        assert plan.names() == ("a",)

    def test_before_orders_the_target_later(self) -> None:
        """`a before b` makes b start after a, and b's `after` says so."""
        plan = build_plan([svc("a", roles=["r"], before=["b"]), svc("b", roles=["r"])], "r")
        assert plan.waves == (("a",), ("b",))
        assert plan["b"].after == ("a",)
        assert plan["a"].resolved["before"] == ("b",)

    def test_before_absent_is_ignored(self) -> None:
        """`before` a service outside the plan orders nothing and pulls nothing in."""
        plan = build_plan([svc("a", roles=["r"], before=["b"]), svc("b")], "r")
        assert plan.names() == ("a",)
        assert plan["a"].unresolved["before"] == ("b",)

    def test_before_a_virtual_orders_every_planned_provider(self) -> None:
        """`before V` makes each planned provider of V start after the declarer."""
        services = [
            svc("a", roles=["r"], before=["net"]),
            svc("eth0", roles=["r"], provide=["net"]),
            svc("wlan0", roles=["r"], provide=["net"]),
        ]
        plan = build_plan(services, "r")
        assert plan.waves == (("a",), ("eth0", "wlan0"))


class TestVirtualNames:
    def test_every_provider_in_the_role_is_used(self) -> None:
        """`need V` with two providers in the role waits for both (rc_depend_strict=YES)."""
        services = [
            svc("app", roles=["r"], need=["network"]),
            svc("eth0", roles=["r"], provide=["network"]),
            svc("wlan0", roles=["r"], provide=["network"]),
        ]
        plan = build_plan(services, "r")
        assert plan["app"].needs == ("eth0", "wlan0")
        assert plan["app"].provided_by == {"network": ("eth0", "wlan0")}
        assert plan.waves == (("eth0", "wlan0"), ("app",))

    def test_providers_in_the_role_are_enough(self) -> None:
        """When some provider is in the role, providers outside it are not pulled in."""
        services = [
            svc("app", roles=["r"], need=["network"]),
            svc("eth0", roles=["r"], provide=["network"]),
            svc("dhcp", provide=["network"]),
        ]
        assert set(build_plan(services, "r").names()) == {"app", "eth0"}

    def test_no_provider_in_the_role_pulls_in_every_provider(self) -> None:
        """With no provider in the role, every known provider is pulled in."""
        services = [
            svc("app", roles=["r"], need=["network"]),
            svc("eth0", provide=["network"]),
            svc("dhcp", provide=["network"]),
        ]
        plan = build_plan(services, "r")
        assert plan["app"].needs == ("dhcp", "eth0")
        assert plan["dhcp"].pulled_in_by == "app"

    def test_provider_pulled_in_elsewhere_is_also_waited_for(self) -> None:
        """A provider that joined the plan another way still counts for `need V`."""
        services = [
            svc("app", roles=["r"], need=["network"]),
            svc("eth0", roles=["r"], provide=["network"]),
            svc("vpn", roles=["r"], need=["dhcp"]),
            svc("dhcp", provide=["network"]),
        ]
        assert build_plan(services, "r")["app"].needs == ("dhcp", "eth0")

    def test_real_name_wins_over_virtual(self) -> None:
        """A service called `net` is what `need net` means, whoever else provides `net`."""
        services = [
            svc("app", roles=["r"], need=["net"]),
            svc("net"),
            svc("eth0", roles=["r"], provide=["net"]),
        ]
        plan = build_plan(services, "r")
        assert plan["app"].needs == ("net",)
        assert plan["app"].provided_by == {}
        assert plan["eth0"].wave == 0

    def test_providing_ones_own_name_provides_nothing(self) -> None:
        """`provide` of the service's own name is ignored, as OpenRC ignores it."""
        services = [svc("a", roles=["r"], provide=["a"]), svc("b", roles=["r"], after=["a"])]
        plan = build_plan(services, "r")
        assert plan["b"].after == ("a",)
        assert plan["b"].provided_by == {}

    def test_a_virtual_can_be_needed_through_a_real_provider_name(self) -> None:
        """The seed's `need net` is satisfied by the built-in `net` service like any other."""
        plan = build_plan(server_services(), "server")
        assert plan["konnectivity-server"].needs == ("net",)


class TestCycles:
    def test_two_node_cycle_names_both_declarations(self) -> None:
        """A need/after loop prints the whole loop and the word behind each hop."""
        message = plan_error([svc("a", roles=["r"], need=["b"]), svc("b", after=["a"])])
        assert message.startswith(
            "dependency cycle in role 'r': a → b → a (a needs b; b starts after a). "
        )
        assert "OpenRC" in message
        assert "remove or change one of these declarations" in message

    def test_cycle_through_virtual_shows_the_virtual(self) -> None:
        """A hop through a virtual name shows that name as a node of the cycle."""
        services = [svc("a", roles=["r"], need=["V"]), svc("b", provide=["V"], after=["a"])]
        assert "a → V → b → a (a needs V; V is provided by b; b starts after a)" in plan_error(
            services
        )

    def test_cycle_made_by_before(self) -> None:
        """A `before` that closes a loop is named as declared, by the service that declared it."""
        services = [
            svc("a", roles=["r"], after=["b"]),
            svc("b", roles=["r"]),
            svc("c", roles=["r"], before=["b"]),
            svc("d", roles=["r"], before=["c"], after=["a"]),
        ]
        assert (
            "a → b → c → d → a (a starts after b; c starts before b; d starts before c; "
            "d starts after a)"
        ) in plan_error(services)

    def test_before_through_a_virtual_is_explained(self) -> None:
        """A `before V` hop says which provider of V it reached."""
        services = [
            svc("a", roles=["r"], after=["b"]),
            svc("b", roles=["r"], provide=["V"]),
            svc("c", roles=["r"], before=["V"], use=["a"]),
        ]
        message = plan_error(services)
        assert "a → b → c → a" in message
        assert "c starts before V, which b provides" in message
        assert "c uses a" in message

    def test_shortest_cycle_is_reported(self) -> None:
        """Of a long and a short loop through the same node, the short one is printed."""
        services = [
            svc("a", roles=["r"], after=["b", "x"]),
            svc("b", roles=["r"], after=["c"]),
            svc("c", roles=["r"], after=["a"]),
            svc("x", roles=["r"], after=["a"]),
        ]
        assert "dependency cycle in role 'r': a → x → a (" in plan_error(services)

    def test_services_after_a_cycle_are_not_part_of_it(self) -> None:
        """A service that only waits for a loop is not printed as part of the loop."""
        services = [
            svc("a", roles=["r"], after=["b"]),
            svc("b", roles=["r"], after=["c"]),
            svc("c", roles=["r"], after=["b"]),
        ]
        message = plan_error(services)
        assert "b → c → b" in message
        assert "a →" not in message

    def test_several_declarations_on_one_hop_are_all_named(self) -> None:
        """When a hop has two reasons both are listed."""
        services = [svc("a", roles=["r"], need=["b"], after=["b"]), svc("b", want=["a"])]
        assert "(a needs b; a starts after b; b wants a)" in plan_error(services)

    def test_cycle_among_pulled_in_services(self) -> None:
        """A cycle outside the role's own services is found the same way."""
        services = [svc("a", roles=["r"], need=["b"]), svc("b", need=["c"]), svc("c", want=["b"])]
        assert "b → c → b" in plan_error(services)


class TestWaves:
    def test_wave_is_one_more_than_latest_predecessor(self) -> None:
        """A service waits in the wave after its latest predecessor, not after its first."""
        services = [
            svc("a", roles=["r"]),
            svc("b", roles=["r"], after=["a"]),
            svc("c", roles=["r"], after=["b"]),
            svc("d", roles=["r"], after=["a", "c"]),
        ]
        plan = build_plan(services, "r")
        assert [plan[n].wave for n in "abcd"] == [0, 1, 2, 3]

    def test_services_are_in_wave_order_sorted_by_name(self) -> None:
        """Start order is wave by wave, names sorted within a wave."""
        services = [svc(n, roles=["r"]) for n in ("zeta", "alpha", "mu")]
        services.append(svc("omega", roles=["r"], after=["alpha"]))
        plan = build_plan(services, "r")
        assert plan.names() == ("alpha", "mu", "zeta", "omega")
        assert plan.waves == (("alpha", "mu", "zeta"), ("omega",))

    def test_plan_does_not_depend_on_input_order(self) -> None:
        """Reversing the plugins' output gives an equal plan."""
        services = server_services()
        assert build_plan(services, "server") == build_plan(services[::-1], "server")

    def test_ten_thousand_services_plan(self) -> None:
        """A large generated graph plans without recursion limits (no timing asserted)."""
        services = [svc("s0", roles=["r"])]
        services += [svc(f"s{i}", roles=["r"], need=[f"s{i - 1}"]) for i in range(1, 5000)]
        plan = build_plan(services, "r")
        assert len(plan.waves) == 5000


class TestNameLookups:
    def test_each_declared_name_is_looked_up_once(self) -> None:
        """Planning hashes a service's name once, and each declaration of it once, however many
        phases the plan goes through: names hashed into dicts and sets at every phase made plan
        time grow faster than the graph."""
        hashed: collections.Counter[str] = collections.Counter()

        class Name(str):
            # A name that counts how often it is hashed (a dict or set lookup hashes it).
            def __hash__(self) -> int:
                hashed[str(self)] += 1
                return str.__hash__(self)

        names = [Name(f"s{i:03d}") for i in range(200)]
        virtual = Name("v")
        services = [
            svc(
                names[i],
                roles=["r"] if i % 3 else [],
                provide=[virtual] if i == 7 else [],
                need=names[max(i - 3, 0) : i],
                want=[virtual] if i > 7 else [],
                use=names[max(i - 5, 0) : max(i - 4, 0)],
                after=[names[i // 2]] if i else [],
                before=names[i + 1 : i + 3],
            )
            for i in range(200)
        ]
        declared = collections.Counter(
            str(name)
            for s in services
            for name in (*s.provide, *s.need, *s.want, *s.use, *s.after, *s.before)
        )
        hashed.clear()
        plan = build_plan(services, "r")
        counts = dict(hashed)  # read before the checks below hash the names again
        assert len(plan) == 200
        for name in map(str, names):
            assert counts.get(name, 0) <= 1 + declared[name], (name, counts.get(name))
        # A virtual name: looked up once per declaration, recorded once in its declarer's
        # provided_by, and a few times while the providers are indexed.
        assert counts["v"] <= 2 * declared["v"] + 5


class TestPlanMethods:
    @pytest.fixture
    def plan(self) -> Plan:
        """The seed script's server plan."""
        return build_plan(server_services(), "server", plugins=PLUGINS)

    def test_getitem_of_unknown_name(self, plan: Plan) -> None:
        """Looking up a service outside the plan names the role."""
        with pytest.raises(KeyError, match="'nope' is not in the plan for role 'server'"):
            plan["nope"]

    def test_dependents(self, plan: Plan) -> None:
        """dependents() lists services that wait for the given one, in start order."""
        assert plan.dependents("net") == ("k3s", "konnectivity-server")
        assert plan.dependents("k3s") == ("konnectivity-server",)
        assert plan.dependents("konnectivity-server") == ()

    def test_dependents_include_before(self) -> None:
        """A service started later because of one's `before` is one of its dependents."""
        plan = build_plan([svc("a", roles=["r"], before=["b"]), svc("b", roles=["r"])], "r")
        assert plan.dependents("a") == ("b",)

    def test_needed_by_follows_need_alone(self) -> None:
        """needed_by() is what stops with the given services: what needs them, directly, through
        a virtual name (every provider counts) or through another service, in stop order, each
        with the service it needs on the way; want, use, after and before are left out."""
        plan = build_plan(
            [
                svc("a", roles=["r"], provide=["v"]),
                svc("b", roles=["r"], need=["a"]),
                svc("c", roles=["r"], need=["b"]),
                svc("d", roles=["r"], need=["v"]),
                svc("w", roles=["r"], want=["a"], use=["a"], after=["a"]),
                svc("x", roles=["r"], before=["a"]),
            ],
            "r",
        )
        assert list(plan.needed_by(["a"]).items()) == [("c", "b"), ("d", "a"), ("b", "a")]
        assert plan.needed_by(["b"]) == {"c": "b"}
        assert plan.needed_by(["b", "c"]) == {}
        with pytest.raises(KeyError, match="'nope' is not in the plan"):
            plan.needed_by(["nope"])

    def test_a_pidfile_is_one_services_own(self) -> None:
        """Two services with one pidfile, or a pidfile that is a log, passed plan: the
        supervisor then replaced the other service's pidfile as "not ours", and two OpenRC
        runscripts of one pidfile signal each other's process."""
        shared = [
            svc("a", roles=["r"], command=["/bin/a"], pidfile="/run/x.pid"),
            svc("b", roles=["r"], command=["/bin/b"], pidfile="/run/x.pid"),
        ]
        assert plan_error(shared, "r") == (
            "services 'a' and 'b' both have pidfile /run/x.pid: each service needs one of its "
            "own; change one of them"
        )
        for spelling in ("/run//x.pid", "/run/./x.pid", "/run/y/../x.pid"):  # the same file
            other = [shared[0], svc("b", roles=["r"], command=["/bin/b"], pidfile=spelling)]
            assert "both have pidfile" in plan_error(other, "r")
        logged = [
            svc("a", roles=["r"], command=["/bin/a"], pidfile="/var/log/a", output_log="/var/log/a")
        ]
        assert plan_error(logged, "r").startswith(
            "/var/log/a is service 'a''s pidfile and service 'a''s log"
        )

    def test_a_file_two_services_write_holds_one_content(self) -> None:
        """Two services writing one file with different contents passed plan; which one it
        held, and which each read, hung on the order their steps ran in. The same content
        twice is fine."""
        from noderole.records import WriteFile

        def writer(name: str, text: str) -> Service:
            step = WriteFile(path="/etc/shared.conf", content=text)
            return svc(name, roles=["r"], command=["/bin/x"], pre_start=[step])

        assert plan_error([writer("a", "A"), writer("b", "B")], "r") == (
            "services 'a' and 'b' both write /etc/shared.conf, with different contents: what "
            "it holds, and what each reads, would hang on the order they ran in; let one "
            "service write it"
        )
        assert "b" in build_plan([writer("a", "A"), writer("b", "A")], "r")

    def test_stop_waves_are_the_waves_reversed(self) -> None:
        """The groups a stop may end together: dependents first, a group's services free of
        each other, only the names asked for, no empty group."""
        services = [
            svc("a", roles=["r"], need=["b"]),
            svc("b", roles=["r"]),
            svc("c", roles=["r"]),
            svc("d", roles=["r"], after=["a"]),
        ]
        plan = build_plan(services, "r")
        assert [list(w) for w in plan.waves] == [["b", "c"], ["a"], ["d"]]
        assert plan.stop_waves(plan.stop_order()) == [["d"], ["a"], ["c", "b"]]
        assert plan.stop_waves(["b", "d"]) == [["d"], ["b"]]

    def test_stop_order_reverses_start_order(self, plan: Plan) -> None:
        """Dependents stop before what they depend on."""
        assert plan.stop_order() == ("konnectivity-server", "k3s", "net", "cgroups")

    def test_after_collects_every_reason(self) -> None:
        """`after` holds need, want, use, after and others' before, sorted by name."""
        services = [
            svc("x", roles=["r"], need=["n"], want=["w"], use=["u"], after=["a"]),
            *(svc(n, roles=["r"]) for n in "nwua"),
            svc("b", roles=["r"], before=["x"]),
        ]
        assert build_plan(services, "r")["x"].after == ("a", "b", "n", "u", "w")

    def test_container_protocol(self, plan: Plan) -> None:
        """len, in and iteration follow start order."""
        assert len(plan) == 4
        assert "k3s" in plan
        assert [p.name for p in plan] == list(plan.names())


class TestToDict:
    @pytest.fixture
    def data(self) -> dict[str, object]:
        """to_dict() of a plan with a fully described service."""
        konnectivity = svc(
            "konnectivity-server",
            origin="konnectivity",
            description="Konnectivity server",
            roles=["server"],
            need=["net"],
            after=["k3s"],
            want=["ghost"],
            provide=["egress"],
            command=["/usr/local/bin/konnectivity-server", "--mode=grpc"],
            environment={"TOKEN": Secret("hunter2"), "MODE": "grpc"},
            pidfile="/run/konnectivity-server.pid",
            output_log="/var/log/konnectivity-server.log",
            error_log="/var/log/konnectivity-server.log",
            supervision=Supervision(respawn_delay=5, respawn_max=0),
            pre_start=[
                MakeDirectories(paths=["/run/konnectivity"]),
                WaitForPaths(paths=["/etc/rancher/k3s/k3s.yaml"], timeout=120),
            ],
            readiness=WaitForTcp(host="127.0.0.1", port=8092, timeout=30),
        )
        services = [*server_services()[:-1], konnectivity]
        return build_plan(services, "server", plugins=PLUGINS).to_dict()

    def test_is_json_and_hides_secrets(self, data: dict[str, object]) -> None:
        """The dict serialises to JSON and a Secret shows as *** only."""
        text = json.dumps(data)
        assert "hunter2" not in text
        konn = json.loads(text)["services"][-1]
        assert konn["environment"] == {"MODE": "grpc", "TOKEN": "***"}

    def test_service_fields(self, data: dict[str, object]) -> None:
        """Each service shows origin, wave, declared and resolved words, steps and supervision."""
        assert data["role"] == "server"
        assert data["waves"] == [["cgroups", "net"], ["k3s"], ["konnectivity-server"]]
        services = data["services"]
        assert isinstance(services, list)
        konn = services[-1]
        assert konn["name"] == "konnectivity-server"
        assert konn["origin"] == "konnectivity"
        assert konn["description"] == "Konnectivity server"
        assert konn["wave"] == 2
        assert konn["need"] == {"declared": ["net"], "resolved": ["net"], "unresolved": []}
        assert konn["after"] == {"declared": ["k3s"], "resolved": ["k3s"], "unresolved": []}
        assert konn["want"]["unresolved"] == ["ghost"]
        assert konn["provide"] == ["egress"]
        assert konn["starts_after"] == ["k3s", "net"]
        assert konn["pre_start"] == [
            "mkdir -p /run/konnectivity",
            "wait up to 120s for all readable: /etc/rancher/k3s/k3s.yaml",
        ]
        assert konn["command"] == ["/usr/local/bin/konnectivity-server", "--mode=grpc"]
        assert konn["pidfile"] == "/run/konnectivity-server.pid"
        assert konn["logs"] == {
            "output": "/var/log/konnectivity-server.log",
            "error": "/var/log/konnectivity-server.log",
        }
        assert konn["supervision"]["respawn_delay"] == 5
        assert konn["supervision"]["respawn_max"] == 0
        assert konn["readiness"] == "wait up to 30s for tcp 127.0.0.1:8092"
        assert services[0]["command"] is None
        assert services[0]["pulled_in_by"] == "k3s"


class TestRenderGraph:
    @pytest.fixture
    def plan(self) -> Plan:
        """A plan with every edge word and a virtual name."""
        services = [
            svc("net", provide=["network"]),
            svc("cgroups"),
            svc("early", roles=["server"], before=["k3s"]),
            svc("k3s", roles=["server"], need=["network", "cgroups"], want=["ghost"]),
            svc("logs", roles=["server"]),
            svc("konnectivity-server", roles=["server"], need=["net"], after=["k3s"], use=["logs"]),
        ]
        return build_plan(services, "server")

    def test_edges_use_the_strongest_word(self) -> None:
        """A pair linked by need and after is drawn once, as need."""
        plan = build_plan([svc("a", roles=["r"], need=["b"], after=["b"]), svc("b")], "r")
        assert edges(plan) == [("b", "a", "need")]

    def test_text(self, plan: Plan) -> None:
        """Text shows the waves, then each service's words with virtuals and absences."""
        text = render_graph(plan, "text")
        assert text.startswith(
            "role server: 6 services in 3 waves\n"
            "wave 0: cgroups, early, logs, net\n"
            "wave 1: k3s\n"
            "wave 2: konnectivity-server\n"
        )
        assert "k3s: need net (for network), cgroups; want ghost (absent)\n" in text
        assert "konnectivity-server: need net; use logs; after k3s\n" in text
        assert "early: before k3s\n" in text
        assert "net [pulled in by k3s]\n" in text

    def test_dot_structure(self, plan: Plan) -> None:
        """Dot output is one digraph, one rank per wave, each edge styled by its word."""
        dot = render_graph(plan, "dot")
        assert dot.startswith('digraph "noderole plan: server" {\n')
        assert dot.rstrip().endswith("}")
        assert dot.count("{") == dot.count("}")
        assert dot.count("rank=same;") == len(plan.waves)
        edge_lines = re.findall(
            r'^  "([^"]+)" -> "([^"]+)" \[label="(\w+)", style=(\w+)\];$', dot, re.M
        )
        assert edge_lines == [
            ("cgroups", "k3s", "need", "solid"),
            ("early", "k3s", "before", "dotted"),
            ("net", "k3s", "need", "solid"),
            ("logs", "konnectivity-server", "use", "dotted"),
            ("net", "konnectivity-server", "need", "solid"),
            ("k3s", "konnectivity-server", "after", "dotted"),
        ]

    def test_dot_want_is_dashed(self) -> None:
        """A want edge is dashed."""
        plan = build_plan([svc("a", roles=["r"], want=["b"]), svc("b")], "r")
        assert '"b" -> "a" [label="want", style=dashed];' in render_graph(plan, "dot")

    @pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed")
    def test_dot_parses_with_graphviz(self, plan: Plan) -> None:
        """Graphviz accepts the output."""
        result = subprocess.run(
            ["dot", "-Tsvg"], input=render_graph(plan, "dot"), capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr

    def test_mermaid(self, plan: Plan) -> None:
        """Mermaid output is a top-down flowchart with a subgraph per wave."""
        mermaid = render_graph(plan, "mermaid")
        assert mermaid.startswith("graph TD\n")
        assert mermaid.count("subgraph wave") == 3
        assert mermaid.count("  end\n") == 3
        assert '    s5["konnectivity-server"]\n' in mermaid
        assert "  s3 ==>|need| s4\n" in mermaid  # net needed by k3s
        assert "  s4 -.->|after| s5\n" in mermaid

    def test_output_is_deterministic(self, plan: Plan) -> None:
        """Rendering twice, or from services in another order, gives identical text."""
        services = [p.service for p in plan.services]
        again = build_plan(services[::-1], "server")
        for fmt in ("text", "dot", "mermaid"):
            assert render_graph(plan, fmt) == render_graph(again, fmt)

    def test_unknown_format(self, plan: Plan) -> None:
        """An unknown format is a ValueError naming the choices."""
        with pytest.raises(ValueError, match="use one of: text, dot, mermaid"):
            render_graph(plan, "svg")  # type: ignore[arg-type]


class TestCollectorPause:
    def test_collector_is_paused_while_planning_and_restored(self) -> None:
        """The cyclic collector is off while a plan is built, and back on afterwards."""
        import gc

        seen: list[bool] = []

        class Probe(str):
            # A role name whose membership test records the collector's state mid-build.
            def __eq__(self, other: object) -> bool:
                seen.append(gc.isenabled())
                return str.__eq__(self, other)

            __hash__ = str.__hash__

        assert gc.isenabled()
        build_plan([svc("a", roles=["r"])], Probe("r"))
        assert seen
        assert not any(seen)
        assert gc.isenabled()

    def test_collector_state_restored_after_an_error_and_when_already_off(self) -> None:
        """A PlanError turns the collector back on; a caller that had it off keeps it off."""
        import gc

        with pytest.raises(PlanError):
            build_plan([svc("a", roles=["r"])], "unknown")
        assert gc.isenabled()
        gc.disable()
        try:
            build_plan([svc("a", roles=["r"])], "r")
            assert not gc.isenabled()
        finally:
            gc.enable()


class TestResolvedOfTheCommonCase:
    """A planned service whose declared names are all planned services, each named once, keeps
    no mapping of its own for ``resolved``: it reads its record's declarations when asked."""

    @staticmethod
    def planned() -> PlannedService:
        plan = build_plan(
            [
                Service(name="a", roles=["r"]),
                Service(name="b", roles=["r"]),
                Service(name="c", roles=["r"], need=["a"], after=["b"]),
            ],
            "r",
        )
        return plan["c"]

    def test_reads_as_a_read_only_mapping_of_the_non_empty_words(self) -> None:
        resolved = self.planned().resolved
        expected = {"need": ("a",), "after": ("b",)}
        assert isinstance(resolved, Mapping)
        assert dict(resolved) == expected
        assert list(resolved) == ["need", "after"]  # KINDS order, as a built dict had it
        assert len(resolved) == 2
        assert resolved["need"] == ("a",)
        assert resolved.get("want", ()) == ()
        assert "want" not in resolved
        for missing in ("want", "before", "bogus", "service"):
            with pytest.raises(KeyError):
                resolved[missing]
        with pytest.raises(TypeError):
            resolved["need"] = ("x",)  # type: ignore[index]
        with pytest.raises(TypeError, match="unhashable"):
            hash(resolved)

    def test_equals_a_dict_and_a_proxy_both_ways(self) -> None:
        resolved = self.planned().resolved
        expected = {"need": ("a",), "after": ("b",)}
        assert resolved == expected
        assert expected == resolved
        assert resolved == types.MappingProxyType(expected)
        assert types.MappingProxyType(expected) == resolved
        assert resolved != {"need": ("a",)}
        assert repr(resolved) == "mappingproxy({'need': ('a',), 'after': ('b',)})"

    def test_a_service_built_from_it_holds_the_same_object(self) -> None:
        planned = self.planned()
        again = recordclass.evolve(planned, wave=planned.wave)
        assert again.resolved is planned.resolved
        assert again == planned

    def test_a_service_declaring_nothing_shares_the_empty_mapping(self) -> None:
        plan = build_plan([Service(name="a", roles=["r"])], "r")
        assert plan["a"].resolved is build_plan([Service(name="b", roles=["r"])], "r")["b"].resolved
        assert dict(plan["a"].resolved) == {}


class TestPlanValues:
    def test_plans_compare_and_show_by_their_fields(self) -> None:
        """Two plans of the same services are equal, field by field; neither a plan nor a planned
        service hashes (their maps are read-only views); the repr shows every field but the
        lazily built indexes."""

        def build() -> Plan:
            return build_plan(
                [
                    Service(name="a", roles=["r"], command=["/bin/a"]),
                    Service(name="b", roles=["r"], need=["a"], command=["/bin/b"], after=["zz"]),
                ],
                "r",
            )

        one, two = build(), build()
        assert one["a"].name == "a"  # builds one's index: not compared, not shown
        assert one == two
        assert one.services[0] == two.services[0]
        assert one.services[0] != one.services[1]
        assert one != build_plan([Service(name="a", roles=["r"], command=["/bin/a"])], "r")
        for value in (one, one.services[0]):
            with pytest.raises(TypeError, match="unhashable"):
                hash(value)
        shown = repr(one)
        assert shown.startswith("Plan(role='r', services=(PlannedService(service=Service(name='a'")
        assert shown.endswith(
            "wave=1, in_role=True, pulled_in_by=None, needs=('a',), wants=(), uses=(), "
            "after=('a',), provided_by=mappingproxy({}), resolved=mappingproxy({'need': ('a',)}), "
            "unresolved=mappingproxy({'after': ('zz',)}))), waves=(('a',), ('b',)), "
            "warnings=(\"b: after 'zz': no service is called or provides 'zz'; the after is "
            'ignored",))'
        )
