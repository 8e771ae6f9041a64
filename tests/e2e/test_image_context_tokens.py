"""Images count in the context: an image part costs a fixed figure (765
tokens, 85 at `detail: low`), on every door, in X-Context-Tokens-Effective,
in the counts (`count_tokens`, `input_tokens`) and in compression. Without
it, a conversation of screenshots counted as its few words of text."""

from __future__ import annotations

from typing import Any

import httpx

from proxy.history.context import IMAGE_TOKENS, IMAGE_TOKENS_LOW
from tests.harness import FakeUpstream, route_config, running_proxy

PNG = (  # a 1x1 pixel: its size is not read
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
DATA_URL = f"data:image/png;base64,{PNG}"
CHAT = {"Authorization": "Bearer sk-images"}
ANTHROPIC = {"x-api-key": "sk-images", "anthropic-version": "2023-06-01"}


def chat_effective(url: str, content: Any, **headers: str) -> httpx.Response:
    r = httpx.post(
        f"{url}/chat/completions",
        headers={**CHAT, **headers},
        json={"model": "m", "messages": [{"role": "user", "content": content}]},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return r


def effective(r: httpx.Response) -> int:
    return int(r.headers["x-context-tokens-effective"])


def test_an_image_part_counts_on_the_chat_door(upstream: FakeUpstream) -> None:
    text = [{"type": "text", "text": "What is in this picture?"}]
    image = {"type": "image_url", "image_url": {"url": DATA_URL}}
    low = {"type": "image_url", "image_url": {"url": DATA_URL, "detail": "low"}}
    with running_proxy(route_config(upstream)) as proxy:
        alone = effective(chat_effective(proxy.url, text))
        one = effective(chat_effective(proxy.url, [*text, image]))
        three = effective(chat_effective(proxy.url, [*text, image, image, low]))
    assert one - alone == IMAGE_TOKENS
    assert three - alone == 2 * IMAGE_TOKENS + IMAGE_TOKENS_LOW


def test_images_count_on_the_messages_door_and_in_count_tokens(upstream: FakeUpstream) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    question = {"type": "text", "text": "Compare these two."}
    body = {"model": "m", "messages": [{"role": "user", "content": [question, image, image]}]}
    bare = {"model": "m", "messages": [{"role": "user", "content": [question]}]}
    with running_proxy(route_config(upstream)) as proxy:
        counted = httpx.post(
            f"{proxy.url}/messages/count_tokens", headers=ANTHROPIC, json=body, timeout=30
        )
        counted_bare = httpx.post(
            f"{proxy.url}/messages/count_tokens", headers=ANTHROPIC, json=bare, timeout=30
        )
        sent = httpx.post(
            f"{proxy.url}/messages",
            headers=ANTHROPIC,
            json={**body, "max_tokens": 50},
            timeout=30,
        )
    assert sent.status_code == 200, sent.text
    n = counted.json()["input_tokens"]
    assert n == effective(sent)
    assert n - counted_bare.json()["input_tokens"] == 2 * IMAGE_TOKENS


def test_images_count_on_the_responses_door_and_in_input_tokens(upstream: FakeUpstream) -> None:
    parts = [
        {"type": "input_text", "text": "Describe."},
        {"type": "input_image", "image_url": DATA_URL, "detail": "low"},
    ]
    body = {"model": "m", "input": [{"role": "user", "content": parts}]}
    bare = {"model": "m", "input": [{"role": "user", "content": parts[:1]}]}
    with running_proxy(route_config(upstream)) as proxy:
        counted = httpx.post(
            f"{proxy.url}/responses/input_tokens", headers=CHAT, json=body, timeout=30
        )
        counted_bare = httpx.post(
            f"{proxy.url}/responses/input_tokens", headers=CHAT, json=bare, timeout=30
        )
        sent = httpx.post(f"{proxy.url}/responses", headers=CHAT, json=body, timeout=30)
    assert sent.status_code == 200, sent.text
    n = counted.json()["input_tokens"]
    assert n == effective(sent)
    assert n - counted_bare.json()["input_tokens"] == IMAGE_TOKENS_LOW


def thought(i: int) -> str:
    return f"Looked at screenshot {i} closely. " * 20


def test_images_bring_a_request_to_compression(upstream: FakeUpstream) -> None:
    """Three screenshots and a few words pass 0.85 x 3000 tokens: the old
    reasoning goes, the latest stays."""
    screenshot = {"type": "image_url", "image_url": {"url": DATA_URL}}
    messages: list[dict[str, Any]] = []
    for i in range(3):
        messages.append(
            {"role": "user", "content": [{"type": "text", "text": f"s{i}"}, screenshot]}
        )
        messages.append(
            {"role": "assistant", "content": f"seen {i}", "reasoning_content": thought(i)}
        )
    messages.append({"role": "user", "content": "and now?"})
    config = route_config(upstream, context_limit=3000)
    with running_proxy(config) as proxy:
        r = httpx.post(
            f"{proxy.url}/chat/completions",
            headers={**CHAT, "X-Reasoning-Include-In-Context": "true"},
            json={"model": "m", "messages": messages},
            timeout=30,
        )
    assert r.status_code == 200, r.text
    assert r.headers.get("x-reasoning-compressed") == "allButLast"
    assert effective(r) > 3 * IMAGE_TOKENS
    sent = upstream.chat_requests()[-1].json["messages"]
    kept = [m.get("reasoning_content") for m in sent if m["role"] == "assistant"]
    assert kept == [None, None, thought(2)]
    # every image the client sent went upstream, in its place
    assert [len(m["content"]) for m in sent if m["role"] == "user"][:3] == [2, 2, 2]
