"""What a client may hold on a connection, through real sockets to a real
`python -m proxy serve` process (proxy/http_server.py): the time its head
and body may take (408, or a close), the number and bytes of its headers
(431), and a declared Content-Length over `limits.max_body_bytes` (413 at
once). Each refusal comes in the door's error shape, closes the connection,
and sends nothing upstream. The timeouts here are short and the waits long,
so nothing depends on the machine's speed."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.e2e.test_shutdown import Serve
from tests.harness import FakeUpstream

TIMEOUT = 1.0  # server.request_header_timeout and request_body_timeout here
WAIT = 15.0  # how long a client waits for an answer that must come
BODY_LIMIT = 2048

CHAT = b"/v1/chat/completions"
MESSAGES = b"/v1/messages"
PASSTHROUGH = b"/v1/embeddings"


def bounded_config(upstream: FakeUpstream, **server: Any) -> dict[str, Any]:
    return {
        "server": {
            "request_header_timeout": TIMEOUT,
            "request_body_timeout": TIMEOUT,
            **server,
        },
        "limits": {"max_body_bytes": BODY_LIMIT},
        "routes": [{"name": "test", "models": ["*"], "upstream": upstream.url}],
    }


@pytest.fixture(scope="module")
def proxy(
    upstream_server: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Serve]:
    tmp = tmp_path_factory.mktemp("client-bounds")
    server = Serve(tmp, bounded_config(upstream_server)).start()
    try:
        yield server
    finally:
        server.stop()


# -- a raw client ----------------------------------------------------------------------


def connect(proxy: Serve) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port))
    sock.settimeout(WAIT)
    return sock


def send(sock: socket.socket, data: bytes) -> None:
    """Send, as far as the proxy reads: a proxy that has answered and
    closed may refuse the rest, which is what some tests are after."""
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        sock.sendall(data)


def read_to_close(sock: socket.socket) -> bytes:
    """Everything the proxy sends until it closes the connection; an
    AssertionError if it keeps it open for WAIT seconds."""
    chunks: list[bytes] = []
    while True:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            raise AssertionError(
                f"the connection is still open: {b''.join(chunks)[:200]!r}"
            ) from None
        except ConnectionResetError:
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)


def parse(answer: bytes) -> tuple[int, dict[str, str], Any]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split(" ")[1]), headers, orjson.loads(body)


def openai_code(body: Any) -> str:
    code: str = body["error"]["code"]
    return code


def anthropic_type(body: Any) -> str:
    assert body["type"] == "error"
    kind: str = body["error"]["type"]
    return kind


def post_head(path: bytes, length: int, *extra: bytes) -> bytes:
    return b"".join(
        [
            b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n",
            b"Content-Length: %d\r\n" % length,
            *(line + b"\r\n" for line in extra),
            b"\r\n",
        ]
    )


# -- the head's time ---------------------------------------------------------------------


def test_a_connection_that_sends_nothing_is_closed(proxy: Serve) -> None:
    with connect(proxy) as sock:
        assert read_to_close(sock) == b""


def test_unfinished_headers_get_a_408_and_a_close(proxy: Serve, upstream: FakeUpstream) -> None:
    with connect(proxy) as sock:
        send(sock, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n")
        status, headers, body = parse(read_to_close(sock))
    assert (status, openai_code(body)) == (408, "request_timeout")
    assert headers["connection"] == "close"
    assert upstream.requests == []


def test_unfinished_headers_on_the_messages_door_get_its_shape(proxy: Serve) -> None:
    with connect(proxy) as sock:
        send(sock, b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n")
        status, _, body = parse(read_to_close(sock))
    assert status == 408
    assert anthropic_type(body) == "invalid_request_error"
    assert "request_header_timeout" in body["error"]["message"]


def test_unfinished_headers_after_a_keep_alive_response_get_a_408(proxy: Serve) -> None:
    with connect(proxy) as sock:
        send(sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")
        send(sock, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")
        status, _, body = parse(read_to_close(sock))
    assert (status, openai_code(body)) == (408, "request_timeout")


def test_a_head_trickled_one_byte_at_a_time_still_times_out(proxy: Serve) -> None:
    # the deadline runs from the connection's opening, not from the last byte
    with connect(proxy) as sock:
        started = time.monotonic()
        send(sock, b"GET /v1/models HTTP/1.1\r\n")
        while time.monotonic() - started < WAIT:
            send(sock, b"X")
            sock.settimeout(0.1)
            try:
                if sock.recv(1, socket.MSG_PEEK):
                    break
            except TimeoutError:
                continue
        sock.settimeout(WAIT)
        status, _, _ = parse(read_to_close(sock))
    assert status == 408


# -- the body's time ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "shape"),
    [(CHAT, "openai"), (PASSTHROUGH, "openai"), (MESSAGES, "anthropic")],
)
def test_a_stalled_body_gets_a_408_in_the_doors_shape(
    proxy: Serve, upstream: FakeUpstream, path: bytes, shape: str
) -> None:
    with connect(proxy) as sock:
        send(sock, post_head(path, 1000) + b'{"model"')
        status, headers, body = parse(read_to_close(sock))
    assert status == 408
    assert headers["connection"] == "close"
    if shape == "openai":
        assert openai_code(body) == "request_timeout"
    else:
        assert anthropic_type(body) == "invalid_request_error"
    assert upstream.requests == []


def test_a_stalled_chunked_body_gets_a_408(proxy: Serve, upstream: FakeUpstream) -> None:
    head = b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    with connect(proxy) as sock:
        send(sock, head + b'8\r\n{"model"\r\n')
        status, _, body = parse(read_to_close(sock))
    assert (status, openai_code(body)) == (408, "request_timeout")
    assert upstream.requests == []


def test_a_slow_but_steady_body_is_not_cut(proxy: Serve, upstream: FakeUpstream) -> None:
    # the body takes longer than the timeout in all, with no gap near it
    payload = orjson.dumps({"model": "m", "input": "x" * 200})
    pieces = [payload[i : i + 8] for i in range(0, len(payload), 8)]
    with connect(proxy) as sock:
        started = time.monotonic()
        send(sock, post_head(PASSTHROUGH, len(payload)))
        for piece in pieces:
            send(sock, piece)
            time.sleep(TIMEOUT / 10)
        assert time.monotonic() - started > 2 * TIMEOUT
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert [r.body for r in upstream.requests] == [payload]


# -- the head's size ---------------------------------------------------------------------


def many_headers(path: bytes, count: int, size: int = 100, *extra: bytes) -> bytes:
    line = b"X-H: " + b"a" * (size - 5) + b"\r\n"
    return b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n" + b"".join(extra) + line * count + b"\r\n"


def test_more_headers_than_max_header_count_is_431(proxy: Serve, upstream: FakeUpstream) -> None:
    with connect(proxy) as sock:
        send(sock, many_headers(b"/v1/models", 101))
        status, headers, body = parse(read_to_close(sock))
    assert (status, openai_code(body)) == (431, "request_header_fields_too_large")
    assert headers["connection"] == "close"
    assert upstream.requests == []


def test_max_header_count_headers_pass(proxy: Serve, upstream: FakeUpstream) -> None:
    with connect(proxy) as sock:
        # Host, Connection and 98 more: 100
        send(sock, many_headers(b"/v1/models", 98, 100, b"Connection: close\r\n"))
        answer = read_to_close(sock)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert len(upstream.requests) == 1


def test_headers_over_max_head_bytes_are_431(proxy: Serve, upstream: FakeUpstream) -> None:
    # 70 headers of 1,000 bytes: each under max_header_bytes, 70 KB in all
    with connect(proxy) as sock:
        send(sock, many_headers(b"/v1/models", 70, 1000))
        status, _, body = parse(read_to_close(sock))
    assert (status, openai_code(body)) == (431, "request_header_fields_too_large")
    assert upstream.requests == []


def test_a_flood_of_headers_is_431_in_the_messages_shape(
    proxy: Serve, upstream: FakeUpstream
) -> None:
    # 20,000 headers of about 1 KB (20 MB), refused early
    with connect(proxy) as sock:
        send(sock, many_headers(MESSAGES, 20_000, 1000))
        status, _, body = parse(read_to_close(sock))
    assert status == 431
    assert anthropic_type(body) == "invalid_request_error"
    assert upstream.requests == []


def test_an_endless_header_line_is_431_before_it_ends(proxy: Serve) -> None:
    with connect(proxy) as sock:
        send(sock, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 300_000)
        status, _, body = parse(read_to_close(sock))
    assert (status, openai_code(body)) == (431, "request_header_fields_too_large")


def test_a_huge_request_target_is_431(proxy: Serve) -> None:
    with connect(proxy) as sock:
        send(sock, b"GET /v1/models?q=" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        status, _, body = parse(read_to_close(sock))
    assert (status, openai_code(body)) == (431, "request_header_fields_too_large")


# -- the declared body -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "shape"),
    [(CHAT, "openai"), (PASSTHROUGH, "openai"), (MESSAGES, "anthropic")],
)
def test_a_content_length_over_max_body_bytes_is_413_at_once(
    proxy: Serve, upstream: FakeUpstream, path: bytes, shape: str
) -> None:
    with connect(proxy) as sock:
        # far below the timeouts: the answer cannot be a timeout's
        sock.settimeout(TIMEOUT / 2)
        send(sock, post_head(path, 50_000_000))
        status, headers, body = parse(read_to_close(sock))
    assert status == 413
    assert headers["connection"] == "close"
    if shape == "openai":
        assert openai_code(body) == "request_too_large"
    else:
        assert anthropic_type(body) == "request_too_large"
    assert upstream.requests == []


def test_no_100_continue_for_a_body_over_max_body_bytes(proxy: Serve) -> None:
    with connect(proxy) as sock:
        send(sock, post_head(CHAT, BODY_LIMIT + 1, b"Expect: 100-continue"))
        answer = read_to_close(sock)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"100 Continue" not in answer


def test_a_content_length_at_max_body_bytes_is_read(proxy: Serve, upstream: FakeUpstream) -> None:
    payload = orjson.dumps({"model": "m", "input": "x" * 100}).ljust(BODY_LIMIT)
    with connect(proxy) as sock:
        send(sock, post_head(PASSTHROUGH, len(payload)) + payload)
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert len(upstream.requests) == 1


# -- with --workers ----------------------------------------------------------------------


def test_the_bounds_hold_in_every_worker(upstream: FakeUpstream, tmp_path: Path) -> None:
    config = bounded_config(upstream)
    config["store"] = {"url": f"sqlite:///{tmp_path}/turns.db"}
    server = Serve(tmp_path, config, "--workers", "2").start()
    try:
        # a new connection each time: the workers take turns accepting
        for _ in range(4):
            with connect(server) as sock:
                send(sock, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")
                status, _, _ = parse(read_to_close(sock))
            assert status == 408
            with connect(server) as sock:
                send(sock, many_headers(b"/v1/models", 101))
                status, _, _ = parse(read_to_close(sock))
            assert status == 431
            with connect(server) as sock:
                send(sock, post_head(CHAT, 50_000_000))
                status, _, _ = parse(read_to_close(sock))
            assert status == 413
    finally:
        server.stop()
    assert upstream.requests == []
