"""`make demo`, the README's first command: it shows the failure and the fix with real nginx and
curl, one request per step, and the address it shows is the one the server read."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_demo_shows_one_request_per_step_and_the_real_client_address() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "demo.py")],
                          capture_output=True, text=True, timeout=180, check=False,
                          stdin=subprocess.DEVNULL)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "1. The ingress stand-in: nginx" in out
    assert out.count("$ curl ") == 2, out
    assert "curl exit 52" in out and "broken header" in out
    shown = re.search(r"the client's socket was 127\.0\.0\.1:(\d+)", out)
    header = re.search(r"proxy_protocol_port\": \"(\d+)\"", out)
    assert shown and header and shown.group(1) == header.group(1), out
    assert out.rstrip().endswith("demo: OK: the bare request fails, the relayed one succeeds "
                                 "with the real client address")
