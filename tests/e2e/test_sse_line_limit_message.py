"""An upstream SSE line over `limits.max_sse_line_bytes` is told by that key,
on every door, in the door's own shape: as the first event (a 502) and
after the answer began (an error event)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.casefiles import chunk
from tests.harness import FakeUpstream, Stream, route_config, running_proxy

MESSAGE = (
    "The upstream sent an SSE line or event longer than limits.max_sse_line_bytes (1024 bytes)."
)
DOORS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    "responses": ("/responses", {"input": "hi"}),
    "messages": ("/messages", {"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}),
}


def config(upstream: FakeUpstream) -> dict[str, Any]:
    return route_config(upstream, top={"limits": {"max_sse_line_bytes": 1024}})


@pytest.mark.parametrize("door", sorted(DOORS))
def test_a_first_event_over_the_limit_names_the_key(upstream: FakeUpstream, door: str) -> None:
    path, body = DOORS[door]
    upstream.script(Stream([chunk({"content": "x" * 3000})]))
    with running_proxy(config(upstream)) as proxy:
        r = httpx.post(proxy.url + path, json={"model": "m", "stream": True, **body}, timeout=20)
    assert r.status_code == 502
    error = r.json()["error"]
    assert error["message"] == MESSAGE
    if door != "messages":
        assert error["code"] == "upstream_line_too_long"


@pytest.mark.parametrize("door", sorted(DOORS))
def test_a_later_event_over_the_limit_names_the_key(upstream: FakeUpstream, door: str) -> None:
    path, body = DOORS[door]
    upstream.script(
        Stream([chunk({"role": "assistant", "content": "ok "}), chunk({"content": "x" * 3000})])
    )
    with running_proxy(config(upstream)) as proxy:
        r = httpx.post(proxy.url + path, json={"model": "m", "stream": True, **body}, timeout=20)
    assert r.status_code == 200
    assert MESSAGE in r.text.replace("\\", "")
