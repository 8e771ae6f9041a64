"""Header bytes go through the proxy unchanged: a raw socket client sends a
header value with a byte above 0x7F, and a raw socket upstream (a thread
that records the bytes it receives) finds the same byte, not its UTF-8
re-encoding."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
from collections.abc import Iterator

from tests.harness import running_proxy

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


class RawUpstream:
    """Answers each request with ANSWER and records the raw request heads."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.heads: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                sock, _ = self.listener.accept()
                with sock:
                    sock.settimeout(10)
                    data = b""
                    while b"\r\n\r\n" not in data:
                        data += sock.recv(65536) or b"\r\n\r\n"
                    head, _, body = data.partition(b"\r\n\r\n")
                    length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
                    while length and len(body) < int(length.group(1)):
                        body += sock.recv(65536)
                    self.heads.append(head)
                    sock.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(ANSWER) + ANSWER
                    )

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.thread.join(10)


@contextlib.contextmanager
def raw_upstream() -> Iterator[RawUpstream]:
    upstream = RawUpstream()
    try:
        yield upstream
    finally:
        upstream.stop()


def raw_request(port: int, head: bytes, body: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_a_header_byte_above_0x7f_reaches_the_upstream_unchanged() -> None:
    with raw_upstream() as up:
        route = {"name": "raw", "models": ["*"], "upstream": f"http://127.0.0.1:{up.port}/v1"}
        with running_proxy({"routes": [route]}) as proxy:
            body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
            head = (
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\n"
                b"Content-Type: application/json\r\nAuthorization: Bearer sk-test\r\n"
                b"X-Client-Name: caf\xe9 \xff\x80\r\n"
            )
            answer = raw_request(proxy.port, head, body)
        assert answer.startswith(b"HTTP/1.1 200 ")
    assert len(up.heads) == 1
    assert b"\r\nx-client-name: caf\xe9 \xff\x80\r\n" in up.heads[0].lower()
    assert b"caf\xc3\xa9" not in up.heads[0]
