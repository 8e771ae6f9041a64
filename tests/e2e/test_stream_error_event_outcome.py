"""A stream whose upstream sends an error event, first or after data (and
then its [DONE]), ended as a failure: `reasoning_proxy_streams_total` counts
it `failed`, never `complete`, and its access line says so, on every front
door that reads a chat upstream's stream."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest

from tests.casefiles import chunk
from tests.e2e.test_observability import scrape, value
from tests.harness import FakeUpstream, Stream, route_config, running_proxy
from tests.stores.servers import wait_until

KEY = {"Authorization": "Bearer sk-stream-error-event"}
USER = [{"role": "user", "content": "hi"}]
DOORS: list[tuple[str, dict[str, Any]]] = [
    ("/chat/completions", {"model": "m", "messages": USER, "stream": True}),
    ("/responses", {"model": "m", "input": "hi", "stream": True}),
    ("/messages", {"model": "m", "max_tokens": 10, "messages": USER, "stream": True}),
]
FAILURE = {"error": {"message": "the model failed", "type": "server_error"}}


def test_an_upstream_error_event_is_a_failed_stream(
    upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="proxy.request")
    name = "reasoning_proxy_streams_total"
    with running_proxy(route_config(upstream)) as proxy:
        before = scrape(proxy.base)
        for path, body in DOORS:
            upstream.script(
                Stream([chunk({"reasoning_content": "r"}), FAILURE]),  # after data: a 200
                Stream([FAILURE]),  # first: the upstream's status for it
                Stream([chunk({"content": "fine"}), chunk({}, "stop")]),
            )
            statuses = [
                httpx.post(proxy.url + path, json=body, headers=KEY, timeout=30).status_code
                for _ in range(3)
            ]
            assert statuses == [200, 500, 200], path

        def streams(metrics: dict[Any, float]) -> float:
            return sum(
                value(metrics, name, route="test", outcome=o) for o in ("complete", "failed")
            )

        wait_until(lambda: streams(scrape(proxy.base)) - streams(before) == 9, what="nine streams")
        after = scrape(proxy.base)

    def moved(outcome: str) -> float:
        return value(after, name, route="test", outcome=outcome) - value(
            before, name, route="test", outcome=outcome
        )

    assert (moved("failed"), moved("complete")) == (6, 3)
    lines = [r for r in caplog.records if r.name == "proxy.request" and r.method == "POST"]
    assert [r.outcome for r in lines] == ["failed", "failed", "complete"] * 3
