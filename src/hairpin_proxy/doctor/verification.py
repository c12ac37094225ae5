"""The controller's host verification, run once over the doctor's hosts.

The same code as the controller's: the load balancer index from ``lb_addresses`` over the
Services and Ingresses (``cluster``), the resolver from ``make_resolver(--verify-resolver)``
and the verdict from ``decide``. Load balancer hostnames (AWS ELB style) are resolved as the
controller's checker does and their addresses merged into the index. Every lookup is bounded
by the doctor's DNS limit; a lookup that does not finish in time is a resolver error, which
``decide`` turns into ``resolver-error`` (unknown), never into a verdict that rests on it.

``check`` runs its own event loop, so the synchronous doctor can run it in a worker thread
beside the probes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from hairpin_proxy.doctor.facts import Verification
from hairpin_proxy.doctor.pool import DaemonPool
from hairpin_proxy.verify import (
    Answers,
    LbIndex,
    ResolveError,
    Resolver,
    decide,
    make_resolver,
    parse_servers,
    probe_name,
)

__all__ = ["OFF_REASON", "check", "describe_resolver", "lookup_limit", "make", "unknown"]

# At most this many lookups run at once (the controller's checker default is 8).
CONCURRENCY = 16

OFF_REASON = ("--verify-hosts off: the controller redirects every host its policy allows, "
              "wherever its public DNS points")


def lookup_limit(timeout: float) -> float:
    """The doctor's bound on one DNS lookup: three probe timeouts, at least 5 s."""
    return max(3 * timeout, 5.0)


def make(servers: Sequence[str], timeout: float) -> Resolver:
    """The controller's resolver for ``--verify-resolver`` (ValueError on a bad server),
    each server given ``timeout`` seconds."""
    return make_resolver(servers, timeout=timeout)


def describe_resolver(servers: Sequence[str]) -> str:
    parsed = parse_servers(servers)
    if not parsed:
        return "system"
    return ", ".join(f"[{a}]:{p}" if ":" in a else f"{a}:{p}" for a, p in parsed)


def unknown(reason: str, resolver: str = "") -> Verification:
    return Verification("unknown", reason, resolver=resolver)


async def _ask(resolver: Resolver, name: str, limit: float,
               sem: asyncio.Semaphore) -> Answers | ResolveError:
    async with sem:
        try:
            async with asyncio.timeout(limit):
                return await resolver.resolve(name)
        except TimeoutError:
            return ResolveError(name, "timeout", f"no answer within {limit:g}s")
        except Exception as exc:  # a resolver bug: a failed lookup, as the checker has it
            return ResolveError(name, "error", str(exc) or type(exc).__name__)


async def _check(hosts: Sequence[str], lb: LbIndex, resolver: Resolver, limit: float,
                 described: str) -> list[Verification]:
    sem = asyncio.Semaphore(CONCURRENCY)
    names = lb.hostnames
    lb_results, host_results = await asyncio.gather(
        asyncio.gather(*(_ask(resolver, n, limit, sem) for n in names)),
        asyncio.gather(*(_ask(resolver, probe_name(h), limit, sem) for h in hosts)))
    # As the checker: a load balancer hostname's answers (even from one family only) are
    # its addresses; a failed lookup adds none.
    learned = {n: r.addresses for n, r in zip(names, lb_results, strict=True)
               if isinstance(r, Answers)}
    index = lb.with_resolved(learned)
    now = time.monotonic()
    out = []
    for host, result in zip(hosts, host_results, strict=True):
        v = decide(host, result, index, None, now)
        out.append(Verification(v.code.value, v.reason, v.queried,
                                v.answers.addresses if v.answers is not None else (),
                                v.matched, described))
    return out


def check(hosts: Sequence[str], lb: LbIndex, resolver: Resolver, *, limit: float,
          described: str = "") -> list[Verification]:
    """One ``Verification`` per host, in order (blocking). Load balancer names and hosts are
    looked up together, ``CONCURRENCY`` at a time, each for at most ``limit`` seconds."""
    loop = asyncio.new_event_loop()
    # The system resolver runs getaddrinfo in the loop's executor; closing the loop shuts it
    # down without waiting and its threads are daemons, so a hung lookup cannot hold the
    # report, or the doctor's exit, back.
    executor = DaemonPool(CONCURRENCY, "doctor-verify")
    loop.set_default_executor(executor)
    try:
        return loop.run_until_complete(_check(hosts, lb, resolver, limit, described))
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()
