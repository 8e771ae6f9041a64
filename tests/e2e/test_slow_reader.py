"""A client that stops reading its answer, through real sockets to a real
`python -m proxy serve` process: once nothing could be written to it for
`server.response_send_timeout`, the proxy closes its connection, lets go of
the upstream request (the upstream sees the close) and stores the turn cut
short (`complete: false`). A client that reads slowly but keeps reading is
not cut. Timeouts here are short and waits long, so nothing depends on the
machine's speed."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.e2e.test_shutdown import Serve
from tests.harness import FakeUpstream, Stream
from tests.stores.servers import wait_until

SEND_TIMEOUT = 1.0  # server.response_send_timeout here
WAIT = 20.0  # how long the test waits for what must happen
KEY = "sk-slow-reader"
# enough answer to fill the proxy's send buffer and the client's receive
# buffer many times over (a few MB on loopback)
CHUNK_TEXT = "x" * 4000
CHUNKS = 6000


def delta(content: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-slow",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "fake-model",
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}],
    }


def long_stream() -> Stream:
    first = {**delta(""), "choices": [{"index": 0, "delta": {"reasoning_content": "plan"}}]}
    return Stream([first, *(delta(CHUNK_TEXT) for _ in range(CHUNKS))])


@pytest.fixture
def proxy(upstream_server: FakeUpstream, tmp_path: Path) -> Iterator[Serve]:
    upstream_server.reset()
    config = {
        "server": {"response_send_timeout": SEND_TIMEOUT},
        "routes": [{"name": "test", "models": ["*"], "upstream": upstream_server.url}],
    }
    server = Serve(tmp_path, config).start()
    try:
        yield server
    finally:
        server.stop()


def stalled_client(proxy: Serve, conversation: str) -> socket.socket:
    """A client that sends a streamed chat request, then reads nothing."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", proxy.port))
    body = orjson.dumps(
        {"model": "fake-model", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    )
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {KEY}\r\nX-Conversation-Id: {conversation}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    return sock


def stored_turns(proxy: Serve, conversation: str) -> list[dict[str, Any]]:
    answer = httpx.get(
        f"{proxy.base}/v1/conversations/{conversation}",
        headers={"Authorization": f"Bearer {KEY}"},
    )
    if answer.status_code == 404:
        return []
    turns: list[dict[str, Any]] = answer.json()["turns"]
    return turns


def test_a_client_that_stops_reading_is_let_go(proxy: Serve, upstream_server: FakeUpstream) -> None:
    upstream_server.script(long_stream())
    sock = stalled_client(proxy, "stalled")
    try:
        # the upstream sees the proxy close its request once the client's
        # side stayed full for the timeout
        assert upstream_server.disconnected.wait(WAIT), "the upstream request was held"
        wait_until(lambda: stored_turns(proxy, "stalled"), WAIT, "the stored turn")
        (turn,) = stored_turns(proxy, "stalled")
        assert turn["complete"] is False
        assert [b["thought"] for b in turn["blocks"]] == ["plan"]
        # the client's connection is closed: what it reads now ends, short
        sock.settimeout(WAIT)
        received = 0
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            try:
                data = sock.recv(1 << 20)
            except ConnectionResetError:
                break
            if not data:
                break
            received += len(data)
        assert received < CHUNKS * len(CHUNK_TEXT)
    finally:
        sock.close()
    assert "stopped reading" in proxy.output()
    assert KEY not in proxy.output()
    # the proxy still serves
    assert httpx.get(f"{proxy.base}/healthz").status_code == 200


def test_a_client_that_reads_slowly_is_not_cut(proxy: Serve, upstream_server: FakeUpstream) -> None:
    upstream_server.script(Stream([delta(CHUNK_TEXT) for _ in range(1500)]))
    sock = stalled_client(proxy, "slow")
    sock.settimeout(WAIT)
    received = b""
    started = time.monotonic()
    try:
        # a pause shorter than the timeout between reads, for longer than the
        # timeout in all: each read lets the proxy write again
        while not received.endswith(b"0\r\n\r\n"):
            data = sock.recv(65536)
            if not data:
                break
            received += data
            if time.monotonic() - started < 3 * SEND_TIMEOUT:
                time.sleep(SEND_TIMEOUT / 4)
    finally:
        sock.close()
    assert time.monotonic() - started > SEND_TIMEOUT  # the pauses added up past it
    assert b"data: [DONE]" in received
    assert received.count(CHUNK_TEXT.encode()) == 1500
    # never let go: no "stopped reading", and the stored turn is whole (the
    # upstream's connection itself may close once [DONE] is in: on a loaded
    # machine its last chunk can come after the client's close)
    assert "stopped reading" not in proxy.output()
    wait_until(lambda: stored_turns(proxy, "slow"), WAIT, "the stored turn")
    (turn,) = stored_turns(proxy, "slow")
    assert turn["complete"] is True
