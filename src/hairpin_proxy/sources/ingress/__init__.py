"""Ingress support, pure part: the compact form an Ingress is cached in, the hosts one asks
for under the host policy, and the incremental cache of those verdicts.

Nothing here does I/O, as in ``gateway/``: the controller, ``render`` and ``doctor`` feed parsed
objects in.
"""
