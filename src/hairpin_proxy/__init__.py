"""hairpin-proxy: make in-cluster requests to the cluster's own PROXY-protocol ingress work."""

from __future__ import annotations


def __getattr__(name: str) -> str:
    # ``__version__`` is read on first use (see hairpin_proxy.version for why not at import).
    if name == "__version__":
        from hairpin_proxy.version import version

        value = version()
        globals()["__version__"] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
