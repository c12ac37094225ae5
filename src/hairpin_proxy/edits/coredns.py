"""Inline mode: our managed block inside the CoreDNS Corefile itself."""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from hairpin_proxy import corefile
from hairpin_proxy.edits.configmap import rewrite_key
from hairpin_proxy.jsonobj import JsonObj, Mutate
from hairpin_proxy.ordered import same

# (hosts, what they resolve to): one per target that has hosts.
Groups = tuple[tuple[tuple[str, ...], corefile.Answers], ...]


class EditError(RuntimeError):
    """The ConfigMap cannot be edited as things stand (missing ConfigMap or key)."""


@dataclass(frozen=True)
class _Last:
    """The last edit: the groups asked for, the hosts they hold and the result (the watch
    echoes our own write back, and most passes change nothing, so neither needs a fresh
    parse). The text it started from is kept to know it again, when the write asks for the
    same edit and when the Corefile facts ask whether a text is our edit of it. Most edits
    start from our own last write, echoed back: then the result before is kept, not the
    watch's equal copy of it. That is one more Corefile held (300 KB at 55,000 hosts) where
    its hash was kept before; hashing read the whole text on every edit."""

    source: str
    groups: Groups
    hosts: tuple[str, ...]
    edited: corefile.Edited

    def started_from(self, text: str) -> bool:
        """Whether ``text`` is the one this edit started from."""
        return text is self.source or text == self.source


@dataclass(frozen=True)
class CorednsEdit:
    namespace: str
    name: str
    key: str
    proxy_fqdn: str
    dns_port: int = 53
    # The last edit: the next one starts from its result (our own write, echoed back) and
    # renders only what changed; of a Corefile, only its result and the text it started
    # from are kept.
    _memo: dict[str, _Last] = field(default_factory=dict, compare=False, repr=False)

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

    def _last_for(self, text: str) -> _Last | None:
        """The last edit when ``text`` is its result."""
        last = self._memo.get("last")
        if last is None or text != last.edited.text:
            return None
        if text is not last.edited.text and self._memo.get("last") is last:
            # The watch's copy of our write, which its cache holds anyway, is kept instead of
            # ours. (Should an edit be stored meanwhile, this older one may replace it: it is
            # still a true edit, and only a later one finds nothing to start from.)
            last = self._memo["last"] = replace(last, edited=replace(last.edited, text=text))
        return last

    def remembered_hosts(self, cm: JsonObj | None) -> tuple[str, ...] | None:
        """current_hosts when the text is our last edit's (no parse needed), else None."""
        last = self._last_for(self.text(cm))
        return None if last is None else last.hosts

    def edited_from(self, text: str, source: str) -> bool:
        """Whether ``text`` is our last edit's result and ``source`` the text it started from."""
        last = self._last_for(text)
        return last is not None and last.started_from(source)

    def held_answers(self, cm: JsonObj | None) -> dict[str, corefile.Answers]:
        """Host → what our rules answer for it now."""
        text = self.text(cm)
        last = self._last_for(text)
        if last is not None:
            # Our own result: its rules read back as exactly the sets written (tested).
            return dict(sorted((host, s.answers) for s in last.edited.sets for host in s.hosts))
        return corefile.managed_groups(text, proxy_fqdn=self.proxy_fqdn, dns_port=self.dns_port)

    def edit(self, text: str, groups: Groups, every: tuple[str, ...] | None = None) -> str:
        """corefile.apply, from the last edit where ``text`` is its result (apply is
        idempotent). Groups without an address to answer with get no rules: a name is never
        sent nowhere. ``every``: the sorted hosts ``groups`` were made from, where the caller
        has them (kept as what the rules hold when the groups hold each of them)."""
        groups = answered(groups)
        last = self._memo.get("last")
        if last is not None and same_groups(groups, last.groups) and (
                text == last.edited.text or last.started_from(text)):
            # Our last result again, or the text it came from: the write asks for the edit
            # that CorefileRules.write made off the event loop just before (apply would
            # give the same text, at a full parse on the loop).
            return last.edited.text
        # One target: the single-set call, whose output earlier versions wrote too.
        edited = corefile.apply_kept(text, groups, proxy_fqdn=self.proxy_fqdn,
                                     dns_port=self.dns_port, single=len(groups) == 1,
                                     last=None if last is None else last.edited)
        # The groups are disjoint parts of ``every``: as many hosts, and they are all of it.
        hosts = every if every is not None and len(every) == sum(
            len(hs) for hs, _ in groups) else None
        if hosts is None and last is not None:
            hosts = _hosts_after(last.hosts, edited)
        source = last.edited.text if last is not None and text == last.edited.text else text
        self._memo["last"] = _Last(source, groups,
                                   _hosts_of(groups) if hosts is None else hosts, edited)
        return edited.text

    def mutate(self, groups: Groups) -> Mutate:
        return self._rewrite(lambda text: self.edit(text, groups))

    def removal(self) -> Mutate:
        """The uninstall change: our rules out, the rest byte for byte as it was."""
        return self._rewrite(lambda text: corefile.remove(text, proxy_fqdn=self.proxy_fqdn,
                                                          dns_port=self.dns_port))

    def _rewrite(self, edit: Callable[[str], str]) -> Mutate:
        return rewrite_key(self.key, self.text, edit)


def answered(groups: Groups) -> Groups:
    """The groups that get rules: those with hosts and an address to answer with. The very
    groups where none is left out: they may say how they were made (``corefile.Stepped``)."""
    kept = tuple((hosts, answers) for hosts, answers in groups if answers and hosts)
    return groups if len(kept) == len(groups) else kept


def same_groups(a: Groups, b: Groups) -> bool:
    """``a == b``, each group's hosts compared as ``ordered.same`` does."""
    return len(a) == len(b) and all(
        same(ha, hb) and xa == xb for (ha, xa), (hb, xb) in zip(a, b, strict=True))


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


def _hosts_after(hosts: tuple[str, ...], edited: corefile.Edited) -> tuple[str, ...] | None:
    """``_hosts_of`` of the sets of ``edited``, from ``hosts``, those of the edit before it,
    where ``edited`` was a step from that one (None otherwise). The sets are checked
    (sorted, distinct, no name in two of them), so a host lost by one set is gone unless
    another holds it now."""
    if edited.moved is None:
        return None
    if len(edited.sets) == 1:
        # The very tuple given, when the group came sorted (see _hosts_of).
        return edited.sets[0].hosts
    out = list(hosts)
    for host, added in sorted(edited.moved, key=lambda m: m[1]):
        at = bisect.bisect_left(out, host)
        present = out[at:at + 1] == [host]
        if added and not present:
            out.insert(at, host)
        elif not added and present and not any(_holds(s.hosts, host) for s in edited.sets):
            del out[at]
        elif not added and not present:
            return None
    return tuple(out)


def _holds(hosts: Sequence[str], host: str) -> bool:
    at = bisect.bisect_left(hosts, host)
    return at < len(hosts) and hosts[at] == host
