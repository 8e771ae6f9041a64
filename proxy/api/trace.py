"""Per-request observation: status, timings, outcome -> metrics and one log line.

`Trace.send` wraps the ASGI send to see the status and the first body byte
without the endpoints having to report them. `finish()` is called once, when
the endpoint is done, and writes the request's log line and counters.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from proxy.api.asgi import Message, Send
from proxy.observability import Metrics

log = logging.getLogger("proxy.request")


class Trace:
    __slots__ = (
        "_first_body",
        "_metrics",
        "_start",
        "_up_first",
        "_up_start",
        "endpoint",
        "fields",
        "inner",
        "outcome",
        "route",
        "status",
        "upstream_error",
    )

    def __init__(self, send: Send, metrics: Metrics, endpoint: str) -> None:
        self.inner = send  # the server's send, for after the first body byte
        self._metrics = metrics
        self._start = time.perf_counter()
        self._first_body: float | None = None
        self._up_start: float | None = None
        self._up_first: float | None = None
        self.endpoint = endpoint
        self.status = 0
        self.route = "-"
        self.outcome: str | None = None  # streams: complete | failed | client_gone
        self.upstream_error: str | None = None
        self.fields: dict[str, Any] = {}

    async def send(self, message: Message) -> None:
        if self._first_body is None:
            if message["type"] == "http.response.start":
                self.status = message["status"]
            elif message.get("body"):
                self._first_body = time.perf_counter()
        await self.inner(message)

    def upstream_started(self) -> None:
        self._up_start = time.perf_counter()

    def upstream_first_byte(self) -> None:
        if self._up_first is None:
            self._up_first = time.perf_counter()

    def finish(self) -> None:
        m = self._metrics
        end = time.perf_counter()
        m.child(m.requests, self.route, self.endpoint, str(self.status or 499)).inc()
        if self.outcome is not None:
            m.child(m.streams, self.route, self.outcome).inc()
        if self.upstream_error is not None:
            m.child(m.upstream_errors, self.route, self.upstream_error).inc()
        upstream_ttfb = None
        if self._up_start is not None and self._up_first is not None:
            upstream_ttfb = self._up_first - self._up_start
            if self._first_body is not None:
                m.added_latency.observe(max(0.0, (self._first_body - self._start) - upstream_ttfb))
        if not log.isEnabledFor(logging.INFO):
            return
        line: dict[str, Any] = {
            "endpoint": self.endpoint,
            "route": self.route,
            "status": self.status or 499,
            "duration_ms": round((end - self._start) * 1000, 2),
        }
        if self._first_body is not None:
            line["ttfb_ms"] = round((self._first_body - self._start) * 1000, 2)
        if upstream_ttfb is not None:
            line["upstream_ttfb_ms"] = round(upstream_ttfb * 1000, 2)
        if self.outcome is not None:
            line["outcome"] = self.outcome
        if self.upstream_error is not None:
            line["upstream_error"] = self.upstream_error
        line.update(self.fields)
        log.info("%s %s", self.endpoint, line["status"], extra=line)
