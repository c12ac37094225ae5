"""Import mode: one key of the ConfigMap the Corefile imports (``coredns-custom``).

Only our key is ever written; the ConfigMap is created when absent (labelled as ours, so that
the uninstall, or cleanup, may delete it again when nothing else lives in it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hairpin_proxy import corefile
from hairpin_proxy.edits.configmap import MANAGED_BY
from hairpin_proxy.edits.coredns import Groups, answered
from hairpin_proxy.jsonobj import JsonObj, Mutate


@dataclass(frozen=True)
class ImportEdit:
    namespace: str
    name: str
    key: str
    proxy_fqdn: str
    # The last snippet written and what it holds: the next one renders only what changed.
    _memo: dict[str, corefile.Edited] = field(default_factory=dict, compare=False, repr=False)

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.name}[{self.key}]"

    @staticmethod
    def snippet(groups: Groups) -> str:
        """The key's text for ``groups`` (also what ``render --import-snippet`` prints)."""
        groups = answered(groups)
        return (corefile.import_snippet(groups[0][0], answers=groups[0][1])
                if len(groups) == 1 else corefile.import_snippet(groups))

    def kept_snippet(self, groups: Groups) -> str:
        """``snippet(groups)``, from the last one where the change allows."""
        groups = answered(groups)
        edited = corefile.snippet_kept(groups, last=self._memo.get("last"),
                                       single=len(groups) == 1)
        self._memo["last"] = edited
        return edited.text

    def text(self, cm: JsonObj | None) -> str:
        """Our key's text now ("" when there is none)."""
        text = ((cm or {}).get("data") or {}).get(self.key)
        return text if isinstance(text, str) else ""

    def remembered_hosts(self, cm: JsonObj | None) -> tuple[str, ...] | None:
        """current_hosts when our key holds the last snippet written (no parse needed), else
        None."""
        last = self._memo.get("last")
        if last is None or self.text(cm) != last.text:
            return None
        return tuple(sorted({host for s in last.sets for host in s.hosts}))

    def current_hosts(self, cm: JsonObj | None) -> tuple[str, ...]:
        """The hosts our key's rules redirect now, sorted (the mass-removal guard's starting
        point). Raises CorefileError when the key cannot be read as rules."""
        known = self.remembered_hosts(cm)
        if known is not None:
            return known
        text = self.text(cm)
        return corefile.managed_hosts(_as_block(text), proxy_fqdn=self.proxy_fqdn) \
            if text else ()

    def held_answers(self, cm: JsonObj | None) -> dict[str, corefile.Answers]:
        """Host → what our key's rules answer for it now. Raises CorefileError when the key
        cannot be read as rules."""
        text = self.text(cm)
        last = self._memo.get("last")
        if last is not None and text == last.text:
            return dict(sorted((host, s.answers) for s in last.sets for host in s.hosts))
        return corefile.managed_groups(_as_block(text), proxy_fqdn=self.proxy_fqdn) \
            if text else {}

    def mutate(self, groups: Groups) -> Mutate:
        snippet = self.kept_snippet(groups)

        def change(cm: JsonObj | None) -> JsonObj | None:
            if cm is None:
                return {"metadata": {"labels": dict(MANAGED_BY)}, "data": {self.key: snippet}}
            data = cm.get("data") or {}
            if data.get(self.key) == snippet:
                return None
            cm["data"] = {**data, self.key: snippet}
            return cm
        return change

    def removal(self) -> Mutate:
        def change(cm: JsonObj | None) -> JsonObj | None:
            if cm is None or self.key not in (cm.get("data") or {}):
                return None
            del cm["data"][self.key]
            return cm
        return change

    @staticmethod
    def ours_and_empty(cm: JsonObj | None) -> bool:
        """A ConfigMap we created and that holds nothing any more (our key removed, as the
        withdrawal on uninstall and cleanup both remove it; no other key): safe to delete."""
        if cm is None:
            return False
        labels = (cm.get("metadata") or {}).get("labels") or {}
        return (all(labels.get(k) == v for k, v in MANAGED_BY.items())
                and not cm.get("data") and not cm.get("binaryData"))


def _as_block(snippet: str) -> str:
    """The snippet where the Corefile imports it: inside the root server block."""
    return f".:53 {{\n{snippet}}}\n" if snippet.endswith("\n") else f".:53 {{\n{snippet}\n}}\n"
