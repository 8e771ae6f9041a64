"""A route's `headers:` through the real proxy: where the client sends a
header of the same name (in any case), the upstream gets the route's value
alone, never both (two `HTTP-Referer`s, or two `anthropic-version`s that a
Messages upstream refuses), on every door and on the pass-through."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.harness import FakeUpstream, Json, route_config, running_proxy

ROUTE_HEADERS = {"HTTP-Referer": "https://app.example", "X-Title": "route-title"}
CLIENT = {
    "Authorization": "Bearer sk-client",
    "http-referer": "https://client.example",
    "X-TITLE": "client-title",
    "X-Other": "kept",
}
USER = [{"role": "user", "content": "hi"}]

DOORS: list[tuple[str, dict[str, Any]]] = [
    ("/chat/completions", {"model": "m", "messages": USER}),
    ("/chat/completions", {"model": "m", "messages": USER, "stream": True}),
    ("/responses", {"model": "m", "input": "hi"}),
    ("/messages", {"model": "m", "max_tokens": 10, "messages": USER}),
    ("/embeddings", {"model": "m", "input": "hi"}),
]


@pytest.mark.parametrize(("path", "body"), DOORS)
def test_the_routes_header_replaces_the_clients_of_the_same_name(
    upstream: FakeUpstream, path: str, body: dict[str, Any]
) -> None:
    with running_proxy(route_config(upstream, headers=ROUTE_HEADERS)) as proxy:
        response = httpx.post(proxy.url + path, json=body, headers=CLIENT, timeout=30)
    assert response.status_code == 200, response.text
    sent = upstream.requests[-1].headers
    assert sent.getall("http-referer") == ["https://app.example"]  # type: ignore[attr-defined]
    assert sent.getall("x-title") == ["route-title"]  # type: ignore[attr-defined]
    assert sent["x-other"] == "kept"
    assert sent["authorization"] == "Bearer sk-client"  # no key of the route's own


def test_a_messages_upstream_gets_one_anthropic_version(upstream: FakeUpstream) -> None:
    upstream.script(
        Json(
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-up",
                "content": [{"type": "text", "text": "Hello."}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 3, "output_tokens": 2},
            }
        )
    )
    config = route_config(
        upstream,
        api="messages",
        headers={"anthropic-version": "2023-06-01", "Anthropic-Beta": "route-beta"},
    )
    headers = {
        "x-api-key": "sk-client",
        "Anthropic-Version": "2099-01-01",
        "anthropic-beta": "client-beta",
    }
    body = {"model": "claude-up", "max_tokens": 10, "messages": USER}
    with running_proxy(config) as proxy:
        response = httpx.post(proxy.url + "/messages", json=body, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    sent = upstream.requests[-1].headers
    assert sent.getall("anthropic-version") == ["2023-06-01"]  # type: ignore[attr-defined]
    assert sent.getall("anthropic-beta") == ["route-beta"]  # type: ignore[attr-defined]
    assert sent["x-api-key"] == "sk-client"
