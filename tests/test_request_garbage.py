"""A request leaves nothing for the cyclic collector: every object it makes
is freed by reference counting when it ends. A reference cycle per request
(two closures that call each other, say) keeps the request's objects alive
until a collection, which then walks them all: about 40,000 instructions
more per request, and pauses under load. The app is called in process as
uvicorn calls it, its upstream a mock transport; each door, streamed and
whole, on the chat upstream path, to upstreams of the door's own API, and
the pass-through; and with an upstream slower than the disconnect watch's
delay, so that the watch's task starts and is cancelled."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import orjson
import pytest

from proxy.api.asgi import WATCH_DELAY
from proxy.app import create_app
from proxy.config import build_config
from proxy.runtime import Runtime
from proxy.upstream import MockResponse, MockTransport, Request
from tests.e2e.test_messages_native import anthropic_stream, whole_message
from tests.test_responses_native import BASE, message, upstream_stream

MESSAGE = {"role": "assistant", "content": "Hi.", "reasoning_content": "Think."}
COMPLETION = orjson.dumps(
    {
        "id": "c",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": MESSAGE, "finish_reason": "stop"}],
    }
)
DELTAS = [({"reasoning_content": "Think."}, None), ({"content": "Hi."}, None), ({}, "stop")]
STREAM = (
    b"".join(
        b"data: "
        + orjson.dumps(
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        )
        + b"\n\n"
        for delta, finish in DELTAS
    )
    + b"data: [DONE]\n\n"
)


def answer(request: Request) -> MockResponse:
    """A Chat Completions upstream; a Responses or a Messages one by path."""
    stream = b'"stream":true' in (request.body or b"")
    if "/responses" in request.target:
        if stream:
            body = upstream_stream(["Hi", "."])
        else:
            body = orjson.dumps({**BASE, "status": "completed", "output": [message("Hi.")]})
    elif "/messages" in request.target:
        body = b"".join(anthropic_stream().chunks) if stream else orjson.dumps(whole_message())
    else:
        body = STREAM if stream else COMPLETION
    kind = "text/event-stream" if stream else "application/json"
    return MockResponse(200, [("content-type", kind)], body)


DOORS = {
    "/v1/chat/completions": "messages",
    "/v1/responses": "input",
    "/v1/messages": "messages",
    "/v1/embeddings": "input",  # pass-through
}


async def slow_answer(request: Request) -> MockResponse:
    """`answer`, after the disconnect watch has started its task."""
    await asyncio.sleep(WATCH_DELAY * 1.5)
    return answer(request)


async def garbage_per_request(
    path: str, stream: bool, api: str = "chat", *, slow: bool = False, count: int = 50
) -> float:
    data = {"routes": [{"name": "d", "upstream": "http://upstream.test/v1", "api": api}]}
    config = build_config(data, env={"REASONING_PROXY_SECRET": "garbage-test"})
    runtime = Runtime(config, transport=MockTransport(slow_answer if slow else answer))
    app = create_app(config, runtime=runtime)
    await runtime.start()
    payload: dict[str, Any] = {"model": "m", "stream": stream, "max_tokens": 50}
    payload[DOORS[path]] = [{"role": "user", "content": "hi"}]
    body = orjson.dumps(payload)

    async def one() -> None:
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.sleep(3600)
            raise AssertionError("unreachable")

        out: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            out.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"content-type", b"application/json")],
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8787),
            "state": {},
        }
        await app(scope, receive, send)
        assert out[0]["status"] == 200, out

    try:
        for _ in range(10):  # warm: memos, pools, first-use imports
            await one()
        await asyncio.sleep(0.05)
        gc.collect()
        gc.disable()
        try:
            for _ in range(count):
                await one()
            await asyncio.sleep(0.05)  # the requests' own tasks end
            found = gc.collect()
        finally:
            gc.enable()
    finally:
        await runtime.close()
    return found / count


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", list(DOORS))
def test_a_request_leaves_no_cycles_behind(path: str, stream: bool) -> None:
    assert asyncio.run(garbage_per_request(path, stream)) < 1


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", list(DOORS))
def test_a_request_that_outlasts_the_disconnect_watch_delay_leaves_no_cycles(
    path: str, stream: bool
) -> None:
    # the watch's task is cancelled when the request ends; that task keeps
    # its CancelledError, whose traceback holds the watch
    assert asyncio.run(garbage_per_request(path, stream, slow=True, count=15)) < 1


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", ["responses", "messages"])
def test_a_request_to_an_upstream_of_the_doors_own_api_leaves_no_cycles(
    api: str, stream: bool
) -> None:
    path = f"/v1/{api}"
    assert asyncio.run(garbage_per_request(path, stream, api)) < 1
