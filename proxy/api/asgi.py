"""Small helpers for the raw ASGI endpoints (the hot paths skip the
framework): reading a bounded body (decoded under its Content-Encoding),
decoding headers, sending responses."""

from __future__ import annotations

import asyncio
import logging
import re
import zlib
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Sequence
from typing import Any

from proxy.errors import BadRequest, PayloadTooLarge, ProxyError, UnsupportedMediaType
from proxy.http1.decoder import decoder_for
from proxy.http1.errors import Truncated
from proxy.settings import OWN_HEADER_NAMES

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("proxy")

JSON_TYPE = (b"content-type", b"application/json")
# The scope extension of the server (`proxy.http_server`) that ends a started
# response short of its end, on purpose: {"cut": callable}, False when the
# response had ended.
CUT_EXTENSION = "reasoning_proxy.cut"
# seconds before a request's disconnect watch starts its task (DisconnectWatch)
WATCH_DELAY = 0.02


class ClientGone(Exception):
    """The client disconnected before its request body was read."""


def cut_response(scope: Scope, route: str, cause: str) -> None:
    """Ends the started response short of its end, on purpose (its upstream
    broke, or a shutdown's grace period ended): the connection closes without
    the body's end (a chunked body's last chunk, the rest of a Content-Length),
    so the client sees a cut body, never a whole one. One warning names the
    route and the cause (none when the response had ended after all). The
    caller then returns without more sends; under a server without the
    extension, that return alone cuts the body."""
    extension = scope.get("extensions", {}).get(CUT_EXTENSION)
    if extension is not None and not extension["cut"]():
        return
    log.warning(
        "route %s: response cut short (%s); the client's connection is closed",
        route,
        cause,
        extra={"route": route, "cause": cause},
    )


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
    or NUL, or longer than the bound, are refused (never echoed), the header
    named as the proxy documents its own (`X-Reasoning-Effort`), another by
    the name the request carries."""
    out: list[tuple[str, str]] = []
    for raw_name, raw_value in scope.get("headers", ()):
        written = raw_name.decode("latin-1")
        name = written.lower()
        if len(raw_value) > max_value_bytes:
            spelled = OWN_HEADER_NAMES.get(name, written)
            raise BadRequest(
                f"The value of header {spelled} is longer than limits.max_header_bytes.",
                param=spelled,
                code="header_too_large",
            )
        if _CONTROL(raw_value):
            spelled = OWN_HEADER_NAMES.get(name, written)
            raise BadRequest(
                f"The value of header {spelled} contains CR, LF or NUL.",
                param=spelled,
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


# the request body encodings read here (what the client transport decodes)
READ_ENCODINGS = "gzip, deflate"


def decoded_body(body: bytes, encodings: Sequence[str], limit: int) -> bytes:
    """The body as an upstream reads it, under its Content-Encoding values:
    decoded when gzip or deflate (at most `limit` bytes, a piece at a time:
    a body that inflates to gigabytes costs one piece), as it is when
    `identity` or none. Another encoding, or more than one, is a 415 (an
    upstream may decode it and read what the proxy did not); a body that
    does not decode is a 400, one that decodes past `limit` a 413."""
    codings = [c for value in encodings for c in (p.strip().lower() for p in value.split(",")) if c]
    codings = [c for c in codings if c != "identity"]
    if not codings or not body:
        return body
    decoder = decoder_for(codings[0]) if len(codings) == 1 else None
    if decoder is None:
        raise UnsupportedMediaType(
            f"A request body's Content-Encoding is read here only as one of: {READ_ENCODINGS}.",
            code="unsupported_content_encoding",
            headers={"Accept-Encoding": READ_ENCODINGS},
        )
    parts: list[bytes] = []
    size = 0
    try:
        decoder.feed(body)
        while decoder.ready():
            piece = decoder.decode()
            size += len(piece)
            if size > limit:
                raise PayloadTooLarge(
                    f"The request body decodes to more than limits.max_body_bytes ({limit} bytes)."
                )
            parts.append(piece)
        parts.append(decoder.flush())
    except (zlib.error, Truncated):  # corrupt, or cut before its compressed data's end
        raise BadRequest(
            "The request body does not decode under its Content-Encoding.",
            code="invalid_content_encoding",
        ) from None
    return b"".join(parts)


async def read_plain_body(
    receive: Receive, headers: Iterable[tuple[str, str]], limit: int
) -> bytes:
    """A front door's request body, decoded under the request's
    Content-Encoding (`decoded_body`): the door reads it and writes what it
    sends upstream itself, without that header (`proxy.exchange.BODY_HEADERS`)."""
    encodings = [v for k, v in headers if k == "content-encoding"]
    return decoded_body(await read_body(receive, limit), encodings, limit)


def plain_request(
    scope: Scope, headers: list[tuple[str, str]]
) -> tuple[Scope, list[tuple[str, str]]]:
    """The request as its body was read (`read_plain_body`), without its
    Content-Encoding: for a door that hands that body on as it is (the
    pass-through replays it), where the header would say it is still
    encoded."""
    plain = [(k, v) for k, v in scope.get("headers", ()) if k.lower() != b"content-encoding"]
    return {**scope, "headers": plain}, [(k, v) for k, v in headers if k != "content-encoding"]


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
