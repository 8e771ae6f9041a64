"""Per-request observation: status, timings, outcome -> metrics and one access-log line.

Every HTTP request the proxy answers gets one Trace, so one log line: the
front doors and the pass-through make their own (they know the route, the
tenant and the upstream timings); `ProxyApp` makes one for everything else
(the API routers, and what it refuses itself). `Trace.send` wraps the ASGI
send to see the status and the first body byte without the endpoints having
to report them. `finish()` is called once, when the endpoint is done, and
writes the request's counters, histograms and log line.

The line: method, path (never the query string, which may carry a key),
status, duration, endpoint, route and tenant hash where known, then what the
endpoint added (model, conversation, outcome, error code, ...). The status
is the one sent; 499 when nothing was (the client left first).

A shutdown that cuts a request whose body has not all arrived (the endpoint
was still reading it, so it could not answer) gets its 503 here, from
`TracedEndpoint`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from proxy.api.asgi import JSON_TYPE, Message, Receive, Scope, Send, absorb_cut, send_bytes
from proxy.doors.messages.shapes import anthropic_error, wants_anthropic
from proxy.errors import ProxyError, ServerShuttingDown
from proxy.observability import Metrics, clip, log_fields

if TYPE_CHECKING:
    from proxy.runtime import Runtime

log = logging.getLogger("proxy.request")

# The server writes its own Date and Server; an upstream's copies, passed on
# with its other headers, would make two of each.
SERVER_OWN = frozenset((b"date", b"server"))
# the scope state's key for the status the connection answered a request with
# itself, while the app ran it (a body that stopped arriving: 408)
REFUSED = "proxy.refused_status"
# requests that stay open as long as their client watches (the inspector's
# live feed): their duration is the connection's, so not in the histogram
UNTIMED_PATHS = frozenset(("/ui/events",))


class Trace:
    __slots__ = (
        "_first_body",
        "_in_flight",
        "_metrics",
        "_start",
        "_up_first",
        "_up_start",
        "endpoint",
        "fields",
        "inner",
        "method",
        "outcome",
        "path",
        "route",
        "scope",
        "status",
        "stream",
        "tenant",
        "upstream_error",
    )

    def __init__(self, send: Send, metrics: Metrics, endpoint: str, scope: Scope) -> None:
        self.inner = send  # the server's send, for after the first body byte
        self._metrics = metrics
        self._start = time.perf_counter()
        self._first_body: float | None = None
        self._up_start: float | None = None
        self._up_first: float | None = None
        self.endpoint = endpoint
        self.scope = scope
        self.method = scope.get("method", "-")
        self.path = scope.get("path", "-")
        self.status = 0
        self.route = "-"
        self.tenant: str | None = None
        # how the request ended: complete | failed (a stream's relay), client_gone
        # or shutdown (any request of a door); counted as a stream's only when
        # the client asked for one (`stream`)
        self.outcome: str | None = None
        self.stream = False
        self.upstream_error: str | None = None
        self.fields: dict[str, Any] = {}
        self._in_flight = metrics.child(metrics.in_flight, endpoint)
        self._in_flight.inc()

    async def send(self, message: Message) -> None:
        if self._first_body is None:
            if message["type"] == "http.response.start":
                self.status = message["status"]
                headers = message.get("headers")
                if headers and any(k.lower() in SERVER_OWN for k, _ in headers):
                    message["headers"] = [(k, v) for k, v in headers if k.lower() not in SERVER_OWN]
            elif message.get("body"):
                self._first_body = time.perf_counter()
        await self.inner(message)

    def upstream_started(self) -> None:
        self._up_start = time.perf_counter()

    def dropped(self, headers: list[tuple[str, str]]) -> None:
        """The names a door dropped (its X-Proxy-Dropped-* headers), in the
        request's log line too."""
        for name, value in headers:
            if name.startswith("x-proxy-dropped-"):
                self.fields[name.removeprefix("x-proxy-").replace("-", "_")] = value

    def upstream_first_byte(self) -> None:
        if self._up_first is None:
            self._up_first = time.perf_counter()

    def finish(self) -> None:
        m = self._metrics
        end = time.perf_counter()
        self._in_flight.dec()
        status = self.status or (self.scope.get("state") or {}).get(REFUSED) or 499
        route, endpoint = self.route, self.endpoint
        m.child(m.requests, route, endpoint, str(status)).inc()
        if self.path not in UNTIMED_PATHS:
            m.child(m.request_duration, route, endpoint).observe(end - self._start)
        if self.outcome is not None and self.stream:
            m.child(m.streams, route, self.outcome).inc()
        if self.upstream_error is not None:
            m.child(m.upstream_errors, route, self.upstream_error).inc()
        upstream_ttfb = None
        if self._up_start is not None and self._up_first is not None:
            upstream_ttfb = self._up_first - self._up_start
            m.child(m.upstream_ttfb, route, endpoint).observe(upstream_ttfb)
            if self._first_body is not None:
                m.added_latency.observe(max(0.0, (self._first_body - self._start) - upstream_ttfb))
        if not log.isEnabledFor(logging.INFO):
            return
        tenant = self.tenant
        if tenant is None:
            # the API routers leave the caller's tenant in the request state
            tenant = (self.scope.get("state") or {}).get("tenant")
        # the client's own text, kept short in the message too
        method, path = clip(self.method), clip(self.path)
        line: dict[str, Any] = {
            "method": method,
            "path": path,
            "status": status,
            "duration_ms": round((end - self._start) * 1000, 2),
            "endpoint": endpoint,
            "route": route,
        }
        if tenant is not None:
            line["tenant"] = tenant
        if self._first_body is not None:
            line["ttfb_ms"] = round((self._first_body - self._start) * 1000, 2)
        if upstream_ttfb is not None:
            line["upstream_ttfb_ms"] = round(upstream_ttfb * 1000, 2)
        if self.outcome is not None:
            line["outcome"] = self.outcome
        if self.upstream_error is not None:
            line["upstream_error"] = self.upstream_error
        line.update(self.fields)
        log_fields(log, logging.INFO, f"{method} {path} {status}", line)


class TracedEndpoint:
    """An ASGI endpoint whose every request is traced (its metrics and its
    access line): `_handle` answers it, `endpoint` is its label.

    When a shutdown's grace period ends before `_handle` could answer (its
    request body had not all arrived: endpoints take their own cuts only
    once they have the request), the request gets the 503 a request arriving
    during the drain gets, in the same shape."""

    endpoint = "other"
    metrics: Metrics
    rt: Runtime

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        trace = Trace(send, self.metrics, self.endpoint, scope)
        try:
            await self._handle(scope, receive, trace)
        except asyncio.CancelledError:
            if trace.status or not absorb_cut(self.rt.cut):
                raise  # not a cut, or one after the answer began (the app ends it)
            trace.fields["error"] = "server_shutting_down"
            await send_refusal(scope, trace.send, ServerShuttingDown())
        finally:
            trace.finish()

    async def _handle(self, scope: Scope, receive: Receive, trace: Trace) -> None:
        raise NotImplementedError


async def send_refusal(scope: Scope, send: Send, error: ProxyError) -> None:
    """An error a request gets before its endpoint answers, in the shape
    `wants_anthropic` picks (as the dispatch refuses one)."""
    anthropic = wants_anthropic(scope["path"], scope["headers"])
    body = anthropic_error(error) if anthropic else error.render()
    extra = [(k.lower().encode(), v.encode("latin-1")) for k, v in error.headers.items()]
    await send_bytes(send, error.status, body, [JSON_TYPE, *extra])
