"""An error event the upstream sends in a stream counts once in
`reasoning_proxy_upstream_errors_total` under kind `status` (the upstream's
own error), after data as well as first, on every front door that reads a
chat upstream's stream; a stream that ends well counts nothing."""

from __future__ import annotations

from typing import Any

import httpx

from tests.casefiles import chunk
from tests.e2e.test_observability import scrape, value
from tests.harness import FakeUpstream, Stream, route_config, running_proxy
from tests.stores.servers import wait_until

KEY = {"Authorization": "Bearer sk-stream-error-counted"}
USER = [{"role": "user", "content": "hi"}]
DOORS: list[tuple[str, dict[str, Any]]] = [
    ("/chat/completions", {"model": "m", "messages": USER, "stream": True}),
    ("/responses", {"model": "m", "input": "hi", "stream": True}),
    ("/messages", {"model": "m", "max_tokens": 10, "messages": USER, "stream": True}),
]
FAILURE = {"error": {"message": "the model failed", "type": "server_error"}}
ERRORS = "reasoning_proxy_upstream_errors_total"
STREAMS = "reasoning_proxy_streams_total"


def test_an_error_event_after_data_counts_as_status(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream), port=20720) as proxy:
        before = scrape(proxy.base)
        for path, body in DOORS:
            upstream.script(
                Stream([chunk({"content": "partial"}), FAILURE]),  # after data
                Stream([FAILURE]),  # first
                Stream([chunk({"content": "fine"}), chunk({}, "stop")]),
            )
            for _ in range(3):
                httpx.post(proxy.url + path, json=body, headers=KEY, timeout=30)

        def streams(metrics: dict[Any, float]) -> float:
            return sum(
                value(metrics, STREAMS, route="test", outcome=o) for o in ("complete", "failed")
            )

        wait_until(lambda: streams(scrape(proxy.base)) - streams(before) == 9, what="nine streams")
        after = scrape(proxy.base)

    def moved(kind: str) -> float:
        return value(after, ERRORS, route="test", kind=kind) - value(
            before, ERRORS, route="test", kind=kind
        )

    kinds = ("status", "malformed", "disconnected", "timeout", "connect", "busy")
    assert {k: moved(k) for k in kinds} == {
        "status": 6,  # two per door: the error after data and the first one
        "malformed": 0,
        "disconnected": 0,
        "timeout": 0,
        "connect": 0,
        "busy": 0,
    }
