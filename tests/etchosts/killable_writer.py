"""A writer to kill: forks children that rewrite one file between two contents forever.

Driven over stdin/stdout so a test can SIGKILL the children at random moments:

    go [N]   fork a child that alternates update(A), update(B) until killed;
             answers "pid <n>", then "exit <status>" once the child is gone. With N, the
             child stops at its N-th hook point (a step of the write) and the child itself
             says "at <point>" first, so the test can kill it exactly there
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


def _say(line: str) -> None:
    # One write(2) per line: the zygote and its child share this pipe, and print() may split
    # a line into several writes (unbuffered mode) that would interleave.
    os.write(1, (line + "\n").encode())


def _child(args: argparse.Namespace, contents: tuple[str, str], stop_at: int) -> None:
    random.seed(os.getpid() ^ time.monotonic_ns())
    pause = args.pause_max
    calls = 0

    def hook(point: str) -> None:
        nonlocal calls
        calls += 1
        if calls == stop_at:
            _say(f"at {point}")
            parent = os.getppid()
            # Wait to be killed; never outlive a test that failed before killing us.
            while os.getppid() == parent:
                time.sleep(0.1)
            os._exit(4)
        if pause > 0:
            time.sleep(random.uniform(0, pause))

    writer = SafeFile(args.path, method=args.method, chunk=args.chunk, hook=hook)
    parent = os.getppid()
    i = 0
    while os.getppid() == parent:
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
    _say("ready")
    for line in sys.stdin:
        cmd, *rest = line.split() or [""]
        if cmd == "go":
            stop_at = int(rest[0]) if rest else 0
            pid = os.fork()
            if pid == 0:
                try:
                    _child(args, contents, stop_at)
                finally:
                    os._exit(3)
            _say(f"pid {pid}")
            _, status = os.waitpid(pid, 0)
            _say(f"exit {status}")
        elif cmd == "recover":
            outcome = SafeFile(args.path, method=args.method).recover()
            _say(f"outcome {outcome}")
        elif cmd == "quit":
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
