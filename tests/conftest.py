"""Shared fixtures. Real peers (nginx, HAProxy, curl) live in tests/peers/."""
