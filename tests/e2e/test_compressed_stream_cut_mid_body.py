"""A streamed chat completion whose gzip body (close-delimited) the upstream
cuts in the middle of its compressed data is a broken connection, as a cut
plain body is: the client gets the `upstream_disconnected` error event and
no [DONE], the turn is stored incomplete, and `upstream_errors_total`
counts `disconnected`. A body whose compressed data is corrupt is a bad
response (`upstream_bad_response`, counted `malformed`). Real sockets, the
real server, over either upstream client."""

from __future__ import annotations

import asyncio
import logging
import zlib
from typing import Any

import httpx
import pytest

from tests.casefiles import chunk, read_stream
from tests.harness import running_proxy, sse
from tests.transport.servers import Conn, ServerThread

CLIENT_KEY = {"Authorization": "Bearer sk-client"}
HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Content-Encoding: gzip\r\nConnection: close\r\n\r\n"
)


@pytest.fixture(params=["builtin", "aiohttp"])
def client(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def config(client: str, upstream: str) -> dict[str, Any]:
    route = {"name": "gz", "models": ["*"], "upstream": upstream, "api_key": "sk-route"}
    return {"routes": [route], "server": {"upstream_client": client}}


def first_then(rest: str) -> tuple[bytes, bytes]:
    """A gzip body in two writes: one whole event (flushed), then by `rest`:
    the next event's compressed bytes cut at their half, or bytes that are
    not deflate data at all."""
    compressor = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    body = compressor.compress(sse(chunk({"role": "assistant", "content": "partial"})))
    body += compressor.flush(zlib.Z_SYNC_FLUSH)
    if rest == "corrupt":
        return body, b"\xff" * 64
    second = compressor.compress(sse(chunk({"content": " and more " * 50}))) + compressor.flush()
    return body, second[: len(second) // 2]


def errors_counted(base: str, kind: str) -> float:
    name = f'reasoning_proxy_upstream_errors_total{{kind="{kind}",route="gz"}}'
    for line in httpx.get(base + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize(
    ("rest", "code", "kind", "cause"),
    [
        ("cut", "upstream_disconnected", "disconnected", "reset"),
        ("corrupt", "upstream_bad_response", "malformed", "bad_response"),
    ],
)
def test_a_gzip_stream_cut_or_corrupt_mid_body(
    client: str, caplog: pytest.LogCaptureFixture, rest: str, code: str, kind: str, cause: str
) -> None:
    caplog.set_level(logging.WARNING, logger="proxy.upstream")
    first, then = first_then(rest)

    async def handler(conn: Conn) -> None:
        if await conn.request() is not None:
            await conn.send(HEAD + first)
            await asyncio.sleep(0.1)
            await conn.send(then)  # and close

    with ServerThread(handler) as up, running_proxy(config(client, up.url)) as proxy:
        payload = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        r = httpx.post(
            f"{proxy.url}/chat/completions", json=payload, headers=CLIENT_KEY, timeout=30
        )
        stored = httpx.get(
            f"{proxy.url}/conversations/{r.headers['x-conversation-id']}",
            headers=CLIENT_KEY,
            timeout=10,
        ).json()
        counted = errors_counted(proxy.base, kind)
    assert r.status_code == 200
    stream = read_stream(r.content)
    assert stream["content"] == "partial"
    assert [e["code"] for e in stream["errors"]] == [code]
    assert not stream["done"]
    assert stored["turns"][0]["complete"] is False
    assert counted == 1
    lines = [rec.getMessage() for rec in caplog.records if rec.name == "proxy.upstream"]
    assert lines == [f"upstream 127.0.0.1:{up.port} failed mid-response: {cause}"]
