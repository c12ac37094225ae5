"""Targets: the data planes host names really belong to, how to reach them and how they
expect the PROXY protocol; the slots and table that tell the proxies. Pure throughout."""
