"""Inline mode: our managed block inside the CoreDNS Corefile itself."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hairpin_proxy import corefile
from hairpin_proxy.controller.sinks.configmap import Mutate, rewrite_key
from hairpin_proxy.kube.client import JsonObj

# (hosts, what they resolve to): one per target that has hosts.
Groups = tuple[tuple[tuple[str, ...], corefile.Answers], ...]


class SinkError(RuntimeError):
    """The target cannot be written as things stand (missing ConfigMap or key)."""


@dataclass(frozen=True)
class CorednsSink:
    namespace: str
    name: str
    key: str
    target: str
    dns_port: int = 53
    # The last edit, (text before, hosts, groups, text after): the watch echoes our own write
    # back and most reconciles change nothing, so neither needs a fresh parse.
    _memo: dict[str, tuple[str, tuple[str, ...], Groups, str]] = field(
        default_factory=dict, compare=False, repr=False)

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.name}[{self.key}]"

    def text(self, cm: JsonObj | None) -> str:
        if cm is None:
            raise SinkError(f"CoreDNS ConfigMap {self.namespace}/{self.name} not found")
        text = (cm.get("data") or {}).get(self.key)
        if not isinstance(text, str):
            raise SinkError(f"CoreDNS ConfigMap {self.namespace}/{self.name} has no key "
                            f"{self.key!r}")
        return text

    def current_hosts(self, cm: JsonObj | None) -> tuple[str, ...]:
        """What our managed block holds now (the mass-removal guard's starting point)."""
        known = self.remembered_hosts(cm)
        if known is not None:
            return known
        return corefile.managed_hosts(self.text(cm), target=self.target,
                                      dns_port=self.dns_port)

    def remembered_hosts(self, cm: JsonObj | None) -> tuple[str, ...] | None:
        """current_hosts when the text is our last edit's (no parse needed), else None."""
        last = self._memo.get("last")
        if last is None or self.text(cm) != last[3]:
            return None
        return last[1]

    def source_of(self, text: str) -> str | None:
        """The text our last edit started from, when ``text`` is that edit's result."""
        last = self._memo.get("last")
        return last[0] if last is not None and text == last[3] else None

    def held_answers(self, cm: JsonObj | None) -> dict[str, corefile.Answers]:
        """Host → what our rules answer for it now."""
        return corefile.managed_groups(self.text(cm), target=self.target,
                                       dns_port=self.dns_port)

    def edit(self, text: str, groups: Groups) -> str:
        """corefile.apply, remembering the last edit (apply is idempotent). Groups without an
        address to answer with get no rules: a name is never sent nowhere."""
        groups = tuple((hosts, answers) for hosts, answers in groups if answers and hosts)
        last = self._memo.get("last")
        if last is not None and groups == last[2] and text in (last[0], last[3]):
            return last[3]
        if len(groups) == 1:
            # One target: the single-set call, whose output earlier versions wrote too.
            new = corefile.apply(text, groups[0][0], answers=groups[0][1], target=self.target,
                                 dns_port=self.dns_port)
        else:
            new = corefile.apply(text, groups, target=self.target, dns_port=self.dns_port)
        hosts = tuple(sorted({h for hs, _ in groups for h in hs}))
        self._memo["last"] = (text, hosts, groups, new)
        return new

    def mutate(self, groups: Groups) -> Mutate:
        return self._rewrite(lambda text: self.edit(text, groups))

    def removal(self) -> Mutate:
        """The uninstall change: our rules out, the rest byte for byte as it was."""
        return self._rewrite(lambda text: corefile.remove(text, target=self.target,
                                                          dns_port=self.dns_port))

    def _rewrite(self, edit: Callable[[str], str]) -> Mutate:
        return rewrite_key(self.key, self.text, edit)
