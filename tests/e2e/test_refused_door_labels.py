"""A request the dispatch refuses on a front door's path (a wrong method) is
counted and logged under that door's endpoint label, as its own requests
are: `messages.count_tokens`, `responses.input_tokens`,
`responses.compact`, not the door whose path begins theirs."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest

from tests.e2e.test_observability import scrape, value
from tests.harness import FakeUpstream, route_config, running_proxy
from tests.stores.servers import wait_until

PATHS = {
    "/v1/messages/count_tokens": "messages.count_tokens",
    "/v1/responses/input_tokens": "responses.input_tokens",
    "/v1/responses/compact": "responses.compact",
    "/v1/messages": "messages",
    "/v1/responses": "responses",
    "/v1/chat/completions": "chat.completions",
}


def test_a_wrong_method_is_counted_under_the_doors_own_label(
    upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="proxy.request")
    with running_proxy(route_config(upstream)) as proxy:
        before = scrape(proxy.base)
        for path in PATHS:
            assert httpx.get(proxy.base + path).status_code == 405

        def refused(metrics: dict[Any, float]) -> float:
            return sum(
                v
                for (name, labels), v in metrics.items()
                if name == "reasoning_proxy_requests_total" and ("status", "405") in labels
            )

        wait_until(lambda: refused(scrape(proxy.base)) - refused(before) == len(PATHS))
        after = scrape(proxy.base)
    for endpoint in PATHS.values():
        labels = {"route": "-", "endpoint": endpoint, "status": "405"}
        name = "reasoning_proxy_requests_total"
        assert value(after, name, **labels) - value(before, name, **labels) == 1, endpoint
    logged = {r.path: r.endpoint for r in caplog.records if r.name == "proxy.request"}
    assert {p: logged[p] for p in PATHS} == PATHS
