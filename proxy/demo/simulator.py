"""The simulated upstream of `reasoning-proxy demo`, as a pure ASGI app.

It answers `GET /v1/models`, `GET /v1/models/{id}` and `POST
/v1/chat/completions` (streamed or not, as the request's `stream` says)
without any network or key: the model name picks the provider whose real
wire format it speaks (`wire.MODELS`), the words come from the request
(`replies.py`), and the refusals of providers that need, or reject, reasoning
in the input are enforced (`checks.py`). Every response says it is simulated (`system_fingerprint`
"reasoning-proxy-demo-simulator", an `x-simulated-upstream` header, a note in
`/v1/models`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from proxy.demo.replies import compose_reply, field_at, thinking_enabled
from proxy.demo.wire import (
    FINGERPRINT,
    MODELS,
    DemoModel,
    Envelope,
    completion,
    model_object,
    models_list,
    stream_chunks,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

DEFAULT_DELAY = 0.03  # seconds between stream events: slow enough to watch a stream arrive
MAX_BODY_BYTES = 16 * 1024 * 1024
_LABEL = (b"x-simulated-upstream", FINGERPRINT.encode())
_JSON = (b"content-type", b"application/json")
_DONE = b"data: [DONE]\n\n"
_MODEL_PATH = "/v1/models/"


class _ClientGone(Exception):
    pass


class _Refused(Exception):
    """A request the simulator answers with an error (status, JSON body)."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(status)
        self.status = status
        self.body = body


def _invalid(status: int, message: str, code: str | None = None) -> _Refused:
    """An error in OpenAI's shape (the simulator's own, not a provider's)."""
    param = "model" if code == "model_not_found" else None
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return _Refused(status, orjson.dumps({"error": error}))


def _unknown_model(name: object) -> _Refused:
    return _invalid(
        404,
        f"The model `{str(name)[:100]}` does not exist. The demo models are: " + ", ".join(MODELS),
        "model_not_found",
    )


def _parse(raw: bytes) -> tuple[DemoModel, dict[str, Any]]:
    """The demo model and the request body, or _Refused as OpenAI would."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = None
    if not isinstance(body, dict):
        raise _invalid(400, "The request body must be a JSON object.")
    name = body.get("model")
    model = MODELS.get(name) if isinstance(name, str) else None
    if model is None:
        raise _unknown_model(name)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _invalid(400, "messages must be a non-empty array.")
    return model, body


def sse(chunk: dict[str, Any]) -> bytes:
    """One SSE event: `data: <json>` in UTF-8 (not \\u-escaped), a blank line."""
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


class Simulator:
    """`delay`: seconds before each stream event (0 in tests)."""

    def __init__(self, *, delay: float = DEFAULT_DELAY) -> None:
        self.delay = delay

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path == "/v1/models" and method in ("GET", "HEAD"):
            await _respond(send, 200, orjson.dumps(models_list()))
        elif path.startswith(_MODEL_PATH) and method in ("GET", "HEAD"):
            await self._model(path[len(_MODEL_PATH) :], send)
        elif path == "/v1/chat/completions" and method == "POST":
            await self._chat(receive, send)
        elif path in ("/v1/models", "/v1/chat/completions"):
            refused = _invalid(405, f"{method} is not allowed on {path}.")
            await _respond(send, refused.status, refused.body)
        else:
            message = (
                "The demo simulator serves only GET /v1/models, GET /v1/models/{id} "
                "and POST /v1/chat/completions."
            )
            refused = _invalid(404, message, "not_found")
            await _respond(send, refused.status, refused.body)

    async def _model(self, name: str, send: Send) -> None:
        """One model, as OpenAI's `GET /v1/models/{model}` returns it (the
        server has decoded the path)."""
        model = MODELS.get(name)
        if model is None:
            refused = _unknown_model(name)
            await _respond(send, refused.status, refused.body)
            return
        await _respond(send, 200, orjson.dumps(model_object(model)))

    async def _chat(self, receive: Receive, send: Send) -> None:
        try:
            raw = await _read_body(receive)
            model, body = _parse(raw)
            if model.check is not None:
                refusal = model.check(body["messages"], thinking_enabled(body))
                if refusal is not None:
                    raise _Refused(refusal.status, orjson.dumps(refusal.body))
        except _ClientGone:
            return
        except _Refused as refused:
            await _respond(send, refused.status, refused.body)
            return
        reply = compose_reply(body)
        env = Envelope(
            id=model.id_prefix + "demo-" + hashlib.sha256(raw).hexdigest()[:24],
            created=int(time.time()),
            model=model.id,
            split_reasoning=body.get("reasoning_split") is True,
        )
        prompt_chars = len(orjson.dumps(body["messages"]))
        if body.get("stream") is not True:
            answer = completion(model, reply, env, prompt_chars=prompt_chars)
            if self.delay:
                await asyncio.sleep(self.delay)
            await _respond(send, 200, orjson.dumps(answer))
            return
        include_usage = field_at(body, ("stream_options", "include_usage")) is True
        chunks = stream_chunks(
            model, reply, env, prompt_chars=prompt_chars, include_usage=include_usage
        )
        events = [sse(c) for c in chunks]
        if model.comment is not None:
            events.insert(0, b": " + model.comment.encode() + b"\n\n")
        await self._stream(events, receive, send)

    async def _stream(self, events: list[bytes], receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache"),
                    _LABEL,
                ],
            }
        )
        # The client (the proxy) may leave mid-stream: stop writing at once.
        gone = asyncio.ensure_future(_wait_disconnect(receive))
        try:
            for event in [*events, _DONE]:
                if self.delay:
                    await asyncio.sleep(self.delay)
                if gone.done():
                    return
                await send({"type": "http.response.body", "body": event, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the server reports a write to a closed connection
            return
        finally:
            gone.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await gone


async def _respond(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [_JSON, _LABEL, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _read_body(receive: Receive) -> bytes:
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise _invalid(413, f"The request body is larger than {MAX_BODY_BYTES} bytes.")
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)


async def _wait_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _lifespan(receive: Receive, send: Send) -> None:
    """Run standalone (`uvicorn --factory proxy.demo.simulator:Simulator`), the
    app has nothing to open or close, but it says so to the server."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
