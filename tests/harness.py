"""Real servers for end-to-end tests: a scriptable fake upstream (aiohttp, on
a real socket) that speaks the providers' wire format, and the proxy itself
(uvicorn, on a real socket), each in a thread with its own event loop."""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from aiohttp import web
from multidict import CIMultiDict

from proxy.app import create_app
from proxy.config import Config, build_config
from proxy.demo.run import ENV_DELAY_MS
from proxy.http_server import ProxyHttpProtocol
from proxy.runtime import Runtime

_GIVEN_PORTS: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port for a server a test starts, free now. It lies below the
    kernel's ephemeral range, so no outgoing connection and no bind to port
    0 can take it before the server binds it, and it is never one this
    process handed out before (a stopped server's port stays its own)."""
    low = _ephemeral_low()
    for _ in range(100):
        port = random.randrange(max(1024, low - 12000), low)
        if port in _GIVEN_PORTS:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _GIVEN_PORTS.add(port)
        return port
    with socket.socket() as s:  # that range is all taken: any free port
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def closed_port() -> Iterator[int]:
    """A port that refuses connections while the block runs: bound, never
    listening, so no server started meanwhile (a proxy under test on a
    `free_port()`) can be given it and answer in its place."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


# the demo models whose dialect sends reasoning back on tool-call turns
# (include_in_context auto); the others (vllm, openai, groq) get none
DEMO_RECALLS = frozenset({"demo-deepseek", "demo-kimi", "demo-minimax", "demo-openrouter"})


def only_conversation_turns(base: str, key: str) -> list[dict[str, Any]]:
    """The stored turns of the one conversation the tenant of `key` has."""
    auth = {"Authorization": f"Bearer {key}"}
    (listed,) = httpx.get(f"{base}/v1/conversations", headers=auth).json()["data"]
    turns: list[dict[str, Any]] = httpx.get(
        f"{base}/v1/conversations/{listed['id']}", headers=auth
    ).json()["turns"]
    return turns


@contextmanager
def running_demo(
    output: Path,
    *,
    command: Sequence[str] | None = None,
    fast: bool = True,
    environ: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """The demo on a free port, its output in `output`; yields its base URL
    once healthy. `command`: how to start it (default `python -m proxy`);
    `fast`: streams without the demo's delays. No REASONING_PROXY_*
    setting of the environment reaches it (the memory store, no secret),
    only those `environ` gives."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("REASONING_PROXY_")}
    env.update(environ or {})
    if fast:
        env[ENV_DELAY_MS] = "0"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [*(command or [sys.executable, "-m", "proxy"]), "demo", "--port", str(port)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=Path(__file__).resolve().parents[1],
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError("the demo exited:\n" + output.read_text())
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the demo did not become healthy:\n" + output.read_text())
            time.sleep(0.1)
        yield base
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the server drains and exits), SIGKILL after 20 s."""
    process.terminate()
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


def sse(chunk: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"


@dataclass
class Stream:
    """An SSE answer: each chunk (a dict, or raw bytes) as one event."""

    chunks: list[Any]
    delay: float = 0.0  # seconds before each event
    done: bool = True  # send data: [DONE] at the end
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    cut_after: int | None = None  # close the connection after this many events
    # how: "close" (a FIN), "reset" (a RST), or "partial" (the next event's
    # chunk head and half its bytes, then a FIN: a truncated chunked body)
    cut: str = "close"
    hang_after: int | None = None  # stop sending (keep the connection) after this many
    # wait for `gate` (set by the test) after this many events: a test reads
    # a state mid-stream without racing the stream's timing
    gate_after: int | None = None
    gate: threading.Event = field(default_factory=threading.Event)


@dataclass
class Json:
    body: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    # send the Content-Length of the whole body, only this many bytes of it,
    # then close ("close") or reset ("reset") the connection
    cut_at: int | None = None
    cut: str = "close"


@dataclass
class Hang:
    """Accept the request and never answer."""


@dataclass
class Received:
    method: str
    path: str
    query: str
    headers: Mapping[str, str]  # case-insensitive
    body: bytes
    peer: tuple[str, int] | None = None  # the connection it came on (the proxy's side)

    @property
    def json(self) -> Any:
        return json.loads(self.body)


def _cut(request: web.Request, how: str, partial: bytes = b"") -> None:
    """End the connection mid-answer: a FIN, a RST, or a chunk cut in half."""
    transport = request.transport
    assert transport is not None
    if how == "reset":
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
        return
    if how == "partial":
        transport.write(f"{len(partial):x}\r\n".encode() + partial[: len(partial) // 2])
    transport.close()


def _peer(request: web.Request) -> tuple[str, int] | None:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    return (peer[0], peer[1]) if peer else None


class FakeUpstream:
    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.port = free_port()
        self._tls = tls  # a server context: HTTPS
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}/v1"
        self.requests: list[Received] = []
        self._script: deque[Any] = deque()
        self.disconnects = 0
        self.disconnected = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._ready = threading.Event()
        self._runner: web.AppRunner | None = None

    # -- test side ------------------------------------------------------------------

    def script(self, *answers: Any) -> None:
        self._script.extend(answers)

    def reset(self) -> None:
        self.requests.clear()
        self._script.clear()
        self.disconnects = 0
        self.disconnected.clear()

    def chat_requests(self) -> list[Received]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def start(self) -> FakeUpstream:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fake upstream did not start")
        return self

    def stop(self) -> None:
        async def shutdown() -> None:
            if self._runner is not None:
                await self._runner.cleanup()
            pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    # -- server side ----------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=self._tls)
        self._loop.run_until_complete(site.start())
        self._ready.set()
        self._loop.run_forever()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append(
            Received(
                request.method,
                request.path,
                request.query_string,
                CIMultiDict(request.headers),
                body,
                _peer(request),
            )
        )
        answer = self._script.popleft() if self._script else self._default(request.path)
        try:
            return await self._answer(request, answer)
        except (ConnectionError, asyncio.CancelledError):  # a reset, or "Connection lost"
            self.disconnects += 1
            self.disconnected.set()
            raise

    def _default(self, path: str) -> Any:
        if path.endswith("/models"):
            return Json({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
        return Json(
            {
                "id": "chatcmpl-default",
                "object": "chat.completion",
                "created": 1,
                "model": "fake-model",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "default answer"},
                        "finish_reason": "stop",
                    }
                ],
            }
        )

    async def _answer(self, request: web.Request, answer: Any) -> web.StreamResponse:
        if isinstance(answer, Hang):
            # aiohttp does not cancel a handler when its client leaves: watch
            # the connection, so a test can see the proxy close it
            for _ in range(180_000):  # an hour at most
                if request.transport is None or request.transport.is_closing():
                    raise ConnectionResetError("the client closed the connection")
                await asyncio.sleep(0.02)
        if isinstance(answer, Json):
            if answer.delay:
                await asyncio.sleep(answer.delay)
            raw = (
                answer.body if isinstance(answer.body, bytes) else json.dumps(answer.body).encode()
            )
            if answer.cut_at is not None:
                cut = web.StreamResponse(
                    status=answer.status,
                    headers={"Content-Type": "application/json", **answer.headers},
                )
                cut.content_length = len(raw)
                await cut.prepare(request)
                await cut.write(raw[: answer.cut_at])
                _cut(request, answer.cut)
                return cut
            return web.Response(
                body=raw,
                status=answer.status,
                headers={"Content-Type": "application/json", **answer.headers},
            )
        assert isinstance(answer, Stream)
        response = web.StreamResponse(
            status=answer.status,
            headers={"Content-Type": "text/event-stream", **answer.headers},
        )
        await response.prepare(request)
        events = [c if isinstance(c, bytes) else sse(c) for c in answer.chunks]
        if answer.done:
            events.append(b"data: [DONE]\n\n")
        for n, event in enumerate(events):
            if answer.cut_after is not None and n >= answer.cut_after:
                _cut(request, answer.cut, event)
                return response
            if answer.hang_after is not None and n >= answer.hang_after:
                await asyncio.sleep(3600)
            if n == answer.gate_after:
                loop = asyncio.get_running_loop()
                opened = await loop.run_in_executor(None, answer.gate.wait, 60)
                assert opened, "the test never opened the stream's gate"
            if answer.delay:
                await asyncio.sleep(answer.delay)
            await response.write(event)
        await response.write_eof()
        return response


class ProxyServer:
    """The proxy app under uvicorn on a free port, in a thread."""

    def __init__(self, config: Config, port: int | None = None, host: str = "127.0.0.1") -> None:
        self.config = config
        self.runtime = Runtime(config)
        self.app = create_app(config, runtime=self.runtime)
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = self.base + "/v1"
        self._server = uvicorn.Server(
            uvicorn.Config(
                self.app,
                host=host,
                port=self.port,
                log_level="warning",
                access_log=False,
                proxy_headers=False,
                lifespan="on",
                http=ProxyHttpProtocol,  # as `serve` runs it: the client bounds
            )
        )
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def start(self) -> ProxyServer:
        self._thread.start()
        deadline = time.monotonic() + 15
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the proxy did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(15)


def route_config(upstream: FakeUpstream, **route: Any) -> dict[str, Any]:
    top = route.pop("top", {})
    return {"routes": [{"name": "test", "models": ["*"], "upstream": upstream.url, **route}], **top}


@contextmanager
def running_proxy(
    data: dict[str, Any],
    env: dict[str, str] | None = None,
    port: int | None = None,
    host: str = "127.0.0.1",
) -> Iterator[ProxyServer]:
    """The proxy for this config, on `port` (default: a free one) of `host`."""
    env = {"REASONING_PROXY_SECRET": "test-secret", **(env or {})}
    server = ProxyServer(build_config(data, env=env), port, host).start()
    try:
        yield server
    finally:
        server.stop()
