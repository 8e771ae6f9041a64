"""Opening a connection: to the upstream, or to an egress proxy (and then,
for an https upstream, a CONNECT tunnel with TLS inside); for a host name,
resolution, then staggered attempts over its addresses (happy eyeballs,
RFC 8305).

A host with several addresses (IPv6 and IPv4, or several of one family) is
tried in the resolver's order with the families alternating: the first
address at once, the next one when the attempt before it failed or after
`delay` seconds without an answer, whichever comes first; the first
connection made wins and the attempts still under way are cancelled. An
address that drops packets costs `delay`, not the connect timeout. asyncio's
`create_connection(happy_eyeballs_delay=...)` does the same, but uvloop (the
server's event loop) has no such option; this works on both.

The caller bounds the whole (resolution, CONNECT and TLS included) with its
connect timeout.
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import socket
import ssl
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any

from proxy.http1.connection import Connection, Ends
from proxy.http1.egress import ProxyURL, connect_request
from proxy.http1.errors import ConnectFailed
from proxy.http1.request import Origin

HAPPY_EYEBALLS_DELAY = 0.25  # RFC 8305's recommended connection attempt delay

AddrInfo = tuple[int, int, int, str, Any]  # as socket.getaddrinfo returns them
Resolver = Callable[[str, int], Awaitable[Sequence[AddrInfo]]]


async def resolve(host: str, port: int) -> Sequence[AddrInfo]:
    """The event loop's getaddrinfo."""
    loop = asyncio.get_running_loop()
    return await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)


def _literal(host: str, port: int) -> AddrInfo | None:
    """The address of a host that is an IP address (nothing to resolve)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    return (family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (host, port))


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
    """A connected non-blocking socket to `host` (a name is looked up with
    `resolver`). socket.gaierror when the name does not resolve; OSError
    when no address took the connection."""
    literal = _literal(host, port)
    infos = [literal] if literal is not None else interleave(await resolver(host, port))
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
    winner: socket.socket | None = None
    # The losers are stopped after the loop and in the handler, not in a
    # `finally`: compiled (README "Compiled build"), an await inside a
    # `finally` loses the exception in flight (a timeout's cancellation).
    try:
        while (waiting or running) and winner is None:
            if waiting:
                running.add(loop.create_task(_attempt(loop, waiting.pop(0))))
            done, running = await asyncio.wait(
                running, timeout=delay if waiting else None, return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                error = task.exception()
                if error is None:
                    running |= done - {task}  # closed below, should another have won too
                    winner = task.result()
                    break
                if not isinstance(error, OSError):
                    raise error
                errors.append(error)
    except BaseException as exc:  # cancelled (the connect timeout), or not an OSError
        await _stop(running)
        raise exc
    await _stop(running)
    if winner is None:
        raise _one_error(errors)
    return winner


async def _stop(running: set[asyncio.Task[socket.socket]]) -> None:
    """Cancels the attempts still running and waits for them to end; one that
    connected just as the winner did is closed."""
    for task in running:
        task.cancel()
    if running:
        for result in await asyncio.gather(*running, return_exceptions=True):
            if isinstance(result, socket.socket):
                result.close()


def _one_error(errors: list[OSError]) -> OSError:
    """The attempts' errors as one (as asyncio's create_connection words it),
    with their errno when they share one."""
    if len(errors) == 1:
        return errors[0]
    message = f"Multiple exceptions: {', '.join(str(e) for e in errors)}"
    codes = {e.errno for e in errors}
    code = codes.pop() if len(codes) == 1 else None
    return OSError(code, message) if code is not None else OSError(message)


async def open_connection(
    key: Hashable,
    origin: Origin,
    proxy: ProxyURL | None,
    *,
    tls: ssl.SSLContext | None,
    within: float,
    resolver: Resolver = resolve,
    delay: float = HAPPY_EYEBALLS_DELAY,
    own: dict[Ends, int] | None = None,
) -> Connection:
    """A connection ready for requests to `origin`: TCP (and TLS when `tls`
    is given) to the origin, or TCP to `proxy`, with a tunnel through it to
    an https origin. OSError, ssl.SSLError, or ConnectFailed when the proxy
    refuses the tunnel. `own`: the ends of the pool's connections (`Connection`)."""
    loop = asyncio.get_running_loop()
    host, port = (origin.host, origin.port) if proxy is None else (proxy.host, proxy.port)
    sock = await open_socket(host, port, resolver=resolver, delay=delay)
    direct_tls = tls if proxy is None else None
    # the transport owns the socket from here, and closes it on failure
    _, conn = await loop.create_connection(
        lambda: Connection(key, loop, own),
        sock=sock,
        ssl=direct_tls,
        server_hostname=origin.host if direct_tls is not None else None,
    )
    if proxy is not None and tls is not None:
        try:
            await _tunnel(loop, conn, origin, proxy, tls, within)
        except BaseException:
            conn.abandon()
            raise
    return conn


async def _tunnel(
    loop: asyncio.AbstractEventLoop,
    conn: Connection,
    origin: Origin,
    proxy: ProxyURL,
    tls: ssl.SSLContext,
    within: float,
) -> None:
    """CONNECT through the proxy, then TLS with the origin inside the tunnel."""
    conn.tunnel = True
    conn.send(connect_request(origin, proxy))
    await conn.wait_headers(within)
    if not 200 <= conn.status < 300:
        raise ConnectFailed(
            f"the proxy {proxy.address} answered CONNECT with {conn.status}"
            + (" (it wants credentials)" if conn.status == 407 else "")
        )
    assert conn.transport is not None
    transport = await loop.start_tls(conn.transport, conn, tls, server_hostname=origin.host)
    if transport is None:  # (only when the connection closed meanwhile)
        raise ConnectionResetError("the proxy closed the tunnel")
    conn.tunneled(transport)
