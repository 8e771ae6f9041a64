"""Upstream limits end to end, through real sockets: the bounded wait for an
upstream request slot (a 503 `upstream_busy` with Retry-After, nothing sent
upstream) and its gauges on /metrics; and compressed upstream bodies that
inflate far past their size (gzip bombs), read in bounded pieces, with the
memory of a real proxy process measured (its peak resident set, VmHWM)."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.casefiles import chunk
from tests.harness import FakeUpstream, Json, Stream, free_port, running_proxy, sse
from tests.stores.servers import ProxyProcess, wait_until
from tests.test_http1 import bomb

MiB = 1 << 20


def body(stream: bool) -> dict[str, Any]:
    return {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}


# -- an upstream that holds its streams until told ---------------------------------------------


class GatedUpstream:
    """A raw HTTP/1.1 upstream in a thread of its own. A streamed chat
    completion gets its headers and a first event at once, and the rest only
    after `open()`; a whole one is answered after `open()`; any other path
    gets a small JSON answer at once. `requests` holds each request line as
    it arrives."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.requests: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._gate: asyncio.Event | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    def start(self) -> GatedUpstream:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)
        return self

    def open(self) -> None:
        assert self._gate is not None
        self._loop.call_soon_threadsafe(self._gate.set)

    def stop(self) -> None:
        async def shutdown() -> None:
            assert self._server is not None
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _listen(self) -> None:
        self._gate = asyncio.Event()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        assert self._gate is not None
        self._tasks.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = re.search(rb"(?im)^content-length:[ \t]*(\d+)", head)
                data = await reader.readexactly(int(length.group(1))) if length else b""
                line = head.split(b"\r\n", 1)[0].decode()
                self.requests.append(line)
                if "/chat/completions" not in line:
                    writer.write(_http_json({"object": "list", "data": []}))
                    continue
                if not json.loads(data).get("stream"):
                    await self._gate.wait()
                    writer.write(_http_json(COMPLETION))
                    continue
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n"
                    + _http_chunk(sse(chunk({"content": "held "})))
                )
                await writer.drain()
                await self._gate.wait()
                writer.write(
                    _http_chunk(sse(chunk({"content": "released"}, "stop")))
                    + _http_chunk(b"data: [DONE]\n\n")
                    + b"0\r\n\r\n"
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self._tasks.discard(task)


COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "whole"}, "finish_reason": "stop"}
    ],
}


def _http_chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _http_json(data: Any) -> bytes:
    raw = json.dumps(data).encode()
    head = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(raw)}"
    return head.encode() + b"\r\n\r\n" + raw


@pytest.fixture
def gated() -> Iterator[GatedUpstream]:
    upstream = GatedUpstream().start()
    try:
        yield upstream
    finally:
        upstream.stop()


def limited(upstream: GatedUpstream, queue_timeout: float) -> dict[str, Any]:
    return {
        "server": {"upstream_max_in_flight": 2, "upstream_queue_timeout": queue_timeout},
        "routes": [{"name": "test", "models": ["*"], "upstream": upstream.url}],
    }


def gauges(base: str) -> tuple[float, float]:
    """reasoning_proxy_upstream_in_flight and _waiting, as /metrics shows them."""
    values = {
        sample.name: sample.value
        for family in text_string_to_metric_families(httpx.get(f"{base}/metrics").text)
        for sample in family.samples
    }
    return (
        values["reasoning_proxy_upstream_in_flight"],
        values["reasoning_proxy_upstream_waiting"],
    )


# -- the wait for an upstream request slot --------------------------------------------------------


def test_a_request_past_the_in_flight_limit_gets_a_503_with_retry_after(
    gated: GatedUpstream,
) -> None:
    with running_proxy(limited(gated, 0.5)) as proxy, httpx.Client(timeout=30) as client:
        chat = f"{proxy.url}/chat/completions"
        with (
            client.stream("POST", chat, json=body(stream=True)) as one,
            client.stream("POST", chat, json=body(stream=True)) as two,
        ):
            assert one.status_code == two.status_code == 200
            wait_until(lambda: len(gated.requests) == 2, 10, "both streams reach the upstream")
            refused = []
            for method, url, payload in [
                ("POST", chat, body(stream=False)),
                ("POST", chat, body(stream=True)),
                ("GET", f"{proxy.url}/models", None),  # pass-through
            ]:
                started = time.monotonic()
                r = client.request(method, url, json=payload)
                waited = time.monotonic() - started
                refused.append(r)
                assert r.status_code == 503, r.text
                assert r.headers["retry-after"] == "1"  # 0.5 s rounded up to whole seconds
                assert r.headers["content-type"].startswith("application/json")
                error = r.json()["error"]
                assert (error["code"], error["type"]) == ("upstream_busy", "server_error")
                assert error["message"]
                assert 0.5 <= waited < 10  # it waited its turn, and no longer
            assert len(gated.requests) == 2  # nothing of the refused requests was sent
            gated.open()
            for held in (one, two):
                text = held.read().decode()
                assert "released" in text
                assert text.rstrip().endswith("data: [DONE]")
        # the held streams ended: their slots are free again
        r = client.post(chat, json=body(stream=False))
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == "whole"
        assert client.get(f"{proxy.url}/models").status_code == 200
        assert len(gated.requests) == 4
        wait_until(lambda: gauges(proxy.base) == (0, 0), 10, "every slot is released")


def test_metrics_show_the_requests_in_flight_and_the_ones_waiting(gated: GatedUpstream) -> None:
    with (
        running_proxy(limited(gated, 30.0)) as proxy,
        httpx.Client(timeout=60) as client,
        ThreadPoolExecutor(1) as pool,
    ):
        chat = f"{proxy.url}/chat/completions"
        assert gauges(proxy.base) == (0, 0)
        with (
            client.stream("POST", chat, json=body(stream=True)) as one,
            client.stream("POST", chat, json=body(stream=True)) as two,
        ):
            wait_until(lambda: len(gated.requests) == 2, 10, "both streams reach the upstream")
            third = pool.submit(httpx.post, chat, json=body(stream=False), timeout=60)
            wait_until(lambda: gauges(proxy.base)[1] >= 1, 10, "the third request to wait")
            assert gauges(proxy.base) == (2, 1)
            assert len(gated.requests) == 2
            gated.open()
            one.read()
            two.read()
        r = third.result(timeout=30)
        assert r.status_code == 200, r.text
        assert len(gated.requests) == 3
        wait_until(lambda: gauges(proxy.base) == (0, 0), 10, "every slot is released")


def test_with_workers_the_gauges_add_up_every_process(gated: GatedUpstream, tmp_path: Path) -> None:
    """Each worker keeps its own gauge file current, so whichever worker
    answers /metrics, the sum is right (a value set only when scraped would
    leave the other worker's file stale)."""
    config = tmp_path / "proxy.yaml"
    config.write_text(yaml.safe_dump(limited(gated, 30.0)))
    store = f"sqlite:///{tmp_path / 'history.db'}"
    args = ["--config", str(config), "--store", store, "--workers", "2"]
    with (
        ProxyProcess(args, log=tmp_path / "proxy.log") as proxy,
        httpx.Client(timeout=30) as client,
    ):
        chat = f"{proxy.url}/chat/completions"
        with (
            client.stream("POST", chat, json=body(stream=True)) as one,
            client.stream("POST", chat, json=body(stream=True)) as two,
        ):
            wait_until(lambda: len(gated.requests) == 2, 10, "both streams reach the upstream")
            # each scrape on a new connection: the workers take turns as they accept
            assert [gauges(proxy.base) for _ in range(8)] == [(2, 0)] * 8
            gated.open()
            one.read()
            two.read()
        wait_until(lambda: gauges(proxy.base) == (0, 0), 10, "every slot is released")
        assert [gauges(proxy.base) for _ in range(8)] == [(0, 0)] * 8


# -- gzip bombs, measured in a real proxy process -------------------------------------------------

MAX_RESPONSE = 16 * MiB
MAX_LINE = 4 * MiB
MARGIN = 32 * MiB  # the interpreter's own churn: a few reads, buffers, allocator slack


def status_kib(pid: int, field: str) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
    assert match is not None, field
    return int(match.group(1)) * 1024


class PeakMemory:
    """The growth of a process's peak resident set over a block: the peak
    is reset to the current size first (/proc/<pid>/clear_refs, 5)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.growth = 0

    def __enter__(self) -> PeakMemory:
        Path(f"/proc/{self.pid}/clear_refs").write_text("5")
        self._start = status_kib(self.pid, "VmHWM")
        return self

    def __exit__(self, *_: object) -> None:
        self.growth = status_kib(self.pid, "VmHWM") - self._start


@pytest.fixture
def bombed_proxy(upstream: FakeUpstream, tmp_path: Path) -> Iterator[ProxyProcess]:
    """A proxy process of its own per test: memory one test freed and the
    allocator kept would hide the next test's growth."""
    config = tmp_path / "proxy.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "limits": {"max_response_bytes": MAX_RESPONSE, "max_sse_line_bytes": MAX_LINE},
                "routes": [{"name": "test", "models": ["*"], "upstream": upstream.url}],
            }
        )
    )
    with ProxyProcess(["--config", str(config)], log=tmp_path / "proxy.log") as proxy:
        # the first requests load what a request needs, outside the measured ones
        for stream in (False, True):
            upstream.script(
                Stream([chunk({"content": "warm"}, "stop")])
                if stream
                else Json({"choices": [{"index": 0, "message": {"content": "warm"}}]})
            )
            r = httpx.post(f"{proxy.url}/chat/completions", json=body(stream), timeout=30)
            assert r.status_code == 200, r.text
        yield proxy


def pid_of(proxy: ProxyProcess) -> int:
    assert proxy._process is not None
    return proxy._process.pid


def test_a_gzip_bomb_as_a_whole_response_is_a_502_within_bounded_memory(
    upstream: FakeUpstream, bombed_proxy: ProxyProcess
) -> None:
    # about 1 MB on the wire, 1 GiB decoded
    upstream.script(Json(bomb(1024), headers={"Content-Encoding": "gzip"}))
    with PeakMemory(pid_of(bombed_proxy)) as peak:
        r = httpx.post(f"{bombed_proxy.url}/chat/completions", json=body(False), timeout=60)
    assert r.status_code == 502, r.text
    assert r.json()["error"]["code"] == "upstream_response_too_large"
    assert peak.growth < MAX_RESPONSE + MARGIN, f"{peak.growth / MiB:.1f} MiB"


def test_a_gzip_bomb_of_one_endless_sse_line_ends_the_stream_within_bounded_memory(
    upstream: FakeUpstream, bombed_proxy: ProxyProcess
) -> None:
    # an event, then one line of 1 GiB that never ends
    first = sse(chunk({"content": "before "}))
    encoded = bomb(1024, fill=b"a", prefix=first + b"data: ")
    pieces = [encoded[i : i + 64 * 1024] for i in range(0, len(encoded), 64 * 1024)]
    upstream.script(Stream(pieces, done=False, headers={"Content-Encoding": "gzip"}))
    with (
        PeakMemory(pid_of(bombed_proxy)) as peak,
        httpx.stream(
            "POST", f"{bombed_proxy.url}/chat/completions", json=body(True), timeout=60
        ) as r,
    ):
        assert r.status_code == 200
        text = r.read().decode()
    events = [json.loads(e.removeprefix("data:")) for e in text.split("\n\n") if e]
    assert events[0]["choices"][0]["delta"]["content"] == "before "
    error = events[-1]["error"]
    assert error["code"] == "upstream_line_too_long"
    assert "[DONE]" not in text
    assert peak.growth < MAX_LINE + MARGIN, f"{peak.growth / MiB:.1f} MiB"


def test_a_compressed_download_passes_through_whole_within_bounded_memory(
    upstream: FakeUpstream, bombed_proxy: ProxyProcess
) -> None:
    """A streamed pass-through body has no size limit; decoded one bounded
    read at a time, 256 MiB pass through in little memory."""
    size = 256 * MiB
    upstream.script(Json(bomb(256), headers={"Content-Encoding": "gzip"}))
    received = 0
    nonzero = 0
    with (
        PeakMemory(pid_of(bombed_proxy)) as peak,
        httpx.stream("GET", f"{bombed_proxy.url}/files/big/content", timeout=60) as r,
    ):
        assert r.status_code == 200
        assert "content-encoding" not in r.headers  # decoded by the proxy
        for data in r.iter_raw():
            received += len(data)
            nonzero += len(data.strip(b"\0"))
    assert (received, nonzero) == (size, 0)
    assert upstream.requests[-1].path == "/v1/files/big/content"
    assert peak.growth < MARGIN, f"{peak.growth / MiB:.1f} MiB"
