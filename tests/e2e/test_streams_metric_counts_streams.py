"""`reasoning_proxy_streams_total` counts streamed responses only: a client
that leaves a request it asked whole is a 499 in `requests_total` and
`client_gone` in its access line, never a stream; one that leaves a stream
counts once, on every front door."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest

from tests.e2e.test_observability import scrape, value
from tests.harness import FakeUpstream, Hang, route_config, running_proxy
from tests.stores.servers import wait_until

KEY = {"Authorization": "Bearer sk-streams-metric"}
USER = [{"role": "user", "content": "hi"}]
DOORS: list[tuple[str, dict[str, Any]]] = [
    ("/chat/completions", {"model": "m", "messages": USER}),
    ("/responses", {"model": "m", "input": "hi"}),
    ("/messages", {"model": "m", "max_tokens": 10, "messages": USER}),
]


def _leave(url: str, body: dict[str, Any]) -> None:
    """Send the request and leave before the (hanging) upstream answers."""
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(url, json=body, headers=KEY, timeout=0.5)


def test_a_client_leaving_a_whole_request_is_no_stream(
    upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="proxy.request")
    with running_proxy(route_config(upstream)) as proxy:
        before = scrape(proxy.base)
        for path, body in DOORS:
            upstream.script(Hang(), Hang())
            _leave(proxy.url + path, {**body, "stream": False})
            _leave(proxy.url + path, {**body, "stream": True})

        def gone(metrics: dict[Any, float]) -> float:
            name = "reasoning_proxy_requests_total"
            return sum(
                value(metrics, name, route="test", endpoint=e, status="499")
                for e in ("chat.completions", "responses", "messages")
            )

        wait_until(lambda: gone(scrape(proxy.base)) - gone(before) == 6, what="six 499s")
        after = scrape(proxy.base)

    name = "reasoning_proxy_streams_total"
    moved = value(after, name, route="test", outcome="client_gone") - value(
        before, name, route="test", outcome="client_gone"
    )
    assert moved == 3  # the three streams, not the three whole requests
    lines = [r for r in caplog.records if r.name == "proxy.request" and r.status == 499]
    assert len(lines) == 6
    assert all(r.outcome == "client_gone" for r in lines)
    assert sorted(r.stream for r in lines) == [False] * 3 + [True] * 3
