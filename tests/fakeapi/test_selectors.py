"""Label and field selector parsing and matching."""

from __future__ import annotations

import pytest

from tests.fakeapi.selectors import (
    Requirement,
    fields_match,
    labels_match,
    parse_fields,
    parse_labels,
)
from tests.fakeapi.status import ApiError


def test_parses_every_operator() -> None:
    sel = parse_labels("a=1,b==2,c!=3,d in (x, y),e notin (z),f,!g")
    assert sel == (
        Requirement("a", "=", ("1",)), Requirement("b", "=", ("2",)),
        Requirement("c", "!=", ("3",)), Requirement("d", "in", ("x", "y")),
        Requirement("e", "notin", ("z",)), Requirement("f", "exists"), Requirement("g", "!"),
    )


def test_prefixed_keys_and_empty_values() -> None:
    sel = parse_labels("app.kubernetes.io/name=web,empty=")
    assert labels_match(sel, {"metadata": {"labels": {"app.kubernetes.io/name": "web",
                                                      "empty": ""}}})
    assert not labels_match(sel, {"metadata": {"labels": {"app.kubernetes.io/name": "web"}}})


@pytest.mark.parametrize("text", ["a in b", "a in (b", "=a", "a=b c", "a=(b)", "bad key=1",
                                  "a=not valid!"])
def test_rejects_malformed_selectors(text: str) -> None:
    with pytest.raises(ApiError) as err:
        parse_labels(text)
    assert err.value.code == 400


def test_negative_requirements_match_missing_labels() -> None:
    unlabeled: dict[str, dict[str, str]] = {"metadata": {}}
    assert labels_match(parse_labels("a!=1"), unlabeled)
    assert labels_match(parse_labels("a notin (1)"), unlabeled)
    assert not labels_match(parse_labels("a in (1)"), unlabeled)


def test_field_selectors_per_kind() -> None:
    pod = {"metadata": {"name": "p", "namespace": "n"}, "spec": {"nodeName": "node-1"},
           "status": {"phase": "Running"}}
    assert fields_match(parse_fields("spec.nodeName=node-1,status.phase!=Failed", "Pod"), pod)
    assert not fields_match(parse_fields("metadata.name=q", "Pod"), pod)
    with pytest.raises(ApiError):
        parse_fields("spec.nodeName=node-1", "ConfigMap")
