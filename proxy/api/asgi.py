"""Small helpers for the raw ASGI endpoints (the hot paths skip the
framework): reading a bounded body, decoding headers, sending responses."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from proxy.errors import BadRequest, PayloadTooLarge, ProxyError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

JSON_TYPE = (b"content-type", b"application/json")
# seconds before a request's disconnect watch starts its task (DisconnectWatch)
WATCH_DELAY = 0.02


class ClientGone(Exception):
    """The client disconnected before its request body was read."""


def absorb_cut(cut: bool) -> bool:
    """The request's task was cancelled: when a shutdown's grace period ended
    (`cut`), the cancellation is taken back so the request can still be
    answered or its work finished, and True; any other is for the caller to
    raise again."""
    if not cut:
        return False
    task = asyncio.current_task()
    assert task is not None
    task.uncancel()
    return True


class DisconnectWatch:
    """Cancels the task serving a request when its client leaves.

    uvicorn's `send` after a disconnect is a silent no-op, so without this an
    upstream would go on streaming to its end (or be waited on until the idle
    timeout) for nobody. Start it once the request body is read (the watch
    takes over `receive`); set `complete` when the response is complete, so a
    late disconnect changes nothing; `stop()` in a `finally`.

    The watching task starts `WATCH_DELAY` seconds after the watch: a
    response done sooner (a quick upstream, an error) never pays for a task,
    and a client that leaves is still noticed within that delay."""

    __slots__ = ("_receive", "_task", "_timer", "_watcher", "complete", "gone")

    def __init__(self, receive: Receive) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._receive = receive
        self.complete = False
        self.gone = False
        self._watcher: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = task.get_loop().call_later(
            WATCH_DELAY, self._begin
        )

    def _begin(self) -> None:
        self._timer = None
        self._watcher = asyncio.ensure_future(self._watch(self._receive))

    async def _watch(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        if not self.complete:
            self.gone = True
            self._task.cancel()

    def absorb(self) -> bool:
        """In an `except CancelledError`: True (and the cancellation taken
        back) when it was this watch's, i.e. the client left."""
        if not self.gone:
            return False
        self._task.uncancel()
        return True

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        watcher = self._watcher
        if watcher is not None:
            # Not kept: the cancelled task holds its CancelledError, whose
            # traceback holds `_watch`'s frame and so this watch; a watch
            # holding the task would be a cycle, and the request's whole
            # state would wait for the cyclic collector instead of being
            # freed when it ends (a collection of it in the young
            # generation is time on the next requests' way to a first byte).
            self._watcher = None
            watcher.cancel()


# CR, LF or NUL in a header value (one regex search beats three `in` tests)
_CONTROL = re.compile(rb"[\r\n\x00]").search


def request_headers(scope: Scope, max_value_bytes: int) -> list[tuple[str, str]]:
    """The request's headers as (lower-case name, value). Values with CR, LF
    or NUL, or longer than the bound, are refused (never echoed)."""
    out: list[tuple[str, str]] = []
    for raw_name, raw_value in scope.get("headers", ()):
        name = raw_name.decode("latin-1").lower()
        if len(raw_value) > max_value_bytes:
            raise BadRequest(
                f"The value of header {name} is longer than limits.max_header_bytes.",
                param=name,
                code="header_too_large",
            )
        if _CONTROL(raw_value):
            raise BadRequest(
                f"The value of header {name} contains CR, LF or NUL.",
                param=name,
                code="invalid_header",
            )
        out.append((name, raw_value.decode("latin-1")))
    return out


def header(headers: Iterable[tuple[str, str]], name: str) -> str | None:
    for key, value in headers:
        if key == name:
            return value
    return None


async def read_body(receive: Receive, limit: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(
                f"The request body is larger than limits.max_body_bytes ({limit} bytes)."
            )
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)


# what a name in a header list may keep as it is: visible ASCII but `%` and
# the list's `,` (a name is the client's own text: any other character,
# CR and LF among them, would break or end the header)
_NAME_UNSAFE = re.compile(r"[^\x21-\x24\x26-\x2b\x2d-\x7e ]")


def header_list(names: Iterable[str]) -> str:
    """Names (a client's field or tool names) as one header value: comma
    separated, each percent-encoded (UTF-8) outside visible ASCII."""
    return ", ".join(
        _NAME_UNSAFE.sub(lambda m: "".join(f"%{b:02X}" for b in m[0].encode()), name)
        for name in names
    )


def encode_headers(pairs: Iterable[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in pairs]


async def send_bytes(
    send: Send,
    status: int,
    body: bytes,
    headers: Iterable[tuple[bytes, bytes]] = (JSON_TYPE,),
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def send_error(send: Send, error: ProxyError) -> None:
    extra = [(k.lower().encode(), v.encode("latin-1")) for k, v in error.headers.items()]
    await send_bytes(send, error.status, error.render(), [JSON_TYPE, *extra])
