"""GET /ui: the inspector page, its static files, and its live event stream.

The page is plain static files from `proxy/ui/`, served from a fixed list
(no path from the request reaches the file system). GET /ui/events is a
server-sent-events stream of the live feed for the caller: the admin token
sees every tenant, a key its own tenant, no key the anonymous tenant. The
page reads it with fetch(), because EventSource cannot send the
Authorization header.
"""

from __future__ import annotations

import asyncio
import contextlib
from importlib.resources import files
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response

from proxy.api.asgi import Receive, Scope, Send
from proxy.api.conversations import caller_tenant
from proxy.errors import NotFound
from proxy.live import LiveFeed, Subscription
from proxy.runtime import Runtime

KEEPALIVE_SECONDS = 15.0  # below the idle timeouts of common reverse proxies (often 60 s)
# seconds past the longest upstream idle timeout after which a live turn with
# no event has ended unheard (its replica died: no turn_end will come)
STALE_MARGIN_SECONDS = 5.0


def stale_after(rt: Runtime) -> float:
    """How long a live turn may go without an event before the page takes it
    for ended: a proxy alive ends a stream that long idle itself (its
    `turn_end` says so); one that died mid-stream (another replica's, whose
    events come over Redis) sends nothing more."""
    idle = max((route.idle_timeout for route in rt.config.routes), default=0.0)
    return idle + STALE_MARGIN_SECONDS


MAX_BATCH = 256  # events written to the client in one send

STATIC_TYPES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}

# The page loads nothing from elsewhere and runs no inline code, so the
# policy can be strict: a stored reasoning text that smuggled markup into
# the page still could not run or phone home.
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}


def static_file(name: str) -> Response:
    media_type = STATIC_TYPES.get(name)
    if media_type is None:
        raise NotFound("No such file.")
    body = files("proxy").joinpath("ui").joinpath(name).read_bytes()
    return Response(body, media_type=media_type, headers=SECURITY_HEADERS)


def sse_data(event: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(event) + b"\n\n"


class LiveEvents(Response):
    """The live feed as text/event-stream, until the client goes away.

    A raw ASGI response rather than a StreamingResponse so that the end of
    the subscription does not depend on the server's ASGI spec version: a
    watcher task ends the stream as soon as `http.disconnect` arrives, even
    between keep-alives.
    """

    def __init__(
        self, feed: LiveFeed, tenant: str | None, keepalive: float, stale_after: float
    ) -> None:
        self.feed = feed
        self.tenant = tenant
        self.keepalive = keepalive
        self.stale_after = stale_after
        self.status_code = 200
        self.background = None
        self.raw_headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
            (b"x-content-type-options", b"nosniff"),
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with self.feed.subscribe(self.tenant) as sub:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            hello = {
                "type": "hello",
                "scope": "all" if self.tenant is None else "tenant",
                "staleAfter": self.stale_after,
            }
            await send(
                {
                    "type": "http.response.body",
                    "body": b": live feed\n\n" + sse_data(hello),
                    "more_body": True,
                }
            )
            pump = asyncio.ensure_future(self._pump(sub, send))
            gone = asyncio.ensure_future(_wait_disconnect(receive))
            ended = asyncio.ensure_future(sub.ended.wait())  # the feed closed
            try:
                await asyncio.wait({pump, gone, ended}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (pump, gone, ended):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, OSError):
                        await task
        with contextlib.suppress(OSError):
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _pump(self, sub: Subscription, send: Send) -> None:
        dropped = 0
        while True:
            try:
                first = await asyncio.wait_for(sub.queue.get(), self.keepalive)
            except TimeoutError:
                body = b": keep-alive\n\n"
            else:
                events = [first]
                while len(events) < MAX_BATCH and not sub.queue.empty():
                    events.append(sub.queue.get_nowait())
                body = b"".join(sse_data(e) for e in events)
            if sub.dropped != dropped:
                # tell the page it missed events, so it reloads from the store
                dropped = sub.dropped
                body += sse_data({"type": "dropped", "count": dropped})
            await send({"type": "http.response.body", "body": body, "more_body": True})


async def _wait_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


def ui_router(rt: Runtime, *, keepalive: float = KEEPALIVE_SECONDS) -> APIRouter:
    router = APIRouter()

    @router.api_route("/ui", methods=["GET", "HEAD"])
    def page() -> Response:
        return static_file("index.html")

    @router.get("/ui/events")
    async def events(request: Request) -> Response:
        return LiveEvents(rt.live, caller_tenant(rt, request), keepalive, stale_after(rt))

    @router.get("/ui/{name}")
    def asset(name: str) -> Response:
        return static_file(name)

    return router
