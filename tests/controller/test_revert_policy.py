"""edits.revert_policy: revert history → next action, and who reverted us. Pure."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.edits.revert_policy import (
    OUR_MANAGER,
    History,
    RevertPolicy,
    advice,
    decide,
    record_repair,
    record_revert,
    reverter,
    settle,
)

POLICY = RevertPolicy(first_delay=5.0, max_delay=1800.0, limit=5, window=3600.0)

policies = st.builds(RevertPolicy,
                     first_delay=st.floats(0.01, 100.0),
                     max_delay=st.floats(100.0, 5000.0),
                     limit=st.integers(1, 8),
                     window=st.floats(1.0, 20000.0))


def test_delays_double_up_to_the_cap() -> None:
    assert [POLICY.delay(n) for n in range(1, 12)] == [
        5, 10, 20, 40, 80, 160, 320, 640, 1280, 1800, 1800]
    assert POLICY.delay(10_000) == 1800.0
    assert POLICY.delay(0) == 0.0


@given(policies, st.integers(1, 200))
def test_delays_grow_and_stay_within_bounds(policy: RevertPolicy, n: int) -> None:
    assert min(policy.first_delay, policy.max_delay) <= policy.delay(n) <= policy.max_delay
    assert policy.delay(n + 1) >= policy.delay(n)


def test_nothing_pending_writes_at_once() -> None:
    assert decide(POLICY, History(), 7.0).action == "write"


def test_a_revert_is_repaired_after_its_backoff_then_writes_are_free() -> None:
    h = record_revert(POLICY, History(), 100.0, "argocd-controller", "Update")
    assert decide(POLICY, h, 101.0).action == "wait"
    assert decide(POLICY, h, 101.0).at == 105.0
    assert decide(POLICY, h, 105.0).action == "write"
    h = record_repair(POLICY, h, 105.0)
    # Our next change (another host) need not wait: no revert is pending.
    assert decide(POLICY, h, 106.0).action == "write"
    h = record_revert(POLICY, h, 110.0, "argocd-controller")
    assert decide(POLICY, h, 110.0).at == 120.0  # the second revert in the window: 10 s


def test_suspension_after_the_limit_probe_and_resume() -> None:
    h, t = History(), 0.0
    for _ in range(POLICY.limit):
        h = record_revert(POLICY, h, t, "kube-addon-manager")
        d = decide(POLICY, h, t)
        t = d.at
        h = record_repair(POLICY, h, t) if d.action == "write" else h
    assert h.suspended
    last = h.reverts[-1].at
    d = decide(POLICY, h, last + 1)
    assert d.action == "suspended" and d.at == last + POLICY.max_delay
    # The probe is written; reverted again, the suspension holds.
    h = record_repair(POLICY, h, last + POLICY.max_delay)
    h = record_revert(POLICY, h, last + POLICY.max_delay + 30, "kube-addon-manager")
    assert h.suspended
    assert decide(POLICY, h, last + POLICY.max_delay + 60).action == "suspended"
    # The next probe is left alone for max_delay: resumed, history forgotten.
    probe = last + 2 * POLICY.max_delay + 30
    h = record_repair(POLICY, h, probe)
    assert settle(POLICY, h, probe + POLICY.max_delay - 1).suspended
    assert settle(POLICY, h, probe + POLICY.max_delay) == History()


def test_reverts_out_of_the_window_stop_counting() -> None:
    h = record_revert(POLICY, History(), 0.0, "m")
    h = record_repair(POLICY, h, 5.0)
    h = record_revert(POLICY, h, 4000.0, "m")
    assert len(h.reverts) == 1
    assert decide(POLICY, h, 4000.0).at == 4005.0


@settings(max_examples=300, deadline=None)
@given(policies, st.lists(st.floats(0.0, 50_000.0), min_size=1, max_size=60))
def test_against_a_reverter_writes_are_bounded_and_never_early(
        policy: RevertPolicy, gaps: list[float]) -> None:
    """An adversary reverts each of our writes some time later. Whatever it does: no write
    before the decision allows it, none sooner than the backoff of the revert it answers,
    suspension once the limit is reached within the window, and then at most one probe per
    max_delay."""
    h, now = History(), 0.0
    writes: list[float] = []
    for gap in gaps:
        d = decide(policy, h, now)
        if d.action != "write":
            assert d.at > now
            now = d.at
            d = decide(policy, h, now)
        assert d.action == "write"
        last = h.last
        if last is not None and not h.repaired:
            # A repair: never before the backoff for the reverts counted then.
            assert now >= last.at + min(policy.delay(len(h.reverts)), policy.max_delay) - 1e-9
            if h.suspended:
                assert now >= last.at + policy.max_delay - 1e-9
        h = record_repair(policy, h, now)
        writes.append(now)
        now += gap
        h = record_revert(policy, h, now, "argocd-controller")
        recent = [r for r in h.reverts if now - r.at < policy.window]
        if len(recent) >= policy.limit:
            assert h.suspended
    # Probes while suspended are at least max_delay apart.
    if h.suspended and h.suspended_since is not None:
        during = [w for w in writes if w > h.suspended_since]
        assert all(b - a >= policy.max_delay - 1e-9 for a, b in itertools.pairwise(during))


@given(policies, st.lists(st.floats(0.0, 100.0), max_size=30), st.floats(0.0, 1e6))
def test_decide_never_allows_writing_before_now_and_settle_is_idempotent(
        policy: RevertPolicy, gaps: list[float], probe: float) -> None:
    h, now = History(), 0.0
    for gap in gaps:
        now += gap
        h = record_revert(policy, h, now, "m")
    d = decide(policy, h, now + probe)
    assert d.at >= now + probe
    once = settle(policy, h, now + probe)
    assert settle(policy, once, now + probe) == once
    assert len(h.reverts) <= max(1, policy.limit)


# ------------------------------------------------------------------ managedFields


def _entry(manager: str, time: str, data_keys: list[str] | None, operation: str = "Update"
           ) -> dict[str, object]:
    fields: dict[str, object] = {"f:metadata": {"f:labels": {".": {}, "f:x": {}}}}
    if data_keys is not None:
        fields["f:data"] = {".": {}, **{f"f:{k}": {} for k in data_keys}}
    return {"manager": manager, "operation": operation, "apiVersion": "v1", "time": time,
            "fieldsType": "FieldsV1", "fieldsV1": fields}


def test_the_owner_of_the_key_is_the_reverter() -> None:
    mf = [_entry("kubectl-client-side-apply", "2026-01-01T00:00:00Z", ["other"]),
          _entry("argocd-controller", "2026-01-01T00:01:00Z", ["Corefile"]),
          _entry(OUR_MANAGER, "2026-01-01T00:02:00Z", None),
          _entry("kubectl-edit", "2026-01-01T00:03:00Z", None)]
    who = reverter(mf, "Corefile")
    assert (who.manager, who.operation, who.owns_key) == ("argocd-controller", "Update", True)
    assert who.describe() == "argocd-controller (Update)"


def test_a_deleted_key_names_the_latest_other_writer() -> None:
    mf = [_entry("kube-addon-manager", "2026-01-01T00:05:00Z", ["Corefile"], "Apply"),
          _entry("kubectl-edit", "2026-01-01T00:01:00Z", None),
          _entry(OUR_MANAGER, "2026-01-01T00:09:00Z", ["hairpin.override"])]
    who = reverter(mf, "hairpin.server")
    assert (who.manager, who.owns_key) == ("kube-addon-manager", False)
    assert "nobody owns the key" in who.describe()


def test_no_managed_fields() -> None:
    for mf in (None, [], "junk", [{"manager": OUR_MANAGER}]):
        who = reverter(mf, "Corefile")
        assert who.manager == "" and "unknown manager" in who.describe()


def test_advice_names_the_managers_own_configuration() -> None:
    assert "ignoreDifferences" in advice("argocd-controller", "kube-system/coredns", "Corefile")
    assert "/data/Corefile" in advice("argocd-controller", "kube-system/coredns", "Corefile")
    assert "EnsureExists" in advice("kube-addon-manager", "kube-system/node-local-dns",
                                    "Corefile")
    assert "kustomize.toolkit.fluxcd.io" in advice("kustomize-controller", "x/y", "k")
    assert "custom-DNS" in advice("", "x/y", "k")
