"""A serving certificate for the fake API server, made by the openssl command as a cluster's
CA would make one: the API server is reached over HTTPS with this certificate as the
kubeconfig's ``certificate-authority``, so that a client pays for TLS what it pays in a
cluster (one CA in its trust store, encrypted streams)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ServingCert:
    """A self-signed certificate for 127.0.0.1 and its key, in PEM files."""

    cert: Path
    key: Path


def make_serving_cert(directory: Path, host: str = "127.0.0.1") -> ServingCert:
    """A fresh certificate for ``host`` (an IP address), valid for a day."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("the openssl command is needed to serve the fake API over HTTPS "
                           "(scripts/system-deps.sh installs it)")
    cert, key = directory / "apiserver.crt", directory / "apiserver.key"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", f"/CN={host}", "-addext",
         f"subjectAltName=IP:{host}", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True)
    return ServingCert(cert, key)
