"""New connections to a host with several addresses (proxy.http1.connect):
staggered attempts, happy eyeballs style, on both event loops.

No name in this sandbox resolves to both ::1 and 127.0.0.1 (`localhost` is
127.0.0.1 only), so the tests give the pool a resolver of their own that
maps test names to the addresses (and ports) each test wants. An address
that drops connection attempts is a listener on ::1 or 127.0.0.1 whose
accept queue is full: the kernel ignores further SYNs, so a connect hangs.
"""

from __future__ import annotations

import contextlib
import errno
import socket
from collections.abc import Iterator, Mapping, Sequence

import pytest

from proxy import http1
from proxy.http1.connect import AddrInfo, Resolver, interleave, resolve
from tests.http1_servers import (
    BOTH_LOOPS,
    WAIT,
    answering,
    opened_pool,
    read_all,
    response,
    serving,
)

pytestmark = [pytest.mark.anyio, BOTH_LOOPS]


def info(ip: str, port: int) -> AddrInfo:
    if ":" in ip:
        return (socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (ip, port, 0, 0))
    return (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (ip, port))


def resolver(table: Mapping[str, Sequence[AddrInfo]]) -> Resolver:
    """Names to addresses, each with its own port (the origin's is ignored)."""

    async def lookup(host: str, port: int) -> Sequence[AddrInfo]:
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return table[host]

    return lookup


@contextlib.contextmanager
def black_hole(ip: str) -> Iterator[int]:
    """A port on `ip` where connection attempts hang."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with socket.socket(family) as listener, socket.socket(family) as filler:
        listener.bind((ip, 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        filler.connect((ip, port))  # takes the only place in the accept queue
        yield port


def refusing_port(ip: str) -> int:
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with socket.socket(family) as probe:
        probe.bind((ip, 0))
        return int(probe.getsockname()[1])  # nothing listens there once closed


async def get_from(pool: http1.Pool, origin: http1.Origin, connect: float = WAIT) -> bytes:
    resp = await pool.request(
        origin, "GET", "/", [], None, connect_timeout=connect, idle_timeout=WAIT
    )
    try:
        return await read_all(resp)
    finally:
        resp.release()


async def test_the_next_address_answers_when_the_first_drops_attempts() -> None:
    """::1 drops the attempt; 127.0.0.1 answers. One attempt after the other
    would wait out the connect timeout on ::1; staggered, the IPv4 attempt
    starts after the happy eyeballs delay and wins."""
    async with serving(answering(response(b"via v4"))) as up:
        with black_hole("::1") as hole:
            table = {"dual.test": [info("::1", hole), info("127.0.0.1", up.port)]}
            async with opened_pool(resolver=resolver(table)) as pool:
                origin = http1.Origin("http", "dual.test", up.port)
                assert await get_from(pool, origin, connect=2.0) == b"via v4"
        assert up.connections == 1


async def test_a_refused_address_moves_on_without_waiting_for_the_delay() -> None:
    async with serving(answering(response(b"second"))) as up:
        table = {"dual.test": [info("::1", refusing_port("::1")), info("127.0.0.1", up.port)]}
        async with opened_pool(resolver=resolver(table), happy_eyeballs_delay=60.0) as pool:
            origin = http1.Origin("http", "dual.test", up.port)
            assert await get_from(pool, origin, connect=WAIT) == b"second"


async def test_the_first_address_that_answers_is_used_and_reused() -> None:
    async with (
        serving(answering(response(b"v6")), host="::1") as up6,
        serving(answering(response(b"v4"))) as up4,
    ):
        table = {"dual.test": [info("::1", up6.port), info("127.0.0.1", up4.port)]}
        async with opened_pool(resolver=resolver(table)) as pool:
            origin = http1.Origin("http", "dual.test", 80)
            assert [await get_from(pool, origin) for _ in range(3)] == [b"v6"] * 3
        assert (up6.connections, up4.connections) == (1, 0)


async def test_every_address_refusing_is_connect_failed_with_its_cause() -> None:
    table = {
        "dual.test": [
            info("::1", refusing_port("::1")),
            info("127.0.0.1", refusing_port("127.0.0.1")),
        ]
    }
    async with opened_pool(resolver=resolver(table)) as pool:
        with pytest.raises(http1.ConnectFailed) as caught:
            await get_from(pool, http1.Origin("http", "dual.test", 80))
    cause = caught.value.__context__
    assert isinstance(cause, OSError)
    assert cause.errno == errno.ECONNREFUSED  # the same from both attempts
    assert "::1" in str(cause)
    assert "127.0.0.1" in str(cause)


async def test_every_address_dropping_attempts_is_a_connect_timeout() -> None:
    with black_hole("::1") as hole6, black_hole("127.0.0.1") as hole4:
        table = {"dual.test": [info("::1", hole6), info("127.0.0.1", hole4)]}
        async with opened_pool(resolver=resolver(table), happy_eyeballs_delay=0.05) as pool:
            with pytest.raises(http1.ConnectTimeout):
                await get_from(pool, http1.Origin("http", "dual.test", 80), connect=0.5)


async def test_a_name_that_does_not_resolve_is_connect_failed_with_its_cause() -> None:
    async with opened_pool(resolver=resolver({})) as pool:
        with pytest.raises(http1.ConnectFailed) as caught:
            await get_from(pool, http1.Origin("http", "nowhere.test", 80))
    assert isinstance(caught.value.__context__, socket.gaierror)


async def test_a_name_with_no_address_is_connect_failed() -> None:
    async with opened_pool(resolver=resolver({"empty.test": []})) as pool:
        with pytest.raises(http1.ConnectFailed):
            await get_from(pool, http1.Origin("http", "empty.test", 80))


async def test_localhost_through_the_event_loops_resolver() -> None:
    async with serving(answering(response(b"by name"))) as up, opened_pool() as pool:
        assert await get_from(pool, http1.Origin("http", "localhost", up.port)) == b"by name"


async def test_an_ip_address_is_not_resolved() -> None:
    async with (
        serving(answering(response(b"v6")), host="::1") as up,
        opened_pool(resolver=resolver({})) as pool,  # any lookup fails
    ):
        assert await get_from(pool, http1.Origin("http", "::1", up.port)) == b"v6"


async def test_the_default_resolver_is_the_event_loops() -> None:
    infos = await resolve("localhost", 80)
    assert ("127.0.0.1", 80) in [i[4][:2] for i in infos]


async def test_interleave_alternates_families_from_the_first_ones() -> None:
    a6, b6, c6 = info("2001:db8::1", 1), info("2001:db8::2", 1), info("2001:db8::3", 1)
    a4, b4 = info("192.0.2.1", 1), info("192.0.2.2", 1)
    assert interleave([a6, b6, c6, a4, b4]) == [a6, a4, b6, b4, c6]
    assert interleave([a4, a6, b4]) == [a4, a6, b4]
    assert interleave([a4, b4]) == [a4, b4]
    assert interleave([]) == []
