"""A document or search result that asks for citations, sent to a Chat
upstream: its text goes, but a Chat answer cites nothing, so the request
for citations is named in X-Proxy-Dropped-Fields rather than lost."""

from __future__ import annotations

from typing import Any

import httpx

from tests.harness import FakeUpstream, route_config, running_proxy

HEADERS = {"x-api-key": "sk-client", "anthropic-version": "2023-06-01"}
DOCUMENT = {
    "type": "document",
    "source": {"type": "text", "media_type": "text/plain", "data": "The grass is green."},
    "title": "Grass",
}
RESULT = {
    "type": "search_result",
    "source": "https://example.com/sky",
    "title": "Sky",
    "content": [{"type": "text", "text": "The sky is blue."}],
}


def ask(upstream: FakeUpstream, blocks: list[Any]) -> httpx.Response:
    body = {
        "model": "m",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": [*blocks, {"type": "text", "text": "Colours?"}]}],
    }
    with running_proxy(route_config(upstream)) as proxy:
        return httpx.post(f"{proxy.url}/messages", json=body, headers=HEADERS, timeout=30)


def test_citations_asked_for_are_named(upstream: FakeUpstream) -> None:
    on = {"citations": {"enabled": True}}
    r = ask(upstream, [{**DOCUMENT, **on}, {**RESULT, **on}])
    assert r.status_code == 200, r.text
    assert r.headers["x-proxy-dropped-fields"] == (
        "content.document.citations, content.search_result.citations"
    )
    sent = upstream.chat_requests()[-1].json["messages"][0]["content"]
    assert "The grass is green." in sent
    assert "The sky is blue." in sent


def test_citations_not_asked_for_name_nothing(upstream: FakeUpstream) -> None:
    off = {"citations": {"enabled": False}}
    r = ask(upstream, [{**DOCUMENT, **off}, RESULT])
    assert r.status_code == 200, r.text
    assert "x-proxy-dropped-fields" not in r.headers
