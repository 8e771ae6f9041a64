"""The inspector's live feed (GET /ui/events, open as long as the page is)
stays out of `reasoning_proxy_request_duration_seconds`: its connection
time would read as slow `ui` requests. It still counts in
`reasoning_proxy_requests_total` as `ui`, and the page itself is timed."""

from __future__ import annotations

import time
from typing import Any

import httpx

from tests.e2e.test_observability import scrape, value
from tests.harness import FakeUpstream, route_config, running_proxy
from tests.stores.servers import wait_until

DURATION = "reasoning_proxy_request_duration_seconds"
REQUESTS = "reasoning_proxy_requests_total"
UI = {"route": "-", "endpoint": "ui"}


def test_the_live_feed_is_not_in_the_duration_histogram(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream), port=20730) as proxy:
        before = scrape(proxy.base)
        with httpx.Client(timeout=10) as client:
            with client.stream("GET", proxy.base + "/ui/events") as response:
                assert response.status_code == 200
                time.sleep(1.0)  # a watcher keeps it open
            assert client.get(proxy.base + "/ui").status_code == 200

        def answered(metrics: dict[Any, float]) -> float:
            return value(metrics, REQUESTS, status="200", **UI)

        wait_until(lambda: answered(scrape(proxy.base)) - answered(before) == 2, what="both")
        after = scrape(proxy.base)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **UI, **labels) - value(before, name, **UI, **labels)

    assert moved(DURATION + "_count") == 1  # the page only
    assert moved(DURATION + "_sum") < 0.9
    assert moved(DURATION + "_bucket", le="+Inf") == 1
