"""Inline mode: our managed block inside the CoreDNS Corefile itself."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable
from dataclasses import dataclass, field

from hairpin_proxy import corefile
from hairpin_proxy.controller.writers.configmap import Mutate, rewrite_key
from hairpin_proxy.kube.client import JsonObj

# (hosts, what they resolve to): one per target that has hosts.
Groups = tuple[tuple[tuple[str, ...], corefile.Answers], ...]


class EditError(RuntimeError):
    """The ConfigMap cannot be edited as things stand (missing ConfigMap or key)."""


@dataclass(frozen=True)
class CorednsEdit:
    namespace: str
    name: str
    key: str
    proxy_fqdn: str
    dns_port: int = 53
    # The last edit, (text before, hosts, groups, text after): the watch echoes our own write
    # back and most reconciles change nothing, so neither needs a fresh parse.
    _memo: dict[str, tuple[str, tuple[str, ...], Groups, str]] = field(
        default_factory=dict, compare=False, repr=False)
    # The text after the last edit as the editor's check read it back: the next edit starts
    # from that text (our own write, echoed by the watch), and a Corefile of 10,000 hosts
    # takes milliseconds to parse.
    _parsed: dict[str, corefile.Corefile] = field(default_factory=dict, compare=False,
                                                  repr=False)

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.name}[{self.key}]"

    def text(self, cm: JsonObj | None) -> str:
        if cm is None:
            raise EditError(f"CoreDNS ConfigMap {self.namespace}/{self.name} not found")
        text = (cm.get("data") or {}).get(self.key)
        if not isinstance(text, str):
            raise EditError(f"CoreDNS ConfigMap {self.namespace}/{self.name} has no key "
                            f"{self.key!r}")
        return text

    def current_hosts(self, cm: JsonObj | None) -> tuple[str, ...]:
        """What our managed block holds now (the mass-removal guard's starting point)."""
        known = self.remembered_hosts(cm)
        if known is not None:
            return known
        return corefile.managed_hosts(self.text(cm), proxy_fqdn=self.proxy_fqdn,
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
        return corefile.managed_groups(self._parse_of(self.text(cm)), proxy_fqdn=self.proxy_fqdn,
                                       dns_port=self.dns_port)

    def _parse_of(self, text: str) -> str | corefile.Corefile:
        """``text``, or its parse when it is the last edit's result (the editor reads a
        parsed Corefile exactly as it reads its text)."""
        last = self._parsed.get("last")
        return last if last is not None and last.text == text else text

    def edit(self, text: str, groups: Groups) -> str:
        """corefile.apply, remembering the last edit (apply is idempotent). Groups without an
        address to answer with get no rules: a name is never sent nowhere."""
        groups = tuple((hosts, answers) for hosts, answers in groups if answers and hosts)
        last = self._memo.get("last")
        if last is not None and groups == last[2] and text in (last[0], last[3]):
            return last[3]
        source = self._parse_of(text)
        if len(groups) == 1:
            # One target: the single-set call, whose output earlier versions wrote too.
            parsed = corefile.apply_parsed(source, groups[0][0], answers=groups[0][1],
                                           proxy_fqdn=self.proxy_fqdn, dns_port=self.dns_port)
        else:
            parsed = corefile.apply_parsed(source, groups, proxy_fqdn=self.proxy_fqdn,
                                           dns_port=self.dns_port)
        new = parsed.text
        self._memo["last"] = (text, _hosts_of(groups), groups, new)
        self._parsed["last"] = parsed
        return new

    def mutate(self, groups: Groups) -> Mutate:
        return self._rewrite(lambda text: self.edit(text, groups))

    def removal(self) -> Mutate:
        """The uninstall change: our rules out, the rest byte for byte as it was."""
        return self._rewrite(lambda text: corefile.remove(text, proxy_fqdn=self.proxy_fqdn,
                                                          dns_port=self.dns_port))

    def _rewrite(self, edit: Callable[[str], str]) -> Mutate:
        return rewrite_key(self.key, self.text, edit)


def _hosts_of(groups: Groups) -> tuple[str, ...]:
    """Every host of ``groups``, sorted and distinct. One group's hosts come so from the
    removal guard; that very tuple is kept, so that the guard finds it again as the held
    hosts of the next pass and need not look at them afresh."""
    if len(groups) == 1:
        hosts = groups[0][0]
        if isinstance(hosts, tuple) and all(map(operator.lt, hosts,
                                                itertools.islice(hosts, 1, None))):
            return hosts
    # Each group's hosts come sorted: sorting them together merges the runs, in C.
    merged = sorted(itertools.chain.from_iterable(hs for hs, _ in groups))
    return tuple(merged if len(set(merged)) == len(merged) else sorted(set(merged)))
