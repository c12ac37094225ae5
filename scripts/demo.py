"""`make demo`: the original tool's test procedure, on loopback, with no cluster.

1. An ingress stand-in that demands the PROXY protocol: real nginx with ``listen ...
   proxy_protocol`` (or, when nginx is not installed, a small Python server that does the same).
2. A bare request, as an in-cluster pod would send it when kube-proxy short-circuits the load
   balancer: the server drops it (curl says "Empty reply from server").
3. The same request through ``hairpin-proxy proxy``: it succeeds, and the server reports the
   client address it read from the PROXY header, which is the client's own.

Exit status 0 when both outcomes are the expected ones. Every process started is stopped.
``DEMO_STANDIN=1`` uses the Python stand-in even where nginx is installed.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hairpin_proxy import proxyproto

NGINX_BODY = (
    '{"proxy_protocol_addr": "$proxy_protocol_addr", '
    '"proxy_protocol_port": "$proxy_protocol_port", '
    '"remote_addr": "$remote_addr", "remote_port": "$remote_port", "host": "$host"}\\n'
)


def say(text: str = "") -> None:
    print(text, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise TimeoutError(f"{what} did not happen within {timeout:g}s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(15)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # anything the leader left behind
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(15)


# ------------------------------------------------------------------------------ the server

@contextlib.contextmanager
def nginx_server(workdir: Path, binary: str) -> Iterator[tuple[int, str]]:
    port = free_port()
    user = "user root root;" if os.geteuid() == 0 else ""
    conf = workdir / "nginx.conf"
    conf.write_text(f"""\
{user}
daemon off;
worker_processes 1;
pid {workdir}/nginx.pid;
error_log {workdir}/error.log info;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {workdir}/body;
    proxy_temp_path {workdir}/proxy;
    fastcgi_temp_path {workdir}/fastcgi;
    uwsgi_temp_path {workdir}/uwsgi;
    scgi_temp_path {workdir}/scgi;
    server {{
        listen 127.0.0.1:{port} proxy_protocol;
        location / {{
            default_type application/json;
            return 200 '{NGINX_BODY}';
        }}
    }}
}}
""")
    proc = subprocess.Popen([binary, "-p", str(workdir), "-c", str(conf), "-e",
                             str(workdir / "error.log")], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        # nginx writes its pid file once every listener is bound.
        wait_until(lambda: (workdir / "nginx.pid").exists() or proc.poll() is not None, 30,
                   "nginx start")
        if proc.poll() is not None:
            raise RuntimeError("nginx did not start:\n" + (workdir / "error.log").read_text())
        yield port, f"nginx (listen 127.0.0.1:{port} proxy_protocol)"
    finally:
        stop(proc)


def _standin_serve(conn: socket.socket) -> None:
    with conn:
        conn.settimeout(10)
        data = b""
        try:
            while True:
                try:
                    header, used = proxyproto.decode(data)
                    break
                except proxyproto.IncompleteHeader:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    data += chunk
            # Read the request head; the reply says what the header told us.
            rest = data[used:]
            while b"\r\n\r\n" not in rest:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                rest += chunk
        except (proxyproto.ProxyProtocolError, OSError):
            return  # like nginx: "broken header", close without a word
        src = header.source or ("", 0)
        peer = conn.getpeername()
        body = json.dumps({"proxy_protocol_addr": src[0], "proxy_protocol_port": str(src[1]),
                           "remote_addr": peer[0], "remote_port": str(peer[1])}) + "\n"
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}".encode())


@contextlib.contextmanager
def standin_server() -> Iterator[tuple[int, str]]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=_standin_serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield port, f"a Python stand-in that demands the PROXY header (127.0.0.1:{port})"
    finally:
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(5)


# ------------------------------------------------------------------------------ the clients

@dataclass(frozen=True)
class Reply:
    """One request and what came back: the only request a step makes, so the client address
    shown is the one the server saw."""
    client: tuple[str, int]
    answer: bytes  # the raw response (empty: the server closed without one)
    shown: str  # what to print: the command and its output


def request(port: int) -> Reply:
    """GET / with curl when it is installed (what an operator would type), else a raw socket."""
    binary = shutil.which("curl")
    if binary is None:
        return raw_get(port)
    with tempfile.NamedTemporaryFile() as head, tempfile.NamedTemporaryFile() as body:
        result = subprocess.run(
            [binary, "-sS", "--max-time", "10", "-H", "Host: app.example.test", "-D", head.name,
             "-o", body.name, "-w", "%{local_ip} %{local_port}", f"http://127.0.0.1:{port}/"],
            capture_output=True, text=True, timeout=30, check=False)
        answer = Path(head.name).read_bytes() + Path(body.name).read_bytes()
    ip, _, local = result.stdout.strip().rpartition(" ")
    output = answer.partition(b"\r\n\r\n")[2].decode(errors="replace").strip() or \
        result.stderr.strip()
    shown = f"$ curl http://127.0.0.1:{port}/\n  {output}   (curl exit {result.returncode})"
    return Reply((ip, int(local or 0)), answer, shown)


def raw_get(port: int) -> Reply:
    """A plain HTTP/1.0 GET from a socket of our own."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        me = s.getsockname()
        s.sendall(b"GET / HTTP/1.0\r\nHost: app.example.test\r\nUser-Agent: demo\r\n\r\n")
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except ConnectionResetError:
            pass
    shown = f"GET / from {me[0]}:{me[1]} → {out[:80]!r}"
    return Reply((me[0], me[1]), out, shown)


@contextlib.contextmanager
def relay(upstream_port: int, workdir: Path) -> Iterator[int]:
    port, admin = free_port(), free_port()
    log = (workdir / "relay.log").open("wb")
    cmd = [sys.executable, "-m", "hairpin_proxy", "proxy",
           "--listen", f"127.0.0.1:{port}=127.0.0.1:{upstream_port}",
           "--admin-listen", f"127.0.0.1:{admin}"]
    say("$ hairpin-proxy proxy " + " ".join(cmd[4:]))
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            start_new_session=True)

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError("hairpin-proxy exited:\n" + (workdir / "relay.log").read_text())
        try:
            conn = http.client.HTTPConnection("127.0.0.1", admin, timeout=5)
            conn.request("GET", "/readyz")
            return conn.getresponse().status == 200
        except OSError:
            return False

    try:
        wait_until(ready, 30, "hairpin-proxy readiness")
        say(f"  ready: /readyz on 127.0.0.1:{admin} answers 200 (the target accepts connections)")
        yield port
    finally:
        stop(proc)
        log.close()
        say("  hairpin-proxy log:")
        for line in (workdir / "relay.log").read_text().splitlines():
            say("    " + line)


def main() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="hairpin-demo-"))
    nginx = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")
    if os.environ.get("DEMO_STANDIN"):  # exercise the fallback even where nginx exists
        nginx = None
    server = nginx_server(workdir, nginx) if nginx else standin_server()
    ok = True
    try:
        with server as (port, what):
            say(f"1. The ingress stand-in: {what}.")
            say()
            say("2. A bare request, as a pod sends it when kube-proxy skips the load balancer:")
            bare = request(port)
            say("  " + bare.shown)
            if bare.answer.startswith(b"HTTP/1.1 200"):
                say("  UNEXPECTED: the server answered a request without a PROXY header")
                ok = False
            else:
                say("  → " + ("empty reply: the server closed the connection without a response"
                              if not bare.answer else f"refused: {bare.answer[:80]!r}"))
            if nginx:
                for line in (workdir / "error.log").read_text().splitlines():
                    if "broken header" in line:
                        say("  nginx error.log: " + line.split("] ", 1)[-1][:160])
                        break
            say()
            say("3. The same request through hairpin-proxy:")
            with relay(port, workdir) as rport:
                relayed = request(rport)
                say("  " + relayed.shown)
                head, _, body = relayed.answer.partition(b"\r\n\r\n")
                if not head.startswith(b"HTTP/1.1 200"):
                    say(f"  UNEXPECTED: no success through the relay: {relayed.answer[:200]!r}")
                    ok = False
                else:
                    seen = json.loads(body)
                    got = (seen["proxy_protocol_addr"], int(seen["proxy_protocol_port"]))
                    me = relayed.client
                    say(f"  → HTTP 200; the client's socket was {me[0]}:{me[1]}")
                    say(f"    the server read from the PROXY header: {got[0]}:{got[1]} "
                        f"(its TCP peer was the relay at {seen['remote_addr']}:"
                        f"{seen['remote_port']})")
                    if got != me:
                        say("  UNEXPECTED: the header does not carry the client's address")
                        ok = False
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    say()
    say("demo: OK: the bare request fails, the relayed one succeeds with the real client address"
        if ok else "demo: FAILED (see above)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
