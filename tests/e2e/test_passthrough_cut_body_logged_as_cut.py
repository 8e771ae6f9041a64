"""A pass-through body its upstream cuts mid-way is cut for the client too
(a chunked body without its last chunk, a Content-Length body short of its
length), and the server's log says so in the proxy's words, once: a warning
naming the route and the cause. uvicorn's `ERROR: ASGI callable returned
without completing response.` (its message for an app that forgot to end a
response) came with every such cut. The real `serve`, in its own process,
against a raw upstream."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.harness import free_port, stop
from tests.transport.servers import Conn, ServerThread, chunk, chunked_head

HEAD = {
    "chunked": chunked_head("Content-Type: application/octet-stream") + chunk(b"first part\n"),
    "content-length": b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nfirst part\n",
}


@pytest.mark.parametrize("framing", ["chunked", "content-length"])
def test_a_cut_passthrough_body_is_cut_and_logged_once(tmp_path: Path, framing: str) -> None:
    async def handler(conn: Conn) -> None:
        if await conn.request() is not None:
            await conn.send(HEAD[framing])
            await asyncio.sleep(0.1)  # and close, mid-body

    log = tmp_path / "serve.log"
    port = free_port()
    command = [sys.executable, "-m", "proxy", "serve", "--port", str(port), "--log-format", "text"]
    with ServerThread(handler) as up:
        config = tmp_path / "config.yaml"
        config.write_text(f"routes: [{{name: files, models: ['*'], upstream: '{up.url}'}}]\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("REASONING_PROXY_")}
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [*command, "--config", str(config)],
                stdout=sink,
                stderr=subprocess.STDOUT,
                env={**env, "REASONING_PROXY_SECRET": "test-secret"},
            )
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
            with pytest.raises(httpx.RemoteProtocolError):  # a cut body, never a whole one
                httpx.get(f"{base}/v1/files/f-1/content", timeout=10)
            time.sleep(0.3)  # the log lines of the request's end
        finally:
            stop(process)
    text = log.read_text()
    assert "ASGI callable returned without completing response" not in text
    assert "ERROR" not in text
    cut = [line for line in text.splitlines() if "response cut short" in line]
    assert len(cut) == 1, text
    assert "WARNING" in cut[0]
    assert "route files: response cut short (upstream disconnected)" in cut[0]
