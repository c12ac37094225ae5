"""What the CoreDNS Corefile tells the controller besides where our rules go: the zones it
already serves (never redirected: CoreDNS answers them itself) and rules of ours outside the
root server blocks (copied by hand?), which are reported and never edited."""

from __future__ import annotations

import logging
from collections.abc import Callable

from hairpin_proxy import corefile
from hairpin_proxy.controller.events import Reports
from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.edits.coredns import CorednsEdit, EditError
from hairpin_proxy.jsonobj import JsonObj

log = logging.getLogger("hairpin_proxy.controller")


class CorefileFacts:
    """``on_zones`` is given the served zones every time a new Corefile text is read."""

    def __init__(self, edit: CorednsEdit, metrics: ControllerMetrics, reports: Reports,
                 on_zones: Callable[[tuple[str, ...]], None]) -> None:
        self.edit = edit
        self.metrics = metrics
        self.reports = reports
        self.on_zones = on_zones
        # (the text last read, zones it serves, strays), parsed once per text.
        self._facts: tuple[str, tuple[str, ...], tuple[corefile.Stray, ...]] = ("", (), ())
        self._reported_strays: tuple[corefile.Stray, ...] = ()

    def learn(self, cm: JsonObj | None) -> None:
        """Read the facts of the CoreDNS ConfigMap ``cm``, unless its text was read before."""
        try:
            text = self.edit.text(cm)
        except EditError:
            return
        known = self._facts[0]
        if text == known:
            return
        if known and self.edit.edited_from(text, known):
            # Our own edit of the text the facts were read from: it changed only our rules.
            self._facts = (text, *self._facts[1:])
            return
        try:
            cf = corefile.parse(text)
            zones = corefile.served_zones(cf, dns_port=self.edit.dns_port)
            strays = corefile.strays(cf, proxy_fqdn=self.edit.proxy_fqdn,
                                     dns_port=self.edit.dns_port)
        except corefile.CorefileError:
            return  # the edit reports it
        self._facts = (text, zones, strays)
        self.on_zones(zones)
        self.metrics.strays.set(len(strays))
        if strays and strays != self._reported_strays:
            message = ("rules of hairpin-proxy outside the root server block, left as they "
                       "are (copied by hand?): " + "; ".join(map(str, strays)))
            log.warning(message, extra={"configmap": self.edit.where})
            if cm is not None:
                self.reports.event({"apiVersion": "v1", "kind": "ConfigMap", **cm},
                                   "StrayRules", message, "Warning")
        self._reported_strays = strays
