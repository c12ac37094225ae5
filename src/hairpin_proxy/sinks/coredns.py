"""Inline mode: our managed block inside the CoreDNS Corefile itself."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hairpin_proxy import corefile
from hairpin_proxy.kube.client import JsonObj
from hairpin_proxy.sinks.configmap import Mutate, rewrite_key


class SinkError(RuntimeError):
    """The target cannot be written as things stand (missing ConfigMap or key)."""


@dataclass(frozen=True)
class CorednsSink:
    namespace: str
    name: str
    key: str
    target: str
    dns_port: int = 53
    # The last edit, (text before, hosts, answers, text after): the watch echoes our own write
    # back and most reconciles change nothing, so neither needs a fresh parse.
    _memo: dict[str, tuple[str, tuple[str, ...], corefile.Answers, str]] = field(
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

    def edit(self, text: str, hosts: Sequence[str], answers: corefile.Answers) -> str:
        """corefile.apply, remembering the last edit (apply is idempotent). No address to
        answer with means no rules: a name is never sent nowhere."""
        wanted = tuple(hosts) if answers else ()
        last = self._memo.get("last")
        if last is not None and (wanted, answers) == last[1:3] and text in (last[0], last[3]):
            return last[3]
        new = corefile.apply(text, wanted, answers=answers, target=self.target,
                             dns_port=self.dns_port)
        self._memo["last"] = (text, wanted, answers, new)
        return new

    def mutate(self, hosts: Sequence[str], answers: corefile.Answers) -> Mutate:
        return self._rewrite(lambda text: self.edit(text, hosts, answers))

    def removal(self) -> Mutate:
        """The uninstall change: our rules out, the rest byte for byte as it was."""
        return self._rewrite(lambda text: corefile.remove(text, target=self.target,
                                                          dns_port=self.dns_port))

    def _rewrite(self, edit: Callable[[str], str]) -> Mutate:
        return rewrite_key(self.key, self.text, edit)
