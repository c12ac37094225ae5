"""The Gateway API conformance tests' hostname cases, end to end through the pure path the
controller takes: objects → route claims (policy included) → conflicts → DNS rules. Every host
a conformance test expects a backend for must be redirected by the rules CoreDNS would run,
and no host it expects 404 for. The cases (data only) and their provenance:
tests/sources/gateway/conformance/."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from hairpin_proxy import corefile
from hairpin_proxy.claims import resolve
from hairpin_proxy.corefile import Answers, managed_hosts
from hairpin_proxy.policy import HostPolicy
from hairpin_proxy.sources.gateway.claims import claims_of_objects
from tests.corefiles import BY_NAME
from tests.sources.gateway.objects import accepted, gateway, gateway_class, listener, ref, route

CASES = json.loads((Path(__file__).parent / "conformance" / "hostnames.json").read_text())
NS = "gateway-conformance-infra"


def _objects(case: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    gw = gateway(case["name"], NS, listeners=[
        listener(name, hostname=hostname, origin="Same")
        for name, hostname in case["listeners"].items()])
    routes = []
    for r in case["routes"]:
        parents = [ref(case["name"], NS, sectionName=s) for s in r.get("sections", ())] \
            or [ref(case["name"], NS)]
        status = [accepted(p) if r["accepted"] else
                  accepted(p, "False", reason="NoMatchingListenerHostname") for p in parents]
        routes.append(route(name=r["name"], namespace=NS, hostnames=r.get("hostnames"),
                            parents=parents, status=status))
    return gw, routes


def _rules() -> tuple[list[re.Pattern[str]], tuple[str, ...]]:
    """The regexes of the rules written for every case's claims, and the hosts they hold."""
    gateways, routes = [], []
    for case in CASES["gateways"]:
        gw, rs = _objects(case)
        gateways.append(gw)
        routes += [("HTTPRoute", r) for r in rs]
    got = claims_of_objects([gateway_class()], gateways, routes, wanted_classes=(),
                            policy=HostPolicy(), namespace_labels={})
    assert got.rejections == ()
    hosts = sorted(resolve(got.claims).winners)
    # Written into a real Corefile and read back, as the controller does.
    text = corefile.apply(BY_NAME["kubeadm"].text, hosts, answers=Answers(("10.96.0.50",)))
    assert managed_hosts(text) == tuple(hosts)
    return [re.compile(rx) for rx in corefile.match_regexes(hosts)], tuple(hosts)


def _redirected(regexes: list[re.Pattern[str]], host: str) -> bool:
    # CoreDNS matches the lower-cased, fully qualified name with MatchString (a search).
    return any(rx.search(host.lower() + ".") for rx in regexes)


SERVED = [(c["name"], h) for c in CASES["gateways"] for h in c["served"]]
NOT_SERVED = [(c["name"], h) for c in CASES["gateways"] for h in c["not_served"]]


@pytest.mark.parametrize(("gateway_name", "host"), SERVED)
def test_every_host_a_gateway_serves_is_redirected(gateway_name: str, host: str) -> None:
    regexes, _ = _rules()
    assert _redirected(regexes, host), f"{host} (served by {gateway_name}) is not redirected"


@pytest.mark.parametrize(("gateway_name", "host"), NOT_SERVED)
def test_no_host_a_gateway_answers_404_is_redirected(gateway_name: str, host: str) -> None:
    regexes, _ = _rules()
    assert not _redirected(regexes, host), f"{host} (404 on {gateway_name}) is redirected"


def test_the_cases_are_the_upstream_ones_and_need_every_depth() -> None:
    src = CASES["source"]
    assert src["repository"] == "kubernetes-sigs/gateway-api"
    assert re.fullmatch(r"[0-9a-f]{40}", src["commit"])
    assert len(SERVED) == 17 and len(NOT_SERVED) == 10
    _, hosts = _rules()
    # The listeners' wildcards are claimed for every depth: with one label, as an Ingress
    # wildcard, foo.bar.anotherwildcard.io and multiple.prefixes.bar.com would hairpin and
    # break. (A route's exact names under a listener's wildcard are claimed as they are.)
    assert {"**.anotherwildcard.io", "**.bar.com", "**.foo.com"} <= set(hosts)
    assert "foo.bar.wildcard.io" in hosts
    one_label = [re.compile(rx) for rx in corefile.match_regexes(
        sorted(h.removeprefix("*") for h in hosts))]
    assert not _redirected(one_label, "foo.bar.anotherwildcard.io")
    assert not _redirected(one_label, "multiple.prefixes.bar.com")
