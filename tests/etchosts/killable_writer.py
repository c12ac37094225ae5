"""A writer to kill: forks children that rewrite one file between two contents forever.

Driven over stdin/stdout so a test can SIGKILL the children at random moments:

    go       fork a child that alternates update(A), update(B) until killed;
             answers "pid <n>", then "exit <status>" once the child is gone
    recover  run SafeFile.recover() here; answers "outcome <what>"
    quit     exit

The forking parent imports everything up front, so a child starts writing at once. With
``--bind SRC`` it first bind-mounts SRC over the target (run it inside ``unshare -m``).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from hairpin_proxy.safefile import SafeFile


def _child(args: argparse.Namespace, contents: tuple[str, str]) -> None:
    random.seed(os.getpid() ^ time.monotonic_ns())
    pause = args.pause_max

    def hook(point: str) -> None:
        if pause > 0:
            time.sleep(random.uniform(0, pause))

    writer = SafeFile(args.path, method=args.method, chunk=args.chunk, hook=hook)
    i = 0
    while True:
        text = contents[i % 2]

        def replace(_current: str, text: str = text) -> str:
            return text

        writer.update(replace)
        i += 1


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--path", required=True)
    parser.add_argument("--method", default="auto")
    parser.add_argument("--a", required=True, help="file holding content A")
    parser.add_argument("--b", required=True, help="file holding content B")
    parser.add_argument("--chunk", type=int, default=0)
    parser.add_argument("--pause-max", type=float, default=0.0)
    parser.add_argument("--bind", default="")
    args = parser.parse_args()
    contents = (Path(args.a).read_text(), Path(args.b).read_text())
    if args.bind:
        subprocess.run(["mount", "--bind", args.bind, args.path], check=True)
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "go":
            pid = os.fork()
            if pid == 0:
                try:
                    _child(args, contents)
                finally:
                    os._exit(3)
            print(f"pid {pid}", flush=True)
            _, status = os.waitpid(pid, 0)
            print(f"exit {status}", flush=True)
        elif cmd == "recover":
            outcome = SafeFile(args.path, method=args.method).recover()
            print(f"outcome {outcome}", flush=True)
        elif cmd == "quit":
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
