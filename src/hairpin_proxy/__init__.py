"""hairpin-proxy: make in-cluster requests to the cluster's own PROXY-protocol ingress work."""

__version__ = "0.1.0"
