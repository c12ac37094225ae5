"""CoreDNS Corefiles: read them, ask them questions, and keep our rules in them. Pure.

- ``lexer`` and ``parser`` read a Corefile the way CoreDNS does, into the ``syntax`` tree;
- ``queries`` answers questions about it (plugins, imports, the zones it already serves);
- ``rules`` is our rule format (``template`` stanzas answering A/AAAA) and how it is recognised;
- ``editor`` applies hosts, grouped by the addresses they answer with: exactly one set of
  our rules (a stanza pair per group), every other byte kept;
- ``incremental`` does the same from the last edit's result, rendering only what changed.

Text in, text out: nothing here touches files, sockets, clocks or the API.
"""

from hairpin_proxy.corefile.editor import (
    DEFAULT_PROXY_FQDN,
    MAX_CONFIGMAP_BYTES,
    HostGroup,
    Stray,
    apply,
    apply_parsed,
    import_snippet,
    managed_groups,
    managed_hosts,
    remove,
    strays,
)
from hairpin_proxy.corefile.incremental import Edited, Stepped, apply_kept, snippet_kept
from hairpin_proxy.corefile.lexer import tokenize
from hairpin_proxy.corefile.parser import parse, parse_address
from hairpin_proxy.corefile.queries import (
    DEFAULT_COREFILE_DIR,
    DEFAULT_CUSTOM_DIR,
    has_plugin,
    import_matches,
    imports_key,
    served_zones,
)
from hairpin_proxy.corefile.rules import (
    BEGIN_MARKER,
    DEFAULT_TTL,
    END_MARKER,
    LEGACY_MARKER,
    MAX_TTL,
    Answers,
    RuleSet,
    host_rules_bytes,
    match_regexes,
    rules_bytes,
)
from hairpin_proxy.corefile.syntax import (
    DEFAULT_DNS_PORT,
    Address,
    Corefile,
    CorefileError,
    Directive,
    ServerBlock,
    Token,
)

__all__ = [
    "BEGIN_MARKER",
    "DEFAULT_COREFILE_DIR",
    "DEFAULT_CUSTOM_DIR",
    "DEFAULT_DNS_PORT",
    "DEFAULT_PROXY_FQDN",
    "DEFAULT_TTL",
    "END_MARKER",
    "LEGACY_MARKER",
    "MAX_CONFIGMAP_BYTES",
    "MAX_TTL",
    "Address",
    "Answers",
    "Corefile",
    "CorefileError",
    "Directive",
    "Edited",
    "HostGroup",
    "RuleSet",
    "ServerBlock",
    "Stepped",
    "Stray",
    "Token",
    "apply",
    "apply_kept",
    "apply_parsed",
    "has_plugin",
    "host_rules_bytes",
    "import_matches",
    "import_snippet",
    "imports_key",
    "managed_groups",
    "managed_hosts",
    "match_regexes",
    "parse",
    "parse_address",
    "remove",
    "rules_bytes",
    "served_zones",
    "snippet_kept",
    "strays",
    "tokenize",
]
