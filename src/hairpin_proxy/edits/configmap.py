"""The changes of a ConfigMap of ours that every edit is made of: our label, keys set, one
key's text rewritten. Pure: a change is a function of the object as read (kube.configmap
writes it, and re-applies it to the fresh copy after a conflict)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from hairpin_proxy.jsonobj import JsonObj, Mutate

MANAGED_BY = {"app.kubernetes.io/managed-by": "hairpin-proxy"}


def set_keys(data: Mapping[str, str]) -> Mutate:
    """A change that sets ``data``'s keys (a ConfigMap of ours, created when absent) and
    leaves the others alone; None (no write) when they already hold those values."""
    def change(cm: JsonObj | None) -> JsonObj | None:
        if cm is None:
            return {"metadata": {"labels": dict(MANAGED_BY)}, "data": dict(data)}
        old = cm.get("data") or {}
        if all(old.get(k) == v for k, v in data.items()):
            return None
        cm["data"] = {**old, **data}
        return cm
    return change


def rewrite_key(key: str, text_of: Callable[[JsonObj | None], str],
                edit: Callable[[str], str]) -> Mutate:
    """A change of one key's text (read by ``text_of``, which raises when it is missing);
    None (no write) when the text stays the same."""
    def change(cm: JsonObj | None) -> JsonObj | None:
        text = text_of(cm)
        new = edit(text)
        if new == text:
            return None
        assert cm is not None
        cm["data"][key] = new
        return cm
    return change
