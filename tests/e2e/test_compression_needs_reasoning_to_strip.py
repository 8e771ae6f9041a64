"""Compression takes reasoning out of a request, so only a request that sends
some is compressed. One that sends none (no assistant message has any, or
the dialect sends none back) goes as it is over `compression_threshold x
context_limit`, and no `X-Reasoning-Compressed` header or
`reasoning_proxy_compressions_total` sample says it was compressed: the
header said `all` and the counter moved for every long request of a route
with a `context_limit`, reasoning or not. A request that sends reasoning and
does not fit even without any still goes, with `X-Reasoning-Compressed: all`
and the count above the threshold. The expected counts are tiktoken's, with
OpenAI's chat framing, over the body the upstream received."""

from __future__ import annotations

import json
from typing import Any

import httpx
import tiktoken

from tests.harness import FakeUpstream, ProxyServer, route_config, running_proxy
from tests.metrics_samples import moved, scrape

LIMIT = 400  # x 0.85: 340 tokens
HEADERS = {"Authorization": "Bearer sk-compress", "X-Reasoning-Include-In-Context": "true"}
LONG = "word " * 600  # about 600 tokens
THOUGHT = "think about the next step " * 40  # about 200 tokens


def counted(proxy: ProxyServer, body: dict[str, Any]) -> int:
    """The body's tokens: 3 for the reply, and per message 4 and the tokens
    of its role, texts, reasoning and tool calls."""
    encoding = tiktoken.get_encoding(proxy.runtime.tokens.name)

    def tokens(text: Any) -> int:
        return len(encoding.encode_ordinary(text)) if isinstance(text, str) else 0

    total = 3
    for message in body["messages"]:
        total += 4 + tokens(message["role"]) + tokens(message.get("content"))
        total += tokens(message.get("reasoning_content"))
    if body.get("tools"):
        total += tokens(json.dumps(body["tools"], separators=(",", ":")))
    return total


def post(proxy: ProxyServer, messages: list[dict[str, Any]], model: str = "m") -> httpx.Response:
    r = httpx.post(
        f"{proxy.url}/chat/completions",
        headers=HEADERS,
        json={"model": model, "messages": messages},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return r


def compressions(before: dict[Any, float], proxy: ProxyServer) -> dict[str, float]:
    return moved(before, scrape(proxy.base), "reasoning_proxy_compressions_total", by="policy")


def test_a_long_request_without_reasoning_is_not_compressed(upstream: FakeUpstream) -> None:
    messages = [
        {"role": "user", "content": LONG},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "and now?"},
    ]
    with running_proxy(route_config(upstream, dialect="deepseek", context_limit=LIMIT)) as proxy:
        before = scrape(proxy.base)
        r = post(proxy, messages)
        moves = compressions(before, proxy)
        sent = upstream.chat_requests()[-1].json
        expected = counted(proxy, sent)
    assert "x-reasoning-compressed" not in r.headers
    assert moves == {}
    assert sent["messages"] == messages
    assert int(r.headers["x-context-tokens-effective"]) == expected > 0.85 * LIMIT
    assert int(r.headers["x-context-tokens-raw"]) == expected
    assert r.headers["x-context-limit"] == str(LIMIT)


def test_reasoning_the_dialect_does_not_send_is_not_compressed(upstream: FakeUpstream) -> None:
    """`auto` on an OpenAI route sends no reasoning back: nothing to take out."""
    messages = [
        {"role": "user", "content": LONG},
        {"role": "assistant", "content": "Noted.", "reasoning_content": THOUGHT},
        {"role": "user", "content": "and now?"},
    ]
    headers = {**HEADERS, "X-Reasoning-Include-In-Context": "auto"}
    with running_proxy(route_config(upstream, dialect="openai", context_limit=LIMIT)) as proxy:
        before = scrape(proxy.base)
        r = httpx.post(
            f"{proxy.url}/chat/completions",
            headers=headers,
            json={"model": "m", "messages": messages},
            timeout=30,
        )
        moves = compressions(before, proxy)
        sent = upstream.chat_requests()[-1].json
        expected = counted(proxy, sent)
    assert r.status_code == 200, r.text
    assert "x-reasoning-compressed" not in r.headers
    assert moves == {}
    assert "reasoning_content" not in sent["messages"][1]
    assert int(r.headers["x-context-tokens-effective"]) == expected
    assert int(r.headers["x-context-tokens-raw"]) > expected


def test_a_request_that_does_not_fit_without_reasoning_goes_as_all(
    upstream: FakeUpstream,
) -> None:
    """Only the last assistant message has reasoning: `allButLast` takes out
    nothing, `all` takes it out, and the rest is still above the threshold."""
    messages = [
        {"role": "user", "content": LONG},
        {"role": "assistant", "content": "Noted.", "reasoning_content": THOUGHT},
        {"role": "user", "content": "and now?"},
    ]
    with running_proxy(route_config(upstream, dialect="deepseek", context_limit=LIMIT)) as proxy:
        before = scrape(proxy.base)
        r = post(proxy, messages)
        moves = compressions(before, proxy)
        sent = upstream.chat_requests()[-1].json
        expected = counted(proxy, sent)
    assert r.headers["x-reasoning-compressed"] == "all"
    assert moves == {"all": 1.0}
    assert "reasoning_content" not in sent["messages"][1]
    assert int(r.headers["x-context-tokens-effective"]) == expected > 0.85 * LIMIT
    assert int(r.headers["x-context-tokens-raw"]) > expected
