"""Helpers for the hosts-file writer and node-agent tests."""
