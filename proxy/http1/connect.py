"""Opening a TCP connection to a host name: resolution, then staggered
attempts over its addresses (happy eyeballs, RFC 8305).

A host with several addresses (IPv6 and IPv4, or several of one family) is
tried in the resolver's order with the families alternating: the first
address at once, the next one when the attempt before it failed or after
`delay` seconds without an answer, whichever comes first; the first
connection made wins and the attempts still under way are cancelled. An
address that drops packets costs `delay`, not the connect timeout. asyncio's
`create_connection(happy_eyeballs_delay=...)` does the same, but uvloop (the
server's event loop) has no such option; this works on both.

The caller bounds the whole (resolution included) with its connect timeout.
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

HAPPY_EYEBALLS_DELAY = 0.25  # RFC 8305's recommended connection attempt delay

AddrInfo = tuple[int, int, int, str, Any]  # as socket.getaddrinfo returns them
Resolver = Callable[[str, int], Awaitable[Sequence[AddrInfo]]]


async def resolve(host: str, port: int) -> Sequence[AddrInfo]:
    """The event loop's getaddrinfo, skipped for an IP address."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        loop = asyncio.get_running_loop()
        return await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (host, port))]


def interleave(infos: Sequence[AddrInfo]) -> list[AddrInfo]:
    """Addresses in the resolver's order, families alternating, starting
    with the family of the first one (RFC 8305, section 4)."""
    families: dict[int, list[AddrInfo]] = {}
    for info in infos:
        families.setdefault(info[0], []).append(info)
    return [info for group in itertools.zip_longest(*families.values()) for info in group if info]


async def open_socket(
    host: str,
    port: int,
    *,
    resolver: Resolver = resolve,
    delay: float = HAPPY_EYEBALLS_DELAY,
) -> socket.socket:
    """A connected non-blocking socket to `host`. socket.gaierror when the
    name does not resolve; OSError when no address took the connection."""
    infos = interleave(await resolver(host, port))
    if not infos:
        raise socket.gaierror(socket.EAI_NONAME, f"{host} has no address")
    loop = asyncio.get_running_loop()
    if len(infos) == 1:
        return await _attempt(loop, infos[0])
    return await _race(loop, infos, delay)


async def _attempt(loop: asyncio.AbstractEventLoop, info: AddrInfo) -> socket.socket:
    family, kind, proto, _, address = info
    sock = socket.socket(family, kind, proto)
    try:
        sock.setblocking(False)
        await loop.sock_connect(sock, address)
    except BaseException:
        sock.close()
        raise
    return sock


async def _race(
    loop: asyncio.AbstractEventLoop, infos: list[AddrInfo], delay: float
) -> socket.socket:
    waiting = list(infos)
    running: set[asyncio.Task[socket.socket]] = set()
    errors: list[OSError] = []
    try:
        while waiting or running:
            if waiting:
                running.add(loop.create_task(_attempt(loop, waiting.pop(0))))
            done, running = await asyncio.wait(
                running, timeout=delay if waiting else None, return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                error = task.exception()
                if error is None:
                    running |= done - {task}  # closed below, should another have won too
                    return task.result()
                if not isinstance(error, OSError):
                    raise error
                errors.append(error)
    finally:
        for task in running:
            task.cancel()
        if running:
            for result in await asyncio.gather(*running, return_exceptions=True):
                if isinstance(result, socket.socket):
                    result.close()  # connected just as the winner did
    raise _one_error(errors)


def _one_error(errors: list[OSError]) -> OSError:
    """The attempts' errors as one (as asyncio's create_connection words it),
    with their errno when they share one."""
    if len(errors) == 1:
        return errors[0]
    message = f"Multiple exceptions: {', '.join(str(e) for e in errors)}"
    codes = {e.errno for e in errors}
    code = codes.pop() if len(codes) == 1 else None
    return OSError(code, message) if code is not None else OSError(message)
