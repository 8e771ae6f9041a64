"""The proxy behaves the same over either upstream client
(`server.upstream_client: builtin` or `aiohttp`), through real sockets:
raw upstreams that break their answers in ways the transport contract
leaves to the client's HTTP parser, and the doors and pass-through above
them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.casefiles import chunk, read_stream
from tests.harness import running_proxy, sse
from tests.http1_servers import ForwardProxy
from tests.transport.servers import Conn, ServerThread, chunked_head, response
from tests.transport.servers import chunk as http_chunk

CLIENTS = ["builtin", "aiohttp"]
CLIENT_KEY = {"Authorization": "Bearer sk-client"}


@pytest.fixture(params=CLIENTS)
def client(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def warnings(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.WARNING, logger="proxy.upstream")
    return caplog


def config(client: str, upstream: str, **server: Any) -> dict[str, Any]:
    route = {"name": "r", "models": ["*"], "upstream": upstream, "api_key": "sk-route"}
    return {"routes": [route], "server": {"upstream_client": client, **server}}


def upstream_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "proxy.upstream"]


# -- a body the upstream's framing breaks after it started -------------------------------------

FIRST = sse(chunk({"content": "partial"}))


async def bad_chunk_size_later(conn: Conn) -> None:
    """A first event in a chunk, then (in a later packet) a chunk size that is
    not hex: the body can no longer be read."""
    while await conn.request() is not None:
        await conn.send(chunked_head("Content-Type: text/event-stream") + http_chunk(FIRST))
        await asyncio.sleep(0.3)
        await conn.send(b"zz\r\nnot a chunk\r\n")


@pytest.mark.parametrize("path", ["/chat/completions", "/models"], ids=["chat", "passthrough"])
def test_a_malformed_chunk_mid_body_ends_the_answer_at_once(
    client: str, warnings: pytest.LogCaptureFixture, path: str
) -> None:
    with ServerThread(bad_chunk_size_later) as up:
        # one upstream slot: the failed request must give it back
        server = {"upstream_max_in_flight": 1, "upstream_queue_timeout": 0.5}
        with running_proxy(config(client, up.url, **server)) as proxy:
            for _ in range(2):
                started = time.monotonic()
                if path == "/models":
                    with pytest.raises(httpx.RemoteProtocolError):
                        httpx.get(proxy.url + path, headers=CLIENT_KEY, timeout=10)
                else:
                    payload = {"model": "m", "stream": True, "messages": [{"role": "user"}]}
                    r = httpx.post(proxy.url + path, json=payload, headers=CLIENT_KEY, timeout=10)
                    assert r.status_code == 200
                    stream = read_stream(r.content)
                    assert stream["content"] == "partial"
                    assert [e["code"] for e in stream["errors"]] == ["upstream_bad_response"]
                    assert not stream["done"]
                assert time.monotonic() - started < 3  # not the client's timeout
    assert (
        upstream_lines(warnings)
        == [f"upstream 127.0.0.1:{up.port} failed mid-response: bad_response"] * 2
    )


# -- header bytes ------------------------------------------------------------------------------


def raw_exchange(port: int, head: bytes, body: bytes) -> bytes:
    """One request over a raw socket (header bytes exactly as given); the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        answer = b""
        while data := sock.recv(65536):
            answer += data
    return answer


ANSWER = json.dumps(
    {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
    }
).encode()


async def answer_json(conn: Conn) -> None:
    while await conn.request() is not None:
        await conn.send(response(ANSWER, headers=["Content-Type: application/json"]))


@pytest.mark.parametrize(
    "path", [b"/v1/chat/completions", b"/v1/models/m"], ids=["chat", "passthrough"]
)
def test_utf_8_header_bytes_reach_the_upstream_unchanged(client: str, path: bytes) -> None:
    value = "josé → ünïcode".encode()  # lower case: the check reads it so
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
    head = (
        b"POST " + path + b" HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer sk-client\r\nX-Title: " + value + b"\r\n"
    )
    with ServerThread(answer_json) as up, running_proxy(config(client, up.url)) as proxy:
        answer = raw_exchange(proxy.port, head, body)
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    (sent,) = up.requests
    assert b"\r\nx-title: " + value + b"\r\n" in sent.lower()


# -- request slots -----------------------------------------------------------------------------


async def first_holds_the_line(conn: Conn) -> None:
    """The first streamed answer sends one event and then nothing (its
    request keeps its slot); other requests get a whole answer."""
    while (request := await conn.request()) is not None:
        if b'"stream": true' in request or b'"stream":true' in request:
            await conn.send(chunked_head("Content-Type: text/event-stream") + http_chunk(FIRST))
            await conn.until_closed()
            return
        await conn.send(response(ANSWER, headers=["Content-Type: application/json"]))


def test_the_per_origin_limit_holds_a_request_in_the_same_line(client: str) -> None:
    server = {"upstream_max_connections_per_origin": 1, "upstream_queue_timeout": 0.5}
    payload = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    chat = "/chat/completions"
    with (
        ServerThread(first_holds_the_line) as up,
        running_proxy(config(client, up.url, **server)) as proxy,
        httpx.Client(timeout=10, headers=CLIENT_KEY) as one,
        httpx.Client(timeout=10, headers=CLIENT_KEY) as two,
        one.stream("POST", proxy.url + chat, json={**payload, "stream": True}) as held,
    ):
        assert held.status_code == 200
        events = held.iter_raw()  # kept: a dropped iterator closes the stream
        next(events)  # the first event: the request holds its slot
        started = time.monotonic()
        r = two.post(proxy.url + chat, json=payload)
        assert r.status_code == 503, r.text
        assert 0.5 <= time.monotonic() - started < 5  # it waited its turn, and no longer
        assert r.json()["error"]["code"] == "upstream_busy"
        assert r.headers["retry-after"] == "1"
        assert len(up.requests) == 1  # nothing sent for the second


# -- a kept-alive connection the upstream closed -----------------------------------------------


def closes_its_first_connection_on_the_second_request(how: str) -> Any:
    """Answers every request, except the second on the first connection: that
    one is read, then the connection closed (a FIN, or a reset) unanswered,
    as an upstream does whose idle timer fired as the request went out."""

    async def handler(conn: Conn) -> None:
        served = 0
        while await conn.request() is not None:
            served += 1
            if conn.index == 1 and served == 2:
                if how == "reset":
                    reset(conn)
                return
            await conn.send(response(ANSWER, headers=["Content-Type: application/json"]))

    return handler


def reset(conn: Conn) -> None:
    sock = conn.writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.writer.transport.abort()


@pytest.mark.parametrize("how", ["close", "reset"])
@pytest.mark.parametrize(
    "path", ["/chat/completions", "/audio/speech"], ids=["chat", "passthrough"]
)
def test_a_post_on_a_connection_the_upstream_closed_is_sent_again_once(
    client: str, how: str, path: str
) -> None:
    payload = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with (
        ServerThread(closes_its_first_connection_on_the_second_request(how)) as up,
        running_proxy(config(client, up.url)) as proxy,
        httpx.Client(timeout=10, headers=CLIENT_KEY) as http,
    ):
        for _ in range(2):
            r = http.post(proxy.url + path, json=payload)
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["message"]["content"] == "ok"
    assert (up.connections, len(up.requests)) == (2, 3)


async def resets_every_connection(conn: Conn) -> None:
    await conn.request()
    reset(conn)


def test_a_get_on_a_new_connection_is_not_sent_again(client: str) -> None:
    with (
        ServerThread(resets_every_connection) as up,
        running_proxy(config(client, up.url)) as proxy,
    ):
        r = httpx.get(proxy.url + "/audio/voices", headers=CLIENT_KEY, timeout=10)
    assert r.status_code == 502, r.text
    assert r.json()["error"]["code"] == "upstream_unreachable"
    assert len(up.requests) == 1


# -- an egress proxy ---------------------------------------------------------------------------

NAME = "upstream.test"  # only the egress proxy knows it
PROXY_CREDENTIALS = "Basic dXNlcjpwYXNz"  # user:pass


@contextlib.contextmanager
def egress_proxy(port: int, **options: Any) -> Iterator[ForwardProxy]:
    """A ForwardProxy, in a thread of its own, that sends NAME (80, 443) to `port`."""
    hosts = {f"{NAME}:80": ("127.0.0.1", port), f"{NAME}:443": ("127.0.0.1", port)}
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    forward = ForwardProxy(hosts, **options)
    asyncio.run_coroutine_threadsafe(forward.start(), loop).result(10)
    try:
        yield forward
    finally:
        asyncio.run_coroutine_threadsafe(forward.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def behind(client: str, upstream: str, proxy_port: int) -> dict[str, Any]:
    data = config(client, upstream)
    data["routes"][0]["upstream_proxy"] = f"http://user:pass@127.0.0.1:{proxy_port}"
    return data


def test_a_plain_http_upstream_through_a_proxy_that_wants_credentials(client: str) -> None:
    payload = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with (
        ServerThread(answer_json) as up,
        egress_proxy(up.port, credentials=PROXY_CREDENTIALS) as forward,
        running_proxy(behind(client, f"http://{NAME}/v1", forward.port)) as proxy,
    ):
        r = httpx.post(proxy.url + "/chat/completions", json=payload, headers=CLIENT_KEY)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == "ok"
    (head,) = forward.heads
    assert head.startswith(b"POST http://upstream.test/v1/chat/completions HTTP/1.1\r\n")
    assert f"\r\nproxy-authorization: {PROXY_CREDENTIALS}\r\n".lower().encode() in head.lower()
    (sent,) = up.requests  # the proxy's credentials stop at the proxy
    assert b"proxy-authorization" not in sent.lower()


def test_a_tunnel_the_proxy_refuses_is_a_502_unreachable(
    client: str, warnings: pytest.LogCaptureFixture
) -> None:
    payload = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with (
        ServerThread(answer_json) as up,
        egress_proxy(up.port, credentials="Basic b3RoZXI6b25l") as forward,
        running_proxy(behind(client, f"https://{NAME}/v1", forward.port)) as proxy,
    ):
        r = httpx.post(proxy.url + "/chat/completions", json=payload, headers=CLIENT_KEY)
    assert r.status_code == 502, r.text
    error = r.json()["error"]
    assert (error["code"], error["message"]) == (
        "upstream_unreachable",
        "The upstream could not be reached (no route).",
    )
    assert [h.split(b"\r\n")[0] for h in forward.heads] == [b"CONNECT upstream.test:443 HTTP/1.1"]
    assert up.requests == []
    assert upstream_lines(warnings) == [
        f"upstream {NAME}:443 failed before a response: unreachable"
    ]


# -- a client that expects 100 Continue --------------------------------------------------------


@pytest.mark.parametrize(
    "path", [b"/v1/chat/completions", b"/v1/audio/speech"], ids=["chat", "passthrough"]
)
def test_a_request_that_expected_100_continue_is_answered(client: str, path: bytes) -> None:
    """curl sends `Expect: 100-continue` before a large body. The proxy reads
    the whole body (its server sent the client the 100), so the expectation
    stops there: the upstream (which sends no 100 of its own here) gets the
    request and body at once, and the client its answer."""
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
    head = (
        b"POST " + path + b" HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer sk-client\r\nExpect: 100-continue\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
    )
    with (
        ServerThread(answer_json) as up,
        running_proxy(config(client, up.url)) as proxy,
        socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock,
    ):
        sock.sendall(head)
        assert sock.recv(65536).startswith(b"HTTP/1.1 100 Continue\r\n")
        sock.sendall(body)
        answer = b""
        while data := sock.recv(65536):  # a timeout here: the request hangs
            answer += data
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    (sent,) = up.requests
    assert b"\r\nexpect:" not in sent.lower()
    assert json.loads(sent.split(b"\r\n\r\n", 1)[1]) == json.loads(body)
