"""The published hosts' edit: the ConfigMap the etchosts agents read (``hosts`` and
``entries``). Pure; the controller's PublishedWriter applies it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hairpin_proxy.edits.configmap import set_keys
from hairpin_proxy.jsonobj import Mutate
from hairpin_proxy.published import ADDRESSES_KEY, ENTRIES_KEY, HOSTS_KEY, entries_text


def lines(items: Sequence[str]) -> str:
    return "\n".join(items) + "\n" if items else ""


@dataclass(frozen=True)
class PublishedEdit:
    namespace: str
    name: str

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.name}"

    def mutate(self, hosts: Sequence[str], addresses: Sequence[str],
               entries: Mapping[str, Sequence[str]] | str) -> Mutate:
        """``hosts``: the default target's; ``entries``: every host with its addresses, or
        its ``entries_text`` already made."""
        text = entries if isinstance(entries, str) else entries_text(entries)
        return set_keys({HOSTS_KEY: lines(sorted(hosts)), ADDRESSES_KEY: lines(addresses),
                         ENTRIES_KEY: text})
