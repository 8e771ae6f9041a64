"""Requests refused by the connection's bounds (proxy/http_server.py) get the
access line and the request metrics every request gets, with the status
sent; a request that is not HTTP/1.1 (a control character in a header value)
gets a 400 in the door's JSON shape, not uvicorn's plain text. Through real
sockets to a real `python -m proxy serve` process."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_client_bounds import (
    BODY_LIMIT,
    anthropic_type,
    bounded_config,
    connect,
    openai_code,
    parse,
    post_head,
    read_to_close,
    send,
)
from tests.e2e.test_shutdown import Serve
from tests.harness import FakeUpstream
from tests.stores.servers import wait_until


@pytest.fixture
def proxy(upstream: FakeUpstream, tmp_path: Path) -> Iterator[Serve]:
    server = Serve(tmp_path, bounded_config(upstream)).start()
    try:
        yield server
    finally:
        server.stop()


def access_lines(proxy: Serve, path: str) -> list[str]:
    return [
        line
        for line in proxy.output().splitlines()
        if "proxy.request:" in line and f" path={path} " in line
    ]


def requests_total(proxy: Serve, endpoint: str, status: int) -> float:
    text = httpx.get(f"{proxy.base}/metrics").text
    labels = f'endpoint="{endpoint}",route="-",status="{status}"'
    pattern = r"reasoning_proxy_requests_total\{" + re.escape(labels) + r"\} ([0-9.]+)"
    found = re.search(pattern, text)
    return float(found.group(1)) if found else 0.0


def test_a_413_at_the_head_has_its_access_line_and_is_counted(
    proxy: Serve, upstream: FakeUpstream
) -> None:
    with connect(proxy) as sock:
        send(sock, post_head(b"/v1/chat/completions", BODY_LIMIT + 1))
        status, _, body = parse(read_to_close(sock))
    assert (status, openai_code(body)) == (413, "request_too_large")
    wait_until(lambda: access_lines(proxy, "/v1/chat/completions"), 10, "the access line")
    (line,) = access_lines(proxy, "/v1/chat/completions")
    assert "POST /v1/chat/completions 413" in line
    assert "error=request_too_large" in line
    assert requests_total(proxy, "chat.completions", 413) == 1
    assert upstream.requests == []


def test_a_431_and_a_head_timeout_have_their_access_lines(proxy: Serve) -> None:
    with connect(proxy) as sock:
        many = b"".join(b"X-H%d: v\r\n" % n for n in range(150))
        send(sock, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n")
        status, _, _ = parse(read_to_close(sock))
    assert status == 431
    with connect(proxy) as sock:
        send(sock, b"GET /v1/embeddings?key=sk-in-query HTTP/1.1\r\nHost: x\r\n")
        status, _, _ = parse(read_to_close(sock))
    assert status == 408
    wait_until(lambda: access_lines(proxy, "/v1/embeddings"), 10, "the access line")
    assert "GET /v1/models 431" in access_lines(proxy, "/v1/models")[0]
    assert "GET /v1/embeddings 408" in access_lines(proxy, "/v1/embeddings")[0]
    assert "sk-in-query" not in proxy.output()
    assert requests_total(proxy, "passthrough", 431) == 1
    assert requests_total(proxy, "passthrough", 408) == 1


def test_a_stalled_body_has_one_access_line_with_its_408(
    proxy: Serve, upstream: FakeUpstream
) -> None:
    with connect(proxy) as sock:
        send(sock, post_head(b"/v1/chat/completions", 100) + b'{"model": ')
        status, _, _ = parse(read_to_close(sock))
    assert status == 408
    wait_until(lambda: access_lines(proxy, "/v1/chat/completions"), 10, "the access line")
    lines = access_lines(proxy, "/v1/chat/completions")
    assert len(lines) == 1, lines
    assert "POST /v1/chat/completions 408" in lines[0]
    assert upstream.requests == []


@pytest.mark.parametrize(
    ("path", "anthropic"), [(b"/v1/chat/completions", False), (b"/v1/messages", True)]
)
def test_a_control_character_in_a_header_value_is_a_400_in_the_doors_shape(
    proxy: Serve, upstream: FakeUpstream, path: bytes, anthropic: bool
) -> None:
    with connect(proxy) as sock:
        send(sock, post_head(path, 2, b"X-Reasoning-Effort: hi\x00gh") + b"{}")
        status, headers, body = parse(read_to_close(sock))
    assert status == 400
    assert headers["content-type"] == "application/json"
    if anthropic:
        assert anthropic_type(body) == "invalid_request_error"
    else:
        assert openai_code(body) == "invalid_http_request"
    wait_until(lambda: access_lines(proxy, path.decode()), 10, "the access line")
    assert f"POST {path.decode()} 400" in access_lines(proxy, path.decode())[0]
    assert upstream.requests == []
