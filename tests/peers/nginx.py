"""A real nginx, standing in for an ingress controller that expects the PROXY protocol.

Every response (any path) is a JSON object describing what nginx saw::

    {"proxy_protocol_addr", "proxy_protocol_port", "proxy_protocol_server_addr",
     "proxy_protocol_server_port", "remote_addr", "remote_port", "host", "server_port",
     "scheme", "ssl_server_name", "request_uri"}

The ``proxy_protocol_*`` values are "" when no header was expected or it said UNKNOWN/LOCAL.
Values are not JSON-escaped by nginx: keep Host headers free of quotes and backslashes.

``/bytes/<n>`` returns ``n`` bytes of ``b"x"`` (chunked; needs the Debian echo module, see
``Nginx.has_bytes``). ``/static/<name>`` serves files from ``Nginx.docroot`` with sendfile and a
Content-Length; ``Nginx.make_file`` writes a deterministic one of a given size.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.peers import free_port, has_ipv6_loopback, read_text, require_binary, stop_process
from tests.peers.tls import make_cert
from tests.waiting import WaitTimeout, wait_until

ECHO_MODULE = Path("/usr/lib/nginx/modules/ngx_http_echo_module.so")
TLS_NAMES = ["example.test", "*.example.test", "localhost", "127.0.0.1", "::1"]

_JSON_BODY = (
    '{"proxy_protocol_addr": "$proxy_protocol_addr", '
    '"proxy_protocol_port": "$proxy_protocol_port", '
    '"proxy_protocol_server_addr": "$proxy_protocol_server_addr", '
    '"proxy_protocol_server_port": "$proxy_protocol_server_port", '
    '"remote_addr": "$remote_addr", "remote_port": "$remote_port", '
    '"host": "$host", "server_port": "$server_port", "scheme": "$scheme", '
    '"ssl_server_name": "$ssl_server_name", "request_uri": "$request_uri"}\\n'
)


def pattern_bytes(size: int) -> bytes:
    """The deterministic content ``Nginx.make_file`` writes: a repeating 256-byte ramp."""
    ramp = bytes(range(256))
    return (ramp * (size // 256 + 1))[:size]


@dataclass
class Nginx:
    workdir: Path
    port: int
    tls_port: int
    ipv6_port: int | None
    cert: Path
    key: Path
    has_bytes: bool
    proxy_protocol: bool
    proc: subprocess.Popen[bytes] = field(repr=False)

    @property
    def docroot(self) -> Path:
        return self.workdir / "www"

    @property
    def error_log(self) -> Path:
        return self.workdir / "error.log"

    @property
    def access_log(self) -> Path:
        """One JSON object per request (includes the proxy_protocol_* values)."""
        return self.workdir / "access.log"

    def error_log_text(self) -> str:
        return read_text(self.error_log)

    def access_log_entries(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in read_text(self.access_log).splitlines() if line]

    def make_file(self, name: str, size: int) -> str:
        """Write ``size`` bytes of ``pattern_bytes`` to the docroot; returns its URL path."""
        path = self.docroot / name
        chunk = pattern_bytes(1 << 20)
        with path.open("wb") as f:
            left = size
            while left > 0:
                n = min(left, len(chunk))
                f.write(chunk[:n])
                left -= n
        return f"/static/{name}"

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def get_direct(self, path: str = "/", timeout: float = 30.0) -> dict[str, Any]:
        """GET over the plain listener with a v1 header stating 127.0.0.1 talks to it."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            lport = s.getsockname()[1]
            hdr = f"PROXY TCP4 127.0.0.1 127.0.0.1 {lport} {self.port}\r\n".encode()
            req = f"GET {path} HTTP/1.0\r\nHost: direct.test\r\n\r\n".encode()
            s.sendall((hdr if self.proxy_protocol else b"") + req)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        result: dict[str, Any] = json.loads(body)
        return result


def _conf(workdir: Path, *, port: int, tls_port: int, ipv6_port: int | None,
          proxy_protocol: bool, cert: Path, key: Path, echo: bool, extra_conf: str,
          workers: int, worker_connections: int = 4096) -> str:
    pp = " proxy_protocol" if proxy_protocol else ""
    w = workdir
    listeners = [f"listen 127.0.0.1:{port}{pp};", f"listen 127.0.0.1:{tls_port} ssl{pp};"]
    if ipv6_port is not None:
        listeners.append(f"listen [::1]:{ipv6_port}{pp};")
    bytes_loc = (
        'location ~ "^/bytes/(\\d{1,10})$" {\n'
        "            default_type application/octet-stream;\n"
        '            echo_duplicate $1 "x";\n'
        "        }"
        if echo else ""
    )
    log_body = _JSON_BODY.removesuffix("\\n")
    listen = "\n        ".join(listeners)
    root_user = "user root root;" if os.geteuid() == 0 else ""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nofile = 2 * worker_connections + 64
    if hard != resource.RLIM_INFINITY:
        nofile = min(nofile, hard)
    worker_connections = min(worker_connections, nofile // 2)
    return f"""\
{f"load_module {ECHO_MODULE};" if echo else ""}
{root_user}
daemon off;
master_process on;
worker_processes {workers};
worker_rlimit_nofile {nofile};
pid {w}/nginx.pid;
lock_file {w}/nginx.lock;
error_log {w}/error.log info;
events {{ worker_connections {worker_connections}; }}
http {{
    client_body_temp_path {w}/tmp/body;
    proxy_temp_path {w}/tmp/proxy;
    fastcgi_temp_path {w}/tmp/fastcgi;
    uwsgi_temp_path {w}/tmp/uwsgi;
    scgi_temp_path {w}/tmp/scgi;
    log_format hairpin_json escape=json '{log_body}';
    access_log {w}/access.log hairpin_json;
    sendfile on;
    keepalive_requests 100000;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    server {{
        {listen}
        server_name _;
        {extra_conf}
        location / {{
            default_type application/json;
            return 200 '{_JSON_BODY}';
        }}
        location /static/ {{
            alias {w}/www/;
        }}
        {bytes_loc}
    }}
}}
"""


@contextlib.contextmanager
def run_nginx(workdir: Path, *, proxy_protocol: bool = True, tls: bool = False,
              ipv6: bool = False, extra_conf: str = "", workers: int = 1,
              worker_connections: int = 4096, start_timeout: float = 30.0) -> Iterator[Nginx]:
    """Run nginx (foreground, own session) with its config, logs and temp files in ``workdir``.

    The TLS listener always exists (``tls`` is accepted for readability at call sites); its
    certificate covers example.test, *.example.test, localhost, 127.0.0.1 and ::1.
    ``extra_conf`` is pasted inside the ``server`` block. Retries with new ports if another
    process grabbed one between choosing and binding.
    """
    del tls
    if ipv6 and not has_ipv6_loopback():
        pytest.skip("IPv6 loopback (::1) is not available here")
    binary = require_binary("nginx")
    workdir.mkdir(parents=True, exist_ok=True)
    for sub in ("tmp", "www"):
        (workdir / sub).mkdir(exist_ok=True)
    cert, key = make_cert(workdir / "tls", TLS_NAMES)
    echo = ECHO_MODULE.exists()
    conf_path = workdir / "nginx.conf"
    pid_path = workdir / "nginx.pid"
    last_error = ""
    for _attempt in range(5):
        port, tls_port = free_port(), free_port()
        ipv6_port = free_port("::1") if ipv6 else None
        conf_path.write_text(_conf(workdir, port=port, tls_port=tls_port, ipv6_port=ipv6_port,
                                   proxy_protocol=proxy_protocol, cert=cert, key=key, echo=echo,
                                   extra_conf=extra_conf, workers=workers,
                                   worker_connections=worker_connections))
        pid_path.unlink(missing_ok=True)
        log_mark = len(read_text(workdir / "error.log"))
        with (workdir / "stderr.log").open("ab") as stderr:
            proc = subprocess.Popen(
                [binary, "-p", str(workdir), "-c", str(conf_path),
                 "-e", str(workdir / "error.log")],
                stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr, start_new_session=True)
        try:
            # The pid file is written only after every listening socket is bound.
            def started(p: subprocess.Popen[bytes] = proc) -> bool:
                return p.poll() is not None or pid_path.exists()

            with contextlib.suppress(WaitTimeout):  # judged below, with the logs
                wait_until(started, start_timeout, "nginx's pid file", interval=0.02)
            if proc.poll() is None and pid_path.exists():
                break
            stop_process(proc)
            last_error = (read_text(workdir / "error.log")[log_mark:]
                          + read_text(workdir / "stderr.log"))
            if "Address already in use" not in last_error:
                raise RuntimeError(f"nginx did not start (exit {proc.returncode}):\n{last_error}")
        except BaseException:
            stop_process(proc)
            raise
    else:
        raise RuntimeError(f"nginx could not bind free ports after 5 attempts:\n{last_error}")
    nginx = Nginx(workdir=workdir, port=port, tls_port=tls_port, ipv6_port=ipv6_port, cert=cert,
                  key=key, has_bytes=echo, proxy_protocol=proxy_protocol, proc=proc)
    try:
        yield nginx
    finally:
        stop_process(proc)


def fetch_json(url: str, timeout: float = 30.0) -> dict[str, Any]:
    """GET a URL of a non-proxy_protocol nginx and decode the JSON answer."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        result: dict[str, Any] = json.loads(resp.read())
        return result
