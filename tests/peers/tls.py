"""Self-signed certificates for TLS peers, made with the ``openssl`` command."""

from __future__ import annotations

import ipaddress
import subprocess
from pathlib import Path

from tests.peers import require_binary


def _san(name: str) -> str:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return f"DNS:{name}"
    return f"IP:{name}"


def make_cert(dir: Path, names: list[str]) -> tuple[Path, Path]:
    """Write a self-signed certificate and key for ``names`` (DNS names or IPs) into ``dir``.

    Returns (cert_path, key_path). The first name is also the subject CN. The certificate is
    its own CA, so a client can trust it with ``--cacert cert_path``.
    """
    if not names:
        raise ValueError("a certificate needs at least one name")
    openssl = require_binary("openssl")
    dir.mkdir(parents=True, exist_ok=True)
    stem = "cert-" + "-".join(n.replace("*", "star").replace(":", "_") for n in names)[:80]
    cert, key = dir / f"{stem}.pem", dir / f"{stem}.key"
    cn = names[0] if len(names[0]) <= 64 else "test"
    proc = subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "30", "-subj", f"/CN={cn}",
         "-addext", "subjectAltName=" + ",".join(_san(n) for n in names),
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-keyout", str(key), "-out", str(cert)],
        capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl could not make a certificate for {names}: {proc.stderr}")
    return cert, key
