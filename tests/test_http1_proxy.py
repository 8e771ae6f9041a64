"""Egress proxies (proxy.http1.egress and the pool's use of them): a small
CONNECT proxy (tests/http1_servers.py: ForwardProxy) in front of scripted
upstreams, on both event loops, and the sans-IO rules (which proxy, if any).

A loopback upstream is never proxied, so the upstream is addressed by a
name the client never resolves: the proxy is given `fake-upstream.test:443`
and maps it to 127.0.0.1 itself, as a real proxy would resolve it. The
client's resolver knows only the names a test wants it to (a lookup of the
upstream's name would fail the test)."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
import trustme

from proxy import http1
from proxy.config import ServerModel, build_config, describe
from proxy.errors import ConfigError
from proxy.http1.connect import AddrInfo, Resolver
from proxy.http1.egress import (
    EnvProxies,
    NoProxy,
    ProxyURL,
    connect_request,
    is_loopback,
    proxy_for,
)
from proxy.upstream import open_transport
from proxy.upstream.builtin import BuiltinTransport
from tests.http1_servers import (
    BOTH_LOOPS,
    WAIT,
    Upstream,
    answering,
    forward_proxy,
    opened_pool,
    read_all,
    response,
    serving,
)

NAME = "fake-upstream.test"
KEY = "sk-route-key-0123456789"


@pytest.fixture(scope="module")
def tls_ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def server_tls(tls_ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls_ca.issue_cert(NAME).configure_cert(context)
    return context


@pytest.fixture(scope="module")
def client_tls(tls_ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    tls_ca.configure_trust(context)
    return context


def resolver(table: Mapping[str, tuple[str, int]]) -> Resolver:
    """Names to one IPv4 address and port each; any other name fails."""
    import socket

    async def lookup(host: str, port: int) -> Sequence[AddrInfo]:
        if host not in table:
            raise AssertionError(f"the client resolved {host}")
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", table[host])]

    return lookup


async def get_body(
    pool: http1.Pool,
    origin: http1.Origin,
    proxy: ProxyURL | None,
    target: str = "/v1/models",
    headers: list[tuple[str, str]] | None = None,
) -> tuple[int, bytes]:
    resp = await pool.request(
        origin,
        "GET",
        target,
        headers or [],
        None,
        connect_timeout=WAIT,
        idle_timeout=WAIT,
        proxy=proxy,
    )
    try:
        return resp.status, await read_all(resp)
    finally:
        resp.release()


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def requests_of(up: Upstream) -> bytes:
    return b"".join(up.requests).lower()


# -- through the proxy, on both loops -----------------------------------------------------------


@pytest.mark.anyio
@BOTH_LOOPS
async def test_an_https_upstream_through_a_connect_tunnel(
    server_tls: ssl.SSLContext, client_tls: ssl.SSLContext
) -> None:
    """The proxy sees `CONNECT host:port` and then TLS: never the request,
    never the route's key; the client never resolves the upstream's name."""
    answers = answering(response(b"first"), response(b"second"))
    async with serving(answers, server_tls) as up:
        async with forward_proxy({f"{NAME}:443": ("127.0.0.1", up.port)}) as fwd:
            names = resolver({"proxy.test": ("127.0.0.1", fwd.port)})
            async with opened_pool(resolver=names, tls=client_tls) as pool:
                origin = http1.Origin("https", NAME, None)
                via = ProxyURL("proxy.test", fwd.port)
                auth = [("authorization", f"Bearer {KEY}")]
                assert await get_body(pool, origin, via, headers=auth) == (200, b"first")
                assert await get_body(pool, origin, via, headers=auth) == (200, b"second")
            assert fwd.heads == [
                b"CONNECT fake-upstream.test:443 HTTP/1.1\r\nhost: fake-upstream.test:443\r\n\r\n"
            ]
            assert (fwd.connections, up.connections) == (1, 1)  # the tunnel was kept alive
            assert fwd.tunneled.startswith(b"\x16\x03")  # a TLS handshake record went through
            assert KEY.encode() not in fwd.tunneled
            assert b"authorization" not in fwd.tunneled.lower()
        assert up.requests[0].startswith(b"GET /v1/models HTTP/1.1\r\nhost: fake-upstream.test\r\n")
        assert f"authorization: Bearer {KEY}".encode() in up.requests[0]


@pytest.mark.anyio
@BOTH_LOOPS
async def test_proxy_credentials_go_to_the_proxy_alone(
    server_tls: ssl.SSLContext, client_tls: ssl.SSLContext
) -> None:
    credentials = basic("user", "p@ss:w")
    async with (
        serving(answering(response(b"ok")), server_tls) as up,
        forward_proxy({f"{NAME}:443": ("127.0.0.1", up.port)}, credentials=credentials) as fwd,
        opened_pool(tls=client_tls) as pool,
    ):
        via = ProxyURL.parse(f"http://user:p%40ss%3Aw@127.0.0.1:{fwd.port}")
        assert await get_body(pool, http1.Origin("https", NAME, None), via) == (200, b"ok")
        assert f"proxy-authorization: {basic('user', 'p@ss:w')}".encode() in fwd.heads[0]
        assert b"proxy-authorization" not in requests_of(up)


@pytest.mark.anyio
@BOTH_LOOPS
@pytest.mark.parametrize(
    ("options", "status"),
    [({"credentials": basic("user", "right")}, 407), ({"refuse": 405}, 405)],
    ids=["wrong-credentials", "no-connect-support"],
)
async def test_a_refused_tunnel_is_connect_failed_and_nothing_else_is_sent(
    options: dict[str, Any], status: int, client_tls: ssl.SSLContext
) -> None:
    """No fallback: not direct, not the request in the clear to the proxy."""
    async with serving(answering(response(b"never"))) as up:
        async with (
            forward_proxy({f"{NAME}:443": ("127.0.0.1", up.port)}, **options) as fwd,
            opened_pool(resolver=resolver({}), tls=client_tls) as pool,
        ):
            via = ProxyURL.parse(f"http://user:wrong@127.0.0.1:{fwd.port}")
            auth = [("authorization", f"Bearer {KEY}")]
            with pytest.raises(http1.ConnectFailed, match=str(status)):
                await get_body(pool, http1.Origin("https", NAME, None), via, headers=auth)
            assert len(fwd.heads) == 1
            assert fwd.heads[0].startswith(b"CONNECT fake-upstream.test:443 ")
            assert fwd.tunneled == b""
        assert up.connections == 0


@pytest.mark.anyio
@BOTH_LOOPS
async def test_an_untrusted_certificate_inside_the_tunnel_is_connect_failed(
    server_tls: ssl.SSLContext,
) -> None:
    async with (
        serving(answering(response(b"never")), server_tls) as up,
        forward_proxy({f"{NAME}:443": ("127.0.0.1", up.port)}) as fwd,
        opened_pool(resolver=resolver({})) as pool,  # the system's trust store
    ):
        with pytest.raises(http1.ConnectFailed) as caught:
            await get_body(pool, http1.Origin("https", NAME, None), ProxyURL("127.0.0.1", fwd.port))
        assert isinstance(caught.value.__context__, ssl.SSLError)
        assert up.requests == []


@pytest.mark.anyio
@BOTH_LOOPS
async def test_a_plain_http_upstream_through_the_proxy_in_absolute_form() -> None:
    async with (
        serving(answering(response(b"one"), response(b"two"))) as up,
        forward_proxy({f"{NAME}:8080": ("127.0.0.1", up.port)}) as fwd,
        opened_pool(resolver=resolver({})) as pool,
    ):
        via = ProxyURL.parse(f"http://u:p@127.0.0.1:{fwd.port}")
        origin = http1.Origin("http", NAME, 8080)
        assert await get_body(pool, origin, via, "/v1/models?x=1") == (200, b"one")
        assert await get_body(pool, origin, via) == (200, b"two")
        assert fwd.heads[0].startswith(
            b"GET http://fake-upstream.test:8080/v1/models?x=1 HTTP/1.1\r\n"
            b"host: fake-upstream.test:8080\r\n"
        )
        assert f"proxy-authorization: {basic('u', 'p')}".encode() in fwd.heads[0]
        assert fwd.connections == 1  # kept alive through the proxy
        # the second request, relayed as the client wrote it
        assert up.requests[1].startswith(b"GET http://fake-upstream.test:8080/v1/models HTTP/1.1")


@pytest.mark.anyio
@BOTH_LOOPS
async def test_connections_through_a_proxy_are_pooled_apart(
    server_tls: ssl.SSLContext, client_tls: ssl.SSLContext
) -> None:
    async with serving(answering(response(b"ok")), server_tls) as up:
        hosts = {f"{NAME}:443": ("127.0.0.1", up.port)}
        async with forward_proxy(hosts) as fwd1, forward_proxy(hosts) as fwd2:
            names = resolver({NAME: ("127.0.0.1", up.port)})  # direct, for this test
            async with opened_pool(resolver=names, tls=client_tls) as pool:
                origin = http1.Origin("https", NAME, None)
                for via in [
                    None,
                    ProxyURL("127.0.0.1", fwd1.port),
                    ProxyURL("127.0.0.1", fwd2.port),
                ] * 2:
                    assert await get_body(pool, origin, via) == (200, b"ok")
            assert (fwd1.connections, fwd2.connections, up.connections) == (1, 1, 3)


@pytest.mark.anyio
@BOTH_LOOPS
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
async def test_loopback_upstreams_are_never_proxied(host: str) -> None:
    async with (
        serving(answering(response(b"direct")), host="::1" if host == "::1" else "127.0.0.1") as up,
        forward_proxy({}) as fwd,
        opened_pool() as pool,
    ):
        origin = http1.Origin("http", host, up.port)
        assert await get_body(pool, origin, ProxyURL("127.0.0.1", fwd.port)) == (200, b"direct")
        assert fwd.connections == 0


@pytest.mark.anyio
@BOTH_LOOPS
async def test_the_environments_proxies_when_given_and_no_proxy(
    server_tls: ssl.SSLContext, client_tls: ssl.SSLContext
) -> None:
    async with (
        serving(answering(response(b"ok")), server_tls) as up,
        forward_proxy({f"{NAME}:443": ("127.0.0.1", up.port)}) as fwd,
    ):
        env = {"HTTPS_PROXY": f"http://127.0.0.1:{fwd.port}", "NO_PROXY": "other.test"}
        proxies = EnvProxies.from_env(env)
        async with opened_pool(env_proxies=proxies, resolver=resolver({}), tls=client_tls) as pool:
            assert await get_body(pool, http1.Origin("https", NAME, None), None) == (200, b"ok")
        assert (fwd.connections, up.connections) == (1, 1)
        env["NO_PROXY"] = "other.test, .fake-upstream.test"
        proxies = EnvProxies.from_env(env)
        names = resolver({NAME: ("127.0.0.1", up.port)})  # direct now: resolved here
        async with opened_pool(env_proxies=proxies, resolver=names, tls=client_tls) as pool:
            assert await get_body(pool, http1.Origin("https", NAME, None), None) == (200, b"ok")
        assert (fwd.connections, up.connections) == (1, 2)


@pytest.mark.anyio
@BOTH_LOOPS
async def test_the_environment_is_not_read_unless_given(
    monkeypatch: pytest.MonkeyPatch, client_tls: ssl.SSLContext
) -> None:
    async with forward_proxy({}) as fwd:
        for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
            monkeypatch.setenv(name, f"http://127.0.0.1:{fwd.port}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        async with serving(answering(response(b"direct"))) as up:
            names = resolver({"direct.test": ("127.0.0.1", up.port)})
            async with opened_pool(resolver=names, tls=client_tls) as pool:
                origin = http1.Origin("http", "direct.test", up.port)
                assert await get_body(pool, origin, None) == (200, b"direct")
        assert fwd.connections == 0


# -- which proxy: the sans-IO rules -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://proxy.corp:3128", ProxyURL("proxy.corp", 3128)),
        ("http://Proxy.Corp:3128/", ProxyURL("proxy.corp", 3128)),
        ("proxy.corp:3128", ProxyURL("proxy.corp", 3128)),
        ("http://proxy.corp", ProxyURL("proxy.corp", 80)),
        ("http://[fd00::1]:8080", ProxyURL("fd00::1", 8080)),
        ("http://u:p@proxy.corp:3128", ProxyURL("proxy.corp", 3128, basic("u", "p"))),
        ("http://d%5Cu%40x:p%3Aq%40@p:1", ProxyURL("p", 1, basic("d\\u@x", "p:q@"))),
        ("http://user@p:1", ProxyURL("p", 1, basic("user", ""))),
    ],
)
def test_proxy_urls(text: str, expected: ProxyURL) -> None:
    assert ProxyURL.parse(text) == expected


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("https://proxy.corp:3128", "https:// proxies are not supported"),
        ("socks5://proxy.corp:1080", "socks5:// proxies are not supported"),
        ("http://proxy.corp:3128/path", "scheme, host and port only"),
        ("http://proxy.corp:3128?x=1", "scheme, host and port only"),
        ("http://:3128", "no host"),
        ("http://proxy.corp:99999", "not a proxy URL"),
    ],
)
def test_proxy_urls_refused(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ProxyURL.parse(text)


def test_a_proxy_url_never_shows_its_credentials() -> None:
    proxy = ProxyURL.parse("http://user:secret-pass@proxy.corp:3128")
    assert str(proxy) == "http://<credentials>@proxy.corp:3128"
    assert "secret" not in repr(proxy)
    assert str(ProxyURL.parse("http://proxy.corp:3128")) == "http://proxy.corp:3128"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("LOCALHOST.", True),
        ("api.localhost", True),
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("localhost.example.com", False),
        ("10.0.0.1", False),
        ("::2", False),
        ("api.openai.com", False),
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(
    ("no_proxy", "host", "port", "direct"),
    [
        ("", "api.corp", 443, False),
        ("*", "api.corp", 443, True),
        ("corp", "api.corp", 443, True),
        ("corp", "corp", 443, True),
        ("corp", "notcorp", 443, False),
        (".corp", "api.corp", 443, True),
        (".corp", "corp", 443, True),
        ("*.corp", "a.b.corp", 443, True),
        ("API.Corp.", "api.corp", 443, True),
        ("other, api.corp", "api.corp", 443, True),
        ("other api.corp", "api.corp", 443, True),
        ("api.corp:8443", "api.corp", 443, False),
        ("api.corp:8443", "api.corp", 8443, True),
        ("10.0.0.0/8", "10.1.2.3", 443, True),
        ("10.0.0.0/8", "11.1.2.3", 443, False),
        ("10.0.0.0/8", "ten.corp", 443, False),
        ("192.0.2.7", "192.0.2.7", 443, True),
        ("fd00::/8", "fd12::1", 443, True),
        ("[fd00::1]:443", "fd00::1", 443, True),
        ("[fd00::1]:443", "fd00::1", 80, False),
    ],
)
def test_no_proxy(no_proxy: str, host: str, port: int, direct: bool) -> None:
    assert NoProxy.parse(no_proxy).matches(host, port) is direct


def test_env_proxies_by_scheme_lower_case_first() -> None:
    env = {
        "HTTPS_PROXY": "http://upper:1",
        "https_proxy": "http://lower:2",
        "HTTP_PROXY": "plain:3",
        "NO_PROXY": "skip.test",
    }
    proxies = EnvProxies.from_env(env)
    assert proxies.for_origin(http1.Origin("https", "api.test", None)) == ProxyURL("lower", 2)
    assert proxies.for_origin(http1.Origin("http", "api.test", None)) == ProxyURL("plain", 3)
    assert proxies.for_origin(http1.Origin("https", "skip.test", None)) is None
    assert EnvProxies.from_env({"https_proxy": " ", "HTTP_PROXY": ""}) == EnvProxies()


def test_an_env_proxy_that_cannot_be_used_names_its_variable() -> None:
    with pytest.raises(ValueError, match=r"HTTPS_PROXY: .*\(socks5:// proxies are not supported\)"):
        EnvProxies.from_env({"https_proxy": "socks5://p:1080"})


def test_which_proxy() -> None:
    route = ProxyURL("route", 1)
    env = EnvProxies(https=ProxyURL("env", 2), no_proxy=NoProxy.parse("direct.test"))
    api = http1.Origin("https", "api.test", None)
    assert proxy_for(api, route, env) == route  # the route's own first
    assert proxy_for(api, None, env) == ProxyURL("env", 2)
    assert proxy_for(api, None, None) is None
    assert proxy_for(http1.Origin("http", "api.test", None), None, env) is None  # no HTTP_PROXY
    assert proxy_for(http1.Origin("https", "direct.test", None), None, env) is None
    assert proxy_for(http1.Origin("https", "direct.test", None), route, env) == route
    assert proxy_for(http1.Origin("https", "127.0.0.1", 8443), route, env) is None


def test_connect_request_bytes() -> None:
    assert connect_request(http1.Origin("https", "api.test", None), ProxyURL("p", 1)) == (
        b"CONNECT api.test:443 HTTP/1.1\r\nhost: api.test:443\r\n\r\n"
    )
    assert connect_request(
        http1.Origin("https", "2001:db8::1", 8443), ProxyURL("p", 1, "Basic eDp5")
    ) == (
        b"CONNECT [2001:db8::1]:8443 HTTP/1.1\r\nhost: [2001:db8::1]:8443\r\n"
        b"proxy-authorization: Basic eDp5\r\n\r\n"
    )


# -- the config keys ---------------------------------------------------------------------------


def route_with(**keys: Any) -> dict[str, Any]:
    return {"routes": [{"name": "r", "upstream": "https://api.test/v1", **keys}]}


def test_a_routes_upstream_proxy_is_parsed_and_never_shown_with_its_credentials() -> None:
    config = build_config(
        route_with(upstream_proxy="http://user:s3cret-pw@proxy.corp:3128"), env={}
    )
    assert config.routes[0].upstream_proxy == ProxyURL(
        "proxy.corp", 3128, basic("user", "s3cret-pw")
    )
    shown = json.dumps(describe(config))
    assert "http://<credentials>@proxy.corp:3128" in shown
    assert "s3cret" not in shown
    assert build_config(route_with(), env={}).routes[0].upstream_proxy is None


def test_an_upstream_proxy_that_cannot_be_used_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"routes\[0\]\.upstream_proxy: .*socks5:// proxies"):
        build_config(route_with(upstream_proxy="socks5://proxy.corp:1080"), env={})


def test_the_environments_proxies_are_checked_only_under_trust_env() -> None:
    env = {"HTTPS_PROXY": "socks5://proxy.corp:1080"}
    assert build_config(route_with(), env=env).server.trust_env is False
    with pytest.raises(ConfigError, match=r"server\.trust_env: HTTPS_PROXY: .*socks5://"):
        build_config({**route_with(), "server": {"trust_env": True}}, env=env)


def test_the_server_keys_of_the_client_and_their_defaults() -> None:
    server = build_config(route_with(), env={}).server
    assert (
        server.trust_env,
        server.upstream_keepalive_seconds,
        server.upstream_max_connections_per_origin,
    ) == (False, 30.0, 512)


@pytest.mark.anyio
async def test_the_transport_gets_the_server_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://env-proxy.corp:3128")
    monkeypatch.delenv("https_proxy", raising=False)
    server = ServerModel(
        upstream_keepalive_seconds=7.5, upstream_max_connections_per_origin=3, trust_env=True
    )
    transport = open_transport(server)
    assert isinstance(transport, BuiltinTransport)
    await transport.start()
    try:
        pool = transport._pool
        assert pool is not None
        assert (pool._keepalive, pool._max_per_origin) == (7.5, 3)
        assert pool._env_proxies == EnvProxies(https=ProxyURL("env-proxy.corp", 3128))
    finally:
        await transport.close()
    untrusting = open_transport(ServerModel())
    assert isinstance(untrusting, BuiltinTransport)
    assert untrusting._env_proxies is None
